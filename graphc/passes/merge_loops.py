"""Merge scans that run the same body over the same operands into one loop.

A scan's VJP re-runs the forward scan with extra outputs (each step's incoming carries);
both scans share one body graph, so they are recognized here: same operands, length,
direction and body parameters, the same carries. The merged scan hands back the union of
their outputs and every `get` is renumbered: the forward pass runs once.
"""
from __future__ import annotations

from ..ir.region import Region
from .program import Program, rebuild


def _key(node):
    a = node.attrs
    body = a["body"]
    return (tuple(i.id for i in node.inputs), a["length"], a["reverse"], a["num_carry"],
            a["num_xs"], id(body.graph), tuple(p.id for p in body.params),
            tuple(o.id for o in body.outputs[:a["num_carry"]]))


def merge_loops(program: Program) -> Program:
    groups: dict = {}
    for n in program.live_nodes():
        if n.op == "scan":
            groups.setdefault(_key(n), []).append(n)
    plans = {}            # old scan id -> (group key, {old result index: new index})
    merged_region = {}
    for key, nodes in groups.items():
        if len(nodes) < 2:
            continue
        first = nodes[0]
        nc = first.attrs["num_carry"]
        outputs = list(first.attrs["body"].outputs[:nc])
        position = {}
        for n in nodes:
            remap = {k: k for k in range(nc)}
            for k, o in enumerate(n.attrs["body"].outputs[nc:], start=nc):
                if o.id not in position:
                    position[o.id] = len(outputs)
                    outputs.append(o)
                remap[k] = position[o.id]
            plans[n.id] = (key, remap)
        merged_region[key] = Region(first.attrs["body"].graph, first.attrs["body"].params,
                                    outputs)
    if not plans:
        return program
    built = {}

    def rewrite(builder, node, inputs):
        if node.id in plans:
            key, _ = plans[node.id]
            if key not in built:
                built[key] = builder.add("scan", inputs, dict(node.attrs,
                                                              body=merged_region[key]),
                                         like=node)
            return built[key]
        if node.op == "get" and node.inputs[0].id in plans:
            _, remap = plans[node.inputs[0].id]
            return builder.add("get", inputs, {"index": remap[node.attrs["index"]]},
                               like=node)
        return None
    return rebuild(program, rewrite)
