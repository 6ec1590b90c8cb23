"""Dots as matrix products: a dot_general with several free dims on one side, or several
contracting dims, that lie next to each other in their operands becomes a dot over one
merged dim of each kind, between reshapes.

BLAS runs a product with one row, one column and one contracting dim per batch index;
(T, B, K) @ (K, N), or the weight gradient contracting over (T, B), would otherwise run
as loop nests. The reshapes are views of contiguous operands (no copy).
"""
from __future__ import annotations

from graphc_runtime import dims as sym

from .program import Program, rebuild


def _consecutive(axes) -> bool:
    return len(axes) > 1 and list(axes) == list(range(axes[0], axes[0] + len(axes)))


def _merge(shape, groups):
    """(new shape, old axis -> new axis) merging each group (a run of axes) into one."""
    first = {g[0]: g for g in groups}
    inside = {a for g in groups for a in g[1:]}
    new_shape, where = [], {}
    for a, d in enumerate(shape):
        if a in inside:
            continue
        g = first.get(a, (a,))
        for x in g:
            where[x] = len(new_shape)
        new_shape.append(sym.prod([shape[x] for x in g]))
    return tuple(new_shape), where


def canonicalize_dots(program: Program) -> Program:
    def rewrite(builder, node, inputs):
        if node.op != "dot_general":
            return None
        a = node.attrs
        lhs, rhs = inputs
        lc, rc, lb, rb = a["lhs_contracting"], a["rhs_contracting"], a["lhs_batch"], \
            a["rhs_batch"]
        lfree = tuple(d for d in range(lhs.ndim) if d not in lc and d not in lb)
        rfree = tuple(d for d in range(rhs.ndim) if d not in rc and d not in rb)
        lgroups, rgroups = [], []
        # a window_view's overlapping axes are no contiguous run to merge (its product
        # runs on the own windowed kernel, backends/cpu/gemm.py)
        windowed = "window_view" in (lhs.op, rhs.op)
        if _consecutive(lc) and _consecutive(rc) and not windowed:
            lgroups.append(tuple(lc))
            rgroups.append(tuple(rc))
        if _consecutive(lfree) and lhs.op != "window_view":
            lgroups.append(lfree)
        if _consecutive(rfree) and rhs.op != "window_view":
            rgroups.append(rfree)
        if not lgroups and not rgroups:
            return None
        lshape, lwhere = _merge(lhs.shape, lgroups)
        rshape, rwhere = _merge(rhs.shape, rgroups)
        x = builder.add("reshape", [lhs], {"new_sizes": lshape}, like=node) \
            if lshape != lhs.shape else lhs
        y = builder.add("reshape", [rhs], {"new_sizes": rshape}, like=node) \
            if rshape != rhs.shape else rhs
        uniq = lambda axes, where: tuple(dict.fromkeys(where[d] for d in axes))  # noqa: E731
        out = builder.add("dot_general", [x, y], {
            "lhs_contracting": uniq(lc, lwhere), "rhs_contracting": uniq(rc, rwhere),
            "lhs_batch": uniq(lb, lwhere), "rhs_batch": uniq(rb, rwhere),
            **({"packed_int8": a["packed_int8"]} if a.get("packed_int8") else {})},
            like=node)
        if out.shape == node.shape:
            return out
        return builder.add("reshape", [out], {"new_sizes": node.shape}, like=node)
    return rebuild(program, rewrite)
