"""What graphc's own GEMM kernels (gemm.py: nn, nnw; gemm_nt.py: nt) share: counted
loops, chunks, and Tiles: a kernel's tile functions, the dispatch over row tiles and
their tails, the k loop (plain or over a window's offsets) and vector helpers."""
from __future__ import annotations

from typing import TYPE_CHECKING

import llvmlite.ir as ir

from ..llvm.emitter import loop
from ..llvm.types import COMPUTE, I64, VOID, _mangle

if TYPE_CHECKING:
    from .gemm import GemmBuilder


def for_steps(b: ir.IRBuilder, start, stop, step: int, body, name: str):
    """for (i = start; i + step <= stop; i += step) body(i); returns the i it stopped at."""
    size = ir.Constant(I64, step)
    return loop(b, name, start, size, lambda i: b.icmp_signed("<=", b.add(i, size), stop),
                body)[0]


def chunks(b: ir.IRBuilder, n, size, body, name: str) -> None:
    """do { body(i, min(size, n - i)) } while ((i += size) < n): one copy of the body for
    every chunk (the last one shorter), run once when n is 0. size: an int, or an i64
    value >= 1 computed at run time."""
    pre, loop = b.block, b.append_basic_block(f"{name}.body")
    done = b.append_basic_block(f"{name}.done")
    b.branch(loop)
    b.position_at_end(loop)
    i = b.phi(I64, name)
    i.add_incoming(ir.Constant(I64, 0), pre)
    left = b.sub(n, i)
    step = ir.Constant(I64, size) if isinstance(size, int) else size
    body(i, b.select(b.icmp_signed("<", left, step), left, step))
    nxt = b.add(i, step)
    i.add_incoming(nxt, b.block)
    b.cbranch(b.icmp_signed("<", nxt, n), loop, done)
    b.position_at_end(done)


def splat(b: ir.IRBuilder, x, vty: ir.VectorType):
    """x in every lane of a vector of type vty."""
    v = b.insert_element(ir.Constant(vty, ir.Undefined), x, ir.Constant(I64, 0))
    return b.shuffle_vector(v, ir.Constant(vty, ir.Undefined),
                            ir.Constant(ir.VectorType(ir.IntType(32), vty.count),
                                        [0] * vty.count))


def word_slots(b: ir.IRBuilder, vector: ir.VectorType, rows: int):
    """(a vector's worth of lanes for a tile's partial last columns, 2 x rows vector sums)
    of the word products (bf16_pairs.py, vnni.py), allocated where `b` stands (the entry
    block)."""
    lanes = b.alloca(vector.element, size=vector.count, name="lanes")
    return lanes, [b.alloca(vector, name=f"sum{k}") for k in range(2 * rows)]


def over_word_tiles(b: ir.IRBuilder, Mp, Np, rows: int, panel: int, tile) -> None:
    """tile(j0, i0) for every tile of the padded Mp x Np result: a panel of B at a time
    (it stays in L2), every row tile over it."""
    c = lambda v: ir.Constant(I64, v)                         # noqa: E731
    loop(b, "nj", c(0), c(panel), lambda j0: b.icmp_signed("<", j0, Np),
         lambda j0: loop(b, "mi", c(0), c(rows), lambda i0: b.icmp_signed("<", i0, Mp),
                         lambda i0: tile(j0, i0)))


def word_tile(b: ir.IRBuilder, sums, Ap, Bp, steps, i0, j0, product,
              words: ir.VectorType, in_place=None) -> None:
    """Zero `sums` (2 x rows vector slots) and add into them, over `steps` words of k,
    rows i0.. of the packed A (one 32-bit word a row and step, broadcast to every lane)
    times the two panels of the packed B at column j0 (a vector of words a step):
    product(sum, a, b) -> the new sum (vdpbf16ps in bf16_pairs.py, vpdpbusd in
    vnni.py); `words`: the vector type of B's words (lanes of 32-bit words).
    `in_place`: (an i1, B, its row stride in words): where the i1 holds, the panels are
    read from B's rows where they lie instead."""
    lanes, c = words.count, (lambda v: ir.Constant(I64, v))
    for s in sums:
        b.store(ir.Constant(s.type.pointee, None), s)
    panels = [b.gep(Bp, [b.mul(j0, steps)]), b.gep(Bp, [b.mul(b.add(j0, c(lanes)), steps)])]
    stride, align = c(lanes), 64
    if in_place is not None:
        direct, B, b_row = in_place
        panels = [b.select(direct, b.gep(B, [b.add(j0, c(v * lanes))]), q)
                  for v, q in enumerate(panels)]
        stride, align = b.select(direct, b_row, stride), 4

    def step(p):
        at = b.mul(p, stride)
        vs = [b.load(b.bitcast(b.gep(q, [at]), ir.PointerType(words)), align=align)
              for q in panels]
        for r in range(len(sums) // 2):
            word = b.load(b.gep(Ap, [b.add(b.mul(b.add(i0, c(r)), steps), p)]))
            a = splat(b, word, words)
            for v in range(2):
                s = sums[r * 2 + v]
                b.store(product(b.load(s), a, vs[v]), s)
    loop(b, "k", c(0), c(1), lambda p: b.icmp_signed("<", p, steps), step)


class Tiles:
    """Shared parts of the forms: tile dispatch over rows and columns (gb: the
    GemmBuilder adding the kernel to its module)."""

    FEW_CHANNELS = 8    # windowed sums over fewer input channels (k1) run a channel's
    # window offsets in the inner loop: a stem's 3 channels left an inner loop of 3
    # steps under an outer one of 49 taps

    def __init__(self, gb: "GemmBuilder", fn: ir.Function, ty, width: int, mr: int, nv: int,
                 windowed: bool = False):
        self.gb, self.fn, self.ty = gb, fn, ty
        self.windowed = windowed
        self.width, self.mr, self.nv = width, mr, nv
        self.vty = ir.VectorType(ty, width)
        self.align = 8 if ty == COMPUTE["float64"] else 4
        self.fma_s = self._intrinsic("llvm.fma", ty)
        self.fma_v = self._intrinsic("llvm.fma", self.vty)

    def _intrinsic(self, name, ty):
        vector = f"v{self.width}" if isinstance(ty, ir.VectorType) else ""
        mangled = f"{name}.{vector}{_mangle(self.ty)}"
        module = self.gb.module
        if mangled in module.globals:
            return module.globals[mangled]
        return ir.Function(module, ir.FunctionType(ty, [ty, ty, ty]), mangled)

    def tile_function(self, rows: int, cols: int, form: str = "") -> ir.Function:
        """The kernel of one rows x cols tile (cols in vectors for nn, elements for nt):
        f(A, a_row, a_col, B, ldb, C, ldc, K, more), `more` != 0 adding to C's values
        (a later block of k) instead of starting from zero; windowed, K counts rows of
        windows (k1) and three arguments follow: K2, the offsets and the distance of the
        second vector's columns from the first's in B beyond the vector width (a
        panel's columns may span two rows of the image). `form` "masked" (nn): one
        vector of which only the first `lanes` columns are read and written, an i64
        after the others (a row's last columns, fewer than a vector); "padded" (nn):
        `cols` vectors of a copied panel whose columns past `lanes` are zeros, only the
        first `lanes` columns of C read and written."""
        name = f"{self.fn.name}_t{rows}x" + {"masked": "m", "padded": f"{cols}p"}.get(
            form, str(cols))
        module = self.gb.module
        if name in module.globals:
            return module.globals[name]
        p = ir.PointerType(self.ty)
        extra = [I64, ir.PointerType(I64), I64] if self.windowed else []
        fn = ir.Function(module, ir.FunctionType(VOID, [p, I64, I64, p, I64, p, I64, I64,
                                                        I64] + extra + [I64] * bool(form)), name)
        fn.linkage = "internal"
        fn.attributes.add("alwaysinline")
        for i in (0, 3, 5):
            fn.args[i].add_attribute("noalias")
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        emit = getattr(self, f"{form}_tile") if form else self.tile    # masked_tile, ...
        emit(b, rows, cols, *fn.args)
        b.ret_void()
        return fn

    def rows_of(self, b, M, call_tile):
        """Full MR-row tiles, then the M % MR rows left in tiles of powers of two."""
        i = for_steps(b, ir.Constant(I64, 0), M, self.mr, lambda i: call_tile(i, self.mr), "rows")
        self.halves(b, i, M, self.mr, call_tile, "rows")

    def halves(self, b, i, stop, full, call, name):
        """From i up to stop (< full away), tiles of the powers of two below full, the
        largest first, as they fit (4, 2, 1 for a full of 8 or 6)."""
        size = 1 << ((full - 1).bit_length() - 1) if full > 1 else 0
        while size >= 1:
            fits = b.icmp_signed("<=", b.add(i, ir.Constant(I64, size)), stop)
            pre = b.block
            with b.if_then(fits):
                call(i, size)
                moved = b.add(i, ir.Constant(I64, size))
                inside = b.block
            phi = b.phi(I64, f"{name}{size}")
            phi.add_incoming(moved, inside)
            phi.add_incoming(i, pre)
            i, size = phi, size // 2

    def each_k(self, b, K, ldb, window, body) -> None:
        """body(k, row) for each term k of the sums in order, row the offset of B's row
        k: k*ldb, or windowed (window = (K2, offsets), K counting k1) k1*ldb + offsets[k2]
        with k = k1*K2 + k2: window offset by window offset (the inner loop then steps
        through B by ldb like the plain form's), or where k1 counts fewer than
        FEW_CHANNELS, channel by channel with the offsets inside. The order depends on
        K1 and K2 only, so every tile and thread range of a product sums alike."""
        if not window:
            for_steps(b, ir.Constant(I64, 0), K, 1, lambda k: body(k, b.mul(k, ldb)), "k")
            return
        k2s, offsets = window
        zero = ir.Constant(I64, 0)

        def outer(k2):                   # one window offset: B's rows ldb apart
            base = b.load(b.gep(offsets, [k2]))
            for_steps(b, zero, K, 1, lambda k1: body(
                b.add(b.mul(k1, k2s), k2), b.add(base, b.mul(k1, ldb))), "k1")

        def taps(k1):                    # one input channel: the window's offsets
            start, channel = b.mul(k1, k2s), b.mul(k1, ldb)
            for_steps(b, zero, k2s, 1, lambda k2: body(
                b.add(start, k2), b.add(channel, b.load(b.gep(offsets, [k2])))), "taps")
        few = b.icmp_signed("<", K, ir.Constant(I64, self.FEW_CHANNELS))
        with b.if_else(few) as (channels_outside, taps_outside):
            with channels_outside:
                for_steps(b, zero, K, 1, taps, "channels")
            with taps_outside:
                for_steps(b, zero, k2s, 1, outer, "k2")

    def ptr(self, b, base, offset):
        return b.gep(base, [offset])

    def vload(self, b, base, offset):
        p = b.bitcast(self.ptr(b, base, offset), ir.PointerType(self.vty))
        return b.load(p, align=self.align)

    def vstore(self, b, value, base, offset):
        p = b.bitcast(self.ptr(b, base, offset), ir.PointerType(self.vty))
        b.store(value, p, align=self.align)

    def splat(self, b, x):
        return splat(b, x, self.vty)

    def zeros(self, b, count, ty):
        accs = []
        for _ in range(count):
            slot = b.alloca(ty)
            b.store(ir.Constant(ty, None) if isinstance(ty, ir.VectorType)
                    else ir.Constant(ty, 0.0), slot)
            accs.append(slot)
        return accs
