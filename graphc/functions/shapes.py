"""Shape functions: reshape, transpose, broadcast_to, concatenate, stack, pad, squeeze..."""
from __future__ import annotations

import numpy as np

from graphc_runtime import dims as sym
from graphc_runtime.dims import Dim, as_dim
from graphc_runtime.errors import ShapeError

from ..tensor import Tensor, bind
from ..ir.primitive import normalize_axis
from ..ir.source import user_location
from .elementwise import _as, broadcast_to_shape, result_dtype, to_tensor


def _axis(axis, ndim, what):
    try:
        return normalize_axis(axis, ndim)
    except ShapeError as e:
        raise ShapeError(f"{what}: {e.bare_message}", user_location()) from None


def reshape(x, shape) -> Tensor:
    """numpy.reshape (one dimension may be -1)."""
    x = _as(x)
    shape = (shape,) if isinstance(shape, (int, np.integer, Dim)) else \
        tuple(as_dim(d) for d in shape)
    if shape.count(-1) > 1 or any(isinstance(d, int) and d < -1 for d in shape):
        raise ShapeError(f"reshape: invalid target shape {shape}", user_location())
    if -1 in shape:
        known = sym.prod([d for d in shape if d != -1])
        if known == 0 or sym.exact_div(x.size, known) is None:
            raise ShapeError(f"reshape: cannot reshape {x.node.type_str()} to {shape}",
                             user_location())
        shape = tuple(sym.exact_div(x.size, known) if d == -1 else d for d in shape)
    if shape == x.shape:
        return x
    if sym.prod(shape) != x.size:
        raise ShapeError(f"reshape: cannot reshape {x.node.type_str()} ({x.size} elements) "
                         f"to {shape}", user_location())
    return bind("reshape", x, new_sizes=shape)


def transpose(x, axes=None) -> Tensor:
    """numpy.transpose: reverse the axes, or permute them by `axes`."""
    x = _as(x)
    if axes is None:
        axes = tuple(reversed(range(x.ndim)))
    axes = tuple(_axis(a, x.ndim, "transpose") for a in axes)
    if sorted(axes) != list(range(x.ndim)):
        raise ShapeError(f"transpose: axes {axes} are not a permutation of {x.ndim} axes",
                         user_location())
    if axes == tuple(range(x.ndim)):
        return x
    return bind("transpose", x, permutation=axes)


def swapaxes(x, a: int, b: int) -> Tensor:
    x = _as(x)
    perm = list(range(x.ndim))
    a, b = _axis(a, x.ndim, "swapaxes"), _axis(b, x.ndim, "swapaxes")
    perm[a], perm[b] = perm[b], perm[a]
    return transpose(x, perm)


def broadcast_to(x, shape) -> Tensor:
    """numpy.broadcast_to."""
    x = _as(x)
    shape = tuple(as_dim(d) for d in shape)
    if len(shape) < x.ndim or any(
            s not in (1, t) for s, t in zip(x.shape, shape[len(shape) - x.ndim:])):
        raise ShapeError(f"broadcast_to: cannot broadcast {x.node.type_str()} to {shape}",
                         user_location())
    return broadcast_to_shape(x, shape)


def expand_dims(x, axis) -> Tensor:
    x = _as(x)
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    ndim = x.ndim + len(axes)
    axes = sorted(_axis(a, ndim, "expand_dims") for a in axes)
    shape = list(x.shape)
    for a in axes:
        shape.insert(a, 1)
    return reshape(x, shape)


def squeeze(x, axis=None) -> Tensor:
    x = _as(x)
    if axis is None:
        axes = [i for i, d in enumerate(x.shape) if d == 1]
    else:
        axes = [_axis(a, x.ndim, "squeeze") for a in ((axis,) if isinstance(axis, int) else axis)]
        for a in axes:
            if x.shape[a] != 1:
                raise ShapeError(f"squeeze: axis {a} of {x.node.type_str()} has size "
                                 f"{x.shape[a]}, not 1", user_location())
    return reshape(x, [d for i, d in enumerate(x.shape) if i not in axes])


def concatenate(tensors, axis: int = 0) -> Tensor:
    """numpy.concatenate (operands are promoted to one dtype)."""
    tensors = list(tensors)
    if not tensors:
        raise ShapeError("concatenate: needs at least one tensor", user_location())
    graph = next((t.graph for t in tensors if isinstance(t, Tensor)), None)
    dt = result_dtype(tensors, "concatenate")
    ts = [to_tensor(t, dt, graph) for t in tensors]
    if any(t.ndim == 0 for t in ts):
        raise ShapeError("concatenate: zero-dimensional tensors cannot be concatenated",
                         user_location())
    axis = _axis(axis, ts[0].ndim, "concatenate")
    if len(ts) == 1:
        return ts[0]
    return bind("concatenate", *ts, dimension=axis)


def stack(tensors, axis: int = 0) -> Tensor:
    """numpy.stack: join equal-shaped tensors along a new axis."""
    tensors = [_as(t) for t in tensors]
    if not tensors:
        raise ShapeError("stack: needs at least one tensor", user_location())
    shapes = {t.shape for t in tensors}
    if len(shapes) != 1:
        raise ShapeError(f"stack: all tensors must have one shape, got {sorted(shapes)}",
                         user_location())
    axis = _axis(axis, tensors[0].ndim + 1, "stack")
    return concatenate([expand_dims(t, axis) for t in tensors], axis)


def pad(x, pad_width, constant_values=0) -> Tensor:
    """numpy.pad in 'constant' mode."""
    x = _as(x)
    pw = np.broadcast_to(np.asarray(pad_width, dtype=np.int64), (x.ndim, 2)) \
        if x.ndim else np.zeros((0, 2), np.int64)
    if (pw < 0).any():
        raise ShapeError(f"pad: negative pad width {pad_width}", user_location())
    return bind("pad", x, low=tuple(int(v) for v in pw[:, 0]),
                high=tuple(int(v) for v in pw[:, 1]), interior=(0,) * x.ndim,
                value=float(constant_values) if x.dtype.startswith(("float", "bfloat"))
                else int(constant_values))


def flip(x, axis=None) -> Tensor:
    """numpy.flip."""
    x = _as(x)
    axes = range(x.ndim) if axis is None else ((axis,) if isinstance(axis, int) else axis)
    axes = tuple(sorted({_axis(a, x.ndim, "flip") for a in axes}))
    return bind("reverse", x, dimensions=axes) if axes else x
