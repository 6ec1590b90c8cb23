"""Layers built from primitives: linear, conv2d, pooling, layer_norm, dropout."""
from __future__ import annotations

from graphc_runtime.errors import DTypeError, ShapeError

from .. import functions as F
from .. import random
from ..api import Tensor, bind
from ..ir import dtypes
from ..ir.source import user_location


def _pair(v, what: str) -> tuple[int, int]:
    if isinstance(v, int):
        return (v, v)
    v = tuple(v)
    if len(v) != 2 or not all(isinstance(i, int) for i in v):
        raise ShapeError(f"{what} must be an int or a pair of ints, got {v!r}", user_location())
    return v


def linear(x: Tensor, w: Tensor, b: Tensor | None = None) -> Tensor:
    """x @ w (+ b); w is (in_features, out_features)."""
    y = F.matmul(x, w)
    return y if b is None else y + b


def _check_nchw(x: Tensor, what: str) -> None:
    if x.ndim != 4:
        raise ShapeError(f"{what}: input must be NCHW (rank 4), got {x.node.type_str()}",
                         user_location())


def conv2d(x: Tensor, w: Tensor, b: Tensor | None = None, stride=1, padding=0, dilation=1,
           groups: int = 1) -> Tensor:
    """2-D convolution, x (N, C, H, W), w (O, C/groups, kH, kW), b (O,).

    padding: an int, (pad_h, pad_w), ((top, bottom), (left, right)), 'valid' or 'same'
    (same: output size ceil(input / stride)).
    """
    _check_nchw(x, "conv2d")
    if w.ndim != 4:
        raise ShapeError(f"conv2d: kernel must be (O, C/groups, kH, kW), got "
                         f"{w.node.type_str()}", user_location())
    strides, dil = _pair(stride, "stride"), _pair(dilation, "dilation")
    if isinstance(padding, str):
        if padding == "valid":
            pads = ((0, 0), (0, 0))
        elif padding == "same":
            pads = []
            for n, k, s, d in zip(x.shape[2:], w.shape[2:], strides, dil):
                out = -(-n // s)
                total = max((out - 1) * s + (k - 1) * d + 1 - n, 0)
                pads.append((total // 2, total - total // 2))
            pads = tuple(pads)
        else:
            raise ShapeError(f"conv2d: padding {padding!r} must be 'valid', 'same' or ints",
                             user_location())
    elif isinstance(padding, int):
        pads = ((padding, padding), (padding, padding))
    else:
        padding = tuple(padding)
        pads = tuple((p, p) if isinstance(p, int) else tuple(p) for p in padding)
    dt = dtypes.promote(x.dtype, w.dtype)
    y = bind("conv", F.cast(x, dt), F.cast(w, dt), window_strides=strides, padding=pads,
             lhs_dilation=(1, 1), rhs_dilation=dil, feature_group_count=groups)
    if b is not None:
        if b.shape != (w.shape[0],):
            raise ShapeError(f"conv2d: bias must have shape ({w.shape[0]},), got "
                             f"{b.node.type_str()}", user_location())
        y = y + F.reshape(b, (1, -1, 1, 1))
    return y


def _windows(x: Tensor, kernel, stride, what: str) -> tuple[Tensor, tuple]:
    """All kernel-offset strided views of x stacked on a new last axis; (stacked, out_hw)."""
    _check_nchw(x, what)
    k = _pair(kernel, "kernel")
    s = _pair(stride, "stride") if stride is not None else k
    h, w = x.shape[2:]
    oh, ow = (h - k[0]) // s[0] + 1, (w - k[1]) // s[1] + 1
    if oh < 1 or ow < 1 or min(k + s) < 1:
        raise ShapeError(f"{what}: kernel {k} with stride {s} does not fit input "
                         f"{x.node.type_str()}", user_location())
    n, c = x.shape[:2]
    if k == s and h % k[0] == 0 and w % k[1] == 0:       # non-overlapping: a pure reshape
        v = F.reshape(x, (n, c, oh, k[0], ow, k[1]))
        return F.reshape(F.transpose(v, (0, 1, 2, 4, 3, 5)), (n, c, oh, ow, k[0] * k[1])), (oh, ow)
    views = []
    for i in range(k[0]):
        for j in range(k[1]):
            views.append(bind("slice", x, start_indices=(0, 0, i, j),
                              limit_indices=(n, c, i + (oh - 1) * s[0] + 1, j + (ow - 1) * s[1] + 1),
                              strides=(1, 1, s[0], s[1])))
    return F.stack(views, axis=-1), (oh, ow)


def max_pool2d(x: Tensor, kernel, stride=None) -> Tensor:
    """Max over kernel windows (no padding; stride defaults to the kernel). Ties share
    the gradient equally."""
    v, _ = _windows(x, kernel, stride, "max_pool2d")
    return F.max(v, axis=-1)


def avg_pool2d(x: Tensor, kernel, stride=None) -> Tensor:
    """Mean over kernel windows (no padding; stride defaults to the kernel)."""
    v, _ = _windows(x, kernel, stride, "avg_pool2d")
    return F.mean(v, axis=-1)


def layer_norm(x: Tensor, gamma: Tensor, beta: Tensor, eps: float = 1e-5) -> Tensor:
    """(x - mean) / sqrt(var + eps) * gamma + beta over the last axis."""
    mu = F.mean(x, -1, keepdims=True)
    d = x - mu
    var = F.mean(d * d, -1, keepdims=True)
    return d * F.rsqrt(var + eps) * gamma + beta


def dropout(x: Tensor, rate: float, key, deterministic: bool = False) -> Tensor:
    """Zero each element with probability `rate` and scale the rest by 1/(1-rate).

    `key` (int32[2] tensor, e.g. a variable advanced each step) picks the mask;
    deterministic=True (evaluation) returns x unchanged.
    """
    if not 0.0 <= rate < 1.0:
        raise ShapeError(f"dropout: rate must be in [0, 1), got {rate}", user_location())
    if deterministic or rate == 0.0:
        return x
    if not dtypes.is_float(x.dtype):
        raise DTypeError(f"dropout: needs a float tensor, got {x.node.type_str()}",
                         user_location())
    keep = random.uniform(key, x.shape) >= rate
    return F.where(keep, x * (1.0 / (1.0 - rate)), 0.0)
