"""3x3 filter gradients by Winograd's F(3x3, 2x2) (passes/conv_winograd_grad.py): compiled
gradients against the reference interpreter and float64 finite differences, which
convolutions take the rewrite, and the same bits for any thread count."""
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import graphc as gc
from graphc.api import bind
from graphc.passes.conv_patches import MAX_PATCH_BYTES
from graphc.passes.conv_winograd_grad import gradient_fits


def _conv(x, w, padding=((1, 1), (1, 1)), strides=(1, 1), dilation=(1, 1), groups=1):
    return bind("conv", x, w, window_strides=strides, padding=padding,
                lhs_dilation=(1, 1), rhs_dilation=dilation, feature_group_count=groups)


def _filter_gradient(xs, ws, dtype, padding=((1, 1), (1, 1)), threads=None, **kw):
    """(the compiled executable, its graph's loss and filter gradient) of
    sum(tanh(conv(x, w)) * r)."""
    rng = np.random.default_rng(3)
    x = gc.placeholder(xs, dtype, name="x")
    w = gc.placeholder(ws, dtype, name="w")
    y = _conv(x, w, padding, **kw)
    r = gc.constant(rng.uniform(0.5, 1.5, y.shape).astype(dtype))
    loss = (gc.tanh(y) * r).sum()
    gw, = gc.grad(loss, [w])
    exe = gc.compile({"loss": loss, "gw": gw}, inputs=[x, w], num_threads=threads)
    return exe, loss, gw


def _transformed(exe) -> bool:
    """Whether the program has the product of the 16 transformed positions: batched
    over them, contracting the tiles."""
    return "{lhs_contracting=(2,), rhs_contracting=(2,), lhs_batch=(0,), rhs_batch=(0,)} " \
        ": f" in exe.dump("optimized")


@pytest.mark.parametrize("xs,o,padding", [
    ((2, 16, 16, 16), 24, ((1, 1), (1, 1))),      # a ResNet block's 3x3
    ((4, 20, 18, 10), 16, ((0, 0), (0, 0))),      # no padding: a 16 x 8 gradient window
    ((2, 16, 16, 16), 32, ((2, 0), (1, 1))),      # asymmetric padding
])
def test_filter_gradient_matches_the_reference(xs, o, padding):
    ws = (o, xs[1], 3, 3)
    rng = np.random.default_rng(1)
    with gc.Graph("wgrad"):
        exe, loss, gw = _filter_gradient(xs, ws, "float64", padding)
        assert _transformed(exe)
        feeds = {"x": rng.standard_normal(xs), "w": rng.standard_normal(ws) * 0.2}
        got = exe(**feeds)
        want = gc.evaluate({"loss": loss, "gw": gw}, feeds)
    np.testing.assert_allclose(got["gw"], want["gw"], rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(got["loss"], want["loss"], rtol=1e-12)


def test_filter_gradient_against_finite_differences():
    xs, ws = (2, 16, 16, 16), (16, 16, 3, 3)
    rng = np.random.default_rng(2)
    feeds = {"x": rng.standard_normal(xs), "w": rng.standard_normal(ws) * 0.2}
    with gc.Graph("fd"):
        exe, _, _ = _filter_gradient(xs, ws, "float64")
    assert _transformed(exe)
    gw = exe(**feeds)["gw"]
    eps = 1e-6
    for idx in [(0, 0, 0, 0), (3, 7, 1, 2), (15, 15, 2, 2), (8, 1, 0, 1)]:
        plus, minus = dict(feeds, w=feeds["w"].copy()), dict(feeds, w=feeds["w"].copy())
        plus["w"][idx] += eps
        minus["w"][idx] -= eps
        fd = (exe(**plus)["loss"] - exe(**minus)["loss"]) / (2 * eps)
        assert abs(fd - gw[idx]) <= 1e-6 * max(1.0, abs(fd)), (idx, fd, gw[idx])


def test_float32_same_bits_for_any_thread_count():
    xs, ws = (4, 32, 16, 16), (32, 32, 3, 3)
    rng = np.random.default_rng(5)
    feeds = {"x": rng.standard_normal(xs).astype(np.float32),
             "w": (rng.standard_normal(ws) * 0.1).astype(np.float32)}
    with gc.Graph("threads"):
        x = gc.placeholder(xs, name="x")
        w = gc.placeholder(ws, name="w")
        gw, = gc.grad((gc.tanh(_conv(x, w)) * 0.5).sum(), [w])
        outs = []
        for threads in (1, 2, 3):
            exe = gc.compile(gw, inputs=[x, w], num_threads=threads)
            assert _transformed(exe)
            outs.append(exe(**feeds))
        want = gc.evaluate(gw, feeds)
    np.testing.assert_allclose(outs[0], want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
    for got in outs[1:]:
        np.testing.assert_array_equal(got, outs[0])


def test_which_filter_gradients_take_it():
    """Only 3x3 filters at stride 1 without dilation, one group, 16 channels in and out
    and even output sizes (the gradient's window); the compile option turns it off."""
    def fits(xs, ws, padding=((1, 1), (1, 1)), **kw):
        with gc.Graph("fits"):
            return _transformed(_filter_gradient(xs, ws, "float32", padding, **kw)[0])
    assert fits((4, 16, 16, 16), (16, 16, 3, 3))
    assert not fits((4, 16, 15, 15), (16, 16, 3, 3))                    # odd outputs
    assert not fits((4, 8, 16, 16), (16, 8, 3, 3))                      # 8 channels in
    assert not fits((4, 16, 16, 16), (16, 16, 5, 5), ((2, 2), (2, 2)))
    assert not fits((4, 16, 32, 32), (16, 16, 3, 3), strides=(2, 2))
    assert not fits((4, 16, 16, 16), (16, 16, 3, 3), ((2, 2), (2, 2)), dilation=(2, 2))
    with gc.Graph("off"):
        x = gc.placeholder((4, 16, 16, 16), name="x")
        w = gc.placeholder((16, 16, 3, 3), name="w")
        gw, = gc.grad((gc.tanh(_conv(x, w)) * 1.5).sum(), [w])
        assert _transformed(gc.compile(gw, inputs=[x, w]))
        assert not _transformed(gc.compile(gw, inputs=[x, w], winograd=False))


def test_fits_bounds_the_transformed_operands():
    with gc.Graph("bound"):
        xp = gc.placeholder((64, 32, 58, 58), name="xp")       # images as channels
        g = gc.placeholder((64, 32, 56, 56), name="g")         # the output gradient
        node = _conv(xp, g, padding=((0, 0), (0, 0))).node
    assert node.shape == (64, 64, 3, 3)
    transformed = 16 * (64 + 64) * 32 * 28 * 28 * 4
    assert gradient_fits(node, xp.node, g.node, transformed)
    assert not gradient_fits(node, xp.node, g.node, transformed - 1)
    assert transformed <= MAX_PATCH_BYTES


@settings(max_examples=10, deadline=None)
@given(n=st.integers(1, 3), c=st.sampled_from([16, 24]), o=st.sampled_from([16, 32]),
       h=st.integers(3, 9), w=st.integers(3, 9),
       pads=st.tuples(*[st.integers(0, 2)] * 4), seed=st.integers(0, 2 ** 16))
def test_random_filter_gradients_match_the_reference(n, c, o, h, w, pads, seed):
    """Random sizes and paddings (even output sizes: the rewrite's): the compiled
    gradient equals the reference interpreter's in float64."""
    padding = ((pads[0], pads[1]), (pads[2], pads[3]))
    oh, ow = 2 * h + pads[0] + pads[1] - 2, 2 * w + pads[2] + pads[3] - 2
    assume(oh % 2 == 0 and ow % 2 == 0 and oh > 0 and ow > 0)
    xs, ws = (n, c, 2 * h, 2 * w), (o, c, 3, 3)
    rng = np.random.default_rng(seed)
    feeds = {"x": rng.standard_normal(xs), "w": rng.standard_normal(ws) * 0.2}
    with gc.Graph("random"):
        exe, loss, gw = _filter_gradient(xs, ws, "float64", padding)
        want = gc.evaluate(gw, feeds)
    flops = c * o * 9 * n * oh * ow
    assert _transformed(exe) == (flops >= 1 << 20)
    np.testing.assert_allclose(exe(**feeds)["gw"], want, rtol=1e-10, atol=1e-10)
