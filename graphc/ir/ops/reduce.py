"""Reductions over a set of axes (sum, max, min, prod) and argmax/argmin over one axis.

float16/bfloat16 accumulate in float32. max/min over an empty axis have no identity and
are refused, as in numpy. argmax/argmin return the first index of the extreme value.
"""
from __future__ import annotations

import numpy as np

from graphc_runtime.errors import DTypeError, ShapeError

from .. import dtypes
from ..primitive import define


def _axes(attrs, x):
    axes = attrs["axes"]
    if any(not isinstance(a, int) or not 0 <= a < x.ndim for a in axes) or \
            len(set(axes)) != len(axes) or list(axes) != sorted(axes):
        raise ShapeError(f"axes {axes} must be sorted, distinct and within rank {x.ndim} "
                         f"of {x.type_str()}")
    return axes


def _reduce_rule(name):
    def rule(inputs, attrs):
        (x,) = inputs
        axes = _axes(attrs, x)
        if name in ("reduce_sum", "reduce_prod") and x.dtype == "bool":
            raise DTypeError(f"cannot {name[7:]} bool values; cast them first")
        if name in ("reduce_max", "reduce_min") and any(x.shape[a] == 0 for a in axes):
            raise ShapeError(f"zero-size axis of {x.type_str()} has no identity for "
                             f"{name[7:]}")
        return tuple(d for i, d in enumerate(x.shape) if i not in axes), x.dtype
    return rule


def _reduce_impl(fn):
    def impl(args, attrs, node):
        (x,) = args
        compute = dtypes.to_numpy(dtypes.compute_dtype(node.dtype))
        if x.dtype != compute and x.dtype != np.bool_:
            x = x.astype(compute)
        with np.errstate(all="ignore"):
            out = fn(x, axis=tuple(attrs["axes"]))
        return np.asarray(out).astype(dtypes.to_numpy(node.dtype), copy=False)
    return impl


def _arg_rule(inputs, attrs):
    (x,) = inputs
    axis = attrs["axis"]
    if not isinstance(axis, int) or not 0 <= axis < x.ndim:
        raise ShapeError(f"axis {axis!r} is out of range for {x.type_str()}")
    if x.shape[axis] == 0:
        raise ShapeError(f"zero-size axis {axis} of {x.type_str()} has no extreme value")
    if attrs["index_dtype"] not in dtypes.INT_DTYPES:
        raise DTypeError(f"index_dtype must be int32 or int64, got {attrs['index_dtype']!r}")
    return tuple(d for i, d in enumerate(x.shape) if i != axis), attrs["index_dtype"]


def _arg_impl(fn):
    def impl(args, attrs, node):
        (x,) = args
        if x.dtype in (np.float16, dtypes.to_numpy("bfloat16")):
            x = x.astype(np.float32)
        return fn(x, axis=attrs["axis"]).astype(dtypes.to_numpy(node.dtype))
    return impl


for _name, _fn in (("reduce_sum", np.sum), ("reduce_max", np.max), ("reduce_min", np.min),
                   ("reduce_prod", np.prod)):
    define(_name, "reduce", _reduce_rule(_name), _reduce_impl(_fn), arity=1)
define("argmax", "reduce", _arg_rule, _arg_impl(np.argmax), arity=1, differentiable=False)
define("argmin", "reduce", _arg_rule, _arg_impl(np.argmin), arity=1, differentiable=False)
