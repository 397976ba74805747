"""The phase plan: a multi-dimension collective as plain data the MPI runtime executes.

A network with dimensions runs reduce-scatter, allgather and allreduce as
one *phase* per dimension (a reduce-scatter or an allgather among the ranks
that differ in that coordinate only), on chunks of the buffer that may each
take their own dimension order. Which orders, which chunks and which
per-dimension algorithm is the synthesizer's business
(:mod:`ccsynth.synth.multidim`); this module only says what was decided,
so that the runtime (:mod:`ccsynth.collectives.multidim`), a layer below,
can run it without knowing how:

* ``sizes``: every dimension's size (ranks take mixed-radix coordinates in
  rank order, dimension 0 varying fastest); ``dims`` the active ones (size
  at least 2), which chunk orders name by position;
* ``chunks``: per chunk its share of the buffer in ``units``, its
  reduce-scatter ``order`` and the per-dimension algorithm of each of those
  phases (the allgather phases run the order reversed, each with the
  algorithm of the reduce-scatter phase on the same dimension);
* ``tasks``: every (chunk, phase) in *schedule order*: each phase after
  the chunk's previous one, and each dimension's phases in the order the
  dimension runs them. Every rank runs the tasks of a dimension in this
  order, so the plan cannot deadlock whatever overlaps (see
  :mod:`ccsynth.synth.multidim.pipeline`);
* ``schedules``: per (dimension, reduce_scatter | allgather, algorithm)
  the verified :class:`~ccsynth.collectives.schedule.Schedule` of that
  phase on the dimension's ``p`` ranks (chunk factor 1), which the runtime
  compiles once per sub-communicator.

Layout inside a chunk (the same everywhere: the IR lowering, this plan and
the runtime): the chunk is ``n`` slots, one per rank; the slot of a rank is
its coordinates read as digits in the chunk's reduce-scatter order, the
first dimension most significant; so every phase's blocks are contiguous.

A plan made by the synthesizer is valid by construction; one read from a
file (``ccsynth.phase_plan``, :mod:`ccsynth.formats.phase_plan_file`) is
proven by :func:`~ccsynth.collectives.verify_phase_plan.verify_phase_plan`
before it runs: every chunk's phases cover every active dimension once,
its tasks list every phase once after the phase before it, its shares sum
to the whole buffer, its phase schedules implement their collectives, its
ranks and dimensions are the topology's.

Example:
    >>> plan = PhasePlan("allreduce", (2, 2), (0, 1), (ChunkPhases((1, 0), ("direct", "direct"), 1),),
    ...                  (PhaseTask(0, 0), PhaseTask(0, 1), PhaseTask(0, 2), PhaseTask(0, 3)), ())
    >>> plan.n_ranks, plan.slot(3, 0), [plan.step(0, i) for i in range(4)]   # (level in the order, reduce)
    (4, 3, [(0, True), (1, True), (1, False), (0, False)])
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ccsynth.collectives.schedule import Schedule
from ccsynth.errors import PlanError

__all__ = ["PHASE_KINDS", "ChunkPhases", "PhaseTask", "PhaseSchedule", "PhasePlan"]

#: the collectives a phase plan runs
PHASE_KINDS = ("allreduce", "reduce_scatter", "allgather")


@dataclass(frozen=True)
class ChunkPhases:
    """One chunk: its reduce-scatter order (positions in ``PhasePlan.dims``), the algorithm per phase, its units."""

    order: tuple[int, ...]
    algorithms: tuple[str, ...]
    units: int = 1


@dataclass(frozen=True)
class PhaseTask:
    """Phase ``step`` of chunk ``chunk`` (steps count reduce-scatter phases first, then allgather's)."""

    chunk: int
    step: int


@dataclass(frozen=True)
class PhaseSchedule:
    """The schedule one phase runs: dimension position, ``reduce_scatter`` or ``allgather``, algorithm."""

    dim: int
    kind: str
    algorithm: str
    schedule: Schedule


@dataclass(frozen=True)
class PhasePlan:
    """A multi-dimension collective, decided (see the module docstring)."""

    kind: str
    sizes: tuple[int, ...]
    dims: tuple[int, ...]
    chunks: tuple[ChunkPhases, ...]
    tasks: tuple[PhaseTask, ...]
    schedules: tuple[PhaseSchedule, ...]
    scheduler: str = ""
    meta: dict = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        # the kind decides what every step means; the rest is the verifier's
        # (:func:`ccsynth.collectives.verify_phase_plan.verify_phase_plan`, errors naming chunk and phase), which
        # every plan read from a file passes before it runs
        if self.kind not in PHASE_KINDS:
            raise PlanError(f"a phase plan runs {', '.join(PHASE_KINDS)}; got {self.kind!r}")

    @property
    def n_ranks(self) -> int:
        return math.prod(self.sizes)

    @property
    def total_units(self) -> int:
        return sum(c.units for c in self.chunks)

    @property
    def steps_per_chunk(self) -> int:
        return 2 * len(self.dims) if self.kind == "allreduce" else len(self.dims)

    def stride(self, d: int) -> int:
        """Rank distance between neighbouring coordinates of active dimension ``d``."""
        return math.prod(self.sizes[: self.dims[d]])

    def coordinate(self, rank: int, d: int) -> int:
        return (rank // self.stride(d)) % self.sizes[self.dims[d]]

    def slot(self, rank: int, chunk: int) -> int:
        """The slot of ``rank`` in chunk ``chunk`` (see the module docstring)."""
        j = 0
        for d in self.chunks[chunk].order:
            j = j * self.sizes[self.dims[d]] + self.coordinate(rank, d)
        return j

    def step(self, chunk: int, i: int) -> tuple[int, bool]:
        """``(level, reduce)`` of phase ``i`` of ``chunk``: the position in its order, and reduce-scatter or not."""
        n_dims = len(self.dims)
        if self.kind == "allreduce":
            return (i, True) if i < n_dims else (2 * n_dims - 1 - i, False)
        if self.kind == "reduce_scatter":
            return i, True
        return n_dims - 1 - i, False

    def schedule_for(self, d: int, kind: str, algorithm: str) -> Schedule:
        for s in self.schedules:
            if (s.dim, s.kind, s.algorithm) == (d, kind, algorithm):
                return s.schedule
        raise PlanError(f"phase plan has no {algorithm} {kind} schedule for dimension {d}")

    def signature(self) -> str:
        """A text that two ranks' plans share exactly when they run the same phases in the same order."""
        parts = [self.kind, ",".join(map(str, self.sizes)), ",".join(map(str, self.dims))]
        parts += [f"{'-'.join(map(str, c.order))}:{'-'.join(c.algorithms)}:{c.units}" for c in self.chunks]
        parts.append(" ".join(f"{t.chunk}.{t.step}" for t in self.tasks))
        return "|".join(parts)
