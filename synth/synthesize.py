"""Synthesis, the public face: topology + collective (+ sketch) -> verified Schedule.

Pipeline (TACCL's stages, with ccsynth's own models; see each module):

1. :mod:`~ccsynth.synth.sketch` -- the sketch is checked against the
   topology before any solver runs, giving the logical topology and the
   symmetry group;
2. :mod:`~ccsynth.synth.routing` (allgather) / :mod:`~ccsynth.synth.alltoall`
   -- the routing MILP (or LP) decides which connections carry which chunk;
3. :mod:`~ccsynth.synth.ordering` -- the list scheduler orders the pieces on
   every connection (twice: with each piece's latency paid in turn, and
   with latencies overlapping the previous piece's data);
4. :mod:`~ccsynth.synth.contiguity` -- pieces are grouped into waves (the
   DP heuristic, and the contiguity MILP for the winning candidate);
5. :mod:`~ccsynth.synth.lowering` -- the waves become a
   :class:`~ccsynth.collectives.schedule.Schedule`: the waves of one
   connection follow each other (a *window* of 1: wave ``k`` waits for wave
   ``k - 1``; 2: for wave ``k - 2``; 0: only for its data), and pieces of a
   wave that are adjacent in both buffers travel as one transfer.

Two synthesis paths, each tried where it applies, the faster schedule in
simulation kept:

* **Packed trees** (:mod:`ccsynth.synth.trees`; allgather, reduce-scatter,
  allreduce, broadcast, reduce): spanning trees packed to the optimal
  throughput by an LP (ForestColl's optimum, in ccsynth's cost model),
  lowered to a pipelined schedule at the chunk factor the simulator
  prefers. Seconds to minutes even at 1,024 ranks. Not tried when the
  caller pins the MILP path with a sketch or a chunk factor.
* **The MILP stages** below (TACCL's). They run for alltoall, for a user's
  sketch or chunk factor, and otherwise only on machines of at most
  :data:`MILP_MAX_RANKS` ranks: above that the routing MILP takes minutes
  (100-284 s at 32 ranks on two cores) while the packing already meets the
  bandwidth bound, so the MILPs could only win on latency.

Without a sketch the MILP path tries the default sketches of
:func:`candidate_sketches` (chunk factors around the size-based default,
with and without sideways detours, and for several nodes relay variants).
Either way it then runs three stages, one function each:

A. :func:`_plan_candidates` -- every :class:`Candidate` is routed and
   ordered and scored by the list schedules' estimates;
B. :func:`_simulate_candidates` -- the best :data:`SIMULATED_CANDIDATES`
   are lowered in every :class:`WaveVariant` and window and simulated
   (:func:`ccsynth.synth.simulate.simulate`) at ``size_bytes``;
C. :func:`_refine_contiguity` -- the contiguity MILP refines the winner.

The fastest schedule in simulation is returned, after
:func:`~ccsynth.collectives.verify.verify` on the topology.

Multi-dimension networks: on a topology with dimensions (up to 128 ranks),
the best multi-dimension schedule (per-dimension phases in per-chunk
dimension orders, :mod:`ccsynth.synth.multidim.candidates`) is a candidate
too, beside the packed trees; like them it lets the MILPs be skipped above
:data:`MILP_MAX_RANKS` ranks.

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

import logging
import math
import time
from dataclasses import dataclass, field, replace
from collections.abc import Callable

from ccsynth.collectives.schedule import Schedule
from ccsynth.collectives.spec import Collective
from ccsynth.collectives.gc_pause import gc_paused
from ccsynth.collectives.verify import verify
from ccsynth.errors import CollectiveError, InfeasibleError, SketchError
from ccsynth.synth.alltoall import route_alltoall
from ccsynth.synth.baseline_search import baselines_against, verified
from ccsynth.synth.contiguity import Waves, chain_waves, dp_waves, schedule_waves, single_waves
from ccsynth.synth.multidim.candidates import MultiDimCandidate, best_multidim
from ccsynth.synth.multidim.candidates import applies as multidim_applies
from ccsynth.synth.lowering import (
    lower_allgather,
    lower_allreduce,
    lower_allreduce_gather,
    lower_alltoall,
    lower_reduce_scatter,
)
from ccsynth.synth.ordering import TransferPlan, order_moves
from ccsynth.synth.routing import Routing, route_allgather
from ccsynth.synth.simulate import simulate
from ccsynth.synth.sketch import Sketch, default_sketch, find_symmetries
from ccsynth.synth.solver import SolverOptions
from ccsynth.synth.trees.search import KINDS as TREE_KINDS
from ccsynth.synth.trees.search import TreeChoice, best_tree_schedule
from ccsynth.tolerance import is_less

__all__ = [
    "SUPPORTED",
    "MILP_KINDS",
    "MILP_MAX_RANKS",
    "DEFAULT_SIZE",
    "CONTIGUITY_TIME_LIMIT",
    "ROUTING_TIME_LIMIT",
    "SIMULATED_CANDIDATES",
    "WINDOWS",
    "RS_AG",
    "GATHER_REDUCE",
    "Stage",
    "SynthReport",
    "Candidate",
    "CandidatePlans",
    "WaveVariant",
    "synthesize",
    "candidate_sketches",
]

log = logging.getLogger(__name__)

SUPPORTED = ("allgather", "reduce_scatter", "allreduce", "alltoall", "broadcast", "reduce")
#: the collectives the MILP stages synthesize (broadcast and reduce come from the tree packing alone)
MILP_KINDS = ("allgather", "reduce_scatter", "allreduce", "alltoall")
#: above this many ranks the MILPs are not run for a collective the tree packing serves (issue 11: the routing
#: MILPs took 100-284 s at 32 ranks, the packing seconds; the packing meets the bandwidth bound, the MILPs can
#: only win on latency, which matters on small machines)
MILP_MAX_RANKS = 16
#: default message size when the caller gives none (bytes)
DEFAULT_SIZE = 1 << 20
#: default time limit (s) of one contiguity MILP when the caller sets none (it is warm-started from a
#: heuristic, so stopping early only forgoes an improvement)
CONTIGUITY_TIME_LIMIT = 10.0
#: default time limit (s) of one routing MILP when the caller sets none
ROUTING_TIME_LIMIT = 30.0
#: candidates (best estimates first) that are lowered to schedules and simulated
SIMULATED_CANDIDATES = 3
#: how many waves of a connection may be in flight: 1 (strict FIFO), 0 (data dependencies only), 2
WINDOWS = (1, 0, 2)
#: allreduce strategies: reduce-scatter then allgather; or gather every buffer and reduce locally
RS_AG = "rs+ag"
GATHER_REDUCE = "allgather+reduce"

ProgressFn = Callable[[str, float, str], None]


@dataclass
class Stage:
    """One line of progress: stage name, seconds since the start, what it produced."""

    name: str
    elapsed: float
    detail: str


@dataclass
class SynthReport:
    """What :func:`synthesize` did (also stored, in short, in ``schedule.meta``)."""

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


@dataclass(frozen=True)
class Candidate:
    """One way to synthesize the collective: a sketch and, for allreduce, a strategy (:data:`RS_AG` or
    :data:`GATHER_REDUCE`)."""

    sketch: Sketch
    strategy: str = RS_AG

    def describe(self) -> str:
        return _describe_sketch(self.sketch) + ("" if self.strategy == RS_AG else f" [{self.strategy}]")


@dataclass(frozen=True)
class CandidatePlans:
    """A candidate routed and ordered: one TransferPlan per phase (two for allreduce: reduce-scatter, allgather).

    ``strict`` from the list schedule that pays each piece's latency in
    turn, ``overlapped`` from the one that overlaps latencies with the
    previous piece's data.
    """

    strict: tuple[TransferPlan, ...]
    overlapped: tuple[TransferPlan, ...]


@dataclass(frozen=True)
class WaveVariant:
    """A grouping of a candidate's moves into waves (one Waves per phase), with the windows to lower it with."""

    name: str
    parts: tuple[Waves, ...]
    windows: tuple[int, ...]

    @property
    def estimated_us(self) -> float:
        return sum(w.makespan_us for w in self.parts)


@dataclass(frozen=True)
class _PhasePlan:
    """One phase of a candidate, ordered by both list schedules (see :class:`CandidatePlans`)."""

    strict: TransferPlan
    overlapped: TransferPlan


@dataclass(frozen=True)
class _Scored:
    """Stage A's result for one candidate."""

    estimated_us: float
    candidate: Candidate
    plans: tuple[TransferPlan, ...]
    variants: tuple[WaveVariant, ...]


@dataclass(frozen=True)
class _Simulated:
    """Stage B's result for one candidate: its fastest lowering."""

    time_us: float
    candidate: Candidate
    plans: tuple[TransferPlan, ...]
    schedule: Schedule


class _Progress:
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


# ============================================================================ public API
def synthesize(
    topology,
    collective: Collective,
    sketch: Sketch | None = None,
    options: SolverOptions | None = None,
    size_bytes: int | None = None,
    *,
    progress: ProgressFn | None = None,
    report: SynthReport | None = None,
    contiguity: bool = True,
    compare_baselines: bool = True,
) -> Schedule:
    """Synthesize a verified schedule of ``collective`` on ``topology``: the fastest ccsynth knows.

    ``sketch`` guides the synthesis (None: try the default sketches of
    :func:`candidate_sketches` and keep the fastest in simulation);
    ``options`` selects the solver and its limits (without a time limit the
    contiguity MILP still stops after :data:`CONTIGUITY_TIME_LIMIT` s,
    keeping the heuristic waves it started from); ``size_bytes`` is the
    message size the schedule is tuned for (default: the sketch's
    ``input_size``, else 1 MiB). A collective chunk factor above 1 is used
    as the sketch's chunk factor (TACCL's ``input_chunkup``); the returned
    schedule's collective has the chunk factor actually used (``n * c`` for
    allreduce). ``progress(stage, seconds, detail)`` is called after every
    stage; ``contiguity=False`` skips the contiguity MILP.

    Every applicable baseline is simulated at its own best chunk factor
    (:mod:`ccsynth.synth.baseline_search`, recorded in ``report.baselines``)
    unless a bound proves it slower than the synthesized schedule
    (:func:`~ccsynth.synth.baseline_search.baselines_against`: recorded with
    ``time_us`` None and ``at_least_us``);
    when one is faster than every synthesized schedule, that baseline is
    returned instead (``meta["chosen"] == "baseline"``) and a warning says
    so. ``compare_baselines=False`` returns the synthesized schedule
    regardless.

    Raises :class:`~ccsynth.errors.SketchError` for a sketch that does not
    fit the topology, :class:`~ccsynth.errors.InfeasibleError` when no
    schedule is found (e.g. the time limit passes first), and
    :class:`~ccsynth.errors.SolverError` when the solver is missing.
    """
    options = options or SolverOptions()
    report = report if report is not None else SynthReport()
    prog = _Progress(progress, report)
    size_bytes = _check_request(topology, collective, sketch, size_bytes)
    multidim = _multidim_candidate(topology, collective, size_bytes, options, prog, report)
    with gc_paused():  # lowering and simulating up to millions of ops (see ccsynth.collectives.gc_pause)
        trees = _tree_candidate(topology, collective, sketch, size_bytes, prog, report)
    best_t, best_sched = math.inf, None
    if _use_milps(topology, collective, sketch, trees, multidim):
        best_t, best_sched = _milp_stages(topology, collective, sketch, options, size_bytes, prog, report,
                                          contiguity)
        report.synthesized_path = "milp"
    if trees is not None and (best_sched is None or is_less(trees.time_us, best_t)):
        best_t, best_sched = trees.time_us, trees.schedule
        report.synthesized_path = "trees"
        prog("chosen", f"packed trees (chunk factor {trees.chunk_factor}): {best_t:.3f} us")
    if multidim is not None and (best_sched is None or is_less(multidim.time_us, best_t)):
        best_t, best_sched = multidim.time_us, multidim.schedule
        report.chosen = report.synthesized_path = "multidim"
        prog("chosen", f"multi-dimension {multidim.scheduler} ({multidim.model.n_chunks} chunks): {best_t:.3f} us")
    if best_sched is None:  # _use_milps holds whenever trees and multi-dimension schedules do not serve the request
        raise InfeasibleError(f"no schedule for {collective.kind} on {topology.name}: "
                              "neither the MILPs nor packed trees apply")
    best_sched = best_sched.with_meta(predicted_us=best_t, size_bytes=size_bytes, candidates=report.candidates)
    trees = multidim = None  # only the best is kept: the others' schedules are freed before the baselines are built
    report.synthesized_us = best_t
    if not compare_baselines:
        return _finish(best_sched, topology, prog)
    return _against_baselines(best_sched, best_t, topology, collective, size_bytes, prog, report)


def _milp_stages(topology, collective: Collective, sketch: Sketch | None, options: SolverOptions, size_bytes: int,
                 prog: _Progress, report: SynthReport, contiguity: bool) -> tuple[float, Schedule]:
    """Stages A, B and C: the sketches' candidates routed, ordered, lowered, simulated; the winner refined."""
    candidates = _candidates(topology, collective, sketch, size_bytes)
    prog("sketches", f"{len(candidates)} candidate(s): " + ", ".join(c.describe() for c in candidates))
    scored = _plan_candidates(topology, collective, candidates, options, size_bytes, prog,
                              user_sketch=sketch is not None)
    results = _simulate_candidates(topology, collective, scored[:SIMULATED_CANDIDATES], size_bytes, prog, report)
    best = results[0]
    if contiguity:
        return _refine_contiguity(topology, collective, best, options, size_bytes, prog)
    return best.time_us, best.schedule


def _tree_candidate(topology, collective: Collective, sketch: Sketch | None, size_bytes: int, prog: _Progress,
                    report: SynthReport) -> TreeChoice | None:
    """The packed-tree schedule (:mod:`ccsynth.synth.trees`), unless a sketch or chunk factor pins the MILP path."""
    if collective.kind not in TREE_KINDS or sketch is not None or collective.chunk_factor > 1:
        return None
    try:
        choice = best_tree_schedule(topology, collective, size_bytes)
    except InfeasibleError as e:
        prog("trees", f"tree packing failed: {e}")
        return None
    p = choice.packing
    prog("trees", f"{len(p.trees)} trees in {p.iterations} LP round(s), {p.columns} columns, "
                  f"{p.seconds:.2f} s; packing time {choice.predicted_us(size_bytes):.3f} us "
                  f"({p.gap:.4f}x its bound)")
    prog("simulated", f"packed trees: {choice.time_us:.3f} us at {size_bytes} bytes, chunk factor "
                      f"{choice.chunk_factor} (tried {', '.join(f'{c}: {t:.1f}' for c, t in choice.tried)})")
    report.candidates.append({"sketch": "packed trees", "estimated_us": choice.predicted_us(size_bytes),
                              "time_us": choice.time_us, "waves": "trees", "window": 0,
                              "chunk_factor": choice.chunk_factor})
    return choice


def _use_milps(topology, collective: Collective, sketch: Sketch | None, trees: TreeChoice | None,
               multidim: MultiDimCandidate | None = None) -> bool:
    """Whether stages A-C run: for what the packing and the multi-dimension schedulers do not serve, for a
    user's sketch or chunk factor, and on machines of at most :data:`MILP_MAX_RANKS` ranks."""
    if collective.kind not in MILP_KINDS:
        return False
    served = trees is not None or multidim is not None
    return not served or sketch is not None or topology.n_ranks <= MILP_MAX_RANKS


def _against_baselines(sched: Schedule, time_us: float, topology, collective: Collective, size_bytes: int,
                       prog: _Progress, report: SynthReport) -> Schedule:
    """The synthesized schedule, or the fastest baseline at its best chunk factor when that is faster.

    Whichever is returned is verified then, and only it: at 256 ranks a synthesized schedule that a baseline
    beats costs seconds to verify for nothing.
    """
    found = baselines_against(Collective(collective.kind, collective.n_ranks, 1, collective.root), topology,
                              size_bytes, time_us, progress=lambda detail: prog("baseline", detail))
    choices = found.choices
    # the baselines simulated, fastest first, then those proven slower than the synthesized schedule by a bound
    report.baselines = [{"name": c.name, "chunk_factor": c.chunk_factor, "time_us": c.result.time_us}
                        for c in choices]
    report.baselines += [{"name": o.name, "chunk_factor": o.chunk_factor, "time_us": None, "at_least_us": o.bound_us}
                         for o in sorted(found.outrun, key=lambda o: o.bound_us)]
    if found.outrun:
        prog("baselines", f"{len(found.outrun)} baseline(s) proven slower than {time_us:.3f} us by their bytes, "
                          "per-message overheads or pipeline, not simulated: " + ", ".join(
                              f"{o.name} >= {o.bound_us:.1f} us" for o in found.outrun))
    if choices:
        best = choices[0]
        prog("baselines", f"best baseline {best.name} (chunk factor {best.chunk_factor}) {best.result.time_us:.3f} us "
                          f"of {len(choices)} at their best chunk factors; synthesized {time_us:.3f} us")
        if is_less(best.result.time_us, time_us):
            best = verified(best, topology)
            prog("verify", f"baseline {best.name}: {len(best.schedule.ops)} ops: verified")
            msg = (f"baseline {best.name} (chunk factor {best.chunk_factor}) simulates faster "
                   f"({best.result.time_us:.3f} us) than the best synthesized schedule ({time_us:.3f} us) at "
                   f"{size_bytes} bytes on {topology.name}: returning the baseline")
            log.warning("%s", msg)
            report.warnings.append(msg)
            report.chosen = "baseline"
            return best.schedule.with_meta(predicted_us=best.result.time_us, size_bytes=size_bytes, chosen="baseline",
                                           synthesized_us=time_us, chunk_factor=best.chunk_factor, verified=True)
    return _finish(sched, topology, prog).with_meta(chosen=report.chosen)


def _multidim_candidate(topology, collective: Collective, size_bytes: int, options: SolverOptions, prog: _Progress,
                        report: SynthReport) -> MultiDimCandidate | None:
    """The best multi-dimension schedule on a topology with dimensions (:mod:`ccsynth.synth.multidim.candidates`)."""
    if not multidim_applies(topology, collective):
        return None
    got = best_multidim(topology, collective, size_bytes, options)
    if got is None:
        return None
    report.multidim = {"scheduler": got.scheduler, "chunks": got.model.n_chunks, "time_us": got.time_us,
                       "model_us": dict(got.model_us)}
    prog("multidim", f"best multi-dimension schedule: {got.scheduler}, {got.model.n_chunks} chunks, "
                     f"{got.time_us:.3f} us (model: " + ", ".join(f"{k} {v:.3f}" for k, v in got.model_us.items()) + ")")
    return got


def candidate_sketches(topology, collective: Collective, size_bytes: int) -> list[Sketch]:
    """The default sketches :func:`synthesize` tries when the caller gives none.

    Around :func:`~ccsynth.synth.sketch.default_sketch`: half and twice its
    chunk factor, with and without sideways detours; for several nodes also
    without the relay rules (fewest hops, best for small messages). Alltoall
    never uses relays between nodes (each chunk has one destination).
    """
    base = default_sketch(topology, collective, size_bytes)
    c0 = base.chunk_factor
    factors = sorted({max(1, c0 // 2), c0, 2 * c0})
    free = None
    if base.internode is not None:
        free = replace(base, internode=None, name=base.name + "+direct")
        free = replace(free, symmetry=find_symmetries(topology, free))
    out = []
    if collective.kind == "alltoall":
        for c in factors:
            for d in (0, 1):
                out.append(replace(free or base, chunk_factor=c, detours=d))
        return _dedupe(out)
    for c in factors:
        for d in (0, 1):
            out.append(replace(base, chunk_factor=c, detours=d))
    if free is not None and c0 == 1:
        out.append(replace(free, chunk_factor=1, detours=0))
    if base.internode is not None and topology.n_nodes >= 3 and c0 > 1:
        # rings along the rails: one connection per NIC, whole chunks per wave
        ring = replace(base, internode=replace(base.internode, ring=True), name=base.name + "+ring")
        ring = replace(ring, symmetry=find_symmetries(topology, ring))
        for c in factors:
            out.append(replace(ring, chunk_factor=c, detours=0))
    return _dedupe(out)


# ============================================================================ the request and its candidates
def _check_request(topology, collective: Collective, sketch: Sketch | None, size_bytes: int | None) -> int:
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


def _candidates(topology, collective: Collective, sketch: Sketch | None, size_bytes: int) -> list[Candidate]:
    """The user's sketch (checked against the topology) or the default ones; for allreduce also the gather strategy."""
    if sketch is not None:
        sk = replace(sketch, chunk_factor=collective.chunk_factor) if collective.chunk_factor > 1 else sketch
        sk.bind(topology)  # sketch errors before any solver runs
        sketches = [sk]
    else:
        sketches = candidate_sketches(topology, collective, size_bytes)
        if collective.chunk_factor > 1:
            sketches = _dedupe([replace(c, chunk_factor=collective.chunk_factor) for c in sketches])
    candidates = [Candidate(sk, RS_AG) for sk in sketches]
    if collective.kind == "allreduce":
        # latency-bound sizes: gather every rank's whole buffer and reduce locally (one tree depth, not two)
        first = sketches[0] if sketch is not None else replace(sketches[0], chunk_factor=1, detours=0)
        candidates.append(Candidate(first, GATHER_REDUCE))
    return candidates


def _dedupe(sketches: list[Sketch]) -> list[Sketch]:
    out, seen = [], set()
    for s in sketches:
        key = s.to_json()
        if key not in seen:
            seen.add(key)
            out.append(s)
    return out


def _describe_sketch(sk: Sketch) -> str:
    bits = [f"c={sk.chunk_factor}"]
    if sk.detours:
        bits.append("detours")
    if sk.internode is not None:
        bits.append(sk.internode.pattern or "relays")
        if sk.internode.ring:
            bits.append("node ring")
    if sk.symmetry:
        bits.append("sym" + "".join(f"[{o},{s}]" for o, s in sk.symmetry))
    return f"{sk.name}({', '.join(bits)})"


# ============================================================================ stage A: routing and ordering
def _plan_candidates(topology, collective: Collective, candidates: list[Candidate], options: SolverOptions,
                     size_bytes: int, prog: _Progress, *, user_sketch: bool) -> list[_Scored]:
    """Route and order every candidate; the ones that work, best estimate first.

    A candidate that fails is skipped, unless it is the user's own sketch
    (``user_sketch``, reduce-scatter-then-allgather strategy): then its
    error is the answer.
    """
    scored: list[_Scored] = []
    errors = []
    for cand in candidates:
        try:
            plans = _plan_candidate(topology, collective, cand, options, size_bytes, prog)
        except (InfeasibleError, SketchError) as e:
            if user_sketch and cand.strategy == RS_AG:
                raise
            errors.append(f"{cand.describe()}: {e}")
            prog("candidate", f"{cand.describe()} failed: {e}")
            continue
        variants = _wave_variants(plans)
        est = min(v.estimated_us for v in variants)
        scored.append(_Scored(est, cand, plans.strict, variants))
        prog("candidate", f"{cand.describe()}: estimated {est:.3f} us")
    if not scored:
        raise InfeasibleError("no candidate sketch gave a schedule: " + "; ".join(errors))
    scored.sort(key=lambda s: s.estimated_us)  # stable: ties keep the candidates' order
    return scored


def _plan_candidate(topology, collective: Collective, cand: Candidate, options: SolverOptions, size_bytes: int,
                    prog: _Progress) -> CandidatePlans:
    """Routing and ordering: TransferPlans per phase (two for allreduce), strict and latency-overlapped."""
    kind = collective.kind
    sk = cand.sketch
    n = topology.n_ranks
    c = sk.chunk_factor
    piece = size_bytes / (n * c)
    ropts = options if options.time_limit is not None else options.with_time_limit(ROUTING_TIME_LIMIT)
    if kind == "allreduce" and cand.strategy == GATHER_REDUCE:
        phases = [_phase_plan(topology, sk, ropts, size_bytes / c, prog, "allgather of whole buffers")]
    elif kind == "allgather":
        phases = [_phase_plan(topology, sk, ropts, piece, prog, "allgather")]
    elif kind == "reduce_scatter":
        phases = [_phase_plan(topology.reversed(), sk, ropts, piece, prog, "allgather on the reversed topology")]
    elif kind == "allreduce":
        rtopo = topology.reversed()
        rs = _phase_plan(rtopo, sk, ropts, piece, prog, "reduce-scatter (allgather on the reversed topology)")
        if _same_structure(rtopo, topology):
            ag = rs  # the reversed network is the same network: one routing serves both halves
        else:
            ag = _phase_plan(topology, sk, ropts, piece, prog, "allgather")
        phases = [rs, ag]
    elif kind == "alltoall":
        phases = [_phase_plan(topology, sk, ropts, piece, prog, "alltoall", alltoall=True)]
    else:  # pragma: no cover
        raise CollectiveError(f"synthesis does not support {kind}")
    return CandidatePlans(tuple(p.strict for p in phases), tuple(p.overlapped for p in phases))


def _phase_plan(topology, sk: Sketch, options, piece_bytes: float, prog: _Progress, what: str,
                alltoall: bool = False) -> _PhasePlan:
    """One phase routed and ordered by both list schedules."""
    lt = sk.bind(topology)
    prog("sketch", f"{_describe_sketch(sk)}, {what}: symmetry group of order {lt.group.order}")
    if alltoall:
        routing = route_alltoall(lt, sk.chunk_factor, piece_bytes, options)
    else:
        routing = route_allgather(lt, sk.chunk_factor, piece_bytes, options)
    prog("routing", _routing_detail(routing))
    plan = order_moves(routing)
    ovl = order_moves(routing, overlap_alpha=True)
    prog("ordering", f"{len(plan.moves)} representative moves, estimated {plan.makespan_us:.3f} us "
                     f"({ovl.makespan_us:.3f} us with overlapped latencies)")
    return _PhasePlan(plan, ovl)


def _same_structure(a, b) -> bool:
    ca = {(c.src, c.dst, c.alpha, c.bw) for c in a.connections()}
    cb = {(c.src, c.dst, c.alpha, c.bw) for c in b.connections()}
    if ca != cb:
        return False
    ka = sorted((sorted(x.srcs), sorted(x.dsts), x.bw) for x in a.bandwidth_constraints())
    kb = sorted((sorted(x.srcs), sorted(x.dsts), x.bw) for x in b.bandwidth_constraints())
    return ka == kb and tuple(a.nodes) == tuple(b.nodes)


def _wave_variants(plans: CandidatePlans) -> tuple[WaveVariant, ...]:
    """Wave groupings tried for a candidate, with the wave windows to lower them with.

    From the strict list schedule: one piece per wave, the DP heuristic's
    grouping and one wave per connection (window 1 first); from the list
    schedule that overlaps latencies: one piece per wave with several waves
    in flight (windows 0 and 2).
    """
    std = plans.strict
    chain = tuple(chain_waves(p) for p in std)
    out = [WaveVariant("chain", chain, WINDOWS)]
    dp = tuple(dp_waves(p) for p in std)
    if any(d.groups != c.groups for d, c in zip(dp, chain)):
        out.append(WaveVariant("dp", dp, WINDOWS))
    try:
        single = tuple(single_waves(p) for p in std)
    except InfeasibleError:  # symmetric timing can make one wave per connection cyclic
        single = None
    if single is not None and any(x.groups != c.groups for x, c in zip(single, chain)):
        out.append(WaveVariant("single", single, (1,)))
    out.append(WaveVariant("overlapped", tuple(chain_waves(p) for p in plans.overlapped), (0, 2)))
    return tuple(out)


# ============================================================================ stage B: lowering and simulation
def _simulate_candidates(topology, collective: Collective, scored: list[_Scored], size_bytes: int, prog: _Progress,
                         report: SynthReport) -> list[_Simulated]:
    """Lower every candidate in every wave variant and window; each one's fastest, fastest first."""
    results: list[_Simulated] = []
    for sc in scored:
        cand = sc.candidate
        t, name, window, sched = math.inf, "", 0, None  # the fastest lowering so far
        for variant in sc.variants:
            for w in variant.windows:
                s = _lower(topology, collective, cand, variant.parts, w)
                ts = simulate(s, topology, size_bytes).time_us
                if sched is None or is_less(ts, t):
                    t, name, window, sched = ts, variant.name, w, s
        if sched is None:  # every candidate comes with at least one wave variant and window
            raise InfeasibleError(f"{cand.describe()} has no lowering to simulate")
        report.candidates.append({"sketch": cand.describe(), "estimated_us": sc.estimated_us, "time_us": t,
                                  "waves": name, "window": window})
        prog("simulated", f"{cand.describe()}: {t:.3f} us at {size_bytes} bytes ({name} waves, window {window})")
        results.append(_Simulated(t, cand, sc.plans, sched))
    results.sort(key=lambda r: r.time_us)  # stable: ties keep the estimates' order
    return results


def _lower(topology, collective: Collective, cand: Candidate, parts: tuple[Waves, ...], window: int = 1) -> Schedule:
    sk = cand.sketch
    n = topology.n_ranks
    c = sk.chunk_factor
    kind = collective.kind
    if kind == "allreduce" and cand.strategy == GATHER_REDUCE:
        return lower_allreduce_gather(parts[0], Collective("allreduce", n, c), topology, sk, window)
    if kind == "allgather":
        return lower_allgather(parts[0], Collective("allgather", n, c), topology, sk, window)
    if kind == "reduce_scatter":
        return lower_reduce_scatter(parts[0], Collective("reduce_scatter", n, c), topology, sk, window)
    if kind == "allreduce":
        return lower_allreduce(parts[0], parts[1], Collective("allreduce", n, n * c), topology, sk, window)
    return lower_alltoall(parts[0], Collective("alltoall", n, c), topology, sk, window)


# ============================================================================ stage C: the contiguity MILP
def _refine_contiguity(topology, collective: Collective, best: _Simulated, options: SolverOptions, size_bytes: int,
                       prog: _Progress) -> tuple[float, Schedule]:
    """The contiguity MILP on the winner's plans; its waves replace the winner's schedule if they simulate faster."""
    best_t, best_sched = best.time_us, best.schedule
    opts = options if options.time_limit is not None else options.with_time_limit(CONTIGUITY_TIME_LIMIT)
    improved = []
    for plan in best.plans:
        w = schedule_waves(plan, opts, quiet_timeout=options.time_limit is None)
        prog("contiguity", _waves_detail(w))
        improved.append(w)
    if any(w.method == "milp" for w in improved):
        for window in WINDOWS:
            sched = _lower(topology, collective, best.candidate, tuple(improved), window)
            t = simulate(sched, topology, size_bytes).time_us
            prog("simulated", f"{best.candidate.describe()} with MILP waves, window {window}: {t:.3f} us")
            if is_less(t, best_t):
                best_t, best_sched = t, sched
    return best_t, best_sched


def _finish(sched: Schedule, topology, prog: _Progress) -> Schedule:
    rep = verify(sched, topology)
    prog("verify", f"{rep.n_ops} ops, {rep.n_transfers} transfers: verified")
    return sched.with_meta(verified=True)


# ============================================================================ progress lines
def _routing_detail(r: Routing) -> str:
    s = r.solve
    sol = f", objective {s.objective:.6g}" + ("" if s.bound is None else f", bound {s.bound:.6g}") if s else ""
    return (f"{r.method}: bandwidth time {r.t_bw_us:.3f} us{sol}; {r.n_vars} variables "
            f"({r.n_vars_full} without symmetry), {r.n_constraints} constraints")


def _waves_detail(w: Waves) -> str:
    s = w.solve
    sol = "" if s is None else f", objective {s.objective:.6g}" + ("" if s.bound is None else f", bound {s.bound:.6g}")
    return f"{w.method}: {w.n_waves()} waves, estimated {w.makespan_us:.3f} us{sol}"
