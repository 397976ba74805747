"""The network as the lower bounds see it: capacities into and out of sets of ranks, and message distances.

:class:`BoundNetwork` holds what the bound families of
:mod:`ccsynth.synth.bounds` share for one topology: the connections into and
out of every rank, each rank's ingress and egress capacity (a greedy cover
of the resources its connections cross, :func:`~ccsynth.synth.capacity.cover_capacity`;
one rank per symmetry orbit, copied to the rest), the capacity into any set
of ranks (cached per bitmask, walking the smaller side of the cut), the
total capacity of the fabric, and shortest-path distances in hops or in the
least time a chain of messages takes (``alpha + 2 * overhead`` per hop: the
latency bound's distance). Above :data:`ALL_PAIRS_MAX_RANKS` ranks the
distances are taken from a sample of sources. Capacities are upper bounds
on rates, so every bound computed from them stays a true lower bound.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from functools import cached_property

import numpy as np

from ccsynth.synth.capacity import cover_capacity
from ccsynth.synth.distances import class_distances
from ccsynth.synth.flows.symmetry import translations
from ccsynth.topologies.model import Connection, Topology

__all__ = ["ALL_PAIRS_MAX_RANKS", "SAMPLED_SOURCES", "COVER_ALL_MAX_CONNECTIONS", "BoundNetwork", "message_distances",
           "message_hop_us"]

#: all-pairs latency/hop distances up to this many ranks; above, a sample of sources
ALL_PAIRS_MAX_RANKS = 128
#: number of sampled sources above ALL_PAIRS_MAX_RANKS
SAMPLED_SOURCES = 8
#: above this many connections the aggregate bound's total capacity skips the cover over all of them
COVER_ALL_MAX_CONNECTIONS = 200_000


class BoundNetwork:
    """Per-topology data the bounds share (connections by rank, caps, distances)."""

    def __init__(self, topology: Topology):
        self.topology = topology
        self.n = topology.n_ranks
        self.res_bw = topology.resource_bw
        self._cap_cache: dict[tuple[int, bool], float] = {}

    @cached_property
    def in_conns(self) -> list[list[Connection]]:
        out: list[list[Connection]] = [[] for _ in range(self.n)]
        for c in self.topology.connections():
            out[c.dst].append(c)
        return out

    @cached_property
    def out_conns(self) -> list[list[Connection]]:
        out: list[list[Connection]] = [[] for _ in range(self.n)]
        for c in self.topology.connections():
            out[c.src].append(c)
        return out

    def _conns_into(self, r: int) -> list[Connection]:
        """The connections into ``r``, without listing every connection (switches and spines are symmetric)."""
        t = self.topology
        cand = set(t.neighbors_out(r)) | {link.src for link in t.links if link.dst == r}
        return [c for a in sorted(cand) if (c := t.connection(a, r)) is not None]

    def _per_orbit(self, cover_of) -> np.ndarray:
        """``cover_of(r)`` for one rank per symmetry orbit, copied to the rest (translations preserve it)."""
        group = translations(self.topology)
        reps = {rep: cover_of(rep) for rep in group.representatives}
        return np.array([reps[group.rep_of(r)] for r in range(self.n)])

    @cached_property
    def ingress(self) -> np.ndarray:
        """Per rank, the cover capacity of the connections into it (one rank per symmetry orbit)."""
        return self._per_orbit(lambda r: cover_capacity(self._conns_into(r), self.res_bw))

    @cached_property
    def egress(self) -> np.ndarray:
        """Per rank, the cover capacity of the connections out of it (one rank per symmetry orbit)."""
        return self._per_orbit(lambda r: cover_capacity(self.topology.connections_from(r), self.res_bw))

    @property
    def full(self) -> int:
        return (1 << self.n) - 1

    def cap_into(self, mask: int) -> float:
        """Upper bound (GB/s) on the rate into the set of ranks ``mask``."""
        key = (mask, True)
        if key not in self._cap_cache:
            inside = [(mask >> r) & 1 for r in range(self.n)]
            k = sum(inside)
            # walk the smaller side: receivers in S, or senders outside it
            if k <= self.n - k:
                conns = [c for b in range(self.n) if inside[b] for c in self.in_conns[b] if not inside[c.src]]
            else:
                conns = [c for a in range(self.n) if not inside[a] for c in self.out_conns[a] if inside[c.dst]]
            self._cap_cache[key] = cover_capacity(conns, self.res_bw)
        return self._cap_cache[key]

    def cap_out_of(self, mask: int) -> float:
        return self.cap_into(self.full ^ mask)

    def total_capacity(self) -> float:
        """Upper bound (GB/s) on the rate of every connection at once.

        The cover over every connection joins the per-rank sums only up to
        :data:`COVER_ALL_MAX_CONNECTIONS` connections: beyond, listing them
        costs more than the bound is worth (a larger capacity only weakens the
        aggregate bound, never invalidates it).
        """
        cap = min(float(self.ingress.sum()), float(self.egress.sum()))
        if self.topology.connection_count() <= COVER_ALL_MAX_CONNECTIONS:
            cap = min(cap, cover_capacity(self.topology.connections(), self.res_bw))
        return cap

    def _sources(self) -> list[int]:
        if self.n <= ALL_PAIRS_MAX_RANKS:
            return list(range(self.n))
        step = max(1, self.n // SAMPLED_SOURCES)
        return sorted(set(range(0, self.n, step)) | {self.n - 1})

    def distances(self, weight: str, sources: Iterable[int] | None = None, reverse: bool = False) -> dict[int, np.ndarray]:
        """Shortest-path distances from each source.

        ``weight``: 'hops', or 'message' (a hop costs ``alpha + 2 * overhead``).

        With ``reverse`` the distances are *to* each source. Unreachable = inf.
        """
        srcs = self._sources() if sources is None else list(sources)
        fast = class_distances(self.topology, srcs, weight, reverse)
        if fast is not None:
            return fast
        import networkx as nx

        g = self.topology.graph
        if reverse:
            g = g.reverse(copy=False)
        out = {}
        for s in srcs:
            if weight == "hops":
                d = nx.single_source_shortest_path_length(g, s)
            else:
                d = nx.single_source_dijkstra_path_length(g, s, weight=message_hop_us)
            arr = np.full(self.n, math.inf)
            for k, v in d.items():
                arr[k] = v
            out[s] = arr
        return out


def message_distances(topology: Topology, sources: Iterable[int], reverse: bool = False) -> dict[int, np.ndarray]:
    """Per source the least time a chain of messages takes from it to every rank (``reverse``: to it from every
    rank): each hop ``alpha + 2 * overhead`` of its connection, the latency bound's distance; unreachable: inf."""
    return BoundNetwork(topology).distances("message", sources, reverse)


def message_hop_us(u: int, v: int, edge: dict) -> float:
    """The least time one hop of a chain of messages costs (see the latency bound)."""
    return edge["alpha"] + 2.0 * edge["overhead"]
