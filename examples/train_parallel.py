"""Train a GPT-style model with any mix of data, tensor and pipeline parallelism.

Run: mpiexec -n 4 python examples/train_parallel.py --pp 2 --dp 2
     (also --tp 2 --pp 2, --zero 1|2, --checkpoint, --schedule interleaved --chunks 2;
     plain python: one process runs the stages itself). --dp defaults to the processes left over by --tp and --pp.
Rank r is at (data replica, tensor shard, stage) = (r // (tp*pp), r // pp % tp, r % pp)
(gc.distributed.Mesh). The blocks split evenly into --pp x --chunks stages (gc.distributed.
stage_boundary; stage k on the pipeline's process k % pp); --tp shards each block's
attention heads and MLP columns (gc.nn.column/row_parallel_linear); every step runs
--microbatches micro-batches in the 1F1B order (or --schedule gpipe / interleaved:
gc.distributed.Pipeline) and averages gradients over the data replicas
(sharding Adam's state with --zero). Prints the loss, and per rank its idle time against
the ideal bubble and its memory. With --check it trains the same model in one process in
float64 too and prints, as its last line, `max difference from one process: <x>`.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))   # the repository's bench/
import graphc as gc  # noqa: E402
from bench.gpt_model import SHARDED, Config, init_params, loss_fn, tp_shard  # noqa: E402


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name, default, what in (("dp", None, "data-parallel replicas"),
                                ("tp", 1, "tensor-parallel shards"),
                                ("pp", 1, "pipeline stages"),
                                ("zero", 0, "shard the optimizer state: 1 or 2"),
                                ("microbatches", 4, "micro-batches per step"),
                                ("micro", 2, "micro-batch size"), ("steps", 20, "steps"),
                                ("layers", 4, "blocks"), ("hidden", 64, "hidden size"),
                                ("heads", 4, "attention heads"), ("seq", 32, "sequence"),
                                ("vocab", 256, "vocabulary")):
        ap.add_argument(f"--{name}", type=int, default=default, help=what)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--schedule", choices=("1f1b", "gpipe", "interleaved"), default="1f1b")
    ap.add_argument("--chunks", type=int, default=None,
                    help="stages per pipeline process (interleaved: default 2)")
    ap.add_argument("--checkpoint", action="store_true",
                    help="recompute each block's values in the backward pass")
    ap.add_argument("--check", action="store_true",
                    help="float64, and compare with one process training the whole batch")
    a = ap.parse_args(argv)
    world = gc.distributed.size()
    if a.dp is None:
        a.dp = max(1, world // (a.tp * a.pp))
    if a.chunks is None:
        a.chunks = 2 if a.schedule == "interleaved" else 1
    return a


def batches(cfg: Config, total: int, steps: int):
    rng = np.random.default_rng(1)
    for _ in range(steps):
        t = rng.integers(0, cfg.vocab, (total, cfg.seq + 1)).astype(np.int32)
        yield t[:, :-1], t[:, 1:]


def build_parallel(a, cfg, mesh, dtype):
    group = mesh.tp_group if a.tp > 1 else None
    values = tp_shard(init_params(cfg, 0, dtype), cfg, a.tp, mesh.tp_index)
    with gc.Graph("gpt"):
        tokens = gc.placeholder((a.micro, cfg.seq), "int32", name="tokens")
        targets = gc.placeholder((a.micro, cfg.seq), "int32", name="targets")
        p = {k: gc.variable(v, name=k) for k, v in values.items()}
        loss = loss_fn(tokens, targets, p, cfg, a.checkpoint, a.pp * a.chunks, group)
        sharded = [v for k, v in p.items() if a.tp > 1 and k.split("/")[-1] in SHARDED]
        pipe = gc.distributed.Pipeline(a.microbatches, a.schedule, mesh=mesh, zero=a.zero,
                                       chunks=a.chunks)
        return pipe.compile(loss, list(p.values()), gc.optim.adam, sharded=sharded, lr=a.lr)


def one_process(a, cfg, total):
    """The same model and data, trained in one process on the whole batch, float64."""
    with gc.Graph("gpt_reference"):
        tokens = gc.placeholder((total, cfg.seq), "int32", name="tokens")
        targets = gc.placeholder((total, cfg.seq), "int32", name="targets")
        p = {k: gc.variable(v, name=k) for k, v in init_params(cfg, 0, "float64").items()}
        loss = loss_fn(tokens, targets, p, cfg)
        step = gc.compile(loss, updates=gc.optim.adam(loss, list(p.values()), lr=a.lr))
    losses = [float(step(t, y)) for t, y in batches(cfg, total, a.steps)]
    return losses, {k: np.array(v) for k, v in step.variables.items() if k in p}


def main(argv=None) -> float | None:
    a = parse(argv)
    rank, world = gc.distributed.rank(), gc.distributed.size()
    mesh = gc.distributed.Mesh(a.dp, a.tp, a.pp)
    cfg = Config(a.vocab, a.seq, a.hidden, a.heads, a.layers)
    dtype = "float64" if a.check else "float32"
    step = build_parallel(a, cfg, mesh, dtype)
    per_replica = a.micro * a.microbatches
    total = per_replica * a.dp
    part = slice(mesh.dp_index * per_replica, (mesh.dp_index + 1) * per_replica)
    losses = []
    for k, (t, y) in enumerate(batches(cfg, total, a.steps)):
        losses.append(float(step(tokens=t[part], targets=y[part])["loss"]))
        if rank == 0 and (k % 5 == 0 or k == a.steps - 1):
            print(f"step {k:3d}  loss {losses[-1]:.5f}", flush=True)
    s, mem = step.stats, step.stats["memory"]
    line = (f"rank {rank} (replica {mesh.dp_index}, shard {mesh.tp_index}, stage(s) "
            f"{s['stages']}): idle {s['bubble'] * 100:.1f}% (ideal bubble "
            f"{s['ideal_bubble'] * 100:.1f}%), parameters {mem['parameters'] / 1e6:.3f} MB, "
            f"optimizer state {mem['optimizer_state'] / 1e6:.3f} MB, stashed "
            f"{s['stash_peak_bytes'] / 1e6:.3f} MB, arenas {mem['arena'] / 1e6:.3f} MB")
    lines = gc.distributed._coll.comm().gather(line) if world > 1 else [line]
    if rank == 0:
        print(f"{world} process(es): dp={a.dp} tp={a.tp} pp={a.pp} ({a.schedule}, "
              f"{a.chunks} stage(s) each), zero={a.zero}, "
              f"checkpoint={a.checkpoint}, {a.microbatches} micro-batches of {a.micro}")
        print("\n".join(lines), flush=True)
    if not a.check:
        return None
    want_losses, want = one_process(a, cfg, total)
    shard = tp_shard(want, cfg, a.tp, mesh.tp_index)
    diff = max(abs(u - v) for u, v in zip(losses, want_losses))
    for name, value in step.variables.items():
        if name in shard:
            diff = max(diff, float(np.abs(value - shard[name]).max()))
    if world > 1:
        diff = gc.distributed._coll.comm().allreduce(diff, op=__import__("mpi4py").MPI.MAX)
    if rank == 0:
        print(f"max difference from one process: {diff:.3g}", flush=True)
    return diff


if __name__ == "__main__":
    main()
