"""The loop kernel of a fusion group: every root stored over one shape."""
from __future__ import annotations

from ..ir import dtypes
from . import index as ix
from .expressions import ExprBuilder
from .ir import Illegal, LoopKernel, Store


def loop_vars(shape, prefix="i"):
    return tuple(ix.var(f"{prefix}{d}", n) for d, n in enumerate(shape))


def _acc_dtype(dtype: str) -> str:
    return dtypes.compute_dtype(dtype)


def build_loop(name, roots, members, buffer_of, dests) -> LoopKernel:
    shape = roots[0].shape
    if any(r.shape != shape for r in roots):
        raise Illegal("loop roots of different shapes")
    vars_ = loop_vars(shape)
    eb = ExprBuilder(members, buffer_of, roots={r.id for r in roots})
    stores = [Store(buf, eb.value(r, vars_), vars_) for r in roots for buf in dests(r)]
    return LoopKernel(name, shape, vars_, stores)


def acc_dtype(dtype: str) -> str:
    """The dtype a reduction or product over `dtype` accumulates in."""
    return dtypes.compute_dtype(dtype)
