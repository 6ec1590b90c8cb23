"""Control flow: gc.scan, gc.while_loop, gc.cond and gc.fori_loop (JAX-like).

Each traces its Python functions once into Regions (sub-graphs owned by one node):
values the functions read from enclosing graphs are captured as region parameters.
Carries and sequences are Tensors (or numbers) in tuples, lists and dicts; a body must
hand back exactly the structure, shapes and dtypes it was given.
"""
from __future__ import annotations

import numpy as np

from graphc_runtime.dims import Dim
from graphc_runtime.errors import DTypeError, GraphcError, ShapeError

from . import functions as F
from .api import Tensor, as_tensor
from .ir.graph import Graph, current_graph
from .ir.primitive import bind as bind_node
from .ir.printer import type_string
from .ir.region import Region
from .ir.source import user_location


# -- structures (pytrees of Tensors) ----------------------------------------------------

def flatten(obj, what: str, loc) -> tuple[list, object]:
    """(leaves, structure) of a nested tuple/list/dict (None is an empty structure)."""
    leaves = []

    def walk(o, path):
        if o is None:
            return None
        if isinstance(o, dict):
            return ("dict", tuple((k, walk(o[k], f"{path}[{k!r}]")) for k in o))
        if isinstance(o, (tuple, list)):
            return (type(o), tuple(walk(v, f"{path}[{i}]") for i, v in enumerate(o)))
        if isinstance(o, (Tensor, int, float, bool, np.ndarray, np.generic)):
            leaves.append((o, path))
            return "leaf"
        raise GraphcError(f"{what}: {path} is a {type(o).__name__}; carries and sequences "
                          f"are Tensors or numbers in tuples, lists and dicts", loc)
    return leaves, walk(obj, what)


def unflatten(structure, leaves: list):
    it = iter(leaves)

    def build(s):
        if s is None:
            return None
        if s == "leaf":
            return next(it)
        kind, items = s
        if kind == "dict":
            return {k: build(v) for k, v in items}
        return kind(build(v) for v in items)
    return build(structure)


def _describe_structure(s) -> str:
    if s is None:
        return "None"
    if s == "leaf":
        return "Tensor"
    kind, items = s
    if kind == "dict":
        return "{" + ", ".join(f"{k!r}: {_describe_structure(v)}" for k, v in items) + "}"
    inner = ", ".join(_describe_structure(v) for v in items)
    return f"({inner},)" if kind is tuple and len(items) == 1 else \
        (f"({inner})" if kind is tuple else f"[{inner}]")


def _tensors(leaves) -> list[Tensor]:
    return [as_tensor(v) for v, _ in leaves]


# -- tracing ----------------------------------------------------------------------------

class _Body:
    """Traces one function into a Region nested in the current graph."""

    def __init__(self, name: str, param_types, loc):
        self.graph = Graph(name, parent=current_graph())
        self.loc = loc
        with self.graph:
            self.params = [bind_node("parameter", (), {"name": f"arg{k}", "shape": tuple(s),
                                                       "dtype": d}, graph=self.graph,
                                     loc=loc) for k, (s, d) in enumerate(param_types)]

    def tensors(self) -> list[Tensor]:
        return [Tensor(p) for p in self.params]

    def call(self, fn, *args):
        with self.graph:
            return fn(*args)

    def close(self, outputs: list[Tensor]) -> tuple[Region, list]:
        """The region (params: own, then captures) and the outer values it captured."""
        with self.graph:
            nodes = [self.graph.capture(t.node) for t in outputs]
        outer = [o for o, _ in self.graph.captured.values()]
        captures = [p for _, p in self.graph.captured.values()]
        region = Region(self.graph, self.params + captures, nodes)
        self.graph.sealed = (f"this tensor belongs to the body {self.graph.name!r} traced at "
                             f"{self.loc}, and cannot be used outside it; return it from the "
                             f"body instead")
        return region, outer


def _as_body_values(leaves, expected, what: str, loc) -> list[Tensor]:
    """A body's returned leaves as Tensors of the expected (shape, dtype)s."""
    out = []
    for (v, path), (shape, dtype) in zip(leaves, expected):
        t = as_tensor(v, dtype=None if isinstance(v, Tensor) else dtype)
        if t.shape != tuple(shape):
            raise ShapeError(f"{what}: {path} is {t.node.type_str()}, expected "
                             f"{type_string(shape, dtype)}", loc)
        if t.dtype != dtype:
            raise DTypeError(f"{what}: {path} is {t.node.type_str()}, expected "
                             f"{type_string(shape, dtype)}", loc)
        out.append(t)
    return out


def _check_structure(got, expected, what: str, loc) -> None:
    if got != expected:
        raise GraphcError(f"{what}: the body returned the structure "
                          f"{_describe_structure(got)}, expected "
                          f"{_describe_structure(expected)}", loc)


def _results(node, count: int) -> list[Tensor]:
    return [Tensor(bind_node("get", [node], {"index": k}, loc=node.loc)) for k in range(count)]


# -- scan --------------------------------------------------------------------------------

def scan(fn, init, xs=None, length: int | None = None, reverse: bool = False,
         checkpoint: bool = False):
    """Loop `fn(carry, x) -> (carry, y)` over the leading axis of `xs`.

    Returns (final carry, ys) with ys the y's stacked along a new leading axis (None when
    the body returns y=None). `xs` may be None when `length` is given. With `reverse` the
    sequence is walked from its end (ys stay aligned with xs). `checkpoint` makes the
    gradient keep only the carries of each step and recompute the rest.
    """
    loc = user_location()
    carry_leaves, carry_s = flatten(init, "scan init", loc)
    xs_leaves, xs_s = flatten(xs, "scan xs", loc)
    carry = _tensors(carry_leaves)
    seqs = _tensors(xs_leaves)
    for t, (_, path) in zip(seqs, xs_leaves):
        if t.ndim == 0:
            raise ShapeError(f"scan: {path} is a scalar {t.node.type_str()}; sequences are "
                             f"scanned along their leading axis", loc)
    lengths = {t.shape[0] for t in seqs}
    if length is not None:
        if not isinstance(length, (int, np.integer, Dim)) or isinstance(length, bool) or \
                length < 0:
            raise GraphcError(f"scan: length must be a non-negative int (or a symbolic "
                              f"size), got {length!r}", loc)
        lengths.add(length if isinstance(length, Dim) else int(length))
    if not lengths:
        raise GraphcError("scan: give xs or length (there is nothing to count steps by)", loc)
    if len(lengths) > 1:
        sizes = ", ".join(f"{path} has {t.shape[0]}" for t, (_, path) in zip(seqs, xs_leaves))
        extra = f", length={length}" if length is not None else ""
        raise ShapeError(f"scan: the sequences disagree on the length ({sizes}{extra})", loc)
    T = lengths.pop()            # an int, or a symbolic size (a sequence's leading Dim)

    carry_types = [(t.shape, t.dtype) for t in carry]
    body = _Body("scan_body", carry_types + [(t.shape[1:], t.dtype) for t in seqs], loc)
    args = body.tensors()
    out = body.call(fn, unflatten(carry_s, args[:len(carry)]),
                    unflatten(xs_s, args[len(carry):]))
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise GraphcError(f"scan: fn must return a pair (carry, y), got "
                          f"{type(out).__name__}", loc)
    new_carry, y = out
    with body.graph:
        nc_leaves, nc_s = flatten(new_carry, "scan carry", loc)
        _check_structure(nc_s, carry_s, "scan carry", loc)
        new_carry_t = _as_body_values(nc_leaves, carry_types, "scan carry", loc)
        y_leaves, y_s = flatten(y, "scan y", loc)
        ys_t = _tensors(y_leaves)
    region, captured = body.close(new_carry_t + ys_t)
    node = bind_node("scan", [t.node for t in carry + seqs] + captured,
                     {"body": region, "length": T, "reverse": bool(reverse),
                      "num_carry": len(carry), "num_xs": len(seqs),
                      "checkpoint": bool(checkpoint)}, loc=loc)
    res = _results(node, len(carry) + len(ys_t))
    return unflatten(carry_s, res[:len(carry)]), unflatten(y_s, res[len(carry):])


# -- while_loop ---------------------------------------------------------------------------

def while_loop(cond_fn, body_fn, init):
    """Run `state = body_fn(state)` while `cond_fn(state)` (a bool scalar) holds."""
    loc = user_location()
    leaves, s = flatten(init, "while_loop init", loc)
    state = _tensors(leaves)
    types = [(t.shape, t.dtype) for t in state]

    cond_body = _Body("while_cond", types, loc)
    pred = cond_body.call(cond_fn, unflatten(s, cond_body.tensors()))
    with cond_body.graph:
        pred = as_tensor(pred)
    if pred.shape != () or pred.dtype != "bool":
        raise DTypeError(f"while_loop: cond_fn must return a bool scalar, got "
                         f"{pred.node.type_str()}", loc)
    cond_region, cond_caps = cond_body.close([pred])

    body = _Body("while_body", types, loc)
    new = body.call(body_fn, unflatten(s, body.tensors()))
    with body.graph:
        new_leaves, new_s = flatten(new, "while_loop state", loc)
        _check_structure(new_s, s, "while_loop state", loc)
        new_t = _as_body_values(new_leaves, types, "while_loop state", loc)
    body_region, body_caps = body.close(new_t)
    node = bind_node("while", [t.node for t in state] + cond_caps + body_caps,
                     {"cond": cond_region, "body": body_region, "num_state": len(state),
                      "num_cond_captures": len(cond_caps)}, loc=loc)
    return unflatten(s, _results(node, len(state)))


# -- cond ----------------------------------------------------------------------------------

def cond(pred, true_fn, false_fn, *operands):
    """`true_fn(*operands)` if the bool scalar `pred` holds, else `false_fn(*operands)`;
    only the taken branch runs. Both must return the same structure, shapes and dtypes."""
    loc = user_location()
    pred = as_tensor(pred)
    if pred.shape != ():
        raise ShapeError(f"cond: the predicate must be a scalar, got {pred.node.type_str()}",
                         loc)
    if pred.dtype != "bool":
        pred = pred != 0
    leaves, s = flatten(list(operands), "cond operands", loc)
    ops = _tensors(leaves)
    types = [(t.shape, t.dtype) for t in ops]
    branches = []
    for name, fn in (("cond_true", true_fn), ("cond_false", false_fn)):
        b = _Body(name, types, loc)
        out = b.call(fn, *unflatten(s, b.tensors()))
        with b.graph:
            out_leaves, out_s = flatten(out, f"cond {name[5:]} branch", loc)
        branches.append((b, out_leaves, out_s))
    (tb, t_leaves, t_s), (fb, f_leaves, f_s) = branches
    if t_s != f_s:
        raise GraphcError(f"cond: the branches return different structures: true gives "
                          f"{_describe_structure(t_s)}, false {_describe_structure(f_s)}", loc)
    with tb.graph:
        t_vals = _tensors(t_leaves)
    expected = [(t.shape, t.dtype) for t in t_vals]
    with fb.graph:
        f_vals = _as_body_values(f_leaves, expected, "cond false branch (against the true "
                                 "branch)", loc)
    t_region, t_caps = tb.close(t_vals)
    f_region, f_caps = fb.close(f_vals)
    node = bind_node("cond", [pred.node] + [t.node for t in ops] + t_caps + f_caps,
                     {"true": t_region, "false": f_region, "num_operands": len(ops),
                      "num_true_captures": len(t_caps)}, loc=loc)
    return unflatten(t_s, _results(node, len(t_vals)))


# -- fori_loop -------------------------------------------------------------------------------

def fori_loop(lower, upper, body_fn, init):
    """`state = body_fn(i, state)` for i in range(lower, upper). Python-int bounds give a
    scan (differentiable); Tensor bounds a while_loop."""
    loc = user_location()
    static = all(isinstance(b, (int, np.integer)) and not isinstance(b, bool)
                 for b in (lower, upper))
    if static:
        lower, upper = int(lower), int(upper)
        steps = max(upper - lower, 0)

        def step(state, i):
            return body_fn(i, state), None
        index = F.arange(lower, lower + steps, dtype="int32") if steps else \
            F.zeros((0,), "int32")
        state, _ = scan(step, init, index)
        return state
    lo, hi = as_tensor(lower), as_tensor(upper)
    for name, b in (("lower", lo), ("upper", hi)):
        if b.shape != () or b.dtype not in ("int32", "int64"):
            raise DTypeError(f"fori_loop: {name} must be an int or an integer scalar, got "
                             f"{b.node.type_str()}", loc)
    dtype = "int64" if "int64" in (lo.dtype, hi.dtype) else "int32"
    lo, hi = F.cast(lo, dtype), F.cast(hi, dtype)
    _, state = while_loop(lambda c: c[0] < hi, lambda c: (c[0] + 1, body_fn(c[0], c[1])),
                          (lo, init))
    return state


# -- inlining -------------------------------------------------------------------------------

def inline(region: Region, args: list, copies: dict | None = None) -> list[Tensor]:
    """The region's outputs computed in the current graph from `args` (one Tensor per
    parameter): its nodes copied, nested regions shared. `copies`, when given, receives
    {copy's node id: the region's node} for every copied node."""
    if len(args) != len(region.params):
        raise GraphcError(f"internal: {len(args)} arguments for a region of "
                          f"{len(region.params)} parameters")
    mapping = {p.id: a.node for p, a in zip(region.params, args)}
    graph = current_graph()
    for n in region.nodes():
        if n.id in mapping:
            continue
        if n.op == "parameter":
            raise GraphcError(f"internal: region parameter %{n.id} is not among its params")
        mapping[n.id] = bind_node(n.op, [mapping[i.id] for i in n.inputs], dict(n.attrs),
                                  graph=None if n.inputs else graph, name=None, loc=n.loc)
        if copies is not None:
            copies[mapping[n.id].id] = n
    return [Tensor(mapping[o.id]) for o in region.outputs]
