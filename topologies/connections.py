"""Connections: what moving bytes from one rank to another costs, and which shared resources it uses.

At most one :class:`Connection` exists per ordered pair of ranks: a link,
membership of a common switch, or two leaves of one spine on different
nodes; its ``resources`` name every bandwidth cap the transfer consumes
(the link, or the switch ports, spine up-links and shared ports), and
:func:`bandwidth_constraints` yields those caps as
:class:`BandwidthConstraint` records with the same names, so that neither
the MILPs nor the simulator special-case switches (msccl-tools'
``bandwidth_constraints()``). The cost of one message alone is
:meth:`Connection.time_us`: ``overhead`` on the sender, ``alpha`` in flight,
the bytes at ``bw``, ``overhead`` on the receiver.

**Scale.** Switches and spines imply their connections (a 1,024-GPU cluster
behind rail switches and a spine has a million): :class:`ConnectionIndex`
holds per-rank lookups built in time linear in the description,
:func:`build_connection` computes one pair on demand, :func:`neighbors_out`
one rank's peers, and :func:`connection_classes` counts the connections by
kind and cost by formula, building one by one only the pairs a shared port
caps. :class:`~ccsynth.topologies.model.Topology` remembers each pair it
built and exposes these as its methods.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ccsynth.errors import TopologyError
from ccsynth.topologies.elements import BYTES_PER_US_PER_GBPS, Link

if TYPE_CHECKING:  # annotations only: model.py imports this module
    from ccsynth.topologies.model import Topology

__all__ = [
    "Connection", "ConnectionClass", "BandwidthConstraint", "LeafSeat", "ConnectionIndex", "build_connection",
    "adjacent", "neighbors_out", "connection_classes", "bandwidth_constraints", "resource_bandwidths",
]


@dataclass(frozen=True)
class Connection:
    """What it costs to move bytes from ``src`` to ``dst`` directly.

    ``resources`` names every bandwidth constraint the transfer consumes
    (the link itself, or the switch ports, plus spine up-links and shared
    ports).
    """

    src: int
    dst: int
    alpha: float
    bw: float
    via: str  # "link:0->1", the switch name or the spine name
    resources: tuple[str, ...]
    overhead: float = 0.0

    def time_us(self, nbytes: float) -> float:
        """Time of one message of ``nbytes`` on this connection when alone.

        ``overhead`` on the sender, ``alpha`` in flight, the bytes at ``bw``,
        ``overhead`` on the receiver.
        """
        return 2.0 * self.overhead + self.alpha + nbytes / (self.bw * BYTES_PER_US_PER_GBPS)

    @property
    def message_us(self) -> float:
        """The size-independent part of :meth:`time_us`: ``alpha + 2 * overhead``."""
        return self.alpha + 2.0 * self.overhead


@dataclass(frozen=True)
class ConnectionClass:
    """``count`` connections of one kind (``link``, ``switch``, ``spine``) with the same costs."""

    kind: str
    alpha: float
    bw: float
    overhead: float
    count: int


@dataclass(frozen=True)
class BandwidthConstraint:
    """``sum(traffic from srcs to dsts) <= bw``: one shared resource.

    The traffic it carries is that of the connections naming it in
    :attr:`Connection.resources`; ``srcs`` and ``dsts`` give its extent (a
    pair between them may have a connection of its own that bypasses it,
    such as two ranks of one node behind a spine's leaves).
    """

    name: str
    srcs: frozenset[int]
    dsts: frozenset[int]
    bw: float

    def covers(self, src: int, dst: int) -> bool:
        return src in self.srcs and dst in self.dsts


@dataclass(frozen=True)
class LeafSeat:
    """Where a rank sits in a spine: the spine's index and its leaf switch's index."""

    spine: int
    switch: int


class ConnectionIndex:
    """Per-rank lookups that answer connection queries without listing every pair."""

    def __init__(self, t: Topology):
        n = t.n_ranks
        self.link_of: dict[tuple[int, int], Link] = {(l.src, l.dst): l for l in t.links}
        self.links_from: list[list[Link]] = [[] for _ in range(n)]
        for link in t.links:
            self.links_from[link.src].append(link)
        self.switch_sets: list[frozenset[int]] = [frozenset(sw.ranks) for sw in t.switches]
        self.switches_of: list[list[int]] = [[] for _ in range(n)]
        for i, sw in enumerate(t.switches):
            for r in sw.ranks:
                self.switches_of[r].append(i)
        self.switch_index: dict[str, int] = {sw.name: i for i, sw in enumerate(t.switches)}
        self.seat: list[LeafSeat | None] = [None] * n
        self.spine_leaves: list[list[int]] = []  # switch indices of each spine's leaves
        for si, sp in enumerate(t.spines):
            leaves = [self.switch_index[name] for name in sp.leaves]
            self.spine_leaves.append(leaves)
            for w in leaves:
                for r in t.switches[w].ranks:
                    self.seat[r] = LeafSeat(si, w)
        self.port_dsts: list[frozenset[int]] = [frozenset(p.dsts) for p in t.shared_ports]
        self.ports_from: list[list[int]] = [[] for _ in range(n)]
        for i, p in enumerate(t.shared_ports):
            for s in set(p.srcs):
                self.ports_from[s].append(i)

    def spine_targets(self, t: Topology, src: int) -> list[int]:
        """The ranks ``src`` reaches through its spine (other leaves, other nodes)."""
        seat = self.seat[src]
        if seat is None:
            return []
        node = t.nodes[src]
        out = []
        for w in self.spine_leaves[seat.spine]:
            if w != seat.switch:
                out += [r for r in t.switches[w].ranks if t.nodes[r] != node]
        return out


def build_connection(t: Topology, src: int, dst: int) -> Connection | None:
    if src == dst or not (0 <= src < t.n_ranks and 0 <= dst < t.n_ranks):
        return None
    idx = t.index
    extra = [t.shared_ports[i].name for i in idx.ports_from[src] if dst in idx.port_dsts[i]]
    caps = [t.shared_ports[i].bw for i in idx.ports_from[src] if dst in idx.port_dsts[i]]
    link = idx.link_of.get((src, dst))
    if link is not None:
        return Connection(src, dst, link.alpha, min([link.bw, *caps]), link.name, (link.name, *extra), link.overhead)
    for i in idx.switches_of[src]:
        if dst in idx.switch_sets[i]:
            sw = t.switches[i]
            res = (f"{sw.name}:tx{src}", f"{sw.name}:rx{dst}", *extra)
            return Connection(src, dst, sw.alpha, min([sw.bw, *caps]), sw.name, res, sw.overhead)
    sa, sb = idx.seat[src], idx.seat[dst]
    if (sa is None or sb is None or sa.spine != sb.spine or sa.switch == sb.switch
            or t.nodes[src] == t.nodes[dst]):
        return None
    sp = t.spines[sa.spine]
    la, lb = t.switches[sa.switch], t.switches[sb.switch]
    via = [f"{la.name}:tx{src}", f"{lb.name}:rx{dst}"]
    bws = [la.bw, lb.bw, *caps]
    if sp.uplink_bw is not None:
        via += [sp.up(la.name), sp.down(lb.name)]
        bws.append(sp.uplink_bw)
    return Connection(src, dst, sp.alpha, min(bws), sp.name, (*via, *extra), sp.overhead)


def adjacent(t: Topology, src: int, dst: int) -> Connection:
    """The connection ``src -> dst`` of two ranks the topology's own structure says are adjacent."""
    c = t.connection(src, dst)
    if c is None:
        raise TopologyError(f"topology {t.name!r}: ranks {src} and {dst} are not adjacent")
    return c


def neighbors_out(t: Topology, rank: int) -> tuple[int, ...]:
    """The ranks ``rank`` has a connection to, ascending."""
    idx = t.index
    out = {l.dst for l in idx.links_from[rank]}
    for i in idx.switches_of[rank]:
        out.update(t.switches[i].ranks)
    out.update(idx.spine_targets(t, rank))
    out.discard(rank)
    return tuple(sorted(out))


def connection_classes(t: Topology) -> tuple[ConnectionClass, ...]:
    """The connections grouped by kind (link, switch, spine), alpha, bandwidth and overhead, with counts.

    Counted by formula (a link at a time, a switch or a pair of leaves at a
    time), so a spine's million pairs cost as much as its leaves; only pairs
    that a shared port caps are built one by one.
    """
    counts: Counter = Counter()
    idx = t.index
    capped = {s for p in t.shared_ports for s in p.srcs}
    for link in t.links:
        c = adjacent(t, link.src, link.dst)
        counts[("link", c.alpha, c.bw, c.overhead)] += 1
    for sw in t.switches:
        plain = [r for r in sw.ranks if r not in capped]
        k = len(sw.ranks)
        counts[("switch", sw.alpha, sw.bw, sw.overhead)] += len(plain) * (k - 1)
        for a in sw.ranks:
            if a in capped:
                for b in sw.ranks:
                    if a != b:
                        c = adjacent(t, a, b)
                        counts[("switch", c.alpha, c.bw, c.overhead)] += 1
    for si, sp in enumerate(t.spines):
        leaves = [t.switches[w] for w in idx.spine_leaves[si]]
        senders = [Counter(t.nodes[r] for r in leaf.ranks if r not in capped) for leaf in leaves]
        receivers = [Counter(t.nodes[r] for r in leaf.ranks) for leaf in leaves]
        for x, la in enumerate(leaves):
            na = senders[x]
            n_senders = sum(na.values())
            for y, lb in enumerate(leaves):
                if x == y:
                    continue
                nb = receivers[y]
                same_node = sum(cnt * nb[node] for node, cnt in na.items() if node in nb)
                bw = min(la.bw, lb.bw, sp.uplink_bw if sp.uplink_bw is not None else math.inf)
                counts[("spine", sp.alpha, bw, sp.overhead)] += n_senders * len(lb.ranks) - same_node
        for w in idx.spine_leaves[si]:
            for a in t.switches[w].ranks:
                if a in capped:
                    for b in idx.spine_targets(t, a):
                        c = adjacent(t, a, b)
                        counts[("spine", c.alpha, c.bw, c.overhead)] += 1
    return tuple(ConnectionClass(kind, alpha, bw, o, cnt)
                 for (kind, alpha, bw, o), cnt in sorted(counts.items()) if cnt)


def bandwidth_constraints(t: Topology) -> Iterator[BandwidthConstraint]:
    """Yield every bandwidth cap: links, switch ports, spine up-links, shared ports.

    The names match :attr:`Connection.resources`. A leaf switch's ports
    also carry its members' traffic through the spine, so their extent
    includes the ranks reached that way.
    """
    idx = t.index
    for link in t.links:
        yield BandwidthConstraint(link.name, frozenset((link.src,)), frozenset((link.dst,)), link.bw)
    for sw in t.switches:
        members = frozenset(sw.ranks)
        for r in sw.ranks:
            far = frozenset(idx.spine_targets(t, r))
            yield BandwidthConstraint(f"{sw.name}:tx{r}", frozenset((r,)), (members - {r}) | far, sw.bw)
            yield BandwidthConstraint(f"{sw.name}:rx{r}", (members - {r}) | far, frozenset((r,)), sw.bw)
    for si, sp in enumerate(t.spines):
        if sp.uplink_bw is None:
            continue
        leaves = [t.switches[w] for w in idx.spine_leaves[si]]
        everyone = frozenset(r for leaf in leaves for r in leaf.ranks)
        for leaf in leaves:
            mine = frozenset(leaf.ranks)
            yield BandwidthConstraint(sp.up(leaf.name), mine, everyone - mine, sp.uplink_bw)
            yield BandwidthConstraint(sp.down(leaf.name), everyone - mine, mine, sp.uplink_bw)
    for port in t.shared_ports:
        yield BandwidthConstraint(port.name, frozenset(port.srcs), frozenset(port.dsts), port.bw)


def resource_bandwidths(t: Topology) -> dict[str, float]:
    """Bandwidth (GB/s) of every resource named in a connection (built without the constraints' rank sets)."""
    out: dict[str, float] = {}
    for link in t.links:
        out[link.name] = link.bw
    for sw in t.switches:
        for r in sw.ranks:
            out[f"{sw.name}:tx{r}"] = sw.bw
            out[f"{sw.name}:rx{r}"] = sw.bw
    for sp in t.spines:
        if sp.uplink_bw is not None:
            for leaf in sp.leaves:
                out[sp.up(leaf)] = sp.uplink_bw
                out[sp.down(leaf)] = sp.uplink_bw
    for p in t.shared_ports:
        out[p.name] = p.bw
    return out
