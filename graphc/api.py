"""The define-then-run Python API: Tensor, placeholder, constant, variable, evaluate.

A Tensor is a handle on one graph node (graphc.tensor). Operators and the numpy-like
functions in graphc/functions/ decompose into primitives via `bind`, inserting the
broadcasts and dtype conversions that numpy semantics imply.
"""
from __future__ import annotations

from typing import Any

from graphc_runtime.errors import GraphcError, ShapeError

from . import functions as F
from . import operators  # noqa: F401  (installs Tensor's operators and methods)
from .ir.graph import Graph
from .ir.source import user_location
from .tensor import (Tensor, _literal_array, _shape_tuple, bind,  # noqa: F401  (re-exported)
                     bind_source, constant, placeholder, variable)


def as_tensor(value, graph: Graph | None = None, dtype=None) -> Tensor:
    if isinstance(value, Tensor):
        return value if dtype is None else F.cast(value, dtype)
    return constant(value, dtype, graph=graph)


# -- structures of outputs --------------------------------------------------------------

def flatten_outputs(outputs) -> tuple[list[Tensor], Any]:
    """(flat list of tensors, a function that rebuilds `outputs`' structure from values).

    `outputs` is a Tensor or a (nested) list, tuple or dict of Tensors.
    """
    flat: list[Tensor] = []

    def walk(obj):
        if isinstance(obj, Tensor):
            flat.append(obj)
            return len(flat) - 1
        if isinstance(obj, dict):
            return ("dict", [(k, walk(v)) for k, v in obj.items()])
        if isinstance(obj, (list, tuple)):
            return (type(obj), [walk(v) for v in obj])
        raise GraphcError(f"outputs must be Tensors in lists, tuples or dicts; got "
                          f"{type(obj).__name__}", user_location())

    def build(spec, vals):
        if isinstance(spec, int):
            return vals[spec]
        kind, items = spec
        if kind == "dict":
            return {k: build(v, vals) for k, v in items}
        return kind(build(v, vals) for v in items)

    spec = walk(outputs)
    return flat, lambda vals: build(spec, vals)


def structure_of(outputs):
    """JSON form of the outputs' structure (for artifacts): leaves are flat positions;
    None when a dict key is not a string (such an executable cannot be saved)."""
    counter = iter(range(1 << 30))

    def walk(obj):
        if isinstance(obj, Tensor):
            return next(counter)
        if isinstance(obj, dict):
            if not all(isinstance(k, str) for k in obj):
                raise TypeError
            return {"dict": [[k, walk(v)] for k, v in obj.items()]}
        return {"tuple" if isinstance(obj, tuple) else "list": [walk(v) for v in obj]}
    try:
        return walk(outputs)
    except TypeError:
        return None


def _graph_of(tensors: list[Tensor]) -> Graph:
    graphs = {id(t.graph): t.graph for t in tensors}
    if len(graphs) != 1:
        raise GraphcError("all outputs must belong to one graph", user_location())
    return next(iter(graphs.values()))


def checked_updates(updates: dict | None) -> tuple[list, list]:
    """(variables, new values as Tensors) of an `updates` dict, checked: keys are
    variables, each new value has its variable's shape and dtype."""
    upd_vars, upd_vals = [], []
    for v, value in (updates or {}).items():
        if not isinstance(v, Tensor) or v.node.op != "variable":
            raise GraphcError(f"updates keys must be variables, got {v!r}", user_location())
        nv = as_tensor(value, graph=v.graph)
        if nv.shape != v.shape or nv.dtype != v.dtype:
            raise ShapeError(f"update of variable {v.name!r}: new value is "
                             f"{nv.node.type_str()}, the variable is {v.node.type_str()}",
                             user_location())
        upd_vars.append(v)
        upd_vals.append(nv)
    return upd_vars, upd_vals


def evaluate(outputs, feeds: dict | None = None, updates: dict | None = None):
    """Run the numpy reference interpreter on `outputs` (Tensor, list or dict).

    `feeds` maps placeholder names (or placeholder Tensors) to numpy arrays. `updates`
    maps variables to new values computed in the same evaluation; they are assigned to
    the graph's variables after all outputs are computed (like a compiled step).
    """
    from .ir.interpreter import run
    flat, rebuild = flatten_outputs(outputs)
    update_vars, new_values = checked_updates(updates)
    everything = flat + new_values
    if not everything:
        return rebuild([])
    graph = _graph_of(everything)
    named_feeds = {}
    for k, val in (feeds or {}).items():
        if isinstance(k, Tensor):
            if k.node.op != "parameter":
                raise GraphcError(f"feeds key {k!r} is not a placeholder", user_location())
            k = k.node.attrs["name"]
        named_feeds[k] = val
    values = run(graph, [t.node for t in everything], named_feeds)
    for v, val in zip(update_vars, values[len(flat):]):
        graph.variables[v.name] = val
    return rebuild(values[:len(flat)])
