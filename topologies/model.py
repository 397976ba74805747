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
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field, replace
from functools import cached_property
from collections.abc import Iterator

import networkx as nx

from ccsynth.errors import TopologyError
from ccsynth.topologies.checks import checked_number
from ccsynth.topologies.coldcall import ColdCallCost
from ccsynth.topologies.curve import SizeCurve
from ccsynth.topologies.reference import ReferenceTimes
from ccsynth.topologies.rounds import RoundCost
from ccsynth.limits import check as check_limit, check_min as check_limit_min

BYTES_PER_US_PER_GBPS = 1e3
#: values of :attr:`Topology.overhead_scope` (see the module docstring)
OVERHEAD_SCOPES = ("connection", "rank")

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
class Spine:
    """The spine tier of a two-tier fat tree, joining the leaf switches named in ``leaves``.

    A member ``a`` of leaf ``A`` reaches every member ``b`` of another leaf
    ``B`` of this spine that sits on another node (ranks of one node talk
    over their own interconnect). The message leaves through ``a``'s port on
    its leaf (resource ``{A}:tx{a}``), climbs to the spine and comes down to
    ``b``'s port on its leaf (``{B}:rx{b}``): it shares the NICs with the
    traffic that stays on a leaf. ``uplink_bw``, when given, caps all that
    leaves a leaf through the spine (``{name}:up.{A}``) and all that comes
    down into a leaf (``{name}:down.{B}``), each direction: a leaf of ``k``
    ports of ``B`` GB/s oversubscribed ``r:1`` has ``k * B / r``. ``None``:
    non-blocking (full bisection; the spine never limits). ``alpha`` is the
    latency of a message through the spine (two switch hops more than one
    that stays on a leaf), ``overhead`` the per-message work on each end.
    """

    name: str
    leaves: tuple[str, ...]
    alpha: float  # us
    overhead: float = 0.0  # us per message, on the sender and on the receiver
    uplink_bw: float | None = None  # GB/s per leaf and direction; None: non-blocking

    def up(self, leaf: str) -> str:
        """Resource name of ``leaf``'s up-links into this spine."""
        return f"{self.name}:up.{leaf}"

    def down(self, leaf: str) -> str:
        """Resource name of the spine's down-links into ``leaf``."""
        return f"{self.name}:down.{leaf}"


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


def _check_bw(value, what: str) -> float:
    """A bandwidth (GB/s): positive, finite and at least MIN_BANDWIDTH_GBPS."""
    v = checked_number(value, what, positive=True)
    check_limit_min(what, v, "MIN_BANDWIDTH_GBPS", TopologyError)
    return v


def _check_alpha(value, what: str) -> float:
    """A latency (us): non-negative, finite and at most MAX_LATENCY_US."""
    v = checked_number(value, what, positive=False)
    check_limit(what, v, "MAX_LATENCY_US", TopologyError)
    return v


@dataclass(frozen=True)
class _LeafSeat:
    """Where a rank sits in a spine: the spine's index and its leaf switch's index."""

    spine: int
    switch: int


class _Index:
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
        self.seat: list[_LeafSeat | None] = [None] * n
        self.spine_leaves: list[list[int]] = []  # switch indices of each spine's leaves
        for si, sp in enumerate(t.spines):
            leaves = [self.switch_index[name] for name in sp.leaves]
            self.spine_leaves.append(leaves)
            for w in leaves:
                for r in t.switches[w].ranks:
                    self.seat[r] = _LeafSeat(si, w)
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
        if isinstance(self.n_ranks, bool) or not isinstance(self.n_ranks, int) or self.n_ranks < 1:
            raise TopologyError(f"topology {self.name!r}: n_ranks must be a positive integer, got {self.n_ranks!r}")
        check_limit(f"topology {self.name!r}: n_ranks", self.n_ranks, "MAX_RANKS", TopologyError)
        object.__setattr__(self, "links", tuple(self.links))
        object.__setattr__(self, "switches", tuple(self.switches))
        object.__setattr__(self, "shared_ports", tuple(self.shared_ports))
        object.__setattr__(self, "dims", tuple(self.dims))
        object.__setattr__(self, "sources", tuple(self.sources))
        object.__setattr__(self, "spines", tuple(self.spines))
        nodes = tuple(self.nodes) if self.nodes else (0,) * self.n_ranks
        object.__setattr__(self, "nodes", nodes)
        n = self.n_ranks
        if len(nodes) != n:
            raise TopologyError(f"topology {self.name!r}: 'nodes' has {len(nodes)} entries for {n} ranks")
        for i, node in enumerate(nodes):
            if isinstance(node, bool) or not isinstance(node, int) or node < 0:
                raise TopologyError(f"topology {self.name!r}: node id of rank {i} must be a non-negative integer, got {node!r}")
        # Sizes first: a small file must not make the tables below huge. Switches and spines imply their
        # connections without building them, so the connection limit counts the links written out.
        check_limit(f"topology {self.name!r}: links", len(self.links), "MAX_CONNECTIONS", TopologyError)
        n_pairs = sum(len(sp.srcs) * len(sp.dsts) for sp in self.shared_ports)
        check_limit(f"topology {self.name!r}: shared-port (source, destination) pairs", n_pairs, "MAX_PORT_PAIRS",
                    TopologyError)
        self._check_links()
        names = self._check_switches()
        self._check_spines(names)
        if self.overhead_scope not in OVERHEAD_SCOPES:
            raise TopologyError(
                f"topology {self.name!r}: overhead_scope must be one of {', '.join(OVERHEAD_SCOPES)}, "
                f"got {self.overhead_scope!r}"
            )
        object.__setattr__(
            self, "call_overhead", _check_alpha(self.call_overhead, f"topology {self.name!r}: per-call overhead")
        )
        object.__setattr__(
            self, "local_overhead",
            _check_alpha(self.local_overhead, f"topology {self.name!r}: local overhead"),
        )
        object.__setattr__(
            self, "rendezvous_alpha",
            _check_alpha(self.rendezvous_alpha, f"topology {self.name!r}: rendezvous latency"),
        )
        if self.eager_limit is not None:
            object.__setattr__(
                self, "eager_limit", checked_number(self.eager_limit, f"topology {self.name!r}: eager limit", positive=False)
            )

        if self.local_bw is not None:
            object.__setattr__(
                self, "local_bw", _check_bw(self.local_bw, f"topology {self.name!r}: local copy bandwidth")
            )
        for sp in self.shared_ports:
            object.__setattr__(sp, "srcs", tuple(sp.srcs))
            object.__setattr__(sp, "dsts", tuple(sp.dsts))
            if sp.name in names:
                raise TopologyError(f"topology {self.name!r}: duplicate resource name {sp.name!r}")
            names.add(sp.name)
            for r in sp.srcs + sp.dsts:
                self._rank_ok(r, f"shared port {sp.name!r}")
            _check_bw(sp.bw, f"topology {self.name!r}: bandwidth of shared port {sp.name!r}")
        self._check_dims()
        for what, curve in (("message_curve", self.message_curve), ("local_curve", self.local_curve),
                            ("forward_curve", self.forward_curve), ("footprint_curve", self.footprint_curve),
                            ("run_curve", self.run_curve)):
            if curve is not None and not isinstance(curve, SizeCurve):
                raise TopologyError(f"topology {self.name!r}: {what} must be a SizeCurve, got {type(curve).__name__}")
        object.__setattr__(
            self, "communicator_overhead",
            _check_alpha(self.communicator_overhead, f"topology {self.name!r}: communicator overhead"),
        )
        object.__setattr__(self, "mpi_reference", tuple(self.mpi_reference))
        seen_refs: set[str] = set()
        for ref in self.mpi_reference:
            if not isinstance(ref, ReferenceTimes):
                raise TopologyError(f"topology {self.name!r}: mpi_reference entries must be ReferenceTimes, got "
                                    f"{type(ref).__name__}")
            if ref.collective in seen_refs:
                raise TopologyError(f"topology {self.name!r}: two MPI references of {ref.collective!r}")
            seen_refs.add(ref.collective)
        if self.cold_call is not None and not isinstance(self.cold_call, ColdCallCost):
            raise TopologyError(f"topology {self.name!r}: cold_call must be a ColdCallCost, got "
                                f"{type(self.cold_call).__name__}")
        if self.round_cost is not None and not isinstance(self.round_cost, RoundCost):
            raise TopologyError(f"topology {self.name!r}: round_cost must be a RoundCost, got "
                                f"{type(self.round_cost).__name__}")
        if not isinstance(self.async_progress, bool):
            raise TopologyError(f"topology {self.name!r}: async_progress must be true or false, got {self.async_progress!r}")
        if not isinstance(self.receiver_copies, bool):
            raise TopologyError(f"topology {self.name!r}: receiver_copies must be true or false, got "
                                f"{self.receiver_copies!r}")
        if self.forward_curve is not None and self.forward_curve.fastest < 1.0:
            raise TopologyError(f"topology {self.name!r}: forward_curve factors must be at least 1 (a forwarded "
                                f"message costs more, never less), got {self.forward_curve.fastest:g}")

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

    # ------------------------------------------------------------ validation
    def _rank_ok(self, r, where: str) -> None:
        if isinstance(r, bool) or not isinstance(r, int) or not 0 <= r < self.n_ranks:
            raise TopologyError(f"topology {self.name!r}: {where} names unknown rank {r!r} (ranks are 0..{self.n_ranks - 1})")

    def _check_links(self) -> None:
        seen: set[tuple[int, int]] = set()
        for link in self.links:
            self._rank_ok(link.src, f"link {link.src}->{link.dst}")
            self._rank_ok(link.dst, f"link {link.src}->{link.dst}")
            if link.src == link.dst:
                raise TopologyError(f"topology {self.name!r}: link {link.src}->{link.dst} is a self-loop")
            _check_bw(link.bw, f"topology {self.name!r}: bandwidth of link {link.src}->{link.dst}")
            _check_alpha(link.alpha, f"topology {self.name!r}: latency of link {link.src}->{link.dst}")
            _check_alpha(link.overhead, f"topology {self.name!r}: per-message overhead of link {link.src}->{link.dst}")
            key = (link.src, link.dst)
            if key in seen:
                raise TopologyError(f"topology {self.name!r}: two connections {link.src}->{link.dst} ({link.name} and {link.name})")
            seen.add(key)

    def _check_switches(self) -> set[str]:
        """Switch fields, and no pair connected twice (two switches sharing two ranks, or a link inside a switch).

        Linear in the members: two switches give a pair twice exactly when they
        share two ranks, which counting the switch pairs met at each rank finds.
        """
        names: set[str] = set()
        leaves = {name for sp in self.spines for name in sp.leaves}
        for sw in self.switches:
            if sw.name in names:
                raise TopologyError(f"topology {self.name!r}: duplicate switch name {sw.name!r}")
            names.add(sw.name)
            object.__setattr__(sw, "ranks", tuple(sw.ranks))
            # a spine's leaf may hold one rank (a scalable unit of one node): its ports reach the spine
            fewest = 1 if sw.name in leaves else 2
            if len(set(sw.ranks)) != len(sw.ranks) or len(sw.ranks) < fewest:
                raise TopologyError(f"topology {self.name!r}: switch {sw.name!r} needs at least two distinct ranks"
                                    f"{' (one on a spine leaf)' if fewest == 1 else ''}, got {list(sw.ranks)}")
            for r in sw.ranks:
                self._rank_ok(r, f"switch {sw.name!r}")
            _check_bw(sw.bw, f"topology {self.name!r}: bandwidth of switch {sw.name!r}")
            _check_alpha(sw.alpha, f"topology {self.name!r}: latency of switch {sw.name!r}")
            _check_alpha(sw.overhead, f"topology {self.name!r}: per-message overhead of switch {sw.name!r}")
        switches_of: list[list[int]] = [[] for _ in range(self.n_ranks)]
        for i, sw in enumerate(self.switches):
            for r in sw.ranks:
                switches_of[r].append(i)
        shared: dict[tuple[int, int], int] = {}
        for r, mine in enumerate(switches_of):
            for x in range(len(mine)):
                for y in range(x + 1, len(mine)):
                    pair = (mine[x], mine[y])
                    if pair in shared:
                        a, b = shared[pair], r
                        raise TopologyError(f"topology {self.name!r}: two connections {a}->{b} (switch "
                                            f"{self.switches[pair[0]].name} and switch {self.switches[pair[1]].name})")
                    shared[pair] = r
        for link in self.links:
            common = set(switches_of[link.src]).intersection(switches_of[link.dst])
            if common:
                raise TopologyError(f"topology {self.name!r}: two connections {link.src}->{link.dst} ({link.name} and "
                                    f"switch {self.switches[min(common)].name})")
        return names

    def _check_spines(self, names: set[str]) -> None:
        """Spine fields; its leaves are switches, every rank on at most one leaf, no pair connected twice."""
        switch_index = {sw.name: i for i, sw in enumerate(self.switches)}
        seated: dict[int, str] = {}
        seat: dict[int, tuple[int, str]] = {}  # rank -> (spine index, leaf name)
        for si, sp in enumerate(self.spines):
            where = f"topology {self.name!r}: spine {sp.name!r}"
            if sp.name in names:
                raise TopologyError(f"topology {self.name!r}: duplicate resource name {sp.name!r}")
            names.add(sp.name)
            object.__setattr__(sp, "leaves", tuple(sp.leaves))
            if len(set(sp.leaves)) != len(sp.leaves) or len(sp.leaves) < 2:
                raise TopologyError(f"{where} needs at least two distinct leaf switches, got {list(sp.leaves)}")
            _check_alpha(sp.alpha, f"{where}: latency")
            _check_alpha(sp.overhead, f"{where}: per-message overhead")
            if sp.uplink_bw is not None:
                _check_bw(sp.uplink_bw, f"{where}: up-link bandwidth")
            for leaf in sp.leaves:
                if leaf not in switch_index:
                    raise TopologyError(f"{where}: leaf {leaf!r} is not a switch of the topology")
                for r in self.switches[switch_index[leaf]].ranks:
                    if r in seated:
                        raise TopologyError(f"{where}: rank {r} sits on leaf {leaf!r} and on leaf {seated[r]!r}; "
                                            f"a rank has one port in a fat tree")
                    seated[r] = leaf
                    seat[r] = (si, leaf)
        if not self.spines:
            return
        nodes = self.nodes

        def through_spine(a: int, b: int) -> Spine | None:
            sa, sb = seat.get(a), seat.get(b)
            if sa is None or sb is None or sa[0] != sb[0] or sa[1] == sb[1] or nodes[a] == nodes[b]:
                return None
            return self.spines[sa[0]]

        for link in self.links:
            hit = through_spine(link.src, link.dst)
            if hit is not None:
                raise TopologyError(f"topology {self.name!r}: two connections {link.src}->{link.dst} ({link.name} and "
                                    f"spine {hit.name})")
        leaves = {name for sp in self.spines for name in sp.leaves}
        for sw in self.switches:
            if sw.name in leaves:
                continue
            seated_members = [r for r in sw.ranks if r in seat]
            for a in seated_members:
                for b in seated_members:
                    hit = through_spine(a, b)
                    if hit is not None:
                        raise TopologyError(f"topology {self.name!r}: two connections {a}->{b} (switch {sw.name} and "
                                            f"spine {hit.name})")

    def _check_dims(self) -> None:
        if not self.dims:
            return
        prod = 1
        for d in self.dims:
            if d.size < 1:
                raise TopologyError(f"topology {self.name!r}: dimension {d.name!r} has size {d.size}")
            _check_bw(d.bw, f"topology {self.name!r}: bandwidth of dimension {d.name!r}")
            _check_alpha(d.alpha, f"topology {self.name!r}: latency of dimension {d.name!r}")
            _check_alpha(d.overhead, f"topology {self.name!r}: per-message overhead of dimension {d.name!r}")
            prod *= d.size
        if prod != self.n_ranks:
            raise TopologyError(
                f"topology {self.name!r}: dimension sizes {[d.size for d in self.dims]} multiply to {prod}, "
                f"not {self.n_ranks} ranks"
            )

    # ------------------------------------------------------------ connections
    @cached_property
    def _index(self) -> _Index:
        return _Index(self)

    @cached_property
    def _memo(self) -> dict[tuple[int, int], Connection | None]:
        return {}

    def _build_connection(self, src: int, dst: int) -> Connection | None:
        if src == dst or not (0 <= src < self.n_ranks and 0 <= dst < self.n_ranks):
            return None
        idx = self._index
        extra = [self.shared_ports[i].name for i in idx.ports_from[src] if dst in idx.port_dsts[i]]
        caps = [self.shared_ports[i].bw for i in idx.ports_from[src] if dst in idx.port_dsts[i]]
        link = idx.link_of.get((src, dst))
        if link is not None:
            return Connection(src, dst, link.alpha, min([link.bw, *caps]), link.name, (link.name, *extra), link.overhead)
        for i in idx.switches_of[src]:
            if dst in idx.switch_sets[i]:
                sw = self.switches[i]
                res = (f"{sw.name}:tx{src}", f"{sw.name}:rx{dst}", *extra)
                return Connection(src, dst, sw.alpha, min([sw.bw, *caps]), sw.name, res, sw.overhead)
        sa, sb = idx.seat[src], idx.seat[dst]
        if (sa is None or sb is None or sa.spine != sb.spine or sa.switch == sb.switch
                or self.nodes[src] == self.nodes[dst]):
            return None
        sp = self.spines[sa.spine]
        la, lb = self.switches[sa.switch], self.switches[sb.switch]
        via = [f"{la.name}:tx{src}", f"{lb.name}:rx{dst}"]
        bws = [la.bw, lb.bw, *caps]
        if sp.uplink_bw is not None:
            via += [sp.up(la.name), sp.down(lb.name)]
            bws.append(sp.uplink_bw)
        return Connection(src, dst, sp.alpha, min(bws), sp.name, (*via, *extra), sp.overhead)

    def connection(self, src: int, dst: int) -> Connection | None:
        """The connection ``src -> dst``, or None if the ranks are not adjacent (computed once, then remembered)."""
        key = (src, dst)
        memo = self._memo
        if key not in memo:
            memo[key] = self._build_connection(src, dst)
        return memo[key]

    def has_connection(self, src: int, dst: int) -> bool:
        return self.connection(src, dst) is not None

    def _adjacent(self, src: int, dst: int) -> Connection:
        """The connection ``src -> dst`` of two ranks the topology's own structure says are adjacent."""
        c = self.connection(src, dst)
        if c is None:
            raise TopologyError(f"topology {self.name!r}: ranks {src} and {dst} are not adjacent")
        return c

    def neighbors_out(self, rank: int) -> tuple[int, ...]:
        """The ranks ``rank`` has a connection to, ascending."""
        idx = self._index
        out = {l.dst for l in idx.links_from[rank]}
        for i in idx.switches_of[rank]:
            out.update(self.switches[i].ranks)
        out.update(idx.spine_targets(self, rank))
        out.discard(rank)
        return tuple(sorted(out))

    def connections_from(self, rank: int) -> tuple[Connection, ...]:
        """Every connection out of ``rank``, by destination."""
        return tuple(self._adjacent(rank, d) for d in self.neighbors_out(rank))

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
        """The connections grouped by kind (link, switch, spine), alpha, bandwidth and overhead, with counts.

        Counted by formula (a link at a time, a switch or a pair of leaves at a
        time), so a spine's million pairs cost as much as its leaves; only pairs
        that a shared port caps are built one by one.
        """
        counts: Counter = Counter()
        idx = self._index
        capped = {s for p in self.shared_ports for s in p.srcs}
        for link in self.links:
            c = self._adjacent(link.src, link.dst)
            counts[("link", c.alpha, c.bw, c.overhead)] += 1
        for sw in self.switches:
            plain = [r for r in sw.ranks if r not in capped]
            k = len(sw.ranks)
            counts[("switch", sw.alpha, sw.bw, sw.overhead)] += len(plain) * (k - 1)
            for a in sw.ranks:
                if a in capped:
                    for b in sw.ranks:
                        if a != b:
                            c = self._adjacent(a, b)
                            counts[("switch", c.alpha, c.bw, c.overhead)] += 1
        for si, sp in enumerate(self.spines):
            leaves = [self.switches[w] for w in idx.spine_leaves[si]]
            senders = [Counter(self.nodes[r] for r in leaf.ranks if r not in capped) for leaf in leaves]
            receivers = [Counter(self.nodes[r] for r in leaf.ranks) for leaf in leaves]
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
                for a in self.switches[w].ranks:
                    if a in capped:
                        for b in idx.spine_targets(self, a):
                            c = self._adjacent(a, b)
                            counts[("spine", c.alpha, c.bw, c.overhead)] += 1
        return tuple(ConnectionClass(kind, alpha, bw, o, cnt)
                     for (kind, alpha, bw, o), cnt in sorted(counts.items()) if cnt)

    # ------------------------------------------------------------ resources
    def bandwidth_constraints(self) -> Iterator[BandwidthConstraint]:
        """Yield every bandwidth cap: links, switch ports, spine up-links, shared ports.

        The names match :attr:`Connection.resources`. A leaf switch's ports
        also carry its members' traffic through the spine, so their extent
        includes the ranks reached that way.
        """
        idx = self._index
        for link in self.links:
            yield BandwidthConstraint(link.name, frozenset((link.src,)), frozenset((link.dst,)), link.bw)
        for sw in self.switches:
            members = frozenset(sw.ranks)
            for r in sw.ranks:
                far = frozenset(idx.spine_targets(self, r))
                yield BandwidthConstraint(f"{sw.name}:tx{r}", frozenset((r,)), (members - {r}) | far, sw.bw)
                yield BandwidthConstraint(f"{sw.name}:rx{r}", (members - {r}) | far, frozenset((r,)), sw.bw)
        for si, sp in enumerate(self.spines):
            if sp.uplink_bw is None:
                continue
            leaves = [self.switches[w] for w in idx.spine_leaves[si]]
            everyone = frozenset(r for leaf in leaves for r in leaf.ranks)
            for leaf in leaves:
                mine = frozenset(leaf.ranks)
                yield BandwidthConstraint(sp.up(leaf.name), mine, everyone - mine, sp.uplink_bw)
                yield BandwidthConstraint(sp.down(leaf.name), everyone - mine, mine, sp.uplink_bw)
        for port in self.shared_ports:
            yield BandwidthConstraint(port.name, frozenset(port.srcs), frozenset(port.dsts), port.bw)

    @cached_property
    def resource_bw(self) -> dict[str, float]:
        """Bandwidth (GB/s) of every resource named in a connection (built without the constraints' rank sets)."""
        out: dict[str, float] = {}
        for link in self.links:
            out[link.name] = link.bw
        for sw in self.switches:
            for r in sw.ranks:
                out[f"{sw.name}:tx{r}"] = sw.bw
                out[f"{sw.name}:rx{r}"] = sw.bw
        for sp in self.spines:
            if sp.uplink_bw is not None:
                for leaf in sp.leaves:
                    out[sp.up(leaf)] = sp.uplink_bw
                    out[sp.down(leaf)] = sp.uplink_bw
        for p in self.shared_ports:
            out[p.name] = p.bw
        return out

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
