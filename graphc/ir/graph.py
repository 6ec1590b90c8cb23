"""Graph and Node: the typed SSA dataflow IR.

A Graph is an append-only list of Nodes in topological order (an input is always created
before its users). Each Node is one primitive application with a static shape and dtype.
Variables' current values live on the Graph, keyed by the variable's name.
"""
from __future__ import annotations

import itertools
import threading

import numpy as np

from graphc_runtime.errors import GraphcError

from . import dtypes


class Node:
    """One primitive application: `op(inputs...) {attrs} : dtype[shape]`."""

    __slots__ = ("id", "op", "inputs", "attrs", "shape", "dtype", "name", "loc", "graph",
                 "__weakref__")

    def __init__(self, graph: "Graph", id: int, op: str, inputs: tuple, attrs: dict,
                 shape: tuple, dtype: str, name: str | None, loc: str | None):
        self.graph = graph
        self.id = id
        self.op = op
        self.inputs = inputs
        self.attrs = attrs
        self.shape = shape
        self.dtype = dtype
        self.name = name
        self.loc = loc

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * dtypes.itemsize(self.dtype)

    def type_str(self) -> str:
        return f"{dtypes.short(self.dtype)}[{','.join(map(str, self.shape))}]"

    def describe(self) -> str:
        """Short human description used in error messages: `%12 (name) f32[3,4]`."""
        label = f"%{self.id}" + (f" '{self.name}'" if self.name else "")
        return f"{label} {self.type_str()}"

    def __repr__(self) -> str:
        return f"<Node %{self.id} {self.op} {self.type_str()}>"


class Graph:
    """A dataflow graph of primitive nodes; also a context manager that makes it current."""

    _ids = itertools.count()

    def __init__(self, name: str = "graph"):
        self.name = name
        self.nodes: list[Node] = []
        self.variables: dict[str, np.ndarray] = {}   # variable name -> current value
        self._node_names: set[str] = set()
        self.uid = next(Graph._ids)

    # -- construction ----------------------------------------------------------------
    def add_node(self, op: str, inputs, attrs: dict, shape, dtype: str,
                 name: str | None = None, loc: str | None = None) -> Node:
        node = Node(self, len(self.nodes), op, tuple(inputs), attrs, tuple(shape), dtype,
                    name, loc)
        self.nodes.append(node)
        return node

    def unique_name(self, base: str) -> str:
        """`base`, or `base_1`, `base_2`... whichever is not yet used in this graph."""
        name, n = base, 0
        while name in self._node_names:
            n += 1
            name = f"{base}_{n}"
        return name

    def claim_name(self, name: str, what: str) -> None:
        if name in self._node_names:
            raise GraphcError(f"{what}: the name {name!r} is already used in graph {self.name!r}")
        self._node_names.add(name)

    # -- queries -----------------------------------------------------------------------
    def placeholders(self) -> list[Node]:
        """Parameter nodes in creation order (the positional order of inputs)."""
        return [n for n in self.nodes if n.op == "parameter"]

    def variable_nodes(self) -> list[Node]:
        return [n for n in self.nodes if n.op == "variable"]

    def users(self) -> dict[int, list[Node]]:
        out: dict[int, list[Node]] = {n.id: [] for n in self.nodes}
        for n in self.nodes:
            for i in n.inputs:
                out[i.id].append(n)
        return out

    def ancestors(self, outputs) -> list[Node]:
        """The nodes `outputs` depend on (themselves included), in topological order."""
        seen: set[int] = set()
        stack = list(outputs)
        while stack:
            n = stack.pop()
            if n.id in seen:
                continue
            seen.add(n.id)
            stack.extend(n.inputs)
        return [n for n in self.nodes if n.id in seen]

    # -- default-graph stack -------------------------------------------------------------
    def __enter__(self) -> "Graph":
        _stack().append(self)
        return self

    def __exit__(self, *exc) -> None:
        _stack().pop()

    def __repr__(self) -> str:
        return f"<Graph {self.name!r}: {len(self.nodes)} nodes>"

    def __str__(self) -> str:
        from .printer import format_graph
        return format_graph(self)


_local = threading.local()
_default_graph = Graph("default")


def _stack() -> list[Graph]:
    if not hasattr(_local, "stack"):
        _local.stack = []
    return _local.stack


def current_graph() -> Graph:
    """The innermost graph entered with `with g:`, else the default graph."""
    stack = _stack()
    return stack[-1] if stack else _default_graph


def reset_default_graph() -> Graph:
    """Replace the default graph with a fresh one (useful in notebooks and tests)."""
    global _default_graph
    _default_graph = Graph("default")
    return _default_graph
