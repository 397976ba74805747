"""Variable counts on equal-block schedules by padding: ``Reduce_scatter`` with counts (the fallback).

``Alltoallv`` and ``Allgatherv`` run explicit schedules with every block at
its own size (:mod:`~ccsynth.collectives.vschedule`). A reducing
v-collective cannot be written that way (an explicit collective has no
reduction), so ``Reduce_scatter`` with counts runs on the plan's
equal-block reduce-scatter schedule over *padded* blocks (the helpers below
serve any equal-block kind):

1. every block is given the same length ``P``: the largest count of the
   call (over all ranks) rounded up to the schedule's chunk quantum (a
   multiple of its chunk factor, so that its chunks are equal);
2. each rank copies its blocks into a private buffer of ``n x P`` elements
   (block ``q`` at ``q * P``; for reductions the padding is zeroed),
3. runs the equal-block schedule on the padded buffers, and
4. copies the first ``count`` elements of its own reduced block to the
   receive buffer (one block per rank: nothing to unpack).

What it costs: two local copies, and messages that carry ``P - count``
elements of padding per block; the padding is at most one quantum per
block when the counts are equal and grows with their spread (it is
``max - count``). Calls whose padded size exceeds :data:`MAX_PADDING`
times their real size (very skewed counts) go to the MPI library's own
v-collective instead, visibly. The largest count is known to every rank
(the counts are arguments on every rank).

Example:
    >>> import numpy as np
    >>> pad = Padding.of([3, 0, 5], quantum=4)
    >>> pad.block, pad.waste
    (8, 16)
    >>> src = np.arange(8.0)
    >>> dst = np.full(3 * pad.block, -1.0)
    >>> pack(dst, src, [3, 0, 5], [0, 3, 3], pad.block, zero=True)
    >>> dst.reshape(3, 8)[:, :5].tolist()
    [[0.0, 1.0, 2.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0, 0.0], [3.0, 4.0, 5.0, 6.0, 7.0]]
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from collections.abc import Sequence

import numpy as np

from ccsynth.errors import BufferMismatchError

__all__ = ["MAX_PADDING", "Padding", "VBuf", "displacements", "check_counts", "pack"]

#: a v-call whose padded messages would be more than this many times its real size goes to the MPI library
MAX_PADDING = 4.0


@dataclass(frozen=True)
class Padding:
    """Blocks of ``block`` elements for counts whose largest is ``largest``; ``waste``: padding elements."""

    largest: int
    block: int
    waste: int

    @classmethod
    def of(cls, counts: Sequence[int], quantum: int = 1, largest: int | None = None) -> Padding:
        big = int(max(counts, default=0)) if largest is None else int(largest)
        q = max(1, int(quantum))
        block = -(-big // q) * q
        return cls(big, block, block * len(counts) - int(sum(counts)))


@dataclass(frozen=True)
class VBuf:
    """A v-collective buffer spec: the flat array, per-rank counts and displacements (elements)."""

    array: Any
    counts: np.ndarray
    displs: np.ndarray

    @property
    def total(self) -> int:
        return int(self.counts.sum())


def displacements(counts: np.ndarray) -> np.ndarray:
    """MPI's default displacements: the blocks one after the other."""
    d = np.zeros(len(counts), np.int64)
    np.cumsum(counts[:-1], out=d[1:])
    return d


def check_counts(what: str, counts, displs, n: int, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Counts and displacements as int64 arrays of ``n``, checked against a buffer of ``size`` elements."""
    c = np.asarray(counts, dtype=np.int64).reshape(-1)
    if c.size != n:
        raise BufferMismatchError(f"{what} gives {c.size} counts; one per rank ({n}) is needed")
    if (c < 0).any():
        raise BufferMismatchError(f"{what} has a negative count: {c.tolist()}")
    d = displacements(c) if displs is None else np.asarray(displs, dtype=np.int64).reshape(-1)
    if d.size != n:
        raise BufferMismatchError(f"{what} gives {d.size} displacements; one per rank ({n}) is needed")
    ends = d + c
    if (d < 0).any() or (c.size and int(ends.max(initial=0)) > size):
        raise BufferMismatchError(
            f"{what}: blocks (counts {c.tolist()}, displacements {d.tolist()}) run past its {size} elements"
        )
    return c, d


def pack(dst, src, counts, displs, block: int, *, zero: bool = False) -> None:
    """Block ``q`` of ``src`` (``counts[q]`` elements at ``displs[q]``) to ``dst[q * block:]``; ``zero``: clear the padding."""
    for q, (c, d) in enumerate(zip(counts, displs)):
        c, d = int(c), int(d)
        base = q * block
        if c:
            dst[base:base + c] = src[d:d + c]
        if zero and c < block:
            dst[base + c:base + block] = 0

