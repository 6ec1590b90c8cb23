"""Symbolic dimensions: integer polynomials over named sizes known only at the call.

A `Dim` is a non-constant polynomial with integer coefficients over symbols (such as
`batch`, `4*batch`, `batch*seq`, `batch-1`); every symbol stands for a size >= 1.
Arithmetic that yields a constant yields a plain int, so static shapes stay ints.

Equality is exact (two Dims are equal when they are the same polynomial). An order
comparison is answered only when it holds or fails for every value of the symbols; when
it depends on them, `Undecidable` (a ShapeError) is raised instead of a guess. The
runtime evaluates Dims (output shapes, buffer offsets, the arena size) with the symbols'
values bound from the feeds; it lives here so that artifacts need no compiler.
"""
from __future__ import annotations

from .errors import ShapeError


class Undecidable(ShapeError):
    """A question about symbolic sizes whose answer depends on the symbols' values."""


def _mono_mul(a: tuple, b: tuple) -> tuple:
    return tuple(sorted(a + b))


class Dim:
    """A polynomial over symbols: {monomial (sorted tuple of names): coefficient}."""

    __slots__ = ("terms", "_hash")

    def __init__(self, terms: dict):
        self.terms = {m: c for m, c in terms.items() if c}
        self._hash = hash(tuple(sorted(self.terms.items())))

    # -- construction ----------------------------------------------------------------------
    @staticmethod
    def symbol(name: str) -> "Dim":
        return Dim({(name,): 1})

    @staticmethod
    def make(terms: dict):
        """A Dim, or the int it equals when it has no symbol."""
        terms = {m: c for m, c in terms.items() if c}
        if all(m == () for m in terms):
            return terms.get((), 0)
        return Dim(terms)

    # -- arithmetic ------------------------------------------------------------------------
    @staticmethod
    def _terms_of(x) -> dict:
        if isinstance(x, Dim):
            return x.terms
        if isinstance(x, bool) or not isinstance(x, int):
            try:
                x = int(x.__index__())
            except (AttributeError, TypeError):
                raise TypeError(f"cannot combine a symbolic dimension with "
                                f"{type(x).__name__}") from None
        return {(): x} if x else {}

    def __add__(self, other):
        try:
            o = Dim._terms_of(other)
        except TypeError:
            return NotImplemented
        out = dict(self.terms)
        for m, c in o.items():
            out[m] = out.get(m, 0) + c
        return Dim.make(out)

    __radd__ = __add__

    def __neg__(self):
        return Dim.make({m: -c for m, c in self.terms.items()})

    def __sub__(self, other):
        try:
            return self + (-other if isinstance(other, Dim) else -int(other))
        except TypeError:
            return NotImplemented

    def __rsub__(self, other):
        return (-self) + other

    def __mul__(self, other):
        try:
            o = Dim._terms_of(other)
        except TypeError:
            return NotImplemented
        out: dict = {}
        for m1, c1 in self.terms.items():
            for m2, c2 in o.items():
                m = _mono_mul(m1, m2)
                out[m] = out.get(m, 0) + c1 * c2
        return Dim.make(out)

    __rmul__ = __mul__

    def __floordiv__(self, other):
        """Exact division only: by an int dividing every coefficient, or by a monomial
        (times an int) dividing every term."""
        q = exact_div(self, other)
        if q is None:
            raise Undecidable(f"{self} // {other} is not a polynomial in the symbols")
        return q

    def __rfloordiv__(self, other):
        q = exact_div(other, self)
        if q is None:
            raise Undecidable(f"{other} // {self} depends on the value of {self}")
        return q

    def __mod__(self, other):
        if exact_div(self, other) is not None:
            return 0
        raise Undecidable(f"{self} % {other} depends on the symbols' values")

    def __rmod__(self, other):
        if exact_div(other, self) is not None:
            return 0
        raise Undecidable(f"{other} % {self} depends on the value of {self}")

    # -- comparisons -----------------------------------------------------------------------
    def __eq__(self, other):
        if isinstance(other, Dim):
            return self.terms == other.terms
        return False if isinstance(other, int) else NotImplemented

    def __ne__(self, other):
        eq = self.__eq__(other)
        return eq if eq is NotImplemented else not eq

    def __hash__(self):
        return self._hash

    def _sign_bounds(self):
        """(min, max) of the polynomial over symbols >= 1 (None where unbounded)."""
        at_one = sum(self.terms.values())
        coefs = [c for m, c in self.terms.items() if m]
        if all(c >= 0 for c in coefs):
            return at_one, None
        if all(c <= 0 for c in coefs):
            return None, at_one
        return None, None

    def _compare(self, other, op: str) -> bool:
        diff = self - other
        if not isinstance(diff, Dim):
            return {"<": diff < 0, "<=": diff <= 0, ">": diff > 0, ">=": diff >= 0}[op]
        lo, hi = diff._sign_bounds()          # bounds of self - other
        always = {"<": hi is not None and hi < 0, "<=": hi is not None and hi <= 0,
                  ">": lo is not None and lo > 0, ">=": lo is not None and lo >= 0}
        never = {"<": always[">="], "<=": always[">"], ">": always["<="], ">=": always["<"]}
        if always[op] or never[op]:
            return always[op]
        raise Undecidable(f"whether {self} {op} {other} depends on the symbols' values")

    def __lt__(self, other):
        return self._compare(other, "<")

    def __le__(self, other):
        return self._compare(other, "<=")

    def __gt__(self, other):
        return self._compare(other, ">")

    def __ge__(self, other):
        return self._compare(other, ">=")

    def __bool__(self):
        return True                      # a non-constant polynomial is never 0 everywhere

    def __int__(self):
        raise Undecidable(f"the symbolic dimension {self} has no value until the call")

    __index__ = __int__            # range(d), numpy shapes: the same clear refusal

    # -- inspection ------------------------------------------------------------------------
    def symbols(self) -> set:
        return {s for m in self.terms for s in m}

    def evaluate(self, env: dict) -> int:
        total = 0
        for m, c in self.terms.items():
            v = c
            for s in m:
                v *= env[s]
            total += v
        return total

    def hint(self, size: int = 64) -> int:
        """A typical value (every symbol `size`), for cost estimates only."""
        return self.evaluate({s: size for s in self.symbols()})

    def __repr__(self):
        parts = []
        for m, c in sorted(self.terms.items(), key=lambda t: (-len(t[0]), t[0])):
            name = "*".join(m)
            if not m:
                text = str(abs(c))
            elif abs(c) == 1:
                text = name
            else:
                text = f"{abs(c)}*{name}"
            sign = "-" if c < 0 else "+"
            parts.append((sign, text))
        out = ("-" if parts[0][0] == "-" else "") + parts[0][1]
        for sign, text in parts[1:]:
            out += sign + text
        return out

    __str__ = __repr__

    def __format__(self, spec: str) -> str:
        try:
            return format(str(self), spec)
        except ValueError:                   # a numeric format: the polynomial as is
            return str(self)

    def to_json(self) -> list:
        return [[c, list(m)] for m, c in sorted(self.terms.items())]

    @staticmethod
    def from_json(data):
        return Dim.make({tuple(sorted(m)): int(c) for c, m in data})


def exact_div(a, b):
    """a / b when it is a polynomial with integer coefficients (b an int or a Dim with
    one term), else None."""
    at, bt = Dim._terms_of(a), Dim._terms_of(b)
    if len(bt) != 1:
        if isinstance(a, Dim) and isinstance(b, Dim) and a == b:
            return 1
        return None
    (bm, bc), = bt.items()
    out = {}
    for m, c in at.items():
        rest = list(m)
        for s in bm:
            if s not in rest:
                return None
            rest.remove(s)
        if c % bc:
            return None
        out[tuple(rest)] = c // bc
    return Dim.make(out)


def is_symbolic(shape) -> bool:
    return any(isinstance(d, Dim) for d in shape)


def shape_symbols(shape) -> set:
    out = set()
    for d in shape:
        if isinstance(d, Dim):
            out |= d.symbols()
    return out


def evaluate(d, env: dict) -> int:
    return d.evaluate(env) if isinstance(d, Dim) else d


def concrete_shape(shape, env: dict) -> tuple:
    return tuple(d.evaluate(env) if isinstance(d, Dim) else d for d in shape)


def json_default(obj):
    """json.dumps' default: a Dim as {"dim": terms} (artifact manifests; in memory a
    manifest holds Dims, and json_object_hook gives them back when a file is read)."""
    if isinstance(obj, Dim):
        return {"dim": obj.to_json()}
    raise TypeError(f"Object of type {type(obj).__name__} is not JSON serializable")


def json_object_hook(obj: dict):
    """json.loads' object_hook: {"dim": terms} back to a Dim (malformed terms: a
    ShapeError, which artifact readers turn into an ArtifactError)."""
    if len(obj) == 1 and "dim" in obj and isinstance(obj["dim"], list):
        try:
            return Dim.from_json(obj["dim"])
        except (TypeError, ValueError):
            raise ShapeError(f"malformed symbolic dimension {obj['dim']!r}") from None
    return obj


def prod(shape):
    n = 1
    for d in shape:
        n = n * d
    return n


def as_dim(d):
    """d as a shape entry: a Dim stays, anything else becomes an int."""
    return d if isinstance(d, Dim) else int(d)


def hint(d, size: int = 256) -> int:
    """A typical value of d (every symbol `size`): for cost decisions, never for
    correctness."""
    return d.hint(size) if isinstance(d, Dim) else d
