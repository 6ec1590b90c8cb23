"""VJP rules of the control-flow primitives, written with the control-flow API itself, so
that their results are ordinary IR (and can be differentiated again).

- scan: a scan in the opposite direction whose body applies the forward step's VJP. By
  default it reads the forward values that VJP needs (residuals) stacked by the forward
  pass; with checkpoint=True it reads each step's incoming carries and recomputes the
  step. Captured values' cotangents are summed in extra carries, or, when they are
  products of per-step values, computed after the loop as one product over the steps.
  The forward pass that saves values is the same scan with more outputs; `merge_loops`
  (a compiler pass) runs the two as one loop.
- cond: a cond of the branches' VJPs.
- while: refused, with the reason (the trip count is not known to the gradient).
"""
from __future__ import annotations

from graphc_runtime.dims import hint
from graphc_runtime.errors import GraphcError

from . import functions as F
from .api import Tensor
from .control import cond, inline, scan
from .ir import dtypes
from .ir.graph import TUPLE, current_graph
from .ir.ops.control import output_types
from .ir.primitive import bind as bind_node


def _is_float(t) -> bool:
    return dtypes.is_float(t.dtype)


def _local(t: Tensor) -> Tensor:
    """`t` as a value of the body being traced (captured when it is an outer value)."""
    return Tensor(current_graph().capture(t.node))


def _grads(vjp, outputs, wrt, cts) -> list:
    """`vjp` (graphc.autodiff.vjp, passed in: autodiff imports this module) of `outputs`
    with respect to `wrt`; [] when there is nothing to differentiate against."""
    return vjp(outputs, wrt, cts) if wrt else []


def scan_vjp(node, cts: list, vjp) -> list:
    a = node.attrs
    body, nc, nx, T = a["body"], a["num_carry"], a["num_xs"], a["length"]
    ins = [Tensor(i) for i in node.inputs]
    init, xs, caps = ins[:nc], ins[nc:nc + nx], ins[nc + nx:]
    types = output_types(node)
    ny = len(types) - nc
    fc = [j for j in range(nc) if _is_float(init[j])]
    fx = [k for k in range(nx) if _is_float(xs[k])]
    fcap = [k for k in range(len(caps)) if _is_float(caps[k])]
    fy = [k for k in range(ny) if dtypes.is_float(types[nc + k][1])]

    # the forward scan again, with each step's incoming carries as extra outputs
    saver = bind_node("scan", node.inputs, dict(a, body=body.with_outputs(
        body.outputs + body.params[:nc])), loc=node.loc)
    saved = [Tensor(bind_node("get", [saver], {"index": nc + ny + j}, loc=node.loc))
             for j in range(nc)]

    def ct_or_zeros(k):
        if cts[k] is not None:
            return cts[k]
        shape, dtype = types[k]
        return F.full(shape, 0, dtype, graph=node.graph)
    ct_final = [ct_or_zeros(j) for j in fc]
    ct_ys = [ct_or_zeros(nc + k) for k in fy]
    acc0 = [F.full(caps[k].shape, 0, caps[k].dtype, graph=node.graph) for k in fcap]

    stacked = {}        # capture k -> [(wrappers, dot attrs, y index of u, of v)]
    copies = {}         # backward body node id -> the forward body node it recomputes

    def step(carry, seq):
        ct_c, acc = carry
        x_t, c_t, cty_t = seq
        cap_in = [_local(c) for c in caps]
        outs = inline(body, list(c_t) + list(x_t) + cap_in, copies)
        outputs = [outs[j] for j in fc] + [outs[nc + k] for k in fy]
        wrt = [c_t[j] for j in fc] + [x_t[k] for k in fx] + [cap_in[k] for k in fcap]
        grads = _grads(vjp, outputs, wrt, list(ct_c) + list(cty_t))
        g_c, g_x = grads[:len(fc)], grads[len(fc):len(fc) + len(fx)]
        g_cap = grads[len(fc) + len(fx):]
        ys, new_acc = list(g_x), []
        for k, s_, g in zip(fcap, acc, g_cap):
            rest = s_
            for term in _terms(g):
                found = _stackable(term)
                if found is None:
                    rest = rest + term
                    continue
                wrappers, dot, u, v = found
                stacked.setdefault(k, []).append((wrappers, dot, len(ys), len(ys) + 1))
                ys += [u, v]
            new_acc.append(rest)
        return (g_c, new_acc), ys

    (ct_init, ct_caps), ys_out = scan(step, (ct_final, acc0), (xs, saved, ct_ys), length=T,
                                      reverse=not a["reverse"])
    if not a["checkpoint"]:
        results = list(ct_init) + list(ct_caps) + list(ys_out)
        saved_results = _save_residuals(node, results[0].node.inputs[0], copies,
                                        len(results)) if results else None
        if saved_results is not None:
            results = saved_results
            ct_init = results[:len(ct_init)]
            ct_caps = results[len(ct_init):len(ct_init) + len(ct_caps)]
            ys_out = results[len(ct_init) + len(ct_caps):]
    ct_xs = ys_out[:len(fx)]
    ct_caps = list(ct_caps)
    for n, k in enumerate(fcap):          # sum_t u_t . v_t as one product over the steps
        for wrappers, dot, iu, iv in stacked.get(k, []):
            term = _stacked_dot(ys_out[iu], ys_out[iv], dot)
            for op, attrs in reversed(wrappers):
                term = Tensor(bind_node(op, [term.node], attrs, loc=node.loc))
            ct_caps[n] = ct_caps[n] + term
    result = [None] * len(ins)
    for j, g in zip(fc, ct_init):
        result[j] = g
    for k, g in zip(fx, ct_xs):
        result[nc + k] = g
    for k, g in zip(fcap, ct_caps):
        result[nc + nx + k] = g
    return result


def _save_residuals(fwd, bwd, copies: dict, count: int) -> list | None:
    """The backward scan `bwd` reading the forward step's values from the forward pass
    (stacked per step) instead of recomputing them: every recomputed value that depends on
    the step and that the VJP reads becomes a sequence operand. Returns the new scan's
    results, or None when the VJP reads no such value (`bwd` stays as it is)."""
    a, b = fwd.attrs, bwd.attrs
    body, region = a["body"], b["body"]
    nodes = region.nodes()
    first_cap = b["num_carry"] + b["num_xs"]
    step_dependent = {p.id for p in region.params[:first_cap]}
    for n in nodes:
        if any(i.id in step_dependent for i in n.inputs):
            step_dependent.add(n.id)
    residuals = []
    for n in nodes:
        if n.id in copies or n.op == "parameter":
            continue
        for i in n.inputs:          # a VJP node reading a recomputed, step-dependent value
            if i.id in copies and i.id in step_dependent and i.dtype != TUPLE and \
                    i not in residuals:
                residuals.append(i)
    if not residuals:
        return None
    nc, ny = a["num_carry"], len(body.outputs) - a["num_carry"]
    saver = bind_node("scan", fwd.inputs, dict(a, body=body.with_outputs(
        body.outputs + body.params[:nc] + tuple(copies[r.id] for r in residuals))),
        loc=fwd.loc)
    stacked = [bind_node("get", [saver], {"index": nc + ny + nc + k}, loc=fwd.loc)
               for k in range(len(residuals))]
    # the backward body again, with the residuals as parameters (sequence slices)
    new_region = region.cut(residuals, first_cap, "residual")
    ins = list(bwd.inputs)
    node = bind_node("scan", ins[:first_cap] + stacked + ins[first_cap:],
                     dict(b, body=new_region, num_xs=b["num_xs"] + len(residuals)),
                     loc=bwd.loc)
    return [Tensor(bind_node("get", [node], {"index": k}, loc=bwd.loc)) for k in range(count)]


def _terms(g: Tensor) -> list:
    """`g` as a list of summands (its tree of same-shape adds, flattened)."""
    n = g.node
    if n.op == "add" and all(i.shape == n.shape for i in n.inputs):
        return _terms(Tensor(n.inputs[0])) + _terms(Tensor(n.inputs[1]))
    return [g]


def _stackable(term: Tensor):
    """(view wrappers, dot attrs, u, v) when `term` is views of a batch-free dot whose
    operands together are smaller than the result: summed over the steps, it is one
    product of the operands stacked along the steps (instead of a per-step accumulation
    of the result's size)."""
    wrappers, n = [], term.node
    while n.op in ("transpose", "reshape"):
        wrappers.append((n.op, dict(n.attrs)))
        n = n.inputs[0]
    if n.op != "dot_general" or n.attrs["lhs_batch"] or n.graph is not current_graph():
        return None
    u, v = n.inputs
    if hint(u.size + v.size) > hint(n.size):        # a symbolic size: for a typical one
        return None
    return wrappers, dict(n.attrs), Tensor(u), Tensor(v)


def _stacked_dot(us: Tensor, vs: Tensor, attrs: dict) -> Tensor:
    """sum over t of dot_general(us[t], vs[t]): the step axis contracted too."""
    shift = lambda dims: (0,) + tuple(d + 1 for d in dims)  # noqa: E731
    return Tensor(bind_node("dot_general", [us.node, vs.node], {
        "lhs_contracting": shift(attrs["lhs_contracting"]),
        "rhs_contracting": shift(attrs["rhs_contracting"]), "lhs_batch": (),
        "rhs_batch": ()}))


def cond_vjp(node, cts: list, vjp) -> list:
    a = node.attrs
    no, ntc = a["num_operands"], a["num_true_captures"]
    ins = [Tensor(i) for i in node.inputs]
    pred, ops = ins[0], ins[1:1 + no]
    tcaps, fcaps = ins[1 + no:1 + no + ntc], ins[1 + no + ntc:]
    types = output_types(node)
    fo = [k for k in range(len(types)) if dtypes.is_float(types[k][1])]
    cts_f = [cts[k] if cts[k] is not None else F.full(types[k][0], 0, types[k][1],
                                                      graph=node.graph) for k in fo]
    fops = [k for k in range(no) if _is_float(ops[k])]
    ft = [k for k in range(len(tcaps)) if _is_float(tcaps[k])]
    ff = [k for k in range(len(fcaps)) if _is_float(fcaps[k])]

    def branch(region, caps, fcap_idx, own_first):
        def fn(*args):
            op_in, ct_in = list(args[:no]), list(args[no:])
            cap_in = [_local(c) for c in caps]
            outs = inline(region, op_in + cap_in)
            wrt = [op_in[k] for k in fops] + [cap_in[k] for k in fcap_idx]
            grads = _grads(vjp, [outs[k] for k in fo], wrt, ct_in)
            g_ops, g_caps = grads[:len(fops)], grads[len(fops):]
            zeros_t = [F.full(tcaps[k].shape, 0, tcaps[k].dtype) for k in ft]
            zeros_f = [F.full(fcaps[k].shape, 0, fcaps[k].dtype) for k in ff]
            if own_first:
                return g_ops, g_caps, zeros_f
            return g_ops, zeros_t, g_caps
        return fn
    g_ops, g_t, g_f = cond(pred, branch(a["true"], tcaps, ft, True),
                           branch(a["false"], fcaps, ff, False), *ops, *cts_f)
    result = [None] * len(ins)
    for k, g in zip(fops, g_ops):
        result[1 + k] = g
    for k, g in zip(ft, g_t):
        result[1 + no + k] = g
    for k, g in zip(ff, g_f):
        result[1 + no + ntc + k] = g
    return result


def while_vjp(node, cts: list, vjp) -> list:
    raise GraphcError("cannot differentiate through a while_loop: its trip count depends "
                      "on the data, so the steps to run backwards are not known when the "
                      "gradient is built; use gc.fori_loop with int bounds or gc.scan "
                      "(a fixed number of steps)", node.loc)


CONTROL_RULES = {"scan": scan_vjp, "cond": cond_vjp, "while": while_vjp}
