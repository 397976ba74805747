"""Shortest distances over a topology's connections without listing the connections.

The latency and hop-count bounds (:mod:`ccsynth.synth.bounds`) need
single-source shortest paths over the graph with one edge per connection.
On a 1,024-rank machine that graph has a million edges, and building it
costs far more than the search. But a switch's connections all cost the
same (its ``alpha`` and ``overhead``), and so do a spine's: Dijkstra can
treat each as a class. When the first member of a switch is settled at
distance ``d``, every member is reached at ``d + c`` and no later member can
do better (it settles at ``>= d``), so the switch is done; a spine is the
same per group of ranks (leaf, node), since a rank reaches every rank of the
other leaves outside its own node: a group is relaxed, and dropped, by the
first settled rank of another leaf and another node. Each rank is relaxed
once per switch and spine, so a search costs ``O(n log n + links)``.

This is exact only when every pair of ranks is joined by at most one of a
link, a switch and a spine (otherwise the model picks one by precedence and
its cost may differ); :func:`class_distances` returns None then, and the
caller falls back to the graph.

Example:
    >>> from ccsynth.topologies.catalog import ring
    >>> d = class_distances(ring(4, alpha=1.0), [0], "hops")
    >>> d[0].tolist()
    [0.0, 1.0, 2.0, 1.0]
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterable

import numpy as np

from ccsynth.topologies.model import Topology

__all__ = ["class_distances", "classes_disjoint"]


def _cost(weight: str, alpha: float, overhead: float) -> float:
    if weight == "hops":
        return 1.0
    if weight == "message":
        return alpha + 2.0 * overhead
    raise ValueError(f"unknown distance weight {weight!r}")  # pragma: no cover


def classes_disjoint(topology: Topology) -> bool:
    """Whether every pair of ranks is joined by at most one link, switch or spine (see the module docstring)."""
    n = topology.n_ranks
    nodes = topology.nodes
    member_of: list[list[int]] = [[] for _ in range(n)]
    for i, sw in enumerate(topology.switches):
        if len(set(sw.ranks)) != len(sw.ranks):
            return False
        for r in sw.ranks:
            member_of[r].append(i)
    # two switches sharing two members
    shared: set[tuple[int, int]] = set()
    for sws in member_of:
        for x in range(len(sws)):
            for y in range(x + 1, len(sws)):
                key = (sws[x], sws[y])
                if key in shared:
                    return False
                shared.add(key)
    seat: list[tuple[int, int] | None] = [None] * n
    leaf_index = {sw.name: i for i, sw in enumerate(topology.switches)}
    for si, sp in enumerate(topology.spines):
        for name in sp.leaves:
            for r in topology.switches[leaf_index[name]].ranks:
                if seat[r] is not None:
                    return False
                seat[r] = (si, leaf_index[name])

    def spine_pair(a: int, b: int) -> bool:
        sa, sb = seat[a], seat[b]
        return (sa is not None and sb is not None and sa[0] == sb[0] and sa[1] != sb[1]
                and nodes[a] != nodes[b])

    for link in topology.links:
        if set(member_of[link.src]) & set(member_of[link.dst]) or spine_pair(link.src, link.dst):
            return False
    for sw in topology.switches:
        # a switch whose members sit on different leaves of one spine, in different nodes
        by_spine: dict[int, set[tuple[int, int]]] = {}
        for r in sw.ranks:
            st = seat[r]
            if st is not None:
                by_spine.setdefault(st[0], set()).add((st[1], nodes[r]))
        for seats in by_spine.values():
            items = list(seats)
            for x in range(len(items)):
                for y in range(x + 1, len(items)):
                    if items[x][0] != items[y][0] and items[x][1] != items[y][1]:
                        return False
    return True


def class_distances(topology: Topology, sources: Iterable[int], weight: str,
                    reverse: bool = False) -> dict[int, np.ndarray] | None:
    """Shortest distances from each source (to it with ``reverse``), inf if unreachable; None if not exact here.

    ``weight``: 'hops', or 'message' (a hop costs ``alpha + 2 * overhead``).
    """
    if not classes_disjoint(topology):
        return None
    n = topology.n_ranks
    nodes = topology.nodes
    links_from: list[list[tuple[int, float]]] = [[] for _ in range(n)]
    for link in topology.links:
        a, b = (link.dst, link.src) if reverse else (link.src, link.dst)
        links_from[a].append((b, _cost(weight, link.alpha, link.overhead)))
    switches = topology.switches
    sw_cost = [_cost(weight, sw.alpha, sw.overhead) for sw in switches]
    switches_of: list[list[int]] = [[] for _ in range(n)]
    for i, sw in enumerate(switches):
        for r in sw.ranks:
            switches_of[r].append(i)
    leaf_index = {sw.name: i for i, sw in enumerate(switches)}
    seat: list[tuple[int, int] | None] = [None] * n
    groups0: list[dict[int, dict[int, list[int]]]] = []
    sp_cost = []
    for si, sp in enumerate(topology.spines):
        g: dict[int, dict[int, list[int]]] = {}
        for name in sp.leaves:
            w = leaf_index[name]
            for r in switches[w].ranks:
                seat[r] = (si, w)
                g.setdefault(w, {}).setdefault(nodes[r], []).append(r)
        groups0.append(g)
        sp_cost.append(_cost(weight, sp.alpha, sp.overhead))
    out = {}
    for s in sources:
        dist = [math.inf] * n
        dist[s] = 0.0
        settled = bytearray(n)
        sw_done = bytearray(len(switches))
        groups = [{w: dict(by_node) for w, by_node in g.items()} for g in groups0]
        heap = [(0.0, s)]
        while heap:
            d, u = heapq.heappop(heap)
            if settled[u]:
                continue
            settled[u] = 1
            for v, c in links_from[u]:
                nd = d + c
                if nd < dist[v]:
                    dist[v] = nd
                    heapq.heappush(heap, (nd, v))
            for i in switches_of[u]:
                if sw_done[i]:
                    continue
                sw_done[i] = 1
                nd = d + sw_cost[i]
                for v in switches[i].ranks:
                    if nd < dist[v]:
                        dist[v] = nd
                        heapq.heappush(heap, (nd, v))
            st = seat[u]
            if st is not None:
                rem = groups[st[0]]
                nd = d + sp_cost[st[0]]
                for w in list(rem):
                    if w == st[1]:
                        continue
                    by_node = rem[w]
                    for node in list(by_node):
                        if node == nodes[u]:
                            continue
                        for v in by_node.pop(node):
                            if nd < dist[v]:
                                dist[v] = nd
                                heapq.heappush(heap, (nd, v))
                    if not by_node:
                        del rem[w]
        out[s] = np.array(dist, dtype=float)
    return out
