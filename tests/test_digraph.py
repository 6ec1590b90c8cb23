"""The scheduler's small directed graph (schedule/digraph.py) against networkx, which it
replaces on the compile path: edges in the order added, paths, cycles, and the
smallest-key-first topological order (networkx's lexicographical_topological_sort)."""
import networkx as nx
import numpy as np

from graphc.schedule.digraph import DiGraph


def _random_dag(rng, n, p):
    order = rng.permutation(n)
    return [(int(order[a]), int(order[b])) for a in range(n) for b in range(a + 1, n)
            if rng.random() < p]


def test_the_order_and_paths_match_networkx():
    rng = np.random.default_rng(0)
    for trial in range(40):
        n = int(rng.integers(1, 30))
        edges = _random_dag(rng, n, float(rng.uniform(0.02, 0.4)))
        ours, theirs = DiGraph(range(n)), nx.DiGraph()
        theirs.add_nodes_from(range(n))
        ours.add_edges_from(edges)
        theirs.add_edges_from(edges)
        assert ours.edges() == list(theirs.edges())
        keys = rng.permutation(n)
        assert ours.topological_order(lambda v: keys[v]) == \
            list(nx.lexicographical_topological_sort(theirs, key=lambda v: keys[v]))
        for a, b in rng.integers(0, n, (10, 2)):
            assert ours.has_path(int(a), int(b)) == nx.has_path(theirs, int(a), int(b))
            assert ours.has_edge(int(a), int(b)) == theirs.has_edge(int(a), int(b))
        assert ours.is_acyclic()


def test_a_cycle_has_no_order_and_a_copy_is_its_own():
    g = DiGraph()
    g.add_edges_from([("a", "b"), ("b", "c")])
    trial = g.copy()
    trial.add_edge("c", "a")
    assert not trial.is_acyclic() and trial.topological_order(str) is None
    assert g.is_acyclic() and g.topological_order(str) == ["a", "b", "c"]
    assert list(g.successors("a")) == ["b"] and not g.has_edge("c", "a")
