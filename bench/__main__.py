"""graphc's benchmark suite: `python -m bench` (or `make bench`).

Each workload is timed for graphc and for every peer installed (numpy always; jax.jit and
torch eager when present), medians in the same run, and printed with the ratio
peer/graphc (> 1 means graphc is faster) and graphc's fraction of this machine's limit
(copy bandwidth and numpy's sgemm rate, measured in this run: the fraction compares the
best of the workload's runs with the best of the limit probe's runs just before and
after it, so that both see the same load on a shared machine).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import numpy as np

import graphc as gc

from . import peers


def median_ms(fn, repeat: int, warmup: int = 1) -> float:
    return sample_ms(fn, repeat, warmup)[0]


def sample_ms(fn, repeat: int, warmup: int = 1):
    """(median, best) milliseconds of `repeat` calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3, min(times) * 1e3


def interleaved_ms(fns: dict, repeat: int, settle_s: float = 0.005) -> dict:
    """{name: median milliseconds} of `repeat` rounds, each round calling every fn once
    in turn (a short pause between them lets another library's spinning threads go
    idle): on a shared machine all of them see the same load, so their ratios hold even
    when the absolute times drift."""
    for fn in fns.values():
        fn()
    times = {name: [] for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            time.sleep(settle_s)
            t = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t)
    return {name: statistics.median(ts) * 1e3 for name, ts in times.items()}


def bracketed_ms(fn, probe, repeat: int):
    """The workload's (median, best) and the best of a machine-limit probe timed right
    before and right after it, each run back to back like the workload (these machines
    are shared: a limit measured minutes apart can differ by 1.5x)."""
    before = sample_ms(probe, repeat)[1]
    time.sleep(SETTLE_S)
    median, best = sample_ms(fn, repeat)
    time.sleep(SETTLE_S)
    after = sample_ms(probe, repeat)[1]
    return median, best, min(before, after)


SETTLE_S = 0.3     # lets a BLAS's spinning worker threads go to sleep between the two


def machine_probes(elements: int):
    """Probes of this machine's limits: (copy probe, bytes it moves) and (sgemm probe,
    flops). The copy is the faster of numpy's and a graphc copy kernel over all cores,
    of as many float32 elements as the bandwidth workloads read (the same footprint, so
    the same share of the caches)."""
    src = np.ones(elements, np.float32)
    dst = np.empty_like(src)
    with gc.Graph("copy"):
        copy = gc.compile(gc.placeholder(src.shape, name="x"))     # one parallel copy kernel
    numpy_copy = lambda: np.copyto(dst, src)
    ours = lambda: copy(src)
    faster = ours if median_ms(ours, 3) <= median_ms(numpy_copy, 3) else numpy_copy
    a = np.random.default_rng(0).standard_normal((2048, 2048)).astype(np.float32)
    return (faster, 2 * src.nbytes), (lambda: a @ a, 2 * 2048 ** 3)


def machine_limits(probes, repeat: int) -> dict:
    """Copy bandwidth (bytes read + written per second) and numpy's sgemm rate."""
    (copy, nbytes), (gemm, flops) = probes
    return {"copy_GBps": nbytes / (median_ms(copy, repeat) / 1e3) / 1e9,
            "sgemm_GFLOPs": flops / (median_ms(gemm, repeat) / 1e3) / 1e9}


# -- graphc workloads -----------------------------------------------------------------

def mlp_graph(batch=256, sizes=(784, 512, 512, 10), seed=0):
    g = gc.Graph("mlp")
    with g:
        x = gc.placeholder((batch, sizes[0]), name="x")
        y = gc.placeholder((batch,), "int32", name="y")
        params, h = [], x
        for k, (i, o) in enumerate(zip(sizes, sizes[1:])):
            w = gc.variable(gc.nn.init.he_normal((i, o), seed + k), name=f"w{k}")
            b = gc.variable(np.zeros(o, np.float32), name=f"b{k}")
            params += [w, b]
            h = h @ w + b
            if k < len(sizes) - 2:
                h = gc.relu(h)
        loss = gc.nn.softmax_cross_entropy(h, y).mean()
        updates = gc.optim.adam(loss, params, lr=1e-3)
    return g, loss, updates


def cnn_graph(batch=64, seed=0):
    g = gc.Graph("cnn")
    init = gc.nn.init
    with g:
        x = gc.placeholder((batch, 1, 28, 28), name="x")
        y = gc.placeholder((batch,), "int32", name="y")
        k1 = gc.variable(init.he_normal((8, 1, 3, 3), seed), name="k1")
        c1 = gc.variable(np.zeros(8, np.float32), name="c1")
        k2 = gc.variable(init.he_normal((16, 8, 3, 3), seed + 1), name="k2")
        c2 = gc.variable(np.zeros(16, np.float32), name="c2")
        w = gc.variable(init.glorot_uniform((16 * 7 * 7, 10), seed + 2), name="w")
        b = gc.variable(np.zeros(10, np.float32), name="b")
        h = gc.nn.max_pool2d(gc.relu(gc.nn.conv2d(x, k1, c1, padding=1)), 2)
        h = gc.nn.max_pool2d(gc.relu(gc.nn.conv2d(h, k2, c2, padding=1)), 2)
        loss = gc.nn.softmax_cross_entropy(gc.nn.linear(h.reshape(batch, -1), w, b), y).mean()
        updates = gc.optim.adam(loss, [k1, c1, k2, c2, w, b], lr=1e-3)
    return g, loss, updates


def workloads(args, data):
    x, a, b = data["x"], data["a"], data["b"]
    out = []
    with gc.Graph("w1"):
        p = [gc.placeholder(v.shape, name=k) for k, v in (("x", x), ("a", a), ("b", b))]
        f = gc.compile(gc.gelu(p[0] * p[1] + p[2], approximate=True))
    out.append(("W1 gelu_tanh(x*a+b)", lambda: f(x, a, b), "bytes", 2 * x.nbytes))
    with gc.Graph("w2"):
        f2 = gc.compile(gc.softmax(gc.placeholder(x.shape, name="x"), axis=1))
    out.append(("W2 softmax rows", lambda: f2(x), "bytes", 2 * x.nbytes))
    with gc.Graph("w3"):
        p = [gc.placeholder(v.shape, name=k) for k, v in (("x", x), ("g", a), ("b", b))]
        f3 = gc.compile(gc.nn.layer_norm(*p))
    out.append(("W3 layer norm", lambda: f3(x, a, b), "bytes", 2 * x.nbytes))
    m1, m2, bias = data["m1"], data["m2"], data["bias"]
    with gc.Graph("w4"):
        p = [gc.placeholder(v.shape, name=k) for k, v in (("x", m1), ("w", m2), ("b", bias))]
        f4 = gc.compile(gc.gelu(p[0] @ p[1] + p[2], approximate=True))
    out.append(("W4 matmul+bias+gelu", lambda: f4(m1, m2, bias), "flops", 2 * 1024 ** 3))
    g, loss, upd = mlp_graph()
    saved = os.environ.get("GRAPHC_CACHE")
    os.environ["GRAPHC_CACHE"] = "0"         # W7 is a cold compile: no cached program
    try:
        with g:
            t0 = time.perf_counter()
            f5 = gc.compile({"loss": loss}, updates=upd)
            compile_s = time.perf_counter() - t0
    finally:
        if saved is None:
            del os.environ["GRAPHC_CACHE"]
        else:
            os.environ["GRAPHC_CACHE"] = saved
    xb, yb = data["mlp_x"], data["mlp_y"]
    out.append(("W5 MLP Adam step", lambda: f5(xb, yb), None, None))
    with gc.Graph("w6"):
        p = [gc.placeholder((4,), name=k) for k in "xy"]
        f6 = gc.compile(p[0] + p[1])
    s1, s2 = np.ones(4, np.float32), np.ones(4, np.float32)
    out.append(("W6 x+y (4,) per call", lambda: f6(s1, s2), "call", None))
    out.append(("W7 compile W5 (cold)", compile_s, "compile", None))
    g8, loss8, upd8 = cnn_graph()
    with g8:
        f8 = gc.compile({"loss": loss8}, updates=upd8)
    cx, cy = data["cnn_x"], data["cnn_y"]
    out.append(("W8 CNN step", lambda: f8(cx, cy), None, None))
    return out


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--json", default="bench/results.json")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    data = {"x": rng.standard_normal((args.n, args.n)).astype(np.float32),
            "a": rng.standard_normal(args.n).astype(np.float32),
            "b": rng.standard_normal(args.n).astype(np.float32),
            "m1": rng.standard_normal((1024, 1024)).astype(np.float32),
            "m2": rng.standard_normal((1024, 1024)).astype(np.float32) * 0.03,
            "bias": rng.standard_normal(1024).astype(np.float32),
            "mlp_x": rng.standard_normal((256, 784)).astype(np.float32),
            "mlp_y": rng.integers(0, 10, 256).astype(np.int32),
            "cnn_x": rng.standard_normal((64, 1, 28, 28)).astype(np.float32),
            "cnn_y": rng.integers(0, 10, 64).astype(np.int32)}
    probes = machine_probes(args.n * args.n)
    limits = machine_limits(probes, args.repeat)
    available = peers.available()
    versions = toolchain()
    print(f"machine: copy {limits['copy_GBps']:.1f} GB/s, numpy sgemm "
          f"{limits['sgemm_GFLOPs']:.0f} GFLOP/s; peers: {', '.join(available)}")
    print("toolchain: " + ", ".join(f"{k} {v}" for k, v in versions.items()))
    rows = []
    header = f"{'workload':26} {'graphc':>10}" + "".join(f" {p:>16}" for p in available) + \
        f" {'of limit':>9}"
    print(header)
    for name, fn, kind, amount in workloads(args, data):
        fraction_of = None
        if kind == "compile":
            g_ms = fn * 1e3
        elif kind == "call":
            g_ms = median_ms(lambda: [fn() for _ in range(1000)], args.repeat) / 1000
        elif kind in ("bytes", "flops"):
            probe, probe_amount = probes[0] if kind == "bytes" else probes[1]
            g_ms, g_best, p_best = bracketed_ms(fn, probe, args.repeat)
            # best against best, measured around the workload: the machine's limit vs us
            fraction_of = (amount / g_best) / (probe_amount / p_best)
        else:
            g_ms = median_ms(fn, args.repeat)
        row = {"workload": name, "graphc_ms": g_ms, "peers": {}}
        cells = []
        for peer in available:
            peer_fn = peers.workload(peer, name, data)
            if peer_fn is None:
                cells.append(f"{'-':>16}")
                continue
            if kind == "compile":
                p_ms = peer_fn() * 1e3
            elif kind == "call":
                p_ms = median_ms(lambda: [peer_fn() for _ in range(1000)], args.repeat) / 1000
            else:
                p_ms = median_ms(peer_fn, args.repeat)
            row["peers"][peer] = {"ms": p_ms, "ratio": p_ms / g_ms}
            cells.append(f"{_fmt(p_ms, kind):>9} {p_ms / g_ms:5.2f}x")
        fraction = ""
        if kind == "bytes":
            row["fraction_of_bandwidth"] = fraction_of
            fraction = f"{fraction_of:.0%} bw"
        elif kind == "flops":
            row["fraction_of_sgemm"] = fraction_of
            fraction = f"{fraction_of:.0%} gemm"
        print(f"{name:26} {_fmt(g_ms, kind):>10}" + "".join(f" {c}" for c in cells) +
              f" {fraction:>9}")
        rows.append(row)
    result = {"limits": limits, "rows": rows, "threads": os.cpu_count(), "versions": versions}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
        print(f"(ratios are peer time / graphc time; written to {args.json})")
    return result


def toolchain() -> dict:
    """Versions that decide graphc's speed: llvmlite and its LLVM, numpy."""
    from graphc.backends.llvm import features as llvm_features
    return dict(llvm_features.versions(), numpy=np.__version__)


def _fmt(ms: float, kind) -> str:
    if kind == "call":
        return f"{ms * 1e3:.2f}us"
    if kind == "compile":
        return f"{ms / 1e3:.2f}s"
    return f"{ms:.2f}ms"


if __name__ == "__main__":
    main()
