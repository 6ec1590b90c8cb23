"""gather (take along one axis) and scatter_add (its transpose).

gather(operand, indices; axis) has shape operand.shape[:axis] + indices.shape +
operand.shape[axis+1:]. Indices outside [0, size) are clamped into range, in both
primitives, so that scatter_add is exactly gather's transpose (XLA clamps gathers too);
the API normalizes negative indices and checks constant ones when the graph is built.
"""
from __future__ import annotations

import numpy as np

from graphc_runtime.errors import DTypeError, ShapeError

from .. import dtypes
from ..primitive import define


def _gathered_shape(operand, indices, attrs):
    axis = attrs["axis"]
    if not isinstance(axis, int) or not 0 <= axis < operand.ndim:
        raise ShapeError(f"axis {axis!r} is out of range for {operand.type_str()}")
    if indices.dtype not in dtypes.INT_DTYPES:
        raise DTypeError(f"indices must be int32 or int64, got {indices.type_str()}")
    if operand.shape[axis] == 0 and indices.size:
        raise ShapeError(f"cannot gather from zero-size axis {axis} of {operand.type_str()}")
    return operand.shape[:axis] + indices.shape + operand.shape[axis + 1:]


def _gather_rule(inputs, attrs):
    operand, indices = inputs
    return _gathered_shape(operand, indices, attrs), operand.dtype


def _clamped(indices, n):
    return np.clip(indices, 0, max(n - 1, 0))


def _gather_impl(args, attrs, node):
    operand, indices = args
    axis = attrs["axis"]
    return np.take(operand, _clamped(indices, operand.shape[axis]), axis=axis)


def _scatter_rule(inputs, attrs):
    operand, indices, updates = inputs
    expected = _gathered_shape(operand, indices, attrs)
    if updates.shape != expected:
        raise ShapeError(f"updates {updates.type_str()} must have shape "
                         f"{expected} for indices {indices.type_str()} into "
                         f"{operand.type_str()} along axis {attrs['axis']}")
    if updates.dtype != operand.dtype or operand.dtype == "bool":
        raise DTypeError(f"operand {operand.type_str()} and updates {updates.type_str()} "
                         f"must share a numeric dtype")
    return operand.shape, operand.dtype


def _scatter_impl(args, attrs, node):
    operand, indices, updates = args
    axis = attrs["axis"]
    compute = dtypes.to_numpy(dtypes.compute_dtype(node.dtype))
    out = operand.astype(compute, copy=True)
    index = (slice(None),) * axis + (_clamped(indices, operand.shape[axis]),)
    np.add.at(out, index, updates.astype(compute, copy=False))
    return out.astype(dtypes.to_numpy(node.dtype), copy=False)


define("gather", "gather", _gather_rule, _gather_impl, arity=2)
define("scatter_add", "scatter", _scatter_rule, _scatter_impl, arity=3)
