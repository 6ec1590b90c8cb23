"""Running a compiled pipeline (graphc/distributed/pipeline.py): micro-batches through
this process's stage(s) in the GPipe, 1F1B or interleaved 1F1B order, the time each
rank idles. The programs themselves receive their inputs and send their outputs (and the
cotangents back); this module only orders them.
"""
from __future__ import annotations

import time

import numpy as np

from graphc_runtime import collectives as _coll
from graphc_runtime import point_to_point as _p2p
from graphc_runtime.errors import GraphcError

from ..ir import dtypes


def operations(schedule: str, p: int, v: int, m: int, position: int | None) -> list:
    """The (kind, stage, micro-batch) steps the process at pipeline `position` (of p,
    each running v stages: k, k + p, ...) takes, kind "F" (forward) or "B" (backward);
    position None: one process running every stage, each micro-batch through all of
    them and back. Sends never wait and every process's order is the schedule's, so no
    process waits on one that waits on it."""
    stages = p * v
    if position is None:
        return [op for i in range(m) for op in
                [("F", s, i) for s in range(stages)] +
                [("B", s, i) for s in reversed(range(stages))]]
    if schedule == "gpipe":
        return [("F", position, i) for i in range(m)] + [("B", position, i) for i in range(m)]
    if v == 1:
        warmup = min(p - position - 1, m)
        forwards = [("F", position, i) for i in range(m)]
        backwards = [("B", position, i) for i in range(m)]
    else:           # interleaved: p micro-batches through one chunk, then the next chunk
        total = m * v
        warmup = min((p - position - 1) * 2 + (v - 1) * p, total)

        def step(k, kind):
            chunk = (k % (p * v)) // p
            if kind == "B":
                chunk = v - 1 - chunk
            return kind, chunk * p + position, (k // (p * v)) * p + k % p
        forwards = [step(k, "F") for k in range(total)]
        backwards = [step(k, "B") for k in range(total)]
    ops = forwards[:warmup]
    for k in range(len(forwards) - warmup):
        ops += [forwards[warmup + k], backwards[k]]
    return ops + backwards[len(forwards) - warmup:]


def ideal_bubble(p: int, v: int, m: int) -> float:
    """The idle fraction of a pipeline of p processes with v equal stages each over m
    micro-batches, communication free: (p - 1) / (v m + p - 1)."""
    return (p - 1) / (v * m + p - 1)


class PipelineStep:
    """One training step over a whole batch: call with the data placeholders' arrays by
    name; returns {"loss": mean loss over the micro-batches} on every process.
    `stats` after a step: stage(s), step and busy seconds (time waiting for messages
    is idle), bubble against the ideal (p - 1) / (v m + p - 1), stashed bytes at most."""

    def __init__(self, pipeline, programs: dict, stages: int, world: int, mesh):
        self.pipeline, self.programs, self.stages, self.world = pipeline, programs, stages, world
        self.mesh = mesh
        self.stats: dict = {}
        self.memory = self._memory()

    def _memory(self) -> dict:
        """This process's bytes: its stages' parameters, gradient accumulators, the rest
        of the optimizer's state (with ZeRO master shards) and the programs' arenas."""
        out = {"parameters": 0, "gradient_accumulators": 0, "optimizer_state": 0, "arena": 0}
        for prog in self.programs.values():
            params = {p.name for p in prog.stage.params}
            for name in prog.variables:
                nbytes = dict.__getitem__(prog.variables, name).nbytes
                kind = "parameters" if name in params else "gradient_accumulators" \
                    if name.endswith("/pipeline_grad") else "optimizer_state"
                out[kind] += nbytes
            out["arena"] += sum(exe.stats["arena_bytes"] for exe in
                                (prog.forward, prog.backward, prog.update) if exe is not None)
        return out

    @property
    def variables(self) -> dict:
        """name -> live array of the variables of this process's stage(s)."""
        out = {}
        for prog in self.programs.values():
            out.update({k: dict.__getitem__(prog.variables, k) for k in prog.variables})
        return out

    def __call__(self, **feeds) -> dict:
        m, v = self.pipeline.microbatches, self.pipeline.chunks
        p = self.stages // v
        chunks = self._microbatches(feeds, m)
        start = time.perf_counter()
        self._busy, self._stash_peak = 0.0, 0
        if self.world == 1:
            _p2p.clear_loopback()
        position = None if self.world == 1 else self.mesh.stage
        losses = self._run(operations(self.pipeline.schedule, p, v, m, position), chunks)
        for prog in self.programs.values():
            if prog.update is not None:
                t = time.perf_counter()
                prog.update()
                self._busy += time.perf_counter() - t
        _p2p.finish_sends(f"stage(s) {sorted(self.programs)}'s sends to its neighbours")
        loss = np.array(sum(losses) / m if losses else 0.0)
        if self.world > 1:
            loss = self._loss_from_last(np.array([loss], np.float64)).reshape(())
        elapsed = time.perf_counter() - start
        self.stats = {"stages": sorted(self.programs), "microbatches": m,
                      "schedule": self.pipeline.schedule, "step_seconds": elapsed,
                      "busy_seconds": self._busy,
                      "bubble": max(0.0, 1.0 - self._busy / elapsed),
                      "ideal_bubble": ideal_bubble(p, v, m) if self.world > 1 else 0.0,
                      "stash_peak_bytes": self._stash_peak, "memory": self.memory}
        return {"loss": loss}

    def _loss_from_last(self, loss: np.ndarray) -> np.ndarray:
        """Each replica's last stage holds its loss: their mean, on every process."""
        pp = self.mesh.pp
        mine = loss if self.mesh.stage == pp - 1 else np.zeros_like(loss)
        total = np.empty_like(mine)
        _coll.run("all_reduce", {"op": "sum", "axis_size": self.world}, mine, total)
        return total / (self.world // pp)

    def _microbatches(self, feeds: dict, m: int) -> list[dict]:
        names = {t.node.attrs["name"]: t for prog in self.programs.values()
                 for t in prog.stage.data}
        missing = [n for n in names if n not in feeds]
        if missing:
            raise GraphcError(f"pipeline step: missing input(s) {missing}; it takes "
                              f"{sorted(names)} (whole batches)")
        out = [dict() for _ in range(m)]
        for name, t in names.items():
            value = np.asarray(feeds[name])
            per = t.shape[0] if t.ndim else None
            if per is None or value.shape != (per * m,) + tuple(t.shape[1:]):
                raise GraphcError(f"pipeline step: input {name!r} must hold {m} micro-batches "
                                  f"of {t.node.type_str()} along axis 0, got shape "
                                  f"{value.shape}")
            for i in range(m):
                out[i][name] = np.ascontiguousarray(value[i * per:(i + 1) * per])
        return out

    def _call(self, exe, **feeds):
        """Run a program; the time it waited for messages is idle, the rest busy."""
        feeds = {name: feeds[name] for name in exe.input_names}
        t, waited = time.perf_counter(), _p2p.recv_wait_seconds()
        out = exe(**feeds)
        self._busy += time.perf_counter() - t - (_p2p.recv_wait_seconds() - waited)
        return out

    def _note_stash(self, stash: dict) -> None:
        """Track the most bytes of stage inputs and residuals held between passes."""
        held = sum(a.nbytes for feeds in stash.values() for name, a in feeds.items()
                   if name.startswith("pipeline/"))
        self._stash_peak = max(self._stash_peak, held)

    def _run(self, ops: list, chunks: list) -> list:
        """Run `ops` (see operations): a forward stashes the micro-batch's feeds and the
        residuals its program returns until its backward; the last stage's one program
        runs at its forward. Returns the last stage's losses."""
        stash: dict = {}
        losses = []
        for kind, s, i in ops:
            prog = self.programs[s]
            if kind == "B":
                if not prog.last:
                    self._call(prog.backward, **stash.pop((s, i)))
                continue
            feeds = dict(chunks[i])          # (each program takes the inputs it names)
            if prog.stage.token is not None:
                feeds["pipeline/token"] = np.zeros((), dtypes.to_numpy(prog.stage.token.dtype))
            if prog.last:
                losses.append(float(self._call(prog.backward, **feeds)["loss"]))
                continue
            out = self._call(prog.forward, **feeds)
            for k, r in enumerate(out["residuals"]):
                feeds[f"pipeline/residual{k}"] = r
            stash[(s, i)] = feeds
            self._note_stash(stash)
        return losses
