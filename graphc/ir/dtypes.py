"""The dtypes graphc knows, their numpy storage types, and type promotion.

Promotion follows NumPy within one kind (float32 + float64 -> float64, int32 + int64 ->
int64); across kinds the wider kind wins without widening (int32 + float32 -> float32,
bool + int32 -> int32), and float16 + bfloat16 -> float32, as in JAX. Python scalars are
*weak*: they take the dtype of the tensor they meet unless their kind is wider (a Python
float meeting an int tensor gives float32).
"""
from __future__ import annotations

import numpy as np

from graphc_runtime.dtypes import NUMPY, name_of
from graphc_runtime.errors import DTypeError

FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64")
INT_DTYPES = ("int32", "int64")
ALL_DTYPES = ("bool",) + INT_DTYPES + FLOAT_DTYPES

_NUMPY = NUMPY          # bfloat16's type imported from ml_dtypes when first asked for
_SHORT = {"bool": "bool", "int32": "i32", "int64": "i64", "float16": "f16",
          "bfloat16": "bf16", "float32": "f32", "float64": "f64"}
_KIND_RANK = {"bool": 0, "int": 1, "float": 2}


def canonical(dtype) -> str:
    """The graphc name of `dtype` (a name, a numpy dtype or a numpy scalar type)."""
    if isinstance(dtype, str):
        if dtype in _NUMPY:
            return dtype
        aliases = {"f32": "float32", "f64": "float64", "f16": "float16", "bf16": "bfloat16",
                   "i32": "int32", "i64": "int64", "half": "float16", "float": "float32",
                   "double": "float64", "int": "int32", "long": "int64", "bool_": "bool"}
        if dtype in aliases:
            return aliases[dtype]
    try:
        npd = np.dtype(dtype)
    except TypeError:
        raise DTypeError(f"unknown dtype {dtype!r}; graphc supports {', '.join(ALL_DTYPES)}")
    name = name_of(npd)
    if name is not None:
        return name
    raise DTypeError(f"unsupported dtype {npd}; graphc supports {', '.join(ALL_DTYPES)}")


def to_numpy(dtype: str) -> np.dtype:
    """The numpy dtype that stores values of graphc dtype `dtype`."""
    return _NUMPY[dtype]


def short(dtype: str) -> str:
    """Short printed form: f32, i64, bf16, bool..."""
    return _SHORT[dtype]


def kind(dtype: str) -> str:
    """'bool', 'int' or 'float'."""
    if dtype == "bool":
        return "bool"
    return "int" if dtype in INT_DTYPES else "float"


def is_float(dtype: str) -> bool:
    return dtype in FLOAT_DTYPES


def is_int(dtype: str) -> bool:
    return dtype in INT_DTYPES


def itemsize(dtype: str) -> int:
    return _NUMPY[dtype].itemsize


def compute_dtype(dtype: str) -> str:
    """The dtype arithmetic is done in: float16/bfloat16 are storage types, math is float32."""
    return "float32" if dtype in ("float16", "bfloat16") else dtype


def promote(a: str, b: str) -> str:
    """Result dtype of a binary operation on two (strong) tensors of dtypes a and b."""
    if a == b:
        return a
    ka, kb = kind(a), kind(b)
    if ka != kb:
        return a if _KIND_RANK[ka] > _KIND_RANK[kb] else b
    if {a, b} == {"float16", "bfloat16"}:
        return "float32"
    return a if itemsize(a) >= itemsize(b) else b


def scalar_kind(value) -> str | None:
    """Kind of a Python (or numpy 0-d) scalar, or None if `value` is not a scalar."""
    if isinstance(value, (bool, np.bool_)):
        return "bool"
    if isinstance(value, (int, np.integer)):
        return "int"
    if isinstance(value, (float, np.floating)):
        return "float"
    return None


def promote_weak(tensor_dtype: str, weak_kind: str) -> str:
    """Result dtype when a tensor of `tensor_dtype` meets a weak Python scalar of `weak_kind`."""
    if _KIND_RANK[weak_kind] <= _KIND_RANK[kind(tensor_dtype)]:
        return tensor_dtype
    return default_dtype(weak_kind)


def default_dtype(scalar_kind_: str) -> str:
    """Dtype given to a Python scalar that meets no tensor: bool, int32 or float32."""
    return {"bool": "bool", "int": "int32", "float": "float32"}[scalar_kind_]


def check_scalar_fits(value, dtype: str, what: str) -> None:
    """Raise DTypeError if the Python scalar `value` cannot be represented in `dtype`."""
    if kind(dtype) == "int" and isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        info = np.iinfo(to_numpy(dtype))
        if not info.min <= int(value) <= info.max:
            raise DTypeError(f"{what}: Python int {value} does not fit in {dtype} "
                             f"(range {info.min}..{info.max})")
