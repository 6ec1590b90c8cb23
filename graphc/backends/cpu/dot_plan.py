"""How the CPU runs a product: through OpenBLAS or graphc's own GEMM kernels (blas_plan,
own_form, window_plan), and which of a dot kernel's buffers it keeps in the kernel's own
scratch, a batch index at a time (scratch_buffers)."""
from __future__ import annotations

from graphc_runtime.dims import Dim, Undecidable, hint
from graphc_runtime.dims import prod as sym_prod

from ...ir import dtypes
from ...ir.ops.shape import window_positions
from ...kernels import index as ix
from ...kernels import kernel as K

BLAS_MIN_FLOPS = 1 << 15
SCRATCH_BYTES = 512 << 10      # largest per-batch-index product kept in a scratch
SHORT_SUMS = 512               # terms a sum up to which the own nn kernel takes any size


def blas_plan(k: "K.DotKernel"):
    """How to run this dot as BLAS gemm calls (per batch index), or None."""
    from graphc_runtime import blas
    if isinstance(k, K.WinogradKernel):
        from .winograd import winograd_plan
        return winograd_plan(k)
    native = bf16_form(k) or int8_form(k)
    if not native and (k.out.dtype not in ("float32", "float64") or
                      k.acc_dtype != k.out.dtype):
        return None
    real = lambda vs: [v for v in vs if isinstance(v, ix.IVar)]
    ms, ns, ks = real(k.m_vars), real(k.n_vars), real(k.k_vars)
    rows_of = merged_columns(k, ns, ks)
    if rows_of is not None:             # one run of columns (a 1x1 convolution's image)
        ns = ns[1:]
    elif len(ks) > 1 or len(ns) == 2 and len(ks) == 1:
        return window_plan(k, ms, ns, ks)
    if len(ms) > 1 or len(ns) > 1:
        return None
    size = lambda vs: ix.extent_of(vs[0]) if vs else 1
    M, N, Kd = size(ms), size(ns), size(ks)
    if rows_of is not None:
        N = ix.extent_of(rows_of) * N
    if hint(M * N * Kd) < BLAS_MIN_FLOPS or max(map(hint, (M, N, Kd))) >= 2 ** 31:
        return None
    plan = {"M": M, "N": N, "K": Kd, "batch_coefs": {}}
    if rows_of is not None:
        plan["merged"] = rows_of.name   # the major column variable, folded into N
    names = {v.name for v in real(k.batch_vars)}
    merged = set() if rows_of is None else {rows_of.name}
    for operand, rows, cols, key in ((k.lhs, ms, ks, "a"), (k.rhs, ks, ns, "b")):
        aff = _strided(operand, k.out.dtype)
        if aff is None:
            return None
        coefs, const = aff
        r = coefs.get(rows[0].name, 0) if rows else 0
        c = coefs.get(cols[0].name, 0) if cols else 0
        extra = set(coefs) - names - {v.name for v in rows + cols} - merged
        if extra:
            return None
        nr, nc = (M, Kd) if key == "a" else (Kd, N)
        if (c == 1 or nc == 1) and (nr == 1 or _at_least(r, nc)):
            trans, ld = 111, (r if _many(nr) else nc)
        elif (r == 1 or nr == 1) and (nc == 1 or _at_least(c, nr)):
            trans, ld = 112, (c if _many(nc) else nr)
        else:
            return None
        ld = ld if isinstance(ld, Dim) else max(ld, 1)
        plan[f"trans_{key}"], plan[f"ld{key}"], plan[f"{key}_const"] = trans, ld, const
        plan["batch_coefs"][operand.buffer.id] = [(n, coefs[n]) for n in coefs if n in names]
    if k.lhs.buffer.id == k.rhs.buffer.id:
        plan["batch_coefs"][k.lhs.buffer.id] = None     # both operands: computed separately
        la = ix.affine(ix.linearize(k.lhs.index, k.lhs.buffer.shape))[0]
        lb = ix.affine(ix.linearize(k.rhs.index, k.rhs.buffer.shape))[0]
        if [(n, la[n]) for n in la if n in names] != [(n, lb[n]) for n in lb if n in names]:
            return None
        plan["batch_coefs"][k.lhs.buffer.id] = [(n, la[n]) for n in la if n in names]
    plan["own"] = native or own_form(plan)
    if plan["own"] is None and not blas.available():
        return None
    return plan


def merged_columns(k: "K.DotKernel", ns, ks):
    """The major of a product's two column variables where B and C read both as one run
    (a 1x1 convolution over an image: its output rows and columns, B's and C's column
    j*W + w); None otherwise. The product then runs as one of H*W columns."""
    if len(ns) != 2 or len(ks) != 1 or not all(isinstance(ix.extent_of(v), int) for v in ns):
        return None
    major, minor = ns
    width = ix.extent_of(minor)
    if not isinstance(k.rhs, K.Load):
        return None
    for buf, index in ((k.rhs.buffer, k.rhs.index), (k.out, k.out_index)):
        aff = ix.affine(ix.linearize(index, buf.shape))
        if aff is None or aff[0].get(minor.name) != 1 or aff[0].get(major.name) != width:
            return None
    return major


def merged_vars(k: "K.DotKernel", plan):
    """(major, minor): the two column variables a plan with merged columns runs as one."""
    major = next(v for v in k.n_vars if isinstance(v, ix.IVar) and v.name == plan["merged"])
    return major, next(v for v in k.n_vars if isinstance(v, ix.IVar) and v is not major)


def flat_epilogue(k: "K.DotKernel", plan) -> bool:
    """Whether the epilogue of a product with merged columns can run over them as one
    run too: every buffer it reads or writes holds an image's rows and columns as one
    run (a bias, an activation, a residual sum; not a padded copy), and it computes
    nothing from an index. Its loop is then as long as the image, not one row of it
    (7 to 56 columns, short for the vector loop)."""
    if plan is None or not plan.get("merged") or not k.epilogue or k.fills:
        return False
    from ...kernels.build_row import value_exprs
    major, minor = merged_vars(k, plan)
    width = ix.extent_of(minor)
    values = [st.value for st in k.epilogue]
    if any(not isinstance(e, (K.Load, K.Const, K.Prim, K.Acc)) for e in value_exprs(values)):
        return False
    accesses = [(st.buffer, st.index) for st in k.epilogue] + \
        [(ld.buffer, ld.index) for ld in K.loads_of(values)]
    for buf, index in accesses:
        aff = ix.affine(ix.linearize(index, buf.shape))
        if aff is None or aff[0].get(major.name, 0) != width * aff[0].get(minor.name, 0):
            return False
    return True


def bf16_form(k: "K.DotKernel") -> str | None:
    """How this product of bfloat16 operands (float32 sums, a bfloat16 result) runs in
    bfloat16: 'amx' on the CPU's AMX tiles (amx.py) where this process may use them,
    'dpbf16' on AVX512-BF16's pair products (bf16_pairs.py) where the CPU has them; else
    None (float32 kernels over widened operands, passes/low_precision_products.py)."""
    if k.out.dtype != "bfloat16" or k.acc_dtype != "float32" or \
            isinstance(k, K.WinogradKernel):
        return None
    from graphc_runtime.host import host_features
    return native_bf16(host_features())


BF16_FORMS = ("amx", "dpbf16")    # bfloat16 products, first choice first
INT8_FORMS = ("amxi8", "amxi8su", "vnni", "vnnisu")   # 8-bit ones (A's bytes unsigned;
# signed: su)
NATIVE_FORMS = BF16_FORMS + INT8_FORMS   # products of narrow types


def native_kernel(form: str):
    """The kernel of a narrow-type product form (amx.py, bf16_pairs.py, amx_int8.py,
    vnni.py): its usable(), declare() and build()."""
    from . import amx, amx_int8, bf16_pairs, vnni
    return {"amx": amx, "dpbf16": bf16_pairs, "amxi8": amx_int8.UNSIGNED_A,
            "amxi8su": amx_int8.SIGNED_A, "vnni": vnni.UNSIGNED_A,
            "vnnisu": vnni.SIGNED_A}[form]


def int8_form(k: "K.DotKernel") -> str | None:
    """How a product of packed 8-bit integers (DotKernel.packed_int8) runs: 'amxi8' on
    the CPU's AMX tiles (amx_int8.py) where this process may use them and the product
    fills them (amx_int8.worth_tiles), else 'vnni' on AVX512-VNNI's vpdpbusd (vnni.py)
    where the CPU has it ('amxi8su' / 'vnnisu' with A's bytes signed); else None (the
    loop nest)."""
    if not k.packed_int8 or k.out.dtype != "int32" or \
            k.acc_dtype != "int32" or isinstance(k, K.WinogradKernel):
        return None
    from graphc_runtime.host import host_features
    from . import amx_int8, vnni
    features = host_features()
    if not vnni.usable(features):
        return None
    suffix = "" if k.packed_int8 == "us" else "su"
    size = lambda vs: hint(sym_prod([ix.extent_of(v) for v in vs    # noqa: E731
                                     if isinstance(v, ix.IVar)] or [1]))
    if amx_int8.usable(features) and \
            amx_int8.worth_tiles(size(k.m_vars), size(k.n_vars), size(k.k_vars)):
        return "amxi8" + suffix
    return "vnni" + suffix


def native_bf16(features: str) -> str | None:
    """The CPU's own bfloat16 product form (one of BF16_FORMS), or None."""
    return next((f for f in BF16_FORMS if native_kernel(f).usable(features)), None)


def _strided(operand, dtype):
    """(coefficient per loop variable, constant) of an operand read as a strided view of
    a buffer of `dtype` (non-negative strides and start), or None."""
    if not isinstance(operand, K.Load) or operand.buffer.dtype != dtype:
        return None
    aff = ix.affine(ix.linearize(operand.index, operand.buffer.shape))
    if aff is None or aff[1] < 0 or any(c < 0 for c in aff[0].values()):
        return None
    return aff


def window_plan(k: "K.DotKernel", ms, ns, ks):
    """The plan of a product contracting several variables k1, k2, ... (a convolution
    over a window_view of its input): A flat along them (row-major, one stride), B's
    columns contiguous; then B's row for the term (k1, rest) starts at k1*ldb +
    offsets[rest], the own nnw kernel's form. Two column variables (an image's output rows
    and columns) are C's rows of `row` columns, B's `pitch` apart. None when the product
    is not of that kind."""
    if len(ms) != 1 or len(ns) not in (1, 2) or k.lhs.buffer.id == k.rhs.buffer.id:
        return None
    if k.out.dtype not in ("float32", "float64") or k.acc_dtype != k.out.dtype:
        return None
    extents = [ix.extent_of(v) for v in ks]
    M, N = ix.extent_of(ms[0]), sym_prod([ix.extent_of(v) for v in ns])
    row = ix.extent_of(ns[-1])
    if not all(isinstance(e, int) for e in extents + [row]):
        return None
    if len(ns) == 2 and row % 16:       # a vector of C's columns within one image row
        return None
    names = {v.name for v in k.batch_vars if isinstance(v, ix.IVar)}
    plan = {"M": M, "N": N, "K": sym_prod(extents), "K1": extents[0], "batch_coefs": {},
            "own": "nnw", "trans_b": 111, "row": row if len(ns) == 2 else None,
            "pitch": 0}
    for operand, key in ((k.lhs, "a"), (k.rhs, "b")):
        aff = _strided(operand, k.out.dtype)
        if aff is None:
            return None
        coefs, const = aff
        free = ms if key == "a" else ns
        if set(coefs) - names - {v.name for v in ks} - {v.name for v in free}:
            return None
        kc = [coefs.get(v.name, 0) for v in ks]
        fc = coefs.get(free[-1].name, 0)
        if key == "b" and len(ns) == 2:      # image rows `pitch` apart in B
            plan["pitch"] = coefs.get(ns[0].name, 0)
        if key == "a":                   # A[i, k] at i*a_row + k*a_col, k flat
            step = kc[-1]
            flat = [step * sym_prod(extents[i + 1:]) for i in range(len(ks))]
            if kc != flat or step == 0 or fc == 0:
                return None
            plan["a_row"], plan["a_col"] = fc, step
            plan["trans_a"], plan["lda"] = (111, fc) if step == 1 else (112, step)
        else:                            # B: columns contiguous, rows by the table
            if fc != 1:
                return None
            offsets = window_positions(extents[1:], kc[1:])
            plan["ldb"], plan["offsets"] = kc[0], tuple(int(o) for o in offsets.reshape(-1))
        plan[f"{key}_const"] = const
        plan["batch_coefs"][operand.buffer.id] = [(n, coefs[n]) for n in coefs if n in names]
    return plan


def own_form(plan) -> str | None:
    """'nn' or 'nt' where graphc's own kernels (gemm.py) beat OpenBLAS, else None: the
    nn form up to 128 rows of C, for one row (a matrix-vector product, a column sum), up
    to 256 columns whatever the rows, and up to 512 terms a sum whatever the size (a
    CNN's pointwise convolutions: OpenBLAS's packing weighs on short sums); with more of
    all three OpenBLAS keeps them. The nt form up to 64 rows and 4,096 terms, or for
    any number of terms where C has at most NT_FEW_OUTPUTS elements. (Measured:
    docs/performance.md.)"""
    M, N, Kd = (hint(plan[d]) for d in "MNK")
    many = M >= 4 and (N <= 256 or Kd <= SHORT_SUMS)
    if plan["trans_b"] == 111 and (4 <= M <= 128 or M == 1 or many) and N >= 32:
        return "nn"
    if plan["trans_b"] == 112 and plan["trans_a"] == 111 and isinstance(plan["K"], int) and \
            Kd % 16 == 0 and (M <= 64 and N >= 4 and 64 <= Kd <= 4096 or
                              M * N <= NT_FEW_OUTPUTS and Kd > 4096):
        return "nt"
    return None


NT_FEW_OUTPUTS = 128   # the nt form for any K where C has this few elements: the digits
# CNN's first filter gradient (8 x 9, 50,176 terms) 0.375 -> 0.10 ms, OpenBLAS at 19
# GFLOP/s there; each of the few tiles reads its rows of A and B once


def _at_least(a, b) -> bool:
    """a >= b for every size of the symbols (False when that depends on them)."""
    try:
        return a >= b
    except Undecidable:
        return False


def _many(n) -> bool:
    """n > 1; a symbolic size counts as many (the general layout also serves 1)."""
    return isinstance(n, Dim) or n > 1


def product_scratch_shape(k: K.DotKernel, plan) -> tuple | None:
    """The shape of one batch index's product where the CPU keeps it in a scratch of the
    kernel's: only k reads it (k.private_out), graphc's own kernels compute it (`plan`,
    the kernel's blas_plan or winograd_plan), it is static and at most SCRATCH_BYTES;
    or, larger, the shape of one block of it (product_block). None otherwise."""
    if not (k.private_out and plan is not None and plan.get("own") and
            (k.epilogue or k.layouts)):
        return None
    shape = tuple(ix.extent_of(v) if isinstance(v, ix.IVar) else 1
                  for v in k.m_vars + k.n_vars)
    if not all(isinstance(n, int) for n in shape):
        return None
    if sym_prod(shape) * dtypes.itemsize(k.out.dtype) > SCRATCH_BYTES:
        block = product_block(k, plan)
        if block is None:
            return None
        axis, size = block            # (merged columns: size counts image rows)
        return shape[:axis] + (size,) + shape[axis + 1:]
    return shape


SCRATCH_BLOCK_BYTES = 256 << 10   # C of one block of a larger product, kept in a scratch
BLOCK_OPERAND_BYTES = 1 << 20     # the operand each block reads again, at most


def product_block(k: K.DotKernel, plan) -> tuple | None:
    """(axis, size): a product of one batch index larger than SCRATCH_BYTES that only its
    epilogue reads runs block of C's rows (axis 0) or columns (axis 1) by block, each
    block's C in the kernel's scratch and the epilogue over it right after, while it is
    in the core's cache: C is not written to memory and read back. Blocks go along the
    side whose other operand is the smaller (each block reads it again, at most
    BLOCK_OPERAND_BYTES): rows of a ConvNeXt-style MLP's positions-by-channels product,
    columns of a transformer's FFN (128 tokens x 3,072). A 1x1 convolution's merged
    columns go by whole rows of the image (`size` then counts image rows): ResNet-50's
    64 -> 256 channels at 56 x 56 with its residual sum, 0.74 -> 0.62 ms a call at
    batch 1. A padded result's border (k.fills) is written with the blocks (dot_fills:
    by the block at column 0, or each block for its rows). None for other kernels:
    layouts, several row or column variables (but merged ones), symbolic sizes,
    windowed or narrow-type forms."""
    if not (k.private_out and plan is not None and plan.get("own") in ("nn", "nt") and
            k.epilogue) or k.layouts:
        return None
    merged = plan.get("merged")
    if len(k.m_vars) != 1 or len(k.n_vars) != (2 if merged else 1) or \
            not all(isinstance(v, ix.IVar) for v in k.m_vars + k.n_vars):
        return None
    M, N, Kd = plan["M"], plan["N"], plan["K"]
    if not all(isinstance(d, int) for d in (M, N, Kd)):
        return None
    item = dtypes.itemsize(k.out.dtype)
    if M * N * item <= SCRATCH_BYTES or min(M, N) * Kd * item > BLOCK_OPERAND_BYTES:
        return None
    if Kd * N <= M * Kd:                  # rows: each block reads B again
        rows = max(8, SCRATCH_BLOCK_BYTES // (N * item) // 8 * 8)
        return (0, rows) if rows < M else None
    if merged:            # columns: whole rows of the image (its major column variable)
        width = ix.extent_of(merged_vars(k, plan)[1])
        lines = max(1, -(-32 // width), SCRATCH_BLOCK_BYTES // (M * item) // width)
        return (1, lines) if lines * width < N else None
    cols = max(32, SCRATCH_BLOCK_BYTES // (M * item) // 32 * 32)
    return (1, cols) if cols < N else None


def layout_in_scratch(k: K.DotKernel, buf: K.Buffer) -> bool:
    """Whether the CPU keeps layout buffer `buf` of k one index of its first axis at a
    time in a scratch of the kernel's: only k's later nests read it (k.private_layouts)
    and one index of it is at most SCRATCH_BYTES (a depthwise convolution's padded
    input, written and read in the core's cache)."""
    return buf.id in k.private_layouts and len(k.batch_vars) == 1 and \
        buf.nbytes // max(buf.shape[0], 1) <= SCRATCH_BYTES


def scratch_buffers(k) -> set:
    """Ids of k's temporary buffers the CPU keeps in the kernel's own scratch, a batch
    index at a time (product_scratch_shape, layout_in_scratch): they need no room in
    the arena (schedule/lower.py leaves them out of the memory plan)."""
    if not isinstance(k, K.DotKernel):
        return set()
    kept = {st.buffer.id for _, st in k.layouts if layout_in_scratch(k, st.buffer)}
    if product_scratch_shape(k, blas_plan(k)) is not None:
        kept.add(k.out.id)
    return kept
