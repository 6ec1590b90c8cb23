"""View primitives: broadcast_in_dim, reshape, transpose, slice, pad, concatenate, reverse,
window_view.

Backends fold these into index arithmetic; the reference materializes them with numpy.
"""
from __future__ import annotations

import numpy as np

from graphc_runtime import dims as sym
from graphc_runtime.dims import Dim
from graphc_runtime.errors import DTypeError, ShapeError

from ..primitive import define, fmt_shape


def _ints(values, what):
    values = tuple(values)
    for v in values:
        if not isinstance(v, (int, Dim)) or isinstance(v, bool):
            raise ShapeError(f"{what} must be integers, got {values!r}")
    return values


def _broadcast_rule(inputs, attrs):
    (x,) = inputs
    shape = _ints(attrs["shape"], "shape")
    dims = _ints(attrs["broadcast_dimensions"], "broadcast_dimensions")
    if any(d < 0 for d in shape):
        raise ShapeError(f"negative dimension in target shape {fmt_shape(shape)}")
    if len(dims) != x.ndim:
        raise ShapeError(f"broadcast_dimensions {dims} must name one output dimension per "
                         f"operand dimension of {x.type_str()}")
    if any(b <= a for a, b in zip(dims, dims[1:])) or any(not 0 <= d < len(shape) for d in dims):
        raise ShapeError(f"broadcast_dimensions {dims} must be strictly increasing and "
                         f"within rank {len(shape)}")
    for i, d in enumerate(dims):
        if x.shape[i] not in (1, shape[d]):
            raise ShapeError(f"cannot broadcast {x.type_str()} to {fmt_shape(shape)}: "
                             f"operand dimension {i} has size {x.shape[i]}, target "
                             f"dimension {d} has size {shape[d]}")
    return shape, x.dtype


def _broadcast_impl(args, attrs, node):
    (x,) = args
    shape = attrs["shape"]
    expanded = [1] * len(shape)
    for i, d in enumerate(attrs["broadcast_dimensions"]):
        expanded[d] = x.shape[i]
    return np.broadcast_to(x.reshape(expanded), shape)


def _reshape_rule(inputs, attrs):
    (x,) = inputs
    new = _ints(attrs["new_sizes"], "new_sizes")
    if any(d < 0 for d in new) or sym.prod(new) != x.size:
        raise ShapeError(f"cannot reshape {x.type_str()} ({x.size} elements) to "
                         f"{fmt_shape(new)}")
    return new, x.dtype


def _transpose_rule(inputs, attrs):
    (x,) = inputs
    perm = _ints(attrs["permutation"], "permutation")
    if sorted(perm) != list(range(x.ndim)):
        raise ShapeError(f"permutation {perm} is not a permutation of the {x.ndim} axes "
                         f"of {x.type_str()}")
    return tuple(x.shape[p] for p in perm), x.dtype


def _slice_rule(inputs, attrs):
    (x,) = inputs
    start = _ints(attrs["start_indices"], "start_indices")
    limit = _ints(attrs["limit_indices"], "limit_indices")
    strides = _ints(attrs["strides"], "strides")
    if not len(start) == len(limit) == len(strides) == x.ndim:
        raise ShapeError(f"slice of {x.type_str()} needs {x.ndim} starts, limits and strides, "
                         f"got {start}, {limit}, {strides}")
    out = []
    for i, (s, l, st, n) in enumerate(zip(start, limit, strides, x.shape)):
        if st < 1 or not 0 <= s <= l <= n:
            raise ShapeError(f"slice {s}:{l}:{st} is invalid for dimension {i} of size {n} "
                             f"(need 0 <= start <= limit <= size and stride >= 1)")
        out.append(-(-(l - s) // st))
    return tuple(out), x.dtype


def _slice_impl(args, attrs, node):
    (x,) = args
    return x[tuple(slice(s, l, st) for s, l, st in
                   zip(attrs["start_indices"], attrs["limit_indices"], attrs["strides"]))]


def _pad_rule(inputs, attrs):
    (x,) = inputs
    low, high, interior = (_ints(attrs[k], k) for k in ("low", "high", "interior"))
    if not len(low) == len(high) == len(interior) == x.ndim:
        raise ShapeError(f"pad of {x.type_str()} needs {x.ndim} low, high and interior "
                         f"paddings, got {low}, {high}, {interior}")
    if not isinstance(attrs.get("value"), (int, float, bool)):
        raise DTypeError(f"pad value must be a Python scalar, got {attrs.get('value')!r}")
    out = []
    for i, (lo, hi, it, n) in enumerate(zip(low, high, interior, x.shape)):
        if it < 0:
            raise ShapeError(f"interior padding {it} of dimension {i} is negative")
        size = lo + hi + n + (max(n - 1, 0) * it if it else 0)
        if size < 0:
            raise ShapeError(f"padding ({lo}, {hi}, {it}) makes dimension {i} of size {n} "
                             f"negative")
        out.append(size)
    return tuple(out), x.dtype


def _pad_impl(args, attrs, node):
    (x,) = args
    low, high, interior = attrs["low"], attrs["high"], attrs["interior"]
    # interior first, then the non-negative edges, then crop negative edges
    inner = [n + max(n - 1, 0) * it for n, it in zip(x.shape, interior)]
    full = [max(lo, 0) + m + max(hi, 0) for lo, m, hi in zip(low, inner, high)]
    out = np.full(full, attrs["value"], dtype=x.dtype)
    out[tuple(slice(max(lo, 0), max(lo, 0) + m, it + 1)
              for lo, m, it in zip(low, inner, interior))] = x
    return out[tuple(slice(max(-lo, 0), f - max(-hi, 0)) for lo, hi, f in zip(low, high, full))]


def _concatenate_rule(inputs, attrs):
    if not inputs:
        raise ShapeError("needs at least one operand")
    first = inputs[0]
    dim = attrs["dimension"]
    if not isinstance(dim, int) or not 0 <= dim < first.ndim:
        raise ShapeError(f"dimension {dim!r} is out of range for rank {first.ndim}")
    total = 0
    for i, x in enumerate(inputs):
        if x.dtype != first.dtype:
            raise DTypeError(f"operand {i} has dtype {x.dtype}, operand 0 has {first.dtype}")
        if x.ndim != first.ndim or any(a != b for j, (a, b) in enumerate(zip(x.shape, first.shape))
                                       if j != dim):
            raise ShapeError(f"operand {i} {x.type_str()} does not match operand 0 "
                             f"{first.type_str()} outside dimension {dim}")
        total += x.shape[dim]
    shape = list(first.shape)
    shape[dim] = total
    return tuple(shape), first.dtype


def _reverse_rule(inputs, attrs):
    (x,) = inputs
    dims = _ints(attrs["dimensions"], "dimensions")
    if any(not 0 <= d < x.ndim for d in dims) or len(set(dims)) != len(dims):
        raise ShapeError(f"dimensions {dims} are invalid for {x.type_str()}")
    return x.shape, x.dtype


def _window_rule(inputs, attrs):
    (x,) = inputs
    sizes = _ints(attrs["sizes"], "sizes")
    strides = _ints(attrs["strides"], "strides")
    if x.ndim < 1 or len(sizes) != len(strides) or not sizes:
        raise ShapeError(f"window_view of {x.type_str()} needs one stride per size, got "
                         f"sizes {sizes} and strides {strides}")
    if not all(isinstance(v, int) for v in sizes + strides + (x.shape[-1],)):
        raise ShapeError(f"window_view needs static sizes and strides, got {sizes}, "
                         f"{strides} over {x.type_str()}")
    if any(n < 1 for n in sizes) or any(st < 0 for st in strides):
        raise ShapeError(f"window_view sizes must be >= 1 and strides >= 0, got {sizes}, "
                         f"{strides}")
    last = sum((n - 1) * st for n, st in zip(sizes, strides))
    if last >= x.shape[-1]:
        raise ShapeError(f"window_view {sizes} with strides {strides} reads position {last} "
                         f"of the last axis of {x.type_str()}")
    return x.shape[:-1] + sizes, x.dtype


def window_positions(sizes, strides) -> np.ndarray:
    """The last-axis position each element of a window_view reads (int64, `sizes`)."""
    pos = np.zeros(tuple(sizes), np.int64)
    for d, (n, st) in enumerate(zip(sizes, strides)):
        shape = [1] * len(sizes)
        shape[d] = n
        pos = pos + (np.arange(n, dtype=np.int64) * st).reshape(shape)
    return pos


def _window_impl(args, attrs, node):
    (x,) = args
    return np.take(x, window_positions(attrs["sizes"], attrs["strides"]), axis=-1)


define("broadcast_in_dim", "view", _broadcast_rule, _broadcast_impl, arity=1, remap=True)
define("reshape", "view", _reshape_rule,
       lambda args, attrs, node: args[0].reshape(attrs["new_sizes"]), arity=1, remap=True)
define("transpose", "view", _transpose_rule,
       lambda args, attrs, node: np.transpose(args[0], attrs["permutation"]), arity=1, remap=True)
define("slice", "view", _slice_rule, _slice_impl, arity=1, remap=True)
define("pad", "view", _pad_rule, _pad_impl, arity=1)
define("concatenate", "view", _concatenate_rule,
       lambda args, attrs, node: np.concatenate(args, axis=attrs["dimension"]))
# window_view(x; sizes, strides): out[..., i1..ir] = x[..., i1*s1 + ... + ir*sr], windows
# that overlap (a convolution's input seen as its patch matrix without copying it)
define("window_view", "view", _window_rule, _window_impl, arity=1, remap=True)
define("reverse", "view", _reverse_rule,
       lambda args, attrs, node: np.flip(args[0], attrs["dimensions"]) if attrs["dimensions"]
       else args[0], arity=1, remap=True)
