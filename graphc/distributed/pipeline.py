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


def split_stages(loss: Tensor, params: list, stages: int | None = None) -> list[StageGraph]:
    """Cut loss's graph at its stage boundaries (in the order they were marked); with
    `stages`, at the stages - 1 of them that balance the stages' estimated work best."""
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
            cuts = [cuts[k] for k in balanced_cuts(work, stages)]
    stage_nodes, owner = _segments(graph, loss, cuts, loc)
    wanted = {p.node.id: p for p in params}
    unused = [p for pid, p in wanted.items() if pid not in owner]
    if unused:
        raise GraphcError(f"parameter {unused[0].name!r} is not used by the loss", loc)
    ins = [None] + cuts
    outs = [c.inputs[0] for c in cuts] + [loss.node]
    return [_clone_stage(s, graph, ids, ins[s], outs[s], wanted)
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


def balanced_cuts(work: list, stages: int) -> list[int]:
    """Which of the len(work) - 1 boundaries between consecutive segments to cut so that
    `stages` contiguous runs of segments have the smallest largest sum (exact, by
    dynamic programming); boundary k lies after segment k."""
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
            for k in range(j - 1, i):
                v = max(best[j - 1][k], prefix[i] - prefix[k])
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
    copy_regions(graph, new, m)          # gc.checkpoint regions recompute in the stage too
    kept = {m[pid].id for pid in wanted if pid in m}
    params = [v for v in variables if v.node.id in kept]
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
    step callable on whole batches (split into `microbatches` along axis 0).

    mesh: the processes' grid (Mesh(dp, tp, pp); default: every process a stage or a
    data-parallel replica of one). zero: 1 or 2 shards each stage's optimizer state over
    its data-parallel replicas (graphc/distributed/zero.py). stages: cut at only that
    many stages' boundaries among those marked, chosen to balance the stages' estimated
    work (multiply-adds and elementwise work of each stage's forward)."""

    def __init__(self, microbatches: int, schedule: str = "1f1b", recompute: bool = False,
                 mesh=None, zero: int = 0, stages: int | None = None):
        if not isinstance(microbatches, int) or microbatches < 1:
            raise GraphcError(f"Pipeline: microbatches must be a positive int, got "
                              f"{microbatches!r}")
        if schedule not in SCHEDULES:
            raise GraphcError(f"Pipeline: schedule must be one of {SCHEDULES}, got "
                              f"{schedule!r}")
        if zero not in (0, 1, 2):
            raise GraphcError(f"Pipeline: zero must be 0, 1 or 2, got {zero!r}")
        self.microbatches, self.schedule = microbatches, schedule
        self.recompute, self.mesh, self.zero = bool(recompute), mesh, zero
        self.stages = stages

    def compile(self, loss: Tensor, params, optimizer, sharded=(), **kwargs):
        """`sharded`: the parameters split across the tensor-parallel group (their
        gradients are not summed over it; the others' are)."""
        from . import _check_same_program
        from .mesh import Mesh
        from .pipeline_schedule import PipelineStep
        from ..passes.program import Program
        params = list(params)
        stages = split_stages(loss, params, self.stages)
        world, p = _coll.world_size(), len(stages)
        mesh = self.mesh
        if mesh is None:
            if world > 1 and world % p:
                raise GraphcError(f"the model has {p} pipeline stages but the run has "
                                  f"{world} processes; run a multiple of {p} (stages x "
                                  f"data-parallel replicas)", user_location())
            mesh = Mesh(dp=world // p if world > 1 else 1, pp=p)
        elif mesh.pp != p:
            raise GraphcError(f"the model has {p} pipeline stages but the mesh has "
                              f"pp={mesh.pp}", user_location())
        if world > 1:
            _check_same_program(world, Program(loss.graph, [loss.node], [], {}),
                                any_groups=True)
        split = {t.name for t in sharded}
        mine = [mesh.stage] if mesh.stage is not None else list(range(p))
        programs = {s: StagePrograms(stages[s], self, optimizer, kwargs, s == p - 1, mesh,
                                     split) for s in mine}
        for prog in programs.values():
            prog.setup(mesh)
        return PipelineStep(self, programs, p, world, mesh)


class StagePrograms:
    """A stage's forward, backward and update programs (see the module's docstring)."""

    def __init__(self, stage: StageGraph, pipe: Pipeline, optimizer, kwargs, last: bool,
                 mesh, split: set):
        import graphc as gc
        self.stage, self.last = stage, last
        g = stage.graph
        first = [stage.x_in] if stage.x_in is not None else []
        inputs = first + stage.data
        self.sharded = {p.name for p in stage.params if p.name in split}
        with g:
            if last:           # every tensor-parallel peer seeds: 1/tp each (TensorParallel)
                seed, extra = gc.full((), 1.0 / (pipe.microbatches * mesh.tp),
                                      stage.y.dtype), []
            else:
                seed = gc.placeholder(stage.y.shape, stage.y.dtype,
                                      name="pipeline/output_grad")
                extra = [seed]
            forward_ids = {n.id for n in g.ancestors([stage.y.node])}
            grads = gc.vjp([stage.y], first + stage.params, [seed])
        self.residuals = None          # None: the forward returns the output alone
        if last or pipe.recompute:     # the backward program recomputes the forward
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
