"""bfloat16 products on AVX512-BF16 (vdpbf16ps), for CPUs without AMX tiles: C = A @ B
with float32 sums, each element of C rounded to bfloat16 once (round to nearest even).

vdpbf16ps adds to each of 16 float32 lanes the products of a pair of bfloat16 values:
acc[j] += a[2j] * b[2j] + a[2j+1] * b[2j+1], 64 flops an instruction against 32 for a
float32 fma. So the sums run over pairs of k: A is packed as one 32-bit word per row and
pair (A[i, 2p], A[i, 2p+1]), broadcast to every lane; B in panels of 16 columns, one
32-bit word per pair and column (B[2p, j], B[2p+1, j]); K, the rows and the columns are
padded with zeros to whole pairs, tiles and panels. A tile of MR rows x 32 columns of C
(2 MR vector sums) runs over all pairs in order; a panel of B (P pairs x 32 columns)
stays in the core's L2 while every row tile passes it. Each element of C is summed over
the pairs in the same order wherever its tile lies, so results do not depend on how
threads split C. Where malloc has no room for the packed copies the product runs
unpacked (amx.py's fallback: float32 sums, one element at a time).

Signature: that of amx.py (i64 sizes and strides in elements, i16 pointers to bfloat16
bits): f(M, N, K, A, a_row, a_col, B, b_row, b_col, C, ldc).
"""
from __future__ import annotations

import os

import llvmlite.ir as ir

from ..llvm.emitter import loop
from ..llvm.types import I32, I64
from ..llvm.values import f32_to_bf16
from . import amx
from .gemm_tiles import over_word_tiles, word_slots, word_tile

NAME = "graphc_own_gemm_dpbf16_bfloat16"
MR = 8                       # rows of C a tile keeps in registers
PANEL = 32                   # columns of C a tile covers: two vectors of 16 lanes
LANES = 16


def usable(features: str) -> bool:
    """Whether the CPU has vdpbf16ps (AVX512-BF16 with AVX-512) and GRAPHC_BF16_PAIRS is
    not 0 (which leaves bfloat16 products to the float32 kernels)."""
    if os.environ.get("GRAPHC_BF16_PAIRS", "1").strip() == "0":
        return False
    return {"+avx512bf16", "+avx512f"} <= set(features.split(","))


def declare(module: ir.Module) -> ir.Function:
    """The product function, declared in a program's module (its object code comes from
    gemm_ir.compiled)."""
    if NAME in module.globals:
        return module.globals[NAME]
    return ir.Function(module, amx.signature(), NAME)


def build(module: ir.Module, allocator: str = "malloc") -> ir.Function:
    """The product function: packing, the tiles, rounding into C."""
    fn, b, acc = amx.product_function(module, NAME)
    f32 = ir.FloatType()
    vi, vf = ir.VectorType(I32, LANES), ir.VectorType(f32, LANES)
    dot = ir.Function(module, ir.FunctionType(vf, [vf, vi, vi]),
                      "llvm.x86.avx512bf16.dpbf16ps.512")
    M, N, Kd, A, a_row, a_col, B, b_row, b_col, C, ldc = fn.args
    lanes_out, sums = word_slots(b, vf, MR)                 # in the entry block
    c = lambda v: ir.Constant(I64, v)                         # noqa: E731
    less = lambda bound: (lambda i: b.icmp_signed("<", i, bound))  # noqa: E731
    P = b.sdiv(b.add(Kd, c(1)), c(2))
    raw, Ap, Bp, Mp, Np = amx.word_panels(b, fn, P, MR, PANEL, allocator, acc)

    def pair(src, inside, ks, index_of):
        """The 32-bit word of src's bfloat16 values at index_of(k) for the two k of ks
        (zero where not `inside` or k >= K)."""
        def word(ok, at):
            raw16 = b.load(b.gep(src, [b.select(ok, at, c(0))]))
            return b.select(ok, b.zext(raw16, I32), ir.Constant(I32, 0))
        k0, k1 = ks
        lo = word(b.and_(inside, b.icmp_signed("<", k0, Kd)), index_of(k0))
        hi = word(b.and_(inside, b.icmp_signed("<", k1, Kd)), index_of(k1))
        return b.or_(lo, b.shl(hi, ir.Constant(I32, 16)))

    def pack_a(i):
        row = b.icmp_signed("<", i, M)

        def word(p):
            ks = (b.mul(p, c(2)), b.add(b.mul(p, c(2)), c(1)))
            v = pair(A, row, ks, lambda k: b.add(b.mul(i, a_row), b.mul(k, a_col)))
            b.store(v, b.gep(Ap, [b.add(b.mul(i, P), p)]))
        loop(b, "ap", c(0), c(1), less(P), word)
    loop(b, "ai", c(0), c(1), less(Mp), pack_a)

    def pack_b(j0):                    # a panel of 16 columns: P rows of 16 words
        def pair_row(p):
            ks = (b.mul(p, c(2)), b.add(b.mul(p, c(2)), c(1)))

            def word(jj):
                j = b.add(j0, jj)
                v = pair(B, b.icmp_signed("<", j, N), ks,
                         lambda k: b.add(b.mul(k, b_row), b.mul(j, b_col)))
                b.store(v, b.gep(Bp, [b.add(b.mul(j0, P), b.add(b.mul(p, c(LANES)), jj))]))
            loop(b, "bj", c(0), c(1), less(c(LANES)), word)
        loop(b, "bk", c(0), c(1), less(P), pair_row)
    loop(b, "bp", c(0), c(LANES), less(Np), pack_b)

    def tile(j0, i0):
        word_tile(b, sums, Ap, Bp, P, i0, j0, lambda s, a, v: b.call(dot, [s, a, v]), vi)
        for r in range(MR):
            i = b.add(i0, c(r))
            with b.if_then(b.icmp_signed("<", i, M)):
                for v in range(2):
                    b.store(b.load(sums[r * 2 + v]),
                            b.bitcast(lanes_out, ir.PointerType(vf)), align=4)
                    first = b.add(j0, c(v * LANES))

                    def out(jj):
                        value = b.load(b.gep(lanes_out, [jj]))
                        at = b.add(b.mul(i, ldc), b.add(first, jj))
                        b.store(f32_to_bf16(b, value), b.gep(C, [at]))
                    left = b.sub(N, first)
                    count = b.select(b.icmp_signed("<", left, c(LANES)), left, c(LANES))
                    loop(b, f"c{v}", c(0), c(1), less(count), out)

    over_word_tiles(b, Mp, Np, MR, PANEL, tile)
    amx.free_scratch(b, raw)
    b.ret_void()
    return fn
