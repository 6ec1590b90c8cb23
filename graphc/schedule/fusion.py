"""XLA-style fusion: decide which values get a buffer and group the rest into kernels.

1. Materialize: reductions, dots, convs, scatters, collectives, program results, and any
   elementwise/view value whose recomputation in each consumer would cost more than a
   round trip through memory (cost model below). Operands of dot/conv/scatter may be
   pure views of a buffer (folded into their index arithmetic), nothing else.
2. Group: each materialized value with the unmaterialized values it depends on
   (loop fusion; producers with several consumers are duplicated into each).
3. Merge groups, checked on the contracted group graph (digraph.py) so that no cycle
   appears, and by building the merged kernel (a merge the kernel IR cannot express is
   skipped): row fusion of reductions over one domain with their elementwise consumers
   (softmax and layer norm become one kernel), multi-output fusion of producer/consumer
   and sibling loop kernels of one shape, and output fusion of elementwise epilogues into
   dot and conv. Collectives are never merged.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from graphc_runtime.dims import hint

from ..kernels import builders
from ..kernels import kernel as K
from ..ir.graph import Node
from ..ir.primitive import is_transcendental, lookup
from ..passes.program import Program
from .digraph import DiGraph
from .policy import SchedulePolicy
from .merge_rules import MAX_GROUP_DEPTH, compatible, merged_kind
from .strides import view_strides

DUPLICATION_LIMIT = 24        # recompute budget, in cheap-op units per output element


@dataclass
class Group:
    id: int
    kind: str                        # loop, row, dot, conv, scatter, collective, control
    roots: list                      # nodes whose values this kernel stores
    members: dict                    # node id -> Node computed inside (roots included)
    anchor: Node | None = None       # the dot/conv/scatter/collective node, if any

    def shape(self):
        return self.roots[0].shape if self.roots else None


@dataclass
class FusionPlan:
    groups: list
    materialized: set = field(default_factory=set)
    node_group: dict = field(default_factory=dict)     # materialized node id -> group id
    decisions: list = field(default_factory=list)      # human-readable log


def node_class(node: Node) -> str:
    if node.op in ("parameter", "variable"):
        return "buffer"
    if node.op == "constant":
        return "buffer" if node.attrs["value"].size != 1 else "inline"
    if node.op in K.REDUCE_KIND:
        return "reduce"
    if node.op in ("dot_general", "winograd_conv2d", "conv", "scatter_add"):
        return {"dot_general": "dot", "winograd_conv2d": "dot", "conv": "conv",
                "scatter_add": "scatter"}[node.op]
    if lookup(node.op).kind == "collective":
        return "collective"
    if node.op == "get":
        return "projection"
    if lookup(node.op).kind == "control":
        return "control"
    return "fusible"


def _read_ratio(node: Node, leaves: dict) -> float:
    """Elements read from the buffers beneath `node`, per element of it."""
    size = max(hint(node.size), 1)
    return sum(min(hint(s), size) for s in leaves.values()) / size


def _rereads(node: Node, users, leaves: dict) -> bool:
    """Whether recomputing `node` in each of its consumers' kernels reads more memory than
    writing it once and reading it back: with k kernels (consumers of distinct shapes
    land in distinct kernels) and buffers of L times its size beneath it, k*L against
    1 + k. A residual sum over several products (a ResNet's skip connections) otherwise
    rereads every earlier product in each later kernel."""
    read = _read_ratio(node, leaves)
    kernels = len({tuple(node.shape) if u.op in K.REDUCE_KIND else tuple(u.shape)
                   for u in users})
    return kernels > 1 and kernels * read > kernels + 1


UPSTREAM_LIMIT = 512    # inlined ops a recomputation cost counts one by one; past it, as a tree


def _math_under_transpose(n: Node, users, cls, materialized, limit: int = 32):
    """Where n transposes (through pads and reshapes, each read by the next alone) a
    value computed by math functions (the phase planes of a strided depthwise
    convolution over SiLU's logistic), that value: it is then written in its own layout,
    where its kernel vectorizes along its rows, and the transpose copies it. Else None.
    (EfficientNet's 16 -> 96 channels at 112 x 112 with SiLU, then the depthwise 3 x 3
    at stride 2: 1.2 ms with the logistic in the planes' kernel, 0.7 in the product's.)"""
    if n.op != "transpose":
        return None
    v = n.inputs[0]
    while v.op in ("reshape", "pad") and cls[v.id] == "fusible" and \
            v.id not in materialized and len(users[v.id]) == 1:
        v = v.inputs[0]
    if cls[v.id] != "fusible" or v.id in materialized or len(users[v.id]) != 1:
        return None
    seen, stack = set(), [v]
    while stack and len(seen) < limit:     # v and the fused values it is computed from
        x = stack.pop()
        if x.id in seen or x.id in materialized or cls[x.id] != "fusible":
            continue
        seen.add(x.id)
        if is_transcendental(x.op):
            return v
        stack.extend(x.inputs)
    return None


def _recompute_cost(n: Node, materialized: set, cost: dict, upstream: dict) -> int:
    """The ops computing n again takes where its inputs are inlined: each op once, however
    many paths reach it (a kernel computes a value once for all its readers: x * x, or
    where(isnan(x), a, x), does not count x twice). `upstream` gets n's ops (id -> own
    cost; None past UPSTREAM_LIMIT ops, where the cost sums over the inputs as over a
    tree)."""
    inputs = list({i.id: i for i in n.inputs if i.id not in materialized and
                   i.id in upstream}.values())
    own = lookup(n.op).cost
    sets = [upstream[i.id] for i in inputs]
    if not any(u is None for u in sets):
        ups = dict(sets[0]) if sets else {}
        for u in sets[1:]:
            ups.update(u)
        ups[n.id] = own
        if len(ups) <= UPSTREAM_LIMIT:
            upstream[n.id] = ups
            return sum(ups.values())
    upstream[n.id] = None
    return own + sum(cost[i.id] for i in inputs)


def _readers(n: Node, users: dict) -> list:
    """n's readers, as recomputing n would serve them: where(isnan(n), a, n) (a select
    of n by the compare n != n, which only it reads) is one reader, and a reader that
    takes n twice counts once."""
    distinct = list({u.id: u for u in users[n.id]}.values())
    if len(distinct) == 2:
        test, pick = sorted(distinct, key=lambda u: u.op != "compare")
        if test.op == "compare" and pick.op == "select" and \
                test.inputs[0] is n and test.inputs[1] is n and \
                pick.inputs[0] is test and n in pick.inputs[1:] and users[test.id] == [pick]:
            return [pick]
    return distinct


def plan(program: Program, policy: SchedulePolicy = SchedulePolicy()) -> FusionPlan:
    fuse = policy.fuse
    nodes = program.live_nodes()
    users: dict[int, list[Node]] = {n.id: [] for n in nodes}
    for n in nodes:
        for i in n.inputs:
            users[i.id].append(n)
    roots = {n.id for n in program.roots()}
    cls = {n.id: node_class(n) for n in nodes}
    decisions = []

    materialized: set[int] = set()
    cost: dict[int, int] = {}
    pure_view: dict[int, bool] = {}
    leaves: dict[int, dict] = {}        # buffers a value reads if recomputed: id -> size
    upstream: dict[int, dict | None] = {}  # the inlined ops a value is computed from
    row_shapes: dict[int, set] = {}     # row counts of the reductions a value depends on
    for n in nodes:
        c = cls[n.id]
        row_shapes[n.id] = set().union(*(row_shapes[i.id] for i in n.inputs)) \
            if n.inputs else set()
        if c == "reduce":
            row_shapes[n.id] = row_shapes[n.id] | {n.size}
        if c in ("buffer", "inline"):
            pure_view[n.id] = c == "buffer"
            cost[n.id] = 0
            continue
        if c != "fusible":
            materialized.add(n.id)
            pure_view[n.id] = True
            cost[n.id] = 0
            continue
        # a reversed view has negative strides, which BLAS cannot take: such dot
        # operands are materialized (they are small next to the product)
        pure_view[n.id] = lookup(n.op).remap and n.op != "reverse" and \
            all(pure_view[i.id] for i in n.inputs)
        cost[n.id] = _recompute_cost(n, materialized, cost, upstream)
        leaves[n.id] = {}
        for i in n.inputs:
            if i.id in materialized or cls[i.id] == "buffer":
                leaves[n.id][i.id] = hint(i.size)
            elif i.id in leaves:
                leaves[n.id].update(leaves[i.id])
        if not fuse or n.id in roots:
            materialized.add(n.id)
            continue
    # decide, consumers known: walk backwards so operand rules see final choices
    through: dict[int, str] = {}    # views read in place -> the view they serve
    for n in reversed(nodes):
        if cls[n.id] != "fusible" or n.id in materialized:
            continue
        us = _readers(n, users)
        # a window_view (overlapping windows: a convolution's patch matrix) is never
        # written out: it and a reshape under it are folded into its consumers' reads
        # (a product's operand, a depthwise convolution's terms), and the value beneath
        # is materialized instead (an image padded once, read without guards)
        if us and (n.op == "window_view" or n.op == "reshape" and
                   all(u.id in through and u.op == "window_view" for u in us)):
            through[n.id] = "window_view"
            continue
        # a broadcast read by products only (a convolution's kernel for each image): the
        # value under it is written once, not once per copy
        if n.op == "broadcast_in_dim" and us and all(
                cls[u.id] == "dot" for u in us) and not pure_view[n.id]:
            through[n.id] = "broadcast_in_dim"
            continue
        via = [through[u.id] for u in us if u.id in through]
        if via:
            materialized.add(n.id)
            decisions.append(f"materialize %{n.id} ({n.op}): read in place through a "
                             f"{via[0]}")
            under = _math_under_transpose(n, users, cls, materialized)
            if under is not None:
                materialized.add(under.id)
                decisions.append(f"materialize %{under.id} ({under.op}) under %{n.id} "
                                 f"(transpose): its math functions in its own layout")
            continue
        if any(cls[u.id] == "control" for u in us):
            materialized.add(n.id)
            decisions.append(f"materialize %{n.id} ({n.op}): operand of a loop or cond")
            continue
        if any(cls[u.id] == "collective" or u.op == "winograd_conv2d" for u in us) or any(
                cls[u.id] in ("dot", "conv", "scatter") for u in us) and not pure_view[n.id]:
            materialized.add(n.id)
            decisions.append(f"materialize %{n.id} ({n.op}): operand of a "
                             f"dot/conv/scatter/collective")
            continue
        if any(u.op == "dot_general" for u in us) and view_strides(
                n, lambda x: x.id in materialized or cls[x.id] != "fusible"
                or not pure_view[x.id]) is None:
            materialized.add(n.id)
            decisions.append(f"materialize %{n.id} ({n.op}): a product's operand that no "
                             f"strides give (written out for the GEMM kernels)")
            continue
        broadcasts = any(u.op == "broadcast_in_dim" and hint(u.size) > hint(n.size) for u in us)
        if len(us) > 1 or broadcasts:
            # recomputation per consumer element: broadcasts repeat each value, other
            # consumers (elementwise, views, concatenate, reductions) read it once; a
            # per-row value (the shape of a reduction it depends on) is computed once per
            # row inside a row kernel
            amplification = len(us) if n.size in row_shapes[n.id] else sum(
                max(hint(u.size), 1) / max(hint(n.size), 1) if u.op == "broadcast_in_dim" else 1
                for u in us)
            if cost[n.id] * amplification > DUPLICATION_LIMIT * max(1, len(us) // 2 + 1) \
                    and cost[n.id] > 0:
                x = n.inputs[0] if n.op == "transpose" else None
                if x is not None and cls[x.id] == "fusible" and users[x.id] == [n]:
                    # the value under a transpose is written in its own layout (its
                    # kernel vectorizes there); its readers take the transpose as strides
                    materialized.add(x.id)
                    decisions.append(f"materialize %{x.id} ({x.op}) under %{n.id} "
                                     f"(transpose): recomputing it in {len(us)} consumer(s) "
                                     f"costs {cost[n.id]} ops x {amplification:.1f}")
                    continue
                materialized.add(n.id)
                decisions.append(f"materialize %{n.id} ({n.op}): recomputing it in "
                                 f"{len(us)} consumer(s) costs {cost[n.id]} ops x "
                                 f"{amplification:.1f}")
            elif _rereads(n, us, leaves[n.id]):
                materialized.add(n.id)
                decisions.append(f"materialize %{n.id} ({n.op}): recomputing it in "
                                 f"{len(us)} consumers reads "
                                 f"{_read_ratio(n, leaves[n.id]):.1f}x its size in each")
            elif len(us) > 1 and cost[n.id] > 0:
                decisions.append(f"duplicate %{n.id} ({n.op}) into {len(us)} consumers "
                                 f"(cost {cost[n.id]})")

    # a chain of inlined ops longer than MAX_GROUP_DEPTH is cut: every MAX_GROUP_DEPTH-th
    # value is materialized
    depth: dict[int, int] = {}
    for n in nodes:
        d = 1 + max((depth[i.id] for i in n.inputs if i.id not in materialized and
                     cls[i.id] in ("fusible", "inline")), default=0)
        if n.id not in materialized and cls[n.id] == "fusible" and d >= MAX_GROUP_DEPTH:
            materialized.add(n.id)
            decisions.append(f"materialize %{n.id} ({n.op}): a chain of {d} fused ops "
                             f"reaches the depth limit {MAX_GROUP_DEPTH}")
        depth[n.id] = d

    groups = []
    node_group = {}
    for n in nodes:
        if n.id not in materialized or cls[n.id] == "projection":
            continue
        if cls[n.id] == "control":       # the loop/cond and the results read from it
            gets = sorted((u for u in users[n.id] if u.op == "get"), key=lambda u: u.id)
            g = Group(len(groups), "control", gets, {n.id: n, **{u.id: u for u in gets}}, n)
            groups.append(g)
            for m in [n] + gets:
                node_group[m.id] = g.id
            continue
        members = {}
        stack = [n]
        while stack:
            m = stack.pop()
            if m.id in members:
                continue
            members[m.id] = m
            for i in m.inputs:
                if i.id not in materialized and cls[i.id] in ("fusible", "inline"):
                    stack.append(i)
        c = cls[n.id]
        kind = {"fusible": "loop", "reduce": "row"}.get(c, c)
        g = Group(len(groups), kind, [n], members, n if c in ("dot", "conv", "scatter",
                                                              "collective") else None)
        groups.append(g)
        node_group[n.id] = g.id
    plan_ = FusionPlan(groups, materialized, node_group, decisions)
    if fuse:
        _merge(plan_, program, users, roots, policy)
    return plan_


# -- merging -------------------------------------------------------------------------------

def group_graph(plan_: FusionPlan) -> DiGraph:
    """Groups, and an edge from each group to the groups that read a value it writes."""
    g = DiGraph(grp.id for grp in plan_.groups)
    for grp in plan_.groups:
        for i in _external_inputs(grp):
            src = plan_.node_group.get(i.id)
            if src is not None and src != grp.id:
                g.add_edge(src, grp.id)
    return g


def _external_inputs(grp: Group) -> list:
    """The nodes a group's members read from outside it, in the order they are first
    read; kept on the group (its members never change: a merge makes a new group)."""
    found = grp.__dict__.get("_external_inputs")
    if found is None:
        first: dict = {}
        for m in grp.members.values():
            for i in m.inputs:
                if i.id not in grp.members:
                    first.setdefault(i.id, i)
        found = grp.__dict__["_external_inputs"] = list(first.values())
    return found


def _creates_cycle(graph: DiGraph, a: int, b: int) -> bool:
    for x, y in ((a, b), (b, a)):
        for s in graph.successors(x):
            if s != y and graph.has_path(s, y):
                return True
    return False


def _merge(plan_: FusionPlan, program: Program, users, program_roots,
           policy: SchedulePolicy) -> None:
    pads = policy.rearranged_epilogues
    # verdicts that depend only on the two groups (a merge makes a new Group object, so
    # a verdict is never asked again of a changed group): each merge rescans every pair
    compatible_: dict = {}         # (id a, id b, edge) -> (a, b, compatible)
    refused: dict = {}             # (id a, id b, root ids) -> (a, b): the probe did not fit
    changed = True
    while changed:
        changed = False
        graph = group_graph(plan_)
        alive = {g.id: g for g in plan_.groups}
        pairs = list(graph.edges()) + _sibling_pairs(plan_, alive)
        for a_id, b_id in pairs:
            if a_id not in alive or b_id not in alive or a_id == b_id:
                continue
            a, b = alive[a_id], alive[b_id]
            if a.kind == "collective" or b.kind == "collective":
                continue
            pc = graph.has_edge(a_id, b_id)
            key = (id(a), id(b), pc)
            if key not in compatible_:
                compatible_[key] = (a, b, compatible(a, b, pc, pads))
            if not compatible_[key][2]:
                continue
            if _creates_cycle(graph, a_id, b_id):
                continue
            kind = merged_kind(a, b)
            anchor = a.anchor or b.anchor
            roots = a.roots + [r for r in b.roots if r.id not in {x.id for x in a.roots}]
            members = dict(a.members)
            members.update(b.members)
            roots = _needed_roots(roots, members, plan_, alive, a_id, b_id, program_roots,
                                  users, anchor)
            tried = (id(a), id(b), tuple(r.id for r in roots))
            if tried in refused:
                continue
            kernel = builders.probe(Group(a.id, kind, roots, members, anchor))
            if kernel is None or not policy.fits(kernel):
                refused[tried] = (a, b)
                continue
            merged = Group(a.id, kind, roots, members, anchor)
            plan_.groups = [merged if g.id == a.id else g for g in plan_.groups
                            if g.id != b.id]
            for r in a.roots + b.roots:
                plan_.node_group.pop(r.id, None)
                plan_.materialized.discard(r.id)
            for r in roots:
                plan_.node_group[r.id] = merged.id
                plan_.materialized.add(r.id)
            plan_.decisions.append(f"merge group {b.id} into {a.id} ({kind}): roots "
                                   + ", ".join(f"%{r.id}" for r in roots))
            changed = True
            break


def _read_in_place(node: Node, users, members) -> bool:
    """Whether a member reads `node` through a window_view (directly or reshaped)."""
    for u in users[node.id]:
        if u.id in members and (u.op == "window_view" or u.op == "reshape" and
                                _read_in_place(u, users, members)):
            return True
    return False


def _needed_roots(roots, members, plan_, alive, a_id, b_id, program_roots, users, anchor):
    """Roots still read outside the merged group (or results, or the dot/conv itself)."""
    keep = []
    for r in roots:
        if r.id in program_roots or (anchor is not None and r is anchor):
            keep.append(r)
            continue
        if _read_in_place(r, users, members):
            keep.append(r)          # stays written (a layout epilogue's padded copy)
            continue
        outside = any(u.id in g.members for u in users[r.id]
                      for gid, g in alive.items() if gid not in (a_id, b_id))
        if outside:
            keep.append(r)
    return keep


DATA_MOVEMENT = {"concatenate", "pad", "gather"}


def _sibling_pairs(plan_: FusionPlan, alive) -> list:
    """Loop groups of one shape that read a common buffer. Groups that rearrange data
    (concatenate, pad, gather) read it at different places, so merging them saves no
    memory traffic and makes a slower loop: they are left alone."""
    readers: dict = {}
    for g in plan_.groups:
        if g.kind != "loop" or _moves_data(g):
            continue
        for i in _external_inputs(g):
            if hint(i.size) > 1:
                readers.setdefault(i.id, set()).add(g.id)
    pairs = []
    for ids in readers.values():
        ids = sorted(ids)
        for x in ids[1:]:
            if alive[ids[0]].shape() == alive[x].shape():
                pairs.append((ids[0], x))
    return pairs


def _moves_data(g: Group) -> bool:
    moves = g.__dict__.get("_moves_data")
    if moves is None:
        moves = g.__dict__["_moves_data"] = any(m.op in DATA_MOVEMENT
                                                for m in g.members.values())
    return moves


def describe(plan_: FusionPlan) -> str:
    """The `fused` dump: one block per group with its roots and members."""
    lines = []
    for g in plan_.groups:
        roots = ", ".join(f"%{r.id}" for r in g.roots)
        lines.append(f"group {g.id} [{g.kind}] roots {roots}: "
                     + " ".join(f"%{i}:{m.op}" for i, m in sorted(g.members.items())))
    if plan_.decisions:
        lines.append("decisions:")
        lines += ["  " + d for d in plan_.decisions]
    return "\n".join(lines)
