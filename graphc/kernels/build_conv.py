"""The conv kernel of a fusion group: a direct convolution (what conv_to_gemm leaves:
grouped and small ones) and its elementwise epilogue."""
from __future__ import annotations

from ..ir.graph import Node
from . import index as ix
from .build_loop import acc_dtype as _acc_dtype, loop_vars
from .expressions import ExprBuilder
from .ir import Acc, Const, ConvKernel, InRange, Prim, Store


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
