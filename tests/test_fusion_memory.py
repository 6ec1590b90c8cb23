"""Fusion decisions (kernel counts), memory planning, and runtime safety."""
import re
import threading

import numpy as np
import pytest

import graphc as gc

from bench.__main__ import mlp_graph
from compiled import check_compiled


def rand(shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def test_softmax_is_at_most_two_kernels(graph):
    x = gc.placeholder((64, 100), name="x")
    exe = check_compiled(gc.softmax(x), {"x": rand((64, 100)) * 5})
    assert exe.stats["kernels"] <= 2


def test_layer_norm_is_at_most_two_kernels(graph):
    x = gc.placeholder((32, 48), name="x")
    g = gc.placeholder((48,), name="g")
    b = gc.placeholder((48,), name="b")
    exe = check_compiled(gc.nn.layer_norm(x, g, b),
                         {"x": rand((32, 48)), "g": rand(48, 1), "b": rand(48, 2)})
    assert exe.stats["kernels"] <= 2


def test_a_whole_tensor_reduction_leaves_its_full_size_consumers_to_loop_kernels(graph):
    """x / max|x| over 256 x 1024: the one-row reduction is a kernel of its own, the
    division over every element a loop kernel the threads share (a single row kernel
    would run both on one thread); a small tensor keeps the one row kernel."""
    x = gc.placeholder((256, 1024), name="x")
    exe = check_compiled(x / gc.max(gc.abs(x)), {"x": rand((256, 1024))})
    kernels = {k["kernel"].split("_")[1]: k for k in exe.stats["kernel_bytes"]}
    assert set(kernels) == {"row", "loop"}
    assert kernels["row"]["written"] == 4                   # the maximum alone
    assert kernels["loop"]["written"] == 256 * 1024 * 4     # every element, shared
    with gc.Graph():
        y = gc.placeholder((64, 64), name="y")
        small = check_compiled(y / gc.max(gc.abs(y)), {"y": rand((64, 64))})
    assert small.stats["kernels"] == 1


def test_values_read_twice_by_one_op_or_tested_for_nan_stay_inline(graph):
    """v * v twelve times over, then where(isnan(v), 0, v): each value is computed once
    in the one kernel, so recomputing it counts once, not once per path (the tree sum
    would be 2^12 times the ops), and nothing is written out for 'recomputing'."""
    x = gc.placeholder((256, 1024), name="x")
    v = gc.tanh(x) * 0.9
    for _ in range(12):
        v = v * v * 0.5 + 0.25
    out = gc.where(gc.isnan(v), 0.0, v) * 2.0
    exe = check_compiled(out, {"x": rand((256, 1024))})
    assert exe.stats["kernels"] == 1
    assert exe.stats["kernel_bytes"][0]["written"] == 256 * 1024 * 4     # the result alone
    decisions = exe.dump("fused").split("decisions:")[-1]
    assert "recomputing" not in decisions, decisions


def test_gelu_chain_is_one_kernel(graph):
    x = gc.placeholder((64, 64), name="x")
    a = gc.placeholder((64,), name="a")
    b = gc.placeholder((64,), name="b")
    exe = check_compiled(gc.gelu(x * a + b, approximate=True),
                         {"x": rand((64, 64)), "a": rand(64, 1), "b": rand(64, 2)})
    assert exe.stats["kernels"] == 1
    assert exe.stats["kernel_bytes"][0]["read"] == (64 * 64 + 2 * 64) * 4


def test_matmul_bias_relu_is_one_kernel(graph):
    x = gc.placeholder((16, 32), name="x")
    w = gc.placeholder((32, 8), name="w")
    b = gc.placeholder((8,), name="b")
    exe = check_compiled(gc.relu(x @ w + b), {"x": rand((16, 32)), "w": rand((32, 8), 1),
                                               "b": rand(8, 2)})
    assert exe.stats["kernels"] == 1
    assert "[dot]" in exe.dump("fused")


def test_siblings_reading_one_input_share_a_kernel(graph):
    x = gc.placeholder((100, 100), name="x")
    exe = check_compiled([gc.exp(x) * 2, gc.tanh(x) + 1], {"x": rand((100, 100))})
    assert exe.stats["kernels"] == 1


def test_expensive_shared_producer_is_materialized(graph):
    x = gc.placeholder((10, 10), name="x")
    h = x
    for _ in range(6):
        h = gc.tanh(gc.exp(h) * 0.1)
    y = gc.broadcast_to(h[:, None, :], (10, 300, 10)) * gc.placeholder((300, 10), name="z")
    exe = check_compiled(y, {"x": rand((10, 10)), "z": rand((300, 10), 3)})
    assert "materialize" in exe.dump("fused")


def test_depthwise_convolution_under_a_channel_norm_is_written_once_in_its_layout(graph):
    """ConvNeXt's block start: a depthwise 7 x 7 convolution (NCHW), transposed to
    channels last and layer-normed. The convolution's terms get their own loop kernel
    writing the NCHW result (its layout: the windows vectorize along rows); the norm's
    row kernel reads it through the transpose, instead of recomputing 49 terms per
    channel in each of its passes over a channel row."""
    c = 16
    x = gc.placeholder((1, c, 20, 20), name="x")
    w = gc.constant(rand((c, 1, 7, 7), 1) * 0.2)
    y = gc.transpose(gc.nn.conv2d(x, w, padding=3, groups=c), (0, 2, 3, 1))
    out = gc.nn.layer_norm(y, gc.constant(rand(c, 2)), gc.constant(rand(c, 3)))
    exe = check_compiled(out, {"x": rand((1, c, 20, 20))})
    groups = [line for line in exe.dump("fused").splitlines() if line.startswith("group ")]
    windows = [line for line in groups if "window_view" in line]
    assert windows and all("[loop]" in line for line in windows), windows
    for line in windows:                   # its result: the convolution's, not transposed
        roots = re.search(r"roots ([^:]*):", line).group(1).split(", ")
        assert all(f"{r}:transpose" not in line for r in roots), line
    assert any("[row]" in line for line in groups)


def test_residual_sum_read_by_two_kernels_is_written_once(graph):
    """h2 = relu(relu(2x) + y1 + y2) feeds a kernel of its shape and a strided slice:
    recomputing it there would reread x, y1 and y2 (three times its size) where writing
    it once costs one write and one read per kernel, so it is materialized; relu(2x)
    itself (one buffer beneath it, besides what its consumer reads) stays duplicated."""
    shape = (4, 8, 16, 16)
    x, y1, y2, y3 = (gc.placeholder(shape, name=n) for n in ("x", "y1", "y2", "y3"))
    h1 = gc.relu(x * 2)
    h2 = gc.relu(h1 + y1 + y2)
    out = [gc.relu(h2 + y3) * 2, h2[:, :, ::2, ::2] * 3, h1[:, :, 1::2, 1::2] + 1]
    exe = check_compiled(out, {n: rand(shape, i) for i, n in enumerate(("x", "y1", "y2", "y3"))})
    fused = exe.dump("fused")
    written = re.findall(r"materialize %(\d+) \(max\): recomputing it in 2 consumers reads "
                         r"3\.0x its size in each", fused)
    assert len(written) == 1
    assert len(re.findall(r"duplicate %\d+ \(max\) into 2 consumers", fused)) == 1
    # the slice of h2 reads h2 alone: only one kernel computes h2's sum
    assert sum(f"%{written[0]}:max" in line for line in fused.splitlines()
               if line.startswith("group")) == 1


def test_fusion_never_crosses_a_collective(graph):
    from graphc.api import bind
    x = gc.placeholder((8,), name="x")
    y = bind("all_reduce", gc.exp(x), op="sum", axis_size=1) * 2
    exe = check_compiled(y, {"x": rand(8)})
    assert exe.stats["kernels"] == 3
    assert "[collective]" in exe.dump("fused")


def test_unfused_compile_gives_the_same_results(graph):
    x = gc.placeholder((20, 30), name="x")
    outs = [gc.softmax(x), gc.nn.layer_norm(x, gc.ones(30), gc.zeros(30)), x @ x.T]
    fused = check_compiled(outs, {"x": rand((20, 30))})
    plain = check_compiled(outs, {"x": rand((20, 30))}, fuse=False)
    assert plain.stats["kernels"] > fused.stats["kernels"]


def mlp_step(batch=64, sizes=(784, 512, 512, 10)):
    """An MLP training step with Adam (the benchmark's W5 model, smaller batch)."""
    return mlp_graph(batch, sizes)


def test_mlp_training_step_memory_and_in_place_updates():
    g, loss, updates = mlp_step()
    with g:
        exe = gc.compile({"loss": loss}, updates=updates)
    s = exe.stats
    assert s["arena_bytes"] <= 1.1 * s["live_bytes_lower_bound"], s
    assert s["naive_bytes"] > s["arena_bytes"]
    assert s["copied_updates"] == [] and len(s["in_place_updates"]) == len(updates)
    before = {k: v for k, v in exe.variables.items()}
    w0 = exe.variables["w0"].copy()
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((64, 784)).astype(np.float32),
             "y": rng.integers(0, 10, 64).astype(np.int32)}
    exe(**feeds)
    for k, v in exe.variables.items():
        assert v is before[k]                          # same arrays, written in place
    assert not np.array_equal(exe.variables["w0"], w0)
    # and the compiled step matches the reference step (Adam divides by sqrt(v): where a
    # gradient is ~0 its step is sign-like, so compare absolutely at the scale of lr)
    gc.evaluate({"loss": loss}, feeds, updates=updates)
    for k in g.variables:
        np.testing.assert_allclose(exe.variables[k], g.variables[k], rtol=1e-5, atol=1e-4)
    assert s["compile_seconds"] > 0 and "fusion" in s["pass_seconds"]


def test_poisoned_arena_changes_nothing(graph):
    x = gc.placeholder((50, 40), name="x")
    w = gc.variable(rand((40, 30)), name="w")
    h = gc.relu(x @ w)
    outs = [gc.softmax(h), h.sum(axis=0), gc.nn.layer_norm(h, gc.ones(30), gc.zeros(30))]
    exe = gc.compile(outs)
    feeds = {"x": rand((50, 40), 5)}
    clean = exe(**feeds)
    exe._native.poison_arena = True
    for _ in range(2):
        poisoned = exe(**feeds)
        for a, b in zip(clean, poisoned):
            np.testing.assert_array_equal(a, b)
    assert exe.stats["arena_bytes"] > 0


def test_update_that_reads_a_variable_transposed_falls_back_to_a_copy(graph):
    w = gc.variable(np.arange(9, dtype=np.float32).reshape(3, 3), name="w")
    exe = gc.compile(w.sum(), updates={w: w.T * 2})
    exe()
    np.testing.assert_array_equal(exe.variables["w"], np.arange(9.0).reshape(3, 3).T * 2)
    assert exe.stats["copied_updates"] == ["w"]


def test_swapping_two_variables(graph):
    a = gc.variable(np.array([1.0, 2.0], np.float32), name="a")
    b = gc.variable(np.array([3.0, 4.0], np.float32), name="b")
    exe = gc.compile([], updates={a: b + 0.0, b: a + 0.0})
    exe()
    np.testing.assert_array_equal(exe.variables["a"], [3, 4])
    np.testing.assert_array_equal(exe.variables["b"], [1, 2])


def test_concurrent_calls_are_safe(graph):
    x = gc.placeholder((200, 64), name="x")
    w = gc.variable(rand((64, 64)), name="w")
    y = gc.softmax(gc.tanh(x @ w))
    exe = gc.compile(y)
    inputs = [rand((200, 64), s) for s in range(8)]
    expected = [exe(x=i) for i in inputs]
    results = [None] * 8
    errors = []

    def work(k):
        try:
            for _ in range(5):
                results[k] = exe(x=inputs[k])
                np.testing.assert_array_equal(results[k], expected[k])
        except Exception as e:        # pragma: no cover - reported below
            errors.append(e)
    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_feeds_positional_keyword_and_non_contiguous(graph):
    x = gc.placeholder((3, 2), name="x")
    y = gc.placeholder((2,), name="y")
    exe = gc.compile(x * y)
    base = rand((2, 3))
    a = exe(base.T, np.ones(2, np.float32))
    b = exe(x=base.T.copy(), y=np.ones(2, np.float32))
    np.testing.assert_array_equal(a, b)
    with pytest.raises(gc.FeedError, match="missing input 'y'"):
        exe(base.T)
    with pytest.raises(gc.FeedError, match="expected dtype float32, got float64"):
        exe(base.T.astype(np.float64), np.ones(2, np.float32))
    with pytest.raises(gc.FeedError, match="unknown input 'z'"):
        exe(x=base.T, y=np.ones(2, np.float32), z=1)
    with pytest.raises(gc.FeedError, match="given both"):
        exe(base.T, np.ones(2, np.float32), x=base.T)


def test_dumps(graph):
    x = gc.placeholder((8, 8), name="x")
    exe = gc.compile(gc.softmax(x))
    for stage in ("graph", "optimized", "fused", "memory", "llvm", "asm"):
        assert exe.dump(stage)
    assert "define" in exe.dump("llvm") and "graphc_main" in exe.dump("asm")
    with pytest.raises(gc.CompileError, match="compiled for cpu"):
        exe.dump("ptx")
    with pytest.raises(gc.CompileError, match="unknown stage"):
        exe.dump("nope")


def test_compile_errors(graph):
    x = gc.placeholder((3,), name="x")
    with pytest.raises(gc.CompileError, match="unknown compile option"):
        gc.compile(x * 2, frobnicate=True)
    with pytest.raises(gc.DeviceError, match="unknown device"):
        gc.compile(x * 2, device="tpu")
    v = gc.variable(np.zeros(3, np.float32), name="v")
    with pytest.raises(gc.ShapeError, match="update of variable 'v'"):
        gc.compile(x, updates={v: gc.zeros(4)})


def test_gc_function_caches_per_signature():
    calls = []

    @gc.function
    def f(x, y, power=2):
        calls.append(1)
        return {"out": (x ** power + y).sum(axis=-1)}

    a, b = rand((3, 4)), rand((3, 4), 1)
    np.testing.assert_allclose(f(a, b)["out"], (a ** 2 + b).sum(-1), rtol=1e-5)
    f(a * 2, b)
    assert len(calls) == 1
    f(rand((5, 4)), rand((5, 4)))
    f(a, b, power=3)
    assert len(calls) == 3 and len(f.cache) == 3


def test_assigning_variables_copies_in_place_with_checks(graph):
    w = gc.variable(np.ones(3, np.float32), name="w")
    exe = gc.compile(w * 2)
    arr = exe.variables["w"]
    exe.variables["w"] = np.array([1, 2, 3], np.float32)
    assert exe.variables["w"] is arr
    np.testing.assert_array_equal(exe(), [2, 4, 6])
    with pytest.raises(gc.FeedError, match="variable 'w': expected shape"):
        exe.variables["w"] = np.zeros(4, np.float32)
    with pytest.raises(KeyError):
        exe.variables["nope"] = 1


def test_large_results_are_recycled_only_when_nobody_holds_them(graph):
    x = gc.placeholder((512, 1024), name="x")
    exe = gc.compile(x * 2)
    a = np.ones((512, 1024), np.float32)
    first = exe(a)
    second = exe(a * 3)
    assert second is not first and not np.shares_memory(first, second)
    np.testing.assert_array_equal(first, 2)            # untouched by the second call
    view = second[:4]
    del second
    third = exe(a * 5)
    assert not np.shares_memory(third, view)            # a view keeps its base alive
    np.testing.assert_array_equal(view, 6)
    address = third.ctypes.data
    del third
    fourth = exe(a * 7)
    assert fourth.ctypes.data == address                # dropped result reused
    np.testing.assert_array_equal(fourth, 14)


def test_deep_elementwise_chains_are_cut_at_the_depth_limit():
    """A chain of thousands of fused ops compiled with a RecursionError in the kernel
    builders; fusion now materializes every MAX_GROUP_DEPTH-th value."""
    from graphc.schedule.fusion import MAX_GROUP_DEPTH
    v = np.random.default_rng(3).standard_normal((8, 16)).astype(np.float32)
    with gc.Graph():
        x = gc.placeholder(v.shape, name="x")
        h = x
        for i in range(700):                          # 2,100 elementwise ops in a row
            h = gc.tanh(h * (1.0 + i / 1000.0) + 0.01 * i)
        exe = gc.compile(h, opt_level=0)
        want = gc.evaluate(h, {"x": v})
    np.testing.assert_allclose(exe(v), want, rtol=1e-5, atol=1e-6)
    assert exe.stats["kernels"] >= 2100 // MAX_GROUP_DEPTH
    assert "reaches the depth limit" in exe.dump("fused")


def test_a_product_reads_heads_merged_back_from_a_copy_not_element_by_element():
    """Attention's heads transposed back and flattened ((1, 12, 128, 64) -> (1, 128,
    768)) merge dimensions that are not adjacent in memory: no strides give that view, so
    fusion writes it out and the product runs on the GEMM kernels (3.3 -> 1.1 ms here)."""
    rng = np.random.default_rng(0)
    c = rng.standard_normal((1, 12, 128, 64)).astype(np.float32)
    w = rng.standard_normal((768, 96)).astype(np.float32)
    with gc.Graph():
        x, W = gc.placeholder(c.shape, name="c"), gc.placeholder(w.shape, name="w")
        merged = gc.reshape(gc.transpose(x, (0, 2, 1, 3)), (1, 128, 768)) @ W
        # each head transposed is strided (a transposed matrix): read in place
        per_head = gc.reshape(gc.transpose(x, (0, 1, 3, 2)), (12, 64, 128)) @ gc.ones((128, 4))
        exe = gc.compile([merged, per_head])
    fused = exe.dump("fused")
    assert "a product's operand that no strides give" in fused
    kinds = [k["kind"] for k in exe.manifest()["kernels"]]
    assert kinds.count("dot") == 2 and "loop" in kinds
    got = exe(c, w)
    np.testing.assert_allclose(got[0], c.transpose(0, 2, 1, 3).reshape(1, 128, 768) @ w,
                               rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got[1], c.reshape(12, 128, 64).transpose(0, 2, 1) @
                               np.ones((128, 4), np.float32), rtol=1e-4, atol=1e-4)


def test_view_strides_follow_numpys_rule_for_reshapes_without_a_copy():
    from graphc.schedule.strides import reshape_strides
    rng = np.random.default_rng(1)
    for _ in range(2000):
        shape = tuple(int(v) for v in rng.integers(1, 5, rng.integers(1, 5)))
        view = np.zeros(shape, np.int8).transpose(rng.permutation(len(shape)))
        if view.shape[-1] > 1 and rng.random() < 0.3:
            view = view[..., ::2]
        sizes, rest = [], view.size
        for p in (2, 3, 2, 3, 2):
            while rest % p == 0 and rng.random() < 0.5:
                sizes.append(p)
                rest //= p
        new = tuple(rng.permutation(sizes + [rest]).tolist())
        got = reshape_strides(list(view.shape), list(view.strides), list(new))
        probe = view.view()
        try:
            probe.shape = new
        except AttributeError:
            assert got is None, (view.shape, view.strides, new)
            continue
        assert got is not None and [g for g, n in zip(got, new) if n != 1] == \
            [s for s, n in zip(probe.strides, new) if n != 1], (view.shape, new)
