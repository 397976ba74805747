"""What a run loop calls: MPI (post, wait) and kernels, handed to it as plain callables.

The run loops (:mod:`.dataflow`, :mod:`.straight_line`) never call MPI or
the buffer backend by name. They receive an :class:`MpiCalls` and a
:class:`Kernels` and bind their fields to locals once per run, so that a
profiled run can pass timed versions of the same calls
(:mod:`.profiling`) to the very same loop. The plain versions are the
library's own functions, unwrapped: ``MPI.Comm.Isend`` called on a
communicator costs what ``comm.Isend(...)`` costs, and waiting with
``Waitsome`` is one call into MPI.

Waiting has two modes (``wait=`` of the executor):

* ``waitsome`` -- block inside MPI (``Waitsome``, ``Waitany``);
* ``yield`` -- poll (``Testsome``, ``Testany``) and give the core away
  between polls (``os.sched_yield``; ``CCSYNTH_SPIN=k`` polls k times
  between yields). Much faster when ranks outnumber cores: a rank blocked
  in MPI busy-polls and keeps the core that its peer needs.

``auto`` picks ``yield`` when the launcher put more ranks on this node than
the cores this process may use; ``CCSYNTH_WAIT`` overrides the choice. A
``timeout`` makes every wait poll, and give up (:class:`WaitTimedOut`)
after that many seconds without progress. Every wait of a run loop
includes the control line's posted receive (:mod:`.control`): that is how
a failure on another rank wakes it.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any
from collections.abc import Callable

from ccsynth.errors import ScheduleError

__all__ = [
    "WAIT_MODES", "MpiCalls", "Kernels", "WaitTimedOut", "mpi_calls", "kernels", "local_rank_count",
    "resolve_wait_mode",
]

WAIT_MODES = ("auto", "waitsome", "yield")


def local_rank_count() -> int | None:
    """Ranks the launcher started on this node (MPICH/Hydra, Open MPI, Slurm), if it says."""
    for var in ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE"):
        v = os.environ.get(var, "")
        if v.isdigit():
            return int(v)
    return None


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def resolve_wait_mode(wait: str) -> str:
    """``waitsome`` or ``yield`` for the executor's ``wait=`` (``CCSYNTH_WAIT`` overrides it)."""
    mode = os.environ.get("CCSYNTH_WAIT", "") or wait
    if mode not in WAIT_MODES:
        raise ScheduleError(f"unknown wait mode {mode!r}; choose one of: {', '.join(WAIT_MODES)}")
    if mode == "auto":
        local = local_rank_count()
        mode = "yield" if local is not None and local > _cores() else "waitsome"
    return mode


class WaitTimedOut(Exception):
    """A wait saw nothing complete for ``timeout`` seconds (the executor reports it as CallTimeoutError)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"nothing arrived for {seconds:g} s")
        self.seconds = seconds


@dataclass(frozen=True, slots=True)
class MpiCalls:
    """The MPI calls of a run loop, and the objects they fill.

    ``isend(comm, buf, peer, tag)`` and ``irecv(comm, buf, peer, tag)``
    return a new request; ``wait_some(requests, statuses)`` returns the
    indices of the completed requests (statuses filled in that order);
    ``wait_any(requests, status)`` the index of one completed request;
    ``test_all(requests)`` whether all have completed. ``error`` is the
    class MPI raises; ``statuses``/``status`` are reused by every run,
    ``null`` a null request (completed slots of the dataflow loop's active
    list), ``byte`` the datatype byte counts are read in. With a timeout,
    ``wait_some``/``wait_any`` raise :class:`WaitTimedOut` when nothing
    completes for that long.
    """

    isend: Callable[[Any, Any, int, int], Any]
    irecv: Callable[[Any, Any, int, int], Any]
    wait_some: Callable[[list, list], list]
    wait_any: Callable[[list, Any], int]
    test_all: Callable[[list], bool]
    error: type[BaseException]
    statuses: list
    status: Any
    null: Any
    byte: Any
    timeout: float | None = None


def mpi_calls(MPI, wait_mode: str, spin: int = 1, timeout: float | None = None) -> MpiCalls:
    """The plain calls for ``wait_mode`` (``waitsome`` or ``yield``, polling ``spin`` times between yields).

    With ``timeout`` (seconds), waits poll (as in ``yield`` mode) and give
    up after that long without progress.
    """
    Request = MPI.Request
    if timeout is not None:
        wait_some = _polling_wait_some(Request.Testsome, max(1, spin), timeout)
        wait_any = _polling_wait_any(Request.Testany, timeout)
    elif wait_mode == "yield":
        wait_some = _polling_wait_some(Request.Testsome, max(1, spin))
        wait_any = _polling_wait_any(Request.Testany)
    else:
        wait_some, wait_any = Request.Waitsome, Request.Waitany
    return MpiCalls(
        isend=MPI.Comm.Isend,
        irecv=MPI.Comm.Irecv,
        wait_some=wait_some,
        wait_any=wait_any,
        test_all=Request.Testall,
        error=MPI.Exception,
        statuses=[],  # Waitsome/Testsome fill one status per completed request (grows as needed)
        status=MPI.Status(),
        null=MPI.Request(),
        byte=MPI.BYTE,
        timeout=timeout,
    )


class _Patience:
    """Polling between yields; with a timeout, :class:`WaitTimedOut` once nothing completed for that long."""

    __slots__ = ("end", "polls", "spin", "timeout")
    end: float | None  # the deadline (time.monotonic()), set at the first yield

    def __init__(self, spin: int, timeout: float | None) -> None:
        self.spin, self.timeout = spin, timeout
        self.polls, self.end = 0, None

    def start(self) -> _Patience:
        self.polls, self.end = 0, None
        return self

    def pause(self) -> None:
        self.polls += 1
        if self.polls < self.spin:
            return
        self.polls = 0
        os.sched_yield()
        if self.timeout is not None:
            now = time.monotonic()
            if self.end is None:
                self.end = now + self.timeout
            elif now > self.end:
                raise WaitTimedOut(self.timeout)


def _polling_wait_some(Testsome, spin: int, timeout: float | None = None):
    patience = _Patience(spin, timeout)

    def wait_some(requests, statuses):
        done = Testsome(requests, statuses)
        if not done:
            p = patience.start()
            while not done:
                p.pause()
                done = Testsome(requests, statuses)
        return done

    return wait_some


def _polling_wait_any(Testany, timeout: float | None = None):
    patience = _Patience(1, timeout)

    def wait_any(requests, status):
        index, flag = Testany(requests, status)
        if not flag:
            p = patience.start()
            while not flag:
                p.pause()
                index, flag = Testany(requests, status)
        return index

    return wait_any


@dataclass(frozen=True, slots=True)
class Kernels:
    """The buffer kernels of a run loop for one reduction op.

    ``copy(dst, src)``, ``reduce(dst, src)`` (dst = dst op src),
    ``fused(dst, received, src)`` (dst = src op received), ``sync()`` (wait
    for queued device kernels); ``device`` says whether kernels are queued
    (then MPI may touch a buffer only after ``sync``).
    """

    copy: Callable[[Any, Any], Any]
    reduce: Callable[[Any, Any], Any]
    fused: Callable[[Any, Any, Any], Any]
    sync: Callable[[], Any]
    device: bool


def kernels(backend, op: str) -> Kernels:
    """The backend's kernels for reduction ``op`` (a kernel op name, e.g. ``"sum"``)."""
    return Kernels(backend.copy, backend.reducer(op), backend.fused_reducer(op), backend.synchronize,
                   backend.is_device)
