"""Two-level (node / network) algorithms for multi-node topologies.

Ranks are grouped by ``topology.nodes``; every node must hold the same number
``L`` of ranks, and a rank's *local index* is its position among its node's
ranks in id order. Rings are found inside every node and, for every local
index ``k``, through the ``k``-th ranks of all nodes (a "rail"), both along
the topology's connections.

* allreduce: ring reduce-scatter inside each node over ``L`` blocks (local
  rank ``k`` ends with the node's sum of block ``k``), ring allreduce of
  block ``k`` across nodes among the ranks with local index ``k`` (each rail
  handles its own shard, so all NICs work at once), ring allgather inside
  each node (as NCCL's tree/ring hierarchy and Horovod's hierarchical
  allreduce do).
* allgather: ring allgather across nodes along each rail first (only a
  rank's own piece crosses the network), then ring allgather inside each
  node of everything its rail gathered.
* reduce_scatter: the reverse -- ring reduce-scatter inside each node (local
  rank ``k`` collects the node's sums of the blocks of its rail), then ring
  reduce-scatter along each rail.

Example:
    >>> from ccsynth.collectives.spec import Collective
    >>> from ccsynth.topologies.model import Switch, Topology
    >>> t = Topology("2x2", 4, switches=(Switch("a", (0, 1), 10.0, 1.0), Switch("b", (2, 3), 10.0, 1.0),
    ...     Switch("r0", (0, 2), 5.0, 2.0), Switch("r1", (1, 3), 5.0, 2.0)), nodes=(0, 0, 1, 1))
    >>> build(Collective("allreduce", 4, 4), t).meta["rails"]
    [[0, 2], [1, 3]]
"""

from __future__ import annotations

from dataclasses import dataclass

from ccsynth.collectives.builder import ScheduleBuilder
from ccsynth.collectives.schedule import Schedule
from ccsynth.collectives.spec import Collective
from ccsynth.errors import CollectiveError
from ccsynth.synth.baselines._util import (
    Places,
    check_sizes,
    own_block_home,
    piece,
    put_own_pieces,
    require_ring,
    ring_allgather,
    ring_reduce_scatter,
    split,
)
from ccsynth.topologies.model import Topology

__all__ = ["NAME", "KINDS", "DESCRIPTION", "Layout", "check", "build"]

NAME = "hierarchical"
KINDS = ("allreduce", "allgather", "reduce_scatter")
DESCRIPTION = "multi-node: rings inside each node and along each rail across nodes (allreduce RS/AR/AG, allgather, reduce-scatter)"


@dataclass(frozen=True)
class Layout:
    """Node rings and rail rings of a multi-node topology."""

    node_rings: tuple[tuple[int, ...], ...]  # one ring per node
    rail_rings: tuple[tuple[int, ...], ...]  # one ring per local index
    local: tuple[int, ...]  # local index of every rank
    rail: tuple[tuple[int, ...], ...]  # ranks of each local index, by node


def check(collective: Collective, topology: Topology) -> Layout:
    """The rings to use; raises :class:`CollectiveError` if not applicable."""
    check_sizes(NAME, collective, topology)
    if collective.kind not in KINDS:
        raise CollectiveError(f"{NAME} does not implement {collective.kind}; it implements {', '.join(KINDS)}")
    nodes = sorted(set(topology.nodes))
    if len(nodes) < 2:
        raise CollectiveError(f"{NAME}: topology {topology.name!r} has a single node; hierarchical algorithms need several")
    groups = [topology.node_ranks(nd) for nd in nodes]
    sizes = sorted({len(g) for g in groups})
    if len(sizes) > 1:
        raise CollectiveError(f"{NAME}: nodes of topology {topology.name!r} have different rank counts {sizes}")
    L = sizes[0]
    local = [0] * topology.n_ranks
    for g in groups:
        for k, r in enumerate(g):
            local[r] = k
    rail = tuple(tuple(g[k] for g in groups) for k in range(L))
    node_rings = tuple(require_ring(NAME, topology, g) for g in groups)
    rail_rings = tuple(require_ring(NAME, topology, ranks) for ranks in rail)
    return Layout(node_rings, rail_rings, tuple(local), rail)


def build(collective: Collective, topology: Topology) -> Schedule:
    """The hierarchical schedule (unverified)."""
    lay = check(collective, topology)
    n, c, kind = collective.n_ranks, collective.chunk_factor, collective.kind
    L, N = len(lay.rail), len(lay.node_rings)
    b = ScheduleBuilder(collective, NAME, topology=topology.name)
    if kind == "allreduce":
        p = Places(b, lambda r, k: ("o", k))
        for r in range(n):
            for k in range(c):
                p.put(r, k, ("i", k))
        blocks = split(range(c), L)
        for ring in lay.node_rings:
            ring_reduce_scatter(p, ring, [blocks[lay.local[r]] for r in ring])
        for k, ring in enumerate(lay.rail_rings):
            sub = split(blocks[k], N)
            ring_reduce_scatter(p, ring, sub)
            ring_allgather(p, ring, sub)
        for ring in lay.node_rings:
            ring_allgather(p, ring, [blocks[lay.local[r]] for r in ring])
        for r in range(n):
            p.settle(r, range(c))
    elif kind == "allgather":
        p = Places(b, lambda r, k: ("o", k))
        put_own_pieces(p, n, c)
        for ring in lay.rail_rings:
            ring_allgather(p, ring, [piece(r, c) for r in ring])
        for ring in lay.node_rings:
            ring_allgather(p, ring, [sorted(k for q in lay.rail[lay.local[r]] for k in piece(q, c)) for r in ring])
        for r in range(n):
            p.settle(r, piece(r, c))
    else:  # reduce_scatter
        p = Places(b, own_block_home(c))
        for r in range(n):
            for k in range(n * c):
                p.put(r, k, ("i", k))
        for ring in lay.node_rings:
            ring_reduce_scatter(p, ring, [sorted(k for q in lay.rail[lay.local[r]] for k in piece(q, c)) for r in ring])
        for ring in lay.rail_rings:
            ring_reduce_scatter(p, ring, [piece(r, c) for r in ring])
        for r in range(n):
            p.settle(r, piece(r, c))
    return b.build(
        algorithm=NAME,
        node_rings=[list(x) for x in lay.node_rings],
        rails=[list(x) for x in lay.rail_rings],
    )
