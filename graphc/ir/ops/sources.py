"""Source primitives: constant, parameter (a fed input), variable (state), iota."""
from __future__ import annotations

import numpy as np

from graphc_runtime.dims import Dim
from graphc_runtime.errors import DTypeError, GraphcError, ShapeError

from .. import dtypes
from ..primitive import define


def _constant_rule(inputs, attrs):
    value = attrs["value"]
    if not isinstance(value, np.ndarray):
        raise DTypeError(f"constant value must be a numpy array, got {type(value).__name__}")
    return value.shape, dtypes.canonical(value.dtype)


def _declared_rule(inputs, attrs):
    shape = attrs["shape"]
    if any(not isinstance(d, (int, Dim)) or isinstance(d, bool) or d < 0 for d in shape):
        raise ShapeError(f"shape must be non-negative integers, got {shape!r}")
    if attrs["dtype"] not in dtypes.ALL_DTYPES:
        raise DTypeError(f"unknown dtype {attrs['dtype']!r}")
    return shape, attrs["dtype"]


def _iota_rule(inputs, attrs):
    shape, dtype = _declared_rule(inputs, attrs)
    dim = attrs["dimension"]
    if not isinstance(dim, int) or not 0 <= dim < len(shape):
        raise ShapeError(f"dimension {dim!r} is out of range for shape {shape}")
    if dtype == "bool":
        raise DTypeError("iota cannot be bool")
    return shape, dtype


def _iota_impl(args, attrs, node):
    shape, dim = attrs["shape"], attrs["dimension"]
    ramp = np.arange(shape[dim]).reshape([-1 if i == dim else 1 for i in range(len(shape))])
    return np.broadcast_to(ramp, shape).astype(dtypes.to_numpy(node.dtype))


def _dim_size_rule(inputs, attrs):
    if not isinstance(attrs["size"], (int, Dim)):
        raise ShapeError(f"size must be an int or a symbolic Dim, got {attrs['size']!r}")
    if attrs["dtype"] not in dtypes.ALL_DTYPES or not (dtypes.is_float(attrs["dtype"]) or
                                                       dtypes.is_int(attrs["dtype"])):
        raise DTypeError(f"dim_size dtype must be an int or float dtype, got "
                         f"{attrs['dtype']!r}")
    return (), attrs["dtype"]


def _fed(args, attrs, node):
    raise GraphcError(f"{node.op} %{node.id} is bound by the interpreter, not computed")


define("constant", "source", _constant_rule, lambda args, attrs, node: attrs["value"],
       arity=0, differentiable=False, cost=0)
define("parameter", "source", _declared_rule, _fed, arity=0, cost=0)
define("variable", "source", _declared_rule, _fed, arity=0, cost=0)
define("dim_size", "source", _dim_size_rule,      # a symbolic size's value at the call
       lambda args, attrs, node: np.asarray(attrs["size"], dtypes.to_numpy(attrs["dtype"])),
       arity=0, differentiable=False)
define("iota", "source", _iota_rule, _iota_impl, arity=0, differentiable=False, cost=0)
