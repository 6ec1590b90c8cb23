"""ONNX element types and the graphc dtypes they import as."""
from __future__ import annotations

from .errors import UnsupportedError

# ONNX TensorProto element types graphc computes in
DTYPES = {1: "float32", 11: "float64", 10: "float16", 16: "bfloat16", 6: "int32", 7: "int64",
          9: "bool"}
TYPE_NAMES = {0: "UNDEFINED", 1: "FLOAT", 2: "UINT8", 3: "INT8", 4: "UINT16", 5: "INT16",
              6: "INT32", 7: "INT64", 8: "STRING", 9: "BOOL", 10: "FLOAT16", 11: "DOUBLE",
              12: "UINT32", 13: "UINT64", 14: "COMPLEX64", 15: "COMPLEX128", 16: "BFLOAT16"}


def dtype_of(elem_type: int, what: str) -> str:
    if elem_type not in DTYPES:
        raise UnsupportedError(f"{what}: ONNX element type "
                               f"{TYPE_NAMES.get(elem_type, elem_type)} is not supported "
                               f"(graphc computes in {', '.join(sorted(set(DTYPES.values())))})")
    return DTYPES[elem_type]


def to_array(tensor):
    """A TensorProto's value as numpy; bfloat16 as ml_dtypes.bfloat16 (onnx < 1.19 hands
    out its bit patterns as uint16)."""
    import ml_dtypes
    from onnx import numpy_helper
    arr = numpy_helper.to_array(tensor)
    if tensor.data_type == 16 and arr.dtype == "uint16":
        arr = arr.view(ml_dtypes.bfloat16)
    return arr


ELEM_TYPES = {v: k for k, v in DTYPES.items()}


def onnx_type_of(value):
    """(ONNX element type, shape) of a converted value: a graphc Tensor or a numpy array."""
    import numpy as np
    if hasattr(value, "node"):                       # a graphc Tensor
        return ELEM_TYPES[value.dtype], list(value.shape)
    arr = np.asarray(value)
    from graphc.ir import dtypes as gdt
    return ELEM_TYPES[gdt.canonical(arr.dtype)], list(arr.shape)
