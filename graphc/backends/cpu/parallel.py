"""Threads for split kernels: OpenMP's team (libgomp through pointers the runtime fills)
or threads started per call, the strided chunk loop, and where kernels are split."""
from __future__ import annotations

import llvmlite.ir as ir

from graphc_runtime.dims import Dim, hint
from graphc_runtime.openmp import SYMBOLS as OPENMP_POINTERS


from ...ir.primitive import is_transcendental
from ...kernels import index as ix
from ...kernels import kernel as K
from ..llvm.emitter import strided_loop
from .dot_plan import blas_plan
from ..llvm.types import I8, I32, I64, VOID


class ParallelBuilder:
    """ModuleBuilder's calls of split kernels across threads."""

    def _parallel_call(self, b, fn_k, ptrs, split, trampoline, own_threads=True,
                       extent_value=None, small=None, granule: int = 1) -> None:
        """Run fn_k over `split`'s range in `threads` contiguous chunks. On OpenMP's team
        when the runtime found libgomp (graphc_gomp_parallel set), else chunks 1.. on new
        threads (pthreads) and chunk 0 here, then join; a thread that cannot be started
        runs its chunk here instead. Every element is computed by exactly one call over
        the same chunks either way, so results do not depend on the thread count.
        Kernels not worth threads started per call (`own_threads` false) run as one
        call when there is no team, and so does every call where `small` (an i1 a
        symbolic program computes from the call's sizes) is true. Chunk bounds inside
        the range are multiples of `granule` (see split_granule)."""
        if small is not None:
            with b.if_else(small) as (one, many):
                with one:
                    b.call(fn_k, ptrs + [ir.Constant(I64, 0), extent_value])
                with many:
                    self._parallel_call(b, fn_k, ptrs, split, trampoline, own_threads,
                                        extent_value, None, granule)
            return
        i8p = ir.PointerType(I8)
        extent = ix.extent_of(split)
        if isinstance(extent, int):
            threads = min(self.threads, extent)
            cut = [extent * t // threads // granule * granule for t in range(threads)]
            bounds = [ir.Constant(I64, v) for v in cut + [extent]]
            extent_value = ir.Constant(I64, extent)
        else:                   # chunk bounds from the call's size (some may be empty)
            threads = self.threads
            g = ir.Constant(I64, granule)
            bounds = [b.mul(b.udiv(b.udiv(b.mul(extent_value, ir.Constant(I64, t)),
                                          ir.Constant(I64, threads)), g), g)
                      for t in range(threads)] + [extent_value]
        contexts = []
        extra = [] if self.profiling is None else [None]      # the chunk's number
        for t in range(threads):
            ctx = b.alloca(I64, size=ir.Constant(I64, len(ptrs) + 2 + len(extra)))
            words = [b.ptrtoint(p, I64) if isinstance(p.type, ir.PointerType) else p
                     for p in ptrs] + [bounds[t], bounds[t + 1]] + \
                [ir.Constant(I64, t) for _ in extra]
            for k, w in enumerate(words):
                b.store(w, b.gep(ctx, [ir.Constant(I64, k)]))
            contexts.append(ctx)
        team = b.load(self.openmp()[0])
        with b.if_else(b.icmp_unsigned("!=", b.ptrtoint(team, I64), ir.Constant(I64, 0))) \
                as (on_team, no_team):
            with on_team:
                job = b.alloca(i8p, size=ir.Constant(I64, threads + 2))
                b.store(b.bitcast(trampoline, i8p), b.gep(job, [ir.Constant(I64, 0)]))
                b.store(b.inttoptr(ir.Constant(I64, threads), i8p),
                        b.gep(job, [ir.Constant(I64, 1)]))
                for t, ctx in enumerate(contexts):
                    b.store(b.bitcast(ctx, i8p), b.gep(job, [ir.Constant(I64, t + 2)]))
                fnty = ir.FunctionType(VOID, [i8p, i8p, I32, I32])
                b.call(b.bitcast(team, ir.PointerType(fnty)),
                       [b.bitcast(self.gomp_body(), i8p), b.bitcast(job, i8p),
                        ir.Constant(I32, threads), ir.Constant(I32, 0)])
            with no_team:
                if own_threads:
                    self._pthread_chunks(b, fn_k, ptrs, bounds, contexts, trampoline)
                else:
                    b.call(fn_k, ptrs + [ir.Constant(I64, 0), extent_value])

    def _pthread_chunks(self, b, fn_k, ptrs, bounds, contexts, trampoline) -> None:
        i8p = ir.PointerType(I8)
        create = self.module.globals.get("pthread_create") or ir.Function(
            self.module, ir.FunctionType(I32, [ir.PointerType(I64), i8p, i8p, i8p]),
            "pthread_create")
        join = self.module.globals.get("pthread_join") or ir.Function(
            self.module, ir.FunctionType(I32, [I64, ir.PointerType(i8p)]), "pthread_join")
        started = []
        for t in range(1, len(contexts)):
            tid = b.alloca(I64)
            rc = b.call(create, [tid, ir.Constant(i8p, None), b.bitcast(trampoline, i8p),
                                 b.bitcast(contexts[t], i8p)])
            failed = b.icmp_signed("!=", rc, ir.Constant(I32, 0))
            with b.if_then(failed):
                b.call(fn_k, ptrs + [bounds[t], bounds[t + 1]])
            started.append((tid, failed))
        b.call(fn_k, ptrs + [bounds[0], bounds[1]])
        for tid, failed in started:
            with b.if_then(b.not_(failed)):
                b.call(join, [b.load(tid), ir.Constant(ir.PointerType(i8p), None)])

    def openmp(self):
        """The pointers the runtime sets to libgomp's GOMP_parallel, omp_get_thread_num
        and omp_get_num_threads (null: no OpenMP; see graphc_runtime.openmp)."""
        i8p = ir.PointerType(I8)
        out = []
        for name in OPENMP_POINTERS:
            if name not in self.module.globals:
                g = ir.GlobalVariable(self.module, i8p, name)
                g.initializer = ir.Constant(i8p, None)
            out.append(self.module.globals[name])
        return out

    def team_thread(self, b):
        """i64: this thread's number in OpenMP's team, or -1 off the team (no libgomp,
        or a thread started for the call)."""
        _, thread_num, _ = self.openmp()
        fnty = ir.FunctionType(I32, [])
        ptr = b.load(thread_num)
        on_team = b.icmp_unsigned("!=", b.ptrtoint(ptr, I64), ir.Constant(I64, 0))
        result = b.alloca(I64)
        b.store(ir.Constant(I64, -1), result)
        with b.if_then(on_team):
            b.store(b.sext(b.call(b.bitcast(ptr, ir.PointerType(fnty)), []), I64), result)
        return b.load(result)

    def gomp_body(self):
        """void graphc_gomp_body(i8** job): what each OpenMP thread runs. job[0] is a
        chunk trampoline, job[1] the number of chunks, job[2 + c] chunk c's context;
        thread t runs chunks t, t + n, ... of a team of n (libgomp may give fewer
        threads than asked for: every chunk still runs exactly once)."""
        name = "graphc_gomp_body"
        if name in self.module.globals:
            return self.module.globals[name]
        i8p = ir.PointerType(I8)
        fn = ir.Function(self.module, ir.FunctionType(VOID, [i8p]), name)
        fn.linkage = "internal"
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        job = b.bitcast(fn.args[0], ir.PointerType(i8p))
        _, thread_num, num_threads = self.openmp()
        query = lambda ptr: b.sext(b.call(b.bitcast(b.load(ptr), ir.PointerType(
            ir.FunctionType(I32, []))), []), I64)
        first, team = query(thread_num), query(num_threads)
        team = b.select(b.icmp_signed("<", team, ir.Constant(I64, 1)), ir.Constant(I64, 1), team)
        tramp = b.bitcast(b.load(b.gep(job, [ir.Constant(I64, 0)])),
                          ir.PointerType(ir.FunctionType(i8p, [i8p])))
        chunks = b.ptrtoint(b.load(b.gep(job, [ir.Constant(I64, 1)])), I64)
        strided_loop(b, first, chunks, team, lambda c: b.call(
            tramp, [b.load(b.gep(job, [b.add(c, ir.Constant(I64, 2))]))]))
        b.ret_void()
        return fn


TEAM_MIN_WORK = 1 << 16          # element-steps from which a kernel is split for threads:
# OpenMP's team of spinning workers takes a chunk within microseconds
THREAD_MIN_WORK = 1 << 22        # without libgomp, threads are started per call (tens of
# microseconds each): below this the split kernel runs as one call
BLAS_CHUNK_MIN_FLOPS = 1 << 21   # a BLAS product's chunks each keep this much work (and so
# OpenBLAS's standard kernels: every element is summed in the same order for any split)
OWN_CHUNK_MIN_WORK = 1 << 17     # multiply-adds per chunk of graphc's own GEMM kernels, whose
# sums do not depend on the split: a MobileNet-style pointwise convolution (64 x 32 @
# 32 x 1024, 2M) ran on one thread below the OpenBLAS bound, at half the speed of two


def _chunk_min(plan) -> int:
    """The least work (multiply-adds) of one thread's chunk of a product run by `plan`."""
    return OWN_CHUNK_MIN_WORK if plan.get("own") else BLAS_CHUNK_MIN_FLOPS


COSTLY_WEIGHT = 8                # element-steps an element of each expensive op (exp,
# tanh, logistic, ...) counts for: an LSTM's gates (32 x 256, three sigmoids and two
# tanh) then run on every thread


def _expensive_ops(stores) -> int:
    """How many distinct transcendental primitives (a math function each) the stores
    evaluate."""
    return sum(1 for e in K.value_exprs([s.value for s in stores])
               if isinstance(e, K.Prim) and is_transcendental(e.op))


def split_work(kern, threads: int):
    """(the work a split kernel must have for threads to pay, the least such work): an
    int or, in a symbolic program, a Dim that the code compares at the call (a split
    kernel then runs as one call when it is smaller)."""
    if isinstance(kern, K.DotKernel) and blas_plan(kern) is not None:
        return _extent(kern.batch_vars + kern.m_vars + kern.n_vars + kern.k_vars), \
            _chunk_min(blas_plan(kern)) * threads
    if isinstance(kern, K.LoopKernel):
        work = _extent(kern.loop_vars) * (1 + COSTLY_WEIGHT * _expensive_ops(kern.stores))
    elif isinstance(kern, K.RowKernel):
        red = _extent(kern.reduced_vars)
        work = _extent(kern.kept_vars) * (red if isinstance(red, Dim) else max(red, 1)) * \
            (len(kern.reductions) + 1)
    elif isinstance(kern, K.DotKernel):
        work = _extent(kern.batch_vars + kern.m_vars + kern.n_vars + kern.k_vars)
    elif isinstance(kern, K.ConvKernel):
        work = _extent(kern.out_vars) * _extent(kern.red_vars)
    else:
        work = 0
    return work, TEAM_MIN_WORK


def split_var(kern, threads: int):
    """(the outer loop variable whose range threads share, whether threads started per
    call are worth it too), or (None, False): run on one thread. A symbolic program
    decides for a typical size (and checks the work at the call, see split_work)."""
    if threads < 2:
        return None, False
    if isinstance(kern, K.DotKernel) and blas_plan(kern) is not None:
        return _blas_split(kern, threads), False
    if isinstance(kern, K.LoopKernel):
        outer = kern.loop_vars
    elif isinstance(kern, K.RowKernel):
        outer = kern.kept_vars
    elif isinstance(kern, K.DotKernel):      # layout nests read a whole image's product
        outer = kern.batch_vars + (() if kern.layouts else kern.m_vars)
    elif isinstance(kern, K.ConvKernel):
        outer = kern.out_vars
    else:
        return None, False
    work = hint(split_work(kern, threads)[0])
    if work < TEAM_MIN_WORK:
        return None, False
    for v in outer:
        if isinstance(v, ix.IVar) and hint(ix.extent_of(v)) >= threads:
            return v, work >= THREAD_MIN_WORK
    return None, False


def split_granule(kern, split) -> int:
    """What a kernel's thread chunks' bounds are multiples of: for the own GEMM kernels
    split along the columns of C, 16 (a 512-bit vector of floats), so that no chunk but
    the last ends in columns done one at a time (a product 272 columns wide in two
    chunks of 136 ran the last 8 columns of the first as scalars); else 1."""
    if not isinstance(kern, K.DotKernel) or split.name not in {
            v.name for v in kern.n_vars if isinstance(v, ix.IVar)}:
        return 1
    plan = blas_plan(kern)
    if plan is not None and plan["own"] == "winograd":     # whole blocks of tile rows
        return 2 * plan["rows"]
    return 16 if plan is not None and plan["own"] in ("nn", "nnw") else 1


def _blas_split(kern, threads: int):
    """The m or n variable of a BLAS product to split between OpenMP's threads, or None.
    The split goes along the larger operand's own free dimension (n when B is the bigger
    operand, m when A is), so each thread packs only its share of the big operand
    (docs/performance.md). Chunks stay large.
    Without libgomp the product stays one call and OpenBLAS runs its own threads."""
    real = lambda vs: [v for v in vs if isinstance(v, ix.IVar)]
    ms, ns, ks = real(kern.m_vars), real(kern.n_vars), real(kern.k_vars)
    # symbolic sizes: decided for a typical size, the chunks' bounds computed at the call
    M, N, Kd = (hint(_extent(vs)) for vs in (ms, ns, ks))
    plan = blas_plan(kern)
    if hint(_extent(kern.batch_vars)) * M * N * Kd < _chunk_min(plan) * threads:
        return None
    # a convolution read in place (own nnw kernel): whole images per thread, so that no
    # thread gets a column tail narrower than a vector
    images = real(kern.batch_vars)
    if kern.layouts:       # a layout nest reads a whole image's product, or its rows
        return layout_split(kern, threads)
    if plan["own"] == "winograd":      # whole images, else blocks of output rows
        if images and hint(ix.extent_of(images[0])) >= threads:
            return images[0]
        if ix.extent_of(ns[0]) // (2 * plan["rows"]) >= threads:
            return ns[0]
        return ms[0] if M >= 8 * threads else None
    if plan["own"] == "nnw" and images and hint(ix.extent_of(images[0])) >= threads:
        return images[0]
    if plan["own"] == "nnw" and plan["row"]:     # C's rows of an image: split along m
        ns = []
    order = (ns + ms) if N * Kd >= M * Kd else (ms + ns)
    for v in order:
        if hint(ix.extent_of(v)) >= 16 * threads:
            return v
    return None


LAYOUT_ROWS_MIN = 8     # rows of the product per thread where threads share an image


def layout_rows_split(kern, threads: int) -> bool:
    """Whether threads can share each image of a product with layout nests by its rows
    (channels): the nests keep to the product's rows (kernel.channel_vars) and every thread
    gets LAYOUT_ROWS_MIN of them (a MobileNet-style network at batch 1 on 2 threads)."""
    ms = [v for v in kern.m_vars if isinstance(v, ix.IVar)]
    return len(ms) == 1 and isinstance(ix.extent_of(ms[0]), int) and \
        ix.extent_of(ms[0]) >= LAYOUT_ROWS_MIN * threads and K.channel_vars(kern) is not None


def layout_split(kern, threads: int):
    """The variable threads share a dot kernel with layout nests by: its images where
    there is one for each thread, else the product's rows where layout_rows_split
    allows, else None (one thread runs it)."""
    images = [v for v in kern.batch_vars if isinstance(v, ix.IVar)]
    if images and hint(ix.extent_of(images[0])) >= threads:
        return images[0]
    if layout_rows_split(kern, threads):
        return [v for v in kern.m_vars if isinstance(v, ix.IVar)][0]
    return None


_extent = K.extent
