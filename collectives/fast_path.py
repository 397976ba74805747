"""The fast path of repeated calls: the same call on the same arrays runs again without being read again.

A training or benchmark loop passes the same arrays again and again; then
parsing the buffer specs, checking them and choosing an algorithm would
give the same answer, so :class:`FastPath` keeps, per call site -- the
collective, the identities of the send and receive buffers, the op and the
root (:func:`call_key`) -- how the call ran (:class:`Replay`), and the next
such call repeats only the run: the compiled schedule on the same views, or
the MPI library's own collective on the same buffers
(:func:`mpi_replay`). A call is replayed only when

* its arrays are the very same objects, still alive (the replay holds weak
  references to them, and views that own no memory: nothing here keeps a
  caller's array alive), with the same dtype, shape and strides
  (:func:`spec_signature`: an array whose ``shape`` or ``dtype`` was
  assigned in place is read again); a list spec, a new object per call, is
  never replayed;
* for a run that uses the communicator's private buffers (an in-place call
  on a schedule: its input is a private copy, :attr:`Replay.exclusive`):
  no call was read in full since it was kept, as such a call may have
  resized those buffers.

New contents in the same arrays are what a replay is for: it reads the
arrays' memory on every run. At most :data:`MAX_CALLS` call sites are
kept (then the table starts over); a new plan forgets them all.

Layering: the checks that must run on every call (the call numbering, the
wait for earlier non-blocking calls, a thread guard) run before
:meth:`FastPath.lookup` in :meth:`Calls.blocking
<ccsynth.collectives.calls.Calls.blocking>`; what is skipped is only what
the same arguments cannot change.

Persistent collectives (MPI-4 ``MPI_Allreduce_init``, mpi4py
``Comm.Allreduce_init``) are not made here: their creation is a collective
call that every rank must make in the same order, and whether a call is a
repeat is decided by each rank alone (a rank may pass new arrays where
another passes the same). A program that knows its calls repeat on every
rank can call ``comm.Allreduce_init(...)`` on the communicator itself (it
is mpi4py's, on the wrapped communicator).
"""

from __future__ import annotations

import sys
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ccsynth.kernels.base import is_device_array

__all__ = ["MAX_CALLS", "CallArgs", "Replay", "spec_signature", "call_key", "mpi_call", "mpi_replay", "FastPath"]

#: call sites a communicator keeps (more: the table starts over)
MAX_CALLS = 64

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
    """How a call ran, and what a call must match to run the same way."""

    send_ref: Callable[[], Any] | None  # a weak reference to the array (None: a singleton, None or MPI.IN_PLACE)
    recv_ref: Callable[[], Any] | None
    send_sig: Any  # (dtype, shape, strides) of an array, None for a singleton
    recv_sig: Any
    run: Callable[[], None]
    name: str  # the algorithm: last_algorithm after a replay
    exclusive: bool  # uses private buffers: valid only until the next call read in full
    epoch: int


def spec_signature(spec):
    """What must stay the same for a buffer spec to be replayed.

    Arrays: dtype, shape, strides and (NumPy) whether it is writable (the same object keeps its memory; a
    buffer made read-only after a call is parsed again, and refused);
    None and ``MPI.IN_PLACE``: themselves; anything else (a list spec, a new
    object per call): never replayed.
    """
    if type(spec) is np.ndarray:
        return (spec.dtype, spec.shape, spec.strides, spec.flags.writeable)
    if spec is None:
        return None
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and spec is mpi.IN_PLACE:
        return None
    if is_device_array(spec):
        return (spec.dtype, spec.shape, spec.strides)
    return _UNCACHED


def call_key(kind: str, sendbuf, recvbuf, op, root: int) -> tuple:
    """A call site: the collective, the identities of its buffers and op, its root."""
    return (kind, id(sendbuf), id(recvbuf), id(op), root)


def _weak(obj, sig):
    """A weak reference to an array spec; None for a singleton (None, ``MPI.IN_PLACE``: the same id is the same object)."""
    return None if sig is None else weakref.ref(obj)


def _mpi_buffer(spec, alias):
    """An array spec as the MPI library's collective takes it on a replay: a view owning nothing (None, IN_PLACE as they are)."""
    return alias(spec) if type(spec) is np.ndarray else spec


#: the MPI library's own blocking collective per kind: ``call(comm, send, recv, op, root)``
_CALLS: dict[str, Callable] = {
    "allreduce": lambda c, s, r, op, root: c.Allreduce(s, r, op),
    "reduce_scatter": lambda c, s, r, op, root: c.Reduce_scatter_block(s, r, op),
    "reduce": lambda c, s, r, op, root: c.Reduce(s, r, op, root),
    "allgather": lambda c, s, r, op, root: c.Allgather(s, r),
    "alltoall": lambda c, s, r, op, root: c.Alltoall(s, r),
    "broadcast": lambda c, s, r, op, root: c.Bcast(s, root),
}


def mpi_call(kind: str, send, recv, mpi_op, root: int, coll_comm: Callable,
             after: Callable[[], None] | None = None) -> Callable[[], None] | None:
    """A run of the MPI library's own blocking collective ``kind`` on these buffers (None: no such collective).

    ``coll_comm()`` is where it runs (asked on every run: the progress
    thread has its own), ``after()`` finishes it (``avg``: the division).
    """
    call_of = _CALLS.get(kind)
    if call_of is None:
        return None
    if after is None:
        def run() -> None:
            call_of(coll_comm(), send, recv, mpi_op, root)
    else:
        def run() -> None:
            call_of(coll_comm(), send, recv, mpi_op, root)
            after()
    return run


def mpi_replay(call: CallArgs, mpi_op, alias, coll_comm: Callable,
               after: Callable[[], None] | None = None) -> Callable[[], None] | None:
    """:func:`mpi_call` of ``call`` on views of its arrays that own nothing (None: not replayable)."""
    if not all(type(b) is np.ndarray or spec_signature(b) is None for b in (call.sendbuf, call.recvbuf)):
        return None
    send, recv = (alias(b) if type(b) is np.ndarray else b for b in (call.sendbuf, call.recvbuf))
    return mpi_call(call.kind, send, recv, mpi_op, call.root, coll_comm, after)


class FastPath:
    """One communicator's repeated calls, per call site (see the module doc)."""

    def __init__(self) -> None:
        self.calls: dict[tuple, Replay] = {}
        self.epoch = 0  # calls read in full so far
        self.exclusive = 0  # replays kept that hold the communicator's private buffers (valid until the next epoch)

    def lookup(self, kind: str, sendbuf, recvbuf, op, root: int) -> Replay | None:
        """The replay of this call if it is a repeat on the same arrays, else None (the call is then read in full)."""
        key = (kind, id(sendbuf), id(recvbuf), id(op), root)
        hit = self.calls.get(key)
        if hit is not None:
            # the same live objects (an id alone may be a new object's), of the same dtype, shape and strides
            s_ref, r_ref, s_sig, r_sig = hit.send_ref, hit.recv_ref, hit.send_sig, hit.recv_sig
            if ((s_ref is None or s_ref() is sendbuf) and (r_ref is None or r_ref() is recvbuf)
                    and (s_sig is None or s_sig == spec_signature(sendbuf))
                    and (r_sig is None or r_sig == spec_signature(recvbuf))
                    and (not hit.exclusive or hit.epoch == self.epoch)):
                return hit
            del self.calls[key]
        self.epoch += 1
        if self.exclusive:  # their private buffers may be resized now: never replayed again, so let them go
            self.calls = {k: r for k, r in self.calls.items() if not r.exclusive}
            self.exclusive = 0
        return None

    def remember(self, call: CallArgs, run: Callable[[], None], name: str, *, exclusive: bool = False) -> None:
        """Keep ``run`` as the replay of ``call`` where its buffer specs can be replayed."""
        sig_s, sig_r = spec_signature(call.sendbuf), spec_signature(call.recvbuf)
        if sig_s is _UNCACHED or sig_r is _UNCACHED:
            return
        if len(self.calls) >= MAX_CALLS:
            self.calls.clear()
        key = call_key(call.kind, call.sendbuf, call.recvbuf, call.op, call.root)
        self.calls[key] = Replay(_weak(call.sendbuf, sig_s), _weak(call.recvbuf, sig_r), sig_s, sig_r, run, name,
                                 exclusive, self.epoch)
        self.exclusive += exclusive

    def forget(self, key: tuple | None = None) -> None:
        """Forget one call site (its run failed), or all of them."""
        if key is None:
            self.calls.clear()
        else:
            self.calls.pop(key, None)
