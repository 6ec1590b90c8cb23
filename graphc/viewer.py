"""The interactive viewer: one self-contained HTML page for a compiled program.

The page holds the graph as built, the optimized graph and the fused kernels (a switch
between the three), laid out in the browser by ELK's layered algorithm (vendored in
graphc/viewer_assets, no network needed), with kernels as clusters that collapse and
expand, pan and zoom, search, a details panel per node and kernel, tensor types on edge
hover, and the memory plan as a timeline. Every node element carries data-node="<id>"
and every kernel data-kernel="<index>".
"""
from __future__ import annotations

import json
import os
import re

import numpy as np

from graphc_runtime import dims as sym
from graphc_runtime.profile import compact_ops

from .viz import DISPLAY_SIZE, at_display_size  # noqa: F401 (DISPLAY_SIZE: the page size)

ASSETS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "viewer_assets")
COLLAPSE_ABOVE = 200          # kernels start collapsed in graphs with more nodes
SHORT = {"bool": "bool", "int32": "i32", "int64": "i64", "float16": "f16", "bfloat16": "bf16",
         "float32": "f32", "float64": "f64"}


def _dim_text(d) -> str:
    if isinstance(d, dict) and "__dim__" in d:
        return str(sym.Dim.from_json(d["__dim__"]))
    return str(d)


def type_str(node: dict) -> str:
    return f"{SHORT.get(node['dtype'], node['dtype'])}[{','.join(map(_dim_text, node['shape']))}]"


def _attr_text(value) -> str:
    """A short readable form of an attribute value (arrays as their type and a few values)."""
    def is_array(v):          # inline bytes, or a reference to an artifact's tensor
        return isinstance(v, dict) and ("__ndarray__" in v or "__tensor__" in v)
    if is_array(value):
        shape = value.get("shape", [])
        n = sym.prod(shape) if shape else 1
        return f"array {SHORT.get(value.get('dtype'), value.get('dtype'))}{list(shape)}" + \
            (" (scalar)" if n == 1 else "")
    if isinstance(value, dict) and "__tuple__" in value and \
            any(is_array(v) for v in value["__tuple__"]):
        return "(" + ", ".join(_attr_text(v) for v in value["__tuple__"]) + ")"
    if isinstance(value, dict) and ("__tuple__" in value or "__float__" in value):
        from .ir.serialize import _decode
        value = _decode(value)
    text = value if isinstance(value, str) else repr(value) \
        if isinstance(value, (tuple, float)) else json.dumps(value)
    return text if len(text) <= 120 else text[:117] + "..."


def _live(nodes: list, outputs) -> list:
    """The nodes the outputs need (all of them when the graph names no outputs)."""
    if not outputs:
        return nodes
    by_id = {n["id"]: n for n in nodes}
    seen, stack = set(), list(outputs)
    while stack:
        i = stack.pop()
        if i in seen or i not in by_id:
            continue
        seen.add(i)
        stack.extend(by_id[i]["inputs"])
    return [n for n in nodes if n["id"] in seen]


def _graph_view(graph_json: str, label: str, kernel_of: dict | None = None) -> dict:
    data = json.loads(graph_json)
    nodes = _live(data["nodes"], data.get("outputs"))
    outputs = set(data.get("outputs") or [])
    types = {n["id"]: type_str(n) for n in nodes}
    view_nodes = []
    for n in nodes:
        entry = {"id": n["id"], "op": n["op"], "type": types[n["id"]],
                 "name": n.get("name") or (n.get("attrs") or {}).get("name"),
                 "loc": n.get("loc"), "output": n["id"] in outputs,
                 "attrs": {k: _attr_text(v) for k, v in (n.get("attrs") or {}).items()
                           if k != "value" or not isinstance(v, dict)},
                 "inputs": [i for i in n["inputs"] if i in types]}
        if n["op"] == "constant" and isinstance((n.get("attrs") or {}).get("value"), dict):
            entry["attrs"]["value"] = _attr_text(n["attrs"]["value"])
        if kernel_of is not None and n["id"] in kernel_of:
            entry["kernel"] = kernel_of[n["id"]]
        view_nodes.append(entry)
    edges = [{"from": i, "to": n["id"], "type": types[i]} for n in view_nodes
             for i in n["inputs"]]
    view = {"label": label, "nodes": view_nodes, "edges": edges,
            "clusters": kernel_of is not None}
    if kernel_of is None:
        groups = namespaces(view_nodes)
        if groups:
            view["groups"] = groups
    return view


NAMESPACE_DEPTH = 3           # encoder/layer.3/attention: deeper levels stay in their group
_ONNX_NODE = re.compile(r" node '(.+)' \([A-Za-z0-9_]+\)$")


def namespace_of(loc) -> str | None:
    """The namespace of a node imported from a model ('encoder/layer.3/attention' of the
    ONNX node '/encoder/layer.3/attention/self/MatMul'), or None."""
    m = _ONNX_NODE.search(loc or "")
    if not m:
        return None
    parts = [p for p in m.group(1).split("/") if p]
    return "/".join(parts[:-1][:NAMESPACE_DEPTH]) or None


def namespaces(view_nodes: list) -> list:
    """The view's namespaces with two or more nodes, as collapsible groups: sets each
    such node's "group" (an index into the returned [{name, count}])."""
    counts: dict = {}
    for n in view_nodes:
        ns = namespace_of(n.get("loc"))
        if ns:
            counts[ns] = counts.get(ns, 0) + 1
    names = [ns for ns, c in counts.items() if c >= 2]
    index = {ns: k for k, ns in enumerate(names)}
    for n in view_nodes:
        k = index.get(namespace_of(n.get("loc")))
        if k is not None:
            n["group"] = k
    return [{"name": ns, "count": counts[ns]} for ns in names]


def page_data(name: str, optimized_json: str, fusion: dict, manifest: dict,
              source_json: str | None = None) -> dict:
    """Everything the page shows, as JSON-able data (a symbolic program's sizes at
    DISPLAY_SIZE for each symbol, listed under "symbols")."""
    shown: dict = {}
    kernels = at_display_size(manifest.get("kernels") or [], shown)
    memory = at_display_size(manifest.get("memory") or {}, shown)
    groups = {g["id"]: g for g in fusion.get("groups", [])}
    kernel_of = {}
    kernel_list = []
    for k, entry in enumerate(kernels):
        group = groups.get(entry.get("group"))
        members = sorted(set(group["members"]) | set(group["roots"])) if group else []
        for m in members:
            kernel_of.setdefault(m, k)
        buffers = [b for b in memory.get("buffers", []) if b.get("first") == k]
        kernel_list.append({"index": k, "name": entry.get("name", f"k{k}"),
                            "kind": entry.get("kind", "kernel"), "ops": entry.get("ops", []),
                            "fused": ", ".join(compact_ops(entry.get("ops", []))),
                            "read": entry.get("read", 0), "written": entry.get("written", 0),
                            "flops": entry.get("flops", 0), "nodes": members,
                            "writes": [{"buffer": b["buffer"], "offset": b["offset"],
                                        "bytes": b["bytes"]} for b in buffers]})
    views = {}
    if source_json:
        views["graph"] = _graph_view(source_json, "graph (as built)")
    views["optimized"] = _graph_view(optimized_json, "optimized graph")
    views["fused"] = _graph_view(optimized_json, "fused kernels", kernel_of)
    fused_ids = {n["id"] for n in views["fused"]["nodes"]}
    for kern in kernel_list:          # a node fused into several kernels is drawn in its first
        kern["nodes"] = [m for m in kern["nodes"] if m in fused_ids and
                         kernel_of.get(m) == kern["index"]]
    return {"name": name, "views": views, "default_view": "fused", "kernels": kernel_list,
            "memory": memory, "collapse_above": COLLAPSE_ABOVE, "symbols": shown}


def _asset(name: str) -> str:
    with open(os.path.join(ASSETS, name), encoding="utf-8") as f:
        return f.read()


def _script_safe(text: str) -> str:
    """Text that can sit inside a <script> element (no early </script>)."""
    return text.replace("</", "<\\/")


def to_html(data: dict) -> str:
    """The self-contained page: styles, ELK, the viewer script and the data inline."""
    title = data["name"].replace("&", "&amp;").replace("<", "&lt;")
    payload = json.dumps(data, separators=(",", ":"))
    return (f"<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
            f"<meta name='viewport' content='width=device-width, initial-scale=1'>"
            f"<title>{title} — graphc</title><link rel='icon' href='data:,'><style>{_asset('viewer.css')}</style></head>"
            f"<body data-ready='0'>{BODY}"
            f"<script type='application/json' id='graphc-data'>{_script_safe(payload)}</script>"
            f"<script>{_script_safe(_asset('elk.bundled.js'))}</script>"
            f"<script>{_script_safe(_asset('viewer.js'))}</script></body></html>\n")


BODY = """
<header>
  <h1 id="title"></h1>
  <label>view <select id="view"></select></label>
  <input id="search" type="search" placeholder="search name, op or %id" autocomplete="off">
  <span id="matches"></span>
  <button id="expand-all" title="expand every kernel or namespace">expand all</button>
  <button id="collapse-all" title="collapse every kernel or namespace">collapse all</button>
  <button id="fit">fit</button>
  <span id="status">laying out...</span>
</header>
<main>
  <div id="canvas-wrap"><svg id="canvas" xmlns="http://www.w3.org/2000/svg">
    <defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7"
      markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z"/></marker></defs>
    <g id="viewport"></g></svg>
    <svg id="minimap" xmlns="http://www.w3.org/2000/svg" preserveAspectRatio="xMidYMid meet">
    </svg></div>
  <aside id="details"><p class="hint">Click a node or a kernel for its details; click a
    kernel's (or an imported model's namespace's) title to collapse or expand it; drag to
    pan, wheel to zoom (zoomed out, kernels and namespaces are labelled instead of nodes);
    click or drag in the minimap to move there.</p></aside>
</main>
<section id="memory-section"><h2>Memory plan</h2><p id="memory-summary"></p>
  <svg id="memory" xmlns="http://www.w3.org/2000/svg"></svg></section>
<div id="tooltip" hidden></div>
"""


def _source_json_of_executable(exe) -> str | None:
    sections = exe._info["sections"] if exe._info else {}
    blob = sections.get("source_graph.json")
    return blob.decode() if blob else None


def executable_page(exe, name: str | None = None) -> str:
    """The viewer page of a compiled Executable."""
    if exe._info is None:
        raise ValueError("this executable keeps no program description to draw")
    sections = exe._info["sections"]
    manifest = exe.manifest()
    data = page_data(name or manifest.get("graph_name", "graph"),
                     sections["graph.json"].decode(), json.loads(sections["fusion.json"]),
                     manifest, _source_json_of_executable(exe))
    return to_html(data)


def model_page(model, name: str | None = None) -> str:
    """The viewer page of a loaded artifact (graphc_runtime.Model)."""
    source = model._sections.get("source_graph.json")
    data = page_data(name or model.manifest.get("graph_name", "graph"), model.graph_json(),
                     model.fusion_plan(), model.manifest, source.decode() if source else None)
    return to_html(data)
