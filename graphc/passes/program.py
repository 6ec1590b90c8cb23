"""Program: what the pass pipeline transforms — a graph plus its outputs and updates.

Passes never mutate a Program's graph: `rebuild` copies the reachable nodes into a fresh
graph through a per-node rewrite callback, keeping names, locations and variables.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ..ir.graph import Graph, Node
from ..ir.primitive import lookup


@dataclass
class Program:
    graph: Graph
    outputs: list[Node]                       # results, in the user's flattened order
    updates: list[tuple[str, Node]]           # (variable name, new value)
    annotations: dict = field(default_factory=dict)   # filled by fusion/schedule/memory

    def roots(self) -> list[Node]:
        return list(self.outputs) + [n for _, n in self.updates]

    def live_nodes(self) -> list[Node]:
        return self.graph.ancestors(self.roots())


class Builder:
    """Adds nodes to a new graph, inferring their types through the primitive rules."""

    def __init__(self, graph: Graph):
        self.graph = graph

    def add(self, op: str, inputs, attrs: dict, like: Node | None = None) -> Node:
        shape, dtype = lookup(op).rule(tuple(inputs), attrs)
        return self.graph.add_node(op, inputs, attrs, shape, dtype,
                                   like.name if like is not None else None,
                                   like.loc if like is not None else None)

    def copy(self, node: Node, inputs) -> Node:
        return self.graph.add_node(node.op, inputs, node.attrs, node.shape, node.dtype,
                                   node.name, node.loc)


Rewrite = Callable[[Builder, Node, list], Node]


def rebuild(program: Program, rewrite: Rewrite | None = None) -> Program:
    """Copy the program's live nodes into a new graph; `rewrite(builder, old, new_inputs)`
    may return a replacement node (built with the builder) instead of a plain copy."""
    new_graph = Graph(program.graph.name)
    new_graph.variables = program.graph.variables
    builder = Builder(new_graph)
    mapping: dict[int, Node] = {}
    for node in program.live_nodes():
        inputs = [mapping[i.id] for i in node.inputs]
        out = rewrite(builder, node, inputs) if rewrite else None
        mapping[node.id] = out if out is not None else builder.copy(node, inputs)
    return Program(new_graph, [mapping[o.id] for o in program.outputs],
                   [(name, mapping[n.id]) for name, n in program.updates],
                   dict(program.annotations))
