"""Indexing: `x[...]` (slices, ints, None, Ellipsis, integer arrays), take, one_hot.

Basic indexing becomes reverse/slice/reshape views. Integer-array indexing becomes one
gather along the (merged) indexed axes, with numpy's placement of the result dims.
Constant indices are range-checked when the graph is built; tensor indices are wrapped
when negative and clamped into range when out of bounds.
"""
from __future__ import annotations

import numpy as np

from graphc_runtime import dims as sym
from graphc_runtime.errors import DTypeError, ShapeError

from ..tensor import Tensor, bind, constant
from ..ir import dtypes
from ..ir.source import user_location
from .elementwise import _as, broadcast_shapes, broadcast_to_shape, cast, where
from .shapes import reshape, transpose


def _is_array_index(k) -> bool:
    return isinstance(k, (Tensor, np.ndarray, list))


def _index_tensor(k, size: int, axis: int, graph) -> Tensor:
    """An int tensor of in-range indices for integer-array index `k` on a dim of `size`."""
    if isinstance(k, Tensor):
        if k.dtype not in dtypes.INT_DTYPES:
            raise DTypeError(f"index tensor {k.node.type_str()} must be int32 or int64"
                             + ("; boolean masks give data-dependent shapes, use gc.where"
                                if k.dtype == "bool" else ""), user_location())
        return where(k < 0, k + size, k)
    arr = np.asarray(k)
    if arr.dtype == np.bool_:
        raise DTypeError("boolean mask indexing gives a data-dependent shape; use gc.where",
                         user_location())
    if arr.size and arr.dtype.kind not in "iu":
        raise DTypeError(f"array index must hold integers, got {arr.dtype}", user_location())
    arr = arr.astype(np.int64)
    if arr.size and (arr.min() < -size or arr.max() >= size):
        bad = arr[(arr < -size) | (arr >= size)].flat[0]
        raise ShapeError(f"index {bad} is out of bounds for axis {axis} with size {size}",
                         user_location())
    arr = np.where(arr < 0, arr + size, arr)
    return constant(arr.astype(np.int32 if size <= np.iinfo(np.int32).max else np.int64),
                    graph=graph)


def _symbolic_index(k, n, axis: int, advanced: bool):
    """(start, limit, stride) of a slice or int index on an axis of symbolic size n (k
    itself for what is not a slice or int). Bounds must hold for every size of the
    symbols (x[1:], x[:-1], x[-1] on a size-n axis do; x[2:] does not: n may be 1)."""
    def bound(v, default):
        if v is None:
            return default
        v = int(v)
        return v if v >= 0 else n + v
    try:
        if isinstance(k, slice):
            step = 1 if k.step is None else int(k.step)
            if step == 1 and k.start is None and k.stop is None:
                return 0, n, 1
            if step < 1:
                raise ShapeError(f"a negative or zero step on axis {axis} of symbolic size "
                                 f"{n} is not supported", user_location())
            start, stop = bound(k.start, 0), bound(k.stop, n)
            if not (0 <= start <= stop <= n):
                raise sym.Undecidable("out of range")
            length = stop - start if step == 1 else -(-(stop - start) // step)
            return start, start + (length - 1) * step + 1, step
        if isinstance(k, (int, np.integer)) and not advanced:
            i = bound(k, 0)
            if not (0 <= i and i + 1 <= n):
                raise sym.Undecidable("out of range")
            return i, i + 1, 1
    except sym.Undecidable:
        raise ShapeError(f"index {k!r} on axis {axis} of symbolic size {n} is not within "
                         f"bounds for every size of {n}", user_location()) from None
    return k


def getitem(x: Tensor, key) -> Tensor:
    """numpy-style `x[key]`."""
    key = key if isinstance(key, tuple) else (key,)
    for k in key:
        if isinstance(k, (bool, np.bool_)):
            raise DTypeError("boolean scalar indices are not supported", user_location())
        if not (k is None or k is Ellipsis or isinstance(k, (slice, int, np.integer))
                or _is_array_index(k)):
            raise DTypeError(f"unsupported index {k!r} (use ints, slices, None, ..., or "
                             f"integer arrays)", user_location())
    if sum(k is Ellipsis for k in key) > 1:
        raise ShapeError("an index can only have a single ellipsis ('...')", user_location())
    consumed = sum(1 for k in key if k is not None and k is not Ellipsis)
    if consumed > x.ndim:
        raise ShapeError(f"too many indices for {x.node.type_str()}: {consumed} given",
                         user_location())
    if Ellipsis in [k for k in key if not _is_array_index(k)]:
        i = next(i for i, k in enumerate(key) if k is Ellipsis and not _is_array_index(k))
        key = key[:i] + (slice(None),) * (x.ndim - consumed) + key[i + 1:]
        consumed = x.ndim
    key = key + (slice(None),) * (x.ndim - consumed)
    advanced = any(_is_array_index(k) for k in key)
    if advanced and any(k is None for k in key):
        raise ShapeError("combining None with integer-array indexing is not supported",
                         user_location())

    # 1. slices and ints as views (ints keep a size-1 dim for now)
    dims = [k for k in key if k is not None]
    starts, limits, strides, rev = [], [], [], []
    for axis, (k, n) in enumerate(zip(dims, x.shape)):
        if isinstance(n, sym.Dim) and not _is_array_index(k):
            k = _symbolic_index(k, n, axis, advanced)
            if isinstance(k, tuple):
                starts.append(k[0]), limits.append(k[1]), strides.append(k[2])
                continue
        if isinstance(k, slice):
            start, stop, step = k.indices(n)
            length = len(range(start, stop, step))
            if step < 0:
                rev.append(axis)
                start, step = n - 1 - start, -step
            starts.append(start)
            limits.append(start + (length - 1) * step + 1 if length else start)
            strides.append(step)
        elif isinstance(k, (int, np.integer)) and not advanced:
            if not -n <= k < n:
                raise ShapeError(f"index {k} is out of bounds for axis {axis} with size {n}",
                                 user_location())
            k = int(k) % n
            starts.append(k), limits.append(k + 1), strides.append(1)
        else:
            starts.append(0), limits.append(n), strides.append(1)
    out = x
    if rev:
        out = bind("reverse", out, dimensions=tuple(rev))
    if (starts, limits, strides) != ([0] * x.ndim, list(x.shape), [1] * x.ndim):
        out = bind("slice", out, start_indices=tuple(starts), limit_indices=tuple(limits),
                   strides=tuple(strides))
    if advanced:
        return _gather_advanced(out, dims)
    # 2. drop int dims, insert None dims
    shape, it = [], iter(out.shape)
    for k in key:
        if k is None:
            shape.append(1)
        else:
            d = next(it)
            if not isinstance(k, (int, np.integer)):
                shape.append(d)
    return reshape(out, shape)


def _gather_advanced(x: Tensor, dims) -> Tensor:
    arrays = [i for i, k in enumerate(dims) if not isinstance(k, slice)]
    idx = [_index_tensor(dims[i], x.shape[i], i, x.graph) for i in arrays]
    bshape = broadcast_shapes([t.shape for t in idx], "indexing")
    adjacent = arrays == list(range(arrays[0], arrays[0] + len(arrays)))
    if not adjacent:       # numpy puts the indexed dims first
        rest = [i for i in range(x.ndim) if i not in arrays]
        x = transpose(x, arrays + rest)
        arrays = list(range(len(arrays)))
    a0 = arrays[0]
    sizes = [x.shape[i] for i in arrays]
    total = sym.prod(sizes)
    itype = "int32" if total <= np.iinfo(np.int32).max else "int64"
    linear = None
    for t, stride in zip(idx, np.cumprod([1] + sizes[::-1][:-1])[::-1]):
        term = broadcast_to_shape(cast(t, itype), bshape)
        term = term * int(stride) if stride != 1 else term
        linear = term if linear is None else linear + term
    merged = reshape(x, x.shape[:a0] + (total,) + x.shape[a0 + len(arrays):])
    return bind("gather", merged, linear, axis=a0)


def take(x, indices, axis=None) -> Tensor:
    """numpy.take: elements of `x` at `indices` along `axis` (flattened when None)."""
    x = _as(x)
    if axis is None:
        x, axis = reshape(x, (-1,)), 0
    from .shapes import _axis
    axis = _axis(axis, x.ndim, "take")
    idx = _index_tensor(indices, x.shape[axis], axis, x.graph)
    return bind("gather", x, idx, axis=axis)


def take_along_axis(x, indices, axis: int) -> Tensor:
    """numpy.take_along_axis for an index tensor with size 1 or full size elsewhere."""
    x = _as(x)
    from .shapes import _axis
    axis = _axis(axis, x.ndim, "take_along_axis")
    idx = _index_tensor(indices, x.shape[axis], axis, x.graph)
    if idx.ndim != x.ndim:
        raise ShapeError(f"take_along_axis: indices {idx.node.type_str()} must have the rank "
                         f"of {x.node.type_str()}", user_location())
    from .creation import iota
    shape = broadcast_shapes([tuple(1 if i == axis else d for i, d in enumerate(x.shape)),
                              tuple(1 if i == axis else d for i, d in enumerate(idx.shape))],
                             "take_along_axis")
    full = shape[:axis] + (idx.shape[axis],) + shape[axis + 1:]
    idx = broadcast_to_shape(idx, full)
    key = tuple(idx if i == axis else iota(full, i, idx.dtype) for i in range(x.ndim))
    return getitem(x, key)


def one_hot(labels, num_classes: int, dtype="float32") -> Tensor:
    """labels[..., None] == arange(num_classes), as `dtype` (out-of-range labels give zeros)."""
    labels = _as(labels)
    if labels.dtype not in dtypes.INT_DTYPES:
        raise DTypeError(f"one_hot: labels must be integers, got {labels.node.type_str()}",
                         user_location())
    shape = labels.shape + (int(num_classes),)
    from .creation import iota
    classes = iota(shape, len(shape) - 1, labels.dtype)
    lab = bind("broadcast_in_dim", labels, shape=shape,
               broadcast_dimensions=tuple(range(labels.ndim)))
    return cast(bind("compare", lab, classes, direction="eq"), dtype)
