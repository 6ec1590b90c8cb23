"""Index-set splitting of innermost loops around padding and shifted windows.

A padded or shifted read (`pad`, a stencil's `p[1:-1, :-2]`, a convolution's window)
becomes a load at a clamped index under a range check. Along the innermost loop the
clamps make the addresses non-contiguous, so LLVM vectorizes with gathers (a 128 x 128
five-point stencil ran 5x slower than a plain elementwise loop). Each clamp or check
whose index is `k*v + d` in the innermost variable v holds trivially on an interval of
v; the emitter runs the loop in three parts, the middle one (the interior) with those
guards dropped, so its loads are contiguous and it vectorizes like any loop.
"""
from __future__ import annotations

from graphc_runtime.dims import Dim

from ...kernels import index as ix
from ...kernels import kernel as K

MIN_INTERIOR = 8      # a shorter interior is not worth a second copy of the loop body


def guards(exprs, indices=(), fixed=frozenset()) -> dict:
    """{loop variable name: [IClamp / InRange guards affine in that variable alone]} in
    the value expressions `exprs` and the index expressions `indices` (stores'); with
    `fixed` (names of variables the emitter binds to constants), also those affine in
    one variable besides fixed ones (a phase plane's 2*j + r - 1, r fixed)."""
    found: dict = {}

    def index(e):
        for sub in ix.subexpressions(e):
            if isinstance(sub, ix.IClamp) and sub.low is None and sub.high is None:
                _add(found, sub, sub.a, fixed)

    for e in K.value_exprs(exprs):
        if isinstance(e, K.Load):
            for i in e.index:
                index(i)
        elif isinstance(e, K.InRange):
            index(e.index)
            if e.step == 1 and not isinstance(e.lo, Dim) and not isinstance(e.hi, Dim):
                _add(found, e, e.index, fixed)
        elif isinstance(e, (K.IndexValue, K.Choose)):
            index(e.index)
    for i in indices:
        index(i)
    return found


def _add(found, guard, e, fixed=frozenset()) -> None:
    aff = ix.affine(e)
    if aff is None:
        return
    free = [(name, k) for name, k in aff[0].items() if name not in fixed]
    if len(free) != 1:
        return
    (name, k), = free
    if k > 0:
        found.setdefault(name, []).append(guard)


def interval(var: ix.IVar, gs, values=None) -> tuple[int, int] | None:
    """[L, H) within [0, extent) where every guard in gs holds trivially, or None when
    that interior is short; `values` gives the fixed variables' values."""
    extent = ix.extent_of(var)
    if isinstance(extent, Dim):
        return None
    lo, hi = 0, extent
    for g in gs:
        coefs, d = ix.affine(g.a if isinstance(g, ix.IClamp) else g.index)
        k = coefs[var.name]
        d += sum(c * values[name] for name, c in coefs.items() if name != var.name)
        if isinstance(g, ix.IClamp):      # g.lo <= k*v + d <= g.hi
            low, high = _ceil(g.lo - d, k), (g.hi - d) // k + 1
        else:                             # g.lo <= k*v + d < g.hi
            low, high = _ceil(g.lo - d, k), _ceil(g.hi - d, k)
        lo, hi = max(lo, low), min(hi, high)
    if hi - lo < MIN_INTERIOR:
        return None
    return lo, hi


def _ceil(a: int, k: int) -> int:
    return -(-a // k)
