"""Tensors made from nothing: zeros, ones, full, arange, iota."""
from __future__ import annotations

import numpy as np

from graphc_runtime.errors import ShapeError

from ..tensor import (Tensor, _shape_tuple, bind, bind_source, constant,  # noqa: F401
                      dim_size)            # (dim_size: re-exported as gc.dim_size)
from ..ir import dtypes
from ..ir.graph import current_graph
from ..ir.source import user_location
from .elementwise import cast


def full(shape, value, dtype=None, graph=None) -> Tensor:
    """A tensor of `shape` filled with `value` (a broadcast scalar constant, not a big array)."""
    shape = _shape_tuple(shape, "full")
    dt = dtypes.canonical(dtype) if dtype is not None else \
        dtypes.default_dtype(dtypes.scalar_kind(value) or "float")
    if dtypes.scalar_kind(value) is not None:
        dtypes.check_scalar_fits(value, dt, "full")
    scalar = constant(np.asarray(value, dtype=dtypes.to_numpy(dt)), graph=graph or current_graph())
    if not shape:
        return scalar
    return bind("broadcast_in_dim", scalar, shape=shape, broadcast_dimensions=())


def zeros(shape, dtype="float32") -> Tensor:
    return full(shape, 0, dtype)


def ones(shape, dtype="float32") -> Tensor:
    return full(shape, 1, dtype)


def iota(shape, dimension: int = 0, dtype="int32") -> Tensor:
    """Integers counting along `dimension`, broadcast over the others."""
    return bind_source("iota", current_graph(), {"shape": _shape_tuple(shape, "iota"),
                                                 "dtype": dtypes.canonical(dtype),
                                                 "dimension": dimension})


def arange(start, stop=None, step=1, dtype=None) -> Tensor:
    """numpy.arange with static bounds, built from iota (no stored array)."""
    if stop is None:
        start, stop = 0, start
    if step == 0:
        raise ShapeError("arange: step must not be zero", user_location())
    n = max(int(np.ceil((stop - start) / step)), 0)
    if dtype is None:
        kinds = [dtypes.scalar_kind(v) for v in (start, stop, step)]
        dtype = "float32" if "float" in kinds else "int32"
    dtype = dtypes.canonical(dtype)
    ramp = iota((n,), 0, dtype if dtypes.kind(dtype) != "bool" else "int32")
    if step != 1:
        ramp = ramp * step
    if start != 0:
        ramp = ramp + start
    return cast(ramp, dtype)


def ones_like(x: Tensor) -> Tensor:
    return full(x.shape, 1, x.dtype, graph=x.graph)


def zeros_like(x: Tensor) -> Tensor:
    return full(x.shape, 0, x.dtype, graph=x.graph)
