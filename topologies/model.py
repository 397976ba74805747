"""The immutable network model: ranks, directed links, switches, spines, shared ports.

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
* ``Topology.message_curve`` and ``Topology.local_curve`` (optional
  :class:`~ccsynth.topologies.curve.SizeCurve`, default None): size-dependent
  costs (after PLogP's ``g(m)``): in a call of ``S`` bytes every message's
  bytes cost ``f(S)`` times their time at the connection's ``bw`` (local
  copies and reductions at ``local_bw``), ``f`` piecewise-linear between
  measured sizes. None: the constants alone, as in the catalog. :meth:`Topology.fastest` is the
  topology at the curves' fastest points, what lower bounds use.
* ``Topology.forward_curve`` (optional :class:`~ccsynth.topologies.curve.SizeCurve`
  of factors >= 1, default None): what a *forwarded* message costs more.
  A send that waits, directly or through local work, for a receive of the
  same call (every step of a ring, a tree or Rabenseifner after the first,
  a chain of ``ccsynth topo profile``) moves ``f(S)`` times its bytes, on
  top of ``message_curve``; a send of the call's own input does not. On
  the project's 2-core machine with MPICH's shared memory a 256 KiB message
  that passes on what was just received takes 4-5x as long as an
  independent one (the receiving core's copy leaves the data where the
  next copy must fetch it again: measured, not modelled further). ``ccsynth
  topo profile`` writes a curve that never rises with ``S`` (its forward
  probes' penalty at 1-16 MiB, 2.5-5x in some runs, was seen by no
  collective of the quiet benchmark runs). None: every message alike, as in
  the catalog.
* ``Topology.footprint_curve`` (optional :class:`~ccsynth.topologies.curve.SizeCurve`,
  default None): what the bytes of a call cost by its *footprint* -- the
  bytes a rank touches between two calls on the same buffers (the reuse
  distance of its data): the call's own working set (input, output,
  scratch, staging) when it is called back to back, the working sets of
  every algorithm in turn under ``ccsynth bench --interleave``, whatever
  the application computed on in between. Every message's bytes cost
  ``h(F)`` times more, on top of ``message_curve``: data that the
  last-level cache no longer holds moves at memory speed (on the
  project's 2-core machine an MPI exchange through the executor ran about
  3x slower once a rank's footprint passed 8-16 MiB of the 32 MiB L3; the
  benchmark's interleaved algorithms pass it at 1 MiB per call: run D's
  2.1-3x misses at 1-4 MiB). Local copies and reductions keep
  ``local_curve`` alone (its kernel ladder already runs at its own
  footprint; charging them ``h`` too over-predicted the 2-rank allgather
  at 4-16 MiB). Measured by ``ccsynth topo profile`` (``h`` is 1 at the
  smallest footprint probed); None: nothing, as in the catalog.
* ``Topology.cold_call`` (optional :class:`~ccsynth.topologies.coldcall.ColdCallCost`,
  default None): the part of a cold call's extra that is paid once per
  call, not per byte: a call of footprint ``F`` costs ``c(F)`` us more,
  added once like ``call_overhead``. Measured by ``ccsynth topo profile``
  beside ``footprint_curve`` (footprint probes of two message sizes); None:
  nothing, every byte carries the footprint's cost alone, as before.
* ``Topology.async_progress`` (default True): False says that the MPI
  library moves a message's bytes only while both ranks are inside it (no
  progress thread; ccsynth's executor enters MPI to wait only when it has
  nothing else ready), so a transfer's data starts only once the sender's
  and the receiver's engines are idle (``overhead_scope="rank"`` only;
  :mod:`ccsynth.synth.simulate`). ``ccsynth topo profile`` writes False.
* ``Topology.receiver_copies`` (default False; with ``async_progress=False``
  only): a transfer's data phase keeps the receiving rank's engine busy for
  at least its bytes at the connection's bandwidth, so nothing else of that
  rank (a reduction, another message's bytes) runs beside it. An MPI
  library over shared memory copies a large message with the receiving
  rank's own core (single-copy through CMA, or out of the shared cells),
  the same core that runs the executor's reductions. ``ccsynth topo
  profile`` writes True where every rank has a core of its own (see
  :mod:`ccsynth.bench.profile`: with more ranks than cores the ranks share
  cores in a way one engine per rank does not describe, and the fit without
  it predicted the 4-ranks-on-2-cores benchmarks better).
* ``Topology.call_overhead`` (us, default 0): the fixed cost of one call of a
  collective -- entering and leaving the runtime, ranks starting at slightly
  different times -- added once per call whatever the schedule. Measured by
  ``ccsynth topo profile``; 0 in the catalog, whose figures describe the
  network alone.
* ``Topology.round_cost`` (optional :class:`~ccsynth.topologies.rounds.RoundCost`,
  default None): what a *round* costs beyond its messages -- a rank waiting
  on the messages of ``k`` distinct peers at once pays ``c(k)`` us more,
  once per round, as a delay of the round's last message (the
  rounds of a rank are its receives by hop level: :mod:`ccsynth.topologies.rounds`,
  :mod:`ccsynth.synth.simulate`). With more ranks than cores a round
  completes only once every peer it waits on has been scheduled; the
  per-message figures, fitted on rounds of one peer, do not see it.
  Measured by ``ccsynth topo profile`` (rounds of ``k = 1 .. n - 1``
  peers); None: every prediction as before, as in the catalog.
* ``Topology.communicator_overhead`` (us, default 0): the extra fixed cost
  of one call made through ccsynth's communicator
  (:class:`~ccsynth.collectives.communicator.Communicator`: argument
  checks, the plan's look-up, the call's channel) over the same schedule run
  by the executor directly, which ``call_overhead`` covers. The simulator
  never adds it (it predicts a schedule's run); ``ccsynth bench --predict``
  adds it to the rows that run through the communicator (``default``,
  ``plan:FILE``). Measured by ``ccsynth topo profile``; 0 in the catalog.
* ``Topology.run_curve`` (optional :class:`~ccsynth.topologies.curve.SizeCurve`,
  default None): what a whole *run* of a collective costs more or less than
  the model above says, by its input bytes per rank -- one factor per size,
  common to every schedule. ``ccsynth topo profile`` measures it by running
  reference collectives (MPI's own allreduce and allgather, ccsynth's ring
  and recursive doubling) at a ladder of sizes and dividing their measured
  times by their predictions (:mod:`ccsynth.bench.calibration`). On the
  project's 2-core machine with 4 ranks every algorithm ran 1.2-1.8x its
  per-probe prediction between 8 B and 256 KiB, alike, which no probe of
  one message pattern saw. Only :func:`~ccsynth.synth.simulate.simulate_graph`
  (the executor's run: what ``ccsynth bench --predict`` and the plan tables
  read) applies it; the schedule-level simulator, the synthesizer and the
  lower bounds do not (a factor common to every schedule changes no choice
  among schedules). None: nothing, as in the catalog.
* ``Topology.mpi_reference`` (tuple of :class:`~ccsynth.topologies.reference.ReferenceTimes`,
  default empty): what the MPI library's own collectives took when the
  machine was profiled, by input bytes per rank. No prediction uses it:
  ``ccsynth bench --predict`` compares MPI's row of the same run with it to
  say how far the machine has moved since the profile
  (:mod:`ccsynth.topologies.reference`).

A :class:`Topology` holds

* :class:`Link` -- a directed point-to-point connection ``src -> dst``;
* :class:`Switch` -- a hyperedge: every member can send to every other member;
  each member has one egress and one ingress port of ``bw`` GB/s;
* :class:`Spine` -- the upper tier of a two-tier fat tree: it joins leaf
  switches, so that a member of one leaf reaches every member of another
  leaf that sits on another node, through the sender's and the receiver's
  leaf ports (shared with the traffic that stays on a leaf) and, when the
  leaves' up-links are oversubscribed, through those up-links;
* :class:`SharedPort` -- a bandwidth cap shared by all traffic from any rank
  of ``srcs`` to any rank of ``dsts`` (a NIC shared by the GPUs of a node);
* ``nodes`` -- which node (host) each rank sits on;
* ``dims`` -- optional network dimensions of a hierarchical fabric
  (:class:`Dimension`), rank coordinates being mixed radix, dimension 0
  varying fastest.

At most one connection (a link, membership of a common switch, or two
leaves of a spine) exists per ordered pair of ranks. :meth:`Topology.connections`
lists them all and :meth:`Topology.bandwidth_constraints` yields every
bandwidth cap as ``(srcs, dsts, bw, name)`` -- links, switch ports, spine
up-links and shared ports alike -- so that neither the MILPs nor the
simulator special-case switches.

**Scale.** Switches and spines imply their connections: a cluster of 1,024
GPUs behind rail switches and a spine has a million of them. Nothing builds
them eagerly: construction and validation walk the members only (linear in
the size of the description), :meth:`Topology.connection` computes one pair
on demand (and remembers it), :meth:`Topology.connections_from` one rank's,
:meth:`Topology.connection_count` and :meth:`Topology.connection_classes`
count them by formula. Only :meth:`Topology.connections` (and the networkx
graph built from it) materialises every pair, for the callers that need
them all.

Example:
    >>> from ccsynth.topologies.model import Link, Topology
    >>> t = Topology("pair", 2, links=(Link(0, 1, 1.0, 10.0), Link(1, 0, 1.0, 10.0)))
    >>> t.connection(0, 1).time_us(10_000)
    2.0

Where the code lives
--------------------
This module holds :class:`Topology` (its fields, the cost figures, the
queries and the transformers) and re-exports the names importers use:
the parts it is described with live in :mod:`ccsynth.topologies.elements`
(:class:`Link`, :class:`Switch`, :class:`Spine`, :class:`SharedPort`,
:class:`Dimension`), the connections between ranks and the bandwidth
constraints in :mod:`ccsynth.topologies.connections`, the checks run on
construction in :mod:`ccsynth.topologies.validation`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from functools import cached_property

import networkx as nx

from ccsynth.errors import TopologyError
from ccsynth.topologies.coldcall import ColdCallCost
from ccsynth.topologies.connections import (
    BandwidthConstraint, Connection, ConnectionClass, ConnectionIndex, adjacent, bandwidth_constraints,
    build_connection, connection_classes, neighbors_out, resource_bandwidths,
)
from ccsynth.topologies.curve import SizeCurve
from ccsynth.topologies.elements import (
    BYTES_PER_US_PER_GBPS, OVERHEAD_SCOPES, Dimension, Link, SharedPort, Spine, Switch,
)
from ccsynth.topologies.reference import ReferenceTimes
from ccsynth.topologies.rounds import RoundCost
from ccsynth.topologies.validation import validate

__all__ = [
    "BYTES_PER_US_PER_GBPS",
    "OVERHEAD_SCOPES",
    "Link",
    "Switch",
    "Spine",
    "SharedPort",
    "Dimension",
    "Connection",
    "ConnectionClass",
    "BandwidthConstraint",
    "Topology",
]


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
    # upper tiers of fat trees joining leaf switches (see :class:`Spine`)
    spines: tuple[Spine, ...] = ()
    # size-dependent costs of messages and of local copies/reductions (None: the constants alone)
    message_curve: SizeCurve | None = None
    local_curve: SizeCurve | None = None
    # what a forwarded message costs more (factors >= 1; None: nothing), see the module docstring
    forward_curve: SizeCurve | None = None
    # False (with overhead_scope "rank"): a message's bytes start moving only when both ranks' engines are idle
    async_progress: bool = True
    # True (with async_progress False): a transfer's data phase keeps the receiver's engine busy (its core copies)
    receiver_copies: bool = False
    # extra us of a round by the peers a rank waits on in it (None: nothing), see the module docstring
    round_cost: RoundCost | None = None
    # us per call made through ccsynth's communicator, over call_overhead (predictions of such rows only)
    communicator_overhead: float = 0.0
    # what bytes cost more by the call's footprint per rank (its data's reuse distance; None: nothing)
    footprint_curve: SizeCurve | None = None
    # us a call pays once more by its footprint per rank (the per-call part of a cold call; None: nothing)
    cold_call: ColdCallCost | None = None
    # what a whole run of a collective costs more by its input bytes per rank (None: nothing)
    run_curve: SizeCurve | None = None
    # what MPI's own collectives took when the machine was profiled (the yardstick of its drift; no model term)
    mpi_reference: tuple[ReferenceTimes, ...] = ()

    def __post_init__(self) -> None:
        validate(self)

    @cached_property
    def fastest(self) -> Topology:
        """This topology with every message and local copy at its curve's fastest point, curves dropped.

        Every bandwidth is divided by ``message_curve.fastest`` and ``local_bw``
        by ``local_curve.fastest``: no message of any size moves faster than
        that (see :mod:`ccsynth.topologies.curve`), so a lower bound computed
        on it never exceeds a time simulated with the curves. Without curves:
        the topology itself. The forward curve (factors >= 1: only ever
        slower) is dropped too; the footprint curve's fastest point scales
        the messages'.
        """
        if self.message_curve is None and self.local_curve is None and self.forward_curve is None \
                and self.footprint_curve is None:
            return self
        h = self.footprint_curve.fastest if self.footprint_curve is not None else 1.0
        f = (self.message_curve.fastest if self.message_curve is not None else 1.0) * h
        lf = self.local_curve.fastest if self.local_curve is not None else 1.0
        return replace(
            self,
            links=tuple(replace(l, bw=l.bw / f) for l in self.links),
            switches=tuple(replace(sw, bw=sw.bw / f) for sw in self.switches),
            spines=tuple(sp if sp.uplink_bw is None else replace(sp, uplink_bw=sp.uplink_bw / f) for sp in self.spines),
            shared_ports=tuple(replace(p, bw=p.bw / f) for p in self.shared_ports),
            dims=tuple(replace(d, bw=d.bw / f) for d in self.dims),
            local_bw=None if self.local_bw is None else self.local_bw / lf,
            message_curve=None,
            local_curve=None,
            forward_curve=None,
            footprint_curve=None,
        )

    def mpi_reference_for(self, collective: str) -> ReferenceTimes | None:
        """MPI's own ``collective`` when the machine was profiled (None: not measured)."""
        return next((r for r in self.mpi_reference if r.collective == collective), None)

    def message_alpha(self, alpha: float, nbytes: float) -> float:
        """The latency of a message of ``nbytes`` on a connection of latency ``alpha`` (the protocol's share added)."""
        if self.rendezvous_alpha and self.eager_limit is not None and nbytes > self.eager_limit:
            return alpha + self.rendezvous_alpha
        return alpha


    # ------------------------------------------------------------ connections
    @cached_property
    def index(self) -> ConnectionIndex:
        """Per-rank lookups of links, switches, spine seats and shared ports (built once, on first use)."""
        return ConnectionIndex(self)

    @cached_property
    def _memo(self) -> dict[tuple[int, int], Connection | None]:
        return {}

    def connection(self, src: int, dst: int) -> Connection | None:
        """The connection ``src -> dst``, or None if the ranks are not adjacent (computed once, then remembered)."""
        key = (src, dst)
        memo = self._memo
        if key not in memo:
            memo[key] = build_connection(self, src, dst)
        return memo[key]

    def has_connection(self, src: int, dst: int) -> bool:
        return self.connection(src, dst) is not None

    def neighbors_out(self, rank: int) -> tuple[int, ...]:
        """The ranks ``rank`` has a connection to, ascending."""
        return neighbors_out(self, rank)

    def connections_from(self, rank: int) -> tuple[Connection, ...]:
        """Every connection out of ``rank``, by destination."""
        return tuple(adjacent(self, rank, d) for d in self.neighbors_out(rank))

    @cached_property
    def _all_connections(self) -> tuple[Connection, ...]:
        return tuple(c for r in range(self.n_ranks) for c in self.connections_from(r))

    def connections(self) -> tuple[Connection, ...]:
        """Every directed connection, sorted by (src, dst) (all pairs built: see :meth:`connection_count` first)."""
        return self._all_connections

    def connection_count(self) -> int:
        """How many directed connections there are, counted without building them."""
        return sum(c.count for c in self.connection_classes())

    def connection_classes(self) -> tuple[ConnectionClass, ...]:
        """The connections grouped by kind (link, switch, spine), alpha, bandwidth and overhead, with counts
        (by formula: see :func:`~ccsynth.topologies.connections.connection_classes`)."""
        return connection_classes(self)

    # ------------------------------------------------------------ resources
    def bandwidth_constraints(self) -> Iterator[BandwidthConstraint]:
        """Yield every bandwidth cap: links, switch ports, spine up-links, shared ports (named as
        :attr:`Connection.resources` names them)."""
        return bandwidth_constraints(self)

    @cached_property
    def resource_bw(self) -> dict[str, float]:
        """Bandwidth (GB/s) of every resource named in a connection (built without the constraints' rank sets)."""
        return resource_bandwidths(self)

    # ------------------------------------------------------------ structure
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
    def reversed(self) -> Topology:
        """The same network with every direction flipped (a new object).

        Switches and spines are symmetric and stay as they are.
        """
        return replace(
            self,
            name=f"{self.name}.reversed" if not self.name.endswith(".reversed") else self.name[: -len(".reversed")],
            links=tuple(Link(l.dst, l.src, l.alpha, l.bw, l.overhead) for l in self.links),
            shared_ports=tuple(SharedPort(s.name, s.dsts, s.srcs, s.bw) for s in self.shared_ports),
        )

    def with_name(self, name: str) -> Topology:
        return replace(self, name=name)

    @classmethod
    def from_networkx(cls, g: nx.DiGraph, name: str | None = None) -> Topology:
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
