"""Integer and quantization ops: BitShift, BitwiseNot, QuantizeLinear, DequantizeLinear
(per tensor, per axis, blocked), MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv.
8-bit values are held in int32 (graphc/onnx/dtypes.py); integer products are exact."""
from __future__ import annotations

import numpy as np

import graphc as gc

from . import dtypes as odt
from .int8_conv import integer_conv
from .int8_products import Dequantized, along, exact_product, per_tensor
from .registry import CONVERTERS, op

UINT8 = 2


@op("BitShift")
def _bitshift(ctx, a, at):
    x, s = ctx.tensor(a[0]), gc.cast(ctx.tensor(a[1]), "int64")
    t = ctx.operand_types[0]
    if t is not None:
        _, bits, signed = odt.NARROW[t]
    elif x.dtype in ("int32", "int64"):
        bits, signed = (32 if x.dtype == "int32" else 64), True
    else:
        raise ctx.unsupported(f"BitShift of {x.dtype}")
    wide = gc.cast(x, "int64")
    zero, minus_one = ctx.tensor(np.int64(0)), ctx.tensor(np.int64(-1))
    valid = gc.logical_and(s >= zero, s < ctx.tensor(np.int64(bits)))
    if at["direction"] == "LEFT":
        # 2**k as int64 bit patterns (2**63 wraps to the sign bit): products wrap likewise
        table = np.array([np.uint64(1) << np.uint64(k) for k in range(64)],
                         np.uint64).view(np.int64)[:bits]
        y = wide * gc.take(ctx.tensor(table), gc.clip(s, 0, bits - 1))
        y = gc.where(valid, y, zero)
        if t is None and bits == 32:
            y = gc.bitwise_and(y + ctx.tensor(np.int64(1 << 31)),
                               ctx.tensor(np.int64((1 << 32) - 1))) - ctx.tensor(np.int64(1 << 31))
    else:
        table = np.array([1 << k for k in range(min(bits, 63))], np.int64)
        y = gc.floor_divide(wide, gc.take(ctx.tensor(table), gc.clip(s, 0, min(bits, 63) - 1)))
        sign = gc.where(wide < zero, minus_one, zero) if signed else zero
        y = gc.where(gc.logical_and(valid, s < ctx.tensor(np.int64(63))), y, sign)
    return gc.cast(y, x.dtype)


@op("BitwiseNot")
def _bitwise_not(ctx, a, at):
    x = ctx.tensor(a[0])
    if x.dtype == "bool":
        return gc.logical_not(x)
    return gc.bitwise_xor(x, ctx.tensor(np.asarray(-1, gc.ir.dtypes.to_numpy(x.dtype))))


def _per_axis(ctx, v, x, axis, block):
    """A scale or zero point broadcast against x: scalar, 1-D along `axis`, or blocked."""
    v = ctx.tensor(v)
    axis = axis + x.ndim if axis < 0 else axis
    if block and not per_tensor(v):
        idx = ctx.tensor(np.arange(x.shape[axis]) // block)
        return gc.take(v, idx, axis=axis)
    return along(v, axis, x.ndim)


def _out_type(ctx, at, zp_index):
    t = at.get("output_dtype", 0)
    if not t:
        t = ctx.operand_types[zp_index] if len(ctx.operand_types) > zp_index and \
            ctx.operand_types[zp_index] else UINT8
    if t not in odt.NARROW or odt.NARROW[t][1] > 16:
        raise ctx.unsupported(f"quantizing to element type {t} (graphc quantizes to 8/16-bit "
                              f"integers)")
    return t


def quantize(ctx, y, t, zp):
    """saturate(round_half_even(y) + zp) into type t, held in int32."""
    return saturate(gc.round(y), t, zp)


def saturate(q, t, zp):
    """saturate(q + zp) into type t, held in int32 (q: rounded, in float)."""
    lo, hi = odt.value_range(t)
    if zp is not None:
        q = q + gc.cast(zp, q.dtype)
    return gc.cast(gc.clip(q, float(lo), float(hi)), "int32")


@op("QuantizeLinear")
def _quantize(ctx, a, at):
    x = ctx.tensor(a[0])
    if at.get("precision", 0):
        raise ctx.unsupported("the precision attribute")
    axis, block = at.get("axis", 1), at.get("block_size", 0)
    scale = _per_axis(ctx, a[1], x, axis, block)
    zp = _per_axis(ctx, a[2], x, axis, block) if len(a) > 2 and a[2] is not None else None
    t = _out_type(ctx, at, 2)
    ft = "float32" if x.dtype in ("float16", "bfloat16") else x.dtype
    rounded = gc.round(gc.cast(x, ft) / gc.cast(scale, ft))
    if not block:
        ctx.quantized[ctx.node.output[0]] = (rounded, t, axis % max(x.ndim, 1),
                                             _scale_and_zero(a))
    return saturate(rounded, t, zp)


def _scale_and_zero(a) -> tuple:
    return a[1], (a[2] if len(a) > 2 else None)


def _same(u, v) -> bool:
    """Whether two operands (numpy values or tensors, None when absent) are the same."""
    if u is None or v is None or isinstance(u, gc.Tensor) or isinstance(v, gc.Tensor):
        return u is v
    u, v = np.asarray(u), np.asarray(v)
    return u.shape == v.shape and u.dtype == v.dtype and np.array_equal(u, v)


def _requantized(ctx, a, axis, out):
    """DequantizeLinear(QuantizeLinear(x)) with the same scale and zero point, where that is
    what a[0] is: scale * clip(round(x / scale), lo - zp, hi - zp) (NaN: scale * -zp),
    without the round trip through integers (the same values: all are small integers
    in float), else None."""
    rounded, t, q_axis, q_params = ctx.quantized.get(ctx.node.input[0], (None,) * 4)
    scale, zero = _scale_and_zero(a)
    if rounded is None or not (_same(q_params[0], scale) and _same(q_params[1], zero)):
        return None
    if q_axis != axis % max(rounded.ndim, 1) and not (
            per_tensor(ctx.tensor(scale)) and (zero is None or per_tensor(ctx.tensor(zero)))):
        return None
    lo, hi = odt.value_range(t)
    v = gc.cast(rounded, out)
    if zero is None:
        clipped, nan_to = gc.clip(v, float(lo), float(hi)), gc.zeros((), out)
    else:
        zp = gc.cast(_per_axis(ctx, zero, v, axis, 0), out)
        clipped, nan_to = gc.minimum(gc.maximum(v, float(lo) - zp), float(hi) - zp), -zp
    # NaN quantizes to the integer 0 (its int32 conversion's low byte), as onnxruntime's
    v = gc.where(gc.isnan(clipped), nan_to, clipped)
    return v * gc.cast(_per_axis(ctx, scale, v, axis, 0), out)


@op("DequantizeLinear")
def _dequantize(ctx, a, at):
    x = ctx.tensor(a[0])
    axis, block = at.get("axis", 1), at.get("block_size", 0)
    scale = _per_axis(ctx, a[1], x, axis, block)
    out = odt.DTYPES.get(at.get("output_dtype", 0)) or scale.dtype
    v = gc.cast(x, "float32" if out != "float64" else "float64")
    y = None if block else _requantized(ctx, a, axis, v.dtype)
    if y is not None:
        y = gc.cast(y, out)
    else:
        if len(a) > 2 and a[2] is not None:
            v = v - gc.cast(_per_axis(ctx, a[2], x, axis, block), v.dtype)
        y = gc.cast(v * gc.cast(scale, v.dtype), out)
    if all(ctx.tensor(t).node.op == "constant" for t in a if t is not None):
        # a quantized weight: dequantized once here (by the reference, the same bits),
        # so the product or convolution reading it sees a constant filter (prepacked,
        # Winograd) instead of dequantizing it at every call
        y = gc.constant(gc.evaluate(y))
    t = ctx.operand_types[0]
    if not block and t is not None and x.dtype == "int32":
        # what a product of two dequantized values multiplies as integers (int8_products)
        ctx.dequantized[ctx.node.output[0]] = Dequantized(
            x, t, gc.cast(ctx.tensor(a[1]), scale.dtype),
            ctx.tensor(a[2]) if len(a) > 2 and a[2] is not None else None,
            axis + x.ndim if axis < 0 else axis)
    return y


def _centered(ctx, v, zp, axis_of_zp, ndim):
    """v - zp as float64 (exact for 8-bit operands); a 1-D zp runs along `axis_of_zp`."""
    v = gc.cast(ctx.tensor(v), "float64")
    if zp is None:
        return v
    z = gc.cast(ctx.tensor(zp), "float64")
    if z.ndim == 1 and z.size > 1:
        shape = [1] * ndim
        shape[axis_of_zp] = z.shape[0]
        z = gc.reshape(z, tuple(shape))
    elif z.ndim:
        z = gc.reshape(z, ()) if z.size == 1 else z
    return v - z


def _exact(ctx, x, za, w, zb, w_at: int):
    """(x - za) @ (w - zb) as 8-bit products where the types of both operands (w the
    node's input w_at) are known (int8_products.exact_product), else None."""
    tx, tw = (ctx.operand_types[i] if len(ctx.operand_types) > i else None
              for i in (0, w_at))
    if tx is None or tw is None or x.dtype != "int32" or w.dtype != "int32":
        return None
    zero = lambda v: None if v is None else ctx.tensor(v)     # noqa: E731
    return exact_product(x, tx, zero(za), w, tw, zero(zb))


@op("MatMulInteger")
def _matmul_integer(ctx, a, at):
    a = list(a) + [None] * (4 - len(a))
    x, w = ctx.tensor(a[0]), ctx.tensor(a[1])
    acc = _exact(ctx, x, a[2], w, a[3], 1)
    if acc is not None:
        return acc
    xa = _centered(ctx, x, a[2], x.ndim - 2, x.ndim)          # per-row zero points of A
    wb = _centered(ctx, w, a[3], w.ndim - 1, w.ndim)          # per-column zero points of B
    return gc.cast(gc.matmul(xa, wb), "int32")


def _conv_f64(ctx, x, w, at):
    """Conv's converter on float64 operands (their sums of 8-bit products are exact)."""
    return CONVERTERS["Conv"](ctx, [x, w], at)


@op("ConvInteger")
def _conv_integer(ctx, a, at):
    a = list(a) + [None] * (4 - len(a))
    acc = integer_conv(ctx, a[0], a[2], a[1], a[3], at)
    if acc is not None:
        return acc
    x = _centered(ctx, a[0], a[2], 1, np.ndim(a[0]) if not isinstance(a[0], gc.Tensor)
                  else a[0].ndim)
    w = _centered(ctx, a[1], a[3], 0, np.ndim(a[1]) if not isinstance(a[1], gc.Tensor)
                  else a[1].ndim)
    return gc.cast(_conv_f64(ctx, x, w, at), "int32")


def _requantize(ctx, acc, scale, t, zp):
    return quantize(ctx, gc.cast(acc, "float32") * gc.cast(scale, "float32"), t, zp)


@op("QLinearMatMul")
def _qlinear_matmul(ctx, a, at):
    x, w = ctx.tensor(a[0]), ctx.tensor(a[3])
    acc = _exact(ctx, x, a[2], w, a[5], 3)
    if acc is None:
        xa = _centered(ctx, x, a[2], x.ndim - 2, x.ndim)
        wb = _centered(ctx, w, a[5], w.ndim - 1, w.ndim)
        acc = gc.matmul(xa, wb)
    sa, sb, sy = (gc.cast(ctx.tensor(v), "float32") for v in (a[1], a[4], a[6]))
    sa = gc.reshape(sa, (-1, 1)) if sa.ndim == 1 and sa.size > 1 else sa
    scale = sa * sb / sy
    return _requantize(ctx, acc, scale, _out_type(ctx, {}, 7), ctx.tensor(a[7]))


@op("QLinearConv")
def _qlinear_conv(ctx, a, at):
    a = list(a) + [None] * (9 - len(a))
    acc = integer_conv(ctx, a[0], a[2], a[3], a[5], at)      # exact int32, or None
    if acc is None:
        x = _centered(ctx, a[0], a[2], 1, a[0].ndim if isinstance(a[0], gc.Tensor) else
                      np.ndim(a[0]))
        w = _centered(ctx, a[3], a[5], 0, a[3].ndim if isinstance(a[3], gc.Tensor) else
                      np.ndim(a[3]))
        acc = _conv_f64(ctx, x, w, at)
    if a[8] is not None:
        acc = acc + gc.reshape(gc.cast(ctx.tensor(a[8]), acc.dtype), (1, -1) + (1,) *
                               (acc.ndim - 2))
    sx, sw, sy = (gc.cast(ctx.tensor(v), "float32") for v in (a[1], a[4], a[6]))
    if sw.ndim == 1 and sw.size > 1:
        sw = gc.reshape(sw, (1, -1) + (1,) * (acc.ndim - 2))
    return _requantize(ctx, acc, sx * sw / sy, _out_type(ctx, {}, 7), ctx.tensor(a[7]))
