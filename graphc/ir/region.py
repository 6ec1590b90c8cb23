"""Region: the sub-graph a control-flow node owns (a loop's body, a branch of a cond).

A region is a closed Graph: its parameters, in order, are what the node passes in each
time it runs the region (carries, sequence slices, captured values), its outputs what it
hands back. It refers to nothing outside itself; values of enclosing graphs that a body
reads become parameters of the region (captures) and operands of the node.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from graphc_runtime.errors import GraphcError

if TYPE_CHECKING:              # graph.py prints regions through printer.py
    from .graph import Graph, Node


class Region:
    """A closed sub-graph: `params` (parameter nodes) in, `outputs` (nodes) out."""

    __slots__ = ("graph", "params", "outputs")

    def __init__(self, graph: Graph, params, outputs):
        self.graph = graph
        self.params = tuple(params)
        self.outputs = tuple(outputs)
        for n in self.params + self.outputs:
            if n.graph is not graph:
                raise GraphcError(f"internal: region node {n!r} is not in its graph")

    def param_types(self) -> list:
        return [(p.shape, p.dtype) for p in self.params]

    def output_types(self) -> list:
        return [(o.shape, o.dtype) for o in self.outputs]

    def nodes(self) -> list[Node]:
        """The nodes the outputs depend on, in topological order (parameters included
        even when unused, so that a region's signature survives)."""
        live = {n.id for n in self.graph.ancestors(self.outputs)}
        live.update(p.id for p in self.params)
        return [n for n in self.graph.nodes if n.id in live]

    def cut(self, values, at: int, prefix: str) -> "Region":
        """A copy of this region (in a new graph) in which its nodes `values` are
        parameters, named prefix0, prefix1..., inserted before parameter `at`; of the
        rest, only what the outputs still need is copied."""
        new = type(self.graph)(self.graph.name)       # a Graph (not imported: cycle)
        mapping = {}

        def parameter(n, attrs):
            mapping[n.id] = new.add_node("parameter", (), attrs, n.shape, n.dtype,
                                         n.name if n.op == "parameter" else None, n.loc)
        for p in self.params[:at]:
            parameter(p, p.attrs)
        for k, v in enumerate(values):
            parameter(v, {"name": f"{prefix}{k}", "shape": v.shape, "dtype": v.dtype})
        for p in self.params[at:]:
            parameter(p, p.attrs)
        needed, stack = set(), list(self.outputs)
        while stack:
            n = stack.pop()
            if n.id not in needed and n.id not in mapping:
                needed.add(n.id)
                stack.extend(n.inputs)
        for n in self.graph.nodes:
            if n.id in needed:
                mapping[n.id] = new.add_node(n.op, [mapping[i.id] for i in n.inputs], n.attrs,
                                             n.shape, n.dtype, n.name, n.loc)
        params = list(self.params[:at]) + list(values) + list(self.params[at:])
        return Region(new, [mapping[p.id] for p in params],
                      [mapping[o.id] for o in self.outputs])

    def with_outputs(self, outputs) -> "Region":
        """The same body, handing back `outputs` (nodes of this region's graph)."""
        return Region(self.graph, self.params, outputs)

    def __repr__(self) -> str:
        return f"<Region {self.graph.name!r}: {len(self.params)} in, {len(self.outputs)} out>"
