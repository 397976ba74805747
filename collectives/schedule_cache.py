"""What a communicator remembers between calls so that a call costs the run and a few look-ups.

Three caches, one per question a call asks:

1. **Which schedule** (:meth:`ScheduleCache.schedule_for`): the plan's
   choice per collective and message size (nccl-tests convention: the
   larger per-rank buffer in bytes), or None where no schedule covers it.
   At most :data:`MAX_SELECTED` sizes are kept (then the table starts over).
2. **Which program** (:meth:`ScheduleCache.compiled_for`): a schedule
   compiled for this communicator, per backend and root (a rooted
   schedule is re-rooted by renaming its ranks:
   ``roles[q] = (q + root - schedule_root) mod n``). The schedule is kept
   with its program so that its ``id`` stays unique.
3. **The calls made before** (:class:`~ccsynth.collectives.fast_path.FastPath`,
   :meth:`ScheduleCache.replay`): a call repeated on the same arrays repeats
   only its run (:mod:`~ccsynth.collectives.fast_path`).

The plan may name the MPI library's own collective for a size range
(algorithm ``"mpi"``): :meth:`ScheduleCache.choice` then answers
:data:`MPI_PICK`, and the call runs MPI's collective as a choice, not as a
fallback.

A new plan (``comm.plan = ...``) empties the first and the third
(:attr:`ScheduleCache.lookup`); the programs stay until ``Free``.
"""

from __future__ import annotations

from collections.abc import Callable

from ccsynth.collectives.executor import CompiledSchedule
from ccsynth.collectives.fast_path import CallArgs, FastPath
from ccsynth.collectives.runtime.channel import Channel
from ccsynth.collectives.schedule import Schedule
from ccsynth.kernels.base import Backend

__all__ = ["MAX_SELECTED", "MPI_PICK", "CallArgs", "ScheduleCache"]

#: (collective, size) choices a communicator keeps (many distinct sizes: the table starts over)
MAX_SELECTED = 4096


class _MPIPick:
    """What :meth:`ScheduleCache.choice` answers where the plan names the MPI library's own collective."""

    def __repr__(self) -> str:
        return "MPI_PICK"


#: the plan's choice is the MPI library's own collective (a plan entry of algorithm ``"mpi"``)
MPI_PICK = _MPIPick()


class ScheduleCache:
    """One communicator's schedule choices, compiled programs and last call (see the module doc).

    ``lookup`` selects a schedule per call (``entry_for`` or ``select``, as
    a :class:`~ccsynth.collectives.plan.Plan`); the programs are compiled on
    ``channel`` with the communicator's executor settings.
    """

    def __init__(self, lookup, channel: Channel, *, slice_bytes: int | None, static_max_bytes: int,
                 timeout: float | None) -> None:
        self._lookup = lookup
        self.channel = channel
        self.size = channel.size
        self.slice_bytes = slice_bytes
        self.static_max_bytes = static_max_bytes
        self.timeout = timeout
        self.selected: dict[tuple[str, int], Schedule | _MPIPick | None] = {}
        self.compiled: dict[tuple, tuple[Schedule, CompiledSchedule]] = {}
        self.fast = FastPath()

    @property
    def lookup(self):
        """What selects a schedule per call; assigning a new one forgets the choices and the last call."""
        return self._lookup

    @lookup.setter
    def lookup(self, lookup) -> None:
        self._lookup = lookup
        self.selected.clear()
        self.fast.forget()

    def schedule_for(self, kind: str, nbytes: int) -> Schedule | None:
        """The plan's schedule for ``kind`` at ``nbytes`` on this communicator's ranks (None: none covers it, or
        the plan names the MPI library's own collective there)."""
        got = self.choice(kind, nbytes)
        return None if got is MPI_PICK else got  # type: ignore[return-value]

    def choice(self, kind: str, nbytes: int) -> Schedule | _MPIPick | None:
        """The plan's choice for ``kind`` at ``nbytes``: a schedule, :data:`MPI_PICK`, or None (nothing covers it)."""
        key = (kind, nbytes)
        try:
            return self.selected[key]
        except KeyError:
            pass
        if len(self.selected) > MAX_SELECTED:
            self.selected.clear()
        entry_for = getattr(self._lookup, "entry_for", None)
        sched: Schedule | _MPIPick | None
        if entry_for is not None:
            entry = entry_for(kind, self.size, nbytes)
            sched = None if entry is None else MPI_PICK if entry.schedule is None else entry.schedule
        else:
            sched = self._lookup.select(kind, self.size, nbytes)
        self.selected[key] = sched
        return sched

    def compiled_for(self, schedule: Schedule, backend: Backend, root: int) -> CompiledSchedule:
        """``schedule`` compiled for this communicator, ``backend`` and ``root``, once."""
        key = (id(schedule), backend.name, root)
        hit = self.compiled.get(key)
        if hit is not None:
            return hit[1]
        sroot = schedule.collective.root if schedule.collective.rooted else 0
        shift = (root - sroot) % self.size
        roles = tuple((q + shift) % self.size for q in range(self.size))
        cs = CompiledSchedule(schedule, self.channel.comm, backend=backend, slice_bytes=self.slice_bytes, roles=roles,
                              static_max_bytes=self.static_max_bytes, timeout=self.timeout, channel=self.channel)
        self.compiled[key] = (schedule, cs)  # the schedule is kept so that its id stays unique
        return cs

    def replay(self, kind: str, sendbuf, recvbuf, op, root: int) -> str | None:
        """Run this call the way it ran before if it is a repeat on the same arrays: its algorithm, else None."""
        hit = self.fast.lookup(kind, sendbuf, recvbuf, op, root)
        if hit is None:
            return None
        try:
            hit.run()
        except BaseException:
            self.fast.forget()
            raise
        return hit.name

    def remember(self, call: CallArgs, run: Callable[[], None], name: str, *, exclusive: bool = False) -> None:
        """Keep ``run`` as the replay of ``call`` where its buffer specs can be replayed (see :class:`FastPath`)."""
        self.fast.remember(call, run, name, exclusive=exclusive)

    def free(self) -> None:
        """Release the compiled programs and forget everything."""
        self.fast.forget()
        for _, cs in self.compiled.values():
            cs.free()
        self.compiled.clear()
        self.selected.clear()
