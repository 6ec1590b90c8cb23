"""Algebraic simplification: identities that hold exactly (up to the sign of zero).

x+0, x-0, x*1, x/1, x-x (integers only), neg(neg x), convert to the same dtype,
reshape/transpose/broadcast chains and no-op views, select on a constant predicate,
and the sum of a broadcast (a multiply by the number of copies). Also x ** n for a
constant n in 1..4 becomes products (x**2 exactly x*x; x**3 and x**4 round once per
product, closer than the general pow's exp(n log x), and a fraction of its cost).
"""
from __future__ import annotations

import numpy as np

from graphc_runtime import dims as sym

from ..ir import dtypes
from ..ir.graph import Node
from .program import Builder, Program, rebuild


def scalar_value(node: Node):
    """The value of `node` if it is a constant with one distinct element (a broadcast
    scalar or a size-1 constant), else None."""
    while node.op in ("broadcast_in_dim", "reshape"):
        node = node.inputs[0]
    if node.op == "constant" and node.attrs["value"].size == 1:
        return node.attrs["value"].reshape(()).item()
    return None


def _is(node: Node, value) -> bool:
    v = scalar_value(node)
    return v is not None and not isinstance(v, bool) and v == value


def _same_mask(u: Node, v: Node) -> bool:
    """Whether u and v are one value: the same node, or constants of one equal value."""
    if u is v:
        return True
    a, c = scalar_value(u), scalar_value(v)
    return a is not None and c is not None and type(a) is type(c) and a == c


def _simplify(b: Builder, node: Node, ins: list):
    op = node.op
    if op == "add":
        if _is(ins[1], 0):
            return ins[0]
        if _is(ins[0], 0):
            return ins[1]
    if op == "sub":
        if _is(ins[1], 0):
            return ins[0]
        if ins[0] is ins[1] and not dtypes.is_float(node.dtype):
            zero = b.add("constant", (), {"value": np.zeros((), dtypes.to_numpy(node.dtype))})
            return b.add("broadcast_in_dim", (zero,), {"shape": node.shape,
                                                       "broadcast_dimensions": ()})
    if op == "mul":
        if _is(ins[1], 1):
            return ins[0]
        if _is(ins[0], 1):
            return ins[1]
    if op == "div" and _is(ins[1], 1):
        return ins[0]
    if op == "pow" and dtypes.is_float(node.dtype) and ins[0].shape == node.shape:
        for n in (1, 2, 3, 4):
            if _is(ins[1], n):
                x = ins[0]
                if n == 1:
                    return x
                sq = b.add("mul", (x, x), {}, like=node)
                if n == 2:
                    return sq
                return b.add("mul", (sq, x if n == 3 else sq), {}, like=node)
    if op == "and" and ins[0].op == "and" and ins[0].shape == node.shape and \
            _same_mask(ins[1], ins[0].inputs[1]):      # and(and(x, m), m): and(x, m)
        return ins[0]
    if op == "neg" and ins[0].op == "neg":
        return ins[0].inputs[0]
    if op == "convert" and ins[0].dtype == node.dtype:
        return ins[0]
    if op == "reshape":
        x = ins[0].inputs[0] if ins[0].op == "reshape" else ins[0]
        if x.shape == node.shape:
            return x
        if x is not ins[0]:
            return b.add("reshape", (x,), node.attrs, like=node)
    if op == "transpose":
        perm = node.attrs["permutation"]
        x = ins[0]
        if x.op == "transpose":
            inner = x.attrs["permutation"]
            perm = tuple(inner[p] for p in perm)
            x = x.inputs[0]
        if perm == tuple(range(len(perm))):
            return x
        if x is not ins[0]:
            return b.add("transpose", (x,), {"permutation": perm}, like=node)
    if op == "broadcast_in_dim":
        x, dims = ins[0], node.attrs["broadcast_dimensions"]
        if x.shape == node.shape and dims == tuple(range(len(dims))):
            return x
        if x.op == "broadcast_in_dim":          # compose broadcast chains
            inner = x.attrs["broadcast_dimensions"]
            return b.add("broadcast_in_dim", (x.inputs[0],),
                         {"shape": node.shape, "broadcast_dimensions":
                          tuple(dims[d] for d in inner)}, like=node)
    if op == "slice" and ins[0].shape == node.shape and all(s == 0 for s in node.attrs["start_indices"]):
        return ins[0]
    if op == "reverse" and not node.attrs["dimensions"]:
        return ins[0]
    if op == "reverse" and all(isinstance(node.shape[d], int) and node.shape[d] <= 1
                               for d in node.attrs["dimensions"]):
        return ins[0]
    if op == "pad" and not any(node.attrs["low"] + node.attrs["high"] + node.attrs["interior"]):
        return ins[0]
    if op == "select":
        p = scalar_value(ins[0])
        if p is not None:
            return ins[1] if p else ins[2]
        if ins[1] is ins[2]:
            return ins[1]
    if op == "reduce_sum" and ins[0].op == "broadcast_in_dim":
        return _sum_of_broadcast(b, node, ins[0])
    if op in ("reduce_sum", "reduce_max", "reduce_min", "reduce_prod") and not node.attrs["axes"]:
        return ins[0]
    return None


def _sum_of_broadcast(b: Builder, node: Node, bc: Node):
    axes = set(node.attrs["axes"])
    dims = bc.attrs["broadcast_dimensions"]
    x = bc.inputs[0]
    # only axes that the broadcast created (not operand axes of size > 1)
    if any(d in axes and x.shape[i] != 1 for i, d in enumerate(dims)):
        return None
    count = sym.prod([bc.shape[a] for a in axes])
    if isinstance(count, sym.Dim):
        return None                         # the count is known at the call only
    kept = [d for d in range(bc.ndim) if d not in axes]
    position = {d: i for i, d in enumerate(kept)}
    keep_x = [i for i, d in enumerate(dims) if d not in axes]
    x2 = x
    if len(keep_x) != x.ndim:
        x2 = b.add("reshape", (x,), {"new_sizes": tuple(x.shape[i] for i in keep_x)})
    out = b.add("broadcast_in_dim", (x2,), {"shape": node.shape, "broadcast_dimensions":
                                            tuple(position[dims[i]] for i in keep_x)})
    if count == 1:
        return out
    c = b.add("constant", (), {"value": np.array(count, dtypes.to_numpy(node.dtype))})
    cb = b.add("broadcast_in_dim", (c,), {"shape": node.shape, "broadcast_dimensions": ()})
    return b.add("mul", (out, cb), {}, like=node)


def simplify(program: Program) -> Program:
    return rebuild(program, lambda builder, node, inputs: _simplify(builder, node, inputs))
