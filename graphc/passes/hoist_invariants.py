"""Loop-invariant code motion: body values of a scan or while_loop that depend only on
captured values are computed once, before the loop, and passed in as new captures.

Views and broadcasts are not hoisted on their own (inside the body they cost nothing:
fusion folds them into index arithmetic; outside they would become buffers); they move
only as operands of hoisted work. Nested loops are left where they are.
"""
from __future__ import annotations

from ..ir.primitive import lookup
from ..ir.region import Region
from .program import Program, rebuild

_SOURCES = {"parameter", "constant", "iota", "variable"}


def _plan(region: Region, captured: set):
    """(ids of hoisted nodes, frontier nodes: hoisted values the body still reads)."""
    invariant, reads_capture, hoisted = set(), set(), set()
    nodes = region.nodes()
    for n in nodes:
        if n.op == "parameter":
            if n.id in captured:
                invariant.add(n.id)
                reads_capture.add(n.id)
            continue
        if lookup(n.op).kind == "control" or n.op == "rng":
            continue
        if all(i.id in invariant for i in n.inputs):
            invariant.add(n.id)
            if any(i.id in reads_capture for i in n.inputs):
                reads_capture.add(n.id)
                if n.op not in _SOURCES and not lookup(n.op).remap:
                    hoisted.add(n.id)
    # a hoisted node's invariant operands move with it
    for n in reversed(nodes):
        if n.id in hoisted:
            hoisted.update(i.id for i in n.inputs if i.id in invariant and
                           i.op != "parameter")
    frontier = []
    outputs = {o.id for o in region.outputs}
    users = {n.id: [] for n in nodes}
    for n in nodes:
        for i in n.inputs:
            users[i.id].append(n)
    for n in nodes:
        if n.id in hoisted and (n.id in outputs or any(
                u.id not in hoisted for u in users[n.id])):
            frontier.append(n)
    return hoisted, frontier


def _split(builder, region: Region, operands: dict, captured: set):
    """Hoist out of `region`: returns (new region, outer values of its new captures);
    `operands` maps each captured parameter id to its outer node."""
    hoisted, frontier = _plan(region, captured)
    if not frontier:
        return None
    outer = dict(operands)
    for n in region.nodes():
        if n.id in hoisted:
            outer[n.id] = builder.add(n.op, [outer[i.id] for i in n.inputs], n.attrs, like=n)
    new = region.cut(frontier, len(region.params), "hoisted")
    return new, [outer[n.id] for n in frontier]


def hoist_invariants(program: Program) -> Program:
    def rewrite(builder, node, inputs):
        if node.op == "scan":
            a = node.attrs
            first = a["num_carry"] + a["num_xs"]
            body = a["body"]
            caps = {p.id: inputs[k] for k, p in enumerate(body.params) if k >= first}
            split = _split(builder, body, caps, set(caps))
            if split is None:
                return None
            region, extra = split
            return builder.add("scan", list(inputs) + extra, dict(a, body=region), like=node)
        if node.op == "while":
            a = node.attrs
            ns, ncc = a["num_state"], a["num_cond_captures"]
            state, ccaps, bcaps = inputs[:ns], inputs[ns:ns + ncc], inputs[ns + ncc:]
            cond, body = a["cond"], a["body"]
            c = _split(builder, cond, {p.id: ccaps[k - ns] for k, p in enumerate(cond.params)
                                       if k >= ns}, {p.id for p in cond.params[ns:]})
            b = _split(builder, body, {p.id: bcaps[k - ns] for k, p in enumerate(body.params)
                                       if k >= ns}, {p.id for p in body.params[ns:]})
            if c is None and b is None:
                return None
            cond, cextra = c if c is not None else (cond, [])
            body, bextra = b if b is not None else (body, [])
            return builder.add("while", list(state) + list(ccaps) + cextra + list(bcaps) +
                               bextra, dict(a, cond=cond, body=body,
                                            num_cond_captures=ncc + len(cextra)), like=node)
        return None
    return rebuild(program, rewrite)
