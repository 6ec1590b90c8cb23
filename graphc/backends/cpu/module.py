"""The module builder (kernels, graphc_main, the graphc_entry fast path) and module
assembly; native_module.py compiles the result."""
from __future__ import annotations

import hashlib
import os

import llvmlite.ir as ir

from graphc_runtime import plan_digest
from graphc_runtime.cpu import ENTRY_ABI
from graphc_runtime.dims import Dim, hint

from ...kernels import index as ix
from ...kernels import kernel as K
from ...kernels.structure import structure
from ...schedule.chaining import BLOCK_BYTES as CHAIN_BLOCK_BYTES
from ...schedule.chaining import chain_block, follower_split
from .control import ControlBuilder, ControlEntry
from . import gemm, scalef
from .emitter import Emitter
from .dot_plan import NATIVE_FORMS, blas_plan, native_kernel
from ..llvm.emitter import strided_loop
from ..llvm.module import LlvmModule, aliased_buffers, twin_buffers
from .parallel import CHUNKS_PER_THREAD, split_chunks, split_granule, split_var, split_work
from .threads import ThreadsBuilder
from .profiling import Profiling
from ..llvm.symbols import emit_dim, program_symbols
from ..llvm.types import COMPUTE, I8, I32, I64, STORAGE, VOID

NUMPY_DATA_OFFSET = 16     # PyArrayObject: PyObject_HEAD (refcount, type), then data


class ModuleBuilder(LlvmModule, ThreadsBuilder, ControlBuilder):
    """Builds the LLVM module for one executable."""

    def __init__(self, name: str, triple: str = "", data_layout: str = ""):
        super().__init__(name, triple, data_layout)
        self.kernels: list = []       # (function, buffers, (split var, own threads, least
        #      work of a symbolic split or None, chunk granule), trampoline)
        self.threads = 1
        self.profiling = None         # a Profiling in the profiling build
        self.profile_index: dict = {}  # id(schedule entry) -> its kernel number there
        self.dims_slot = None         # the table slot of the symbols' values (i64[])
        self.shapes: dict = {}        # a kernel function's shape (shape_of) -> function
        self.structures: dict = {}    # a kernel's structure key -> its function
        self.check_structures = bool(os.environ.get("GRAPHC_CHECK_KERNEL_STRUCTURES"))
        self.own_gemms: set = set()   # the own GEMM kernels' names, declared
        self.on_own_gemm = None       # called with each of them, first declared

    def gemm(self, dtype: str):
        """void graphc_[sd]gemm(order, transA, transB, M, N, K, alpha, A, lda, B, ldb,
        beta, C, ldc) with 32-bit ints (CBLAS)."""
        name = "graphc_sgemm" if dtype == "float32" else "graphc_dgemm"
        if name in self.module.globals:
            return self.module.globals[name]
        ty = COMPUTE[dtype]
        p = ir.PointerType(ty)
        fnty = ir.FunctionType(VOID, [I32] * 6 + [ty, p, I32, p, I32, ty, p, I32])
        return ir.Function(self.module, fnty, name)

    def own_gemm(self, form: str, dtype: str):
        """graphc's own GEMM kernel of this form ('nn' / 'nt' / ..., see gemm.py; a
        narrow-type form of dot_plan.NATIVE_FORMS), declared; its object code is compiled
        on its own (native_module.py). `on_own_gemm(name)` hears of each the first time."""
        fn = native_kernel(form).declare(self.module) if form in NATIVE_FORMS else \
            gemm.declare(self.module, form, dtype)
        if fn.name not in self.own_gemms:
            self.own_gemms.add(fn.name)
            if self.on_own_gemm is not None:
                self.on_own_gemm(fn.name)
        return fn

    def offsets_table(self, offsets) -> ir.Value:
        """A pointer to a constant i64 array holding `offsets` (one global per table)."""
        name = "graphc_offsets_" + "_".join(map(str, offsets))
        if len(name) > 200:
            name = "graphc_offsets_" + hashlib.sha1(name.encode()).hexdigest()
        if name not in self.module.globals:
            ty = ir.ArrayType(I64, len(offsets))
            g = ir.GlobalVariable(self.module, ty, name)
            g.global_constant = True
            g.linkage = "internal"
            g.initializer = ir.Constant(ty, [int(o) for o in offsets])
        g = self.module.globals[name]
        return g.gep([ir.Constant(I32, 0), ir.Constant(I32, 0)])

    # -- kernels --------------------------------------------------------------------------
    def add_kernel(self, kernel, aliased: set, split: "ix.IVar | None" = None,
                   own_threads: bool = True, then=None, twins: dict | None = None) -> None:
        """Emit `kernel` as an internal function; `aliased` holds ids of buffers that may
        share memory with another buffer of this kernel (no noalias for them); `twins`
        those at exactly another's memory (twin_buffers: read and written through the
        first one's pointer). With a
        `split` loop variable the function takes (begin, end) for it as two last i64
        arguments, so that threads can run disjoint ranges: the runtime's pool when bound,
        else threads started for the call if `own_threads`, else one call. `then`:
        (follower kernel, its aliased set, its loop variable, its twins) to run in each
        of this kernel's chunks, right after it (see chaining.py)."""
        fn, bufs = self._kernel_function(kernel, aliased, split, twins or {})
        index = len(self.profile_index)
        if then is not None:
            follower, f_aliased, u, f_twins = then
            f_fn, f_bufs = self._kernel_function(follower, f_aliased, u, f_twins)
            block = chain_block(kernel, split, split_granule(kernel, split))
            if isinstance(kernel, K.DotKernel) and _unblocked_chain(kernel, split):
                block = 1 << 62      # chunks as large as the split makes them
            fn, bufs = self._chained(fn, bufs, f_fn, f_bufs, index, block,
                                     kernel.name), bufs + f_bufs
        trampoline = self._trampoline(fn, bufs, index, kernel.name) \
            if split is not None else None
        least, granule, chunks = None, 1, 1
        if split is not None:
            work, threshold = split_work(kernel, self.threads)
            least = (work, threshold) if isinstance(work, Dim) else None   # checked at the call
            granule = split_granule(kernel, split)
            chunks = split_chunks(kernel, split, self.threads, granule, work)
        entry = (fn, bufs, (split, own_threads, least, granule, chunks), trampoline)
        self.kernels.append(entry)
        if self.profiling is not None:
            self.profile_index[id(entry)] = index
            if then is not None:          # the follower keeps its number (chunks only)
                self.profile_index[("follower", id(entry))] = index + 1

    def _kernel_function(self, kernel, aliased: set, split, twins: dict):
        """(the kernel's internal function, the buffers it takes in order)."""
        buffers = {}
        for load in kernel.reads():
            buffers[load.buffer.id] = load.buffer
        for store in kernel.writes():
            buffers[store.buffer.id] = store.buffer
        if isinstance(kernel, K.ScatterKernel):
            for s in kernel.copy.stores:
                buffers[s.buffer.id] = s.buffer
        bufs = sorted(buffers.values(), key=lambda b: b.id)
        key = self._structure_key(kernel, bufs, aliased, split, twins)
        if key is not None and key in self.structures and not self.check_structures:
            return self.structures[key], bufs
        params = [ir.PointerType(STORAGE[b.dtype]) for b in bufs] + [I64] * len(self.symbols)
        if split is not None:
            params += [I64, I64]
        fn = ir.Function(self.module, ir.FunctionType(VOID, params), kernel.name)
        if not os.environ.get("GRAPHC_EXPORT_KERNELS"):      # profiling: keep symbols
            fn.linkage = "internal"
        else:
            fn.attributes.add("noinline")
        for arg, b in zip(fn.args, bufs):
            if b.id not in aliased:
                arg.add_attribute("noalias")
        entry = fn.append_basic_block("entry")
        builder = ir.IRBuilder(entry)
        args = {b.id: arg for arg, b in zip(fn.args, bufs)}
        em = Emitter(self, builder, {b.id: (self._twin(builder, args, twins, b.id), b)
                                     for b in bufs}, fn)
        em.symbols = dict(zip(self.symbols, fn.args[len(bufs):len(bufs) + len(self.symbols)]))
        if split is not None:
            em.bounds[split.name] = (fn.args[-2], fn.args[-1])
        em.kernel(kernel)
        builder.ret_void()
        if key is None:
            return self._shared(fn), bufs
        if key in self.structures:                          # check_structures
            self._check_structure(fn, self.structures[key])
            del self.module.globals[fn.name]
            return self.structures[key], bufs
        self.structures[key] = fn
        return fn, bufs

    def _structure_key(self, kernel, bufs, aliased, split, twins):
        """What decides a kernel function's code (kernels/structure.py: the kernel with
        its buffers as argument numbers; which of them may alias or are twins; the split
        variable):
        a later kernel of the same key calls the first one's function, never emitted.
        None where every kernel keeps its own function (as in _shared) and where the
        kernel has no structure (its function is then compared by its code, _shared)."""
        if self.profiling is not None or os.environ.get("GRAPHC_EXPORT_KERNELS"):
            return None
        positions = {b.id: k for k, b in enumerate(bufs)}
        kern = structure(kernel, positions)
        if kern is None:
            return None
        return (kern, tuple(b.id in aliased for b in bufs),
                tuple(positions[twins[b.id]] if b.id in twins else None for b in bufs),
                structure(split, positions))

    def _check_structure(self, fn, earlier) -> None:
        """check_structures: a kernel whose key matched an earlier one's, emitted anyway,
        must have that function's shape up to the kernels' names, which name its loops
        (tests run models so; a key that misses something the emitter reads fails here,
        not in a wrong result)."""
        mine = self.shape_of(fn).replace(fn.name, "@K")
        theirs = self.shape_of(earlier).replace(earlier.name, "@K")
        if mine != theirs:
            raise AssertionError(f"{fn.name} has the structure of {earlier.name} "
                                 "but not its code")

    def _shared(self, fn):
        """An earlier kernel function of the same shape in place of fn, which is dropped
        (the layers of a network repeat kernels over other buffers: LLVM then optimizes
        and compiles each shape once). Not in the profiling build nor with exported
        kernels, where every kernel keeps its own symbol."""
        if self.profiling is not None or os.environ.get("GRAPHC_EXPORT_KERNELS"):
            return fn
        shape = self.shape_of(fn)
        earlier = self.shapes.get(shape)
        if earlier is None:
            self.shapes[shape] = fn
            return fn
        del self.module.globals[fn.name]
        return earlier

    @staticmethod
    def _twin(builder, args: dict, twins: dict, bid: int):
        """Buffer `bid`'s pointer: its first twin's argument (as a pointer to its own element
        type where the twin's differs), or its own."""
        p = args[twins.get(bid, bid)]
        return p if p.type == args[bid].type else builder.bitcast(p, args[bid].type)

    def _chained(self, fn, bufs, f_fn, f_bufs, index: int, block: int, name: str):
        """A function over both kernels' buffers, the symbols and (begin, end) that runs
        the range in blocks of `block` iterations, the leader's block then the
        follower's, so that the follower reads what the leader just wrote from the
        core's cache (timed apart in the profiling build: the follower's chunks under
        kernel number index + 1)."""
        n_sym = len(self.symbols)
        params = [ir.PointerType(STORAGE[b.dtype]) for b in bufs + f_bufs] + \
            [I64] * (n_sym + 2)
        pair = ir.Function(self.module, ir.FunctionType(VOID, params), name + "_chained")
        pair.linkage = "internal"
        b = ir.IRBuilder(pair.append_basic_block("entry"))
        args = list(pair.args)
        syms, (begin, end) = args[len(bufs) + len(f_bufs):-2], args[-2:]
        thread = self.team_thread(b) if self.profiling is not None else None

        def run(lo):
            hi = b.add(lo, ir.Constant(I64, block))
            hi = b.select(b.icmp_signed("<", hi, end), hi, end)
            b.call(fn, args[:len(bufs)] + syms + [lo, hi])
            follow = lambda: b.call(f_fn, args[len(bufs):len(bufs) + len(f_bufs)] + syms +
                                    [lo, hi])
            if self.profiling is None:
                follow()
            else:
                self.profiling.follower(b, index + 1, thread, follow)
        strided_loop(b, begin, end, ir.Constant(I64, block), run)
        b.ret_void()
        return pair

    def _trampoline(self, fn, bufs, index: int, name: str):
        """ptr kN_thread(ptr ctx): ctx holds the buffer addresses, begin and end (i64),
        and in the profiling build the chunk's number."""
        i8p = ir.PointerType(I8)
        tr = ir.Function(self.module, ir.FunctionType(i8p, [i8p]), name + "_thread")
        tr.linkage = "internal"
        b = ir.IRBuilder(tr.append_basic_block("entry"))
        ctx = b.bitcast(tr.args[0], ir.PointerType(I64))
        n = len(bufs) + len(self.symbols)
        words = [b.load(b.gep(ctx, [ir.Constant(I64, k)])) for k in range(n + 2)]
        args = [b.inttoptr(w, ir.PointerType(STORAGE[x.dtype])) for w, x in zip(words, bufs)]
        args += words[len(bufs):]
        if self.profiling is None:
            b.call(fn, args)
        else:
            chunk = b.load(b.gep(ctx, [ir.Constant(I64, n + 2)]))
            self.profiling.chunk(b, index, chunk, self.team_thread(b),
                                 lambda: b.call(fn, args))
        b.ret(ir.Constant(i8p, None))
        return tr

    def add_main(self, segments, slot_of, arena_offset_of) -> None:
        """graphc_segment_<k>(i8** table) for each run of kernels between collectives,
        and graphc_main(i8** table) calling them all (for programs without collectives)."""
        i8p = ir.PointerType(I8)
        fns = []
        for k, schedule in enumerate(segments):
            fns.append(self._segment(f"graphc_segment_{k}", schedule, slot_of, arena_offset_of))
        fn = ir.Function(self.module, ir.FunctionType(VOID, [ir.PointerType(i8p)]), "graphc_main")
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        for f in fns:
            b.call(f, [fn.args[0]])
        b.ret_void()

    def _segment(self, name, schedule, slot_of, arena_offset_of, dims_slot=None):
        i8p = ir.PointerType(I8)
        fn = ir.Function(self.module, ir.FunctionType(VOID, [ir.PointerType(i8p)]), name)
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        table = fn.args[0]
        arena = b.load(b.gep(table, [ir.Constant(I64, 0)]))
        cache = {}
        values, dims_raw = {}, None
        if self.symbols:
            slot = self.dims_slot if dims_slot is None else dims_slot
            dims_raw = b.load(b.gep(table, [ir.Constant(I64, slot)]))
            dims = b.bitcast(dims_raw, ir.PointerType(I64))
            values = {s: b.load(b.gep(dims, [ir.Constant(I64, k)]), name=s)
                      for k, s in enumerate(self.symbols)}
        sym_args = [values[s] for s in self.symbols]

        def pointer(buf: K.Buffer):
            if buf.id in cache:
                return cache[buf.id]
            if buf.kind == "temp" and arena_offset_of(buf) is None:
                # kept in the kernel's own scratch (dot_plan.scratch_buffers): never read
                # or written through this pointer
                cache[buf.id] = ir.Constant(ir.PointerType(STORAGE[buf.dtype]), None)
                return cache[buf.id]
            if buf.kind == "temp":
                raw = b.gep(arena, [emit_dim(b, arena_offset_of(buf), values)])
            else:
                raw = b.load(b.gep(table, [ir.Constant(I64, slot_of(buf))]))
            cache[buf.id] = b.bitcast(raw, ir.PointerType(STORAGE[buf.dtype]))
            return cache[buf.id]

        run = []                 # kernels since the last control-flow region
        for entry in list(schedule) + [None]:
            if not isinstance(entry, ControlEntry) and entry is not None:
                run.append(entry)
                continue
            if run:
                self.emit_run(b, run, pointer, sym_args, values, emit_dim)
                run = []
            if entry is None:
                break
            index = self.profile_index.get(id(entry)) if self.profiling is not None else None
            if index is not None:
                self.profiling.kernel_start(b, index)
            self.emit_control(b, entry, pointer, (dims_raw, values))
            if index is not None:
                self.profiling.kernel_end(b, index)
        b.ret_void()
        return fn

    def add_entry(self, slots: int, objects: int, input_bytes: list, guarded: list) -> None:
        """i32 graphc_entry(ptr fixed, ptr obj_1, ..., ptr obj_n): the fast call path.

        `fixed` is a table with the arena, variables and constants filled in; obj_k are
        numpy arrays (PyObject*) for the inputs and outputs, whose data pointer the
        wrapper reads from numpy's array struct (the field right after the object
        header, NUMPY_DATA_OFFSET bytes in; the runtime checks this before using it).

        Before running, each input's bytes (`input_bytes[k]` long) are compared with the
        `guarded` (table slot, bytes) ranges the program writes (the arena, variables):
        an input that overlaps one would be read after the program overwrote it, so
        nothing runs and the entry returns k + 1 for the first such input (the runtime
        copies it and calls again); 0 after a run. The global `graphc_entry_abi` tells
        the runtime that the entry has this contract."""
        i8p = ir.PointerType(I8)
        abi = ir.GlobalVariable(self.module, I32, "graphc_entry_abi")
        abi.initializer = ir.Constant(I32, ENTRY_ABI)
        abi.global_constant = True
        # where saving writes the digest of the manifest this code is compiled for
        # (graphc_runtime.plan_digest); loading an artifact checks the two agree
        slot = bytearray(plan_digest.PLACEHOLDER)
        plan = ir.GlobalVariable(self.module, ir.ArrayType(I8, len(slot)), "graphc_plan_digest")
        plan.initializer = ir.Constant(ir.ArrayType(I8, len(slot)), slot)
        plan.global_constant = True
        fn = ir.Function(self.module, ir.FunctionType(I32, [ir.PointerType(i8p)] +
                                                      [i8p] * objects), "graphc_entry")
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        table = b.alloca(i8p, size=ir.Constant(I64, slots + (1 if self.symbols else 0)))
        fixed = fn.args[0]
        sizes = {}
        if self.symbols:        # the runtime put the symbols' values in `fixed` too
            dims_ptr = b.load(b.gep(fixed, [ir.Constant(I64, self.dims_slot)]))
            b.store(dims_ptr, b.gep(table, [ir.Constant(I64, self.dims_slot)]))
            dims = b.bitcast(dims_ptr, ir.PointerType(I64))
            sizes = {s: b.load(b.gep(dims, [ir.Constant(I64, k)]))
                     for k, s in enumerate(self.symbols)}
        values = {}
        for k in range(slots):
            if 1 <= k <= objects:
                obj = fn.args[k]
                field = b.bitcast(b.gep(obj, [ir.Constant(I64, NUMPY_DATA_OFFSET)]),
                                  ir.PointerType(i8p))
                value = b.load(field)
            else:
                value = b.load(b.gep(fixed, [ir.Constant(I64, k)]))
            values[k] = value
            b.store(value, b.gep(table, [ir.Constant(I64, k)]))
        clash = ir.Constant(I32, 0)
        ranges = [(b.ptrtoint(values[slot], I64), size) for slot, size in guarded if size]
        for k in reversed(range(len(input_bytes))):       # the first clash wins
            if not input_bytes[k]:
                continue
            start = b.ptrtoint(values[1 + k], I64)
            end = b.add(start, emit_dim(b, input_bytes[k], sizes))
            for lo, size in ranges:
                hit = b.and_(b.icmp_unsigned("<", start, b.add(lo, emit_dim(b, size, sizes))),
                             b.icmp_unsigned("<", lo, end))
                clash = b.select(hit, ir.Constant(I32, k + 1), clash)
        run, refuse = fn.append_basic_block("run"), fn.append_basic_block("refuse")
        b.cbranch(b.icmp_unsigned("==", clash, ir.Constant(I32, 0)), run, refuse)
        b.position_at_end(refuse)
        b.ret(clash)
        b.position_at_end(run)
        b.call(self.module.globals["graphc_main"], [table])
        b.ret(ir.Constant(I32, 0))


def emit_module(name: str, lowered, threads: int = 1, profile: bool = False,
                on_own_gemm=None) -> str:
    """LLVM IR text of the whole program: its kernels and graphc_main; with `profile`,
    the profiling build (timestamps around every kernel and thread chunk);
    `on_own_gemm(name)` is told of each own GEMM kernel the program calls as soon as
    its first call is emitted."""
    from graphc_runtime.cpu import host_features, llvm
    b = llvm()
    triple = b.get_process_triple()
    mb = ModuleBuilder(name, triple=triple)
    mb.threads = threads
    mb.on_own_gemm = on_own_gemm
    features = host_features().split(",")
    mb.scalef = scalef.available(features)
    mb.has_fma = "+fma" in features or "+avx512f" in features or not triple.startswith("x86")
    if profile:
        native = [k for k in lowered.kernels if not isinstance(k, K.CollectiveKernel)]
        mb.profiling = Profiling(mb.module, len(native), threads * CHUNKS_PER_THREAD)
    offsets = lowered.memory.offsets
    mb.symbols = program_symbols(lowered.buffers.values())
    mb.dims_slot = 1 + len(lowered.slots)

    def emit_schedule(low):
        """Emit a Lowered program's kernels: its segments (runs between collectives)."""
        segments = [[]]
        chained = chain_plan(low.kernels, threads, low.memory.offsets)
        followers = {t + 1 for t in chained}
        for t, kern in enumerate(low.kernels):
            if isinstance(kern, K.CollectiveKernel):
                segments.append([])           # the runtime runs the collective in between
                continue
            if isinstance(kern, K.ControlKernel):
                segments[-1].append(mb.add_control(kern, emit_schedule))
                continue
            if t in followers:
                continue                      # emitted in its leader's chunks
            twins = twin_buffers(kern, low.memory.offsets)
            aliased = aliased_buffers(kern, low.memory.offsets, twins)
            split, own_threads = split_var(kern, threads)
            then = None
            if t in chained:
                follower = low.kernels[t + 1]
                f_twins = twin_buffers(follower, low.memory.offsets)
                then = (follower, aliased_buffers(follower, low.memory.offsets, f_twins),
                        chained[t], f_twins)
            mb.add_kernel(kern, aliased, split, own_threads, then, twins)
            segments[-1].append(mb.kernels[-1])
        return segments
    segments = emit_schedule(lowered)
    mb.add_main(segments, lambda buf: lowered.slots[buf.id], lambda buf: offsets.get(buf.id))
    external = sorted((lowered.slots[b.id], b) for b in lowered.buffers.values()
                      if b.id in lowered.slots)
    input_bytes = [b.nbytes for _, b in external if b.kind == "input"]
    guarded = [(0, lowered.memory.arena_bytes)] + \
        [(slot, b.nbytes) for slot, b in external if b.kind == "variable"]
    mb.add_entry(1 + len(lowered.slots), len(lowered.inputs) + len(lowered.outputs),
                 input_bytes, guarded)
    return str(mb.module)


def chain_plan(kernels, threads: int, offsets) -> dict:
    """{step t: the loop variable of kernel t + 1 that runs in kernel t's thread chunks}
    (schedule/chaining.py): kernel t split for threads and the two chainable (kernel
    t + 1 then takes kernel t's chunks, whether or not it would be split itself)."""
    plan = {}
    for t in range(len(kernels) - 1):
        if t - 1 in plan:
            continue                          # kernel t is a follower already
        split = split_var(kernels[t], threads)[0]
        if split is None:
            continue
        u = follower_split(kernels[t], split, kernels[t + 1], offsets)
        if u is not None:
            plan[t] = u
    return plan


def _unblocked_chain(kernel, split) -> bool:
    """Whether a product leading a chain runs its chunks whole rather than in blocks
    (chaining.chain_block): on OpenBLAS, and on the narrow-type kernels where each block
    would pack (or read again) a whole other operand larger than a block: B for blocks
    of C's rows, A for blocks of its columns (a BERT-base-sized FFN at batch 32, 4,096 x
    768 @ 768 x 3,072 in 8 bits with its GELU, ran in blocks of 21 rows: 63 ms, against
    26 for the product and a loop kernel after it)."""
    own = (blas_plan(kernel) or {}).get("own")
    if own is None:
        return True
    if own not in NATIVE_FORMS:
        return False
    names = lambda vs: {v.name for v in vs if isinstance(v, ix.IVar)}   # noqa: E731
    other = kernel.rhs if split.name in names(kernel.m_vars) else \
        kernel.lhs if split.name in names(kernel.n_vars) else None
    return other is not None and hint(other.buffer.nbytes) > CHAIN_BLOCK_BYTES
