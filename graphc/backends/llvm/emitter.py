"""The Emitter every LLVM backend builds on: loop nests (with choices unswitched, interiors
split from their guards, window sums jammed), buffer access, index arithmetic, and each
kernel kind's emission (`emit_<kind>`), with the element values, reductions and
loop-nest products of the mixins beside it. A backend subclasses it and overrides hooks
(`outer_loops`, `library_plan`, `accumulates_in_output`, `emit_<kind>`, the module's
`libm`): the CPU's adds BLAS and Winograd, the GPU's grid-stride loops and warps."""
from __future__ import annotations

from typing import TYPE_CHECKING

import llvmlite.ir as ir

from graphc_runtime.errors import CompileError

from ...kernels import index as ix
from ...kernels import kernel as K
from . import interior
from .dots import DotEmitter
from .jam import JAM, jam_variable
from .reductions import ReductionEmitter
from .symbols import emit_dim
from .types import I64
from .values import ValueEmitter

if TYPE_CHECKING:
    from .module import LlvmModule


INNER_VECTOR_MIN = 8      # an inner loop this long or longer is the one to vectorize


def _vectorizes_inside(vars_) -> bool:
    """Whether a loop over vars_[0] holds an inner loop of at least INNER_VECTOR_MIN
    iterations (vars_[-1], static). LLVM may unroll such an inner loop fully (16
    iterations, an image row) and then vectorize the loop around it with gathers and
    scatters a row apart (a padding copy over 16 x 16 images ran 5x slower so): these
    loops are marked not to be vectorized, the inner one then is (or the SLP vectorizer
    joins its unrolled body)."""
    if len(vars_) < 2:
        return False
    inner = ix.extent_of(vars_[-1])
    return isinstance(inner, int) and inner >= INNER_VECTOR_MIN


LONG_CHAIN_OPS = 48    # a loop kernel computing this many primitives an element runs its
CHAIN_INTERLEAVE = 4   # innermost loop CHAIN_INTERLEAVE vectors side by side: its values
# form one long chain of dependent operations (divisions, roundings, a polynomial), and
# one vector at a time waits on each one's latency. The BERT-base-sized int8 model's GELU
# kernel (its quantize/dequantize pairs, erf: 49 primitives) 0.85 -> 0.49 ms; the model
# 8.50 -> 7.83 ms, ConvNeXt-style float32 12.40 -> 11.97 ms (same process, alternately)


def chain_interleave(stores) -> int:
    """How many vectors the innermost loop of `stores` runs side by side: CHAIN_INTERLEAVE
    where they compute LONG_CHAIN_OPS primitives an element or more, else 0 (LLVM's
    choice)."""
    ops = sum(isinstance(e, K.Prim) for e in K.value_exprs([s.value for s in stores]))
    return CHAIN_INTERLEAVE if ops >= LONG_CHAIN_OPS else 0


class Emitter(ValueEmitter, ReductionEmitter, DotEmitter):
    """Emits one kernel's loops and expressions into a function."""

    def __init__(self, mb: "LlvmModule", builder: ir.IRBuilder, args, fn):
        self.mb, self.b, self.args, self.fn = mb, builder, args, fn
        self.env: dict[str, ir.Value] = {}
        self.bounds: dict[str, tuple] = {}    # loop variable -> (begin, end) arguments
        self.accs: dict[int, ir.Value] = {}
        self.cache: dict = {}
        self.stash: dict = {}          # expr id -> row scratch holding its values
        self.row_lin = None            # linear index within the row, while in a row loop
        self.hoisted: list = []        # concatenate choices to decide outside inner loops
        self.splits: dict = {}         # innermost variable -> guards its interior drops
        self.trivial: set = set()      # guards that hold where the code is emitted
        self.resolved: dict = {}       # id(Choose) -> the part chosen by an outer branch
        self.bound: set = set()        # loop variables bound by the enclosing loops
        self.symbols: dict = {}        # symbol name -> its i64 value (this function's argument)
        self.redirect: dict = {}       # buffer id -> (scratch, leading axes it drops)
        self.fixed: dict = {}          # loop variable -> the constant it is bound to
        self.jam = None                # (row variable, stores): see jam_variable
        self.interleave = 0            # vectors an innermost loop runs side by side (0: LLVM's choice)

    def dim(self, d) -> ir.Value:
        """i64 value of a size (an int or a symbolic Dim)."""
        return emit_dim(self.b, d, self.symbols)

    # -- loops ---------------------------------------------------------------------------
    def loops(self, vars_, body) -> None:
        """Nested counted loops over the IVar loop variables in `vars_` (outer first)."""
        real = [v for v in vars_ if isinstance(v, ix.IVar)]
        self._nest(real, body)

    def _nest(self, vars_, body):
        if not vars_:
            saved = dict(self.cache)
            body()
            self.cache = saved
            return
        for choice in self.hoisted:
            if id(choice) not in self.resolved and ix.variables(choice.index) <= self.bound:
                return self._unswitch(choice, vars_, body)
        v = vars_[0]
        begin, end = self.bounds.get(v.name, (ir.Constant(I64, 0), self.dim(ix.extent_of(v))))
        if len(vars_) == 2 and self.jam is not None and self.jam[0] == v.name:
            begin = self._jammed(v, begin, end, vars_[1], self.jam[1])
        span = interior.interval(v, self.splits[v.name], self.fixed) \
            if len(vars_) == 1 and v.name in self.splits else None
        if span is None:
            return self._counted(v, begin, end, vars_, body)
        # [begin, L) and [H, end) as written; [L, H) with v's guards dropped
        b = self.b
        smax = lambda x, y: b.select(b.icmp_signed(">", x, y), x, y)   # noqa: E731
        smin = lambda x, y: b.select(b.icmp_signed("<", x, y), x, y)   # noqa: E731
        low = smin(smax(begin, ir.Constant(I64, span[0])), end)
        high = smax(smin(end, ir.Constant(I64, span[1])), low)
        self._counted(v, begin, low, vars_, body)
        self.trivial = set(self.splits[v.name])
        self._counted(v, low, high, vars_, body)
        self.trivial = set()
        self._counted(v, high, end, vars_, body)

    def _loop(self, name: str, begin, step: int, more, body):
        """for (i = begin; more(i); i += step) body(i), i never wrapping; returns (i as
        the loop left it, the branch back to its head)."""
        return loop(self.b, name, begin, ir.Constant(I64, step), more, body, ["nsw", "nuw"])

    def _counted(self, v, begin, end, vars_, body) -> None:
        """for v in [begin, end): the loops of vars_[1:] around body."""
        def inside(i):
            self.env[v.name] = i
            saved_cache = dict(self.cache)
            self.bound.add(v.name)
            self._nest(vars_[1:], body)
            self.bound.discard(v.name)
            self.cache = saved_cache
        _, back = self._loop(v.name, begin, 1,
                             lambda i: self.b.icmp_signed("<", i, end), inside)
        if _vectorizes_inside(vars_):
            back.set_metadata("llvm.loop", self.mb.loop_metadata("llvm.loop.vectorize.enable",
                                                                 ir.Constant(ir.IntType(1), 0)))
        elif len(vars_) == 1 and self.interleave:
            back.set_metadata("llvm.loop", self.mb.loop_metadata(
                "llvm.loop.interleave.count", ir.Constant(ir.IntType(32), self.interleave)))

    def _jammed(self, v, begin, end, inner, stores):
        """for v in [begin, end) in steps of JAM while JAM rows are left: the innermost
        loop (inner) once around JAM copies of the stores, all of their values computed
        before any is stored (loads of a row shared between copies become one). Returns
        where it stopped: the rows left go through the plain loop."""
        b = self.b

        def rows(i):
            at = [b.add(i, ir.Constant(I64, u), flags=["nsw", "nuw"]) for u in range(JAM)]
            values = []
            for row in at:
                self.env[v.name] = row
                saved = dict(self.cache)
                values.append([self.value(s.value) for s in stores])
                self.cache = saved
            for row, vals in zip(at, values):
                self.env[v.name] = row
                saved = dict(self.cache)
                for s, value in zip(stores, vals):
                    self.store(s.buffer, s.index, value)
                self.cache = saved

        def inside(i):
            self.bound.add(v.name)
            saved_cache = dict(self.cache)
            self._nest([inner], lambda: rows(i))
            self.cache = saved_cache
            self.bound.discard(v.name)
        i, _ = self._loop(f"{v.name}.jam", begin, JAM, lambda i: b.icmp_signed(
            "<=", b.add(i, ir.Constant(I64, JAM), flags=["nsw"]), end), inside)
        return i

    def _unswitch(self, choice: K.Choose, vars_, body) -> None:
        """Branch on a concatenate's part once, outside the remaining loops, and emit
        those loops once per part with the part fixed: the inner loops then hold no
        branches and vectorize."""
        for k in self.each_part(choice, "part"):
            self.resolved[id(choice)] = k
            self._nest(vars_, body)
            del self.resolved[id(choice)]

    # -- kernels -------------------------------------------------------------------------
    def outer_loops(self, vars_, body) -> None:
        """The kernel's outermost (parallel) loops; the CUDA lowering makes them a
        grid-stride loop over threads."""
        self.loops(vars_, body)

    def kernel(self, k) -> None:
        """Emit kernel k through the method for its kind (emit_loop, emit_row, ...),
        which a backend's emitter overrides where its code differs."""
        emit = getattr(self, f"emit_{k.kind}", None)
        if emit is None:
            raise CompileError(f"{type(self).__name__} cannot lower {k.kind} kernels")
        emit(k)

    def emit_loop(self, k) -> None:
        self.interleave = chain_interleave(k.stores)
        self.hoisted = hoistable_choices(k)
        self.splits = interior.guards([s.value for s in k.stores],
                                      [i for s in k.stores for i in s.index])
        row = jam_variable(k.stores, k.loop_vars)
        self.jam = (row, k.stores) if row and not self.hoisted else None
        self.outer_loops(k.loop_vars, lambda: self.stores(k.stores))
        self.hoisted, self.splits, self.jam, self.interleave = [], {}, None, 0

    def emit_row(self, k) -> None:
        self.splits = interior.guards([r.value for r in k.reductions] +
                                      [s.value for s in k.stage_stores + k.full_stores])
        self.outer_loops(k.kept_vars, lambda: self.row(k))
        self.splits = {}

    def emit_dot(self, k) -> None:
        self.dot(k)

    def emit_conv(self, k) -> None:
        self.conv(k)

    def emit_scatter(self, k) -> None:
        self.kernel(k.copy)
        self.loops(k.upd_vars, lambda: self.scatter(k))

    def stores(self, stores) -> None:
        values = [self.value(s.value) for s in stores]
        for s, v in zip(stores, values):
            self.store(s.buffer, s.index, v)

    def _alloca(self, ty):
        with self.b.goto_entry_block():
            return self.b.alloca(ty)

    def _ptr(self, buf: K.Buffer, index):
        if buf.id in self.redirect:           # a product kept in a scratch (layout nests)
            buf, drop = self.redirect[buf.id]
            index = tuple(index)[drop:]
        arg, _ = self.args[buf.id]
        offset = self.index(ix.linearize(index, buf.shape))
        return self.b.gep(arg, [offset], inbounds=True)

    def load(self, buf: K.Buffer, index) -> ir.Value:
        raw = self.b.load(self._ptr(buf, index))
        return self.from_storage(raw, buf.dtype)

    def store(self, buf: K.Buffer, index, value) -> None:
        self.b.store(self.to_storage(value, buf.dtype), self._ptr(buf, index))

    def index(self, e: ix.IExpr) -> ir.Value:
        """e's value, emitted once in scope for each object and for each structure (the
        addresses of a stencil's taps share their terms); a data index (gather) is
        keyed by its object alone."""
        key = ("i", id(e))
        if key in self.cache:
            return self.cache[key][0]
        same = ("s", e) if not isinstance(e, (ix.IConst, ix.IVar)) and \
            not ix.has_data_index(e) else None
        if same is not None and same in self.cache:
            v = self.cache[same][0]
        else:
            v = self._index(e)
            if same is not None:
                self.cache[same] = (v, e)
        self.cache[key] = (v, e)
        return v

    def _index(self, e):
        b = self.b
        if isinstance(e, ix.IConst):
            return ir.Constant(I64, e.value)
        if isinstance(e, ix.IVar):
            return self.env[e.name]
        if isinstance(e, ix.IAdd):
            terms, offset = _terms_and_offset(e)
            if offset and terms:       # (terms) + offset: the terms shared by every offset
                return b.add(self.index(_sum(terms)), ir.Constant(I64, offset))
            return b.add(self.index(e.a), self.index(e.b))
        if isinstance(e, ix.IMul):
            return b.mul(self.index(e.a), ir.Constant(I64, e.c))
        if isinstance(e, ix.IDiv):
            a = self.index(e.a)
            if e.a.lo >= 0:
                return b.udiv(a, ir.Constant(I64, e.c))
            q = b.sdiv(a, ir.Constant(I64, e.c))
            r = b.srem(a, ir.Constant(I64, e.c))
            fix = b.and_(b.icmp_signed("!=", r, ir.Constant(I64, 0)),
                         b.icmp_signed("<", a, ir.Constant(I64, 0)))
            return b.sub(q, b.zext(fix, I64))
        if isinstance(e, ix.IMod):
            a = self.index(e.a)
            if e.a.lo >= 0:
                return b.urem(a, ir.Constant(I64, e.c))
            r = b.srem(a, ir.Constant(I64, e.c))
            neg = b.icmp_signed("<", r, ir.Constant(I64, 0))
            return b.select(neg, b.add(r, ir.Constant(I64, e.c)), r)
        if isinstance(e, ix.IClamp):
            a = self.index(e.a)
            if e in self.trivial:
                return a
            lo = self.dim(e.low) if e.low is not None else ir.Constant(I64, e.lo)
            hi = self.dim(e.high) if e.high is not None else ir.Constant(I64, e.hi)
            a = b.select(b.icmp_signed("<", a, lo), lo, a)
            return b.select(b.icmp_signed(">", a, hi), hi, a)
        if isinstance(e, ix.ISize):
            return self.dim(e.dim)
        if isinstance(e, ix.IProd):
            return b.mul(self.index(e.a), self.index(e.b))
        if isinstance(e, ix.ISymDiv):
            op = b.urem if e.mod else b.udiv
            return op(self.index(e.a), self.dim(e.size))
        if isinstance(e, ix.IFromValue):
            v = self.value(e.value)
            return b.sext(v, I64) if v.type.width < 64 else v
        raise CompileError(f"unknown index expression {e!r}")

    # -- values --------------------------------------------------------------------------


def _terms_and_offset(e: ix.IExpr):
    """The non-constant terms of a sum (in a fixed order) and its constant."""
    terms, offset, todo = [], 0, [e]
    while todo:
        t = todo.pop()
        if isinstance(t, ix.IAdd):
            todo += (t.a, t.b)
        elif isinstance(t, ix.IConst):
            offset += t.value
        else:
            terms.append(t)
    return sorted(terms, key=ix.show), offset


def _sum(terms: list) -> ix.IExpr:
    out = terms[0]
    for t in terms[1:]:
        out = ix.IAdd(out.lo + t.lo, out.hi + t.hi, out, t)
    return out


MAX_UNSWITCHED_COPIES = 64     # copies of a loop nest that hoisting choices may make


def hoistable_choices(kern: K.LoopKernel) -> list:
    """The concatenate choices of a loop kernel whose part depends on loop variables
    only (outermost first), while the copies of the inner loops stay few."""
    found, seen = [], set()

    def walk(e):
        if id(e) in seen or not isinstance(e, K.VExpr):
            return
        seen.add(id(e))
        if isinstance(e, K.Choose) and not ix.has_data_index(e.index):
            found.append(e)
        for f in ("args", "parts"):
            for x in getattr(e, f, ()):
                walk(x)
    for s in kern.stores:
        walk(s.value)
    order = {v.name: n for n, v in enumerate(kern.loop_vars) if isinstance(v, ix.IVar)}
    found.sort(key=lambda c: max((order.get(n, 0) for n in ix.variables(c.index)), default=0))
    chosen, copies = [], 1
    for c in found:
        if copies * len(c.parts) <= MAX_UNSWITCHED_COPIES:
            chosen.append(c)
            copies *= len(c.parts)
    return chosen


def loop(b: ir.IRBuilder, name: str, begin, step, more, body, flags=()):
    """for (i = begin; more(i); i += step) body(i), emitted at the builder's position
    (which ends after the loop), i an i64 and step an i64 value, its add carrying
    `flags`; returns (i as the loop left it, the branch back to its head)."""
    pre = b.block
    head = b.append_basic_block(f"{name}.head")
    body_block = b.append_basic_block(f"{name}.body")
    done = b.append_basic_block(f"{name}.done")
    b.branch(head)
    b.position_at_end(head)
    i = b.phi(I64, name)
    i.add_incoming(begin, pre)
    b.cbranch(more(i), body_block, done)
    b.position_at_end(body_block)
    body(i)
    i.add_incoming(b.add(i, step, flags=list(flags)), b.block)
    back = b.branch(head)
    b.position_at_end(done)
    return i, back


def strided_loop(b: ir.IRBuilder, start, stop, step, body) -> None:
    """for (i = start; i < stop; i += step) body(i), all i64 and non-negative."""
    loop(b, "strided", start, step, lambda i: b.icmp_unsigned("<", i, stop), body)
