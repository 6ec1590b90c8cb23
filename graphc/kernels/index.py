"""Index expressions of the kernel IR: integer arithmetic over loop variables.

Each expression knows a conservative range [lo, hi] (inclusive) of its values; the
constructors fold constants and use the ranges to simplify the div/mod that reshapes
produce, so a reshape that only splits or merges dimensions costs no division.
"""
from __future__ import annotations

from dataclasses import dataclass

from graphc_runtime.dims import Dim, Undecidable

BIG = 1 << 62


@dataclass(frozen=True)
class IExpr:
    lo: int
    hi: int


@dataclass(frozen=True)
class IVar(IExpr):
    """Loop variable `name` in [0, extent): hi + 1, or `extent` when that is a symbolic
    Dim (hi is then BIG: only the call knows the bound)."""
    name: str
    extent: object = None


@dataclass(frozen=True)
class IConst(IExpr):
    value: int


@dataclass(frozen=True)
class IAdd(IExpr):
    a: IExpr
    b: IExpr


@dataclass(frozen=True)
class IMul(IExpr):
    a: IExpr
    c: int


@dataclass(frozen=True)
class IDiv(IExpr):
    """Floor division by a positive constant."""
    a: IExpr
    c: int


@dataclass(frozen=True)
class IMod(IExpr):
    """Floor modulo by a positive constant (result in [0, c))."""
    a: IExpr
    c: int


@dataclass(frozen=True)
class IClamp(IExpr):
    """a clamped into [lo, hi]; with a symbolic bound, into [low, high] (ints or Dims)
    while lo/hi keep the conservative range."""
    a: IExpr
    low: object = None
    high: object = None


@dataclass(frozen=True)
class ISize(IExpr):
    """A symbolic size (a Dim), known at the call."""
    dim: object


@dataclass(frozen=True)
class IProd(IExpr):
    """a * b (b a symbolic size): a stride that depends on the call's sizes."""
    a: IExpr
    b: IExpr


@dataclass(frozen=True)
class ISymDiv(IExpr):
    """a // size or a % size (`mod`) for a non-negative a and a symbolic size."""
    a: IExpr
    size: object
    mod: bool = False


@dataclass(frozen=True)
class IFromValue(IExpr):
    """A data-dependent index: the integer value of a value expression (gather)."""
    value: object


def var(name: str, extent) -> IExpr:
    """Loop variable over [0, extent); extent 1 is the constant 0, extent 0 a loop that
    runs no iteration; a symbolic extent (Dim) is bound at the call."""
    if isinstance(extent, Dim):
        return IVar(0, BIG, name, extent)
    return IConst(0, 0, 0) if extent == 1 else IVar(0, extent - 1, name)


def extent_of(v: IVar):
    """The number of values of loop variable v: an int or a Dim."""
    return v.extent if v.extent is not None else v.hi + 1


def const(c) -> IExpr:
    if isinstance(c, Dim):
        return size(c)
    return IConst(c, c, c)


def size(d) -> IExpr:
    """The index expression of a size: a constant, or an ISize for a Dim."""
    if not isinstance(d, Dim):
        return const(d)
    try:
        lo = 0 if d >= 0 else -BIG
    except Undecidable:
        lo = -BIG
    return ISize(lo, BIG, d)


def add(a: IExpr, b: IExpr) -> IExpr:
    if isinstance(a, IConst) and isinstance(b, IConst):
        return const(a.value + b.value)
    if isinstance(a, IConst) and a.value == 0:
        return b
    if isinstance(b, IConst) and b.value == 0:
        return a
    if isinstance(a, IConst):
        a, b = b, a
    if isinstance(a, IAdd) or isinstance(b, IAdd) or _scaled_mod(a)[0] is not None or \
            _scaled_mod(b)[0] is not None:
        terms = _recombine(_terms(a) + _terms(b))
        if len(terms) < len(_terms(a)) + len(_terms(b)):
            return _sum(terms)
    return IAdd(a.lo + b.lo, a.hi + b.hi, a, b)


def _divided(e: IExpr):
    """(x, c) with e == x // c (c == 1 for a plain expression)."""
    return (e.a, e.c) if isinstance(e, IDiv) else (e, 1)


def _recombine(terms: list) -> list:
    """(x // (c*m)) * (m*s) + ((x // c) % m) * s  ->  (x // c) * s: undo a reshape's split
    of an index (x // 1 is x), so that merging split dimensions back gives affine
    indices."""
    changed = True
    while changed:
        changed = False
        for i, t in enumerate(terms):
            if not (isinstance(t, IMul) and isinstance(t.a, IDiv)):
                continue
            x, c1 = t.a.a, t.a.c
            for j, u in enumerate(terms):
                m, scale = _scaled_mod(u)
                if j == i or m is None or x.lo < 0 or t.c != m.c * scale:
                    continue
                y, c2 = _divided(m.a)
                if y == x and c1 == c2 * m.c:
                    merged = mul(floordiv(x, c2), scale)
                    terms = [w for k, w in enumerate(terms) if k not in (i, j)] + [merged]
                    changed = True
                    break
            if changed:
                break
    return terms


def _scaled_mod(u):
    """(m, s) for u == m * s with m a modulo, else (None, 0)."""
    if isinstance(u, IMod):
        return u, 1
    if isinstance(u, IMul) and isinstance(u.a, IMod):
        return u.a, u.c
    return None, 0


def _split_below(a: IExpr, c: int):
    """(high, k, low) with a == high * k + low, k | c, 0 <= low < k: the terms whose
    coefficient is a multiple of k, and the rest, which stays below k. None if no
    such k > 1 exists."""
    terms = _terms(a)
    coefs = sorted({abs(_coef(t)) for t in terms if not isinstance(t, IConst)}, reverse=True)
    for k in coefs:
        if k <= 1 or c % k:
            continue
        high = [t for t in terms if not isinstance(t, IConst) and _coef(t) % k == 0]
        low = _sum(t for t in terms if t not in high)
        if high and 0 <= low.lo and low.hi < k:
            return _sum(_divide_exact(t, k) for t in high), k, low
    return None


def mul(a: IExpr, c) -> IExpr:
    if isinstance(c, Dim):
        if isinstance(a, IConst):
            return const(0) if a.value == 0 else size(c * a.value)
        lo = 0 if a.lo >= 0 else -BIG
        return IProd(lo, BIG, a, size(c))
    if c == 0:
        return const(0)
    if c == 1:
        return a
    if isinstance(a, IConst):
        return const(a.value * c)
    if isinstance(a, IMul):
        return mul(a.a, a.c * c)
    if isinstance(a, IAdd):                       # distribute: keeps terms separable
        return add(mul(a.a, c), mul(a.b, c))
    lo, hi = sorted((a.lo * c, a.hi * c))
    return IMul(lo, hi, a, c)


def _terms(e: IExpr) -> list[IExpr]:
    return _terms(e.a) + _terms(e.b) if isinstance(e, IAdd) else [e]


def _coef(t: IExpr) -> int:
    if isinstance(t, IConst):
        return t.value
    return t.c if isinstance(t, IMul) else 1


def _sum(terms) -> IExpr:
    out = const(0)
    for t in terms:
        out = add(out, t)
    return out


def _symbolic_divmod(a: IExpr, c, want_mod: bool) -> IExpr:
    """a // c or a % c for a symbolic size c: terms x*c split off exactly when the rest
    is a loop variable over [0, c) (what linearizing an index gives), else a division
    at run time."""
    terms = _terms(a)
    whole = [t.a for t in terms if isinstance(t, IProd) and t.b == size(c)]
    rest = [t for t in terms if not (isinstance(t, IProd) and t.b == size(c))]
    if whole and len(rest) == 1 and isinstance(rest[0], IVar) and rest[0].extent == c:
        return rest[0] if want_mod else _sum(whole)
    if not whole and len(rest) == 1 and isinstance(rest[0], IVar) and rest[0].extent == c:
        return rest[0] if want_mod else const(0)
    if a.lo < 0:
        raise Undecidable(f"a possibly negative index divided by the symbolic size {c}")
    return ISymDiv(0, BIG, a, c, want_mod)


def floordiv(a: IExpr, c: int) -> IExpr:
    if isinstance(c, Dim):
        return _symbolic_divmod(a, c, False)
    if c == 1:
        return a
    if isinstance(a, IConst):
        return const(a.value // c)
    if 0 <= a.lo and a.hi < c:
        return const(0)
    # split terms whose coefficient is a multiple of c: (c*q + r) // c = q + r // c
    terms = _terms(a)
    whole = [t for t in terms if _coef(t) % c == 0 and not isinstance(t, IConst)]
    rest = [t for t in terms if t not in whole]
    consts = sum(t.value for t in rest if isinstance(t, IConst))
    rest = [t for t in rest if not isinstance(t, IConst)]
    q_const, r_const = divmod(consts, c)
    rem = add(_sum(rest), const(r_const))
    if whole and 0 <= rem.lo and rem.hi < c:
        return add(_sum(_divide_exact(t, c) for t in whole), const(q_const))
    if whole and rem.lo >= 0:
        return add(add(_sum(_divide_exact(t, c) for t in whole), const(q_const)),
                   floordiv(rem, c))
    split = _split_below(a, c) if a.lo >= 0 else None
    if split is not None:                 # (h*k + l) // c == h // (c/k) when 0 <= l < k | c
        high, k, _ = split
        return floordiv(high, c // k)
    return IDiv(_fdiv(a.lo, c), _fdiv(a.hi, c), a, c)


def _fdiv(x, c):
    return x // c


def _divide_exact(t: IExpr, c: int) -> IExpr:
    return mul(t.a, t.c // c) if isinstance(t, IMul) else const(t.value // c)


def mod(a: IExpr, c: int) -> IExpr:
    if isinstance(c, Dim):
        return _symbolic_divmod(a, c, True)
    if c == 1:
        return const(0)
    if isinstance(a, IConst):
        return const(a.value % c)
    if 0 <= a.lo and a.hi < c:
        return a
    terms = _terms(a)
    kept = [t for t in terms if not (_coef(t) % c == 0 and not isinstance(t, IConst))]
    if len(kept) != len(terms):
        return mod(_sum(kept), c) if kept else const(0)
    split = _split_below(a, c) if a.lo >= 0 else None
    if split is not None:                 # (h*k + l) % c == (h % (c/k))*k + l likewise
        high, k, low = split
        return add(mul(mod(high, c // k), k), low)
    return IMod(0, c - 1, a, c)


def clamp(a: IExpr, lo: int, hi: int) -> IExpr:
    """a clamped into [lo, hi]."""
    if isinstance(lo, Dim) or isinstance(hi, Dim):
        return IClamp(lo if isinstance(lo, int) else -BIG, hi if isinstance(hi, int) else BIG,
                      a, lo, hi)
    if a.lo >= lo and a.hi <= hi:
        return a
    return IClamp(lo, hi, a)


def from_value(value) -> IExpr:
    return IFromValue(-BIG, BIG, value)


def linearize(index, shape) -> IExpr:
    out = const(0)
    for e, n in zip(index, shape):
        out = add(mul(out, n), e)
    return out


def delinearize(flat: IExpr, shape) -> list[IExpr]:
    out = []
    for k in range(len(shape)):
        stride = 1
        for n in shape[k + 1:]:
            stride *= n
        e = floordiv(flat, stride)
        out.append(mod(e, shape[k]) if k > 0 else e)
    return out


def reshape_index(index, old_shape, new_shape) -> list[IExpr]:
    """Index into `new_shape` (the reshape's input) for an index into `old_shape`
    (the reshape's output), matching trailing and leading dims directly."""
    old_shape, new_shape, index = list(old_shape), list(new_shape), list(index)
    tail = []
    while old_shape and new_shape and old_shape[-1] == new_shape[-1]:
        tail.insert(0, index.pop())
        old_shape.pop()
        new_shape.pop()
    head = []
    while old_shape and new_shape and old_shape[0] == new_shape[0]:
        head.append(index.pop(0))
        old_shape.pop(0)
        new_shape.pop(0)
    # drop size-1 dims on either side
    index = [e for e, n in zip(index, old_shape) if n != 1]
    old_shape = [n for n in old_shape if n != 1]
    middle_shape = list(new_shape)
    kept_shape = [n for n in middle_shape if n != 1]
    if old_shape == kept_shape:
        it = iter(index)
        middle = [const(0) if n == 1 else next(it) for n in middle_shape]
    else:
        flat = linearize(index, old_shape)
        parts = iter(delinearize(flat, kept_shape)) if kept_shape else iter(())
        middle = [const(0) if n == 1 else next(parts) for n in middle_shape]
    return head + middle + tail


def subexpressions(e: IExpr):
    """e and the index expressions under it."""
    yield e
    for f in ("a", "b"):
        sub = getattr(e, f, None)
        if isinstance(sub, IExpr):
            yield from subexpressions(sub)


def variables(e: IExpr) -> set:
    """Names of the loop variables e depends on."""
    return {n.name for n in subexpressions(e) if isinstance(n, IVar)}


def has_data_index(e: IExpr) -> bool:
    """Does e depend on data (a gather index)?"""
    return any(isinstance(n, IFromValue) for n in subexpressions(e))


def show(e: IExpr) -> str:
    if isinstance(e, IVar):
        return e.name
    if isinstance(e, IConst):
        return str(e.value)
    if isinstance(e, IAdd):
        return f"({show(e.a)} + {show(e.b)})"
    if isinstance(e, IMul):
        return f"{show(e.a)}*{e.c}"
    if isinstance(e, IDiv):
        return f"({show(e.a)} // {e.c})"
    if isinstance(e, IMod):
        return f"({show(e.a)} % {e.c})"
    if isinstance(e, IClamp):
        return f"clamp({show(e.a)}, {e.lo}, {e.hi})"
    if isinstance(e, ISize):
        return str(e.dim)
    if isinstance(e, IProd):
        return f"{show(e.a)}*{show(e.b)}"
    if isinstance(e, ISymDiv):
        return f"({show(e.a)} {'%' if e.mod else '//'} {e.size})"
    return "idx(...)"


def affine(e: IExpr):
    """(coefficients by loop variable name, constant) of an affine index, else None."""
    if isinstance(e, IConst):
        return {}, e.value
    if isinstance(e, IVar):
        return {e.name: 1}, 0
    if isinstance(e, IAdd):
        a, b = affine(e.a), affine(e.b)
        if a is None or b is None:
            return None
        coefs = dict(a[0])
        for name, c in b[0].items():
            coefs[name] = coefs.get(name, 0) + c
        return coefs, a[1] + b[1]
    if isinstance(e, IMul):
        a = affine(e.a)
        return None if a is None else ({n: c * e.c for n, c in a[0].items()}, a[1] * e.c)
    return None
