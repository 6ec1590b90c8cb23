"""A 3x3 filter gradient by Winograd's algorithm (the rewrite conv_to_gemm applies on the
CPU, beside the forward one of conv_winograd.py).

After differentiation, the gradient of 3x3 filters (stride 1) is a convolution whose
window is the output gradient: out[c, o, i, j] = sum over n, y, x of
xp[c, n, y + i, x + j] * g[o, n, y, x], xp the padded input with its images as channels
and g the output gradient (conv's VJP). Cut g into 2 x 2 tiles: each tile and the 4 x 4
patch of xp under it add a 3 x 3 correlation, F(3x3, 2x2), the transpose of the forward
F(2x2, 3x3) (Lavin and Gray, 2015): with the forward's matrices,

    out = G^T [ sum over tiles of (A g_t A^T) * (B^T d B) ] G     (* elementwise)

so the sum is one product per position p of the 16, M[p] (O, C) = Y[p] (O, T) @ V[p]^T,
contracting the tiles of every image (T). V is the forward's input transform. 16
multiplications per tile instead of 36; the transforms are loop kernels that fusion
forms, and the product is a batched GEMM.
"""
from __future__ import annotations

import numpy as np

from ..ir.dtypes import to_numpy
from ..ir.ops.winograd import AT, BT, G
from .conv_winograd import tile_slices, transformed
from .program import Builder

MIN_CHANNELS = 16


def gradient_fits(node, x, w, max_bytes: int) -> bool:
    """Whether conv `node` (x: the images-as-channels input, w: the output gradient as
    the window) is a 3x3 filter gradient this rewrite takes: one group, stride 1, no
    dilation, static and even window sizes, at least MIN_CHANNELS filters and input
    channels, float32/float64, and the transformed operands within max_bytes."""
    a = node.attrs
    if a["feature_group_count"] != 1 or node.dtype not in ("float32", "float64"):
        return False
    if any(s != 1 for s in a["window_strides"]) or \
            any(d != 1 for d in tuple(a["rhs_dilation"]) + tuple(a["lhs_dilation"])):
        return False
    shapes = tuple(x.shape) + tuple(w.shape) + tuple(node.shape)
    if len(node.shape) != 4 or not all(isinstance(d, int) for d in shapes):
        return False
    c, o = node.shape[:2]
    n, (wh, ww) = w.shape[1], w.shape[2:]
    item = np.dtype(to_numpy(node.dtype)).itemsize
    nbytes = 16 * (c + o) * n * (wh // 2) * (ww // 2) * item     # V and A g A^T
    return tuple(node.shape[2:]) == (3, 3) and wh % 2 == 0 and ww % 2 == 0 and \
        min(c, o) >= MIN_CHANNELS and nbytes <= max_bytes


def winograd_filter_gradient(b: Builder, node, xp, g):
    """Conv `node` (a 3x3 filter gradient, gradient_fits) of the padded input xp
    (C, N, H + 2, W + 2) and the output gradient g (O, N, H, W) -> (C, O, 3, 3)."""
    c, o = node.shape[:2]
    th, tw = g.shape[2] // 2, g.shape[3] // 2
    a = AT.T.astype(int).tolist()              # A (4 x 2): A g_t A^T
    v = transformed(b, tile_slices(b, xp, 4, th, tw), BT.astype(int).tolist())
    y = transformed(b, tile_slices(b, g, 2, th, tw), a)
    m = b.add("dot_general", (y, v), {"lhs_contracting": (2,), "rhs_contracting": (2,),
                                      "lhs_batch": (0,), "rhs_batch": (0,)})   # (16, O, C)
    # out[i, j] = sum over p, q of G[p, i] G[q, j] M[4p + q]: one small product
    gg = np.einsum("pi,qj->ijpq", G, G).reshape(9, 16).astype(to_numpy(node.dtype))
    flat = b.add("reshape", (m,), {"new_sizes": (16, o * c)})
    out = b.add("dot_general", (b.add("constant", (), {"value": gg}), flat),
                {"lhs_contracting": (1,), "rhs_contracting": (0,), "lhs_batch": (),
                 "rhs_batch": ()})                                           # (9, O * C)
    out = b.add("reshape", (out,), {"new_sizes": (3, 3, o, c)})
    return b.add("transpose", (out,), {"permutation": (3, 2, 0, 1)}, like=node)
