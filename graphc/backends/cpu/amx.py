"""bfloat16 products on Intel AMX (amx-tile + amx-bf16): C = A @ B with float32 sums,
each element of C rounded to bfloat16 once (round to nearest even, as graphc converts).

One AMX instruction (tdpbf16ps) multiplies a 16 x 32 bfloat16 tile of A by a 32 x 16
tile of B into a 16 x 16 float32 tile of C: 16,384 flops, against 32 for an AVX-512
fma. B's tile is stored as 16 rows of 16 column pairs (rows k and k + 1 of B
interleaved). The function packs A (row-major, zero-padded to multiples of 32 rows and
columns) and B (panels of 32 columns, pairs interleaved) into a heap scratch, then runs
each 32 x 32 block of C as 2 x 2 tiles over all of K (8 tile registers: 4 sums, 2 of A,
2 of B) and rounds the block into C. Each element of C is summed over K in the same
order wherever its block lies, so results do not depend on how threads split C.

Signature (i64 sizes and strides in elements, i16 pointers to bfloat16 bits):
f(M, N, K, A, a_row, a_col, B, b_row, b_col, C, ldc): C[i*ldc + j] =
bf16(sum_k A[i*a_row + k*a_col] * B[k*b_row + j*b_col]) for i < M, j < N.

Code using tiles runs only in a process that asked the kernel for them
(graphc_runtime.host.amx_usable); the CPU backend takes this path only there.
"""
from __future__ import annotations

import llvmlite.ir as ir

from graphc_runtime.host import AMX_SYMBOL

from ..llvm.emitter import loop
from ..llvm.types import I8, I16, I64, VOID
from ..llvm.values import f32_to_bf16

NAME = "graphc_own_gemm_amx_bfloat16"
BLOCK = AMX_SYMBOL.decode()
TILE = 32                     # rows and columns of C a block covers; K's step

# One 32 x 32 block of C (float32, 128-byte rows at c) = the A rows at a (bfloat16,
# `as` bytes apart, 32 columns a step) times the B panel at b (16 pair rows of 128 bytes
# a step), over kb steps of 32.
BLOCK_IR = r"""
declare x86_amx @llvm.x86.tileloadd64.internal(i16, i16, ptr, i64)
declare x86_amx @llvm.x86.tdpbf16ps.internal(i16, i16, i16, x86_amx, x86_amx, x86_amx)
declare void @llvm.x86.tilestored64.internal(i16, i16, ptr, i64, x86_amx)
declare x86_amx @llvm.x86.tilezero.internal(i16, i16)

define void @graphc_amx_block(ptr noalias %a, i64 %as, ptr noalias %b, ptr noalias %c,
                              i64 %kb) noinline {
entry:
  %z = call x86_amx @llvm.x86.tilezero.internal(i16 16, i16 64)
  %as16 = mul i64 %as, 16
  %a1 = getelementptr i8, ptr %a, i64 %as16
  br label %step
step:
  %k = phi i64 [0, %entry], [%k1, %step]
  %c00 = phi x86_amx [%z, %entry], [%n00, %step]
  %c01 = phi x86_amx [%z, %entry], [%n01, %step]
  %c10 = phi x86_amx [%z, %entry], [%n10, %step]
  %c11 = phi x86_amx [%z, %entry], [%n11, %step]
  %ao = mul i64 %k, 64
  %pa0 = getelementptr i8, ptr %a, i64 %ao
  %pa1 = getelementptr i8, ptr %a1, i64 %ao
  %bo = mul i64 %k, 2048
  %pb0 = getelementptr i8, ptr %b, i64 %bo
  %pb1 = getelementptr i8, ptr %pb0, i64 64
  %ta0 = call x86_amx @llvm.x86.tileloadd64.internal(i16 16, i16 64, ptr %pa0, i64 %as)
  %ta1 = call x86_amx @llvm.x86.tileloadd64.internal(i16 16, i16 64, ptr %pa1, i64 %as)
  %tb0 = call x86_amx @llvm.x86.tileloadd64.internal(i16 16, i16 64, ptr %pb0, i64 128)
  %tb1 = call x86_amx @llvm.x86.tileloadd64.internal(i16 16, i16 64, ptr %pb1, i64 128)
  %n00 = call x86_amx @llvm.x86.tdpbf16ps.internal(i16 16, i16 64, i16 64, x86_amx %c00, x86_amx %ta0, x86_amx %tb0)
  %n01 = call x86_amx @llvm.x86.tdpbf16ps.internal(i16 16, i16 64, i16 64, x86_amx %c01, x86_amx %ta0, x86_amx %tb1)
  %n10 = call x86_amx @llvm.x86.tdpbf16ps.internal(i16 16, i16 64, i16 64, x86_amx %c10, x86_amx %ta1, x86_amx %tb0)
  %n11 = call x86_amx @llvm.x86.tdpbf16ps.internal(i16 16, i16 64, i16 64, x86_amx %c11, x86_amx %ta1, x86_amx %tb1)
  %k1 = add i64 %k, 1
  %more = icmp ult i64 %k1, %kb
  br i1 %more, label %step, label %done
done:
  %p01 = getelementptr i8, ptr %c, i64 64
  %p10 = getelementptr i8, ptr %c, i64 2048
  %p11 = getelementptr i8, ptr %c, i64 2112
  call void @llvm.x86.tilestored64.internal(i16 16, i16 64, ptr %c, i64 128, x86_amx %n00)
  call void @llvm.x86.tilestored64.internal(i16 16, i16 64, ptr %p01, i64 128, x86_amx %n01)
  call void @llvm.x86.tilestored64.internal(i16 16, i16 64, ptr %p10, i64 128, x86_amx %n10)
  call void @llvm.x86.tilestored64.internal(i16 16, i16 64, ptr %p11, i64 128, x86_amx %n11)
  ret void
}
"""


def usable(features: str) -> bool:
    """Whether this process may run tile code: the CPU has amx-tile and amx-bf16 and the
    kernel granted the tiles' state (asked once; graphc_runtime.host)."""
    flags = set(features.split(","))
    if not {"+amx-tile", "+amx-bf16"} <= flags:
        return False
    from graphc_runtime.host import amx_usable
    return amx_usable()


def signature() -> ir.FunctionType:
    p = ir.PointerType(I16)
    return ir.FunctionType(VOID, [I64, I64, I64, p, I64, I64, p, I64, I64, p, I64])


def declare(module: ir.Module) -> ir.Function:
    """The product function, declared in a program's module (NativeModule links in its
    optimized body, gemm_ir.optimized_ir)."""
    if NAME in module.globals:
        return module.globals[NAME]
    return ir.Function(module, signature(), NAME)


def build(module: ir.Module) -> ir.Function:
    """The product function's body (the driver: packing, blocks, rounding); the block
    kernel is BLOCK_IR, linked in beside it."""
    fn = ir.Function(module, signature(), NAME)
    block = ir.Function(module, ir.FunctionType(
        VOID, [ir.PointerType(I8), I64, ir.PointerType(I8), ir.PointerType(I8), I64]), BLOCK)
    malloc = ir.Function(module, ir.FunctionType(ir.PointerType(I8), [I64]), "malloc")
    free = ir.Function(module, ir.FunctionType(VOID, [ir.PointerType(I8)]), "free")
    M, N, Kd, A, a_row, a_col, B, b_row, b_col, C, ldc = fn.args
    for arg in (A, B, C):
        arg.add_attribute("noalias")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    c = lambda v: ir.Constant(I64, v)
    up = lambda n: b.and_(b.add(n, c(TILE - 1)), c(-TILE))
    Mp, Kp, Np = up(M), up(Kd), up(N)
    a_elems, b_elems = b.mul(Mp, Kp), b.mul(Kp, Np)
    size = b.add(b.mul(b.add(a_elems, b_elems), c(2)), c(TILE * TILE * 4 + 64))
    raw = b.call(malloc, [size])
    base = b.inttoptr(b.and_(b.add(b.ptrtoint(raw, I64), c(63)), c(-64)),
                      ir.PointerType(I16))
    Ap = base
    Bp = b.gep(base, [a_elems])
    Cs = b.bitcast(b.gep(Bp, [b_elems]), ir.PointerType(ir.FloatType()))
    less = lambda bound: (lambda i: b.icmp_signed("<", i, bound))
    one = c(1)
    zero = ir.Constant(I16, 0)

    def fill(dst, begin, end, value, name):
        """dst[begin..end) = value."""
        loop(b, name, begin, one, less(end), lambda t: b.store(value, b.gep(dst, [t])))

    # A: row i at Ap + i*Kp: its K elements, then zeros (all zeros past row M)
    def a_row_copy(i):
        dst = b.mul(i, Kp)
        width = b.select(b.icmp_signed("<", i, M), Kd, c(0))
        src = b.mul(i, a_row)

        def elem(k):
            v = b.load(b.gep(A, [b.add(src, b.mul(k, a_col))]))
            b.store(v, b.gep(Ap, [b.add(dst, k)]))
        loop(b, "ak", c(0), one, less(width), elem)
        fill(Ap, b.add(dst, width), b.add(dst, Kp), zero, "az")
    loop(b, "ai", c(0), one, less(Mp), a_row_copy)

    # B: the panel of columns j0..j0+31 at Bp + j0*Kp; its pair row kk 64 elements,
    # column jj's pair at 2*jj: (B[2kk, j], B[2kk + 1, j]), zeros past K and past N
    def b_panel(j0):
        panel = b.mul(j0, Kp)
        cols = b.sub(N, j0)
        cols = b.select(b.icmp_signed("<", cols, c(TILE)), cols, c(TILE))

        def pair_row(kk):
            k0 = b.mul(kk, c(2))
            k1 = b.add(k0, one)
            has0, has1 = b.icmp_signed("<", k0, Kd), b.icmp_signed("<", k1, Kd)
            r0 = b.mul(b.select(has0, k0, c(0)), b_row)      # rows past K: read row 0
            r1 = b.mul(b.select(has1, k1, c(0)), b_row)
            dst = b.add(panel, b.mul(kk, c(2 * TILE)))
            width = b.select(has0, cols, c(0))

            def elem(jj):
                col = b.mul(b.add(j0, jj), b_col)
                v0 = b.load(b.gep(B, [b.add(r0, col)]))
                v1 = b.select(has1, b.load(b.gep(B, [b.add(r1, col)])), zero)
                at = b.add(dst, b.mul(jj, c(2)))
                b.store(v0, b.gep(Bp, [at]))
                b.store(v1, b.gep(Bp, [b.add(at, one)]))
            loop(b, "bj", c(0), one, less(width), elem)
            fill(Bp, b.add(dst, b.mul(width, c(2))), b.add(dst, c(2 * TILE)), zero, "bz")
        loop(b, "bk", c(0), one, less(b.udiv(Kp, c(2))), pair_row)
    loop(b, "bp", c(0), c(TILE), less(N), b_panel)

    # blocks: panel outer (it stays in the core's cache), rows inner
    steps = b.udiv(Kp, c(TILE))
    i8p = ir.PointerType(I8)

    def panel(j0):
        b_panel = b.bitcast(b.gep(Bp, [b.mul(j0, Kp)]), i8p)
        cols = b.sub(N, j0)
        cols = b.select(b.icmp_signed("<", cols, c(TILE)), cols, c(TILE))

        def rows_block(i0):
            b.call(block, [b.bitcast(b.gep(Ap, [b.mul(i0, Kp)]), i8p), b.mul(Kp, c(2)),
                           b_panel, b.bitcast(Cs, i8p), steps])
            rows = b.sub(M, i0)
            rows = b.select(b.icmp_signed("<", rows, c(TILE)), rows, c(TILE))

            def out_row(r):
                src = b.mul(r, c(TILE))
                dst = b.add(b.mul(b.add(i0, r), ldc), j0)

                def elem(j):
                    v = b.load(b.gep(Cs, [b.add(src, j)]))
                    b.store(f32_to_bf16(b, v), b.gep(C, [b.add(dst, j)]))
                loop(b, "cj", c(0), one, less(cols), elem)
            loop(b, "cr", c(0), one, less(rows), out_row)
        loop(b, "mi", c(0), c(TILE), less(M), rows_block)
    loop(b, "nj", c(0), c(TILE), less(N), panel)
    b.call(free, [raw])
    b.ret_void()
    return fn

