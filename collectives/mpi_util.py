"""MPI helpers: the mpi4py communicator behind a wrapper, abort the whole job on an unhandled error, find ``mpiexec``.

Wrappers (:class:`CommWrapper`): a communicator that runs its collectives
itself (:class:`ccsynth.Communicator <ccsynth.collectives.communicator.Communicator>`)
declares it by deriving from this small base class and keeps the mpi4py
communicator it wraps in ``.comm``; :func:`mpi_comm` hands code that needs
MPI's own calls (point to point, splits, an agreement) that communicator.
The base class lives here, below every runtime module, so that the runtime
(the multi-dimension runner, the resharding executor) recognises a wrapper
without importing the communicator that is built on it.

Why abort: in a collective every rank waits for every other. If one rank
raises and exits (or merely stops calling MPI), the others block forever
inside ``MPI_Allreduce`` or ``Waitsome``; a job that hangs is worse than one
that fails. :func:`install_abort_handler` replaces ``sys.excepthook`` so that
an exception nobody catches prints its traceback (with the rank) and then
calls ``comm.Abort(1)``, which makes the launcher kill every rank -- the same
idea as running a script with ``python -m mpi4py script.py``. The ccsynth
CLI's ``bench`` command and the multi-rank test workers install it.

A rank that wants to stop with an error status on purpose should call
:func:`abort_exit` rather than ``sys.exit(code)``: a plain exit runs
``MPI_Finalize``, which waits for the other ranks and may hang just the same.

Example::

    from ccsynth.collectives.mpi_util import install_abort_handler
    install_abort_handler()          # first thing in an MPI script
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time
import traceback
from typing import Any
from collections.abc import Callable

from ccsynth.errors import CCSynthError

_installed: dict[str, Any] = {}


class CommWrapper:
    """Base of a communicator that wraps an mpi4py intracommunicator (``.comm``) and runs its collectives itself."""

    __slots__ = ()
    comm: Any  # the wrapped mpi4py intracommunicator


def _world():
    from mpi4py import MPI

    return MPI


def _usable(MPI) -> bool:
    return MPI.Is_initialized() and not MPI.Is_finalized()


def _abort(comm, code: int) -> None:
    MPI = _world()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # pragma: no cover - closed stream
            pass
    if _usable(MPI) and comm.Get_size() > 1:
        # The launcher tears down every rank's output pipes on abort; give it a
        # moment to forward the traceback just printed.
        time.sleep(0.2)
        comm.Abort(code)


def mpi_comm(comm):
    """The mpi4py intracommunicator behind ``comm``, for MPI's own calls (agreement, point to point, splits).

    ``comm`` is an mpi4py intracommunicator (returned as it is) or a
    :class:`ccsynth.Communicator <ccsynth.collectives.communicator.Communicator>`
    (any :class:`CommWrapper`: the communicator it wraps; its collectives run ccsynth schedules and
    return ccsynth requests, which mpi4py's ``Waitany`` cannot take). Anything
    else raises :class:`~ccsynth.errors.CCSynthError` naming its type.
    """
    MPI = _world()
    if isinstance(comm, CommWrapper):
        return comm.comm
    if isinstance(comm, MPI.Intracomm):
        return comm
    raise CCSynthError(f"comm must be an mpi4py intracommunicator or a ccsynth.Communicator, "
                       f"got {type(comm).__name__}")


def comm_to_wrap(comm):
    """What a ccsynth Communicator wraps: ``comm``, ``MPI.COMM_WORLD`` for None, a wrapper's ``.comm``.

    Raises :class:`~ccsynth.errors.CCSynthError` for anything else, and for
    an intercommunicator.
    """
    MPI = _world()
    if comm is None:
        return MPI.COMM_WORLD
    if isinstance(comm, CommWrapper):
        return comm.comm
    if not isinstance(comm, MPI.Comm):
        raise CCSynthError(f"Communicator wraps an mpi4py communicator, got {type(comm).__name__}")
    if comm.Is_inter():
        raise CCSynthError("ccsynth.Communicator wraps intracommunicators only")
    return comm


def install_abort_handler(comm=None, *, code: int = 1) -> None:
    """Make an unhandled exception on any rank abort the whole MPI job.

    Installs a ``sys.excepthook`` (and ``threading.excepthook``) that prints
    the traceback prefixed with the rank, then calls ``comm.Abort(code)``
    when ``comm`` (default ``MPI.COMM_WORLD``) has more than one rank.
    Calling it again is harmless. On a single rank the traceback prints and
    the process exits as usual.
    """
    MPI = _world()
    comm = mpi_comm(comm) if comm is not None else MPI.COMM_WORLD
    if _installed.get("comm") is comm:
        return
    previous = _installed.get("previous", sys.excepthook)
    previous_thread = _installed.get("previous_thread", threading.excepthook)

    def hook(etype, value, tb):
        try:
            rank = comm.Get_rank() if _usable(MPI) else "?"
            sys.stderr.write(f"[rank {rank}] unhandled {etype.__name__}; aborting the MPI job\n")
            previous(etype, value, tb)
        finally:
            _abort(comm, code)

    def thread_hook(args):
        try:
            previous_thread(args)
        finally:
            if args.exc_type is not SystemExit:
                _abort(comm, code)

    sys.excepthook = hook
    threading.excepthook = thread_hook
    _installed.update(comm=comm, previous=previous, previous_thread=previous_thread)


def uninstall_abort_handler() -> None:
    """Restore the hooks :func:`install_abort_handler` replaced."""
    if "previous" in _installed:
        sys.excepthook = _installed.pop("previous")
        threading.excepthook = _installed.pop("previous_thread")
        _installed.pop("comm", None)


def abort_exit(code: int, comm=None) -> None:
    """Exit this rank with ``code``; with ``code != 0`` and several ranks, abort them all."""
    if code:
        MPI = _world()
        _abort(mpi_comm(comm) if comm is not None else MPI.COMM_WORLD, int(code))
    sys.exit(code)


def run_main(main: Callable[[], int | None], comm=None) -> None:
    """Run ``main()`` under the abort policy and exit with its status.

    An exception, or a non-zero return value on any rank, aborts the job
    (after printing the traceback); zero exits normally.
    """
    MPI = _world()
    comm = mpi_comm(comm) if comm is not None else MPI.COMM_WORLD
    try:
        code = main() or 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except BaseException:
        rank = comm.Get_rank() if _usable(MPI) else "?"
        sys.stderr.write(f"[rank {rank}] unhandled exception; aborting the MPI job\n")
        traceback.print_exc()
        code = 1
    abort_exit(code, comm)


def in_multirank_job() -> bool:
    """Whether this process is one rank of several in a running MPI job (asked without initialising MPI)."""
    mpi = sys.modules.get("mpi4py.MPI")
    return bool(mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized() and mpi.COMM_WORLD.Get_size() > 1)


def find_mpiexec() -> str | None:
    """The ``mpiexec`` beside the running Python (a virtualenv's), else the one on PATH."""
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    if os.path.isfile(here) and os.access(here, os.X_OK):
        return here
    return shutil.which("mpiexec") or shutil.which("mpirun")


__all__ = ["CommWrapper", "mpi_comm", "comm_to_wrap", "install_abort_handler", "uninstall_abort_handler", "abort_exit", "run_main", "in_multirank_job", "find_mpiexec"]
