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
    >>> topological_order([[], [0], [0], [1]], depth_first=True)   # 0's last-readied successor first
    [0, 2, 1, 3]
    >>> dependency_cycle([[1], [0], []])
    [0, 1]
"""

from __future__ import annotations

from typing import Any
from collections.abc import Callable, Iterable, Mapping, Sequence

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


def topological_order(
    preds: Preds, *, key: Callable[[Any], Any] | None = None, depth_first: bool = False
) -> list | None:
    """Every node after all its predecessors, or None if the graph has a cycle.

    Without ``key`` the order goes generation by generation (every node
    whose predecessors all came before, in the order the graph lists them):
    deterministic, and the fastest of the networkx orders. With ``key``,
    among the ready nodes the one of smallest ``key`` comes first (a
    priority order, about 3x slower).

    With ``depth_first`` the order follows each chain as far as it goes:
    the nodes that a node makes ready come right after it, the last one it
    made ready first (Kahn's algorithm with a stack); the nodes ready from
    the start come in the order the graph lists them. A pass that keeps
    per-node state until every successor of the node has been visited (the
    verifier's ancestor bitsets) holds few states at once in this order.
    It runs in linear time without building a networkx graph (on the
    1.3e5-op graph of a 64-rank ring allreduce, about 0.15 s of CPU against
    0.8 to 1 s for the generation order).
    """
    if depth_first:
        if key is not None:
            raise ValueError("topological_order: key and depth_first exclude each other")
        return _depth_first_order(preds)
    g = dependency_graph(preds)
    try:
        if key is None:
            return list(nx.topological_sort(g))
        return list(nx.lexicographical_topological_sort(g, key=key))
    except nx.NetworkXUnfeasible:
        return None


def _depth_first_order(preds: Preds) -> list | None:
    if isinstance(preds, Mapping):
        nodes = list(preds)
        index = {v: i for i, v in enumerate(nodes)}
        plists: Sequence[Any] = [[index[p] for p in preds[v]] for v in nodes]
    else:
        nodes = None
        plists = preds if isinstance(preds, (list, tuple)) else list(preds)
    n = len(plists)
    # successors in flat arrays (succ[first[p]:first[p + 1]], in node order): a list per node would add
    # n live containers, and the garbage collector's passes over them cost more than the sort itself
    indeg = [0] * n
    first = [0] * (n + 1)
    for v in range(n):
        ps = plists[v]
        indeg[v] = len(ps)
        for p in ps:
            first[p + 1] += 1
    for v in range(n):
        first[v + 1] += first[v]
    succ = [0] * first[n]
    fill = first[:n]
    for v in range(n):
        for p in plists[v]:
            succ[fill[p]] = v
            fill[p] += 1
    stack = [v for v in range(n - 1, -1, -1) if indeg[v] == 0]
    order: list[int] = []
    while stack:
        x = stack.pop()
        order.append(x)
        for s in succ[first[x]:first[x + 1]]:
            indeg[s] -= 1
            if indeg[s] == 0:
                stack.append(s)
    if len(order) < n:
        return None
    return order if nodes is None else [nodes[i] for i in order]


def dependency_cycle(preds: Preds) -> list:
    """One cycle, in execution order (each node waits for the one before it); [] if there is none."""
    g = dependency_graph(preds)
    try:
        edges = nx.find_cycle(g)
    except nx.NetworkXNoCycle:
        return []
    return [u for u, _ in edges]
