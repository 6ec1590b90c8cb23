"""The dot kernel of a fusion group: a product (or Winograd's convolution) and its
epilogue: elementwise stores over the product, padded copies with their border fills,
and layout nests run per batch index (a rearranged copy of the product and what reads it
through a window)."""
from __future__ import annotations

from ..ir.graph import Node
from . import index as ix
from .build_loop import acc_dtype as _acc_dtype
from .expressions import ExprBuilder
from .ir import (Acc, Buffer, Const, DotKernel, Illegal, Load, Store, WinogradKernel,
                 loads_of)


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
                     rhs_e, _acc_dtype(dot.dtype), epilogue, fills, layouts=layouts,
                     packed_int8=a.get("packed_int8") or "")


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
    batch = len(dot.attrs["lhs_batch"]) if dot.op == "dot_general" else 1
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
            layouts += _layout_nests(dot, r, eb.members, buffer_of, dests,
                                     out_index[:batch], laid_out)
            laid_out[r.id] = dests(r)[0]
        elif r.shape == dot.shape:
            epilogue += [Store(b, eb.value(r, out_index), out_index) for b in dests(r)]
        elif reshaped_epilogue(r, dot):          # the same elements, another shape
            at = tuple(ix.reshape_index(out_index, dot.shape, r.shape))
            value = eb.value(r.inputs[0], out_index)
            epilogue += [Store(b, value, at) for b in dests(r)]
        elif padded_epilogue(r, dot):
            low = r.attrs["low"]
            at = tuple(ix.add(v, ix.const(lo)) for v, lo in zip(out_index, low))
            value = eb.value(r.inputs[0], out_index)
            for b in dests(r):
                epilogue.append(Store(b, value, at))
                fills += _border_fills(b, r, out_index, lead)
        elif buffer_of is not None and layout_epilogue(r, dot):
            layouts += _layout_nests(dot, r, eb.members, buffer_of, dests,
                                     out_index[:batch], laid_out)
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
    the same one and is at most twice the dot's size; or the dot is grouped (two batch
    axes, images and groups: (N, G, O/G, ...)) and `node` leads with the images and
    then the groups' rows together (N, O, ...). _layout_nests checks that it reads the
    product only at the batch index it writes."""
    if dot.op != "dot_general" or len(dot.attrs["lhs_batch"]) not in (1, 2) or not node.ndim:
        return False
    if not all(isinstance(n, int) for n in tuple(node.shape) + tuple(dot.shape)):
        return False
    if len(dot.attrs["lhs_batch"]) == 2 and (
            dot.ndim < 4 or node.ndim < 2 or node.shape[1] != dot.shape[1] * dot.shape[2]):
        return False
    return node.shape[0] == dot.shape[0] and node.size <= 2 * dot.size


def _layout_nests(dot: Node, root: Node, members, buffer_of, dests, batch,
                  laid_out) -> list:
    """(loop vars, Store) nests writing `root` for one index of the dot's batch axes
    (`batch`: its image, and its group where the dot is grouped: the nest then covers
    that group's rows of root's second axis), its value built from a Load of the dot's
    output buffer or from the buffers of earlier layout roots (`laid_out`: a depthwise
    convolution over the padded copy just written); Illegal unless it reads at most one
    element of the product, and that and the earlier layouts at that batch index only."""
    out = dests(dot)[0]
    written = {**laid_out, dot.id: out}
    eb = ExprBuilder({m for m in members if m not in laid_out},
                     lambda n: written[n.id] if n.id in written else buffer_of(n))
    sizes = list(root.shape[1:])
    if len(batch) == 2:              # grouped: the group's rows of the second axis
        sizes[0] = dot.shape[2]
    vars_ = tuple(ix.var(f"l{root.id}_{d}", n) for d, n in enumerate(sizes))
    index = (batch[0],) + vars_
    if len(batch) == 2:
        index = (batch[0], ix.add(ix.mul(batch[1], dot.shape[2]), vars_[0])) + vars_[1:]
    value = eb.value(root, index)
    loads = loads_of([value])
    ours = {id(b) for b in written.values()}
    if sum(ld.buffer is out for ld in loads) > 1:  # a window sum over the product
        raise Illegal("a layout epilogue reads one element of the product")

    def at(ld):            # the batch index a load of the product or a layout reads
        if len(batch) == 1 or ld.buffer is out:
            return tuple(ld.index[:len(batch)])
        return ld.index[0], ix.floordiv(ld.index[1], dot.shape[2])
    if not any(id(ld.buffer) in ours for ld in loads) or \
            any(id(ld.buffer) in ours and at(ld) != tuple(batch) for ld in loads):
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


def reshaped_epilogue(node: Node, dot: Node) -> bool:
    """Whether `node` reshapes a value of the dot's shape (passes/sink_reshapes.py: a
    linear layer's output put back from (B*T, N) to (B, T, N)): the epilogue stores that
    value at the reshaped index, the same place in row-major order."""
    return node.op == "reshape" and node.inputs[0].shape == dot.shape and \
        node.shape != dot.shape and dot.op == "dot_general"


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
