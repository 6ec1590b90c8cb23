"""The row kernel of a fusion group: reductions over one domain, in stages, with the
elementwise values around them (softmax and layer norm as one kernel)."""
from __future__ import annotations

from graphc_runtime.dims import prod as sym_prod

from ..ir.graph import Node
from ..ir.primitive import is_transcendental
from . import index as ix
from .build_loop import acc_dtype as _acc_dtype
from .expressions import ExprBuilder
from .ir import Acc, Choose, Const, Illegal, Load, Prim, Reduction, RowKernel, Store


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
    stage_stores, after = [], []
    for s in full_stores:
        (stage_stores if _without_last_result(s.value, len(stages) - 1) else after).append(s)
    full_stores = after
    stashed = _stash_candidates(stages, full_stores, red_shape)
    return RowKernel(name, kept_shape, kvars, red_shape, rvars, full, stages, row_stores,
                     full_stores, row_values, stashed, stage_stores)


def _without_last_result(value, last: int) -> bool:
    """Whether a full-index value can be stored in the last stage's loop: it reads no
    accumulator of that stage, nor any buffer through a data-dependent index."""
    for e in value_exprs([value]):
        if isinstance(e, Acc) and e.stage >= last:
            return False
        if isinstance(e, Load) and any(ix.has_data_index(i) for i in e.index):
            return False
    return True


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
