"""Split long reductions over few rows into two levels, so threads can share them.

A sum (max, min, prod) over R >= MIN_SPLIT trailing elements for fewer than
MAX_ROWS rows becomes: reshape to (..., C, R/C), reduce the last axis (C partial results
per row, which threads compute in parallel), reduce the C partials. C depends only on R,
never on the thread count, so results are the same for any number of threads.
"""
from __future__ import annotations

from graphc_runtime import dims as sym

from .program import Program, rebuild

MIN_SPLIT = 1 << 20
MAX_ROWS = 64
CHUNKS = (256, 128, 64, 32, 16)
OPS = ("reduce_sum", "reduce_max", "reduce_min", "reduce_prod")


def _chunks(r: int):
    for c in CHUNKS:
        if r % c == 0 and r // c >= 4096:
            return c
    return None


def split_reductions(program: Program) -> Program:
    def rewrite(builder, node, inputs):
        if node.op not in OPS:
            return None
        (x,) = inputs
        axes = node.attrs["axes"]
        if tuple(axes) != tuple(range(x.ndim - len(axes), x.ndim)):
            return None                                   # only trailing axes
        kept = x.shape[:x.ndim - len(axes)]
        rows = sym.prod(kept)
        r = sym.prod(x.shape[x.ndim - len(axes):])
        c = _chunks(r) if isinstance(r, int) and r >= MIN_SPLIT and \
            sym.hint(rows) < MAX_ROWS else None
        if c is None:
            return None
        split = builder.add("reshape", (x,), {"new_sizes": tuple(kept) + (c, r // c)})
        partial = builder.add(node.op, (split,), {"axes": (len(kept) + 1,)})
        return builder.add(node.op, (partial,), {"axes": (len(kept),)}, like=node)

    return rebuild(program, rewrite)
