"""Control flow (scan, while_loop, cond, fori_loop): reference interpreter vs numpy,
compiled vs reference, gradients vs finite differences and the unrolled graph, errors,
printing, JSON, artifacts, threads and hypothesis-generated bodies."""
import os
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import graphc as gc
import graphc_runtime
from gradcheck import check_grad

HERE = os.path.basename(__file__)


def rnn_numpy(xs, w, h0, reverse=False):
    h, ys = h0, [None] * len(xs)
    order = range(len(xs) - 1, -1, -1) if reverse else range(len(xs))
    for t in order:
        h = np.tanh(h @ w + xs[t])
        ys[t] = h.sum(-1)
    return h, np.stack(ys) if len(xs) else np.zeros((0,) + h0.shape[:-1], h0.dtype)


def compiled_and_reference(outputs, feeds, **options):
    exe = gc.compile(outputs, **options)
    got = exe(**feeds)
    ref = gc.evaluate(outputs, feeds)
    return got, ref, exe


# -- forward: reference vs numpy, compiled vs reference ----------------------------------

@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("T", [0, 1, 9])
def test_scan_rnn(reverse, T):
    rng = np.random.default_rng(T)
    xs_v = rng.normal(size=(T, 3, 5)).astype("float32")
    w_v = (rng.normal(size=(5, 5)) * 0.5).astype("float32")
    with gc.Graph("rnn"):
        xs = gc.placeholder((T, 3, 5), name="xs")
        w = gc.placeholder((5, 5), name="w")

        def step(h, x):
            h = gc.tanh(h @ w + x)
            return h, h.sum(axis=-1)
        h, ys = gc.scan(step, gc.zeros((3, 5)), xs, reverse=reverse)
        got, ref, _ = compiled_and_reference([h, ys], {"xs": xs_v, "w": w_v})
    h_np, ys_np = rnn_numpy(xs_v, w_v, np.zeros((3, 5), "float32"), reverse)
    np.testing.assert_allclose(ref[0], h_np, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ref[1], ys_np, rtol=1e-5, atol=1e-6)
    for a, b in zip(got, ref):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_scan_structures_length_and_int_carries():
    rng = np.random.default_rng(1)
    v = rng.normal(size=(4,)).astype("float32")
    with gc.Graph("s"):
        x = gc.placeholder((4,), name="x")

        def step(c, _):
            return {"acc": c["acc"] * 0.5 + x, "n": c["n"] + 1}, None
        c, ys = gc.scan(step, {"acc": gc.zeros((4,)), "n": 0}, length=6)
        assert ys is None
        got, ref, _ = compiled_and_reference([c["acc"], c["n"]], {"x": v})
    acc = np.zeros(4, "float32")
    for _ in range(6):
        acc = acc * 0.5 + v
    np.testing.assert_allclose(ref[0], acc, rtol=1e-6)
    assert int(ref[1]) == 6 and ref[1].dtype == np.int32
    np.testing.assert_allclose(got[0], ref[0], rtol=1e-6)
    assert int(got[1]) == 6


def test_scan_several_sequences_and_outputs():
    rng = np.random.default_rng(2)
    a_v, b_v = rng.normal(size=(5, 2)).astype("float32"), rng.normal(size=(5,)).astype("float32")
    with gc.Graph("s"):
        a, b = gc.placeholder((5, 2), name="a"), gc.placeholder((5,), name="b")

        def step(c, xb):
            xa, xb_ = xb
            c = c + xa * xb_
            return c, (c, c.sum(), gc.cast(c.sum() > 0, "int32"))
        c, (cs, sums, pos) = gc.scan(step, gc.zeros((2,)), (a, b))
        got, ref, _ = compiled_and_reference([c, cs, sums, pos], {"a": a_v, "b": b_v})
    expect = np.cumsum(a_v * b_v[:, None], axis=0)
    np.testing.assert_allclose(ref[1], expect, rtol=1e-5)
    np.testing.assert_allclose(ref[2], expect.sum(1), rtol=1e-5)
    np.testing.assert_array_equal(ref[3], (expect.sum(1) > 0).astype("int32"))
    for x, y in zip(got, ref):
        np.testing.assert_allclose(x, y, rtol=1e-5)


@pytest.mark.parametrize("start", [0.0, 1.0, 40.0])
def test_while_loop(start):
    """Includes a zero-trip loop (start 40: the condition fails at once)."""
    with gc.Graph("w"):
        x = gc.placeholder((), name="x")
        limit = gc.placeholder((), name="limit")
        i, v = gc.while_loop(lambda s: s[1] < limit, lambda s: (s[0] + 1, s[1] * 2.0 + 1.0),
                             (0, x))
        got, ref, _ = compiled_and_reference([i, v], {"x": np.float32(start),
                                                      "limit": np.float32(30.0)})
    n, val = 0, start
    while val < 30.0:
        n, val = n + 1, val * 2 + 1
    assert int(ref[0]) == n and float(ref[1]) == val
    assert int(got[0]) == n and float(got[1]) == val


def test_while_loop_odd_and_even_trip_counts_land_in_the_result():
    with gc.Graph("w"):
        n = gc.placeholder((), "int32", name="n")
        x = gc.placeholder((3,), name="x")
        _, y = gc.while_loop(lambda s: s[0] < n, lambda s: (s[0] + 1, s[1] + s[1]), (0, x))
        exe = gc.compile(y)
    v = np.array([1.0, -2.0, 0.5], "float32")
    for trips in range(6):
        np.testing.assert_array_equal(exe(n=np.int32(trips), x=v), v * 2 ** trips)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_cond_runs_the_taken_branch(sign):
    rng = np.random.default_rng(3)
    v = (np.abs(rng.normal(size=(4,))) * sign).astype("float32")
    with gc.Graph("c"):
        x = gc.placeholder((4,), name="x")
        w = gc.placeholder((4,), name="w")
        r, k = gc.cond(x.sum() > 0, lambda a: (gc.exp(a) * w, 1), lambda a: (a - w, 2), x)
        got, ref, _ = compiled_and_reference([r, k], {"x": v, "w": v + 1})
    expect = np.exp(v) * (v + 1) if sign > 0 else v - (v + 1)
    np.testing.assert_allclose(ref[0], expect, rtol=1e-6)
    assert int(ref[1]) == (1 if sign > 0 else 2)
    np.testing.assert_allclose(got[0], ref[0], rtol=1e-6)
    assert int(got[1]) == int(ref[1])


def test_cond_inside_scan_and_nested_scans():
    rng = np.random.default_rng(4)
    xs_v = rng.normal(size=(6, 3)).astype("float32")
    with gc.Graph("n"):
        xs = gc.placeholder((6, 3), name="xs")

        def outer(c, x):
            inner, _ = gc.scan(lambda d, z: (d * 0.9 + z, None), c, gc.stack([x, -x, x * 2.0]))
            c = gc.cond(inner.sum() > 0, lambda a: a * 0.5, lambda a: gc.sin(a), inner)
            return c, c.max()
        c, ys = gc.scan(outer, gc.zeros((3,)), xs)
        got, ref, _ = compiled_and_reference([c, ys], {"xs": xs_v})
    c_np, ys_np = np.zeros(3, "float32"), []
    for x in xs_v:
        d = c_np
        for z in (x, -x, 2 * x):
            d = d * np.float32(0.9) + z
        c_np = d * 0.5 if d.sum() > 0 else np.sin(d)
        ys_np.append(c_np.max())
    np.testing.assert_allclose(ref[0], c_np, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ref[1], ys_np, rtol=1e-5, atol=1e-6)
    for a, b in zip(got, ref):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_fori_loop_static_and_dynamic_bounds():
    with gc.Graph("f"):
        x = gc.placeholder((2,), name="x")
        hi = gc.placeholder((), "int32", name="hi")
        body = lambda i, s: s * 2.0 + gc.cast(i, "float32")  # noqa: E731
        static = gc.fori_loop(1, 4, body, x)
        dynamic = gc.fori_loop(1, hi, body, x)
        empty = gc.fori_loop(3, 3, body, x)
        got, ref, _ = compiled_and_reference([static, dynamic, empty],
                                             {"x": np.array([1.0, -1.0], "float32"),
                                              "hi": np.int32(4)})
    expect = np.array([1.0, -1.0], "float32")
    for i in range(1, 4):
        expect = expect * 2 + i
    for vals in (got, ref):
        np.testing.assert_array_equal(vals[0], expect)
        np.testing.assert_array_equal(vals[1], expect)
        np.testing.assert_array_equal(vals[2], [1.0, -1.0])
    assert "scan(" in str(static.graph) and "while(" in str(static.graph)


def test_variables_and_outer_values_are_captured():
    rng = np.random.default_rng(5)
    w0 = rng.normal(size=(3,)).astype("float32")
    with gc.Graph("v"):
        w = gc.variable(w0, name="w")
        x = gc.placeholder((3,), name="x")
        scale = x * 2.0                                  # an outer value, computed once
        c, _ = gc.scan(lambda c, _: (c * w + scale, None), gc.ones((3,)), length=3)
        exe = gc.compile(c, updates={w: w + 1.0})
        v = rng.normal(size=(3,)).astype("float32")
        first = exe(x=v)
    expect = np.ones(3, "float32")
    for _ in range(3):
        expect = expect * w0 + 2 * v
    np.testing.assert_allclose(first, expect, rtol=1e-6)
    np.testing.assert_allclose(exe.variables["w"], w0 + 1)


# -- gradients --------------------------------------------------------------------------

def test_scan_gradient_matches_finite_differences():
    rng = np.random.default_rng(6)

    def build(xs, w, h0):
        def step(h, x):
            h = gc.tanh(h @ w + x)
            return h, (h * h).sum()
        h, ys = gc.scan(step, h0, xs)
        return h.sum() + ys.sum() * 0.5
    check_grad(build, {"xs": rng.normal(size=(4, 3)), "w": rng.normal(size=(3, 3)) * 0.5,
                       "h0": rng.normal(size=(3,))})


@pytest.mark.parametrize("checkpoint", [False, True])
def test_reverse_scan_gradient(checkpoint):
    rng = np.random.default_rng(7)

    def build(xs, w):
        def step(h, x):
            h = gc.sin(h * w + x)
            return h, h
        _, ys = gc.scan(step, gc.zeros((2,), "float64"), xs, reverse=True,
                        checkpoint=checkpoint)
        return ys
    check_grad(build, {"xs": rng.normal(size=(5, 2)), "w": rng.normal(size=(2,))})


def test_cond_and_fori_loop_gradients():
    rng = np.random.default_rng(8)
    for sign in (1.0, -1.0):
        check_grad(lambda x, w: gc.cond(x.sum() > 0, lambda a: gc.sin(a) * w,
                                        lambda a: a * a + w, x),
                   {"x": np.abs(rng.normal(size=3)) * sign, "w": rng.normal(size=3)})
    check_grad(lambda x, w: gc.fori_loop(0, 3, lambda i, s: gc.tanh(s * w + gc.cast(
        i, "float64")), x), {"x": rng.normal(size=3), "w": rng.normal(size=3)})


def test_nested_gradient_and_compiled_gradient_match_the_unrolled_graph():
    rng = np.random.default_rng(9)
    xs_v, w_v = rng.normal(size=(4, 3)), rng.normal(size=(3, 3)) * 0.5
    with gc.Graph("g"):
        xs = gc.placeholder((4, 3), "float64", name="xs")
        w = gc.placeholder((3, 3), "float64", name="w")

        def step(h, x):
            inner, _ = gc.scan(lambda d, _: (gc.tanh(d @ w), None), h + x, length=2)
            return inner, inner.sum()
        h, ys = gc.scan(step, gc.zeros((3,), "float64"), xs)
        loss = h.sum() + (ys * ys).sum()
        grads = gc.grad(loss, [xs, w])
        d = gc.zeros((3,), "float64")
        total = 0.0
        for t in range(4):                               # the same model, unrolled
            d = d + xs[t]
            for _ in range(2):
                d = gc.tanh(d @ w)
            total = total + d.sum() * d.sum()
        unrolled = gc.grad(d.sum() + total, [xs, w])
        feeds = {"xs": xs_v, "w": w_v}
        ref = gc.evaluate(grads, feeds)
        expect = gc.evaluate(unrolled, feeds)
        got = gc.compile(grads)(**feeds)
    for a, b, c in zip(ref, expect, got):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(c, b, rtol=1e-10, atol=1e-12)


def test_gradient_of_gradient_through_scan():
    rng = np.random.default_rng(10)
    v = rng.normal(size=3)
    with gc.Graph("gg"):
        x = gc.placeholder((3,), "float64", name="x")
        c, _ = gc.scan(lambda c, _: (gc.sin(c) * c, None), x, length=3)
        (g,) = gc.grad(c.sum(), [x])
        (gg,) = gc.grad(g.sum(), [x])
        second = gc.evaluate(gg, {"x": v})
        compiled = gc.compile(gg)(x=v)
        eps = 1e-6
        fd = np.array([(gc.evaluate(g, {"x": v + eps * e}).sum() -
                        gc.evaluate(g, {"x": v - eps * e}).sum()) / (2 * eps)
                       for e in np.eye(3)])
    np.testing.assert_allclose(second, fd, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(compiled, second, rtol=1e-10)


def test_forward_scan_runs_once_in_a_training_step():
    with gc.Graph("t"):
        xs = gc.placeholder((8, 4), name="xs")
        w = gc.variable(np.eye(4, dtype="float32") * 0.5, name="w")
        _, ys = gc.scan(lambda h, x: (gc.tanh(h @ w + x),) * 2, gc.zeros((4,)), xs)
        loss = (ys * ys).mean()
        (gw,) = gc.grad(loss, [w])
        exe = gc.compile(loss, updates={w: w - 0.1 * gw})
    text = exe.dump("optimized")
    assert len(re.findall(r"= scan\(", text)) == 2          # forward (merged) + backward
    assert "reverse=True" in text


def test_while_loop_gradient_is_refused_clearly():
    with gc.Graph("w"):
        x = gc.placeholder((), name="x")
        y = gc.while_loop(lambda s: s < 10.0, lambda s: s * 2.0, x)
        with pytest.raises(gc.GraphcError, match="while_loop.*fori_loop"):
            gc.grad(y, [x])


# -- compiler properties -------------------------------------------------------------------

def _rnn_step_program(T):
    with gc.Graph("rnn"):
        xs = gc.placeholder((T, 4, 8), name="xs")
        w = gc.placeholder((8, 8), name="w")
        h, ys = gc.scan(lambda h, x: (gc.tanh(h @ w + x),) * 2, gc.zeros((4, 8)), xs)
        return gc.compile([h, ys])


def test_code_does_not_grow_with_the_trip_count():
    small, large = _rnn_step_program(100), _rnn_step_program(10_000)
    strip = lambda text: re.sub(r"\d+", "N", text)  # noqa: E731
    assert strip(small.dump("llvm")) == strip(large.dump("llvm"))
    assert len(_rnn_step_program(10).dump("llvm")) < 1.5 * len(large.dump("llvm"))
    assert small.stats["kernels"] == large.stats["kernels"]


def test_loop_invariant_work_is_hoisted():
    with gc.Graph("h"):
        xs = gc.placeholder((5, 4), name="xs")
        w = gc.placeholder((4, 4), name="w")
        c, _ = gc.scan(lambda c, x: (gc.tanh(c @ gc.exp(w * 0.1) + x), None),
                       gc.zeros((4,)), xs)
        exe = gc.compile(c)
    body = exe.dump("optimized").split("body(")[1]
    assert "exp(" not in body and "hoisted0" in body
    v = np.random.default_rng(11).normal(size=(5, 4)).astype("float32")
    wv = np.random.default_rng(12).normal(size=(4, 4)).astype("float32")
    np.testing.assert_allclose(exe(xs=v, w=wv), gc.evaluate(c, {"xs": v, "w": wv}), rtol=1e-5)


def test_results_are_bitwise_identical_for_any_thread_count():
    rng = np.random.default_rng(13)
    feeds = {"xs": rng.normal(size=(16, 64, 128)).astype("float32"),
             "w": (rng.normal(size=(128, 128)) * 0.1).astype("float32")}
    with gc.Graph("t"):
        xs = gc.placeholder((16, 64, 128), name="xs")
        w = gc.placeholder((128, 128), name="w")
        h, ys = gc.scan(lambda h, x: (gc.tanh(h @ w + x), (h * x).sum(axis=1)),
                        gc.zeros((64, 128)), xs)
        outs = [gc.compile([h, ys], num_threads=n)(**feeds) for n in (1, 2, 3)]
    for other in outs[1:]:
        for a, b in zip(outs[0], other):
            assert np.array_equal(a, b)


def test_printer_json_and_artifact_round_trip(tmp_path):
    from graphc.ir import serialize
    from graphc.ir.interpreter import run
    rng = np.random.default_rng(14)
    v = rng.normal(size=(3, 2)).astype("float32")
    with gc.Graph("rt") as g:
        xs = gc.placeholder((3, 2), name="xs")
        c, ys = gc.scan(lambda c, x: (gc.cond(x.sum() > 0, lambda a: a + x, lambda a: a - x, c),
                                      c.sum()), gc.zeros((2,)), xs)
        n = gc.while_loop(lambda s: s < 5, lambda s: s + 1, 0)
        text = str(g)
        assert "body(" in text and "true(" in text and "cond(" in text and "return" in text
        graph, outs = serialize.loads(serialize.dumps(g, [c.node, ys.node, n.node]))
        for a, b in zip(run(graph, outs, {"xs": v}), gc.evaluate([c, ys, n], {"xs": v})):
            np.testing.assert_array_equal(a, b)
        exe = gc.compile({"c": c, "ys": ys, "n": n})
    path = tmp_path / "loops.gcx"
    exe.save(str(path))
    model = graphc_runtime.load(str(path))
    got, expect = model(xs=v), exe(xs=v)
    for k in expect:
        np.testing.assert_array_equal(got[k], expect[k])
    assert int(got["n"]) == 5


def test_profile_times_a_loop_as_one_kernel():
    exe = _rnn_step_program(6)
    rng = np.random.default_rng(15)
    prof = exe.profile(repeat=2, xs=rng.normal(size=(6, 4, 8)).astype("float32"),
                       w=rng.normal(size=(8, 8)).astype("float32"))
    kinds = [k["kind"] for k in exe.manifest()["kernels"]]
    assert "control" in kinds
    assert prof is not None


# -- errors ---------------------------------------------------------------------------------

def test_body_returning_the_wrong_carry_is_an_error_at_the_users_line():
    with gc.Graph("e"):
        xs = gc.placeholder((3, 2), name="xs")
        with pytest.raises(gc.ShapeError, match=rf"scan carry.*f32\[3\].*expected f32\[2\].*{HERE}"):
            gc.scan(lambda c, x: (gc.concatenate([c, x[:1]]), None), gc.zeros((2,)), xs)
        with pytest.raises(gc.DTypeError, match=r"scan carry\[1\].*expected i32"):
            gc.scan(lambda c, x: ((c[0], c[1] * 0.5), None), (gc.zeros((2,)), 1), xs)
        with pytest.raises(gc.GraphcError, match="structure"):
            gc.scan(lambda c, x: ((c, c), None), gc.zeros((2,)), xs)
        with pytest.raises(gc.GraphcError, match="pair"):
            gc.scan(lambda c, x: c, gc.zeros((2,)), xs)
        with pytest.raises(gc.ShapeError, match="disagree on the length"):
            gc.scan(lambda c, x: (c, None), gc.zeros(()), (xs, gc.zeros((4,))))
        with pytest.raises(gc.GraphcError, match="give xs or length"):
            gc.scan(lambda c, x: (c, None), gc.zeros(()), None)


def test_while_and_cond_errors():
    with gc.Graph("e"):
        x = gc.placeholder((2,), name="x")
        with pytest.raises(gc.DTypeError, match="cond_fn must return a bool scalar"):
            gc.while_loop(lambda s: s.sum(), lambda s: s, x)
        with pytest.raises(gc.ShapeError, match="while_loop state.*expected f32\\[2\\]"):
            gc.while_loop(lambda s: s.sum() > 0, lambda s: s.sum(), x)
        with pytest.raises(gc.ShapeError, match="cond false branch.*expected f32\\[2\\]"):
            gc.cond(x.sum() > 0, lambda a: a, lambda a: a.sum(), x)
        with pytest.raises(gc.GraphcError, match="different structures"):
            gc.cond(x.sum() > 0, lambda a: (a, a), lambda a: a, x)
        with pytest.raises(gc.ShapeError, match="predicate must be a scalar"):
            gc.cond(x > 0, lambda a: a, lambda a: a, x)


def test_body_tensors_cannot_escape_and_bodies_cannot_create_variables():
    leaked = []
    with gc.Graph("e"):
        xs = gc.placeholder((3, 2), name="xs")

        def step(c, x):
            leaked.append(x)
            return c, None
        gc.scan(step, gc.zeros((2,)), xs)
        with pytest.raises(gc.GraphcError, match="cannot be used outside"):
            leaked[0] + 1.0
        with pytest.raises(gc.GraphcError, match="variables cannot be created inside"):
            gc.scan(lambda c, x: (c + gc.variable(np.zeros(2, "float32")), None),
                    gc.zeros((2,)), xs)


# -- hypothesis: random bodies ------------------------------------------------------------

OPS = [lambda m, c, x: m.tanh(c + x), lambda m, c, x: c * 0.5 + x,
       lambda m, c, x: m.sin(c) * x, lambda m, c, x: m.maximum(c, x) - 0.1,
       lambda m, c, x: c / (x * x + 1.0)]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(0, len(OPS) - 1), min_size=1, max_size=5), st.integers(0, 6),
       st.booleans(), st.integers(0, 2**31 - 1))
def test_random_scan_bodies_match_numpy(ops, T, reverse, seed):
    rng = np.random.default_rng(seed)
    xs_v = rng.uniform(-2, 2, (T, 3)).astype("float32")
    c0 = rng.uniform(-1, 1, 3).astype("float32")

    def body(m, c, x):
        y = c
        for k in ops:
            y = OPS[k](m, y, x)
        return y
    with gc.Graph("h"):
        xs = gc.placeholder((T, 3), name="xs")
        c = gc.placeholder((3,), name="c")
        out, ys = gc.scan(lambda c, x: (body(gc, c, x), body(gc, c, x).sum()), c, xs,
                          reverse=reverse)
        got, ref, _ = compiled_and_reference([out, ys], {"xs": xs_v, "c": c0})
    cn, ysn = c0, np.zeros(T, "float32")
    for t in (range(T - 1, -1, -1) if reverse else range(T)):
        new = body(np, cn, xs_v[t])
        ysn[t] = body(np, cn, xs_v[t]).sum()
        cn = new
    np.testing.assert_allclose(ref[0], cn, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(ref[1], ysn, rtol=1e-4, atol=1e-5)
    for a, b in zip(got, ref):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


# -- recurrent layers -----------------------------------------------------------------------

def _sig(v):
    return 1 / (1 + np.exp(-v))


def lstm_numpy(xs, w_ih, w_hh, b):
    H = w_hh.shape[0]
    h = c = np.zeros((xs.shape[1], H), xs.dtype)
    ys = []
    for x in xs:
        z = x @ w_ih + b + h @ w_hh
        c = _sig(z[:, H:2 * H]) * c + _sig(z[:, :H]) * np.tanh(z[:, 2 * H:3 * H])
        h = _sig(z[:, 3 * H:]) * np.tanh(c)
        ys.append(h)
    return np.stack(ys), h, c


def gru_numpy(xs, w_ih, w_hh, b_ih, b_hh):
    H = w_hh.shape[0]
    h = np.zeros((xs.shape[1], H), xs.dtype)
    ys = []
    for x in xs:
        p, rec = x @ w_ih + b_ih, h @ w_hh + b_hh
        r, z = _sig(p[:, :H] + rec[:, :H]), _sig(p[:, H:2 * H] + rec[:, H:2 * H])
        n = np.tanh(p[:, 2 * H:] + r * rec[:, 2 * H:])
        h = (1 - z) * n + z * h
        ys.append(h)
    return np.stack(ys), h


def test_lstm_and_gru_layers_match_numpy():
    rng = np.random.default_rng(16)
    T, B, I, H = 5, 3, 4, 6
    v = {"xs": rng.normal(size=(T, B, I)), "wi4": rng.normal(size=(I, 4 * H)) * 0.4,
         "wh4": rng.normal(size=(H, 4 * H)) * 0.4, "b4": rng.normal(size=4 * H) * 0.1,
         "wi3": rng.normal(size=(I, 3 * H)) * 0.4, "wh3": rng.normal(size=(H, 3 * H)) * 0.4,
         "bi3": rng.normal(size=3 * H) * 0.1, "bh3": rng.normal(size=3 * H) * 0.1}
    v = {k: a.astype("float32") for k, a in v.items()}
    with gc.Graph("rnn"):
        p = {k: gc.placeholder(a.shape, name=k) for k, a in v.items()}
        ys, (h, c) = gc.nn.lstm(p["xs"], p["wi4"], p["wh4"], p["b4"])
        gys, gh = gc.nn.gru(p["xs"], p["wi3"], p["wh3"], p["bi3"], p["bh3"])
        got = gc.compile([ys, h, c, gys, gh])(**v)
        with pytest.raises(gc.ShapeError, match="w_hh must be"):
            gc.nn.lstm(p["xs"], p["wi4"], p["wh3"])
    expect = list(lstm_numpy(v["xs"], v["wi4"], v["wh4"], v["b4"])) + \
        list(gru_numpy(v["xs"], v["wi3"], v["wh3"], v["bi3"], v["bh3"]))
    for a, b in zip(got, expect):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("checkpoint", [False, True])
def test_lstm_gradient_matches_finite_differences(checkpoint):
    rng = np.random.default_rng(17)
    check_grad(lambda xs, w_ih, w_hh, b: gc.nn.lstm(xs, w_ih, w_hh, b,
                                                    checkpoint=checkpoint)[0],
               {"xs": rng.normal(size=(3, 2, 2)), "w_ih": rng.normal(size=(2, 8)) * 0.5,
                "w_hh": rng.normal(size=(2, 8)) * 0.5, "b": rng.normal(size=8) * 0.1})


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(0, len(OPS) - 1), min_size=1, max_size=4), st.integers(1, 4),
       st.booleans(), st.integers(0, 2**31 - 1))
def test_random_scan_body_gradients_match_finite_differences(ops, T, checkpoint, seed):
    rng = np.random.default_rng(seed)

    def build(xs, c0):
        def step(c, x):
            y = c
            for k in ops:
                y = OPS[k](gc, y, x)
            return y, y.sum()
        c, ys = gc.scan(step, c0, xs, checkpoint=checkpoint)
        return c.sum() + ys.sum()
    check_grad(build, {"xs": rng.uniform(-1.5, 1.5, (T, 3)), "c0": rng.uniform(-1, 1, 3)},
               tol=1e-5)
