"""Sums of zero-padded pieces that do not overlap become one concatenate.

The VJP of slicing pads each piece's cotangent back to the full shape; the gradient of a
value sliced into parts (an LSTM's four gates, attention heads) is then a sum of pads,
and a fused kernel evaluates every piece at every element. As a concatenate (gaps filled
with zeros) each element evaluates the one piece it lies in. Exact up to the sign of zero.
"""
from __future__ import annotations

import numpy as np

from graphc_runtime.dims import Dim

from ..ir import dtypes
from .program import Program, rebuild
from .simplify import scalar_value


def _pieces(node):
    """(axis, [(start, stop, node or None for zeros)]) when `node` is a zero-padding of
    one piece along one axis, or a concatenate; else None."""
    if node.op == "pad" and node.attrs["value"] == 0 and not any(node.attrs["interior"]):
        lo, hi = node.attrs["low"], node.attrs["high"]
        axes = [d for d in range(node.ndim) if lo[d] or hi[d]]
        if len(axes) != 1 or min(lo) < 0 or min(hi) < 0:
            return None
        d = axes[0]
        stop = lo[d] + node.inputs[0].shape[d]
        return d, [(0, lo[d], None), (lo[d], stop, node.inputs[0]),
                   (stop, node.shape[d], None)]
    if node.op == "concatenate":
        d, start, out = node.attrs["dimension"], 0, []
        for part in node.inputs:
            stop = start + part.shape[d]
            out.append((start, stop, None if scalar_value(part) == 0 else part))
            start = stop
        return d, out
    return None


def pads_to_concat(program: Program) -> Program:
    def rewrite(builder, node, inputs):
        if node.op != "add" or any(i.shape != node.shape for i in inputs):
            return None
        a, b = _pieces(inputs[0]), _pieces(inputs[1])
        if a is None or b is None or a[0] != b[0] or \
                "pad" not in (inputs[0].op, inputs[1].op):
            return None
        axis = a[0]
        if any(isinstance(d, Dim) for d in node.shape):
            return None                         # piece bounds known at the call only
        filled = sorted(((s, e, n) for s, e, n in a[1] + b[1] if n is not None and e > s),
                        key=lambda piece: piece[:2])
        if any(filled[k][1] > filled[k + 1][0] for k in range(len(filled) - 1)):
            return None                                 # the pieces overlap
        parts, at = [], 0
        zero = None
        for s, e, n in filled + [(node.shape[axis], node.shape[axis], None)]:
            if s > at:                                  # a gap: zeros
                if zero is None:
                    zero = builder.add("constant", (), {"value": np.zeros(
                        (), dtypes.to_numpy(node.dtype))}, like=node)
                shape = node.shape[:axis] + (s - at,) + node.shape[axis + 1:]
                parts.append(builder.add("broadcast_in_dim", (zero,), {
                    "shape": shape, "broadcast_dimensions": ()}, like=node))
            if n is not None:
                parts.append(n)
            at = max(at, e)
        if len(parts) == 1:
            return parts[0]
        return builder.add("concatenate", parts, {"dimension": axis}, like=node)
    return rebuild(program, rewrite)
