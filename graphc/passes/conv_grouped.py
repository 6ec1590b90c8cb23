"""A grouped convolution (1 < groups < channels: ResNeXt's 3 x 3 convolutions, wav2vec2's
positional 1-D convolution) as one product per group over its patch matrix.

The patch matrix is a window_view of the padded input, (N, C, *taps, *out), copied once
into (G, C/G * taps, N * out) order; w (O, C/G, *taps) is (G, O/G, C/G * taps); the
batched product gives (G, O/G, N * out), which is (N, O, *out) after one transpose.
Without it such convolutions ran as direct loop kernels at 2-12 GFLOP/s. Groups of fewer
than MIN_CHANNELS input or output channels keep the direct kernel (a product of so few
rows does not pay for the copy).
"""
from __future__ import annotations

from graphc_runtime import dims as sym

from .conv_patches import MAX_PATCH_BYTES, patch_bytes, patch_view
from .program import Builder

MIN_CHANNELS = 4    # 3 x 3 over 56 x 56, 32 groups: 4 channels a group 2.56 -> 0.85 ms,
                    # 2 a group 0.37 -> 0.55 ms (kept direct)


def grouped_fits(node, x, w) -> bool:
    """Whether conv `node` (x, w) runs here: grouped, not depthwise, no input dilation,
    at least MIN_CHANNELS in and out per group, a patch matrix of at most
    MAX_PATCH_BYTES."""
    a = node.attrs
    groups = a["feature_group_count"]
    if groups == 1 or any(d != 1 for d in a["lhs_dilation"]):
        return False
    if w.shape[1] < MIN_CHANNELS or w.shape[0] // groups < MIN_CHANNELS:
        return False
    return patch_bytes(node, x, w) <= MAX_PATCH_BYTES


def grouped(b: Builder, node, xp, w):
    """Conv `node` of the padded input `xp` (its padding applied) and `w`, per group."""
    a = node.attrs
    n, c = xp.shape[:2]
    o, groups = w.shape[0], a["feature_group_count"]
    window, out_sp = tuple(w.shape[2:]), tuple(node.shape[2:])
    nsp = len(window)
    view = patch_view(b, node, xp, window)
    # (N, C, *taps, *out) -> (C, *taps, N, *out): each group's rows, then its columns
    perm = (1,) + tuple(range(2, 2 + nsp)) + (0,) + tuple(range(2 + nsp, 2 + 2 * nsp))
    patches = b.add("transpose", (view,), {"permutation": perm})
    k = c // groups * sym.prod(window)
    m = n * sym.prod(out_sp)
    patches = b.add("reshape", (patches,), {"new_sizes": (groups, k, m)})
    wm = b.add("reshape", (w,), {"new_sizes": (groups, o // groups, k)})
    prod = b.add("dot_general", (wm, patches), {"lhs_contracting": (2,),
                                                "rhs_contracting": (1,),
                                                "lhs_batch": (0,), "rhs_batch": (0,)})
    prod = b.add("reshape", (prod,), {"new_sizes": (o, n) + out_sp})
    return b.add("transpose", (prod,), {"permutation": (1, 0) + tuple(range(2, 2 + nsp))},
                 like=node)
