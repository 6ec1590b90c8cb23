"""Kernels on threads: runs of kernels handed to the runtime's thread pool as sequences of
jobs (graphc_runtime.pool, through pointers the runtime fills), or, where no pool is
bound, split kernels on threads started per call. Where kernels are split and into how
many chunks is parallel.py's policy."""
from __future__ import annotations

import llvmlite.ir as ir

from graphc_runtime.pool import SYMBOLS as POOL_POINTERS

from ...kernels import index as ix
from ..llvm.types import I8, I32, I64, VOID

I8P = ir.PointerType(I8)


def _c(v: int):
    return ir.Constant(I64, v)


class ThreadsBuilder:
    """ModuleBuilder's calls of kernels: one by one, or as the pool's jobs."""

    # ---- a run of kernels between control-flow regions ----
    def emit_run(self, b, run, pointer, sym_args, values, emit_dim) -> None:
        """Call the kernel entries of `run` in order. Where one of them is split and the
        pool is bound, the whole run is one sequence of pool jobs (a thread that the OS
        has not scheduled holds up no kernel it has not started); in the profiling build
        each kernel is timed on its own."""
        calls = []
        for entry in run:           # every pointer and size before the branch below
            fn_k, bufs, (split, own_threads, least, granule, chunks), trampoline = entry
            ptrs = [pointer(x) for x in bufs] + sym_args
            extent = small = None
            if split is not None:
                extent = emit_dim(b, ix.extent_of(split), values)
                if least is not None:           # too little work at this call: one thread
                    small = b.icmp_signed("<", emit_dim(b, least[0], values), _c(least[1]))
            calls.append((entry, ptrs, extent, small))
        if self.profiling is not None or len(run) < 2 or \
                all(entry[2][0] is None for entry in run):
            for call in calls:
                self._call_entry(b, *call)
            return
        run_fn = b.load(self.pool_pointers()[0])
        with b.if_else(b.icmp_unsigned("!=", b.ptrtoint(run_fn, I64), _c(0))) \
                as (on_pool, no_pool):
            with on_pool:
                self._run_jobs(b, run_fn, [self._job(b, *call) for call in calls])
            with no_pool:
                for call in calls:
                    self._call_entry(b, *call, pool=False)

    def _call_entry(self, b, entry, ptrs, extent, small, pool: bool = True) -> None:
        index = self.profile_index.get(id(entry)) if self.profiling is not None else None
        fn_k, bufs, (split, own_threads, least, granule, chunks), trampoline = entry
        if index is not None:
            self.profiling.kernel_start(b, index)
        if split is None:
            b.call(fn_k, ptrs)
        elif pool:
            run_fn = b.load(self.pool_pointers()[0])
            with b.if_else(b.icmp_unsigned("!=", b.ptrtoint(run_fn, I64), _c(0))) \
                    as (on_pool, no_pool):
                with on_pool:
                    self._run_jobs(b, run_fn, [self._job(b, entry, ptrs, extent, small)])
                with no_pool:
                    self._without_pool(b, entry, ptrs, extent, small)
        else:
            self._without_pool(b, entry, ptrs, extent, small)
        if index is not None:
            self.profiling.kernel_end(b, index)

    # ---- the pool ----
    def _job(self, b, entry, ptrs, extent, small):
        """(body, arg, n) of one kernel's pool job. arg holds the kernel's arguments and,
        for a split kernel, the range's extent and the chunk count."""
        fn_k, bufs, (split, own_threads, least, granule, chunks), trampoline = entry
        words = [b.ptrtoint(p, I64) if isinstance(p.type, ir.PointerType) else p
                 for p in ptrs]
        n = _c(1)
        if split is not None:
            total = ix.extent_of(split)
            n = _c(min(chunks, total) if isinstance(total, int) else chunks)
            if small is not None:
                n = b.select(small, _c(1), n)
            words += [extent, n]
        arg = b.alloca(I64, size=_c(len(words)))
        for k, w in enumerate(words):
            b.store(w, b.gep(arg, [_c(k)]))
        index = self.profile_index.get(id(entry)) if self.profiling is not None else None
        body = self._job_body(fn_k, len(bufs), split is not None, granule, index)
        return body, arg, n

    def _job_body(self, fn, n_bufs: int, split: bool, granule: int, index):
        """void <kernel>_job(i8* arg, i64 c): runs chunk c of the kernel's job (for a
        split kernel, the c-th of n contiguous parts of its range, bounds multiples of
        `granule`; the whole call otherwise)."""
        name = fn.name + "_job"
        if name in self.module.globals:
            return self.module.globals[name]
        body = ir.Function(self.module, ir.FunctionType(VOID, [I8P, I64]), name)
        body.linkage = "internal"
        b = ir.IRBuilder(body.append_basic_block("entry"))
        arg, c = b.bitcast(body.args[0], ir.PointerType(I64)), body.args[1]
        params = fn.function_type.args
        n_words = len(params) - (2 if split else 0)
        words = [b.load(b.gep(arg, [_c(k)])) for k in range(n_words)]
        args = [b.inttoptr(w, t) if isinstance(t, ir.PointerType) else w
                for w, t in zip(words, params)]
        if not split:
            b.call(fn, args)
            b.ret_void()
            return body
        extent, n = (b.load(b.gep(arg, [_c(n_words + k)])) for k in range(2))
        g = _c(granule)
        bound = lambda k: b.mul(b.udiv(b.udiv(b.mul(extent, k), n), g), g)
        nxt = b.add(c, _c(1))
        begin, end = bound(c), b.select(b.icmp_unsigned("==", nxt, n), extent, bound(nxt))
        if self.profiling is None:
            b.call(fn, args + [begin, end])
        else:
            self.profiling.chunk(b, index, c, self.team_thread(b),
                                 lambda: b.call(fn, args + [begin, end]))
        b.ret_void()
        return body

    def _run_jobs(self, b, run_fn, jobs) -> None:
        """Call graphc_pool_run(records, count) on `jobs` ((body, arg, n) each)."""
        table = b.alloca(I64, size=_c(3 * len(jobs)))
        for j, (body, arg, n) in enumerate(jobs):
            for k, w in enumerate((b.ptrtoint(body, I64), b.ptrtoint(arg, I64), n)):
                b.store(w, b.gep(table, [_c(3 * j + k)]))
        fnty = ir.FunctionType(VOID, [ir.PointerType(I64), I64])
        b.call(b.bitcast(run_fn, ir.PointerType(fnty)), [table, _c(len(jobs))])

    def pool_pointers(self):
        """The pointers the runtime sets to its pool's graphc_pool_run and
        graphc_pool_thread (null: no pool; see graphc_runtime.pool)."""
        out = []
        for name in POOL_POINTERS:
            if name not in self.module.globals:
                g = ir.GlobalVariable(self.module, I8P, name)
                g.initializer = ir.Constant(I8P, None)
            out.append(self.module.globals[name])
        return out

    def team_thread(self, b):
        """i64: this thread's number in the pool (0 the caller, k + 1 worker k), or -1
        off the pool (no pool, or a thread started for the call)."""
        _, thread_num = self.pool_pointers()
        ptr = b.load(thread_num)
        on_pool = b.icmp_unsigned("!=", b.ptrtoint(ptr, I64), _c(0))
        result = b.alloca(I64)
        b.store(_c(-1), result)
        with b.if_then(on_pool):
            b.store(b.call(b.bitcast(ptr, ir.PointerType(ir.FunctionType(I64, []))), []),
                    result)
        return b.load(result)

    # ---- no pool: threads started per call ----
    def _without_pool(self, b, entry, ptrs, extent, small) -> None:
        """A split kernel where no pool is bound: in `threads` chunks, 1.. on new threads
        (pthreads) and chunk 0 here, then join (a thread that cannot be started runs
        its chunk here); as one call where `small` is true or the kernel is not worth
        threads started per call (`own_threads` false)."""
        fn_k, bufs, (split, own_threads, least, granule, chunks), trampoline = entry
        whole = ptrs + [_c(0), extent]
        if not own_threads:
            b.call(fn_k, whole)
            return
        if small is None:
            self._pthread_chunks(b, fn_k, ptrs, split, extent, granule, trampoline)
            return
        with b.if_else(small) as (one, many):
            with one:
                b.call(fn_k, whole)
            with many:
                self._pthread_chunks(b, fn_k, ptrs, split, extent, granule, trampoline)

    def _pthread_chunks(self, b, fn_k, ptrs, split, extent, granule, trampoline) -> None:
        bounds, contexts = self._chunk_contexts(b, ptrs, ix.extent_of(split), extent,
                                                granule, self.threads)
        create = self.module.globals.get("pthread_create") or ir.Function(
            self.module, ir.FunctionType(I32, [ir.PointerType(I64), I8P, I8P, I8P]),
            "pthread_create")
        join = self.module.globals.get("pthread_join") or ir.Function(
            self.module, ir.FunctionType(I32, [I64, ir.PointerType(I8P)]), "pthread_join")
        started = []
        for t in range(1, len(contexts)):
            tid = b.alloca(I64)
            rc = b.call(create, [tid, ir.Constant(I8P, None), b.bitcast(trampoline, I8P),
                                 b.bitcast(contexts[t], I8P)])
            failed = b.icmp_signed("!=", rc, ir.Constant(I32, 0))
            with b.if_then(failed):
                b.call(fn_k, ptrs + [bounds[t], bounds[t + 1]])
            started.append((tid, failed))
        b.call(fn_k, ptrs + [bounds[0], bounds[1]])
        for tid, failed in started:
            with b.if_then(b.not_(failed)):
                b.call(join, [b.load(tid), ir.Constant(ir.PointerType(I8P), None)])

    def _chunk_contexts(self, b, ptrs, extent, extent_value, granule: int, count: int):
        """(bounds, contexts) of `count` chunks for threads started per call (fewer for a
        short constant range): each context holds the kernel's arguments, the chunk's
        begin and end and, in the profiling build, its number."""
        if isinstance(extent, int):
            count = min(count, extent)
            cut = [extent * t // count // granule * granule for t in range(count)]
            bounds = [_c(v) for v in cut + [extent]]
        else:                   # chunk bounds from the call's size (some may be empty)
            g = _c(granule)
            bounds = [b.mul(b.udiv(b.udiv(b.mul(extent_value, _c(t)), _c(count)), g), g)
                      for t in range(count)] + [extent_value]
        contexts = []
        extra = [] if self.profiling is None else [None]      # the chunk's number
        for t in range(count):
            ctx = b.alloca(I64, size=_c(len(ptrs) + 2 + len(extra)))
            words = [b.ptrtoint(p, I64) if isinstance(p.type, ir.PointerType) else p
                     for p in ptrs] + [bounds[t], bounds[t + 1]] + [_c(t) for _ in extra]
            for k, w in enumerate(words):
                b.store(w, b.gep(ctx, [_c(k)]))
            contexts.append(ctx)
        return bounds, contexts
