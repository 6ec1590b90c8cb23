"""Kernel profiles: times from a profiling build's native timestamps, bytes and flops
from the manifest, rates against this machine's limits, a table and a Chrome trace.

The profiling build is a second compilation of the same program with timestamps around
every kernel (and every chunk of a kernel split across threads); the normal build pays
nothing. It runs on its own copy of the variables, so profiling a training step leaves
the model's variables as they were.
"""
from __future__ import annotations

import functools
import json
import time

import numpy as np

from . import dims
from .errors import GraphcError


@functools.cache
def machine_limits() -> dict:
    """This machine's copy bandwidth (bytes read + written per second, numpy copy of
    64 MiB) and numpy's float32 GEMM rate (1024^3), best of a few runs."""
    src = np.ones(1 << 24, np.float32)
    dst = np.empty_like(src)
    copy = []
    for _ in range(5):
        t = time.perf_counter()
        np.copyto(dst, src)
        copy.append(time.perf_counter() - t)
    a = np.ones((1024, 1024), np.float32)
    gemm = []
    for _ in range(3):
        t = time.perf_counter()
        a @ a
        gemm.append(time.perf_counter() - t)
    return {"copy_GBps": 2 * src.nbytes / min(copy) / 1e9,
            "gemm_GFLOPs": 2 * 1024 ** 3 / min(gemm) / 1e9}


class Profile:
    """Per-kernel times of `calls` profiled calls (`rows`, sorted by total time), the
    Chrome trace events, and the normal and profiled wall time per call."""

    def __init__(self, rows: list, events: list, calls: int, normal_ms: float,
                 profiled_ms: float, limits: dict):
        self.rows, self.events, self.calls = rows, events, calls
        self.normal_ms, self.profiled_ms, self.limits = normal_ms, profiled_ms, limits

    @property
    def overhead(self) -> float:
        """Profiled wall time per call over the normal build's, minus one."""
        return self.profiled_ms / self.normal_ms - 1 if self.normal_ms else 0.0

    def table(self) -> str:
        """The kernels sorted by time: kernel, kind, ms per call (wall), of which running
        and waiting for a CPU, %, rates while running, fused ops."""
        lines = [f"{'kernel':24} {'kind':10} {'ms':>9} {'run ms':>9} {'wait ms':>9} "
                 f"{'%':>6} {'GB/s':>8} {'GFLOP/s':>8}  fused ops"]
        for r in self.rows:
            gflops = f"{r['gflops']:8.1f}" if r["flops"] else f"{'-':>8}"
            ops = ", ".join(r["ops"])
            sources = _sources_text(r.get("sources", []))
            lines.append(f"{r['kernel'][:24]:24} {r['kind'][:10]:10} {r['ms']:9.3f} "
                         f"{r['running_ms']:9.3f} {r['waiting_ms']:9.3f} "
                         f"{r['percent']:5.1f}% {r['gbps']:8.2f} {gflops}  "
                         f"{ops[:60] + ('...' if len(ops) > 60 else '')}"
                         f"{'  <- ' + sources if sources else ''}")
        total = sum(r["ms"] for r in self.rows)
        waiting = sum(r["waiting_ms"] for r in self.rows)
        lines.append(f"{len(self.rows)} kernels, {total:.3f} ms of kernels per call, "
                     f"{waiting:.3f} ms of it waiting for a CPU (the machine is busy where "
                     f"this is large; rates are per running time); a call takes "
                     f"{self.normal_ms:.3f} ms (profiling build {self.profiled_ms:.3f} "
                     f"ms); limits: copy {self.limits['copy_GBps']:.1f} GB/s, GEMM "
                     f"{self.limits['gemm_GFLOPs']:.0f} GFLOP/s")
        return "\n".join(lines)

    def trace(self) -> dict:
        """Chrome trace-event JSON (opens in Perfetto and chrome://tracing)."""
        return {"traceEvents": self.events, "displayTimeUnit": "ms"}

    def save_trace(self, path: str) -> None:
        with open(path, "w") as f:
            json.dump(self.trace(), f)

    def __repr__(self) -> str:
        return self.table()


def _sources_text(sources: list) -> str:
    """Where a kernel's nodes came from (an imported model's node names), shortened."""
    if not sources:
        return ""
    text = ", ".join(sources[:2]) + (f" (+{len(sources) - 2} more)" if len(sources) > 2 else "")
    return text if len(text) <= 100 else text[:97] + "..."


VIEW_OPS = {"reshape", "transpose", "broadcast_in_dim", "slice", "constant", "convert",
            "copy"}


def compact_ops(ops: list) -> list:
    """The distinct ops a kernel computes, views left out unless it has nothing else."""
    seen = list(dict.fromkeys(ops))
    work = [op for op in seen if op not in VIEW_OPS]
    return work or seen


def profile_program(normal, profile_object: bytes, manifest: dict, repeat: int, args: tuple,
                    kwargs: dict) -> Profile:
    """Load `profile_object` (the profiling build of `normal`'s program) with a copy of
    `normal`'s current variables and profile both (see run_profile)."""
    from .cpu import CpuProgram
    kernels = [k for k in manifest["kernels"] if k.get("kind") != "collective"]
    if manifest.get("collectives"):
        raise GraphcError("profile: programs with collectives are not supported yet")
    arena = normal.arena_size if normal.arena_size is not None else normal.arena_bytes
    profiled = CpuProgram(profile_object, normal.signature, arena,
                          {n: v.copy() for n, v in normal.variables.items()},
                          normal.constants)
    saved = {n: v.copy() for n, v in normal.variables.items()}
    try:
        return run_profile(normal, profiled, kernels, repeat, args, kwargs)
    finally:
        for n, v in saved.items():                 # the normal runs were real steps
            normal.variables[n] = v


def _track(thread: int, chunk: int) -> int:
    """A chunk's trace track: 1 + its pool thread's number, or 1 + the chunk's number
    where it ran on a thread started for the call (thread -1)."""
    return 1 + (thread if thread >= 0 else chunk)


def run_profile(normal, profiled, kernels: list, repeat: int, args: tuple, kwargs: dict,
                limits: dict | None = None) -> Profile:
    """Call the `profiled` build (a CpuProgram with timestamps) `repeat` times and the
    `normal` build as often, and build the report from `kernels` (the manifest's kernel
    entries: name, kind, ops, read, written, flops)."""
    if not isinstance(repeat, int) or repeat < 1:
        raise GraphcError(f"profile: repeat must be a positive int, got {repeat!r}")
    stamps = profiled.profile_timestamps()
    if stamps is None:
        raise GraphcError("profile: this native code is not a profiling build")
    if stamps[0].shape[0] != len(kernels):
        raise GraphcError(f"profile: the profiling build has {stamps[0].shape[0]} kernels, "
                          f"the manifest describes {len(kernels)}")
    limits = limits or machine_limits()
    normal.run(args, kwargs)                         # warm both (page faults, caches)
    profiled.run(args, kwargs)
    env = profiled.last_sizes          # a symbolic program's figures at this call's sizes
    kernels = [{k: dims.evaluate(v, env) if k in ("read", "written", "flops") else v
                for k, v in meta.items()} for meta in kernels]
    t = time.perf_counter()
    for _ in range(repeat):
        normal.run(args, kwargs)
    normal_ms = (time.perf_counter() - t) / repeat * 1e3
    totals = np.zeros(len(kernels))
    running = np.zeros(len(kernels))       # CPU time on the kernel's critical thread
    events, origin, threads = [], None, set()
    wall = 0.0
    for call in range(repeat):
        kern, chunks = profiled.profile_timestamps()
        kern[...] = 0
        chunks[...] = 0
        t = time.perf_counter()
        profiled.run(args, kwargs)
        wall += time.perf_counter() - t
        kern, chunks = profiled.profile_timestamps()
        if origin is None:
            origin = int(kern[kern > 0].min()) if (kern > 0).any() else 0
        for k, meta in enumerate(kernels):
            start, end, kernel_cpu = int(kern[k, 0]), int(kern[k, 1]), int(kern[k, 2])
            args_ = {"kind": meta["kind"], "ops": ", ".join(compact_ops(meta["ops"])),
                     "bytes": meta["read"] + meta["written"], "call": call}
            ran = sorted(((c, int(c0), int(c1), int(thread), int(cpu))
                          for c, (c0, c1, thread, cpu) in enumerate(chunks[k])
                          if c0 and c1 >= c0), key=lambda r: r[1])
            # running: the CPU time of its longest-running thread, all its chunks (what
            # the kernel takes on CPUs of its own); the rest of its wall time it waited
            per_thread: dict = {}
            for c, _, _, thread, cpu in ran:
                tid = _track(thread, c)
                per_thread[tid] = per_thread.get(tid, 0) + max(cpu, 0)
            ran_ns = max(per_thread.values(), default=kernel_cpu)
            if start == 0 or end < start:
                # a follower run in the previous kernel's chunks (chained): its longest
                # chunk is its time, taken out of the previous kernel's
                if not ran or k == 0:
                    continue
                longest = max(c1 - c0 for _, c0, c1, _, _ in ran)
                totals[k] += longest
                totals[k - 1] -= longest
                ran_ns = min(ran_ns, longest)
                running[k] += ran_ns
                running[k - 1] = max(running[k - 1] - ran_ns, 0)
                args_["chained"] = True
            else:
                totals[k] += end - start
                ran_ns = min(max(ran_ns, 0), end - start)
                running[k] += ran_ns
                events.append({"name": meta["name"], "cat": meta["kind"], "ph": "X",
                               "pid": 1, "tid": 0, "ts": (start - origin) / 1e3,
                               "dur": (end - start) / 1e3,
                               "args": dict(args_, running_ms=ran_ns / 1e6,
                                            waiting_ms=(end - start - ran_ns) / 1e6)})
            free = {}                 # when each thread was done with its last chunk
            for c, c0, c1, thread, cpu in ran:
                tid = _track(thread, c)
                threads.add(tid)
                since = free.get(tid, start)
                free[tid] = c1
                if since and c0 > since:          # the thread got to its chunk late
                    events.append({"name": f"waiting for a CPU: {meta['name']}",
                                   "cat": "waiting", "ph": "X", "pid": 1, "tid": tid,
                                   "ts": (since - origin) / 1e3, "dur": (c0 - since) / 1e3,
                                   "args": dict(args_, chunk=c)})
                cpu = min(max(cpu, 0), c1 - c0)
                events.append({"name": f"{meta['name']} [chunk {c}]", "cat": meta["kind"],
                               "ph": "X", "pid": 1, "tid": tid, "ts": (c0 - origin) / 1e3,
                               "dur": (c1 - c0) / 1e3,
                               "args": dict(args_, chunk=c, running_ms=cpu / 1e6,
                                            waiting_ms=(c1 - c0 - cpu) / 1e6)})
    names = [{"name": "thread_name", "ph": "M", "pid": 1, "tid": 0,
              "args": {"name": "step (kernels in order)"}}] + \
        [{"name": "thread_name", "ph": "M", "pid": 1, "tid": t,
          "args": {"name": f"pool thread {t - 1}"}} for t in sorted(threads)]
    total = totals.sum() or 1.0
    rows = []
    for k, meta in enumerate(kernels):
        ms = totals[k] / repeat / 1e6
        run_ms = min(running[k] / repeat / 1e6, ms)
        moved = meta["read"] + meta["written"]
        seconds = (run_ms if run_ms > 0 else ms) / 1e3
        gbps = moved / seconds / 1e9 if seconds > 0 else 0.0
        gflops = meta.get("flops", 0) / seconds / 1e9 if seconds > 0 else 0.0
        rows.append({"kernel": meta["name"], "kind": meta["kind"],
                     "ops": compact_ops(meta["ops"]), "sources": meta.get("sources", []),
                     "ms": ms, "running_ms": run_ms, "waiting_ms": max(ms - run_ms, 0.0),
                     "percent": 100 * totals[k] / total, "bytes": moved,
                     "flops": meta.get("flops", 0), "gbps": gbps, "gflops": gflops,
                     "fraction_of_bandwidth": gbps / limits["copy_GBps"],
                     "fraction_of_gemm": gflops / limits["gemm_GFLOPs"] if meta.get("flops")
                     else 0.0})
    rows.sort(key=lambda r: -r["ms"])
    return Profile(rows, names + events, repeat, normal_ms, wall / repeat * 1e3, limits)


def profile_cuda(program, manifest: dict, repeat: int, args: tuple, kwargs: dict) -> Profile:
    """The same report for a CUDA program, timed with CUDA events around each launch
    (one track per launch order; no thread chunks on a GPU)."""
    if not isinstance(repeat, int) or repeat < 1:
        raise GraphcError(f"profile: repeat must be a positive int, got {repeat!r}")
    meta = {k["name"]: k for k in manifest["kernels"]}
    program.run(args, kwargs)
    t = time.perf_counter()
    for _ in range(repeat):
        program.run(args, kwargs)
    normal_ms = (time.perf_counter() - t) / repeat * 1e3
    totals, events, clock, wall = {}, [], 0.0, 0.0
    for call in range(repeat):
        timings = []
        t = time.perf_counter()
        program.run(args, kwargs, timings=timings)
        wall += time.perf_counter() - t
        for name, ms in timings:
            totals[name] = totals.get(name, 0.0) + ms
            events.append({"name": name, "cat": meta.get(name, {}).get("kind", "kernel"),
                           "ph": "X", "pid": 1, "tid": 0, "ts": clock * 1e3, "dur": ms * 1e3,
                           "args": {"call": call}})
            clock += ms
    total = sum(totals.values()) or 1.0
    rows = []
    for name, ms_total in sorted(totals.items(), key=lambda kv: -kv[1]):
        m = meta.get(name, {"kind": "kernel", "ops": [], "read": 0, "written": 0, "flops": 0})
        ms = ms_total / repeat
        moved = m["read"] + m["written"]
        rows.append({"kernel": name, "kind": m["kind"], "ops": compact_ops(m["ops"]) if
                     m["ops"] else [], "ms": ms, "running_ms": ms, "waiting_ms": 0.0,
                     "percent": 100 * ms_total / total,
                     "bytes": moved, "flops": m.get("flops", 0),
                     "gbps": moved / (ms / 1e3) / 1e9 if ms > 0 else 0.0,
                     "gflops": m.get("flops", 0) / (ms / 1e3) / 1e9 if ms > 0 else 0.0})
    return Profile(rows, events, repeat, normal_ms, wall / repeat * 1e3,
                   {"copy_GBps": float("nan"), "gemm_GFLOPs": float("nan")})
