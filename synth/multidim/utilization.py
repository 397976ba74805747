"""Per-dimension utilization of a schedule: how much of each dimension's bandwidth it used.

For a topology with dimensions, a message between two ranks that differ in
one coordinate only travels in that dimension. A dimension's
*utilization* over a run of ``T`` us is the bytes a rank sends in it (the
average over ranks) divided by what its share of the dimension could carry
in ``T``, ``Dimension.bw x T``: 1.0 means every rank's port in that
dimension was busy all the time. The dimension-level model reports the same
figure for its schedules (:meth:`~ccsynth.synth.multidim.pipeline.DimTiming.utilization`),
so the two can be compared. A message between ranks that differ in several
coordinates (a topology that connects them directly, such as
``shared_nic``'s hosts, whose GPUs reach every GPU of another host through
the NIC) travels in the outermost of those dimensions: the network that
joins their groups (a host's NIC, not its switch). An op's bytes are its
units times the bytes per unit (:meth:`~ccsynth.collectives.schedule.Schedule.op_units`),
so explicit collectives (resharding), whose chunks have sizes of their own,
count their real bytes.

Example:
    >>> from ccsynth.topologies.catalog import hierarchical
    >>> from ccsynth.synth.baselines import make_baseline
    >>> from ccsynth.collectives.spec import Collective
    >>> t = hierarchical([(2, 100), (2, 50)])
    >>> s = make_baseline("hierarchical", Collective("allreduce", 4, 4), t)
    >>> [(u.name, round(u.sent_bytes)) for u in dimension_utilization(s, t, 1 << 20, 100.0)]
    [('dim0', 1048576), ('dim1', 524288)]
    >>> from ccsynth.topologies.catalog import shared_nic
    >>> t = shared_nic(2, 4)
    >>> s = make_baseline("ring", Collective("allgather", 8), t)
    >>> [(u.name, round(u.sent_bytes)) for u in dimension_utilization(s, t, 8 << 20, 100.0)]
    [('switch', 5505024), ('nic', 1835008)]

"""

from __future__ import annotations

from dataclasses import dataclass

from ccsynth.collectives.schedule import Schedule
from ccsynth.errors import TopologyError
from ccsynth.topologies.model import BYTES_PER_US_PER_GBPS, Topology

__all__ = ["DimensionUse", "dimension_utilization"]


@dataclass(frozen=True)
class DimensionUse:
    """One dimension's share of a run: bytes a rank sends there (average), and the utilization."""

    name: str
    size: int
    bw: float  # GB/s per rank (Dimension.bw)
    sent_bytes: float
    utilization: float

    def to_dict(self) -> dict:
        return {"name": self.name, "size": self.size, "bw": self.bw, "sent_bytes": self.sent_bytes,
                "utilization": self.utilization}


def dimension_utilization(schedule: Schedule, topology: Topology, size_bytes: float, time_us: float
                          ) -> tuple[DimensionUse, ...]:
    """Per dimension of ``topology``: see the module docstring."""
    if not topology.dims:
        raise TopologyError(f"topology {topology.name!r} has no network dimensions to report utilization for")
    if schedule.n_ranks != topology.n_ranks:
        raise TopologyError(f"schedule {schedule.name!r} is for {schedule.n_ranks} ranks, topology "
                            f"{topology.name!r} has {topology.n_ranks}")
    unit = schedule.collective.chunk_bytes(size_bytes)  # bytes per unit (per chunk for the built-in kinds)
    coords = [topology.coords(r) for r in range(topology.n_ranks)]
    sent = [0.0] * len(topology.dims)
    for op in schedule.ops:
        if op.kind != "send":
            continue
        diff = [d for d, (a, b) in enumerate(zip(coords[op.rank], coords[op.peer])) if a != b]
        if diff:
            sent[diff[-1]] += schedule.op_units(op) * unit
    n = topology.n_ranks
    out = []
    for d, dim in enumerate(topology.dims):
        per_rank = sent[d] / n
        util = per_rank / (dim.bw * BYTES_PER_US_PER_GBPS * time_us) if time_us > 0 else 0.0
        out.append(DimensionUse(dim.name, dim.size, dim.bw, per_rank, util))
    return tuple(out)
