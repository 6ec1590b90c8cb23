"""Reverse-mode differentiation, graph to graph.

`vjp` walks the graph backwards from the outputs and applies one VJP rule per primitive
(the RULES table below). Rules are written with primitives, so the gradient is ordinary
IR: it can be printed, optimized, compiled and differentiated again.
"""
from __future__ import annotations

import math

import numpy as np

from graphc_runtime.errors import DTypeError, GraphcError, ShapeError

from . import functions as F
from .api import Tensor, as_tensor, bind
from .tensor import constant
from .ir import dtypes
from .checkpoint import Recomputation
from .control_vjp import CONTROL_RULES
from .ir.ops.control import output_types
from .ir.primitive import lookup
from .ir.source import user_location


# -- helpers ------------------------------------------------------------------------

def _zeros(shape, dtype, graph) -> Tensor:
    return F.full(shape, 0, dtype, graph=graph)


def _unbroadcast(g: Tensor, x: Tensor, dims) -> Tensor:
    """Transpose of broadcast_in_dim(x -> g.shape, dims): sum the broadcast axes."""
    kept = set(dims)
    axes = [i for i in range(g.ndim) if i not in kept]
    axes += [d for i, d in enumerate(dims) if x.shape[i] == 1 and g.shape[d] != 1]
    out = F.sum(g, tuple(sorted(axes))) if axes else g
    return F.reshape(out, x.shape)


def _rebroadcast(g: Tensor, x: Tensor, axes) -> Tensor:
    """Broadcast a reduced `g` back over the reduced `axes` of x's shape."""
    kept = tuple(i for i in range(x.ndim) if i not in axes)
    return bind("broadcast_in_dim", g, shape=x.shape, broadcast_dimensions=kept)


# -- rules: (inputs, out, g, attrs) -> tuple of cotangents (None: no gradient) --------

def _elementwise_max_min(x, y, out, g, attrs, op):
    strict = (x > y) if op == "max" else (x < y)
    tie = x == y
    wx = F.cast(F.where(strict, 1.0, F.where(tie, 0.5, 0.0)), g.dtype)
    return g * wx, g * (1.0 - wx)


def _pow(x, y, out, g, attrs):
    gx = g * y * bind("pow", x, y - 1.0)
    gy = g * F.where(x == 0, 0.0, out * F.log(F.where(x == 0, 1.0, x)))
    return gx, gy


def _reduce_extreme(x, out, g, attrs):
    axes = attrs["axes"]
    mask = x == _rebroadcast(out, x, axes)
    w = F.cast(mask, g.dtype)
    count = _rebroadcast(F.sum(w, axes), x, axes)
    return (_rebroadcast(g, x, axes) * w / count,)


def _reduce_prod(x, out, g, attrs):
    axes = attrs["axes"]
    is_zero = x == 0
    nonzero_prod = F.prod(F.where(is_zero, 1.0, x), axes)
    zeros = _rebroadcast(F.sum(F.cast(is_zero, "int32"), axes), x, axes)
    gb, pb = _rebroadcast(g, x, axes), _rebroadcast(nonzero_prod, x, axes)
    safe_x = F.where(is_zero, 1.0, x)
    no_zero = gb * pb / safe_x
    one_zero = F.where(is_zero, gb * pb, 0.0)
    return (F.where(zeros == 0, no_zero, F.where(zeros == 1, one_zero, 0.0)),)


def _dot_general(lhs, rhs, out, g, attrs):
    lc, rc = attrs["lhs_contracting"], attrs["rhs_contracting"]
    lb, rb = attrs["lhs_batch"], attrs["rhs_batch"]
    lfree = [d for d in range(lhs.ndim) if d not in lc and d not in lb]
    rfree = [d for d in range(rhs.ndim) if d not in rc and d not in rb]
    nb = len(lb)
    g_batch = tuple(range(nb))
    g_lfree = tuple(range(nb, nb + len(lfree)))
    g_rfree = tuple(range(nb + len(lfree), g.ndim))

    def order_to(res, order):
        return F.transpose(res, [order.index(i) for i in range(len(order))])

    # lhs's gradient: g @ rhs^T, laid out (batch, lhs free, contracting); rhs's: lhs^T @ g,
    # with lhs first so that it comes out (batch, contracting, rhs free), a matmul's
    # weight gradient needing no transpose
    g_lhs = bind("dot_general", g, rhs, lhs_contracting=g_rfree, rhs_contracting=tuple(rfree),
                 lhs_batch=g_batch, rhs_batch=tuple(rb))
    g_lhs = order_to(g_lhs, list(lb) + lfree + [lc[rc.index(d)] for d in sorted(rc)])
    g_rhs = bind("dot_general", lhs, g, lhs_contracting=tuple(lfree), rhs_contracting=g_lfree,
                 lhs_batch=tuple(lb), rhs_batch=g_batch)
    g_rhs = order_to(g_rhs, list(rb) + [rc[lc.index(d)] for d in sorted(lc)] + rfree)
    return g_lhs, g_rhs


def _dilate(n, d):
    return 0 if n == 0 else 1 + d * (n - 1)


def _conv(x, w, out, g, attrs):
    strides, pad = attrs["window_strides"], attrs["padding"]
    ldil, rdil, groups = attrs["lhs_dilation"], attrs["rhs_dilation"], attrs["feature_group_count"]
    nsp = x.ndim - 2
    in_sp, k_sp, out_sp = x.shape[2:], w.shape[2:], g.shape[2:]
    n, c = x.shape[:2]
    o = w.shape[0]
    cg, og = c // groups, o // groups
    # input gradient: a conv of g with the flipped, in/out-swapped kernel
    lhs_pad = []
    for i in range(nsp):
        kd = _dilate(k_sp[i], rdil[i])
        before = kd - pad[i][0] - 1
        after = _dilate(in_sp[i], ldil[i]) + kd - 1 - _dilate(out_sp[i], strides[i]) - before
        lhs_pad.append((before, after))
    wt = F.reshape(w, (groups, og, cg) + k_sp)
    wt = F.transpose(wt, (0, 2, 1) + tuple(range(3, 3 + nsp)))
    wt = F.reshape(wt, (groups * cg, og) + k_sp)
    wt = bind("reverse", wt, dimensions=tuple(range(2, 2 + nsp)))
    gx = bind("conv", g, wt, window_strides=ldil, padding=tuple(lhs_pad), lhs_dilation=strides,
              rhs_dilation=rdil, feature_group_count=groups)
    # kernel gradient: a conv of the input (channels as batch) with g (batch as channels)
    rhs_pad = []
    for i in range(nsp):
        lo = pad[i][0]
        hi = (_dilate(out_sp[i], strides[i]) - _dilate(in_sp[i], ldil[i])
              + _dilate(k_sp[i], rdil[i]) - lo - 1)
        rhs_pad.append((lo, hi))
    xt = F.reshape(x, (n, groups, cg) + in_sp)
    xt = F.transpose(xt, (2, 1, 0) + tuple(range(3, 3 + nsp)))
    xt = F.reshape(xt, (cg, groups * n) + in_sp)
    gt = F.transpose(g, (1, 0) + tuple(range(2, 2 + nsp)))
    gw = bind("conv", xt, gt, window_strides=rdil, padding=tuple(rhs_pad), lhs_dilation=ldil,
              rhs_dilation=strides, feature_group_count=groups)
    gw = F.transpose(gw, (1, 0) + tuple(range(2, 2 + nsp)))
    if gw.shape != w.shape:      # defensive: the sizes above make them equal
        raise ShapeError(f"conv kernel gradient {gw.shape} != kernel {w.shape}")
    return gx, gw


def _slice(x, out, g, attrs):
    low, high, interior = [], [], []
    for s, st, n, m in zip(attrs["start_indices"], attrs["strides"], x.shape, out.shape):
        low.append(s)
        interior.append(st - 1)
        high.append(n - s - m - (max(m - 1, 0) * (st - 1) if st != 1 else 0))
    return (bind("pad", g, low=tuple(low), high=tuple(high), interior=tuple(interior),
                 value=0.0),)


def _window_view(x, out, g, attrs):
    """Transpose of window_view: each gradient element added at the position it read."""
    from .ir.ops.shape import window_positions
    lead = x.shape[:-1]
    pos = window_positions(attrs["sizes"], attrs["strides"]).reshape(-1)
    flat = bind("reshape", g, new_sizes=tuple(lead) + (pos.size,))
    idx = constant(pos, graph=x.graph)
    return (bind("scatter_add", _zeros(x.shape, x.dtype, x.graph), idx, flat,
                 axis=x.ndim - 1),)


def _pad(x, out, g, attrs):
    low, high, interior = attrs["low"], attrs["high"], attrs["interior"]
    if any(v < 0 for v in low + high):
        g = bind("pad", g, low=tuple(max(-v, 0) for v in low),
                 high=tuple(max(-v, 0) for v in high), interior=(0,) * g.ndim, value=0.0)
    starts = tuple(max(v, 0) for v in low)
    limits = tuple(s + (n - 1) * (it + 1) + 1 if n else s
                   for s, n, it in zip(starts, x.shape, interior))
    return (bind("slice", g, start_indices=starts, limit_indices=limits,
                 strides=tuple(it + 1 for it in interior)),)


def _concatenate(*args):
    *inputs, out, g, attrs = args
    dim, pos, grads = attrs["dimension"], 0, []
    for x in inputs:
        start = [0] * g.ndim
        limit = list(g.shape)
        start[dim], limit[dim] = pos, pos + x.shape[dim]
        pos += x.shape[dim]
        grads.append(bind("slice", g, start_indices=tuple(start), limit_indices=tuple(limit),
                          strides=(1,) * g.ndim))
    return tuple(grads)


def _collective(op):
    def rule(x, out, g, attrs):
        n = attrs["axis_size"]
        group = {"group": attrs["group"]} if attrs.get("group") is not None else {}
        if op == "all_reduce":
            total = bind("all_reduce", g, op="sum", axis_size=n, **group)
            if attrs["op"] == "sum":
                return (total,)
            if attrs["op"] == "mean":
                return (total * (1.0 / n),)
            return (F.where(x == out, total, 0.0),)
        if op == "all_gather":
            return (bind("reduce_scatter", g, axis=attrs["axis"], axis_size=n, **group),)
        return (bind("all_gather", g, axis=attrs["axis"], axis_size=n, **group),)
    return rule


SQRT_PI = math.sqrt(math.pi)

RULES = {
    "neg": lambda x, out, g, a: (-g,),
    "exp": lambda x, out, g, a: (g * out,),
    "log": lambda x, out, g, a: (g / x,),
    "log1p": lambda x, out, g, a: (g / (x + 1.0),),
    "expm1": lambda x, out, g, a: (g * (out + 1.0),),
    "tanh": lambda x, out, g, a: (g * (1.0 - out * out),),
    "logistic": lambda x, out, g, a: (g * (out * (1.0 - out)),),
    "sqrt": lambda x, out, g, a: (g / (out * 2.0),),
    "rsqrt": lambda x, out, g, a: (g * (out / x) * -0.5,),
    "abs": lambda x, out, g, a: (g * F.sign(x),),
    "sign": lambda x, out, g, a: (F.zeros_like(g),),
    "floor": lambda x, out, g, a: (F.zeros_like(g),),
    "ceil": lambda x, out, g, a: (F.zeros_like(g),),
    "round": lambda x, out, g, a: (F.zeros_like(g),),
    "sin": lambda x, out, g, a: (g * F.cos(x),),
    "cos": lambda x, out, g, a: (-(g * F.sin(x)),),
    "erf": lambda x, out, g, a: (g * F.exp(-(x * x)) * (2.0 / SQRT_PI),),
    "add": lambda x, y, out, g, a: (g, g),
    "sub": lambda x, y, out, g, a: (g, -g),
    "mul": lambda x, y, out, g, a: (g * y, g * x),
    "div": lambda x, y, out, g, a: (g / y, -(g * out / y)),
    "pow": _pow,
    "max": lambda x, y, out, g, a: _elementwise_max_min(x, y, out, g, a, "max"),
    "min": lambda x, y, out, g, a: _elementwise_max_min(x, y, out, g, a, "min"),
    "rem": lambda x, y, out, g, a: (g, -(g * F.cast(F.cast(x / y, "int64"), g.dtype))),
    "select": lambda p, t, f, out, g, a: (None, F.where(p, g, 0.0), F.where(p, 0.0, g)),
    "convert": lambda x, out, g, a: (F.cast(g, x.dtype),),
    "broadcast_in_dim": lambda x, out, g, a: (_unbroadcast(g, x, a["broadcast_dimensions"]),),
    "reshape": lambda x, out, g, a: (F.reshape(g, x.shape),),
    "transpose": lambda x, out, g, a: (F.transpose(g, tuple(np.argsort(a["permutation"]))),),
    "slice": _slice,
    "pad": _pad,
    "concatenate": _concatenate,
    "window_view": _window_view,
    "reverse": lambda x, out, g, a: (bind("reverse", g, dimensions=a["dimensions"]),),
    "reduce_sum": lambda x, out, g, a: (_rebroadcast(g, x, a["axes"]),),
    "reduce_max": _reduce_extreme,
    "reduce_min": _reduce_extreme,
    "reduce_prod": _reduce_prod,
    "dot_general": _dot_general,
    "conv": _conv,
    "gather": lambda x, i, out, g, a: (
        bind("scatter_add", _zeros(x.shape, x.dtype, x.graph), i, g, axis=a["axis"]), None),
    "scatter_add": lambda x, i, u, out, g, a: (g, None, bind("gather", g, i, axis=a["axis"])),
    "after": lambda x, *rest: (rest[-2],) + (None,) * (len(rest) - 3),   # deps: ordering
    "all_reduce": _collective("all_reduce"),
    "all_gather": _collective("all_gather"),
    "reduce_scatter": _collective("reduce_scatter"),
    # messages run backwards: a sent value's cotangent comes back from the peer
    "send": lambda x, out, g, a: (bind("recv", g, shape=x.shape, dtype=x.dtype,
                                       peer=a["peer"], tag=a["tag"] + 1),),
    "recv": lambda token, out, g, a: (F.cast(bind("send", g, peer=a["peer"],
                                                  tag=a["tag"] + 1), token.dtype),),
}


# -- the transformation -------------------------------------------------------------

def _differentiable(node) -> bool:
    return dtypes.is_float(node.dtype) or node.op in CONTROL_RULES


def vjp(outputs, wrt, cotangents) -> list[Tensor]:
    """Cotangents of `wrt` given cotangents of `outputs` (one per output), as Tensors.

    Tensors in `wrt` that the outputs do not depend on get zeros.
    """
    outputs = [outputs] if isinstance(outputs, Tensor) else list(outputs)
    wrt_list = [wrt] if isinstance(wrt, Tensor) else list(wrt)
    cotangents = [cotangents] if isinstance(cotangents, Tensor) or not isinstance(
        cotangents, (list, tuple)) else list(cotangents)
    loc = user_location()
    if len(cotangents) != len(outputs):
        raise GraphcError(f"vjp: {len(outputs)} outputs but {len(cotangents)} cotangents", loc)
    for t in outputs + wrt_list:
        if not isinstance(t, Tensor):
            raise GraphcError(f"vjp: expected Tensors, got {t!r}", loc)
    graph = outputs[0].graph
    for t in outputs + wrt_list:
        if t.graph is not graph:
            raise GraphcError("vjp: outputs and wrt must belong to one graph", loc)
    for t in wrt_list:
        if not _differentiable(t.node):
            raise DTypeError(f"cannot differentiate with respect to {t.node.describe()}: "
                             f"only float tensors have gradients", loc)
    cts: dict[int, list[Tensor]] = {}
    for o, c in zip(outputs, cotangents):
        c = as_tensor(c, graph=graph)
        if c.shape != o.shape:
            raise ShapeError(f"vjp: cotangent {c.node.type_str()} does not match output "
                             f"{o.node.describe()}", loc)
        if not _differentiable(o.node):
            continue
        cts.setdefault(o.node.id, []).append(F.cast(c, o.dtype))

    # only nodes on a path from some wrt to some output carry cotangents
    wrt_ids = {t.node.id for t in wrt_list}
    needed = graph.ancestors([o.node for o in outputs])
    reaches = set()
    for node in needed:
        if node.id in wrt_ids or any(i.id in reaches for i in node.inputs):
            reaches.add(node.id)

    results: dict[int, dict[int, list]] = {}    # control node id -> result -> cotangents
    recompute = Recomputation(graph)
    for node in reversed(needed):
        if node.id not in cts or node.id not in reaches or not node.inputs:
            continue
        prim = lookup(node.op)
        if not prim.differentiable or not _differentiable(node):
            continue
        region = recompute.region_of(node)
        if region is not None and region not in recompute.started:   # gc.checkpoint:
            recompute.start(region, _region_cotangents(cts, region))  # rules read copies
        if node.op == "get":           # a control node's result: collect per result
            src = node.inputs[0]
            results.setdefault(src.id, {}).setdefault(node.attrs["index"], []).extend(
                cts[node.id])
            cts.setdefault(src.id, [])
            continue
        if node.op in CONTROL_RULES:
            per = results.get(node.id, {})
            count = len(output_types(node))
            results_cts = [_accumulate(per[k]) if per.get(k) else None for k in range(count)]
            grads = CONTROL_RULES[node.op](recompute.copy(node), results_cts, vjp)
        else:
            g = _accumulate(cts[node.id])
            cts[node.id] = [g]
            rule = RULES.get(node.op)
            if rule is None:
                raise GraphcError(f"no differentiation rule for primitive {node.op!r}", loc)
            ins = [Tensor(recompute.copy(i)) for i in node.inputs]
            grads = rule(*ins, Tensor(recompute.copy(node)), g, node.attrs)
        for i, gi in zip(node.inputs, grads):
            if gi is None or i.id not in reaches or not _differentiable(i):
                continue
            if gi.shape != i.shape or gi.dtype != i.dtype:
                raise GraphcError(f"internal: VJP of {node.op} gave {gi.node.type_str()} for "
                                  f"operand {i.describe()}")
            cts.setdefault(i.id, []).append(gi)

    result = []
    for t in wrt_list:
        parts = cts.get(t.node.id)
        result.append(_accumulate(parts) if parts else _zeros(t.shape, t.dtype, graph))
    return result


def _region_cotangents(cts, region) -> list:
    """The cotangents reaching a checkpointed region when the backward pass gets there
    (each summed once, in place): what its recomputation is ordered after."""
    deps = []
    for nid in sorted(cts):
        if region[0] <= nid < region[1] and cts[nid]:
            cts[nid] = [_accumulate(cts[nid])]
            deps.append(cts[nid][0].node)
    return deps


def _accumulate(parts: list[Tensor]) -> Tensor:
    total = parts[0]
    for p in parts[1:]:
        total = total + p
    return total


def grad(y: Tensor, wrt) -> list[Tensor]:
    """d y / d wrt for a scalar float `y`; a list with one Tensor per element of `wrt`
    (a single Tensor `wrt` gives a one-element list)."""
    loc = user_location()
    if not isinstance(y, Tensor):
        raise GraphcError(f"grad: y must be a Tensor, got {y!r}", loc)
    if y.shape != ():
        raise ShapeError(f"grad: y must be a scalar, got {y.node.describe()}; use vjp for "
                         f"non-scalar outputs or reduce it first (e.g. .sum())", loc)
    if not dtypes.is_float(y.dtype):
        raise DTypeError(f"grad: y must be a float scalar, got {y.node.describe()}", loc)
    one = F.full((), 1, y.dtype, graph=y.graph)
    return vjp([y], [wrt] if isinstance(wrt, Tensor) else list(wrt), [one])


def register_vjp(op: str, rule) -> None:
    """Differentiate primitive `op` with `rule(*inputs, out, g, attrs)`: Tensors of its
    operands and result, the result's cotangent `g` and its attributes; it returns one
    cotangent per operand (None: no gradient), written with primitives."""
    prim = lookup(op)
    if not prim.differentiable:
        raise GraphcError(f"register_vjp: primitive {op!r} is declared not differentiable")
    if op in RULES:
        raise GraphcError(f"register_vjp: primitive {op!r} already has a VJP rule")
    RULES[op] = rule
