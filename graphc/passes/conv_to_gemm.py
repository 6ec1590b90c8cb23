"""Rewrite large convolutions as im2col + matrix product (which then runs on BLAS).

conv(x, w) with one feature group and no input dilation becomes: pad x, take one strided
slice per window offset, lay the patches out as a (N*Ho*Wo, C*kh*kw) matrix (one fused
loop kernel writes it), multiply by w viewed as (O, C*kh*kw), and transpose the product
back to (N, O, Ho, Wo). Small convolutions keep the direct loop kernel.
"""
from __future__ import annotations

import itertools

import numpy as np

from .program import Builder, Program, rebuild

MIN_FLOPS = 1 << 20
MAX_PATCH_BYTES = 256 << 20
MAX_WINDOW = 64          # window positions (one slice each); larger windows stay direct


def _im2col(b: Builder, node, x, w):
    a = node.attrs
    n, c = x.shape[:2]
    o = w.shape[0]
    window = w.shape[2:]
    out_sp = node.shape[2:]
    nsp = len(window)
    low = (0, 0) + tuple(lo for lo, _ in a["padding"])
    high = (0, 0) + tuple(hi for _, hi in a["padding"])
    xp = x
    if any(low) or any(high):
        xp = b.add("pad", (x,), {"low": low, "high": high, "interior": (0,) * x.ndim,
                                 "value": 0.0})
    slices = []
    for pos in itertools.product(*[range(k) for k in window]):
        start = (0, 0) + tuple(p * d for p, d in zip(pos, a["rhs_dilation"]))
        limit = (n, c) + tuple(s + (m - 1) * st + 1 for s, m, st in
                               zip(start[2:], out_sp, a["window_strides"]))
        sl = b.add("slice", (xp,), {"start_indices": start, "limit_indices": limit,
                                    "strides": (1, 1) + tuple(a["window_strides"])})
        slices.append(b.add("reshape", (sl,), {"new_sizes": (n, c, 1) + tuple(out_sp)}))
    kk = len(slices)
    stacked = slices[0] if kk == 1 else b.add("concatenate", tuple(slices), {"dimension": 2})
    # (N, C, KK, *out) -> (N, *out, C, KK) -> (N*Ho*Wo, C*KK)
    perm = (0,) + tuple(range(3, 3 + nsp)) + (1, 2)
    patches = b.add("transpose", (stacked,), {"permutation": perm})
    rows = n * int(np.prod(out_sp, dtype=np.int64))
    patches = b.add("reshape", (patches,), {"new_sizes": (rows, c * kk)})
    wm = b.add("reshape", (w,), {"new_sizes": (o, c * kk)})
    prod = b.add("dot_general", (patches, wm), {"lhs_contracting": (1,), "rhs_contracting": (1,),
                                                "lhs_batch": (), "rhs_batch": ()})
    prod = b.add("reshape", (prod,), {"new_sizes": (n,) + tuple(out_sp) + (o,)})
    return b.add("transpose", (prod,), {"permutation": (0, nsp + 1) + tuple(range(1, nsp + 1))},
                 like=node)


def conv_to_gemm(program: Program) -> Program:
    def rewrite(builder, node, inputs):
        if node.op != "conv":
            return None
        a = node.attrs
        x, w = inputs
        if a["feature_group_count"] != 1 or any(d != 1 for d in a["lhs_dilation"]):
            return None
        if node.dtype not in ("float32", "float64"):
            return None
        flops = node.size * int(np.prod(w.shape[1:], dtype=np.int64))
        patch_bytes = node.size // node.shape[1] * int(np.prod(w.shape[1:])) * \
            x.nbytes // max(x.size, 1)
        window = int(np.prod(w.shape[2:], dtype=np.int64))
        if flops < MIN_FLOPS or patch_bytes > MAX_PATCH_BYTES or window > MAX_WINDOW:
            return None
        return _im2col(builder, node, x, w)

    return rebuild(program, rewrite)
