"""Graph algorithms shared by every layer: topological order and dependency cycles.

The verifier, the executor, the MSCCL reader and the synthesizer's stages all
order dependency graphs and, when there is a cycle, must name it. They share
these helpers (networkx underneath) instead of each writing Kahn's algorithm.

A graph is given as its predecessor lists: either a sequence (node ``v`` of
``0..n-1`` waits for ``preds[v]``) or a mapping from any hashable node to its
predecessors. Every predecessor must itself be a node of the graph.

Example:
    >>> topological_order([[], [0], [0, 1]])
    [0, 1, 2]
    >>> topological_order({"b": ["a"], "a": []}, key=str)
    ['a', 'b']
    >>> topological_order([[1], [0]]) is None
    True
    >>> dependency_cycle([[1], [0], []])
    [0, 1]
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping, Sequence

import networkx as nx

Preds = Sequence[Iterable[Any]] | Mapping[Any, Iterable[Any]]

__all__ = ["dependency_graph", "topological_order", "dependency_cycle"]


def dependency_graph(preds: Preds) -> nx.DiGraph:
    """A DiGraph with an edge ``p -> v`` for every predecessor ``p`` of ``v``."""
    g = nx.DiGraph()
    items = preds.items() if isinstance(preds, Mapping) else enumerate(preds)
    for v, ps in items:
        g.add_node(v)
        g.add_edges_from((p, v) for p in ps)
    return g


def topological_order(preds: Preds, *, key: Callable[[Any], Any] | None = None) -> list | None:
    """Every node after all its predecessors, or None if the graph has a cycle.

    Without ``key`` the order goes generation by generation (every node
    whose predecessors all came before, in the order the graph lists them):
    deterministic and the fastest. With ``key``, among the ready nodes the
    one of smallest ``key`` comes first (a priority order, about 3x slower).
    """
    g = dependency_graph(preds)
    try:
        if key is None:
            return list(nx.topological_sort(g))
        return list(nx.lexicographical_topological_sort(g, key=key))
    except nx.NetworkXUnfeasible:
        return None


def dependency_cycle(preds: Preds) -> list:
    """One cycle, in execution order (each node waits for the one before it); [] if there is none."""
    g = dependency_graph(preds)
    try:
        edges = nx.find_cycle(g)
    except nx.NetworkXNoCycle:
        return []
    return [u for u, _ in edges]
