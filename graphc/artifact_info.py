"""What an executable's artifact records besides its data: manifest fields and the
static sections (object code, optimized graph, dumps, fusion and memory plans)."""
from __future__ import annotations

import json

from graphc_runtime import __version__ as runtime_version
from graphc_runtime import derived

from .ir.serialize import dumps as graph_dumps
from .ir.source import is_declared


def kernel_entries(program, plan, lowered) -> list:
    """One entry per kernel in execution order: name, kind (loop, row, dot, conv, scatter,
    copy, collective), its fusion group, the ops it fuses, bytes read and written, flops."""
    ops = {n.id: n.op for n in program.graph.nodes}
    where = {n.id: n.loc for n in program.graph.nodes}
    groups = {g.id: g for g in plan.groups}
    out = []
    for kern, key, (name, read, written) in zip(lowered.kernels, lowered.kernel_groups,
                                                lowered.traffic):
        group = groups.get(key[1]) if key[0] == "g" else None
        out.append({"name": name, "kind": kern.kind if group is not None or
                    kern.kind == "collective" else "copy",
                    "group": group.id if group is not None else None,
                    "ops": [ops[m] for m in sorted(group.members)] if group is not None
                    else ["copy"],
                    "read": read, "written": written, "flops": kern.flops(),
                    "sources": provenance([where.get(m) for m in sorted(group.members)])
                    if group is not None else []})
    return out


def provenance(locations, most: int = 6) -> list:
    """The importer-declared origins (an ONNX model's nodes) among `locations`, in order,
    at most `most` (file:line locations of Python code are left out)."""
    out = []
    for loc in locations:
        if is_declared(loc) and loc not in out:
            out.append(loc)
    out.sort(key=lambda loc: " node " not in loc)          # the model's nodes first
    return out[:most]


def describe_program(program, plan, lowered, target: dict, code: dict, structure,
                     device: str = "cpu", source=None) -> dict:
    """Manifest fields and static sections; `target` describes the machine code was built
    for, `code` holds its sections (CPU: 'object'; CUDA: 'ptx')."""
    groups = [{"id": g.id, "kind": g.kind, "roots": [r.id for r in g.roots],
               "members": sorted(g.members)} for g in plan.groups]
    names = {b.id: b.name for b in lowered.buffers.values()}
    intervals = [{"buffer": names.get(b, str(b)), "offset": lowered.memory.offsets[b],
                  "first": lo, "last": hi, "bytes": size}
                 for b, (lo, hi, size) in lowered.memory.intervals.items()]
    manifest = {
        "graphc_version": runtime_version,
        "device": device,
        "target": target,
        "structure": structure,
        "arena_bytes": lowered.memory.arena_bytes,
        "memory": {"arena_bytes": lowered.memory.arena_bytes,
                   "live_bytes_lower_bound": lowered.memory.live_bytes_lower_bound,
                   "naive_bytes": lowered.naive_bytes, "buffers": intervals},
        "kernels": kernel_entries(program, plan, lowered),
        "constants": [[list(b.shape), b.dtype] for b, _ in lowered.constants],
        "graph_name": program.graph.name,
    }
    # the graphs refer to their arrays' bytes, kept once each in a section "tensor/<sha>"
    # (saving drops those whose bytes a constant's section already holds)
    tensors: dict = {}
    graph_json = graph_dumps(program.graph, program.roots(), include_variables=False,
                             tensors=tensors).encode()
    source_json = graph_dumps(source.graph, source.roots(), include_variables=False,
                              tensors=tensors).encode() if source is not None else None
    sections = {
        **code,
        # variable values live in their own sections
        "graph.json": graph_json,
        # the graph as the user built it (before the passes), for the viewer
        **({"source_graph.json": source_json} if source_json is not None else {}),
        **{f"tensor/{digest}": raw for digest, raw in tensors.items()},
        "fusion.json": json.dumps({"groups": groups,
                                   "outputs": [o.id for o in program.outputs],
                                   "updates": [[n, v.id] for n, v in program.updates]}).encode(),
    }

    def derived_constants() -> dict:
        """Constants computed from a tensor the graphs keep (a convolution's Winograd
        filters from its filters), to store as the recipe, not as bytes
        (graphc_runtime.derived); found when the program is saved, not at every compile."""
        if source is None:
            return {}
        filters = [n.attrs["value"] for n in source.graph.nodes if n.op == "constant" and
                   n.attrs["value"].size >= 64]
        return {str(k): entry for k, entry in derived.find(
            [value for _, value in lowered.constants], filters).items()}
    return {"manifest": manifest, "sections": sections, "derived": derived_constants}
