"""Static drawings of a compiled program: Graphviz DOT with fusion groups as clusters,
and the memory plan as SVG (or PNG through matplotlib when it is installed). The
interactive HTML page is graphc.viewer."""
from __future__ import annotations

import html
import json

SHORT = {"bool": "bool", "int32": "i32", "int64": "i64", "float16": "f16", "bfloat16": "bf16",
         "float32": "f32", "float64": "f64"}
COLORS = ["#fde2e4", "#e2ece9", "#dfe7fd", "#fff1e6", "#e8e8e4", "#d8f3dc", "#f0efeb",
          "#e9edc9", "#cddafd", "#fad2e1"]


class ProgramView:
    """Nodes, edges, fusion groups and memory plan of a program, from artifact data."""

    def __init__(self, graph_json: str, fusion: dict, memory: dict, name: str = "graph"):
        data = json.loads(graph_json)
        self.name = data.get("name", name)
        live = set()
        nodes = {n["id"]: n for n in data["nodes"]}
        stack = list(data.get("outputs") or [])
        while stack:
            i = stack.pop()
            if i in live:
                continue
            live.add(i)
            stack.extend(nodes[i]["inputs"])
        self.nodes = [n for n in data["nodes"] if n["id"] in live or not data.get("outputs")]
        self.groups = fusion.get("groups", [])
        self.outputs = set(fusion.get("outputs", []))
        self.memory = memory or {}
        self.cluster = {}
        for g in self.groups:
            for r in g["roots"]:
                self.cluster.setdefault(r, g["id"])
        for g in self.groups:
            for m in g["members"]:
                self.cluster.setdefault(m, g["id"])

    @staticmethod
    def type_str(n) -> str:
        return f"{SHORT.get(n['dtype'], n['dtype'])}[{','.join(map(str, n['shape']))}]"

    def label(self, n) -> str:
        extra = ""
        if n["op"] in ("parameter", "variable"):
            extra = f" {n['attrs'].get('name', '')}"
        return f"%{n['id']} {n['op']}{extra}\\n{self.type_str(n)}"


def to_dot(view: ProgramView) -> str:
    """Graphviz DOT: one cluster per fusion group, edges labelled with shapes."""
    lines = [f'digraph "{view.name}" {{', "  rankdir=TB;",
             '  node [shape=box, style="rounded,filled", fillcolor=white, fontname="Helvetica"];']
    by_group: dict = {}
    for n in view.nodes:
        by_group.setdefault(view.cluster.get(n["id"]), []).append(n)
    kinds = {g["id"]: g["kind"] for g in view.groups}
    for gid, members in by_group.items():
        indent = "  "
        if gid is not None:
            color = COLORS[gid % len(COLORS)]
            lines.append(f'  subgraph "cluster_{gid}" {{')
            lines.append(f'    label="kernel {gid} ({kinds.get(gid, "")})"; style=filled; '
                         f'fillcolor="{color}";')
            indent = "    "
        for n in members:
            shape = ', shape=ellipse' if n["op"] in ("parameter", "variable", "constant") else ""
            peri = ", peripheries=2" if n["id"] in view.outputs else ""
            lines.append(f'{indent}n{n["id"]} [label="{view.label(n)}"{shape}{peri}];')
        if gid is not None:
            lines.append("  }")
    types = {n["id"]: view.type_str(n) for n in view.nodes}
    for n in view.nodes:
        for i in n["inputs"]:
            if i in types:
                lines.append(f'  n{i} -> n{n["id"]} [label="{types[i]}", fontsize=9];')
    lines.append("}")
    return "\n".join(lines) + "\n"


DISPLAY_SIZE = 64             # the size a symbolic dimension is drawn at unless given


def at_display_size(obj, env: dict):
    """obj with every Dim evaluated at the sizes in `env`; a symbol not there is drawn at
    DISPLAY_SIZE (and added to `env`)."""
    from graphc_runtime.dims import Dim
    if isinstance(obj, Dim):
        for s in obj.symbols():
            env.setdefault(s, DISPLAY_SIZE)
        return obj.evaluate(env)
    if isinstance(obj, dict):
        return {k: at_display_size(v, env) for k, v in obj.items()}
    if isinstance(obj, list):
        return [at_display_size(v, env) for v in obj]
    return obj


def concrete_memory(memory: dict, sizes: dict | None = None) -> tuple[dict, str]:
    """The memory plan with every symbolic size evaluated, at `sizes` {symbol: int} where
    given, else at DISPLAY_SIZE; and a line saying which sizes were used ('' for a program
    without symbols)."""
    symbols: dict = {}
    at_display_size(memory, symbols)            # the symbols the plan uses
    if not symbols:
        return memory, ""
    sizes = dict(sizes or {})
    unknown = sorted(set(sizes) - set(symbols))
    if unknown:
        raise ValueError(f"the program has no symbolic size named {unknown[0]!r}; its "
                         f"symbols: {', '.join(sorted(symbols))}")
    env = {s: int(n) for s, n in sizes.items()}
    memory = at_display_size(memory, env)
    given = ", ".join(f"{s}={env[s]}" + ("" if s in sizes else " (typical)")
                      for s in sorted(env))
    return memory, f"drawn at {given}; other sizes: --size NAME=N"


def memory_svg(memory: dict, sizes: dict | None = None) -> str:
    """Buffers as boxes: x = kernel steps alive, y = arena offset; symbolic sizes drawn
    at `sizes` (or a typical size, said on the picture)."""
    memory, at = concrete_memory(memory, sizes)
    buffers = memory.get("buffers", [])
    arena = max(memory.get("arena_bytes", 0), 1)
    steps = max((b["last"] for b in buffers), default=0) + 1
    width, height, left, top = 900, 420, 60, 30
    sx = (width - left - 20) / max(steps, 1)
    sy = (height - top - 40) / arena
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'font-family="Helvetica" font-size="10">',
             f'<text x="{left}" y="18">arena {arena} bytes, live lower bound '
             f'{memory.get("live_bytes_lower_bound", 0)} bytes, naive '
             f'{memory.get("naive_bytes", 0)} bytes</text>',
             f'<rect x="{left}" y="{top}" width="{steps * sx}" height="{arena * sy}" '
             f'fill="none" stroke="#444"/>']
    for k, b in enumerate(buffers):
        x = left + b["first"] * sx
        y = top + b["offset"] * sy
        bw = max((b["last"] - b["first"] + 1) * sx, 2)
        bh = max(b["bytes"] * sy, 1)
        parts.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{bw:.1f}" height="{bh:.1f}" '
                     f'fill="{COLORS[k % len(COLORS)]}" stroke="#333"><title>'
                     f'{html.escape(b["buffer"])}: {b["bytes"]} bytes at {b["offset"]}, steps '
                     f'{b["first"]}..{b["last"]}</title></rect>')
    parts.append(f'<text x="{left}" y="{height - 10}">kernel step 0 .. {steps - 1} '
                 f'(left to right); offset grows downwards'
                 f'{"; " + html.escape(at) if at else ""}</text></svg>')
    return "\n".join(parts)


def memory_png(memory: dict, path: str, sizes: dict | None = None) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise RuntimeError("PNG memory plots need matplotlib (pip install matplotlib); "
                           "use an .svg output instead") from None
    memory, at = concrete_memory(memory, sizes)
    fig, ax = plt.subplots(figsize=(10, 4))
    for k, b in enumerate(memory.get("buffers", [])):
        ax.broken_barh([(b["first"], b["last"] - b["first"] + 1)], (b["offset"], b["bytes"]),
                       facecolors=COLORS[k % len(COLORS)], edgecolors="#333")
    ax.set_xlabel("kernel step")
    ax.set_ylabel("arena offset (bytes)")
    ax.invert_yaxis()
    ax.set_title(f"arena {memory.get('arena_bytes', 0)} bytes" + (f" ({at})" if at else ""))
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
