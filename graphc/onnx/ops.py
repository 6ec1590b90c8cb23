"""One converter per ONNX op: (ctx, operands, attributes) -> output value(s).

Operands are graphc Tensors, numpy arrays (values known at import) or None (an omitted
optional input). Semantics follow the ONNX operator specs per opset (e.g. Softmax before
and after 13, Reduce*/Squeeze/Split axes as attributes or inputs, Slice's clamping).
"""
from __future__ import annotations

import numpy as np

from graphc_runtime.dims import Dim, Undecidable, is_symbolic, prod

from graphc.functions.elementwise import broadcast_shapes
from graphc.ir.dtypes import canonical as dtypes_of_numpy

import graphc as gc

from .dtypes import dtype_of

from .errors import ModelError
from .limits import check_size, fits_in_import
from .ops_pool import geometry
from .registry import CONVERTERS, op

INT64 = "int64"


def _ints(v):
    """Integers of a static operand; symbolic sizes (Dims in a shape) stay Dims."""
    return [x if isinstance(x, Dim) else int(x) for x in np.asarray(v).reshape(-1)]


def _norm_axes(axes, ndim):
    return sorted({a + ndim if a < 0 else a for a in axes})


def move_axis_last(x, axis):
    """x with `axis` moved last, and the permutation that moves it back."""
    perm = [d for d in range(x.ndim) if d != axis] + [axis]
    return gc.transpose(x, perm), list(np.argsort(perm))


def _scalar(ctx, value, like):
    return ctx.tensor(np.asarray(value), like.dtype)


# -- elementwise ----------------------------------------------------------------------------

def _unary(fn):
    return lambda ctx, a, at: fn(ctx.tensor(a[0]))


for _name, _fn in {"Abs": gc.abs, "Neg": gc.negative, "Exp": gc.exp, "Log": gc.log,
                   "Sqrt": gc.sqrt, "Tanh": gc.tanh, "Sigmoid": gc.sigmoid, "Relu": gc.relu,
                   "Erf": gc.erf, "Sin": gc.sin, "Cos": gc.cos, "Floor": gc.floor,
                   "Ceil": gc.ceil, "Round": gc.round, "Sign": gc.sign,
                   "Not": gc.logical_not, "IsNaN": gc.isnan}.items():
    CONVERTERS[_name] = _unary(_fn)


@op("Reciprocal")
def _reciprocal(ctx, a, at):
    x = ctx.tensor(a[0])
    return _scalar(ctx, 1, x) / x


@op("Tan")
def _tan(ctx, a, at):
    x = ctx.tensor(a[0])
    return gc.sin(x) / gc.cos(x)


@op("IsInf")
def _isinf(ctx, a, at):
    x = ctx.tensor(a[0])
    pos = x == _scalar(ctx, np.inf, x)
    neg = x == _scalar(ctx, -np.inf, x)
    if not at.get("detect_positive", 1):
        return neg
    if not at.get("detect_negative", 1):
        return pos
    return gc.logical_or(pos, neg)


@op("LeakyRelu")
def _leaky(ctx, a, at):
    x = ctx.tensor(a[0])
    return gc.where(x >= 0, x, x * _scalar(ctx, at.get("alpha", 0.01), x))


@op("PRelu")
def _prelu(ctx, a, at):
    x, slope = ctx.tensor(a[0]), ctx.tensor(a[1], None)
    return gc.where(x >= 0, x, x * gc.cast(slope, x.dtype))


@op("Elu")
def _elu(ctx, a, at):
    x = ctx.tensor(a[0])
    alpha = _scalar(ctx, at.get("alpha", 1.0), x)
    return gc.where(x >= 0, x, alpha * (gc.exp(x) - _scalar(ctx, 1, x)))


@op("Celu")
def _celu(ctx, a, at):
    x = ctx.tensor(a[0])
    alpha = _scalar(ctx, at.get("alpha", 1.0), x)
    zero = _scalar(ctx, 0, x)
    return gc.maximum(zero, x) + gc.minimum(zero, alpha * (gc.exp(x / alpha) -
                                                          _scalar(ctx, 1, x)))


@op("Selu")
def _selu(ctx, a, at):
    x = ctx.tensor(a[0])
    alpha = _scalar(ctx, at.get("alpha", 1.67326319217681884765625), x)
    gamma = _scalar(ctx, at.get("gamma", 1.05070102214813232421875), x)
    return gamma * gc.where(x > 0, x, alpha * gc.exp(x) - alpha)


@op("ThresholdedRelu")
def _trelu(ctx, a, at):
    x = ctx.tensor(a[0])
    return gc.where(x > _scalar(ctx, at.get("alpha", 1.0), x), x, _scalar(ctx, 0, x))


@op("HardSigmoid")
def _hsig(ctx, a, at):
    x = ctx.tensor(a[0])
    y = x * _scalar(ctx, at.get("alpha", 0.2), x) + _scalar(ctx, at.get("beta", 0.5), x)
    return gc.clip(y, _scalar(ctx, 0, x), _scalar(ctx, 1, x))


@op("HardSwish")
def _hswish(ctx, a, at):
    x = ctx.tensor(a[0])
    y = x * _scalar(ctx, 1 / 6, x) + _scalar(ctx, 0.5, x)
    return x * gc.clip(y, _scalar(ctx, 0, x), _scalar(ctx, 1, x))


@op("Softplus")
def _softplus(ctx, a, at):
    x = ctx.tensor(a[0])
    zero = _scalar(ctx, 0, x)
    return gc.maximum(x, zero) + gc.log(_scalar(ctx, 1, x) + gc.exp(-gc.abs(x)))


@op("Softsign")
def _softsign(ctx, a, at):
    x = ctx.tensor(a[0])
    return x / (_scalar(ctx, 1, x) + gc.abs(x))


@op("Mish")
def _mish(ctx, a, at):
    return ctx.tensor(a[0]) * gc.tanh(_softplus(ctx, a, at))


@op("Gelu")
def _gelu(ctx, a, at):
    return gc.gelu(ctx.tensor(a[0]), approximate=at.get("approximate", "none") == "tanh")


def _binary(fn):
    def convert(ctx, a, at):
        x, y = ctx.tensor(a[0]), ctx.tensor(a[1])
        return fn(x, y)
    return convert


for _name, _fn in {"Add": gc.add, "Sub": gc.subtract, "Mul": gc.multiply,
                   "Equal": gc.equal, "Less": gc.less, "Greater": gc.greater,
                   "LessOrEqual": gc.less_equal, "GreaterOrEqual": gc.greater_equal,
                   "And": gc.logical_and, "Or": gc.logical_or, "Xor": gc.logical_xor,
                   "BitwiseAnd": gc.bitwise_and, "BitwiseOr": gc.bitwise_or,
                   "BitwiseXor": gc.bitwise_xor}.items():
    CONVERTERS[_name] = _binary(_fn)


@op("Div")
def _div(ctx, a, at):
    x, y = ctx.tensor(a[0]), ctx.tensor(a[1])
    if x.dtype.startswith("int") and y.dtype.startswith("int"):   # truncates toward zero
        q = gc.floor_divide(x, y)
        inexact = gc.logical_and(q * y != x, (x < 0) != (y < 0))
        return gc.where(inexact, q + _scalar(ctx, 1, q), q)
    return x / y


@op("Pow")
def _pow(ctx, a, at):
    x, y = ctx.tensor(a[0]), ctx.tensor(a[1])
    out = gc.power(gc.cast(x, "float64") if x.dtype.startswith("int") else x,
                   gc.cast(y, x.dtype if not x.dtype.startswith("int") else "float64"))
    return gc.cast(out, x.dtype)


@op("Mod")
def _mod(ctx, a, at):
    x, y = ctx.tensor(a[0]), ctx.tensor(a[1])
    r = gc.mod(x, y)                                   # numpy: the sign of y
    if not at.get("fmod", 0):
        return r
    zero = _scalar(ctx, 0, r)                          # C fmod: the sign of x
    wrong = gc.logical_and(r != zero, (r < zero) != (x < _scalar(ctx, 0, x)))
    return gc.where(wrong, r - y, r)


def _variadic(fn):
    def convert(ctx, a, at):
        ts = [ctx.tensor(v) for v in a if v is not None]
        out = ts[0]
        for t in ts[1:]:
            out = fn(out, t)
        return out
    return convert


CONVERTERS["Max"] = _variadic(gc.maximum)
CONVERTERS["Min"] = _variadic(gc.minimum)
CONVERTERS["Sum"] = _variadic(gc.add)


@op("Mean")
def _mean(ctx, a, at):
    total = _variadic(gc.add)(ctx, a, at)
    return total / _scalar(ctx, len([v for v in a if v is not None]), total)


@op("Where")
def _where(ctx, a, at):
    return gc.where(ctx.tensor(a[0]), ctx.tensor(a[1]), ctx.tensor(a[2]))


@op("Clip")
def _clip(ctx, a, at):
    x = ctx.tensor(a[0])
    if ctx.opset < 11:
        lo, hi = at.get("min"), at.get("max")
    else:
        lo = a[1] if len(a) > 1 else None
        hi = a[2] if len(a) > 2 else None
    out = x
    if lo is not None:
        out = gc.maximum(out, ctx.tensor(lo, x.dtype).reshape(()))
    if hi is not None:
        out = gc.minimum(out, ctx.tensor(hi, x.dtype).reshape(()))
    return out


@op("Cast")
def _cast(ctx, a, at):
    # to a narrow integer type: its compute dtype here, wrapped into range by the importer
    to = dtype_of(at["to"], f"{ctx.where()} attribute to")
    if not isinstance(a[0], gc.Tensor):
        return np.asarray(a[0]).astype(gc.ir.dtypes.to_numpy(to))
    return gc.cast(a[0], to)


@op("CastLike")
def _castlike(ctx, a, at):
    to = a[1].dtype if isinstance(a[1], gc.Tensor) else gc.ir.dtypes.canonical(
        np.asarray(a[1]).dtype)
    if not isinstance(a[0], gc.Tensor):
        return np.asarray(a[0]).astype(gc.ir.dtypes.to_numpy(to))
    return gc.cast(a[0], to)


@op("Identity")
def _identity(ctx, a, at):
    return a[0]


@op("Dropout")
def _dropout(ctx, a, at):
    training = a[2] if len(a) > 2 else None
    if training is not None and bool(ctx.static(training, "training_mode")):
        raise ctx.unsupported("training_mode=1 (random dropout) is not supported")
    x = a[0]
    mask = ctx.tensor(np.ones(np.shape(x) if not isinstance(x, gc.Tensor) else x.shape, bool))
    return [x, mask]


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


def _axes_operand(ctx, a, at, since: int, index: int = 1):
    if ctx.opset >= since:
        v = a[index] if len(a) > index else None
        return None if v is None else _ints(ctx.static(v, "axes"))
    return at.get("axes")


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


# -- reductions -----------------------------------------------------------------------------

def _reduce(fn, since_input: int, empty):
    """A Reduce* converter; `empty` is the result over an empty set ("low"/"high": the
    dtype's -inf/+inf, or its lowest/highest value where it has no infinity)."""
    def convert(ctx, a, at):
        x = ctx.tensor(a[0])
        axes = _axes_operand(ctx, a, at, since_input)
        keep = bool(at.get("keepdims", 1))
        if not axes:
            if at.get("noop_with_empty_axes", 0):
                return x
            axes = list(range(x.ndim))
        axes = tuple(_norm_axes(axes, x.ndim))
        if any(x.shape[ax] == 0 for ax in axes):
            shape = tuple(1 if d in axes else n for d, n in enumerate(x.shape) if keep or
                          d not in axes)
            return np.full(shape, _empty_value(empty, x.dtype), gc.ir.dtypes.to_numpy(x.dtype))
        return fn(x, axes, keep)
    return convert


def _empty_value(empty, dtype: str):
    if empty not in ("low", "high"):
        return empty
    npd = gc.ir.dtypes.to_numpy(dtype)
    if dtype == "bool":
        return empty == "high"
    if npd.kind == "f":
        return -np.inf if empty == "low" else np.inf
    info = np.iinfo(npd)
    return info.min if empty == "low" else info.max


def _sum_square(x, axes, keep):
    return gc.sum(x * x, axes, keep)


def _log_sum(x, axes, keep):
    return gc.log(gc.sum(x, axes, keep))


def _log_sum_exp(x, axes, keep):
    return gc.logsumexp(x, axes, keep)


def _l1(x, axes, keep):
    return gc.sum(gc.abs(x), axes, keep)


def _l2(x, axes, keep):
    return gc.sqrt(gc.sum(x * x, axes, keep))


CONVERTERS["ReduceSum"] = _reduce(gc.sum, 13, 0)
CONVERTERS["ReduceMean"] = _reduce(gc.mean, 18, np.nan)
CONVERTERS["ReduceMax"] = _reduce(gc.max, 18, "low")
CONVERTERS["ReduceMin"] = _reduce(gc.min, 18, "high")
CONVERTERS["ReduceProd"] = _reduce(gc.prod, 18, 1)
CONVERTERS["ReduceSumSquare"] = _reduce(_sum_square, 18, 0)
CONVERTERS["ReduceLogSum"] = _reduce(_log_sum, 18, -np.inf)
CONVERTERS["ReduceLogSumExp"] = _reduce(_log_sum_exp, 18, -np.inf)
CONVERTERS["ReduceL1"] = _reduce(_l1, 18, 0)
CONVERTERS["ReduceL2"] = _reduce(_l2, 18, 0)


def _arg(fn):
    def convert(ctx, a, at):
        x = ctx.tensor(a[0])
        axis = at.get("axis", 0)
        axis = axis + x.ndim if axis < 0 else axis
        keep = bool(at.get("keepdims", 1))
        if at.get("select_last_index", 0):
            idx = fn(gc.flip(x, axis), axis, keep)
            idx = _scalar(ctx, x.shape[axis] - 1, idx) - idx
        else:
            idx = fn(x, axis, keep)
        return gc.cast(idx, INT64)
    return convert


CONVERTERS["ArgMax"] = _arg(gc.argmax)
CONVERTERS["ArgMin"] = _arg(gc.argmin)


def _softmax(fn):
    def convert(ctx, a, at):
        x = ctx.tensor(a[0])
        if ctx.opset >= 13:
            return fn(x, at.get("axis", -1))
        axis = at.get("axis", 1)
        axis = axis + x.ndim if axis < 0 else axis       # before 13: over the flattened tail
        head = prod(x.shape[:axis])
        return gc.reshape(fn(gc.reshape(x, (head, -1)), -1), x.shape)
    return convert


CONVERTERS["Softmax"] = _softmax(gc.softmax)
CONVERTERS["LogSoftmax"] = _softmax(gc.log_softmax)


# -- linear algebra and neural-network layers ---------------------------------------------

@op("MatMul")
def _matmul(ctx, a, at):
    return gc.matmul(ctx.tensor(a[0]), ctx.tensor(a[1]))


@op("Gemm")
def _gemm(ctx, a, at):
    x, w = ctx.tensor(a[0]), ctx.tensor(a[1])
    if at.get("transA", 0):
        x = x.T
    if at.get("transB", 0):
        w = w.T
    y = gc.matmul(x, w)
    alpha, beta = at.get("alpha", 1.0), at.get("beta", 1.0)
    if alpha != 1.0:
        y = y * _scalar(ctx, alpha, y)
    if len(a) > 2 and a[2] is not None:
        c = ctx.tensor(a[2], y.dtype)
        y = y + (c * _scalar(ctx, beta, c) if beta != 1.0 else c)
    return y


@op("Conv")
def _conv(ctx, a, at):
    x, w = ctx.tensor(a[0]), ctx.tensor(a[1])
    dims = x.ndim - 2
    if dims not in (1, 2):
        raise ctx.unsupported(f"{dims}-D convolution (graphc has 1-D and 2-D)")
    kernel = list(at.get("kernel_shape", w.shape[2:]))
    begin, end, _, _, strides, dil = geometry(x.shape[2:], kernel, dict(at, ceil_mode=0))
    pads = list(zip(begin, end))
    if dims == 1:
        x = gc.reshape(x, x.shape[:2] + (1,) + x.shape[2:])
        w = gc.reshape(w, w.shape[:2] + (1,) + w.shape[2:])
        strides, dil, pads = [1] + strides, [1] + dil, [(0, 0)] + pads
    b = ctx.tensor(a[2], x.dtype) if len(a) > 2 and a[2] is not None else None
    y = gc.nn.conv2d(x, w, b, stride=tuple(strides), padding=tuple(pads),
                     dilation=tuple(dil), groups=at.get("group", 1))
    return gc.reshape(y, y.shape[:2] + y.shape[3:]) if dims == 1 else y


@op("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(ctx, a, at):
    x = ctx.tensor(a[0])
    axes = tuple(range(2, x.ndim))
    return gc.mean(x, axes, True) if ctx.node.op_type == "GlobalAveragePool" else \
        gc.max(x, axes, True)


@op("BatchNormalization")
def _batch_norm(ctx, a, at):
    if at.get("training_mode", 0) or (ctx.opset < 7 and not at.get("is_test", 1)):
        raise ctx.unsupported("training mode (graphc imports BatchNormalization for "
                              "inference)")
    if len(ctx.node.output) > 1 and any(ctx.node.output[1:]):
        raise ctx.unsupported("the running-statistics outputs (training mode)")
    x = ctx.tensor(a[0])
    shape = (1, -1) + (1,) * (x.ndim - 2)
    scale, bias, mean, var = (gc.reshape(ctx.tensor(v, x.dtype), shape) for v in a[1:5])
    eps = _scalar(ctx, at.get("epsilon", 1e-5), x)
    return (x - mean) * (scale * gc.rsqrt(var + eps)) + bias


@op("InstanceNormalization")
def _instance_norm(ctx, a, at):
    x = ctx.tensor(a[0])
    axes = tuple(range(2, x.ndim))
    shape = (1, -1) + (1,) * (x.ndim - 2)
    mean = gc.mean(x, axes, True)
    var = gc.mean((x - mean) * (x - mean), axes, True)
    eps = _scalar(ctx, at.get("epsilon", 1e-5), x)
    return (x - mean) * gc.rsqrt(var + eps) * gc.reshape(ctx.tensor(a[1], x.dtype), shape) + \
        gc.reshape(ctx.tensor(a[2], x.dtype), shape)


@op("LayerNormalization")
def _layer_norm(ctx, a, at):
    x = ctx.tensor(a[0])
    axis = at.get("axis", -1)
    axis = axis + x.ndim if axis < 0 else axis
    axes = tuple(range(axis, x.ndim))
    mean = gc.mean(x, axes, True)
    centered = x - mean
    var = gc.mean(centered * centered, axes, True)
    inv = gc.rsqrt(var + _scalar(ctx, at.get("epsilon", 1e-5), x))
    y = centered * inv * ctx.tensor(a[1], x.dtype)
    if len(a) > 2 and a[2] is not None:
        y = y + ctx.tensor(a[2], x.dtype)
    return [y, mean, inv]


__all__ = ["CONVERTERS"]


# composite ops: with 16-bit float operands they compute in float32 and round once
WIDENED = {"Elu", "Celu", "Selu", "HardSigmoid", "HardSwish", "Softplus", "Softsign", "Mish",
           "Gelu", "Softmax", "LogSoftmax", "ReduceMean", "ReduceLogSum", "ReduceLogSumExp",
           "ReduceL2", "ReduceSumSquare", "Conv", "AveragePool",
           "GlobalAveragePool", "BatchNormalization", "InstanceNormalization",
           "LayerNormalization", "Mean"}
