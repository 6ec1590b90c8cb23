"""Each graph pass on its own."""
import numpy as np

import graphc as gc
from graphc.passes import constant_fold, cse, dce, simplify
from graphc.passes.manager import PassManager
from graphc.passes.program import Program


def program_of(outputs, updates=()):
    graph = outputs[0].graph
    return Program(graph, [o.node for o in outputs], list(updates))


def ops(program):
    return [n.op for n in program.live_nodes()]


def same_values(p1, p2, feeds):
    from graphc.ir.interpreter import run
    for a, b in zip(run(p1.graph, p1.outputs, feeds), run(p2.graph, p2.outputs, feeds)):
        np.testing.assert_array_equal(a, b)


def test_simplify_identities(graph):
    x = gc.placeholder((3, 4), name="x")
    i = gc.placeholder((3,), "int32", name="i")
    outs = [x + 0.0, 1.0 * x, x / 1.0, -(-x), x.T.T, x.reshape(12).reshape(3, 4),
            gc.cast(x, "float32"), i - i, x[:, :], gc.where(True, x, x * 2)]
    p = program_of(outs)
    s = simplify(p)
    for o in s.outputs[:7] + s.outputs[8:]:
        assert o.op == "parameter", o
    assert s.outputs[7].op == "broadcast_in_dim"            # i - i -> 0 for integers
    same_values(p, s, {"x": np.random.rand(3, 4).astype(np.float32),
                       "i": np.array([1, 2, 3], np.int32)})


def test_simplify_a_mask_applied_twice_once(graph):
    i = gc.placeholder((3, 4), "int32", name="i")
    m = gc.placeholder((3, 4), "int32", name="m")
    c255, c15 = (gc.constant(np.int32(v)) for v in (255, 15))
    outs = [gc.bitwise_and(gc.bitwise_and(i, c255), gc.constant(np.int32(255))),
            gc.bitwise_and(gc.bitwise_and(i, m), m),
            gc.bitwise_and(gc.bitwise_and(i, c255), c15)]          # other masks: kept
    p = program_of(outs)
    s = simplify(p)
    assert [ops(program_of_nodes(s, o)).count("and") for o in s.outputs] == [1, 1, 2]
    rng = np.random.default_rng(0)
    same_values(p, s, {"i": rng.integers(-1000, 1000, (3, 4)).astype(np.int32),
                       "m": rng.integers(0, 64, (3, 4)).astype(np.int32)})


def program_of_nodes(program, node):
    return Program(program.graph, [node], [])


def test_simplify_keeps_float_x_minus_x(graph):
    x = gc.placeholder((3,), name="x")
    s = simplify(program_of([x - x]))
    assert s.outputs[0].op == "sub"          # inf - inf is nan, so not folded


def test_simplify_sum_of_broadcast(graph):
    x = gc.placeholder((4,), name="x")
    y = gc.broadcast_to(x, (5, 4)).sum(axis=0)
    p = program_of([y])
    s = simplify(p)
    assert "reduce_sum" not in ops(s)
    same_values(p, s, {"x": np.arange(4, dtype=np.float32)})


def test_constant_fold_small_only(graph):
    a = gc.constant(np.arange(6, dtype=np.float32))
    small = gc.exp(a) * 2
    big = gc.constant(np.ones(5000, np.float32)) * 3
    p = program_of([small, big])
    f = constant_fold(p)
    assert f.outputs[0].op == "constant"
    np.testing.assert_allclose(f.outputs[0].attrs["value"], np.exp(np.arange(6.0)) * 2, rtol=1e-6)
    assert f.outputs[1].op == "mul"


def test_cse_merges_equal_nodes(graph):
    x = gc.placeholder((3,), name="x")
    a = gc.exp(x) + gc.constant(np.float32(1))
    b = gc.exp(x) + gc.constant(np.float32(1))
    p = program_of([a * b])
    c = cse(p)
    assert ops(c).count("exp") == 1 and ops(c).count("constant") == 1
    same_values(p, c, {"x": np.array([1, 2, 3], np.float32)})


def test_dce_drops_unused(graph):
    x = gc.placeholder((3,), name="x")
    gc.exp(x) * 5          # dead
    y = x + 1
    p = program_of([y])
    assert "exp" not in ops(dce(p)) and len(dce(p).graph.nodes) == 4


def test_pass_manager_times_and_dumps(graph, tmp_path):
    x = gc.placeholder((3,), name="x")
    p = program_of([(x + 0.0) * 2])
    pm = PassManager([("simplify", simplify), ("dce", dce)], str(tmp_path))
    out = pm.run(p)
    assert set(pm.seconds) == {"simplify", "dce"}
    files = sorted(f.name for f in tmp_path.iterdir())
    assert files == ["00-input.txt", "01-simplify.txt", "02-dce.txt"]
    assert "add(" in (tmp_path / "00-input.txt").read_text()
    assert "add(" not in (tmp_path / "02-dce.txt").read_text()
    assert "outputs:" in pm.dumps["dce"] and out.outputs[0].op == "mul"


def test_compile_dump_dir(graph, tmp_path):
    x = gc.placeholder((3,), name="x")
    gc.compile(gc.exp(x) + 0.0, dump_dir=str(tmp_path))
    names = sorted(f.name for f in tmp_path.iterdir())
    assert names[0] == "00-input.txt" and any("cse" in n for n in names)


def test_conv_to_gemm_rewrites_large_convolutions(graph):
    from graphc.passes import conv_to_gemm
    from graphc.api import bind
    x = gc.placeholder((8, 3, 32, 32), name="x")
    w = gc.placeholder((16, 3, 3, 3), name="w")
    y = bind("conv", x, w, window_strides=(2, 1), padding=((1, 0), (1, 1)), lhs_dilation=(1, 1),
             rhs_dilation=(1, 2), feature_group_count=1)
    p = program_of([y * 1.0])
    rewritten = conv_to_gemm(p)
    assert "conv" not in ops(rewritten) and "dot_general" in ops(rewritten)
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((8, 3, 32, 32)).astype(np.float32),
             "w": rng.standard_normal((16, 3, 3, 3)).astype(np.float32)}
    from graphc.ir.interpreter import run
    a, = run(p.graph, p.outputs, feeds)
    b, = run(rewritten.graph, rewritten.outputs, feeds)
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
    # a kernel-gradient-like conv: large window, small output -> one product over a
    # window view's copy, a row per image and output position (no slice per position)
    g = bind("conv", gc.placeholder((8, 64, 30, 30), name="xt"),
             gc.placeholder((16, 64, 28, 28), name="gt"), window_strides=(1, 1),
             padding=((0, 0), (0, 0)), lhs_dilation=(1, 1), rhs_dilation=(1, 1),
             feature_group_count=1)
    pg = program_of([g])
    rg = conv_to_gemm(pg)
    assert "conv" not in ops(rg) and "window_view" in ops(rg) and "slice" not in ops(rg)
    feeds = {"xt": rng.standard_normal((8, 64, 30, 30)).astype(np.float32),
             "gt": rng.standard_normal((16, 64, 28, 28)).astype(np.float32)}
    a, = run(pg.graph, pg.outputs, feeds)
    b, = run(rg.graph, rg.outputs, feeds)
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-3)
    small = bind("conv", gc.placeholder((1, 1, 4, 4), name="s"), gc.placeholder((1, 1, 2, 2), name="k"),
                 window_strides=(1, 1), padding=((0, 0), (0, 0)), lhs_dilation=(1, 1),
                 rhs_dilation=(1, 1), feature_group_count=1)
    assert "conv" in ops(conv_to_gemm(program_of([small])))


def test_sums_of_disjoint_pads_become_one_concatenate(graph):
    from graphc.passes.pads_to_concat import pads_to_concat
    x = gc.placeholder((4, 8), name="x")
    z = gc.sin(x)
    parts = [z[:, :2], z[:, 2:5], z[:, 6:]]                   # column 5 is not read
    y = sum((gc.tanh(p) * 2.0).sum() for p in parts)
    (g,) = gc.grad(y, [z])
    p = program_of([g])
    q = pads_to_concat(p)
    # three pieces, one concatenate (with a zero gap at column 5)
    assert ops(p).count("pad") == 3
    assert ops(q).count("concatenate") == 1 and ops(q).count("pad") == 0
    v = np.random.default_rng(0).normal(size=(4, 8)).astype(np.float32)
    from graphc.ir.interpreter import run
    np.testing.assert_allclose(run(q.graph, q.outputs, {"x": v})[0],
                               run(p.graph, p.outputs, {"x": v})[0], rtol=1e-6)
    np.testing.assert_allclose(gc.compile(g)(x=v), gc.evaluate(g, {"x": v}), rtol=1e-6)


def test_column_sums_of_buffers_become_products_with_ones(graph):
    from graphc.passes.column_sums import column_sums
    x = gc.placeholder((16, 32, 96), name="x")
    w = gc.placeholder((300, 80), name="w")
    outs = [x.sum(axis=(0, 1)), w.sum(axis=0), x.sum(axis=0), x.sum(axis=2),
            (x * 2.0).sum(axis=(0, 1))]
    q = column_sums(program_of(outs))
    # not: 16 rows only, a row sum, a sum of an expression (it stays fused)
    assert ops(q).count("dot_general") == 2
    rng = np.random.default_rng(1)
    feeds = {"x": rng.normal(size=(16, 32, 96)).astype(np.float32),
             "w": rng.normal(size=(300, 80)).astype(np.float32)}
    for a, b in zip(gc.compile(outs)(**feeds), gc.evaluate(outs, feeds)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
