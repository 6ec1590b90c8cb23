"""Recomputation (gc.checkpoint per block) on a GPT-style training step: peak arena and
step time against the same step keeping every activation, in one process.

Run: python -m bench.recompute [--layers 4 --hidden 256 --seq 256 --batch 8]
"""
from __future__ import annotations

import argparse
import statistics
import time

import graphc as gc

from .gpt_model import Config, add_arguments, batch, config_of, init_params, loss_fn


def build(cfg: Config, size: int, checkpoint: bool):
    with gc.Graph("gpt_step"):
        tokens = gc.placeholder((size, cfg.seq), "int32", name="tokens")
        targets = gc.placeholder((size, cfg.seq), "int32", name="targets")
        params = {k: gc.variable(v, name=k) for k, v in init_params(cfg).items()}
        loss = loss_fn(tokens, targets, params, cfg, checkpoint)
        return gc.compile(loss, updates=gc.optim.adam(loss, list(params.values()), 1e-3))


def step_ms(step, tokens, targets, repeat: int) -> float:
    step(tokens, targets)
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        step(tokens, targets)
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(ap, hidden=256, seq=256, vocab=2048)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=10)
    a = ap.parse_args(argv)
    cfg = config_of(a)
    tokens, targets = batch(cfg, a.batch)
    plain, ck = build(cfg, a.batch, False), build(cfg, a.batch, True)
    losses = [float(plain(tokens, targets)), float(ck(tokens, targets))]
    times = {"plain": [], "ck": []}
    for _ in range(3):            # alternate, so both see the same machine
        times["plain"].append(step_ms(plain, tokens, targets, a.repeat))
        times["ck"].append(step_ms(ck, tokens, targets, a.repeat))
    tp, tc = min(times["plain"]), min(times["ck"])
    ap_, ac = plain.stats["arena_bytes"], ck.stats["arena_bytes"]
    print(f"GPT-style step: {a.layers} layers, hidden {a.hidden}, {a.heads} heads, seq {a.seq}, "
          f"batch {a.batch}, vocab {a.vocab}, Adam")
    print(f"  first-step loss: plain {losses[0]:.6f}, checkpointed {losses[1]:.6f}")
    print(f"  peak arena: plain {ap_ / 2**20:.1f} MiB, checkpointed {ac / 2**20:.1f} MiB "
          f"({(1 - ac / ap_) * 100:.0f}% lower)")
    print(f"  step time: plain {tp:.1f} ms, checkpointed {tc:.1f} ms ({tc / tp:.2f}x)")
    return 0


if __name__ == "__main__":
    main()
