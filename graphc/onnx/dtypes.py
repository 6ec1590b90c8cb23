"""ONNX element types and the graphc dtypes they import as."""
from __future__ import annotations

import numpy as np

from .errors import UnsupportedError

# ONNX TensorProto element types graphc computes in
DTYPES = {1: "float32", 11: "float64", 10: "float16", 16: "bfloat16", 6: "int32", 7: "int64",
          9: "bool"}
TYPE_NAMES = {0: "UNDEFINED", 1: "FLOAT", 2: "UINT8", 3: "INT8", 4: "UINT16", 5: "INT16",
              6: "INT32", 7: "INT64", 8: "STRING", 9: "BOOL", 10: "FLOAT16", 11: "DOUBLE",
              12: "UINT32", 13: "UINT64", 14: "COMPLEX64", 15: "COMPLEX128", 16: "BFLOAT16",
              17: "FLOAT8E4M3FN", 18: "FLOAT8E4M3FNUZ", 19: "FLOAT8E5M2", 20: "FLOAT8E5M2FNUZ",
              21: "UINT4", 22: "INT4", 23: "FLOAT4E2M1", 24: "FLOAT8E8M0", 25: "UINT2",
              26: "INT2"}


# 8/16/32-bit integers graphc lacks: stored in a wider graphc integer, wrapped back into
# their range after each op that may leave it, converted at the executable's boundary
NARROW = {2: ("uint8", 8, False), 3: ("int8", 8, True), 4: ("uint16", 16, False),
          5: ("int16", 16, True), 12: ("uint32", 32, False)}
# 4- and 2-bit integers, where the installed ml_dtypes has them
import ml_dtypes  # noqa: E402
for _code, _spec in {21: ("uint4", 4, False), 22: ("int4", 4, True), 25: ("uint2", 2, False),
                     26: ("int2", 2, True)}.items():
    if hasattr(ml_dtypes, _spec[0]):
        NARROW[_code] = _spec
NARROW_NUMPY = {name: code for code, (name, _, _) in NARROW.items()}


def compute_dtype(elem_type: int) -> str:
    """The graphc dtype a narrow integer type is computed in."""
    return "int64" if NARROW[elem_type][1] == 32 else "int32"


def numpy_dtype(elem_type: int):
    name = NARROW[elem_type][0]
    if NARROW[elem_type][1] < 8:
        import ml_dtypes
        return np.dtype(getattr(ml_dtypes, name))
    return np.dtype(name)


def value_range(elem_type: int) -> tuple[int, int]:
    """(lowest, highest) value of a narrow integer type."""
    _, bits, signed = NARROW[elem_type]
    return (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)


def wrap(value, elem_type: int):
    """`value` (a graphc Tensor or numpy array in the compute dtype) reduced into the range
    of the narrow integer type, as two's-complement arithmetic would leave it."""
    _, bits, signed = NARROW[elem_type]
    mask, half = (1 << bits) - 1, 1 << (bits - 1)
    if not hasattr(value, "node"):
        v = np.asarray(value).astype(np.int64)
        v = ((v + half) & mask) - half if signed else v & mask
        return v.astype(compute_dtype(elem_type))
    import graphc as gc
    m = gc.constant(np.asarray(mask, value.dtype))
    if not signed:
        return gc.bitwise_and(value, m)
    h = gc.constant(np.asarray(half, value.dtype))
    return gc.bitwise_and(value + h, m) - h


def dtype_of(elem_type: int, what: str) -> str:
    if elem_type in NARROW:
        return compute_dtype(elem_type)
    if elem_type not in DTYPES:
        raise UnsupportedError(f"{what}: ONNX element type "
                               f"{TYPE_NAMES.get(elem_type, elem_type)} is not supported "
                               f"(graphc computes in {', '.join(sorted(set(DTYPES.values())))}"
                               f", and in int32/int64 for 8-, 16- and 32-bit integers)")
    return DTYPES[elem_type]


def to_array(tensor):
    """A TensorProto's value as numpy; bfloat16 as ml_dtypes.bfloat16 (onnx < 1.19 hands
    out its bit patterns as uint16)."""
    import ml_dtypes
    from onnx import numpy_helper
    arr = numpy_helper.to_array(tensor)
    if tensor.data_type == 16 and arr.dtype == "uint16":
        arr = arr.view(ml_dtypes.bfloat16)
    return plain(arr)


def plain(arr):
    """onnx < 1.19 gives 4-bit integers a structured dtype (one field named 'int4' or
    'uint4' over int8/uint8): the values as the ml_dtypes type instead."""
    import ml_dtypes
    fields = arr.dtype.fields
    if fields and len(fields) == 1:
        (name,) = fields
        if hasattr(ml_dtypes, name):
            return arr.view(arr.dtype.base).astype(getattr(ml_dtypes, name))
    return arr


ELEM_TYPES = {v: k for k, v in DTYPES.items()}


def onnx_type_of(value, narrow: int | None = None):
    """(ONNX element type, shape) of a converted value: a graphc Tensor or a numpy array
    (`narrow`: the narrow integer type it stands for, if any)."""
    if narrow is not None:
        return narrow, list(np.shape(value) if not hasattr(value, "node") else value.shape)
    if hasattr(value, "node"):                       # a graphc Tensor
        return ELEM_TYPES[value.dtype], list(value.shape)
    arr = np.asarray(value)
    from graphc.ir import dtypes as gdt
    return ELEM_TYPES[gdt.canonical(arr.dtype)], list(arr.shape)
