"""matmul / dot / einsum-free batched products, all lowered to dot_general."""
from __future__ import annotations

from graphc_runtime.errors import DTypeError, ShapeError

from ..tensor import Tensor, bind
from ..ir.source import user_location
from .elementwise import _graph_for, broadcast_shapes, result_dtype, to_tensor
from .shapes import broadcast_to, reshape


def matmul(a, b) -> Tensor:
    """numpy.matmul: 1-D operands are promoted to matrices, batch dims broadcast."""
    return _matmul(a, b, result_dtype([a, b], "matmul"), {})


def _matmul(a, b, dt: str, extra: dict) -> Tensor:
    """matmul of a and b in dtype dt, its dot_general carrying `extra` attributes."""
    graph = _graph_for([a, b])
    if dt == "bool":
        raise DTypeError("matmul: bool operands; cast them first", user_location())
    x, y = to_tensor(a, dt, graph), to_tensor(b, dt, graph)
    if x.ndim == 0 or y.ndim == 0:
        raise ShapeError(f"matmul: operands must be at least 1-D, got "
                         f"{x.node.type_str()} and {y.node.type_str()}", user_location())
    x1, y1 = x.ndim == 1, y.ndim == 1
    if x1:
        x = reshape(x, (1, x.shape[0]))
    if y1:
        y = reshape(y, (y.shape[0], 1))
    if x.shape[-1] != y.shape[-2]:
        raise ShapeError(f"matmul: contracting dimensions differ: {a_type(a, x)} @ "
                         f"{a_type(b, y)} ({x.shape[-1]} vs {y.shape[-2]})", user_location())
    if y.ndim == 2 and x.ndim > 2:
        # (..., K) @ (K, N): one product over all leading dims, not a broadcast of y
        # (whose gradient would be a per-batch product and a sum)
        out = bind("dot_general", x, y, lhs_contracting=(x.ndim - 1,), rhs_contracting=(0,),
                   lhs_batch=(), rhs_batch=(), **extra)
        return reshape(out, out.shape[:-1]) if y1 else out
    batch = broadcast_shapes([x.shape[:-2], y.shape[:-2]], "matmul")
    x = broadcast_to(x, batch + x.shape[-2:])
    y = broadcast_to(y, batch + y.shape[-2:])
    nb = len(batch)
    out = bind("dot_general", x, y, lhs_contracting=(nb + 1,), rhs_contracting=(nb,),
               lhs_batch=tuple(range(nb)), rhs_batch=tuple(range(nb)), **extra)
    if x1 or y1:
        shape = out.shape[:nb] + (() if x1 else out.shape[nb:nb + 1]) + \
            (() if y1 else out.shape[-1:])
        out = reshape(out, shape)
    return out


def a_type(orig, t: Tensor) -> str:
    return orig.node.type_str() if isinstance(orig, Tensor) else t.node.type_str()


def dot(a, b) -> Tensor:
    """numpy.dot for 1-D and 2-D operands (same as matmul there)."""
    return matmul(a, b)


def tensordot(a, b, axes) -> Tensor:
    """Contract a's `axes[0]` with b's `axes[1]`; result: a's free dims then b's."""
    graph = _graph_for([a, b])
    dt = result_dtype([a, b], "tensordot")
    x, y = to_tensor(a, dt, graph), to_tensor(b, dt, graph)
    la, lb = axes
    la = tuple(d % x.ndim for d in ((la,) if isinstance(la, int) else la))
    lb = tuple(d % y.ndim for d in ((lb,) if isinstance(lb, int) else lb))
    return bind("dot_general", x, y, lhs_contracting=la, rhs_contracting=lb,
                lhs_batch=(), rhs_batch=())
