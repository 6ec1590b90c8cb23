"""bfloat16 products on Intel AMX (amx-tile + amx-bf16): C = A @ B with float32 sums,
each element of C rounded to bfloat16 once (round to nearest even, as graphc converts).

One AMX instruction (tdpbf16ps) multiplies a 16 x 32 bfloat16 tile of A by a 32 x 16
tile of B into a 16 x 16 float32 tile of C: 16,384 flops, against 32 for an AVX-512
fma. B's tile is stored as 16 rows of 16 column pairs (rows k and k + 1 of B
interleaved). The function packs A (row-major, zero-padded to multiples of 32 rows and
columns) and B (panels of 32 columns, pairs interleaved) into a heap scratch, then, a
panel of C at a time, runs each 32 x 32 block as 2 x 2 tiles (8 tile registers: 4 sums,
2 of A, 2 of B) over K in slices of KC, keeping the panel's float32 sums in the scratch
between slices, and rounds the panel into C. Each element of C is summed over K in the
same order wherever its block lies, so results do not depend on how threads split C.

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
from ..llvm.types import I8, I16, I32, I64, VOID
from ..llvm.values import f32_to_bf16

NAME = "graphc_own_gemm_amx_bfloat16"
BLOCK = AMX_SYMBOL.decode()
TILE = 32                     # rows and columns of C a block covers; K's step
KC = 256                      # K's slice: a block's A (16 KB) and B (16 KB) stay in L1

# One panel of 32 columns of C (float32 sums, 128-byte rows at c, `rows` blocks of 32
# rows) = the A rows at a (bfloat16, `as` bytes apart) times the panel of B at b (pair
# rows `bs` bytes apart: 128 in a packed panel), over K = 32 * kb: K in slices of KC
# (a slice's B, 16 KB, stays in L1 across the row blocks), each 32 x 32 block as 2 x 2
# tiles, starting from zero in the first slice and from the sums so far in the others.
# One function for the panel: the tile configuration is loaded once a call.
# (amx_int8.py runs the same block on 8-bit words.)
_BLOCK_TEMPLATE = r"""
declare x86_amx @llvm.x86.tileloadd64.internal(i16, i16, ptr, i64)
declare x86_amx @llvm.x86.tdpbf16ps.internal(i16, i16, i16, x86_amx, x86_amx, x86_amx)
declare void @llvm.x86.tilestored64.internal(i16, i16, ptr, i64, x86_amx)
declare x86_amx @llvm.x86.tilezero.internal(i16, i16)

define void @graphc_amx_block(ptr noalias %a, i64 %as, ptr noalias %b, i64 %bs,
                              ptr noalias %c, i64 %rows, i64 %kb) noinline {
entry:
  %as16 = mul i64 %as, 16
  %bs16 = mul i64 %bs, 16
  br label %slice
slice:
  %s = phi i64 [0, %entry], [%s1, %slice.next]
  %left = sub i64 %kb, %s
  %short = icmp ult i64 %left, KC_STEPS
  %steps = select i1 %short, i64 %left, i64 KC_STEPS
  %first = icmp eq i64 %s, 0
  %s_a = mul i64 %s, 64
  %s_b = mul i64 %s, %bs16
  %a_s = getelementptr i8, ptr %a, i64 %s_a
  %b_s = getelementptr i8, ptr %b, i64 %s_b
  br label %block
block:
  %r = phi i64 [0, %slice], [%r1, %block.done]
  %a_off = mul i64 %r, %as16
  %a_off2 = mul i64 %a_off, 2
  %pa = getelementptr i8, ptr %a_s, i64 %a_off2
  %pa1 = getelementptr i8, ptr %pa, i64 %as16
  %c_off = mul i64 %r, 4096
  %c00p = getelementptr i8, ptr %c, i64 %c_off
  %c01p = getelementptr i8, ptr %c00p, i64 64
  %c10p = getelementptr i8, ptr %c00p, i64 2048
  %c11p = getelementptr i8, ptr %c00p, i64 2112
  br i1 %first, label %zeros, label %sums
sums:
  %s00 = call x86_amx @llvm.x86.tileloadd64.internal(i16 16, i16 64, ptr %c00p, i64 128)
  %s01 = call x86_amx @llvm.x86.tileloadd64.internal(i16 16, i16 64, ptr %c01p, i64 128)
  %s10 = call x86_amx @llvm.x86.tileloadd64.internal(i16 16, i16 64, ptr %c10p, i64 128)
  %s11 = call x86_amx @llvm.x86.tileloadd64.internal(i16 16, i16 64, ptr %c11p, i64 128)
  br label %step
zeros:
  %z00 = call x86_amx @llvm.x86.tilezero.internal(i16 16, i16 64)
  %z01 = call x86_amx @llvm.x86.tilezero.internal(i16 16, i16 64)
  %z10 = call x86_amx @llvm.x86.tilezero.internal(i16 16, i16 64)
  %z11 = call x86_amx @llvm.x86.tilezero.internal(i16 16, i16 64)
  br label %step
step:
  %k = phi i64 [0, %sums], [0, %zeros], [%k1, %step]
  %c00 = phi x86_amx [%s00, %sums], [%z00, %zeros], [%n00, %step]
  %c01 = phi x86_amx [%s01, %sums], [%z01, %zeros], [%n01, %step]
  %c10 = phi x86_amx [%s10, %sums], [%z10, %zeros], [%n10, %step]
  %c11 = phi x86_amx [%s11, %sums], [%z11, %zeros], [%n11, %step]
  %ao = mul i64 %k, 64
  %pa0k = getelementptr i8, ptr %pa, i64 %ao
  %pa1k = getelementptr i8, ptr %pa1, i64 %ao
  %bo = mul i64 %k, %bs16
  %pb0 = getelementptr i8, ptr %b_s, i64 %bo
  %pb1 = getelementptr i8, ptr %pb0, i64 64
  %ta0 = call x86_amx @llvm.x86.tileloadd64.internal(i16 16, i16 64, ptr %pa0k, i64 %as)
  %ta1 = call x86_amx @llvm.x86.tileloadd64.internal(i16 16, i16 64, ptr %pa1k, i64 %as)
  %tb0 = call x86_amx @llvm.x86.tileloadd64.internal(i16 16, i16 64, ptr %pb0, i64 %bs)
  %tb1 = call x86_amx @llvm.x86.tileloadd64.internal(i16 16, i16 64, ptr %pb1, i64 %bs)
  %n00 = call x86_amx @llvm.x86.tdpbf16ps.internal(i16 16, i16 64, i16 64, x86_amx %c00, x86_amx %ta0, x86_amx %tb0)
  %n01 = call x86_amx @llvm.x86.tdpbf16ps.internal(i16 16, i16 64, i16 64, x86_amx %c01, x86_amx %ta0, x86_amx %tb1)
  %n10 = call x86_amx @llvm.x86.tdpbf16ps.internal(i16 16, i16 64, i16 64, x86_amx %c10, x86_amx %ta1, x86_amx %tb0)
  %n11 = call x86_amx @llvm.x86.tdpbf16ps.internal(i16 16, i16 64, i16 64, x86_amx %c11, x86_amx %ta1, x86_amx %tb1)
  %k1 = add i64 %k, 1
  %again = icmp ult i64 %k1, %steps
  br i1 %again, label %step, label %block.done
block.done:
  call void @llvm.x86.tilestored64.internal(i16 16, i16 64, ptr %c00p, i64 128, x86_amx %n00)
  call void @llvm.x86.tilestored64.internal(i16 16, i16 64, ptr %c01p, i64 128, x86_amx %n01)
  call void @llvm.x86.tilestored64.internal(i16 16, i16 64, ptr %c10p, i64 128, x86_amx %n10)
  call void @llvm.x86.tilestored64.internal(i16 16, i16 64, ptr %c11p, i64 128, x86_amx %n11)
  %r1 = add i64 %r, 1
  %more_rows = icmp ult i64 %r1, %rows
  br i1 %more_rows, label %block, label %slice.next
slice.next:
  %s1 = add i64 %s, %steps
  %more_k = icmp ult i64 %s1, %kb
  br i1 %more_k, label %slice, label %done
done:
  ret void
}
"""


def block_ir(name: str = BLOCK, product: str = "tdpbf16ps", steps: int = KC // TILE) -> str:
    """The block kernel's IR text: function `name`, tile product `product` (amx_int8.py:
    the 8-bit ones), slices of `steps` steps of K."""
    return _BLOCK_TEMPLATE.replace("KC_STEPS", str(steps)).replace(
        "tdpbf16ps", product).replace(f"@{BLOCK}(", f"@{name}(")


BLOCK_IR = block_ir()


def usable(features: str) -> bool:
    """Whether this process may run tile code: the CPU has amx-tile and amx-bf16 and the
    kernel granted the tiles' state (asked once; graphc_runtime.host)."""
    flags = set(features.split(","))
    if not {"+amx-tile", "+amx-bf16"} <= flags:
        return False
    from graphc_runtime.host import amx_usable
    return amx_usable()


def signature(element: ir.Type = I16) -> ir.FunctionType:
    """f(M, N, K, A, a_row, a_col, B, b_row, b_col, C, ldc): i64 sizes and strides,
    pointers to `element` (bfloat16 bits; vnni.py's int32)."""
    p = ir.PointerType(element)
    return ir.FunctionType(VOID, [I64, I64, I64, p, I64, I64, p, I64, I64, p, I64])


def declare(module: ir.Module) -> ir.Function:
    """The product function, declared in a program's module (its object code comes from
    gemm_ir.compiled)."""
    if NAME in module.globals:
        return module.globals[NAME]
    return ir.Function(module, signature(), NAME)


def unpacked_product(b: ir.IRBuilder, args, acc, add, result=lambda v: v) -> None:
    """C = A @ B read where the operands lie, one element of C at a time, summed over K
    in order in the `acc` slot (add(sum, a, b) -> the new sum; result(sum) -> what C
    holds): the product when the heap has no room for the packed copies. Slow, never
    wrong, never a crash."""
    M, N, Kd, A, a_row, a_col, B, b_row, b_col, C, ldc = args
    c = lambda v: ir.Constant(I64, v)
    less = lambda bound: (lambda i: b.icmp_signed("<", i, bound))

    def element(i, j):
        b.store(ir.Constant(acc.type.pointee, 0), acc)

        def term(k):
            x = b.load(b.gep(A, [b.add(b.mul(i, a_row), b.mul(k, a_col))]))
            y = b.load(b.gep(B, [b.add(b.mul(k, b_row), b.mul(j, b_col))]))
            b.store(add(b.load(acc), x, y), acc)
        loop(b, "uk", c(0), c(1), less(Kd), term)
        b.store(result(b.load(acc)), b.gep(C, [b.add(b.mul(i, ldc), j)]))
    loop(b, "ui", c(0), c(1), less(M),
         lambda i: loop(b, "uj", c(0), c(1), less(N), lambda j: element(i, j)))


def _unpacked_product(b: ir.IRBuilder, args, acc) -> None:
    """The bfloat16 unpacked product: float32 sums, rounded to bfloat16 once."""
    widen = lambda v: b.bitcast(b.shl(b.zext(v, I32), ir.Constant(I32, 16)), ir.FloatType())
    unpacked_product(b, args, acc, lambda s, x, y: b.fadd(s, b.fmul(widen(x), widen(y))),
                     lambda s: f32_to_bf16(b, s))


def product_function(module: ir.Module, name: str, element: ir.Type = I16,
                     acc_type: ir.Type = ir.FloatType()):
    """(a product function of signature(element) named `name`, A, B and C noalias; a
    builder at its entry; an `acc_type` slot in the entry block for the unpacked
    product)."""
    fn = ir.Function(module, signature(element), name)
    for arg in (fn.args[3], fn.args[6], fn.args[9]):
        arg.add_attribute("noalias")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    return fn, b, b.alloca(acc_type, name="acc")


def packed_scratch(b: ir.IRBuilder, fn: ir.Function, size, allocator: str, acc, ty,
                   unpacked=None):
    """(the heap block, its first 64-byte aligned address as a `ty` pointer) for the
    packed copies, `size` bytes from `allocator`; where it returns NULL the product runs
    unpacked (`unpacked(b, fn.args, acc)`, by default the bfloat16 _unpacked_product)
    and the function returns."""
    i8p = ir.PointerType(I8)
    module = fn.module
    malloc = module.globals.get(allocator) or \
        ir.Function(module, ir.FunctionType(i8p, [I64]), allocator)
    raw = b.call(malloc, [b.add(size, ir.Constant(I64, 64))])
    with b.if_then(b.icmp_unsigned("==", raw, ir.Constant(i8p, None)), likely=False):
        (unpacked or _unpacked_product)(b, fn.args, acc)   # no memory for the copies
        b.ret_void()
    aligned = b.and_(b.add(b.ptrtoint(raw, I64), ir.Constant(I64, 63)), ir.Constant(I64, -64))
    return raw, b.inttoptr(aligned, ir.PointerType(ty))


def word_panels(b: ir.IRBuilder, fn: ir.Function, steps, rows: int, panel: int,
                allocator: str, acc, unpacked=None):
    """The packed copies of the 32-bit word products (bf16_pairs.py, vnni.py) in one heap
    block (packed_scratch): A's words, a row per `steps` words with the rows padded to
    a multiple of `rows`; then B's, 64-byte aligned, in 16-word panels with the columns
    padded to a multiple of `panel`. Returns (raw, A's words, B's words, the padded
    rows, the padded columns) as i32 pointers and i64 values."""
    M, N = fn.args[0], fn.args[1]
    c = lambda v: ir.Constant(I64, v)
    up = lambda n, m: b.mul(b.sdiv(b.add(n, c(m - 1)), c(m)), c(m))
    Mp, Np = up(M, rows), up(N, panel)
    a_words = up(b.mul(Mp, steps), 16)          # B's panels start 64-byte aligned
    size = b.mul(b.add(a_words, b.mul(Np, steps)), c(4))
    raw, base = packed_scratch(b, fn, size, allocator, acc, I32, unpacked)
    return raw, base, b.gep(base, [a_words]), Mp, Np


def pack_rows(b: ir.IRBuilder, A, a_row, a_col, M, K, Ap, Mp, Kp, zero) -> None:
    """A's rows packed at Ap, row i at i*Kp: its K elements (A[i*a_row + k*a_col]),
    then `zero` up to Kp; rows M..Mp all zeros."""
    c = lambda v: ir.Constant(I64, v)                                # noqa: E731
    less = lambda bound: (lambda i: b.icmp_signed("<", i, bound))   # noqa: E731

    def row(i):
        dst = b.mul(i, Kp)
        width = b.select(b.icmp_signed("<", i, M), K, c(0))
        src = b.mul(i, a_row)
        loop(b, "ak", c(0), c(1), less(width), lambda k: b.store(
            b.load(b.gep(A, [b.add(src, b.mul(k, a_col))])), b.gep(Ap, [b.add(dst, k)])))
        loop(b, "az", b.add(dst, width), c(1), less(b.add(dst, Kp)),
             lambda t: b.store(zero, b.gep(Ap, [t])))
    loop(b, "ai", c(0), c(1), less(Mp), row)


def free_scratch(b: ir.IRBuilder, raw) -> None:
    module = b.function.module
    i8p = ir.PointerType(I8)
    free = module.globals.get("free") or \
        ir.Function(module, ir.FunctionType(VOID, [i8p]), "free")
    b.call(free, [raw])


def build(module: ir.Module, allocator: str = "malloc") -> ir.Function:
    """The product function's body (the driver: packing, blocks, rounding); the block
    kernel is BLOCK_IR, linked in beside it. The packed copies' scratch comes from
    `allocator` (malloc; a test names one that fails); where it returns NULL the product
    runs unpacked (_unpacked_product)."""
    fn, b, acc = product_function(module, NAME)
    i8p = ir.PointerType(I8)
    block = ir.Function(module, ir.FunctionType(VOID, [i8p, I64, i8p, I64, i8p, I64, I64]),
                        BLOCK)
    M, N, Kd, A, a_row, a_col, B, b_row, b_col, C, ldc = fn.args
    c = lambda v: ir.Constant(I64, v)
    up = lambda n: b.and_(b.add(n, c(TILE - 1)), c(-TILE))
    Mp, Kp, Np = up(M), up(Kd), up(N)
    a_elems, b_elems = b.mul(Mp, Kp), b.mul(Kp, Np)
    size = b.add(b.mul(b.add(a_elems, b_elems), c(2)), b.mul(Mp, c(TILE * 4)))
    raw, base = packed_scratch(b, fn, size, allocator, acc, I16)
    Ap = base
    Bp = b.gep(base, [a_elems])
    Cs = b.bitcast(b.gep(Bp, [b_elems]), ir.PointerType(ir.FloatType()))
    less = lambda bound: (lambda i: b.icmp_signed("<", i, bound))
    one = c(1)
    zero = ir.Constant(I16, 0)

    def panel_cols(j0):
        """Columns of C in the panel from j0: 32, fewer in the last."""
        cols = b.sub(N, j0)
        return b.select(b.icmp_signed("<", cols, c(TILE)), cols, c(TILE))

    def fill(dst, begin, end, value, name):
        """dst[begin..end) = value."""
        loop(b, name, begin, one, less(end), lambda t: b.store(value, b.gep(dst, [t])))

    pack_rows(b, A, a_row, a_col, M, Kd, Ap, Mp, Kp, zero)

    # B: the panel of columns j0..j0+31 at Bp + j0*Kp; its pair row kk 64 elements,
    # column jj's pair at 2*jj: (B[2kk, j], B[2kk + 1, j]), zeros past K and past N
    def b_panel(j0):
        panel = b.mul(j0, Kp)
        cols = panel_cols(j0)

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

    # a panel of C's columns at a time (BLOCK_IR), its float32 sums in Cs (Mp x 32)
    def panel(j0):
        b_panel = b.gep(Bp, [b.mul(j0, Kp)])
        cols = panel_cols(j0)
        b.call(block, [b.bitcast(Ap, i8p), b.mul(Kp, c(2)), b.bitcast(b_panel, i8p),
                       c(4 * TILE), b.bitcast(Cs, i8p), b.udiv(Mp, c(TILE)), b.udiv(Kp, c(TILE))])

        def out_row(r):                 # the panel's sums rounded into C
            src = b.mul(r, c(TILE))
            dst = b.add(b.mul(r, ldc), j0)

            def elem(j):
                v = b.load(b.gep(Cs, [b.add(src, j)]))
                b.store(f32_to_bf16(b, v), b.gep(C, [b.add(dst, j)]))
            loop(b, "cj", c(0), one, less(cols), elem)
        loop(b, "cr", c(0), one, less(M), out_row)
    loop(b, "nj", c(0), c(TILE), less(N), panel)
    free_scratch(b, raw)
    b.ret_void()
    return fn

