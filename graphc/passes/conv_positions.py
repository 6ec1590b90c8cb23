"""A convolution with more window taps than output positions (a filter gradient: the
image as the window, the filter's taps as the outputs) as one product over its patches,
a row per image and output position (conv_to_gemm.py chooses it).
"""
from __future__ import annotations

import itertools

from graphc_runtime import dims as sym

from .conv_patches import patch_view
from .program import Builder


def per_output_position(b: Builder, node, xp, w):
    """Conv `node` of the padded input `xp` (its padding applied) and `w` as one product
    over its patches, a row per image and output position."""
    a = node.attrs
    n, c = xp.shape[:2]
    o = w.shape[0]
    window = w.shape[2:]
    out_sp = node.shape[2:]
    q = sym.prod(window)
    nsp = len(window)
    if all(isinstance(d, int) for d in tuple(xp.shape) + tuple(out_sp)):
        # the window view (N, C, *taps, *out) copied once as (N, *out, C, *taps): one
        # loop nest, not a concatenation of a slice per position (the stem's filter
        # gradient, 49 positions: 7,567 lines of IR, 4.2 s of LLVM)
        view = patch_view(b, node, xp, window)
        perm = (0,) + tuple(range(2 + nsp, 2 + 2 * nsp)) + (1,) + tuple(range(2, 2 + nsp))
        stacked = b.add("transpose", (view,), {"permutation": perm})
        positions = sym.prod(out_sp)
        return _output_position_product(b, node, w, stacked, n, c, o, q, positions)
    slabs = []
    for pos in itertools.product(*[range(m) for m in out_sp]):
        start = (0, 0) + tuple(p * s for p, s in zip(pos, a["window_strides"]))
        limit = (n, c) + tuple(st + (k - 1) * d + 1 for st, k, d in
                               zip(start[2:], window, a["rhs_dilation"]))
        sl = b.add("slice", (xp,), {"start_indices": start, "limit_indices": limit,
                                    "strides": (1, 1) + tuple(a["rhs_dilation"])})
        slabs.append(b.add("reshape", (sl,), {"new_sizes": (n, 1, c * q)}))
    positions = len(slabs)
    stacked = slabs[0] if positions == 1 else b.add("concatenate", tuple(slabs),
                                                    {"dimension": 1})
    return _output_position_product(b, node, w, stacked, n, c, o, q, positions)


def _output_position_product(b: Builder, node, w, stacked, n, c, o, q, positions):
    """Conv `node` from its patches `stacked` ((N, positions, C * q) in any shape).
    w(O, C*q) @ patches^T: (O, N, positions), then (N, O, positions). A filter
    gradient (N: the input channels) is transposed back to (O, C, *window) by its VJP,
    which cancels this transpose: its update reads the product in order (it read
    (positions, N, O) strided, a 512-channel 3 x 3 momentum update at 5 GB/s)."""
    patches = b.add("reshape", (stacked,), {"new_sizes": (n * positions, c * q)})
    wm = b.add("reshape", (w,), {"new_sizes": (o, c * q)})
    prod = b.add("dot_general", (wm, patches), {"lhs_contracting": (1,), "rhs_contracting": (1,),
                                                "lhs_batch": (), "rhs_batch": ()})
    prod = b.add("reshape", (prod,), {"new_sizes": (o, n, positions)})
    prod = b.add("transpose", (prod,), {"permutation": (1, 0, 2)})
    return b.add("reshape", (prod,), {"new_sizes": node.shape}, like=node)
