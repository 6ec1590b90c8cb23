"""Fused elementwise/reduction kernels vs numpy, measured in the same run.

Run: python bench/fusion.py [--n 4096] [--repeat 5]
Prints graphc's median time, numpy's, and the speed-up (numpy time / graphc time).
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import graphc as gc


def median_seconds(fn, repeat: int) -> float:
    fn()                                   # warm up
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def gelu_tanh_np(x, a, b):
    z = x * a + b
    return 0.5 * z * (1.0 + np.tanh(np.float32(0.7978845608) * (z + np.float32(0.044715) * z * z * z)))


def softmax_np(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def layer_norm_np(x, g, b, eps=1e-5):
    mu = x.mean(axis=1, keepdims=True)
    d = x - mu
    var = (d * d).mean(axis=1, keepdims=True)
    return d / np.sqrt(var + np.float32(eps)) * g + b


def workloads(n: int):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, n)).astype(np.float32)
    a = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    with gc.Graph("gelu"):
        px, pa, pb = (gc.placeholder(v.shape, name=k) for k, v in (("x", x), ("a", a), ("b", b)))
        gelu = gc.compile(gc.gelu(px * pa + pb, approximate=True))
    with gc.Graph("softmax"):
        px = gc.placeholder(x.shape, name="x")
        softmax = gc.compile(gc.softmax(px, axis=1))
    with gc.Graph("layer_norm"):
        px, pg, pb = (gc.placeholder(v.shape, name=k) for k, v in (("x", x), ("g", a), ("b", b)))
        layer_norm = gc.compile(gc.nn.layer_norm(px, pg, pb))
    return [
        ("W1 gelu_tanh(x*a+b)", lambda: gelu(x=x, a=a, b=b), lambda: gelu_tanh_np(x, a, b),
         gelu.stats["kernels"]),
        ("W2 softmax rows", lambda: softmax(x=x), lambda: softmax_np(x), softmax.stats["kernels"]),
        ("W3 layer norm", lambda: layer_norm(x=x, g=a, b=b), lambda: layer_norm_np(x, a, b),
         layer_norm.stats["kernels"]),
    ]


def check(graphc_fn, numpy_fn) -> float:
    got, want = graphc_fn(), numpy_fn()
    return float(np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-30))


def main(argv=None) -> list:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=4096)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    rows = []
    print(f"{'workload':24} {'kernels':>7} {'graphc ms':>10} {'numpy ms':>10} {'speed-up':>9} {'max rel err':>12}")
    for name, g_fn, np_fn, kernels in workloads(args.n):
        err = check(g_fn, np_fn)
        tg = median_seconds(g_fn, args.repeat)
        tn = median_seconds(np_fn, args.repeat)
        rows.append({"workload": name, "graphc_ms": tg * 1e3, "numpy_ms": tn * 1e3,
                     "speedup_vs_numpy": tn / tg, "kernels": kernels, "max_rel_err": err})
        print(f"{name:24} {kernels:>7} {tg * 1e3:>10.2f} {tn * 1e3:>10.2f} {tn / tg:>8.2f}x {err:>12.2e}")
    return rows


if __name__ == "__main__":
    main()
