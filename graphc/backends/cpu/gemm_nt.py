"""graphc's own GEMM kernel of the nt form (gemm.py): B given transposed, each output a
dot product along k."""
from __future__ import annotations

import llvmlite.ir as ir

from ..llvm.types import I64
from .gemm_tiles import Tiles, for_steps


class NT(Tiles):
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

        j = for_steps(b, ir.Constant(I64, 0), N, self.COLS, lambda j: columns(j, self.COLS),
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
        for_steps(b, ir.Constant(I64, 0), K, w, step, "k")       # K: a multiple of w
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
