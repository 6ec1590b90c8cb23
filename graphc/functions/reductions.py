"""Reductions and the normalizations built on them: sum, mean, var, max, min, prod,
argmax, argmin, softmax, log_softmax, logsumexp."""
from __future__ import annotations

import numpy as np

from graphc_runtime import dims as sym
from graphc_runtime.dims import Dim
from graphc_runtime.errors import ShapeError

from ..tensor import Tensor, bind, dim_size
from ..ir import dtypes
from ..ir.primitive import normalize_axis
from ..ir.source import user_location
from .elementwise import _as, cast, exp, isfinite, log, stop_gradient, where
from .shapes import reshape


def reduction_axes(x: Tensor, axis, what: str) -> tuple:
    if axis is None:
        return tuple(range(x.ndim))
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    try:
        norm = [normalize_axis(a, x.ndim) for a in axes]
    except ShapeError as e:
        raise ShapeError(f"{what}: {e.bare_message} ({x.node.type_str()})",
                         user_location()) from None
    if len(set(norm)) != len(norm):
        raise ShapeError(f"{what}: repeated axis in {axis}", user_location())
    return tuple(sorted(norm))


def _keep(x: Tensor, out: Tensor, axes, keepdims: bool) -> Tensor:
    if not keepdims:
        return out
    return reshape(out, [1 if i in axes else d for i, d in enumerate(x.shape)])


def _reduce(op: str, x, axis, keepdims, what):
    x = _as(x)
    axes = reduction_axes(x, axis, what)
    out = bind(op, x, axes=axes) if axes else x
    return _keep(x, out, axes, keepdims)


def sum(x, axis=None, keepdims: bool = False) -> Tensor:  # noqa: A001
    """Sum over `axis` (bool counts as int32)."""
    x = _as(x)
    if x.dtype == "bool":
        x = cast(x, "int32")
    return _reduce("reduce_sum", x, axis, keepdims, "sum")


def prod(x, axis=None, keepdims: bool = False) -> Tensor:
    x = _as(x)
    if x.dtype == "bool":
        x = cast(x, "int32")
    return _reduce("reduce_prod", x, axis, keepdims, "prod")


def max(x, axis=None, keepdims: bool = False) -> Tensor:  # noqa: A001
    return _reduce("reduce_max", x, axis, keepdims, "max")


def min(x, axis=None, keepdims: bool = False) -> Tensor:  # noqa: A001
    return _reduce("reduce_min", x, axis, keepdims, "min")


def mean(x, axis=None, keepdims: bool = False) -> Tensor:
    """Arithmetic mean over `axis` (integers give float32)."""
    x = _as(x)
    if not dtypes.is_float(x.dtype):
        x = cast(x, "float32")
    axes = reduction_axes(x, axis, "mean")
    count = sym.prod([x.shape[a] for a in axes])
    total = sum(x, axes, keepdims)
    if isinstance(count, Dim):                  # divides by the size seen at the call
        return total / dim_size(count, x.dtype)
    return total * (1.0 / count) if count else total / 0.0


def var(x, axis=None, keepdims: bool = False, ddof: int = 0) -> Tensor:
    """Variance over `axis` (two-pass: mean of squared deviations)."""
    x = _as(x)
    if not dtypes.is_float(x.dtype):
        x = cast(x, "float32")
    axes = reduction_axes(x, axis, "var")
    count = sym.prod([x.shape[a] for a in axes])
    d = x - mean(x, axes, keepdims=True)
    if isinstance(count, Dim):
        return sum(d * d, axes, keepdims) / dim_size(count - ddof, x.dtype)
    return sum(d * d, axes, keepdims) * (1.0 / (count - ddof))


def _arg(op: str, x, axis, keepdims: bool, what: str) -> Tensor:
    x = _as(x)
    if axis is None:
        flat = reshape(x, (-1,))
        out = bind(op, flat, axis=0, index_dtype="int32")
        return reshape(out, (1,) * x.ndim) if keepdims else out
    (a,) = reduction_axes(x, axis, what)
    out = bind(op, x, axis=a, index_dtype="int32")
    return _keep(x, out, (a,), keepdims)


def argmax(x, axis=None, keepdims: bool = False) -> Tensor:
    """Index (int32) of the first maximum along `axis` (flattened when None)."""
    return _arg("argmax", x, axis, keepdims, "argmax")


def argmin(x, axis=None, keepdims: bool = False) -> Tensor:
    return _arg("argmin", x, axis, keepdims, "argmin")


def logsumexp(x, axis=None, keepdims: bool = False) -> Tensor:
    """log(sum(exp(x))) computed stably (shifted by the max; -inf rows stay -inf)."""
    x = _as(x)
    axes = reduction_axes(x, axis, "logsumexp")
    m = stop_gradient(max(x, axes, keepdims=True))
    m = where(isfinite(m), m, 0.0)
    out = log(sum(exp(x - m), axes, keepdims=True)) + m
    return out if keepdims else reshape(out, [d for i, d in enumerate(x.shape) if i not in axes])


def log_softmax(x, axis: int = -1) -> Tensor:
    """(x - max) - log(sum(exp(x - max))): the shift is taken off first, so a row of
    large values keeps its small differences (x - logsumexp(x) would round them away)."""
    x = _as(x)
    axes = reduction_axes(x, axis, "log_softmax")
    m = stop_gradient(max(x, axes, keepdims=True))
    shifted = x - where(isfinite(m), m, 0.0)
    return shifted - log(sum(exp(shifted), axes, keepdims=True))


def softmax(x, axis: int = -1) -> Tensor:
    """exp(x) / sum(exp(x)) along `axis`, shifted by the max for stability (one
    reciprocal per row, then a multiply per element, as vectorized softmaxes do)."""
    x = _as(x)
    e = exp(x - stop_gradient(max(x, axis, keepdims=True)))
    return e * (1.0 / sum(e, axis, keepdims=True))
