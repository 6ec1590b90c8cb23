"""Grouped convolutions (1 < groups < channels) as one product per image and group over
their input read in place, or per group over a patch matrix (passes/conv_grouped.py):
results against the reference interpreter, forward and gradients, and which
convolutions take which path."""
import numpy as np
import pytest

import graphc as gc
from graphc.api import bind

from compiled import check_compiled

CASES = [  # x shape, w shape, groups, strides, padding, dilation
    ((1, 96, 49), (96, 12, 32), 8, (1,), ((16, 16),), (1,)),         # wav2vec2-like 1-D
    ((2, 64, 13, 11), (64, 16, 3, 3), 4, (1, 1), ((1, 1), (1, 1)), (1, 1)),
    ((2, 64, 14, 14), (128, 8, 3, 3), 8, (2, 2), ((1, 0), (2, 1)), (1, 1)),   # Og 16
    ((1, 32, 12, 12), (32, 16, 3, 3), 2, (1, 1), ((2, 2), (2, 2)), (2, 2)),
    ((1, 48, 10, 9), (48, 8, 1, 1), 6, (1, 1), ((0, 0), (0, 0)), (1, 1)),
    ((1, 32, 9, 9), (32, 16, 3, 3), 2, (1, 1), ((-1, 1), (0, -1)), (1, 1)),  # crops
]


def _conv(x, w, groups, strides, padding, dilation):
    return bind("conv", x, w, window_strides=strides, padding=padding,
                lhs_dilation=(1,) * len(strides), rhs_dilation=dilation,
                feature_group_count=groups)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_grouped_convolutions_match_the_reference(case, dtype):
    xs, ws, groups, strides, padding, dilation = CASES[case]
    rng = np.random.default_rng(case)
    with gc.Graph(f"grouped{case}"):
        x = gc.placeholder(xs, dtype, name="x")
        w = gc.constant((rng.standard_normal(ws) * 0.1).astype(dtype))
        y = gc.relu(_conv(x, w, groups, strides, padding, dilation)) + 0.5
        exe = check_compiled(y, {"x": rng.standard_normal(xs).astype(dtype)})
    optimized = exe.dump("optimized")
    assert "dot_general(" in optimized and " conv(" not in optimized


def test_gradients_through_a_grouped_convolution():
    rng = np.random.default_rng(7)
    xs, ws = (8, 32, 10, 10), (64, 8, 3, 3)
    with gc.Graph("grouped_grad"):
        x = gc.placeholder(xs, "float64", name="x")
        w = gc.placeholder(ws, "float64", name="w")
        y = _conv(x, w, 4, (1, 1), ((1, 1), (1, 1)), (1, 1))
        r = gc.constant(rng.uniform(0.5, 1.5, (8, 64, 10, 10)))
        gx, gw = gc.grad((y * r).sum(), [x, w])
        exe = check_compiled([gx, gw], {"x": rng.standard_normal(xs),
                                        "w": rng.standard_normal(ws) * 0.1})
    # the data gradient (groups 4, 16 channels each) and the filter gradient (groups 4,
    # the batch of 8 as each group's channels) both run as products
    assert " conv(" not in exe.dump("optimized")


def test_narrow_groups_and_depthwise_keep_their_kernels():
    rng = np.random.default_rng(3)
    with gc.Graph("narrow"):
        x = gc.placeholder((1, 32, 8, 8), name="x")
        w = gc.constant(rng.standard_normal((32, 2, 3, 3)).astype(np.float32))
        y = _conv(x, w, 16, (1, 1), ((1, 1), (1, 1)), (1, 1))    # 2 channels a group
        exe = check_compiled(y, {"x": rng.standard_normal((1, 32, 8, 8)).astype(np.float32)})
    assert " conv(" in exe.dump("optimized")


IN_PLACE = [  # x shape, w shape, groups, strides, padding: read in place by the products
    ((2, 64, 13, 11), (64, 16, 3, 3), 4, (1, 1), ((1, 1), (1, 1))),     # stride 1
    ((2, 64, 28, 28), (96, 8, 3, 3), 8, (2, 2), ((1, 1), (1, 1))),     # column planes
    ((3, 32, 20), (64, 4, 5), 8, (1,), ((2, 2),)),                      # 1-D, 8 a group
    ((1, 32, 9, 12), (32, 8, 3, 3), 4, (1, 1), ((-1, 2), (0, 1))),     # crops and pads
    # wav2vec2's positional convolution as ONNX's importer gives it (2-D, one row tall),
    # 128 taps: exactly the output's 50 columns, no wide ones cut after
    ((1, 64, 1, 49), (64, 4, 1, 128), 16, (1, 1), ((0, 0), (64, 64))),
    ((2, 32, 30), (32, 8, 100), 4, (1,), ((50, 50),)),                  # 1-D, 100 taps
]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("case", range(len(IN_PLACE)))
def test_grouped_convolutions_read_their_input_in_place(case, threads):
    xs, ws, groups, strides, padding = IN_PLACE[case]
    rng = np.random.default_rng(case)
    with gc.Graph(f"grouped_in_place{case}"):
        x = gc.placeholder(xs, name="x")
        w = gc.constant((rng.standard_normal(ws) * 0.1).astype(np.float32))
        b = gc.constant(rng.standard_normal((ws[0],) + (1,) * (len(xs) - 2)).astype(np.float32))
        y = gc.relu(_conv(x, w, groups, strides, padding, (1,) * len(strides)) + b)
        exe = check_compiled(y, {"x": rng.standard_normal(xs).astype(np.float32)},
                             num_threads=threads)
    optimized = exe.dump("optimized")
    # one product batched over images and groups, over a window view: no patch matrix
    assert "lhs_batch=(0,1), rhs_batch=(0,1)" in optimized and "window_view(" in optimized
    assert "transpose(" not in optimized and " conv(" not in optimized
    if case >= 4:                  # one output row: its columns, nothing cut after
        assert "slice(" not in optimized
    # the bias and the activation (in (N, O, ...) order) join the product's kernel,
    # each image's group's rows after its product (a layout epilogue)
    dot_groups = [g for g in exe.dump("fused").splitlines() if "[dot]" in g]
    assert len(dot_groups) == 1 and ":max" in dot_groups[0] and ":add" in dot_groups[0]


def test_strided_grouped_convolutions_with_short_rows_take_the_patch_matrix():
    # 7 output columns round up to a vector of 16: the patch matrix, not column planes
    rng = np.random.default_rng(5)
    with gc.Graph("grouped_short_rows"):
        x = gc.placeholder((2, 64, 14, 14), name="x")
        w = gc.constant((rng.standard_normal((64, 8, 3, 3)) * 0.1).astype(np.float32))
        y = _conv(x, w, 8, (2, 2), ((1, 1), (1, 1)), (1, 1))
        exe = check_compiled(y, {"x": rng.standard_normal((2, 64, 14, 14)).astype(np.float32)})
    assert "transpose(" in exe.dump("optimized")
