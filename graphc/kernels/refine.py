"""Refine a loop kernel's iteration space so that its indices become affine.

A reshape that merges dimensions makes the kernel index its operands with `i // c` and
`i % c` of the merged loop variable (im2col patches over N*H*W positions, pooling
windows, transposes of reshaped tensors). Iterating that variable as its mixed-radix
digits instead (i = a*c + b) lets the index simplifier turn those back into plain loop
variables: contiguous loads the vectorizer handles, instead of gathers behind integer
divisions. A refinement is kept only when it is cheaper by `_cost`: divisions in load
and store addresses weigh most (they make gathers), then all divisions, and a new
innermost loop shorter than a vector is charged for the vectorization it loses.
"""
from __future__ import annotations

from dataclasses import fields, replace

from graphc_runtime.dims import hint

from . import index as ix
from . import kernel as K


def refine_loop(kern: K.LoopKernel) -> K.LoopKernel:
    """`kern` with each loop variable split into the digits its divisions ask for, where
    `_cost` finds that cheaper."""
    for v in list(kern.loop_vars):
        if not isinstance(v, ix.IVar) or v.extent is not None:    # symbolic: left alone
            continue
        best, best_cost = kern, _cost(kern)
        for radices in _chains(_divisors(kern, v.name), v.hi + 1):
            digits, value = _digits(v, radices)
            trial = _substitute_kernel(kern, {v.name: value}, v, digits)
            cost = _cost(trial, kern)
            if cost < best_cost:
                best, best_cost = trial, cost
        kern = best
    return kern


ADDRESS_DIVISION = 8        # a division in an address: a gather instead of a vector load
SHORT_INNER_LOOP = 16       # an innermost loop shorter than a 16-lane vector


def _cost(kern, before=None) -> int:
    addresses, others = _index_exprs(kern)
    cost = ADDRESS_DIVISION * sum(_has_division(e) for e in addresses)
    cost += sum(_count_divisions(e) for e in addresses + others)
    inner = _innermost(kern)
    if before is not None and inner < min(16, _innermost(before)):
        cost += SHORT_INNER_LOOP * -(-16 // inner)   # more, the shorter it is
    return cost


def _innermost(kern) -> int:
    real = [v for v in kern.loop_vars if isinstance(v, ix.IVar)]
    return hint(ix.extent_of(real[-1])) if real else 1


def _count_divisions(e) -> int:
    return sum(isinstance(n, (ix.IDiv, ix.IMod)) for n in ix.subexpressions(e))


def _has_division(e) -> bool:
    return _count_divisions(e) > 0


def _digits(v: ix.IVar, radices: list):
    """New loop variables for v's digits (outermost first) and v's value in them."""
    extent = v.hi + 1
    bounds = [extent] + radices[::-1] + [1]          # e.g. 12544, 196, 14, 1
    digits, value = [], ix.const(0)
    for k in range(len(bounds) - 1):
        d = ix.var(f"{v.name}_{k}", bounds[k] // bounds[k + 1])
        digits.append(d)
        value = ix.add(value, ix.mul(d, bounds[k + 1]))
    return digits, value


def _chains(divisors: set, extent: int, limit: int = 6) -> list:
    """Every run c1 | c2 | ... (ascending) of the divisors that divide the extent, from
    the `limit` smallest candidates."""
    cands = sorted(c for c in divisors if 1 < c < extent and extent % c == 0)[:limit]
    chains = []
    for mask in range(1, 1 << len(cands)):
        chain = [c for k, c in enumerate(cands) if mask >> k & 1]
        if all(b % a == 0 for a, b in zip(chain, chain[1:])):
            chains.append(chain)
    return chains


def _index_exprs(kern):
    """The kernel's index computations: (store and load addresses, linearized as they are
    emitted; the other indices under its values: guards, iota, choices)."""
    seen, addresses, others = set(), [], []

    def walk_value(e):
        if id(e) in seen:
            return
        seen.add(id(e))
        if isinstance(e, K.Load):
            addresses.append(ix.linearize(e.index, e.buffer.shape))
            for i in e.index:
                walk_data(i)
            return
        for f in fields(e):
            walk_field(getattr(e, f.name))

    def walk_data(i):
        for n in ix.subexpressions(i):
            if isinstance(n, ix.IFromValue):
                walk_value(n.value)

    def walk_field(x):
        if isinstance(x, ix.IExpr):
            others.append(x)
            walk_data(x)
        elif isinstance(x, K.VExpr):
            walk_value(x)
        elif isinstance(x, tuple):
            for y in x:
                walk_field(y)

    for s in kern.stores:
        addresses.append(ix.linearize(s.index, s.buffer.shape))
        walk_value(s.value)
    return addresses, others


def _divisors(kern, name: str) -> set:
    addresses, others = _index_exprs(kern)
    return {n.c for e in addresses + others for n in ix.subexpressions(e)
            if isinstance(n, (ix.IDiv, ix.IMod)) and name in ix.variables(n.a)}


def _substitute_kernel(kern, sub: dict, old: ix.IVar, digits: list) -> K.LoopKernel:
    memo: dict = {}
    loop_vars = []
    for v in kern.loop_vars:
        loop_vars.extend(digits if v is old else [v])
    stores = [K.Store(s.buffer, _value(s.value, sub, memo),
                      tuple(substitute(i, sub, memo) for i in s.index)) for s in kern.stores]
    shape = tuple(ix.extent_of(v) if isinstance(v, ix.IVar) else 1 for v in loop_vars)
    return K.LoopKernel(kern.name, shape, tuple(loop_vars), stores)


def substitute(e: ix.IExpr, sub: dict, memo: dict) -> ix.IExpr:
    """e with the variables named in `sub` replaced (and simplified again)."""
    key = ("i", id(e))
    if key in memo:
        return memo[key]
    if isinstance(e, ix.IVar):
        out = sub.get(e.name, e)
    elif isinstance(e, ix.IConst):
        out = e
    elif isinstance(e, ix.IAdd):
        out = ix.add(substitute(e.a, sub, memo), substitute(e.b, sub, memo))
    elif isinstance(e, ix.IMul):
        out = ix.mul(substitute(e.a, sub, memo), e.c)
    elif isinstance(e, ix.IDiv):
        out = ix.floordiv(substitute(e.a, sub, memo), e.c)
    elif isinstance(e, ix.IMod):
        out = ix.mod(substitute(e.a, sub, memo), e.c)
    elif isinstance(e, ix.IClamp):
        out = ix.clamp(substitute(e.a, sub, memo), e.lo if e.low is None else e.low,
                       e.hi if e.high is None else e.high)
    elif isinstance(e, ix.ISize):
        out = e
    elif isinstance(e, ix.IProd):
        out = ix.mul(substitute(e.a, sub, memo), e.b.dim)
    elif isinstance(e, ix.ISymDiv):
        a = substitute(e.a, sub, memo)
        out = ix.mod(a, e.size) if e.mod else ix.floordiv(a, e.size)
    elif isinstance(e, ix.IFromValue):
        out = ix.from_value(_value(e.value, sub, memo))
    else:
        raise TypeError(f"unknown index expression {e!r}")
    memo[key] = out
    return out


def _value(e, sub: dict, memo: dict):
    """A value expression with its indices substituted (shared subtrees stay shared)."""
    key = ("v", id(e))
    if key in memo:
        return memo[key]
    changes = {}
    for f in fields(e):
        x = getattr(e, f.name)
        y = _field(x, sub, memo)
        if y is not x:
            changes[f.name] = y
    out = replace(e, **changes) if changes else e
    memo[key] = out
    return out


def _field(x, sub, memo):
    if isinstance(x, ix.IExpr):
        return substitute(x, sub, memo)
    if isinstance(x, K.VExpr):
        return _value(x, sub, memo)
    if isinstance(x, tuple):
        ys = tuple(_field(y, sub, memo) for y in x)
        return x if all(a is b for a, b in zip(x, ys)) else ys
    return x
