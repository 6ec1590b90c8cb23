"""The profiler's overhead: `python -m bench.profiler`.

For the MLP and CNN training steps (W5, W8) and W1, the normal build and the profiling
build (timestamps around every kernel and thread chunk) are timed alternately in the same
run, medians of many calls; the ratio profiled / normal is the overhead a profile adds
(the issue's target: at most 1.05). Kernel time is also compared with the call's wall time.
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import graphc as gc
from graphc_runtime.cpu import CpuProgram

from .__main__ import cnn_graph, mlp_graph


def builds(exe):
    """(normal, profiling) native programs of one executable, each on its own variables."""
    normal = exe._native
    code = exe._profile_object()
    copy = lambda: {n: v.copy() for n, v in normal.variables.items()}
    prof = CpuProgram(code, normal.signature, normal.arena_bytes, copy(), normal.constants)
    return normal, prof


def per_call_ms(program, feeds, calls):
    times = []
    for _ in range(calls):
        t = time.perf_counter()
        program.run((), feeds)
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def main(argv=None) -> list:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    work = []
    g, loss, upd = mlp_graph()
    with g:
        work.append(("W5 MLP Adam step", gc.compile({"loss": loss}, updates=upd),
                     {"x": rng.standard_normal((256, 784)).astype(np.float32),
                      "y": rng.integers(0, 10, 256).astype(np.int32)}))
    g, loss, upd = cnn_graph()
    with g:
        work.append(("W8 CNN step", gc.compile({"loss": loss}, updates=upd),
                     {"x": rng.standard_normal((64, 1, 28, 28)).astype(np.float32),
                      "y": rng.integers(0, 10, 64).astype(np.int32)}))
    n = 2048
    with gc.Graph("w1"):
        p = [gc.placeholder(s, name=k) for k, s in (("x", (n, n)), ("a", (n,)), ("b", (n,)))]
        work.append(("W1 gelu (2048^2)", gc.compile(gc.gelu(p[0] * p[1] + p[2],
                                                            approximate=True)),
                     {"x": rng.standard_normal((n, n)).astype(np.float32),
                      "a": rng.standard_normal(n).astype(np.float32),
                      "b": rng.standard_normal(n).astype(np.float32)}))
    rows = []
    print(f"{'workload':20} {'normal ms':>10} {'profiled ms':>12} {'ratio':>7}")
    for name, exe, feeds in work:
        normal, prof = builds(exe)
        calls = max(10, args.calls // (10 if name.startswith("W1") else 1))
        per_call_ms(normal, feeds, 5), per_call_ms(prof, feeds, 5)
        a, b = [], []
        for _ in range(args.rounds):               # alternate: both see the same load
            a.append(per_call_ms(normal, feeds, calls))
            b.append(per_call_ms(prof, feeds, calls))
        ms_n, ms_p = min(a), min(b)
        rows.append({"workload": name, "normal_ms": ms_n, "profiled_ms": ms_p,
                     "ratio": ms_p / ms_n})
        print(f"{name:20} {ms_n:10.3f} {ms_p:12.3f} {ms_p / ms_n:7.3f}")
    return rows


if __name__ == "__main__":
    main()
