"""``ccsynth.Communicator``: the drop-in communicator with the built-in default plan.

The communicator itself (:class:`ccsynth.collectives.communicator.Communicator`)
is runtime: it parses buffer specs, asks a plan for a schedule and runs it.
Which schedule to run when the user gives no plan is policy, and the policy
is built from the baselines of :mod:`ccsynth.synth` -- a layer above the
runtime. So the runtime class takes its default plan as an argument
(``default_plan=``) and never imports ``synth``, and this module, above both
layers, is where the two meet: :class:`Communicator` is the runtime class
with :class:`~ccsynth.synth.default_plan.LazyDefaultPlan` passed in. That is
the class ``ccsynth.Communicator`` names; users never see the difference.

Multi-dimension networks. With ``topology=`` (a spec such as
``"hierarchical:2x2x2@200,100,50"`` or a :class:`~ccsynth.topologies.model.Topology`
with dimensions) the ranks take coordinates in rank order, dimension 0
fastest, and ``Allreduce``, ``Reduce_scatter_block`` and ``Allgather`` run
as per-dimension phases on one sub-communicator per dimension group
(:class:`~ccsynth.collectives.multidim.PhasedRunner`), chunked and
pipelined, in the dimension orders that ``scheduler`` (``fixed``,
``themis``, ``themis-flex``, ``lp`` or ``auto``; :mod:`ccsynth.synth.multidim`)
picks for the message size. The plan is computed on every rank from the
same inputs and compared once (a checksum) before it first runs; a
mismatch raises :class:`~ccsynth.errors.PlanError` on every rank. Calls the
phases cannot run (other collectives, ops without a ccsynth kernel, GPU
buffers) take the usual path.

Example (any number of ranks)::

    >>> from mpi4py import MPI
    >>> import numpy as np
    >>> c = Communicator(MPI.COMM_SELF)
    >>> out = np.zeros(3)
    >>> c.Allreduce(np.arange(3.0), out, op=MPI.SUM)
    >>> out.tolist(), c.plan.meta
    ([0.0, 1.0, 2.0], {'default': True})

Under ``mpiexec -n 8``::

    c = Communicator(MPI.COMM_WORLD, topology="hierarchical:2x2x2@200,100,50", scheduler="themis")
    c.Allreduce(sendbuf, recvbuf, op=MPI.SUM)   # c.last_algorithm == "multidim:themis"
"""

from __future__ import annotations

import zlib

import numpy as np

from ccsynth.collectives import communicator as _runtime
from ccsynth.collectives.multidim import PhasedRunner
from ccsynth.collectives.phase_plan import PHASE_KINDS, PhasePlan
from ccsynth.errors import PlanError
from ccsynth.formats.files import get_topology
from ccsynth.kernels.base import DTYPES, is_device_array
from ccsynth.synth.default_plan import LazyDefaultPlan
from ccsynth.synth.multidim.phases import PhasePlanner

__all__ = ["Communicator"]


class Communicator(_runtime.Communicator):
    """mpi4py's buffer collectives, run by ccsynth schedules; without a plan, the built-in one.

    Takes the arguments of :class:`ccsynth.collectives.communicator.Communicator`;
    ``default_plan`` (the plan used while ``plan`` is None) defaults to
    :class:`~ccsynth.synth.default_plan.LazyDefaultPlan`, the classic
    algorithms per message size described in :mod:`ccsynth.synth.default_plan`.
    ``topology`` (a spec or a Topology with dimensions, of the communicator's
    size) and ``scheduler`` run allreduce, reduce-scatter and allgather as
    multi-dimension phases (see the module docstring); ``threads`` lets each
    dimension run on its own thread (``"auto"``: when MPI allows it).
    """

    def __init__(self, comm=None, plan=None, *, default_plan=None, topology=None, scheduler: str = "auto",
                 threads="auto", **options) -> None:
        planner = None
        if topology is not None:
            topo = get_topology(topology) if isinstance(topology, str) else topology
            planner = PhasePlanner(topo, scheduler)  # bad topologies and schedulers fail before any communication
        super().__init__(comm, plan, default_plan=default_plan if default_plan is not None else LazyDefaultPlan(),
                         **options)
        self._planner = planner
        self._phased = None
        self._agreed: dict[int, PhasePlan] = {}  # plans checked (kept, so that their ids stay unique)
        if planner is not None:
            if planner.topology.n_ranks != self.size:
                shape = "x".join(str(s) for s in planner.sizes)
                raise PlanError(f"topology {planner.topology.name!r} ({shape}) has {planner.topology.n_ranks} ranks "
                                f"but the communicator has {self.size}")
            self._phased = PhasedRunner(self._pcomm, planner.sizes, slice_bytes=self.slice_bytes, threads=threads)

    @property
    def scheduler(self) -> str | None:
        """The multi-dimension scheduler in use, or None without ``topology``."""
        return None if self._planner is None else self._planner.scheduler

    def Free(self) -> None:
        if self._phased is not None:
            self._phased.free()
            self._phased = None
        super().Free()

    def _run(self, kind, nbytes, m, dtype, opname, root, like, sendarr, recvarr, fallback, pre=None):
        phased = (self._phased is not None and kind in PHASE_KINDS and opname is not None
                  and (kind == "allgather" or dtype in DTYPES) and not is_device_array(like)
                  and sendarr is not None and recvarr is not None)
        if not phased:
            return super()._run(kind, nbytes, m, dtype, opname, root, like, sendarr, recvarr, fallback, pre)
        if self.debug:
            self._agree(kind, m, dtype, opname, root)
        plan = self._planner.plan(kind, nbytes)
        self._agree_plan(plan)
        if pre is not None:
            pre()
        self._phased.run(plan, sendarr, recvarr, opname)
        self.last_algorithm = f"multidim:{plan.scheduler}"

    def _agree_plan(self, plan: PhasePlan) -> None:
        """The first time a plan runs, every rank checks that all ranks derived the same one."""
        if id(plan) in self._agreed or self.size < 2:
            return
        h = zlib.crc32(plan.signature().encode()) & 0x7FFFFFFF
        v = np.array([h, -h], dtype=np.int64)
        out = np.empty_like(v)
        self._pcomm.Allreduce(v, out, op=self._MPI.MAX)
        if out[0] != -out[1]:
            raise PlanError(f"the ranks derived different multi-dimension plans for {plan.kind} "
                            f"(rank {self.rank}: {plan.scheduler}, {len(plan.chunks)} chunks)")
        if len(self._agreed) > 256:
            self._agreed.clear()
        self._agreed[id(plan)] = plan
