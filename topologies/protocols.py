"""MSCCL/NCCL protocols priced as a transform of the topology.

NCCL (and MSCCL's ``proto`` attribute) moves data with one of three
protocols, which trade bandwidth for latency:

========  =====================================  ==========  ===========  ===========
protocol  how data moves                          bandwidth   hop latency  base latency
========  =====================================  ==========  ===========  ===========
Simple    whole chunks; each step synchronizes   1           3.4 us       8.4 us
          with memory fences
LL128     128-byte lines of 120 data bytes and   120/128     1.9 us       10.0 us
          a flag (low latency on NVLink)          = 0.9375
LL        8-byte words of 4 data bytes and a     4/8 = 0.5   0.5 us       3.6 us
          4-byte flag (lowest latency)
========  =====================================  ==========  ===========  ===========

Sources: the bandwidth shares follow from the wire formats (NCCL
``src/include/device.h``: ``union ncclLLFifoLine`` holds two 4-byte data
words, each with a 4-byte flag; an LL128 line holds
``NCCL_LL128_DATAELEMS`` = 15 of ``NCCL_LL128_LINEELEMS`` = 16 eight-byte
elements as data); the latencies are NCCL's
tuner (``src/graph/tuning.cc``): per-hop NVLink latency (``hwLat``, ring)
and base latency (``baseLat``, ring), as collected in the project's design
notes (/work/shared/DESIGN.md, "Facts for the third round").

How the model prices them (:func:`with_protocol`):

* **Simple is the topology as it is.** The catalog's per-message costs are
  already Simple's: an NVLink message pays ``alpha`` 0.7 us plus an
  overhead of 1.35 us at each end, 3.4 us in all -- NCCL's Simple NVLink
  hop latency; the NDv2 InfiniBand connection 2.6 + 2 x 5.7 = 14.0 us. So a
  schedule simulated without a protocol and one written as Simple cost the
  same, and the lowering is compared with its IR on equal terms.
* **Per-message terms scale with the hop latency.** Every ``alpha`` and
  ``overhead`` (links, switches, spines, dimensions) is multiplied by
  ``hop[p] / hop[Simple]``: 0.5 / 3.4 for LL (an NVLink message then costs
  0.5 us), 1.9 / 3.4 for LL128. The NVLink ratio is applied to every
  connection, the network's too (a simplification: NCCL's tuner has its own
  network figures, and disables LL128 off NVLink by default).
* **Bandwidths scale with the data share.** Every bandwidth (links,
  switches, spine uplinks, shared ports such as NICs, dimensions) is
  multiplied by the protocol's share of data bytes: 0.5 for LL, 0.9375 for
  LL128.
* **Base latency as a per-call cost.** The catalog prices no per-call cost
  (``call_overhead`` 0) for Simple, so a protocol adds the difference of its
  base latency to Simple's: LL128 1.6 us more; LL's 4.8 us less cannot go
  below the topology's own per-call cost and adds nothing
  (``max(0, call_overhead + base[p] - base[Simple])``).

Local copies and reductions, and the topology's size curves, do not change.

A schedule read from MSCCL XML remembers its file's protocol in
``meta["msccl"]["proto"]`` (:func:`meta_protocol`);
:func:`ccsynth.synth.simulate.simulate` prices a schedule with that
protocol, so simulating a written file gives what the exporter reported.

Example:
    >>> from ccsynth.topologies.model import Link, Topology
    >>> t = Topology("pair", 2, links=(Link(0, 1, 0.7, 25.0, 1.35), Link(1, 0, 0.7, 25.0, 1.35)))
    >>> ll = with_protocol(t, "LL")
    >>> c = ll.connection(0, 1)
    >>> round(c.alpha + 2 * c.overhead, 3), c.bw
    (0.5, 12.5)
    >>> with_protocol(t, "Simple") is t
    True
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from ccsynth.errors import TopologyError
from ccsynth.topologies.model import Topology

__all__ = ["ProtocolPrice", "PROTOCOL_PRICES", "SIMPLE", "with_protocol", "meta_protocol"]

SIMPLE = "Simple"


@dataclass(frozen=True)
class ProtocolPrice:
    """One protocol's figures: its share of data bytes on the wire, NCCL's per-hop and base latency (us)."""

    name: str
    data_share: float
    hop_us: float
    base_us: float


#: The protocols MSCCL's ``proto`` names, in the order a tie is broken (Simple first).
PROTOCOL_PRICES: dict[str, ProtocolPrice] = {
    "Simple": ProtocolPrice("Simple", 1.0, 3.4, 8.4),
    "LL128": ProtocolPrice("LL128", 120 / 128, 1.9, 10.0),
    "LL": ProtocolPrice("LL", 0.5, 0.5, 3.6),
}


def with_protocol(topology: Topology, proto: str) -> Topology:
    """``topology`` priced for messages moved by ``proto`` (a new topology; Simple: the same one).

    See the module docstring for the figures. Raises
    :class:`~ccsynth.errors.TopologyError` for an unknown protocol.
    """
    price = PROTOCOL_PRICES.get(proto)
    if price is None:
        raise TopologyError(f"unknown protocol {proto!r}; choose one of {', '.join(PROTOCOL_PRICES)}")
    if proto == SIMPLE:
        return topology
    base = PROTOCOL_PRICES[SIMPLE]
    lat = price.hop_us / base.hop_us
    bw = price.data_share
    return replace(
        topology,
        links=tuple(replace(l, alpha=l.alpha * lat, overhead=l.overhead * lat, bw=l.bw * bw) for l in topology.links),
        switches=tuple(replace(s, alpha=s.alpha * lat, overhead=s.overhead * lat, bw=s.bw * bw)
                       for s in topology.switches),
        spines=tuple(replace(s, alpha=s.alpha * lat, overhead=s.overhead * lat,
                             uplink_bw=None if s.uplink_bw is None else s.uplink_bw * bw) for s in topology.spines),
        shared_ports=tuple(replace(p, bw=p.bw * bw) for p in topology.shared_ports),
        dims=tuple(replace(d, alpha=d.alpha * lat, overhead=d.overhead * lat, bw=d.bw * bw) for d in topology.dims),
        call_overhead=max(0.0, topology.call_overhead + price.base_us - base.base_us),
    )


def meta_protocol(meta: Mapping) -> str:
    """The protocol a schedule's ``meta`` names (``meta["msccl"]["proto"]``: read from MSCCL XML), else Simple."""
    info = meta.get("msccl") if isinstance(meta, Mapping) else None
    proto = info.get("proto") if isinstance(info, Mapping) else None
    return proto if isinstance(proto, str) and proto in PROTOCOL_PRICES else SIMPLE
