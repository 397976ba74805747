"""A plan synthesized for a range of message sizes: synthesize at every size, keep the fastest per range.

:func:`synthesize_plan` is what ``ccsynth synth --sizes`` and
``ccsynth.synthesize(..., sizes=...)`` do: synthesize a schedule at every
size (:func:`~ccsynth.synth.synthesize.synthesize`, without the comparison
with baselines), add every applicable baseline at its own best chunk factor
per size (:func:`~ccsynth.synth.baseline_search.plan_baselines`) and the
default plan's own algorithm, and let :func:`~ccsynth.synth.tables.build_plan`
keep the fastest in simulation per size range -- the default plan's choice
unless another is predicted faster by more than the model's error
(:data:`~ccsynth.synth.tables.DEFAULT_MARGIN`). Synthesized schedules are named ``ccsynth@<size>`` and
baselines ``<name>(c=<chunk factor>)``, so the plan says what won where.

Example:
    >>> from ccsynth.collectives.spec import Collective
    >>> from ccsynth.topologies.model import Link, Topology
    >>> t = Topology("r4", 4, links=tuple(Link(a, b, 1.0, 10.0) for a in range(4) for b in range(4) if a != b))
    >>> plan = synthesize_plan(t, Collective("allgather", 4), [4096, 1 << 20])
    >>> plan.select("allgather", 4, 1 << 20) is not None
    True
"""

from __future__ import annotations

from collections.abc import Sequence

from ccsynth.collectives.plan import Plan
from ccsynth.collectives.schedule import Schedule
from ccsynth.collectives.spec import Collective
from ccsynth.errors import PlanError
from ccsynth.synth.baseline_search import plan_baselines
from ccsynth.synth.sketch import Sketch
from ccsynth.synth.solver import SolverOptions
from ccsynth.synth.synthesize import ProgressFn, synthesize
from ccsynth.synth.tables import DEFAULT_MARGIN, build_plan
from ccsynth.units import format_size

__all__ = ["synthesize_plan", "renamed"]


def renamed(schedule: Schedule, name: str) -> Schedule:
    """``schedule`` under another name (what a plan row shows)."""
    s = schedule
    return Schedule(name, s.collective, s.ops, s.scratch_chunks, s.topology, s.meta)


def synthesize_plan(
    topology,
    collective: Collective,
    sizes: Sequence[int],
    sketch: Sketch | None = None,
    options: SolverOptions | None = None,
    *,
    contiguity: bool = True,
    progress: ProgressFn | None = None,
    default_margin: float | None = DEFAULT_MARGIN,
) -> Plan:
    """A :class:`Plan` for ``collective`` on ``topology``: the fastest schedule per size range of ``sizes``.

    The default plan's algorithm stays at a size unless a candidate is predicted faster by more than
    ``default_margin`` (:func:`~ccsynth.synth.tables.build_plan`; None: the fastest wins).
    """
    sizes = sorted({int(s) for s in sizes})
    if not sizes or sizes[0] <= 0:
        raise PlanError(f"sizes must be positive byte counts, got {list(sizes)!r}")
    synthesized = []
    for size in sizes:
        s = synthesize(topology, collective, sketch, options, size, progress=progress, contiguity=contiguity,
                       compare_baselines=False)
        synthesized.append(renamed(s, f"ccsynth@{format_size(size)}"))
    per_size = plan_baselines(Collective(collective.kind, topology.n_ranks), topology, sizes)
    baselines = [renamed(c.schedule, f"{c.name}(c={c.chunk_factor})")
                 for c in {(c.name, c.chunk_factor): c for cs in per_size.values() for c in cs}.values()]
    return build_plan(synthesized + baselines, topology, sizes, default_margin=default_margin)
