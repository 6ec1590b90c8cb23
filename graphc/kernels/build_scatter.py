"""The scatter kernel of a fusion group: a copy of the operand, then the updates added
at their targets."""
from __future__ import annotations

from ..ir.graph import Node
from . import index as ix
from .build_loop import loop_vars
from .expressions import ExprBuilder
from .ir import Illegal, LoopKernel, ScatterKernel, Store


def build_scatter(name, node: Node, members, buffer_of, dests) -> ScatterKernel:
    operand, indices, updates = node.inputs
    axis = node.attrs["axis"]
    out = dests(node)[0]
    view_members = {m for m in members if m != node.id}
    eb = ExprBuilder(view_members, buffer_of)
    vars_ = loop_vars(node.shape)
    copy = LoopKernel(name + "_init", node.shape, vars_,
                      [Store(out, eb.value(operand, vars_), vars_)])
    uvars = loop_vars(updates.shape, "u")
    r = indices.ndim
    idx = eb.value(indices, uvars[axis:axis + r])
    n = operand.shape[axis]
    target = tuple(uvars[:axis]) + (ix.clamp(ix.from_value(idx), 0, max(n - 1, 0)),) + \
        tuple(uvars[axis + r:])
    if len(dests(node)) > 1:
        raise Illegal("scatter with several destinations")
    return ScatterKernel(name, out, copy, updates.shape, uvars, target,
                         eb.value(updates, uvars))
