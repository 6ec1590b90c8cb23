"""Unroll and jam for window sums: which loop of a nest to jam (see jam_variable); the
Emitter's _jammed emits it."""
from __future__ import annotations

from ...kernels import index as ix
from ...kernels import kernel as K

JAM = 4                   # rows of a window sum computed in one pass
JAM_MIN_LOADS = 3         # loads of one buffer along the row variable that make a window
INNER_MIN = 8             # the innermost loop at least this long (vectorized along it)


def jam_variable(stores, vars_) -> str | None:
    """The loop to unroll and jam around the innermost one, if any: a window sum (a
    depthwise convolution) loads one buffer at several rows of the output row variable
    (the loop around the innermost); computing JAM output rows per pass of the innermost
    loop loads each input row once for all of them (a 3 x 3 window: (JAM + 2) x 3 vector
    loads for JAM rows instead of 9 x JAM). None where the loops or the loads do not fit."""
    real = [v for v in vars_ if isinstance(v, ix.IVar)]
    if len(real) < 2 or not isinstance(ix.extent_of(real[-1]), int) or \
            ix.extent_of(real[-1]) < INNER_MIN:
        return None
    row = real[-2]
    extent = ix.extent_of(row)
    if not isinstance(extent, int) or extent < JAM:
        return None
    exprs = K.value_exprs([s.value for s in stores])
    if any(isinstance(e, (K.Choose, K.Acc, K.RngValue)) for e in exprs):
        return None                      # not plain loads: leave the loops as they are
    counts: dict = {}
    for e in exprs:
        if isinstance(e, K.Load) and any(row.name in ix.variables(i) for i in e.index):
            counts[e.buffer.id] = counts.get(e.buffer.id, 0) + 1
    return row.name if max(counts.values(), default=0) >= JAM_MIN_LOADS else None
