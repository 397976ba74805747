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
3. **The last call** (:class:`Replay`): a training or benchmark loop passes
   the same arrays again and again; then parsing the buffer specs,
   checking them and choosing a schedule would give the same answer, so
   :meth:`ScheduleCache.replay` repeats only the run. The arrays must be
   the very same objects with the same dtype, shape and strides
   (:func:`spec_signature`); a list spec, a new object per call, is never
   replayed. The replay must not keep the caller's arrays alive: it holds
   weak references to them, and the run it repeats holds views that own
   no memory.

A new plan (``comm.plan = ...``) empties the first and the third
(:attr:`ScheduleCache.lookup`); the programs stay until ``Free``.
"""

from __future__ import annotations

import sys
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ccsynth.collectives.executor import CompiledSchedule
from ccsynth.collectives.runtime.channel import Channel
from ccsynth.collectives.schedule import Schedule
from ccsynth.kernels.base import Backend, is_device_array

__all__ = ["MAX_SELECTED", "CallArgs", "Replay", "spec_signature", "ScheduleCache"]

#: (collective, size) choices a communicator keeps (many distinct sizes: the table starts over)
MAX_SELECTED = 4096

# what spec_signature returns for a spec that is never replayed
_UNCACHED = object()


@dataclass(frozen=True)
class CallArgs:
    """The arguments of the call in progress, as the caller passed them (held while it runs, never after)."""

    kind: str
    sendbuf: Any
    recvbuf: Any
    op: Any
    root: int


@dataclass(frozen=True)
class Replay:
    """How the last scheduled call ran, and what a call must match to run the same way."""

    kind: str
    sendbuf: Callable[[], Any]  # a weak reference (or a callable returning None / MPI.IN_PLACE)
    recvbuf: Callable[[], Any]
    op: Any
    root: int
    send_sig: Any
    recv_sig: Any
    run: Callable[[], None]
    name: str  # the schedule's name: last_algorithm after a replay


def spec_signature(spec):
    """What must stay the same for a buffer spec to be replayed.

    Arrays: dtype, shape, strides and (NumPy) whether it is writable (the same object keeps its memory);
    None and ``MPI.IN_PLACE``: themselves; anything else (a list spec, a new
    object per call): never replayed.
    """
    if type(spec) is np.ndarray:  # writeable too: a buffer made read-only after a call is parsed (and refused)
        return (spec.dtype, spec.shape, spec.strides, spec.flags.writeable)
    if is_device_array(spec):
        return (spec.dtype, spec.shape, spec.strides)
    if spec is None:
        return None
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and spec is mpi.IN_PLACE:
        return None
    return _UNCACHED


def _weak(obj):
    """A callable returning ``obj``: a weak reference where possible (arrays), else ``obj`` itself (None, IN_PLACE)."""
    try:
        return weakref.ref(obj)
    except TypeError:
        return lambda: obj


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
        self.selected: dict[tuple[str, int], Schedule | None] = {}
        self.compiled: dict[tuple, tuple[Schedule, CompiledSchedule]] = {}
        self.last: Replay | None = None

    @property
    def lookup(self):
        """What selects a schedule per call; assigning a new one forgets the choices and the last call."""
        return self._lookup

    @lookup.setter
    def lookup(self, lookup) -> None:
        self._lookup = lookup
        self.selected.clear()
        self.last = None

    def schedule_for(self, kind: str, nbytes: int) -> Schedule | None:
        """The plan's schedule for ``kind`` at ``nbytes`` on this communicator's ranks (None: none covers it)."""
        key = (kind, nbytes)
        try:
            return self.selected[key]
        except KeyError:
            pass
        if len(self.selected) > MAX_SELECTED:
            self.selected.clear()
        entry_for = getattr(self._lookup, "entry_for", None)
        if entry_for is not None:
            entry = entry_for(kind, self.size, nbytes)
            sched = entry.schedule if entry is not None else None
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
        """Run this call the way the last one ran if it is the same call on the same arrays: its algorithm, else None."""
        hit = self.last
        if hit is None:
            return None
        if (
            hit.kind == kind
            and hit.sendbuf() is sendbuf
            and hit.recvbuf() is recvbuf
            and hit.op is op
            and hit.root == root
            and spec_signature(sendbuf) == hit.send_sig
            and spec_signature(recvbuf) == hit.recv_sig
        ):
            try:
                hit.run()
            except BaseException:
                self.last = None
                raise
            return hit.name
        self.last = None
        return None

    def remember(self, call: CallArgs, run: Callable[[], None], name: str) -> None:
        """Keep ``run`` as the replay of ``call`` where its buffer specs can be replayed."""
        sig_s, sig_r = spec_signature(call.sendbuf), spec_signature(call.recvbuf)
        if sig_s is not _UNCACHED and sig_r is not _UNCACHED:
            self.last = Replay(call.kind, _weak(call.sendbuf), _weak(call.recvbuf), call.op, call.root, sig_s, sig_r,
                               run, name)

    def free(self) -> None:
        """Release the compiled programs and forget everything."""
        self.last = None
        for _, cs in self.compiled.values():
            cs.free()
        self.compiled.clear()
        self.selected.clear()
