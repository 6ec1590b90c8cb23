"""8-bit integer products on Intel AMX (amx-tile + amx-int8): the products vnni.py runs
(dot_general's packed_int8: int32 words, four 8-bit integers of the contracted axis
each; A's bytes unsigned and B's signed, or the other way round), with exact int32
sums, on the tiles.

One tile instruction (tdpbusd, or tdpbsud with A's bytes signed) multiplies 16 rows x
16 words of A by 16 words x 16 columns of B into 16 x 16 int32 sums: 16,384 multiply-
adds, against 64 for vpdpbusd. B's tile is 16 rows of 16 words, a row per word of k,
which is how graphc packs words already, so amx.py's block kernel runs unchanged in
bytes: a 32 x 32 block of C as 2 x 2 tiles over K in slices, a panel of 32 columns of C
at a time, the panel's sums kept in a scratch between slices. The driver here packs A
(rows padded to 32, words to 16) and B (panels of 32 columns) and copies each panel's
sums into C. Integer sums are exact (they wrap modulo 2**32 as vpdpbusd's do), so the
bits are vnni.py's for any split of C between threads. Where malloc has no room for the
packed copies the product runs unpacked (vnni.py's).

Signature: vnni.py's, f(M, N, K, A, a_row, a_col, B, b_row, b_col, C, ldc) with K in
words. Code using tiles runs only in a process the kernel granted them
(graphc_runtime.host.amx_usable); the block's name begins with amx.BLOCK, which the
runtime looks for before it loads such code.
"""
from __future__ import annotations

import os

import llvmlite.ir as ir

from ..llvm.emitter import loop
from ..llvm.types import I8, I32, I64
from . import amx, vnni

NAME = "graphc_own_gemm_amxi8_int32"             # A's bytes unsigned, B's signed
NAME_SIGNED_A = "graphc_own_gemm_amxi8su_int32"  # A's bytes signed, B's unsigned
TILE = amx.TILE              # rows and columns of C a block covers
WORDS = 16                   # words of k (64 bytes) a tile step takes
LANES = vnni.LANES
MIN_ROWS = 16                # fewer rows of C (a batch-1 token, a 1 x 1 image's
# vector): the tiles would be mostly padding, vpdpbusd runs it (vnni.py); 144 x 24 @
# 24 x 3136 (6 words of k) took 0.20 ms there against 0.10 on vpdpbusd
SLICE_STEPS = amx.KC // TILE   # steps of k a slice keeps in L1 (16 KB of A, 16 of B)
IN_PLACE_ROWS = 128          # B's panels read where they lie (not packed) for at most
# this many rows of C: 96 x 1152 @ 1152 x 3136 0.72 -> 0.56 ms, 128 x 3072 @ 3072 x 768
# 0.51 -> 0.49; packed copies pay from 256 rows (256 x 768 @ 768 x 3072: 1.06 packed
# 0.90), each B tile then read by 8 row blocks
MIN_WORDS = 16               # likewise for the contracted axis: fewer than 64 bytes


def block_name(signed_a: bool) -> str:
    return amx.BLOCK + ("_i8su" if signed_a else "_i8us")


def block_ir(signed_a: bool) -> str:
    """amx.py's block kernel on 8-bit words: the same tiles and offsets in bytes, the
    int32 dot product of bytes instead of bfloat16 pairs."""
    return amx.block_ir(block_name(signed_a), "tdpbsud" if signed_a else "tdpbusd",
                        SLICE_STEPS)


def usable(features: str) -> bool:
    """Whether the CPU has amx-tile and amx-int8, GRAPHC_VNNI is not 0 (8-bit products
    in the loop nest) and this process may use the tiles (asked once)."""
    if os.environ.get("GRAPHC_VNNI", "1").strip() == "0" or \
            not {"+amx-tile", "+amx-int8"} <= set(features.split(",")):
        return False
    from graphc_runtime.host import amx_usable
    return amx_usable()


def worth_tiles(m, n, words) -> bool:
    """Whether a product of m rows, n columns and `words` words of k (ints, or None where
    unknown) goes to the tiles rather than vpdpbusd: at least MIN_ROWS, 16 and MIN_WORDS,
    and 32 rows or 32 words (16 x 64 @ 64 x 3136: 0.029 ms on the tiles, 0.023 on
    vpdpbusd; 64 rows 0.046 against 0.058; 16 x 768 @ 768 x 768 0.023 against 0.059)."""
    at_least = lambda v, least: v is None or v >= least        # noqa: E731
    return at_least(m, MIN_ROWS) and at_least(n, LANES) and at_least(words, MIN_WORDS) and \
        (at_least(m, 2 * MIN_ROWS) or at_least(words, 2 * MIN_WORDS))


def build(module: ir.Module, allocator: str = "malloc", signed_a: bool = False) -> ir.Function:
    """The product function: packing, the block kernel (block_ir, linked in beside it)
    a panel at a time, the panel's int32 sums copied into C."""
    fn, b, acc = amx.product_function(module, NAME_SIGNED_A if signed_a else NAME, I32, I32)
    i8p = ir.PointerType(I8)
    block = ir.Function(module, ir.FunctionType(ir.VoidType(),
                                                [i8p, I64, i8p, I64, i8p, I64, I64]),
                        block_name(signed_a))
    M, N, Q, A, a_row, a_col, B, b_row, b_col, C, ldc = fn.args
    c = lambda v: ir.Constant(I64, v)                                # noqa: E731
    less = lambda bound: (lambda i: b.icmp_signed("<", i, bound))   # noqa: E731
    up = lambda n, m: b.and_(b.add(n, c(m - 1)), c(-m))            # noqa: E731
    Mp, Qp, Np = up(M, TILE), up(Q, WORDS), up(N, TILE)
    a_words, b_words = b.mul(Mp, Qp), b.mul(Np, Qp)
    size = b.mul(b.add(b.add(a_words, b_words), b.mul(Mp, c(TILE))), c(4))
    raw, Ap = amx.packed_scratch(
        b, fn, size, allocator, acc, I32,
        lambda b_, args, acc_: vnni.unpacked_product(b_, args, acc_, signed_a))
    Bp = b.gep(Ap, [a_words])
    Cs = b.gep(Bp, [b_words])
    zero = ir.Constant(I32, 0)
    one = c(1)
    vi = ir.VectorType(I32, LANES)
    vector_at = lambda p: b.bitcast(p, ir.PointerType(vi))         # noqa: E731

    amx.pack_rows(b, A, a_row, a_col, M, Q, Ap, Mp, Qp, zero)   # Q words a row

    # B's rows of contiguous words in whole tiles of k, read by few row blocks: the
    # tiles read its whole panels where they lie
    in_place = b.and_(b.and_(b.icmp_signed("==", b_col, one),
                             b.icmp_signed("==", b.and_(Q, c(WORDS - 1)), c(0))),
                      b.icmp_signed("<=", Mp, c(IN_PLACE_ROWS)))

    def read_in_place(j0):
        return b.and_(in_place, b.icmp_signed("<=", b.add(j0, c(TILE)), N))

    def b_panel(j0):                    # columns j0..j0+31: a row of 32 words per word
        panel = b.gep(Bp, [b.mul(j0, Qp)])     # of k, zeros past K and past N
        whole = b.and_(b.icmp_signed("<=", b.add(j0, c(TILE)), N),
                       b.icmp_signed("==", b_col, one))

        def word_row(q):
            at = b.gep(panel, [b.mul(q, c(TILE))])
            with b.if_else(b.and_(whole, b.icmp_signed("<", q, Q))) as (fast, slow):
                with fast:                     # 32 contiguous words
                    row = b.gep(B, [b.add(b.mul(q, b_row), j0)])
                    for h in range(TILE // LANES):
                        v = b.load(vector_at(b.gep(row, [c(h * LANES)])), align=4)
                        b.store(v, vector_at(b.gep(at, [c(h * LANES)])), align=64)
                with slow:
                    def column(jj):
                        j = b.add(j0, jj)
                        inside = b.and_(b.icmp_signed("<", j, N), b.icmp_signed("<", q, Q))
                        src = b.add(b.mul(b.select(inside, q, c(0)), b_row),
                                    b.mul(b.select(inside, j, c(0)), b_col))
                        v = b.load(b.gep(B, [src]))
                        b.store(b.select(inside, v, zero), b.gep(at, [jj]))
                    loop(b, "bj", c(0), one, less(c(TILE)), column)
        loop(b, "bq", c(0), one, less(Qp), word_row)

    def packed_panel(j0):
        with b.if_then(b.not_(read_in_place(j0))):
            b_panel(j0)
    loop(b, "bp", c(0), c(TILE), less(Np), packed_panel)

    def panel(j0):
        direct = read_in_place(j0)
        b_at = b.select(direct, b.bitcast(b.gep(B, [j0]), i8p),
                        b.bitcast(b.gep(Bp, [b.mul(j0, Qp)]), i8p))
        b_stride = b.select(direct, b.mul(b_row, c(4)), c(4 * TILE))
        b.call(block, [b.bitcast(Ap, i8p), b.mul(Qp, c(4)), b_at, b_stride,
                       b.bitcast(Cs, i8p), b.udiv(Mp, c(TILE)), b.udiv(Qp, c(WORDS))])
        whole = b.icmp_signed("<=", b.add(j0, c(TILE)), N)

        def out_row(r):                 # the panel's sums into C
            src = b.gep(Cs, [b.mul(r, c(TILE))])
            dst = b.gep(C, [b.add(b.mul(r, ldc), j0)])
            with b.if_else(whole) as (full, part):
                with full:
                    for h in range(TILE // LANES):
                        v = b.load(vector_at(b.gep(src, [c(h * LANES)])), align=64)
                        b.store(v, vector_at(b.gep(dst, [c(h * LANES)])), align=4)
                with part:
                    loop(b, "cj", c(0), one, less(b.sub(N, j0)), lambda j: b.store(
                        b.load(b.gep(src, [j])), b.gep(dst, [j])))
        loop(b, "cr", c(0), one, less(M), out_row)
    loop(b, "nj", c(0), c(TILE), less(N), panel)
    amx.free_scratch(b, raw)
    b.ret_void()
    return fn


class _Form(vnni.Form):
    """One of the two product functions, as dot_plan.native_kernel hands them out (and
    the block kernel gemm_ir links in beside it)."""

    @staticmethod
    def usable(features: str) -> bool:
        return usable(features)

    def build(self, module: ir.Module, allocator: str = "malloc") -> ir.Function:
        return build(module, allocator, self.signed_a)

    def block_ir(self) -> str:
        return block_ir(self.signed_a)


UNSIGNED_A, SIGNED_A = _Form(NAME, False), _Form(NAME_SIGNED_A, True)
