"""Data-parallel training of the digits MLP over MPI processes.

Run: mpiexec -n 2 python examples/train_digits_dp.py   (or plain python: one process)
Each process takes its share of every batch; gradients are averaged across processes in
one bucketed all-reduce per step, so every process ends with the same weights. The local
batch is a symbolic dimension: the epoch's last, shorter batch is split between the
processes too (each takes an equal share; fewer leftover examples than processes are
dropped).
"""
from __future__ import annotations

import argparse
import time

import numpy as np

import graphc as gc
from train_digits import load_data


def main(argv=None) -> float:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch", type=int, default=64, help="global batch size")
    args = parser.parse_args(argv)
    rank, size = gc.distributed.rank(), gc.distributed.size()
    if args.batch % size:
        raise SystemExit(f"--batch {args.batch} must be divisible by {size} processes")
    local = args.batch // size
    (xtr, ytr), (xte, yte) = load_data(0)
    dp = gc.distributed.DataParallel()
    graph = gc.Graph("digits_dp")
    with graph:
        init = gc.nn.init
        w1 = gc.variable(init.he_normal((64, 128), 0), name="w1")
        b1 = gc.variable(np.zeros(128, np.float32), name="b1")
        w2 = gc.variable(init.glorot_uniform((128, 10), 1), name="w2")
        b2 = gc.variable(np.zeros(10, np.float32), name="b2")
        params = [w1, b1, w2, b2]

        def forward(images):
            h = gc.relu(gc.nn.linear(images.reshape(images.shape[0], 64), w1, b1))
            return gc.nn.linear(h, w2, b2)
        x = gc.placeholder(("local", 8, 8), name="x")
        y = gc.placeholder(("local",), "int32", name="y")
        loss = gc.nn.softmax_cross_entropy(forward(x), y).mean()
        step = gc.compile({"loss": gc.distributed.all_reduce(loss, "mean")},
                          updates=gc.optim.adam(loss, params, lr=3e-3,
                                                grads=dp.gradients(loss, params)),
                          distributed=dp)
        x_test = gc.placeholder(xte.shape, name="x_test")
        predict = gc.compile(gc.argmax(forward(x_test), axis=-1))
    rng = np.random.default_rng(0)              # same order on every process
    start = time.perf_counter()
    for epoch in range(1, args.epochs + 1):
        order = rng.permutation(len(xtr))
        losses = []
        for i in range(0, len(order) - size + 1, args.batch):
            share = min(args.batch, len(order) - i) // size       # the last batch: shorter
            mine = order[i + rank * share:i + (rank + 1) * share]
            losses.append(float(step(x=xtr[mine], y=ytr[mine])["loss"]))
        if rank == 0:
            print(f"[dp x{size}] epoch {epoch:2d}  loss {np.mean(losses):.4f}")
    for name, value in step.variables.items():
        if name in predict.variables:
            predict.variables[name] = value
    accuracy = float((predict(x_test=xte) == yte).mean())
    if rank == 0:
        print(f"[dp x{size}] {size} processes, test accuracy {accuracy:.4f} "
              f"({time.perf_counter() - start:.2f} s)")
    return accuracy


if __name__ == "__main__":
    main()
