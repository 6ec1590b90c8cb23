"""The CPU's products: through OpenBLAS or graphc's own GEMM kernels (dot_plan.py), each
batch index's product kept in a scratch and run block by block of rows through its
layout nests; the loop-nest forms are the shared ones (llvm/dots.py)."""
from __future__ import annotations

import llvmlite.ir as ir

from graphc_runtime.dims import Dim
from graphc_runtime.errors import CompileError

from ...ir import dtypes
from ...kernels import index as ix
from ...kernels import kernel as K
from ..llvm.emitter import chain_interleave
from ..llvm.types import COMPUTE, I32, I64
from .dot_plan import (NATIVE_FORMS, blas_plan, flat_epilogue, layout_in_scratch,
                       merged_vars, product_block, product_scratch_shape)

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


class CpuDotEmitter:
    """The CPU's overrides of the shared DotEmitter."""

    def library_plan(self, k: K.DotKernel):
        """The CPU runs a product through OpenBLAS or its own GEMM where blas_plan says."""
        return blas_plan(k)

    def _layout_scratch(self, k: K.DotKernel, buf: K.Buffer):
        """A buffer for one index of a layout buffer's first axis where it stays in the
        kernel (layout_in_scratch). None otherwise."""
        if not layout_in_scratch(k, buf):
            return None
        return self._stack_buffer(buf, tuple(buf.shape[1:]))

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
        # a product larger than a scratch whose scratch holds one block of it
        blocked = product_block(k, plan) if scratch is not None else None

        def in_block(begin, axis: int):
            """`begin` (a row or column of C) relative to the block of C the scratch
            holds where the kernel runs by blocks along `axis`; else as it is."""
            if blocked is None or blocked[0] != axis:
                return begin
            return b.sub(begin, self.env[self._block_var.name])

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
            ldc = c64(plan["N"] if blocked is None or blocked[0] == 0 else blocked[1])
            if plan.get("merged"):    # rows of the image: W columns each
                width = c64(ix.extent_of(merged_vars(k, plan)[1]))
                if blocked is not None and blocked[0] == 1:
                    ldc = b.mul(ldc, width)
            # bound now: a thread's share, or a block of rows (product() sets it)
            split_m = [v.name for v in real(k.m_vars) if v.name in self.bounds]
            split_n = [v.name for v in real(k.n_vars) if v.name in self.bounds]
            if split_m:               # rows begin..end of C: of A's rows (or columns)
                begin, end = self.bounds[split_m[0]]
                rows = b.sub(end, begin)
                step = plan["a_row"] if "a_row" in plan else \
                    plan["lda"] if plan["trans_a"] == 111 else 1
                ptrs[0] = b.add(ptrs[0], b.mul(begin, c64(step)))
                c_off = b.add(c_off, b.mul(in_block(begin, 0), ldc))
            if split_n and (not split_m or blocked is not None):
                # columns begin..end of C: of B's columns (or rows)
                begin, end = self.bounds[split_n[0]]
                at = in_block(begin, 1)
                if plan.get("merged"):    # rows of the image: W columns each
                    begin, end, at = (b.mul(v, width) for v in (begin, end, at))
                cols = b.sub(end, begin)
                step = 1 if plan["trans_b"] == 111 else plan["ldb"]
                ptrs[1] = b.add(ptrs[1], b.mul(begin, c64(step)))
                c_off = b.add(c_off, at)
            a_ptr = b.gep(self.args[k.lhs.buffer.id][0], [ptrs[0]])
            b_ptr = b.gep(self.args[k.rhs.buffer.id][0], [ptrs[1]])
            c_ptr = b.gep(self.args[(scratch or k.out).id][0], [c_off])
            if own == "nnw":          # B's rows from the window offsets
                row = c64(plan["row"]) if plan["row"] else cols
                b.call(fn, [rows, cols, c64(plan["K1"]),
                            c64(len(plan["offsets"])), a_ptr, c64(plan["a_row"]),
                            c64(plan["a_col"]), b_ptr, c64(plan["ldb"]),
                            self.mb.offsets_table(plan["offsets"]), c_ptr, ldc,
                            row, c64(plan["pitch"])])
                return
            if own:                   # A[i, k] at i*a_row + k*a_col; B as laid out
                a_row, a_col = (plan["lda"], 1) if plan["trans_a"] == 111 else \
                    (1, plan["lda"])
                b_strides = [c64(plan["ldb"])]
                if own in NATIVE_FORMS:    # B by its strides too
                    b_strides = [c64(v) for v in ((plan["ldb"], 1) if plan["trans_b"] == 111
                                                  else (1, plan["ldb"]))]
                b.call(fn, [rows, cols, c64(plan["K"]), a_ptr, c64(a_row), c64(a_col),
                            b_ptr, *b_strides, c_ptr, ldc])
                return
            b.call(fn, [i32(101), i32(plan["trans_a"]), i32(plan["trans_b"]),
                        b.trunc(rows, I32), b.trunc(cols, I32), i32(plan["K"]),
                        ir.Constant(ty, 1.0), a_ptr, i32(plan["lda"]), b_ptr,
                        i32(plan["ldb"]), ir.Constant(ty, 0.0), c_ptr, b.trunc(ldc, I32)])

        def epilogue():
            at = k.m_vars + k.n_vars
            if blocked is not None:           # the scratch holds the block bound now
                axis = blocked[0]
                at = tuple(ix.add(v, ix.mul(self._block_var, -1)) if d == axis else v
                           for d, v in enumerate(at))
            self.accs[0] = self.load(k.out, k.out_index) if scratch is None else \
                self.load(scratch, at)
            self.cache = {}
            self.stores(k.epilogue)

        # layout nests that keep to the product's rows (K.channel_vars) go over the rows
        # computed: a thread's share of them (split along m), or block by block
        channels = K.channel_vars(k) if not split_n else None
        if k.layouts and (split_n or split_m and channels is None):
            raise CompileError(f"layout nests of {k.name} need whole images per thread")
        # blocks of rows also within a thread's share where the product is larger than
        # a scratch (an image at batch 1)
        block = channel_block(k, plan) if channels and (not split_m or scratch is None) \
            else None
        flat = flat_epilogue(k, plan)

        def computed():
            """The product's rows bound now (all, a thread's or a block), then what reads
            them."""
            call()
            self.interleave = chain_interleave(k.epilogue)   # a long epilogue (GELU with
            if k.epilogue and flat:                          # its quantize pairs)
                self._flat_loops(k, plan, epilogue)
            elif k.epilogue:
                self.loops(k.m_vars + k.n_vars, epilogue)
            self.interleave = 0
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
            if blocked is not None:          # blocks of C's rows or columns in the scratch
                axis, size = blocked
                return self._blocks((k.m_vars if axis == 0 else k.n_vars)[0], size,
                                    computed)
            if block is None:
                return computed()
            self._blocks(real(k.m_vars)[0], block, computed)
        self.loops(k.batch_vars, product)

    _block_var = ix.var("dot_block_start", 1 << 30)   # where the block bound now starts

    def _blocks(self, v: ix.IVar, size: int, body) -> None:
        """body() for each block of `size` values of v within what is bound now (a
        thread's share, or all of v), the last block what remains; v bound to the block,
        its start in _block_var."""
        b, c64 = self.b, self.dim
        share = self.bounds.get(v.name)
        first, end = share or (c64(0), c64(ix.extent_of(v)))

        def block(lo):
            hi = b.add(lo, c64(size))
            self.bounds[v.name] = (lo, b.select(b.icmp_signed("<", hi, end), hi, end))
            self.env[self._block_var.name] = lo
            self.bound.add(self._block_var.name)
            body()
            self.bound.discard(self._block_var.name)
        self._loop("blk", first, size, lambda lo: b.icmp_signed("<", lo, end), block)
        if share is None:
            del self.bounds[v.name]
        else:
            self.bounds[v.name] = share

    def _flat_loops(self, k: K.DotKernel, plan, body) -> None:
        """body() over the rows of C and its merged columns as one run (flat_epilogue):
        the minor column variable counts every column of the image (or of the rows
        bound to the major one), the major one stays 0."""
        b, c64 = self.b, self.dim
        major, minor = merged_vars(k, plan)
        width = c64(ix.extent_of(minor))
        run = ix.var(minor.name, plan["N"])
        rows = self.bounds.pop(major.name, None)
        if rows is not None:
            self.bounds[minor.name] = (b.mul(rows[0], width), b.mul(rows[1], width))
        self.env[major.name] = c64(0)
        self.bound.add(major.name)
        self.loops(k.m_vars + (run,), body)
        self.bound.discard(major.name)
        del self.env[major.name]
        if rows is not None:
            del self.bounds[minor.name]
            self.bounds[major.name] = rows

    def _product_scratch(self, k: K.DotKernel, plan):
        """A buffer for one batch index's product where only k's epilogue reads it
        (k.private_out, graphc's own kernels, static and at most SCRATCH_BYTES): each
        image's C is then written and read in the core's cache, never sent to memory
        (a 32 x 32 x 32 convolution's output: 4 MB a call at batch 32). None otherwise."""
        shape = product_scratch_shape(k, plan)
        return None if shape is None else self._stack_buffer(k.out, shape)

