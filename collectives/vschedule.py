"""Variable-count collectives as explicit schedules: every block at its own size, no padding.

``Alltoallv`` and ``Allgatherv`` move blocks of different sizes. The
equal-block schedules of the plan cannot carry them without padding every
block to the largest (:mod:`~ccsynth.collectives.vcounts`), which for a
mixture-of-experts exchange with one large block among many small ones
multiplies the bytes on the wire. The IR has per-chunk extents
(:class:`~ccsynth.collectives.explicit.ExplicitCollective`, from the
resharding work), so a v-call is described as it is:

* ``Alltoallv`` with the count matrix ``rows`` (``rows[a][b]``: elements
  rank ``a`` sends to rank ``b``, known to every rank after one small
  allgather): piece ``a * n + b`` of ``rows[a][b]`` units, rank ``a``'s
  input chunk ``b`` and rank ``b``'s output chunk ``a``;
* ``Allgatherv`` with ``counts``: piece ``q`` of ``counts[q]`` units,
  rank ``q``'s only input chunk and every rank's output chunk ``q``.

The schedule is *direct*: every block goes straight from its owner to the
rank that needs it (rank ``a`` sends to ``a + k``, ``k = 1 .. n-1``, in that
order, so the ranks do not all send to rank 0 first), the own block is a
local copy. Direct is what an alltoall needs anyway (every block has one
destination) and, for ``Allgatherv``, what the blocks' unequal sizes
allow without relays: a ring or recursive doubling forwards blocks, and
with uneven blocks its steps wait for the largest. A block of zero
elements is still an op of the schedule (so that the verifier sees every
postcondition met) but moves no message (:mod:`~ccsynth.collectives.explicit_program`).

Verification. The schedules are built by these functions, not read from a
file, and their structure (which op moves which piece) depends only on the
rank count: the counts change the extents, not the possession. So
:func:`build` verifies the first schedule of every (kind, rank count) with
:func:`~ccsynth.collectives.verify.verify` and the others by construction.
:class:`VScheduleCache` keeps the last :data:`CACHE_SIZE` schedules by
counts signature (a training loop repeats its counts).

``Reduce_scatter`` with counts stays on padded blocks: an explicit
collective has no reduction (its postcondition is "this piece from some
holder", not "the sum of every rank's piece"), so it cannot be expressed
here.

Example:
    >>> s = alltoallv_schedule([[1, 0], [7, 2]])
    >>> s.collective.pieces, s.name
    ((1, 0, 7, 2), 'alltoallv-direct')
    >>> [op.kind for op in s.ops_of(1)]
    ['copy', 'send', 'recv']
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import cast

import numpy as np

from ccsynth.collectives.explicit import ExplicitCollective
from ccsynth.collectives.schedule import Chunks, Op, Schedule
from ccsynth.collectives.spec import Collective
from ccsynth.collectives.verify import verify
from ccsynth.errors import CollectiveError

__all__ = ["CACHE_SIZE", "V_KINDS", "alltoallv_schedule", "allgatherv_schedule", "build", "VScheduleCache"]

#: schedules a :class:`VScheduleCache` keeps
CACHE_SIZE = 64
#: the v-collectives with explicit schedules, and the equal-block collective whose plan entry admits them
V_KINDS = {"alltoallv": "alltoall", "allgatherv": "allgather"}


def _matrix(rows) -> np.ndarray:
    m = np.asarray(rows, dtype=np.int64)
    if m.ndim != 2 or m.shape[0] != m.shape[1] or m.shape[0] < 1:
        raise CollectiveError(f"an Alltoallv count matrix is n x n, got shape {m.shape}")
    if (m < 0).any():
        raise CollectiveError("an Alltoallv count matrix has no negative counts")
    return m


def alltoallv_schedule(rows) -> Schedule:
    """The direct explicit schedule of an Alltoallv whose rank ``a`` sends ``rows[a][b]`` elements to ``b``."""
    m = _matrix(rows)
    n = m.shape[0]
    coll = ExplicitCollective(
        "alltoallv", n, pieces=tuple(int(x) for x in m.reshape(-1)),
        inputs=tuple(tuple(a * n + b for b in range(n)) for a in range(n)),
        outputs=tuple(tuple(a * n + b for a in range(n)) for b in range(n)))
    ops: list[Op] = []
    for r in range(n):
        ops.append(Op(len(ops), r, "copy", src=Chunks("i", r), dst=Chunks("o", r)))
        for k in range(1, n):
            to, frm = (r + k) % n, (r - k) % n
            ops.append(Op(len(ops), r, "send", src=Chunks("i", to), peer=to))
            ops.append(Op(len(ops), r, "recv", dst=Chunks("o", frm), peer=frm))
    return Schedule("alltoallv-direct", cast(Collective, coll), tuple(ops), meta={"counts": m.tolist()})


def allgatherv_schedule(counts: Sequence[int]) -> Schedule:
    """The direct explicit schedule of an Allgatherv of blocks of ``counts[q]`` elements."""
    c = np.asarray(counts, dtype=np.int64).reshape(-1)
    if c.size < 1 or (c < 0).any():
        raise CollectiveError(f"Allgatherv counts must be one non-negative count per rank, got {c.tolist()}")
    n = int(c.size)
    coll = ExplicitCollective("allgatherv", n, pieces=tuple(int(x) for x in c),
                              inputs=tuple((q,) for q in range(n)),
                              outputs=tuple(tuple(range(n)) for _ in range(n)))
    ops: list[Op] = []
    for r in range(n):
        ops.append(Op(len(ops), r, "copy", src=Chunks("i", 0), dst=Chunks("o", r)))
        for k in range(1, n):
            to, frm = (r + k) % n, (r - k) % n
            ops.append(Op(len(ops), r, "send", src=Chunks("i", 0), peer=to))
            ops.append(Op(len(ops), r, "recv", dst=Chunks("o", frm), peer=frm))
    return Schedule("allgatherv-direct", cast(Collective, coll), tuple(ops), meta={"counts": c.tolist()})


_BUILDERS = {"alltoallv": alltoallv_schedule, "allgatherv": allgatherv_schedule}
_verified: set[tuple[str, int]] = set()


def build(kind: str, counts) -> Schedule:
    """The explicit schedule of v-collective ``kind`` for ``counts`` (see the module docstring on verification)."""
    try:
        builder = _BUILDERS[kind]
    except KeyError:
        raise CollectiveError(f"no explicit schedule for {kind!r}; v-collectives: {', '.join(_BUILDERS)}") from None
    s = builder(counts)
    shape = (kind, s.n_ranks)
    if shape not in _verified:
        verify(s)
        _verified.add(shape)
    return s


class VScheduleCache:
    """The last :data:`CACHE_SIZE` explicit schedules (and what the caller derives from each), by counts signature.

    ``get(kind, counts, make)`` returns ``make(schedule)`` for the schedule
    of ``counts``, computed once per signature (least recently used dropped).
    """

    def __init__(self, size: int = CACHE_SIZE) -> None:
        self.size = size
        self._items: OrderedDict[tuple, object] = OrderedDict()

    def get(self, kind: str, counts: np.ndarray, make):
        key = (kind, counts.shape, np.ascontiguousarray(counts, dtype=np.int64).tobytes())
        hit = self._items.get(key)
        if hit is not None:
            self._items.move_to_end(key)
            return hit
        value = make(build(kind, counts))
        self._items[key] = value
        if len(self._items) > self.size:
            self._items.popitem(last=False)
        return value

    def clear(self) -> None:
        self._items.clear()

    def __len__(self) -> int:
        return len(self._items)
