"""Chained chunks: a small loop kernel that reads what a split kernel just wrote runs
inside that kernel's thread chunks.

A convolution's product is split across threads by images or by output channels; the
loop kernel after it (bias, activation, the next convolution's padding) is often too
small to be split on its own and then ran on one thread, reading the half of the
product that the other core wrote (from that core's cache). Chained, each thread runs
its chunk of the product and then the same chunk of the loop kernel: one fork and join
for both, and every thread reads back what it wrote itself.

Chaining is allowed only when it gives what running the two kernels one after the other
gives: the follower's chunk [begin, end) of its variable u reads what the leader wrote
only at u along the axis where the leader's split variable v lies (the same range), it
has the same number of iterations there, and it writes nothing the leader reads or
writes (in the arena, where memory planning may reuse the leader's inputs).
"""
from __future__ import annotations

from graphc_runtime.dims import Undecidable, hint

from ..kernels import index as ix
from ..kernels import kernel as K

FOLLOWER_MAX_WORK = 1 << 22      # element-steps: a larger loop kernel keeps its own split
BLOCK_BYTES = 256 << 10          # what the leader writes per block of a chunk (the
# follower reads it back from the core's L2 cache)


def _stores(leader) -> list:
    """Every store of a leader kernel, a product's own output among them."""
    stores = leader.writes()
    if isinstance(leader, K.DotKernel):
        stores = stores + [K.Store(leader.out, None, leader.out_index)]
    return stores


def _written(leader) -> dict:
    """{buffer id: buffer} of what a leader kernel writes."""
    return {st.buffer.id: st.buffer for st in _stores(leader)}


def _leader_axes(leader, v) -> dict | None:
    """{buffer id: the axis at which the leader's stores index it by v} for every buffer
    the leader writes, or None where some store does not index by v at one fixed axis."""
    axes: dict = {}
    for st in _stores(leader):
        hits = [d for d, e in enumerate(st.index) if isinstance(e, ix.IVar) and e.name == v.name]
        if len(hits) != 1 or axes.setdefault(st.buffer.id, hits[0]) != hits[0]:
            return None
    return axes


def _overlap(a, b, offsets) -> bool:
    if a.id == b.id:
        return True
    if a.kind != "temp" or b.kind != "temp" or offsets is None or \
            a.id not in offsets or b.id not in offsets:   # no arena room: a kernel's scratch
        return False
    try:
        return offsets[a.id] < offsets[b.id] + b.nbytes and \
            offsets[b.id] < offsets[a.id] + a.nbytes
    except Undecidable:
        return True


def follower_split(leader, split, follower, offsets):
    """The loop variable of `follower` to run in `leader`'s chunks of `split`, or None
    when the two cannot be chained (see the module's docstring). `offsets` (arena
    offsets per temp buffer id) None: everything but the arena check."""
    if split is None or not isinstance(follower, K.LoopKernel):
        return None
    if not isinstance(leader, (K.DotKernel, K.LoopKernel, K.RowKernel)):
        return None
    if not isinstance(K.extent(follower.loop_vars), int) or \
            K.extent(follower.loop_vars) > FOLLOWER_MAX_WORK:
        return None
    axes = _leader_axes(leader, split)
    if axes is None:
        return None
    written = _written(leader)
    leader_bufs = leader_buffers(leader)
    u = None
    for ld in follower.reads():
        if ld.buffer.id not in written:
            if any(_overlap(ld.buffer, w, offsets) for w in written.values()):
                return None
            continue
        e = ld.index[axes[ld.buffer.id]] if len(ld.index) > axes[ld.buffer.id] else None
        if not isinstance(e, ix.IVar) or (u is not None and e.name != u.name):
            return None
        u = e
    if u is None or u.name not in {v.name for v in follower.loop_vars
                                   if isinstance(v, ix.IVar)}:
        return None
    if ix.extent_of(u) != ix.extent_of(split):
        return None
    for st in follower.stores:
        if any(_overlap(st.buffer, x, offsets) for x in leader_bufs):
            return None
    return u


def candidates(kernels) -> list:
    """The steps t whose kernel t + 1 could run in kernel t's chunks for some split of
    kernel t (decided before memory planning, which then keeps kernel t's buffers live
    through step t + 1, so that the follower's outputs are placed apart from them)."""
    out = []
    for t in range(len(kernels) - 1):
        leader = kernels[t]
        if not isinstance(leader, (K.DotKernel, K.LoopKernel, K.RowKernel)):
            continue
        names = {e.name: e for st in _stores(leader) for e in st.index
                 if isinstance(e, ix.IVar)}
        if any(follower_split(leader, v, kernels[t + 1], None) is not None
               for v in names.values()):
            out.append(t)
    return out


def leader_buffers(kernel) -> list:
    """Every buffer a (leader) kernel reads or writes."""
    bufs = {ld.buffer.id: ld.buffer for ld in kernel.reads()}
    bufs.update(_written(kernel))
    return list(bufs.values())


def chain_block(leader, split, granule: int = 1) -> int:
    """Iterations of `split` per block: the leader writes about BLOCK_BYTES a block (an
    image of a batch, a few dozen output channels of one image), a multiple of
    `granule` (the leader's chunk bounds' granule)."""
    total = sum(hint(b.nbytes) for b in _written(leader).values())
    per = max(1, total // max(1, hint(ix.extent_of(split))))
    block = max(1, BLOCK_BYTES // per)
    return -(-block // granule) * granule
