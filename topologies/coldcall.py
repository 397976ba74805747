"""The cold cost of a call: what a call pays once, whatever its size, when its data is no longer cached.

``Topology.footprint_curve`` charges every byte of a call ``h(F)`` times
more by its *footprint* ``F`` (the bytes a rank touches between two calls
on the same buffers). Measured on the project's 2-core machine through
ccsynth's executor, part of what a call pays after a large footprint is not
per byte: a window of 2 x 256 KiB took 60 us with a footprint of up to 5.5
MiB and 165-223 us at 33-130 MiB, a window of 2 x 1 MiB 187 us and 484-567
us (docs/results.md) -- four times the bytes, 2.3-2.7x
the extra, not 4x: about 50-90 us of the extra is paid once per call (page
walks over cold buffers, MPI's shared-memory cells, the executor's own
state), the rest per byte. A per-byte factor fitted on one message size
therefore over-charges calls of larger messages (docs/results.md:
the 4-rank rows at 4-16 MiB predicted 1.3-2x too slow).

:class:`ColdCallCost` holds the per-call part as points ``(F_i, c_i)``: a
call whose footprint is ``F`` bytes per rank costs ``c(F)`` us more,
``c`` piecewise-linear in ``F`` between the points and constant beyond the
first and the last -- if the call's own buffers (its working set ``W`` per
rank) are at least those of the probe it was measured with
(``working_set_bytes``, ``W0``); a call of fewer buffers pays ``c(F) W /
W0``: a cold start cannot cost more than there is of the call's own data
to start on (without that a 64 KiB call after a large footprint would pay
what a 1 MiB window paid, and the message curve fitted after it would give
that back at every footprint). The simulator (:mod:`ccsynth.synth.simulate`) adds it
once to the makespan, like ``Topology.call_overhead`` (every rank starts
that much later); the per-byte part stays ``footprint_curve``. ``ccsynth
topo profile`` measures both from footprint probes of two message sizes
(:mod:`ccsynth.bench.profile`); without the key (the catalog, profiles
written before it existed) nothing changes.

Example:
    >>> c = ColdCallCost((1 << 20, 33 << 20), (0.0, 64.0), working_set_bytes=1 << 20)
    >>> c.cost_us(0, 1 << 20), c.cost_us(17 << 20, 1 << 20), c.cost_us(1 << 30, 4 << 20), c.cost_us(1 << 30, 1 << 18)
    (0.0, 32.0, 64.0, 16.0)
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

import numpy as np

from ccsynth.errors import TopologyError
from ccsynth.topologies.checks import checked_number

__all__ = ["COLD_CALL_VERSION", "ColdCallCost"]

#: version of the JSON object (``{"version": 1, "footprints_bytes": [...], "us": [...]}``)
COLD_CALL_VERSION = 1


@dataclass(frozen=True)
class ColdCallCost:
    """Points ``(footprints[i], us[i])`` of the per-call cold cost, for calls of at least ``working_set_bytes`` of
    buffers per rank (see the module docstring).

    ``footprints`` strictly increasing positive byte counts; ``us`` finite
    and non-negative; ``working_set_bytes`` positive. Raises
    :class:`TopologyError` otherwise.
    """

    footprints: tuple[float, ...]
    us: tuple[float, ...]
    working_set_bytes: float

    def __post_init__(self) -> None:
        fps = tuple(self.footprints)
        us = tuple(self.us)
        if not fps or len(fps) != len(us):
            raise TopologyError(f"a cold call cost needs as many costs as footprints, at least one; got {len(fps)} "
                                f"footprints and {len(us)} costs")
        clean_fp = [checked_number(f, "cold call cost: footprints (bytes)", positive=True) for f in fps]
        if any(b <= a for a, b in pairwise(clean_fp)):
            raise TopologyError(f"cold call cost: footprints must increase strictly, got {list(fps)}")
        clean = [checked_number(c, "cold call cost: costs (us)") for c in us]
        w = checked_number(self.working_set_bytes, "cold call cost: working_set_bytes", positive=True)
        object.__setattr__(self, "working_set_bytes", w)
        object.__setattr__(self, "footprints", tuple(clean_fp))
        object.__setattr__(self, "us", tuple(clean))

    def cost_us(self, footprint_bytes: float, working_set_bytes: float) -> float:
        """The extra us of a call whose footprint is ``footprint_bytes`` per rank and whose own buffers are
        ``working_set_bytes`` per rank: ``c(F)``, in proportion below :attr:`working_set_bytes`."""
        c = float(np.interp(footprint_bytes, self.footprints, self.us))  # constant beyond the ends
        return c * min(1.0, max(0.0, working_set_bytes) / self.working_set_bytes)

    def to_dict(self) -> dict:
        return {"version": COLD_CALL_VERSION, "footprints_bytes": list(self.footprints), "us": list(self.us),
                "working_set_bytes": self.working_set_bytes}
