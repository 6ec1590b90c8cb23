"""The layouts of a convolution's input that its product reads in place
(conv_to_gemm.py, conv_grouped.py): the input padded (`padded`), with rows of slack for
a stride-1 window's wide output rows (`slacked`), or a strided 2-D window's column planes
(`column_planes`, where `column_planed`); and the product of the filters with a window
view over them (`window_product`)."""
from __future__ import annotations

from graphc_runtime import dims as sym

from .program import Builder


def padded(b: Builder, x, padding):
    """x with the convolution's (low, high) spatial padding applied (negative crops)."""
    low = (0, 0) + tuple(lo for lo, _ in padding)
    high = (0, 0) + tuple(hi for _, hi in padding)
    if not any(low) and not any(high):
        return x
    return b.add("pad", (x,), {"low": low, "high": high, "interior": (0,) * x.ndim,
                               "value": 0.0})


def slack_rows(slack: int, full) -> int:
    """Rows of zeros to add to the first axis of planes `full`: the wide grid's last
    columns read up to `slack` (the last window offset) past a plane's end."""
    return -(-slack // sym.prod(full[1:]))


def slacked(b: Builder, node, x, window):
    """(x padded for a stride-1 window read in place, the padded planes' sizes): the
    convolution's padding and slack_rows more rows of zeros."""
    a = node.attrs
    padding = [list(p) for p in a["padding"]]
    full = [s + lo + hi for s, (lo, hi) in zip(x.shape[2:], padding)]
    extra = slack_rows((window[-1] - 1) * a["rhs_dilation"][-1], full)
    padding[0][1] += extra
    full[0] += extra
    return padded(b, x, [tuple(p) for p in padding]), full


def one_row(node, window) -> bool:
    """Whether conv `node` (`window` its taps) is a 1-D convolution: one spatial axis, or
    two with one output row and a window one row tall (ONNX's 1-D Conv, imported as 2-D).
    Its product's columns are then exactly the output's."""
    return len(window) == 1 or len(window) == 2 and node.shape[2] == 1 and window[0] == 1


def one_row_view(b: Builder, node, x, window):
    """(the padded input, the window view's sizes and strides) of a one_row convolution
    at stride 1: the taps, then the output's columns; no slack rows and no wide columns
    (a slacked view of a 2-D input one row tall computes kw - 1 columns more)."""
    xp = padded(b, x, node.attrs["padding"])
    taps = (xp.shape[-1],) * (len(window) - 1) + (node.attrs["rhs_dilation"][-1],)
    return xp, tuple(window) + (node.shape[-1],), taps + (1,)


def row_width(out_w: int) -> int:
    """The output row width a column-planed product computes: out_w rounded up to a
    whole number of 16-float vectors (the extra columns are cut after)."""
    return -(-out_w // 16) * 16


def column_planes(b: Builder, node, x, w):
    """A strided 2-D window as a unit-stride one with exactly its taps: the padded input
    of each image and channel is laid out with each row as kw planes, plane kx holding
    the pixels the window's column kx reads (x[y, kx*dx + sx*j] for the output columns
    j, rounded up to a whole number of vectors: row_width); tap (ky, kx) then starts at
    ky*dy*kw*pw + kx*pw and output row i at sy*kw*pw (the product's row pitch): the
    window's taps are affine and none is zero (the phases compute 16 products for a
    3x3 window at stride 2). One loop kernel writes the planes (about kw/sx times the
    input). Returns (planes (N, C, rows, kw, pw), the window view's sizes and strides,
    pw)."""
    a = node.attrs
    n, c = x.shape[:2]
    (kh, kw), (sy, sx) = w.shape[2:], a["window_strides"]
    (dy, dx), (oh, ow) = a["rhs_dilation"], node.shape[2:]
    pw = row_width(ow)
    (top, bottom), (left, right) = a["padding"]
    xp = padded(b, x, [(top, bottom), (left, right + sx * (pw - ow))])
    rows = xp.shape[2]
    planes = []
    for kx in range(kw):
        sl = b.add("slice", (xp,), {"start_indices": (0, 0, 0, kx * dx),
                                    "limit_indices": (n, c, rows, kx * dx + sx * (pw - 1) + 1),
                                    "strides": (1, 1, 1, sx)})
        planes.append(b.add("reshape", (sl,), {"new_sizes": (n, c, rows, 1, pw)}))
    xp = planes[0] if kw == 1 else b.add("concatenate", tuple(planes), {"dimension": 3})
    line = kw * pw
    return xp, (kh, kw, oh, pw), (dy * line, pw, sy * line, 1), pw


def phased(node, w) -> bool:
    """A strided window (more than 1x1), read in place through its phases (_phases)."""
    return any(s != 1 for s in node.attrs["window_strides"]) and \
        not all(k == 1 for k in w.shape[2:])


def column_planed(node, w) -> bool:
    """A strided 2-D window (more than 1x1) read through its column planes
    (column_planes): where rounding its output rows up to whole vectors adds at most
    half (beyond that the phases' zero taps cost less: 16 products for 9 at 3x3 / 2)."""
    return phased(node, w) and len(w.shape) == 4 and \
        2 * row_width(node.shape[3]) <= 3 * node.shape[3]


def window_product(b: Builder, node, w, view, grid, k: int, groups: int = 1):
    """w (O, C/groups, *taps) times the window view (N, C, *taps, *columns) per image, or
    with groups per image and group (the view (N, G, C/G, *taps, *columns)), `k` taps
    axes; the output cut from `grid`, the product's (N, O, ...) shape, where that is
    wider."""
    n = view.shape[0]
    if groups > 1:
        w = b.add("reshape", (w,), {"new_sizes": (groups, w.shape[0] // groups) +
                                    tuple(w.shape[1:])})
    lead = 1 + (groups > 1)                    # batch axes: images (and groups)
    wb = b.add("broadcast_in_dim", (w,), {"shape": (n,) + tuple(w.shape),
                                          "broadcast_dimensions": tuple(range(1, w.ndim + 1))})
    prod = b.add("dot_general", (wb, view), {
        "lhs_contracting": tuple(range(lead + 1, lead + 2 + k)),
        "rhs_contracting": tuple(range(lead, lead + 1 + k)),
        "lhs_batch": tuple(range(lead)), "rhs_batch": tuple(range(lead))})
    if tuple(grid) == tuple(node.shape):
        return b.add("reshape", (prod,), {"new_sizes": grid}, like=node)
    prod = b.add("reshape", (prod,), {"new_sizes": grid})
    return b.add("slice", (prod,), {"start_indices": (0,) * len(grid),
                                    "limit_indices": tuple(node.shape),
                                    "strides": (1,) * len(grid)}, like=node)
