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

from ..llvm.emitter import loop
from ..llvm.types import COMPUTE, I64, VOID, _mangle

PREFIX = "graphc_own_gemm_"


def shape(features: str, dtype: str) -> tuple[int, int, int]:
    """(vector width in elements, MR rows, NV vectors) for the host's registers."""
    bits = 512 if "+avx512f" in features.split(",") else 256
    width = bits // (32 if dtype == "float32" else 64)
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
    module; NativeModule links its optimized body in (gemm_ir.optimized_ir)."""
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
        width, mr, nv = shape(self.features, dtype)
        if form == "nnw" and nv > 2:
            raise CompileError("the windowed kernel's panels place two vectors at most")
        {"nn": _NN, "nnw": _NN, "nt": _NT}[form](self, fn, ty, width, mr, nv,
                                               form == "nnw").emit()
        return fn


def _for(b: ir.IRBuilder, start, stop, step: int, body, name: str):
    """for (i = start; i + step <= stop; i += step) body(i); returns the i it stopped at."""
    size = ir.Constant(I64, step)
    return loop(b, name, start, size, lambda i: b.icmp_signed("<=", b.add(i, size), stop),
                body)[0]


def _chunks(b: ir.IRBuilder, n, size, body, name: str) -> None:
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


class _Tiles:
    """Shared parts of the two forms: tile dispatch over rows and columns."""

    def __init__(self, gb: GemmBuilder, fn: ir.Function, ty, width: int, mr: int, nv: int,
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

    def tile_function(self, rows: int, cols: int) -> ir.Function:
        """The kernel of one rows x cols tile (cols in vectors for nn, elements for nt):
        f(A, a_row, a_col, B, ldb, C, ldc, K, more), `more` != 0 adding to C's values
        (a later block of k) instead of starting from zero; windowed, K counts rows of
        windows (k1) and three arguments follow: K2, the offsets and the distance of the
        second vector's columns from the first's in B beyond the vector width (a
        panel's columns may span two rows of the image)."""
        name = f"{self.fn.name}_t{rows}x{cols}"
        module = self.gb.module
        if name in module.globals:
            return module.globals[name]
        p = ir.PointerType(self.ty)
        extra = [I64, ir.PointerType(I64), I64] if self.windowed else []
        fn = ir.Function(module, ir.FunctionType(VOID, [p, I64, I64, p, I64, p, I64, I64,
                                                        I64] + extra), name)
        fn.linkage = "internal"
        fn.attributes.add("alwaysinline")
        for i in (0, 3, 5):
            fn.args[i].add_attribute("noalias")
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        self.tile(b, rows, cols, *fn.args)
        b.ret_void()
        return fn

    def rows_of(self, b, M, call_tile):
        """Full MR-row tiles, then the M % MR rows left in tiles of MR/2, MR/4, ..., 1."""
        i = _for(b, ir.Constant(I64, 0), M, self.mr, lambda i: call_tile(i, self.mr), "rows")
        self.halves(b, i, M, self.mr, call_tile, "rows")

    def halves(self, b, i, stop, full, call, name):
        """From i up to stop (< full away), tiles of full/2, full/4, ..., 1 as they fit."""
        size = full // 2
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
        with k = k1*K2 + k2, window offset by window offset (the inner loop then steps
        through B by ldb like the plain form's)."""
        if not window:
            _for(b, ir.Constant(I64, 0), K, 1, lambda k: body(k, b.mul(k, ldb)), "k")
            return
        k2s, offsets = window

        def outer(k2):                   # one window offset: B's rows ldb apart
            base = b.load(b.gep(offsets, [k2]))
            _for(b, ir.Constant(I64, 0), K, 1, lambda k1: body(
                b.add(b.mul(k1, k2s), k2), b.add(base, b.mul(k1, ldb))), "k1")
        _for(b, ir.Constant(I64, 0), k2s, 1, outer, "k2")

    def ptr(self, b, base, offset):
        return b.gep(base, [offset])

    def vload(self, b, base, offset):
        p = b.bitcast(self.ptr(b, base, offset), ir.PointerType(self.vty))
        return b.load(p, align=self.align)

    def vstore(self, b, value, base, offset):
        p = b.bitcast(self.ptr(b, base, offset), ir.PointerType(self.vty))
        b.store(value, p, align=self.align)

    def splat(self, b, x):
        v = b.insert_element(ir.Constant(self.vty, ir.Undefined), x, ir.Constant(I64, 0))
        return b.shuffle_vector(v, ir.Constant(self.vty, ir.Undefined),
                                ir.Constant(ir.VectorType(ir.IntType(32), self.width),
                                            [0] * self.width))

    def zeros(self, b, count, ty):
        accs = []
        for _ in range(count):
            slot = b.alloca(ty)
            b.store(ir.Constant(ty, None) if isinstance(ty, ir.VectorType)
                    else ir.Constant(ty, 0.0), slot)
            accs.append(slot)
        return accs


class _NN(_Tiles):
    """B row-major: vectors along N, MR rows of A broadcast per k. A single row (a
    matrix-vector product, a column sum) takes panels of WIDE vectors: longer runs of
    each row of B, which the hardware prefetcher follows. When B spans more than a
    core's L2 (PACK_BYTES) and several row tiles share each panel, the panel is first
    copied into a contiguous buffer: B's rows lie a large power of two apart in a
    convolution's patches (32768 floats), where the cache keeps only a few of them; so is
    a panel whose rows are a multiple of 4 KB apart (a pointwise convolution over 32 x 32
    images). (Measured: docs/performance.md.)"""

    WIDE = 8
    PACK_BYTES = 1 << 20
    ALIASED_TILES = 8      # row tiles per panel from which rows 4 KB apart are packed
    BLOCK = 128            # rows of A kept in L2 while B's panels pass
    DEPTH = 1024           # terms of k per pass: a panel of B stays in L2

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
        aliased = b.and_(b.icmp_signed(">=", M, c(self.ALIASED_TILES * self.mr)), b.icmp_signed(
            "==", b.and_(b.mul(ldb, c(self.align)), c(4095)), c(0)))
        pack = b.and_(b.icmp_signed(">", M, c(self.mr)),
                      b.or_(b.icmp_signed(">", span, c(self.PACK_BYTES)), aliased))
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
                    _chunks(b, M, self.BLOCK, lambda i, rows: self.block(
                        b, rows, i, *args, pack, buf), "blocks")

        # once for K = 0 (C's zeros). Where one pass covers K its length is K itself,
        # not a min() with the pass: LLVM would unroll every tile's k loop for that bound
        # (4x the code and the compile time)
        single = b.icmp_signed("<=", K, per_pass)
        _chunks(b, K, per_pass if window else self.DEPTH,
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

        def columns(j, vectors):
            src, ld = self.ptr(b, B, self.column_at(b, j)), ldb
            if vectors == self.nv and not self.windowed:
                with b.if_then(pack):
                    def row(k):
                        for v in range(vectors):
                            x = self.vload(b, src, b.add(b.mul(k, ldb), c(v * self.width)))
                            self.vstore(b, x, buf, b.add(b.mul(k, c(panel)), c(v * self.width)))
                    _for(b, c(0), K, 1, row, "pack")
                src, ld = b.select(pack, buf, src), b.select(pack, c(panel), ldb)

            def call_tile(i, r):
                b.call(self.tile_function(r, vectors), [
                    self.ptr(b, A, b.mul(i, ar)), ar, ac, src, ld,
                    self.ptr(b, C, b.add(b.mul(i, ldc), j)), ldc, K, more] +
                    self.extra(b, j if vectors > 1 else None))
            self.rows_of(b, rows, call_tile)

        j = _for(b, c(0), N, panel, lambda j: columns(j, self.nv), "panels")
        for vectors in range(self.nv - 1, 0, -1):    # what is left: narrower panels
            j = _for(b, j, N, self.width * vectors, lambda j, v=vectors: columns(j, v),
                     f"panels{vectors}")
        # the last < width columns: one column at a time (a tile of 0 vectors)
        _for(b, j, N, 1, lambda j: columns(j, 0), "columns")

    def single_row(self, b, A, B, K, more):
        """C's one row: panels of WIDE vectors, then narrower ones, then columns."""
        _, N, _, _, ar, ac, _, ldb, C, ldc, _ = self.args()
        j = ir.Constant(I64, 0)
        # windowed: no WIDE panels (a panel's gap places its second vector only)
        for vectors in (self.nv, 1, 0) if self.windowed else (self.WIDE, self.nv, 1, 0):
            fn = self.tile_function(1, vectors)
            step = self.width * vectors or 1
            j = _for(b, j, N, step, lambda j, fn=fn, v=vectors: b.call(fn, [
                A, ar, ac, self.ptr(b, B, self.column_at(b, j)), ldb, self.ptr(b, C, j),
                ldc, K, more] + self.extra(b, j if v > 1 else None)), f"row{vectors}")

    def tile(self, b, rows, vectors, A, ar, ac, B, ldb, C, ldc, K, more, *window):
        gap = ir.Constant(I64, 0)
        if window:
            *window, gap = window
        if vectors == 0:
            return self.column(b, rows, A, ar, ac, B, ldb, C, ldc, K, more, window)
        accs = self.zeros(b, rows * vectors, self.vty)
        with b.if_then(b.icmp_signed("!=", more, ir.Constant(I64, 0))):
            for r in range(rows):
                for v in range(vectors):
                    b.store(self.vload(b, C, b.add(b.mul(ir.Constant(I64, r), ldc),
                                                   ir.Constant(I64, v * self.width))),
                            accs[r * vectors + v])

        # vector v of B's panel at v * width (+ the gap after the first: a panel that
        # spans two rows of the image; windowed B only)
        at = [ir.Constant(I64, 0)] + [b.add(ir.Constant(I64, v * self.width), gap)
                                      for v in range(1, vectors)]

        def step(k, row):
            bv = [self.vload(b, B, b.add(row, at[v])) for v in range(vectors)]
            for r in range(rows):
                a = b.load(self.ptr(b, A, b.add(b.mul(ir.Constant(I64, r), ar),
                                                b.mul(k, ac))))
                sa = self.splat(b, a)
                for v in range(vectors):
                    slot = accs[r * vectors + v]
                    b.store(b.call(self.fma_v, [sa, bv[v], b.load(slot)]), slot)
        self.each_k(b, K, ldb, window, step)
        for r in range(rows):
            for v in range(vectors):
                self.vstore(b, b.load(accs[r * vectors + v]), C,
                            b.add(b.mul(ir.Constant(I64, r), ldc),
                                  ir.Constant(I64, v * self.width)))

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


class _NT(_Tiles):
    """B transposed: each output a dot product along k (A's rows contiguous), tiles of
    MR rows x COLS columns of C, lanes reduced at the end in a fixed tree order. K must
    be a multiple of the vector width (own_form asks for a multiple of 16)."""

    COLS = 4

    def __init__(self, *args):
        super().__init__(*args)
        self.mr = 4 if self.width * self.align >= 64 else 2     # 16 or 8 accumulators

    def emit(self):
        M, N, K, A, ar, ac, B, ldb, C, ldc = self.fn.args
        b = ir.IRBuilder(self.fn.append_basic_block("entry"))

        def columns(j, cols):
            def call_tile(i, rows):
                fn = self.tile_function(rows, cols)
                b.call(fn, [self.ptr(b, A, b.mul(i, ar)), ar, ac,
                            self.ptr(b, B, b.mul(j, ldb)), ldb,
                            self.ptr(b, C, b.add(b.mul(i, ldc), j)), ldc, K,
                            ir.Constant(I64, 0)])
            self.rows_of(b, M, call_tile)

        j = _for(b, ir.Constant(I64, 0), N, self.COLS, lambda j: columns(j, self.COLS),
                 "panels")
        self.halves(b, j, N, self.COLS, columns, "cols")
        b.ret_void()

    def tile(self, b, rows, cols, A, ar, ac, B, ldb, C, ldc, K, more):
        w = self.width
        accs = self.zeros(b, rows * cols, self.vty)

        def step(k):
            av = [self.vload(b, A, b.add(b.mul(ir.Constant(I64, r), ar), k))
                  for r in range(rows)]
            for c in range(cols):
                bv = self.vload(b, B, b.add(b.mul(ir.Constant(I64, c), ldb), k))
                for r in range(rows):
                    slot = accs[r * cols + c]
                    b.store(b.call(self.fma_v, [av[r], bv, b.load(slot)]), slot)
        _for(b, ir.Constant(I64, 0), K, w, step, "k")       # K: a multiple of w
        sums = [self.reduce(b, b.load(slot)) for slot in accs]
        for r in range(rows):
            for c in range(cols):
                b.store(sums[r * cols + c],
                        self.ptr(b, C, b.add(b.mul(ir.Constant(I64, r), ldc),
                                             ir.Constant(I64, c))))

    def reduce(self, b, v):
        """Sum of the lanes: halves added pairwise (a fixed order)."""
        n = self.width
        while n > 1:
            n //= 2
            lo = b.shuffle_vector(v, v, ir.Constant(ir.VectorType(ir.IntType(32), n),
                                                    list(range(n))))
            hi = b.shuffle_vector(v, v, ir.Constant(ir.VectorType(ir.IntType(32), n),
                                                    list(range(n, 2 * n))))
            v = b.fadd(lo, hi)
        return b.extract_element(v, ir.Constant(I64, 0))
