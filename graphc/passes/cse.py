"""Common-subexpression elimination: one node per (op, inputs, attributes).

Sources with identity (parameters, variables) and rng (keyed, but two draws with the
same key are equal by definition, so rng is merged too) are keyed by their attributes.
Constants are keyed by dtype, shape and bytes. Sends and receives are never merged (each
is one message).
"""
from __future__ import annotations

import numpy as np

from ..ir.region import Region
from .program import Program, rebuild


def _attr_key(value):
    if isinstance(value, Region):
        return ("region", id(value.graph), tuple(p.id for p in value.params),
                tuple(o.id for o in value.outputs))
    if isinstance(value, np.ndarray):
        return ("array", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, tuple):
        return tuple(_attr_key(v) for v in value)
    if isinstance(value, float) and value != value:
        return ("nan",)
    return (type(value).__name__, value)


def cse(program: Program) -> Program:
    seen: dict = {}

    def rewrite(builder, node, inputs):
        if node.op in ("send", "recv"):
            return builder.copy(node, inputs)
        key = (node.op, tuple(i.id for i in inputs),
               tuple(sorted((k, _attr_key(v)) for k, v in node.attrs.items())))
        if key in seen:
            return seen[key]
        new = builder.copy(node, inputs)
        seen[key] = new
        return new

    return rebuild(program, rewrite)
