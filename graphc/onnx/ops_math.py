"""Converters for ONNX math ops composed from graphc primitives: inverse and hyperbolic
trigonometry, Trilu, CumSum/CumProd, Hardmax, TopK, OneHot, EyeLike, Einsum, Shrink."""
from __future__ import annotations

import string

import numpy as np

from graphc_runtime.dims import hint, prod

import graphc as gc

from .dtypes import dtype_of
from .ops import INT64, _scalar, move_axis_last
from .registry import CONVERTERS, op

# cumulative ops and TopK over integers build an n x n selection: keep it bounded
MAX_PAIRWISE = 1 << 24


def _c(ctx, x, value):
    return _scalar(ctx, value, x)


# -- trigonometry ---------------------------------------------------------------------------

def _atan(ctx, x):
    """atan with two argument reductions (|x| > 1 -> pi/2 - atan(1/x); then the half-angle
    step) and a Taylor series on |t| <= tan(pi/8): float32-accurate."""
    ax = gc.abs(x)
    big = ax > _c(ctx, x, 1.0)
    r = gc.where(big, _c(ctx, x, 1.0) / gc.maximum(ax, _c(ctx, x, 1e-30)), ax)
    t = r / (_c(ctx, x, 1.0) + gc.sqrt(_c(ctx, x, 1.0) + r * r))      # atan r = 2 atan t
    t2 = t * t
    poly = _c(ctx, x, 0.0)
    for k in range(10, -1, -1):
        poly = poly * t2 + _c(ctx, x, (-1.0) ** k / (2 * k + 1))
    a = _c(ctx, x, 2.0) * t * poly
    a = gc.where(big, _c(ctx, x, np.pi / 2) - a, a)
    return gc.where(x < _c(ctx, x, 0.0), -a, a)


@op("Atan")
def _atan_op(ctx, a, at):
    return _atan(ctx, ctx.tensor(a[0]))


@op("Asin")
def _asin(ctx, a, at):
    x = ctx.tensor(a[0])
    return _atan(ctx, x / gc.sqrt(_c(ctx, x, 1.0) - x * x))


@op("Acos")
def _acos(ctx, a, at):
    x = ctx.tensor(a[0])
    # acos x = 2 atan(sqrt((1 - x) / (1 + x))): accurate near 1 as well
    return _c(ctx, x, 2.0) * _atan(ctx, gc.sqrt((_c(ctx, x, 1.0) - x) / (_c(ctx, x, 1.0) + x)))


@op("Sinh")
def _sinh(ctx, a, at):
    x = ctx.tensor(a[0])
    return (gc.exp(x) - gc.exp(-x)) * _c(ctx, x, 0.5)


@op("Cosh")
def _cosh(ctx, a, at):
    x = ctx.tensor(a[0])
    return (gc.exp(x) + gc.exp(-x)) * _c(ctx, x, 0.5)


@op("Asinh")
def _asinh(ctx, a, at):
    x = ctx.tensor(a[0])
    ax = gc.abs(x)
    y = gc.log(ax + gc.sqrt(ax * ax + _c(ctx, x, 1.0)))
    return gc.where(x < _c(ctx, x, 0.0), -y, y)


@op("Acosh")
def _acosh(ctx, a, at):
    x = ctx.tensor(a[0])
    return gc.log(x + gc.sqrt(x * x - _c(ctx, x, 1.0)))


@op("Atanh")
def _atanh(ctx, a, at):
    x = ctx.tensor(a[0])
    return _c(ctx, x, 0.5) * gc.log((_c(ctx, x, 1.0) + x) / (_c(ctx, x, 1.0) - x))


# -- masks and selections -------------------------------------------------------------------

@op("Trilu")
def _trilu(ctx, a, at):
    x = ctx.tensor(a[0])
    k = int(np.asarray(ctx.static(a[1], "k")).reshape(-1)[0]) if len(a) > 1 and \
        a[1] is not None else 0
    rows, cols = x.shape[-2:]
    i, j = np.arange(rows)[:, None], np.arange(cols)[None, :]
    keep = (j - i >= k) if at.get("upper", 1) else (j - i <= k)
    zero = np.zeros((), gc.ir.dtypes.to_numpy(x.dtype))
    return gc.where(ctx.tensor(keep), x, ctx.tensor(zero))


def _cumulative(kind):
    def convert(ctx, a, at):
        x = ctx.tensor(a[0])
        axis = int(np.asarray(ctx.static(a[1], "axis")).reshape(-1)[0])
        axis = axis + x.ndim if axis < 0 else axis
        n = x.shape[axis]
        i, j = np.arange(n)[:, None], np.arange(n)[None, :]   # y[j] combines x[i]
        if at.get("reverse", 0):
            sel = i > j if at.get("exclusive", 0) else i >= j
        else:
            sel = i < j if at.get("exclusive", 0) else i <= j
        xt, back = move_axis_last(x, axis)
        if kind == "sum" and gc.ir.dtypes.is_float(x.dtype):
            y = gc.matmul(xt, ctx.tensor(sel.astype(gc.ir.dtypes.to_numpy(x.dtype))))
        else:
            if hint(x.size) * n > MAX_PAIRWISE:      # a symbolic size: a typical one
                raise ctx.unsupported(f"{kind} over {n} integers x {x.size // max(n, 1)} "
                                      f"rows (graphc composes it pairwise, up to "
                                      f"{MAX_PAIRWISE} elements)")
            spread = gc.expand_dims(xt, -1)                    # [..., i, 1]
            unit = np.asarray(0 if kind == "sum" else 1, gc.ir.dtypes.to_numpy(x.dtype))
            picked = gc.where(ctx.tensor(sel), spread, ctx.tensor(unit))
            y = gc.sum(picked, -2) if kind == "sum" else gc.prod(picked, -2)
        return gc.transpose(y, back)
    return convert


CONVERTERS["CumSum"] = _cumulative("sum")
CONVERTERS["CumProd"] = _cumulative("prod")


@op("Hardmax")
def _hardmax(ctx, a, at):
    x = ctx.tensor(a[0])
    if ctx.opset >= 13:
        axis = at.get("axis", -1)
        axis = axis + x.ndim if axis < 0 else axis
        idx = gc.argmax(x, axis, True)
        hit = gc.iota(x.shape, axis, idx.dtype) == idx
        return gc.cast(hit, x.dtype)
    axis = at.get("axis", 1)
    axis = axis + x.ndim if axis < 0 else axis
    flat = gc.reshape(x, (prod(x.shape[:axis]), -1))
    idx = gc.argmax(flat, 1, True)
    return gc.reshape(gc.cast(gc.iota(flat.shape, 1, idx.dtype) == idx, x.dtype), x.shape)


@op("TopK")
def _topk(ctx, a, at):
    x = ctx.tensor(a[0])
    k = int(at["k"]) if ctx.opset < 10 else \
        int(np.asarray(ctx.static(a[1], "K")).reshape(-1)[0])
    axis = at.get("axis", -1)
    axis = axis + x.ndim if axis < 0 else axis
    n = x.shape[axis]
    if not 0 <= k <= n:
        raise ctx.unsupported(f"K={k} outside [0, {n}]")
    largest = bool(at.get("largest", 1))
    xt, back = move_axis_last(x, axis)
    if hint(x.size) * n > MAX_PAIRWISE:
        raise ctx.unsupported(f"TopK over {n} elements x {x.size // max(n, 1)} rows (graphc "
                              f"ranks pairwise, up to {MAX_PAIRWISE} elements)")
    # rank of each element: how many come before it (better, or equal at a lower index)
    xi, xj = gc.expand_dims(xt, -1), gc.expand_dims(xt, -2)       # [..., i, 1], [..., 1, j]
    better = (xj > xi) if largest else (xj < xi)
    if gc.ir.dtypes.is_float(x.dtype):                              # NaN ranks first (largest)
        better = gc.logical_or(better, gc.logical_and(gc.isnan(xj), gc.logical_not(gc.isnan(xi))))
    lower = ctx.tensor(np.arange(n)[None, :] < np.arange(n)[:, None])
    before = gc.logical_or(better, gc.logical_and(xj == xi, lower))
    rank = gc.sum(gc.cast(before, "int32"), -1)                    # [..., i]
    slots = gc.expand_dims(rank, -1) == ctx.tensor(np.arange(k, dtype=np.int32))  # [..., i, r]
    zero = ctx.tensor(np.zeros((), gc.ir.dtypes.to_numpy(x.dtype)))
    values = gc.sum(gc.where(slots, gc.expand_dims(xt, -1), zero), -2)
    where_i = ctx.tensor(np.arange(n, dtype=np.int64)[:, None])
    indices = gc.sum(gc.where(slots, where_i, ctx.tensor(np.int64(0))), -2)
    return gc.transpose(values, back), gc.transpose(indices, back)


@op("OneHot")
def _onehot(ctx, a, at):
    idx = ctx.tensor(a[0])
    depth = int(np.asarray(ctx.static(a[1], "depth")).reshape(-1)[0])
    values = a[2]
    axis = at.get("axis", -1)
    rank = idx.ndim + 1
    axis = axis + rank if axis < 0 else axis
    idx = gc.cast(idx, INT64)                      # float indices truncate, as in ONNX
    idx = gc.where(idx < ctx.tensor(np.int64(0)), idx + ctx.tensor(np.int64(depth)), idx)
    shape = idx.shape[:axis] + (depth,) + idx.shape[axis:]
    hit = gc.expand_dims(idx, axis) == gc.iota(shape, axis, INT64)
    values = values if isinstance(values, gc.Tensor) else np.asarray(values)
    return gc.where(hit, ctx.tensor(values[1]), ctx.tensor(values[0]))


@op("EyeLike")
def _eyelike(ctx, a, at):
    x = a[0]
    shape = tuple(x.shape)
    dtype = dtype_of(at["dtype"], "attribute dtype") if "dtype" in at else \
        (x.dtype if isinstance(x, gc.Tensor) else gc.ir.dtypes.canonical(np.asarray(x).dtype))
    return np.eye(shape[0], shape[1], k=at.get("k", 0), dtype=gc.ir.dtypes.to_numpy(dtype))


@op("Shrink")
def _shrink(ctx, a, at):
    x = ctx.tensor(a[0])
    lambd, bias = at.get("lambd", 0.5), at.get("bias", 0.0)
    zero = _c(ctx, x, 0)
    return gc.where(x < _c(ctx, x, -lambd), x + _c(ctx, x, bias),
                    gc.where(x > _c(ctx, x, lambd), x - _c(ctx, x, bias), zero))


# -- Einsum ---------------------------------------------------------------------------------

@op("Einsum")
def _einsum(ctx, a, at):
    operands = [ctx.tensor(v) for v in a]
    eq = at["equation"].replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(operands):
        raise ctx.unsupported(f"equation {eq!r} names {len(terms)} operands, got "
                              f"{len(operands)}")
    spare = iter(c for c in string.ascii_letters if c not in eq)
    ell = None
    labels = []
    for t, x in zip(terms, operands):
        if "..." in t:
            n = x.ndim - (len(t) - 3)
            if ell is None or len(ell) < n:
                ell = (ell or "") + "".join(next(spare) for _ in range(n - len(ell or "")))
            t = t.replace("...", ell[len(ell) - n:] if n else "")
        if len(t) != x.ndim:
            raise ctx.unsupported(f"term {t!r} of {eq!r} has {len(t)} labels for a rank-"
                                  f"{x.ndim} operand")
        labels.append(t)
    if arrow:
        out = rhs.replace("...", ell or "")
    else:
        counts = {c: sum(t.count(c) for t in labels) for t in labels for c in t}
        out = (ell or "") + "".join(sorted(c for c in counts if counts[c] == 1 and
                                           c not in (ell or "")))
    sizes = {}
    for t, x in zip(labels, operands):
        for c, d in zip(t, x.shape):
            if len(set(t)) != len(t):
                raise ctx.unsupported(f"repeated label in term {t!r} (diagonals)")
            if sizes.get(c, d) != d and d != 1 and sizes.get(c) != 1:
                raise ctx.unsupported(f"label {c!r} has sizes {sizes[c]} and {d}")
            sizes[c] = max(sizes.get(c, 1), d)
    # sum away labels only one operand has and the output does not keep
    for k, (t, x) in enumerate(zip(labels, operands)):
        others = "".join(labels[m] for m in range(len(labels)) if m != k) + out
        gone = [i for i, c in enumerate(t) if c not in others]
        if gone:
            operands[k] = gc.sum(x, tuple(gone))
            labels[k] = "".join(c for c in t if c in others)
    result, res_labels = operands[0], labels[0]
    for x, t in zip(operands[1:], labels[1:]):
        result, res_labels = _contract(result, res_labels, x, t, out, sizes)
    if sorted(res_labels) != sorted(out):
        gone = tuple(i for i, c in enumerate(res_labels) if c not in out)
        result = gc.sum(result, gone)
        res_labels = "".join(c for c in res_labels if c in out)
    if res_labels != out:
        result = gc.transpose(result, [res_labels.index(c) for c in out])
    return result


def _contract(x, tx, y, ty, out, sizes):
    """Two operands as one batched matmul: batch labels (both, kept), contracted (both, not
    kept), and each side's free labels."""
    batch = [c for c in tx if c in ty and c in out]
    inner = [c for c in tx if c in ty and c not in out]
    fx = [c for c in tx if c not in ty]
    fy = [c for c in ty if c not in tx]

    def arrange(v, t, order):
        v = gc.transpose(v, [t.index(c) for c in order]) if list(t) != order else v
        return gc.broadcast_to(v, tuple(sizes[c] for c in order))

    xv = arrange(x, tx, batch + fx + inner)
    yv = arrange(y, ty, batch + inner + fy)
    nb = [sizes[c] for c in batch]
    m = prod([sizes[c] for c in fx]) if fx else 1
    k = prod([sizes[c] for c in inner]) if inner else 1
    n = prod([sizes[c] for c in fy]) if fy else 1
    z = gc.matmul(gc.reshape(xv, tuple(nb) + (m, k)), gc.reshape(yv, tuple(nb) + (k, n)))
    z = gc.reshape(z, tuple(nb) + tuple(sizes[c] for c in fx + fy))
    return z, "".join(batch + fx + fy)
