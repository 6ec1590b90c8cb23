"""DFT as matrix products with cos/sin matrices built at import (forward or inverse,
one-sided, dft_length), and GridSample (linear, nearest, cubic over 1-3 spatial dims;
zeros, border and reflection padding) as gathers of the input at computed positions."""
from __future__ import annotations

import itertools

import numpy as np

import graphc as gc

from .ops import move_axis_last
from .registry import op


@op("DFT")
def _dft(ctx, a, at):
    x = ctx.tensor(a[0])
    out_dtype = x.dtype
    x = gc.cast(x, "float64")                      # sums of n products: keep them exact
    rank = x.ndim
    if ctx.opset >= 20:
        axis = int(np.asarray(ctx.static(a[2], "axis")).reshape(-1)[0]) if len(a) > 2 and \
            a[2] is not None else -2
    else:
        axis = at.get("axis", 1)
    axis = axis + rank if axis < 0 else axis
    if not 0 <= axis < rank - 1:
        raise ctx.unsupported(f"axis {axis} of a rank-{rank} input")
    inverse, onesided = bool(at.get("inverse", 0)), bool(at.get("onesided", 0))
    n_in = x.shape[axis]
    given = int(np.asarray(ctx.static(a[1], "dft_length")).reshape(-1)[0]) if len(a) > 1 and \
        a[1] is not None else None
    if inverse and onesided:
        return gc.cast(_irfft(ctx, x, axis, given or 2 * (n_in - 1)), out_dtype)
    n = given or n_in
    re, back = move_axis_last(x[..., 0], axis)
    im = move_axis_last(x[..., 1], axis)[0] if x.shape[-1] == 2 else None
    if n != n_in:                                  # zero-pad or truncate the signal
        if n > n_in:
            pad = [(0, 0)] * (rank - 2) + [(0, n - n_in)]
            re = gc.pad(re, pad)
            im = gc.pad(im, pad) if im is not None else None
        else:
            re = re[..., :n]
            im = im[..., :n] if im is not None else None
    k_out = n // 2 + 1 if onesided else n
    j, k = np.arange(n)[:, None], np.arange(k_out)[None, :]
    theta = 2 * np.pi * (j * k % n) / n
    cos = ctx.tensor(np.cos(theta), x.dtype)
    sin = ctx.tensor(np.sin(theta), x.dtype)
    sign = 1.0 if inverse else -1.0               # e^{-i theta} forward, e^{+i theta} inverse
    out_re = gc.matmul(re, cos)
    out_im = gc.matmul(re, sin) * ctx.tensor(np.asarray(sign), x.dtype)
    if im is not None:
        out_re = out_re - gc.matmul(im, sin) * ctx.tensor(np.asarray(sign), x.dtype)
        out_im = out_im + gc.matmul(im, cos)
    if inverse:
        scale = ctx.tensor(np.asarray(1.0 / n), x.dtype)
        out_re, out_im = out_re * scale, out_im * scale
    y = gc.stack([gc.transpose(out_re, back), gc.transpose(out_im, back)], -1)
    return gc.cast(y, out_dtype)


def _irfft(ctx, x, axis, n):
    """Inverse of a one-sided spectrum (Hermitian symmetry): a real signal of length n."""
    rank = x.ndim
    half = n // 2 + 1
    re, back = move_axis_last(x[..., 0], axis)
    im = move_axis_last(x[..., 1], axis)[0] if x.shape[-1] == 2 else None
    have = re.shape[-1]
    if have < half:
        pad = [(0, 0)] * (rank - 2) + [(0, half - have)]
        re = gc.pad(re, pad)
        im = gc.pad(im, pad) if im is not None else None
    elif have > half:
        re = re[..., :half]
        im = im[..., :half] if im is not None else None
    k, j = np.arange(half)[:, None], np.arange(n)[None, :]
    weight = np.where((k == 0) | ((n % 2 == 0) & (k == n // 2)), 1.0, 2.0)
    theta = 2 * np.pi * (j * k % n) / n
    y = gc.matmul(re, ctx.tensor(weight * np.cos(theta) / n, x.dtype))
    if im is not None:
        y = y - gc.matmul(im, ctx.tensor(weight * np.sin(theta) / n, x.dtype))
    return gc.expand_dims(gc.transpose(y, back), -1)


# -- GridSample -----------------------------------------------------------------------------

def _cubic_weights(t, a=-0.75):
    """Weights of the taps at floor-1 .. floor+2 for fractional part t (Keys kernel)."""
    def near(d):
        return ((a + 2) * d - (a + 3)) * d * d + 1

    def far(d):
        return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    one = 1.0
    return [far(t + one), near(t), near(one - t), far(2.0 - t)]


def _reflect(ctx, x, lo, hi):
    """x reflected into [lo, hi] (any number of bounces)."""
    span = hi - lo
    if span <= 0:
        return x * 0.0 + lo
    c = lambda v: ctx.tensor(np.asarray(v), x.dtype)  # noqa: E731
    d = gc.abs(x - c(lo))
    flips = gc.floor(d / c(span))
    extra = d - flips * c(span)
    even = gc.floor(flips * c(0.5)) * c(2.0) == flips
    return gc.where(even, extra + c(lo), c(span) - extra + c(lo))


@op("GridSample")
def _grid_sample(ctx, a, at):
    x, grid = ctx.tensor(a[0]), ctx.tensor(a[1])
    mode = at.get("mode", "linear" if ctx.opset >= 20 else "bilinear")
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    padding = at.get("padding_mode", "zeros")
    align = bool(at.get("align_corners", 0))
    n, ch = x.shape[:2]
    spatial = x.shape[2:]
    r = len(spatial)
    out_spatial = grid.shape[1:-1]
    q = int(np.prod(out_spatial))
    dt = x.dtype
    c = lambda v: ctx.tensor(np.asarray(v), dt)  # noqa: E731
    g = gc.reshape(gc.cast(grid, dt), (n, q, r))
    coords = []
    for d in range(r):                              # grid's last dim lists (x, y, z): reversed
        size = spatial[r - 1 - d]
        v = g[:, :, d]
        v = (v + c(1.0)) * c(0.5 * (size - 1)) if align else \
            ((v + c(1.0)) * c(size) - c(1.0)) * c(0.5)
        if padding == "border":
            v = gc.clip(v, 0.0, float(size - 1))
        elif padding == "reflection":
            v = _reflect(ctx, v, 0.0, size - 1.0) if align else \
                gc.clip(_reflect(ctx, v, -0.5, size - 0.5), 0.0, float(size - 1))
        coords.append(v)
    coords = coords[::-1]                           # spatial order d1 .. dr
    flat = gc.reshape(x, (n, ch, -1))
    strides = np.cumprod((1,) + tuple(spatial[::-1]))[:-1][::-1]

    def gather(index_list):
        """Values at integer positions (one [n, q] tensor per dim), 0 outside."""
        inside = None
        pos = None
        for d, idx in enumerate(index_list):
            ok = gc.logical_and(idx >= c(0.0), idx <= c(spatial[d] - 1))
            inside = ok if inside is None else gc.logical_and(inside, ok)
            term = gc.cast(gc.clip(idx, 0.0, float(spatial[d] - 1)), "int64") * \
                ctx.tensor(np.int64(strides[d]))
            pos = term if pos is None else pos + term
        vals = gc.take_along_axis(flat, gc.reshape(pos, (n, 1, q)), 2)
        return gc.where(gc.reshape(inside, (n, 1, q)), vals, c(0.0))

    if mode == "nearest":
        y = gather([gc.round(v) for v in coords])
    elif mode in ("linear", "cubic"):
        base = [gc.floor(v) for v in coords]
        frac = [v - b for v, b in zip(coords, base)]
        if mode == "linear":
            taps = [(0, lambda t: c(1.0) - t), (1, lambda t: t)]
        else:
            taps = [(k - 1, (lambda k: lambda t: _cubic_weights(t)[k])(k)) for k in range(4)]
        y = None
        for combo in itertools.product(taps, repeat=r):
            idx = [b + c(float(off)) for b, (off, _) in zip(base, combo)]
            if mode == "cubic" and padding == "border":
                idx = [gc.clip(i, 0.0, float(spatial[d] - 1)) for d, i in enumerate(idx)]
            elif mode == "cubic" and padding == "reflection":
                idx = [gc.clip(_reflect(ctx, i, 0.0, spatial[d] - 1.0) if align else
                               _reflect(ctx, i, -0.5, spatial[d] - 0.5), 0.0,
                               float(spatial[d] - 1)) for d, i in enumerate(idx)]
            w = None
            for t, (_, fn) in zip(frac, combo):
                w = fn(t) if w is None else w * fn(t)
            term = gather(idx) * gc.reshape(w, (n, 1, q))
            y = term if y is None else y + term
    else:
        raise ctx.unsupported(f"mode {mode!r}")
    return gc.reshape(y, (n, ch) + tuple(out_spatial))
