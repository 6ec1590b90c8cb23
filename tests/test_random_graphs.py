"""Hypothesis: random elementwise/reduce/reshape graphs vs a direct numpy evaluation."""
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import graphc as gc

UNARY = [("exp", lambda m, a: m.exp(m.tanh(a))), ("tanh", lambda m, a: m.tanh(a)),
         ("neg", lambda m, a: -a), ("abs", lambda m, a: m.abs(a)),
         ("sq", lambda m, a: a * a), ("sin", lambda m, a: m.sin(a))]
BINARY = [("add", lambda a, b: a + b), ("sub", lambda a, b: a - b),
          ("mul", lambda a, b: a * b), ("max", lambda a, b: (a > b) * 0 + (a + b)),
          ("div", lambda a, b: a / (b * b + 1.0))]


@st.composite
def programs(draw):
    rank = draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank)))
    steps = draw(st.lists(st.tuples(st.sampled_from(["unary", "binary", "reduce", "reshape",
                                                     "transpose", "broadcast"]),
                                    st.integers(0, 1000)), min_size=1, max_size=8))
    return shape, steps


def build(m, x, shape, steps, is_graphc):
    vals = [x]
    for kind, seed in steps:
        a = vals[seed % len(vals)]
        if kind == "unary":
            out = UNARY[seed % len(UNARY)][1](m, a)
        elif kind == "binary":
            b = vals[(seed // 7) % len(vals)]
            if np.shape(a) != np.shape(b):
                b = m.sum(b) if is_graphc else np.sum(b)
            out = BINARY[seed % len(BINARY)][1](a, b)
        elif kind == "reduce":
            nd = len(np.shape(a)) if not is_graphc else a.ndim
            if nd == 0:
                out = a
            else:
                axis = seed % nd
                keep = bool(seed & 1)
                out = (m.sum if seed % 3 else m.max)(a, axis=axis, keepdims=keep)
        elif kind == "reshape":
            out = m.reshape(a, (-1,))
        elif kind == "transpose":
            out = m.transpose(a)
        else:
            shp = a.shape if is_graphc else np.shape(a)
            out = m.broadcast_to(a, (2,) + tuple(shp))
        vals.append(out)
    return vals[-1]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(), st.integers(0, 2**31 - 1))
def test_random_graph_matches_numpy(program, seed):
    shape, steps = program
    data = np.random.default_rng(seed).uniform(-2, 2, shape)
    with gc.Graph("random"):
        x = gc.placeholder(shape, "float64", name="x")
        out = build(gc, x, shape, steps, True)
        got = gc.evaluate(out, {"x": data})
    want = build(np, data, shape, steps, False)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
