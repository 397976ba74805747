"""A phase plan file as the communicator's phase source: ``ccsynth.Communicator(comm, plan="plan.json")``.

The drop-in communicator runs allreduce, reduce-scatter and allgather on a
multi-dimension network from a *phase source* (:mod:`ccsynth.collectives.phased_calls`:
``sizes``, ``scheduler``, ``plan(kind, nbytes)``). :class:`FilePhases` is
one built from a phase plan file (:mod:`.phase_plan_file`): the file's
plan for its own collective at every size (its chunks are shares of the
buffer, so it runs at any count), and for the other two collectives the
plans its scheduler makes on the same topology
(:class:`~ccsynth.synth.multidim.phases.PhasePlanner`). Every rank reads the
same file, so every rank runs the same plan; the communicator still
compares the plans' checksums before a plan first runs.

The plan is verified against the topology (its ranks, dimensions, and the
algorithms each dimension runs) before any communication.

Example:
    >>> from ccsynth.topologies.catalog import hierarchical
    >>> from ccsynth.synth.multidim.search import schedule_multidim
    >>> from ccsynth.formats.phase_plan_file import phase_plan_file
    >>> t = hierarchical([(2, 100), (2, 50)])
    >>> src = FilePhases(phase_plan_file(schedule_multidim(t, "allreduce", 1 << 20, "themis")), t, n_ranks=4)
    >>> src.sizes, src.plan("allreduce", 12).kind, src.plan("allgather", 12).kind
    ((2, 2), 'allreduce', 'allgather')
"""

from __future__ import annotations

from ccsynth.collectives.phase_plan import PhasePlan
from ccsynth.collectives.verify_phase_plan import verify_phase_plan
from ccsynth.errors import CollectiveError, TopologyError
from ccsynth.formats.phase_plan_file import PhasePlanFile
from ccsynth.synth.multidim.phases import PhasePlanner, from_phase_plan
from ccsynth.synth.multidim.search import check_scheduler
from ccsynth.synth.solver import SolverOptions
from ccsynth.topologies.model import Topology

__all__ = ["FilePhases"]


class FilePhases:
    """The phase source of a phase plan file on ``topology`` (see the module docstring).

    Raises :class:`~ccsynth.errors.ScheduleError` for a plan that does not
    implement its collective or does not fit the topology, and
    :class:`~ccsynth.errors.TopologyError` for a communicator of another
    size than the plan's (``n_ranks``).
    """

    def __init__(self, pf: PhasePlanFile, topology: Topology, *, n_ranks: int | None = None,
                 options: SolverOptions | None = None):
        if n_ranks is not None and pf.n_ranks != n_ranks:
            raise TopologyError(f"the phase plan is for {pf.n_ranks} ranks but the communicator has {n_ranks}")
        verify_phase_plan(pf.plan, topology, n_ranks=pf.n_ranks, total_units=pf.total_units)
        from_phase_plan(pf.plan, topology, pf.size_bytes)  # every dimension runs the algorithms the plan gives it
        try:
            scheduler = check_scheduler(pf.plan.scheduler)
        except CollectiveError:
            scheduler = "auto"  # a plan from elsewhere: the other collectives get the fastest in the model
        self.file = pf
        self._others = PhasePlanner(topology, scheduler, n_ranks=n_ranks, options=options)

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(self.file.plan.sizes)

    @property
    def scheduler(self) -> str:
        return self.file.plan.scheduler or "file"

    def plan(self, kind: str, nbytes: int) -> PhasePlan:
        """The file's plan for its collective; the planner's for the others."""
        if kind == self.file.plan.kind:
            return self.file.plan
        return self._others.plan(kind, nbytes)
