"""Convolutions that read their padded input in place (passes/conv_to_gemm.py): the
window_view primitive, the product over it (the own nnw kernel), 1-D / 2-D / 3-D shapes,
padding (asymmetric, cropping), dilation, symbolic batches, gradients, thread counts;
everything against the numpy reference interpreter."""
import re

import numpy as np
import pytest

import graphc as gc
from graphc.api import bind

from gradcheck import check_grad


def _conv(x, w, padding, dilation=None, strides=None):
    nsp = x.ndim - 2
    return bind("conv", x, w, window_strides=tuple(strides or (1,) * nsp),
                padding=tuple(padding),
                lhs_dilation=(1,) * nsp, rhs_dilation=tuple(dilation or (1,) * nsp),
                feature_group_count=1)


def _compile_conv(xs, ws, padding, dilation=None, dtype="float32", threads=None, batch=None,
                  strides=None):
    with gc.Graph("conv_in_place"):
        x = gc.placeholder((batch or xs[0],) + tuple(xs[1:]), dtype, name="x")
        w = gc.placeholder(ws, dtype, name="w")
        y = _conv(x, w, padding, dilation, strides)
        # 3x3 windows at stride 1 would run as winograd_conv2d (tests/test_winograd.py)
        exe = gc.compile(y, inputs=[x, w], num_threads=threads, winograd=False)
        return exe, y, x, w


def _reference(y, feeds):
    return gc.evaluate(y, feeds)


def _feeds(xs, ws, dtype, seed=0):
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal(xs).astype(dtype),
            "w": rng.standard_normal(ws).astype(dtype)}


CASES = [  # (x shape, w shape, padding, dilation)
    ((2, 16, 32, 32), (32, 16, 3, 3), ((1, 1), (1, 1)), None),       # a ResNet stage
    ((3, 16, 17, 19), (40, 16, 3, 3), ((1, 1), (1, 1)), None),       # every tail
    ((2, 8, 20, 20), (16, 8, 5, 5), ((2, 2), (2, 2)), (2, 2)),       # dilated
    ((2, 12, 15, 21), (20, 12, 3, 5), ((0, 2), (3, 1)), None),       # asymmetric
    ((2, 8, 22, 22), (24, 8, 3, 3), ((-1, 0), (0, -2)), None),       # cropping
    ((2, 32, 16, 16), (64, 32, 1, 1), ((0, 0), (0, 0)), None),       # pointwise
    ((2, 3, 40, 40), (32, 3, 3, 3), ((1, 1), (1, 1)), None),         # three channels
    ((2, 16, 300), (32, 16, 5), ((2, 2),), None),                    # 1-D
    ((2, 8, 9, 10, 11), (16, 8, 3, 3, 3), ((1, 1), (1, 1), (0, 2)), None),   # 3-D
    ((1, 200, 12, 12), (96, 200, 3, 3), ((1, 1), (1, 1)), None),     # k in passes
    ((1, 16, 1, 60), (24, 16, 1, 80), ((0, 0), (40, 40)), None),     # ONNX's 1-D, 80 taps
    ((2, 8, 50), (16, 8, 30), ((30, 30),), (3,)),                    # 1-D, 30 taps, dilated
    ((2, 8, 50), (16, 8, 90), ((45, 45),), None),                    # 1-D, 90 taps
]


STRIDED = [  # (x shape, w shape, padding, dilation, strides): 2-D windows through their
    # column planes where output rows round up to whole vectors by at most half, others
    # through the input's phases (below conv_to_gemm.MIN_FLOPS, where the alternative is
    # the direct loop kernel)
    ((1, 8, 32, 32), (32, 8, 3, 3), ((1, 1), (1, 1)), None, (2, 2)),     # ResNet's
    ((1, 8, 33, 31), (32, 8, 3, 3), ((1, 1), (1, 1)), None, (2, 2)),     # odd sizes
    ((1, 3, 64, 64), (32, 3, 3, 3), ((1, 1), (1, 1)), None, (2, 2)),     # MobileNet's
    ((2, 8, 30, 30), (16, 8, 5, 5), ((2, 2), (2, 2)), None, (3, 3)),     # stride 3: phases
    ((1, 8, 14, 14), (16, 8, 3, 3), ((1, 1), (1, 1)), None, (2, 2)),     # rows of 7: phases
    ((2, 8, 30, 30), (16, 8, 3, 3), ((2, 2), (2, 2)), (2, 2), (2, 2)),   # dilated
    ((1, 16, 32, 32), (16, 16, 4, 4), ((0, 0), (0, 0)), None, (2, 2)),   # k = 2 * taps
    ((1, 8, 25, 26), (16, 8, 3, 5), ((1, 0), (2, 2)), None, (2, 1)),     # mixed
    ((1, 8, 40, 38), (16, 8, 3, 3), ((0, 2), (1, -1)), None, (3, 2)),    # asymmetric, crop
    ((2, 32, 16, 16), (64, 32, 1, 1), ((0, 0), (0, 0)), None, (2, 2)),   # 1x1: a slice
    ((1, 16, 301), (32, 16, 7), ((3, 3),), None, (2,)),                  # 1-D: phases
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("xs,ws,padding,dilation,strides",
                         [c + (None,) for c in CASES] + STRIDED)
def test_in_place_conv_matches_reference(xs, ws, padding, dilation, strides, dtype):
    exe, y, _, _ = _compile_conv(xs, ws, padding, dilation, dtype, strides=strides)
    assert "window_view" in exe.dump("optimized")
    # a 1x1 window is a plain product of the image (the own nn kernel)
    form = "nnw" if np.prod(ws[2:]) > 1 else "nn"
    assert f"graphc_own_gemm_{form}_" in exe.dump("llvm")
    feeds = _feeds(xs, ws, dtype)
    want = _reference(y, feeds)
    tol = 2e-5 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(exe(**feeds), want, rtol=tol, atol=tol * np.abs(want).max())


@pytest.mark.parametrize("computed", [False, True])
@pytest.mark.parametrize("size", [32, 28])
def test_large_strided_convs_read_column_planes(size, computed):
    """A 3x3 window at stride 2 multiplies exactly its 9 taps: one loop kernel lays each
    padded row out as 3 column planes (output rows rounded up to 16: 14 -> 16, cut
    after), the product reads them in place, whether the input is stored or computed."""
    xs, ws = (2, 16, size, size), (32, 16, 3, 3)
    out, pw = size // 2, -(-size // 32) * 16
    with gc.Graph("planes"):
        x = gc.placeholder(xs, name="x")
        w = gc.placeholder(ws, name="w")
        y = _conv(gc.relu(x) + x if computed else x, w, ((1, 1), (1, 1)), strides=(2, 2))
        exe = gc.compile(y, inputs=[x, w])
        feeds = _feeds(xs, ws, "float32", seed=5)
        want = _reference(y, feeds)
    optimized = exe.dump("optimized")
    assert "window_view(%" in optimized and f"sizes=(3,3,{out},{pw})" in optimized
    assert "graphc_own_gemm_nnw_" in exe.dump("llvm")
    planes = 2 * 16 * (size + 2) * 3 * pw * 4
    assert planes in [b["bytes"] for b in exe.manifest()["memory"]["buffers"]]
    np.testing.assert_allclose(exe(**feeds), want, rtol=2e-5, atol=2e-5 * np.abs(want).max())


def test_large_strided_convs_with_short_rows_keep_the_patch_matrix():
    """Output rows of 7 would round up to 16: over a stored input such a window runs on
    the patch matrix (faster there than the phases' 16 products for 9), still exact."""
    xs, ws = (4, 32, 14, 14), (64, 32, 3, 3)
    exe, y, _, _ = _compile_conv(xs, ws, ((1, 1), (1, 1)), strides=(2, 2))
    assert "window_view" not in exe.dump("optimized")
    feeds = _feeds(xs, ws, "float32")
    want = _reference(y, feeds)
    np.testing.assert_allclose(exe(**feeds), want, rtol=2e-5, atol=2e-5 * np.abs(want).max())


@pytest.mark.parametrize("size,in_place", [(7, False), (8, True)])
def test_output_rows_shorter_than_a_vector_take_the_patch_matrix(size, in_place):
    """A 3x3 window over 7 x 7 outputs (ResNet-50's last stage) reads short strided rows
    in place: the patch matrix runs it 5x faster. From 8 positions a row, in place."""
    xs, ws = (1, 64, size, size), (64, 64, 3, 3)
    exe, y, _, _ = _compile_conv(xs, ws, ((1, 1), (1, 1)))
    assert ("window_view" in exe.dump("optimized")) == in_place
    feeds = _feeds(xs, ws, "float32")
    want = _reference(y, feeds)
    np.testing.assert_allclose(exe(**feeds), want, rtol=2e-5, atol=2e-5 * np.abs(want).max())


def test_large_strided_conv_of_a_computed_input_goes_through_the_phases():
    """Over a value a kernel computes (here relu(x) + x), the phases evaluate it once
    (output rows of 9: too short for column planes, long enough to read in place)."""
    xs, ws = (4, 32, 18, 18), (64, 32, 3, 3)
    with gc.Graph("phases"):
        x = gc.placeholder(xs, name="x")
        w = gc.placeholder(ws, name="w")
        y = _conv(gc.relu(x) + x, w, ((1, 1), (1, 1)), strides=(2, 2))
        exe = gc.compile(y, inputs=[x, w])
        assert "sizes=(2,2,2,2," in exe.dump("optimized")        # (q, r) taps per axis
        assert "graphc_own_gemm_nnw_" in exe.dump("llvm")
        feeds = _feeds(xs, ws, "float32", seed=7)
        want = _reference(y, feeds)
    np.testing.assert_allclose(exe(**feeds), want, rtol=2e-5, atol=2e-5 * np.abs(want).max())


@pytest.mark.parametrize("size", [32, 30])
def test_padded_input_is_written_once_not_the_patches(size):
    """The pad is the one loop kernel before the product; the window_view is read in
    place (fused into the product), so no buffer of the patches' size exists. Output
    rows of a multiple of 16 are written as they are (here straight into the result);
    others over the padded width (the wide grid), then cut: that wide product stays in
    the kernel's scratch, an image at a time, and takes no room in the arena."""
    xs, ws = (4, 32, size, size), (32, 32, 3, 3)
    exe, _, _, _ = _compile_conv(xs, ws, ((1, 1), (1, 1)))
    assert "read in place through a window_view" in exe.dump("fused")
    memory = exe.manifest()["memory"]
    padded = 4 * 32 * (size + 3) * (size + 2) * 4   # one extra row: the wide grid's slack
    assert [b["bytes"] for b in memory["buffers"]] == [padded]
    assert memory["arena_bytes"] < 4 * 32 * 9 * size * size * 4    # the patches' size


@pytest.mark.parametrize("xs,ws,strides", [((5, 16, 18, 18), (24, 16, 3, 3), (1, 1)),
                                            ((5, 2, 8, 8), (8, 2, 3, 3), (2, 2))])
def test_symbolic_batch_and_thread_counts_give_the_same_bits(xs, ws, strides):
    """Threads take whole images (or, for one image, rows / columns of the product)."""
    padding = ((1, 1), (1, 1))
    feeds = _feeds(xs, ws, "float32", seed=3)
    results = []
    for threads in (1, 2, 3):
        exe, y, _, _ = _compile_conv(xs, ws, padding, threads=threads, batch="batch",
                                     strides=strides)
        assert "graphc_own_gemm_nnw" in exe.dump("llvm")
        results.append(exe(**feeds))
        small = {"x": feeds["x"][:2], "w": feeds["w"]}
        np.testing.assert_allclose(exe(**small), _reference(y, small), rtol=2e-5, atol=1e-4)
    for r in results[1:]:
        np.testing.assert_array_equal(r, results[0])
    np.testing.assert_allclose(results[0], _reference(y, feeds), rtol=2e-5, atol=1e-4)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_strided_kernel_view_split_by_rows(threads):
    """A kernel read through a strided view (every other element of a larger buffer)
    and one image: threads split the product's rows."""
    xs, ws = (1, 8, 32, 32), (64, 8, 3, 3, 2)
    with gc.Graph("strided_kernel"):
        x = gc.placeholder(xs, name="x")
        w2 = gc.placeholder(ws, name="w")
        y = _conv(x, w2[..., 0], ((1, 1), (1, 1)))
        exe = gc.compile(y, inputs=[x, w2], num_threads=threads)
        assert "graphc_own_gemm_nnw_" in exe.dump("llvm")
        feeds = _feeds(xs, ws, "float32", seed=5)
        want = _reference(y, feeds)
    np.testing.assert_allclose(exe(**feeds), want, rtol=2e-5, atol=2e-5 * np.abs(want).max())


def test_gradients_of_an_in_place_conv_compiled():
    """Training through it: d/dx (a stride-1 conv itself: in place) and d/dw, compiled,
    against the reference interpreter's gradients."""
    xs, ws = (2, 16, 16, 16), (24, 16, 3, 3)
    with gc.Graph("conv_grad"):
        x = gc.placeholder(xs, "float64", name="x")
        w = gc.placeholder(ws, "float64", name="w")
        y = _conv(x, w, ((1, 1), (1, 1)))
        r = gc.constant(np.random.default_rng(1).uniform(0.5, 1.5, y.shape))
        loss = (gc.tanh(y) * r).sum()
        gx, gw = gc.grad(loss, [x, w])
        exe = gc.compile({"gx": gx, "gw": gw}, inputs=[x, w], winograd=False)
        assert "graphc_own_gemm_nnw" in exe.dump("llvm")
        feeds = _feeds(xs, ws, "float64", seed=2)
        got = exe(**feeds)
        want = gc.evaluate({"gx": gx, "gw": gw}, feeds)
    for k in ("gx", "gw"):
        np.testing.assert_allclose(got[k], want[k], rtol=1e-10, atol=1e-10)


def test_window_view_primitive_reference_and_compiled():
    with gc.Graph("window_view"):
        x = gc.placeholder((2, 3, 20), "float64", name="x")
        v = bind("window_view", x, sizes=(3, 2, 9), strides=(5, 1, 1))
        exe = gc.compile(v * 2.0, inputs=[x])
        xv = np.random.default_rng(0).standard_normal((2, 3, 20))
        want = np.lib.stride_tricks.as_strided(xv, shape=(2, 3, 3, 2, 9),
                                               strides=xv.strides[:2] + (40, 8, 8))
        np.testing.assert_array_equal(gc.evaluate(v, {"x": xv}), want)
        np.testing.assert_array_equal(exe(x=xv), 2 * want)


def test_window_view_gradient_matches_finite_differences():
    check_grad(lambda x: bind("window_view", x, sizes=(2, 3, 4), strides=(4, 1, 1)) ** 2,
               {"x": np.random.default_rng(0).standard_normal((3, 12))})


def test_window_view_refuses_reads_past_the_axis():
    with gc.Graph("window_view_bad"):
        x = gc.placeholder((2, 20), name="x")
        with pytest.raises(gc.ShapeError, match="reads position 20 of the last axis"):
            bind("window_view", x, sizes=(3, 2, 10), strides=(5, 1, 1))
        with pytest.raises(gc.ShapeError, match="one stride per size"):
            bind("window_view", x, sizes=(3, 2), strides=(5,))
        with pytest.raises(gc.ShapeError, match="strides >= 0"):
            bind("window_view", x, sizes=(3,), strides=(-1,))


@pytest.mark.parametrize("batch,threads,mid", [(1, 2, 32), (3, 2, 32), (1, 3, 4), (2, 1, 32)])
def test_padded_epilogue_writes_the_next_convolutions_input(batch, threads, mid):
    """conv -> bias -> relu -> conv: the first product's epilogue writes the relu inside
    the second convolution's padded input (asymmetric here) and its fills the border:
    no padding kernel. Per batch index, per split of the rows (channels) or columns
    (mid = 4: few rows); bitwise the same on 1 thread and with the arena poisoned."""
    rng = np.random.default_rng(4)
    xs = (batch, 16, 16, 16)
    with gc.Graph("padded_epilogue"):
        x = gc.placeholder(xs, name="x")
        w1 = gc.constant(rng.standard_normal((mid, 16, 3, 3)).astype(np.float32) * 0.2)
        b1 = gc.constant(rng.standard_normal(mid).astype(np.float32))
        w2 = gc.constant(rng.standard_normal((8, mid, 3, 3)).astype(np.float32) * 0.2)
        h = gc.relu(_conv(x, w1, ((1, 1), (1, 1))) + b1.reshape((1, mid, 1, 1)))
        y = _conv(h, w2, ((2, 1), (0, 3)))
        exe = gc.compile(y, num_threads=threads)
        one = gc.compile(y, num_threads=1)
        feeds = {"x": rng.standard_normal(xs).astype(np.float32)}
        want = _reference(y, feeds)
    groups = [line for line in exe.dump("fused").splitlines() if line.startswith("group")]
    assert any("[dot]" in g and ":pad" in g and ":max" in g for g in groups)
    assert not any("[loop]" in g and ":max" in g for g in groups)
    got = exe(**feeds)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5 * np.abs(want).max())
    np.testing.assert_array_equal(got, one(**feeds))
    exe._native.poison_arena = True
    np.testing.assert_array_equal(exe(**feeds), got)


def test_product_read_by_its_epilogue_alone_stays_in_a_scratch():
    """relu(conv(x) + b + r): the product is read by its epilogue only, so each image's
    product lives in a scratch of one image's size (a stack buffer in the kernel), not
    in the arena buffer of all images; same results, on any thread count."""
    rng = np.random.default_rng(6)
    xs, ws = (3, 16, 32, 32), (32, 16, 3, 3)
    with gc.Graph("scratch"):
        x = gc.placeholder(xs, name="x")
        r = gc.placeholder((3, 32, 32, 32), name="r")
        w = gc.constant(rng.standard_normal(ws).astype(np.float32) * 0.2)
        b = gc.constant(rng.standard_normal(32).astype(np.float32))
        y = gc.relu(_conv(x, w, ((1, 1), (1, 1))) + b.reshape((1, 32, 1, 1)) + r)
        exes = [gc.compile(y, num_threads=t) for t in (1, 2)]
        feeds = {"x": rng.standard_normal(xs).astype(np.float32),
                 "r": rng.standard_normal((3, 32, 32, 32)).astype(np.float32)}
        want = _reference(y, feeds)
    import re
    assert re.search(r"alloca (\[32768 x float\]|float, i64 32768)", exes[1].dump("llvm"))
    got = [e(**feeds) for e in exes]
    np.testing.assert_allclose(got[1], want, rtol=2e-5, atol=2e-5 * np.abs(want).max())
    np.testing.assert_array_equal(got[0], got[1])


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_padded_epilogue_of_a_product_run_block_by_block(threads):
    """A 1x1 convolution whose product (64 x 2304, 590 KB an image) exceeds a scratch
    runs by blocks of image rows, each block's epilogue writing its rows inside the next
    convolution's padded input; the borders once. Against the reference, bitwise the
    same on any thread count and with the arena poisoned."""
    rng = np.random.default_rng(9)
    xs = (2, 256, 48, 48)
    with gc.Graph("padded_blocks"):
        x = gc.placeholder(xs, name="x")
        w1 = gc.constant(rng.standard_normal((64, 256, 1, 1)).astype(np.float32) * 0.1)
        w2 = gc.constant(rng.standard_normal((8, 64, 3, 3)).astype(np.float32) * 0.2)
        h = gc.relu(_conv(x, w1, ((0, 0), (0, 0))))
        y = _conv(h, w2, ((2, 1), (0, 3)))
        exe = gc.compile(y, num_threads=threads, winograd=False)
        one = gc.compile(y, num_threads=1, winograd=False)
        feeds = {"x": rng.standard_normal(xs).astype(np.float32)}
        want = _reference(y, feeds)
    # one block of 21 image rows of 48 columns, 64 channels, in the kernel's scratch
    assert re.search(r"alloca (\[64512 x float\]|float, i64 64512)", exe.dump("llvm"))
    got = exe(**feeds)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5 * np.abs(want).max())
    np.testing.assert_array_equal(got, one(**feeds))
    exe._native.poison_arena = True
    np.testing.assert_array_equal(exe(**feeds), got)


@pytest.mark.parametrize("threads", [1, 2])
def test_residual_sum_of_a_product_takes_the_dying_residuals_memory(threads):
    """relu(conv(x) + b + r), r another product's result that dies there (and the next
    convolution reads the sum): the sum is written over r (each line read and written
    once), same results."""
    rng = np.random.default_rng(10)
    xs = (2, 32, 40, 40)
    with gc.Graph("residual_in_place"):
        x = gc.placeholder(xs, name="x")
        w1 = gc.constant(rng.standard_normal((128, 32, 1, 1)).astype(np.float32) * 0.2)
        w2 = gc.constant(rng.standard_normal((128, 32, 1, 1)).astype(np.float32) * 0.2)
        b = gc.constant(rng.standard_normal(128).astype(np.float32))
        r = gc.relu(_conv(x, w2, ((0, 0), (0, 0))))
        w3 = gc.constant(rng.standard_normal((16, 128, 1, 1)).astype(np.float32) * 0.2)
        y = gc.relu(_conv(x, w1, ((0, 0), (0, 0))) + b.reshape((1, 128, 1, 1)) + r)
        z = _conv(y, w3, ((0, 0), (0, 0)))
        exe = gc.compile(z, num_threads=threads)
        feeds = {"x": rng.standard_normal(xs).astype(np.float32)}
        want = _reference(z, feeds)
    assert "in place:" in exe.dump("memory")
    got = exe(**feeds)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5 * np.abs(want).max())
    exe._native.poison_arena = True
    np.testing.assert_array_equal(exe(**feeds), got)


def test_padded_epilogue_of_a_product_split_along_its_columns():
    """pad(relu(x @ w)) along the columns, with a fill value: the product splits along
    its columns (4 rows), each chunk writes its columns inside the padded result and
    the chunk from column 0 the border; bitwise the same on one thread."""
    rng = np.random.default_rng(8)
    with gc.Graph("columns"):
        x = gc.placeholder((4, 64), name="x")
        w = gc.constant(rng.standard_normal((64, 4096)).astype(np.float32))
        y = gc.pad(gc.relu(x @ w), ((0, 0), (2, 3)), constant_values=1.5)
        exes = [gc.compile(y, num_threads=t) for t in (1, 2)]
        feeds = {"x": rng.standard_normal((4, 64)).astype(np.float32)}
        want = _reference(y, feeds)
    fused = exes[1].dump("fused")
    assert any("[dot]" in g and ":pad" in g for g in fused.splitlines())
    got = exes[1](**feeds)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5 * np.abs(want).max())
    np.testing.assert_array_equal(got, exes[0](**feeds))
    exes[1]._native.poison_arena = True
    np.testing.assert_array_equal(exes[1](**feeds), got)


@pytest.mark.parametrize("dtype", ["int32", "float16"])
def test_padded_epilogue_of_a_loop_nest_product(dtype):
    """Products graphc runs as loop nests (integers, half floats) write a padded
    epilogue the same way: per row of the product, border included."""
    rng = np.random.default_rng(9)
    with gc.Graph("nest"):
        x = gc.placeholder((64, 20), dtype, name="x")
        w = gc.placeholder((20, 160), dtype, name="w")
        y = gc.pad(gc.relu(x @ w), ((0, 0), (1, 2)), constant_values=3)
        exes = [gc.compile(y, num_threads=t) for t in (1, 2)]
        feeds = {"x": rng.integers(-3, 3, (64, 20)).astype(dtype),
                 "w": rng.integers(-3, 3, (20, 160)).astype(dtype)}
        want = _reference(y, feeds)
    assert any("[dot]" in g and ":pad" in g for g in exes[1].dump("fused").splitlines())
    for e in exes:
        np.testing.assert_array_equal(e(**feeds), want)


def test_a_filter_gradient_over_output_positions_is_read_in_order_by_its_update():
    """The filter gradient of a 3 x 3 convolution over 7 x 7 images is a convolution with
    a 7 x 7 window and 3 x 3 outputs, run as a product per output position. Its result
    comes out (O, C, 3, 3)-ordered, so the momentum update reads it in order; compiled
    against the reference."""
    rng = np.random.default_rng(11)
    with gc.Graph("filter_grad"):
        x = gc.placeholder((4, 32, 7, 7), name="x")
        w = gc.variable((rng.standard_normal((48, 32, 3, 3)) * 0.1).astype(np.float32),
                        name="w")
        y = _conv(x, w, ((1, 1), (1, 1)))
        loss = (y * y).mean()
        (gw,) = gc.grad(loss, [w])
        exe = gc.compile({"gw": gw})
        text = exe.dump("optimized")
        feeds = {"x": rng.standard_normal((4, 32, 7, 7)).astype(np.float32)}
        want = gc.evaluate(gw, feeds)
    # the product is (O, C * 3 * 3): the rows are the gradient's rows
    assert re.search(r"dot_general\(.*: f32\[48,288\]", text)
    got = exe(**feeds)["gw"]
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5 * np.abs(want).max())


def test_a_stem_filter_gradient_copies_one_window_view_not_a_slice_per_position():
    """A 7 x 7 stride-2 stem's filter gradient has 49 output positions: its patches are
    one copy of a window view (one loop nest) instead of 49 concatenated slices (7,567
    lines of IR at 224 x 224); compiled against the reference."""
    rng = np.random.default_rng(12)
    with gc.Graph("stem_grad"):
        x = gc.placeholder((2, 3, 32, 32), name="x")
        w = gc.variable((rng.standard_normal((16, 3, 7, 7)) * 0.1).astype(np.float32),
                        name="w")
        y = bind("conv", x, w, window_strides=(2, 2), padding=((3, 3), (3, 3)),
                 lhs_dilation=(1, 1), rhs_dilation=(1, 1), feature_group_count=1)
        (gw,) = gc.grad((y * y).mean(), [w])
        exe = gc.compile({"gw": gw})
        text = exe.dump("optimized")
        feeds = {"x": rng.standard_normal((2, 3, 32, 32)).astype(np.float32)}
        want = gc.evaluate(gw, feeds)
    widest = max((line.split("{")[0].count("%") - 1 for line in text.splitlines()
                  if " concatenate(" in line), default=0)
    assert "window_view" in text and widest < 49          # (the forward's planes: 7)
    got = exe(**feeds)["gw"]
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5 * np.abs(want).max())


@pytest.mark.parametrize("strides", [(1,), (2,)])
def test_windows_over_a_large_input_take_the_patch_matrix(strides):
    """A window over an input of more than IN_PLACE_MAX_INPUT bytes an image (here 64
    channels of 9,000 samples, 2.3 MB) runs on the patch matrix: the windowed kernel
    would fetch its rows of B from memory for every block of rows of C. Exact either way."""
    import importlib
    limit = importlib.import_module("graphc.passes.conv_to_gemm").IN_PLACE_MAX_INPUT
    assert 64 * 4000 * 4 <= limit < 64 * 9000 * 4
    xs, ws = (1, 64, 9000), (32, 64, 3)
    exe, y, _, _ = _compile_conv(xs, ws, ((1, 1),), strides=strides)
    assert "window_view" not in exe.dump("optimized")
    feeds = _feeds(xs, ws, "float32")
    want = _reference(y, feeds)
    np.testing.assert_allclose(exe(**feeds), want, rtol=2e-5, atol=2e-5 * np.abs(want).max())
    if strides == (1,):        # (strided over a stored input: the patch matrix anyway)
        small, _, _, _ = _compile_conv((1, 64, 4000), ws, ((1, 1),), strides=strides)
        assert "window_view" in small.dump("optimized")      # 1 MB: read in place
