"""rematerialize: recompute values before late uses instead of keeping them live.

For `gc.compile(..., memory_budget=bytes)`. The program's values are laid out in
topological order and their live ranges estimated (a value occupies its bytes from its
definition to its last use; sources and views take none). At the estimated peak, the
values live across it but idle there (used before and again only well after) are the
candidates: each is recomputed just before its next use from values live at that point
anyway (sources, values used there or later), recomputing missing operands in turn up
to a few levels. The cheapest per byte freed are taken until the estimate drops by the
excess. Copies read their operands through `after(x, gate)` (ir/ops/ordering.py), gated
on a value computed just before the use, so the schedule cannot hoist them back.
The compiler lowers again and repeats while the planned arena is over the budget.
"""
from __future__ import annotations

from ..ir.primitive import lookup
from .program import Program, rebuild

SOURCES = ("constant", "parameter", "variable", "iota", "dim_size")
MIN_IDLE = 2          # positions a value must sit unused around the peak to be a candidate
MAX_DEPTH = 6         # levels of operands recomputed for one value


def _takes_memory(node) -> bool:
    return node.op not in SOURCES and not lookup(node.op).remap and node.op != "get"


def _nbytes(node) -> int:
    return node.nbytes if all(isinstance(d, int) for d in node.shape) else 0


def work_of(node) -> float:
    """Rough cost of computing node once (fusion's units times elements; products by
    their multiply-adds)."""
    n = max(1, node.size if isinstance(node.size, int) else 1)
    if node.op == "dot_general":
        k = 1
        for d in node.attrs["lhs_contracting"]:
            k *= node.inputs[0].shape[d]
        return 2.0 * n * k
    if node.op in ("conv", "winograd_conv2d"):
        return 2.0 * n * max(1, node.inputs[1].size // max(1, node.inputs[1].shape[0]))
    return float(lookup(node.op).cost * n)


class Liveness:
    """Positions, uses and the estimated live bytes of a program in topological order."""

    def __init__(self, program: Program):
        self.order = program.live_nodes()
        self.pos = {n.id: k for k, n in enumerate(self.order)}
        end = len(self.order)
        self.uses: dict[int, list[int]] = {n.id: [] for n in self.order}
        for r in program.roots():
            self.uses[r.id].append(end)
        # a view folds into its readers' index arithmetic: its reads are its source's
        for n in reversed(self.order):
            through = lookup(n.op).remap
            for i in n.inputs:
                self.uses[i.id] += self.uses[n.id] if through else [self.pos[n.id]]
        self.last = {nid: max(u) if u else self.pos[nid] for nid, u in self.uses.items()}

    def peak(self) -> tuple[int, int]:
        """(estimated peak bytes, its position)."""
        delta = [0] * (len(self.order) + 2)
        for n in self.order:
            if _takes_memory(n):
                b = _nbytes(n)
                delta[self.pos[n.id]] += b
                delta[self.last[n.id] + 1] -= b
        best, at, live = 0, 0, 0
        for k, d in enumerate(delta):
            live += d
            if live > best:
                best, at = live, k
        return best, at

    def live_at(self, node, p: int) -> bool:
        """Is node's value available at position p without recomputing it?"""
        if node.op in SOURCES:
            return True
        if lookup(node.op).remap or node.op == "get":
            return self.live_at(node.inputs[0], p)
        return self.pos[node.id] <= p <= self.last[node.id] and \
            any(u >= p for u in self.uses[node.id])


def _plan(node, at: int, live: Liveness, depth: int, chain: dict) -> bool:
    """Add to `chain` what recomputing node at position `at` copies; False if a needed
    operand is neither available there nor recomputable within MAX_DEPTH levels."""
    if node.id in chain:
        return True
    if depth > MAX_DEPTH or lookup(node.op).kind in ("control", "collective", "rng") \
            or node.op in SOURCES:
        return False
    for i in node.inputs:
        if not live.live_at(i, at) and not _plan(i, at, live, depth + 1, chain):
            return False
    chain[node.id] = node
    return True


def plan_peak(plan, lowered) -> tuple[set, set]:
    """From the memory plan: the nodes of the kernel at the peak of live bytes, and the
    nodes whose buffers are live across it; two empty sets when the plan cannot tell
    (symbolic sizes, the peak in a copy)."""
    steps = len(lowered.kernels)
    delta = [0] * (steps + 2)
    intervals = lowered.memory.intervals
    for lo, hi, size in intervals.values():
        if not isinstance(size, int):
            return set(), set()
        delta[lo] += size
        delta[hi + 1] -= size
    best, at, total = -1, 0, 0
    for k, d in enumerate(delta[:steps]):
        total += d
        if total > best:
            best, at = total, k
    key = lowered.kernel_groups[at] if at < len(lowered.kernel_groups) else None
    groups = {g.id: g for g in plan.groups}
    if not key or key[0] != "g" or key[1] not in groups:
        return set(), set()
    sharing: dict[int, set] = {}               # a buffer reused in place: every value in it
    for a, o in lowered.memory.in_place:
        group = sharing.get(a, {a}) | sharing.get(o, {o})
        for b in group:
            sharing[b] = group
    across = set()
    for b, (lo, hi, _) in intervals.items():
        if not lo < at < hi:
            continue
        for shared in sharing.get(b, {b}):
            name = lowered.buffers[shared].name
            if name.startswith("%") and name[1:].isdigit():
                across.add(int(name[1:]))
    return set(groups[key[1]].members), across


def rematerialize(program: Program, excess: int, peak: set = frozenset(),
                  across: set | None = None, limit: int = 1 << 30,
                  exclude: set = frozenset()) -> tuple[Program, list]:
    """The program with values recomputed before late uses, freeing about `excess`
    bytes after the nodes `peak` (a kernel's), among the nodes `across` them (default:
    the estimated peak and the values the estimate has there) but not `exclude`, at
    most `limit` of them; and the ids of the values it recomputes (none: no candidate
    left)."""
    live = Liveness(program)
    if any(not isinstance(d, int) for n in live.order for d in n.shape):
        return program, 0
    spots = [live.pos[m] for m in peak if m in live.pos]
    at = max(spots) if spots else live.peak()[1]
    candidates = []
    for n in live.order:
        if ((n.id not in across) if across else not _takes_memory(n)) or n.id in exclude:
            continue
        if live.pos[n.id] >= at or live.last[n.id] <= at:
            continue
        before = max([u for u in live.uses[n.id] if u <= at] + [live.pos[n.id]])
        after = min(u for u in live.uses[n.id] if u > at)
        if after >= len(live.order) or at - before < MIN_IDLE or after - at < MIN_IDLE:
            continue
        chain: dict = {}
        if not _plan(n, after, live, 0, chain) or \
                all(lookup(c.op).remap for c in chain.values()):
            continue       # (a view of values kept anyway frees nothing: it is theirs)
        cost = sum(work_of(c) for c in chain.values())
        candidates.append((cost / max(1, _nbytes(n)), n, after, chain))
    candidates.sort(key=lambda c: c[0])
    chosen, freed = {}, 0
    for _, n, after, chain in candidates:
        if freed >= excess or len(chosen) >= limit:
            break
        chosen[n.id] = (after, chain)
        freed += _nbytes(n)
    if not chosen:
        return program, []
    return _apply(program, live, chosen), list(chosen)


def _root(node, chosen: dict):
    """The value a chain of views reads: the first chosen one, else the chain's source
    (a chosen value may itself be a view the plan materialized)."""
    while lookup(node.op).remap and node.id not in chosen:
        node = node.inputs[0]
    return node


def _apply(program: Program, live: Liveness, chosen: dict) -> Program:
    copies: dict[int, object] = {}           # old id -> recomputed node (new graph)

    def recompute(builder, old, chain, gate):
        if old.id in copies:
            return copies[old.id]
        ins = []
        for i in old.inputs:
            if i.id in chain:
                ins.append(recompute(builder, i, chain, gate))
            else:
                ins.append(builder.add("after", [mapped[i.id], gate], {}))
        copies[old.id] = builder.copy(old, ins)
        return copies[old.id]

    mapped: dict[int, object] = {}

    def late_value(builder, i, p, gate):
        """Operand i of a node at position p: through views, a chosen value's copy."""
        views = []
        root = i
        while root is not _root(root, chosen):
            views.append(root)
            root = root.inputs[0]
        if root.id not in chosen or p < chosen[root.id][0]:
            return None
        out = recompute(builder, root, chosen[root.id][1], gate)
        for v in reversed(views):
            out = builder.copy(v, [out])
        return out

    def gate_for(builder, node, inputs):
        """What the copies wait for: the node's latest other operand (in a backward pass,
        a cotangent: it depends on the whole forward pass, so no kernel there can take
        the copies in), else the node built last."""
        others = [(live.pos[i.id], new) for i, new in zip(node.inputs, inputs)
                  if i.op not in SOURCES and _root(i, chosen).id not in chosen]
        if others:
            return max(others, key=lambda t: t[0])[1]
        return next((n for n in reversed(builder.graph.nodes) if n.op not in SOURCES),
                    builder.graph.nodes[-1])

    def rewrite(builder, node, inputs):
        p = live.pos[node.id]
        if not lookup(node.op).remap:
            gate = None
            for k, i in enumerate(node.inputs):
                if _root(i, chosen).id not in chosen:
                    continue
                gate = gate or gate_for(builder, node, inputs)
                new = late_value(builder, i, p, gate)
                if new is not None:
                    inputs = list(inputs)
                    inputs[k] = new
        out = builder.copy(node, inputs)
        mapped[node.id] = out
        return out

    return rebuild(program, rewrite)
