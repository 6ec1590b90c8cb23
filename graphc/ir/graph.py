"""Graph and Node: the typed SSA dataflow IR.

A Graph is an append-only list of Nodes in topological order (an input is always created
before its users). Each Node is one primitive application with a static shape and dtype.
Variables' current values live on the Graph, keyed by the variable's name.
"""
from __future__ import annotations

import itertools
import math
import threading

import numpy as np

from graphc_runtime import dims as sym
from graphc_runtime.dims import is_symbolic

from graphc_runtime.errors import GraphcError

from . import dtypes

TUPLE = "tuple"     # the dtype of a control-flow node; `get` nodes project its results


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
    def size(self):
        """The element count: an int, or a Dim when the shape is symbolic."""
        if is_symbolic(self.shape):
            return sym.prod(self.shape)
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        if self.dtype == TUPLE:
            return 0
        return self.size * dtypes.itemsize(self.dtype)

    def type_str(self) -> str:
        if self.dtype == TUPLE:
            return "tuple"
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

    def __init__(self, name: str = "graph", parent: "Graph | None" = None):
        self.name = name
        self.nodes: list[Node] = []
        self.variables: dict[str, np.ndarray] = {}   # variable name -> current value
        self._node_names: set[str] = set()
        self.uid = next(Graph._ids)
        # a region's body being traced: the graph it is nested in, and the values of
        # enclosing graphs it reads, in capture order: (outer graph uid, node id) ->
        # (the value in the parent graph, the parameter of this graph standing for it)
        self.parent = parent
        self.captured: dict[tuple, tuple[Node, Node]] = {}
        self.sealed: str | None = None     # why no node may be added any more

    # -- regions -----------------------------------------------------------------------
    def encloses(self, other: "Graph") -> bool:
        """Is `other` this graph or one it is nested in?"""
        g = self
        while g is not None:
            if g is other:
                return True
            g = g.parent
        return False

    def capture(self, node: Node) -> Node:
        """`node` of an enclosing graph as a value of this one: a parameter of this
        region (captured through every region in between)."""
        if node.graph is self:
            return node
        key = (node.graph.uid, node.id)
        if key not in self.captured:
            if self.parent is None or not self.parent.encloses(node.graph):
                raise GraphcError(f"{node.describe()} belongs to graph {node.graph.name!r}, "
                                  f"which does not enclose {self.name!r}")
            outer = self.parent.capture(node)
            param = self.add_node("parameter", (), {"name": f"capture{len(self.captured)}",
                                                   "shape": node.shape, "dtype": node.dtype},
                                  node.shape, node.dtype, None, node.loc)
            self.captured[key] = (outer, param)
        return self.captured[key][1]

    # -- construction ----------------------------------------------------------------
    def add_node(self, op: str, inputs, attrs: dict, shape, dtype: str,
                 name: str | None = None, loc: str | None = None) -> Node:
        if self.sealed:
            raise GraphcError(f"{op}: {self.sealed}", loc)
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


def graph_for(graphs) -> Graph | None:
    """The graph a node over values of `graphs` goes into: the region being traced when
    it sees all of them (values of enclosing graphs are captured), else the innermost of
    them; None when they are not nested in one another. No graphs: the current one."""
    current = current_graph()
    graphs = list(graphs)
    if not graphs or (current.parent is not None and all(current.encloses(g)
                                                         for g in graphs)):
        return current
    best = graphs[0]
    for g in graphs[1:]:
        if g.encloses(best):
            best = g
        elif not best.encloses(g):
            return None
    return best


def reset_default_graph() -> Graph:
    """Replace the default graph with a fresh one (useful in notebooks and tests)."""
    global _default_graph
    _default_graph = Graph("default")
    return _default_graph
