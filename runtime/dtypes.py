"""dtype names <-> numpy storage types, for the runtime (no compiler import).

bfloat16's numpy type comes from ml_dtypes, whose extension takes about 0.5 s to import:
it is imported when a bfloat16 value is first asked for, not with graphc."""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np


class _Storage(Mapping):
    """name -> numpy dtype, in graphc's order of dtypes; bfloat16's made when first read."""

    def __init__(self):
        self._types = {"bool": np.dtype(np.bool_), "int32": np.dtype(np.int32),
                       "int64": np.dtype(np.int64), "float16": np.dtype(np.float16),
                       "bfloat16": None, "float32": np.dtype(np.float32),
                       "float64": np.dtype(np.float64)}

    def __getitem__(self, name):
        npd = self._types[name]
        if npd is None:
            import ml_dtypes
            npd = self._types[name] = np.dtype(ml_dtypes.bfloat16)
        return npd

    def __iter__(self):
        return iter(self._types)

    def __len__(self):
        return len(self._types)


NUMPY = _Storage()
SHORT = {"bool": "bool", "int32": "i32", "int64": "i64", "float16": "f16", "bfloat16": "bf16",
         "float32": "f32", "float64": "f64"}


def name_of(npd: np.dtype) -> str | None:
    """graphc's name of a numpy dtype, or None (without importing ml_dtypes: a bfloat16
    array's dtype says its name)."""
    if npd.name == "bfloat16":
        return "bfloat16"
    for name, dtype in NUMPY._types.items():
        if dtype is not None and dtype == npd:
            return name
    return None


def type_str(shape, dtype: str) -> str:
    return f"{SHORT[dtype]}[{','.join(map(str, shape))}]"
