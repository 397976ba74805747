"""The drop-in communicator's multi-dimension path: which calls run as phase plans, and how.

:class:`~ccsynth.collectives.communicator.Communicator` takes ``phases=``, a
*phase source* (the synthesizer's :class:`~ccsynth.synth.multidim.phases.PhasePlanner`,
handed down by the public ``ccsynth.Communicator``: this layer never
imports the synthesizer): an object with ``sizes`` (every dimension's
size, dimension 0 fastest), ``scheduler`` (a name) and ``plan(kind,
nbytes)`` returning a :class:`~ccsynth.collectives.phase_plan.PhasePlan`
that every rank derives alike. The communicator then hands every call to
:meth:`PhasedCalls.run` first (one hook in :meth:`Calls.run
<ccsynth.collectives.calls.Calls.run>`), which runs it on
the :class:`~ccsynth.collectives.multidim.PhasedRunner` (one channel per
dimension group) when it can:

* allreduce, reduce-scatter and allgather (``PHASE_KINDS``);
* host (NumPy) buffers; an op and, for the reducing ones, a dtype with a
  ccsynth kernel;
* in-place calls too: the runner reads its whole input into its working
  buffers before it writes the output, so the input may be the output.

Everything else (other collectives, GPU buffers, ``MPI.BAND``, complex
dtypes) takes the communicator's usual path (its plan, else the MPI
library).

Agreement: the first time a plan (collective and size) runs, every rank
sends every other rank a checksum of its plan on the communicator's
control line (:meth:`~ccsynth.collectives.runtime.control.ControlLine.agreement`,
an exchange waited for with the control line watched, so a rank that
failed the call before it got there wakes the others); ranks that derived
different plans raise :class:`~ccsynth.errors.PlanError` on every rank.

Failures: the communicator calls :meth:`PhasedCalls.failed` for every call
that raised on this rank (in any path); for the multi-dimension
collectives it posts the error on every group's control line, so ranks
waiting in a phase of that call raise too (see
:mod:`~ccsynth.collectives.multidim`).
"""

from __future__ import annotations

import logging
import zlib

import numpy as np

from ccsynth.collectives.multidim import PhasedRunner
from ccsynth.collectives.phase_plan import PHASE_KINDS, PhasePlan
from ccsynth.errors import PlanError
from ccsynth.kernels.base import DTYPES, is_device_array

__all__ = ["PhasedCalls", "MAX_AGREED_PLANS"]

log = logging.getLogger(__name__)

#: plans whose agreement a communicator remembers (then it forgets them all and agrees again)
MAX_AGREED_PLANS = 256

_KERNEL_DTYPES = frozenset(DTYPES)


class PhasedCalls:
    """The phase source, the runner and the agreement of one communicator (see the module docstring).

    Collective (builds the runner's group channels). ``channel`` and ``mpi``
    are the communicator's own channel and MPI call set (call numbers, the
    control line, waits that watch it).
    """

    def __init__(self, source, comm, channel, mpi, *, slice_bytes: int | None = None, timeout: float | None = None,
                 threads: bool | str = "auto", cache_bytes: int | None = None):
        for attr in ("sizes", "plan", "scheduler"):
            if not hasattr(source, attr):
                raise PlanError(f"phases= needs a phase source with sizes, scheduler and plan(kind, nbytes); "
                                f"{type(source).__name__} has no {attr!r}")
        self.source = source
        self.channel = channel
        self.mpi = mpi
        self.runner = PhasedRunner(comm, source.sizes, slice_bytes=slice_bytes, threads=threads, timeout=timeout,
                                   cache_bytes=cache_bytes)
        self._agreed: dict[tuple[str, int], PhasePlan] = {}

    @property
    def scheduler(self) -> str:
        return self.source.scheduler

    def covers(self, kind: str, dtype, opname, like) -> bool:
        """Whether a call of ``kind`` on these buffers runs as a phase plan."""
        return (kind in PHASE_KINDS and opname is not None and (kind == "allgather" or dtype in _KERNEL_DTYPES)
                and not is_device_array(like))

    def run(self, kind: str, nbytes: int, dtype, opname, like, sendarr, recvarr, copy_of=None) -> str | None:
        """Run the call as a phase plan if :meth:`covers` says so: the algorithm's name, else None."""
        if not self.covers(kind, dtype, opname, like) or recvarr is None or (sendarr is None and copy_of is None):
            return None
        plan = self.source.plan(kind, nbytes)
        self._agree(kind, nbytes, plan)
        self.runner.run(plan, copy_of if sendarr is None else sendarr, recvarr, opname or "sum", seq=self.channel.seq)
        return f"multidim:{plan.scheduler}"

    def failed(self, exc: BaseException, kind: str) -> None:
        """This rank's call (the channel's current one) raised ``exc``: tell every group (multi-dimension kinds)."""
        if kind in PHASE_KINDS:
            self.runner.failed(exc, self.channel.seq, kind)

    def free(self) -> None:
        self.runner.free()
        self._agreed.clear()

    def _agree(self, kind: str, nbytes: int, plan: PhasePlan) -> None:
        key = (kind, int(nbytes))
        if self._agreed.get(key) is plan or self.channel.size < 2:
            return
        h = zlib.crc32(plan.signature().encode()) & 0x7FFFFFFF
        a = self.channel.line.agreement(f"multidim {kind} {int(nbytes)}", [h])
        self.channel.wait_watching(a.recvs, self.mpi)
        got = a.got[:, 0]
        if np.any(got != h):
            differ = [int(r) for r in np.nonzero(got != got[0])[0]]
            raise PlanError(f"the ranks derived different multi-dimension plans for {kind} of {nbytes} bytes "
                            f"(rank {self.channel.rank}: {plan.scheduler}, {len(plan.chunks)} chunks; ranks "
                            f"{differ} differ from rank 0)")
        if len(self._agreed) >= MAX_AGREED_PLANS:
            self._agreed.clear()
        self._agreed[key] = plan
