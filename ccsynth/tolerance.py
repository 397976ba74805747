"""Floating-point tolerances, named once.

Times (us) and bandwidths (GB/s) are computed in floating point by the
simulator, the bounds and the MILPs; comparing two of them exactly would let
rounding decide which schedule "wins". Every such comparison goes through
these helpers.

* :data:`REL` -- two computed times within this relative distance are equal
  (a candidate must beat the best so far by more than this to replace it).
* :data:`EVENT_REL` -- the simulator treats events this close (relative to
  the current time) as simultaneous.

Example:
    >>> is_less(1.0, 1.0 + 1e-12), is_less(1.0, 1.001)
    (False, True)
    >>> is_close(1e6, 1e6 * (1 + 1e-10))
    True
"""

from __future__ import annotations

REL = 1e-9
EVENT_REL = 1e-12

__all__ = ["REL", "EVENT_REL", "is_close", "is_less", "is_greater"]


def _scale(a: float, b: float) -> float:
    return max(1.0, abs(a), abs(b))


def is_close(a: float, b: float, rel: float = REL) -> bool:
    """``a`` and ``b`` are equal up to ``rel`` (relative to the larger, at least 1)."""
    return abs(a - b) <= rel * _scale(a, b)


def is_less(a: float, b: float, rel: float = REL) -> bool:
    """``a`` is smaller than ``b`` by more than the tolerance."""
    return a < b - rel * _scale(a, b)


def is_greater(a: float, b: float, rel: float = REL) -> bool:
    """``a`` is larger than ``b`` by more than the tolerance."""
    return is_less(b, a, rel)
