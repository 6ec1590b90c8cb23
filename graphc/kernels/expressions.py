"""Kernel expressions: a fusion group's nodes as value expressions at an index.

Each primitive's expression is a rule in one table keyed by primitive
(`register_expression(op)`, like JAX's lowering rules): `rule(builder, node, index)` gives
node's value at `index` inside a kernel, asking `builder.value(operand, index)` for its
operands. Views become index arithmetic (a transpose permutes the index, a slice scales
and shifts it), pads and concatenates guarded choices. An elementwise primitive without
a rule is `Prim(dtype, op, operands)` (each backend lowers the op); a product with one
use fuses into the sum that reads it as an explicit fma (products.py).
"""
from __future__ import annotations

from typing import Callable

from graphc_runtime.dims import Dim

from ..ir.graph import Node
from ..ir.primitive import lookup
from . import index as ix
from . import products
from .ir import (Acc, Choose, Const, Illegal, IndexValue, InRange, Load, Prim, RngValue,
                 VExpr)

EXPRESSIONS: dict[str, Callable] = {}


def register_expression(op: str):
    """Decorator: `fn(builder, node, index) -> VExpr` is primitive op's kernel expression."""
    def register(fn):
        EXPRESSIONS[op] = fn
        return fn
    return register


class ExprBuilder:
    """Turns nodes of one fusion group into value expressions at an index.

    `buffer_of(node)` gives the buffer of a node computed outside the group (or None if
    the node is inside); `accs` maps reduction node ids of this kernel to (stage, row
    index) so that a read at the row index becomes an accumulator.
    """

    def __init__(self, members: set, buffer_of, accs=None, roots=None):
        self.members = members
        self.buffer_of = buffer_of
        self.accs = accs or {}
        self.memo: dict = {}
        # the kernel's root node ids, where products may fuse into sums (products.py)
        self.roots = roots

    def value(self, node: Node, index) -> VExpr:
        index = tuple(index)
        key = (node.id, index)
        if key not in self.memo:
            self.memo[key] = self._value(node, index)
        return self.memo[key]

    def _value(self, node: Node, index) -> VExpr:
        if node.id in self.accs:
            stage, row_index = self.accs[node.id]
            if tuple(index) != tuple(row_index):
                raise Illegal(f"reduction %{node.id} read at another row")
            return Acc(node.dtype, stage)
        if node.id not in self.members:
            buf = self.buffer_of(node)
            if buf is None:
                if node.op == "constant" and node.attrs["value"].size == 1:
                    return Const(node.dtype, node.attrs["value"].reshape(()).item())
                raise Illegal(f"%{node.id} ({node.op}) has no buffer")
            return Load(node.dtype, buf, index)
        rule = EXPRESSIONS.get(node.op)
        if rule is not None:
            return rule(self, node, index)
        if lookup(node.op).kind == "elementwise":
            fused = products.fusable_product(node, self.members, self.roots)
            if fused is not None:
                return self._multiply_add(node, fused, index)
            return Prim(node.dtype, node.op, tuple(self.value(i, index) for i in node.inputs))
        raise Illegal(f"{node.op} cannot be fused as an element expression")

    def _multiply_add(self, node: Node, fused, index) -> VExpr:
        """add/sub of a product as one fma(a, b, c): a*b + c, a*b - c, c - a*b."""
        k, m = fused
        a, b = (self.value(i, index) for i in m.inputs)
        c = self.value(node.inputs[1 - k], index)
        if node.op == "sub":
            if k == 0:
                c = Prim(node.dtype, "neg", (c,))
            else:
                a = Prim(node.dtype, "neg", (a,))
        return Prim(node.dtype, "fma", (a, b, c))


# -- the rules ---------------------------------------------------------------------------

def _scalar_constant(b: ExprBuilder, node, index):
    if node.attrs["value"].size != 1:
        raise Illegal("large constant inside a group")
    return Const(node.dtype, node.attrs["value"].reshape(()).item())


def _transpose(b: ExprBuilder, node, index):
    j = [None] * node.ndim
    for k, p in enumerate(node.attrs["permutation"]):
        j[p] = index[k]
    return b.value(node.inputs[0], j)


def _broadcast(b: ExprBuilder, node, index):
    x = node.inputs[0]
    j = [ix.const(0) if x.shape[i] == 1 else index[d]
         for i, d in enumerate(node.attrs["broadcast_dimensions"])]
    return b.value(x, j)


def _slice(b: ExprBuilder, node, index):
    a = node.attrs
    return b.value(node.inputs[0], [ix.add(ix.const(s), ix.mul(e, st)) for e, s, st in
                                    zip(index, a["start_indices"], a["strides"])])


def _window_view(b: ExprBuilder, node, index):
    """Overlapping windows of the last axis."""
    a, x = node.attrs, node.inputs[0]
    r = len(a["sizes"])
    lead = tuple(index[:len(index) - r])
    pos = ix.const(0)
    for e, st in zip(index[len(index) - r:], a["strides"]):
        pos = ix.add(pos, ix.mul(e, st))
    return _flat_load(b, x, lead, pos) or b.value(x, lead + (pos,))


def _reverse(b: ExprBuilder, node, index):
    j = list(index)
    for d in node.attrs["dimensions"]:
        j[d] = ix.add(ix.const(node.shape[d] - 1), ix.mul(index[d], -1))
    return b.value(node.inputs[0], j)


def _rng(b: ExprBuilder, node, index):
    key = node.inputs[0]
    return RngValue(node.dtype, b.value(key, (ix.const(0),)), b.value(key, (ix.const(1),)),
                    ix.linearize(index, node.shape), node.attrs["distribution"])


for _op, _rule in {
    "constant": _scalar_constant,
    "iota": lambda b, node, index: IndexValue(node.dtype, index[node.attrs["dimension"]]),
    "dim_size": lambda b, node, index: IndexValue(node.dtype, ix.size(node.attrs["size"])),
    "compare": lambda b, node, index: Prim("bool", "compare", tuple(
        b.value(i, index) for i in node.inputs), node.attrs["direction"]),
    "convert": lambda b, node, index: Prim(node.dtype, "convert", (
        b.value(node.inputs[0], index),), node.inputs[0].dtype),
    "select": lambda b, node, index: Prim(node.dtype, "select", tuple(
        b.value(i, index) for i in node.inputs)),
    "broadcast_in_dim": _broadcast,
    "reshape": lambda b, node, index: b.value(node.inputs[0], ix.reshape_index(
        index, node.shape, node.inputs[0].shape)),
    "transpose": _transpose, "slice": _slice, "window_view": _window_view,
    "reverse": _reverse, "rng": _rng,
    "after": lambda b, node, index: b.value(node.inputs[0], index),
    "stop_gradient": lambda b, node, index: b.value(node.inputs[0], index),
}.items():
    register_expression(_op)(_rule)


def _flat_load(b: ExprBuilder, x, lead, pos):
    """The load of x[lead..., pos] when x reshapes a buffer's trailing axes into one
    (a window_view of a padded image): addressed by the flat position in the last
    axis (zeros before it), which is the same linear address as its split into the
    buffer's axes and stays affine (the split's div/mod do not always simplify
    back), so products read it as a strided matrix. None otherwise."""
    if x.op != "reshape" or x.id not in b.members or x.inputs[0].id in b.members:
        return None
    src = x.inputs[0]
    k = len(lead)
    buf = b.buffer_of(src)
    if buf is None or tuple(src.shape[:k]) != tuple(x.shape[:k]) or src.ndim <= k:
        return None
    return Load(src.dtype, buf, lead + (ix.const(0),) * (src.ndim - k - 1) + (pos,))


@register_expression("pad")
def _pad(b: ExprBuilder, node, index):
    x = node.inputs[0]
    a = node.attrs
    conds, j = [], []
    for d, (e, lo, it, n) in enumerate(zip(index, a["low"], a["interior"], x.shape)):
        t = ix.add(e, ix.const(-lo))
        step = it + 1
        if isinstance(n, Dim):                 # a symbolic axis: bounds at the call
            hi = (n - 1) * step + 1
            conds.append(InRange("bool", t, 0, hi, step))
            j.append(ix.clamp(ix.floordiv(t, step), 0, n - 1))
            continue
        hi = (n - 1) * step + 1 if n else 0
        if not (t.lo >= 0 and t.hi < hi and step == 1):
            conds.append(InRange("bool", t, 0, hi, step))
        j.append(ix.clamp(ix.floordiv(t, step), 0, max(n - 1, 0)))
    inner = b.value(x, j) if x.size else Const(node.dtype, a["value"])
    if not conds:
        return inner
    cond = conds[0]
    for c in conds[1:]:
        cond = Prim("bool", "and", (cond, c))
    return Prim(node.dtype, "select", (cond, inner, Const(node.dtype, a["value"])))


@register_expression("concatenate")
def _concatenate(b: ExprBuilder, node, index):
    dim = node.attrs["dimension"]
    starts, parts, offset = [], [], 0
    for x in node.inputs:
        n = x.shape[dim]
        if n:
            j = list(index)
            j[dim] = ix.clamp(ix.add(index[dim], ix.const(-offset)), 0, n - 1)
            starts.append(offset)
            parts.append(b.value(x, j))
        offset += n
    if len(parts) == 1:
        return parts[0]
    return Choose(node.dtype, index[dim], tuple(starts), tuple(parts))


@register_expression("gather")
def _gather(b: ExprBuilder, node, index):
    operand, indices = node.inputs
    axis = node.attrs["axis"]
    r = indices.ndim
    idx = b.value(indices, index[axis:axis + r])
    n = operand.shape[axis]
    j = list(index[:axis]) + [ix.clamp(ix.from_value(idx), 0, max(n - 1, 0))] + \
        list(index[axis + r:])
    return b.value(operand, j)
