"""Symbolic sizes in the native code: a Dim becomes i64 arithmetic over the symbols'
values, which every kernel of a symbolic program takes as trailing i64 arguments (the
program reads them from its table at the call)."""
from __future__ import annotations

import llvmlite.ir as ir

from graphc_runtime.dims import Dim

from .types import I64


def program_symbols(buffers) -> list:
    """The sorted symbol names the buffers' shapes use (the order of the values)."""
    out = set()
    for b in buffers:
        for d in b.shape:
            if isinstance(d, Dim):
                out |= d.symbols()
    return sorted(out)


def emit_dim(b: ir.IRBuilder, d, values: dict) -> ir.Value:
    """i64 value of `d` (an int or a Dim) with the symbols' values `values`."""
    if not isinstance(d, Dim):
        return ir.Constant(I64, int(d))
    total = None
    for mono, coef in sorted(d.terms.items()):
        term = ir.Constant(I64, coef) if not mono or coef != 1 else None
        for s in mono:
            term = values[s] if term is None else b.mul(term, values[s], flags=["nsw"])
        total = term if total is None else b.add(total, term, flags=["nsw"])
    return total
