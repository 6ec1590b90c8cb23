"""The define-then-run Python API: Tensor, placeholder, constant, variable, evaluate.

A Tensor is a handle on one graph node. Operators and the numpy-like functions in
graphc/functions/ decompose into primitives via `bind`, inserting the broadcasts and
dtype conversions that numpy semantics imply.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from graphc_runtime.errors import DTypeError, GraphcError, ShapeError

from .ir import dtypes
from .ir.graph import Graph, Node, current_graph
from .ir.primitive import bind as _bind_node
from .ir.source import user_location


class Tensor:
    """A symbolic value in a graph: shape and dtype are known, the values are not."""

    __slots__ = ("node",)
    __array_priority__ = 1000      # numpy scalars defer to our reflected operators

    def __init__(self, node: Node):
        self.node = node

    # -- metadata ------------------------------------------------------------------------
    shape = property(lambda self: self.node.shape)
    dtype = property(lambda self: self.node.dtype)
    ndim = property(lambda self: len(self.node.shape))
    size = property(lambda self: self.node.size)
    graph = property(lambda self: self.node.graph)

    @property
    def name(self) -> str | None:
        return self.node.name

    def __repr__(self) -> str:
        label = f" {self.name!r}" if self.name else ""
        return f"Tensor{label}(%{self.node.id} = {self.node.op}, {self.node.type_str()})"

    __hash__ = object.__hash__

    def __bool__(self):
        raise GraphcError("a symbolic Tensor has no truth value while the graph is being "
                          "built; use gc.where for data-dependent choices", user_location())

    def __array__(self, *args, **kwargs):
        raise GraphcError(f"{self!r} is symbolic and cannot become a numpy array; run it "
                          f"with gc.evaluate or gc.compile", user_location())

    def __len__(self) -> int:
        if not self.shape:
            raise ShapeError("len() of a 0-d tensor", user_location())
        return self.shape[0]

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    def __setitem__(self, key, value):
        raise GraphcError("Tensors are immutable; build a new one (gc.where, gc.pad, "
                          "gc.concatenate or scatter-add through gradients)", user_location())

    # -- operators -----------------------------------------------------------------------
    def __add__(self, o): return F.add(self, o)
    def __radd__(self, o): return F.add(o, self)
    def __sub__(self, o): return F.subtract(self, o)
    def __rsub__(self, o): return F.subtract(o, self)
    def __mul__(self, o): return F.multiply(self, o)
    def __rmul__(self, o): return F.multiply(o, self)
    def __truediv__(self, o): return F.divide(self, o)
    def __rtruediv__(self, o): return F.divide(o, self)
    def __floordiv__(self, o): return F.floor_divide(self, o)
    def __rfloordiv__(self, o): return F.floor_divide(o, self)
    def __mod__(self, o): return F.mod(self, o)
    def __rmod__(self, o): return F.mod(o, self)
    def __pow__(self, o): return F.power(self, o)
    def __rpow__(self, o): return F.power(o, self)
    def __matmul__(self, o): return F.matmul(self, o)
    def __rmatmul__(self, o): return F.matmul(o, self)
    def __neg__(self): return F.negative(self)
    def __pos__(self): return self
    def __abs__(self): return F.abs(self)
    def __invert__(self): return F.logical_not(self)
    def __and__(self, o): return F.bitwise_and(self, o)
    def __rand__(self, o): return F.bitwise_and(o, self)
    def __or__(self, o): return F.bitwise_or(self, o)
    def __ror__(self, o): return F.bitwise_or(o, self)
    def __xor__(self, o): return F.bitwise_xor(self, o)
    def __rxor__(self, o): return F.bitwise_xor(o, self)
    def __eq__(self, o): return F.equal(self, o)            # type: ignore[override]
    def __ne__(self, o): return F.not_equal(self, o)        # type: ignore[override]
    def __lt__(self, o): return F.less(self, o)
    def __le__(self, o): return F.less_equal(self, o)
    def __gt__(self, o): return F.greater(self, o)
    def __ge__(self, o): return F.greater_equal(self, o)
    def __getitem__(self, key): return F.getitem(self, key)

    # -- methods -------------------------------------------------------------------------
    @property
    def T(self) -> "Tensor":
        return F.transpose(self)

    def reshape(self, *shape) -> "Tensor":
        return F.reshape(self, shape[0] if len(shape) == 1 and not isinstance(shape[0], int)
                         else shape)

    def transpose(self, *axes) -> "Tensor":
        if len(axes) == 1 and not isinstance(axes[0], int):
            axes = axes[0]
        return F.transpose(self, axes or None)

    def sum(self, axis=None, keepdims=False): return F.sum(self, axis, keepdims)
    def mean(self, axis=None, keepdims=False): return F.mean(self, axis, keepdims)
    def max(self, axis=None, keepdims=False): return F.max(self, axis, keepdims)
    def min(self, axis=None, keepdims=False): return F.min(self, axis, keepdims)
    def prod(self, axis=None, keepdims=False): return F.prod(self, axis, keepdims)
    def var(self, axis=None, keepdims=False): return F.var(self, axis, keepdims)
    def argmax(self, axis=None, keepdims=False): return F.argmax(self, axis, keepdims)
    def argmin(self, axis=None, keepdims=False): return F.argmin(self, axis, keepdims)
    def astype(self, dtype) -> "Tensor": return F.cast(self, dtype)
    def flatten(self) -> "Tensor": return F.reshape(self, (-1,))
    def squeeze(self, axis=None) -> "Tensor": return F.squeeze(self, axis)


# -- building nodes -------------------------------------------------------------------

def bind(primitive: str, *operands: Tensor, **attrs) -> Tensor:
    """Apply `primitive` to tensors with attributes; the API's one door into the IR."""
    return Tensor(_bind_node(primitive, [t.node for t in operands], attrs, loc=user_location()))


def bind_source(op: str, graph: Graph, attrs: dict, name: str | None = None) -> Tensor:
    """Create a source node (no operands) in `graph`."""
    return Tensor(_bind_node(op, (), attrs, graph=graph, name=name, loc=user_location()))


def _literal_array(value, dtype=None) -> np.ndarray:
    """A numpy array for a Python/numpy value; Python data gets graphc's 32-bit defaults."""
    if dtype is not None:
        return np.array(value, dtype=dtypes.to_numpy(dtypes.canonical(dtype)))
    if isinstance(value, np.ndarray) or isinstance(value, np.generic):
        return np.array(value)
    arr = np.array(value)
    if arr.dtype == np.float64:
        arr = arr.astype(np.float32)
    elif arr.dtype.kind in "iu":
        arr = arr.astype(np.int32) if arr.size == 0 or (
            np.iinfo(np.int32).min <= arr.min() and arr.max() <= np.iinfo(np.int32).max) \
            else arr.astype(np.int64)
    elif arr.dtype.kind not in "bf":
        raise DTypeError(f"cannot make a tensor from {type(value).__name__} "
                         f"(numpy dtype {arr.dtype})", user_location())
    return arr


def constant(value, dtype=None, graph: Graph | None = None) -> Tensor:
    """A constant tensor holding (a copy of) `value`."""
    arr = _literal_array(value, dtype)
    dtypes.canonical(arr.dtype)
    arr = np.array(arr, order="C", copy=True)
    arr.setflags(write=False)
    return bind_source("constant", graph or current_graph(), {"value": arr})


def placeholder(shape, dtype="float32", name: str | None = None) -> Tensor:
    """An input fed at run time, by `name` (keyword) or by position (creation order)."""
    g = current_graph()
    shape = _shape_tuple(shape, "placeholder")
    name = name if name is not None else g.unique_name(f"input_{len(g.placeholders())}")
    g.claim_name(name, "placeholder")
    return bind_source("parameter", g, {"name": name, "shape": shape,
                                        "dtype": dtypes.canonical(dtype)}, name)


def variable(initial_value, name: str | None = None, dtype=None) -> Tensor:
    """State that persists across calls; its value is held by the graph (and executables)."""
    g = current_graph()
    if isinstance(initial_value, Tensor):
        raise GraphcError("variable(): the initial value must be concrete data, not a "
                          "Tensor", user_location())
    value = np.array(_literal_array(initial_value, dtype), order="C", copy=True)
    name = name if name is not None else g.unique_name(f"var_{len(g.variable_nodes())}")
    g.claim_name(name, "variable")
    t = bind_source("variable", g, {"name": name, "shape": tuple(value.shape),
                                    "dtype": dtypes.canonical(value.dtype)}, name)
    g.variables[name] = value
    return t


def _shape_tuple(shape, what: str) -> tuple:
    if isinstance(shape, (int, np.integer)):
        shape = (shape,)
    try:
        shape = tuple(int(d) for d in shape)
    except (TypeError, ValueError):
        raise ShapeError(f"{what}: shape must be a tuple of ints, got {shape!r}",
                         user_location()) from None
    if any(d < 0 for d in shape):
        raise ShapeError(f"{what}: negative dimension in shape {shape}", user_location())
    return shape


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


from . import functions as F  # noqa: E402  (functions import Tensor from here)
