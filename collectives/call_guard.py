"""One thread at a time: a call entering a Communicator while another thread's call is in flight is refused.

MPI requires the collective calls on one communicator to be made in the
same order on every rank. Two threads calling one communicator at once
cannot promise that: on rank 0 thread A may come first, on rank 1 thread
B, and the two ranks would then pair A's call with B's -- a wrong answer,
or a hang where the calls differ. Serializing the threads with a lock does
not help, since the lock is taken in a different order on each rank. So a
:class:`~ccsynth.collectives.communicator.Communicator` serves one thread
at a time (:class:`CallGuard`):

* a call (blocking, or the start of a non-blocking one) from thread T
  while a call from another thread is in flight (a blocking call not yet
  returned, a non-blocking call not yet completed) raises
  :class:`~ccsynth.errors.ConcurrentCallError` at once, naming both
  threads; calls from one thread, and threads taking turns (one's calls
  complete before the other's start), are fine;
* the communicator is then *closed for collectives on every rank*: the
  rank tells the others on the control line
  (:meth:`~ccsynth.collectives.runtime.channel.Channel.poison`), every
  later call raises the same error, a rank waiting in a call raises as
  soon as the notice arrives, and the call in flight on this rank raises
  when it ends rather than return a result that may have been paired with
  the other thread's call on another rank. Use one communicator per thread
  (``comm.Dup()``) or order the threads' calls yourself.

Calls from two threads in turn on one rank are still correct only if every
rank makes them in the same order, as MPI requires; the call's signature
carries its thread's name (:func:`thread_name`), so where rank 0 runs thread
A's call against rank 1's thread B, the messages do not match and the
ranks raise :class:`~ccsynth.errors.BufferMismatchError` instead of mixing
the data (:mod:`~ccsynth.collectives.signature`).

The guard costs one uncontended lock per call. The MPI library must be
initialized with ``MPI_THREAD_MULTIPLE`` for non-blocking calls to run on
the progress thread (mpi4py's default); with less they run inside the
call, and the guard still applies.

Example:
    >>> g = CallGuard(rank=0)
    >>> g.enter(); g.leave()
    >>> g.active
    0
"""

from __future__ import annotations

import threading

from ccsynth.errors import ConcurrentCallError

__all__ = ["CallGuard", "thread_tag", "thread_name"]


def thread_tag() -> int:
    """Who makes a call: the thread's ident (:func:`thread_name` gives the name its signature carries)."""
    return threading.get_ident()


def thread_name(ident: int) -> str:
    """The name of the live thread ``ident`` (the same on every rank of an SPMD program), else ``"?"``."""
    for t in threading.enumerate():
        if t.ident == ident:
            return t.name
    return "?"


class CallGuard:
    """Which thread's calls are in flight on one communicator, and whether it has been closed by a concurrent call.

    ``on_poison(error)`` is called once, outside the lock, when this rank
    sees two threads at once (the communicator tells the other ranks).
    """

    __slots__ = ("_lock", "active", "on_poison", "owner", "owner_name", "poisoned", "rank")

    def __init__(self, rank: int, on_poison=None) -> None:
        self._lock = threading.Lock()
        self.owner: int | None = None
        self.active = 0
        self.poisoned: BaseException | None = None
        self.rank = rank
        self.on_poison = on_poison

    def enter(self) -> None:
        """A call starts on this thread: raise :class:`ConcurrentCallError` if another thread's call is in flight."""
        me = threading.get_ident()
        lock = self._lock
        lock.acquire()
        if self.poisoned is None and (self.active == 0 or self.owner == me):
            self.owner = me
            self.active += 1
            lock.release()
            return
        lock.release()
        self._refuse(me)

    def _refuse(self, me: int) -> None:
        with self._lock:
            error = self.poisoned
            fresh = error is None
            if error is None:
                owner = thread_name(self.owner) if self.owner is not None else "?"
                error = self.poisoned = ConcurrentCallError(
                    f"rank {self.rank}: thread {thread_name(me)!r} called this Communicator while a call of "
                    f"thread {owner!r} was in flight; MPI needs the calls on one communicator "
                    f"in the same order on every rank, which two threads at once cannot promise, so the "
                    f"communicator refuses every call from now on, on every rank (give each thread its own: "
                    f"comm.Dup(), or order the threads' calls yourself)")
        if fresh and self.on_poison is not None:
            self.on_poison(error)
        raise error

    def leave(self) -> None:
        """A call that :meth:`enter` let in has ended (returned, raised, or its request completed)."""
        with self._lock:
            self.active -= 1

    def poison(self, error: BaseException) -> None:
        """Another rank saw two threads at once: refuse every call from now on with ``error``."""
        with self._lock:
            if self.poisoned is None:
                self.poisoned = error
