"""Converters for ONNX indexing and network ops: GatherElements, GatherND, ScatterElements,
ScatterND, ConvTranspose, LpNormalization, DepthToSpace, SpaceToDepth."""
from __future__ import annotations

import numpy as np

from graphc_runtime.dims import Dim

import graphc as gc
from graphc.tensor import bind

from .errors import ModelError
from .ops import _scalar
from .ops_pool import check_window
from .registry import op


def _index(ctx, idx, n):
    """int64 indices with negative ones wrapped (idx + n)."""
    idx = gc.cast(ctx.tensor(idx), "int64")
    return gc.where(idx < ctx.tensor(np.int64(0)), idx + ctx.tensor(np.int64(n)), idx)


def _crop_to(x, shape, skip):
    """x[:shape[0], :shape[1], ...] on every axis but `skip`."""
    key = tuple(slice(None) if d == skip or shape[d] == x.shape[d] else slice(0, shape[d])
                for d in range(x.ndim))
    return x[key] if any(k != slice(None) for k in key) else x


@op("GatherElements")
def _gather_elements(ctx, a, at):
    x = ctx.tensor(a[0])
    axis = at.get("axis", 0)
    axis = axis + x.ndim if axis < 0 else axis
    idx = _index(ctx, a[1], x.shape[axis])
    return gc.take_along_axis(_crop_to(x, idx.shape, axis), idx, axis)


def _flat_positions(ctx, shape, idx, axis):
    """Row-major positions in `shape` of the elements idx addresses along `axis` (the other
    coordinates: the element's own)."""
    strides = np.cumprod((1,) + tuple(shape[::-1]))[:-1][::-1]
    pos = None
    for d in range(len(shape)):
        coord = idx if d == axis else gc.iota(idx.shape, d, "int64")
        term = coord * ctx.tensor(np.int64(strides[d]))
        pos = term if pos is None else pos + term
    return pos


MAX_PAIRWISE = 1 << 24


def _scatter(ctx, data, positions, updates, reduction, what):
    """data (flattened) with `updates` scattered to `positions` (any shape, same as updates'
    leading dims); reduction none or add through scatter_add, mul/max/min pairwise."""
    if reduction not in ("none", "add", "mul", "max", "min"):
        raise ctx.unsupported(f"reduction={reduction!r}")
    if data.dtype == "bool":
        raise ctx.unsupported(f"{what} on bool tensors")
    flat = gc.reshape(data, (-1,) + data.shape[len(data.shape) - (updates.ndim -
                                                                  positions.ndim):]) \
        if updates.ndim > positions.ndim else gc.reshape(data, (-1,))
    if reduction in ("mul", "max", "min"):
        return gc.reshape(_scatter_pairwise(ctx, flat, positions, updates, reduction, what),
                          data.shape)
    zeros = gc.zeros_like(flat)
    added = bind("scatter_add", zeros, positions, updates, axis=0)
    if reduction == "add":
        out = flat + added
    else:
        ones = gc.ones_like(updates)
        hit = bind("scatter_add", gc.zeros_like(flat), positions, ones, axis=0)
        out = gc.where(hit > _scalar(ctx, 0, hit), added, flat)
    return gc.reshape(out, data.shape)


def _scatter_pairwise(ctx, flat, positions, updates, reduction, what):
    """Every (target, update) pair compared: each target combines the updates aimed at it
    (mul, max or min) with its own value."""
    rows = flat.shape[0]
    pos = gc.reshape(positions, (-1,))
    rest = flat.shape[1:]
    upd = gc.reshape(updates, (pos.shape[0],) + rest)
    n_upd = pos.shape[0]
    if rows * n_upd * max(int(np.prod(rest)), 1) > MAX_PAIRWISE:
        raise ctx.unsupported(f"{what} reduction={reduction!r} over {rows} targets x {n_upd} "
                              f"updates (graphc compares them pairwise, up to {MAX_PAIRWISE})")
    hit = gc.reshape(gc.iota((rows, n_upd), 0, "int64"), (rows, n_upd)) == \
        gc.reshape(pos, (1, n_upd))                                  # [rows, updates]
    hit_full = gc.reshape(hit, (rows, n_upd) + (1,) * len(rest))
    spread = gc.reshape(upd, (1, n_upd) + rest)
    npd = gc.ir.dtypes.to_numpy(flat.dtype)
    if reduction == "mul":
        unit = np.ones((), npd)
    elif gc.ir.dtypes.is_float(flat.dtype):
        unit = np.asarray(-np.inf if reduction == "max" else np.inf, npd)
    else:
        info = np.iinfo(npd)
        unit = np.asarray(info.min if reduction == "max" else info.max, npd)
    picked = gc.where(hit_full, spread, ctx.tensor(unit))
    if reduction == "mul":
        return flat * gc.prod(picked, 1)
    combined = gc.max(picked, 1) if reduction == "max" else gc.min(picked, 1)
    any_hit = gc.reshape(gc.max(gc.cast(hit, "int32"), 1), (rows,) + (1,) * len(rest)) > \
        ctx.tensor(np.int32(0))
    both = gc.maximum(flat, combined) if reduction == "max" else gc.minimum(flat, combined)
    return gc.where(any_hit, both, flat)


@op("ScatterElements", "Scatter")
def _scatter_elements(ctx, a, at):
    x = ctx.tensor(a[0])
    axis = at.get("axis", 0)
    axis = axis + x.ndim if axis < 0 else axis
    idx = _index(ctx, a[1], x.shape[axis])
    updates = ctx.tensor(a[2], x.dtype)
    pos = _flat_positions(ctx, x.shape, idx, axis)
    return _scatter(ctx, x, pos, updates, at.get("reduction", "none"), "ScatterElements")


def _nd_positions(ctx, shape, idx):
    """Positions in the first k dims of `shape` for index tuples idx[..., k]."""
    k = idx.shape[-1]
    strides, acc = [], 1
    for n in reversed(shape[:k]):
        strides.insert(0, acc)
        acc = acc * n
    size = lambda n: gc.dim_size(n, "int64") if isinstance(n, Dim) else \
        ctx.tensor(np.int64(n))                   # a symbolic size: its value at the call
    pos = None
    for d in range(k):
        coord = idx[..., d]
        coord = gc.where(coord < ctx.tensor(np.int64(0)), coord + size(shape[d]), coord)
        term = coord * size(strides[d])
        pos = term if pos is None else pos + term
    return pos


@op("ScatterND")
def _scatter_nd(ctx, a, at):
    x = ctx.tensor(a[0])
    idx = gc.cast(ctx.tensor(a[1]), "int64")
    updates = ctx.tensor(a[2], x.dtype)
    pos = _nd_positions(ctx, x.shape, idx)
    return _scatter(ctx, x, pos, updates, at.get("reduction", "none"), "ScatterND")


@op("GatherND")
def _gather_nd(ctx, a, at):
    x = ctx.tensor(a[0])
    idx = gc.cast(ctx.tensor(a[1]), "int64")
    b = at.get("batch_dims", 0)
    k = idx.shape[-1]
    if b:
        if b != 1:
            raise ctx.unsupported(f"batch_dims={b} (graphc gathers with 0 or 1)")
        row = gc.iota(idx.shape[:-1] + (1,), 0, "int64")
        idx = gc.concatenate([row, idx], -1)
        k += 1
    pos = _nd_positions(ctx, x.shape, idx)
    flat = gc.reshape(x, (-1,) + x.shape[k:])
    return gc.take(flat, pos, axis=0)


@op("ConvTranspose")
def _conv_transpose(ctx, a, at):
    x, w = ctx.tensor(a[0]), ctx.tensor(a[1], a[0].dtype if isinstance(a[0], gc.Tensor)
                                        else None)
    dims = x.ndim - 2
    if dims not in (1, 2):
        raise ctx.unsupported(f"{dims}-D ConvTranspose (graphc has 1-D and 2-D)")
    g = at.get("group", 1)
    kernel = list(at.get("kernel_shape", w.shape[2:]))
    strides = list(at.get("strides", [1] * dims))
    dil = list(at.get("dilations", [1] * dims))
    out_pad = list(at.get("output_padding", [0] * dims))
    pads = list(at.get("pads", [0] * (2 * dims)))
    check_window(dims, kernel, strides, dil, pads)
    if not isinstance(g, int) or g < 1 or w.shape[0] % g:
        raise ModelError(f"group {g} must be >= 1 and divide the {w.shape[0]} input channels")
    spatial = x.shape[2:]
    full = [strides[k] * (spatial[k] - 1) + out_pad[k] + (kernel[k] - 1) * dil[k] + 1
            for k in range(dims)]
    auto = at.get("auto_pad", "NOTSET")
    if "output_shape" in at:
        target = list(at["output_shape"])[-dims:]
        total = [full[k] - target[k] for k in range(dims)]
        upper = auto == "SAME_UPPER"
        pads = [total[k] // 2 if upper else total[k] - total[k] // 2 for k in range(dims)] + \
            [total[k] - total[k] // 2 if upper else total[k] // 2 for k in range(dims)]
    elif auto in ("SAME_UPPER", "SAME_LOWER"):
        total = [full[k] - spatial[k] * strides[k] for k in range(dims)]
        upper = auto == "SAME_UPPER"
        pads = [total[k] // 2 if upper else total[k] - total[k] // 2 for k in range(dims)] + \
            [total[k] - total[k] // 2 if upper else total[k] // 2 for k in range(dims)]
    elif auto == "VALID":
        pads = [0] * (2 * dims)
    if dims == 1:
        x = gc.reshape(x, x.shape[:2] + (1,) + x.shape[2:])
        w = gc.reshape(w, w.shape[:2] + (1,) + w.shape[2:])
        kernel, strides, dil, pads = [1] + kernel, [1] + strides, [1] + dil, \
            [0, pads[0], 0, pads[1]]
        out_pad = [0] + out_pad
    c, m_g = w.shape[0], w.shape[1]
    # (C, M/g, kh, kw) -> (M, C/g, kh, kw), spatially flipped
    wt = gc.reshape(w, (g, c // g, m_g) + w.shape[2:])
    wt = gc.transpose(wt, (0, 2, 1, 3, 4))
    wt = gc.reshape(wt, (g * m_g, c // g) + w.shape[2:])
    wt = gc.flip(gc.flip(wt, 2), 3)
    lo = [(kernel[k] - 1) * dil[k] - pads[k] for k in range(2)]
    hi = [(kernel[k] - 1) * dil[k] - pads[k + 2] + out_pad[k] for k in range(2)]
    y = bind("conv", x, wt, window_strides=(1, 1),
             padding=tuple((max(lo[k], 0), max(hi[k], 0)) for k in range(2)),
             lhs_dilation=tuple(strides), rhs_dilation=tuple(dil), feature_group_count=g)
    if any(v < 0 for v in lo + hi):
        y = y[(slice(None), slice(None)) + tuple(
            slice(max(-lo[k], 0), y.shape[2 + k] - max(-hi[k], 0)) for k in range(2))]
    if len(a) > 2 and a[2] is not None:
        y = y + gc.reshape(ctx.tensor(a[2], y.dtype), (1, -1, 1, 1))
    return gc.reshape(y, y.shape[:2] + y.shape[3:]) if dims == 1 else y


@op("LpNormalization")
def _lp_norm(ctx, a, at):
    x = ctx.tensor(a[0])
    axis, p = at.get("axis", -1), at.get("p", 2)
    if p == 1:
        norm = gc.sum(gc.abs(x), axis, True)
    elif p == 2:
        norm = gc.sqrt(gc.sum(x * x, axis, True))
    else:
        raise ctx.unsupported(f"p={p} (ONNX allows 1 and 2)")
    zero = _scalar(ctx, 0, x)
    return gc.where(norm == zero, zero, x / gc.where(norm == zero, _scalar(ctx, 1, x), norm))


@op("DepthToSpace")
def _depth_to_space(ctx, a, at):
    x = ctx.tensor(a[0])
    b = at["blocksize"]
    n, c, h, w = x.shape
    if at.get("mode", "DCR") == "DCR":
        y = gc.transpose(gc.reshape(x, (n, b, b, c // (b * b), h, w)), (0, 3, 4, 1, 5, 2))
    else:
        y = gc.transpose(gc.reshape(x, (n, c // (b * b), b, b, h, w)), (0, 1, 4, 2, 5, 3))
    return gc.reshape(y, (n, c // (b * b), h * b, w * b))


@op("SpaceToDepth")
def _space_to_depth(ctx, a, at):
    x = ctx.tensor(a[0])
    b = at["blocksize"]
    n, c, h, w = x.shape
    perm = (0, 3, 5, 1, 2, 4) if at.get("mode", "DCR") == "DCR" else (0, 1, 3, 5, 2, 4)
    y = gc.transpose(gc.reshape(x, (n, c, h // b, b, w // b, b)), perm)
    return gc.reshape(y, (n, c * b * b, h // b, w // b))


@op("LRN")
def _lrn(ctx, a, at):
    x = ctx.tensor(a[0])
    size = at["size"]
    alpha, beta, bias = at.get("alpha", 1e-4), at.get("beta", 0.75), at.get("bias", 1.0)
    lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
    sq = gc.pad(x * x, [(0, 0), (lo, hi)] + [(0, 0)] * (x.ndim - 2))
    c = x.shape[1]
    total = None
    for k in range(size):
        part = sq[:, k:k + c]
        total = part if total is None else total + part
    base = _scalar(ctx, bias, x) + _scalar(ctx, alpha / size, x) * total
    return x / base ** _scalar(ctx, beta, x)


@op("ReverseSequence")
def _reverse_sequence(ctx, a, at):
    x = ctx.tensor(a[0])
    t_axis, b_axis = at.get("time_axis", 0), at.get("batch_axis", 1)
    lens = gc.cast(ctx.tensor(a[1]), "int64")
    n_t, n_b = x.shape[t_axis], x.shape[b_axis]
    shape = [1] * x.ndim
    shape[t_axis], shape[b_axis] = n_t, n_b
    t = ctx.tensor(np.arange(n_t, dtype=np.int64).reshape(
        [n_t if d == t_axis else 1 for d in range(x.ndim)]))
    bshape = [n_b if d == b_axis else 1 for d in range(x.ndim)]
    length = gc.reshape(lens, tuple(bshape))
    src = gc.where(t < length, length - ctx.tensor(np.int64(1)) - t, t)
    return gc.take_along_axis(x, gc.broadcast_to(src, tuple(shape)), t_axis)


@op("MaxUnpool")
def _max_unpool(ctx, a, at):
    x = ctx.tensor(a[0])
    idx = gc.cast(ctx.tensor(a[1]), "int64")
    dims = x.ndim - 2
    kernel = list(at["kernel_shape"])
    strides = list(at.get("strides", [1] * dims))
    pads = list(at.get("pads", [0] * (2 * dims)))
    shape = x.shape[:2] + tuple((x.shape[2 + k] - 1) * strides[k] + kernel[k] - pads[k] -
                                pads[k + dims] for k in range(dims))
    zeros = ctx.tensor(np.zeros(shape, gc.ir.dtypes.to_numpy(x.dtype)))
    y = _scatter(ctx, zeros, gc.reshape(idx, (-1,)), gc.reshape(x, (-1,)), "none",
                 "MaxUnpool")
    if len(a) > 2 and a[2] is not None:      # indices address the default shape; pad after
        want = [int(v) for v in np.asarray(ctx.static(a[2], "output_shape")).reshape(-1)]
        if any(w < s for w, s in zip(want, shape)) or want[:2] != list(shape[:2]):
            raise ctx.unsupported(f"output_shape {want} smaller than the unpooled {shape}")
        y = gc.pad(y, [(0, w - s) for w, s in zip(want, shape)])
    return y
