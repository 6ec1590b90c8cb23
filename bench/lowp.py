"""Low-precision speed: `python -m bench.lowp`.

bfloat16 products (C = A @ B, bfloat16 in and out, float32 sums) against the same
shapes in float32, all in one process, timed alternately (median of `--repeat` calls
each): graphc bfloat16 (on the CPU's AMX tiles where it has them and the kernel grants
them, else on AVX512-BF16's pair products where it has those, else on the float32
kernels), graphc float32, numpy float32, and torch's
bfloat16 and float32 matmul where torch is installed (its threads set to graphc's).
Printed per shape: each time (ms), graphc's bfloat16 rate over its float32 rate (the
issue's target: at least 1.6x), and torch bfloat16 time / graphc bfloat16 time
(> 1: graphc faster). Shapes: a square 1024 product, BERT-base's projections (sequence
128 x 768 -> 768 and -> 3072) at batch 8, and a 2048 square product.

`--int8`: the int8 models instead (bench/int8.py: quantized ResNet-50-, MobileNetV2- and
BERT-base-sized models against graphc's float32 and onnxruntime's int8 run).

Training steps, `precision="bf16"` (products and convolutions in bfloat16, float32
master weights and Adam state) against the same step in float32: W5 (MLP 784-512-512-10,
batch 256) and W8 (digits-sized CNN, 8 and 16 channels, 28 x 28, batch 64) of
`python -m bench`, and a ResNet-stage-sized convolution layer (128 channels, 3 x 3,
28 x 28, batch 8: forward and both gradients). The issue's target: at least 1.3x.
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


def _conv_layer_step():
    """A ResNet-stage-sized 3 x 3 convolution (128 -> 128 channels, 28 x 28, batch 8)
    trained with Adam on a mean-square loss: (graph, loss, updates, feeds)."""
    rng = np.random.default_rng(1)
    g = gc.Graph("conv_layer")
    with g:
        x = gc.placeholder((8, 128, 28, 28), name="x")
        k = gc.variable((rng.standard_normal((128, 128, 3, 3)) * 0.03).astype(np.float32),
                        name="k")
        y = gc.relu(gc.nn.conv2d(x, k, padding=1))
        loss = gc.mean(y * y)
        updates = gc.optim.adam(loss, [k], lr=1e-3)
    return g, loss, updates, {"x": rng.standard_normal((8, 128, 28, 28)).astype(np.float32)}


def training(repeat: int) -> None:
    from .__main__ import cnn_graph, mlp_graph
    rng = np.random.default_rng(0)
    steps = {
        "W5 MLP Adam (batch 256)": lambda: mlp_graph() + ({
            "x": rng.standard_normal((256, 784)).astype(np.float32),
            "y": rng.integers(0, 10, 256).astype(np.int32)},),
        "W8 CNN Adam (batch 64)": lambda: cnn_graph() + ({
            "x": rng.standard_normal((64, 1, 28, 28)).astype(np.float32),
            "y": rng.integers(0, 10, 64).astype(np.int32)},),
        "conv 128ch 3x3 28x28 Adam (batch 8)": _conv_layer_step,
    }
    print(f"\n{'training step':40s} {'float32 ms':>10s} {'bf16 ms':>8s} {'bf16 speedup':>12s}")
    for name, make in steps.items():
        exes = {}
        for precision in ("float32", "bf16"):
            g, loss, updates, feeds = make()
            with g:
                exes[precision] = gc.compile({"loss": loss}, updates=updates,
                                             precision=precision)
        times = {p: [] for p in exes}
        for _ in range(3):
            for p, exe in exes.items():
                times[p].append(median_ms(lambda: exe(**feeds), max(1, repeat // 3), 2))
        t = {p: float(np.median(v)) for p, v in times.items()}
        print(f"{name:40s} {t['float32']:>10.2f} {t['bf16']:>8.2f} "
              f"{t['float32'] / t['bf16']:>11.2f}x")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeat", type=int, default=15)
    p.add_argument("--shapes", nargs="*", default=list(SHAPES), choices=list(SHAPES))
    p.add_argument("--no-training", action="store_true", help="the products only")
    p.add_argument("--int8", action="store_true",
                   help="int8 models against float32 and onnxruntime's int8 (bench.int8)")
    args = p.parse_args(argv)
    if args.int8:
        from . import int8
        return int8.main([])
    from graphc.backends.cpu.dot_plan import native_bf16
    from graphc_runtime.host import host_features
    bf16 = gc.ir.dtypes.to_numpy("bfloat16")
    rng = np.random.default_rng(0)
    form = native_bf16(host_features())
    threads = None
    print("bfloat16 products: " + {"amx": "AMX tiles", "dpbf16": "AVX512-BF16 pair products",
                                   None: "float32 kernels (no AMX or AVX512-BF16 here)"}[form])
    print(f"{'shape':36s} {'M x K x N':>16s} {'bf16 ms':>8s} {'f32 ms':>8s} {'numpy':>8s} "
          f"{'torch bf16':>10s} {'torch f32':>9s} {'bf16/f32 rate':>13s} "
          f"{'torch bf16 / ours':>17s}")
    for name in args.shapes:
        m, k, n = SHAPES[name]
        a32 = rng.standard_normal((m, k)).astype(np.float32)
        b32 = rng.standard_normal((k, n)).astype(np.float32)
        a16, b16 = a32.astype(bf16), b32.astype(bf16)
        low, wide = _graphc(m, k, n, "bfloat16"), _graphc(m, k, n, "float32")
        exact = a16.astype(np.float32) @ b16.astype(np.float32)
        error = np.abs(low(a16, b16).astype(np.float32) - exact).max() / np.abs(exact).max()
        if not error <= 2.0 ** -7:       # one rounding of the result (and sum order)
            raise SystemExit(f"{name}: the bfloat16 product is off by {error:.2g}")
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
    if not args.no_training:
        training(args.repeat)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
