"""Running a compiled pipeline (graphc/distributed/pipeline.py): micro-batches through
this process's stage(s) in the GPipe or 1F1B order, activations and cotangents sent
point to point to the neighbouring stages' processes, the time each rank idles."""
from __future__ import annotations

import collections
import time

import numpy as np

from graphc_runtime import collectives as _coll
from graphc_runtime.errors import GraphcError

from ..ir import dtypes

ACTIVATION_TAG, COTANGENT_TAG = 101, 102


class PipelineStep:
    """One training step over a whole batch: call with the data placeholders' arrays by
    name; returns {"loss": mean loss over the micro-batches} on every process.
    `stats` after a step: stage(s), step and busy seconds, bubble against the ideal
    (p - 1) / (m + p - 1), stashed bytes at most."""

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
        m = self.pipeline.microbatches
        chunks = self._microbatches(feeds, m)
        start = time.perf_counter()
        self._busy, self._stash_peak = 0.0, 0
        if self.world == 1:
            losses = self._run_locally(chunks)
        else:
            (s,) = self.programs
            losses = self._run_stage(s, chunks)
        for prog in self.programs.values():
            if prog.update is not None:
                t = time.perf_counter()
                prog.update()
                self._busy += time.perf_counter() - t
        loss = np.array(sum(losses) / m if losses else 0.0)
        if self.world > 1:
            loss = self._loss_from_last(np.array([loss], np.float64)).reshape(())
        elapsed = time.perf_counter() - start
        p = self.stages
        self.stats = {"stages": sorted(self.programs), "microbatches": m,
                      "schedule": self.pipeline.schedule, "step_seconds": elapsed,
                      "busy_seconds": self._busy,
                      "bubble": max(0.0, 1.0 - self._busy / elapsed),
                      "ideal_bubble": (p - 1) / (m + p - 1) if self.world > 1 else 0.0,
                      "stash_peak_bytes": self._stash_peak, "memory": self.memory}
        return {"loss": loss}

    def _loss_from_last(self, loss: np.ndarray) -> np.ndarray:
        """Each replica's last stage holds its loss: their mean, on every process."""
        rank = _coll.comm().Get_rank()
        mine = loss if rank % self.stages == self.stages - 1 else np.zeros_like(loss)
        total = np.empty_like(mine)
        _coll.run("all_reduce", {"op": "sum", "axis_size": self.world}, mine, total)
        return total / (self.world // self.stages)

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
        feeds = {name: feeds[name] for name in exe.input_names}
        t = time.perf_counter()
        out = exe(**feeds)
        self._busy += time.perf_counter() - t
        return out

    def _forward(self, prog, feeds: dict) -> np.ndarray:
        """Run a stage's forward program; its residuals (if it hands them over) join the
        micro-batch's stashed feeds. Returns the stage's output."""
        out = self._call(prog.forward, **feeds)
        if prog.residuals is not None:
            for k, r in enumerate(out["residuals"]):
                feeds[f"pipeline/residual{k}"] = r
            out = out["y"]
        return out

    def _note_stash(self, stash) -> None:
        """Track the most bytes of stage inputs and residuals held between passes."""
        held = sum(a.nbytes for feeds in stash for name, a in feeds.items()
                   if name.startswith("pipeline/"))
        self._stash_peak = max(self._stash_peak, held)

    @staticmethod
    def _data(prog, chunk: dict) -> dict:
        return {t.node.attrs["name"]: chunk[t.node.attrs["name"]] for t in prog.stage.data}

    def _run_locally(self, chunks: list) -> list:
        """Every stage in this process: each micro-batch forward through the stages, then
        backward."""
        order = sorted(self.programs)
        losses = []
        for chunk in chunks:
            x, stash = None, []
            for s in order:
                prog = self.programs[s]
                feeds = self._data(prog, chunk)
                if x is not None:
                    feeds["pipeline/stage_input"] = x
                stash.append(feeds)
                if not prog.last:
                    x = self._forward(prog, feeds)
            self._note_stash(stash)
            g = None
            for s in reversed(order):
                prog, feeds = self.programs[s], stash[s]
                if g is not None:
                    feeds["pipeline/output_grad"] = g
                out = self._call(prog.backward, **feeds)
                if prog.last:
                    losses.append(float(out["loss"]))
                g = out.get("input_grad")
        return losses

    def _run_stage(self, s: int, chunks: list) -> list:
        """This process's stage s of p, in the pipeline's schedule, talking to the
        neighbouring stages' processes of the same replica."""
        prog, p, m = self.programs[s], self.stages, len(chunks)
        rank = _coll.comm().Get_rank()
        prev, nxt = rank - 1, rank + 1
        stash: collections.deque = collections.deque()
        sends: list = []
        losses: list = []
        x_in, y = prog.stage.x_in, prog.stage.y

        def receive(like, source, tag, what):
            buf = np.empty(like.shape, dtypes.to_numpy(like.dtype))
            return _coll.receive(buf, source, tag, what)

        def forward(i):
            feeds = self._data(prog, chunks[i])
            if s > 0:
                feeds["pipeline/stage_input"] = receive(
                    x_in, prev, ACTIVATION_TAG, f"the activation of micro-batch {i} from "
                    f"stage {s - 1} (rank {prev})")
            stash.append(feeds)
            if not prog.last:
                out = np.ascontiguousarray(self._forward(prog, feeds))
                sends.append((_coll.send(out, nxt, ACTIVATION_TAG), out))
            self._note_stash(stash)

        def backward(i):
            feeds = stash.popleft()
            if not prog.last:
                feeds["pipeline/output_grad"] = receive(
                    y, nxt, COTANGENT_TAG, f"the cotangent of micro-batch {i} from stage "
                    f"{s + 1} (rank {nxt})")
            out = self._call(prog.backward, **feeds)
            if prog.last:
                losses.append(float(out["loss"]))
            if s > 0:
                g = np.ascontiguousarray(out["input_grad"])
                sends.append((_coll.send(g, prev, COTANGENT_TAG), g))

        # the last stage runs forward and backward as one program, at once (in both
        # schedules: nothing it could do instead)
        warmup = 0 if prog.last else m if self.pipeline.schedule == "gpipe" else \
            min(p - s - 1, m)
        for i in range(warmup):
            forward(i)
        for k in range(m - warmup):
            forward(warmup + k)
            backward(k)
        for k in range(m - warmup, m):
            backward(k)
        _coll.wait_all([r for r, _ in sends], f"stage {s}'s sends to its neighbours")
        return losses
