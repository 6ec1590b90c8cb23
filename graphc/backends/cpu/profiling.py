"""Timestamps for the profiling build: CLOCK_MONOTONIC nanoseconds (the clock of Python's
time.monotonic_ns) around each kernel on the calling thread and around each chunk of a
kernel split across threads, written to globals that the runtime reads after a call.
The normal build has none of this code.

    graphc_profile_shape   [2 x i64]          kernels K, chunks per kernel C
    graphc_profile_kernels [3K x i64]         start, end of kernel k, and the calling
                                              thread's CPU time spent in it
    graphc_profile_chunks  [4KC x i64]        start, end, thread of chunk c of kernel k
                                              (0 where the chunk did not run on the pool),
                                              and the CPU time its thread spent in it

CPU time is CLOCK_THREAD_CPUTIME_ID: what a thread ran, not what it waited for a CPU, so
on a busy machine the report can show waiting apart from running.
"""
from __future__ import annotations

import llvmlite.ir as ir

from ..llvm.types import I8, I32, I64

CLOCK_MONOTONIC = 1          # Linux
CLOCK_THREAD_CPUTIME_ID = 3
KERNEL_FIELDS, CHUNK_FIELDS = 3, 4


class Profiling:
    def __init__(self, module: ir.Module, kernels: int, chunks: int):
        self.module, self.kernels, self.chunks = module, kernels, max(chunks, 1)
        self.shape = self._array("graphc_profile_shape", [kernels, self.chunks])
        self.starts = self._array("graphc_profile_kernels",
                                  [0] * (KERNEL_FIELDS * max(kernels, 1)))
        self.chunk_times = self._array("graphc_profile_chunks",
                                       [0] * (CHUNK_FIELDS * max(kernels, 1) * self.chunks))
        self._clocks = {}

    def _array(self, name, values):
        ty = ir.ArrayType(I64, len(values))
        g = ir.GlobalVariable(self.module, ty, name)
        g.initializer = ir.Constant(ty, values)
        return g

    def now(self, b: ir.IRBuilder):
        """i64 nanoseconds of CLOCK_MONOTONIC."""
        return b.call(self._clock("graphc_profile_now", CLOCK_MONOTONIC), [])

    def cpu(self, b: ir.IRBuilder):
        """i64 nanoseconds of CPU time of the calling thread."""
        return b.call(self._clock("graphc_profile_cpu", CLOCK_THREAD_CPUTIME_ID), [])

    def _clock(self, name: str, clock_id: int) -> ir.Function:
        if name not in self._clocks:
            i8p = ir.PointerType(I8)
            clock = self.module.globals.get("clock_gettime") or ir.Function(
                self.module, ir.FunctionType(I32, [I32, i8p]), "clock_gettime")
            fn = ir.Function(self.module, ir.FunctionType(I64, []), name)
            fn.linkage = "internal"
            fb = ir.IRBuilder(fn.append_basic_block("entry"))
            ts = fb.alloca(ir.ArrayType(I64, 2))
            fb.call(clock, [ir.Constant(I32, clock_id), fb.bitcast(ts, i8p)])
            sec = fb.load(fb.gep(ts, [ir.Constant(I32, 0), ir.Constant(I32, 0)]))
            nsec = fb.load(fb.gep(ts, [ir.Constant(I32, 0), ir.Constant(I32, 1)]))
            fb.ret(fb.add(fb.mul(sec, ir.Constant(I64, 1_000_000_000)), nsec))
            self._clocks[name] = fn
        return self._clocks[name]

    def _store(self, b, array, index, value):
        b.store(value, b.gep(array, [ir.Constant(I32, 0), index]))

    def kernel_start(self, b, k: int) -> None:
        at = KERNEL_FIELDS * k
        self._store(b, self.starts, ir.Constant(I64, at + 2), b.sub(ir.Constant(I64, 0),
                                                                    self.cpu(b)))
        self._store(b, self.starts, ir.Constant(I64, at), self.now(b))

    def kernel_end(self, b, k: int) -> None:
        at = KERNEL_FIELDS * k
        self._store(b, self.starts, ir.Constant(I64, at + 1), self.now(b))
        slot = b.gep(self.starts, [ir.Constant(I32, 0), ir.Constant(I64, at + 2)])
        b.store(b.add(b.load(slot), self.cpu(b)), slot)       # -cpu0 + cpu1

    def chunk(self, b, k: int, chunk, thread, run) -> None:
        """Time `run()` as chunk `chunk` (an i64 value) of kernel k on `thread` (i64)."""
        base = b.mul(b.add(b.mul(ir.Constant(I64, k), ir.Constant(I64, self.chunks)), chunk),
                     ir.Constant(I64, CHUNK_FIELDS))
        cpu0 = self.cpu(b)
        self._store(b, self.chunk_times, base, self.now(b))
        run()
        self._store(b, self.chunk_times, b.add(base, ir.Constant(I64, 1)), self.now(b))
        self._store(b, self.chunk_times, b.add(base, ir.Constant(I64, 2)), thread)
        self._store(b, self.chunk_times, b.add(base, ir.Constant(I64, 3)),
                    b.sub(self.cpu(b), cpu0))

    def follower(self, b, k: int, thread, run) -> None:
        """Time `run()`, one block of a chained follower (see schedule/chaining.py), into
        kernel k's chunk numbered by the pool thread that runs it (0 off the pool):
        start is the first block's start, end - start the blocks' time added up."""
        chunk = b.select(b.icmp_signed("<", thread, ir.Constant(I64, 0)), ir.Constant(I64, 0),
                         thread)
        chunk = b.select(b.icmp_signed(">=", chunk, ir.Constant(I64, self.chunks)),
                         ir.Constant(I64, 0), chunk)
        base = b.mul(b.add(b.mul(ir.Constant(I64, k), ir.Constant(I64, self.chunks)), chunk),
                     ir.Constant(I64, CHUNK_FIELDS))
        slot = lambda d: b.gep(self.chunk_times, [ir.Constant(I32, 0),
                                                  b.add(base, ir.Constant(I64, d))])
        cpu0 = self.cpu(b)
        t0 = self.now(b)
        run()
        t1 = self.now(b)
        b.store(b.add(b.load(slot(3)), b.sub(self.cpu(b), cpu0)), slot(3))
        first = b.load(slot(0))
        fresh = b.icmp_signed("==", first, ir.Constant(I64, 0))
        start = b.select(fresh, t0, first)
        end = b.select(fresh, t0, b.load(slot(1)))
        b.store(start, slot(0))
        b.store(b.add(end, b.sub(t1, t0)), slot(1))
        b.store(thread, slot(2))
