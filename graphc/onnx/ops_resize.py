"""Resize and Upsample: each resized axis is one matrix product with a [out, in] weight
matrix computed at import from the op's coordinate mapping and filter (nearest, linear,
cubic; antialiased downsampling; tf_crop_and_resize's extrapolation)."""
from __future__ import annotations

import numpy as np

import graphc as gc

from .ops import move_axis_last
from .registry import op


def _source(x, in_len, out_len, scale, mode, roi):
    """Where output coordinate(s) `x` sample the input (ONNX coordinate_transformation_mode)."""
    if mode == "half_pixel":
        return (x + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":
        adjustment = out_len / (scale * in_len)
        return in_len / 2 * (1 - adjustment) + (x + 0.5) / scale - 0.5
    if mode == "pytorch_half_pixel":
        return (x + 0.5) / scale - 0.5 if out_len > 1 else np.zeros_like(x)
    if mode == "align_corners":               # the resized length as scale * in_len, unrounded
        length = in_len * scale
        return x * (in_len - 1) / (length - 1) if length != 1 else np.zeros_like(x)
    if mode == "asymmetric":
        return x / scale
    if mode == "tf_half_pixel_for_nn":
        return (x + 0.5) / scale
    if mode == "tf_crop_and_resize":
        start, end = roi
        if out_len > 1:
            return start * (in_len - 1) + x * (end - start) * (in_len - 1) / (out_len - 1)
        return np.full_like(x, 0.5 * (start + end) * (in_len - 1))
    raise ValueError(mode)


def _nearest(src, how):
    floor = np.floor(src)
    half = np.isclose(src - floor, 0.5)
    if how == "round_prefer_floor":
        return np.where(half, floor, np.floor(src + 0.5))
    if how == "round_prefer_ceil":
        return np.where(half, floor + 1, np.floor(src + 0.5))
    if how == "floor":
        return floor
    if how == "ceil":
        return np.ceil(src)
    raise ValueError(how)


def _cubic(d, a):
    d = np.abs(d)
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.where(d <= 1, near, np.where(d < 2, far, 0.0))


def weights(in_len, out_len, scale, at, roi=(0.0, 1.0)):
    """[out, in] weights and the [out] rows that extrapolate (tf_crop_and_resize)."""
    mode = at.get("mode", "nearest")
    ctm = at.get("coordinate_transformation_mode", "half_pixel")
    x = np.arange(out_len, dtype=np.float64)
    src = _source(x, in_len, out_len, scale, ctm, roi)
    w = np.zeros((out_len, in_len))
    outside = (src < 0) | (src > in_len - 1) if ctm == "tf_crop_and_resize" else \
        np.zeros(out_len, bool)
    rows = np.arange(out_len)
    if mode == "nearest":
        idx = np.clip(_nearest(src, at.get("nearest_mode", "round_prefer_floor")), 0,
                      in_len - 1).astype(np.int64)
        w[rows, idx] = 1.0
    else:
        base = np.floor(src)
        ratio = src - base
        s = min(scale, 1.0) if at.get("antialias", 0) else 1.0
        if mode == "linear":
            start = int(np.floor(-1 / s) + 1)
            taps = np.arange(start, 2 - start)
            coeff = np.clip(1 - np.abs((taps[None, :] - ratio[:, None]) * s), 0, 1)
        else:
            start = int(np.floor(-2 / s) + 1)
            taps = np.arange(start, 2 - start)
            coeff = _cubic((taps[None, :] - ratio[:, None]) * s, at.get("cubic_coeff_a", -0.75))
        pos = base[:, None] + taps[None, :]
        if at.get("exclude_outside", 0):
            coeff = np.where((pos < 0) | (pos > in_len - 1), 0.0, coeff)
        if s != 1.0 or at.get("exclude_outside", 0):
            coeff = coeff / coeff.sum(1, keepdims=True)
        idx = np.clip(pos, 0, in_len - 1).astype(np.int64)
        for t in range(len(taps)):
            np.add.at(w, (rows, idx[:, t]), coeff[:, t])
    w[outside] = 0.0
    return w, outside


def _resize(ctx, x, scales, sizes, at, roi=None, axes=None):
    """x resized on `axes` to `sizes` (or by `scales`)."""
    axes = list(range(x.ndim)) if axes is None else [a + x.ndim if a < 0 else a for a in axes]
    mode = at.get("mode", "nearest")
    if mode not in ("nearest", "linear", "cubic"):
        raise ctx.unsupported(f"mode={mode!r}")
    if sizes is not None:
        sizes = [int(v) for v in sizes]
        in_sizes = [x.shape[a] for a in axes]
        policy = at.get("keep_aspect_ratio_policy", "stretch")
        if policy == "stretch":
            scales = [o / i for o, i in zip(sizes, in_sizes)]
        else:
            ratios = [o / i for o, i in zip(sizes, in_sizes)]
            common = min(ratios) if policy == "not_larger" else max(ratios)
            scales = [common] * len(axes)
            sizes = [int(np.floor(common * i + 0.5)) for i in in_sizes]
    else:
        scales = [float(v) for v in scales]
        if at.get("coordinate_transformation_mode") == "tf_crop_and_resize" and roi is not None:
            sizes = [int(np.floor(x.shape[a] * (roi[k][1] - roi[k][0]) * scales[k]))
                     for k, a in enumerate(axes)]
        else:
            sizes = [int(np.floor(x.shape[a] * s)) for a, s in zip(axes, scales)]
    is_float = gc.ir.dtypes.is_float(x.dtype)
    if not is_float and mode != "nearest":
        raise ctx.unsupported(f"{mode} resize of {x.dtype} values")
    y = x
    extrapolate = None
    for k, a in enumerate(axes):
        n_in, n_out = x.shape[a], sizes[k]
        if n_in == n_out and scales[k] == 1.0 and roi is None:
            continue
        w, outside = weights(n_in, n_out, scales[k], at,
                             roi[k] if roi is not None else (0.0, 1.0))
        if is_float:
            moved, back = move_axis_last(y, a)
            y = gc.transpose(gc.matmul(moved, ctx.tensor(w.T, y.dtype)), back)
        else:
            y = gc.take(y, ctx.tensor(w.argmax(1).astype(np.int64)), axis=a)
        if outside.any():
            shape = [1] * x.ndim
            shape[a] = n_out
            m = outside.reshape(shape)
            extrapolate = m if extrapolate is None else (extrapolate | m)
    if extrapolate is not None:
        value = np.asarray(at.get("extrapolation_value", 0.0))
        y = gc.where(ctx.tensor(np.broadcast_to(extrapolate, y.shape).copy()),
                     ctx.tensor(value, y.dtype), y)
    return y


@op("Resize")
def _resize_op(ctx, a, at):
    x = ctx.tensor(a[0])
    if ctx.opset < 11:                            # Resize-10: X, scales; asymmetric
        at = dict(at, coordinate_transformation_mode="asymmetric", nearest_mode="floor")
        return _resize(ctx, x, ctx.static(a[1], "scales").reshape(-1), None, at)
    if at.get("antialias", 0) and at.get("mode", "nearest") == "nearest":
        raise ctx.unsupported("antialias with nearest mode")
    axes = at.get("axes")
    roi = ctx.static(a[1], "roi") if len(a) > 1 and a[1] is not None else None
    scales = ctx.static(a[2], "scales") if len(a) > 2 and a[2] is not None else None
    sizes = ctx.static(a[3], "sizes") if len(a) > 3 and a[3] is not None else None
    if scales is not None and scales.size == 0:
        scales = None
    if sizes is not None and sizes.size == 0:
        sizes = None
    if (scales is None) == (sizes is None):
        raise ctx.unsupported("exactly one of scales and sizes must be given")
    n = len(axes) if axes is not None else x.ndim
    if at.get("coordinate_transformation_mode") == "tf_crop_and_resize" and roi is not None \
            and roi.size:
        roi = roi.reshape(-1)
        roi = [(float(roi[k]), float(roi[k + n])) for k in range(n)]
    else:
        roi = None
    return _resize(ctx, x, None if scales is None else scales.reshape(-1),
                   None if sizes is None else sizes.reshape(-1), at, roi, axes)


@op("Upsample")
def _upsample(ctx, a, at):
    x = ctx.tensor(a[0])
    scales = np.asarray(at["scales"]) if ctx.opset < 9 else ctx.static(a[1], "scales")
    at = dict(at, coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    return _resize(ctx, x, scales.reshape(-1), None, at)
