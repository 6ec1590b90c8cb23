"""Products, convolutions and scatter-adds as loop nests: what every LLVM backend emits
for them (a backend may run a product through a library instead: `library_plan`)."""
from __future__ import annotations

import itertools

import llvmlite.ir as ir

from graphc_runtime.dims import prod as sym_prod
from graphc_runtime.errors import CompileError

from ...kernels import index as ix
from ...kernels import kernel as K
from . import interior
from .jam import jam_variable
from .types import COMPUTE, I64, STORAGE

UNROLL_MAX = 2                 # layout nests' outer axes this short are unrolled


class DotEmitter:
    """Emitter methods for DotKernel, ConvKernel and ScatterKernel. Hooks a backend
    overrides: `library_plan` (how a product runs as a library or GEMM-kernel call, then
    emitted by the backend's `dot_blas`; None: loop nests), `accumulates_in_output`
    (loops that sum into the output row by row, or per element in a register),
    `_layout_scratch` (where a layout copy lives) and `winograd`."""

    def library_plan(self, k: K.DotKernel):
        return None

    def accumulates_in_output(self, k: K.DotKernel) -> bool:
        return k.out.dtype == k.acc_dtype

    def winograd(self, k: K.WinogradKernel) -> None:
        raise CompileError(f"{k.name}: winograd_conv2d has no kernel in this backend")

    def _layout_scratch(self, k: K.DotKernel, buf: K.Buffer):
        """The scratch a layout copy is kept in (None: its own buffer)."""
        return None

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
            self.store(out, k.out_index, self._term(k, a, self.value(k.rhs), cur, out.dtype))

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
                    b.store(self._term(k, self.value(k.lhs), self.value(k.rhs), b.load(acc),
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

    def _stack_buffer(self, of: K.Buffer, shape) -> K.Buffer:
        """A 64-byte aligned stack buffer of `shape` standing in for part of `of`."""
        buf = K.Buffer(-1 - of.id, shape, of.dtype, "temp")
        with self.b.goto_entry_block():
            ptr = self.b.alloca(STORAGE[of.dtype], size=ir.Constant(I64, sym_prod(shape)))
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
