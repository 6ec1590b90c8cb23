"""From a fusion plan to a scheduled list of kernels over named buffers (backend-neutral).

Decides each value's destination buffers (results go straight into the returned arrays;
a variable's new value is written into the variable in place when that is safe), orders
the kernels (dependencies, and every reader of a variable before its in-place writer),
and plans the arena for the temporaries.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from graphc_runtime.errors import CompileError

from ..ir import dtypes
from ..ir.graph import Node
from ..kernels import builders
from ..kernels import kernel as K
from ..passes.program import Program
from . import chaining, memory
from .bodies import build_control
from .digraph import DiGraph
from .fusion import FusionPlan, Group, group_graph
from .policy import SchedulePolicy


@dataclass
class Lowered:
    kernels: list                     # in execution order
    buffers: dict                     # id -> Buffer
    inputs: list                      # parameter nodes, positional order
    outputs: list                     # output Buffers in the user's flattened order
    variables: list                   # variable names owned by the executable
    constants: list                   # (Buffer, np.ndarray)
    memory: memory.MemoryPlan
    slots: dict                       # external buffer id -> table slot
    kernel_groups: list = field(default_factory=list)
    in_place_updates: list = field(default_factory=list)
    copied_updates: list = field(default_factory=list)
    naive_bytes: int = 0
    traffic: list = field(default_factory=list)     # per kernel (name, bytes read, bytes written)


def _reads(group: Group, node: Node) -> bool:
    return any(i.id == node.id for m in group.members.values() for i in m.inputs
               if i.id not in group.members)


def lower(program: Program, plan: FusionPlan, input_order: list[Node],
          policy: SchedulePolicy = SchedulePolicy(), compile_body=None) -> Lowered:
    """The program's kernels, in order, and its memory plan. `policy`: the backend's
    scratch (buffers kept in a kernel's own scratch get no room in the arena) and
    chaining; `compile_body(program, params)`: the driver's compiler for the regions of
    loops and conditionals (bodies.py), the same passes, fusion and lowering."""
    low = _Lowering(program, plan, policy, compile_body)
    low.external_buffers(input_order)      # inputs, variables, constants, outputs
    low.result_destinations()              # results straight into the returned arrays
    low.variable_updates()                 # in place where safe, else copied
    low.temporaries()                      # a buffer for every other materialized value
    low.staged_operands()                  # loops and conds take whole buffers
    low.build_kernels()                    # one per group, one per copy
    low.order_kernels()                    # dependencies; old values read before updates
    low.private_buffers()                  # products and layouts only their kernel reads
    return low.plan_memory()               # the arena, the slots, the traffic


class _Lowering:
    """The state `lower`'s phases share, each phase a method."""

    def __init__(self, program: Program, plan: FusionPlan, policy: SchedulePolicy,
                 compile_body):
        self.program, self.plan, self.policy = program, plan, policy
        self.compile_body = compile_body
        self.graph = program.graph
        self.nodes = program.live_nodes()
        self.ids = iter(range(1, 1 << 30))
        self.buffers: dict[int, K.Buffer] = {}
        self.groups = list(plan.groups)
        self.group_of = dict(plan.node_group)
        self.copies = []                   # (name, src node or buffer, dst buffer)
        self.staged_for, self.staged_users = {}, {}

    def new_buffer(self, shape, dtype, kind, name):
        b = K.Buffer(next(self.ids), tuple(shape), dtype, kind, name)
        self.buffers[b.id] = b
        return b

    def external_buffers(self, input_order) -> None:
        self.inputs = list(input_order)
        # keyed by node, not id: an unused input may be a node of the unoptimized graph
        self.in_buf = {n: self.new_buffer(n.shape, n.dtype, "input", n.attrs["name"])
                       for n in self.inputs}
        self.var_nodes = {}
        for n in self.nodes:
            if n.op == "variable":
                self.var_nodes.setdefault(n.attrs["name"], n)
        self.var_names = list(dict.fromkeys(list(self.var_nodes) +
                                            [name for name, _ in self.program.updates]))
        self.var_buf = {}
        for name in self.var_names:
            value = self.graph.variables[name]
            self.var_buf[name] = self.new_buffer(value.shape, dtypes.canonical(value.dtype),
                                                 "variable", name)
        self.const_buf, self.constants = {}, []
        for n in self.nodes:
            if n.op == "constant" and n.attrs["value"].size != 1:
                b = self.new_buffer(n.shape, n.dtype, "constant", f"const%{n.id}")
                self.const_buf[n.id] = b
                self.constants.append((b, n.attrs["value"]))
        self.out_bufs = [self.new_buffer(o.shape, o.dtype, "output", f"out{k}") for k, o in
                         enumerate(self.program.outputs)]

    def source_buffer(self, n: Node):
        if n.op == "parameter":
            if n not in self.in_buf:
                raise CompileError(f"placeholder {n.attrs['name']!r} is needed but not among "
                                   f"the executable's inputs")
            return self.in_buf[n]
        if n.op == "variable":
            return self.var_buf[n.attrs["name"]]
        return self.const_buf.get(n.id)

    def result_destinations(self) -> None:
        """Results go straight into the returned arrays; a result that is a source (or
        computed nowhere) is copied by a copy kernel."""
        dests: dict[int, list] = {}
        for k, o in enumerate(self.program.outputs):
            dests.setdefault(o.id, []).append(self.out_bufs[k])
        for k, o in enumerate(self.program.outputs):
            if o.id not in self.group_of:
                self.copies.append((f"copy_out{k}", o, self.out_bufs[k]))
        self.dests = {nid: d for nid, d in dests.items() if nid in self.group_of}

    def variable_updates(self) -> None:
        """A variable's new value is written into the variable in place where its kernel
        reads the old value only where it writes the new one and no cycle follows; else
        it is copied after every reader of the old value."""
        groups, group_of, dests = self.groups, self.group_of, self.dests
        self.graph_edges = group_graph(self.plan)
        self.in_place, self.copied = [], []
        for name, n in self.program.updates:
            target = self.var_buf[name]
            if n.op == "variable" and n.attrs["name"] == name:
                continue                                   # w <- w: nothing to do
            g = group_of.get(n.id)
            grp = next(x for x in groups if x.id == g) if g is not None else None
            # a loop's results are written by its regions' kernels: copied, not in place
            ok = grp is not None and grp.kind != "control" and \
                all(target is not d for ds in dests.values() for d in ds) \
                and not any(d.kind == "variable" for d in dests.get(n.id, []))
            if ok:
                readers = [x.id for x in groups if x.id != g and
                           _reads(x, self.var_nodes.get(name))] if name in self.var_nodes \
                    else []
                trial = self.graph_edges.copy()
                trial.add_edges_from((r, g) for r in readers)
                ok = trial.is_acyclic() and _identity_access(
                    grp, n, self.var_nodes.get(name), target, self.source_buffer, dests)
                if ok:
                    self.graph_edges = trial
            if ok:
                dests.setdefault(n.id, []).append(target)
                self.in_place.append(name)
            elif n.id not in group_of:
                # the new value is another variable (or an input or constant): stage it in
                # a temporary, so that updates like a <- b, b <- a read the old values
                staged = self.new_buffer(n.shape, n.dtype, "temp", f"staged_{name}")
                self.copies.append((f"stage_{name}", n, staged))
                self.copies.append((f"update_{name}", staged, target))
                self.copied.append(name)
            else:
                self.copies.append((f"update_{name}", n, target))
                self.copied.append(name)

    def temporaries(self) -> None:
        for g in self.groups:
            for r in g.roots:
                if not self.dests.get(r.id):
                    self.dests[r.id] = [self.new_buffer(r.shape, r.dtype, "temp", f"%{r.id}")]

    def buffer_of(self, n: Node):
        if n.id in self.dests:
            return self.dests[n.id][0]
        return self.source_buffer(n)

    def staged_operands(self) -> None:
        """A loop or cond takes its operands as whole buffers: values without one (scalar
        constants, inlined views of other buffers) are staged in a temporary first."""
        for g in self.groups:
            if g.kind != "control":
                continue
            for i in g.anchor.inputs:
                if self.buffer_of(i) is None and i.id not in self.staged_for:
                    staged = self.new_buffer(i.shape, i.dtype, "temp", f"operand%{i.id}")
                    self.staged_for[i.id] = staged
                    self.copies.append((f"operand_{i.id}", i, staged))
                if i.id in self.staged_for:
                    self.staged_users.setdefault(i.id, set()).add(g.id)

    def build_kernels(self) -> None:
        """A kernel per group (builders.py; control groups through bodies.py) and per
        copy, and the dependencies between them."""
        deps, kernel_of = DiGraph(), {}
        dests_of = lambda n: self.dests[n.id]
        for g in self.groups:
            if g.kind == "control":
                kern = build_control(
                    g, f"k{g.id}_{g.anchor.op}",
                    lambda n: self.staged_for.get(n.id) or self.buffer_of(n), dests_of,
                    lambda shape, dtype, name: self.new_buffer(shape, dtype, "temp", name),
                    self.add_constant, self.compile_body)
            else:
                kern = builders.build(f"k{g.id}_{g.kind}", g, self.buffer_of, dests_of)
            kernel_of[("g", g.id)] = kern
            deps.add_node(("g", g.id))
        for src, dst in self.graph_edges.edges():
            deps.add_edge(("g", src), ("g", dst))
        self.old_readers = {}       # variable name -> schedule keys that read its old value
        for name, vnode in self.var_nodes.items():
            self.old_readers[name] = [("g", g.id) for g in self.groups if _reads(g, vnode)]
        # a loop's, cond's or collective's kernel writes a result to one buffer: where the
        # result has several destinations (one value returned twice), the rest are copies
        staged_by = {}
        for g in self.groups:
            if g.kind not in ("control", "collective"):
                continue
            for r in g.roots:
                first, *rest = self.dests.get(r.id, [None])
                for j, d in enumerate(rest):
                    staged_by[first.id] = ("g", g.id)
                    self.copies.append((f"copy{r.id}_{j + 1}", first, d))
        for k, (name, src, dst) in enumerate(self.copies):
            key = ("c", k)
            vars_ = K.loop_vars(dst.shape)
            deps.add_node(key)
            if isinstance(src, K.Buffer):
                value = K.Load(src.dtype, src, vars_)
                deps.add_edge(staged_by[src.id], key)
            else:
                value = K.ExprBuilder({}, self.buffer_of).value(src, vars_)
                if src.id in self.group_of:
                    deps.add_edge(("g", self.group_of[src.id]), key)
                if src.op == "variable":
                    self.old_readers.setdefault(src.attrs["name"], []).append(key)
            if dst.kind == "temp":
                staged_by[dst.id] = key
            if not isinstance(src, K.Buffer) and dst is self.staged_for.get(src.id):
                deps.add_edges_from((key, ("g", gid)) for gid in self.staged_users[src.id])
            kernel_of[key] = K.LoopKernel(name.replace("/", "_"), dst.shape, vars_,
                                          [K.Store(dst, value, vars_)])
        self.deps, self.kernel_of = deps, kernel_of

    def add_constant(self, inner, value):
        b = self.new_buffer(inner.shape, inner.dtype, "constant", f"const_{inner.name}")
        self.constants.append((b, value))
        return b

    def order_kernels(self) -> None:
        """Dependencies first, and every reader of a variable before its in-place writer
        (or its update copy); otherwise the groups' order."""
        deps = self.deps
        for name in self.in_place:
            writer = ("g", self.group_of[dict(self.program.updates)[name].id])
            deps.add_edges_from((r, writer) for r in self.old_readers.get(name, [])
                                if r != writer)
        for k, (name, src, dst) in enumerate(self.copies):
            if dst.kind == "variable":
                deps.add_edges_from((r, ("c", k)) for r in self.old_readers.get(dst.name, [])
                                    if r != ("c", k))
        position = {key: n for n, key in enumerate(self.kernel_of)}
        self.order = deps.topological_order(lambda key: position[key])
        if self.order is None:
            raise CompileError("internal: the kernel schedule has a cycle")
        self.kernels = [self.kernel_of[key] for key in self.order]

    def private_buffers(self) -> None:
        """Each temporary's live range (first and last kernel), and the products (and
        layout copies) that only their own kernel reads (DotKernel.private_out,
        private_layouts): a backend may keep them in a scratch of the kernel's."""
        self.first, self.last = {}, {}
        first, last = self.first, self.last
        for t, k in enumerate(self.kernels):
            for s in k.writes():
                if s.buffer.kind == "temp":
                    first.setdefault(s.buffer.id, t)
                    last.setdefault(s.buffer.id, t)
            for ld in k.reads():
                if ld.buffer.kind == "temp":
                    last[ld.buffer.id] = max(last.get(ld.buffer.id, t), t)
        for t, k in enumerate(self.kernels):
            if isinstance(k, K.DotKernel) and (k.epilogue or k.layouts) and \
                    k.out.kind == "temp" and last.get(k.out.id) == t:
                k.private_out = True
            if isinstance(k, K.DotKernel) and k.layouts:
                k.private_layouts = {st.buffer.id for _, st in k.layouts
                                     if st.buffer.kind == "temp" and
                                     last.get(st.buffer.id) == t}

    def plan_memory(self) -> Lowered:
        """The arena (memory.py) for the temporaries not kept in a kernel's scratch, the
        external buffers' table slots, and each kernel's traffic."""
        kernels, first, last = self.kernels, self.first, self.last
        # a kernel that may run in the previous one's thread chunks (chaining.py) must
        # not write where that one still reads: its buffers stay live one step more
        shielded = set()
        if self.policy.chaining:
            for t in chaining.candidates(kernels):
                for buf in chaining.leader_buffers(kernels[t]):
                    if buf.kind == "temp" and buf.id in last:
                        last[buf.id] = max(last[buf.id], t + 1)
                        shielded.add(buf.id)
        scratch_of = self.policy.scratch_of
        kept = set().union(*(scratch_of(k) for k in kernels)) if scratch_of else set()
        for b in kept:
            first.pop(b, None)
            last.pop(b, None)
        sizes = {b: self.buffers[b].nbytes for b in first}
        pairs = [(a, o) for a, o in _in_place_pairs(kernels, last)
                 if a not in shielded and a not in kept and o not in kept]
        mem = memory.plan_memory(sizes, first, last, pairs)
        slots = {}
        for slot, b in enumerate([self.in_buf[n] for n in self.inputs] + self.out_bufs +
                                 [self.var_buf[v] for v in self.var_names] +
                                 [b for b, _ in self.constants], start=1):
            slots[b.id] = slot
        naive = sum(n.nbytes for n in self.nodes
                    if n.op not in ("parameter", "variable", "constant"))
        traffic = [(k.name, sum(ld.buffer.nbytes for ld in _unique_loads(k)),
                    sum(s.buffer.nbytes for s in k.writes())) for k in kernels]
        return Lowered(kernels, self.buffers, self.inputs, self.out_bufs, self.var_names,
                       self.constants, mem, slots, list(self.order), self.in_place,
                       self.copied, naive, traffic)


def _unique_loads(k):
    seen = {}
    for ld in k.reads():
        seen[ld.buffer.id] = ld
    return list(seen.values())


def _identity_access(group, value_node, var_node, target, source_buffer, dests) -> bool:
    """Does the kernel read the variable only at the index where it writes the new value?"""
    if var_node is None:
        return True
    trial = dict(dests)
    trial[value_node.id] = list(dests.get(value_node.id, [])) + [target]

    def buffer_of(n):
        if n.id in trial:
            return trial[n.id][0]
        return source_buffer(n) or K.Buffer(-1, n.shape, n.dtype, "temp")
    try:
        kern = builders.build("probe", group, buffer_of, lambda n: trial.get(n.id) or
                      [K.Buffer(-1, n.shape, n.dtype, "temp")])
    except K.Illegal:
        return False
    store_index = [s.index for s in kern.writes() if s.buffer is target]
    if len(store_index) != 1:
        return False
    if isinstance(kern, K.DotKernel) and kern.out is not target:
        # the epilogue runs on the finished product (element by element, or row by row
        # after the row's sums): in place when the operands do not read the variable
        # and the epilogue reads it only where it writes it (an optimizer's update)
        if any(ld.buffer is target for ld in K.loads_of([kern.lhs, kern.rhs])):
            return False
        loads = K.loads_of([s.value for s in kern.epilogue])
    elif isinstance(kern, (K.LoopKernel, K.RowKernel)):
        loads = kern.reads()
    else:
        return all(ld.buffer is not target for ld in kern.reads())
    return all(tuple(ld.index) == tuple(store_index[0]) for ld in loads if ld.buffer is target)


def _in_place_pairs(kernels, last) -> list:
    """(input, output) temp pairs where a loop kernel reads the input only at the index it
    writes the output and the input dies there; and a product's epilogue likewise
    (_epilogue_pairs)."""
    pairs = []
    for t, k in enumerate(kernels):
        if type(k) is K.DotKernel:
            pairs += _epilogue_pairs(k, t, last)
        if not isinstance(k, K.LoopKernel):
            continue
        loads = k.reads()
        pairs += [(b, s.buffer.id) for s in k.stores if s.buffer.kind == "temp"
                  for b in _dying_at_its_index(s, loads, t, last)]
    return pairs


def _dying_at_its_index(store, loads, t: int, last) -> list:
    """Ids of the temps of store's size that die at kernel t and that `loads` read only at
    the index `store` writes: each may share its memory with store's buffer."""
    buffers = {ld.buffer.id: ld.buffer for ld in loads}
    return [b.id for b in buffers.values()
            if b.kind == "temp" and last.get(b.id) == t and b.id != store.buffer.id and
            b.nbytes == store.buffer.nbytes and
            all(tuple(x.index) == tuple(store.index) for x in loads if x.buffer.id == b.id)]


def _epilogue_pairs(k: K.DotKernel, t: int, last) -> list:
    """(input, output) temp pairs of a product's epilogue: a store whose value alone reads
    a dying input, only at the index it writes (a residual sum after a 1x1 convolution).
    Its result then takes the input's memory: each line is read and written once, where a
    separate result's lines are also read from memory before they are written (ResNet-50's
    64 -> 256 channels at 56 x 56 with the residual at batch 8: 5.0 -> 3.7 ms;
    docs/performance.md)."""
    pairs = []
    others = {ld.buffer.id for ld in K.loads_of([k.lhs, k.rhs] +
                                                [s.value for _, s in k.layouts])}
    reads = [K.loads_of([s.value]) for s in k.epilogue]     # each store's loads, once
    for i, s in enumerate(k.epilogue):
        if s.buffer.kind != "temp" or s.buffer.id == k.out.id:
            continue
        rest = {ld.buffer.id for j, loads in enumerate(reads) if j != i for ld in loads}
        pairs += [(b, s.buffer.id) for b in _dying_at_its_index(s, reads[i], t, last)
                  if b != k.out.id and b not in others and b not in rest]
    return pairs
