"""Falling back to the MPI library: what ccsynth leaves to MPI's own collective, and how such a call is waited for.

Whatever no schedule covers -- a size outside the plan, an op or dtype
without a ccsynth kernel (``MPI.BAND``, complex), derived datatypes -- goes
to the MPI library's own collective with the caller's original arguments;
so do the collectives ccsynth never schedules (:data:`MPI_ONLY`:
``Gather``, ``Scan``, ...). Each collective and reason is said once
(:meth:`MPIFallback.tell`): at WARNING on rank 0, at INFO elsewhere.
``fallback=False`` raises :class:`~ccsynth.errors.PlanError` instead
(:meth:`MPIFallback.check_allowed`).

Waiting (:meth:`MPIFallback.run`): the call starts as its non-blocking
form, and the rank waits for it and for the communicator's control line
at once (:mod:`~ccsynth.collectives.runtime.control`). A notice that
another rank failed this call (or a timeout) cannot be answered by
cancelling: MPI cannot cancel a collective, and one left pending would
match the program's next collective on the communicator. So the job is
aborted, with a message naming the rank and the reason, instead of hanging
or returning a wrong buffer.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable

from ccsynth.collectives.runtime.channel import Channel
from ccsynth.collectives.runtime.primitives import WaitTimedOut
from ccsynth.errors import CCSynthError, PlanError

__all__ = ["MPI_ONLY", "MPIFallback"]

log = logging.getLogger(__name__)

#: collectives of mpi4py's Comm that ccsynth never schedules: they go to the wrapped comm, visibly
MPI_ONLY = frozenset((
    "Gather", "Scatter", "Scan", "Exscan", "Alltoallw", "Reduce_scatter_init",
    "Igather", "Igatherv", "Iscatter", "Iscatterv", "Iscan", "Iexscan", "Ialltoallw",
    "Neighbor_allgather", "Neighbor_allgatherv", "Neighbor_alltoall", "Neighbor_alltoallv", "Neighbor_alltoallw",
))


class MPIFallback:
    """One communicator's way to the MPI library (see the module doc).

    ``comm`` is the wrapped mpi4py communicator (aborted when a wait must
    end); ``channel`` and ``mpi`` the communicator's own (call numbers, the
    control line, waits); ``allowed``: its ``fallback=``.
    """

    def __init__(self, comm, channel: Channel, mpi, *, allowed: bool) -> None:
        self.comm = comm
        self.channel = channel
        self.mpi = mpi
        self.allowed = allowed
        self.rank, self.size = channel.rank, channel.size
        self._said: set = set()

    def note(self, key, level: int, msg: str, *args) -> None:
        """Log ``msg`` once per ``key``."""
        if key not in self._said:
            self._said.add(key)
            log.log(level, msg, *args)

    def tell(self, key, msg: str, *args) -> None:
        """A call that the MPI library runs instead of ccsynth: say so once, at WARNING on rank 0 (INFO elsewhere)."""
        level = logging.WARNING if self.rank == 0 and self.size > 1 else logging.INFO
        self.note(key, level, "ccsynth: " + msg, *args)

    def check_allowed(self, what: str) -> None:
        """Raise :class:`PlanError` (``what`` says which call and why) where ``fallback=False``."""
        if not self.allowed:
            raise PlanError(what)

    def run(self, name: str, start: Callable) -> None:
        """The MPI library's own collective: ``start()`` begins its non-blocking form; wait, watching the control line."""
        self.wait(name, start())

    def wait(self, name: str, req) -> None:
        """Wait for ``req``, the MPI library's collective ``name`` started, watching the control line."""
        if self.size < 2:
            req.Wait()
            return
        ch, mpi = self.channel, self.mpi
        pair = [req, ch.ctrl]
        status = mpi.status
        try:
            while mpi.wait_any(pair, status):
                ch.notice(status)  # raises if the notice is about this call
        except BaseException as e:
            if isinstance(e, WaitTimedOut):
                e = CCSynthError(f"no progress for {e.seconds:g} s")
            self._abort_job(name, e)
            raise

    def _abort_job(self, name: str, e: BaseException) -> None:
        log.critical(
            "ccsynth: rank %d: %s; this rank is inside the MPI library's own %s (call %d), which cannot be "
            "cancelled: aborting the MPI job", self.rank, e, name, self.channel.seq,
        )
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # pragma: no cover - a closed stream
                pass
        self.comm.Abort(1)
