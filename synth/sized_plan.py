"""A plan synthesized for a range of message sizes: synthesize at every size, keep the fastest per range.

:func:`synthesize_plan` is what ``ccsynth synth --sizes`` and
``ccsynth.synthesize(..., sizes=...)`` do (both call it: one code path):
synthesize a schedule at every size
(:func:`~ccsynth.synth.synthesize.synthesize`, without the comparison with
baselines), add every applicable baseline at its own best chunk factor per
size (:func:`~ccsynth.synth.baseline_search.plan_baselines`) and the
default plan's own algorithm, and let :func:`~ccsynth.synth.tables.build_plan`
keep the fastest in simulation per size range -- the default plan's choice
unless another is predicted faster by more than the model's error
(:data:`~ccsynth.synth.tables.DEFAULT_MARGIN`). Synthesized schedules are named ``ccsynth@<size>`` and
baselines ``<name>(c=<chunk factor>)``, so the plan says what won where.

:func:`synthesize_sized` is the same computation returning the pieces as
well (a :class:`SizedPlan`: the synthesized schedule per size, the
baselines per size, the synthesis time), which is what the command line
tabulates; its two hooks let a caller show progress without this module
printing anything: ``stage_progress(size)`` gives the synthesizer's
progress callback for one size (e.g. with the size as a prefix), and
``on_size(result)`` is called as each size finishes (a ``[k/N]`` counter).
A third, ``judge(ranked)``, picks each size's schedule from the ranked
candidates (default: the fastest in the IR, verified); the command line
passes the formats layer's judgement in written form
(:func:`ccsynth.formats.written.best_written`), which returns the schedule
as the file holds it, so the plan's predictions are those of the files.

Example:
    >>> from ccsynth.collectives.spec import Collective
    >>> from ccsynth.topologies.model import Link, Topology
    >>> t = Topology("r4", 4, links=tuple(Link(a, b, 1.0, 10.0) for a in range(4) for b in range(4) if a != b))
    >>> plan = synthesize_plan(t, Collective("allgather", 4), [4096, 1 << 20])
    >>> plan.select("allgather", 4, 1 << 20) is not None
    True
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from ccsynth.collectives.plan import Plan
from ccsynth.collectives.schedule import Schedule
from ccsynth.collectives.spec import Collective
from ccsynth.errors import PlanError
from ccsynth.synth.baseline_search import BaselineChoice, plan_baselines
from ccsynth.synth.sketch import Sketch
from ccsynth.synth.solver import SolverOptions
from ccsynth.synth.synthesize import ProgressFn, RankedCandidates, synthesize_candidates
from ccsynth.synth.tables import DEFAULT_MARGIN, build_plan
from ccsynth.topologies.model import Topology
from ccsynth.units import format_size

__all__ = ["SizedSchedule", "SizedPlan", "synthesize_sized", "synthesize_plan", "renamed"]


@dataclass(frozen=True)
class SizedSchedule:
    """The schedule synthesized for one size (named ``ccsynth@<size>``) and the seconds it took."""

    size_bytes: int
    schedule: Schedule
    seconds: float


@dataclass(frozen=True)
class SizedPlan:
    """What :func:`synthesize_sized` computed: the plan and the candidates it was built from.

    ``baselines`` maps every size to every applicable baseline at its best
    chunk factor there, fastest first; ``synthesis_s`` is the time of the
    synthesis over all sizes (without the baselines and the plan).
    """

    plan: Plan
    synthesized: tuple[SizedSchedule, ...]
    baselines: Mapping[int, list[BaselineChoice]]
    synthesis_s: float


def renamed(schedule: Schedule, name: str) -> Schedule:
    """``schedule`` under another name (what a plan row shows)."""
    s = schedule
    return Schedule(name, s.collective, s.ops, s.scratch_chunks, s.topology, s.meta)


def synthesize_sized(
    topology: Topology,
    collective: Collective,
    sizes: Sequence[int],
    sketch: Sketch | None = None,
    options: SolverOptions | None = None,
    *,
    contiguity: bool = True,
    stage_progress: Callable[[int], ProgressFn | None] | None = None,
    on_size: Callable[[SizedSchedule], None] | None = None,
    default_margin: float | str | None = DEFAULT_MARGIN,
    judge: Callable[[RankedCandidates], Schedule] | None = None,
) -> SizedPlan:
    """:func:`synthesize_plan` with its pieces (see the module docstring for the hooks)."""
    values = sorted({int(s) for s in sizes})
    if not values or values[0] <= 0:
        raise PlanError(f"sizes must be positive byte counts, got {list(sizes)!r}")
    t0 = time.perf_counter()
    synthesized = []
    for size in values:
        t1 = time.perf_counter()
        ranked = synthesize_candidates(topology, collective, sketch, options, size,
                                       progress=stage_progress(size) if stage_progress is not None else None,
                                       contiguity=contiguity, compare_baselines=False)
        s = judge(ranked) if judge is not None else ranked.choose(ranked.best)
        done = SizedSchedule(size, renamed(s, f"ccsynth@{format_size(size)}"), time.perf_counter() - t1)
        synthesized.append(done)
        if on_size is not None:
            on_size(done)
    seconds = time.perf_counter() - t0
    per_size = plan_baselines(Collective(collective.kind, topology.n_ranks), topology, values)
    baselines = [renamed(c.schedule, f"{c.name}(c={c.chunk_factor})")
                 for c in {(c.name, c.chunk_factor): c for cs in per_size.values() for c in cs}.values()]
    plan = build_plan([d.schedule for d in synthesized] + baselines, topology, values, default_margin=default_margin)
    return SizedPlan(plan, tuple(synthesized), {int(k): v for k, v in per_size.items()}, seconds)


def synthesize_plan(
    topology: Topology,
    collective: Collective,
    sizes: Sequence[int],
    sketch: Sketch | None = None,
    options: SolverOptions | None = None,
    *,
    contiguity: bool = True,
    progress: ProgressFn | None = None,
    default_margin: float | str | None = DEFAULT_MARGIN,
    judge: Callable[[RankedCandidates], Schedule] | None = None,
) -> Plan:
    """A :class:`Plan` for ``collective`` on ``topology``: the fastest schedule per size range of ``sizes``.

    The default plan's algorithm stays at a size unless a candidate is predicted faster by more than
    ``default_margin`` (:func:`~ccsynth.synth.tables.build_plan`; None: the fastest wins); ``judge``: see
    :func:`synthesize_sized`.
    """
    return synthesize_sized(topology, collective, sizes, sketch, options, contiguity=contiguity,
                            stage_progress=(lambda _size: progress) if progress is not None else None,
                            default_margin=default_margin, judge=judge).plan
