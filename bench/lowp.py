"""Low-precision speed: `python -m bench.lowp`.

bfloat16 products (C = A @ B, bfloat16 in and out, float32 sums) against the same
shapes in float32, all in one process, timed alternately (median of `--repeat` calls
each): graphc bfloat16 (on the CPU's AMX tiles where it has them and the kernel grants
them; else on the float32 kernels), graphc float32, numpy float32, and torch's
bfloat16 and float32 matmul where torch is installed (its threads set to graphc's).
Printed per shape: each time (ms), graphc's bfloat16 rate over its float32 rate (the
issue's target: at least 1.6x), and torch bfloat16 time / graphc bfloat16 time
(> 1: graphc faster). Shapes: a square 1024 product, BERT-base's projections (sequence
128 x 768 -> 768 and -> 3072) at batch 8, and a 2048 square product.
"""
from __future__ import annotations

import argparse

import numpy as np

import graphc as gc

from .__main__ import median_ms

SHAPES = {                   # name: (M, K, N)
    "square 1024": (1024, 1024, 1024),
    "BERT-base qkv (8 x 128 tokens)": (1024, 768, 768),
    "BERT-base ffn up (8 x 128 tokens)": (1024, 768, 3072),
    "square 2048": (2048, 2048, 2048),
}


def _graphc(m, k, n, dtype):
    with gc.Graph():
        x = gc.placeholder((m, k), dtype, name="x")
        w = gc.placeholder((k, n), dtype, name="w")
        exe = gc.compile(x @ w)
    return exe


def _torch(threads):
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(threads)
    return torch


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeat", type=int, default=15)
    p.add_argument("--shapes", nargs="*", default=list(SHAPES), choices=list(SHAPES))
    args = p.parse_args(argv)
    from graphc.backends.cpu import amx
    from graphc_runtime.host import host_features
    bf16 = gc.ir.dtypes.to_numpy("bfloat16")
    rng = np.random.default_rng(0)
    tiles = amx.usable(host_features())
    threads = None
    print(f"bfloat16 products: {'AMX tiles' if tiles else 'float32 kernels (no AMX here)'}")
    print(f"{'shape':36s} {'M x K x N':>16s} {'bf16 ms':>8s} {'f32 ms':>8s} {'numpy':>8s} "
          f"{'torch bf16':>10s} {'torch f32':>9s} {'bf16/f32 rate':>13s} "
          f"{'torch bf16 / ours':>17s}")
    for name in args.shapes:
        m, k, n = SHAPES[name]
        a32 = rng.standard_normal((m, k)).astype(np.float32)
        b32 = rng.standard_normal((k, n)).astype(np.float32)
        a16, b16 = a32.astype(bf16), b32.astype(bf16)
        low, wide = _graphc(m, k, n, "bfloat16"), _graphc(m, k, n, "float32")
        threads = threads or low.stats["num_threads"]
        torch = _torch(threads)
        runs = {"bf16": lambda: low(a16, b16), "f32": lambda: wide(a32, b32),
                "numpy": lambda: a32 @ b32}
        if torch is not None:
            ta32, tb32 = torch.from_numpy(a32), torch.from_numpy(b32)
            ta16, tb16 = ta32.to(torch.bfloat16), tb32.to(torch.bfloat16)
            runs["torch bf16"] = lambda: ta16 @ tb16
            runs["torch f32"] = lambda: ta32 @ tb32
        times = {key: [] for key in runs}
        for _ in range(3):                 # alternate: each sees the same machine
            for key, fn in runs.items():
                times[key].append(median_ms(fn, max(1, args.repeat // 3)))
        t = {key: float(np.median(v)) for key, v in times.items()}
        cell = lambda key: f"{t[key]:.2f}" if key in t else "-"
        vs_torch = f"{t['torch bf16'] / t['bf16']:.2f}x" if "torch bf16" in t else "-"
        print(f"{name:36s} {f'{m}x{k}x{n}':>16s} {cell('bf16'):>8s} {cell('f32'):>8s} "
              f"{cell('numpy'):>8s} {cell('torch bf16'):>10s} {cell('torch f32'):>9s} "
              f"{t['f32'] / t['bf16']:>12.2f}x {vs_torch:>17s}")
    print(f"(graphc and torch on {threads} threads; rate ratio > 1: bfloat16 faster)")


if __name__ == "__main__":
    main()
