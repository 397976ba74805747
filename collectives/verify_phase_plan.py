"""Prove that a phase plan implements its collective, without expanding it to ranks.

A :class:`~ccsynth.collectives.phase_plan.PhasePlan` names per chunk a
reduce-scatter order of the network's dimensions and per dimension group a
phase schedule; the collective follows by composition, so the proof is
about the plan's structure, in the style of :mod:`ccsynth.collectives.verify`
(numbered stages, one small function each, the first problem raised as a
:class:`~ccsynth.errors.ScheduleError` that names the chunk and phase):

1. *dimensions* -- every size is at least 1, the sizes make the ranks a
   file declares, and the active dimensions are exactly the ones of size 2
   or more, in ascending order (and, with a topology, the plan's ranks and
   dimension sizes are the topology's);
2. *chunks* -- each chunk's order names every active dimension exactly
   once, each phase by a known per-dimension algorithm (``ring`` or
   ``direct``), and the chunk holds at least one unit;
3. *shares* -- the chunks' units sum to the plan's total (with
   ``total_units``, what the file declares): no bytes lost or counted twice;
4. *tasks* -- the schedule order lists every phase of every chunk once, each
   after the chunk's phase before it (so the run cannot deadlock: see
   :mod:`ccsynth.synth.multidim.pipeline`);
5. *phase schedules* -- for every (dimension, reduce-scatter or allgather,
   algorithm) a phase uses, the plan carries a schedule on the dimension's
   ``p`` ranks that :func:`~ccsynth.collectives.verify.verify` proves.

Why that suffices: the layout (:meth:`PhasePlan.slot`) reads a rank's
coordinates as digits in the chunk's order, so a reduce-scatter phase on
dimension ``d`` leaves each rank ``1/p_d`` of its range, summed over its
group; after one phase per active dimension each rank holds its own slot,
reduced over every rank (stages 1-2, 5). Allgather runs the same phases in
the reverse order, each multiplying a rank's range by ``p_d``, and
allreduce runs one then the other. Stage 3 makes the chunks tile the
buffer, stage 4 runs them.

Example:
    >>> from ccsynth.collectives.phase_plan import ChunkPhases, PhasePlan, PhaseTask
    >>> plan = PhasePlan("reduce_scatter", (2, 2), (0, 1), (ChunkPhases((1,), ("direct",)),),
    ...                  (PhaseTask(0, 0),), ())
    >>> verify_phase_plan(plan)
    Traceback (most recent call last):
        ...
    ccsynth.errors.ScheduleError: phase plan: chunk 0 misses dimension 0 (size 2) in its order [1]
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from ccsynth.collectives.phase_plan import PhasePlan
from ccsynth.collectives.verify import verify
from ccsynth.errors import ScheduleError

if TYPE_CHECKING:  # pragma: no cover
    from ccsynth.topologies.model import Topology

__all__ = ["PHASE_ALGORITHMS", "PhasePlanReport", "verify_phase_plan", "phase_kinds", "describe_phase"]

#: the per-dimension algorithms a phase runs
PHASE_ALGORITHMS = ("ring", "direct")


@dataclass(frozen=True)
class PhasePlanReport:
    """What :func:`verify_phase_plan` proved."""

    n_ranks: int
    n_chunks: int
    n_tasks: int
    total_units: int
    dimensions: tuple[int, ...]  # the active dimensions' sizes
    phase_schedules: int
    ok: bool = True

    def to_dict(self) -> dict:
        return {**asdict(self), "dimensions": list(self.dimensions)}


def phase_kinds(kind: str) -> tuple[str, ...]:
    """The phase collectives ``kind`` runs: allreduce both, the others themselves."""
    return ("reduce_scatter", "allgather") if kind == "allreduce" else (kind,)


def describe_phase(plan: PhasePlan, chunk: int, i: int) -> str:
    """``phase 2 of chunk 5 (allgather on dimension 1, size 8)`` (the chunk's order must be valid)."""
    level, reduce = plan.step(chunk, i)
    d = plan.chunks[chunk].order[level]
    what = "reduce-scatter" if reduce else "allgather"
    return f"phase {i} of chunk {chunk} ({what} on dimension {d}, size {plan.sizes[plan.dims[d]]})"


def verify_phase_plan(plan: PhasePlan, topology: Topology | None = None, *, n_ranks: int | None = None,
                      total_units: int | None = None) -> PhasePlanReport:
    """Prove ``plan`` (see the module docstring); raises :class:`~ccsynth.errors.ScheduleError` at the first
    problem. ``topology``: also check its ranks and dimensions; ``n_ranks`` and ``total_units``: what a file
    declares, the ranks its dimensions must make and the units its chunks must sum to."""
    _check_dimensions(plan, topology, n_ranks)
    _check_chunks(plan)
    _check_shares(plan, total_units)
    _check_tasks(plan)
    n_schedules = _check_phase_schedules(plan)
    return PhasePlanReport(plan.n_ranks, len(plan.chunks), len(plan.tasks), plan.total_units,
                           tuple(plan.sizes[d] for d in plan.dims), n_schedules)


# ------------------------------------------------------------------ 1. dimensions
def _check_dimensions(plan: PhasePlan, topology: Topology | None, n_ranks: int | None) -> None:
    if not plan.sizes or any(s < 1 for s in plan.sizes):
        raise ScheduleError(f"phase plan: dimension sizes {list(plan.sizes)} must be positive")
    shape = "x".join(map(str, plan.sizes))
    if n_ranks is not None and n_ranks != plan.n_ranks:
        raise ScheduleError(f"phase plan: it declares {n_ranks} ranks, but its dimensions {shape} make "
                            f"{plan.n_ranks}")
    active = tuple(i for i, s in enumerate(plan.sizes) if s >= 2)
    if tuple(plan.dims) != active:
        raise ScheduleError(f"phase plan: its active dimensions are {list(plan.dims)}, but the dimensions of size 2 "
                            f"or more among sizes {list(plan.sizes)} are {list(active)}")
    if topology is None:
        return
    if topology.n_ranks != plan.n_ranks:
        raise ScheduleError(f"phase plan for {plan.n_ranks} ranks ({shape}); topology {topology.name!r} has "
                            f"{topology.n_ranks}")
    sizes = tuple(d.size for d in topology.dims)
    if sizes != tuple(plan.sizes):
        raise ScheduleError(f"phase plan for dimensions {shape}; topology {topology.name!r} has "
                            f"{'x'.join(map(str, sizes)) or 'none'}")


# ------------------------------------------------------------------ 2. chunks
def _check_chunks(plan: PhasePlan) -> None:
    if not plan.chunks:
        raise ScheduleError("phase plan: it has no chunks")
    n = len(plan.dims)
    for k, c in enumerate(plan.chunks):
        order = list(c.order)
        for d in order:
            if not 0 <= d < n:
                raise ScheduleError(f"phase plan: chunk {k} names dimension {d} in its order {order}; the plan has "
                                    f"{n} active dimension(s), 0 to {n - 1}")
        for d in sorted(range(n), key=lambda d: order.count(d) != 0):  # a missing dimension first: the real news
            times = order.count(d)
            if times != 1:
                what = "misses" if times == 0 else f"names {times} times"
                raise ScheduleError(f"phase plan: chunk {k} {what} dimension {d} (size {plan.sizes[plan.dims[d]]}) "
                                    f"in its order {order}")
        if len(c.algorithms) != n:
            raise ScheduleError(f"phase plan: chunk {k} has {len(c.algorithms)} algorithm(s) for its {n} phases "
                                f"{list(c.algorithms)}")
        for level, a in enumerate(c.algorithms):
            if a not in PHASE_ALGORITHMS:
                raise ScheduleError(f"phase plan: chunk {k}'s phase on dimension {order[level]} runs {a!r}; a phase "
                                    f"runs {' or '.join(PHASE_ALGORITHMS)}")
        if isinstance(c.units, bool) or not isinstance(c.units, int) or c.units < 1:
            raise ScheduleError(f"phase plan: chunk {k} holds {c.units!r} units; a chunk holds a positive whole number")


# ------------------------------------------------------------------ 3. shares
def _check_shares(plan: PhasePlan, total_units: int | None) -> None:
    if total_units is not None and plan.total_units != total_units:
        raise ScheduleError(f"phase plan: its chunks hold {plan.total_units} units in all, but it declares "
                            f"{total_units}: some of the buffer is "
                            f"{'missing' if plan.total_units < total_units else 'counted twice'}")


# ------------------------------------------------------------------ 4. tasks
def _check_tasks(plan: PhasePlan) -> None:
    steps = plan.steps_per_chunk
    done = [0] * len(plan.chunks)  # phases of each chunk listed so far
    for t in plan.tasks:
        if not 0 <= t.chunk < len(plan.chunks):
            raise ScheduleError(f"phase plan: a task names chunk {t.chunk}; the plan has {len(plan.chunks)}")
        if not 0 <= t.step < steps:
            raise ScheduleError(f"phase plan: a task names phase {t.step} of chunk {t.chunk}; a chunk of a "
                                f"{plan.kind} has {steps} phases, 0 to {steps - 1}")
        if t.step < done[t.chunk]:
            raise ScheduleError(f"phase plan: {describe_phase(plan, t.chunk, t.step)} is listed twice")
        if t.step > done[t.chunk]:
            raise ScheduleError(f"phase plan: {describe_phase(plan, t.chunk, t.step)} comes before "
                                f"{describe_phase(plan, t.chunk, done[t.chunk])}")
        done[t.chunk] += 1
    for k, got in enumerate(done):
        if got < steps:
            raise ScheduleError(f"phase plan: {describe_phase(plan, k, got)} is missing from its tasks")


# ------------------------------------------------------------------ 5. phase schedules
def _check_phase_schedules(plan: PhasePlan) -> int:
    used = sorted({(d, a) for c in plan.chunks for d, a in zip(c.order, c.algorithms)})
    proven = 0
    for d, a in used:
        p = plan.sizes[plan.dims[d]]
        for kind in phase_kinds(plan.kind):
            found = [s for s in plan.schedules if (s.dim, s.kind, s.algorithm) == (d, kind, a)]
            if not found:
                raise ScheduleError(f"phase plan: no {a} {kind} schedule for dimension {d} (size {p}), which its "
                                    f"chunks use")
            sched = found[0].schedule
            coll = sched.collective
            if coll.kind != kind or coll.n_ranks != p:
                raise ScheduleError(f"phase plan: the {a} {kind} schedule of dimension {d} is a "
                                    f"{coll.describe()}; the phase needs a {kind} on {p} ranks")
            try:
                verify(sched)
            except ScheduleError as e:
                raise ScheduleError(f"phase plan: the {a} {kind} schedule of dimension {d} (size {p}): {e}") from None
            proven += 1
    return proven
