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

A phase plan file (``ccsynth synth --scheduler ... -o plan.json`` where it
writes one, ``format: ccsynth.phase_plan``) runs the same way: ``plan=``
its path (or a :class:`~ccsynth.formats.phase_plan_file.PhasePlanFile`)
makes it the phase source (:class:`~ccsynth.formats.phase_plan_source.FilePhases`):
the file's plan for its collective at every size, its scheduler's plans
for the other two, on the topology the file names (or ``topology=``),
verified against it before any communication.

Under ``mpiexec -n 8``::

    c = Communicator(MPI.COMM_WORLD, topology="hierarchical:2x2x2@200,100,50", scheduler="themis")
    c.Allreduce(sendbuf, recvbuf, op=MPI.SUM)   # c.last_algorithm == "multidim:themis"
    c = Communicator(MPI.COMM_WORLD, plan="plan.json")   # a phase plan file for 8 ranks
"""

from __future__ import annotations

import os

from ccsynth.collectives import communicator as _runtime
from ccsynth.collectives.mpi_util import comm_to_wrap
from ccsynth.errors import TopologyError
from ccsynth.formats.files import file_kind, get_topology, load_phase_plan
from ccsynth.formats.phase_plan_file import PhasePlanFile
from ccsynth.formats.phase_plan_source import FilePhases
from ccsynth.topologies.model import Topology
from ccsynth.synth.default_plan import LazyDefaultPlan
from ccsynth.synth.multidim.phases import PhasePlanner

__all__ = ["Communicator"]


class Communicator(_runtime.Communicator):
    """:class:`ccsynth.collectives.communicator.Communicator` with the built-in default plan.

    ``default_plan`` (the plan used while ``plan`` is None) defaults to
    :class:`~ccsynth.synth.default_plan.LazyDefaultPlan`, the classic
    algorithms per message size described in :mod:`ccsynth.synth.default_plan`.
    ``topology`` (a spec or a Topology with dimensions, of the communicator's
    size) and ``scheduler`` run allreduce, reduce-scatter and allgather as
    multi-dimension phases (see the module docstring); ``threads`` lets each
    dimension run on its own thread (``"auto"``: when MPI allows it).
    Raises :class:`~ccsynth.errors.TopologyError` (a topology without
    dimensions, or of another rank count) and
    :class:`~ccsynth.errors.CollectiveError` (an unknown scheduler) on every
    rank, before any communication.
    """

    def __init__(self, comm=None, plan=None, *, default_plan=None, topology=None, scheduler: str = "auto",
                 threads="auto", **options) -> None:
        planner: PhasePlanner | FilePhases | None = None
        phase_file = _phase_plan_file(plan)
        if phase_file is not None:
            topo = topology if isinstance(topology, Topology) else get_topology(topology or phase_file.topology)
            size = comm_to_wrap(comm).Get_size()
            planner, plan = FilePhases(phase_file, topo, n_ranks=size), None  # checked before any communication
        elif topology is not None:
            topo = get_topology(topology) if isinstance(topology, str) else topology
            size = comm_to_wrap(comm).Get_size()
            planner = PhasePlanner(topo, scheduler, n_ranks=size)  # bad input fails before any communication
        elif scheduler != "auto":
            raise TopologyError("scheduler= needs topology= (a topology with dimensions, e.g. "
                                "'hierarchical:2x2x2@200,100,50')")
        super().__init__(comm, plan, default_plan=default_plan if default_plan is not None else LazyDefaultPlan(),
                         phases=planner, phase_threads=threads, **options)
        self._planner = planner

    @property
    def scheduler(self) -> str | None:
        """The multi-dimension scheduler in use, or None without ``topology``."""
        return None if self._planner is None else self._planner.scheduler


def _phase_plan_file(plan) -> PhasePlanFile | None:
    """``plan`` as a phase plan file where it is one (a PhasePlanFile, or the path of a ``ccsynth.phase_plan``)."""
    if isinstance(plan, PhasePlanFile):
        return plan
    if isinstance(plan, (str, os.PathLike)) and os.path.isfile(plan) and file_kind(plan) == "phase_plan":
        return load_phase_plan(plan, verify=False)  # FilePhases verifies it against the topology
    return None

