"""Convolutions over a dilated input (a strided convolution's data gradient,
ConvTranspose) run as one stride-1 convolution per output phase
(passes/conv_input_dilated.py): checked against the reference on odd sizes, paddings
(negative too), strides per dimension, windows narrower than the stride, 1-D and 2-D."""
import numpy as np
import pytest

import graphc as gc
from graphc.api import bind


def _conv(x, w, s, pad):
    return bind("conv", x, w, window_strides=(1,) * len(s), padding=pad, lhs_dilation=s,
                rhs_dilation=(1,) * len(s), feature_group_count=1)


@pytest.mark.parametrize("xs,ws,s,pad", [
    ((2, 8, 9, 9), (6, 8, 3, 3), (2, 2), ((2, 2), (2, 2))),
    ((1, 4, 7, 6), (5, 4, 3, 3), (2, 2), ((1, 2), (2, 1))),
    ((2, 3, 5, 5), (4, 3, 1, 1), (2, 2), ((0, 1), (0, 1))),       # window < stride
    ((1, 4, 6, 6), (3, 4, 4, 4), (2, 2), ((2, 2), (2, 2))),
    ((1, 4, 6, 6), (3, 4, 5, 5), (3, 2), ((4, 3), (3, 3))),
    ((2, 4, 10), (3, 4, 4), (2,), ((3, 2),)),
    ((1, 2, 5, 5), (2, 2, 3, 3), (2, 2), ((0, 0), (-1, 1))),       # a crop
    ((2, 32, 14, 14), (32, 32, 3, 3), (2, 2), ((2, 2), (2, 2))),   # large: products
])
def test_phases_match_the_reference(xs, ws, s, pad):
    rng = np.random.default_rng(sum(xs))
    xv = rng.standard_normal(xs).astype(np.float32)
    wv = rng.standard_normal(ws).astype(np.float32)
    with gc.Graph():
        x, w = gc.placeholder(xs, name="x"), gc.placeholder(ws, name="w")
        y = _conv(x, w, s, pad)
        exe = gc.compile(y)
        want = gc.evaluate(y, {"x": xv, "w": wv})
    np.testing.assert_allclose(exe(xv, wv), want, rtol=1e-5, atol=1e-4)
    optimized = exe.dump("optimized")
    assert "lhs_dilation=(1" in optimized or "dot_general" in optimized
    assert not any(f"lhs_dilation=({d}" in optimized for d in (2, 3))


def test_a_strided_convolutions_data_gradient_runs_as_products():
    """The data gradient of a 3 x 3 stride-2 convolution is a product per phase (it was
    a direct loop kernel at 12 GFLOP/s: 310 ms of a ResNet-18-sized step)."""
    rng = np.random.default_rng(1)
    xv = rng.standard_normal((2, 32, 16, 16)).astype(np.float32)
    w0 = (rng.standard_normal((64, 32, 3, 3)) * 0.1).astype(np.float32)
    with gc.Graph():
        x = gc.placeholder(xv.shape, name="x")
        w = gc.variable(w0, name="w")
        loss = gc.sum(gc.nn.conv2d(x, w, stride=2, padding=1) ** 2)
        (gx,) = gc.grad(loss, [x])
        exe = gc.compile(gx)
        want = gc.evaluate(gx, {"x": xv})
    np.testing.assert_allclose(exe(xv), want, rtol=1e-4, atol=1e-3)
    kinds = {r["kind"] for r in exe.profile(2, x=xv).rows}
    assert "conv" not in kinds and "dot" in kinds, kinds
