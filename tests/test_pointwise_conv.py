"""1x1 convolutions as one product over each image (dot_plan.merged_columns): the
product's result keeps the image's rows and columns, B and C read them as one run of
columns, so bias, activation, a residual sum and the next convolution's padding run in
the product's epilogue whatever the image's size. Compiled results against the
reference interpreter, the same bits for any thread count (threads split the images,
or at batch 1 an image's rows), and gradients."""
import numpy as np
import pytest

import graphc as gc

from test_layout_epilogue import _conv, _pointwise_then_depthwise


def _dot_groups(exe) -> list:
    return [g for g in exe.dump("fused").splitlines() if g.startswith("group") and "[dot]" in g]


@pytest.mark.parametrize("batch,size,threads,channels", [
    (2, 72, 2, 32),     # an image's product over the layout epilogues' 512 KB: padded
    (1, 72, 3, 32),     # batch 1: threads share the image by its rows (72 columns each)
    (1, 50, 2, 32),     # rows of 50: chunks of whole vectors (8 rows) but the last
    (3, 13, 2, 32),     # odd rows, an odd batch
    (2, 7, 3, 64),      # rows shorter than a vector
])
def test_pointwise_product_writes_the_padded_input(batch, size, threads, channels):
    rng = np.random.default_rng(size)
    with gc.Graph("pointwise"):
        y, feeds = _pointwise_then_depthwise(batch, 1, rng, cin=channels // 4,
                                             cout=channels, size=size)
        exes = {t: gc.compile(y, num_threads=t) for t in sorted({1, threads})}
        want = gc.evaluate(y, feeds)
    exe = exes[threads]
    dot = _dot_groups(exe)
    assert len(dot) == 1 and "pad" in dot[0], dot      # bias, ReLU6, padding: one kernel
    assert "graphc_own_gemm_nn_" in exe.dump("llvm")   # one run of columns, no window
    got = exe(**feeds)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5 * np.abs(want).max())
    np.testing.assert_array_equal(got, exes[1](**feeds))


@pytest.mark.parametrize("size,batch", [(14, 2), (28, 1), (9, 3)])
def test_residual_epilogue_over_short_rows(size, batch):
    """bias + residual over images of short rows (14, 9): the epilogue's loop runs over
    the whole image as one run (dot_plan.flat_epilogue)."""
    rng = np.random.default_rng(7)
    xs, rs = (batch, 48, size, size), (batch, 24, size, size)
    with gc.Graph("residual"):
        x = gc.placeholder(xs, name="x")
        r = gc.placeholder(rs, name="r")
        w = gc.constant(rng.standard_normal((24, 48, 1, 1)).astype(np.float32) * 0.2)
        b = gc.constant(rng.standard_normal(24).astype(np.float32))
        y = gc.relu(_conv(x, w, pad=0) + b.reshape((1, 24, 1, 1)) + r)
        exes = {t: gc.compile(y, num_threads=t) for t in (1, 2, 3)}
        feeds = {"x": rng.standard_normal(xs).astype(np.float32),
                 "r": rng.standard_normal(rs).astype(np.float32)}
        want = gc.evaluate(y, feeds)
    assert len(_dot_groups(exes[2])) == 1 and exes[2].stats["kernels"] == 1
    got = exes[2](**feeds)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5 * np.abs(want).max())
    for t in (1, 3):
        np.testing.assert_array_equal(exes[t](**feeds), got)


def _gradients_against_reference(xs, ws, seed):
    """The data, filter and bias gradients of tanh(1x1 convolution + bias) over inputs
    of shape xs and filters ws, compiled, against the reference in float64; returns the
    executable."""
    rng = np.random.default_rng(seed)
    out = ws[0]
    with gc.Graph("pointwise_grad"):
        x = gc.placeholder(xs, "float64", name="x")
        w = gc.placeholder(ws, "float64", name="w")
        b = gc.placeholder((out,), "float64", name="b")
        y = gc.tanh(_conv(x, w, pad=0) + b.reshape((1, out, 1, 1)))
        loss = (y * y).sum()
        grads = gc.grad(loss, [x, w, b])
        exe = gc.compile(grads, inputs=[x, w, b])
        feeds = {"x": rng.standard_normal(xs), "w": rng.standard_normal(ws) * 0.3,
                 "b": rng.standard_normal(out)}
        want = gc.evaluate(grads, feeds)
    for got, ref in zip(exe(**feeds), want):
        np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-10 * np.abs(ref).max())
    return exe


def test_pointwise_gradients_match_the_reference():
    """The data and filter gradients of a 1x1 convolution (their products over the
    image's merged columns too), compiled, against the reference in float64."""
    _gradients_against_reference((2, 12, 10, 10), (20, 12, 1, 1), seed=3)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("batch,cin,cout", [(1, 96, 24), (3, 24, 96), (2, 1152, 48)])
def test_one_position_convolutions_run_as_products(batch, cin, cout, dtype):
    """A 1x1 convolution over 1 x 1 images (squeeze-and-excitation after a global pool):
    the product of the images' channel vectors with the filter's rows, its bias and
    activation in the product's kernel; against the reference, the same bits for any
    thread count."""
    rng = np.random.default_rng(cin)
    with gc.Graph("one_position"):
        x = gc.placeholder((batch, cin, 1, 1), dtype, name="x")
        w = gc.constant((rng.standard_normal((cout, cin, 1, 1)) * 0.1).astype(dtype))
        b = gc.constant(rng.standard_normal(cout).astype(dtype))
        h = _conv(x, w, pad=0) + b.reshape((1, cout, 1, 1))
        y = h * gc.sigmoid(h)
        exes = {t: gc.compile(y, num_threads=t) for t in (1, 3)}
        feeds = {"x": rng.standard_normal((batch, cin, 1, 1)).astype(dtype)}
        want = gc.evaluate(y, feeds)
    optimized = exes[3].dump("optimized")
    assert " conv(" not in optimized and "dot_general(" in optimized
    got = exes[3](**feeds)
    tol = 2e-5 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * np.abs(want).max())
    np.testing.assert_array_equal(exes[1](**feeds), got)
    if batch == 1:                        # the activation joins the product's kernel
        assert len(exes[3].manifest()["kernels"]) == 1


def test_one_position_gradients_match_the_reference():
    """The data, filter and bias gradients of a convolution of one position (each a
    product, no direct convolution left), compiled, against the reference in float64."""
    exe = _gradients_against_reference((3, 40, 1, 1), (16, 40, 1, 1), seed=5)
    assert " conv(" not in exe.dump("optimized")
