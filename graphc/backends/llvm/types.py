"""LLVM types of graphc's dtypes (storage and compute) and shared tables."""
from __future__ import annotations

import llvmlite.ir as ir

from ...ir import dtypes

I1, I8, I16, I32, I64 = (ir.IntType(n) for n in (1, 8, 16, 32, 64))
F16, F32, F64 = ir.HalfType(), ir.FloatType(), ir.DoubleType()
VOID = ir.VoidType()

STORAGE = {"float32": F32, "float64": F64, "float16": F16, "bfloat16": I16,
           "int32": I32, "int64": I64, "bool": I8}
COMPUTE = {"float32": F32, "float64": F64, "float16": F32, "bfloat16": F32,
           "int32": I32, "int64": I64, "bool": I1}
FCMP = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


def _mangle(t) -> str:
    if isinstance(t, ir.IntType):
        return f"i{t.width}"
    return {F16: "f16", F32: "f32", F64: "f64"}[t]


def _is_float(dtype):
    return dtypes.is_float(dtype)
