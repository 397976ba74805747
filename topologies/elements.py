"""The parts a network is described with: links, switches, spines, shared ports, dimensions.

Small frozen values, as a topology file writes them: a :class:`Link` is one
direction of a point-to-point connection with its own bandwidth; a
:class:`Switch` is a hyperedge (every member reaches every other through its
own egress and ingress port); a :class:`Spine` joins leaf switches into a
two-tier fat tree (its up-links optionally oversubscribed); a
:class:`SharedPort` caps the sum of all traffic from some ranks to others (a
NIC shared by the GPUs of a node); a :class:`Dimension` is one dimension of
a multi-dimension (Themis-style) network. Costs are per direction: ``alpha``
(us in flight), ``bw`` (GB/s, :data:`BYTES_PER_US_PER_GBPS` bytes per us per
GB/s) and ``overhead`` (us of per-message work on each end, paid per
connection or per rank: :data:`OVERHEAD_SCOPES`). They are checked when a
:class:`~ccsynth.topologies.model.Topology` holding them is built
(:mod:`ccsynth.topologies.validation`), not here: a part means nothing alone.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["BYTES_PER_US_PER_GBPS", "OVERHEAD_SCOPES", "Link", "Switch", "Spine", "SharedPort", "Dimension"]

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
