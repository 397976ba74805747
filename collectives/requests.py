"""Non-blocking collectives: requests, and the progress thread that runs them while the caller computes.

``comm.Iallreduce(...)`` (and ``Iallgather``, ``Ireduce_scatter_block``,
``Ialltoall``, ``Ibcast``, ``Ireduce``, ``Ialltoallv``, ``Iallgatherv``,
``Ireduce_scatter``) returns a :class:`Request` at once; the
collective runs on ccsynth's schedules (or the plan's choice of the MPI
library's collective) meanwhile, and ``req.Wait()`` / ``req.Test()`` /
:func:`waitall` finish it, as with mpi4py's requests::

    req = comm.Iallreduce(grads, out)
    loss = model_step()          # computes while the allreduce runs
    req.Wait()                   # out is ready; an error of the call is raised here

How progress happens: a **progress thread**, one per communicator, started
at its first non-blocking call (:class:`ProgressThread`). It takes the
calls in the order they were made (as MPI requires of collectives) and runs
each exactly as the blocking call would, on the communicator's private
channel; the caller's thread is free meanwhile. Overlap therefore needs the
caller's computation to release Python's GIL (NumPy, CuPy, torch kernels
and MPI calls do; pure-Python loops do not) and a core for the progress
thread, and it needs an MPI library initialized with
``MPI_THREAD_MULTIPLE`` (mpi4py's default). Where the library gives less,
a non-blocking call runs to completion inside the call (correct, with no
overlap) and rank 0 says so once at WARNING.

Ordering with the other calls of the same communicator: a *blocking*
ccsynth collective (and ``Free``, and assigning a plan) first waits for the
non-blocking calls started before it, so every rank still numbers its calls
in program order. A non-blocking call that the MPI library runs uses a
communicator of its own (a ``Dup`` of the wrapped one, made at the first
non-blocking call), so the progress thread never races the caller's own
collectives on the wrapped communicator. The buffers of a pending request
belong to the call until it completes, as in MPI.

:class:`NonBlocking` is that machinery for one communicator: the thread
and the duplicate, both made at its first non-blocking call.

Errors: an error of the call (on any rank: see
:mod:`~ccsynth.collectives.runtime.control`) is kept by the request and
raised by ``Wait`` (``Test`` returns True then, and ``Wait`` raises).

Example:
    >>> t = ProgressThread("example")
    >>> box = []
    >>> req = t.submit(lambda: box.append(1))
    >>> req.Wait(); box
    [1]
    >>> failing = t.submit(lambda: 1 / 0)
    >>> waitall([failing])
    Traceback (most recent call last):
    ...
    ZeroDivisionError: division by zero
    >>> t.close()
"""

from __future__ import annotations

import queue
import threading
import weakref
from collections.abc import Callable, Iterable

__all__ = ["Request", "ProgressThread", "NonBlocking", "waitall", "completed"]


class Request:
    """One non-blocking call: ``Wait()`` until it completes (raising its error), ``Test()`` whether it has."""

    __slots__ = ("_done", "_error", "what")

    def __init__(self, what: str = "") -> None:
        self._done = threading.Event()
        self._error: BaseException | None = None
        self.what = what

    def _finish(self, error: BaseException | None = None) -> None:
        self._error = error
        self._done.set()

    def Test(self) -> bool:
        """True once the call has completed (successfully or not; ``Wait`` then returns or raises at once)."""
        return self._done.is_set()

    def Wait(self, timeout: float | None = None) -> None:
        """Block until the call completes; raise its error if it failed.

        ``timeout`` (seconds) raises :class:`TimeoutError` if it has not
        completed by then (the call goes on: wait again).
        """
        if not self._done.wait(timeout):
            raise TimeoutError(f"{self.what or 'the call'} has not completed after {timeout} s")
        if self._error is not None:
            raise self._error

    # mpi4py spells both ways in places; so do we
    wait = Wait
    test = Test

    def __repr__(self) -> str:
        state = "failed" if self._error is not None else ("done" if self.Test() else "pending")
        return f"<ccsynth.Request {self.what} {state}>"


def completed(what: str = "", error: BaseException | None = None) -> Request:
    """A request that has already completed (a call that ran inside the call)."""
    r = Request(what)
    r._finish(error)
    return r


def waitall(requests: Iterable) -> None:
    """Wait for every request (ccsynth's or mpi4py's); then raise the first error, if any."""
    first: BaseException | None = None
    for r in requests:
        try:
            r.Wait()
        except BaseException as e:  # noqa: BLE001 - re-raised below, after every request completed
            if first is None:
                first = e
    if first is not None:
        raise first


class ProgressThread:
    """A daemon thread running submitted calls one at a time, in order.

    ``init()`` runs first in the thread. ``submit(fn)`` returns the call's :class:`Request`; ``drain()`` waits
    until every call submitted so far has completed (errors stay with their
    requests); ``close()`` drains and stops the thread.
    """

    def __init__(self, name: str, init: Callable[[], None] | None = None) -> None:
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._last: Request | None = None
        self._init = init
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    @property
    def ident(self) -> int | None:
        return self._thread.ident

    def in_thread(self) -> bool:
        """Whether the caller is the progress thread itself."""
        return threading.get_ident() == self._thread.ident

    def submit(self, fn: Callable[[], None], what: str = "") -> Request:
        req = Request(what)
        self._last = req
        self._queue.put((fn, req))
        return req

    def pending(self) -> bool:
        last = self._last
        return last is not None and not last.Test()

    def drain(self) -> None:
        last = self._last
        if last is not None:
            last._done.wait()

    def stop(self) -> None:
        """Stop the thread after the calls queued so far, without waiting for it."""
        self._queue.put(None)

    def close(self) -> None:
        self.drain()
        self.stop()
        self._thread.join()

    def _loop(self) -> None:
        if self._init is not None:
            self._init()  # e.g. make the communicator's GPU current in this thread
        while True:
            item = self._queue.get()
            if item is None:
                return
            fn, req = item
            try:
                fn()
            except BaseException as e:  # noqa: BLE001 - handed to the request's Wait
                req._finish(e)
            else:
                req._finish()
            # let go of the call while waiting for the next: it holds the communicator, which must be freed when
            # its user drops it (its channel, threads and buffers with it), not when this thread takes another
            del item, fn, req


class NonBlocking:
    """One communicator's non-blocking calls: its progress thread and where the MPI library's collectives run there.

    ``comm`` is the wrapped mpi4py communicator; :meth:`open` (collective:
    every rank makes its first non-blocking call there) duplicates it and
    starts the thread (``name``; ``init()`` runs first in it).
    """

    def __init__(self, comm, name: str, init: Callable[[], None] | None = None) -> None:
        self.comm = comm
        self._name = name
        self._init = init
        self.thread: ProgressThread | None = None
        self._dup = None

    def open(self) -> ProgressThread:
        """The thread; the first time, duplicate the communicator and start it."""
        if self.thread is None:
            self._dup = self.comm.Dup()
            self.thread = ProgressThread(self._name, init=self._init)
            # dropped without close() (a communicator its user let go of without Free()): the idle thread ends
            # once its queued calls are done, instead of waiting for work until the process exits
            weakref.finalize(self, self.thread.stop)
        return self.thread

    def submit(self, fn: Callable[[], None], what: str = "") -> Request:
        """Queue ``fn`` on the thread (opened by the first call)."""
        return self.open().submit(fn, what)

    def wait_turn(self) -> None:
        """Outside the thread: wait for the calls queued before (a blocking call comes after them)."""
        thread = self.thread
        if thread is not None and not thread.in_thread():
            thread.drain()

    def mpi_comm(self):
        """Where the MPI library's own collectives run: in the thread the duplicate, elsewhere the wrapped comm."""
        thread = self.thread
        if thread is not None and thread.in_thread():
            return self._dup
        return self.comm

    def drain(self) -> None:
        """Wait until every call queued so far has completed (errors stay with their requests)."""
        if self.thread is not None:
            self.thread.drain()

    def close(self) -> None:
        """Drain, stop the thread and free the duplicate."""
        if self.thread is not None:
            self.thread.close()
            self.thread = None
            if self._dup is not None:
                self._dup.Free()
            self._dup = None
