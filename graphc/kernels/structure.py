"""A kernel's structure as a hashable value, with its buffers named by their position
among the kernel's arguments: two kernels of equal structure compile to the same
function (the layers of a network repeat kernels over other buffers), so a backend
emits the code once and calls it with each kernel's buffers.

Everything a kernel holds takes part except names (the kernel's, its buffers'): index
and value expressions, shapes, dtypes, buffer kinds, constants by type and exact text
(0.0 and -0.0 differ, so do 1 and 1.0), symbolic sizes by their terms, arrays by dtype,
shape and bytes. A kernel holding an object this walk does not know has no structure
(None): an unknown kind of content can only miss a match, never make one."""
from __future__ import annotations

import dataclasses
import hashlib

import numpy as np

from graphc_runtime.dims import Dim

from .ir import Buffer, Kernel

_LEAVES = (bool, int, float, str, type(None), np.generic)


def structure(kernel: Kernel, positions: dict) -> tuple | None:
    """The structure of `kernel`; positions maps each buffer id it uses to its argument
    number (a buffer id outside it, e.g. in a set of ids, stays as it is). None where
    the kernel holds an object of a kind this walk does not know."""
    memo: dict = {}
    unknown = []

    def walk(obj):
        key = id(obj)
        if key in memo:
            return memo[key][0]
        out = _walk(obj)
        memo[key] = (out, obj)          # obj kept alive: its id stays its own
        return out

    def _walk(obj):
        if isinstance(obj, Buffer):
            return ("buffer", positions.get(obj.id, ("id", obj.id)), walk(obj.shape),
                    obj.dtype, obj.kind)
        if isinstance(obj, Dim):
            return ("Dim",) + tuple(sorted(obj.terms.items()))
        if isinstance(obj, _LEAVES):
            return (type(obj).__name__, repr(obj))
        if isinstance(obj, np.ndarray):
            return ("array", obj.dtype.str, obj.shape,
                    hashlib.sha1(np.ascontiguousarray(obj).tobytes()).hexdigest())
        if isinstance(obj, (list, tuple)):
            return (type(obj).__name__,) + tuple(walk(x) for x in obj)
        if isinstance(obj, (set, frozenset)):
            if all(isinstance(x, int) for x in obj):        # buffer ids
                return ("ids",) + tuple(sorted(map(repr, (positions.get(x, ("id", x))
                                                         for x in obj))))
            return ("set",) + tuple(sorted(repr(walk(x)) for x in obj))
        if isinstance(obj, dict):
            return ("dict",) + tuple(sorted((repr(walk(k)), walk(v)) for k, v in obj.items()))
        if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
            skip = "name" if isinstance(obj, Kernel) else None
            return (type(obj).__qualname__,) + tuple(
                walk(getattr(obj, f.name)) for f in dataclasses.fields(obj) if f.name != skip)
        unknown.append(obj)
        return None

    out = walk(kernel)
    return None if unknown else out
