"""The reference interpreter: evaluates a graph node by node with numpy.

It is the oracle every compiled result is tested against, so it favours clarity and
exactness over speed.
"""
from __future__ import annotations

import numpy as np

from graphc_runtime.dims import Dim, concrete_shape, is_symbolic
from graphc_runtime.errors import FeedError
from graphc_runtime.feeds import bind_symbols, check_array, sizes

from . import dtypes
from .graph import TUPLE, Graph, Node
from .primitive import lookup


def check_feed(node: Node, value, env: dict) -> np.ndarray:
    """Return `value` as an array if it matches placeholder `node`, else raise FeedError;
    its symbolic dims are bound in (or checked against) `env` ({symbol: (size, input)})."""
    shape = bind_symbols(node.attrs["name"], node.shape, value, env)
    return check_array(node.attrs["name"], value, shape, dtypes.to_numpy(node.dtype),
                       node.dtype, node.type_str())


def bind_feeds(graph: Graph, needed: list[Node], feeds: dict,
               env: dict) -> dict[int, np.ndarray]:
    """Map each placeholder node among `needed` to its checked feed value (symbols'
    sizes bound into `env`)."""
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
        bound[node.id] = check_feed(node, feeds[name], env)
    return bound


def run(graph: Graph, outputs: list[Node], feeds: dict | None = None,
        variables: dict[str, np.ndarray] | None = None) -> list[np.ndarray]:
    """Values of `outputs` given placeholder `feeds` (by name) and variable values."""
    variables = graph.variables if variables is None else variables
    needed = graph.ancestors(outputs)
    env: dict = {}
    values: dict[int, np.ndarray] = bind_feeds(graph, needed, feeds or {}, env)
    return _evaluate(needed, outputs, values, variables, sizes(env))


def run_region(region, args, env: dict | None = None) -> list[np.ndarray]:
    """A region's output values for its parameters' values `args` (in order); `env`
    holds the symbols' sizes of the enclosing evaluation."""
    values = {p.id: a for p, a in zip(region.params, args)}
    needed = region.graph.ancestors(region.outputs)
    return _evaluate(needed, list(region.outputs), values, {}, env or {})


class _Concrete:
    """A node seen with its symbolic sizes replaced by the call's (for impls)."""

    def __init__(self, node: Node, env: dict):
        self._node = node
        self.shape = concrete_shape(node.shape, env)
        self.attrs = concrete(node.attrs, env)
        self.env = env

    def __getattr__(self, name):
        return getattr(self._node, name)


def concrete(obj, env: dict):
    """`obj` (attrs: tuples, lists, dicts, Dims) with every Dim evaluated in `env`."""
    if isinstance(obj, Dim):
        return obj.evaluate(env)
    if isinstance(obj, tuple):
        return tuple(concrete(x, env) for x in obj)
    if isinstance(obj, list):
        return [concrete(x, env) for x in obj]
    if isinstance(obj, dict):
        return {k: concrete(v, env) for k, v in obj.items()}
    return obj


def _symbolic_attrs(obj) -> bool:
    if isinstance(obj, Dim):
        return True
    if isinstance(obj, (tuple, list)):
        return any(_symbolic_attrs(x) for x in obj)
    if isinstance(obj, dict):
        return any(_symbolic_attrs(v) for v in obj.values())
    return False


def _evaluate(needed, outputs, values, variables, env) -> list[np.ndarray]:
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
        seen = node                 # loops and conds pass the sizes on to their bodies
        if env and (node.op in ("scan", "while", "cond") or is_symbolic(node.shape) or
                    _symbolic_attrs(node.attrs)):
            seen = _Concrete(node, env)
        out = lookup(node.op).impl(args, seen.attrs, seen)
        values[node.id] = out if node.dtype == TUPLE else np.asarray(out)
        for i in node.inputs:       # free what no later node reads
            remaining_uses[i.id] -= 1
            if remaining_uses[i.id] == 0 and i.id not in keep:
                del values[i.id]
    return [np.array(values[o.id], dtype=dtypes.to_numpy(o.dtype), copy=True) for o in outputs]
