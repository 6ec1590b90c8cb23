"""winograd_conv2d: a 3x3, stride-1 convolution by Winograd's F(2x2, 3x3) algorithm.

Each 2 x 2 block of outputs ("tile") is computed from the 4 x 4 input patch under it with
16 multiplications per input channel instead of 36 (Lavin and Gray, "Fast Algorithms for
Convolutional Neural Networks", 2015):

    Y = A^T [ (G g G^T) * (B^T d B) ] A     (* elementwise; g a 3x3 filter, d a patch)

The filter transform U = G g G^T (16 values per output and input channel) is an operand,
so a graph computes it once (or folds it: constant weights); the product sums U * V over
the input channels for each of the 16 positions, a matrix product per position. This
primitive is produced by passes/conv_to_gemm.py after differentiation (it has no VJP);
the CPU backend runs it per image with the transforms in cache (backends/cpu/winograd.py).

winograd_conv2d(xp, u): xp (N, C, H + 2, W + 2) the padded input, u (16, O, C) the
filters' transform in row-major (a, b) order -> (N, O, H, W); H and W even.
"""
from __future__ import annotations

import numpy as np

from graphc_runtime.derived import winograd_filter
from graphc_runtime.errors import DTypeError, ShapeError

from .. import dtypes
from ..primitive import define

# the input, filter and output transforms of F(2x2, 3x3)
BT = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], np.float64)
G = np.array([[1, 0, 0], [.5, .5, .5], [.5, -.5, .5], [0, 0, 1]], np.float64)
AT = np.array([[1, 1, 1, 0], [0, 1, -1, -1]], np.float64)


def filter_transform(w: np.ndarray) -> np.ndarray:
    """U (16, O, C) of filters w (O, C, 3, 3), in w's dtype (computed in float64): the
    runtime's own code, so that an artifact can store w alone and compute U when it is
    loaded, to the bit (graphc_runtime.derived)."""
    return winograd_filter(w)


def filter_matrix() -> np.ndarray:
    """G (x) G as a (16, 9) matrix: U[p] = sum_q of it [p, q] * w[..., q] (w's 3x3 flat)."""
    return np.kron(G, G)


def _rule(inputs, attrs):
    xp, u = inputs
    if xp.dtype != u.dtype or not dtypes.is_float(xp.dtype):
        raise DTypeError(f"winograd_conv2d needs floating operands of one dtype, got "
                         f"{xp.type_str()} and {u.type_str()}")
    if xp.ndim != 4 or u.ndim != 3 or u.shape[0] != 16 or u.shape[2] != xp.shape[1]:
        raise ShapeError(f"winograd_conv2d takes a padded input (N, C, H + 2, W + 2) and "
                         f"filters (16, O, C), got {xp.type_str()} and {u.type_str()}")
    h, w = xp.shape[2] - 2, xp.shape[3] - 2
    if not all(isinstance(d, int) for d in (h, w, xp.shape[1], u.shape[1])) or \
            h < 2 or w < 2 or h % 2 or w % 2:
        raise ShapeError(f"winograd_conv2d needs static, even output sizes, got "
                         f"{xp.type_str()}")
    return (xp.shape[0], u.shape[1], h, w), xp.dtype


def _impl(args, attrs, node):
    xp, u = args
    compute = dtypes.to_numpy(dtypes.compute_dtype(node.dtype))
    xp, u = xp.astype(compute, copy=False), u.astype(compute, copy=False)
    n, c, hp, wp = xp.shape
    th, tw = (hp - 2) // 2, (wp - 2) // 2
    s = xp.strides
    d = np.lib.stride_tricks.as_strided(                  # (N, C, th, tw, 4, 4) patches
        xp, (n, c, th, tw, 4, 4), (s[0], s[1], 2 * s[2], 2 * s[3], s[2], s[3]))
    bt = BT.astype(compute)
    v = np.einsum("ai,nctuij,bj->abnctu", bt, d, bt).reshape(16, n, c, th, tw)
    m = np.einsum("poc,pnctu->pnotu", u, v).reshape(4, 4, n, -1, th, tw)
    at = AT.astype(compute)
    y = np.einsum("ai,ijnotu,bj->notaub", at, m, at)
    return y.reshape(node.shape).astype(dtypes.to_numpy(node.dtype), copy=False)


define("winograd_conv2d", "dot", _rule, _impl, arity=2, differentiable=False)
