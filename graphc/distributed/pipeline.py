"""Pipeline parallelism: a training step cut into stages, one per process, micro-batched.

`stage_boundary(x)` marks where one stage ends and the next begins (x's value passes on
unchanged: the same graph still compiles and trains in one process).
`Pipeline(microbatches, schedule).compile(loss, params, optimizer, **kwargs)` cuts the
loss's graph at its boundaries into stage graphs: stage s receives its input with a
`recv` graph op from stage s - 1's process and ends with a `send` of its output to stage
s + 1's (graphc/ir/ops/point_to_point.py); differentiating the stage's graph runs those
messages backwards (the output's cotangent received, the input's sent). For this
process's stage(s), three programs sharing one copy of the stage's variables:

  forward   receive the stage input, compute and send the output; return the forward
            values the backward reads (residuals), kept until the micro-batch's backward
  backward  residuals -> receive the output's cotangent, send the input's, adding the
            parameters' gradients into accumulators. With Pipeline(recompute=True) it
            recomputes the stage's forward from the stashed input instead (only stage
            inputs are kept); the last stage always runs forward and backward as one
  update    the optimizer on the accumulated gradients (their mean over micro-batches,
            all-reduced over data-parallel replicas of the stage), accumulators reset

The step (pipeline_schedule.py) runs the micro-batches in the GPipe order (all forwards,
then all backwards), 1F1B (after p - s - 1 warm-up forwards, stage s alternates one
forward and one backward, so at most p - s inputs are stashed) or interleaved 1F1B
(`chunks=v`: each of the p processes runs v stages, stage k on process k % p, and the
bubble shrinks v-fold). With N = p x d processes, rank r runs position r % p of
data-parallel replica r // p; one process runs every stage itself (its messages to
itself go through an in-process queue).
"""
from __future__ import annotations

import weakref

import numpy as np

from graphc_runtime import collectives as _coll
from graphc_runtime.errors import GraphcError

from ..api import Tensor, bind
from ..checkpoint import copy_regions
from ..ir import dtypes
from ..ir.graph import Graph
from ..ir.primitive import lookup
from ..ir.source import user_location
from ..passes.rematerialize import work_of as _work

_BOUNDARIES: "weakref.WeakKeyDictionary[Graph, list]" = weakref.WeakKeyDictionary()
SCHEDULES = ("1f1b", "gpipe", "interleaved")


def stage_boundary(x: Tensor) -> Tensor:
    """x, marked as the end of one pipeline stage and the input of the next."""
    if not isinstance(x, Tensor):
        raise GraphcError(f"stage_boundary: expected a Tensor, got {x!r}", user_location())
    out = bind("after", x)
    _BOUNDARIES.setdefault(x.graph, []).append(out.node.id)
    return out


class StageGraph:
    """One stage cut out of the model's graph: its own Graph; the token placeholder
    ordering the receive of its input and the received input (None for the first
    stage); its output and the token of the output's send (None for the last); the data
    placeholders it reads and its parameters."""

    def __init__(self, index: int, graph: Graph, token, x_in, y, sent, data: list,
                 params: list):
        self.index, self.graph, self.token, self.x_in = index, graph, token, x_in
        self.y, self.sent, self.data, self.params = y, sent, data, params


def message_tag(boundary: int) -> int:
    """The tag of the activations crossing boundary k (after stage k); their cotangents
    travel back with the next tag."""
    return 2 * boundary + 2


def split_stages(loss: Tensor, params: list, stages: int | None = None,
                 peer_of=lambda stage, count: 0, recompute: bool = False) -> list[StageGraph]:
    """Cut loss's graph at its stage boundaries (in the order they were marked); with
    `stages`, at the stages - 1 of them that balance the stages' estimated work best
    (a stage's forward and backward: 3 forwards; 4 where it recomputes its forward, as
    every stage but the last does with `recompute`).
    peer_of(k, count): the rank of the process running stage k of count (messages go
    there)."""
    graph, loc = loss.graph, user_location()
    if not isinstance(loss, Tensor) or loss.shape != () or not dtypes.is_float(loss.dtype):
        raise GraphcError(f"Pipeline.compile: the loss must be a float scalar, got "
                          f"{getattr(loss, 'node', loss)!r}", loc)
    needed = {n.id for n in graph.ancestors([loss.node])}
    cuts = [graph.nodes[i] for i in _BOUNDARIES.get(graph, []) if i in needed]
    for c in cuts:
        if not dtypes.is_float(c.dtype):
            raise GraphcError(f"the stage boundary marked at {c.loc} passes {c.type_str()}: "
                              f"stages pass float values (their cotangents flow back)", loc)
    if stages is not None:
        if not isinstance(stages, int) or not 1 <= stages <= len(cuts) + 1:
            raise GraphcError(f"stages={stages!r}: the loss has {len(cuts)} stage "
                              f"boundaries, so 1 to {len(cuts) + 1} stages", loc)
        if stages < len(cuts) + 1:
            work = [sum(_work(graph.nodes[i]) for i in ids if graph.nodes[i].inputs)
                    for ids in _segments(graph, loss, cuts, loc)[0]]
            cuts = [cuts[k] for k in balanced_cuts(work, stages, 0.75 if recompute else 1.0)]
    stage_nodes, owner = _segments(graph, loss, cuts, loc)
    wanted = {p.node.id: p for p in params}
    unused = [p for pid, p in wanted.items() if pid not in owner]
    if unused:
        raise GraphcError(f"parameter {unused[0].name!r} is not used by the loss", loc)
    ins = [None] + cuts
    outs = [c.inputs[0] for c in cuts] + [loss.node]
    return [_clone_stage(s, len(stage_nodes), graph, ids, ins[s], outs[s], wanted, peer_of)
            for s, ids in enumerate(stage_nodes)]


def _segments(graph, loss, cuts, loc) -> tuple[list, dict]:
    """Each stage's node ids between consecutive cuts, and which stage owns each node;
    refuses values crossing stages other than through a boundary."""
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
    return stage_nodes, owner


def balanced_cuts(work: list, stages: int, last_weight: float = 1.0) -> list[int]:
    """Which of the len(work) - 1 boundaries between consecutive segments to cut so that
    `stages` contiguous runs of segments have the smallest largest sum, the last run's
    sum times `last_weight` (exact, by dynamic programming); boundary k lies after
    segment k."""
    n = len(work)
    prefix = [0.0]
    for w in work:
        prefix.append(prefix[-1] + w)
    inf = float("inf")
    # best[j][i]: the smallest largest run when segments [0, i) form j runs
    best = [[inf] * (n + 1) for _ in range(stages + 1)]
    last = [[0] * (n + 1) for _ in range(stages + 1)]
    best[0][0] = 0.0
    for j in range(1, stages + 1):
        for i in range(j, n + 1):
            weight = last_weight if j == stages else 1.0
            for k in range(j - 1, i):
                v = max(best[j - 1][k], (prefix[i] - prefix[k]) * weight)
                if v < best[j][i]:
                    best[j][i], last[j][i] = v, k
    cuts, i = [], n
    for j in range(stages, 0, -1):
        i = last[j][i]
        if j > 1:
            cuts.append(i - 1)
    return sorted(cuts)


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
            else:
                m[nid] = new.add_node(n.op, [m[i.id] for i in n.inputs], n.attrs, n.shape,
                                      n.dtype, None, n.loc)
    return variables, placeholders


def _clone_stage(s, p, graph, ids, start, out, wanted, peer_of) -> StageGraph:
    from ..tensor import placeholder
    new = Graph(f"{graph.name}/stage{s}")
    m: dict[int, object] = {}
    token = x_in = sent = None
    if start is not None:
        if any(not isinstance(d, int) for d in start.shape):
            raise GraphcError(f"the stage boundary marked at {start.loc} passes "
                              f"{start.type_str()}: stages pass values of static shapes",
                              user_location())
        with new:
            token = placeholder((), start.dtype, name="pipeline/token")
            x_in = bind("recv", token, shape=tuple(start.shape), dtype=start.dtype,
                        peer=peer_of(s - 1, p), tag=message_tag(s - 1))
        m[start.id] = x_in.node
    variables, data = _copy_nodes(graph, ids, new, m, f"pipeline stage {s}")
    copy_regions(graph, new, m)          # gc.checkpoint regions recompute in the stage too
    kept = {m[pid].id for pid in wanted if pid in m}
    params = [v for v in variables if v.node.id in kept]
    y = Tensor(m[out.id])
    if s < p - 1:
        with new:
            sent = bind("send", y, peer=peer_of(s + 1, p), tag=message_tag(s))
    return StageGraph(s, new, token, x_in, y, sent, data, params)


def _backward_graph(g: Graph, forward_ids: set, outputs: list, seed: Tensor,
                    recompute: bool = False):
    """The nodes of `outputs` (a stage's gradients) that are not forward nodes, copied
    into a new graph where the forward values they read are placeholders
    ("pipeline/residual<k>"): (new graph, old->new map, residual nodes in order).
    Forward values computed from variables and constants alone, and views (broadcasts,
    reshapes, transposes) of other residuals, are recomputed there instead of kept;
    with `recompute`, every forward value but the received input is. (A received value
    is never recomputed: that would receive it again.)"""
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
            if n.op != "recv" and (recompute or n.id in no_data or not n.inputs):
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
    step callable on whole batches (split into `microbatches` along axis 0).

    schedule: "1f1b", "gpipe" or "interleaved" (with chunks = v > 1 stages per process:
    p x v stages, stage k on process k % p; microbatches a multiple of p).
    mesh: the processes' grid (Mesh(dp, tp, pp); default: every process a pipeline
    position or a data-parallel replica of one). zero: 1 or 2 shards each stage's
    optimizer state over its data-parallel replicas (graphc/distributed/zero.py).
    stages: cut at only that many stages' boundaries among those marked, chosen to
    balance the stages' estimated work (multiply-adds and elementwise work of each
    stage's forward)."""

    def __init__(self, microbatches: int, schedule: str = "1f1b", recompute: bool = False,
                 mesh=None, zero: int = 0, stages: int | None = None, chunks: int = 1):
        if not isinstance(microbatches, int) or microbatches < 1:
            raise GraphcError(f"Pipeline: microbatches must be a positive int, got "
                              f"{microbatches!r}")
        if schedule not in SCHEDULES:
            raise GraphcError(f"Pipeline: schedule must be one of {SCHEDULES}, got "
                              f"{schedule!r}")
        if zero not in (0, 1, 2):
            raise GraphcError(f"Pipeline: zero must be 0, 1 or 2, got {zero!r}")
        if not isinstance(chunks, int) or isinstance(chunks, bool) or chunks < 1:
            raise GraphcError(f"Pipeline: chunks must be a positive int, got {chunks!r}")
        if (schedule == "interleaved") != (chunks > 1):
            raise GraphcError(f"Pipeline: the interleaved schedule runs chunks > 1 stages "
                              f"per process, the others one (schedule={schedule!r}, "
                              f"chunks={chunks})")
        self.microbatches, self.schedule = microbatches, schedule
        self.recompute, self.mesh, self.zero = bool(recompute), mesh, zero
        self.stages, self.chunks = stages, chunks

    def _positions(self, count: int) -> int:
        """The pipeline's processes for `count` stages (chunks of them each)."""
        if count % self.chunks:
            raise GraphcError(f"the model has {count} pipeline stages, not a multiple of "
                              f"chunks={self.chunks}", user_location())
        pp = count // self.chunks
        if self.chunks > 1 and self.microbatches % pp:
            raise GraphcError(f"the interleaved schedule takes a multiple of the {pp} "
                              f"pipeline processes as microbatches, got "
                              f"{self.microbatches}", user_location())
        return pp

    def compile(self, loss: Tensor, params, optimizer, sharded=(), **kwargs):
        """`sharded`: the parameters split across the tensor-parallel group (their
        gradients are not summed over it; the others' are)."""
        from . import _check_same_program
        from .mesh import Mesh
        from .pipeline_schedule import PipelineStep
        from ..passes.program import Program
        params = list(params)
        world = _coll.world_size()
        if world > 1:
            _check_same_program(world, Program(loss.graph, [loss.node], [], {}),
                                any_groups=True)
        me, chunks = _coll.rank() if world > 1 else 0, self.chunks

        def peer_of(k: int, count: int) -> int:     # the process running stage k of count
            pp = max(1, count // chunks)
            return 0 if world == 1 else me - me % pp + k % pp

        stages = split_stages(loss, params, self.stages, peer_of, self.recompute)
        p = self._positions(len(stages))
        mesh = self.mesh
        if mesh is None:
            if world > 1 and world % p:
                raise GraphcError(f"the model has {len(stages)} pipeline stages on {p} "
                                  f"processes each replica, but the run has {world} "
                                  f"processes; run a multiple of {p} (pipeline x "
                                  f"data-parallel replicas)", user_location())
            mesh = Mesh(dp=world // p if world > 1 else 1, pp=p)
        elif mesh.pp != p:
            raise GraphcError(f"the model has {len(stages)} pipeline stages on {p} "
                              f"processes ({self.chunks} each), but the mesh has "
                              f"pp={mesh.pp}", user_location())
        split = {t.name for t in sharded}
        mine = [s for s in range(len(stages)) if mesh.stage is None or s % p == mesh.stage]
        programs = {s: StagePrograms(stages[s], self, optimizer, kwargs, s == len(stages) - 1,
                                     mesh, split) for s in mine}
        for prog in programs.values():
            prog.setup(mesh)
        return PipelineStep(self, programs, len(stages), world, mesh)


class StagePrograms:
    """A stage's forward, backward and update programs (see the module's docstring)."""

    def __init__(self, stage: StageGraph, pipe: Pipeline, optimizer, kwargs, last: bool,
                 mesh, split: set):
        import graphc as gc
        self.stage, self.last = stage, last
        g = stage.graph
        token = [stage.token] if stage.token is not None else []
        inputs = token + stage.data
        self.sharded = {p.name for p in stage.params if p.name in split}
        with g:
            if last:           # every tensor-parallel peer seeds: 1/tp each (TensorParallel)
                target = stage.y
                seed = gc.full((), 1.0 / (pipe.microbatches * mesh.tp), stage.y.dtype)
            else:              # the send's cotangent only orders the output's receive
                target, seed = stage.sent, gc.full((), 1.0, stage.sent.dtype)
            forward_ids = {n.id for n in g.ancestors([target.node])}
            grads = gc.vjp([target], token + stage.params, [seed])
        self.residuals = None          # None: no forward program (the last stage)
        if last:                       # forward and backward in one program
            self.forward, bg, m, back_inputs = None, g, None, inputs
        else:                          # the forward program hands its residuals over
            bg, m, residuals = _backward_graph(g, forward_ids, grads, seed, pipe.recompute)
            self.residuals = len(residuals)
            with g:
                self.forward = gc.compile({"sent": stage.sent, "residuals": [
                    Tensor(r) for r in residuals]}, inputs=inputs)
            by_name = {n.attrs["name"]: Tensor(n) for n in bg.placeholders()}
            back_inputs = [by_name[n] for n in sorted(by_name)]
            grads = [Tensor(m[t.node.id]) if t.node.id in m else t for t in grads]
        with bg:
            accs = [gc.variable(np.zeros(p.shape, np.dtype(g.variables[p.name].dtype)),
                                name=bg.unique_name(f"{p.name}/pipeline_grad"))
                    for p in stage.params]
            outputs = {}
            if token:
                outputs["sent"] = grads[0]
            if last:
                outputs["loss"] = stage.y
            p_grads = grads[len(token):]
            self.backward = gc.compile(outputs, inputs=back_inputs,
                                       updates={a: a + gp for a, gp in zip(accs, p_grads)})
            if m is None:
                params = stage.params
            else:                      # parameters the backward does not read, as well
                params = [Tensor(m[p.node.id]) if p.node.id in m else
                          gc.variable(g.variables[p.name], name=p.name) for p in stage.params]
            self.update, self.shards = None, []
            if stage.params:
                updates = self._updates(params, accs, optimizer, kwargs, pipe.zero, mesh)
                updates.update({a: a * 0.0 for a in accs})
                self.update = gc.compile({}, updates=updates)
                for exe in (self.forward, self.backward):
                    if exe is not None:
                        exe.share_variables(self.update)
        self.variables = self.update.variables if self.update else self.backward.variables

    def _updates(self, params, accs, optimizer, kwargs, zero, mesh) -> dict:
        """The optimizer on the accumulated gradients: summed over the tensor-parallel
        group for replicated parameters, averaged (or sharded, zero) over the stage's
        data-parallel replicas."""
        from .zero import shard_optimizer
        total = []
        for p, a in zip(params, accs):
            if mesh.tp > 1 and p.name not in self.sharded:
                a = bind("all_reduce", a, op="sum", axis_size=mesh.tp, group=mesh.tp_group)
            total.append(a)
        if zero:
            updates, self.shards = shard_optimizer(zero, optimizer, params, total, kwargs,
                                                   mesh.dp, mesh.dp_group)
            return updates
        if mesh.dp > 1:
            total = [bind("all_reduce", a, op="mean", axis_size=mesh.dp, group=mesh.dp_group)
                     for a in total]
        return optimizer(None, params, grads=total, **kwargs)

    def setup(self, mesh) -> None:
        """Equal starting values: replicated parameters from the first rank of the
        stage's group, tensor-parallel shards from the first data-parallel replica;
        then this rank's optimizer-state shards."""
        from .zero import initialize, sharded_names
        variables = self.variables
        if mesh.world > 1:
            per_rank = sharded_names(self.shards)
            params = {p.name for p in self.stage.params}
            for name in variables:
                if name in per_rank:
                    continue
                owner = name if name in params else name.rsplit("/", 1)[0]   # its state
                group = mesh.dp_group if owner in self.sharded else mesh.stage_group
                if len(group) > 1:
                    _coll.broadcast(dict.__getitem__(variables, name),
                                    f"the broadcast of variable {name!r}", group)
        initialize(self.shards, variables, mesh.dp_index)
