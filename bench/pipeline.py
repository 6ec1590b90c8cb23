"""Pipeline-parallel training of a GPT-style model: each rank's idle time against the
ideal bubble (p - 1) / (v m + p - 1), for GPipe, 1F1B and interleaved 1F1B (v = 2 stages
per rank).

Run: mpiexec --allow-run-as-root -n 2 python -m bench.pipeline [--microbatches 8]
(a boundary after every block, the compiler cutting at those that balance the stages'
estimated work: one stage per rank, two for the interleaved schedule). Prints one line
per rank and schedule: idle time (time waiting for messages or for the other ranks) and
its distance from the ideal in percentage points.
"""
from __future__ import annotations

import argparse
import statistics


import graphc as gc

from .gpt_model import Config, add_arguments, batch, config_of, init_params, loss_fn


def build(cfg: Config, micro: int, m: int, schedule: str, stages: int, recompute: bool,
          chunks: int = 1):
    with gc.Graph("gpt_pipeline"):
        tokens = gc.placeholder((micro, cfg.seq), "int32", name="tokens")
        targets = gc.placeholder((micro, cfg.seq), "int32", name="targets")
        p = {k: gc.variable(v, name=k) for k, v in init_params(cfg).items()}
        loss = loss_fn(tokens, targets, p, cfg, stages=cfg.layers)   # a boundary per block
        pipe = gc.distributed.Pipeline(m, schedule, recompute, stages=stages * chunks,
                                       chunks=chunks)
        return pipe.compile(loss, list(p.values()), gc.optim.adam, lr=1e-3)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(ap, hidden=256, seq=128, vocab=512, layers=16)
    ap.add_argument("--micro", type=int, default=2, help="micro-batch size")
    ap.add_argument("--microbatches", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=9)
    a = ap.parse_args(argv)
    rank, size = gc.distributed.rank(), gc.distributed.size()
    cfg = config_of(a)
    tokens, targets = batch(cfg, a.micro * a.microbatches)
    lines = []
    runs = [("gpipe", False, 1), ("1f1b", False, 1), ("1f1b", True, 1)]
    if cfg.layers % (2 * size) == 0 and a.microbatches % size == 0:
        runs.append(("interleaved", False, 2))
    for schedule, recompute, chunks in runs:
        step = build(cfg, a.micro, a.microbatches, schedule, size, recompute, chunks)
        step(tokens=tokens, targets=targets)
        stats = []
        for _ in range(a.repeat):
            loss = step(tokens=tokens, targets=targets)["loss"]
            stats.append(step.stats)
        s = min(stats, key=lambda st: st["step_seconds"])
        idle = statistics.median(st["bubble"] for st in stats)
        name = schedule + (" recomputing" if recompute else "")
        lines.append(f"rank {rank} {name:16s}: step {s['step_seconds'] * 1e3:7.1f} ms "
                     f"(median {statistics.median(x['step_seconds'] for x in stats) * 1e3:.1f}), "
                     f"idle {idle * 100:4.1f}% (median of {a.repeat} steps) against the "
                     f"ideal bubble {s['ideal_bubble'] * 100:4.1f}% (p={size}, v={chunks}, "
                     f"m={a.microbatches}: {(idle - s['ideal_bubble']) * 100:+.1f} points), "
                     f"stashed inputs {s['stash_peak_bytes'] / 2**20:.1f} MiB, "
                     f"loss {float(loss):.4f}")
    if rank == 0:
        print(f"GPT-style: {a.layers} layers, hidden {a.hidden}, seq {a.seq}, vocab {a.vocab}, "
              f"micro-batch {a.micro} x {a.microbatches}, {size} stage(s)", flush=True)
    out = gc.distributed._coll.comm().gather("\n".join(lines)) if size > 1 else ["\n".join(lines)]
    if rank == 0:
        print("\n".join(out))
    return 0


if __name__ == "__main__":
    main()
