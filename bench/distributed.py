"""Data-parallel MLP step (784-512-512-10, Adam, global batch 256) on N ranks.

Run: mpiexec --allow-run-as-root -n 2 python bench/distributed.py   (and with -n 1)
Prints the median step time and the bytes all-reduced per step (rank 0).
"""
from __future__ import annotations

import statistics
import time

import numpy as np

import graphc as gc


def main():
    rank, size = gc.distributed.rank(), gc.distributed.size()
    batch = 256 // size
    dp = gc.distributed.DataParallel()
    g = gc.Graph("dp_mlp")
    with g:
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
        grads = dp.gradients(loss, params)
        step = gc.compile({"loss": loss}, updates=gc.optim.adam(loss, params, grads=grads),
                          distributed=dp)
    reduced = sum(int(np.prod(p.shape)) * 4 for p in params) if size > 1 else 0
    rng = np.random.default_rng(rank)
    xb = rng.standard_normal((batch, 784)).astype(np.float32)
    yb = rng.integers(0, 10, batch).astype(np.int32)
    for _ in range(5):
        step(xb, yb)
    times = []
    for _ in range(30):
        t = time.perf_counter()
        step(xb, yb)
        times.append(time.perf_counter() - t)
    if rank == 0:
        print(f"{size} rank(s), local batch {batch}: step {statistics.median(times) * 1e3:.2f} ms, "
              f"{reduced / 1e6:.2f} MB all-reduced per step")


if __name__ == "__main__":
    main()
