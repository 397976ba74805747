"""A lower bound on a schedule's simulated time from its op counts alone, without running it.

The rates on a resource never add up to more than its capacity, so the
busiest resource's bytes at its full bandwidth bound the makespan; an engine
pays its per-message overheads one after another, so the busiest engine's
overheads bound it too. Latencies and local work are left out: the bound is
valid, not tight. A search that must beat a known time prunes a candidate by
it before paying for a run (:func:`ccsynth.synth.simulate.simulate_below`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ccsynth.synth.simulator.costs import byte_factors, call_cost, check_args, footprint, working_set_bytes
from ccsynth.synth.simulator.tables import Prepared
from ccsynth.topologies.model import Topology

__all__ = ["StaticBound", "static_bound_of"]


@dataclass(frozen=True)
class StaticBound:
    """A lower bound on a schedule's simulated time, from its op counts alone (no simulation).

    ``volume_us``: the busiest resource's bytes at its full bandwidth (the
    rates on a resource never add up to more than its capacity);
    ``engine_us``: the busiest engine's per-message overheads, which it pays
    one after another (see :mod:`ccsynth.synth.simulate`). ``time_us`` is the larger
    plus the per-call cost. Latencies and local work are left out, so the
    bound is valid, not tight.
    """

    volume_us: float
    engine_us: float
    call_us: float

    @property
    def time_us(self) -> float:
        return max(self.volume_us, self.engine_us) + self.call_us


def static_bound_of(p: Prepared, topology: Topology, size_bytes: float) -> StaticBound:
    """:class:`StaticBound` of the prepared schedule ``p`` at ``size_bytes``."""
    size = check_args(size_bytes, None)
    schedule = p.schedule
    if not p.n_ops:
        return StaticBound(0.0, 0.0, 0.0)
    f = byte_factors(topology, size, footprint(schedule, size, None))
    unit = schedule.collective.chunk_bytes(size) * f.message
    cls = np.asarray(p.cls)
    sends = np.flatnonzero(cls >= 0)
    units = np.asarray(p.count, dtype=float)
    if p.forwards is not None:  # forwarded sends move the forward curve's factor of theirs
        units = np.where(np.asarray(p.forwards, dtype=bool), units * f.forward, units)
    class_bytes = np.bincount(cls[sends], weights=units[sends] * unit, minlength=len(p.class_res))
    res_bytes = np.zeros(len(p.res_cap))
    for c, rs in enumerate(p.class_res):
        for r in rs:
            res_bytes[r] += class_bytes[c]
    volume = float((res_bytes / np.asarray(p.res_cap)).max()) if len(p.res_cap) else 0.0
    engine = float(np.bincount(np.asarray(p.engine), weights=np.asarray(p.overhead)).max())
    return StaticBound(volume, engine, call_cost(topology, f.footprint, working_set_bytes(schedule, size)))
