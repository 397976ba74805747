"""The immutable network model: ranks, directed links, switches, shared ports.

Units used everywhere in ccsynth:

* latency ``alpha`` in microseconds (us): the time a message spends in
  flight before its bytes start to arrive (LogGP's ``L``); it overlaps with
  everything else;
* per-message ``overhead`` in microseconds: the time the sending rank and the
  receiving rank are each busy with one message (LogGP's ``o``; TACCL's
  per-send cost): paid on the rank's own serial stream, so a rank that moves
  ``k`` messages pays it ``k`` times, whatever their size;
* bandwidth ``bw`` in GB/s (1e9 bytes per second), i.e. ``1e3`` bytes per us;
* the time of one transfer of ``n`` bytes on a connection alone, both ranks
  otherwise idle, is ``overhead + alpha + n / (bw * 1e3) + overhead``
  microseconds (:meth:`Connection.time_us`);
* ``Topology.local_bw`` (GB/s, optional): the rate of a rank's local copies
  and reductions; ``Topology.local_overhead`` (us, default 0): the fixed
  cost of each of them (a kernel call), as ``overhead`` is a message's.
* ``Topology.overhead_scope``: which work of a rank shares one serial
  engine. ``"connection"`` (the default; GPUs running MSCCL/NCCL-style
  kernels): every (peer, channel) of a rank has an engine of its own -- a
  threadblock -- so the overheads of the messages on one connection and
  channel serialise, like TACCL's per-send cost, while different
  connections proceed in parallel, and local work does not queue.
  ``"rank"`` (a CPU process driving MPI, as ccsynth's own executor does):
  one engine per rank, so all its messages' overheads and its local copies
  and reductions serialise.
* ``Topology.eager_limit`` (bytes, default None) and ``Topology.rendezvous_alpha``
  (us, default 0): a message of more than ``eager_limit`` bytes goes by a
  rendezvous protocol, whose handshake adds ``rendezvous_alpha`` to its
  latency (MPI libraries send small messages eagerly and large ones after a
  handshake; MPICH's shared-memory path switches near 8 KiB). None: one
  protocol for every size, as in the catalog.
* ``Topology.call_overhead`` (us, default 0): the fixed cost of one call of a
  collective -- entering and leaving the runtime, ranks starting at slightly
  different times -- added once per call whatever the schedule. Measured by
  ``ccsynth topo profile``; 0 in the catalog, whose figures describe the
  network alone.

A :class:`Topology` holds

* :class:`Link` -- a directed point-to-point connection ``src -> dst``;
* :class:`Switch` -- a hyperedge: every member can send to every other member;
  each member has one egress and one ingress port of ``bw`` GB/s;
* :class:`SharedPort` -- a bandwidth cap shared by all traffic from any rank
  of ``srcs`` to any rank of ``dsts`` (a NIC shared by the GPUs of a node);
* ``nodes`` -- which node (host) each rank sits on;
* ``dims`` -- optional network dimensions of a hierarchical fabric
  (:class:`Dimension`), rank coordinates being mixed radix, dimension 0
  varying fastest.

At most one connection (a link, or membership of a common switch) exists per
ordered pair of ranks. :meth:`Topology.connections` lists them all and
:meth:`Topology.bandwidth_constraints` yields every bandwidth cap as
``(srcs, dsts, bw, name)`` -- links, switch ports and shared ports alike -- so
that neither the MILPs nor the simulator special-case switches.

Example:
    >>> from ccsynth.topologies.model import Link, Topology
    >>> t = Topology("pair", 2, links=(Link(0, 1, 1.0, 10.0), Link(1, 0, 1.0, 10.0)))
    >>> t.connection(0, 1).time_us(10_000)
    2.0
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Iterator

import networkx as nx

from ccsynth.errors import TopologyError

BYTES_PER_US_PER_GBPS = 1e3
#: values of :attr:`Topology.overhead_scope` (see the module docstring)
OVERHEAD_SCOPES = ("connection", "rank")


@dataclass(frozen=True)
class Link:
    """A directed point-to-point connection with its own bandwidth."""

    src: int
    dst: int
    alpha: float  # us
    bw: float  # GB/s
    overhead: float = 0.0  # us per message, on the sender and on the receiver

    @property
    def name(self) -> str:
        return f"link:{self.src}->{self.dst}"


@dataclass(frozen=True)
class Switch:
    """A switch (hyperedge): all-to-all connectivity among ``ranks``.

    Every member has an egress and an ingress port of ``bw`` GB/s; a transfer
    between two members costs ``alpha`` us of latency and ``overhead`` us of
    per-message work on each end.
    """

    name: str
    ranks: tuple[int, ...]
    bw: float  # GB/s per port and direction
    alpha: float  # us
    overhead: float = 0.0  # us per message, on the sender and on the receiver


@dataclass(frozen=True)
class SharedPort:
    """A cap of ``bw`` GB/s on the sum of all traffic from ``srcs`` to ``dsts``."""

    name: str
    srcs: tuple[int, ...]
    dsts: tuple[int, ...]
    bw: float


@dataclass(frozen=True)
class Dimension:
    """One dimension of a multi-dimension network (Themis-style)."""

    name: str
    size: int
    bw: float  # GB/s per rank in this dimension
    alpha: float  # us
    overhead: float = 0.0  # us per message


@dataclass(frozen=True)
class Connection:
    """What it costs to move bytes from ``src`` to ``dst`` directly.

    ``resources`` names every bandwidth constraint the transfer consumes
    (the link itself, or the switch ports, plus shared ports).
    """

    src: int
    dst: int
    alpha: float
    bw: float
    via: str  # "link:0->1" or the switch name
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
class BandwidthConstraint:
    """``sum(traffic from srcs to dsts) <= bw``: one shared resource."""

    name: str
    srcs: frozenset[int]
    dsts: frozenset[int]
    bw: float

    def covers(self, src: int, dst: int) -> bool:
        return src in self.srcs and dst in self.dsts


def _check_number(value, what: str, *, positive: bool) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TopologyError(f"{what} must be a number, got {value!r}")
    v = float(value)
    if not math.isfinite(v) or v < 0 or (positive and v == 0):
        kind = "positive" if positive else "non-negative"
        raise TopologyError(f"{what} must be a finite {kind} number, got {value!r}")
    return v


@dataclass(frozen=True)
class Topology:
    """An immutable network of ``n_ranks`` ranks (GPUs or processes).

    Construction validates everything: rank ids in range, positive bandwidths,
    non-negative latencies, no duplicate connection per ordered pair.
    Transformers (:meth:`reversed`, :meth:`with_name`) return new objects.
    """

    name: str
    n_ranks: int
    links: tuple[Link, ...] = ()
    switches: tuple[Switch, ...] = ()
    shared_ports: tuple[SharedPort, ...] = ()
    nodes: tuple[int, ...] = ()  # node id of each rank; () means one node
    dims: tuple[Dimension, ...] = ()
    description: str = ""
    # Free-form provenance: where the figures come from (datasheet citations).
    sources: tuple[str, ...] = field(default=(), compare=False)
    # GB/s of a rank's local copies and reductions (None: free, as on GPUs
    # whose copy engines overlap with communication).
    local_bw: float | None = None
    # "connection" (an engine per peer and channel: GPUs) or "rank" (one engine per rank: CPUs)
    overhead_scope: str = "connection"
    # us per call of a collective, whatever its schedule (runtime entry and exit; 0: the network alone)
    call_overhead: float = 0.0
    # us per local copy or reduction that moves bytes (a kernel call; 0: free, as in the catalog)
    local_overhead: float = 0.0
    # messages of more than eager_limit bytes pay rendezvous_alpha us more latency (None: one protocol)
    eager_limit: float | None = None
    rendezvous_alpha: float = 0.0

    def __post_init__(self) -> None:
        if isinstance(self.n_ranks, bool) or not isinstance(self.n_ranks, int) or self.n_ranks < 1:
            raise TopologyError(f"topology {self.name!r}: n_ranks must be a positive integer, got {self.n_ranks!r}")
        object.__setattr__(self, "links", tuple(self.links))
        object.__setattr__(self, "switches", tuple(self.switches))
        object.__setattr__(self, "shared_ports", tuple(self.shared_ports))
        object.__setattr__(self, "dims", tuple(self.dims))
        object.__setattr__(self, "sources", tuple(self.sources))
        nodes = tuple(self.nodes) if self.nodes else (0,) * self.n_ranks
        object.__setattr__(self, "nodes", nodes)
        n = self.n_ranks
        if len(nodes) != n:
            raise TopologyError(f"topology {self.name!r}: 'nodes' has {len(nodes)} entries for {n} ranks")
        for i, node in enumerate(nodes):
            if isinstance(node, bool) or not isinstance(node, int) or node < 0:
                raise TopologyError(f"topology {self.name!r}: node id of rank {i} must be a non-negative integer, got {node!r}")

        def rank_ok(r, where: str) -> None:
            if isinstance(r, bool) or not isinstance(r, int) or not 0 <= r < n:
                raise TopologyError(f"topology {self.name!r}: {where} names unknown rank {r!r} (ranks are 0..{n - 1})")

        seen: dict[tuple[int, int], str] = {}
        for link in self.links:
            rank_ok(link.src, f"link {link.src}->{link.dst}")
            rank_ok(link.dst, f"link {link.src}->{link.dst}")
            if link.src == link.dst:
                raise TopologyError(f"topology {self.name!r}: link {link.src}->{link.dst} is a self-loop")
            _check_number(link.bw, f"topology {self.name!r}: bandwidth of link {link.src}->{link.dst}", positive=True)
            _check_number(link.alpha, f"topology {self.name!r}: latency of link {link.src}->{link.dst}", positive=False)
            _check_number(link.overhead, f"topology {self.name!r}: per-message overhead of link {link.src}->{link.dst}", positive=False)
            key = (link.src, link.dst)
            if key in seen:
                raise TopologyError(f"topology {self.name!r}: two connections {link.src}->{link.dst} ({seen[key]} and {link.name})")
            seen[key] = link.name
        names = set()
        for sw in self.switches:
            if sw.name in names:
                raise TopologyError(f"topology {self.name!r}: duplicate switch name {sw.name!r}")
            names.add(sw.name)
            object.__setattr__(sw, "ranks", tuple(sw.ranks))
            if len(set(sw.ranks)) != len(sw.ranks) or len(sw.ranks) < 2:
                raise TopologyError(f"topology {self.name!r}: switch {sw.name!r} needs at least two distinct ranks, got {list(sw.ranks)}")
            for r in sw.ranks:
                rank_ok(r, f"switch {sw.name!r}")
            _check_number(sw.bw, f"topology {self.name!r}: bandwidth of switch {sw.name!r}", positive=True)
            _check_number(sw.alpha, f"topology {self.name!r}: latency of switch {sw.name!r}", positive=False)
            _check_number(sw.overhead, f"topology {self.name!r}: per-message overhead of switch {sw.name!r}", positive=False)
            for a in sw.ranks:
                for b in sw.ranks:
                    if a != b:
                        if (a, b) in seen:
                            raise TopologyError(f"topology {self.name!r}: two connections {a}->{b} ({seen[(a, b)]} and switch {sw.name})")
                        seen[(a, b)] = f"switch {sw.name}"
        if self.overhead_scope not in OVERHEAD_SCOPES:
            raise TopologyError(
                f"topology {self.name!r}: overhead_scope must be one of {', '.join(OVERHEAD_SCOPES)}, "
                f"got {self.overhead_scope!r}"
            )
        object.__setattr__(
            self, "call_overhead", _check_number(self.call_overhead, f"topology {self.name!r}: per-call overhead", positive=False)
        )
        object.__setattr__(
            self, "local_overhead",
            _check_number(self.local_overhead, f"topology {self.name!r}: local overhead", positive=False),
        )
        object.__setattr__(
            self, "rendezvous_alpha",
            _check_number(self.rendezvous_alpha, f"topology {self.name!r}: rendezvous latency", positive=False),
        )
        if self.eager_limit is not None:
            object.__setattr__(
                self, "eager_limit", _check_number(self.eager_limit, f"topology {self.name!r}: eager limit", positive=False)
            )

        if self.local_bw is not None:
            object.__setattr__(
                self, "local_bw", _check_number(self.local_bw, f"topology {self.name!r}: local copy bandwidth", positive=True)
            )
        for sp in self.shared_ports:
            object.__setattr__(sp, "srcs", tuple(sp.srcs))
            object.__setattr__(sp, "dsts", tuple(sp.dsts))
            if sp.name in names:
                raise TopologyError(f"topology {self.name!r}: duplicate resource name {sp.name!r}")
            names.add(sp.name)
            for r in sp.srcs + sp.dsts:
                rank_ok(r, f"shared port {sp.name!r}")
            _check_number(sp.bw, f"topology {self.name!r}: bandwidth of shared port {sp.name!r}", positive=True)
        if self.dims:
            prod = 1
            for d in self.dims:
                if d.size < 1:
                    raise TopologyError(f"topology {self.name!r}: dimension {d.name!r} has size {d.size}")
                _check_number(d.bw, f"topology {self.name!r}: bandwidth of dimension {d.name!r}", positive=True)
                _check_number(d.alpha, f"topology {self.name!r}: latency of dimension {d.name!r}", positive=False)
                _check_number(d.overhead, f"topology {self.name!r}: per-message overhead of dimension {d.name!r}", positive=False)
                prod *= d.size
            if prod != n:
                raise TopologyError(
                    f"topology {self.name!r}: dimension sizes {[d.size for d in self.dims]} multiply to {prod}, not {n} ranks"
                )

    def message_alpha(self, alpha: float, nbytes: float) -> float:
        """The latency of a message of ``nbytes`` on a connection of latency ``alpha`` (the protocol's share added)."""
        if self.rendezvous_alpha and self.eager_limit is not None and nbytes > self.eager_limit:
            return alpha + self.rendezvous_alpha
        return alpha

    # ------------------------------------------------------------------ views
    @cached_property
    def _connections(self) -> dict[tuple[int, int], Connection]:
        extra: dict[tuple[int, int], list[str]] = {}
        for sp in self.shared_ports:
            for s in sp.srcs:
                for d in sp.dsts:
                    if s != d:
                        extra.setdefault((s, d), []).append(sp.name)
        sp_bw = {sp.name: sp.bw for sp in self.shared_ports}
        out: dict[tuple[int, int], Connection] = {}
        for link in self.links:
            res = (link.name, *extra.get((link.src, link.dst), ()))
            bw = min([link.bw] + [sp_bw[r] for r in res[1:]])
            out[(link.src, link.dst)] = Connection(link.src, link.dst, link.alpha, bw, link.name, res, link.overhead)
        for sw in self.switches:
            for a in sw.ranks:
                for b in sw.ranks:
                    if a != b:
                        res = (f"{sw.name}:tx{a}", f"{sw.name}:rx{b}", *extra.get((a, b), ()))
                        bw = min([sw.bw] + [sp_bw[r] for r in res[2:]])
                        out[(a, b)] = Connection(a, b, sw.alpha, bw, sw.name, res, sw.overhead)
        return dict(sorted(out.items()))

    def connections(self) -> tuple[Connection, ...]:
        """Every directed connection, sorted by (src, dst)."""
        return tuple(self._connections.values())

    def connection(self, src: int, dst: int) -> Connection | None:
        """The connection ``src -> dst``, or None if the ranks are not adjacent."""
        return self._connections.get((src, dst))

    def has_connection(self, src: int, dst: int) -> bool:
        return (src, dst) in self._connections

    def neighbors_out(self, rank: int) -> tuple[int, ...]:
        return tuple(d for (s, d) in self._connections if s == rank)

    def bandwidth_constraints(self) -> Iterator[BandwidthConstraint]:
        """Yield every bandwidth cap: links, switch ports, shared ports.

        The names match :attr:`Connection.resources`.
        """
        for link in self.links:
            yield BandwidthConstraint(link.name, frozenset((link.src,)), frozenset((link.dst,)), link.bw)
        for sw in self.switches:
            members = frozenset(sw.ranks)
            for r in sw.ranks:
                yield BandwidthConstraint(f"{sw.name}:tx{r}", frozenset((r,)), members - {r}, sw.bw)
                yield BandwidthConstraint(f"{sw.name}:rx{r}", members - {r}, frozenset((r,)), sw.bw)
        for sp in self.shared_ports:
            yield BandwidthConstraint(sp.name, frozenset(sp.srcs), frozenset(sp.dsts), sp.bw)

    @cached_property
    def resource_bw(self) -> dict[str, float]:
        """Bandwidth (GB/s) of every resource named in a connection."""
        return {c.name: c.bw for c in self.bandwidth_constraints()}

    @property
    def n_nodes(self) -> int:
        return len(set(self.nodes))

    def node_ranks(self, node: int) -> tuple[int, ...]:
        return tuple(r for r in range(self.n_ranks) if self.nodes[r] == node)

    def coords(self, rank: int) -> tuple[int, ...]:
        """Mixed-radix coordinates of ``rank`` over :attr:`dims` (dim 0 fastest)."""
        out = []
        for d in self.dims:
            out.append(rank % d.size)
            rank //= d.size
        return tuple(out)

    def to_networkx(self) -> nx.DiGraph:
        """A DiGraph with one edge per connection (attributes alpha, bw, via)."""
        g = nx.DiGraph(name=self.name)
        for r in range(self.n_ranks):
            g.add_node(r, node=self.nodes[r])
        for c in self.connections():
            g.add_edge(c.src, c.dst, alpha=c.alpha, bw=c.bw, overhead=c.overhead, via=c.via)
        return g

    @property
    def graph(self) -> nx.DiGraph:
        return self._graph

    @cached_property
    def _graph(self) -> nx.DiGraph:
        return self.to_networkx()

    def is_strongly_connected(self) -> bool:
        return self.n_ranks == 1 or nx.is_strongly_connected(self._graph)

    def require_connected(self, what: str = "this collective") -> None:
        """Raise :class:`TopologyError` if some rank cannot reach another."""
        if self.is_strongly_connected():
            return
        comps = sorted(nx.strongly_connected_components(self._graph), key=min)
        raise TopologyError(
            f"topology {self.name!r} is not connected, as {what} needs: "
            f"{len(comps)} groups of ranks, e.g. {sorted(comps[0])} cannot reach {sorted(comps[1])}"
        )

    # ---------------------------------------------------------- transformers
    def reversed(self) -> "Topology":
        """The same network with every direction flipped (a new object)."""
        return replace(
            self,
            name=f"{self.name}.reversed" if not self.name.endswith(".reversed") else self.name[: -len(".reversed")],
            links=tuple(Link(l.dst, l.src, l.alpha, l.bw, l.overhead) for l in self.links),
            shared_ports=tuple(SharedPort(s.name, s.dsts, s.srcs, s.bw) for s in self.shared_ports),
        )

    def with_name(self, name: str) -> "Topology":
        return replace(self, name=name)

    @classmethod
    def from_networkx(cls, g: nx.DiGraph, name: str | None = None) -> "Topology":
        """Build from a DiGraph whose edges carry ``alpha`` (us) and ``bw`` (GB/s).

        Nodes must be the integers ``0..n-1``; an optional node attribute
        ``node`` gives the host of each rank.
        """
        n = g.number_of_nodes()
        if sorted(g.nodes) != list(range(n)):
            raise TopologyError(f"graph nodes must be 0..{n - 1}, got {sorted(g.nodes)[:10]}")
        links = []
        for s, d, data in sorted(g.edges(data=True)):
            if "alpha" not in data or "bw" not in data:
                raise TopologyError(f"edge {s}->{d} needs 'alpha' and 'bw' attributes")
            links.append(Link(s, d, data["alpha"], data["bw"], data.get("overhead", 0.0)))
        nodes = tuple(g.nodes[r].get("node", 0) for r in range(n))
        return cls(name or g.graph.get("name", "graph"), n, links=tuple(links), nodes=nodes)
