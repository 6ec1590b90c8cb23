"""Kernel IR: one loop nest per fusion group, an expression tree per element.

Backend-neutral: views (broadcast, reshape, transpose, slice, pad, reverse, concatenate)
and gathers become index arithmetic (graphc.kernels.index); elementwise primitives
become `Prim` nodes; reductions, dots and convolutions become explicit kernels with
accumulators. The CPU (LLVM) and CUDA (NVVM) lowerings consume these dataclasses.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from graphc_runtime.dims import Dim
from graphc_runtime.dims import prod as sym_prod
from graphc_runtime.errors import CompileError

from ..ir import dtypes
from ..ir.graph import Node
from ..ir.primitive import is_transcendental
from . import index as ix
from . import products


class Illegal(Exception):
    """The requested fusion cannot be expressed as one kernel."""


# -- buffers and value expressions ------------------------------------------------------

@dataclass(frozen=True)
class Buffer:
    """A contiguous row-major array the program reads or writes."""
    id: int
    shape: tuple
    dtype: str
    kind: str            # 'input', 'output', 'variable', 'constant', 'temp'
    name: str = ""

    @property
    def nbytes(self):
        """Bytes: an int, or a Dim for a symbolic shape."""
        n = dtypes.itemsize(self.dtype)
        for d in self.shape:
            n = n * d
        return n


@dataclass(frozen=True)
class VExpr:
    dtype: str


@dataclass(frozen=True)
class Load(VExpr):
    buffer: Buffer
    index: tuple


@dataclass(frozen=True)
class Const(VExpr):
    value: object


@dataclass(frozen=True)
class Prim(VExpr):
    op: str
    args: tuple
    attr: object = None       # compare direction / convert source dtype


@dataclass(frozen=True)
class IndexValue(VExpr):
    """The integer value of an index expression (iota)."""
    index: ix.IExpr


@dataclass(frozen=True)
class InRange(VExpr):
    """bool: lo <= index < hi and index % step == 0 (pad/concatenate guards)."""
    index: ix.IExpr
    lo: int
    hi: int
    step: int = 1


@dataclass(frozen=True)
class RngValue(VExpr):
    key0: VExpr
    key1: VExpr
    counter: ix.IExpr
    distribution: str


@dataclass(frozen=True)
class Choose(VExpr):
    """parts[k] where starts[k] <= index < starts[k+1] (concatenate): only the chosen part
    is evaluated (lowered to branches, not a select of every part)."""
    index: ix.IExpr
    starts: tuple
    parts: tuple


@dataclass(frozen=True)
class Acc(VExpr):
    """The finished accumulator of stage `stage` of a row/dot/conv kernel."""
    stage: int


# -- kernels -------------------------------------------------------------------------

@dataclass
class Store:
    buffer: Buffer
    value: VExpr
    index: tuple


@dataclass
class LoopKernel:
    """for index in shape: every store (at that index)."""
    name: str
    shape: tuple
    loop_vars: tuple
    stores: list


@dataclass
class Reduction:
    kind: str            # 'sum', 'max', 'min', 'prod', 'argmax', 'argmin'
    value: VExpr         # evaluated at the full index
    dtype: str           # result dtype (index dtype for arg reductions)
    acc_dtype: str       # accumulation dtype


@dataclass
class RowKernel:
    """for row in kept: reductions over the reduced dims (in order), then stores.

    full_index maps the loop variables to an index into the reduced operand's shape.
    """
    name: str
    kept_shape: tuple
    kept_vars: tuple
    reduced_shape: tuple
    reduced_vars: tuple
    full_index: tuple
    reductions: list
    row_stores: list          # stores at the row index (after all reductions)
    full_stores: list         # stores over the reduced dims (after all reductions)
    row_values: list = field(default_factory=list)   # per stage (+1 for the stores):
    # expressions that depend on the row only, evaluated once per row before that stage
    stashed: list = field(default_factory=list)      # (stage, expr): full-index values
    # computed in that stage's loop and kept in a row-sized scratch for later loops


@dataclass
class DotKernel:
    """out[b, m, n] = sum_k lhs(b, m, k) * rhs(b, k, n); then the epilogue stores."""
    name: str
    out: Buffer
    batch_vars: tuple
    m_vars: tuple
    n_vars: tuple
    k_vars: tuple
    out_index: tuple
    lhs: VExpr
    rhs: VExpr
    acc_dtype: str
    epilogue: list            # stores at out_index; Acc(0) is the dot's value
    fills: list = field(default_factory=list)   # (loop vars, Store): constants stored
    # around the epilogue's padded results (their borders), per batch and m index
    private_out: bool = False  # out is read by no other kernel (its epilogue reads the
    # product as Acc(0)): a backend may keep each batch index's product in a scratch
    layouts: list = field(default_factory=list)  # (loop vars, Store): results of another
    # shape (the product rearranged: a transposed or phase-split copy), each a nest run
    # per batch index after its product; their Loads of `out` read that batch index's
    # product (K.layout_epilogue)
    private_layouts: set = field(default_factory=set)  # ids of layout buffers only this
    # kernel's later nests read: a backend may keep each batch index's in a scratch


@dataclass
class WinogradKernel(DotKernel):
    """A 3x3 stride-1 convolution by F(2x2, 3x3) (ir/ops/winograd.py): lhs loads the
    filters' transform u (16, O, C) at (0, m, k), rhs the padded input (N, C, H+2, W+2)
    at (b, k, n0, n1), the corner of output (n0, n1)'s window; out[b, m, n0, n1] is the
    convolution, then the epilogue as a DotKernel's. Only a backend that knows this
    kernel runs it (the CPU's); its loads name what it reads."""


@dataclass
class ConvKernel:
    """out[n, o, *sp] = sum over (c, *window) of guarded input * kernel; then epilogue."""
    name: str
    out: Buffer
    out_vars: tuple
    red_vars: tuple
    out_index: tuple
    term: VExpr               # guarded product at (out_vars, red_vars)
    acc_dtype: str
    epilogue: list


@dataclass
class ScatterKernel:
    """out = operand; then for u in updates' shape: out[target(u)] += update(u)."""
    name: str
    out: Buffer
    copy: LoopKernel
    upd_shape: tuple
    upd_vars: tuple
    target: tuple
    update: VExpr


@dataclass
class CollectiveKernel:
    """A collective across processes (MPI): dst = op(src over all ranks)."""
    name: str
    op: str                  # all_reduce, all_gather, reduce_scatter
    attrs: dict
    src: Buffer
    dst: Buffer


@dataclass
class ControlKernel:
    """A loop or cond run inside the program: its regions compiled as nested programs.

    `bodies` maps a region's role ('body', 'cond', 'true', 'false') to its Lowered
    program (own kernels, slots and arena); `operands` are the node's inputs (outer
    buffers, in order), `results` where each result goes. `spare` holds the second buffer
    of each loop-carried value (scan/while: the body writes the next value there while
    reading the current one, then the two swap), `arenas` a scratch buffer per region for
    its temporaries (None when it needs none), `constants` the outer buffers of each
    region's constants, in the region's order.
    """
    name: str
    op: str                   # scan, while, cond
    attrs: dict               # length, reverse, num_carry, ... (no regions)
    bodies: dict
    operands: list
    results: list
    spare: list = field(default_factory=list)
    arenas: dict = field(default_factory=dict)
    constants: dict = field(default_factory=dict)
    flag: "Buffer | None" = None     # while: the cond region's bool result

    def scratch(self) -> list:
        return [b for b in self.spare + list(self.arenas.values()) + [self.flag]
                if b is not None]


def _whole_loads(buffers) -> list:
    """Loads standing for a kernel that reads these buffers outside any expression
    (collectives, loops): for liveness and alias checks."""
    return [Load(b.dtype, b, tuple(ix.const(0) for _ in b.shape)) for b in buffers]


def _whole_stores(buffers) -> list:
    return [Store(b, Const(b.dtype, 0), tuple(ix.const(0) for _ in b.shape)) for b in buffers]


# -- building expressions for a group ------------------------------------------------------

class ExprBuilder:
    """Turns nodes of one fusion group into value expressions at an index.

    `buffer_of(node)` gives the buffer of a node computed outside the group (or None if
    the node is inside); `accs` maps reduction node ids of this kernel to (stage, row
    index) so that a read at the row index becomes an accumulator.
    """

    def __init__(self, members: set, buffer_of, accs=None, roots=None):
        self.members = members
        self.buffer_of = buffer_of
        self.accs = accs or {}
        self.memo: dict = {}
        # the kernel's root node ids, where products may fuse into sums (products.py)
        self.roots = roots

    def value(self, node: Node, index) -> VExpr:
        index = tuple(index)
        key = (node.id, index)
        if key not in self.memo:
            self.memo[key] = self._value(node, index)
        return self.memo[key]

    def _value(self, node: Node, index) -> VExpr:
        if node.id in self.accs:
            stage, row_index = self.accs[node.id]
            if tuple(index) != tuple(row_index):
                raise Illegal(f"reduction %{node.id} read at another row")
            return Acc(node.dtype, stage)
        if node.id not in self.members:
            buf = self.buffer_of(node)
            if buf is None:
                if node.op == "constant" and node.attrs["value"].size == 1:
                    return Const(node.dtype, node.attrs["value"].reshape(()).item())
                raise Illegal(f"%{node.id} ({node.op}) has no buffer")
            return Load(node.dtype, buf, index)
        op, a = node.op, node.attrs
        ins = node.inputs
        if op == "constant":
            if a["value"].size != 1:
                raise Illegal("large constant inside a group")
            return Const(node.dtype, a["value"].reshape(()).item())
        if op == "iota":
            return IndexValue(node.dtype, index[a["dimension"]])
        if op == "dim_size":
            return IndexValue(node.dtype, ix.size(a["size"]))
        if op == "compare":
            return Prim("bool", "compare", (self.value(ins[0], index), self.value(ins[1], index)),
                        a["direction"])
        if op == "convert":
            return Prim(node.dtype, "convert", (self.value(ins[0], index),), ins[0].dtype)
        if op == "broadcast_in_dim":
            x = ins[0]
            j = [ix.const(0) if x.shape[i] == 1 else index[d]
                 for i, d in enumerate(a["broadcast_dimensions"])]
            return self.value(x, j)
        if op == "reshape":
            return self.value(ins[0], ix.reshape_index(index, node.shape, ins[0].shape))
        if op == "transpose":
            j = [None] * node.ndim
            for k, p in enumerate(a["permutation"]):
                j[p] = index[k]
            return self.value(ins[0], j)
        if op == "slice":
            j = [ix.add(ix.const(s), ix.mul(e, st)) for e, s, st in
                 zip(index, a["start_indices"], a["strides"])]
            return self.value(ins[0], j)
        if op == "window_view":             # overlapping windows of the last axis
            r = len(a["sizes"])
            lead = tuple(index[:len(index) - r])
            pos = ix.const(0)
            for e, st in zip(index[len(index) - r:], a["strides"]):
                pos = ix.add(pos, ix.mul(e, st))
            return self._flat_load(ins[0], lead, pos) or self.value(ins[0], lead + (pos,))
        if op == "reverse":
            j = list(index)
            for d in a["dimensions"]:
                j[d] = ix.add(ix.const(node.shape[d] - 1), ix.mul(index[d], -1))
            return self.value(ins[0], j)
        if op == "pad":
            return self._pad(node, index)
        if op == "concatenate":
            return self._concatenate(node, index)
        if op == "gather":
            return self._gather(node, index)
        if op == "rng":
            key = ins[0]
            return RngValue(node.dtype, self.value(key, (ix.const(0),)),
                            self.value(key, (ix.const(1),)),
                            ix.linearize(index, node.shape), a["distribution"])
        if op == "select":
            return Prim(node.dtype, "select", tuple(self.value(i, index) for i in ins))
        from ..ir.primitive import lookup
        if lookup(op).kind == "elementwise":
            fused = products.fusable_product(node, self.members, self.roots)
            if fused is not None:
                return self._multiply_add(node, fused, index)
            return Prim(node.dtype, op, tuple(self.value(i, index) for i in ins))
        raise Illegal(f"{op} cannot be fused as an element expression")

    def _multiply_add(self, node: Node, fused, index) -> VExpr:
        """add/sub of a product as one fma(a, b, c): a*b + c, a*b - c, c - a*b."""
        k, m = fused
        a, b = (self.value(i, index) for i in m.inputs)
        c = self.value(node.inputs[1 - k], index)
        if node.op == "sub":
            if k == 0:
                c = Prim(node.dtype, "neg", (c,))
            else:
                a = Prim(node.dtype, "neg", (a,))
        return Prim(node.dtype, "fma", (a, b, c))

    def _flat_load(self, x, lead, pos):
        """The load of x[lead..., pos] when x reshapes a buffer's trailing axes into one
        (a window_view of a padded image): addressed by the flat position in the last
        axis (zeros before it), which is the same linear address as its split into the
        buffer's axes and stays affine (the split's div/mod do not always simplify
        back), so products read it as a strided matrix. None otherwise."""
        if x.op != "reshape" or x.id not in self.members or x.inputs[0].id in self.members:
            return None
        src = x.inputs[0]
        k = len(lead)
        buf = self.buffer_of(src)
        if buf is None or tuple(src.shape[:k]) != tuple(x.shape[:k]) or src.ndim <= k:
            return None
        return Load(src.dtype, buf, lead + (ix.const(0),) * (src.ndim - k - 1) + (pos,))

    def _pad(self, node, index):
        x = node.inputs[0]
        a = node.attrs
        conds, j = [], []
        for d, (e, lo, it, n) in enumerate(zip(index, a["low"], a["interior"], x.shape)):
            t = ix.add(e, ix.const(-lo))
            step = it + 1
            if isinstance(n, Dim):                 # a symbolic axis: bounds at the call
                hi = (n - 1) * step + 1
                conds.append(InRange("bool", t, 0, hi, step))
                j.append(ix.clamp(ix.floordiv(t, step), 0, n - 1))
                continue
            hi = (n - 1) * step + 1 if n else 0
            if not (t.lo >= 0 and t.hi < hi and step == 1):
                conds.append(InRange("bool", t, 0, hi, step))
            j.append(ix.clamp(ix.floordiv(t, step), 0, max(n - 1, 0)))
        inner = self.value(x, j) if x.size else Const(node.dtype, a["value"])
        if not conds:
            return inner
        cond = conds[0]
        for c in conds[1:]:
            cond = Prim("bool", "and", (cond, c))
        return Prim(node.dtype, "select", (cond, inner, Const(node.dtype, a["value"])))

    def _concatenate(self, node, index):
        dim = node.attrs["dimension"]
        starts, parts, offset = [], [], 0
        for x in node.inputs:
            n = x.shape[dim]
            if n:
                j = list(index)
                j[dim] = ix.clamp(ix.add(index[dim], ix.const(-offset)), 0, n - 1)
                starts.append(offset)
                parts.append(self.value(x, j))
            offset += n
        if len(parts) == 1:
            return parts[0]
        return Choose(node.dtype, index[dim], tuple(starts), tuple(parts))

    def _gather(self, node, index):
        operand, indices = node.inputs
        axis = node.attrs["axis"]
        r = indices.ndim
        idx = self.value(indices, index[axis:axis + r])
        n = operand.shape[axis]
        j = list(index[:axis]) + [ix.clamp(ix.from_value(idx), 0, max(n - 1, 0))] + \
            list(index[axis + r:])
        return self.value(operand, j)


# -- kernel construction ------------------------------------------------------------------

def loop_vars(shape, prefix="i"):
    return tuple(ix.var(f"{prefix}{d}", n) for d, n in enumerate(shape))


def _acc_dtype(dtype: str) -> str:
    return dtypes.compute_dtype(dtype)


def build_loop(name, roots, members, buffer_of, dests) -> LoopKernel:
    shape = roots[0].shape
    if any(r.shape != shape for r in roots):
        raise Illegal("loop roots of different shapes")
    vars_ = loop_vars(shape)
    eb = ExprBuilder(members, buffer_of, roots={r.id for r in roots})
    stores = [Store(buf, eb.value(r, vars_), vars_) for r in roots for buf in dests(r)]
    return LoopKernel(name, shape, vars_, stores)


REDUCE_KIND = {"reduce_sum": "sum", "reduce_max": "max", "reduce_min": "min",
               "reduce_prod": "prod", "argmax": "argmax", "argmin": "argmin"}


def reduction_signature(node: Node):
    """(operand shape, reduced axes) of a reduction node."""
    axes = node.attrs["axes"] if "axes" in node.attrs else (node.attrs["axis"],)
    return node.inputs[0].shape, tuple(axes)


def _adjacent_runs(shape, axes) -> list:
    """The reduced axes in runs of adjacent static ones, each run one loop of the row (a
    global average pool's 8 x 8 window: one loop of 64 the vectorizer takes, where an
    inner loop of 8 was unrolled into a chain of scalar adds)."""
    runs = []
    for d in axes:
        if runs and runs[-1][-1] == d - 1 and isinstance(shape[d], int) and \
                isinstance(shape[runs[-1][-1]], int):
            runs[-1].append(d)
        else:
            runs.append([d])
    return runs


def build_row(name, roots, members, buffer_of, dests) -> RowKernel:
    reductions = sorted((m for m in members.values() if m.op in REDUCE_KIND), key=lambda n: n.id)
    shape, axes = reduction_signature(reductions[0])
    if any(reduction_signature(r) != (shape, axes) for r in reductions):
        raise Illegal("reductions over different domains")
    kept = tuple(d for d in range(len(shape)) if d not in axes)
    kept_shape = tuple(shape[d] for d in kept)
    runs = _adjacent_runs(shape, axes)
    red_shape = tuple(sym_prod([shape[d] for d in run]) for run in runs)
    kvars = tuple(ix.var(f"r{k}", n) for k, n in enumerate(kept_shape))
    rvars = tuple(ix.var(f"j{k}", n) for k, n in enumerate(red_shape))
    full = [None] * len(shape)
    for k, d in enumerate(kept):
        full[d] = kvars[k]
    for run, v in zip(runs, rvars):
        for d, digit in zip(run, ix.delinearize(v, [shape[d] for d in run])):
            full[d] = digit
    full = tuple(full)
    accs = {r.id: (k, kvars) for k, r in enumerate(reductions)}
    eb = ExprBuilder(members, buffer_of, roots={r.id for r in roots})
    stages, row_values = [], []

    def new_row_values(seen):
        out = [e for (nid, index), e in eb.memo.items() if index == kvars and id(e) not in seen]
        seen.update(id(e) for e in out)
        return out
    seen: set = set()
    for k, r in enumerate(reductions):
        eb.accs = {rid: v for rid, v in accs.items() if v[0] < k}
        value = eb.value(r.inputs[0], full)
        kind = REDUCE_KIND[r.op]
        stages.append(Reduction(kind, value, r.dtype, _acc_dtype(r.inputs[0].dtype)))
        row_values.append(new_row_values(seen))
    eb.accs = accs
    row_stores, full_stores = [], []
    for r in roots:
        if r.shape == kept_shape and (r.op in REDUCE_KIND or r.shape != shape):
            value = eb.value(r, kvars)
            row_stores += [Store(b, value, kvars) for b in dests(r)]
        elif r.shape == shape:
            value = eb.value(r, full)
            full_stores += [Store(b, value, full) for b in dests(r)]
        else:
            raise Illegal(f"root %{r.id} {r.type_str()} does not fit the row domain")
    row_values.append(new_row_values(seen))
    stashed = _stash_candidates(stages, full_stores, red_shape)
    return RowKernel(name, kept_shape, kvars, red_shape, rvars, full, stages, row_stores,
                     full_stores, row_values, stashed)


MAX_STASH_ELEMENTS = 1 << 15


def _walk(e, out: dict, choices: bool = True):
    """id -> expr for every value expression under `e`; without `choices`, only those
    computed on every path (a concatenate choice's parts are computed only in the branch
    taken, so they are not entered)."""
    if id(e) in out:
        return
    out[id(e)] = e
    if isinstance(e, Prim) or choices and isinstance(e, Choose):
        for a in (e.args if isinstance(e, Prim) else e.parts):
            _walk(a, out, choices)


def value_exprs(exprs) -> list:
    """Every distinct value expression under `exprs` (operands of primitives and the
    parts of concatenate choices; indices not entered)."""
    out: dict = {}
    for e in exprs:
        _walk(e, out)
    return list(out.values())


def _expensive(e, memo) -> bool:
    if id(e) not in memo:
        if isinstance(e, Choose):
            memo[id(e)] = any(_expensive(a, memo) for a in e.parts)
        else:
            memo[id(e)] = isinstance(e, Prim) and (is_transcendental(e.op) or any(
                _expensive(a, memo) for a in e.args))
    return memo[id(e)]


def _stash_candidates(stages, full_stores, red_shape) -> list:
    """Expensive full-index values computed in a reduction stage and needed again later:
    keeping them in a row-sized scratch saves recomputing them (softmax's exp)."""
    size = 1
    for n in red_shape:
        size = size * n
    if not stages or not isinstance(size, int) or size > MAX_STASH_ELEMENTS or size == 0:
        return []
    later_exprs = [s.value for s in full_stores]
    chosen, taken, memo = [], set(), {}
    for k in range(len(stages) - 1, -1, -1):
        here: dict = {}
        _walk(stages[k].value, here, choices=False)
        later: dict = {}
        for e in later_exprs:
            _walk(e, later)
        shared = [e for i, e in here.items() if i in later and i not in taken
                  and _expensive(e, memo) and not isinstance(e, (Load, Const))]
        # keep the outermost shared values only
        inner: dict = {}
        for e in shared:
            if isinstance(e, (Prim, Choose)):
                for a in (e.args if isinstance(e, Prim) else e.parts):
                    _walk(a, inner)
        for e in shared:
            if id(e) not in inner:
                chosen.append((k, e))
                taken.add(id(e))
        later_exprs.append(stages[k].value)
    return chosen


def build_dot(name, dot: Node, roots, members, buffer_of, dests) -> DotKernel:
    if dot.op == "winograd_conv2d":
        return build_winograd(name, dot, roots, members, buffer_of, dests)
    lhs, rhs = dot.inputs
    a = dot.attrs
    lc, rc, lb, rb = a["lhs_contracting"], a["rhs_contracting"], a["lhs_batch"], a["rhs_batch"]
    lfree = [d for d in range(lhs.ndim) if d not in lc and d not in lb]
    rfree = [d for d in range(rhs.ndim) if d not in rc and d not in rb]
    bvars = tuple(ix.var(f"b{k}", lhs.shape[d]) for k, d in enumerate(lb))
    mvars = tuple(ix.var(f"m{k}", lhs.shape[d]) for k, d in enumerate(lfree))
    nvars = tuple(ix.var(f"n{k}", rhs.shape[d]) for k, d in enumerate(rfree))
    kvars = tuple(ix.var(f"k{k}", lhs.shape[d]) for k, d in enumerate(lc))
    li = [None] * lhs.ndim
    ri = [None] * rhs.ndim
    for k, (dl, dr) in enumerate(zip(lb, rb)):
        li[dl], ri[dr] = bvars[k], bvars[k]
    for k, (dl, dr) in enumerate(zip(lc, rc)):
        li[dl], ri[dr] = kvars[k], kvars[k]
    for k, d in enumerate(lfree):
        li[d] = mvars[k]
    for k, d in enumerate(rfree):
        ri[d] = nvars[k]
    view_members = {m for m in members if m != dot.id}
    eb = ExprBuilder(view_members, buffer_of)
    lhs_e, rhs_e = eb.value(lhs, li), eb.value(rhs, ri)
    out_index = bvars + mvars + nvars
    epilogue, fills, layouts = _epilogue(dot, roots, eb, out_index, dests,
                                         len(bvars) + len(mvars), buffer_of)
    return DotKernel(name, dests(dot)[0], bvars, mvars, nvars, kvars, out_index, lhs_e,
                     rhs_e, _acc_dtype(dot.dtype), epilogue, fills, layouts=layouts)


def build_winograd(name, node: Node, roots, members, buffer_of, dests) -> WinogradKernel:
    """A winograd_conv2d and its epilogue: both operands must be whole buffers."""
    xp, u = node.inputs
    n, c = xp.shape[:2]
    bvars = (ix.var("b0", n),)
    mvars = (ix.var("m0", u.shape[1]),)
    nvars = (ix.var("n0", node.shape[2]), ix.var("n1", node.shape[3]))
    kvars = (ix.var("k0", c),)
    eb = ExprBuilder({m for m in members if m != node.id}, buffer_of)
    lhs_e = eb.value(u, (ix.const(0), mvars[0], kvars[0]))
    rhs_e = eb.value(xp, (bvars[0], kvars[0]) + nvars)
    for e, v in ((lhs_e, u), (rhs_e, xp)):
        if not isinstance(e, Load) or tuple(e.buffer.shape) != tuple(v.shape):
            raise Illegal("winograd_conv2d reads whole buffers")
    out_index = bvars + mvars + nvars
    epilogue, fills, _ = _epilogue(node, roots, eb, out_index, dests, 2)
    return WinogradKernel(name, dests(node)[0], bvars, mvars, nvars, kvars, out_index,
                          lhs_e, rhs_e, _acc_dtype(node.dtype), epilogue, fills)


def _epilogue(dot: Node, roots, eb: "ExprBuilder", out_index, dests, lead: int,
              buffer_of=None):
    """(epilogue stores, border fills, layout nests) of a dot-like kernel whose value is
    Acc(0) at out_index; `lead` of its axes are batch and m axes. Layout nests (roots of
    another shape, K.layout_epilogue) need `buffer_of`."""
    eb.accs = {dot.id: (0, out_index)}
    eb.memo = {}
    if not dests(dot):
        raise Illegal("dot needs an output buffer")
    epilogue, fills, layouts = [], [], []
    laid_out: dict = {}                  # layout roots written so far: node id -> buffer
    others = [r for r in roots if r is not dot]
    for r in sorted(roots, key=lambda n: n.id):
        if r is dot:
            epilogue += [Store(b, Acc(dot.dtype, 0), out_index) for b in dests(dot)[1:]]
        elif buffer_of is not None and layout_epilogue(r, dot) and (
                any(_reads(r, i, eb.members) for i in laid_out) or r.shape != dot.shape
                and any(_reads(o, r.id, eb.members) for o in others if o is not r)):
            # read back by a later root (the padded input of a depthwise convolution
            # over the product), or reading such a root: written image by image
            layouts += _layout_nests(dot, r, eb.members, buffer_of, dests, out_index[0],
                                     laid_out)
            laid_out[r.id] = dests(r)[0]
        elif r.shape == dot.shape:
            epilogue += [Store(b, eb.value(r, out_index), out_index) for b in dests(r)]
        elif padded_epilogue(r, dot):
            low = r.attrs["low"]
            at = tuple(ix.add(v, ix.const(lo)) for v, lo in zip(out_index, low))
            value = eb.value(r.inputs[0], out_index)
            for b in dests(r):
                epilogue.append(Store(b, value, at))
                fills += _border_fills(b, r, out_index, lead)
        elif buffer_of is not None and layout_epilogue(r, dot):
            layouts += _layout_nests(dot, r, eb.members, buffer_of, dests, out_index[0],
                                     laid_out)
            laid_out[r.id] = dests(r)[0]
        else:
            raise Illegal("epilogue of another shape")
    return epilogue, fills, layouts


def _reads(node: Node, target: int, members) -> bool:
    """Whether node's value, computed through the group's members, reads node `target`."""
    stack, seen = [node], set()
    while stack:
        n = stack.pop()
        for i in n.inputs:
            if i.id == target:
                return True
            if i.id in members and i.id not in seen:
                seen.add(i.id)
                stack.append(i)
    return False


def layout_epilogue(node: Node, dot: Node) -> bool:
    """Whether a dot kernel may compute `node`, a value of another shape than the dot's,
    as a layout nest (DotKernel.layouts): the dot has one batch axis, `node` leads with
    the same one and is at most twice the dot's size. _layout_nests checks that it reads
    the product only at the batch index it writes."""
    if dot.op != "dot_general" or len(dot.attrs["lhs_batch"]) != 1 or not node.ndim:
        return False
    if not all(isinstance(n, int) for n in tuple(node.shape) + tuple(dot.shape)):
        return False
    return node.shape[0] == dot.shape[0] and node.size <= 2 * dot.size


def _layout_nests(dot: Node, root: Node, members, buffer_of, dests, batch_var,
                  laid_out) -> list:
    """(loop vars, Store) nests writing `root` for one index of the dot's batch axis
    (batch_var), its value built from a Load of the dot's output buffer or from the
    buffers of earlier layout roots (`laid_out`: a depthwise convolution over the
    padded copy just written); Illegal unless it reads at most one element of the
    product, and that and the earlier layouts at that batch index only."""
    out = dests(dot)[0]
    written = {**laid_out, dot.id: out}
    eb = ExprBuilder({m for m in members if m not in laid_out},
                     lambda n: written[n.id] if n.id in written else buffer_of(n))
    vars_ = tuple(ix.var(f"l{root.id}_{d}", n) for d, n in enumerate(root.shape[1:]))
    index = (batch_var,) + vars_
    value = eb.value(root, index)
    loads = loads_of([value])
    ours = {id(b) for b in written.values()}
    if sum(ld.buffer is out for ld in loads) > 1:  # a window sum over the product
        raise Illegal("a layout epilogue reads one element of the product")
    if not any(id(ld.buffer) in ours for ld in loads) or \
            any(id(ld.buffer) in ours and ld.index[0] != batch_var for ld in loads):
        raise Illegal("a layout epilogue reads the product at its batch index")
    return [(vars_, Store(b, value, index)) for b in dests(root)]


def channel_vars(k: DotKernel):
    """For each layout nest of k, the loop variable that is its channel: the one that
    indexes k.out's m axis (its only one) in each load of the product, and the same axis
    of each earlier layout it reads. The nests then handle the product's rows
    independently: a block of rows can go through all of them before the next block's
    product is computed (its data still in the core's cache), and threads can share an
    image by rows. None where some nest does not fit (no such variable, or another index
    on a channel axis)."""
    m = [v for v in k.m_vars if isinstance(v, ix.IVar)]
    if len(m) != 1 or not k.layouts:
        return None
    axis = {k.out.id: list(k.out_index).index(m[0])}   # buffer id -> its channel axis
    found = []
    for vars_, store in k.layouts:
        names = {v.name for v in vars_ if isinstance(v, ix.IVar)}
        chans = {i.name if isinstance(i, ix.IVar) and i.name in names else None
                 for i in (ld.index[axis[ld.buffer.id]] for ld in loads_of([store.value])
                           if ld.buffer.id in axis)}
        if len(chans) != 1 or None in chans:
            return None
        chan = chans.pop()
        at = [n for n, i in enumerate(store.index) if isinstance(i, ix.IVar) and i.name == chan]
        used = [i for i in store.index if chan in ix.variables(i)]
        if len(at) != 1 or len(used) != 1 or \
                ix.extent_of(store.index[at[0]]) != ix.extent_of(m[0]):
            return None
        axis[store.buffer.id] = at[0]
        found.append(chan)
    return found


def padded_epilogue(node: Node, dot: Node) -> bool:
    """Whether `node` pads a value of the dot's shape with a constant along the dot's
    column (n) axes only (a convolution's output padded for the next one): a dot
    kernel's epilogue then stores that value inside the padded buffer and its fills
    write the border."""
    if node.op != "pad" or node.inputs[0].shape != dot.shape:
        return False
    a = node.attrs
    lead = 2 if dot.op == "winograd_conv2d" else \
        dot.inputs[0].ndim - len(dot.attrs["lhs_contracting"])      # batch and m axes
    return not any(a["interior"]) and min(a["low"] + a["high"]) >= 0 and \
        not any(a["low"][:lead]) and not any(a["high"][:lead]) and \
        all(isinstance(n, int) for n in node.shape[lead:])


def _border_fills(buf: Buffer, pad: Node, out_index, lead: int) -> list:
    """(loop vars, Store) nests writing the pad value on the border of `buf` (pad's
    result) around the interior the epilogue writes, for one index of the `lead` axes
    (the dot's batch and m variables, which the nests share): for each padded axis d,
    the slabs below and above the interior along d, inside it along the axes before d
    and whole along those after."""
    a = pad.attrs
    inner, full = pad.inputs[0].shape, pad.shape
    value = Const(pad.dtype, a["value"])
    nests = []
    for d in range(lead, len(full)):
        for start, count in ((0, a["low"][d]), (a["low"][d] + inner[d], a["high"][d])):
            if count == 0:
                continue
            vars_, index = [], list(out_index[:lead])
            for i in range(lead, len(full)):
                n = inner[i] if i < d else count if i == d else full[i]
                v = ix.var(f"f{d}_{start}_{i}", n)
                vars_.append(v)
                offset = a["low"][i] if i < d else start if i == d else 0
                index.append(ix.add(v, ix.const(offset)) if offset else v)
            nests.append((tuple(vars_), Store(buf, value, tuple(index))))
    return nests


def build_conv(name, conv: Node, roots, members, buffer_of, dests) -> ConvKernel:
    x, w = conv.inputs
    a = conv.attrs
    nsp = x.ndim - 2
    groups = a["feature_group_count"]
    cg, og = w.shape[1], conv.shape[1] // groups
    ovars = loop_vars(conv.shape, "o")
    rvars = tuple(ix.var(f"c{k}", n) for k, n in enumerate((cg,) + w.shape[2:]))
    n_v, o_v, sp_v = ovars[0], ovars[1], ovars[2:]
    c_v, k_v = rvars[0], rvars[1:]
    group = ix.floordiv(o_v, og)
    xi = [n_v, ix.add(ix.mul(group, cg), c_v)]
    conds = []
    for d in range(nsp):
        pos = ix.add(ix.add(ix.mul(sp_v[d], a["window_strides"][d]),
                            ix.mul(k_v[d], a["rhs_dilation"][d])), ix.const(-a["padding"][d][0]))
        ld, size = a["lhs_dilation"][d], x.shape[2 + d]
        hi = (size - 1) * ld + 1
        if not (pos.lo >= 0 and pos.hi < hi and ld == 1):
            conds.append(InRange("bool", pos, 0, hi, ld))
        xi.append(ix.clamp(ix.floordiv(pos, ld), 0, size - 1))
    view_members = {m for m in members if m != conv.id}
    eb = ExprBuilder(view_members, buffer_of)
    prod = Prim(conv.dtype, "mul", (eb.value(x, xi), eb.value(w, (o_v,) + rvars)))
    if conds:
        cond = conds[0]
        for c in conds[1:]:
            cond = Prim("bool", "and", (cond, c))
        prod = Prim(conv.dtype, "select", (cond, prod, Const(conv.dtype, 0.0)))
    eb.accs = {conv.id: (0, ovars)}
    eb.memo = {}
    out_buf = dests(conv)[0]
    epilogue = []
    for r in roots:
        if r is conv:
            epilogue += [Store(b, Acc(conv.dtype, 0), ovars) for b in dests(conv)[1:]]
        else:
            epilogue += [Store(b, eb.value(r, ovars), ovars) for b in dests(r)]
    return ConvKernel(name, out_buf, ovars, rvars, ovars, prod, _acc_dtype(conv.dtype), epilogue)


def build_scatter(name, node: Node, members, buffer_of, dests) -> ScatterKernel:
    operand, indices, updates = node.inputs
    axis = node.attrs["axis"]
    out = dests(node)[0]
    view_members = {m for m in members if m != node.id}
    eb = ExprBuilder(view_members, buffer_of)
    vars_ = loop_vars(node.shape)
    copy = LoopKernel(name + "_init", node.shape, vars_,
                      [Store(out, eb.value(operand, vars_), vars_)])
    uvars = loop_vars(updates.shape, "u")
    r = indices.ndim
    idx = eb.value(indices, uvars[axis:axis + r])
    n = operand.shape[axis]
    target = tuple(uvars[:axis]) + (ix.clamp(ix.from_value(idx), 0, max(n - 1, 0)),) + \
        tuple(uvars[axis + r:])
    if len(dests(node)) > 1:
        raise Illegal("scatter with several destinations")
    return ScatterKernel(name, out, copy, updates.shape, uvars, target,
                         eb.value(updates, uvars))


def kernel_loads(kernel) -> list[Load]:
    """Every Load in a kernel (for alias and in-place checks)."""
    if isinstance(kernel, ControlKernel):
        return _whole_loads(kernel.operands)
    if isinstance(kernel, CollectiveKernel):
        return _whole_loads([kernel.src])
    exprs = []
    if isinstance(kernel, LoopKernel):
        exprs = [s.value for s in kernel.stores]
    elif isinstance(kernel, RowKernel):
        exprs = [r.value for r in kernel.reductions] + [s.value for s in
                                                        kernel.row_stores + kernel.full_stores]
    elif isinstance(kernel, DotKernel):
        exprs = [kernel.lhs, kernel.rhs] + [s.value for s in kernel.epilogue] + \
            [s.value for _, s in kernel.layouts]
    elif isinstance(kernel, ConvKernel):
        exprs = [kernel.term] + [s.value for s in kernel.epilogue]
    elif isinstance(kernel, ScatterKernel):
        exprs = [s.value for s in kernel.copy.stores] + [kernel.update]
        return loads_of(exprs, kernel.target)     # the target's gathered indices too
    return loads_of(exprs)


def loads_of(exprs, indices=()) -> list[Load]:
    """Every Load under the value expressions `exprs` and the index expressions
    `indices` (gathers read data in their indices)."""
    found, seen = [], set()

    def walk(e):
        if id(e) in seen:
            return
        seen.add(id(e))
        if isinstance(e, Load):
            found.append(e)
            for i in e.index:
                walk_index(i)
        elif isinstance(e, Prim):
            for x in e.args:
                walk(x)
        elif isinstance(e, Choose):
            walk_index(e.index)
            for x in e.parts:
                walk(x)
        elif isinstance(e, RngValue):
            walk(e.key0), walk(e.key1)

    def walk_index(i):
        if isinstance(i, ix.IFromValue):
            walk(i.value)
        for f in ("a", "b"):
            if hasattr(i, f):
                walk_index(getattr(i, f))

    for e in exprs:
        walk(e)
    for i in indices:
        walk_index(i)
    return found


def kernel_stores(kernel) -> list[Store]:
    if isinstance(kernel, ControlKernel):       # results and scratch: live at this kernel
        return _whole_stores(kernel.results + kernel.scratch())
    if isinstance(kernel, CollectiveKernel):
        return _whole_stores([kernel.dst])
    if isinstance(kernel, LoopKernel):
        return kernel.stores
    if isinstance(kernel, RowKernel):
        return kernel.row_stores + kernel.full_stores
    if isinstance(kernel, DotKernel):
        return [Store(kernel.out, Acc(kernel.out.dtype, 0), kernel.out_index)] + \
            kernel.epilogue + [store for _, store in kernel.fills + kernel.layouts]
    if isinstance(kernel, ConvKernel):
        return [Store(kernel.out, Acc(kernel.out.dtype, 0), kernel.out_index)] + kernel.epilogue
    if isinstance(kernel, ScatterKernel):
        return [Store(kernel.out, kernel.update, kernel.target)]
    raise CompileError(f"unknown kernel {kernel!r}")


KIND_NAMES = {"LoopKernel": "loop", "RowKernel": "row", "DotKernel": "dot",
              "WinogradKernel": "dot",
              "ConvKernel": "conv", "ScatterKernel": "scatter",
              "CollectiveKernel": "collective", "ControlKernel": "control"}


def kernel_kind(kernel) -> str:
    return KIND_NAMES.get(type(kernel).__name__, type(kernel).__name__)


def extent(vars_) -> int:
    """Iterations of a loop nest over `vars_` (constants in the list count once)."""
    n = 1
    for v in vars_:
        if isinstance(v, ix.IVar):
            n = n * ix.extent_of(v)
    return n


def kernel_flops(kernel) -> int:
    """Multiply-adds of a dot or conv kernel, counted as two flops each (0 otherwise)."""
    if isinstance(kernel, WinogradKernel):       # 16 products per 2 x 2 outputs
        return 8 * extent(kernel.batch_vars + kernel.m_vars + kernel.n_vars + kernel.k_vars)
    if isinstance(kernel, DotKernel):
        return 2 * extent(kernel.batch_vars + kernel.m_vars + kernel.n_vars + kernel.k_vars)
    if isinstance(kernel, ConvKernel):
        return 2 * extent(kernel.out_vars) * extent(kernel.red_vars)
    return 0
