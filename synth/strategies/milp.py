"""The MILP strategy: TACCL's stages with ccsynth's own models.

For every candidate sketch (the user's, or the default ones of
:mod:`.milp_sketches` along their chunk-factor ladders):

A. :func:`plan_candidates` -- routed (:mod:`~ccsynth.synth.routing`, or
   :mod:`~ccsynth.synth.alltoall`) and ordered twice
   (:mod:`~ccsynth.synth.ordering`: each piece's latency paid in turn, and
   latencies overlapping the previous piece's data), scored by the list
   schedules' estimates. Each family of sketches climbs its chunk-factor
   ladder only while its estimate improves: :data:`CLIMB_PATIENCE` factors
   in a row no better than its best end the climb;
B. :func:`simulate_candidates` -- the best :data:`SIMULATED_CANDIDATES` are
   grouped into waves (:mod:`~ccsynth.synth.contiguity`) in every
   :class:`WaveVariant`, lowered in every window
   (:mod:`~ccsynth.synth.lowering`) and simulated at the request's size;
C. :func:`refine_contiguity` -- the contiguity MILP regroups the winner's
   waves; kept as a candidate of its own when it simulates faster.

Every schedule of stage B (each candidate's fastest lowering) and C is a
candidate of the strategy: the synthesizer ranks them with the others', and
the form they are written in decides among the close ones.

The MILPs run for the four collectives of :data:`MILP_KINDS`; above
:data:`MILP_MAX_RANKS` ranks only where the packed trees or the
multi-dimension schedulers do not serve the request, or for a user's sketch
(the routing MILPs took 100-284 s at 32 ranks on two cores while the
packing meets the bandwidth bound: the MILPs could only win on latency).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ccsynth.collectives.schedule import Schedule
from ccsynth.collectives.spec import Collective
from ccsynth.errors import CollectiveError, InfeasibleError, SketchError
from ccsynth.synth.alltoall import route_alltoall
from ccsynth.synth.contiguity import Waves, chain_waves, dp_waves, schedule_waves, single_waves
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
from ccsynth.synth.sketch import Sketch
from ccsynth.synth.solver import SolverOptions
from ccsynth.synth.strategies.base import Progress, SynthCandidate, SynthReport, SynthRequest
from ccsynth.synth.strategies.milp_sketches import GATHER_REDUCE, RS_AG, Candidate, describe_sketch, milp_candidates
from ccsynth.tolerance import is_less
from ccsynth.topologies.model import Topology

__all__ = [
    "MILP_KINDS",
    "MILP_MAX_RANKS",
    "CONTIGUITY_TIME_LIMIT",
    "ROUTING_TIME_LIMIT",
    "SIMULATED_CANDIDATES",
    "WINDOWS",
    "CLIMB_PATIENCE",
    "CandidatePlans",
    "WaveVariant",
    "MilpStrategy",
    "STRATEGY",
    "plan_candidates",
    "simulate_candidates",
    "refine_contiguity",
]

#: the collectives the MILP stages synthesize (broadcast and reduce come from the tree packing alone)
MILP_KINDS = ("allgather", "reduce_scatter", "allreduce", "alltoall")
#: above this many ranks the MILPs are not run for a collective another strategy serves (module docstring)
MILP_MAX_RANKS = 16
#: default time limit (s) of one contiguity MILP when the caller sets none (it is warm-started from a
#: heuristic, so stopping early only forgoes an improvement)
CONTIGUITY_TIME_LIMIT = 10.0
#: default time limit (s) of one routing MILP when the caller sets none
ROUTING_TIME_LIMIT = 30.0
#: candidates (best estimates first) that are lowered to schedules and simulated
SIMULATED_CANDIDATES = 3
#: how many waves of a connection may be in flight: 1 (strict FIFO), 0 (data dependencies only), 2
WINDOWS = (1, 0, 2)
#: chunk factors in a row no better than a family's best estimate that end its climb up the ladder (each costs an
#: ordering, and the best three are lowered and simulated: at 64 MiB the finest factors cost the most)
CLIMB_PATIENCE = 1


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
    lowering: str
    #: its fastest lowering with one wave in flight per connection (window 1), when that is not the fastest:
    #: the order an MSCCL threadblock keeps anyway, so the form most likely to keep its speed as written
    in_order: tuple[float, Schedule, str] | None = None


class MilpStrategy:
    """TACCL's MILP stages (module docstring)."""

    name = "milp"
    preference = 0  # ties between strategies go to the MILPs' schedule, then the trees', then multi-dimension

    def applies(self, request: SynthRequest) -> bool:
        return request.collective.kind in MILP_KINDS

    def candidates(self, request: SynthRequest, found: Sequence[SynthCandidate]) -> list[SynthCandidate]:
        r = request
        if found and r.sketch is None and r.topology.n_ranks > MILP_MAX_RANKS:
            return []  # the packing (or a multi-dimension schedule) serves a large machine: see the module docstring
        candidates = milp_candidates(r.topology, r.collective, r.sketch, r.size_bytes)
        r.progress("sketches", f"{len(candidates)} candidate(s): " + ", ".join(c.describe() for c in candidates))
        scored = plan_candidates(r.topology, r.collective, candidates, r.options, r.size_bytes, r.progress,
                                 user_sketch=r.sketch is not None)
        results = simulate_candidates(r.topology, r.collective, scored[:SIMULATED_CANDIDATES], r.size_bytes,
                                      r.progress, r.report)
        out = [SynthCandidate(self.name, f"{x.candidate.describe()} ({x.lowering})", x.schedule, x.time_us)
               for x in results]
        out += [SynthCandidate(self.name, f"{x.candidate.describe()} ({x.in_order[2]})", x.in_order[1],
                               x.in_order[0]) for x in results if x.in_order is not None]
        if r.contiguity:
            refined = refine_contiguity(r.topology, r.collective, results[0], r.options, r.size_bytes, r.progress)
            if refined is not None:
                out.insert(0, refined)
        return out


STRATEGY = MilpStrategy()


# ============================================================================ stage A: routing and ordering
def plan_candidates(topology: Topology, collective: Collective, candidates: list[Candidate],
                    options: SolverOptions, size_bytes: int, prog: Progress, *, user_sketch: bool) -> list[_Scored]:
    """Route and order every candidate (each family up its ladder while it improves); best estimate first.

    A candidate that fails is skipped, unless it is the user's own sketch
    (``user_sketch``, reduce-scatter-then-allgather strategy): then its
    error is the answer.
    """
    scored: list[_Scored] = []
    errors = []
    climb: dict[str, tuple[float, int]] = {}  # family -> (best estimate, factors in a row no better)
    for cand in candidates:
        fam = cand.family()
        best, misses = climb.get(fam, (math.inf, 0))
        if misses >= CLIMB_PATIENCE:
            prog("candidate", f"{cand.describe()}: not tried (its family stopped improving)")
            continue
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
        climb[fam] = (est, 0) if best == math.inf or is_less(est, best) else (best, misses + 1)
        scored.append(_Scored(est, cand, plans.strict, variants))
        prog("candidate", f"{cand.describe()}: estimated {est:.3f} us")
    if not scored:
        raise InfeasibleError("no candidate sketch gave a schedule: " + "; ".join(errors))
    scored.sort(key=lambda s: s.estimated_us)  # stable: ties keep the candidates' order
    return scored


def _plan_candidate(topology: Topology, collective: Collective, cand: Candidate, options: SolverOptions,
                    size_bytes: int, prog: Progress) -> CandidatePlans:
    """Routing and ordering: TransferPlans per phase (two for allreduce), strict and latency-overlapped."""
    kind = collective.kind
    sk = cand.sketch
    piece = size_bytes / (topology.n_ranks * sk.chunk_factor)
    ropts = options if options.time_limit is not None else options.with_time_limit(ROUTING_TIME_LIMIT)
    if kind == "allreduce" and cand.strategy == GATHER_REDUCE:
        phases = [_phase_plan(topology, sk, ropts, size_bytes / sk.chunk_factor, prog, "allgather of whole buffers")]
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


def _phase_plan(topology: Topology, sk: Sketch, options: SolverOptions, piece_bytes: float, prog: Progress,
                what: str, alltoall: bool = False) -> _PhasePlan:
    """One phase routed and ordered by both list schedules."""
    lt = sk.bind(topology)
    prog("sketch", f"{describe_sketch(sk)}, {what}: symmetry group of order {lt.group.order}")
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


def _same_structure(a: Topology, b: Topology) -> bool:
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
def simulate_candidates(topology: Topology, collective: Collective, scored: list[_Scored], size_bytes: int,
                        prog: Progress, report: SynthReport) -> list[_Simulated]:
    """Lower every candidate in every wave variant and window; each one's fastest, fastest first."""
    results: list[_Simulated] = []
    for sc in scored:
        cand = sc.candidate
        t, name, window, sched = math.inf, "", 0, None  # the fastest lowering so far
        in_order: tuple[float, Schedule, str] | None = None  # the fastest with window 1
        for variant in sc.variants:
            for w in variant.windows:
                s = _lower(topology, collective, cand, variant.parts, w)
                ts = simulate(s, topology, size_bytes).time_us
                if sched is None or is_less(ts, t):
                    t, name, window, sched = ts, variant.name, w, s
                if w == 1 and (in_order is None or is_less(ts, in_order[0])):
                    in_order = (ts, s, f"{variant.name} waves, window 1")
        if sched is None:  # every candidate comes with at least one wave variant and window
            raise InfeasibleError(f"{cand.describe()} has no lowering to simulate")
        report.candidates.append({"sketch": cand.describe(), "estimated_us": sc.estimated_us, "time_us": t,
                                  "waves": name, "window": window})
        prog("simulated", f"{cand.describe()}: {t:.3f} us at {size_bytes} bytes ({name} waves, window {window})")
        results.append(_Simulated(t, cand, sc.plans, sched, f"{name} waves, window {window}",
                                  None if in_order is None or in_order[1] is sched else in_order))
    results.sort(key=lambda r: r.time_us)  # stable: ties keep the estimates' order
    return results


def _lower(topology: Topology, collective: Collective, cand: Candidate, parts: tuple[Waves, ...],
           window: int = 1) -> Schedule:
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
def refine_contiguity(topology: Topology, collective: Collective, best: _Simulated, options: SolverOptions,
                      size_bytes: int, prog: Progress) -> SynthCandidate | None:
    """The contiguity MILP on the winner's plans: a candidate when its waves simulate faster than the winner."""
    best_t, best_sched, label = best.time_us, None, ""
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
                best_t, best_sched, label = t, sched, f"{best.candidate.describe()} (MILP waves, window {window})"
    return None if best_sched is None else SynthCandidate(STRATEGY.name, label, best_sched, best_t)


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
