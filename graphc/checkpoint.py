"""gc.checkpoint(fn): recompute fn's values in the backward pass instead of keeping them.

`checkpoint(fn)(*args)` traces fn as usual and marks the nodes it added as one region of
their graph. When `vjp`/`grad` differentiates through the region, the VJP rules of its
nodes read copies recomputed from the region's inputs, which pass through `after(x,
*cotangents)` (graphc/ir/ops/ordering.py): the copies cannot be merged back into the
forward pass and run only once the backward pass reaches the region, so between the two
passes only the region's inputs and outputs stay live (like jax.checkpoint and
torch.utils.checkpoint). Random values recompute identically (they are functions of their
key). A region nested in another is recomputed as part of the outer one.
"""
from __future__ import annotations

import functools
import weakref

from graphc_runtime.errors import GraphcError

from .api import Tensor
from .ir.graph import Graph, current_graph
from .ir.primitive import bind
from .ir.source import user_location

# graph -> [(first node id, end node id)] of its checkpointed regions, in call order
_REGIONS: "weakref.WeakKeyDictionary[Graph, list]" = weakref.WeakKeyDictionary()


def checkpoint(fn):
    """Wrap `fn` (Tensors in, Tensors out) so that gradients through it recompute its
    intermediate values instead of keeping them from the forward pass."""
    if not callable(fn):
        raise GraphcError(f"checkpoint: expected a function, got {fn!r}", user_location())

    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        graphs = [a.graph for a in list(args) + list(kwargs.values()) if isinstance(a, Tensor)]
        graph = graphs[0] if graphs else current_graph()
        start = len(graph.nodes)
        out = fn(*args, **kwargs)
        end = len(graph.nodes)
        if end > start:
            _REGIONS.setdefault(graph, []).append((start, end))
        return out

    return wrapped


def copy_regions(old: Graph, new: Graph, mapping: dict) -> None:
    """Mark in `new` the checkpointed regions of `old` whose nodes `mapping` (old id ->
    new node) copied, in the same order (a copy keeps a region's nodes together)."""
    for start, end in _REGIONS.get(old, ()):
        ids = [mapping[i].id for i in range(start, end)
               if i in mapping and mapping[i].graph is new and old.nodes[i].inputs]
        if ids:
            _REGIONS.setdefault(new, []).append((min(ids), max(ids) + 1))


class Recomputation:
    """The checkpointed regions of one graph during one vjp: which region a node is in,
    and each region's nodes recomputed once the backward pass reaches it."""

    def __init__(self, graph: Graph):
        self.graph = graph
        # outermost regions first: a nested region belongs to the one around it
        ranges = sorted(_REGIONS.get(graph, ()), key=lambda r: (r[0], -r[1]))
        self.ranges: list[tuple[int, int]] = []
        for r in ranges:
            if not self.ranges or r[0] >= self.ranges[-1][1]:
                self.ranges.append(r)
        self.copies: dict[int, object] = {}       # node id -> recomputed node
        self.started: set[tuple[int, int]] = set()

    def region_of(self, node):
        """The region recomputing `node`, or None (sources are never recomputed)."""
        if node.graph is not self.graph or not node.inputs:
            return None
        for r in self.ranges:
            if r[0] <= node.id < r[1]:
                return r
            if r[0] > node.id:
                break
        return None

    def start(self, region, deps) -> None:
        """Recompute `region`'s nodes from its inputs, ordered after the nodes `deps`
        (the cotangents reaching the region); once per region."""
        self.started.add(region)
        gated: dict[int, object] = {}
        for node in self.graph.nodes[region[0]:region[1]]:
            if not node.inputs:
                continue
            ins = []
            for i in node.inputs:
                if i.id in self.copies:
                    ins.append(self.copies[i.id])
                elif not i.inputs and region[0] <= i.id < region[1]:
                    ins.append(i)                 # a source made inside the region
                else:
                    if i.id not in gated:
                        gated[i.id] = bind("after", (i,) + tuple(deps), loc=node.loc)
                    ins.append(gated[i.id])
            self.copies[node.id] = self.graph.add_node(node.op, ins, node.attrs, node.shape,
                                                       node.dtype, None, node.loc)

    def copy(self, node):
        """The recomputed `node` where its region started, else node itself."""
        return self.copies.get(node.id, node)
