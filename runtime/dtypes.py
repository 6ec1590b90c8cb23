"""dtype names <-> numpy storage types, for the runtime (no compiler import)."""
from __future__ import annotations

import ml_dtypes
import numpy as np

NUMPY = {"bool": np.dtype(np.bool_), "int32": np.dtype(np.int32), "int64": np.dtype(np.int64),
         "float16": np.dtype(np.float16), "bfloat16": np.dtype(ml_dtypes.bfloat16),
         "float32": np.dtype(np.float32), "float64": np.dtype(np.float64)}
SHORT = {"bool": "bool", "int32": "i32", "int64": "i64", "float16": "f16", "bfloat16": "bf16",
         "float32": "f32", "float64": "f64"}


def type_str(shape, dtype: str) -> str:
    return f"{SHORT[dtype]}[{','.join(map(str, shape))}]"
