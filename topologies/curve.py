"""Size-dependent costs: a piecewise-linear cost of a byte count (after PLogP's ``g(m)``).

One bandwidth per connection describes either the data that sits in a
core's caches or the data that streams from memory, not both: on the
project's 2-core machine a whole 16-64 KiB buffer moves 1.4-2.5x faster
than the bandwidth fitted from 1-16 MiB messages, and a local reduction of
a 256 KiB buffer 3x faster than one of 16 MiB. The parameterised LogP
model (PLogP, Kielmann, Bal and Verstoep, "Fast measurement of LogP
parameters for message passing platforms", 2000) answers that by making
the gap ``g(m)`` a function of the size ``m``, measured at several sizes
and taken piecewise-linear in between.

A :class:`SizeCurve` keeps that function *relative to the constant model*,
so that one curve serves every connection of a topology (each with its own
bandwidth) and files without a curve behave exactly as before:

* it holds points ``(m_i, f_i)``: ``m_i`` bytes cost as much as
  ``f_i * m_i`` bytes do in the constant model (``f < 1``: faster than the
  bandwidth says);
* between two points the *cost* ``e(m) = f(m) * m`` is linear in ``m``
  (PLogP's piecewise-linear ``g``); below the first point and above the
  last one the factor stays at that point's (``e(m) = f_0 m`` and
  ``e(m) = f_k m``), so the curve is continuous and ``e(0) = 0``;
* the factor at any size lies between the factors of its two neighbouring
  points (``e(m)/m`` is monotone on a segment), so :attr:`SizeCurve.fastest`
  -- the smallest ``f_i`` -- is the fastest any data can move. Lower
  bounds use it (:meth:`~ccsynth.topologies.model.Topology.fastest`): a
  bound never exceeds a real time.

**Whose size: the call's.** PLogP indexes ``g`` by each message's size.
Measured here, what decides whether bytes move at cache speed is the
working set of the call, not the size of one message: a ring that cuts a
1 MiB allreduce into 64 KiB messages moves them at the 1 MiB rate (measured
1.0-1.05x the default plan's 512 KiB messages, where a per-message curve
predicted 3x faster, and synthesized plans of many small chunks lost on
exactly that), while a 32 KiB allreduce's whole-buffer messages get the
32 KiB rate. So the simulator charges every message of a call of
``size_bytes`` (nccl-tests size) ``f(size_bytes)`` times its bytes
(``Topology.message_curve``), and every local copy or reduction
``f(size_bytes)`` times its bytes at ``local_bw`` (``Topology.local_curve``).
``ccsynth topo profile`` measures both the same way: each probe at its own
size (:mod:`ccsynth.bench.profile`); the catalog has none.

**Or its footprint.** The same class indexes ``Topology.footprint_curve``
by another quantity: the bytes a rank touches between two calls on the
same buffers (the call's own working set when it runs back to back,
every interleaved algorithm's in ``ccsynth bench --interleave``). The
call's size says how much data one call moves; its footprint says
whether that data is still in the last-level cache when the call starts
(:mod:`ccsynth.topologies.model`).

Example:
    >>> c = SizeCurve((4096, 65536), (0.5, 1.0))
    >>> c.cost_bytes(4096), c.cost_bytes(65536), c.cost_bytes(1 << 20)
    (2048.0, 65536.0, 1048576.0)
    >>> c.cost_bytes(1024)          # below the first point: its factor
    512.0
    >>> c.fastest
    0.5
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass
from itertools import pairwise

from ccsynth.errors import TopologyError

__all__ = ["CURVE_VERSION", "MIN_FACTOR", "MAX_FACTOR", "SizeCurve"]

#: version of a curve's JSON object (``{"version": 1, "sizes_bytes": [...], "factors": [...]}``)
CURVE_VERSION = 1
#: factors are kept within these (a measurement beyond them is noise, not a machine)
MIN_FACTOR, MAX_FACTOR = 0.01, 100.0


@dataclass(frozen=True)
class SizeCurve:
    """Points ``(sizes[i], factors[i])`` of a piecewise-linear cost (see the module docstring).

    ``sizes`` strictly increasing positive byte counts; ``factors`` in
    ``[MIN_FACTOR, MAX_FACTOR]``. Raises :class:`TopologyError` otherwise.
    """

    sizes: tuple[float, ...]
    factors: tuple[float, ...]

    def __post_init__(self) -> None:
        sizes = tuple(float(s) for s in self.sizes)
        factors = tuple(float(f) for f in self.factors)
        if not sizes or len(sizes) != len(factors):
            raise TopologyError(f"a size curve needs as many factors as sizes, at least one; got {len(sizes)} sizes "
                                f"and {len(factors)} factors")
        for s in sizes:
            if not (math.isfinite(s) and s > 0):
                raise TopologyError(f"size curve: sizes must be positive byte counts, got {s!r}")
        if any(b <= a for a, b in pairwise(sizes)):
            raise TopologyError(f"size curve: sizes must increase strictly, got {list(sizes)}")
        for f in factors:
            if not (math.isfinite(f) and MIN_FACTOR <= f <= MAX_FACTOR):
                raise TopologyError(f"size curve: factors must lie in [{MIN_FACTOR:g}, {MAX_FACTOR:g}], got {f!r}")
        object.__setattr__(self, "sizes", sizes)
        object.__setattr__(self, "factors", factors)

    def cost_bytes(self, nbytes: float) -> float:
        """``e(m)``: the bytes of the constant model that ``nbytes`` bytes cost."""
        sizes, factors = self.sizes, self.factors
        if nbytes <= sizes[0]:
            return factors[0] * nbytes
        if nbytes >= sizes[-1]:
            return factors[-1] * nbytes
        j = bisect.bisect_right(sizes, nbytes)
        m0, m1 = sizes[j - 1], sizes[j]
        e0, e1 = factors[j - 1] * m0, factors[j] * m1
        return e0 + (e1 - e0) * (nbytes - m0) / (m1 - m0)

    def factor(self, nbytes: float) -> float:
        """``f(m) = e(m) / m`` (the first point's factor at 0 bytes)."""
        return self.cost_bytes(nbytes) / nbytes if nbytes > 0 else self.factors[0]

    @property
    def fastest(self) -> float:
        """The smallest factor of the curve: no message moves faster than this (what bounds use)."""
        return min(self.factors)

    def to_dict(self) -> dict:
        return {"version": CURVE_VERSION, "sizes_bytes": list(self.sizes), "factors": list(self.factors)}
