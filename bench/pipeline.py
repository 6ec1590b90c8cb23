"""Pipeline-parallel training of a GPT-style model: each rank's idle time against the
ideal bubble (p - 1) / (m + p - 1), for GPipe and 1F1B.

Run: mpiexec --allow-run-as-root -n 2 python -m bench.pipeline [--microbatches 8]
(one stage per rank; a boundary after every block, the compiler cutting at those that
balance the stages' estimated work). Prints one line per rank and schedule.
"""
from __future__ import annotations

import argparse
import statistics


import graphc as gc

from .gpt_model import Config, add_arguments, batch, config_of, init_params, loss_fn


def build(cfg: Config, micro: int, m: int, schedule: str, stages: int, recompute: bool):
    with gc.Graph("gpt_pipeline"):
        tokens = gc.placeholder((micro, cfg.seq), "int32", name="tokens")
        targets = gc.placeholder((micro, cfg.seq), "int32", name="targets")
        p = {k: gc.variable(v, name=k) for k, v in init_params(cfg).items()}
        loss = loss_fn(tokens, targets, p, cfg, stages=cfg.layers)   # a boundary per block
        pipe = gc.distributed.Pipeline(m, schedule, recompute, stages=stages)
        return pipe.compile(loss, list(p.values()), gc.optim.adam, lr=1e-3)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(ap, hidden=256, seq=128, vocab=512)
    ap.add_argument("--micro", type=int, default=2, help="micro-batch size")
    ap.add_argument("--microbatches", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args(argv)
    rank, size = gc.distributed.rank(), gc.distributed.size()
    cfg = config_of(a)
    tokens, targets = batch(cfg, a.micro * a.microbatches)
    lines = []
    for schedule, recompute in (("gpipe", False), ("1f1b", False), ("1f1b", True)):
        step = build(cfg, a.micro, a.microbatches, schedule, size, recompute)
        step(tokens=tokens, targets=targets)
        stats = []
        for _ in range(a.repeat):
            loss = step(tokens=tokens, targets=targets)["loss"]
            stats.append(step.stats)
        s = min(stats, key=lambda st: st["step_seconds"])
        name = schedule + (" recomputing" if recompute else "")
        lines.append(f"rank {rank} {name:16s}: step {s['step_seconds'] * 1e3:7.1f} ms "
                     f"(median {statistics.median(x['step_seconds'] for x in stats) * 1e3:.1f}), "
                     f"idle {s['bubble'] * 100:4.1f}% against the ideal bubble "
                     f"{s['ideal_bubble'] * 100:4.1f}% (p={size}, m={a.microbatches}), "
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
