"""Products of 8-bit integers: matmul_8bit multiplies int32 tensors that hold uint8 and
int8 values as bytes, packed four to an int32 word along the contracted axis (the form
AVX512-VNNI's vpdpbusd multiplies, dot_general's packed_int8)."""
from __future__ import annotations

import numpy as np

from graphc_runtime.errors import DTypeError

from ..ir.source import user_location
from ..ir.graph import graph_for
from ..tensor import Tensor, constant
from .elementwise import bitwise_and
from .linalg import _matmul
from .shapes import pad

WORD = 4                  # bytes an int32 word packs


def pack_bytes(x: Tensor, axis: int) -> Tensor:
    """The low bytes of int32 x packed four to a word along `axis` (zero-padded to a
    multiple of 4): word q holds element 4q + t in byte t. A constant is packed here."""
    axis = axis % x.ndim
    n = x.shape[axis]
    words = -(-n // WORD)
    if x.node.op == "constant":
        v = np.asarray(x.node.attrs["value"]).astype(np.int64) & 0xFF
        v = np.moveaxis(v, axis, -1)
        v = np.concatenate([v, np.zeros(v.shape[:-1] + (words * WORD - n,), np.int64)], -1)
        v = v.reshape(v.shape[:-1] + (words, WORD)) << (8 * np.arange(WORD))
        packed = v.sum(-1).astype(np.uint32).view(np.int32)
        return constant(np.ascontiguousarray(np.moveaxis(packed, -1, axis)),
                        graph=graph_for([x.node.graph]))
    if words * WORD != n:
        x = pad(x, [(0, 0)] * axis + [(0, words * WORD - n)] + [(0, 0)] * (x.ndim - axis - 1))
    low = bitwise_and(x, np.int32(0xFF))
    word = None
    for t in range(WORD):       # strided slices: x's producer keeps its own shape
        byte = low[(slice(None),) * axis + (slice(t, None, WORD),)]
        byte = byte * np.int32(1 << (8 * t)) if t else byte
        word = byte if word is None else word + byte      # int32 wraps: the byte's bits
    return word


def matmul_8bit(a, b) -> Tensor:
    """a @ b (as matmul, both at least 2-D) over int32 tensors holding uint8 values (a)
    and int8 values (b): exact int32 sums (wrapping as int32 does), multiplied as bytes
    (AVX512-VNNI's vpdpbusd where the CPU has it). Each value counts as its low byte:
    a's as 0..255, b's as -128..127."""
    for name, t in (("a", a), ("b", b)):
        if not isinstance(t, Tensor) or t.dtype != "int32" or t.ndim < 2:
            got = t.node.type_str() if isinstance(t, Tensor) else type(t).__name__
            raise DTypeError(f"matmul_8bit: {name} must be an int32 Tensor of at least 2 "
                             f"dimensions, got {got}", user_location())
    return _matmul(pack_bytes(a, -1), pack_bytes(b, -2), "int32", {"packed_int8": "us"})
