"""Collectives across `axis_size` processes: all_reduce, all_gather, reduce_scatter.

The graph records the number of participants so shapes stay static, and optionally
`group`, the world ranks taking part (default: all of them). With axis_size 1 each
collective is the identity; with more, the reference runs it through MPI
(graphc_runtime.collectives).
"""
from __future__ import annotations

import numpy as np

from graphc_runtime.errors import DTypeError, ShapeError

from ..primitive import define

REDUCE_OPS = ("sum", "mean", "max")


def _size(attrs):
    n = attrs["axis_size"]
    if not isinstance(n, int) or n < 1:
        raise ShapeError(f"axis_size must be a positive int, got {n!r}")
    group = attrs.get("group")
    if group is not None:
        if not isinstance(group, tuple) or len(group) != n or len(set(group)) != n or \
                not all(isinstance(r, int) and r >= 0 for r in group):
            raise ShapeError(f"group must be a tuple of {n} distinct process ranks "
                             f"(axis_size), got {group!r}")
    return n


def _axis(attrs, x):
    axis = attrs["axis"]
    if not isinstance(axis, int) or not 0 <= axis < x.ndim:
        raise ShapeError(f"axis {axis!r} is out of range for {x.type_str()}")
    return axis


def _all_reduce_rule(inputs, attrs):
    (x,) = inputs
    _size(attrs)
    if attrs["op"] not in REDUCE_OPS:
        raise ShapeError(f"op must be one of {REDUCE_OPS}, got {attrs['op']!r}")
    if x.dtype == "bool":
        raise DTypeError("cannot all_reduce bool values")
    if attrs["op"] == "mean" and not x.dtype.startswith(("float", "bfloat")):
        raise DTypeError(f"mean all_reduce needs a float dtype, got {x.dtype}")
    return x.shape, x.dtype


def _all_gather_rule(inputs, attrs):
    (x,) = inputs
    n, axis = _size(attrs), _axis(attrs, x)
    shape = list(x.shape)
    shape[axis] *= n
    return tuple(shape), x.dtype


def _reduce_scatter_rule(inputs, attrs):
    (x,) = inputs
    n, axis = _size(attrs), _axis(attrs, x)
    if x.dtype == "bool":
        raise DTypeError("cannot reduce_scatter bool values")
    if x.shape[axis] % n:
        raise ShapeError(f"dimension {axis} of {x.type_str()} is not divisible by "
                         f"axis_size {n}")
    shape = list(x.shape)
    shape[axis] //= n
    return tuple(shape), x.dtype


def _reference(args, attrs, node):
    """One process: the identity. Several: MPI's world communicator (mpi4py)."""
    if attrs["axis_size"] == 1:
        return np.array(args[0], copy=True)
    from graphc_runtime import collectives
    from .. import dtypes
    src = np.ascontiguousarray(args[0])
    dst = np.empty(node.shape, dtypes.to_numpy(node.dtype))
    collectives.run(node.op, attrs, src, dst)
    return dst


define("all_reduce", "collective", _all_reduce_rule, _reference, arity=1)
define("all_gather", "collective", _all_gather_rule, _reference, arity=1)
define("reduce_scatter", "collective", _reduce_scatter_rule, _reference, arity=1)
