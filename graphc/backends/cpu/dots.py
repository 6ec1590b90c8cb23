"""Dots (BLAS calls or loop nests), convolutions and scatter-adds."""
from __future__ import annotations

import itertools

import llvmlite.ir as ir

from graphc_runtime.dims import Dim, Undecidable, hint
from graphc_runtime.dims import prod as sym_prod
from graphc_runtime.errors import CompileError

from ...ir import dtypes
from ...ir.ops.shape import window_positions

from ...kernels import index as ix
from ...kernels import kernel as K
from . import interior
from .jam import jam_variable
from ..llvm.types import COMPUTE, I32, I64


BLAS_MIN_FLOPS = 1 << 15
SCRATCH_BYTES = 512 << 10      # largest per-batch-index product kept in a scratch
UNROLL_MAX = 2                 # layout nests' outer axes this short are unrolled


def blas_plan(k: "K.DotKernel"):
    """How to run this dot as BLAS gemm calls (per batch index), or None."""
    from graphc_runtime import blas
    if isinstance(k, K.WinogradKernel):
        from .winograd import winograd_plan
        return winograd_plan(k)
    if k.out.dtype not in ("float32", "float64") or k.acc_dtype != k.out.dtype:
        return None
    real = lambda vs: [v for v in vs if isinstance(v, ix.IVar)]
    ms, ns, ks = real(k.m_vars), real(k.n_vars), real(k.k_vars)
    if len(ks) > 1 or len(ns) == 2 and len(ks) == 1:
        return window_plan(k, ms, ns, ks)
    if len(ms) > 1 or len(ns) > 1:
        return None
    size = lambda vs: ix.extent_of(vs[0]) if vs else 1
    M, N, Kd = size(ms), size(ns), size(ks)
    if hint(M * N * Kd) < BLAS_MIN_FLOPS or max(map(hint, (M, N, Kd))) >= 2 ** 31:
        return None
    plan = {"M": M, "N": N, "K": Kd, "batch_coefs": {}}
    names = {v.name for v in real(k.batch_vars)}
    for operand, rows, cols, key in ((k.lhs, ms, ks, "a"), (k.rhs, ks, ns, "b")):
        aff = _strided(operand, k.out.dtype)
        if aff is None:
            return None
        coefs, const = aff
        r = coefs.get(rows[0].name, 0) if rows else 0
        c = coefs.get(cols[0].name, 0) if cols else 0
        extra = set(coefs) - names - {v.name for v in rows + cols}
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
    plan["own"] = own_form(plan)
    if plan["own"] is None and not blas.available():
        return None
    return plan


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
    """'nn' or 'nt' where graphc's own kernels (gemm.py) beat OpenBLAS, else None.
    Measured on 2 AVX-512 cores, inside programs: up to 128 rows of C the own nn form
    runs 1.1-1.8x OpenBLAS's speed (32 x 256 @ 256 x 1024: 200 vs 115-150 GFLOP/s; a
    convolution's 32 x 288 @ 288 x 32768: 103 vs 82; 32 x 4096 @ 4096 x 1024: 126 vs
    103), one row (a matrix-vector product, a column sum: 1 x 2048 @ 2048 x 1024 in
    0.19 ms against 0.91), and up to 256 columns whatever the rows (256 x 128 @ 128 x 64
    to 4096 x 256 @ 256 x 32: 1.1-1.4x); with more of both the two are within 10% either
    way, and OpenBLAS keeps them. The nt form up to 64 rows (32 x 1024 @ (256 x 1024)^T
    at about 2x)."""
    M, N, Kd = (hint(plan[d]) for d in "MNK")
    if plan["trans_b"] == 111 and (4 <= M <= 128 or M == 1 or M >= 4 and N <= 256) and \
            N >= 32:
        return "nn"
    if plan["trans_b"] == 112 and plan["trans_a"] == 111 and M <= 64 and N >= 4 and \
            isinstance(plan["K"], int) and 64 <= Kd <= 4096 and Kd % 16 == 0:
        return "nt"
    return None


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
    the kernel's blas_plan or winograd_plan), it is static and at most SCRATCH_BYTES.
    None otherwise."""
    if not (k.private_out and plan is not None and plan.get("own") and
            (k.epilogue or k.layouts)):
        return None
    shape = tuple(ix.extent_of(v) if isinstance(v, ix.IVar) else 1
                  for v in k.m_vars + k.n_vars)
    if not all(isinstance(n, int) for n in shape) or \
            sym_prod(shape) * dtypes.itemsize(k.out.dtype) > SCRATCH_BYTES:
        return None
    return shape


def layout_in_scratch(k: K.DotKernel, buf: K.Buffer) -> bool:
    """Whether the CPU keeps layout buffer `buf` of k one index of its first axis at a
    time in a scratch of the kernel's: only k's later nests read it (k.private_layouts)
    and one index of it is at most SCRATCH_BYTES (a depthwise convolution's padded
    input, written and read in the core's cache)."""
    return buf.id in k.private_layouts and \
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


CHANNEL_BLOCK_BYTES = 64 << 10   # a block of the product's rows run through the layouts


def channel_block(k: K.DotKernel, plan) -> int | None:
    """Rows of the product per block (a divisor of M, a multiple of 8): about
    CHANNEL_BLOCK_BYTES of it; None where one block would be all of it."""
    M, N = plan["M"], plan["N"]
    if not isinstance(M, int) or not isinstance(N, int):
        return None
    rows = max(8, CHANNEL_BLOCK_BYTES // (N * dtypes.itemsize(k.out.dtype)))
    while rows < M and (M % rows or rows % 8):
        rows += 1
    return rows if rows < M else None


class DotEmitter:
    """Emitter methods for DotKernel, ConvKernel and ScatterKernel. Hooks a backend
    overrides: `library_plan` (how a product runs as a GEMM call; None: loop nests) and
    `accumulates_in_output` (loops that sum into the output row by row, or per element
    in a register)."""

    def library_plan(self, k: K.DotKernel):
        """The CPU runs a product through OpenBLAS or its own GEMM where blas_plan says."""
        return blas_plan(k)

    def accumulates_in_output(self, k: K.DotKernel) -> bool:
        return k.out.dtype == k.acc_dtype

    def dot(self, k: K.DotKernel) -> None:
        if isinstance(k, K.WinogradKernel):
            return self.winograd(k)
        b = self.b
        out = k.out
        plan = self.library_plan(k)
        if plan is not None:
            return self.dot_blas(k, plan)
        # accumulate in the output buffer (row by row), or per element in a register
        direct = self.accumulates_in_output(k)

        def zero():
            self.store(out, k.out_index, ir.Constant(COMPUTE[out.dtype], 0))

        def update():
            a = self.value(k.lhs)
            cur = self.load(out, k.out_index)
            self.store(out, k.out_index, self._fma(a, self.value(k.rhs), cur, out.dtype))

        def epilogue():
            self.accs[0] = self.load(out, k.out_index)
            self.cache = {}
            self.stores(k.epilogue)

        if direct:
            def row():
                self.loops(k.n_vars, zero)
                self.loops(k.k_vars, lambda: self.loops(k.n_vars, update))
                if k.epilogue:
                    self.loops(k.n_vars, epilogue)
                self.dot_fills(k)
            if k.layouts:         # each batch index's rows, then its layout nests
                self.outer_loops(k.batch_vars, lambda: (self.loops(k.m_vars, row),
                                                        self.layout_nests(k)))
            else:
                self.outer_loops(k.batch_vars + k.m_vars, row)
        else:
            def element():
                acc = self._alloca(COMPUTE[k.acc_dtype])
                b.store(ir.Constant(COMPUTE[k.acc_dtype], 0), acc)

                def step():
                    b.store(self._fma(self.value(k.lhs), self.value(k.rhs), b.load(acc),
                                      k.acc_dtype), acc)
                self.loops(k.k_vars, step)
                self.accs[0] = self.round_to(b.load(acc), k.acc_dtype, out.dtype)
                self.cache = {}
                self.store(out, k.out_index, self.accs[0])
                self.stores(k.epilogue)
            if k.layouts:
                def image():
                    self.loops(k.m_vars + k.n_vars, element)
                    self.loops(k.m_vars, lambda: self.dot_fills(k))
                    self.layout_nests(k)
                self.outer_loops(k.batch_vars, image)
                return
            self.outer_loops(k.batch_vars + k.m_vars + k.n_vars, element)
            if k.fills:
                self.loops(k.batch_vars + k.m_vars, lambda: self.dot_fills(k))

    def layout_nests(self, k: K.DotKernel, scratch: "K.Buffer | None" = None,
                     channels=None) -> None:
        """k's layout nests (DotKernel.layouts) for the batch index bound now; their
        loads of k.out read `scratch` (that index's product) when there is one. With
        `channels` (each nest's channel variable, K.channel_vars) only the rows of the
        product bound now (a thread's share of its m variable, or a block) go through
        them."""
        if scratch is not None:
            self.redirect[k.out.id] = (scratch, len(k.batch_vars))
        m = [v.name for v in k.m_vars if isinstance(v, ix.IVar)]
        for pos, (vars_, store) in enumerate(k.layouts):
            if channels:
                self.bounds[channels[pos]] = self.bounds[m[0]]
            buf = store.buffer
            kept = None if buf.id in self.redirect else self._layout_scratch(k, buf)
            if kept is not None:
                self.redirect[buf.id] = (kept, 1)
            # short outer axes (a phase plane's row and column parity) unrolled: fixed,
            # the guards of the innermost loop bound it exactly (whole vectors inside)
            real = [v for v in vars_ if isinstance(v, ix.IVar)]
            short = [v for v in real[:-1] if ix.extent_of(v) <= UNROLL_MAX]
            rest = [v for v in real if v not in short]
            saved = self.splits
            self.splits = interior.guards([store.value], store.index,
                                          frozenset(v.name for v in short))
            row = jam_variable([store], rest)
            self.jam = (row, [store]) if row else None
            for values in itertools.product(*[range(ix.extent_of(v)) for v in short]):
                self.cache = {}
                for v, value in zip(short, values):
                    self.env[v.name], self.fixed[v.name] = ir.Constant(I64, value), value
                    self.bound.add(v.name)
                self.loops(rest, lambda store=store: self.stores([store]))
            for v in short:
                self.bound.discard(v.name)
                del self.fixed[v.name]
            self.splits, self.jam = saved, None
            if channels:
                del self.bounds[channels[pos]]
        self.redirect = {}

    def _layout_scratch(self, k: K.DotKernel, buf: K.Buffer):
        """A buffer for one index of a layout buffer's first axis where it stays in the
        kernel (layout_in_scratch). None otherwise."""
        if not layout_in_scratch(k, buf):
            return None
        return self._stack_buffer(buf, tuple(buf.shape[1:]))

    def _stack_buffer(self, of: K.Buffer, shape) -> K.Buffer:
        """A 64-byte aligned stack buffer of `shape` standing in for part of `of`."""
        buf = K.Buffer(-1 - of.id, shape, of.dtype, "temp")
        with self.b.goto_entry_block():
            ptr = self.b.alloca(COMPUTE[of.dtype], size=ir.Constant(I64, sym_prod(shape)))
            ptr.align = 64
        self.args[buf.id] = (ptr, buf)
        return buf

    def dot_fills(self, k: K.DotKernel, m_bound: bool = True) -> None:
        """The borders of k's padded results (K.padded_epilogue) for the batch index (and,
        with m_bound, the m index) bound now; a kernel split along n writes them from the
        chunk that starts at column 0."""
        if not k.fills:
            return
        b = self.b

        def nests():
            for vars_, store in k.fills:
                self.loops(vars_, lambda store=store: self.stores([store]))
        if not m_bound:
            nest = nests
            nests = lambda: self.loops(k.m_vars, nest)         # noqa: E731
        split_n = [v.name for v in k.n_vars if isinstance(v, ix.IVar) and v.name in self.bounds]
        if split_n:
            with b.if_then(b.icmp_signed("==", self.bounds[split_n[0]][0], ir.Constant(I64, 0))):
                nests()
        else:
            nests()

    def dot_blas(self, k: K.DotKernel, plan) -> None:
        """C = A @ B through BLAS per batch index, each followed by the epilogue over that
        C. A kernel split for threads computes its rows (m split) or columns (n split)
        of C."""
        b = self.b
        ty = COMPUTE[k.out.dtype]
        own = plan["own"]
        fn = self.mb.own_gemm(own, k.out.dtype) if own else self.mb.gemm(k.out.dtype)
        i32 = lambda v: b.trunc(self.dim(v), I32) if isinstance(v, Dim) else \
            ir.Constant(I32, int(v))
        c64 = self.dim
        real = lambda vs: [v for v in vs if isinstance(v, ix.IVar)]
        split_m = [v.name for v in real(k.m_vars) if v.name in self.bounds]
        split_n = [v.name for v in real(k.n_vars) if v.name in self.bounds]
        scratch = self._product_scratch(k, plan)

        def call():
            ptrs = []
            for operand, const in ((k.lhs, plan["a_const"]), (k.rhs, plan["b_const"])):
                arg, _ = self.args[operand.buffer.id]
                off = ir.Constant(I64, const)
                for name, coef in plan["batch_coefs"][operand.buffer.id]:
                    off = b.add(off, b.mul(self.env[name], ir.Constant(I64, coef)))
                ptrs.append(off)
            c_off = c64(0)
            if k.batch_vars and scratch is None:
                lin = ix.linearize(k.batch_vars, [ix.extent_of(v) if isinstance(v, ix.IVar)
                                                  else 1 for v in k.batch_vars])
                c_off = b.mul(self.index(lin), c64(plan["M"] * plan["N"]))
            rows, cols = c64(plan["M"]), c64(plan["N"])
            # bound now: a thread's share, or a block of rows (product() sets it)
            split_m = [v.name for v in real(k.m_vars) if v.name in self.bounds]
            if split_m:               # rows begin..end of C: of A's rows (or columns)
                begin, end = self.bounds[split_m[0]]
                rows = b.sub(end, begin)
                step = plan["a_row"] if "a_row" in plan else \
                    plan["lda"] if plan["trans_a"] == 111 else 1
                ptrs[0] = b.add(ptrs[0], b.mul(begin, c64(step)))
                c_off = b.add(c_off, b.mul(begin, c64(plan["N"])))
            elif split_n:             # columns begin..end of C: of B's columns (or rows)
                begin, end = self.bounds[split_n[0]]
                cols = b.sub(end, begin)
                step = 1 if plan["trans_b"] == 111 else plan["ldb"]
                ptrs[1] = b.add(ptrs[1], b.mul(begin, c64(step)))
                c_off = b.add(c_off, begin)
            a_ptr = b.gep(self.args[k.lhs.buffer.id][0], [ptrs[0]])
            b_ptr = b.gep(self.args[k.rhs.buffer.id][0], [ptrs[1]])
            c_ptr = b.gep(self.args[(scratch or k.out).id][0], [c_off])
            if own == "nnw":          # B's rows from the window offsets
                row = c64(plan["row"]) if plan["row"] else cols
                b.call(fn, [rows, cols, c64(plan["K1"]),
                            c64(len(plan["offsets"])), a_ptr, c64(plan["a_row"]),
                            c64(plan["a_col"]), b_ptr, c64(plan["ldb"]),
                            self.mb.offsets_table(plan["offsets"]), c_ptr, c64(plan["N"]),
                            row, c64(plan["pitch"])])
                return
            if own:                   # A[i, k] at i*a_row + k*a_col; B as laid out
                a_row, a_col = (plan["lda"], 1) if plan["trans_a"] == 111 else \
                    (1, plan["lda"])
                b.call(fn, [rows, cols, c64(plan["K"]), a_ptr, c64(a_row), c64(a_col),
                            b_ptr, c64(plan["ldb"]), c_ptr, c64(plan["N"])])
                return
            b.call(fn, [i32(101), i32(plan["trans_a"]), i32(plan["trans_b"]),
                        b.trunc(rows, I32), b.trunc(cols, I32), i32(plan["K"]),
                        ir.Constant(ty, 1.0), a_ptr, i32(plan["lda"]), b_ptr,
                        i32(plan["ldb"]), ir.Constant(ty, 0.0), c_ptr, i32(plan["N"])])

        def epilogue():
            self.accs[0] = self.load(k.out, k.out_index) if scratch is None else \
                self.load(scratch, k.m_vars + k.n_vars)
            self.cache = {}
            self.stores(k.epilogue)

        # layout nests that keep to the product's rows (K.channel_vars) go over the rows
        # computed: a thread's share of them (split along m), or block by block
        channels = K.channel_vars(k) if not split_n else None
        if k.layouts and (split_n or split_m and channels is None):
            raise CompileError(f"layout nests of {k.name} need whole images per thread")
        block = channel_block(k, plan) if channels and not split_m else None

        def computed():
            """The product's rows bound now (all, a thread's or a block), then what reads
            them."""
            call()
            if k.epilogue:
                self.loops(k.m_vars + k.n_vars, epilogue)
            self.dot_fills(k, m_bound=False)
            self.layout_nests(k, scratch, channels if block or split_m else None)

        def product():
            # each batch index's epilogue right after its product, while that C is in
            # the core's cache (a convolution's bias, residual sum and activation per
            # image: 16 images of a thread's chunk overflow L2 before the epilogue); with
            # layout nests that keep to the product's rows (channel_vars), block by block
            # of rows (a MobileNet-style pointwise product and its depthwise convolution
            # over 16 of 64 channels at a time: batch 32 0.94-1.01 of the time without,
            # faster in 8 rounds of 9)
            if block is None:
                return computed()
            m = real(k.m_vars)[0]

            def rows(lo):
                self.bounds[m.name] = (lo, b.add(lo, ir.Constant(I64, block)))
                computed()
                del self.bounds[m.name]
            self._loop("blk", c64(0), block, lambda lo: b.icmp_signed("<", lo, c64(plan["M"])),
                       rows)
        self.loops(k.batch_vars, product)

    def _product_scratch(self, k: K.DotKernel, plan):
        """A buffer for one batch index's product where only k's epilogue reads it
        (k.private_out, graphc's own kernels, static and at most SCRATCH_BYTES): each
        image's C is then written and read in the core's cache, never sent to memory
        (a 32 x 32 x 32 convolution's output: 4 MB a call at batch 32). None otherwise."""
        shape = product_scratch_shape(k, plan)
        return None if shape is None else self._stack_buffer(k.out, shape)

    def conv(self, k: K.ConvKernel) -> None:
        b = self.b

        def element():
            acc = self._alloca(COMPUTE[k.acc_dtype])
            b.store(ir.Constant(COMPUTE[k.acc_dtype], 0), acc)

            def step():
                v = self.convert_value(self.value(k.term), k.term.dtype, k.acc_dtype)
                b.store(b.fadd(b.load(acc), v), acc)
            self.loops(k.red_vars, step)
            self.accs[0] = self.round_to(b.load(acc), k.acc_dtype, k.out.dtype)
            self.cache = {}
            self.store(k.out, k.out_index, self.accs[0])
            self.stores(k.epilogue)
        self.outer_loops(k.out_vars, element)

    def scatter(self, k: K.ScatterKernel) -> None:
        upd = self.value(k.update)
        cur = self.load(k.out, k.target)
        self.store(k.out, k.target, self.arith("add", k.out.dtype, [cur, upd]))

    # -- memory --------------------------------------------------------------------------
