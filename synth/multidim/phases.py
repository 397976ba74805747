"""A multi-dimension schedule as the phase plan the MPI runtime executes (any number of ranks).

The runtime (:mod:`ccsynth.collectives.multidim`) runs a
:class:`~ccsynth.collectives.phase_plan.PhasePlan` on sub-communicators,
one per dimension group; it never imports the synthesizer, so everything it
needs is handed down as data: the chunks with their orders and algorithms,
the schedule order of the model (:attr:`~ccsynth.synth.multidim.pipeline.DimTiming.tasks`),
and for every (dimension, reduce-scatter or allgather, algorithm) used the
verified baseline schedule of that phase on the dimension's ``p`` ranks
(:func:`phase_schedule`: the ring or direct baseline of
:mod:`ccsynth.synth.baselines`, chunk factor 1, on one switch of the
dimension's figures -- the phase needs nothing of the group but a
connection between the ranks it pairs).

:func:`from_phase_plan` goes the other way, for a plan read from a file
(:mod:`ccsynth.formats.phase_plan_file`): the plan's chunks on the
topology's :class:`~ccsynth.synth.multidim.network.DimNet`, timed by the
dimension-level model in the plan's own task order
(:func:`~ccsynth.synth.multidim.pipeline.replay_tasks`) -- the price of the
file, equal to its scheduler's figure when the order is the scheduler's --
and ready for the IR lowering (:func:`~ccsynth.synth.multidim.lowering.to_schedule`).

:class:`PhasePlanner` is what the public communicator holds: a topology and
a scheduler, and a plan per (collective, size), computed once and
identical on every rank (a deterministic function of the three).

Example:
    >>> from ccsynth.topologies.catalog import hierarchical
    >>> planner = PhasePlanner(hierarchical([(2, 200), (2, 100), (2, 50)]), "themis")
    >>> plan = planner.plan("allreduce", 1 << 20)
    >>> plan.sizes, plan.dims, len(plan.tasks) == 6 * len(plan.chunks)
    ((2, 2, 2), (0, 1, 2), True)
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

from ccsynth.collectives.phase_plan import ChunkPhases, PhasePlan, PhaseSchedule, PhaseTask
from ccsynth.collectives.schedule import Schedule
from ccsynth.collectives.verify_phase_plan import PHASE_ALGORITHMS, phase_kinds
from ccsynth.collectives.spec import Collective
from ccsynth.errors import ScheduleError, TopologyError
from ccsynth.synth.baselines import make_baseline
from ccsynth.synth.multidim.chunks import ChunkPlan
from ccsynth.synth.multidim.cost import PhaseCosts
from ccsynth.synth.multidim.network import DimNet, dim_net
from ccsynth.synth.multidim.pipeline import replay_tasks
from ccsynth.synth.multidim.search import MultiDimSchedule, check_scheduler, schedule_multidim
from ccsynth.synth.solver import SolverOptions
from ccsynth.topologies.model import Switch, Topology

__all__ = ["phase_schedule", "phase_schedules", "to_phase_plan", "from_phase_plan", "PhasePlanner"]

#: plans a planner keeps (one per collective and size)
MAX_CACHED_PLANS = 256


@lru_cache(maxsize=64)
def phase_schedule(p: int, kind: str, algorithm: str) -> Schedule:
    """The verified ``algorithm`` (ring or direct) ``kind`` (reduce_scatter or allgather) on ``p`` ranks.

    >>> phase_schedule(4, "reduce_scatter", "ring").collective.describe()
    'reduce_scatter on 4 ranks, 1 chunk(s) per piece'
    """
    group = Topology(f"group{p}", p, switches=(Switch("group", tuple(range(p)), 1.0, 0.0),))
    return make_baseline(algorithm, Collective(kind, p, 1), group)


def phase_schedules(kind: str, chunks: Sequence[ChunkPhases], dim_sizes: Sequence[int]) -> tuple[PhaseSchedule, ...]:
    """The phase schedules that ``chunks`` use (every (dimension, phase kind, algorithm) once), on the active
    dimensions of sizes ``dim_sizes``: what a plan carries for the runtime; a plan file names only the algorithms.
    Unknown algorithms are left out (the verifier names them)."""
    used = sorted({(d, a) for c in chunks for d, a in zip(c.order, c.algorithms)
                   if 0 <= d < len(dim_sizes) and dim_sizes[d] >= 2 and a in PHASE_ALGORITHMS})
    return tuple(PhaseSchedule(d, k, a, phase_schedule(dim_sizes[d], k, a)) for d, a in used for k in phase_kinds(kind))


def to_phase_plan(md: MultiDimSchedule) -> PhasePlan:
    """The phase plan of ``md`` (see the module docstring)."""
    net = md.net
    chunks = tuple(ChunkPhases(c.order, c.algorithms, c.units) for c in md.chunks)
    tasks = tuple(PhaseTask(t.chunk, t.step) for t in md.timing.tasks)
    schedules = phase_schedules(md.kind, chunks, tuple(d.size for d in net.dims))
    return PhasePlan(md.kind, net.sizes, tuple(d.index for d in net.dims), chunks, tasks, schedules, md.scheduler,
                     {"model_us": md.makespan_us, "size_bytes": md.size_bytes, "topology": net.topology,
                      "origin": md.origin, "lp_bound_us": md.lp_bound_us})


def from_phase_plan(plan: PhasePlan, topology: Topology | DimNet, size_bytes: float) -> MultiDimSchedule:
    """``plan`` (verified) as a schedule on ``topology`` at ``size_bytes``, timed in its own task order (see
    the module docstring). Raises :class:`~ccsynth.errors.ScheduleError` where the plan does not fit the
    topology (its dimensions, or an algorithm a dimension cannot run: a ring where the groups have none)."""
    net = topology if isinstance(topology, DimNet) else dim_net(topology)
    if tuple(plan.sizes) != net.sizes or tuple(plan.dims) != tuple(d.index for d in net.dims):
        raise ScheduleError(f"phase plan for dimensions {'x'.join(map(str, plan.sizes))}; topology "
                            f"{net.topology!r} has {'x'.join(map(str, net.sizes))}")
    for k, c in enumerate(plan.chunks):
        for d, a in zip(c.order, c.algorithms):
            if a not in net.dims[d].algorithms:
                raise ScheduleError(f"phase plan: chunk {k} runs {a} on dimension {d} ({net.dims[d].name}), which "
                                    f"on {net.topology!r} runs {' or '.join(net.dims[d].algorithms)} only")
    chunks = tuple(ChunkPlan(tuple(c.order), tuple(c.algorithms), c.units) for c in plan.chunks)
    timing = replay_tasks(net, PhaseCosts(net), plan.kind, size_bytes, chunks, [(t.chunk, t.step) for t in plan.tasks])
    lp_bound = plan.meta.get("lp_bound_us")
    return MultiDimSchedule(plan.scheduler or "file", plan.kind, float(size_bytes), net, chunks, timing,
                            lp_bound_us=lp_bound if isinstance(lp_bound, (int, float)) else None,
                            origin=str(plan.meta.get("origin", "")))


class PhasePlanner:
    """Phase plans for one topology and scheduler, per collective and size (see the module docstring).

    Raises :class:`~ccsynth.errors.TopologyError` for a topology without
    dimensions or one of another rank count than ``n_ranks`` (when given),
    :class:`~ccsynth.errors.CollectiveError` for an unknown scheduler.
    """

    def __init__(self, topology: Topology, scheduler: str = "auto", *, n_ranks: int | None = None,
                 options: SolverOptions | None = None):
        self.scheduler = check_scheduler(scheduler)
        if n_ranks is not None and topology.n_ranks != n_ranks:
            shape = "x".join(str(d.size) for d in topology.dims) or str(topology.n_ranks)
            raise TopologyError(f"topology {topology.name!r} ({shape}) has {topology.n_ranks} ranks but the "
                                f"communicator has {n_ranks}")
        self.topology = topology
        self.net: DimNet = dim_net(topology)
        self.options = options
        self._plans: dict[tuple[str, int], PhasePlan] = {}

    @property
    def sizes(self) -> tuple[int, ...]:
        return self.net.sizes

    def plan(self, kind: str, nbytes: int) -> PhasePlan:
        """The plan of ``kind`` for a message of ``nbytes`` (nccl-tests size; at least 1 byte is planned)."""
        key = (kind, int(nbytes))
        hit = self._plans.get(key)
        if hit is None:
            if len(self._plans) >= MAX_CACHED_PLANS:
                self._plans.clear()
            md = schedule_multidim(self.net, kind, max(1, int(nbytes)), self.scheduler, options=self.options)
            hit = self._plans[key] = to_phase_plan(md)
        return hit
