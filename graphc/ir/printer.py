"""HLO-like text form of a graph: one line per node, `%7 = add(%3, %6) : f32[256,10]`."""
from __future__ import annotations

import os

import numpy as np

from typing import TYPE_CHECKING

from . import dtypes
from .source import is_declared

if TYPE_CHECKING:              # graph.py imports this module to print itself
    from .graph import Graph, Node

_SMALL_CONSTANT = 8


def format_attr(value) -> str:
    if _is_region(value):
        return f"<region {len(value.params)}->{len(value.outputs)}>"
    if isinstance(value, np.ndarray):
        if value.size <= _SMALL_CONSTANT:
            return np.array2string(value.astype(np.float64) if value.dtype.kind == "V"
                                   else value, separator=",").replace("\n", "")
        return f"<{value.size} values>"
    if isinstance(value, tuple):
        return "(" + ",".join(format_attr(v) for v in value) + ("," if len(value) == 1 else "") + ")"
    if isinstance(value, str):
        return value
    return repr(value)


def format_node(node: Node, with_location: bool = False) -> str:
    args = ", ".join(f"%{i.id}" for i in node.inputs)
    hidden = ("shape", "dtype") if node.op in ("parameter", "variable") else ()
    attrs = ", ".join(f"{k}={format_attr(v)}" for k, v in node.attrs.items() if k not in hidden)
    text = f"%{node.id} = {node.op}({args})"
    if attrs:
        text += " {" + attrs + "}"
    text += f" : {node.type_str()}"
    notes = []
    if node.name and node.op not in ("parameter", "variable"):
        notes.append(node.name)
    if is_declared(node.loc):          # an importer's provenance (an ONNX node): always
        notes.append(node.loc)
    elif with_location and node.loc:
        path, _, line = node.loc.rpartition(":")
        notes.append(f"{os.path.basename(path)}:{line}")
    if notes:
        text += "   # " + " ".join(notes)
    for k, v in node.attrs.items():           # a control node's bodies, nested
        if _is_region(v):
            text += "\n" + _indent(format_region(k, v, with_location))
    return text


def _is_region(value) -> bool:
    from .region import Region
    return isinstance(value, Region)


def _indent(text: str) -> str:
    return "\n".join("    " + line for line in text.splitlines())


def format_region(label: str, region, with_location: bool = False) -> str:
    """`label(%params) { ... return %outputs }` for one region."""
    params = ", ".join(f"%{p.id}" for p in region.params)
    lines = [f"{label}({params}) {{"]
    lines += ["  " + line for n in region.nodes()
              for line in format_node(n, with_location).splitlines()]
    lines.append("  return " + ", ".join(f"%{o.id}" for o in region.outputs))
    lines.append("}")
    return "\n".join(lines)


def format_graph(graph: Graph, nodes=None, with_location: bool = False,
                 outputs=None) -> str:
    """The whole graph (or the given nodes) as text."""
    nodes = graph.nodes if nodes is None else nodes
    lines = [f"graph {graph.name} {{"]
    lines += ["  " + format_node(n, with_location) for n in nodes]
    if outputs:
        lines.append("  return " + ", ".join(f"%{o.id}" for o in outputs))
    lines.append("}")
    return "\n".join(lines)


def type_string(shape, dtype) -> str:
    return f"{dtypes.short(dtype)}[{','.join(map(str, shape))}]"
