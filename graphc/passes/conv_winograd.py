"""Winograd's F(2x2, 3x3) for convolutions (the rewrite conv_to_gemm applies on the CPU):
which convolutions take it, the rewrite into winograd_conv2d (ir/ops/winograd.py) and,
for a backend without a Winograd kernel, its decomposition into slices, sums and one
batched product."""
from __future__ import annotations

from ..ir.dtypes import to_numpy
from ..ir.ops.winograd import AT, BT, filter_matrix, filter_transform
from .program import Builder

WINOGRAD_MIN_CHANNELS = 16
WINOGRAD_TILE_BYTES = 256 << 10
WINOGRAD_FILTER_BYTES = 16 << 20
# the filters' transform (16 x O x C): 1024 channels at 14 x 14 (64 MB, computed per
# call from variable filters) ran at 0.92x the windowed GEMM, 512 channels (16 MB)
# 1.12-1.54x; below it every ResNet stage at 224 x 224 runs 1.4-1.7x faster (one
# image and 8, 2 threads: docs/performance.md)


ODD_MIN_OUTPUTS = 7
# odd output sizes: the input padded by one more row / column, the extra outputs
# dropped. Constant filters only (inference): 512 channels at 7 x 7, 2 threads, 10.6 ->
# 6.9 ms at batch 8 and 1.43 -> 0.96 ms at batch 1; with filters transformed per call
# (training) 10.1 -> 9.4 ms at batch 8 but 1.7 -> 4.3 ms at batch 1
ODD_MIN_COLUMNS = 128
# and only where the per-position products have that many columns (tiles x images): on
# the own GEMM's 6 x 4 tile the direct product of a 7 x 7 image (16 tiles) was 2-3%
# faster at batch 1, 2 and 4, as fast at batch 8 (docs/performance.md)


def winograd_fits(node, x, w) -> bool:
    """Whether a convolution runs as winograd_conv2d (ir/ops/winograd.py; CPU only): a
    3x3 window at stride 1 without dilation, static sizes, even output sizes (or odd
    ones of ODD_MIN_OUTPUTS or more under constant filters, ODD_MIN_COLUMNS tiles of all
    images or more; a symbolic batch counts as enough), at least
    WINOGRAD_MIN_CHANNELS in and out (the per-position products contract the input
    channels), one row of tiles' transforms within WINOGRAD_TILE_BYTES and the filters'
    within WINOGRAD_FILTER_BYTES."""
    a = node.attrs
    static = all(isinstance(d, int) for d in tuple(x.shape[1:]) + tuple(node.shape[1:]))
    if not static or tuple(w.shape[2:]) != (3, 3) or node.dtype not in ("float32", "float64"):
        return False
    if any(s != 1 for s in a["window_strides"]) or any(d != 1 for d in a["rhs_dilation"]):
        return False
    o, c, oh, ow = node.shape[1], x.shape[1], node.shape[2], node.shape[3]
    item = x.nbytes // max(x.size, 1)
    row_bytes = 16 * max(o, c) * ((ow + 1) // 2) * item
    batch = x.shape[0] if isinstance(x.shape[0], int) else ODD_MIN_COLUMNS
    tiles = ((oh + 1) // 2) * ((ow + 1) // 2) * batch
    sizes = oh % 2 == 0 and ow % 2 == 0 or w.op == "constant" and \
        min(oh, ow) >= ODD_MIN_OUTPUTS and tiles >= ODD_MIN_COLUMNS
    return sizes and min(o, c) >= WINOGRAD_MIN_CHANNELS and \
        row_bytes <= WINOGRAD_TILE_BYTES and 16 * o * c * item <= WINOGRAD_FILTER_BYTES


def winograd(b: Builder, node, xp, w):
    """The convolution as winograd_conv2d over its padded input xp; the filters'
    transform is folded when they are constants, else computed by a small product per
    call. Odd output sizes: xp padded by one more row / column, the last one dropped."""
    o, c = w.shape[:2]
    if w.op == "constant":
        u = b.add("constant", (), {"value": filter_transform(w.attrs["value"])})
    else:
        dtype = to_numpy(w.dtype)
        gk = b.add("constant", (), {"value": filter_matrix().astype(dtype)})
        flat = b.add("reshape", (w,), {"new_sizes": (o, c, 9)})
        u = b.add("dot_general", (gk, flat), {"lhs_contracting": (1,), "rhs_contracting": (2,),
                                              "lhs_batch": (), "rhs_batch": ()})
    oh, ow = node.shape[2:]
    if oh % 2 == 0 and ow % 2 == 0:
        return b.add("winograd_conv2d", (xp, u), {}, like=node)
    xp = b.add("pad", (xp,), {"low": (0,) * 4, "high": (0, 0, oh % 2, ow % 2),
                              "interior": (0,) * 4, "value": 0.0})
    y = b.add("winograd_conv2d", (xp, u), {}, like=node)
    return b.add("slice", (y,), {"start_indices": (0,) * 4, "limit_indices": node.shape,
                                 "strides": (1,) * 4}, like=node)


def signed_sum(b: Builder, coefs, terms):
    """sum of coefs[i] * terms[i], coefficients in {-1, 0, 1} (a transform's row)."""
    pos = [t for k, t in zip(coefs, terms) if k == 1]
    neg = [t for k, t in zip(coefs, terms) if k == -1]
    acc = pos[0] if pos else b.add("neg", (neg.pop(0),), {})
    for t in pos[1:]:
        acc = b.add("add", (acc, t), {})
    for t in neg:
        acc = b.add("sub", (acc, t), {})
    return acc


def tile_slices(b: Builder, t, k: int, th: int, tw: int):
    """The k x k strided slices of t (a, b, H, W) -> (a, b, th, tw): slice (i, j) holds
    element (i, j) of every tile, the tiles 2 apart."""
    n, c = t.shape[:2]
    return [[b.add("slice", (t,), {"start_indices": (0, 0, i, j),
                                   "limit_indices": (n, c, i + 2 * th - 1, j + 2 * tw - 1),
                                   "strides": (1, 1, 2, 2)}) for j in range(k)]
            for i in range(k)]


def transformed(b: Builder, tiles, rows, swap: bool = False):
    """(16, channels, tiles) of rows @ t @ rows^T for each tile t, `tiles` a k x k grid
    of (channels, N, th, tw) slices (tile_slices), or of (N, channels, th, tw) ones with
    `swap`."""
    k = len(tiles)
    half = [[signed_sum(b, r, [tiles[i][j] for i in range(k)]) for j in range(k)]
            for r in rows]
    parts = []
    for a in range(len(rows)):
        for r in rows:
            p = signed_sum(b, r, half[a])
            if swap:
                p = b.add("transpose", (p,), {"permutation": (1, 0, 2, 3)})
            ch, n, th, tw = p.shape
            parts.append(b.add("reshape", (p,), {"new_sizes": (1, ch, n * th * tw)}))
    return b.add("concatenate", tuple(parts), {"dimension": 0})


def winograd_decomposed(b: Builder, node, xp, u):
    """winograd_conv2d as slices, sums and one batched product (a device without its own
    kernel, CUDA): V (16, C, N*T) of the tiles' input transforms, M = u @ V per
    position, the output transform of M's slices, the tiles laid out as the image."""
    n, _, hp, wp = xp.shape
    o, th, tw = u.shape[1], (hp - 2) // 2, (wp - 2) // 2
    bt, at = BT.astype(int).tolist(), AT.astype(int).tolist()
    v = transformed(b, tile_slices(b, xp, 4, th, tw), bt, swap=True)
    m = b.add("dot_general", (u, v), {"lhs_contracting": (2,), "rhs_contracting": (1,),
                                      "lhs_batch": (0,), "rhs_batch": (0,)})
    ms = [[b.add("reshape", (b.add("slice", (m,), {
        "start_indices": (4 * i + j, 0, 0), "limit_indices": (4 * i + j + 1, o, n * th * tw),
        "strides": (1, 1, 1)}),), {"new_sizes": (o, n, th, 1, tw, 1)}) for j in range(4)]
        for i in range(4)]
    half = [[signed_sum(b, r, [ms[i][j] for i in range(4)]) for j in range(4)] for r in at]
    rows = [b.add("concatenate", tuple(signed_sum(b, r, half[a]) for r in at),
                  {"dimension": 5}) for a in range(2)]
    y = b.add("concatenate", tuple(rows), {"dimension": 3})       # (O, N, th, 2, tw, 2)
    y = b.add("reshape", (y,), {"new_sizes": (o, n, 2 * th, 2 * tw)})
    return b.add("transpose", (y,), {"permutation": (1, 0, 2, 3)}, like=node)
