"""Symbolic dimensions: one compile for every batch size (executables, artifacts, CLI)."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import graphc as gc
import graphc_runtime
from graphc import Dim
from graphc_runtime.dims import Undecidable

SIZES = (1, 7, 256, 1000)


def mlp(batch, seed=0, sizes=(12, 16, 5)):
    """A small MLP classifier's loss and its Adam updates, in a fresh graph."""
    g = gc.Graph("mlp")
    rng = np.random.default_rng(seed)
    with g:
        x = gc.placeholder((batch, sizes[0]), name="x")
        y = gc.placeholder((batch,), "int32", name="y")
        params, h = [], x
        for k, (i, o) in enumerate(zip(sizes, sizes[1:])):
            w = gc.variable((rng.standard_normal((i, o)) / np.sqrt(i)).astype(np.float32),
                            name=f"w{k}")
            b = gc.variable(np.zeros(o, np.float32), name=f"b{k}")
            params += [w, b]
            h = h @ w + b
            if k < len(sizes) - 2:
                h = gc.tanh(h)
        loss = gc.nn.softmax_cross_entropy(h, y).mean()
        grads = gc.grad(loss, params)
        updates = gc.optim.adam(loss, params, lr=1e-2)
    return g, x, y, loss, params, grads, updates


def batch_data(n, seed=1, features=12, classes=5):
    rng = np.random.default_rng(seed + n)
    return (rng.standard_normal((n, features)).astype(np.float32),
            rng.integers(0, classes, n).astype(np.int32))


# -- the Dim algebra -----------------------------------------------------------------------

def test_dims_are_polynomials_with_decided_or_refused_comparisons():
    b, s = Dim.symbol("batch"), Dim.symbol("seq")
    assert str(b * 784) == "784*batch" and str(b - 1) == "batch-1"
    assert str(4 * b * s + 2) == "4*batch*seq+2"
    assert (b * 784) // b == 784 and (b * 784) // 784 == b and b - b == 0
    assert isinstance(b * 0, int) and b * 1 == b and b != s and b != 1
    assert b >= 1 and b - 1 >= 0 and b < b + 1 and 2 * b > b and not (b > b)
    with pytest.raises(Undecidable, match="batch > 2"):
        b > 2
    with pytest.raises(Undecidable):
        b // 2
    with pytest.raises(Undecidable, match="no value until the call"):
        int(b)
    assert Dim.from_json((b * s - 3).to_json()) == b * s - 3
    assert (3 * b + s).evaluate({"batch": 5, "seq": 2}) == 17
    assert issubclass(Undecidable, gc.ShapeError)


# -- graph building ------------------------------------------------------------------------

def test_placeholder_symbols_print_and_propagate_through_shape_rules():
    with gc.Graph("g"):
        x = gc.placeholder(("batch", 3), name="x")
        z = gc.placeholder((None, 2), name="z")
        assert x.shape == (Dim.symbol("batch"), 3)
        assert x.node.type_str() == "f32[batch,3]"
        assert str(z.shape[0]) == "z.0"                  # None: a fresh symbol
        assert x[1:].shape == (Dim.symbol("batch") - 1, 3)
        assert x[-1].shape == (3,) and x[:-1].shape[0] == Dim.symbol("batch") - 1
        assert x.reshape(-1).shape == (3 * Dim.symbol("batch"),)
        assert x.reshape(-1, 3, 1).shape == (Dim.symbol("batch"), 3, 1)
        assert x.T.shape == (3, Dim.symbol("batch")) and x.sum(0).shape == (3,)
        assert gc.concatenate([x, x], axis=0).shape == (2 * Dim.symbol("batch"), 3)
        from graphc.ir.printer import format_graph
        text = format_graph(x.graph)
        assert "f32[batch,3]" in text and "f32[z.0,2]" in text


def test_shape_rules_refuse_what_cannot_be_proven_with_the_users_line():
    with gc.Graph("g"):
        x = gc.placeholder(("batch", 3), name="x")
        y = gc.placeholder(("n", 3), name="y")
        with pytest.raises(gc.ShapeError, match=r"batch and n to be equal.*test_symbolic"):
            x + y
        with pytest.raises(gc.ShapeError, match="not within bounds for every size"):
            x[2:]
        with pytest.raises(gc.ShapeError, match="cannot be broadcast"):
            x + gc.placeholder((5, 3), name="w")
        with pytest.raises(gc.ShapeError, match="identifiers"):
            gc.placeholder(("two words", 3), name="bad")
        with pytest.raises(gc.ShapeError, match="reshape"):
            x.reshape(2, -1)                              # 3*batch / 2: not a polynomial


def test_mean_divides_by_the_size_at_the_call():
    with gc.Graph("g"):
        x = gc.placeholder(("batch", 4), name="x")
        outs = [x.mean(), x.mean(axis=0), gc.var(x, axis=0), x.sum(0) / gc.dim_size(
            x.shape[0], "float32")]
        exe = gc.compile(outs)
    for n in SIZES:
        a = np.random.default_rng(n).standard_normal((n, 4)).astype(np.float32)
        want = [a.mean(), a.mean(0), a.var(0), a.mean(0)]
        for got, ref, w in zip(exe(x=a), gc.evaluate(outs, {"x": a}), want):
            np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(ref, w, rtol=1e-5, atol=1e-6)


# -- feeds ---------------------------------------------------------------------------------

def test_mismatched_sizes_are_feed_errors_naming_the_symbol_inputs_and_sizes():
    g, x, y, loss, *_ = mlp("batch")
    with g:
        exe = gc.compile(loss)
    a, b = batch_data(7)
    for run in (lambda **f: exe(**f), lambda **f: gc.evaluate(loss, f)):
        with pytest.raises(gc.FeedError, match=r"'y'.*symbol 'batch'.*'x' gave size 7.*gives 6"):
            run(x=a, y=b[:6])
        with pytest.raises(gc.FeedError, match="'x'.*shape"):
            run(x=a[:, :5], y=b)                           # a fixed dim wrong
        with pytest.raises(gc.FeedError, match="'x'"):
            run(x=a[0], y=b)                               # the rank wrong
        with pytest.raises(gc.FeedError, match="'x'.*'batch'.*at least 1; got 0"):
            run(x=a[:0], y=b[:0])                          # symbols stand for sizes >= 1


# -- compiled programs at many sizes -------------------------------------------------------

def test_one_compile_serves_every_size_against_numpy_and_the_reference():
    g, x, y, loss, params, grads, _ = mlp("batch")
    with g:
        exe = gc.compile({"loss": loss, "grads": grads})
    for n in SIZES + (3,):
        a, b = batch_data(n)
        got = exe(x=a, y=b)
        ref_loss, *ref_grads = gc.evaluate([loss] + list(grads), {"x": a, "y": b})
        np.testing.assert_allclose(got["loss"], ref_loss, rtol=1e-5)
        for gg, rg in zip(got["grads"], ref_grads):
            np.testing.assert_allclose(gg, rg, rtol=1e-4, atol=1e-6)
    assert isinstance(exe.stats["arena_bytes"], Dim)


def test_symbolic_gradients_match_float64_finite_differences():
    with gc.Graph("fd"):
        x = gc.placeholder(("batch", 3), "float64", name="x")
        w = gc.placeholder((3, 2), "float64", name="w")
        loss = (gc.tanh(x @ w) ** 2).mean() + (x[1:] * x[:-1]).sum() / gc.dim_size(
            x.shape[0], "float64")
        gw, gx = gc.grad(loss, [w, x])
        exe = gc.compile([loss, gw, gx])
    rng = np.random.default_rng(0)
    for n in (2, 9):
        a, b = rng.standard_normal((n, 3)), rng.standard_normal((3, 2))
        f, dw, dx = exe(x=a, w=b)
        eps = 1e-6
        for arr, d, key in ((b, dw, "w"), (a, dx, "x")):
            num = np.zeros_like(arr)
            for i in np.ndindex(arr.shape):
                hi, lo = arr.copy(), arr.copy()
                hi[i] += eps
                lo[i] -= eps
                feeds = {"x": a, "w": b}
                fh = exe(**dict(feeds, **{key: hi}))[0]
                fl = exe(**dict(feeds, **{key: lo}))[0]
                num[i] = (fh - fl) / (2 * eps)
            np.testing.assert_allclose(d, num, rtol=1e-6, atol=1e-8)


def test_training_step_with_varying_batch_sizes_matches_static_compiles():
    g, x, y, loss, params, grads, updates = mlp("batch")
    with g:
        step = gc.compile({"loss": loss}, updates=updates)
    for n in (5, 64, 1, 200):
        a, b = batch_data(n)
        gs, *_, ls, ps, _, us = mlp(n)
        with gs:
            static = gc.compile({"loss": ls}, updates=us)
        static.variables.update({k: v.copy() for k, v in step.variables.items()})
        np.testing.assert_allclose(step(x=a, y=b)["loss"], static(x=a, y=b)["loss"], rtol=1e-5)
        for k in static.variables:
            np.testing.assert_allclose(step.variables[k], static.variables[k], rtol=1e-4,
                                       atol=1e-5)


def test_the_arena_is_sized_at_the_call_and_kept_for_the_largest_size():
    g, x, y, loss, *_ = mlp("batch")
    with g:
        exe = gc.compile(loss)
    native = exe._native
    exe(*batch_data(1000))
    big = native.arena_bytes
    assert big == exe.stats["arena_bytes"].evaluate({"batch": 1000})
    exe(*batch_data(7))
    assert native.arena_bytes == big
    a, b = batch_data(7)
    native.poison_arena = True                   # no stale value of the larger call is read
    np.testing.assert_allclose(exe(x=a, y=b), gc.evaluate(loss, {"x": a, "y": b}), rtol=1e-5)
    native.poison_arena = False
    # the fast path's cached sizes follow calls that went the checked way
    for n, contiguous in ((7, True), (3, False), (7, True), (3, True)):
        a, b = batch_data(n)
        if not contiguous:
            a = np.asfortranarray(a)
        np.testing.assert_allclose(exe(a, b), gc.evaluate(loss, {"x": a, "y": b}), rtol=1e-5)


def test_thread_counts_give_bitwise_identical_results():
    g, x, y, loss, params, grads, _ = mlp("batch", sizes=(64, 128, 10))
    with g:
        exes = [gc.compile([loss] + list(grads), num_threads=t) for t in (1, 2, 3)]
    for n in (3, 300):
        rng = np.random.default_rng(n)
        a = rng.standard_normal((n, 64)).astype(np.float32)
        b = rng.integers(0, 10, n).astype(np.int32)
        outs = [e(x=a, y=b) for e in exes]
        for o in outs[1:]:
            for u, v in zip(outs[0], o):
                assert np.array_equal(u, v)


def test_a_size_no_input_binds_is_a_compile_error():
    with gc.Graph("g"):
        x = gc.placeholder(("batch", 4), name="x")
        with pytest.raises(gc.CompileError, match="symbolic size 'batch', which no input"):
            gc.compile(gc.dim_size(x.shape[0], "float32") * 2.0)


def test_cuda_compiles_symbolic_programs_and_their_artifacts_keep_the_sizes(tmp_path):
    g, x, y, loss, params, grads, updates = mlp("batch")
    with g:
        exe = gc.compile({"loss": loss}, updates=updates, device="cuda")
    assert ".entry" in exe.dump("ptx")
    path = str(tmp_path / "mlp_cuda.gcx")
    exe.save(path)
    model = graphc_runtime.load(path)               # no GPU needed to load
    launches = model._native.launches
    assert any(isinstance(e.get("threads"), Dim) for e in launches)
    assert isinstance(model.manifest["arena_bytes"], Dim)


# -- artifacts, CLI, gc.function -----------------------------------------------------------

def test_artifact_saved_once_runs_at_new_sizes_and_info_shows_the_symbols(tmp_path):
    g, x, y, loss, params, grads, _ = mlp("batch")
    with g:
        exe = gc.compile({"loss": loss})
    path = str(tmp_path / "mlp.gcx")
    exe.save(path)
    with open(path, "rb") as f:                  # format 4: older runtimes refuse it clearly
        assert int.from_bytes(f.read(12)[8:12], "little") == 4
    model = graphc_runtime.load(path)
    for n in (1, 33, 500):
        a, b = batch_data(n)
        np.testing.assert_allclose(model(x=a, y=b)["loss"],
                                   gc.evaluate(loss, {"x": a, "y": b}), rtol=1e-5)
    with pytest.raises(gc.FeedError, match="symbol 'batch'"):
        model(x=a, y=b[:3])
    info = subprocess.run([sys.executable, "-m", "graphc.cli", "info", path], capture_output=True,
                          text=True, check=True).stdout
    assert "x: float32[batch, 12]" in info
    assert "batch: from x[0], y[0]" in info
    a, b = batch_data(21)
    np.save(tmp_path / "x.npy", a)
    np.save(tmp_path / "y.npy", b)
    out = subprocess.run([sys.executable, "-m", "graphc.cli", "run", path, "--input",
                          f"x={tmp_path / 'x.npy'}", "--input", f"y={tmp_path / 'y.npy'}"],
                         capture_output=True, text=True, check=True).stdout
    assert f"{float(gc.evaluate(loss, {'x': a, 'y': b})):.4f}"[:5] in out


def test_graph_json_round_trips_symbolic_shapes():
    from graphc.ir.serialize import dumps, loads
    with gc.Graph("g") as g:
        x = gc.placeholder(("batch", 3), name="x")
        out = (x[1:] * 2).mean(axis=0)
    graph, outputs = loads(dumps(g, [out.node]))
    assert graph.nodes[0].shape == (Dim.symbol("batch"), 3)
    a = np.arange(15, dtype=np.float32).reshape(5, 3)
    from graphc.ir.interpreter import run
    np.testing.assert_allclose(run(graph, outputs, {"x": a})[0], (a[1:] * 2).mean(0))


def test_function_retraces_only_when_a_rank_dtype_or_fixed_size_changes():
    @gc.function(dims={"x": ("batch", None)})
    def f(x):
        return gc.relu(x).sum(axis=1)
    for n in (1, 5, 300):
        a = np.random.default_rng(n).standard_normal((n, 4)).astype(np.float32)
        np.testing.assert_allclose(f(a), np.maximum(a, 0).sum(1), rtol=1e-6)
    assert len(f.cache) == 1
    f(np.ones((3, 6), np.float32))                   # a fixed size changed
    f(np.ones((3, 4), np.float64))                   # a dtype changed
    assert len(f.cache) == 3
    with pytest.raises(gc.GraphcError, match="has 1 axes, dims declares 2"):
        f(np.ones(3, np.float32))


# -- randomized programs -------------------------------------------------------------------

UNARY = ["tanh", "exp", "relu", "abs", "sigmoid"]


@settings(max_examples=25, deadline=None)
@given(ops=st.lists(st.tuples(st.sampled_from(UNARY + ["add_row", "mul_self", "sum1", "max0",
                                                      "mean0", "matmul"]),
                              st.integers(0, 1)), min_size=1, max_size=6),
       sizes=st.lists(st.integers(1, 40), min_size=2, max_size=3))
def test_random_symbolic_programs_match_the_reference(ops, sizes):
    """Random elementwise, broadcast, reduction and product chains over a symbolic batch,
    compiled once and run at several sizes against the interpreter."""
    rng = np.random.default_rng(len(ops))
    with gc.Graph("h"):
        x = gc.placeholder(("batch", 6), name="x")
        bias = gc.constant(rng.standard_normal(6).astype(np.float32))
        w = gc.constant((rng.standard_normal((6, 6)) * 0.3).astype(np.float32))
        h, outs = x, []
        for op, keep in ops:
            if op in UNARY:
                h = getattr(gc, op)(h)
            elif op == "add_row":
                h = h + bias
            elif op == "mul_self":
                h = h * h * 0.5
            elif op == "matmul":
                h = h @ w
            elif op == "sum1":
                outs.append(h.sum(axis=1))
            elif op == "max0":
                outs.append(h.max(axis=0))
            else:
                outs.append(h.mean(axis=0))
            if keep:
                outs.append(h)
        outs.append(h)
        exe = gc.compile(outs)
    for n in sizes:
        a = rng.standard_normal((n, 6)).astype(np.float32)
        for got, ref in zip(exe(x=a), gc.evaluate(outs, {"x": a})):
            assert got.shape == ref.shape     # (exp of exp chains reach 1e25: rtol)
            np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)


# -- ONNX models with symbolic dims --------------------------------------------------------

@pytest.mark.parametrize("name", ["bert", "resnet"])
def test_onnx_symbolic_batch_imports_once_and_matches_onnxruntime(name):
    pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from bench.onnx_models import MODELS
    kwargs = {"seq": 16, "hidden": 32, "layers": 1} if name == "bert" else {"size": 16}
    model, _ = MODELS[name]("batch_size", **kwargs)
    imported = gc.onnx.import_model(model)
    first = next(iter(imported.inputs.values()))
    assert first.shape[0] == Dim.symbol("batch_size")
    exe = gc.onnx.compile(model)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for n in (1, 3, 8):
        feeds = MODELS[name](n, **kwargs)[1](np.random.default_rng(n))
        got, ref = exe(**feeds), sess.run(None, feeds)
        for g_, r_ in zip(got.values(), ref):
            np.testing.assert_allclose(g_, r_, rtol=1e-3, atol=1e-4)
    with pytest.raises(gc.onnx.NeedsInputShapes, match="batch_size"):
        gc.onnx.import_model(model, symbolic=False)


# -- loops and conds over symbolic sizes ---------------------------------------------------

@pytest.mark.parametrize("reverse,checkpoint", [(False, False), (True, True)])
def test_scan_over_symbolic_length_and_batch_with_gradients(reverse, checkpoint):
    rng = np.random.default_rng(0)
    H = 6
    with gc.Graph("rnn"):
        xs = gc.placeholder(("T", "batch", H), name="xs")
        w = gc.variable((rng.standard_normal((H, H)) * 0.4).astype(np.float32), name="w")
        h0 = gc.zeros((xs.shape[1], H))
        hT, ys = gc.scan(lambda h, x: (gc.tanh(h @ w + x),) * 2, h0, xs, reverse=reverse,
                         checkpoint=checkpoint)
        loss = (ys ** 2).mean() + hT.sum()
        gw, gx = gc.grad(loss, [w, xs])
        k, s = gc.while_loop(lambda st: st[0] < 3, lambda st: (st[0] + 1, st[1] * 0.5), (0, hT))
        c = gc.cond(loss > 0, lambda a: a * 2.0, lambda a: -a, hT)
        outs = [hT, ys, loss, gw, gx, s, c]
        exe = gc.compile(outs)
    for t, b in ((1, 1), (4, 3), (7, 2), (2, 5)):          # odd and even trip counts
        a = rng.standard_normal((t, b, H)).astype(np.float32)
        for got, ref in zip(exe(xs=a), gc.evaluate(outs, {"xs": a})):
            np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


def test_lstm_with_a_symbolic_batch_matches_the_reference():
    rng = np.random.default_rng(1)
    H = 8
    with gc.Graph("lstm"):
        xs = gc.placeholder((5, "batch", H), name="xs")
        params = [gc.variable((rng.standard_normal(s) * 0.3).astype(np.float32), name=n)
                  for n, s in (("w_ih", (H, 4 * H)), ("w_hh", (H, 4 * H)), ("b", (4 * H,)))]
        ys, _ = gc.nn.lstm(xs, *params)
        loss = (ys ** 2).mean()
        outs = [loss] + list(gc.grad(loss, params))
        exe = gc.compile(outs)
    for b in (1, 6):
        a = rng.standard_normal((5, b, H)).astype(np.float32)
        for got, ref in zip(exe(xs=a), gc.evaluate(outs, {"xs": a})):
            np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-6)


def test_viewer_and_dumps_show_symbolic_programs(tmp_path):
    from graphc import viewer
    g, x, y, loss, params, grads, updates = mlp("batch")
    with g:
        exe = gc.compile({"loss": loss}, updates=updates)
    assert "batch" in exe.dump("memory") and "f32[batch,12]" in exe.dump("optimized")
    page = viewer.executable_page(exe, "mlp")
    data = json.loads(page.split("id='graphc-data'>")[1].split("</script>")[0])
    assert data["symbols"] == {"batch": viewer.DISPLAY_SIZE}
    assert all(isinstance(b["bytes"], int) for b in data["memory"]["buffers"])
    types = {n["type"] for n in data["views"]["optimized"]["nodes"]}
    assert "f32[batch,12]" in types


VIEWS = ["transpose_back", "drop_first", "drop_last", "reverse", "concat_self", "flatten",
         "pad_rows", "sum_rows", "outer"]


@settings(max_examples=30, deadline=None)
@given(ops=st.lists(st.sampled_from(VIEWS), min_size=1, max_size=4),
       sizes=st.lists(st.integers(2, 30), min_size=2, max_size=3))
def test_random_symbolic_views_match_the_reference(ops, sizes):
    """Views along the symbolic axis (slices, reversal, concatenation, padding, a
    transpose that puts it inside, a flatten that merges it) before elementwise work."""
    with gc.Graph("v"):
        x = gc.placeholder(("batch", 4), name="x")
        h, outs = x, []
        steps = {
            "transpose_back": lambda h: (h.T * 2.0 + 1.0).T,     # the symbolic axis inside
            "drop_first": lambda h: h[1:] - h[:-1],
            "drop_last": lambda h: gc.concatenate([h[:-1], h[-1:] * 3.0], axis=0),
            "reverse": lambda h: gc.flip(h, 0),
            "concat_self": lambda h: gc.concatenate([h, gc.exp(h * 0.1)], axis=0),
            "flatten": lambda h: gc.tanh(h.reshape(-1)).reshape(-1, 4),
            "pad_rows": lambda h: gc.pad(h, ((1, 2), (0, 0))),
        }
        for op in ops:
            if op == "sum_rows":
                outs.append(h.sum(axis=0) + h.mean())
            elif op == "outer":
                outs.append((h.T @ h) / gc.dim_size(h.shape[0], "float32"))
            else:
                try:
                    h = steps[op](h)
                except gc.ShapeError as e:        # refused by design: not for every size
                    assert "every size" in str(e), e
        outs.append(h)
        exe = gc.compile(outs)
    rng = np.random.default_rng(len(ops))
    for n in sizes:
        a = rng.standard_normal((n, 4)).astype(np.float32)
        for got, ref in zip(exe(x=a), gc.evaluate(outs, {"x": a})):
            assert got.shape == ref.shape
            np.testing.assert_allclose(got, ref, rtol=2e-5, atol=1e-5)


def test_alias_check_of_symbolic_arena_ranges_is_conservative():
    from graphc.backends.llvm.module import aliased_buffers
    from graphc.kernels import index as ix
    from graphc.kernels import kernel as K
    n = Dim.symbol("batch") - 1                      # may be 0 at the call
    a = K.Buffer(1, (n, 5), "float32", "temp")
    b = K.Buffer(2, (n, 5), "float32", "temp")
    far = K.Buffer(3, (4,), "float32", "temp")
    i = (ix.var("i0", n), ix.var("i1", 5))
    kern = K.LoopKernel("k", (n, 5), i, [K.Store(b, K.Load("float32", a, i), i),
                                          K.Store(far, K.Const("float32", 0.0), i[1:2])])
    # a and b share an offset (an in-place pair): whether they overlap depends on batch
    offsets = {1: 64 + 0 * n, 2: 64, 3: 0}
    assert aliased_buffers(kern, offsets) == {1, 2}
