"""Lower bound for explicit collectives (cross-mesh resharding): bytes that must cross a cut.

For an :class:`~ccsynth.collectives.explicit.ExplicitCollective` every
piece a rank needs and does not hold must enter it over its connections,
and every piece that only ranks inside a set ``S`` hold and some rank
outside needs must leave ``S`` at least once (a value is never created, only
copied). With ``in(S)`` and ``out(S)`` the capacities of the connections
crossing into and out of ``S`` (:func:`~ccsynth.synth.capacity.cover_capacity`:
exact for links, switch ports and shared NICs), any schedule takes at least
``max(need_in(S) / in(S), need_out(S) / out(S))``. The sets tried are every
rank alone ("the busiest rank over its links"), every node (host) of the
topology ("the busiest host over its NIC"), and the nodes holding inputs
and the nodes needing outputs, each taken together (their NICs share the
work); the largest of these is the bandwidth bound.

The latency bound: a rank that needs a piece it does not hold receives it
at the end of a chain of messages from a rank that holds it, each hop
costing at least its connection's ``alpha + 2 * overhead`` (the sender's
per-message overhead, the flight, the receiver's overhead; a relay forwards
only what it has received), so ``T`` is at least, over every such rank and
piece, the shortest such chain from the piece's nearest holder
(:func:`~ccsynth.synth.bounds.message_distances`; on more than
:data:`LATENCY_MAX_RANKS` ranks, a deterministic sample of the ranks that
need data: still a bound). The result is the larger of the two, as for the
other collectives (:mod:`ccsynth.synth.bounds`): both hold under
:mod:`ccsynth.synth.simulate`'s model, their sum need not.

Example:
    >>> from ccsynth.collectives.explicit import ExplicitCollective
    >>> from ccsynth.topologies.catalog import fully_connected
    >>> c = ExplicitCollective("swap", 2, (1000, 1000), ((0,), (1,)), ((1,), (0,)))
    >>> b = explicit_lower_bound(c, fully_connected(2, bw=1.0), 2000)
    >>> b.bandwidth_us, round(b.latency_us, 6), round(b.time_us, 6)   # 1000 B at 1 GB/s; one hop: alpha + 2 overheads
    (1.0, 3.4, 3.4)
"""

from __future__ import annotations

from ccsynth.collectives.explicit import ExplicitCollective
from ccsynth.errors import TopologyError
from ccsynth.synth.bound_network import message_distances
from ccsynth.synth.bounds import Bound
from ccsynth.synth.capacity import cover_capacity
from ccsynth.topologies.model import BYTES_PER_US_PER_GBPS, Topology

__all__ = ["cut_volumes", "explicit_lower_bound", "latency_bound", "LATENCY_MAX_RANKS"]

#: above this many ranks the latency bound looks at a sample of the ranks that need data
LATENCY_MAX_RANKS = 128


def cut_volumes(collective: ExplicitCollective, group: frozenset[int]) -> tuple[int, int]:
    """Units that must enter and leave the rank set ``group`` (see the module docstring)."""
    held_in = {p for r in group for p in collective.inputs[r]}
    need_in = {p for r in group for p in collective.outputs[r]} - held_in
    held_out = {p for r in range(collective.n_ranks) if r not in group for p in collective.inputs[r]}
    need_out = {p for r in range(collective.n_ranks) if r not in group for p in collective.outputs[r]}
    leave = {p for p in need_out - held_out if p in held_in}
    sizes = collective.pieces
    return sum(sizes[p] for p in need_in), sum(sizes[p] for p in leave)


def _capacity(topology: Topology, srcs, dsts) -> float:
    conns = [c for a in srcs for b in dsts if a != b and (c := topology.connection(a, b)) is not None]
    return cover_capacity(conns, topology.resource_bw)


def explicit_lower_bound(collective: ExplicitCollective, topology: Topology, size_bytes: float) -> Bound:
    """The cut bound (us) of ``collective`` on ``topology`` for a message (tensor) of ``size_bytes``.

    Size-dependent costs count at their fastest point (:meth:`~ccsynth.topologies.model.Topology.fastest`).
    """
    topology = topology.fastest
    n = collective.n_ranks
    if topology.n_ranks != n:
        raise TopologyError(f"topology {topology.name!r} has {topology.n_ranks} ranks but the collective has {n}")
    unit = collective.chunk_bytes(float(size_bytes))
    groups: list[tuple[str, frozenset[int]]] = [(f"rank {r}", frozenset((r,))) for r in range(n)]
    if topology.n_nodes > 1:
        groups += [(f"node {h}", frozenset(topology.node_ranks(h))) for h in sorted(set(topology.nodes))]
        # the nodes that hold data, and the nodes that need it, each as one set (several NICs together)
        for label, rows in (("the nodes holding inputs", collective.inputs), ("the nodes needing outputs", collective.outputs)):
            hosts = {topology.nodes[r] for r, row in enumerate(rows) if row}
            g = frozenset(r for r in range(n) if topology.nodes[r] in hosts)
            if len(hosts) > 1 and len(g) < n:
                groups.append((label, g))
    best, which = 0.0, "no data must move"
    everyone = range(n)
    for label, g in groups:
        need_in, need_out = cut_volumes(collective, g)
        outside = [r for r in everyone if r not in g]
        for vol, direction, (srcs, dsts) in ((need_in, "into", (outside, g)), (need_out, "out of", (g, outside))):
            if vol <= 0:
                continue
            c = _capacity(topology, srcs, dsts)
            t = float("inf") if c <= 0 else vol * unit / (c * BYTES_PER_US_PER_GBPS)
            if t > best:
                best, which = t, f"cut: {vol * unit:.6g} B {direction} {label} at {c:.6g} GB/s"
    lat, lat_which = latency_bound(collective, topology)
    details = {"cut": best, "cut_which": which, "aggregate": 0.0, "latency": lat, "latency_which": lat_which}
    if lat > best:
        return Bound(lat, best, lat, lat_which, details)
    return Bound(best, best, lat, which, details)


def latency_bound(collective: ExplicitCollective, topology: Topology) -> tuple[float, str]:
    """The latency bound (us) of ``collective`` on ``topology`` and what gave it (see the module docstring)."""
    n = collective.n_ranks
    holders: dict[int, list[int]] = {}
    for r, row in enumerate(collective.inputs):
        for p in row:
            holders.setdefault(p, []).append(r)
    missing = {b: set(collective.outputs[b]) - set(collective.inputs[b]) for b in range(n)}
    needers = [b for b in range(n) if missing[b]]
    if len(needers) > LATENCY_MAX_RANKS:
        step = -(-len(needers) // LATENCY_MAX_RANKS)
        needers = needers[::step]
    if not needers:
        return 0.0, "latency: no rank needs data it does not hold"
    to = message_distances(topology, needers, reverse=True)  # to[b][q]: the least chain from q to b
    best, which = 0.0, ""
    for b in needers:
        dist = to[b]
        for p in missing[b]:
            d = min((float(dist[q]) for q in holders.get(p, ())), default=float("inf"))
            if d > best:
                best, which = d, f"latency: piece {p} reaches rank {b} from its nearest holder in {d:.6g} us at least"
    return best, which
