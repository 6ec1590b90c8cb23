"""Pipeline parallelism: a training step cut into stages, one per process, micro-batched.

`stage_boundary(x)` marks where one stage ends and the next begins (x's value passes on
unchanged: the same graph still compiles and trains in one process).
`Pipeline(microbatches, schedule).compile(loss, params, optimizer, **kwargs)` cuts the
loss's graph at its boundaries into stage graphs and compiles, for this process's stage,
three programs sharing one copy of the stage's variables:

  forward   stage input (and the data it reads) -> stage output, and the forward
            values the backward reads (residuals), kept until the micro-batch's backward
  backward  residuals, the output's cotangent -> the input's cotangent, adding the
            parameters' gradients into accumulators. With Pipeline(recompute=True) it
            recomputes the stage's forward from the stashed input instead (only stage
            inputs are kept); the last stage always runs forward and backward as one
  update    the optimizer on the accumulated gradients (their mean over micro-batches,
            all-reduced over data-parallel replicas of the stage), accumulators reset

The step runs the micro-batches in the GPipe order (all forwards, then all backwards) or
1F1B (after p - s - 1 warm-up forwards, stage s alternates one forward and one backward,
so at most p - s inputs are stashed); activations and cotangents go point to point
between neighbouring stages. With N = p x d processes, rank r runs stage r % p of
data-parallel replica r // p; one process runs every stage itself.
"""
from __future__ import annotations

import collections
import time
import weakref

import numpy as np

from graphc_runtime import collectives as _coll
from graphc_runtime.errors import GraphcError

from ..api import Tensor, bind
from ..ir.graph import Graph
from ..ir.primitive import lookup
from ..ir.source import user_location

_BOUNDARIES: "weakref.WeakKeyDictionary[Graph, list]" = weakref.WeakKeyDictionary()
ACTIVATION_TAG, COTANGENT_TAG = 101, 102
SCHEDULES = ("1f1b", "gpipe")


def stage_boundary(x: Tensor) -> Tensor:
    """x, marked as the end of one pipeline stage and the input of the next."""
    if not isinstance(x, Tensor):
        raise GraphcError(f"stage_boundary: expected a Tensor, got {x!r}", user_location())
    out = bind("after", x)
    _BOUNDARIES.setdefault(x.graph, []).append(out.node.id)
    return out


class StageGraph:
    """One stage cut out of the model's graph: its own Graph, the placeholder standing
    for its input (None for the first), its output, the data placeholders it reads and
    its parameters."""

    def __init__(self, index: int, graph: Graph, x_in, y, data: list, params: list):
        self.index, self.graph, self.x_in, self.y = index, graph, x_in, y
        self.data, self.params = data, params


def split_stages(loss: Tensor, params: list) -> list[StageGraph]:
    """Cut loss's graph at its stage boundaries (in the order they were marked)."""
    graph, loc = loss.graph, user_location()
    needed = {n.id for n in graph.ancestors([loss.node])}
    cuts = [graph.nodes[i] for i in _BOUNDARIES.get(graph, []) if i in needed]
    outs = [c.inputs[0] for c in cuts] + [loss.node]
    ins = [None] + cuts
    owner: dict[int, int] = {}
    stage_nodes = []
    for s, (out, start) in enumerate(zip(outs, ins)):
        seen, stack = set(), [out]
        while stack:
            n = stack.pop()
            if n.id in seen:
                continue
            seen.add(n.id)
            if start is not None and n.id == start.id:
                continue
            stack.extend(n.inputs)
        if start is not None and start.id not in seen:
            raise GraphcError(f"pipeline stage {s} does not read the stage boundary marked at "
                              f"{start.loc}: stages must form a chain", loc)
        for nid in seen:
            n = graph.nodes[nid]
            shared_ok = n.op in ("parameter", "constant", "iota") or nid == (start.id if start
                                                                             else -1)
            if nid in owner and not shared_ok:
                raise GraphcError(f"pipeline stage {s} reads {n.describe()} of stage "
                                  f"{owner[nid]}; values pass between stages only through "
                                  f"stage_boundary (and a variable belongs to one stage)", loc)
            owner.setdefault(nid, s)
        stage_nodes.append(sorted(seen))
    wanted = {p.node.id: p for p in params}
    unused = [p for pid, p in wanted.items() if pid not in owner]
    if unused:
        raise GraphcError(f"parameter {unused[0].name!r} is not used by the loss", loc)
    return [_clone_stage(s, graph, ids, ins[s], outs[s], wanted)
            for s, ids in enumerate(stage_nodes)]


def _copy_nodes(graph: Graph, ids, new: Graph, m: dict, what: str) -> tuple[list, list]:
    """Copy `graph`'s nodes `ids` (topological order) into `new`, operands through `m`
    (old id -> new node; nodes already in `m` are not copied): variables and placeholders
    as new ones of the same names. Returns the new variables and placeholders."""
    from ..tensor import placeholder, variable
    variables, placeholders = [], []
    with new:
        for nid in ids:
            n = graph.nodes[nid]
            if nid in m:
                continue
            if n.op == "variable":
                t = variable(graph.variables[n.name], name=n.name)
                variables.append(t)
                m[nid] = t.node
            elif n.op == "parameter":
                t = placeholder(n.shape, n.dtype, name=n.attrs["name"])
                placeholders.append(t)
                m[nid] = t.node
            elif lookup(n.op).kind == "control":
                raise GraphcError(f"{what}: {n.describe()} is a loop or cond; control flow "
                                  f"inside pipeline stages is not supported", n.loc)
            else:
                m[nid] = new.add_node(n.op, [m[i.id] for i in n.inputs], n.attrs, n.shape,
                                      n.dtype, None, n.loc)
    return variables, placeholders


def _clone_stage(s, graph, ids, start, out, wanted) -> StageGraph:
    from ..tensor import placeholder
    new = Graph(f"{graph.name}/stage{s}")
    m: dict[int, object] = {}
    x_in = None
    if start is not None:
        with new:
            x_in = placeholder(start.shape, start.dtype, name="pipeline/stage_input")
        m[start.id] = x_in.node
    variables, data = _copy_nodes(graph, ids, new, m, f"pipeline stage {s}")
    params = [v for v in variables if any(m[pid] is v.node for pid in wanted if pid in m)]
    return StageGraph(s, new, x_in, Tensor(m[out.id]), data, params)


def _backward_graph(g: Graph, forward_ids: set, outputs: list, seed: Tensor):
    """The nodes of `outputs` (a stage's gradients) that are not forward nodes, copied
    into a new graph where the forward values they read are placeholders
    ("pipeline/residual<k>"): (new graph, old->new map, residual nodes in order).
    Forward values computed from variables and constants alone, and views (broadcasts,
    reshapes, transposes) of other residuals, are recomputed there instead of kept."""
    from ..tensor import placeholder
    back = Graph(f"{g.name}/backward")
    needed = g.ancestors([t.node for t in outputs])
    no_data = set()                    # forward nodes that read no placeholder
    for n in needed:
        if n.id in forward_ids and n.op != "parameter" and \
                all(i.id in no_data for i in n.inputs):
            no_data.add(n.id)
    residuals, copied = [], set()
    m: dict[int, object] = {}

    def keep(i):
        stack = [i]
        while stack:
            n = stack.pop()
            if n.id in m or n.id in copied:
                continue
            if n.id in no_data or not n.inputs:
                copied.add(n.id)
                stack.extend(n.inputs)
            elif lookup(n.op).remap:
                copied.add(n.id)
                stack.append(n.inputs[0])
            else:
                with back:
                    t = placeholder(n.shape, n.dtype, name=f"pipeline/residual{len(residuals)}")
                m[n.id] = t.node
                residuals.append(n)

    for n in needed:
        if n.id in forward_ids or n.id == seed.node.id:
            continue
        for i in n.inputs:
            if i.id in forward_ids:
                keep(i)
    ids = sorted(copied | {n.id for n in needed if n.id not in forward_ids})
    _copy_nodes(g, ids, back, m, "backward")
    return back, m, residuals


class Pipeline:
    """Pipeline-parallel training: `compile(loss, params, optimizer, **kwargs)` gives a
    step callable on whole batches (split into `microbatches` along axis 0)."""

    def __init__(self, microbatches: int, schedule: str = "1f1b", recompute: bool = False):
        if not isinstance(microbatches, int) or microbatches < 1:
            raise GraphcError(f"Pipeline: microbatches must be a positive int, got "
                              f"{microbatches!r}")
        if schedule not in SCHEDULES:
            raise GraphcError(f"Pipeline: schedule must be one of {SCHEDULES}, got "
                              f"{schedule!r}")
        self.microbatches, self.schedule = microbatches, schedule
        self.recompute = bool(recompute)

    def compile(self, loss: Tensor, params, optimizer, **kwargs) -> "PipelineStep":
        from . import _check_same_program
        from ..passes.program import Program
        params = list(params)
        stages = split_stages(loss, params)
        world, p = _coll.world_size(), len(stages)
        if world > 1:
            if world % p:
                raise GraphcError(f"the model has {p} pipeline stages but the run has {world} "
                                  f"processes; run a multiple of {p} (stages x data-parallel "
                                  f"replicas)", user_location())
            _check_same_program(world, Program(loss.graph, [loss.node], [], {}))
            rank = _coll.comm().Get_rank()
            mine = [rank % p]
            replicas = [r for r in range(world) if r % p == rank % p]
        else:
            mine, replicas = list(range(p)), [0]
        programs = {s: StagePrograms(stages[s], self.microbatches, optimizer, kwargs,
                                     last=(s == p - 1), replicas=replicas,
                                     recompute=self.recompute) for s in mine}
        return PipelineStep(self, programs, p, world)


class StagePrograms:
    """A stage's forward, backward and update programs (see the module's docstring)."""

    def __init__(self, stage: StageGraph, microbatches: int, optimizer, kwargs, last: bool,
                 replicas: list, recompute: bool):
        import graphc as gc
        self.stage, self.last = stage, last
        g = stage.graph
        first = [stage.x_in] if stage.x_in is not None else []
        inputs = first + stage.data
        with g:
            if last:
                seed, extra = gc.full((), 1.0 / microbatches, stage.y.dtype), []
            else:
                seed = gc.placeholder(stage.y.shape, stage.y.dtype,
                                      name="pipeline/output_grad")
                extra = [seed]
            forward_ids = {n.id for n in g.ancestors([stage.y.node])}
            grads = gc.vjp([stage.y], first + stage.params, [seed])
        self.residuals = 0
        if last or recompute:          # the backward program recomputes the forward
            self.forward = None if last else gc.compile(stage.y, inputs=inputs)
            bg, m, back_inputs = g, None, inputs + extra
        else:                          # the forward program hands its residuals over
            bg, m, residuals = _backward_graph(g, forward_ids, grads, seed)
            self.residuals = len(residuals)
            with g:
                self.forward = gc.compile({"y": stage.y, "residuals": [
                    Tensor(r) for r in residuals]}, inputs=inputs)
            by_name = {n.attrs["name"]: Tensor(n) for n in bg.placeholders()}
            back_inputs = [by_name[n] for n in sorted(by_name)]
            grads = [Tensor(m[t.node.id]) if t.node.id in m else t for t in grads]
        with bg:
            accs = [gc.variable(np.zeros(p.shape, np.dtype(g.variables[p.name].dtype)),
                                name=bg.unique_name(f"{p.name}/pipeline_grad"))
                    for p in stage.params]
            outputs = {}
            if first:
                outputs["input_grad"] = grads[0]
            if last:
                outputs["loss"] = stage.y
            p_grads = grads[len(first):]
            self.backward = gc.compile(outputs, inputs=back_inputs,
                                       updates={a: a + gp for a, gp in zip(accs, p_grads)})
            if m is None:
                params = stage.params
            else:                      # parameters the backward does not read, as well
                params = [Tensor(m[p.node.id]) if p.node.id in m else
                          gc.variable(g.variables[p.name], name=p.name) for p in stage.params]
            self.update = None
            if stage.params:
                total = [Tensor(a.node) for a in accs]
                if len(replicas) > 1:
                    total = [bind("all_reduce", a, op="mean", axis_size=len(replicas),
                                  group=tuple(replicas)) for a in total]
                updates = optimizer(None, params, grads=total, **kwargs)
                updates.update({a: a * 0.0 for a in accs})
                self.update = gc.compile({}, updates=updates)
                for exe in (self.forward, self.backward):
                    if exe is not None:
                        exe.share_variables(self.update)
        self.variables = self.update.variables if self.update else self.backward.variables


class PipelineStep:
    """One training step over a whole batch: call with the data placeholders' arrays by
    name; returns {"loss": mean loss over the micro-batches} on every process.
    `stats` after a step: stage(s), step and busy seconds, bubble against the ideal
    (p - 1) / (m + p - 1), stashed bytes at most."""

    def __init__(self, pipeline: Pipeline, programs: dict, stages: int, world: int):
        self.pipeline, self.programs, self.stages, self.world = pipeline, programs, stages, world
        self.stats: dict = {}

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
                      "stash_peak_bytes": self._stash_peak}
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
        if prog.residuals:
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

        def forward(i):
            feeds = self._data(prog, chunks[i])
            if s > 0:
                buf = np.empty(x_in.shape, np.dtype(_np_dtype(x_in.dtype)))
                feeds["pipeline/stage_input"] = _coll.receive(
                    buf, prev, ACTIVATION_TAG, f"the activation of micro-batch {i} from "
                    f"stage {s - 1} (rank {prev})")
            stash.append(feeds)

            if not prog.last:
                out = np.ascontiguousarray(self._forward(prog, feeds))
                sends.append((_coll.send(out, nxt, ACTIVATION_TAG), out))
            self._note_stash(stash)

        def backward(i):
            feeds = stash.popleft()
            if not prog.last:
                buf = np.empty(y.shape, np.dtype(_np_dtype(y.dtype)))
                feeds["pipeline/output_grad"] = _coll.receive(
                    buf, nxt, COTANGENT_TAG, f"the cotangent of micro-batch {i} from stage "
                    f"{s + 1} (rank {nxt})")
            out = self._call(prog.backward, **feeds)
            if prog.last:
                losses.append(float(out["loss"]))
            if s > 0:
                g = np.ascontiguousarray(out["input_grad"])
                sends.append((_coll.send(g, prev, COTANGENT_TAG), g))

        warmup = m if self.pipeline.schedule == "gpipe" else min(p - s - 1, m)
        for i in range(warmup):
            forward(i)
        for k in range(m - warmup):
            forward(warmup + k)
            backward(k)
        for k in range(m - warmup, m):
            backward(k)
        _coll.wait_all([r for r, _ in sends], f"stage {s}'s sends to its neighbours")
        return losses


def _np_dtype(dtype: str):
    from ..ir import dtypes
    return dtypes.to_numpy(dtype)
