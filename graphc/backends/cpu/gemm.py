"""graphc's own matrix-product kernels for products too small for BLAS to pay off.

OpenBLAS packs both operands into its own layout on every call; for a product such as
an RNN's per-step h @ W (32 x 256 @ 256 x 1024) that copying costs as much as the
arithmetic. These kernels read the operands where they lie (a weight stays in the
core's L2 cache from one step to the next) and keep an MR x NR tile of C in registers:

- `nn`: B is row-major (K x N): each step of k loads NV vectors of B's row k and
  broadcasts MR elements of A's column k (A may have any row/column strides).
- `nt`: B is given transposed (row j of the N x K buffer is column j of B) and A's rows
  are contiguous along k (a_col is 1): each output is a dot product, vectorized along
  k, reduced across lanes at the end; K is a multiple of 16.

- `nnw`: the nn form over a windowed B (a convolution's input read as its patch matrix
  in place, see passes/conv_to_gemm.py): k runs over K1 x K2 terms, row k1*K2 + k2 of B
  starting at k1*ldb + offsets[k2]; B's columns lie in runs of `row` (an output row of
  the image), `pitch` apart (a padded input row), C's contiguous. `row` must be a
  multiple of the vector width where it is less than N.

Every element of C is summed in the same order whatever tile, tail or thread range it
falls in, so results do not depend on the thread count. Signature of nn and nt (i64
sizes and strides, in elements): f(M, N, K, A, a_row, a_col, B, ldb, C, ldc) computes
C[i, j] = sum_k A[i*a_row + k*a_col] * B[...] for i < M, j < N; nnw's is
f(M, N, K1, K2, A, a_row, a_col, B, ldb, offsets, C, ldc, row, pitch), offsets an i64
array of K2, column j of B at (j / row) * pitch + j % row.
"""
from __future__ import annotations

import llvmlite.ir as ir

from graphc_runtime.errors import CompileError

from ..llvm.types import COMPUTE, I32, I64, VOID, _mangle
from .gemm_nt import NT
from .gemm_tiles import Tiles, chunks, for_steps, splat

PREFIX = "graphc_own_gemm_"


def shape(features: str, dtype: str, form: str = "nn") -> tuple[int, int, int]:
    """(vector width in elements, MR rows, NV vectors) for the host's registers: for nn
    6 x 4 vectors on AVX-512 (24 sums of 32 registers; 24 multiply-adds for 10 loads a
    step of k), 4 x 3 on AVX2 (12 sums of 16); 8 x 2 and 4 x 2 for the others (nnw's
    panels place two vectors at most)."""
    bits = 512 if "+avx512f" in features.split(",") else 256
    width = bits // (32 if dtype == "float32" else 64)
    if form == "nn":
        return (width, 6, 4) if bits == 512 else (width, 4, 3)
    return (width, 8, 2) if bits == 512 else (width, 4, 2)


def _signature(form: str, dtype: str) -> ir.FunctionType:
    """void f(M, N, K, A, a_row, a_col, B, ldb, C, ldc); for nnw
    void f(M, N, K1, K2, A, a_row, a_col, B, ldb, offsets, C, ldc, row, pitch)."""
    p = ir.PointerType(COMPUTE[dtype])
    if form == "nnw":
        return ir.FunctionType(VOID, [I64, I64, I64, I64, p, I64, I64, p, I64,
                                      ir.PointerType(I64), p, I64, I64, I64])
    return ir.FunctionType(VOID, [I64, I64, I64, p, I64, I64, p, I64, p, I64])


def declare(module: ir.Module, form: str, dtype: str) -> ir.Function:
    """The own-GEMM function `form` ('nn' / 'nt') for `dtype`, declared in a program's
    module; its object code comes from gemm_ir.compiled."""
    name = f"{PREFIX}{form}_{dtype}"
    if name in module.globals:
        return module.globals[name]
    return ir.Function(module, _signature(form, dtype), name)


class GemmBuilder:
    """Adds the own-GEMM functions to a module (each once, on first use)."""

    def __init__(self, module: ir.Module, features: str):
        self.module = module
        self.features = features

    def function(self, form: str, dtype: str) -> ir.Function:
        name = f"{PREFIX}{form}_{dtype}"
        if name in self.module.globals:
            return self.module.globals[name]
        ty = COMPUTE[dtype]
        fn = ir.Function(self.module, _signature(form, dtype), name)
        fn.linkage = "internal"
        fn.attributes.add("noinline")       # optimized once, however many dots call it
        for i in ((4, 7, 10) if form == "nnw" else (3, 6, 8)):
            fn.args[i].add_attribute("noalias")
        width, mr, nv = shape(self.features, dtype, form)
        if form == "nnw" and nv > 2:
            raise CompileError("the windowed kernel's panels place two vectors at most")
        {"nn": _NN, "nnw": _NN, "nt": NT}[form](self, fn, ty, width, mr, nv,
                                              form == "nnw").emit()
        return fn


class _NN(Tiles):
    """B row-major: vectors along N, MR rows of A broadcast per k. A single row (a
    matrix-vector product, a column sum) takes panels of WIDE vectors: longer runs of
    each row of B, which the hardware prefetcher follows. When B spans more than a
    core's L2 (PACK_BYTES) and several row tiles share each panel, the panel is first
    copied into a contiguous buffer: B's rows lie a large power of two apart in a
    convolution's patches (32768 floats), where the cache keeps only a few of them; so is
    a panel whose rows are a multiple of 4 KB apart (a pointwise convolution over 32 x 32
    images), and one whose rows are off the cache lines (a 7 x 7 image's 49 columns: each
    vector load straddled two lines) where C has MISALIGNED_ROWS rows or more. A copied
    B's last columns run as one panel of as many vectors as they need, zeros past N.
    (Measured: docs/performance.md.)"""

    WIDE = 8
    PACK_BYTES = 1 << 20
    ALIASED_TILES = 8      # row tiles per panel from which rows 4 KB apart are packed
    MISALIGNED_ROWS = 32   # rows of C from which B's panels are copied when its rows
    # are not whole cache lines apart: 2048 x 49 @ 49-column B 77 -> 97 GFLOP/s on one
    # thread, 160 rows 79 -> 93; 32 rows 95 -> 99, 16 rows 83 -> 69 (docs/performance.md)
    BLOCK = 128            # rows of A kept in L2 while B's panels pass
    DEPTH = 1024           # terms of k per pass: a panel of B stays in L2 (passes that
    # kept a 6 x 4-vector panel in L1, 128 terms, ran single products up to 12% faster
    # but ResNeXt-50-sized 17% slower; the likely cause, not measured: each pass reads
    # the weights' rows in short runs from memory)

    def args(self):
        """(M, N, K, A, a_row, a_col, B, ldb, C, ldc, window): window (K2, offsets) for
        nnw (K then counts rows of windows), else None."""
        if self.windowed:
            M, N, K1, K2, A, ar, ac, B, ldb, offsets, C, ldc, _, _ = self.fn.args
            return M, N, K1, A, ar, ac, B, ldb, C, ldc, (K2, offsets)
        return (*self.fn.args, None)

    def emit(self):
        M, N, K, A, ar, ac, B, ldb, C, ldc, window = self.args()
        b = ir.IRBuilder(self.fn.append_basic_block("entry"))
        c = lambda v: ir.Constant(I64, v)     # noqa: E731
        span = b.mul(b.mul(K, ldb), c(self.align))
        # rows of B a multiple of 4 KB apart share the L1's sets (a 32 x 32 image's
        # channels): with 8 row tiles or more per panel it pays to copy the panel (a
        # pointwise convolution, 64 x 32 @ 32 x 1024); with fewer (an RNN step's
        # 32 x 256 @ 256 x 1024, its weight in L2 from step to step) it does not (1.26x
        # slower packed)
        row_bytes = b.mul(ldb, c(self.align))
        aliased = b.and_(b.icmp_signed(">=", M, c(self.ALIASED_TILES * self.mr)), b.icmp_signed(
            "==", b.and_(row_bytes, c(4095)), c(0)))
        # rows of B not a whole number of cache lines apart (or B itself not on a line):
        # every vector load of B straddles two lines (a 7 x 7 image's 49 columns, 14 x
        # 14's 196); copied, a panel is read aligned
        lines = b.or_(row_bytes, b.ptrtoint(B, I64))
        misaligned = b.and_(b.icmp_signed(">=", M, c(self.MISALIGNED_ROWS)), b.icmp_signed(
            "!=", b.and_(lines, c(63)), c(0)))
        pack = b.and_(b.icmp_signed(">", M, c(self.mr)),
                      b.or_(b.or_(b.icmp_signed(">", span, c(self.PACK_BYTES)), aliased),
                            misaligned))
        # windowed B is a small input read many times over (it stays in L2): not packed
        pack = ir.Constant(ir.IntType(1), 0) if window else pack
        # terms per pass: DEPTH (windowed: whole windows, DEPTH // K2 rows of them)
        k2s = window[0] if window else c(1)
        per_pass = c(self.DEPTH)
        if window:
            per_pass = b.sdiv(per_pass, k2s)
            per_pass = b.select(b.icmp_signed("<", per_pass, c(1)), c(1), per_pass)
        deepest = b.select(b.icmp_signed("<", K, per_pass), K, per_pass)
        buf = b.alloca(self.ty, size=b.select(pack, b.mul(deepest, c(self.width * self.nv)),
                                              c(1)))
        buf.align = 64

        def depth(k0, kb):
            """Terms k0 .. k0+kb of every sum (added to C's values after the first)."""
            more = b.zext(b.icmp_signed("!=", k0, c(0)), I64)
            args = (self.ptr(b, A, b.mul(b.mul(k0, k2s), ac)), self.ptr(b, B, b.mul(k0, ldb)),
                    kb, more)
            with b.if_else(b.icmp_signed("==", M, c(1))) as (one, many):
                with one:
                    self.single_row(b, *args)
                with many:
                    # blocks of BLOCK rows: a block of A stays in L2 while B's panels pass
                    chunks(b, M, self.BLOCK, lambda i, rows: self.block(
                        b, rows, i, *args, pack, buf), "blocks")

        # once for K = 0 (C's zeros). Where one pass covers K its length is K itself,
        # not a min() with the pass: LLVM would unroll every tile's k loop for that bound
        # (4x the code and the compile time)
        single = b.icmp_signed("<=", K, per_pass)
        chunks(b, K, per_pass if window else self.DEPTH,
                lambda k0, kb: depth(k0, b.select(single, K, kb)), "depth")
        b.ret_void()

    def extra(self, b, j=None):
        """The windowed tile functions' three last arguments (K2, offsets and the gap
        of the panel at column j), else none."""
        window = self.args()[-1]
        if not window:
            return []
        gap = ir.Constant(I64, 0)
        if j is not None:
            step = ir.Constant(I64, self.width)
            gap = b.sub(b.sub(self.column_at(b, b.add(j, step)), self.column_at(b, j)), step)
        return list(window) + [gap]

    def column_at(self, b, j):
        """Where column j of B starts: (j / row) * pitch + j % row (windowed), or j."""
        if not self.windowed:
            return j
        row, pitch = self.fn.args[-2], self.fn.args[-1]
        return b.add(b.mul(b.sdiv(j, row), pitch), b.srem(j, row))

    def block(self, b, rows, i0, A, B, K, more, pack, buf):
        """Rows i0 .. i0+rows (at most BLOCK) of C, panel by panel of B's columns."""
        _, N, _, _, ar, ac, _, ldb, C, ldc, _ = self.args()
        c = lambda v: ir.Constant(I64, v)     # noqa: E731
        panel = self.width * self.nv
        A, C = self.ptr(b, A, b.mul(i0, ar)), self.ptr(b, C, b.mul(i0, ldc))

        def columns(j, vectors, form=""):
            """The tiles of the panel at column j, `vectors` vectors wide; form "masked"
            (one vector of the last columns, read masked) or "padded" (the last columns,
            copied with zeros past N)."""
            src, ld = self.ptr(b, B, self.column_at(b, j)), ldb
            if not self.windowed:
                # the panel copied into the aligned buffer, `vectors` vectors a row (the
                # last columns' vectors read masked, their other lanes zeros)
                left = b.sub(N, j)
                loads = [self.masked_io(b, b.sub(left, c(v * self.width)))[0]
                         if form else self.vload for v in range(vectors)]
                with b.if_then(pack):
                    def row(k):
                        for v in range(vectors):
                            x = loads[v](b, src, b.add(b.mul(k, ldb), c(v * self.width)))
                            self.vstore(b, x, buf, b.add(b.mul(k, c(vectors * self.width)),
                                                         c(v * self.width)))
                    for_steps(b, c(0), K, 1, row, "pack")
                src, ld = b.select(pack, buf, src), b.select(pack, c(vectors * self.width), ldb)

            def call_tile(i, r):
                lanes = [b.sub(N, j)] if form else []
                b.call(self.tile_function(r, vectors, form), [
                    self.ptr(b, A, b.mul(i, ar)), ar, ac, src, ld,
                    self.ptr(b, C, b.add(b.mul(i, ldc), j)), ldc, K, more] +
                    self.extra(b, j if vectors > 1 and not form else None) + lanes)
            self.rows_of(b, rows, call_tile)

        def narrower(j):
            """From column j on: narrower panels, then the last < width columns as one
            masked vector (a scalar column at a time took a third of a 7 x 7 image's
            product, 49 columns)."""
            for vectors in range(self.nv - 1, 0, -1):
                j = for_steps(b, j, N, self.width * vectors,
                              lambda j, v=vectors: columns(j, v), f"panels{vectors}")
            with b.if_then(b.icmp_signed("<", j, N)):
                columns(j, 1, "masked")

        j = for_steps(b, c(0), N, panel, lambda j: columns(j, self.nv), "panels")
        if self.windowed:
            return narrower(j)
        # a copied B: the last columns as one panel of as many vectors as they need,
        # zeros past N (49 columns took 8-10% longer than 64 as 32 + 16 + a masked
        # vector; a masked vector read B masked at every step of k)
        with b.if_then(b.icmp_signed("<", j, N)):
            with b.if_else(pack) as (copied, in_place):
                with copied:
                    self.padded_panel(b, b.sub(N, j), lambda v: columns(j, v, "padded"))
                with in_place:
                    narrower(j)

    def padded_panel(self, b, left, columns, vectors=1):
        """columns(v) for the fewest v vectors (up to nv) that hold `left` columns."""
        if vectors == self.nv:
            return columns(vectors)
        fits = b.icmp_signed("<=", left, ir.Constant(I64, vectors * self.width))
        with b.if_else(fits) as (enough, more):
            with enough:
                columns(vectors)
            with more:
                self.padded_panel(b, left, columns, vectors + 1)

    def single_row(self, b, A, B, K, more):
        """C's one row: panels of WIDE vectors, then narrower ones, then columns."""
        _, N, _, _, ar, ac, _, ldb, C, ldc, _ = self.args()
        j = ir.Constant(I64, 0)
        # windowed: no WIDE panels (a panel's gap places its second vector only)
        for vectors in (self.nv, 1, 0) if self.windowed else (self.WIDE, self.nv, 1, 0):
            fn = self.tile_function(1, vectors)
            step = self.width * vectors or 1
            j = for_steps(b, j, N, step, lambda j, fn=fn, v=vectors: b.call(fn, [
                A, ar, ac, self.ptr(b, B, self.column_at(b, j)), ldb, self.ptr(b, C, j),
                ldc, K, more] + self.extra(b, j if v > 1 else None)), f"row{vectors}")

    def tile(self, b, rows, vectors, A, ar, ac, B, ldb, C, ldc, K, more, *window, io=None,
             c_io=None):
        """rows x vectors of C (vectors of 0: one column, column()); io: (load, store)
        in place of vload and vstore (masked_io); c_io: such a pair for each vector of
        C alone (padded_tile)."""
        vload, vstore = io or (self.vload, self.vstore)
        c_io = c_io or [(vload, vstore)] * max(vectors, 1)
        gap = ir.Constant(I64, 0)
        if window:
            *window, gap = window
        if vectors == 0:
            return self.column(b, rows, A, ar, ac, B, ldb, C, ldc, K, more, window)
        accs = self.zeros(b, rows * vectors, self.vty)
        with b.if_then(b.icmp_signed("!=", more, ir.Constant(I64, 0))):
            for r in range(rows):
                for v in range(vectors):
                    b.store(c_io[v][0](b, C, b.add(b.mul(ir.Constant(I64, r), ldc),
                                                   ir.Constant(I64, v * self.width))),
                            accs[r * vectors + v])

        # vector v of B's panel at v * width (+ the gap after the first: a panel that
        # spans two rows of the image; windowed B only)
        at = [ir.Constant(I64, 0)] + [b.add(ir.Constant(I64, v * self.width), gap)
                                      for v in range(1, vectors)]

        # each row of A its own pointer, opaque to LLVM's loop strength reduction (which
        # otherwise rebuilds rows 3.. from row 0 by adds in every step of k)
        rows_at = [self.ptr(b, A, b.mul(ir.Constant(I64, r), ar)) for r in range(rows)]
        pty = rows_at[0].type
        rows_at = [b.asm(ir.FunctionType(pty, [pty]), "", "=r,0", [p], False)
                   for p in rows_at]

        def step(k, row):
            bv = [vload(b, B, b.add(row, at[v])) for v in range(vectors)]
            for r in range(rows):
                a = b.load(self.ptr(b, rows_at[r], b.mul(k, ac)))
                sa = self.splat(b, a)
                for v in range(vectors):
                    slot = accs[r * vectors + v]
                    b.store(b.call(self.fma_v, [sa, bv[v], b.load(slot)]), slot)
        self.each_k(b, K, ldb, window, step)
        for r in range(rows):
            for v in range(vectors):
                c_io[v][1](b, b.load(accs[r * vectors + v]), C,
                           b.add(b.mul(ir.Constant(I64, r), ldc),
                                 ir.Constant(I64, v * self.width)))

    def padded_tile(self, b, rows, vectors, *args):
        """tile() of `vectors` vectors over a copied panel (zeros past the last column),
        C's first `lanes` (the last argument) columns read and written: the other
        columns' sums are computed and left."""
        *args, lanes = args
        c_io = [self.masked_io(b, b.sub(lanes, ir.Constant(I64, v * self.width)))
                for v in range(vectors)]
        self.tile(b, rows, vectors, *args, c_io=c_io)

    def masked_tile(self, b, rows, _vectors, *args):
        """tile() of one vector whose first `lanes` (the last argument) columns are read
        and written, by masked loads and stores: each element of C summed as the scalar
        column's, the same fused multiply-adds in the same order."""
        *args, lanes = args
        self.tile(b, rows, 1, *args, io=self.masked_io(b, lanes))

    def masked_io(self, b, lanes):
        """(load, store) like vload and vstore, of the first `lanes` lanes only."""
        w = self.width
        iv = ir.VectorType(I64, w)
        mask = b.icmp_signed("<", ir.Constant(iv, list(range(w))), splat(b, lanes, iv))
        suffix = f"v{w}{_mangle(self.ty)}.p0"
        vp, mty = ir.PointerType(self.vty), ir.VectorType(ir.IntType(1), w)
        module = self.gb.module
        masked_load = module.globals.get(f"llvm.masked.load.{suffix}") or ir.Function(
            module, ir.FunctionType(self.vty, [vp, I32, mty, self.vty]),
            f"llvm.masked.load.{suffix}")
        masked_store = module.globals.get(f"llvm.masked.store.{suffix}") or ir.Function(
            module, ir.FunctionType(VOID, [self.vty, vp, I32, mty]),
            f"llvm.masked.store.{suffix}")
        align, zero = ir.Constant(I32, self.align), ir.Constant(self.vty, None)
        at = lambda b, base, offset: b.bitcast(self.ptr(b, base, offset), vp)  # noqa: E731

        def load(b, base, offset):
            return b.call(masked_load, [at(b, base, offset), align, mask, zero])

        def store(b, value, base, offset):
            b.call(masked_store, [value, at(b, base, offset), align, mask])
        return load, store

    def column(self, b, rows, A, ar, ac, B, ldb, C, ldc, K, more, window):
        accs = self.zeros(b, rows, self.ty)
        with b.if_then(b.icmp_signed("!=", more, ir.Constant(I64, 0))):
            for r in range(rows):
                b.store(b.load(self.ptr(b, C, b.mul(ir.Constant(I64, r), ldc))), accs[r])

        def step(k, row):
            x = b.load(self.ptr(b, B, row))
            for r in range(rows):
                a = b.load(self.ptr(b, A, b.add(b.mul(ir.Constant(I64, r), ar),
                                                b.mul(k, ac))))
                b.store(b.call(self.fma_s, [a, x, b.load(accs[r])]), accs[r])
        self.each_k(b, K, ldb, window, step)
        for r in range(rows):
            b.store(b.load(accs[r]), self.ptr(b, C, b.mul(ir.Constant(I64, r), ldc)))
