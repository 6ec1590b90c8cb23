"""Drop what a scan does not need to carry or hand back.

- A carry the body hands back unchanged (its new value is its own parameter) is not
  carried: it becomes a captured value, and its result is the initial value.
- Stacked outputs nobody reads are not computed (the body no longer returns them), and
  one body value stacked twice is stacked once.
"""
from __future__ import annotations

from ..ir.region import Region
from .program import Program, rebuild


def _plan(node, used: set):
    a = node.attrs
    body, nc, nx = a["body"], a["num_carry"], a["num_xs"]
    through = [j for j in range(nc) if body.outputs[j] is body.params[j]]
    first_of, same = {}, {}
    for k in range(nc, len(body.outputs)):
        if k in used:
            same[k] = first_of.setdefault(body.outputs[k].id, k)
    keep_y = sorted(set(same.values()))
    if not through and len(keep_y) == len(body.outputs) - nc:
        return None
    keep_c = [j for j in range(nc) if j not in through]
    params = [body.params[j] for j in keep_c] + list(body.params[nc:nc + nx]) + \
        [body.params[j] for j in through] + list(body.params[nc + nx:])
    outputs = [body.outputs[j] for j in keep_c] + [body.outputs[k] for k in keep_y]
    operands = keep_c + list(range(nc, nc + nx)) + through + \
        list(range(nc + nx, len(node.inputs)))
    remap = {j: n for n, j in enumerate(keep_c)}
    position = {k: len(keep_c) + n for n, k in enumerate(keep_y)}
    remap.update({k: position[first] for k, first in same.items()})
    return operands, Region(body.graph, params, outputs), len(keep_c), remap, set(through)


def prune_loops(program: Program) -> Program:
    nodes = program.live_nodes()
    used: dict = {}
    for n in nodes:
        if n.op == "get":
            used.setdefault(n.inputs[0].id, set()).add(n.attrs["index"])
    plans = {}
    for n in nodes:
        if n.op == "scan":
            p = _plan(n, used.get(n.id, set()))
            if p is not None:
                plans[n.id] = p
    if not plans:
        return program
    built = {}

    def rewrite(builder, node, inputs):
        if node.id in plans:
            operands, region, nc, _, _ = plans[node.id]
            new = builder.add("scan", [inputs[k] for k in operands],
                              dict(node.attrs, body=region, num_carry=nc), like=node)
            built[node.id] = (new, inputs)
            return new
        if node.op == "get" and node.inputs[0].id in plans:
            _, _, _, remap, through = plans[node.inputs[0].id]
            new, old_inputs = built[node.inputs[0].id]
            k = node.attrs["index"]
            if k in through:
                return old_inputs[k]            # the initial value, unchanged
            return builder.add("get", [new], {"index": remap[k]}, like=node)
        return None
    return rebuild(program, rewrite)
