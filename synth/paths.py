"""Latency-shortest paths over a logical topology: the routing stages' candidate connections.

Both routing models restrict a chunk to the connections on (or next to) its
latency-shortest paths: allgather from the chunk's source
(:func:`~ccsynth.synth.routing.candidate_edges`), alltoall from a source to
one destination (:func:`~ccsynth.synth.alltoall.commodity_edges`, which also
needs every rank's distance *to* the destination). They share the weights
and the distances defined here, so the two stages agree on what "shortest"
means.

* **Weights** (:func:`latency_weights`): a connection's cost per message,
  ``alpha + 2 * overhead`` (:attr:`~ccsynth.topologies.model.Connection.message_us`:
  the latency plus the per-message overhead of sender and receiver, what one
  hop of a relay chain costs), plus a per-hop term of :data:`HOP_SHARE`
  times the smallest positive such cost. Among paths of
  equal latency the one with fewer hops is then strictly shorter (on a switch
  every two-hop detour would otherwise tie with the direct connection), and
  the term is too small to reorder paths whose latencies differ.
* **Distances** (:class:`LatencyPaths`: ``distances_from`` a source,
  ``distances_to`` a destination): networkx's Dijkstra over the logical
  topology's connections, the graph built once per routing model. The chunk's sketch rules
  (which connections chunk ``(s, j)`` may use) are a predicate on ``(u, v)``
  that hides the other connections from the search; ranks the chunk cannot
  reach are absent from the result.

Example (a 3-rank line ``0 - 1 - 2`` with alpha 1 us per connection and no overhead):
    >>> from ccsynth.topologies.model import Link, Topology
    >>> from ccsynth.synth.sketch import Sketch
    >>> line = Topology("line3", 3, links=tuple(Link(a, b, 1.0, 10.0) for a, b in ((0, 1), (1, 0), (1, 2), (2, 1))))
    >>> lt = Sketch().bind(line)
    >>> paths = LatencyPaths(lt)
    >>> paths.weights[(0, 1)]                      # alpha + 0.001 * (smallest alpha)
    1.001
    >>> paths.distances_from(0, lambda u, v: True)
    {0: 0, 1: 1.001, 2: 2.002}
    >>> paths.distances_to(0, lambda u, v: (u, v) != (1, 0))   # 1 -> 0 forbidden: nobody reaches 0
    {0: 0}
    >>> paths.distances_to(2, lambda u, v: True)
    {2: 0, 1: 1.001, 0: 2.002}
"""

from __future__ import annotations

from collections.abc import Callable

import networkx as nx

from ccsynth.errors import TopologyError
from ccsynth.synth.sketch_model import LogicalTopology
from ccsynth.topologies.model import Connection, Topology

__all__ = ["Edge", "EdgeFilter", "HOP_SHARE", "LatencyPaths", "latency_weights", "edge_connection"]

Edge = tuple[int, int]
#: may chunk data cross connection ``(u, v)``?
EdgeFilter = Callable[[int, int], bool]


def edge_connection(topology: Topology, e: Edge) -> Connection:
    """The connection of edge ``e`` of ``topology`` (every routed edge has one; a missing one is a typed error)."""
    conn = topology.connection(*e)
    if conn is None:
        raise TopologyError(f"topology {topology.name!r} has no connection {e[0]}->{e[1]}")
    return conn

#: per-hop term of the weights, as a share of the smallest positive alpha (1.0 us when every alpha is 0)
HOP_SHARE = 1e-3


def latency_weights(lt: LogicalTopology) -> dict[Edge, float]:
    """Every allowed connection's alpha plus a tiny per-hop term, so that ties prefer fewer hops."""
    costs = [c.message_us for c in lt.connections if c.message_us > 0]
    delta = HOP_SHARE * (min(costs) if costs else 1.0)
    return {(c.src, c.dst): c.message_us + delta for c in lt.connections}


class LatencyPaths:
    """The latency weights of a logical topology, and distances over them for any edge filter.

    Built once per routing model (the graphs are shared by every chunk's
    searches); ``weights`` is :func:`latency_weights` of ``lt``.
    """

    def __init__(self, lt: LogicalTopology):
        self.weights = latency_weights(lt)
        self._forward = nx.DiGraph()
        self._forward.add_nodes_from(range(lt.n))
        self._forward.add_weighted_edges_from((u, v, w) for (u, v), w in self.weights.items())
        self._backward = self._forward.reverse(copy=True)

    def distances_from(self, source: int, allowed: EdgeFilter) -> dict[int, float]:
        """Latency distance from ``source`` to every rank it reaches over the connections ``allowed(u, v)`` admits."""
        return nx.single_source_dijkstra_path_length(
            self._forward, source, weight=lambda u, v, d: d["weight"] if allowed(u, v) else None)

    def distances_to(self, target: int, allowed: EdgeFilter) -> dict[int, float]:
        """Latency distance to ``target`` from every rank reaching it over the connections ``allowed(u, v)`` admits."""
        # the reversed graph walks connection u -> v as v -> u
        return nx.single_source_dijkstra_path_length(
            self._backward, target, weight=lambda v, u, d: d["weight"] if allowed(u, v) else None)
