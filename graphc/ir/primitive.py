"""The primitive registry and `bind`, the one way nodes enter a graph.

A Primitive declares, in one `define` call (graphc/ir/ops/*.py), its shape/dtype rule,
its numpy reference implementation and the facts every later layer asks of it: its
cost in fusion's units, whether a math function computes it (`transcendental`), whether
it only reads its operand at remapped indices (`remap`, a view folded into index
arithmetic) and its C math library names. Rules keyed by primitive live in one table
each: the VJP in graphc/autodiff.py (`register_vjp`), the kernel expression in
graphc/kernels/expressions.py (`register_expression`), each backend's lowering of an
elementwise primitive in graphc/backends/llvm/values.py (`register_lowering`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from graphc_runtime.dims import Dim
from graphc_runtime.errors import DTypeError, GraphcError, ShapeError

from .graph import Graph, Node, graph_for
from .source import user_location

# kinds, used by passes and backends to pick a lowering family
KINDS = ("elementwise", "source", "view", "reduce", "dot", "conv", "gather", "scatter",
         "rng", "collective", "control")


TRANSCENDENTAL_COST = 6      # fusion's units: a cheap instruction is 1


@dataclass(frozen=True)
class Primitive:
    """A primitive's declaration: name, family, shape/dtype rule, reference impl, facts.

    rule(inputs, attrs) -> (shape, dtype); raises ShapeError/DTypeError on bad operands.
    impl(args, attrs, node) -> np.ndarray of node.shape and node.dtype's storage type.
    cost: per element, in cheap-instruction units (fusion's recompute budget).
    transcendental: computed by a math function (a polynomial or a libm call), far dearer
        than an instruction (kernel stashes and the CPU's thread split weigh it).
    remap: reads one operand element per element at remapped indices (a view that index
        arithmetic folds away: no fill, no choice between operands).
    libm: the C math library's (float32, float64) names, where it has them.
    """
    name: str
    kind: str
    rule: Callable
    impl: Callable
    arity: int | None = None          # number of inputs, None when variadic
    differentiable: bool = True
    cost: int = 1
    transcendental: bool = False
    remap: bool = False
    libm: tuple | None = None


REGISTRY: dict[str, Primitive] = {}


def define(name: str, kind: str, rule: Callable, impl: Callable, arity: int | None = None,
           differentiable: bool = True, *, cost: int | None = None,
           transcendental: bool = False, remap: bool = False,
           libm: tuple | None = None) -> Primitive:
    """Register a primitive; names are unique. `cost` defaults to 0 for a remapping
    view, TRANSCENDENTAL_COST for a transcendental, else 1."""
    if name in REGISTRY:
        raise ValueError(f"primitive {name!r} defined twice")
    if kind not in KINDS:
        raise ValueError(f"unknown primitive kind {kind!r}")
    if remap and kind != "view":
        raise ValueError(f"primitive {name!r}: only a view remaps")
    if cost is None:
        cost = 0 if remap else TRANSCENDENTAL_COST if transcendental else 1
    prim = Primitive(name, kind, rule, impl, arity, differentiable, cost, transcendental,
                     remap, tuple(libm) if libm else None)
    REGISTRY[name] = prim
    return prim


def is_transcendental(op: str) -> bool:
    """Whether `op` (a primitive, or a kernel IR operation such as fma) is computed by a
    math function."""
    prim = REGISTRY.get(op)
    return prim is not None and prim.transcendental


def remap_ops() -> frozenset:
    """The views that only remap indices (folded into index arithmetic, never copied)."""
    return frozenset(name for name, p in REGISTRY.items() if p.remap)


def lookup(op: str) -> Primitive:
    try:
        return REGISTRY[op]
    except KeyError:
        raise GraphcError(f"unknown primitive {op!r}") from None


def freeze(value):
    """Attributes are immutable: lists become tuples, numpy scalars Python scalars."""
    if isinstance(value, (list, tuple)):
        return tuple(freeze(v) for v in value)
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    return value


def bind(op: str, inputs=(), attrs: dict | None = None, graph: Graph | None = None,
         name: str | None = None, loc: str | None = None) -> Node:
    """Apply primitive `op` to input nodes, checking shapes and dtypes; returns the new node."""
    prim = lookup(op)
    inputs = tuple(inputs)
    if loc is None:
        loc = user_location()
    if prim.arity is not None and len(inputs) != prim.arity:
        raise GraphcError(f"{op}: expects {prim.arity} operand(s), got {len(inputs)}", loc)
    if graph is None:       # unrelated graphs: the check below names them
        graphs = [x.graph for x in inputs if isinstance(x, Node)]
        graph = graph_for(graphs) or graphs[0]
    inputs = tuple(graph.capture(x) if isinstance(x, Node) and x.graph is not graph and
                   graph.encloses(x.graph) else x for x in inputs)
    for x in inputs:
        if not isinstance(x, Node):
            raise GraphcError(f"{op}: operand {x!r} is not a graph node", loc)
        if x.graph is not graph:
            raise GraphcError(f"{op}: operand {x.describe()} belongs to graph "
                              f"{x.graph.name!r}, not {graph.name!r}; tensors of different "
                              f"graphs cannot be combined", loc)
    attrs = {k: freeze(v) for k, v in (attrs or {}).items()}
    try:
        shape, dtype = prim.rule(inputs, attrs)
    except (ShapeError, DTypeError) as e:
        if e.loc is None:
            raise type(e)(f"{op}: {e.bare_message}", loc) from None
        raise
    return graph.add_node(op, inputs, attrs, tuple(d if isinstance(d, Dim) else int(d) for d in shape),
                          dtype, name, loc)


# --- helpers shared by the rules ------------------------------------------------------

def normalize_axis(axis: int, ndim: int, what: str = "axis") -> int:
    """Python-style negative axis -> non-negative; ShapeError if out of range."""
    if not isinstance(axis, (int, np.integer)) or isinstance(axis, bool):
        raise ShapeError(f"{what} must be an int, got {axis!r}")
    if not -ndim <= axis < max(ndim, 1) or (ndim == 0):
        raise ShapeError(f"{what} {axis} is out of range for a tensor of rank {ndim}")
    return int(axis) % ndim


def fmt_shape(shape) -> str:
    return "(" + ",".join(map(str, shape)) + ")"
