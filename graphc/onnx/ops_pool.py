"""MaxPool, AveragePool and LpPool over 1-, 2- or 3-D windows: pads (explicit or auto_pad),
strides, dilations, ceil_mode and count_include_pad as in the ONNX specs. Each window
offset is one strided view of the padded input; the views are stacked and reduced."""
from __future__ import annotations

import itertools

import numpy as np

import graphc as gc

from .errors import ModelError
from .registry import op


def check_window(dims: int, kernel, strides, dil, pads) -> None:
    """Window attributes in their ranges (ModelError otherwise): sizes, strides and
    dilations of one per spatial axis and at least 1, pads two per axis and not negative."""
    for name, values, count, low in (("kernel_shape", kernel, dims, 1),
                                     ("strides", strides, dims, 1),
                                     ("dilations", dil, dims, 1),
                                     ("pads", pads, 2 * dims, 0)):
        values = list(values)
        if len(values) != count:
            raise ModelError(f"{name} has {len(values)} entries, {count} expected for "
                             f"{dims} spatial axes")
        bad = [v for v in values if not isinstance(v, (int, np.integer)) or v < low]
        if bad:
            raise ModelError(f"{name} {values}: each entry must be an integer >= {low}")


def geometry(spatial, kernel, at):
    """(pads_begin, pads_end_including_the_ceil_overhang, explicit pads_end, out sizes,
    strides, dilations) for the spatial input sizes."""
    dims = len(spatial)
    strides = list(at.get("strides", [1] * dims))
    dil = list(at.get("dilations", [1] * dims))
    pads = list(at.get("pads", [0] * (2 * dims)))
    check_window(dims, kernel, strides, dil, pads)
    auto = at.get("auto_pad", "NOTSET")
    begin, end, out = [], [], []
    for k in range(dims):
        n, s, span = spatial[k], strides[k], (kernel[k] - 1) * dil[k] + 1
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            o = -(-n // s)
            total = max((o - 1) * s + span - n, 0)
            small = total // 2
            pb, pe = (small, total - small) if auto == "SAME_UPPER" else (total - small, small)
        elif auto == "VALID":
            pb, pe = 0, 0
            o = (n - span) // s + 1
        else:
            pb, pe = pads[k], pads[k + dims]
            room = n + pb + pe - span
            if at.get("ceil_mode", 0):
                o = -(-room // s) + 1
                if (o - 1) * s >= n + pb:              # the last window must start inside
                    o -= 1
            else:
                o = room // s + 1
        begin.append(pb)
        end.append(pe)
        out.append(o)
    reach = [max(end[k], (out[k] - 1) * strides[k] + (kernel[k] - 1) * dil[k] + 1 -
                 spatial[k] - begin[k]) for k in range(dims)]
    return begin, reach, end, out, strides, dil


def windows(x, kernel, begin, reach, out, strides, dil, fill):
    """[N, C, *out, prod(kernel)]: every window's cells, the input padded with `fill`."""
    dims = len(kernel)
    if any(begin) or any(reach):
        x = gc.pad(x, [(0, 0), (0, 0)] + [(begin[k], reach[k]) for k in range(dims)],
                   constant_values=fill)
    views = []
    for offset in itertools.product(*[range(k) for k in kernel]):
        key = (slice(None), slice(None)) + tuple(
            slice(offset[k] * dil[k], offset[k] * dil[k] + (out[k] - 1) * strides[k] + 1,
                  strides[k]) for k in range(dims))
        views.append(x[key])
    return gc.stack(views, axis=-1)


def _counts(spatial, kernel, begin, reach, end, out, strides, dil, include_pad):
    """Cells each average window divides by: the input's own, plus the pads (not the
    ceil_mode overhang) with count_include_pad."""
    ones = np.ones(spatial)
    if include_pad:
        ones = np.pad(ones, [(begin[k], end[k]) for k in range(len(spatial))],
                      constant_values=1.0)
        ones = np.pad(ones, [(0, reach[k] - end[k]) for k in range(len(spatial))])
    else:
        ones = np.pad(ones, [(begin[k], reach[k]) for k in range(len(spatial))])
    counts = np.zeros(out)
    for offset in itertools.product(*[range(k) for k in kernel]):
        key = tuple(slice(offset[k] * dil[k], offset[k] * dil[k] + (out[k] - 1) * strides[k]
                          + 1, strides[k]) for k in range(len(kernel)))
        counts += ones[key]
    return counts


def _pool(kind):
    def convert(ctx, a, at):
        x = ctx.tensor(a[0])
        dims = x.ndim - 2
        if dims not in (1, 2, 3):
            raise ctx.unsupported(f"{dims}-D windows (graphc pools 1-, 2- and 3-D)")
        kernel = list(at["kernel_shape"])
        begin, reach, end, out, strides, dil = geometry(x.shape[2:], kernel, at)
        is_float = gc.ir.dtypes.is_float(x.dtype)
        if kind == "max":
            fill = -np.inf if is_float else int(np.iinfo(gc.ir.dtypes.to_numpy(x.dtype)).min)
            v = windows(x, kernel, begin, reach, out, strides, dil, fill)
            if len(ctx.node.output) > 1 and ctx.node.output[1]:
                return [gc.max(v, -1), _argmax_indices(ctx, x, v, kernel, begin, out, strides,
                                                       dil, at.get("storage_order", 0))]
            return gc.max(v, -1)
        if kind == "lp":
            p = at.get("p", 2)
            v = windows(gc.abs(x), kernel, begin, reach, out, strides, dil, 0.0)
            if p == 1:
                return gc.sum(v, -1)
            if p == 2:
                return gc.sqrt(gc.sum(v * v, -1))
            pw = ctx.tensor(np.asarray(p), x.dtype)
            return gc.sum(v ** pw, -1) ** (ctx.tensor(np.asarray(1.0), x.dtype) / pw)
        v = windows(x, kernel, begin, reach, out, strides, dil, 0.0)
        if not any(begin) and not any(reach):
            return gc.mean(v, -1)
        counts = _counts(x.shape[2:], kernel, begin, reach, end, out, strides, dil,
                         bool(at.get("count_include_pad", 0)))
        return gc.sum(v, -1) / ctx.tensor(counts, x.dtype)
    return convert


def _argmax_indices(ctx, x, v, kernel, begin, out, strides, dil, storage_order):
    """MaxPool's Indices: each maximum's position in the flattened input (the first in the
    window on ties), row-major, or column-major over the spatial dims with storage_order."""
    spatial = x.shape[2:]
    offsets = list(itertools.product(*[range(k) for k in kernel]))
    grids = np.meshgrid(*[np.arange(o) for o in out], indexing="ij")
    table = np.zeros(tuple(out) + (len(offsets),), np.int64)
    order = range(len(spatial)) if not storage_order else range(len(spatial) - 1, -1, -1)
    for k, offset in enumerate(offsets):
        coords = [g * strides[d] - begin[d] + offset[d] * dil[d] for d, g in enumerate(grids)]
        flat = np.zeros_like(coords[0])
        for d in order:
            flat = flat * spatial[d] + coords[d]
        table[..., k] = flat
    arg = gc.cast(gc.argmax(v, -1, True), "int64")                    # [N, C, *out, 1]
    hit = gc.iota(v.shape, v.ndim - 1, "int64") == arg
    where = gc.sum(gc.where(hit, ctx.tensor(table), ctx.tensor(np.int64(0))), -1)
    n, c = x.shape[:2]
    plane = ctx.tensor(np.int64(int(np.prod(spatial))))
    base = (gc.iota(where.shape, 0, "int64") * ctx.tensor(np.int64(c)) +
            gc.iota(where.shape, 1, "int64")) * plane
    return base + where


op("MaxPool")(_pool("max"))
op("AveragePool")(_pool("avg"))
op("LpPool")(_pool("lp"))
