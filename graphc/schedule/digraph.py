"""A small directed graph for the scheduler (fusion's merge loop, the kernel order):
nodes and edges kept in the order added, acyclicity, paths and the topological order
that takes the smallest key first. Compiling needs no networkx (0.08 s to import)."""
from __future__ import annotations

import heapq
import itertools


class DiGraph:
    def __init__(self, nodes=()):
        self.succ: dict = {n: {} for n in nodes}

    def add_node(self, n) -> None:
        self.succ.setdefault(n, {})

    def add_edge(self, a, b) -> None:
        self.succ.setdefault(b, {})
        self.succ.setdefault(a, {})[b] = None

    def add_edges_from(self, pairs) -> None:
        for a, b in pairs:
            self.add_edge(a, b)

    def edges(self) -> list:
        return [(a, b) for a, out in self.succ.items() for b in out]

    def has_edge(self, a, b) -> bool:
        return b in self.succ.get(a, ())

    def successors(self, a):
        return iter(self.succ[a])

    def copy(self) -> "DiGraph":
        g = DiGraph()
        g.succ = {n: dict(out) for n, out in self.succ.items()}
        return g

    def has_path(self, a, b) -> bool:
        todo, seen = [a], {a}
        while todo:
            x = todo.pop()
            if x == b:
                return True
            for y in self.succ[x]:
                if y not in seen:
                    seen.add(y)
                    todo.append(y)
        return False

    def topological_order(self, key) -> "list | None":
        """Every node after those with an edge to it, the available node with the
        smallest key(node) first; None where the graph has a cycle."""
        indegree = {n: 0 for n in self.succ}
        for out in self.succ.values():
            for b in out:
                indegree[b] += 1
        tick = itertools.count()                     # ties: the order added
        ready = [(key(n), next(tick), n) for n in self.succ if not indegree[n]]
        heapq.heapify(ready)
        order = []
        while ready:
            _, _, n = heapq.heappop(ready)
            order.append(n)
            for b in self.succ[n]:
                indegree[b] -= 1
                if not indegree[b]:
                    heapq.heappush(ready, (key(b), next(tick), b))
        return order if len(order) == len(self.succ) else None

    def is_acyclic(self) -> bool:
        return self.topological_order(lambda n: 0) is not None
