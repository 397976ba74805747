"""The check of a number in a topology: its parameters, costs and cost tables."""

from __future__ import annotations

import math

from ccsynth.errors import TopologyError

__all__ = ["checked_number"]


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
