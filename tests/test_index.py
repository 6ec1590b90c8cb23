"""The index simplifier: every rewrite (splitting and merging of div/mod, recombination
of reshape splits) must keep the value at every point of the loop variables' ranges."""
import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from graphc.kernels import index as ix


def evaluate(e, env):
    if isinstance(e, ix.IConst):
        return e.value
    if isinstance(e, ix.IVar):
        return env[e.name]
    if isinstance(e, ix.IAdd):
        return evaluate(e.a, env) + evaluate(e.b, env)
    if isinstance(e, ix.IMul):
        return evaluate(e.a, env) * e.c
    if isinstance(e, ix.IDiv):
        return evaluate(e.a, env) // e.c
    if isinstance(e, ix.IMod):
        return evaluate(e.a, env) % e.c
    raise TypeError(e)


DIVISORS = [2, 3, 4, 6, 7, 8, 14, 16, 28, 56]


@st.composite
def expressions(draw):
    """A random expression over 3 loop variables built with the simplifying constructors,
    and the same computation in plain Python."""
    extents = [draw(st.integers(1, 9)) for _ in range(3)]
    vs = [ix.var(f"v{k}", n) for k, n in enumerate(extents)]
    e = ix.const(draw(st.integers(-3, 20)))
    f = [lambda env, c=e.value: c]
    for k, v in enumerate(vs):
        c = draw(st.sampled_from([1, 2, 3, 4, 7, 8, 14, 16, 28]))
        e = ix.add(e, ix.mul(v, c))
        f.append(lambda env, k=k, c=c: env[f"v{k}"] * c)
    plain = lambda env: sum(g(env) for g in f)
    for _ in range(draw(st.integers(1, 3))):
        op, d = draw(st.sampled_from(["div", "mod", "split"])), draw(st.sampled_from(DIVISORS))
        if op == "div":
            e, plain = ix.floordiv(e, d), (lambda env, p=plain, d=d: p(env) // d)
        elif op == "mod":
            e, plain = ix.mod(e, d), (lambda env, p=plain, d=d: p(env) % d)
        else:           # a reshape's split and merge: (x // (d*m)) * m + (x // d) % m
            m = draw(st.sampled_from(DIVISORS))
            e = ix.add(ix.mul(ix.floordiv(e, d * m), m), ix.mod(ix.floordiv(e, d), m))
            plain = (lambda env, p=plain, d=d, m=m: p(env) // (d * m) * m + p(env) // d % m)
    return extents, e, plain


@settings(max_examples=300, deadline=None)
@given(expressions())
def test_simplified_indices_keep_their_values_and_ranges(case):
    extents, e, plain = case
    for values in itertools.product(*[range(n) for n in extents]):
        env = {f"v{k}": v for k, v in enumerate(values)}
        want = plain(env)
        assert evaluate(e, env) == want, (ix.show(e), env)
        assert e.lo <= want <= e.hi, (ix.show(e), env, e.lo, e.hi)


def test_a_pooling_window_index_becomes_a_plain_division():
    j1, j2 = ix.var("j1", 14), ix.var("j2", 14)
    assert ix.show(ix.floordiv(ix.add(ix.mul(j1, 14), j2), 28)) == "(j1 // 2)"
    assert ix.show(ix.mod(ix.add(ix.mul(j1, 14), j2), 28)) == "((j1 % 2)*14 + j2)"
    merged = ix.add(ix.mul(ix.floordiv(j1, 2), 448), ix.mul(ix.mod(j1, 2), 224))
    assert ix.show(merged) == "j1*224"
