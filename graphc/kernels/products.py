"""Which products a kernel may fuse into the sum that reads them, as one multiply-add.

A fused multiply-add rounds once where a product and a sum round twice, so the product's
own value is never formed. That keeps a node's one value only where nothing else can see
the product: it is fused into its one use, when

- the product is a float32/float64 `mul` computed inside the kernel, not written out (not
  a root of the kernel: what it writes, other kernels read rounded), and
- in the whole graph it has exactly one use, that of this add/sub (fusion may copy the
  add into several kernels; every copy fuses the same way, by the same rule).

The code generator then emits `llvm.fma`, an exact operation, never the `contract` flag
(which lets LLVM fuse in one loop and not in another).
"""
from __future__ import annotations

import weakref
from collections import Counter

FUSED_DTYPES = ("float32", "float64")
_uses: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def use_counts(graph) -> Counter:
    """node id -> how many operand slots of the graph's nodes read it (cached per graph
    while its node list is unchanged)."""
    nodes = graph.nodes
    stamp = (len(nodes), nodes[-1].id if nodes else None)
    hit = _uses.get(graph)
    if hit is None or hit[0] != stamp:
        hit = (stamp, Counter(i.id for n in nodes for i in n.inputs))
        _uses[graph] = hit
    return hit[1]


def fusable_product(node, members, roots) -> tuple | None:
    """For an add/sub `node` of a kernel: (k, product) where operand k is a product it may
    fuse (see the module's rule), else None. `roots` None: the kernel's roots are not
    known, so nothing is fused."""
    if roots is None or node.op not in ("add", "sub") or node.dtype not in FUSED_DTYPES:
        return None
    counts = None
    for k, m in enumerate(node.inputs):
        if m.op != "mul" or m.id not in members or m.id in roots or m.dtype != node.dtype:
            continue
        if sum(1 for i in node.inputs if i is m) != 1:
            continue
        counts = counts if counts is not None else use_counts(node.graph)
        if counts[m.id] == 1:
            return k, m
    return None
