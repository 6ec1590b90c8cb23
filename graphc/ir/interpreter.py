"""The reference interpreter: evaluates a graph node by node with numpy.

It is the oracle every compiled result is tested against, so it favours clarity and
exactness over speed.
"""
from __future__ import annotations

import numpy as np

from graphc_runtime.errors import FeedError
from graphc_runtime.feeds import check_array

from . import dtypes
from .graph import TUPLE, Graph, Node
from .primitive import lookup


def check_feed(node: Node, value) -> np.ndarray:
    """Return `value` as an array if it matches placeholder `node`, else raise FeedError."""
    return check_array(node.attrs["name"], value, node.shape, dtypes.to_numpy(node.dtype),
                       node.dtype, node.type_str())


def bind_feeds(graph: Graph, needed: list[Node], feeds: dict) -> dict[int, np.ndarray]:
    """Map each placeholder node among `needed` to its checked feed value."""
    by_name = {n.attrs["name"]: n for n in graph.placeholders()}
    for name in feeds:
        if name not in by_name:
            known = ", ".join(sorted(by_name)) or "none"
            raise FeedError(f"unknown input {name!r}; the graph's placeholders are: {known}")
    bound = {}
    for node in needed:
        if node.op != "parameter":
            continue
        name = node.attrs["name"]
        if name not in feeds:
            raise FeedError(f"missing input {name!r} ({node.type_str()})")
        bound[node.id] = check_feed(node, feeds[name])
    return bound


def run(graph: Graph, outputs: list[Node], feeds: dict | None = None,
        variables: dict[str, np.ndarray] | None = None) -> list[np.ndarray]:
    """Values of `outputs` given placeholder `feeds` (by name) and variable values."""
    variables = graph.variables if variables is None else variables
    needed = graph.ancestors(outputs)
    values: dict[int, np.ndarray] = bind_feeds(graph, needed, feeds or {})
    return _evaluate(needed, outputs, values, variables)


def run_region(region, args) -> list[np.ndarray]:
    """A region's output values for its parameters' values `args` (in order)."""
    values = {p.id: a for p, a in zip(region.params, args)}
    needed = region.graph.ancestors(region.outputs)
    return _evaluate(needed, list(region.outputs), values, {})


def _evaluate(needed, outputs, values, variables) -> list[np.ndarray]:
    remaining_uses: dict[int, int] = {}
    for n in needed:
        for i in n.inputs:
            remaining_uses[i.id] = remaining_uses.get(i.id, 0) + 1
    keep = {o.id for o in outputs}
    for node in needed:
        if node.op == "parameter":
            continue
        if node.op == "variable":
            values[node.id] = variables[node.attrs["name"]]
            continue
        args = [values[i.id] for i in node.inputs]
        out = lookup(node.op).impl(args, node.attrs, node)
        values[node.id] = out if node.dtype == TUPLE else np.asarray(out)
        for i in node.inputs:       # free what no later node reads
            remaining_uses[i.id] -= 1
            if remaining_uses[i.id] == 0 and i.id not in keep:
                del values[i.id]
    return [np.array(values[o.id], dtype=dtypes.to_numpy(o.dtype), copy=True) for o in outputs]
