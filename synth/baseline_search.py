"""Every baseline at its own best chunk count, under the same cost model as everything else.

A baseline's chunk factor trades pipelining against per-message cost: more,
smaller chunks let relays forward earlier, but every message pays its
connection's per-message overhead on both ranks (see
:mod:`ccsynth.synth.simulate`). Comparing a synthesized schedule against a
baseline at a fixed chunk factor overstates the speedup whenever another
factor suits the baseline better, so every comparison ccsynth makes goes
through this module:

* :func:`chunk_factor_ladder` -- the factors worth trying for one baseline:
  its smallest useful factor (:func:`~ccsynth.synth.baselines.min_chunk_factor`,
  one block per rank for allreduce) times 1, 2, 4, ... while a chunk keeps
  at least :data:`MIN_CHUNK_BYTES` and the buffer at most
  :data:`MAX_SEARCH_CHUNKS` chunks (beyond that the per-message cost
  dominates on every network ccsynth models);
* :func:`best_for` -- one baseline at one size: walk the ladder, stop once
  two factors in a row are slower than the best so far (the time is a
  convex-looking function of the factor: pipelining gains shrink while
  message costs grow linearly);
* :func:`baseline_choices` / :func:`best_baseline` -- every applicable
  baseline at its best, fastest first;
* :func:`plan_baselines` -- the same for many sizes at once (schedules
  built once), for per-size plans.

Example:
    >>> from ccsynth.collectives.spec import Collective
    >>> from ccsynth.topologies.catalog import ring
    >>> t = ring(8)
    >>> chunk_factor_ladder("ring", "allreduce", t, 1 << 20)
    (8, 16, 32, 64, 128, 256, 512, 1024, 2048)
    >>> best = best_baseline(Collective("allreduce", 8), t, 1 << 20)
    >>> best.name in ("ring", "multi_ring", "recursive_halving", "direct", "one_shot", "recursive_doubling")
    True
"""

from __future__ import annotations

import logging
from typing import NamedTuple
from collections.abc import Sequence

from ccsynth.collectives.schedule import Schedule
from ccsynth.collectives.spec import Collective
from ccsynth.errors import CCSynthError, CollectiveError
from ccsynth.synth.baselines import BASELINES, make_baseline, min_chunk_factor, why_not
from ccsynth.synth.simulate import SimResult, simulate
from ccsynth.tolerance import is_less
from ccsynth.topologies.model import Topology

__all__ = [
    "MIN_CHUNK_BYTES",
    "MAX_SEARCH_CHUNKS",
    "WORSE_IN_A_ROW",
    "BaselineChoice",
    "chunk_factor_ladder",
    "best_for",
    "baseline_choices",
    "best_baseline",
    "plan_baselines",
]

log = logging.getLogger(__name__)

#: smallest chunk worth a message of its own in the search (the smallest factor is always tried)
MIN_CHUNK_BYTES = 512
#: at most this many chunks per buffer in the search
MAX_SEARCH_CHUNKS = 4096
#: the search along the ladder stops after this many factors in a row slower than the best
WORSE_IN_A_ROW = 2


class BaselineChoice(NamedTuple):
    """A baseline at a chunk factor, with its simulated result at the size it was chosen for."""

    name: str
    chunk_factor: int
    result: SimResult
    schedule: Schedule


def chunk_factor_ladder(name: str, kind: str, topology: Topology, size_bytes: float) -> tuple[int, ...]:
    """The chunk factors :func:`best_for` tries for baseline ``name`` (see the module docstring)."""
    base = min_chunk_factor(name, kind, topology)
    out = [base]
    c = base
    while True:
        c *= 2
        try:
            size_chunks = Collective(kind, topology.n_ranks, c).size_chunks
        except CollectiveError:  # beyond ccsynth.limits: a larger factor is no candidate either
            break
        if size_chunks > MAX_SEARCH_CHUNKS or size_bytes / size_chunks < MIN_CHUNK_BYTES:
            break
        out.append(c)
    return tuple(out)


class _Builds:
    """Baseline schedules built once per (name, chunk factor); None where the baseline cannot build."""

    def __init__(self, collective: Collective, topology: Topology):
        self.kind, self.n, self.root = collective.kind, collective.n_ranks, collective.root
        self.topology = topology
        self.cache: dict[tuple[str, int], Schedule | None] = {}

    def get(self, name: str, factor: int) -> Schedule | None:
        key = (name, factor)
        if key not in self.cache:
            try:
                self.cache[key] = make_baseline(name, Collective(self.kind, self.n, factor, self.root), self.topology)
            except CCSynthError as e:
                log.debug("baseline %s at chunk factor %d: %s", name, factor, e)
                self.cache[key] = None
        return self.cache[key]


def _search(name: str, builds: _Builds, size_bytes: float) -> BaselineChoice | None:
    """Walk baseline ``name``'s ladder at ``size_bytes``; stop after WORSE_IN_A_ROW slower factors."""
    best: BaselineChoice | None = None
    worse = 0
    for factor in chunk_factor_ladder(name, builds.kind, builds.topology, size_bytes):
        sched = builds.get(name, factor)
        if sched is None:
            continue
        r = simulate(sched, builds.topology, size_bytes)
        if best is None or is_less(r.time_us, best.result.time_us):
            best, worse = BaselineChoice(name, factor, r, sched), 0
        else:
            worse += 1
            if worse >= WORSE_IN_A_ROW:
                break
    return best


def best_for(name: str, collective: Collective, topology: Topology, size_bytes: float) -> BaselineChoice | None:
    """Baseline ``name`` at its fastest chunk factor for ``size_bytes``, or None if it cannot build."""
    return _search(name, _Builds(collective, topology), size_bytes)


def _applicable(collective: Collective, topology: Topology) -> list[str]:
    """The baselines that can build ``collective``'s kind on ``topology`` at their smallest useful factor."""
    kind, n, root = collective.kind, collective.n_ranks, collective.root
    return [
        name for name in BASELINES
        if why_not(name, Collective(kind, n, min_chunk_factor(name, kind, topology), root), topology) is None
    ]


def baseline_choices(collective: Collective, topology: Topology, size_bytes: float) -> list[BaselineChoice]:
    """Every applicable baseline at its best chunk factor, fastest first (ties: registry order)."""
    out = []
    builds = _Builds(collective, topology)
    for name in _applicable(collective, topology):
        choice = _search(name, builds, size_bytes)
        if choice is not None:
            out.append(choice)
            log.info("baseline %s: best at chunk factor %d, %.3f us", name, choice.chunk_factor, choice.result.time_us)
    out.sort(key=lambda c: c.result.time_us)  # stable
    return out


def best_baseline(collective: Collective, topology: Topology, size_bytes: float) -> BaselineChoice | None:
    """The fastest baseline at its own best chunk factor, or None when none applies."""
    choices = baseline_choices(collective, topology, size_bytes)
    return choices[0] if choices else None


def plan_baselines(collective: Collective, topology: Topology, sizes: Sequence[float]) -> dict[float, list[BaselineChoice]]:
    """For every size, every applicable baseline at its best chunk factor (fastest first).

    Schedules are built once per (baseline, factor) across sizes. The
    distinct schedules of the result are what a per-size plan needs as
    baseline candidates: each size range then gets each baseline at its best.
    """
    builds = _Builds(collective, topology)
    names = _applicable(collective, topology)
    out = {}
    for size in sizes:
        choices = [c for c in (_search(name, builds, size) for name in names) if c is not None]
        choices.sort(key=lambda c: c.result.time_us)
        out[size] = choices
    return out
