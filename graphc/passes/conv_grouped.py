"""A grouped convolution (1 < groups < channels: ResNeXt's 3 x 3 convolutions, wav2vec2's
positional 1-D convolution) as products per group.

In place (grouped_in_place, the CPU's): at stride 1, or a strided 2-D window through its
column planes (conv_planes.py), w (G, O/G, C/G, *taps) times a window_view of the padded
input (N, G, C/G, *taps, *columns) is one product per image and group, run by the own
nnw kernel over the input where it lies; no patch matrix is written (ResNeXt's 3 x 3
convolutions 2-5x faster than over the patch matrix).
Otherwise over the patch matrix: a window_view of the padded input, (N, C, *taps, *out),
copied once into (G, C/G * taps, N * out) order; w (O, C/G, *taps) is (G, O/G, C/G *
taps); the batched product gives (G, O/G, N * out), which is (N, O, *out) after one
transpose. Without them such convolutions ran as direct loop kernels at 2-12 GFLOP/s.
Groups of fewer than MIN_CHANNELS input or output channels keep the direct kernel (a
product of so few rows does not pay).
"""
from __future__ import annotations

from graphc_runtime import dims as sym

from .conv_patches import MAX_PATCH_BYTES, patch_bytes, patch_view
from .conv_planes import (column_planed, column_planes, one_row, one_row_view, slacked,
                          window_product)
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


def grouped_in_place_fits(node, x, w) -> bool:
    """Whether grouped_in_place runs conv `node`: grouped_fits, a window at stride 1 or
    read through its column planes (conv_planes.column_planed)."""
    return grouped_fits(node, x, w) and (
        all(s == 1 for s in node.attrs["window_strides"]) or column_planed(node, w))


def grouped_in_place(b: Builder, node, x, w):
    """Conv `node` of x and w as one product per image and group over a window_view of
    x's padded planes (conv_planes.slacked, or the column planes of a strided window),
    the patch matrix read in place by the own nnw kernel: w (G, O/G, C/G, *taps) times
    the view (N, G, C/G, *taps, *columns), whose output rows are wider than the
    convolution's (their last columns cut after)."""
    a = node.attrs
    n, c = x.shape[:2]
    o, groups = w.shape[0], a["feature_group_count"]
    window, out_sp = tuple(w.shape[2:]), tuple(node.shape[2:])
    nsp = len(window)
    if column_planed(node, w):
        xp, sizes, strides, pw = column_planes(b, node, x, w)
        grid = (n, o, out_sp[0], pw)
    elif one_row(node, window):
        xp, sizes, strides = one_row_view(b, node, x, window)
        grid = tuple(node.shape)
    else:
        xp, full = slacked(b, node, x, window)
        rows = [sym.prod(full[d + 1:]) for d in range(nsp)]
        sizes = window + (out_sp[0] * sym.prod(full[1:]),)
        strides = tuple(d * r for d, r in zip(a["rhs_dilation"], rows)) + (1,)
        grid = (n, o, out_sp[0]) + tuple(full[1:])
    flat = b.add("reshape", (xp,), {"new_sizes": (n, groups, c // groups,
                                                  sym.prod(xp.shape[2:]))})
    view = b.add("window_view", (flat,), {"sizes": tuple(sizes), "strides": tuple(strides)})
    return window_product(b, node, w, view, grid, nsp, groups)
