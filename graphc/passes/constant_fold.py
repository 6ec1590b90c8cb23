"""Constant folding through the reference interpreter, for small results only.

A node whose operands are all constants (or iota) is evaluated with its numpy reference
and replaced by a constant, unless its result has more than MAX_ELEMENTS elements
(large constants cost memory and bandwidth; broadcasts of scalars stay views).
"""
from __future__ import annotations

import numpy as np

from graphc_runtime.dims import is_symbolic

from ..ir.primitive import lookup
from .program import Program, rebuild

MAX_ELEMENTS = 1024
_NEVER = {"parameter", "variable", "constant", "rng", "all_reduce", "all_gather",
          "reduce_scatter", "send", "recv",    # messages
          "broadcast_in_dim",     # broadcasts stay views
          "scan", "while", "cond", "get"}          # loops may run long; tuples are no arrays


def _constant_value(node):
    """The value of a constant, or of a broadcast of one; else None."""
    if node.op == "constant":
        return node.attrs["value"]
    if node.op == "broadcast_in_dim" and node.inputs[0].op == "constant" and \
            not is_symbolic(node.shape):
        return lookup(node.op).impl([node.inputs[0].attrs["value"]], node.attrs, node)
    return None


def constant_fold(program: Program, max_elements: int = MAX_ELEMENTS) -> Program:
    def rewrite(builder, node, inputs):
        if node.op in _NEVER or not inputs or is_symbolic(node.shape) or \
                node.size > max_elements:
            return None
        values = [_constant_value(i) for i in inputs]
        if any(v is None for v in values):
            return None
        value = lookup(node.op).impl(values, node.attrs, node)
        value = np.array(value, copy=True)
        value.setflags(write=False)
        return builder.add("constant", (), {"value": value}, like=node)

    return rebuild(program, rewrite)
