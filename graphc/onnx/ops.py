"""One converter per ONNX op: (ctx, operands, attributes) -> output value(s).

Operands are graphc Tensors, numpy arrays (values known at import) or None (an omitted
optional input). Semantics follow the ONNX operator specs per opset (e.g. Softmax before
and after 13, Reduce*/Squeeze/Split axes as attributes or inputs, Slice's clamping).
"""
from __future__ import annotations

import numpy as np

from graphc_runtime.dims import Dim, prod

import graphc as gc

from .dtypes import dtype_of
from .int8_conv import dequantized_conv
from .int8_products import dequantized_product

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


def _axes_operand(ctx, a, at, since: int, index: int = 1):
    if ctx.opset >= since:
        v = a[index] if len(a) > index else None
        return None if v is None else _ints(ctx.static(v, "axes"))
    return at.get("axes")


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
    return dequantized_product(ctx, ctx.tensor(a[0]), ctx.tensor(a[1]))


@op("Gemm")
def _gemm(ctx, a, at):
    x, w = ctx.tensor(a[0]), ctx.tensor(a[1])
    if at.get("transA", 0):
        x = x.T
    if at.get("transB", 0):
        w = w.T
    y = gc.matmul(x, w) if at.get("transA", 0) else \
        dequantized_product(ctx, x, w, at.get("transB", 0))
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
    y = dequantized_conv(ctx, strides, pads, dil, at.get("group", 1), dims == 1)
    if y is None:
        y = gc.nn.conv2d(x, w, b, stride=tuple(strides), padding=tuple(pads),
                         dilation=tuple(dil), groups=at.get("group", 1))
    elif b is not None:
        y = y + gc.reshape(b, (1, -1, 1, 1))
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
