"""graphc's own thread pool, built once per process as native code.

A program hands the pool a *sequence of jobs* (`graphc_pool_run(jobs, count)`: records
{body, arg, n}; `body(arg, c)` runs chunk c of a job): the run of kernels between two
control-flow regions, each kernel a job, a split kernel's job in several chunks. The
calling thread and the workers claim chunks from one atomic counter; whoever finishes a
job's last chunk publishes the next job. So no thread waits for one the OS has not
scheduled unless that thread holds a claimed chunk: a busy machine slows graphc down by
the CPU time it loses, not by every kernel's slowest thread (OpenMP's team, used before,
waited at every kernel's end for each team thread, and on a busy machine that thread
was often waiting for a CPU). A one-chunk job is left to the caller for PATIENCE_US,
then a worker takes it (the caller may be the one waiting for a CPU). Which thread runs
a chunk does not change what it computes: results are bitwise the same for any thread
count and any schedule.

Workers spin for a while when they find nothing to claim (kernels follow each other
within microseconds), then sleep on a futex, woken for a job with several chunks; a
caller waiting for chunks in flight sleeps too, so that its CPU goes idle and the OS can
run a thread that waits for one. Workers are pinned to the CPUs the process may use
other than the caller's (re-placed when the caller moves; GRAPHC_POOL_PIN=0 turns it
off): left to itself the OS tends to put a worker woken by the caller on the caller's
CPU, and on a busy machine the two then share one CPU. A caller that finds the pool busy
(another Python thread running a program) runs its jobs itself. Workers are started by
the first call (and again in a forked child, where they are gone): `usable_cpus() - 1`
of them, or GRAPHC_POOL_THREADS - 1. GRAPHC_POOL=0 turns the pool off (kernels then
start threads per call, as they do where the pool cannot be built: not Linux, or not
x86-64 / AArch64).

The one-word job counter: generation (24 bits) | job (16) | chunks taken from the front
(12) | from the back (12). The caller takes chunks from the front, workers from the
back, so on a quiet machine each thread keeps the same part of consecutive kernels in
its cache, as a static split would. A thread reads the word, then the job's record, and
claims with a compare-and-swap of the word it read: that succeeds only while the job
still has that chunk, so no thread runs a chunk of a job it did not read.
"""
from __future__ import annotations

import ctypes
import os
import platform
import sys
import threading
import time

from . import cache_store
from .cpus import usable_cpus

SYMBOLS = ("graphc_pool_run", "graphc_pool_thread")   # pointers native code calls through
MAX_JOBS = 1 << 15            # jobs of one call (a job word counts 16 bits of jobs and
MAX_CHUNKS = (1 << 12) - 1    # 12 bits of chunks each way; more: the caller runs them alone;
# the word's layout is in _pool_ir.py)
MAX_WORKERS = 63
MAX_CPUS = 1024               # CPU numbers the pool pins workers to (cpu_set_t's size)
WORKER_SPINS = 1 << 14        # pause-and-look rounds before a worker sleeps (~15 ns each)
CALLER_SPINS = 1 << 10        # rounds a caller spins for chunks in flight before it sleeps
BUSY_SPINS = 64               # a worker's and a caller's rounds while the machine is busy:
# while other processes used over BUSY_OTHERS CPUs of those this one may use, over the
# last LOOK_S seconds (/proc/stat's per-CPU time less this process's). Spun time counts
# against the pool's share of the CPUs, and a thread that slept gets a CPU first when
# woken: bench.contention's DistilBERT-width encoder took 32 ms with one busy process
# beside it, 29-31 ms with 64 rounds. Quiet, so few rounds cost W5 and W8 7-10% and the
# GPT-style model 60% (wake-ups), hence the switch. (The calling thread's own wait for
# a CPU is no signal: with few rounds it sleeps and, woken, preempts the busy process.)
BUSY_OTHERS = 0.4
LOOK_S = 0.05
LONG_CALL_S = 0.005           # only calls this long switch: a model of short kernels
# (GPT-style, 0.7 ms a call, ~14 us a kernel) waits microseconds for its next job, and
# sleeping there cost it 30% under load (0.62-0.79 -> 0.87-0.92 ms)
PATIENCE_US = 30              # a one-chunk job is the caller's for this long, then a
# worker takes it (the caller may be waiting for a CPU)
FUTEX = {"x86_64": 202, "aarch64": 98}
FUTEX_WAIT_PRIVATE, FUTEX_WAKE_PRIVATE = 128, 129

_lock = threading.Lock()
_pool = None            # the built pool, or False where it cannot be built or is off


class Pool:
    """The native pool: its engine (kept alive) and its functions' addresses."""

    def __init__(self, workers: int):
        from .host import llvm
        b = llvm()
        self.engine = b.create_mcjit_compiler(b.parse_assembly(""), _target_machine())
        self.engine.add_object_file(b.ObjectFileRef.from_data(_object_code()))
        self.engine.finalize_object()
        self.run_address = self.engine.get_function_address("graphc_pool_run")
        self.thread_address = self.engine.get_function_address("graphc_pool_thread")
        self.workers = workers
        self._global("wanted").value = workers
        self._pin(os.environ.get("GRAPHC_POOL_PIN", "1") != "0")
        self._global("patience", ctypes.c_int64).value = int(PATIENCE_US * self._ticks_per_us())
        for name in ("worker_spins", "caller_spins", "patience"):  # GRAPHC_POOL_<NAME>
            value = os.environ.get(f"GRAPHC_POOL_{name.upper()}", "")
            if value.isdigit():
                self._global(name, ctypes.c_int64).value = int(value)
        self._worker_spins = self._global("worker_spins", ctypes.c_int64)
        self._caller_spins = self._global("caller_spins", ctypes.c_int64)
        busy = os.environ.get("GRAPHC_POOL_BUSY_SPINS", "")
        busy = int(busy) if busy.isdigit() else BUSY_SPINS
        self._spins = {False: (self._worker_spins.value, self._caller_spins.value),
                       True: (busy, min(busy, self._caller_spins.value))}
        self._next_look, self._seen, self._call_s = 0.0, None, 0.0
        self._stat = "/proc/stat"
        self._cpus = {f"cpu{c}" for c in (os.sched_getaffinity(0)
                                         if hasattr(os, "sched_getaffinity") else ())}

    def watch(self, start: float, now: float) -> None:
        """Called after each run (time.monotonic() at its start and end): every LOOK_S
        seconds, whether other processes keep the CPUs this one may use busy, and how
        long calls take, pick how long the pool's threads spin."""
        self._call_s = now - start
        if now >= self._next_look:
            self._look(now)

    def _look(self, now: float) -> None:
        self._next_look = now + LOOK_S
        used = _cpu_seconds(self._cpus, self._stat)
        if used is None:
            self._next_look = float("inf")                   # no /proc/stat: stay as set
            return
        seen, self._seen = self._seen, (now, used, time.process_time())
        if seen is None or now - seen[0] > 10 * LOOK_S:
            return                                  # idle meanwhile: a new baseline
        others = (used - seen[1]) - (self._seen[2] - seen[2])
        busy = others > BUSY_OTHERS * (now - seen[0]) and self._call_s >= LONG_CALL_S
        self._worker_spins.value, self._caller_spins.value = self._spins[busy]

    def _global(self, name: str, ctype=ctypes.c_int32, index: int = 0):
        """The native global pool_<name> (element `index` of an array) as a ctypes value."""
        address = self.engine.get_global_value_address(f"pool_{name}")
        return ctype.from_address(address + index * ctypes.sizeof(ctype))

    def _ticks_per_us(self) -> float:
        """The cycle counter's rate, measured over a millisecond."""
        ticks = ctypes.CFUNCTYPE(ctypes.c_int64)(
            self.engine.get_function_address("graphc_pool_ticks"))
        t0, k0 = time.perf_counter(), ticks()
        while time.perf_counter() - t0 < 1e-3:
            pass
        return max(ticks() - k0, 1) / ((time.perf_counter() - t0) * 1e6)

    def _pin(self, on: bool) -> None:
        """Let the pool keep its workers off the caller's CPU (see pool_place): the
        CPUs this process may run on, in order."""
        allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
        allowed = [c for c in allowed if c < MAX_CPUS]
        for k, cpu in enumerate(allowed):
            self._global("cpus", index=k).value = cpu
        self._global("ncpus").value = len(allowed)
        self._global("pin").value = int(on and len(allowed) > 1)

    def started(self) -> int:
        """Workers running now (started by the first call)."""
        return self._global("started").value

    def reset_after_fork(self) -> None:
        """In a forked child: the workers are gone; the next call starts new ones."""
        self._seen = None
        for name in ("busy", "sleepers", "wake", "started", "waiting", "finish"):
            self._global(name).value = 0
        for name in ("word", "done", "count"):
            self._global(name, ctypes.c_int64).value = 0
        self._global("caller_cpu").value = -1


def _cpu_seconds(cpus: set, path: str = "/proc/stat") -> float | None:
    """Seconds the CPUs named in `cpus` ("cpu0", ...) have spent busy since boot
    (/proc/stat), or None where it cannot be read."""
    try:
        with open(path, "rb") as f:
            lines = f.read().decode().splitlines()
        busy = 0
        for line in lines:
            name, _, rest = line.partition(" ")
            if name in cpus:
                v = [int(x) for x in rest.split()]
                busy += v[0] + v[1] + v[2] + sum(v[5:8])   # user nice system irq softirq steal
        return busy / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def enabled() -> bool:
    return os.environ.get("GRAPHC_POOL", "1") != "0" and sys.platform.startswith("linux") \
        and platform.machine() in FUTEX


def pool():
    """The process's pool (built on first use), or None where it is off or unavailable."""
    global _pool
    with _lock:
        if _pool is None:
            _pool = Pool(_worker_count()) if enabled() else False
        return _pool or None


def _worker_count() -> int:
    threads = os.environ.get("GRAPHC_POOL_THREADS")
    total = int(threads) if threads and threads.isdigit() and int(threads) > 0 \
        else usable_cpus()
    return max(0, min(MAX_WORKERS, total - 1))


def bind(engine, owner) -> bool:
    """Point a loaded program's pool pointers at the pool; True when its split kernels
    will run there. `owner` (the program) keeps the pool's engine alive."""
    addresses = [engine.get_global_value_address(name) for name in SYMBOLS]
    if not all(addresses):
        return False                     # code compiled before the pool existed
    p = pool()
    if p is None:
        return False
    for address, value in zip(addresses, (p.run_address, p.thread_address)):
        ctypes.c_void_p.from_address(address).value = value
    owner._pool = p
    return True


def _after_fork_in_child() -> None:
    if _pool:
        _pool.reset_after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _target_machine():
    from .host import host_target_machine
    return host_target_machine(2)


_CACHE_KIND = cache_store.Kind(b"GRAPHC-POOL-CACHE-1\n", ".gcn", compress=True)


def _object_code() -> bytes:
    """The pool's object code for this machine: built from _pool_ir (about 25 ms), or
    read from graphc's cache folder (runtime/cache_store.py), keyed by the sources (the
    pool's limits and spins are in them), the host and LLVM."""
    from .host import llvm, llvm_identity
    b = llvm()
    name = cache_store.entry_name(_CACHE_KIND, cache_store.source_fingerprint(),
                                  *llvm_identity())
    code = cache_store.load(_CACHE_KIND, name)
    if code is None:
        module = b.parse_assembly(str(_module(platform.machine())))
        module.verify()
        code = bytes(_target_machine().emit_object(module))
        cache_store.store(_CACHE_KIND, name, code)
    return code


def _module(machine: str):
    """The pool as an LLVM module (llvmlite.ir) for `machine` (x86_64 or aarch64)."""
    from ._pool_ir import build
    return build(FUTEX[machine], machine, {"jobs": MAX_JOBS, "chunks": MAX_CHUNKS,
                                           "workers": MAX_WORKERS, "cpus": MAX_CPUS},
                 FUTEX_WAIT_PRIVATE, FUTEX_WAKE_PRIVATE,
                 {"worker": WORKER_SPINS, "caller": CALLER_SPINS, "patience": 0})
