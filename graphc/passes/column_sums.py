"""Sums over leading axes of a materialized float array as products with a ones vector.

reduce_sum of x (R..., K...) over its leading axes (a bias gradient: the sum over the
batch and time of a (T, B, N) cotangent) reads x column-wise, one strided pass per
output; as ones(R) @ x(R, K) it is one BLAS pass over x in memory order. Only for
operands that are buffers anyway (inputs, variables, products, loop results) and sums
long and wide enough to matter. In the CPU backend's pipeline only: the CUDA backend
has no BLAS and sums columns with a thread per column.
"""
from __future__ import annotations

import numpy as np

from graphc_runtime import dims as sym

from ..ir import dtypes
from .program import Program, rebuild

MIN_ROWS, MIN_COLUMNS = 256, 64
MATERIALIZED = {"parameter", "variable", "get", "dot_general", "winograd_conv2d", "conv"}


def column_sums(program: Program) -> Program:
    def rewrite(builder, node, inputs):
        if node.op != "reduce_sum" or node.dtype not in ("float32", "float64"):
            return None
        (x,) = inputs
        axes = tuple(sorted(node.attrs["axes"]))
        if not axes or axes != tuple(range(len(axes))) or x.op not in MATERIALIZED:
            return None
        rows = sym.prod(x.shape[:len(axes)])
        cols = sym.prod(x.shape[len(axes):])
        if sym.hint(rows) < MIN_ROWS or sym.hint(cols) < MIN_COLUMNS:
            return None
        one = builder.add("constant", (), {"value": np.ones((), dtypes.to_numpy(x.dtype))},
                          like=node)
        ones = builder.add("broadcast_in_dim", (one,), {"shape": (rows,),
                                                        "broadcast_dimensions": ()}, like=node)
        flat = builder.add("reshape", (x,), {"new_sizes": (rows, cols)}, like=node)
        out = builder.add("dot_general", (ones, flat), {
            "lhs_contracting": (0,), "rhs_contracting": (0,), "lhs_batch": (),
            "rhs_batch": ()}, like=node)
        return out if out.shape == node.shape else \
            builder.add("reshape", (out,), {"new_sizes": node.shape}, like=node)
    return rebuild(program, rewrite)
