"""A function run in a forked worker process, its result handed back: the baseline search's second core.

The chunk-factor search (:mod:`ccsynth.synth.baseline_search`) leaves the
simulations of a baseline's factors to a worker while it builds the next
baseline, where a second CPU is there (:func:`worker_possible`). The worker
is forked, so it inherits the schedules instead of receiving them through a
pipe; only the result (or the exception raised) comes back. What it computes
is what the function computes in the parent: the search's results and the
order of its messages do not depend on it.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from collections.abc import Callable

from ccsynth.collectives.mpi_util import in_multirank_job
from ccsynth.errors import CCSynthError

__all__ = ["InWorker", "worker_possible"]


class InWorker:
    """``fn()`` run in a forked worker process, its result (or the exception it raised) handed back by
    :meth:`result`.

    The worker inherits the parent's memory (the schedules to simulate are not copied through a pipe; only the
    result comes back), so it must be made with ``fork``. What it computes is what ``fn()`` computes in the
    parent: the search's results and the order of its messages do not depend on it (the messages are said
    when :meth:`result` is taken).
    """

    def __init__(self, fn: Callable[[], object]):
        ctx = multiprocessing.get_context("fork")
        for stream in (sys.stdout, sys.stderr):  # nothing buffered that the worker would write again
            stream.flush()
        self._conn, child = ctx.Pipe(duplex=False)
        self._proc = ctx.Process(target=_serve, args=(fn, child), daemon=True)
        self._proc.start()
        child.close()  # the worker's end: EOF here once it exits

    def result(self):
        try:
            ok, value = self._conn.recv()
        except EOFError:
            self._proc.join()
            raise CCSynthError(f"the baseline simulation worker ended without a result (exit code "
                               f"{self._proc.exitcode})") from None
        finally:
            self._conn.close()
        self._proc.join()
        if not ok:
            raise value
        return value


def _serve(fn: Callable[[], object], conn) -> None:
    """The worker of :class:`InWorker`: ``(True, fn())`` or ``(False, the exception)`` through ``conn``."""
    try:
        out: tuple[bool, object] = (True, fn())
    except Exception as e:  # handed to the parent, which raises it
        out = (False, e)
    try:
        conn.send(out)
    except Exception as e:  # an exception that does not pickle: its text
        conn.send((False, CCSynthError(f"the baseline simulation worker failed: {e!r}")))
    finally:
        conn.close()


def worker_possible() -> bool:
    """A second process helps: more than one CPU to run on, and ``fork`` to start it with; and this process
    is not one rank of several in an MPI job (a forked child of such a rank may break the MPI library's
    registered memory and progress threads: Open MPI warns, some networks fail). The CLI imports mpi4py, which
    initializes MPI as a singleton (one rank, no network): the worker, which never calls MPI and ends with
    ``os._exit``, is safe there."""
    if in_multirank_job():
        return False
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cpus = os.cpu_count() or 1
    return cpus > 1 and "fork" in multiprocessing.get_all_start_methods()
