"""Products of 8-bit integers as graphc's byte products (gc.matmul_8bit: uint8 x int8,
exact int32 sums, AVX512-VNNI's vpdpbusd where the CPU has it): MatMulInteger,
QLinearMatMul, and a MatMul or Gemm whose operands both come from DequantizeLinear
(a QDQ model's quantized product).

Any pair of 8-bit types and zero points maps onto the one uint8 x int8 product:
with A' = A + oa in 0..255 (oa = 128 for int8 A) and B' = B - ob in -128..127
(ob = 128 for uint8 B), ca = za + oa and cb = zb - ob,

    (A - za) @ (B - zb) = A' @ B' - ca * colsum(B') - rowsum(A') * cb + K * ca * cb,

all in int32 (exact while K * 255 * 255 fits), the terms of zero coefficients left out.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import graphc as gc

UINT8, INT8 = 2, 3


@dataclass
class Dequantized:
    """What a DequantizeLinear output was made of: its integers (int32 holding `etype`
    values), scale and zero point (scalars, or 1-D along `axis`)."""
    q: gc.Tensor
    etype: int
    scale: gc.Tensor
    zero: gc.Tensor | None
    axis: int

    def transposed(self) -> "Dequantized | None":
        """The same of the 2-D values transposed (a Gemm's transB weight), or None."""
        if self.q.ndim != 2:
            return None
        value = constant_value(self.q)      # a weight stays a constant: packed at compile
        q = self.q.T if value is None else gc.constant(np.ascontiguousarray(value.T))
        return Dequantized(q, self.etype, self.scale, self.zero, 1 - self.axis)

    def scale_with(self, x: "Dequantized", channels: tuple) -> gc.Tensor:
        """x's per-tensor scale times this weight's: a scalar, or its per-channel
        scales reshaped to `channels` (where they broadcast against the product)."""
        mine = gc.reshape(self.scale, ()) if per_tensor(self.scale) else \
            gc.reshape(self.scale, channels)
        return gc.reshape(x.scale, ()) * mine


def per_tensor(v) -> bool:
    """Whether a scale or zero point is absent or one value."""
    return v is None or v.ndim == 0 or v.size == 1


def _zero_free(v) -> bool:
    """Whether zero point v is absent or a constant of zeros."""
    value = None if v is None else constant_value(v)
    return v is None or value is not None and not np.any(value)


def along(v: gc.Tensor, axis: int, ndim: int) -> gc.Tensor:
    """A scalar or 1-D scale or zero point broadcasting along `axis` of ndim."""
    if per_tensor(v):
        return gc.reshape(v, ())
    shape = [1] * ndim
    shape[axis] = v.shape[0]
    return gc.reshape(v, tuple(shape))


def _offset(zero, shift: int):
    """zero + shift: None where both are nothing, an int32 scalar where only the shift
    is something."""
    if zero is None:
        return np.int32(shift) if shift else None
    return zero + np.int32(shift) if shift else zero


def shifted(v: gc.Tensor, shift: int) -> gc.Tensor:
    """v + shift (a constant's computed here, so it stays a constant)."""
    if not shift:
        return v
    value = constant_value(v)
    if value is not None:
        return gc.constant((value + shift).astype(np.int32))
    return v + np.int32(shift)


def constant_value(v) -> np.ndarray | None:
    """The value of a constant Tensor (or numpy value), else None."""
    if not isinstance(v, gc.Tensor):
        return np.asarray(v)
    return np.asarray(v.node.attrs["value"]) if v.node.op == "constant" else None


def _sums(v: gc.Tensor, axis: int) -> gc.Tensor:
    """v summed along axis (kept): of a constant (a weight), summed once here."""
    value = constant_value(v)
    if value is not None:
        return gc.constant(value.astype(np.int64).sum(axis=axis, keepdims=True)
                           .astype(np.int32))
    return gc.sum(v, axis=axis, keepdims=True)


def exact_product(a: gc.Tensor, ta: int, za, b: gc.Tensor, tb: int, zb) -> gc.Tensor | None:
    """(a - za) @ (b - zb) in int32 for int32 tensors holding 8-bit values of ONNX types
    ta and tb; za scalar or per row of a, zb scalar or per column of b. None where the
    types are not both 8-bit."""
    if ta not in (UINT8, INT8) or tb not in (UINT8, INT8) or a.ndim < 2 or b.ndim < 2:
        return None
    oa, ob = (128 if ta == INT8 else 0), (128 if tb == UINT8 else 0)
    a1, b1 = shifted(a, oa), shifted(b, -ob)
    acc = gc.matmul_8bit(a1, b1)
    ca = _offset(None if _zero_free(za) else along(gc.cast(za, "int32"), a.ndim - 2, a.ndim),
                 oa)
    cb = _offset(None if _zero_free(zb) else along(gc.cast(zb, "int32"), b.ndim - 1, b.ndim),
                 -ob)
    if ca is not None:
        acc = acc - ca * _sums(b1, -2)
    if cb is not None:
        acc = acc - _sums(a1, -1) * cb
    if ca is not None and cb is not None:
        acc = acc + ca * cb * np.int32(a.shape[-1])
    return acc


def quantized_matmul(x: Dequantized, w: Dequantized) -> gc.Tensor | None:
    """MatMul(DequantizeLinear(x), DequantizeLinear(w)) in float32 as the exact integer
    product scaled once, where x is per-tensor and w per-tensor or (2-D) per column;
    None otherwise (the float product of the dequantized values)."""
    if x.q.ndim < 2 or w.q.ndim < 2 or not (per_tensor(x.scale) and per_tensor(x.zero)):
        return None
    if not (per_tensor(w.scale) and per_tensor(w.zero) or w.q.ndim == 2 and w.axis == 1):
        return None
    if x.scale.dtype != "float32" or w.scale.dtype != "float32":
        return None
    acc = exact_product(x.q, x.etype, x.zero, w.q, w.etype, w.zero)
    if acc is None:
        return None
    return gc.cast(acc, "float32") * w.scale_with(x, (-1,))


def dequantized_product(ctx, x, w, trans_w: bool = False) -> gc.Tensor:
    """x @ w for a MatMul or Gemm node: the exact integer product, scaled once, where the
    node's first two inputs are dequantized 8-bit integers (quantized_matmul; w given
    transposed where trans_w), else in floating point."""
    dx, dw = (ctx.dequantized.get(name) for name in ctx.node.input[:2])
    if dw is not None and trans_w:
        dw = dw.transposed()
    if dx is not None and dw is not None:
        y = quantized_matmul(dx, dw)
        if y is not None:
            return y
    return gc.matmul(x, w)
