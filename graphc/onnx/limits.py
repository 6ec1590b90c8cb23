"""Bounds on what importing a model may allocate: an ONNX file is untrusted input, and a
300-byte file can ask for a constant of any size.

- A value computed at import (ConstantOfShape, Range, Tile of constants...) is made a
  numpy constant only up to MAX_IMPORT_BYTES; a larger one stays a graph operation,
  computed when the program runs (a broadcast or a ramp costs nothing to store).
- A size past ADDRESS_SPACE_BYTES (x86-64 and AArch64 user space: 2^47 bytes) can never
  be allocated: it is refused with a ModelError naming the node, before anything is
  allocated.
"""
from __future__ import annotations

import numpy as np

from .errors import ModelError

MAX_IMPORT_BYTES = 64 << 20
ADDRESS_SPACE_BYTES = 1 << 47


def nbytes(shape, dtype) -> int | None:
    """Bytes of a static shape of `dtype` (numpy or graphc name); None if symbolic."""
    count = 1
    for d in shape:
        if not isinstance(d, (int, np.integer)):
            return None
        count *= int(d)
    return count * np.dtype(_numpy(dtype)).itemsize


def check_size(shape, dtype, what: str) -> int | None:
    """nbytes(shape, dtype), or a ModelError where no address space can hold it."""
    if any(isinstance(d, (int, np.integer)) and d < 0 for d in shape):
        raise ModelError(f"{what} has a negative size in its shape {tuple(shape)}")
    size = nbytes(shape, dtype)
    if size is not None and size > ADDRESS_SPACE_BYTES:
        raise ModelError(f"{what} of shape {tuple(int(d) for d in shape)} would take "
                         f"{size / 2**40:.3g} TiB, more than any address space holds")
    return size


def fits_in_import(shape, dtype, what: str) -> bool:
    """Whether a value of this shape may be computed at import (else: a graph op)."""
    size = check_size(shape, dtype, what)
    return size is not None and size <= MAX_IMPORT_BYTES


def _numpy(dtype):
    if isinstance(dtype, str):
        from graphc.ir import dtypes
        try:
            return dtypes.to_numpy(dtypes.canonical(dtype))
        except Exception:      # noqa: BLE001 - a numpy name
            return np.dtype(dtype)
    return dtype
