"""The CUDA emitter: kernel IR to NVVM IR (llvmlite's NVPTX target).

Each kernel becomes a `ptx_kernel` function whose outer loops are one grid-stride loop
over the flattened iteration space (one thread per element, or per output element of a
dot or conv). Reductions use a warp per row: lanes stride over the row, butterfly
shuffles combine their partials (ties in argmax keep the first index). Float32 math
uses the same vectorizable polynomials as the CPU; other math calls libdevice (linked
from the CUDA toolkit or the nvidia-cuda-nvcc wheel). scatter_add runs as a copy kernel
and an atomic-add kernel.
"""
from __future__ import annotations

import llvmlite.ir as ir

from graphc_runtime.dims import Dim, hint
from graphc_runtime.errors import CompileError

from ...ir import dtypes
from ...kernels import index as ix
from ...kernels import kernel as K
from ..llvm.emitter import Emitter, strided_loop
from ..llvm.module import LlvmModule
from ..llvm.types import COMPUTE, I32, I64, STORAGE, VOID

TRIPLE = "nvptx64-nvidia-cuda"
BLOCK = 256
MAX_GRID = 65535 * 4
PTX_FEATURES = {"sm_80": "+ptx75", "sm_90": "+ptx80"}


WARP = 32
TILE = 16          # tiled GEMM: TILE x TILE threads per block, one output element each


def tiled(k: "K.DotKernel") -> bool:
    """Dots with one m, n and k dimension run as shared-memory tiles."""
    real = lambda vs: [v for v in vs if isinstance(v, ix.IVar)]
    return len(real(k.m_vars)) == 1 and len(real(k.n_vars)) == 1 and len(real(k.k_vars)) == 1


class GpuEmitter(Emitter):
    """The shared emitter with the GPU's hooks: outer loops are grid-stride loops over
    threads, products run per output element (or as shared-memory tiles), row kernels a
    warp per row."""
    warp_rows = False          # set while lowering a row kernel: one warp per row
    lane_base: dict = {}       # vector loops: (buffer id, address) -> lane 0's pointer
    vector_lane = 0

    def emit_row(self, k) -> None:
        if thread_per_row(k):
            self.outer_loops(k.kept_vars, lambda: self.row(k))
            return
        self.warp_rows = True
        self.warp_loop(k.kept_vars, lambda: self.row(k))
        self.warp_rows = False

    def emit_dot(self, k) -> None:
        if tiled(k):
            self.tiled_dot(k)
        else:
            super().emit_dot(k)

    def emit_loop(self, k) -> None:
        if vector_lanes(k) > 1:
            self.vector_loop(k, vector_lanes(k))
        else:
            super().emit_loop(k)

    def library_plan(self, k):
        return None                      # no GEMM library: loop nests or tiles

    def accumulates_in_output(self, k) -> bool:
        return False                     # one thread per output element, in a register

    def winograd(self, k):
        raise CompileError(f"{k.name}: winograd_conv2d has no CUDA kernel (the CUDA "
                           f"pipeline decomposes it into products)")

    def vector_loop(self, k: K.LoopKernel, lanes: int) -> None:
        """Each thread computes `lanes` consecutive elements of the innermost dimension:
        their loads and stores sit side by side at 16-byte aligned addresses, which the
        NVPTX backend merges into ld/st.global.v4 (one 16-byte access instead of four)."""
        real = [v for v in k.loop_vars if isinstance(v, ix.IVar)]
        inner = real[-1]
        group = ix.IVar(0, (inner.hi + 1) // lanes - 1, f"{inner.name}_vec")
        b = self.b

        def body():
            # every lane's values first, then the stores side by side (an element never
            # reads what another element of the same kernel writes); accesses contiguous
            # along the inner dimension address lane k as lane 0's pointer + k, so that the
            # backend sees them side by side
            base = b.mul(self.env[group.name], ir.Constant(I64, lanes), flags=["nuw", "nsw"])
            self.env[inner.name] = base
            self.lane_base = {}
            for acc in k.reads() + list(k.stores):
                lin = ix.linearize(acc.index, acc.buffer.shape)
                aff = ix.affine(lin)
                if aff is not None and aff[0].get(inner.name) == 1 and \
                        not ix.has_data_index(lin):
                    saved = self.cache
                    self.cache = {}
                    self.lane_base[(acc.buffer.id, lin)] = super(GpuEmitter, self)._ptr(
                        acc.buffer, acc.index)
                    self.cache = saved
            pending = []
            for lane in range(lanes):
                self.vector_lane = lane
                self.env[inner.name] = b.add(base, ir.Constant(I64, lane), flags=["nuw", "nsw"])
                saved = dict(self.cache)
                values = [self.value(st.value) for st in k.stores]
                pending.append([(st, v, self._ptr(st.buffer, st.index))
                                for st, v in zip(k.stores, values)])
                self.cache = saved
            for st_index in range(len(k.stores)):
                for lane_stores in pending:
                    st, v, ptr = lane_stores[st_index]
                    b.store(self.to_storage(v, st.buffer.dtype), ptr)
            self.lane_base = {}
        self.outer_loops(real[:-1] + [group], body)

    def _ptr(self, buf: K.Buffer, index):
        base = self.lane_base.get((buf.id, ix.linearize(index, buf.shape)))
        if base is None:
            return super()._ptr(buf, index)
        return self.b.gep(base, [ir.Constant(I64, self.vector_lane)], inbounds=True)

    def _sreg(self, name):
        return self.b.zext(self.b.call(self.mb.sreg(name), []), I64)

    def _strided(self, total, start, stride, names, body, extents=None) -> None:
        """for (i = start; i < total; i += stride) with `names` set from i (its digits,
        radices the variables' extents or the i64 values `extents`); totals and extents
        may be symbolic (computed from the kernel's size arguments)."""
        b = self.b
        radices = extents or [self.dim(ix.extent_of(v)) for v in names]

        def each(i):
            rest = i
            for k, (v, n) in enumerate(zip(reversed(names), reversed(radices))):
                self.env[v.name] = b.urem(rest, n) if k < len(names) - 1 else rest
                rest = b.udiv(rest, n)
            saved = dict(self.cache)
            body()
            self.cache = saved
        strided_loop(b, start, total if isinstance(total, ir.Value) else self.dim(total),
                     stride, each)

    def warp_loop(self, vars_, body) -> None:
        """Rows spread over warps (grid-stride by warp)."""
        real = [v for v in vars_ if isinstance(v, ix.IVar)]
        b = self.b
        gid = b.add(b.mul(self._sreg("ctaid.x"), self._sreg("ntid.x")), self._sreg("tid.x"))
        warps = b.udiv(b.mul(self._sreg("nctaid.x"), self._sreg("ntid.x")),
                       ir.Constant(I64, WARP))
        self.lane = b.urem(self._sreg("tid.x"), ir.Constant(I64, WARP))
        self._strided(K.extent(real), b.udiv(gid, ir.Constant(I64, WARP)), warps, real, body)

    def reduced_loops(self, vars_, body) -> None:
        if not self.warp_rows:
            return super().reduced_loops(vars_, body)
        real = [v for v in vars_ if isinstance(v, ix.IVar)]
        self._strided(K.extent(real), self.lane, ir.Constant(I64, WARP), real, body)

    def combine_partials(self, red, value, position):
        """Butterfly shuffles: every lane ends with the whole row's result."""
        if not self.warp_rows:
            return value, position
        for offset in (16, 8, 4, 2, 1):
            other = self._shuffle(value, offset)
            if position is None:
                value = self._combine(red.kind, red.acc_dtype, value, other)
            else:
                other_pos = self._shuffle(position, offset)
                b = self.b
                better = self._arg_better(red.kind, red.acc_dtype, other, value)
                same = b.and_(b.not_(self._arg_better(red.kind, red.acc_dtype, value, other)),
                              b.icmp_signed("<", other_pos, position))
                take = b.or_(better, same)        # ties: the first index wins
                value = b.select(take, other, value)
                position = b.select(take, other_pos, position)
        return value, position

    def _shuffle(self, value, offset):
        """__shfl_xor_sync(0xffffffff, value, offset) for 1..64-bit values."""
        b = self.b
        ty = value.type
        fn = self.mb.shfl()
        full, clamp = ir.Constant(I32, -1), ir.Constant(I32, 0x1F)
        lane = ir.Constant(I32, offset)
        if ty == ir.FloatType():
            return b.bitcast(b.call(fn, [full, b.bitcast(value, I32), lane, clamp]), ty)
        if isinstance(ty, ir.IntType) and ty.width <= 32:
            wide = b.zext(value, I32) if ty.width < 32 else value
            out = b.call(fn, [full, wide, lane, clamp])
            return b.trunc(out, ty) if ty.width < 32 else out
        bits = b.bitcast(value, I64) if ty == ir.DoubleType() else value
        lo = b.call(fn, [full, b.trunc(bits, I32), lane, clamp])
        hi = b.call(fn, [full, b.trunc(b.lshr(bits, ir.Constant(I64, 32)), I32), lane, clamp])
        joined = b.or_(b.zext(lo, I64), b.shl(b.zext(hi, I64), ir.Constant(I64, 32)))
        return b.bitcast(joined, ty) if ty == ir.DoubleType() else joined

    def row_stores(self, stores) -> None:
        if not self.warp_rows:
            return super().row_stores(stores)
        b = self.b
        values = [self.value(s.value) for s in stores]
        with b.if_then(b.icmp_unsigned("==", self.lane, ir.Constant(I64, 0))):
            for s, v in zip(stores, values):
                self.store(s.buffer, s.index, v)

    def outer_loops(self, vars_, body) -> None:
        """for (i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride)."""
        real = [v for v in vars_ if isinstance(v, ix.IVar)]
        b = self.b
        start = b.add(b.mul(self._sreg("ctaid.x"), self._sreg("ntid.x")), self._sreg("tid.x"))
        stride = b.mul(self._sreg("nctaid.x"), self._sreg("ntid.x"))
        self._strided(K.extent(real), start, stride, real, body)

    def tiled_dot(self, k: K.DotKernel) -> None:
        """C tile of TILE x TILE per block (one element per thread), A and B staged through
        shared memory TILE columns of K at a time; the epilogue runs per element."""
        b = self.b
        T = TILE
        real = lambda vs: [v for v in vs if isinstance(v, ix.IVar)]
        (mv,), (nv,), (kv,) = real(k.m_vars), real(k.n_vars), real(k.k_vars)
        M, N, Kd = (ix.extent_of(v) for v in (mv, nv, kv))
        batch = real(k.batch_vars)
        acc_ty = COMPUTE[k.acc_dtype]
        a_s = self.mb.shared(f"{self.fn.name}_a", acc_ty, T * T)
        b_s = self.mb.shared(f"{self.fn.name}_b", acc_ty, T * T)
        tid = self._sreg("tid.x")
        row = b.udiv(tid, ir.Constant(I64, T))
        col = b.urem(tid, ir.Constant(I64, T))
        const = lambda v: ir.Constant(I64, v)
        tiles_of = lambda n: b.udiv(b.add(self.dim(n), const(T - 1)), const(T))  # ceil(n / T)
        mt, nt, kt = tiles_of(M), tiles_of(N), tiles_of(Kd)
        tile_vars = batch + [ix.IVar(0, ix.BIG, "tile_m"), ix.IVar(0, ix.BIG, "tile_n")]
        radices = [self.dim(ix.extent_of(v)) for v in batch] + [mt, nt]
        tiles = b.mul(b.mul(self.dim(K.extent(batch)), mt), nt)
        barrier = self.mb.barrier()

        def staged(expr, dtype, r, c, r_lim, c_lim, r_name, c_name, dest):
            ok = b.and_(b.icmp_unsigned("<", r, self.dim(r_lim)),
                        b.icmp_unsigned("<", c, self.dim(c_lim)))
            self.env[r_name] = b.select(ok, r, const(0))
            self.env[c_name] = b.select(ok, c, const(0))
            saved = dict(self.cache)
            v = self.convert_value(self.value(expr), dtype, k.acc_dtype)
            self.cache = saved
            b.store(b.select(ok, v, ir.Constant(acc_ty, 0)), b.gep(dest, [const(0), tid]))

        def tile():
            m = b.add(b.mul(self.env["tile_m"], const(T)), row)
            n = b.add(b.mul(self.env["tile_n"], const(T)), col)
            acc = self._alloca(acc_ty)
            b.store(ir.Constant(acc_ty, 0), acc)

            def k_step():
                k0 = b.mul(self.env["kt"], const(T))
                staged(k.lhs, k.lhs.dtype, m, b.add(k0, col), M, Kd, mv.name, kv.name, a_s)
                staged(k.rhs, k.rhs.dtype, b.add(k0, row), n, Kd, N, kv.name, nv.name, b_s)
                b.call(barrier, [])
                for i in range(T):
                    x = b.load(b.gep(a_s, [const(0), b.add(b.mul(row, const(T)), const(i))]))
                    y = b.load(b.gep(b_s, [const(0), b.add(const(i * T), col)]))
                    b.store(self._term(k, x, y, b.load(acc), k.acc_dtype), acc)
                b.call(barrier, [])
            self.bounds["kt"] = (const(0), kt)
            self.loops([ix.IVar(0, ix.BIG, "kt")], k_step)
            inside = b.and_(b.icmp_unsigned("<", m, self.dim(M)),
                            b.icmp_unsigned("<", n, self.dim(N)))
            with b.if_then(inside):
                self.env[mv.name], self.env[nv.name] = m, n
                saved = dict(self.cache)
                self.accs[0] = self.round_to(b.load(acc), k.acc_dtype, k.out.dtype)
                self.cache = {}
                self.store(k.out, k.out_index, self.accs[0])
                self.stores(k.epilogue)
                self.cache = saved

        blocks = b.mul(self._sreg("nctaid.x"), const(1))
        self._strided(tiles, self._sreg("ctaid.x"), blocks, tile_vars, tile, radices)

    def atomic_scatter(self, k: K.ScatterKernel) -> None:
        dtype = k.out.dtype
        if dtype not in ("float32", "float64", "int32", "int64"):
            raise CompileError(f"scatter_add of {dtype} on CUDA is not supported")

        def body():
            upd = self.value(k.update)
            op = "fadd" if dtype.startswith("float") else "add"
            self.b.atomic_rmw(op, self._ptr(k.out, k.target), upd, "monotonic")
        self.outer_loops(k.upd_vars, body)


class CudaModuleBuilder(LlvmModule):
    def __init__(self, name: str, arch: str):
        super().__init__(name, triple=TRIPLE)
        self.arch = arch
        self.launches: list = []          # (function name, total threads, buffers)
        self.uses_libdevice = False

    def shared(self, name: str, ty, count: int):
        """A block-shared array (address space 3)."""
        gv = ir.GlobalVariable(self.module, ir.ArrayType(ty, count), name, addrspace=3)
        gv.linkage = "internal"
        gv.initializer = ir.Constant(ir.ArrayType(ty, count), None)
        gv.align = 16
        return gv

    def barrier(self):
        name = "llvm.nvvm.barrier0"
        if name in self.module.globals:
            return self.module.globals[name]
        return ir.Function(self.module, ir.FunctionType(VOID, []), name)

    def shfl(self):
        name = "llvm.nvvm.shfl.sync.bfly.i32"
        if name in self.module.globals:
            return self.module.globals[name]
        return ir.Function(self.module, ir.FunctionType(I32, [I32, I32, I32, I32]), name)

    def sreg(self, name: str):
        full = f"llvm.nvvm.read.ptx.sreg.{name}"
        if full in self.module.globals:
            return self.module.globals[full]
        return ir.Function(self.module, ir.FunctionType(I32, []), full)

    def libm(self, op: str, ty):
        sym = f"__nv_{op}f" if ty == ir.FloatType() else f"__nv_{op}"
        self.uses_libdevice = True
        if sym in self.module.globals:
            return self.module.globals[sym]
        nargs = 2 if op == "pow" else 1
        return ir.Function(self.module, ir.FunctionType(ty, [ty] * nargs), sym)

    def gemm(self, dtype: str):
        raise CompileError("BLAS is not available on CUDA")

    def add_gpu_kernel(self, kernel, aliased: set) -> None:
        if isinstance(kernel, K.ScatterKernel):
            self._emit(kernel.copy, aliased, kernel.copy.name, "kernel")
            self._emit(kernel, aliased, kernel.name, "atomic")
        elif isinstance(kernel, K.CollectiveKernel):
            raise CompileError("collectives across processes are not supported on CUDA yet")
        else:
            if isinstance(kernel, K.RowKernel):
                kernel.stashed = []            # no row scratch in a GPU thread's registers
            self._emit(kernel, aliased, kernel.name, "kernel")

    def _emit(self, kernel, aliased, name, mode) -> None:
        buffers = {}
        for load in kernel.reads():
            buffers[load.buffer.id] = load.buffer
        for store in kernel.writes():
            buffers[store.buffer.id] = store.buffer
        bufs = sorted(buffers.values(), key=lambda b: b.id)
        fn = ir.Function(self.module, ir.FunctionType(
            VOID, [ir.PointerType(STORAGE[b.dtype]) for b in bufs] + [I64] * len(self.symbols)),
            name)
        fn.calling_convention = "ptx_kernel"
        for arg, b in zip(fn.args, bufs):
            if b.id not in aliased:
                arg.add_attribute("noalias")
            arg.attributes.align = VECTOR_BYTES      # the runtime checks every buffer
        builder = ir.IRBuilder(fn.append_basic_block("entry"))
        em = GpuEmitter(self, builder, {b.id: (arg, b) for arg, b in zip(fn.args, bufs)}, fn)
        em.symbols = dict(zip(self.symbols, fn.args[len(bufs):]))
        if mode == "atomic":
            em.atomic_scatter(kernel)
            total = K.extent(kernel.upd_vars)
        else:
            em.kernel(kernel)
            total = K.extent(_outer_vars(kernel)) // vector_lanes(kernel)
            if isinstance(kernel, K.RowKernel) and not thread_per_row(kernel):
                total *= WARP                 # a warp per row
            elif isinstance(kernel, K.DotKernel) and tiled(kernel):
                real = lambda vs: [v for v in vs if isinstance(v, ix.IVar)]
                M, N = (ix.extent_of(real(vs)[0]) for vs in (kernel.m_vars, kernel.n_vars))
                if isinstance(M, Dim) or isinstance(N, Dim):     # a bound on the tiles
                    total = K.extent(kernel.batch_vars) * (M + TILE - 1) * (N + TILE - 1)
                else:
                    total = K.extent(kernel.batch_vars) * -(-M // TILE) * -(-N // TILE) * \
                        TILE * TILE
        builder.ret_void()
        self.launches.append((name, total, bufs))


VECTOR_BYTES = 16
COLUMN_MIN_ROWS = 4096     # thread-per-row reductions need this many rows to fill the GPU


def thread_per_row(kernel) -> bool:
    """Column-like reductions (the kept index is the contiguous one, e.g. a sum over
    axis 0): one thread per kept element, neighbouring threads reading neighbouring
    addresses row after row (coalesced), instead of a warp striding down one column."""
    real = lambda vs: [v for v in vs if isinstance(v, ix.IVar)]
    kept, reduced = real(kernel.kept_vars), real(kernel.reduced_vars)
    if not kept or not reduced or hint(K.extent(kept)) < COLUMN_MIN_ROWS:
        return False
    along_kept = along_reduced = 0
    for ld in kernel.reads():
        aff = ix.affine(ix.linearize(ld.index, ld.buffer.shape))
        if aff is not None:
            along_kept += aff[0].get(kept[-1].name) == 1
            along_reduced += aff[0].get(reduced[-1].name) == 1
    return along_kept > along_reduced


def vector_lanes(kernel) -> int:
    """Elements per thread for a loop kernel whose stores are all contiguous along its
    innermost dimension with 16-byte aligned rows (buffers start 16-byte aligned), else 1."""
    if not isinstance(kernel, K.LoopKernel):
        return 1
    real = [v for v in kernel.loop_vars if isinstance(v, ix.IVar)]
    if not real:
        return 1
    inner = real[-1]
    if inner.extent is not None:              # a symbolic row length: one element a thread
        return 1
    sizes = {dtypes.itemsize(s.buffer.dtype) for s in kernel.stores}
    if len(sizes) != 1:
        return 1
    lanes = min(4, VECTOR_BYTES // sizes.pop())      # (8- and 16-byte for f16/bool)
    if lanes < 2 or (inner.hi + 1) % lanes:
        return 1
    for s in kernel.stores:
        aff = ix.affine(ix.linearize(s.index, s.buffer.shape))
        if aff is None or aff[0].get(inner.name) != 1 or aff[1] % lanes or \
                any(c % lanes for n, c in aff[0].items() if n != inner.name):
            return 1
    return lanes


def _outer_vars(kernel):
    if isinstance(kernel, K.LoopKernel):
        return kernel.loop_vars
    if isinstance(kernel, K.RowKernel):
        return kernel.kept_vars
    if isinstance(kernel, K.DotKernel):
        return kernel.batch_vars + kernel.m_vars + kernel.n_vars
    if isinstance(kernel, K.ConvKernel):
        return kernel.out_vars
    raise CompileError(f"no CUDA lowering for {type(kernel).__name__}")
