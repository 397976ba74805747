"""What the MPI library's own collectives took when the machine was profiled: the yardstick of its drift.

A profile is a snapshot. A shared or virtual machine moves afterwards --
other tenants, frequency, the scheduler -- and every prediction made from
the snapshot carries that move as error, whatever the model. ``ccsynth topo
profile`` times MPI's own allreduce and allgather beside its reference
collectives (:mod:`ccsynth.bench.calibration`) and keeps those times in the
topology (``Topology.mpi_reference``): no model term depends on them, so
``ccsynth bench --predict``, which times MPI's collective in the same run,
can say how far the machine has moved since -- MPI's time now over MPI's
time then, per size band (:func:`ccsynth.bench.predict.drift_table`). On
the project's 2-core VM MPI's own allgather ran 1.6x its profiled time a
minute after the profile, and the band's prediction error was 74% (8%
divided by that; docs/results.md).

:class:`ReferenceTimes` holds one collective's points ``(input bytes per
rank, us)``; between points the time is interpolated in log-log, below the
first point it is the first point's (latency-bound), above the last it grows
in proportion to the bytes (bandwidth-bound).

Example:
    >>> r = ReferenceTimes("allreduce", (1024, 4096), (10.0, 40.0))
    >>> r.time_us(512), round(r.time_us(2048), 9), r.time_us(8192)
    (10.0, 20.0, 80.0)
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from itertools import pairwise

from ccsynth.errors import TopologyError
from ccsynth.topologies.checks import checked_number

__all__ = ["REFERENCE_VERSION", "ReferenceTimes"]

#: version of the JSON object (``{"version": 1, "collectives": [{"collective": ..., "sizes_bytes": [...],
#: "us": [...]}]}``)
REFERENCE_VERSION = 1


@dataclass(frozen=True)
class ReferenceTimes:
    """MPI's own ``collective`` at ``sizes`` input bytes per rank took ``us`` (see the module docstring).

    ``sizes`` strictly increasing positive byte counts, ``us`` positive;
    :class:`TopologyError` otherwise.
    """

    collective: str
    sizes: tuple[float, ...]
    us: tuple[float, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.collective, str) or not self.collective:
            raise TopologyError(f"MPI reference: the collective must be a name, got {self.collective!r}")
        sizes = tuple(checked_number(s, f"MPI reference of {self.collective}: sizes (bytes)", positive=True)
                      for s in self.sizes)
        us = tuple(checked_number(t, f"MPI reference of {self.collective}: times (us)", positive=True)
                   for t in self.us)
        if not sizes or len(sizes) != len(us):
            raise TopologyError(f"MPI reference of {self.collective}: needs as many times as sizes, at least one; "
                                f"got {len(sizes)} sizes and {len(us)} times")
        if any(b <= a for a, b in pairwise(sizes)):
            raise TopologyError(f"MPI reference of {self.collective}: sizes must increase strictly, got {list(sizes)}")
        object.__setattr__(self, "sizes", sizes)
        object.__setattr__(self, "us", us)

    def time_us(self, input_bytes: float) -> float:
        """MPI's time when profiled at ``input_bytes`` per rank (see the module docstring for between and beyond)."""
        sizes, us = self.sizes, self.us
        if input_bytes <= sizes[0]:
            return us[0]
        if input_bytes >= sizes[-1]:
            return us[-1] * input_bytes / sizes[-1]
        j = bisect.bisect_right(sizes, input_bytes)
        x0, x1 = math.log(sizes[j - 1]), math.log(sizes[j])
        y0, y1 = math.log(us[j - 1]), math.log(us[j])
        return math.exp(y0 + (y1 - y0) * (math.log(input_bytes) - x0) / (x1 - x0))

    def to_dict(self) -> dict:
        return {"collective": self.collective, "sizes_bytes": list(self.sizes), "us": list(self.us)}
