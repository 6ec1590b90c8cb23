"""Tensor, the handle on one graph node, and the door from Python values into the IR:
bind, bind_source, constant, placeholder, variable.

Tensor's operators and numpy-like methods are installed by graphc.operators (they call
graphc.functions, which builds on this module).
"""
from __future__ import annotations

import numpy as np

from graphc_runtime.dims import Dim
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
        return np.asarray(value)         # the callers copy what they keep
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


def _immutable(arr: np.ndarray) -> bool:
    """Whether nothing can change arr's values: it and every array it views are
    read-only, over the memory of a bytes object (an ONNX initializer's raw data), and
    it lies aligned as numpy's own arrays do (16 bytes, graphc_runtime.model's
    VIEW_ALIGNMENT). Such a constant is kept without a copy."""
    base = arr
    while isinstance(base, np.ndarray):
        if base.flags.writeable:
            return False
        base = base.base
    return isinstance(base, bytes) and arr.ctypes.data % 16 == 0


def constant(value, dtype=None, graph: Graph | None = None, name: str | None = None) -> Tensor:
    """A constant tensor holding (a copy of) `value`; `name` names its node."""
    arr = _literal_array(value, dtype)
    dtypes.canonical(arr.dtype)
    if not (arr.flags.c_contiguous and _immutable(arr)):
        arr = np.array(arr, order="C", copy=True)
        arr.setflags(write=False)
    return bind_source("constant", graph or current_graph(), {"value": arr}, name=name)


def placeholder(shape, dtype="float32", name: str | None = None) -> Tensor:
    """An input fed at run time, by `name` (keyword) or by position (creation order).

    A str dimension is a named symbol, the same size in every input that names it; None
    is a fresh symbol: `placeholder(("batch", 784))` accepts any batch size at the call."""
    g = current_graph()
    name = name if name is not None else g.unique_name(f"input_{len(g.placeholders())}")
    shape = _shape_tuple(shape, "placeholder", symbols=name)
    g.claim_name(name, "placeholder")
    return bind_source("parameter", g, {"name": name, "shape": shape,
                                        "dtype": dtypes.canonical(dtype)}, name)


def dim_size(d, dtype="int32", graph: Graph | None = None) -> Tensor:
    """A scalar holding the size `d` (an int, or a symbolic Dim such as x.shape[0] whose
    value is bound at the call)."""
    dt = dtypes.canonical(dtype)
    if not isinstance(d, Dim):
        return constant(np.asarray(int(d), dtype=dtypes.to_numpy(dt)), graph=graph)
    return bind_source("dim_size", graph or current_graph(), {"size": d, "dtype": dt})


def variable(initial_value, name: str | None = None, dtype=None) -> Tensor:
    """State that persists across calls; its value is held by the graph (and executables)."""
    g = current_graph()
    if g.parent is not None:
        raise GraphcError("variable(): variables cannot be created inside a loop or cond "
                          "body; create it outside and use it in the body", user_location())
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


def _shape_tuple(shape, what: str, symbols: str | None = None) -> tuple:
    """`shape` as a tuple of ints and Dims. With `symbols` (a placeholder's name), a str
    dim is the named symbol and None a fresh one named `<symbols>.<axis>`."""
    if isinstance(shape, (int, np.integer, str)) or shape is None:
        shape = (shape,)

    def dim(k, d):
        if isinstance(d, Dim):
            return d
        if symbols is not None and isinstance(d, str):
            if not d.isidentifier():
                raise ShapeError(f"{what}: symbolic dimension names must be identifiers, "
                                 f"got {d!r}", user_location())
            return Dim.symbol(d)
        if symbols is not None and d is None:
            return Dim.symbol(f"{symbols}.{k}")
        if isinstance(d, (bool, str)) or d is None:
            raise TypeError
        return int(d)
    try:
        shape = tuple(dim(k, d) for k, d in enumerate(shape))
    except ShapeError:
        raise
    except (TypeError, ValueError):
        kinds = "ints, str symbols or None" if symbols is not None else "ints"
        raise ShapeError(f"{what}: shape must be a tuple of {kinds}, got {shape!r}",
                         user_location()) from None
    if any(isinstance(d, int) and d < 0 for d in shape):
        raise ShapeError(f"{what}: negative dimension in shape {shape}", user_location())
    return shape
