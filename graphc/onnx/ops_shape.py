"""Converters of ONNX's creation, shape and data-movement ops: Constant, ConstantOfShape,
Shape, Size, Range, Reshape, Flatten, Transpose, Squeeze, Unsqueeze, Concat, Split,
Slice, Expand, Tile, Gather, Pad. Their shape-deciding operands must be known at import;
out-of-range ones are ModelErrors, and values past graphc.onnx.limits' bounds stay graph
operations instead of numpy constants.
"""
from __future__ import annotations

import numpy as np

from graphc_runtime.dims import Dim, Undecidable, is_symbolic, prod

from graphc.functions.elementwise import broadcast_shapes
from graphc.ir.dtypes import canonical as dtypes_of_numpy

import graphc as gc

from .errors import ModelError
from .limits import check_size, fits_in_import
from .ops import _axes_operand, _ints, _norm_axes, _scalar
from .registry import op


# -- creation and shapes --------------------------------------------------------------------

@op("Constant")
def _constant(ctx, a, at):
    for key in ("value", "value_float", "value_floats", "value_int", "value_ints"):
        if key in at:
            v = at[key]
            if key.startswith("value_float"):
                return np.asarray(v, np.float32)
            if key.startswith("value_int"):
                return np.asarray(v, np.int64)
            return np.asarray(v)
    raise ctx.unsupported(f"attribute {sorted(at)} (sparse or string constants)")


@op("ConstantOfShape")
def _constant_of_shape(ctx, a, at):
    shape = _ints(ctx.static(a[0], "the shape"))
    value = at.get("value", np.zeros(1, np.float32))
    fill = np.asarray(value).reshape(-1)[0]
    dtype = np.asarray(value).dtype
    # a broadcast of the sizes at the call, or of a size too large to hold at import
    if any(isinstance(d, Dim) for d in shape) or not fits_in_import(shape, dtype,
                                                                    "the constant"):
        with ctx.graph:
            return gc.full(tuple(shape), fill, dtypes_of_numpy(dtype))
    return np.full(shape, fill, dtype=dtype)


@op("Shape")
def _shape(ctx, a, at):
    dims = np.shape(a[0]) if not isinstance(a[0], gc.Tensor) else a[0].shape
    shape = np.array(dims, dtype=object if is_symbolic(dims) else np.int64)
    n = len(shape)
    start, end = at.get("start", 0), at.get("end", n)
    return shape[slice(start, end)]


@op("Size")
def _size(ctx, a, at):
    n = prod(a[0].shape if isinstance(a[0], gc.Tensor) else np.shape(a[0]))
    return np.asarray(n, object if isinstance(n, Dim) else np.int64)


@op("Range")
def _range(ctx, a, at):
    start, limit, delta = (ctx.static(v, "Range's operands") for v in a[:3])
    for name, v in (("start", start), ("limit", limit), ("delta", delta)):
        if v.size != 1:
            raise ctx.unsupported(f"{name} must be a scalar, got shape {v.shape}")
    dtype = start.dtype
    start, limit, delta = (v.reshape(()) for v in (start, limit, delta))
    s0, s1, step = (v.item() for v in (start, limit, delta))
    if isinstance(s1, Dim) and not isinstance(s0, Dim) and step == 1 and s1 - s0 >= 1:
        with ctx.graph:                     # 0, 1, ... up to a size known at the call
            ramp = gc.iota((s1 - s0,), 0, dtypes_of_numpy(dtype))
            return (ramp + int(s0)) if s0 else ramp
    for v in (s0, s1, step):
        if isinstance(v, Dim):
            raise Undecidable(f"Range's length follows the symbolic size {v}")
    if step == 0:
        raise ModelError("Range's delta is 0")
    if not all(np.isfinite(float(v)) for v in (s0, s1, step)):
        raise ModelError(f"Range({s0}, {s1}, {step}) has a non-finite operand")
    n = max(int(np.ceil((float(s1) - float(s0)) / float(step))), 0)
    if not fits_in_import((n,), dtype, "Range's result"):
        with ctx.graph:                     # computed when the program runs
            ramp = gc.iota((n,), 0, dtypes_of_numpy(dtype))
            return ramp * gc.constant(delta) + gc.constant(start)
    return np.arange(start, limit, delta, dtype=dtype)


@op("Reshape")
def _reshape(ctx, a, at):
    x = a[0]
    shape = _ints(at["shape"]) if ctx.opset < 5 else _ints(ctx.static(a[1], "the shape"))
    src = list(x.shape if isinstance(x, gc.Tensor) else np.shape(x))
    if not at.get("allowzero", 0):
        past = [k for k, d in enumerate(shape) if d == 0 and k >= len(src)]
        if past:
            raise ModelError(f"shape {shape}: entry {past[0]} is 0 (keep the input's size) "
                             f"but the input has only {len(src)} axes")
        shape = [src[k] if d == 0 else d for k, d in enumerate(shape)]
    if sum(1 for d in shape if isinstance(d, int) and d == -1) > 1 or any(
            isinstance(d, int) and d < -1 for d in shape):
        raise ModelError(f"shape {shape}: at most one -1 and no other negative entry")
    if isinstance(x, gc.Tensor):
        return gc.reshape(x, tuple(shape))
    return np.reshape(x, shape)


@op("Flatten")
def _flatten(ctx, a, at):
    x = ctx.tensor(a[0])
    axis = at.get("axis", 1)
    axis = axis + x.ndim if axis < 0 else axis
    head = prod(x.shape[:axis]) if axis else 1
    return gc.reshape(x, (head, -1 if x.size else 0) if head else (0, prod(x.shape[axis:])))


@op("Transpose")
def _transpose(ctx, a, at):
    x = a[0]
    ndim = x.ndim if isinstance(x, gc.Tensor) else np.ndim(x)
    perm = at.get("perm", list(range(ndim))[::-1])
    return gc.transpose(x, tuple(perm)) if isinstance(x, gc.Tensor) else np.transpose(x, perm)


@op("Squeeze")
def _squeeze(ctx, a, at):
    x = a[0]
    axes = _axes_operand(ctx, a, at, 13)
    if not isinstance(x, gc.Tensor):
        return np.squeeze(x, axis=tuple(axes) if axes is not None else None)
    return gc.squeeze(x, tuple(axes) if axes is not None else None)


@op("Unsqueeze")
def _unsqueeze(ctx, a, at):
    x = a[0]
    axes = _axes_operand(ctx, a, at, 13)
    ndim = (x.ndim if isinstance(x, gc.Tensor) else np.ndim(x)) + len(axes)
    shape = list(x.shape if isinstance(x, gc.Tensor) else np.shape(x))
    for ax in _norm_axes(axes, ndim):
        shape.insert(ax, 1)
    return gc.reshape(x, tuple(shape)) if isinstance(x, gc.Tensor) else np.reshape(x, shape)


@op("Concat")
def _concat(ctx, a, at):
    vals = [v for v in a if v is not None]
    if all(not isinstance(v, gc.Tensor) for v in vals):
        return np.concatenate([np.asarray(v) for v in vals], axis=at["axis"])
    vals = [ctx.tensor(v) for v in vals]
    vals = [v for v in vals if v.size or len(vals) == 1]
    return gc.concatenate(vals, axis=at["axis"])


@op("Split")
def _split(ctx, a, at):
    x = ctx.tensor(a[0])
    axis = at.get("axis", 0)
    axis = axis + x.ndim if axis < 0 else axis
    n = len(ctx.node.output)
    if ctx.opset >= 13:
        sizes = a[1] if len(a) > 1 else None
        sizes = None if sizes is None else _ints(ctx.static(sizes, "split"))
    else:
        sizes = at.get("split")
    if sizes is None:
        count = at.get("num_outputs", n)
        step = -(-x.shape[axis] // count)
        sizes = [min(step, x.shape[axis] - k * step) for k in range(count)]
    outs, start = [], 0
    for s in sizes:
        key = [slice(None)] * x.ndim
        key[axis] = slice(start, start + s)
        outs.append(x[tuple(key)])
        start += s
    return outs


@op("Slice")
def _slice(ctx, a, at):
    x = a[0]
    shape = x.shape if isinstance(x, gc.Tensor) else np.shape(x)
    if ctx.opset < 10:
        starts, ends = at["starts"], at["ends"]
        axes, steps = at.get("axes"), None
    else:
        starts = _ints(ctx.static(a[1], "starts"))
        ends = _ints(ctx.static(a[2], "ends"))
        axes = _ints(ctx.static(a[3], "axes")) if len(a) > 3 and a[3] is not None else None
        steps = _ints(ctx.static(a[4], "steps")) if len(a) > 4 and a[4] is not None else None
    axes = axes if axes is not None else list(range(len(starts)))
    steps = steps or [1] * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ModelError(f"starts, ends, axes and steps have different lengths "
                         f"({len(starts)}, {len(ends)}, {len(axes)}, {len(steps)})")
    if 0 in steps:
        raise ModelError(f"steps {list(steps)}: a step of 0")
    bad = [ax for ax in axes if not -len(shape) <= ax < len(shape)]
    if bad or len({ax % max(len(shape), 1) for ax in axes}) != len(axes):
        raise ModelError(f"axes {list(axes)} out of range or repeated for an input of "
                         f"rank {len(shape)}")
    key = [slice(None)] * len(shape)
    big = 1 << 62
    for s, e, ax, st in zip(starts, ends, axes, steps):
        ax = ax + len(shape) if ax < 0 else ax
        s = max(min(s, big), -big)
        e = max(min(e, big), -big)
        key[ax] = slice(s, e, st)
    if not isinstance(x, gc.Tensor):
        return np.asarray(x)[tuple(key)]
    return _strided(x, key)


def _strided(x, key):
    """x[key] with numpy's clamping, negative steps through a reversal."""
    out = x
    for ax, k in enumerate(key):
        if k == slice(None):
            continue
        start, stop, step = k.indices(out.shape[ax])
        if step < 0:
            n = out.shape[ax]
            out = gc.flip(out, ax)                       # position p -> n - 1 - p
            start, stop, step = n - 1 - start, n - 1 - stop, -step
        sel = [slice(None)] * out.ndim
        sel[ax] = slice(start, max(stop, start), step)
        out = out[tuple(sel)]
    return out


@op("Expand")
def _expand(ctx, a, at):
    x = ctx.tensor(a[0])
    shape = broadcast_shapes([x.shape, tuple(_ints(ctx.static(a[1], "the shape")))],
                             ctx.where())           # numpy's rule, symbolic sizes too
    return gc.broadcast_to(x, shape)


@op("Tile")
def _tile(ctx, a, at):
    x = ctx.tensor(a[0])
    reps = _ints(ctx.static(a[1], "repeats"))
    if len(reps) != x.ndim or any(isinstance(r, int) and r < 0 for r in reps):
        raise ModelError(f"repeats {reps}: one entry >= 0 per axis of the rank-{x.ndim} "
                         f"input expected")
    check_size(tuple(r * n for r, n in zip(reps, x.shape)), x.dtype, "Tile's result")
    for ax, r in enumerate(reps):
        if r == 0:
            x = x[(slice(None),) * ax + (slice(0, 0),)]
        elif r != 1:          # r copies of the axis: a broadcast over a new axis before it
            wide = gc.broadcast_to(gc.expand_dims(x, ax), x.shape[:ax] + (r,) + x.shape[ax:])
            x = gc.reshape(wide, x.shape[:ax] + (r * x.shape[ax],) + x.shape[ax + 1:])
    return x


@op("Gather")
def _gather(ctx, a, at):
    x = a[0]
    axis = at.get("axis", 0)
    if not isinstance(x, gc.Tensor) and not isinstance(a[1], gc.Tensor):
        return np.take(np.asarray(x), np.asarray(a[1]), axis=axis)
    x = ctx.tensor(x)
    axis = axis + x.ndim if axis < 0 else axis
    idx = a[1]
    n = x.shape[axis]
    if isinstance(idx, gc.Tensor):
        idx = gc.where(idx < 0, idx + _scalar(ctx, n, idx), idx)
    else:
        idx = np.asarray(idx)
        if idx.size and isinstance(n, int) and (idx.min() < -n or idx.max() >= n):
            raise ModelError(f"constant indices {idx.min()}..{idx.max()} out of range for an "
                             f"axis of size {n} (ONNX allows [-{n}, {n - 1}])")
        idx = np.where(idx < 0, idx + n, idx)
        idx = ctx.tensor(idx.astype(np.int32 if n < (1 << 31) else np.int64))
    return gc.take(x, idx, axis=axis)


@op("Pad")
def _pad(ctx, a, at):
    x = ctx.tensor(a[0])
    mode = at.get("mode", "constant")
    if mode not in ("constant", "edge", "reflect", "wrap"):
        raise ctx.unsupported(f"mode {mode!r}")
    if ctx.opset < 11:
        pads, value = list(at.get("pads", at.get("paddings"))), at.get("value", 0.0)
        axes = None
    else:
        pads = _ints(ctx.static(a[1], "pads"))
        value = ctx.static(a[2], "constant_value") if len(a) > 2 and a[2] is not None else 0
        value = np.asarray(value).reshape(-1)[0] if np.size(value) else 0
        axes = _ints(ctx.static(a[3], "axes")) if len(a) > 3 and a[3] is not None else None
    axes = _norm_axes(axes, x.ndim) if axes is not None else list(range(x.ndim))
    half = len(pads) // 2
    low, high = [0] * x.ndim, [0] * x.ndim
    for k, ax in enumerate(axes):
        low[ax], high[ax] = pads[k], pads[k + half]
    crop = [slice(max(-lo, 0), x.shape[ax] - max(-hi, 0)) for ax, (lo, hi) in
            enumerate(zip(low, high))]
    if any(v < 0 for v in low + high):
        x = x[tuple(crop)]
    if mode != "constant":
        for ax in range(x.ndim):
            lo, hi = max(low[ax], 0), max(high[ax], 0)
            if lo or hi:
                x = gc.take(x, ctx.tensor(_pad_source(x.shape[ax], lo, hi, mode)), axis=ax)
        return x
    return gc.pad(x, [(max(lo, 0), max(hi, 0)) for lo, hi in zip(low, high)],
                  constant_values=value)


def _pad_source(n, lo, hi, mode):
    """For each position of a padded axis, the input position it copies (edge, reflect or
    wrap padding)."""
    i = np.arange(-lo, n + hi)
    if mode == "edge":
        return np.clip(i, 0, n - 1)
    if mode == "wrap":
        return np.mod(i, n)
    if n == 1:
        return np.zeros_like(i)
    period = 2 * (n - 1)                        # reflect: ... 2 1 | 0 1 2 ... n-1 | n-2 ...
    m = np.mod(i, period)
    return np.where(m < n, m, period - m)
