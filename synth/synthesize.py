"""Synthesis, the public face: topology + collective (+ sketch) -> ranked candidates -> a verified Schedule.

The request is checked (collective, rank counts, size, a connected
topology) before any solver runs; then :func:`synthesize_candidates` walks
the registered strategies (:mod:`ccsynth.synth.strategies.registry`: the
multi-dimension schedulers, packed trees, TACCL's MILP stages, the
baselines at their best chunk factors), each one module with the same two
methods (``applies`` / ``candidates``), and ranks every candidate by its
simulated time at the size (:class:`RankedCandidates`; ties go to the
strategy of lower ``preference``: MILPs, trees, multi-dimension, then
baselines, which win only when strictly faster).

:func:`synthesize` returns the best of the ranking, verified
(:func:`~ccsynth.collectives.verify.verify` on the topology). The command
line and ``ccsynth.synthesize`` judge the candidates in the form they are
written instead (:mod:`ccsynth.formats.written`): the few of
:meth:`RankedCandidates.shortlist` (those within :data:`SHORTLIST_WITHIN` of
the best, and the best of every strategy) are written (an MSCCL XML within
the runtime's limits, read back), simulated as written, and the fastest
file wins; :meth:`RankedCandidates.choose` then verifies it and records the
choice in the report and the schedule's ``meta``.

Combining collectives:

* **reduce-scatter** = allgather synthesized on ``topology.reversed()`` with
  every transfer reversed into a reduction and the waves of every
  connection reversed in time (a rank with several children receives their
  partial sums into scratch and reduces locally, so they need not queue);
* **allreduce** = reduce-scatter followed by allgather over ``n * c``
  chunks (the schedule's collective has chunk factor ``n * c``), partial
  sums accumulating in the output buffer; for latency-bound sizes also an
  allgather of whole buffers followed by local reductions (one tree depth
  instead of two), whichever simulates faster;
* **allreduce over packed trees** = every chunk reduced up an in-tree to
  a root and broadcast down an out-tree from it, the two phases pipelined,
  with the roots' shares chosen by the packing LP: reduce-scatter +
  allgather where that is best, reduce-to-hub + broadcast on a star;
* **alltoall** = a multi-commodity flow of every (source, destination)
  chunk over shortest paths (:mod:`~ccsynth.synth.alltoall`), relays holding
  pieces in scratch.

The result is a deterministic function of the inputs unless a solver time
limit cuts a solve short.

Example:
    >>> from ccsynth.topologies.model import Link, Topology
    >>> from ccsynth.collectives.spec import Collective
    >>> ring4 = Topology("r4", 4, links=tuple(Link(a, b, 1.0, 10.0) for a in range(4) for b in range(4)
    ...                                      if (a - b) % 4 in (1, 3)))
    >>> s = synthesize(ring4, Collective("allgather", 4), size_bytes=4096)
    >>> s.collective.kind, s.meta["verified"]
    ('allgather', True)
"""
from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from ccsynth.collectives.schedule import Schedule
from ccsynth.collectives.spec import Collective
from ccsynth.collectives.verify import verify
from ccsynth.errors import CollectiveError, InfeasibleError
from ccsynth.synth.sketch import Sketch
from ccsynth.synth.solver import SolverOptions
from ccsynth.synth.strategies.base import (
    Progress,
    ProgressFn,
    Stage,
    Strategy,
    SynthCandidate,
    SynthReport,
    SynthRequest,
)
from ccsynth.synth.strategies.milp_sketches import candidate_sketches
from ccsynth.synth.strategies.registry import strategies as registered_strategies
from ccsynth.tolerance import is_less
from ccsynth.topologies.model import Topology

__all__ = [
    "SUPPORTED",
    "DEFAULT_SIZE",
    "SHORTLIST_WITHIN",
    "SHORTLIST_MAX",
    "ProgressFn",
    "Stage",
    "SynthReport",
    "SynthCandidate",
    "RankedCandidates",
    "synthesize",
    "synthesize_candidates",
    "candidate_sketches",
]

log = logging.getLogger(__name__)

SUPPORTED = ("allgather", "reduce_scatter", "allreduce", "alltoall", "broadcast", "reduce")
#: default message size when the caller gives none (bytes)
DEFAULT_SIZE = 1 << 20
#: candidates within this fraction of the best (in the IR) are judged as written, besides each strategy's best
SHORTLIST_WITHIN = 0.25
#: at most this many candidates are judged as written (each strategy's best first, then the closest others)
SHORTLIST_MAX = 6


@dataclass(frozen=True)
class RankedCandidates:
    """Every strategy's candidates for one request, fastest in simulation first (ties: lower ``preference``).

    At least one candidate is synthesized (not a baseline); their schedules
    are not verified yet: :meth:`choose` verifies the one returned.
    """

    request: SynthRequest
    candidates: tuple[SynthCandidate, ...]

    @property
    def best(self) -> SynthCandidate:
        return self.candidates[0]

    @property
    def best_synthesized(self) -> SynthCandidate:
        return next(c for c in self.candidates if c.synthesized)

    def shortlist(self, within: float = SHORTLIST_WITHIN, most: int = SHORTLIST_MAX) -> tuple[SynthCandidate, ...]:
        """The candidates worth judging as written, in the ranking's order: each strategy's best, and the
        others within ``within`` of the best while there are fewer than ``most``."""
        distinct = _distinct(self.candidates)
        firsts: dict[str, SynthCandidate] = {}
        for c in distinct:
            firsts.setdefault(c.strategy, c)
        keep = {id(c) for c in firsts.values()}
        limit = self.best.time_us * (1 + within)
        for c in distinct:
            if len(keep) >= max(most, len(firsts)):
                break
            if c.time_us <= limit:
                keep.add(id(c))
        return tuple(c for c in distinct if id(c) in keep)

    def choose(self, candidate: SynthCandidate, *, reason: str | None = None) -> Schedule:
        """``candidate``'s schedule, verified, with what was chosen recorded in the report and in its ``meta``.

        ``reason`` says why it was chosen where it is not the best in the IR
        (e.g. "faster as written"); a baseline chosen over the synthesized
        schedules is warned about.
        """
        req, report = self.request, self.request.report
        synth = self.best_synthesized
        rep = verify(candidate.schedule, req.topology)
        req.progress("verify", f"{candidate.label}: {rep.n_ops} ops, {rep.n_transfers} transfers: verified")
        why = reason or "simulates faster"
        meta: dict[str, object] = {"predicted_us": candidate.time_us, "size_bytes": req.size_bytes,
                                   "verified": bool(rep.ok)}
        if not candidate.synthesized:
            report.chosen = "baseline"
            msg = (f"{candidate.label} {why} ({candidate.time_us:.3f} us in the simulator) than the best "
                   f"synthesized schedule ({synth.time_us:.3f} us) at {req.size_bytes} bytes on "
                   f"{req.topology.name}: returning the baseline")
            log.warning("%s", msg)
            report.warnings.append(msg)
            meta.update(chosen="baseline", synthesized_us=synth.time_us, chunk_factor=candidate.meta["chunk_factor"])
        else:
            report.chosen = "multidim" if candidate.strategy == "multidim" else "synthesized"
            meta.update(candidates=report.candidates, chosen=report.chosen)
        return candidate.schedule.with_meta(**meta)


# ============================================================================ public API
def synthesize(
    topology: Topology,
    collective: Collective,
    sketch: Sketch | None = None,
    options: SolverOptions | None = None,
    size_bytes: int | None = None,
    *,
    progress: ProgressFn | None = None,
    report: SynthReport | None = None,
    contiguity: bool = True,
    compare_baselines: bool = True,
    strategies: Sequence[Strategy] | None = None,
) -> Schedule:
    """Synthesize a verified schedule of ``collective`` on ``topology``: the fastest ccsynth knows.

    ``sketch`` guides the synthesis (None: the default sketches of
    :func:`candidate_sketches` beside the other strategies); ``options``
    selects the solver and its limits (without a time limit the contiguity
    MILP still stops after a few seconds, keeping the heuristic waves it
    started from); ``size_bytes`` is the message size the schedule is tuned
    for (default: the sketch's ``input_size``, else 1 MiB). A collective
    chunk factor above 1 is used as the sketch's chunk factor (TACCL's
    ``input_chunkup``); the returned schedule's collective has the chunk
    factor actually used (``n * c`` for allreduce). ``progress(stage,
    seconds, detail)`` is called after every stage; ``contiguity=False``
    skips the contiguity MILP; ``strategies`` replaces the registered walk
    (:mod:`ccsynth.synth.strategies.registry`).

    Every applicable baseline is simulated at its own best chunk factor
    (recorded in ``report.baselines``) unless a bound proves it slower
    (recorded with ``time_us`` None and ``at_least_us``); when one is faster
    than every synthesized schedule, that baseline is returned instead
    (``meta["chosen"] == "baseline"``) and a warning says so.
    ``compare_baselines=False`` returns the synthesized schedule regardless.

    Raises :class:`~ccsynth.errors.SketchError` for a sketch that does not
    fit the topology, :class:`~ccsynth.errors.InfeasibleError` when no
    schedule is found (e.g. the time limit passes first), and
    :class:`~ccsynth.errors.SolverError` when the solver is missing.
    """
    ranked = synthesize_candidates(topology, collective, sketch, options, size_bytes, progress=progress,
                                   report=report, contiguity=contiguity, compare_baselines=compare_baselines,
                                   strategies=strategies)
    return ranked.choose(ranked.best)


def synthesize_candidates(
    topology: Topology,
    collective: Collective,
    sketch: Sketch | None = None,
    options: SolverOptions | None = None,
    size_bytes: int | None = None,
    *,
    progress: ProgressFn | None = None,
    report: SynthReport | None = None,
    contiguity: bool = True,
    compare_baselines: bool = True,
    strategies: Sequence[Strategy] | None = None,
) -> RankedCandidates:
    """Every strategy's candidates, simulated and ranked (arguments as :func:`synthesize`; nothing verified yet)."""
    report = report if report is not None else SynthReport()
    size = _check_request(topology, collective, sketch, size_bytes)
    req = SynthRequest(topology, collective, size, sketch, options or SolverOptions(), Progress(progress, report),
                       report, contiguity)
    walk = tuple(strategies) if strategies is not None else registered_strategies()
    found: list[SynthCandidate] = []
    preference: dict[str, int] = {}
    for strategy in walk:
        if (strategy.name == "baseline" and not compare_baselines) or not strategy.applies(req):
            continue
        got = strategy.candidates(req, tuple(found))
        preference[strategy.name] = getattr(strategy, "preference", 5)
        found.extend(got)
    if not any(c.synthesized for c in found):
        raise InfeasibleError(f"no schedule for {collective.kind} on {topology.name}: no synthesis strategy applies"
                              f" ({', '.join(s.name for s in walk)} tried)")
    ranked = RankedCandidates(req, _rank(found, preference))
    best = ranked.best_synthesized
    report.synthesized_us, report.synthesized_path = best.time_us, best.strategy
    req.progress("chosen", f"{best.label}: {best.time_us:.3f} us (best of {len(found)} candidate(s); "
                           f"fastest overall: {ranked.best.label}, {ranked.best.time_us:.3f} us)")
    return ranked


def _distinct(candidates: Sequence[SynthCandidate]) -> list[SynthCandidate]:
    """``candidates`` without repeats: two sketches (with and without detours, say) often give the same ops."""
    out: list[SynthCandidate] = []
    for c in candidates:
        if not any(o.time_us == c.time_us and o.schedule.ops == c.schedule.ops for o in out):
            out.append(c)
    return out


def _rank(found: list[SynthCandidate], preference: dict[str, int]) -> tuple[SynthCandidate, ...]:
    """Fastest first; times equal within the tolerance go to the lower preference, then the walk's order."""
    order = {id(c): i for i, c in enumerate(found)}

    def cmp(a: SynthCandidate, b: SynthCandidate) -> int:
        if is_less(a.time_us, b.time_us):
            return -1
        if is_less(b.time_us, a.time_us):
            return 1
        ka = (preference.get(a.strategy, 5), order[id(a)])
        kb = (preference.get(b.strategy, 5), order[id(b)])
        return -1 if ka < kb else (1 if ka > kb else 0)

    return tuple(sorted(found, key=functools.cmp_to_key(cmp)))


def _check_request(topology: Topology, collective: Collective, sketch: Sketch | None, size_bytes: int | None) -> int:
    """Reject what synthesis cannot do, before any solver runs; returns the message size to tune for."""
    if collective.kind not in SUPPORTED:
        raise CollectiveError(f"synthesis supports {', '.join(SUPPORTED)}; got {collective.kind}")
    if topology.n_ranks != collective.n_ranks:
        raise CollectiveError(f"the collective has {collective.n_ranks} ranks but topology {topology.name!r} "
                              f"has {topology.n_ranks}")
    if topology.n_ranks < 2:
        raise CollectiveError(f"synthesis needs at least 2 ranks; topology {topology.name!r} has {topology.n_ranks}")
    topology.require_connected(f"synthesizing {collective.kind}")
    if size_bytes is None:
        size_bytes = sketch.input_size if sketch is not None and sketch.input_size else DEFAULT_SIZE
    if isinstance(size_bytes, bool) or not isinstance(size_bytes, int) or size_bytes <= 0:
        raise CollectiveError(f"the message size must be a positive number of bytes, got {size_bytes!r}")
    return size_bytes
