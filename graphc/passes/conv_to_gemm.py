"""Rewrite convolutions as matrix products (`conv_to_gemm`: the CPU's; `conv_to_patches`:
for backends whose products take one contracting dimension, CUDA's).

In place (CPU): a convolution with one feature group and no input dilation reads its
padded input through a window_view, the patch matrix without copying it, so
w(O, C*window) @ view gives each image's output in (N, O, *out) order (the own nnw
kernel of backends/cpu/gemm.py runs it). Strided windows read the input's column planes
where output rows round up to whole vectors by at most half (column_planed), else its
phases (_phases) or the patch matrix (see _stored). Output rows shorter than
IN_PLACE_MIN_ROW take the patch matrix, and so do windows over an input of more than
IN_PLACE_MAX_INPUT bytes an image.
Patch matrix (im2col, or per output position for large windows over small outputs):
pad, take strided slices, lay them out as a matrix, multiply, transpose back.
Winograd (conv_winograd.py): 3x3 windows at stride 1 with even output sizes and 16 or
more channels; their filter gradients too (conv_winograd_grad.py); the compile option
winograd=False keeps the product.
Depthwise convolutions: a sum over the window of views of the padded input times
per-channel weights, one fused loop kernel. Other grouped convolutions: a product per
group (conv_grouped.py). Small convolutions keep the direct kernel.
The measurements behind each threshold are in docs/performance.md.
"""
from __future__ import annotations

import itertools

from graphc_runtime import dims as sym

from ..ir import dtypes

from .conv_grouped import grouped, grouped_fits, grouped_in_place, grouped_in_place_fits
from .conv_planes import (column_planed, column_planes, one_row, one_row_view, padded, phased,
                          slack_rows, slacked, window_product)
from .conv_positions import per_output_position
from .conv_input_dilated import input_dilated
from .conv_patches import MAX_PATCH_BYTES, patch_bytes
from .conv_winograd import winograd, winograd_decomposed, winograd_fits
from .conv_winograd_grad import gradient_fits, winograd_filter_gradient
from .program import Builder, Program, rebuild

MIN_FLOPS = 1 << 20
IN_PLACE_MIN_FLOPS = 1 << 14    # multiply-adds: below, the direct loop kernel
MAX_WINDOW = 64          # window positions (one slice each); larger windows stay direct
MAX_ROW_WINDOW = 1024    # a one-row window read in place (a 1-D convolution): wav2vec2's
# positional convolution (128 taps, 16 groups, 49 frames) 4.4 -> 2.8 ms over patches
IN_PLACE_MIN_ROW = 8     # output positions per row for the windowed product (below: patches)
IN_PLACE_MAX_INPUT = 2 << 20    # an image's input bytes up to which a window reads it in
# place: beyond, the windowed kernel's rows of B (each window offset of each channel)
# come from memory for every block of rows of C, where the patch matrix's product packs
# them (wav2vec2's 512-channel 1-D convolutions over 3,200 frames: 13.0 -> 10.5 ms)


def _window_slices(b: Builder, node, x, window):
    """(window offset, the padded input's strided slice (N, C, *out) it reads), for each
    offset of the convolution's window in row-major order."""
    a = node.attrs
    n, c = x.shape[:2]
    out_sp = node.shape[2:]
    xp = padded(b, x, a["padding"])
    for pos in itertools.product(*[range(k) for k in window]):
        start = (0, 0) + tuple(p * d for p, d in zip(pos, a["rhs_dilation"]))
        limit = (n, c) + tuple(s + (m - 1) * st + 1 for s, m, st in
                               zip(start[2:], out_sp, a["window_strides"]))
        yield pos, b.add("slice", (xp,), {"start_indices": start, "limit_indices": limit,
                                          "strides": (1, 1) + tuple(a["window_strides"])})


def _im2col(b: Builder, node, x, w):
    n, c = x.shape[:2]
    o = w.shape[0]
    window = w.shape[2:]
    out_sp = node.shape[2:]
    nsp = len(window)
    rows = n * sym.prod(out_sp)
    slices = []
    for _, sl in _window_slices(b, node, x, window):
        # (N, C, *out) -> (C, 1, N * out): output positions innermost, so the kernel
        # that writes the patches reads image rows contiguously
        sl = b.add("transpose", (sl,), {"permutation": (1, 0) + tuple(range(2, 2 + nsp))})
        slices.append(b.add("reshape", (sl,), {"new_sizes": (c, 1, rows)}))
    kk = len(slices)
    stacked = slices[0] if kk == 1 else b.add("concatenate", tuple(slices), {"dimension": 1})
    # patches^T: (C*KK, N*out), rows in the weights' (C, window) order
    patches_t = b.add("reshape", (stacked,), {"new_sizes": (c * kk, rows)})
    wm = b.add("reshape", (w,), {"new_sizes": (o, c * kk)})
    # w(O, C*KK) @ patches^T: (O, N*out), so the transpose back to (N, O, *out) moves
    # whole contiguous images (not a stride-O gather per element)
    prod = b.add("dot_general", (wm, patches_t), {"lhs_contracting": (1,),
                                                  "rhs_contracting": (0,),
                                                  "lhs_batch": (), "rhs_batch": ()})
    prod = b.add("reshape", (prod,), {"new_sizes": (o, n) + tuple(out_sp)})
    return b.add("transpose", (prod,), {"permutation": (1, 0) + tuple(range(2, 2 + nsp))},
                 like=node)


def _phase_grid(node, span):
    """(taps, planes) per spatial axis of a strided window spanning `span` pixels: the
    offsets q each phase r takes (ceil(span / stride)) and each phase plane's size."""
    strides = node.attrs["window_strides"]
    taps = [-(-sp // s) for sp, s in zip(span, strides)]
    return taps, [m + q - 1 for m, q in zip(node.shape[2:], taps)]


def _phase_planes(b: Builder, node, x, planes):
    """x padded as the convolution pads it, then with zeros (or crops) to stride * plane,
    laid out per image and channel as its phase planes: (N, C, *r, *plane)."""
    a = node.attrs
    n, c = x.shape[:2]
    strides, nsp = a["window_strides"], len(planes)
    padding = [(lo, s * pl - size - lo) for (lo, _), size, s, pl in
               zip(a["padding"], x.shape[2:], strides, planes)]
    xp = padded(b, x, padding)
    split = (n, c) + tuple(v for pl, s in zip(planes, strides) for v in (pl, s))
    xp = b.add("reshape", (xp,), {"new_sizes": split})
    perm = (0, 1) + tuple(3 + 2 * d for d in range(nsp)) + tuple(2 + 2 * d for d in range(nsp))
    return b.add("transpose", (xp,), {"permutation": perm})


def _phases(b: Builder, node, x, w):
    """A strided convolution as a unit-stride one over its input's phases: with stride
    s, tap k = s*q + r of the window reads phase r (every s-th pixel from r) at offset
    q. The padded input is laid out per image and channel as s^d phase planes (one
    loop kernel writes them) and the kernel padded to s * ceil(k/s) taps with zeros (a
    3x3 window at stride 2: 16 products for 9), its taps then in (q, r) order per axis
    as they lie. Returns (planes (N, C, *r, *plane), kernel (O, C, *(q, r)), the window
    sizes and strides over the flat planes, the plane shape): the product runs as the
    unit-stride form's, the planes having its slack rows already."""
    a = node.attrs
    o = w.shape[0]
    strides, window = a["window_strides"], w.shape[2:]
    dil = a["rhs_dilation"]
    nsp = len(window)
    span = [(k - 1) * d + 1 for k, d in zip(window, dil)]
    taps, planes = _phase_grid(node, span)
    planes[0] += slack_rows(taps[-1] - 1, planes)
    xp = _phase_planes(b, node, x, planes)
    # the kernel's taps on the dilated window's grid, padded to s * q
    wd = w
    if any(d != 1 for d in dil):
        wd = b.add("pad", (w,), {"low": (0,) * w.ndim, "high": (0,) * w.ndim,
                                 "interior": (0, 0) + tuple(d - 1 for d in dil),
                                 "value": 0.0})
    wd = b.add("pad", (wd,), {"low": (0,) * w.ndim,
                              "high": (0, 0) + tuple(s * q - sp for s, q, sp in
                                                     zip(strides, taps, span)),
                              "interior": (0,) * w.ndim, "value": 0.0})
    wd = b.add("reshape", (wd,), {"new_sizes": (o, w.shape[1]) + tuple(
        v for q, s in zip(taps, strides) for v in (q, s))})
    plane = sym.prod(planes)
    rows = [sym.prod(planes[d + 1:]) for d in range(nsp)]
    phase = [plane * sym.prod(strides[d + 1:]) for d in range(nsp)]
    sizes = tuple(v for q, s in zip(taps, strides) for v in (q, s))
    steps = tuple(v for r, ph in zip(rows, phase) for v in (r, ph))
    return xp, wd, sizes, steps, planes


def _in_place(b: Builder, node, x, w):
    """The product over a window_view of the padded input (see above)."""
    a = node.attrs
    n, c = x.shape[:2]
    o = w.shape[0]
    window, dil = w.shape[2:], a["rhs_dilation"]
    out_sp = node.shape[2:]
    nsp = len(window)
    strides = a["window_strides"]
    if all(k == 1 for k in window) and any(s != 1 for s in strides):
        # a strided 1x1 window: the pixels it reads, then a unit-stride product
        x = padded(b, x, a["padding"])
        x = b.add("slice", (x,), {"start_indices": (0,) * x.ndim,
                                  "limit_indices": tuple(x.shape[:2]) + tuple(
                                      (m - 1) * s + 1 for m, s in zip(out_sp, strides)),
                                  "strides": (1, 1) + tuple(strides)})
        xp, sizes, steps, full = x, window, (1,) * nsp, list(out_sp)
    elif column_planed(node, w):
        xp, view_sizes, view_strides, pw = column_planes(b, node, x, w)
        flat = b.add("reshape", (xp,), {"new_sizes": (n, c, sym.prod(xp.shape[2:]))})
        view = b.add("window_view", (flat,), {"sizes": view_sizes, "strides": view_strides})
        return window_product(b, node, w, view, (n, o, out_sp[0], pw), 2)
    elif any(s != 1 for s in strides):
        xp, w, sizes, steps, full = _phases(b, node, x, w)
    elif one_row(node, window):
        xp, sizes, steps = one_row_view(b, node, x, window)
        flat = b.add("reshape", (xp,), {"new_sizes": (n, c, sym.prod(xp.shape[2:]))})
        view = b.add("window_view", (flat,), {"sizes": sizes, "strides": steps})
        return window_product(b, node, w, view, tuple(node.shape), nsp)
    else:
        xp, full = slacked(b, node, x, window)
        rows = [sym.prod(full[d + 1:]) for d in range(nsp)]
        sizes, steps = tuple(window), tuple(d * r for d, r in zip(dil, rows))
    flat = b.add("reshape", (xp,), {"new_sizes": (n, c, sym.prod(xp.shape[2:]))})
    k = len(sizes)
    pointwise = all(size == 1 for size in sizes) and list(full) == list(out_sp)
    if nsp == 2 and (full[1] > out_sp[1] and out_sp[1] % 16 == 0 or pointwise):
        # output rows a whole number of vectors: the product writes them as they are
        # (the kernel steps from one input row to the next), no wide columns; a 1x1
        # window: the image's rows and columns, one run (dot_plan.merged_columns), and
        # what follows the product (bias, activation, the next convolution's padding)
        # is its epilogue over the image's shape
        view = b.add("window_view", (flat,), {"sizes": tuple(sizes) + tuple(out_sp),
                                              "strides": tuple(steps) + (full[1], 1)})
        grid = (n, o) + tuple(out_sp)
    else:
        wide = out_sp[0] * sym.prod(full[1:])
        view = b.add("window_view", (flat,), {"sizes": tuple(sizes) + (wide,),
                                              "strides": tuple(steps) + (1,)})
        grid = (n, o, out_sp[0]) + tuple(full[1:])
    return window_product(b, node, w, view, grid, k)


def _depthwise(b: Builder, node, x, w):
    """Sum over window offsets of the padded input's window times per-channel weights
    (one channel per group). The padded input is written once (beneath a window_view)
    and read without guards: for each offset a strided view of it, flat per image and
    channel."""
    a = node.attrs
    n, c = x.shape[:2]
    window, nsp = w.shape[2:], len(w.shape[2:])
    out_sp = node.shape[2:]
    if not all(isinstance(d, int) for d in tuple(x.shape[1:]) + tuple(w.shape)):
        return _depthwise_slices(b, node, x, w)
    if nsp == 2 and any(s != 1 for s in a["window_strides"]) and \
            all(d == 1 for d in a["rhs_dilation"]):
        return _depthwise_phases(b, node, x, w)
    xp = padded(b, x, a["padding"])
    full = xp.shape[2:]
    flat = b.add("reshape", (xp,), {"new_sizes": (n, c, sym.prod(full))})
    rows = [sym.prod(full[d + 1:]) for d in range(nsp)]
    view = b.add("window_view", (flat,), {
        "sizes": tuple(window) + tuple(out_sp),
        "strides": tuple(d * r for d, r in zip(a["rhs_dilation"], rows)) +
        tuple(s * r for s, r in zip(a["window_strides"], rows))})
    total = None
    for pos in itertools.product(*[range(k) for k in window]):
        sl = b.add("slice", (view,), {
            "start_indices": (0, 0) + pos + (0,) * nsp,
            "limit_indices": (n, c) + tuple(p + 1 for p in pos) + tuple(out_sp),
            "strides": (1,) * (2 + 2 * nsp)})
        sl = b.add("reshape", (sl,), {"new_sizes": node.shape})
        term = b.add("mul", (sl, _tap(b, node, w, pos)), {})
        total = term if total is None else b.add("add", (total, term), {})
    return b.add("reshape", (total,), {"new_sizes": node.shape}, like=node)


def _depthwise_phases(b: Builder, node, x, w):
    """A strided depthwise window over its input's phases: with stride (sy, sx), the
    padded input of each image and channel is laid out as sy*sx planes (plane (ry, rx)
    holds the pixels at (ry + sy*i, rx + sx*j)), written once by one loop kernel, and
    tap (ky, kx) reads plane (ky % sy, kx % sx) at offset (ky // sy, kx // sx) with unit
    strides: the sum over the taps vectorizes along output rows (a 3x3 window at stride
    2 over 64 channels of 32 x 32 read its input two pixels apart otherwise, 7x slower an
    output than at stride 1)."""
    a = node.attrs
    n, c = x.shape[:2]
    window, out_sp = w.shape[2:], node.shape[2:]
    strides = a["window_strides"]
    taps, planes = _phase_grid(node, window)
    xp = _phase_planes(b, node, x, planes)                        # (N, C, ry, rx, PH, PW)
    plane = planes[0] * planes[1]
    flat = b.add("reshape", (xp,), {"new_sizes": (n, c, strides[0] * strides[1] * plane)})
    view = b.add("window_view", (flat,), {
        "sizes": (strides[0], strides[1], taps[0], taps[1]) + tuple(out_sp),
        "strides": (strides[1] * plane, plane, planes[1], 1, planes[1], 1)})
    total = None
    for pos in itertools.product(*[range(k) for k in window]):
        (qy, ry), (qx, rx) = (divmod(p, s) for p, s in zip(pos, strides))
        sl = b.add("slice", (view,), {
            "start_indices": (0, 0, ry, rx, qy, qx, 0, 0),
            "limit_indices": (n, c, ry + 1, rx + 1, qy + 1, qx + 1) + tuple(out_sp),
            "strides": (1,) * 8})
        sl = b.add("reshape", (sl,), {"new_sizes": node.shape})
        term = b.add("mul", (sl, _tap(b, node, w, pos)), {})
        total = term if total is None else b.add("add", (total, term), {})
    return b.add("reshape", (total,), {"new_sizes": node.shape}, like=node)


def _tap(b: Builder, node, w, pos):
    """w[:, 0, *pos] broadcast along the output's channels."""
    c, nsp = w.shape[0], len(w.shape[2:])
    tap = b.add("slice", (w,), {"start_indices": (0, 0) + pos,
                                "limit_indices": (c, 1) + tuple(p + 1 for p in pos),
                                "strides": (1,) * (2 + nsp)})
    tap = b.add("reshape", (tap,), {"new_sizes": (c,)})
    return b.add("broadcast_in_dim", (tap,), {"shape": node.shape,
                                              "broadcast_dimensions": (1,)})


def _depthwise_slices(b: Builder, node, x, w):
    """The depthwise sum over strided slices of the (fused) padded input: for symbolic
    image sizes, which a window_view cannot take."""
    total = None
    for pos, sl in _window_slices(b, node, x, w.shape[2:]):
        term = b.add("mul", (sl, _tap(b, node, w, pos)), {})
        total = term if total is None else b.add("add", (total, term), {})
    return b.add("reshape", (total,), {"new_sizes": node.shape}, like=node)


def _stored(x) -> bool:
    """Whether x is a stored value (an input, a variable, a constant) rather than one a
    kernel computes. A strided window the column planes do not take (short output rows)
    over a stored input runs on the patch matrix above MIN_FLOPS: there the phases' 16
    products for 9 and their strided reads cost more. Over a computed input (a residual
    sum in a ResNet) the phases evaluate it once where the patch matrix evaluates it per
    window offset."""
    return x.op in ("parameter", "variable", "constant")


def _reads_in_place(node, x, w) -> bool:
    """Whether the product can read the padded input in place (see the module's text):
    static sizes, a window of at most MAX_WINDOW offsets (MAX_ROW_WINDOW one row tall over
    one output row), two or more output positions."""
    static = all(isinstance(d, int) for d in tuple(x.shape[1:]) + tuple(w.shape) +
                 tuple(node.shape[2:]))
    taps = sym.prod(w.shape[2:])
    return static and len(w.shape) > 2 and sym.prod(node.shape[2:]) >= 2 and (
        taps <= MAX_WINDOW or taps <= MAX_ROW_WINDOW and one_row(node, w.shape[2:]))


def conv_to_gemm(program: Program) -> Program:
    """Convolutions as products that read their input in place (window views, the
    CPU's own windowed GEMM) or as Winograd's algorithm (`winograd_conv2d`, unless the
    program's annotations say winograd=False)."""
    return _convolutions_as_products(program, windowed=True)


def conv_to_patches(program: Program) -> Program:
    """Convolutions as products over patch matrices, and winograd_conv2d as slices,
    sums and one batched product: for backends whose products take one contracting
    dimension and have no Winograd kernel (CUDA's tiled products)."""
    return _convolutions_as_products(program, windowed=False)


def _convolutions_as_products(program: Program, windowed: bool) -> Program:
    cpu = windowed
    use_winograd = windowed and program.annotations.get("winograd", True)

    def rewrite(builder, node, inputs):
        if node.op == "winograd_conv2d" and not cpu:
            return winograd_decomposed(builder, node, *inputs)
        if node.op != "conv":
            return None
        a = node.attrs
        x, w = inputs
        if any(d != 1 for d in a["lhs_dilation"]):
            return input_dilated(builder, node, x, w,
                                 lambda conv: rewrite(builder, conv, conv.inputs) or conv)
        depthwise = a["feature_group_count"] == x.shape[1] == w.shape[0] > 1 and \
            w.shape[1] == 1
        if depthwise and node.dtype in ("float32", "float64") and \
                sym.prod(w.shape[2:]) <= MAX_WINDOW:
            return _depthwise(builder, node, x, w)
        if a["feature_group_count"] != 1:        # grouped: one product per group
            if cpu and node.dtype in ("float32", "float64") and \
                    grouped_in_place_fits(node, x, w) and _reads_in_place(node, x, w):
                return grouped_in_place(builder, node, x, w)
            if node.dtype in ("float32", "float64") and grouped_fits(node, x, w):
                return grouped(builder, node, padded(builder, x, a["padding"]), w)
            return None
        if node.dtype in ("float32", "float64") and one_position(node, x, w):
            return _channel_product(builder, node, x, w)
        if cpu and node.dtype == "bfloat16":     # kept for AMX tiles: over patches
            return _patch_product(builder, node, x, w) if patches_fit(node, x, w) else None
        if node.dtype not in ("float32", "float64"):
            return None
        flops = sym.hint(node.size * sym.prod(w.shape[1:]))     # symbolic: a typical size
        window = sym.prod(w.shape[2:])
        positions = sym.prod(node.shape[2:])
        if use_winograd and flops >= MIN_FLOPS and winograd_fits(node, x, w):
            return winograd(builder, node, padded(builder, x, a["padding"]), w)
        if use_winograd and flops >= MIN_FLOPS and gradient_fits(node, x, w, MAX_PATCH_BYTES):
            return winograd_filter_gradient(builder, node, padded(builder, x, a["padding"]), w)
        # output rows shorter than a vector make the windowed kernel's reads short: the
        # patch matrix is 5x faster there (a 3x3 convolution over 7 x 7 x 512; the
        # ResNet-50-sized model 60 -> 46 ms, its strided 14 -> 7 window included)
        narrow = window > 1 and positions > 1 and node.shape[-1] < IN_PLACE_MIN_ROW and \
            flops >= MIN_FLOPS
        large = window > 1 and flops >= MIN_FLOPS and \
            sym.hint(sym.prod(x.shape[1:])) * dtypes.itemsize(x.dtype) > IN_PLACE_MAX_INPUT \
            and patches_fit(node, x, w)
        if cpu and flops >= IN_PLACE_MIN_FLOPS and _reads_in_place(node, x, w) and \
                not narrow and not large and (flops < MIN_FLOPS or not phased(node, w) or
                                not _stored(x) or column_planed(node, w)):
            return _in_place(builder, node, x, w)
        if not patches_fit(node, x, w):
            return None
        return _patch_product(builder, node, x, w)

    return rebuild(program, rewrite)


def one_position(node, x, w) -> bool:
    """Whether convolution `node` reads one pixel of each image for its one output
    position: 1 x 1 images (static), a 1 x 1 window, no padding, one group (the
    squeeze-and-excitation convolutions after a global average pool). A dilated 1 x 1
    input is the same pixel, and strides and window dilation move nothing here."""
    a = node.attrs
    spatial = tuple(x.shape[2:]) + tuple(w.shape[2:]) + tuple(node.shape[2:])
    return a["feature_group_count"] == 1 and all(d == 1 for d in spatial) and \
        all(lo == 0 and hi == 0 for lo, hi in a["padding"])


def _channel_product(b: Builder, node, x, w):
    """A one-position convolution as the product of the images' channel vectors (N x C)
    with the filter's rows (O x C): a matrix-vector product at batch 1 that reads the
    filter once, contiguously, instead of the direct convolution's loop nest (an
    EfficientNet-style squeeze-and-excitation 1152 -> 48 at batch 1: 33 us as a loop
    nest)."""
    n, c, o = x.shape[0], x.shape[1], w.shape[0]
    rows = b.add("reshape", (x,), {"new_sizes": (n, c)}, like=node)
    filters = b.add("reshape", (w,), {"new_sizes": (o, c)}, like=node)
    y = b.add("dot_general", (rows, filters), {"lhs_contracting": (1,), "rhs_contracting": (1,),
                                               "lhs_batch": (), "rhs_batch": ()}, like=node)
    return b.add("reshape", (y,), {"new_sizes": tuple(node.shape)}, like=node)


def patches_fit(node, x, w) -> bool:
    """Whether convolution `node` of x and w may run as a product over a patch matrix:
    one group, no input dilation, at least MIN_FLOPS, patches of at most MAX_PATCH_BYTES
    and MAX_WINDOW slices."""
    a = node.attrs
    if a["feature_group_count"] != 1 or any(d != 1 for d in a["lhs_dilation"]):
        return False
    flops = sym.hint(node.size * sym.prod(w.shape[1:]))
    window, positions = sym.prod(w.shape[2:]), sym.prod(node.shape[2:])
    return flops >= MIN_FLOPS and patch_bytes(node, x, w) <= MAX_PATCH_BYTES and \
        min(window, positions) <= MAX_WINDOW


def _patch_product(b: Builder, node, x, w):
    """The product over patches: im2col where the window is the smaller, else one slab
    per output position."""
    if sym.prod(w.shape[2:]) <= sym.prod(node.shape[2:]):
        return _im2col(b, node, x, w)
    return per_output_position(b, node, padded(b, x, node.attrs["padding"]), w)
