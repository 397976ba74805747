"""The dimension view of a topology: what the multi-dimension schedulers see.

A topology with network dimensions (:attr:`Topology.dims`, Themis's model)
gives every rank mixed-radix coordinates, dimension 0 varying fastest
(:meth:`Topology.coords`); the ranks that differ in coordinate ``d`` only
form one *group* of dimension ``d``. A multi-dimension collective runs one
*phase* per dimension, in every group of that dimension at once, with a
per-dimension algorithm:

* ``ring`` -- ``p - 1`` steps around a ring through the group, one message
  per rank and step (reduce-scatter reduces on the way);
* ``direct`` -- every rank sends each peer its block at once, ``p - 1``
  messages per rank in flight together (needs a connection between every
  pair of the group).

:func:`dim_net` reads what those two algorithms cost from the topology
itself, so that the dimension-level model
(:mod:`ccsynth.synth.multidim.cost`) charges what the event-driven
simulator charges:

* a ring's *hops*: for every connection of the ring (in ring order) its
  latency ``alpha``, its per-message ``overhead`` and its time per byte,
  ``1 / min(connection bandwidth, Dimension.bw)``. ``Dimension.bw`` is a
  rank's share of the dimension when every group runs at once (the
  catalog sets it so: an NDv2 node's one NIC is shared by its 8 GPUs, so
  the InfiniBand dimension has ``12.5 / 8`` GB/s per rank), the connection
  caps one stream (a torus dimension's ``Dimension.bw`` counts both
  directions, a ring uses one link);
* ``direct``'s aggregate time per byte ``1 / min(Dimension.bw, (p - 1) x
  connection bandwidth)`` (all ``p - 1`` streams share the rank's port),
  one connection's time per byte, and the smallest and largest latency.

The topology's measured costs (``ccsynth topo profile``) come along: the
per-connection ``alpha`` and ``overhead`` are read from the connections
themselves; a profiled topology's ``eager_limit`` and ``rendezvous_alpha``
(:meth:`DimNet.message_alpha`), ``local_bw`` and ``local_overhead``
(:meth:`DimNet.reduction_us`) and ``call_overhead`` (once per call) are
kept on the :class:`DimNet` and charged as the event-driven simulator
charges them.

Groups of one dimension are alike in every catalog fabric; the model reads
group 0 and, up to :data:`CHECK_GROUPS_MAX_RANKS` ranks, takes the worst
figure of every group (and drops ``direct`` or ``ring`` where some group
lacks a connection they need). Above that it reads group 0 only, so that
scheduling 4,096 ranks never walks the ranks. Dimensions of size 1 take no
part (no phase); :attr:`DimNet.dims` lists the others, the *active*
dimensions, and a schedule's dimension orders name them by their position
there.

Example:
    >>> from ccsynth.topologies.catalog import hierarchical
    >>> net = dim_net(hierarchical([(4, 200), (2, 50)]))
    >>> [(d.name, d.size, d.algorithms) for d in net.dims]
    [('dim0', 4, ('ring', 'direct')), ('dim1', 2, ('ring', 'direct'))]
    >>> round(net.dims[1].direct.us_per_byte * 1e3, 6)   # 50 GB/s: 0.02 ns per byte
    0.02
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from ccsynth.errors import TopologyError
from ccsynth.synth.baselines._util import find_ring
from ccsynth.topologies.model import BYTES_PER_US_PER_GBPS, Topology

__all__ = [
    "ALGORITHMS",
    "CHECK_GROUPS_MAX_RANKS",
    "RING_SEARCH_MAX_SIZE",
    "Hop",
    "DirectCost",
    "DimSpec",
    "DimNet",
    "dim_net",
    "group_ranks",
]

#: per-dimension algorithms (see the module docstring)
ALGORITHMS = ("ring", "direct")
#: up to this many ranks every group of every dimension is read (the worst figures are kept)
CHECK_GROUPS_MAX_RANKS = 128
#: groups up to this size search every ring for the one whose slowest hop is fastest
RING_SEARCH_MAX_SIZE = 8


@dataclass(frozen=True)
class Hop:
    """One connection of a dimension's ring: latency and per-message overhead (us), time per byte (us)."""

    alpha: float
    overhead: float
    us_per_byte: float


@dataclass(frozen=True)
class DirectCost:
    """What a ``direct`` phase costs in one dimension (see the module docstring)."""

    alpha_min: float
    alpha_max: float
    overhead: float
    us_per_byte: float  # all p - 1 streams of a rank together
    conn_us_per_byte: float  # one stream alone
    overhead_min: float = 0.0  # the least per-message overhead of the group's connections (the bounds' charge)


@dataclass(frozen=True)
class DimSpec:
    """One active dimension: its place in the topology's dims, size, and what its algorithms cost."""

    index: int  # position in Topology.dims (the coordinate it varies)
    name: str
    size: int
    stride: int  # rank distance between neighbouring coordinates
    bw: float  # Dimension.bw: a rank's share of the dimension (GB/s)
    ring_order: tuple[int, ...] | None  # coordinates in ring order, None: no ring
    ring: tuple[Hop, ...]  # hop i joins ring_order[i] -> ring_order[i + 1]
    direct: DirectCost | None  # None: some pair of a group has no connection

    @property
    def algorithms(self) -> tuple[str, ...]:
        """The per-dimension algorithms this dimension can run."""
        out = []
        if self.ring_order is not None:
            out.append("ring")
        if self.direct is not None:
            out.append("direct")
        return tuple(out)


@dataclass(frozen=True)
class DimNet:
    """A topology as its dimensions: the input of every multi-dimension scheduler."""

    topology: str
    n_ranks: int
    sizes: tuple[int, ...]  # every dimension's size (coordinates), size-1 ones included
    dims: tuple[DimSpec, ...]  # the active dimensions (size >= 2)
    scope: str  # Topology.overhead_scope
    local_us_per_byte: float  # local copies and reductions (0: free)
    local_overhead: float = 0.0  # Topology.local_overhead: the fixed cost of one local reduction (us)
    call_overhead: float = 0.0  # Topology.call_overhead: once per collective call (us)
    eager_limit: float | None = None  # messages above it pay rendezvous_alpha more (None: one protocol)
    rendezvous_alpha: float = 0.0

    def message_alpha(self, alpha: float, b: float) -> float:
        """The latency of a message of ``b`` bytes on a connection of latency ``alpha``: the rendezvous
        handshake is added above the eager limit, as the simulator does (:meth:`Topology.message_alpha`)."""
        if self.eager_limit is not None and b > self.eager_limit:
            return alpha + self.rendezvous_alpha
        return alpha

    def reduction_us(self, b: float) -> float:
        """What the receiver pays to reduce a received message of ``b`` bytes (fused receive-reduce: its
        bytes at ``local_bw`` plus ``local_overhead``; free with neither, as in the simulator)."""
        if b <= 0 or (not self.local_us_per_byte and not self.local_overhead):
            return 0.0
        return self.local_overhead + b * self.local_us_per_byte

    @property
    def n_dims(self) -> int:
        return len(self.dims)

    def coordinate(self, rank: int, d: int) -> int:
        """Coordinate of ``rank`` in active dimension ``d``."""
        spec = self.dims[d]
        return (rank // spec.stride) % spec.size

    def describe(self) -> str:
        return ", ".join(f"{d.name} {d.size} @ {d.bw:g} GB/s" for d in self.dims)


def group_ranks(net: DimNet, d: int, rank: int) -> tuple[int, ...]:
    """The ranks of ``rank``'s group of active dimension ``d``, by coordinate."""
    spec = net.dims[d]
    base = rank - net.coordinate(rank, d) * spec.stride
    return tuple(base + c * spec.stride for c in range(spec.size))


def _us_per_byte(bw: float) -> float:
    return 1.0 / (bw * BYTES_PER_US_PER_GBPS)


def _strides(sizes: tuple[int, ...]) -> list[int]:
    out, s = [], 1
    for size in sizes:
        out.append(s)
        s *= size
    return out


def _group_bases(sizes: tuple[int, ...], d: int, n: int, every: bool) -> list[int]:
    """The lowest rank of every group of dimension ``d`` (only group 0's unless ``every``)."""
    if not every:
        return [0]
    stride = math.prod(sizes[:d])
    span = stride * sizes[d]
    return [high * span + low for high in range(n // span) for low in range(stride)]


def _ring_hops(t: Topology, bases: list[int], stride: int, order: tuple[int, ...], cap: float) -> tuple[Hop, ...] | None:
    """The worst hop at every position of ``order`` over the groups at ``bases``; None if a hop is missing."""
    p = len(order)
    hops: list[Hop | None] = [None] * p
    for base in bases:
        for i in range(p):
            a, b = base + order[i] * stride, base + order[(i + 1) % p] * stride
            c = t.connection(a, b)
            if c is None:
                return None
            h = Hop(c.alpha, c.overhead, _us_per_byte(min(c.bw, cap)))
            old = hops[i]
            hops[i] = h if old is None else Hop(max(old.alpha, h.alpha), max(old.overhead, h.overhead),
                                                max(old.us_per_byte, h.us_per_byte))
    return tuple(hops)  # type: ignore[arg-type]


def _direct_cost(t: Topology, bases: list[int], stride: int, p: int, cap: float) -> DirectCost | None:
    """Direct's costs over the groups at ``bases``; None if some pair has no connection."""
    a_min, a_max, o, o_min, bw_min = math.inf, 0.0, 0.0, math.inf, math.inf
    for base in bases:
        for x in range(p):
            for y in range(p):
                if x == y:
                    continue
                c = t.connection(base + x * stride, base + y * stride)
                if c is None:
                    return None
                a_min, a_max = min(a_min, c.alpha), max(a_max, c.alpha)
                o, o_min, bw_min = max(o, c.overhead), min(o_min, c.overhead), min(bw_min, c.bw)
    return DirectCost(a_min, a_max, o, _us_per_byte(min(cap, (p - 1) * bw_min)), _us_per_byte(min(cap, bw_min)),
                      o_min)


def _ring_bw(t: Topology, group: list[int], order: tuple[int, ...]) -> tuple[float, float] | None:
    """(slowest hop, total) bandwidth of the ring ``order`` through ``group``; None if a hop is missing."""
    bws = []
    for i in range(len(order)):
        c = t.connection(group[order[i]], group[order[(i + 1) % len(order)]])
        if c is None:
            return None
        bws.append(c.bw)
    return min(bws), sum(bws)


def _ring_order(t: Topology, group: list[int], stride: int) -> tuple[int, ...] | None:
    """Coordinates of a ring through ``group``: the natural order where it is a ring of the fastest hops,
    else (up to :data:`RING_SEARCH_MAX_SIZE` ranks) the ring whose slowest hop is fastest (then the
    fastest in total; ties: the first in lexicographic order), else any ring :func:`find_ring` finds."""
    p = len(group)
    natural = tuple(range(p))
    nat = _ring_bw(t, group, natural)
    top = max((c.bw for a in group for b in group if a != b and (c := t.connection(a, b)) is not None), default=0.0)
    if nat is not None and nat[0] >= top:
        return natural  # no ring has a faster slowest hop
    if p <= RING_SEARCH_MAX_SIZE:
        best: tuple[int, ...] | None = None
        key: tuple[float, float] | None = None
        for rest in itertools.permutations(range(1, p)):
            order = (0, *rest)
            if p > 2 and order[1] > order[-1]:
                continue  # each cycle once per direction... both directions are tried through the mirror
            k = _ring_bw(t, group, order)
            if k is not None and (key is None or k > key):
                best, key = order, k
        if best is not None and key is not None and (nat is None or key > nat):
            return best
    if nat is not None:
        return natural
    found = find_ring(t, group)
    if found is None:
        return None
    return tuple((r - group[0]) // stride for r in found)


def dim_net(topology: Topology) -> DimNet:
    """The dimension view of ``topology`` (see the module docstring).

    Raises :class:`~ccsynth.errors.TopologyError` for a topology without
    dimensions, one whose dimensions are all of size 1, and a dimension whose
    groups have neither a ring nor a connection between every pair.
    """
    if not topology.dims:
        raise TopologyError(
            f"topology {topology.name!r} has no network dimensions; the multi-dimension schedulers need one that has "
            f"them (hierarchical:AxBxC@BW,BW,BW, ndv2xN, dgx_a100xN, dgx_h100xN, fat_tree:NxG, torus:AxB)"
        )
    sizes = tuple(d.size for d in topology.dims)
    if math.prod(sizes) != topology.n_ranks:  # Topology validates this; a hand-built DimNet caller might not
        raise TopologyError(f"topology {topology.name!r}: dimension sizes {list(sizes)} do not multiply to its "
                            f"{topology.n_ranks} ranks")
    strides = _strides(sizes)
    every = topology.n_ranks <= CHECK_GROUPS_MAX_RANKS
    specs = []
    for i, dim in enumerate(topology.dims):
        p = dim.size
        if p < 2:
            continue
        stride = strides[i]
        bases = _group_bases(sizes, i, topology.n_ranks, every)
        order = _ring_order(topology, [c * stride for c in range(p)], stride)
        hops = _ring_hops(topology, bases, stride, order, dim.bw) if order is not None else None
        if hops is None:
            order = None
        direct = _direct_cost(topology, bases, stride, p, dim.bw)
        if order is None and direct is None:
            raise TopologyError(
                f"topology {topology.name!r}: the groups of dimension {dim.name!r} have neither a ring nor a "
                f"connection between every pair, so no per-dimension algorithm can run there"
            )
        specs.append(DimSpec(i, dim.name, p, stride, dim.bw, order, hops or (), direct))
    if not specs:
        raise TopologyError(f"topology {topology.name!r}: every dimension has size 1; there is nothing to schedule")
    local = _us_per_byte(topology.local_bw) if topology.local_bw else 0.0
    eager = topology.eager_limit if topology.rendezvous_alpha else None  # the simulator's rule
    return DimNet(topology.name, topology.n_ranks, sizes, tuple(specs), topology.overhead_scope, local,
                  topology.local_overhead, topology.call_overhead, eager, topology.rendezvous_alpha)
