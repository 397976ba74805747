"""What a run loop calls: MPI (start, wait) and kernels, handed to it as plain callables.

The run loops (:mod:`.dataflow`, :mod:`.straight_line`) never call MPI or
the buffer backend by name. They receive an :class:`MpiCalls` and a
:class:`Kernels` and bind their fields to locals once per run, so that a
profiled run can pass timed versions of the same calls
(:mod:`.profiling`) to the very same loop. The plain versions are the
library's own functions, unwrapped: ``MPI.Prequest.Start`` called on a
request costs what ``request.Start()`` costs, and waiting with
``Waitsome`` is one call into MPI.

Waiting has two modes (``wait=`` of the executor):

* ``waitsome`` -- block inside MPI (``Waitsome``, ``Wait``, ``Waitall``);
* ``yield`` -- poll (``Testsome``, ``Test``, ``Testall``) and give the core
  away between polls (``os.sched_yield``; ``CCSYNTH_SPIN=k`` polls k times
  between yields). Much faster when ranks outnumber cores: a rank blocked
  in MPI busy-polls and keeps the core that its peer needs.

``auto`` picks ``yield`` when the launcher put more ranks on this node than
the cores this process may use; ``CCSYNTH_WAIT`` overrides the choice.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable

from ccsynth.errors import ScheduleError

__all__ = ["WAIT_MODES", "MpiCalls", "Kernels", "mpi_calls", "kernels", "local_rank_count", "resolve_wait_mode"]

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


@dataclass(frozen=True, slots=True)
class MpiCalls:
    """The MPI calls of a run loop, and the objects they fill.

    ``start(request)``, ``startall(requests)``; ``wait_some(requests,
    statuses)`` returns the indices of the completed requests (statuses
    filled in that order); ``wait_one(request, status)``;
    ``wait_all(requests)``. ``error`` is the class MPI raises;
    ``statuses``/``status`` are reused by every run, ``null`` a null
    request (completed slots of the dataflow loop's active list), ``byte``
    the datatype byte counts are read in.
    """

    start: Callable[[Any], Any]
    startall: Callable[[list], Any]
    wait_some: Callable[[list, list], list]
    wait_one: Callable[[Any, Any], Any]
    wait_all: Callable[[list], Any]
    error: type
    statuses: list
    status: Any
    null: Any
    byte: Any


def mpi_calls(MPI, wait_mode: str, spin: int = 1) -> MpiCalls:
    """The plain calls for ``wait_mode`` (``waitsome`` or ``yield``, polling ``spin`` times between yields)."""
    Request = MPI.Request
    if wait_mode == "yield":
        wait_some = _polling_wait_some(Request.Testsome, max(1, spin))
        wait_one = _polling_wait_one(Request.Test)
        wait_all = _polling_wait_all(Request.Testall)
    else:
        wait_some, wait_one, wait_all = Request.Waitsome, Request.Wait, Request.Waitall
    return MpiCalls(
        start=MPI.Prequest.Start,
        startall=MPI.Prequest.Startall,
        wait_some=wait_some,
        wait_one=wait_one,
        wait_all=wait_all,
        error=MPI.Exception,
        statuses=[],  # Waitsome/Testsome fill one status per completed request (grows as needed)
        status=MPI.Status(),
        null=MPI.Request(),
        byte=MPI.BYTE,
    )


def _polling_wait_some(Testsome, spin: int):
    yield_cpu = os.sched_yield

    def wait_some(requests, statuses):
        done = Testsome(requests, statuses)
        polls = 0
        while not done:
            polls += 1
            if polls >= spin:
                yield_cpu()
                polls = 0
            done = Testsome(requests, statuses)
        return done

    return wait_some


def _polling_wait_one(Test):
    yield_cpu = os.sched_yield

    def wait_one(request, status):
        while not Test(request, status):
            yield_cpu()

    return wait_one


def _polling_wait_all(Testall):
    yield_cpu = os.sched_yield

    def wait_all(requests):
        while not Testall(requests):
            yield_cpu()

    return wait_all


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
