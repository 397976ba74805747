"""Human-readable sizes: ``1K`` = 1024 bytes, ``1M``, ``1G``; ranges ``1K:1G``.

Binary prefixes, as OMB and nccl-tests use them. A range ``MIN:MAX`` expands
to the powers of two from MIN to MAX (both included; MIN is rounded up to a
power of two, MAX need not be one and is appended if it is not).

>>> parse_size("64M")
67108864
>>> [format_size(s) for s in parse_sizes("1K:4K")]
['1K', '2K', '4K']
"""

from __future__ import annotations

import math
import re

from ccsynth.errors import SizeError
from ccsynth.limits import MAX_SIZE_BYTES, check as check_limit

__all__ = ["parse_size", "parse_sizes", "format_size"]

_UNITS = {"": 1, "B": 1, "K": 1 << 10, "KB": 1 << 10, "KIB": 1 << 10, "M": 1 << 20, "MB": 1 << 20, "MIB": 1 << 20,
          "G": 1 << 30, "GB": 1 << 30, "GIB": 1 << 30, "T": 1 << 40, "TB": 1 << 40, "TIB": 1 << 40}
_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*$")


def parse_size(text: str | int) -> int:
    """Bytes in ``text`` (``"1M"``, ``"4096"``, ``"1.5K"``)."""
    if isinstance(text, int) and not isinstance(text, bool):
        if text < 0:
            raise SizeError(f"size must not be negative, got {text}")
        check_limit("size", text, "MAX_SIZE_BYTES", SizeError)
        return text
    text = str(text)
    shown = text if len(text) <= 24 else text[:20] + "..."
    m = _RE.match(text)
    if not m or m.group(2).upper() not in _UNITS:
        raise SizeError(f"bad size {shown!r}: use a number of bytes with an optional K, M, G or T suffix (e.g. 1M)")
    value = float(m.group(1)) * _UNITS[m.group(2).upper()]
    if not math.isfinite(value) or value > MAX_SIZE_BYTES:
        raise SizeError(f"size {shown!r} exceeds MAX_SIZE_BYTES = {MAX_SIZE_BYTES} (1 EiB)")
    if value != int(value):
        raise SizeError(f"size {shown!r} is not a whole number of bytes")
    return int(value)


def parse_sizes(text: str) -> list[int]:
    """``"1M"`` -> [1M]; ``"1K:1M"`` -> powers of two; ``"1K,4K,1M"`` -> as listed.

    Never empty: an empty list (``","``) is a :class:`SizeError`, and so is a
    range that starts or ends at 0 (``"0:4"``), which would silently become
    ``1:4``; 0 alone or in a list is a zero-byte message.
    """
    text = str(text).strip()
    if "," in text:
        sizes = [parse_size(t) for t in text.split(",") if t.strip()]
        if not sizes:
            raise SizeError(f"no size in the list {text!r}: give sizes separated by commas, e.g. 1K,1M")
        return sizes
    if ":" in text:
        lo_s, hi_s = text.split(":", 1)
        lo = parse_size(lo_s) if lo_s.strip() else 1
        hi = parse_size(hi_s)
        if lo > hi:
            raise SizeError(f"bad size range {text!r}: minimum {lo} is above maximum {hi}")
        if lo == 0 or hi == 0:
            raise SizeError(f"bad size range {text!r}: a range runs over powers of two from 1 byte up; "
                            "list a zero-byte message explicitly (e.g. 0,1K)")
        p = 1
        while p < lo:
            p <<= 1
        out = []
        while p <= hi:
            out.append(p)
            p <<= 1
        if not out or out[-1] != hi:
            out.append(hi)
        return out
    return [parse_size(text)]


def format_size(n: float) -> str:
    """The shortest exact binary-prefixed form: 1024 -> '1K', 1536 -> '1536'."""
    n = int(n)
    for suffix, mult in (("T", 1 << 40), ("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= mult and n % mult == 0:
            return f"{n // mult}{suffix}"
    return str(n)
