"""A communicator's own memory for a call: the input copy of an in-place call, the padded blocks of a v-call.

An in-place call (``MPI.IN_PLACE``) gives the schedule one buffer that is
both its input and its output; a schedule reads its input while it writes
its output, so the communicator runs it on a private copy of the input,
made at the start of every run of the call (:meth:`PrivateBuffers.copier`:
the replay of the call repeats the copy). ``Reduce_scatter`` with counts
packs its blocks into padded private buffers
(:mod:`~ccsynth.collectives.vcounts`).

One buffer per role, backend and dtype, grown when a call needs more;
smaller calls use its front. Each buffer is an
:class:`~ccsynth.collectives.runtime.memory.Entry` of the channel's byte
budget, which may drop it between calls (least recently used first) when
the budget is exceeded.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

from ccsynth.collectives.runtime.channel import Channel
from ccsynth.collectives.runtime.memory import Entry
from ccsynth.kernels.base import Backend

__all__ = ["PrivateBuffers"]


class PrivateBuffers:
    """Private buffers by role, backend and dtype, kept under the channel's byte budget."""

    def __init__(self, channel: Channel) -> None:
        self.channel = channel
        self._buffers: dict[tuple, tuple[Any, Entry]] = {}

    def get(self, role: str, backend: Backend, like, n: int) -> tuple[Any, Entry]:
        """``n`` elements of private memory of ``like``'s dtype on ``backend``: ``(view, entry)``."""
        key = (role, backend.name, like.dtype.str)
        budget = self.channel.memory
        now = self.channel.seq
        hit = self._buffers.get(key)
        if hit is not None and hit[0].size >= n:
            hit[1].last = now
            return hit[0][:n], hit[1]
        if hit is not None:
            budget.forget(hit[1])
            del self._buffers[key]
        budget.note_message(n * like.dtype.itemsize)
        entry = budget.admit(Entry(n * like.dtype.itemsize, self._dropper(key), what=f"{role} copy of an in-place call"),
                             now)
        buf = backend.empty(n, like.dtype)
        self._buffers[key] = (buf, entry)
        return buf, entry

    def copier(self, dst, src, entry: Entry, backend: Backend) -> Callable[[], None]:
        """What an in-place call runs first: copy the caller's data ``src`` into its private input ``dst``."""
        copy = backend.copy
        ch = self.channel

        def pre() -> None:
            entry.last = ch.seq
            copy(dst, src)

        return pre

    def sizes(self) -> list[int]:
        """The element counts of the buffers kept now."""
        return [buf.size for buf, _ in self._buffers.values()]

    def clear(self) -> None:
        self._buffers.clear()

    def _dropper(self, key) -> Callable[[], None]:
        me = weakref.ref(self)

        def drop() -> None:
            owner = me()
            if owner is not None:
                owner._buffers.pop(key, None)

        return drop
