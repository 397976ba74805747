"""What every synthesis strategy shares: the request it serves, the candidates it returns, the interface.

A *strategy* is one way to make a schedule for a collective on a topology:
the packed trees, the TACCL-style MILP stages, the multi-dimension
schedulers, the baselines at their best chunk factors. Each lives in a module
of its own under :mod:`ccsynth.synth.strategies` and offers two methods (the
way PuLP's solvers offer ``available()`` and ``actualSolve()``):

* ``applies(request)`` -- whether it can serve the request at all (a
  collective it knows, a topology it handles, no sketch that pins another
  path); cheap, no solver runs;
* ``candidates(request, found)`` -- its schedules, each simulated at the
  request's size (a :class:`SynthCandidate`), given what the strategies
  walked before it found (so the MILPs can step aside where the packing
  already serves a large machine, and the baselines need only be searched
  where they could compete).

:func:`ccsynth.synth.synthesize.synthesize` walks the registered strategies
(:mod:`.registry`) in order and ranks every candidate by its simulated time.
A candidate's schedule need not be verified yet: the synthesizer verifies
what it returns, and the formats layer what it writes.

The request carries the progress callback (a :class:`Progress`: one line per
stage, kept in the :class:`SynthReport` too) and the report each strategy
adds its findings to.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from ccsynth.collectives.schedule import Schedule
from ccsynth.collectives.spec import Collective
from ccsynth.synth.sketch import Sketch
from ccsynth.synth.solver import SolverOptions
from ccsynth.topologies.model import Topology

__all__ = ["ProgressFn", "Stage", "SynthReport", "Progress", "SynthRequest", "SynthCandidate", "Strategy"]

log = logging.getLogger("ccsynth.synth.synthesize")

ProgressFn = Callable[[str, float, str], None]


@dataclass
class Stage:
    """One line of progress: stage name, seconds since the start, what it produced."""

    name: str
    elapsed: float
    detail: str


@dataclass
class SynthReport:
    """What :func:`~ccsynth.synth.synthesize.synthesize` did (also stored, in short, in ``schedule.meta``)."""

    stages: list[Stage] = field(default_factory=list)
    candidates: list[dict] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    #: every applicable baseline at its own best chunk factor, fastest first: name, chunk_factor, time_us; then
    #: those proven slower than the synthesized schedule without a simulation: time_us None, at_least_us
    baselines: list[dict] = field(default_factory=list)
    #: the best synthesized schedule's simulated time, and what was returned: "synthesized", "multidim" or "baseline"
    synthesized_us: float | None = None
    chosen: str = "synthesized"
    #: how the best synthesized schedule was made: "milp", "trees" or "multidim" (also when a baseline is returned)
    synthesized_path: str = ""
    #: on topologies with dimensions: the best multi-dimension schedule (scheduler, time_us) and every
    #: scheduler's time in the dimension-level model (:mod:`ccsynth.synth.multidim.candidates`)
    multidim: dict = field(default_factory=dict)


class Progress:
    """The progress of one synthesis: every stage logged, kept in the report and passed to the caller's callback."""

    def __init__(self, callback: ProgressFn | None, report: SynthReport):
        self.t0 = time.perf_counter()
        self.callback = callback
        self.report = report

    def __call__(self, stage: str, detail: str) -> None:
        el = time.perf_counter() - self.t0
        self.report.stages.append(Stage(stage, el, detail))
        log.info("[%7.2fs] %s: %s", el, stage, detail)
        if self.callback is not None:
            self.callback(stage, el, detail)


@dataclass(frozen=True)
class SynthRequest:
    """One synthesis request, as every strategy sees it (checked by the synthesizer before any strategy runs)."""

    topology: Topology
    collective: Collective
    size_bytes: int
    sketch: Sketch | None
    options: SolverOptions
    progress: Progress
    report: SynthReport
    contiguity: bool = True


@dataclass(frozen=True)
class SynthCandidate:
    """One schedule a strategy offers, simulated at the request's size.

    ``strategy`` names the strategy (``"trees"``, ``"milp"``, ``"multidim"``,
    ``"baseline"``, ...), ``label`` this candidate within it (a sketch, a
    baseline and its chunk factor); ``meta`` is what the schedule returned
    for this candidate records besides (e.g. a baseline's chunk factor).
    """

    strategy: str
    label: str
    schedule: Schedule
    time_us: float
    meta: Mapping[str, object] = field(default_factory=dict)

    @property
    def synthesized(self) -> bool:
        """Made by a synthesis strategy (not a baseline)."""
        return self.strategy != "baseline"


@runtime_checkable
class Strategy(Protocol):
    """A way to make schedules; see the module docstring."""

    name: str

    def applies(self, request: SynthRequest) -> bool:
        """Whether this strategy can serve ``request`` (cheap: no solver runs)."""
        ...

    def candidates(self, request: SynthRequest, found: Sequence[SynthCandidate]) -> list[SynthCandidate]:
        """Its schedules for ``request``, simulated at its size; ``found``: what earlier strategies found."""
        ...
