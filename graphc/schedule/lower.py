"""From a fusion plan to a scheduled list of kernels over named buffers (backend-neutral).

Decides each value's destination buffers (results go straight into the returned arrays;
a variable's new value is written into the variable in place when that is safe), orders
the kernels (dependencies, and every reader of a variable before its in-place writer),
and plans the arena for the temporaries.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import networkx as nx

from graphc_runtime.errors import CompileError

from ..ir import dtypes
from ..ir.graph import Node
from ..kernels import builders
from ..kernels import kernel as K
from ..passes.program import Program
from . import chaining, memory
from .bodies import build_control
from .fusion import FusionPlan, Group
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
    scratch_of = policy.scratch_of
    graph = program.graph
    nodes = program.live_nodes()
    ids = iter(range(1, 1 << 30))
    buffers: dict[int, K.Buffer] = {}

    def new_buffer(shape, dtype, kind, name):
        b = K.Buffer(next(ids), tuple(shape), dtype, kind, name)
        buffers[b.id] = b
        return b

    # external buffers
    inputs = list(input_order)
    # keyed by node, not id: an unused input may be a node of the unoptimized graph
    in_buf = {n: new_buffer(n.shape, n.dtype, "input", n.attrs["name"]) for n in inputs}
    var_nodes = {}
    for n in nodes:
        if n.op == "variable":
            var_nodes.setdefault(n.attrs["name"], n)
    var_names = list(dict.fromkeys(list(var_nodes) + [name for name, _ in program.updates]))
    var_buf = {}
    for name in var_names:
        value = graph.variables[name]
        var_buf[name] = new_buffer(value.shape, dtypes.canonical(value.dtype), "variable", name)
    const_buf, constants = {}, []
    for n in nodes:
        if n.op == "constant" and n.attrs["value"].size != 1:
            b = new_buffer(n.shape, n.dtype, "constant", f"const%{n.id}")
            const_buf[n.id] = b
            constants.append((b, n.attrs["value"]))
    out_bufs = [new_buffer(o.shape, o.dtype, "output", f"out{k}") for k, o in
                enumerate(program.outputs)]

    def source_buffer(n: Node):
        if n.op == "parameter":
            if n not in in_buf:
                raise CompileError(f"placeholder {n.attrs['name']!r} is needed but not among "
                                   f"the executable's inputs")
            return in_buf[n]
        if n.op == "variable":
            return var_buf[n.attrs["name"]]
        return const_buf.get(n.id)

    groups = list(plan.groups)
    group_of = dict(plan.node_group)
    dests: dict[int, list] = {}
    for k, o in enumerate(program.outputs):
        dests.setdefault(o.id, []).append(out_bufs[k])
    copies = []          # (name, src node, dst buffer)

    # a result that is a source (or computed nowhere) is copied by a copy kernel
    for k, o in enumerate(program.outputs):
        if o.id not in group_of:
            copies.append((f"copy_out{k}", o, out_bufs[k]))
    dests = {nid: d for nid, d in dests.items() if nid in group_of}

    graph_edges = _group_edges(groups, group_of)
    in_place, copied = [], []
    for name, n in program.updates:
        target = var_buf[name]
        if n.op == "variable" and n.attrs["name"] == name:
            continue                                   # w <- w: nothing to do
        g = group_of.get(n.id)
        grp = next(x for x in groups if x.id == g) if g is not None else None
        # a loop's results are written by its regions' kernels: copied, not in place
        ok = grp is not None and grp.kind != "control" and \
            all(target is not d for ds in dests.values() for d in ds) \
            and not any(d.kind == "variable" for d in dests.get(n.id, []))
        if ok:
            readers = [x.id for x in groups if x.id != g and _reads(x, var_nodes.get(name))] \
                if name in var_nodes else []
            trial = graph_edges.copy()
            trial.add_edges_from((r, g) for r in readers)
            ok = nx.is_directed_acyclic_graph(trial) and _identity_access(
                grp, n, var_nodes.get(name), target, source_buffer, dests)
            if ok:
                graph_edges = trial
        if ok:
            dests.setdefault(n.id, []).append(target)
            in_place.append(name)
        elif n.id not in group_of:
            # the new value is another variable (or an input or constant): stage it in a
            # temporary, so that updates like a <- b, b <- a read the old values
            staged = new_buffer(n.shape, n.dtype, "temp", f"staged_{name}")
            copies.append((f"stage_{name}", n, staged))
            copies.append((f"update_{name}", staged, target))
            copied.append(name)
        else:
            copies.append((f"update_{name}", n, target))
            copied.append(name)

    # temporaries for everything else that is materialized
    names = {}
    for g in groups:
        for r in g.roots:
            if not dests.get(r.id):
                dests[r.id] = [new_buffer(r.shape, r.dtype, "temp", f"%{r.id}")]
            names[dests[r.id][0].id] = f"%{r.id} {r.op}"

    def buffer_of(n: Node):
        if n.id in dests:
            return dests[n.id][0]
        return source_buffer(n)

    # a loop or cond takes its operands as whole buffers: values without one (scalar
    # constants, inlined views of other buffers) are staged in a temporary first
    staged_for, staged_users = {}, {}
    for g in groups:
        if g.kind != "control":
            continue
        for i in g.anchor.inputs:
            if buffer_of(i) is None and i.id not in staged_for:
                staged = new_buffer(i.shape, i.dtype, "temp", f"operand%{i.id}")
                staged_for[i.id] = staged
                copies.append((f"operand_{i.id}", i, staged))
            if i.id in staged_for:
                staged_users.setdefault(i.id, set()).add(g.id)

    def operand_buffer(n: Node):
        return staged_for.get(n.id) or buffer_of(n)

    def new_temp(shape, dtype, name):
        return new_buffer(shape, dtype, "temp", name)

    def add_constant(inner, value):
        b = new_buffer(inner.shape, inner.dtype, "constant", f"const_{inner.name}")
        constants.append((b, value))
        return b

    # kernels, and the order they must run in
    deps = nx.DiGraph()
    kernel_of = {}
    for g in groups:
        if g.kind == "control":
            kern = build_control(g, f"k{g.id}_{g.anchor.op}", operand_buffer,
                                 lambda n: dests[n.id],
                                 new_temp, add_constant, compile_body)
        else:
            kern = builders.build(f"k{g.id}_{g.kind}", g, buffer_of, lambda n: dests[n.id])
        kernel_of[("g", g.id)] = kern
        deps.add_node(("g", g.id))
    for src, dst in graph_edges.edges():
        deps.add_edge(("g", src), ("g", dst))
    old_readers = {}       # variable name -> schedule keys that read its old value
    for name, vnode in var_nodes.items():
        old_readers[name] = [("g", g.id) for g in groups if _reads(g, vnode)]
    # a loop's, cond's or collective's kernel writes a result to one buffer: where the
    # result has several destinations (one value returned twice), the rest are copies
    staged_by = {}
    for g in groups:
        if g.kind not in ("control", "collective"):
            continue
        for r in g.roots:
            first, *rest = dests.get(r.id, [None])
            for j, d in enumerate(rest):
                staged_by[first.id] = ("g", g.id)
                copies.append((f"copy{r.id}_{j + 1}", first, d))
    for k, (name, src, dst) in enumerate(copies):
        key = ("c", k)
        vars_ = K.loop_vars(dst.shape)
        if isinstance(src, K.Buffer):
            value = K.Load(src.dtype, src, vars_)
            deps.add_node(key)
            deps.add_edge(staged_by[src.id], key)
        else:
            value = K.ExprBuilder({}, buffer_of).value(src, vars_)
            deps.add_node(key)
            if src.id in group_of:
                deps.add_edge(("g", group_of[src.id]), key)
            if src.op == "variable":
                old_readers.setdefault(src.attrs["name"], []).append(key)
        if dst.kind == "temp":
            staged_by[dst.id] = key
        if not isinstance(src, K.Buffer) and dst is staged_for.get(src.id):
            deps.add_edges_from((key, ("g", gid)) for gid in staged_users[src.id])
        kernel_of[key] = K.LoopKernel(name.replace("/", "_"), dst.shape, vars_,
                                      [K.Store(dst, value, vars_)])
    for name in in_place:
        writer = ("g", group_of[dict(program.updates)[name].id])
        deps.add_edges_from((r, writer) for r in old_readers.get(name, []) if r != writer)
    for k, (name, src, dst) in enumerate(copies):
        if dst.kind == "variable":
            deps.add_edges_from((r, ("c", k)) for r in old_readers.get(dst.name, [])
                                if r != ("c", k))
    if not nx.is_directed_acyclic_graph(deps):
        raise CompileError("internal: the kernel schedule has a cycle")
    position = {key: n for n, key in enumerate(kernel_of)}
    order = list(nx.lexicographical_topological_sort(deps, key=lambda key: position[key]))
    kernels = [kernel_of[key] for key in order]
    kgroups = [key for key in order]
    first, last, sizes = {}, {}, {}
    for t, k in enumerate(kernels):
        for s in K.kernel_stores(k):
            if s.buffer.kind == "temp":
                first.setdefault(s.buffer.id, t)
                last.setdefault(s.buffer.id, t)
        for ld in K.kernel_loads(k):
            if ld.buffer.kind == "temp":
                last[ld.buffer.id] = max(last.get(ld.buffer.id, t), t)
    for t, k in enumerate(kernels):      # products only their own epilogue reads
        if isinstance(k, K.DotKernel) and (k.epilogue or k.layouts) and k.out.kind == "temp" and \
                last.get(k.out.id) == t:
            k.private_out = True
        if isinstance(k, K.DotKernel) and k.layouts:
            k.private_layouts = {st.buffer.id for _, st in k.layouts
                                 if st.buffer.kind == "temp" and last.get(st.buffer.id) == t}
    # a kernel that may run in the previous one's thread chunks (schedule/chaining.py)
    # must not write where that one still reads: its buffers stay live one step more
    shielded = set()
    if policy.chaining:
        for t in chaining.candidates(kernels):
            for buf in chaining.leader_buffers(kernels[t]):
                if buf.kind == "temp" and buf.id in last:
                    last[buf.id] = max(last[buf.id], t + 1)
                    shielded.add(buf.id)
    kept = set().union(*(scratch_of(k) for k in kernels)) if scratch_of else set()
    for b in kept:
        first.pop(b, None)
        last.pop(b, None)
    for b in first:
        sizes[b] = buffers[b].nbytes
    pairs = [(a, o) for a, o in _in_place_pairs(kernels, last)
             if a not in shielded and a not in kept and o not in kept]
    mem = memory.plan_memory(sizes, first, last, pairs)
    slots = {}
    slot = 1
    for b in [in_buf[n] for n in inputs] + out_bufs + [var_buf[v] for v in var_names] + \
            [b for b, _ in constants]:
        slots[b.id] = slot
        slot += 1
    naive = sum(n.nbytes for n in nodes if n.op not in ("parameter", "variable", "constant"))
    traffic = [(k.name, sum(l.buffer.nbytes for l in _unique_loads(k)),
                sum(s.buffer.nbytes for s in K.kernel_stores(k))) for k in kernels]
    return Lowered(kernels, buffers, inputs, out_bufs, var_names, constants, mem, slots,
                   kgroups, in_place, copied, naive, traffic)


def _unique_loads(k):
    seen = {}
    for ld in K.kernel_loads(k):
        seen[ld.buffer.id] = ld
    return list(seen.values())


def _group_edges(groups, group_of) -> nx.DiGraph:
    graph = nx.DiGraph()
    for g in groups:
        graph.add_node(g.id)
        for m in g.members.values():
            for i in m.inputs:
                src = group_of.get(i.id)
                if i.id not in g.members and src is not None and src != g.id:
                    graph.add_edge(src, g.id)
    return graph


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
    store_index = [s.index for s in K.kernel_stores(kern) if s.buffer is target]
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
        loads = K.kernel_loads(kern)
    else:
        return all(ld.buffer is not target for ld in K.kernel_loads(kern))
    return all(tuple(ld.index) == tuple(store_index[0]) for ld in loads if ld.buffer is target)


def _in_place_pairs(kernels, last) -> list:
    """(input, output) temp pairs where a loop kernel reads the input only at the index it
    writes the output and the input dies there."""
    pairs = []
    for t, k in enumerate(kernels):
        if not isinstance(k, K.LoopKernel):
            continue
        outs = [s for s in k.stores if s.buffer.kind == "temp"]
        loads = K.kernel_loads(k)
        for s in outs:
            for ld in loads:
                b = ld.buffer
                if b.kind != "temp" or last.get(b.id) != t or b.id == s.buffer.id:
                    continue
                if all(tuple(x.index) == tuple(s.index) for x in loads if x.buffer.id == b.id) \
                        and b.nbytes == s.buffer.nbytes:
                    pairs.append((b.id, s.buffer.id))
    return pairs
