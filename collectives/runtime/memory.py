"""Bounded memory: the buffers the runtime keeps between calls, under one byte budget.

Between calls the runtime keeps buffers so that a repeated call costs no
allocation: per compiled layout its *staging* area (receives that reduce
land there) and *scratch* chunks, the straight-line path's send snapshots,
the private copy that an ``MPI.IN_PLACE`` call works on, and the stand-ins
for buffers a rank does not pass (a non-root's output of ``Reduce``). Kept
for every distinct message size, these grew without bound. So each of them
is an :class:`Entry` of one :class:`MemoryBudget` per communicator (per
:class:`~.channel.Channel`), with its size in bytes and the number of the
call that last used it; when a new buffer would take the total above the
budget, the least recently used entries are dropped first (their owners
free them), never one that the call in progress uses. Hence, at any time::

    kept bytes <= max(budget, bytes the call in progress needs)

buffers are dropped *before* new ones are allocated, so the peak is the
same bound, and a call that needed more than the budget drops its own
buffers when it ends (:meth:`MemoryBudget.trim`). Buffers that no call of
a whole communicator generation (8192 calls with MPICH, see
:mod:`.channel`) used are dropped too (:meth:`MemoryBudget.expire`): a
one-off large call does not keep its buffers for good. The budget is ``cache_bytes`` (``Communicator(cache_bytes=...)``,
``CompiledSchedule(cache_bytes=...)`` or the environment variable
``CCSYNTH_CACHE_BYTES``); by default it is ``max(32 MiB, 2 x the largest
message seen)``, which holds the buffers of one call of the largest size
(an in-place Rabenseifner allreduce needs about 1.75x its message: the
private copy and the staging of its reduce-scatter) plus the small calls
around it, whatever sequence of sizes a program uses. ``cache_bytes=0``
keeps nothing between calls, like the MPI library's own collectives (which
allocate what a call needs and free it at the end).

The caller's own arrays are never kept alive: bindings (views of them) hold
no reference to them (:meth:`ccsynth.kernels.base.Backend.alias`).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from collections.abc import Callable

from ccsynth.errors import CCSynthError

__all__ = ["Entry", "MemoryBudget", "DEFAULT_MIN_CACHE_BYTES", "cache_bytes_from_env"]

log = logging.getLogger(__name__)

#: the automatic budget never goes below this
DEFAULT_MIN_CACHE_BYTES = 32 << 20


def cache_bytes_from_env(value: int | None) -> int | None:
    """``value`` if given, else ``CCSYNTH_CACHE_BYTES`` (bytes; empty or "auto": automatic), else None."""
    if value is None:
        text = os.environ.get("CCSYNTH_CACHE_BYTES", "").strip()
        if not text or text.lower() == "auto":
            return None
        try:
            value = int(text)
        except ValueError:
            raise CCSynthError(f"CCSYNTH_CACHE_BYTES={text!r} is not a number of bytes") from None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise CCSynthError(f"cache_bytes must be a non-negative number of bytes or None, got {value!r}")
    return value


@dataclass(eq=False)
class Entry:
    """One kept buffer (or group of buffers): its size, the call that last used it, how to drop it."""

    nbytes: int
    drop: Callable[[], None]  # the owner forgets the buffers (called once, by the budget)
    last: int = 0  # number of the call that last used it (Channel.seq)
    what: str = ""


class MemoryBudget:
    """Least-recently-used buffers under a byte budget (see the module doc)."""

    def __init__(self, limit: int | None = None, minimum: int = DEFAULT_MIN_CACHE_BYTES) -> None:
        self.limit = limit  # None: automatic
        self.minimum = minimum
        self.largest = 0  # the largest message seen (bytes)
        self.total = 0  # bytes kept
        self.peak = 0
        self.over = False  # a call's own buffers went over the budget: trim when it ends
        self._entries: dict[int, Entry] = {}

    @property
    def budget(self) -> int:
        if self.limit is not None:
            return self.limit
        return max(self.minimum, 2 * self.largest)

    def note_message(self, nbytes: int) -> None:
        if nbytes > self.largest:
            self.largest = nbytes

    def __len__(self) -> int:
        return len(self._entries)

    def admit(self, entry: Entry, now: int) -> Entry:
        """Keep ``entry`` (used by call ``now``), dropping older entries first if it would not fit."""
        entry.last = now
        self.make_room(entry.nbytes, now)
        self._entries[id(entry)] = entry
        self.total += entry.nbytes
        if self.total > self.peak:
            self.peak = self.total
        self.over = self.total > self.budget
        return entry

    def grow(self, entry: Entry, nbytes: int, now: int) -> None:
        """``entry`` keeps ``nbytes`` more (room is made first)."""
        entry.last = now
        self.make_room(nbytes, now)
        if id(entry) in self._entries:
            entry.nbytes += nbytes
            self.total += nbytes
            if self.total > self.peak:
                self.peak = self.total
            self.over = self.total > self.budget

    def shrink(self, entry: Entry, nbytes: int) -> None:
        """``entry`` keeps ``nbytes`` fewer."""
        entry.nbytes -= nbytes
        if id(entry) in self._entries:
            self.total -= nbytes

    def make_room(self, nbytes: int, now: int) -> None:
        """Drop least recently used entries not used by call ``now`` until ``nbytes`` more fit."""
        limit = self.budget
        if self.total + nbytes <= limit:
            return
        for e in sorted(self._entries.values(), key=lambda e: e.last):
            if self.total + nbytes <= limit or e.last >= now:
                break
            self.forget(e)
            log.debug("dropped %s (%d bytes; last used by call %d) to stay within %d bytes",
                      e.what or "a cached buffer", e.nbytes, e.last, limit)
            e.drop()

    def trim(self) -> None:
        """After a call: drop least recently used entries until the budget holds (``cache_bytes=0``: all)."""
        self.over = False
        limit = self.budget
        if self.total <= limit:
            return
        for e in sorted(self._entries.values(), key=lambda e: e.last):
            if self.total <= limit:
                break
            self.forget(e)
            e.drop()

    def expire(self, before: int) -> None:
        """Drop the entries no call since call ``before`` has used (a one-off large call's buffers)."""
        for e in [e for e in self._entries.values() if e.last < before]:
            self.forget(e)
            e.drop()

    def forget(self, entry: Entry) -> None:
        """Stop counting ``entry`` (its owner dropped it); harmless if it was not counted."""
        if self._entries.pop(id(entry), None) is not None:
            self.total -= entry.nbytes

    def clear(self) -> None:
        for e in list(self._entries.values()):
            self.forget(e)
            e.drop()
