"""Data-parallel MLP step (784-512-512-10, Adam, global batch 256) on N ranks: plain data
parallelism and with the optimizer state sharded (ZeRO 1 and 2).

Run: mpiexec --allow-run-as-root -n 2 python -m bench.distributed   (and with -n 1)
Prints, on rank 0, each variant's median step time, its optimizer state per rank as a
fraction of plain data parallelism's, and the bytes all-reduced per step.
"""
from __future__ import annotations

import statistics
import time

import numpy as np

import graphc as gc


def build(batch: int, zero: int):
    dp = gc.distributed.DataParallel(zero=zero)
    with gc.Graph("dp_mlp"):
        x = gc.placeholder((batch, 784), name="x")
        y = gc.placeholder((batch,), "int32", name="y")
        params, h = [], x
        sizes = (784, 512, 512, 10)
        for k, (i, o) in enumerate(zip(sizes, sizes[1:])):
            w = gc.variable(gc.nn.init.he_normal((i, o), k), name=f"w{k}")
            b = gc.variable(np.zeros(o, np.float32), name=f"b{k}")
            params += [w, b]
            h = h @ w + b
            if k < 2:
                h = gc.relu(h)
        loss = gc.nn.softmax_cross_entropy(h, y).mean()
        updates = dp.optimize(gc.optim.adam, loss, params)
        step = gc.compile({"loss": loss}, updates=updates, distributed=dp)
    return step, sum(int(np.prod(p.shape)) * 4 for p in params)


def main():
    rank, size = gc.distributed.rank(), gc.distributed.size()
    batch = 256 // size
    rng = np.random.default_rng(rank)
    xb = rng.standard_normal((batch, 784)).astype(np.float32)
    yb = rng.integers(0, 10, batch).astype(np.int32)
    results = {}
    for zero in (0, 1, 2):
        step, param_bytes = build(batch, zero)
        for _ in range(5):
            step(xb, yb)
        times = []
        for _ in range(30):
            t = time.perf_counter()
            step(xb, yb)
            times.append(time.perf_counter() - t)
        results[zero] = (statistics.median(times), step.stats["memory"])
    if rank == 0:
        reduced = param_bytes if size > 1 else 0
        plain_t, plain_m = results[0]
        print(f"{size} rank(s), local batch {batch}, {param_bytes / 1e6:.2f} MB of parameters, "
              f"{reduced / 1e6:.2f} MB reduced per step")
        for zero, (t, m) in results.items():
            name = "plain data parallel" if zero == 0 else f"ZeRO-{zero}"
            print(f"  {name:20s} step {t * 1e3:7.2f} ms ({t / plain_t:.2f}x plain), optimizer "
                  f"state {m['optimizer_state'] / 1e6:.2f} MB per rank "
                  f"({m['optimizer_state'] / plain_m['optimizer_state']:.3f} of plain, "
                  f"1/N = {1 / size:.3f}), master shard {m['master_shards'] / 1e6:.2f} MB, "
                  f"arena {m['arena'] / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
