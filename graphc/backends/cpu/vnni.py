"""8-bit integer products on AVX512-VNNI (vpdpbusd): C = A @ B with exact int32 sums,
for dot_general's packed_int8 (graphc/ir/ops/linalg.py): A and B are int32 words, each
four 8-bit integers of the contracted axis (gc.matmul_8bit packs them), a term the sum
of a word pair's four byte products; A's bytes unsigned and B's signed (UNSIGNED_A, a
quantized MatMul) or the other way round (SIGNED_A: a convolution's int8 filter times
its image's uint8 patches). The int8 models' products.

vpdpbusd adds to each of 16 int32 lanes the four products of one source's unsigned bytes
with the other's signed bytes: acc[j] += sum_t a[4j+t] * b[4j+t], 64 multiply-adds an
instruction against 16 for a float32 fma. A's words are copied one per row and word of
k (broadcast to every lane), B's in panels of 16 columns (a vector per word of k); the
rows and columns are padded with zeros to whole tiles and panels; for a product of
few rows (IN_PLACE_ROWS) whose B has rows of contiguous words, B's whole panels are read
where they lie instead. A tile of MR rows x 32 columns of C (2 MR vector sums) runs over
all words; a panel of B stays in the core's L2 while every row tile passes it. Integer
sums are exact (they wrap modulo 2**32 as the reference's int32 does), so no split of C
between threads changes a bit. Where malloc has no room for the packed copies the
product runs unpacked, one element at a time.

Signature: amx.py's with int32 pointers: f(M, N, K, A, a_row, a_col, B, b_row, b_col,
C, ldc), i64 sizes (K in words) and strides in elements.
"""
from __future__ import annotations

import os

import llvmlite.ir as ir

from ..llvm.emitter import loop
from ..llvm.types import I32, I64
from ..llvm.values import byte_products
from . import amx
from .gemm_tiles import over_word_tiles, word_slots, word_tile

NAME = "graphc_own_gemm_vnni_int32"             # A's bytes unsigned, B's signed
NAME_SIGNED_A = "graphc_own_gemm_vnnisu_int32"  # A's bytes signed, B's unsigned
MR = 8                       # rows of C a tile keeps in registers
PANEL = 32                   # columns of C a tile covers: two vectors of 16 lanes
LANES = 16
IN_PLACE_ROWS = 64           # B's panels read where they lie (not packed) for at most
# this many rows of C (one process, one thread): 1 x 2048 @ 2048 x 1000 (a classifier at
# batch 1) 0.226 -> 0.124 ms, 4 x 768 @ 768 x 3072 0.336 -> 0.152, 32 x 3072 @ 3072 x 768
# 0.528 -> 0.368; 64 x 768 @ 768 x 3072 0.719 -> 0.710


def usable(features: str) -> bool:
    """Whether the CPU has vpdpbusd (AVX512-VNNI with AVX-512) and GRAPHC_VNNI is not 0
    (which leaves 8-bit products to the loop nest)."""
    if os.environ.get("GRAPHC_VNNI", "1").strip() == "0":
        return False
    return {"+avx512vnni", "+avx512f"} <= set(features.split(","))


def declare(module: ir.Module, name: str = NAME) -> ir.Function:
    """The product function, declared in a program's module (its object code comes from
    gemm_ir.compiled)."""
    if name in module.globals:
        return module.globals[name]
    return ir.Function(module, amx.signature(I32), name)


def unpacked_product(b: ir.IRBuilder, args, acc, signed_a: bool = False) -> None:
    """The 8-bit unpacked product (amx.unpacked_product): int32 sums of byte products,
    the unsigned bytes first."""
    amx.unpacked_product(b, args, acc, lambda s, x, y: b.add(
        s, byte_products(b, y, x) if signed_a else byte_products(b, x, y)))


def build(module: ir.Module, allocator: str = "malloc", signed_a: bool = False) -> ir.Function:
    """The product function (A's bytes signed where signed_a): packing, the tiles, the
    int32 sums into C."""
    fn, b, acc = amx.product_function(module, NAME_SIGNED_A if signed_a else NAME, I32, I32)
    vi = ir.VectorType(I32, LANES)
    dot = ir.Function(module, ir.FunctionType(vi, [vi, vi, vi]),
                      "llvm.x86.avx512.vpdpbusd.512")
    M, N, Q, A, a_row, a_col, B, b_row, b_col, C, ldc = fn.args
    lanes_out, sums = word_slots(b, vi, MR)                 # in the entry block
    c = lambda v: ir.Constant(I64, v)                         # noqa: E731
    less = lambda bound: (lambda i: b.icmp_signed("<", i, bound))  # noqa: E731
    raw, Ap, Bp, Mp, Np = amx.word_panels(
        b, fn, Q, MR, PANEL, allocator, acc,
        lambda b_, args, acc_: unpacked_product(b_, args, acc_, signed_a))
    zero = ir.Constant(I32, 0)

    def pack_a(i):
        row = b.icmp_signed("<", i, M)
        first = b.mul(b.select(row, i, c(0)), a_row)

        def word(q):
            v = b.load(b.gep(A, [b.add(first, b.mul(q, a_col))]))
            b.store(b.select(row, v, zero), b.gep(Ap, [b.add(b.mul(i, Q), q)]))
        loop(b, "aq", c(0), c(1), less(Q), word)
    loop(b, "ai", c(0), c(1), less(Mp), pack_a)

    # B's rows of contiguous words, read by few row tiles: whole pairs of panels are
    # read where they lie, not packed
    in_place = b.and_(b.icmp_signed("==", b_col, c(1)),
                      b.icmp_signed("<=", M, c(IN_PLACE_ROWS)))

    def read_in_place(j0):
        tile = b.and_(j0, c(-PANEL))    # the tile's first column
        return b.and_(in_place, b.icmp_signed("<=", b.add(tile, c(PANEL)), N))

    def pack_b(j0):                    # a panel of 16 columns: Q rows of 16 words
        whole = b.and_(b.icmp_signed("<=", b.add(j0, c(LANES)), N),
                       b.icmp_signed("==", b_col, c(1)))

        def word_row(q):
            at = b.gep(Bp, [b.add(b.mul(j0, Q), b.mul(q, c(LANES)))])
            with b.if_else(whole) as (fast, slow):
                with fast:                 # 16 contiguous words
                    row = b.gep(B, [b.add(b.mul(q, b_row), j0)])
                    v = b.load(b.bitcast(row, ir.PointerType(vi)), align=4)
                    b.store(v, b.bitcast(at, ir.PointerType(vi)), align=64)
                with slow:
                    def column(jj):
                        j = b.add(j0, jj)
                        inside = b.icmp_signed("<", j, N)
                        src = b.add(b.mul(q, b_row), b.mul(b.select(inside, j, c(0)), b_col))
                        v = b.load(b.gep(B, [src]))
                        b.store(b.select(inside, v, zero), b.gep(at, [jj]))
                    loop(b, "bj", c(0), c(1), less(c(LANES)), column)
        with b.if_then(b.not_(read_in_place(j0))):
            loop(b, "bq", c(0), c(1), less(Q), word_row)
    loop(b, "bp", c(0), c(LANES), less(Np), pack_b)

    def tile(j0, i0):                  # vpdpbusd takes the unsigned bytes first
        word_tile(b, sums, Ap, Bp, Q, i0, j0, lambda s, a, v: b.call(
            dot, [s, v, a] if signed_a else [s, a, v]), vi, (read_in_place(j0), B, b_row))
        for r in range(MR):
            i = b.add(i0, c(r))
            with b.if_then(b.icmp_signed("<", i, M)):
                for v in range(2):
                    first = b.add(j0, c(v * LANES))
                    value = b.load(sums[r * 2 + v])
                    at = b.gep(C, [b.add(b.mul(i, ldc), first)])
                    whole = b.icmp_signed("<=", b.add(first, c(LANES)), N)
                    with b.if_else(whole) as (full, part):
                        with full:
                            b.store(value, b.bitcast(at, ir.PointerType(vi)), align=4)
                        with part:
                            b.store(value, b.bitcast(lanes_out, ir.PointerType(vi)),
                                    align=4)
                            left = b.sub(N, first)
                            count = b.select(b.icmp_signed("<", left, c(LANES)), left,
                                             c(LANES))
                            loop(b, f"c{v}", c(0), c(1), less(count),
                                 lambda jj: b.store(b.load(b.gep(lanes_out, [jj])),
                                                    b.gep(at, [jj])))

    over_word_tiles(b, Mp, Np, MR, PANEL, tile)
    amx.free_scratch(b, raw)
    b.ret_void()
    return fn


class Form:
    """One of the two product functions, as dot_plan.native_kernel hands them out:
    usable(), declare(), build() (amx_int8.py's forms derive from it)."""

    def __init__(self, name: str, signed_a: bool):
        self.NAME, self.signed_a = name, signed_a

    @staticmethod
    def usable(features: str) -> bool:
        return usable(features)

    def declare(self, module: ir.Module) -> ir.Function:
        return declare(module, self.NAME)

    def build(self, module: ir.Module, allocator: str = "malloc") -> ir.Function:
        return build(module, allocator, self.signed_a)


UNSIGNED_A, SIGNED_A = Form(NAME, False), Form(NAME_SIGNED_A, True)
