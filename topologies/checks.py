"""The check of a number in a topology: its parameters, costs and cost tables, bandwidths and latencies.

A bandwidth must be positive and at least ``MIN_BANDWIDTH_GBPS``, a latency
non-negative and at most ``MAX_LATENCY_US`` (:mod:`ccsynth.limits`): a value
beyond them is a typo in a file, not a machine.
"""

from __future__ import annotations

import math

from ccsynth.errors import TopologyError
from ccsynth.limits import check as check_limit, check_min as check_limit_min

__all__ = ["checked_number", "checked_bw", "checked_alpha"]


def checked_number(value: object, what: str, *, positive: bool = False) -> float:
    """``value`` as a float if it is a finite real number, non-negative (positive with ``positive``); a
    :class:`TopologyError` naming ``what`` otherwise.

    Example:
        >>> checked_number(3, "cost"), checked_number(0.5, "size", positive=True)
        (3.0, 0.5)
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TopologyError(f"{what} must be a number, got {value!r}")
    v = float(value)
    if not math.isfinite(v) or v < 0 or (positive and v == 0):
        raise TopologyError(f"{what} must be a finite {'positive' if positive else 'non-negative'} number, got {value!r}")
    return v


def checked_bw(value, what: str) -> float:
    """A bandwidth (GB/s): positive, finite and at least MIN_BANDWIDTH_GBPS."""
    v = checked_number(value, what, positive=True)
    check_limit_min(what, v, "MIN_BANDWIDTH_GBPS", TopologyError)
    return v


def checked_alpha(value, what: str) -> float:
    """A latency (us): non-negative, finite and at most MAX_LATENCY_US."""
    v = checked_number(value, what, positive=False)
    check_limit(what, v, "MAX_LATENCY_US", TopologyError)
    return v

