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
5. lowering (this module) -- the waves become a
   :class:`~ccsynth.collectives.schedule.Schedule` built with
   :class:`~ccsynth.collectives.builder.ScheduleBuilder`: the waves of one
   connection follow each other (a *window* of 1: wave ``k`` waits for wave
   ``k - 1``; 2: for wave ``k - 2``; 0: only for its data), and pieces of a
   wave that are adjacent in both buffers travel as one transfer.

Without a sketch :func:`synthesize` tries the default sketches of
:func:`candidate_sketches` (chunk factors around the size-based default,
with and without sideways detours, and for several nodes relay variants).
Every candidate is routed and ordered and scored by the list schedules'
estimates; the best :data:`SIMULATED_CANDIDATES` are lowered in every wave
variant and window and simulated (:func:`ccsynth.synth.simulate.simulate`)
at ``size_bytes``; the contiguity MILP then refines the winner. The
fastest schedule in simulation is returned, after
:func:`~ccsynth.collectives.verify.verify` on the topology.

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
import time
from dataclasses import dataclass, field, replace
from typing import Callable

from ccsynth.collectives.builder import ScheduleBuilder
from ccsynth.collectives.schedule import Schedule
from ccsynth.collectives.spec import Collective
from ccsynth.errors import CollectiveError, InfeasibleError, SketchError
from ccsynth.synth.contiguity import Waves, chain_waves, dp_waves, schedule_waves, single_waves
from ccsynth.synth.ordering import TransferPlan, order_moves
from ccsynth.synth.routing import Routing, map_edge, route_allgather
from ccsynth.synth.sketch import Sketch, default_sketch, find_symmetries
from ccsynth.synth.solver import SolverOptions

log = logging.getLogger(__name__)

SUPPORTED = ("allgather", "reduce_scatter", "allreduce", "alltoall")

#: default message size when the caller gives none (bytes)
DEFAULT_SIZE = 1 << 20

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
#: default time limit (s) of one contiguity MILP when the caller sets none (it is warm-started from a
#: heuristic, so stopping early only forgoes an improvement)
CONTIGUITY_TIME_LIMIT = 10.0
#: default time limit (s) of one routing MILP when the caller sets none
ROUTING_TIME_LIMIT = 30.0


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
) -> Schedule:
    """Synthesize a verified schedule of ``collective`` on ``topology``.

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

    Raises :class:`~ccsynth.errors.SketchError` for a sketch that does not
    fit the topology, :class:`~ccsynth.errors.InfeasibleError` when no
    schedule is found (e.g. the time limit passes first), and
    :class:`~ccsynth.errors.SolverError` when the solver is missing.
    """
    from ccsynth.synth.simulate import simulate

    options = options or SolverOptions()
    report = report if report is not None else SynthReport()
    prog = _Progress(progress, report)
    if collective.kind not in SUPPORTED:
        raise CollectiveError(f"synthesis supports {', '.join(SUPPORTED)}; got {collective.kind}")
    if topology.n_ranks != collective.n_ranks:
        raise CollectiveError(f"the collective has {collective.n_ranks} ranks but topology {topology.name!r} has {topology.n_ranks}")
    if topology.n_ranks < 2:
        raise CollectiveError(f"synthesis needs at least 2 ranks; topology {topology.name!r} has {topology.n_ranks}")
    topology.require_connected(f"synthesizing {collective.kind}")
    if size_bytes is None:
        size_bytes = sketch.input_size if sketch is not None and sketch.input_size else DEFAULT_SIZE
    if isinstance(size_bytes, bool) or not isinstance(size_bytes, int) or size_bytes <= 0:
        raise CollectiveError(f"the message size must be a positive number of bytes, got {size_bytes!r}")
    if sketch is not None:
        sk = replace(sketch, chunk_factor=collective.chunk_factor) if collective.chunk_factor > 1 else sketch
        sk.bind(topology)  # sketch errors before any solver runs
        sketches = [sk]
    else:
        sketches = candidate_sketches(topology, collective, size_bytes)
        if collective.chunk_factor > 1:
            sketches = _dedupe([replace(c, chunk_factor=collective.chunk_factor) for c in sketches])
    candidates = [(sk, RS_AG) for sk in sketches]
    if collective.kind == "allreduce":
        # latency-bound sizes: gather every rank's whole buffer and reduce locally (one tree depth, not two)
        first = sketches[0] if sketch is not None else replace(sketches[0], chunk_factor=1, detours=0)
        candidates.append((first, GATHER_REDUCE))
    prog("sketches", f"{len(candidates)} candidate(s): " + ", ".join(_describe_candidate(c) for c in candidates))
    # stage A: routing and ordering of every candidate, scored by the list schedules' estimates
    scored = []
    errors = []
    for cand in candidates:
        sk, strategy = cand
        try:
            std, ovl = _plan_candidate(topology, collective, sk, options, size_bytes, prog, strategy)
        except (InfeasibleError, SketchError) as e:
            if sketch is not None and strategy == RS_AG:
                raise
            errors.append(f"{_describe_candidate(cand)}: {e}")
            prog("candidate", f"{_describe_candidate(cand)} failed: {e}")
            continue
        variants = _wave_variants(std, ovl)
        est = min(sum(w.makespan_us for w in parts) for _, parts, _ in variants)
        scored.append((est, len(scored), cand, std, variants))
        prog("candidate", f"{_describe_candidate(cand)}: estimated {est:.3f} us")
    if not scored:
        raise InfeasibleError("no candidate sketch gave a schedule: " + "; ".join(errors))
    scored.sort(key=lambda r: (r[0], r[1]))
    # stage B: lower the most promising candidates in every wave variant and simulate them
    results = []
    for est, _, cand, std, variants in scored[:SIMULATED_CANDIDATES]:
        best_here = None
        for name, parts, windows in variants:
            for window in windows:
                sched = _lower(topology, collective, cand, parts, window)
                t = simulate(sched, topology, size_bytes).time_us
                if best_here is None or t < best_here[0] - 1e-9:
                    best_here = (t, name, window, sched)
        t, name, window, sched = best_here
        report.candidates.append({"sketch": _describe_candidate(cand), "estimated_us": est, "time_us": t, "waves": name,
                                  "window": window})
        prog("simulated", f"{_describe_candidate(cand)}: {t:.3f} us at {size_bytes} bytes ({name} waves, window {window})")
        results.append((t, len(results), cand, std, sched))
    results.sort(key=lambda r: (r[0], r[1]))
    best_t, _, best_cand, best_plans, best = results[0]
    # stage C: the contiguity MILP on the winner
    if contiguity:
        opts = options if options.time_limit is not None else options.with_time_limit(CONTIGUITY_TIME_LIMIT)
        improved = []
        for plan in best_plans:
            w = schedule_waves(plan, opts, quiet_timeout=options.time_limit is None)
            prog("contiguity", _waves_detail(w))
            improved.append(w)
        if any(w.method == "milp" for w in improved):
            for window in WINDOWS:
                sched = _lower(topology, collective, best_cand, improved, window)
                t = simulate(sched, topology, size_bytes).time_us
                prog("simulated", f"{_describe_candidate(best_cand)} with MILP waves, window {window}: {t:.3f} us")
                if t < best_t - 1e-9:
                    best_t, best = t, sched
    best = best.with_meta(predicted_us=best_t, size_bytes=size_bytes, candidates=report.candidates)
    return _finish(best, topology, prog)


#: candidates (best estimates first) that are lowered to schedules and simulated
SIMULATED_CANDIDATES = 3
#: allreduce strategies: reduce-scatter then allgather; or gather every buffer and reduce locally
RS_AG = "rs+ag"
GATHER_REDUCE = "allgather+reduce"


def _describe_candidate(cand) -> str:
    sk, strategy = cand
    return _describe_sketch(sk) + ("" if strategy == RS_AG else f" [{strategy}]")


#: how many waves of a connection may be in flight: 1 (strict FIFO), 0 (data dependencies only), 2
WINDOWS = (1, 0, 2)


def _wave_variants(std: list[TransferPlan], ovl: list[TransferPlan]) -> list[tuple[str, list[Waves], tuple[int, ...]]]:
    """Wave groupings tried for a candidate, with the wave windows to lower them with.

    From the strict list schedule: one piece per wave, the DP heuristic's
    grouping and one wave per connection (window 1 first); from the list
    schedule that overlaps latencies: one piece per wave with several waves
    in flight (windows 0 and 2).
    """
    chain = [chain_waves(p) for p in std]
    out = [("chain", chain, WINDOWS)]
    dp = [dp_waves(p) for p in std]
    if any(d.groups != c.groups for d, c in zip(dp, chain)):
        out.append(("dp", dp, WINDOWS))
    try:
        single = [single_waves(p) for p in std]
    except InfeasibleError:  # symmetric timing can make one wave per connection cyclic
        single = None
    if single is not None and any(x.groups != c.groups for x, c in zip(single, chain)):
        out.append(("single", single, (1,)))
    out.append(("overlapped", [chain_waves(p) for p in ovl], (0, 2)))
    return out


def best_baseline(collective: Collective, topology, size_bytes: int, chunk_factors=()):
    """``(name, chunk_factor, SimResult, schedule)`` of the fastest applicable baseline, or None.

    Every baseline is tried with chunk factor 1, the factors given, and for
    allreduce also ``n`` (one block per rank), so each classic algorithm is
    compared at its best.
    """
    from ccsynth.errors import CCSynthError
    from ccsynth.synth.baselines import applicable_baselines, make_baseline
    from ccsynth.synth.simulate import simulate

    n = topology.n_ranks
    factors = {1, *chunk_factors}
    if collective.kind == "allreduce":
        factors.add(n)
    best = None
    for cf in sorted(factors):
        coll = Collective(collective.kind, n, cf)
        for name in applicable_baselines(coll, topology):
            try:
                sched = make_baseline(name, coll, topology)
            except CCSynthError:
                continue
            r = simulate(sched, topology, size_bytes)
            if best is None or r.time_us < best[2].time_us - 1e-9:
                best = (name, cf, r, sched)
    return best


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


# ============================================================================ internals
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


def _finish(sched: Schedule, topology, prog: _Progress) -> Schedule:
    from ccsynth.collectives.verify import verify

    rep = verify(sched, topology)
    prog("verify", f"{rep.n_ops} ops, {rep.n_transfers} transfers: verified")
    return sched.with_meta(verified=True)


def _routing_options(options: SolverOptions) -> SolverOptions:
    return options if options.time_limit is not None else options.with_time_limit(ROUTING_TIME_LIMIT)


def _plan_candidate(topology, collective: Collective, sk: Sketch, options: SolverOptions, size_bytes: int,
                    prog: _Progress, strategy: str = RS_AG) -> tuple[list[TransferPlan], list[TransferPlan]]:
    """Routing and ordering: TransferPlans per phase (two for allreduce), strict and latency-overlapped."""
    kind = collective.kind
    n = topology.n_ranks
    c = sk.chunk_factor
    piece = size_bytes / (n * c)
    ropts = _routing_options(options)
    if kind == "allreduce" and strategy == GATHER_REDUCE:
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
    return [p[0] for p in phases], [p[1] for p in phases]


def _lower(topology, collective: Collective, cand, parts: list[Waves], window: int = 1) -> Schedule:
    sk, strategy = cand
    n = topology.n_ranks
    c = sk.chunk_factor
    kind = collective.kind
    if kind == "allreduce" and strategy == GATHER_REDUCE:
        return lower_allreduce_gather(parts[0], Collective("allreduce", n, c), topology, sk, window)
    if kind == "allgather":
        return lower_allgather(parts[0], Collective("allgather", n, c), topology, sk, window)
    if kind == "reduce_scatter":
        return lower_reduce_scatter(parts[0], Collective("reduce_scatter", n, c), topology, sk, window)
    if kind == "allreduce":
        return lower_allreduce(parts[0], parts[1], Collective("allreduce", n, n * c), topology, sk, window)
    return lower_alltoall(parts[0], Collective("alltoall", n, c), topology, sk, window)


def _routing_detail(r: Routing) -> str:
    s = r.solve
    sol = f", objective {s.objective:.6g}" + ("" if s.bound is None else f", bound {s.bound:.6g}") if s else ""
    return (f"{r.method}: bandwidth time {r.t_bw_us:.3f} us{sol}; {r.n_vars} variables "
            f"({r.n_vars_full} without symmetry), {r.n_constraints} constraints")


def _waves_detail(w: Waves) -> str:
    s = w.solve
    sol = "" if s is None else f", objective {s.objective:.6g}" + ("" if s.bound is None else f", bound {s.bound:.6g}")
    return f"{w.method}: {w.n_waves()} waves, estimated {w.makespan_us:.3f} us{sol}"


def _phase_plan(topology, sk: Sketch, options, piece_bytes: float, prog: _Progress, what: str,
                alltoall: bool = False) -> tuple[TransferPlan, TransferPlan]:
    lt = sk.bind(topology)
    prog("sketch", f"{_describe_sketch(sk)}, {what}: symmetry group of order {lt.group.order}")
    if alltoall:
        from ccsynth.synth.alltoall import route_alltoall

        routing = route_alltoall(lt, sk.chunk_factor, piece_bytes, options)
    else:
        routing = route_allgather(lt, sk.chunk_factor, piece_bytes, options)
    prog("routing", _routing_detail(routing))
    plan = order_moves(routing)
    ovl = order_moves(routing, overlap_alpha=True)
    prog("ordering", f"{len(plan.moves)} representative moves, estimated {plan.makespan_us:.3f} us "
                     f"({ovl.makespan_us:.3f} us with overlapped latencies)")
    return plan, ovl


def _same_structure(a, b) -> bool:
    ca = {(c.src, c.dst, c.alpha, c.bw) for c in a.connections()}
    cb = {(c.src, c.dst, c.alpha, c.bw) for c in b.connections()}
    if ca != cb:
        return False
    ka = sorted((sorted(x.srcs), sorted(x.dsts), x.bw) for x in a.bandwidth_constraints())
    kb = sorted((sorted(x.srcs), sorted(x.dsts), x.bw) for x in b.bandwidth_constraints())
    return ka == kb and tuple(a.nodes) == tuple(b.nodes)


# ============================================================================ lowering
@dataclass
class _Actual:
    """One actual move (an image of a representative move), for lowering."""

    comm: int
    j: int
    u: int
    v: int
    start: float
    end: float
    wave: tuple  # (actual edge, wave index)
    depth: int


def _actual_moves(waves: Waves) -> list[_Actual]:
    plan = waves.plan
    group = plan.lt.group
    elems = group.elements
    depth: dict[int, int] = {}
    for m in plan.moves:  # moves are created in time order, parents first
        depth[m.id] = 0 if m.parent < 0 else depth[m.parent] + 1
    out = []
    for e, wlist in waves.groups.items():
        seq = plan.links[e]
        for g in elems:
            ge = map_edge(g, e)
            for wi, w in enumerate(wlist):
                for pos in w:
                    mid, hi = seq[pos]
                    m = plan.moves[mid]
                    h = elems[hi]
                    gh = tuple(g[x] for x in h)  # g after h
                    out.append(_Actual(plan.map_comm(gh, m.comm), m.j, ge[0], ge[1], waves.start[mid], waves.end[mid],
                                       (ge, wi), depth[mid]))
    out.sort(key=lambda a: (a.start, a.depth, a.end, a.u, a.v, a.comm, a.j))
    return out


class _Chain:
    """Per-connection wave order: wave ``k`` waits for the sends of wave ``k - window``.

    ``window=1`` runs the waves of a connection one after another (FIFO, as
    in the plan); ``window=2`` lets two waves overlap, which hides one
    wave's latency behind the other's data; ``window=0`` leaves only the
    data dependencies (every ready transfer shares the connection).
    """

    def __init__(self, window: int):
        self.window = window
        self.hist: dict[tuple[int, int], list[list[int]]] = {}

    def deps(self, edge) -> list[int]:
        h = self.hist.get(edge, [])
        if self.window <= 0 or len(h) < self.window:
            return []
        return h[-self.window]

    def push(self, edge, sends: list[int]) -> None:
        self.hist.setdefault(edge, []).append(sends)


def _runs(indices: list[int]) -> list[tuple[int, int]]:
    """Sorted indices -> (first, count) runs of consecutive values."""
    out: list[tuple[int, int]] = []
    for x in sorted(indices):
        if out and out[-1][0] + out[-1][1] == x:
            out[-1] = (out[-1][0], out[-1][1] + 1)
        else:
            out.append((x, 1))
    return out


def _waves_in_order(actual: list[_Actual]) -> list[tuple[tuple, list[_Actual]]]:
    """Group actual moves by wave, waves in order of their first move."""
    waves: dict[tuple, list[_Actual]] = {}
    for a in actual:
        waves.setdefault(a.wave, []).append(a)
    return sorted(waves.items(), key=lambda kv: (kv[1][0].start, min(x.depth for x in kv[1]), kv[0]))


def _meta(waves_list: list[Waves], sk: Sketch, kind: str, window: int = 1) -> dict:
    r = waves_list[0].plan.routing
    return {
        "algorithm": "ccsynth-synth",
        "sketch": sk.to_dict(),
        "routing": {"method": r.method, "t_bw_us": r.t_bw_us, "n_vars": r.n_vars, "n_vars_full": r.n_vars_full,
                    "symmetry_order": r.lt.group.order},
        "estimated_us": sum(w.makespan_us for w in waves_list),
        "contiguity": [w.method for w in waves_list],
        "wave_window": window,
    }


def lower_allgather(waves: Waves, collective: Collective, topology, sk: Sketch, window: int = 1) -> Schedule:
    """Allgather schedule: own pieces copied to the output, relays receive into the output directly."""
    n, c = collective.n_ranks, collective.chunk_factor
    b = ScheduleBuilder(collective, "ccsynth-allgather", topology=topology.name)
    for r in range(n):
        b.copy(r, ("i", 0, c), ("o", r * c, c))
    _emit_forward(b, waves, c, _Chain(window))
    return b.build(**_meta([waves], sk, "allgather", window))


def _emit_forward(b: ScheduleBuilder, waves: Waves, c: int, chain: _Chain, from_output: bool = False) -> None:
    """Emit the broadcast-style moves of ``waves`` (allgather or allreduce's second half).

    Piece ``(s, j)`` lives at output index ``s * c + j`` on every rank.
    """
    actual = _actual_moves(waves)
    for (edge, wi), group in _waves_in_order(actual):
        u, v = edge
        deps = chain.deps(edge)
        idx = sorted(a.comm * c + a.j for a in group)
        sends = []
        for first, count in _runs(idx):
            own = all(x // c == u for x in range(first, first + count))
            src = ("i", first - u * c, count) if own and not from_output else ("o", first, count)
            s_id, _ = b.transfer(u, v, src, ("o", first, count), send_deps=deps)
            sends.append(s_id)
        chain.push(edge, sends)


def lower_reduce_scatter(waves: Waves, collective: Collective, topology, sk: Sketch, window: int = 1) -> Schedule:
    """Reduce-scatter: the allgather on the reversed topology, run backwards with reductions.

    Piece ``(s, j)``: rank ``s`` owns output ``j``; every rank contributes its
    input chunk ``s * c + j``. A rank that forwards the piece in the
    allgather tree accumulates its own contribution and its children's
    partial sums (in scratch, or for the owner in the output) and sends the
    sum to its parent.
    """
    n, c = collective.n_ranks, collective.chunk_factor
    b = ScheduleBuilder(collective, "ccsynth-reduce-scatter", topology=topology.name)
    actual = _actual_moves(waves)
    acc: dict[tuple[int, int], tuple[str, int]] = {}
    scratch = [0]
    senders = sorted({(a.u, a.comm * c + a.j) for a in actual})
    for x, p in senders:
        if x == p // c:
            acc[(x, p)] = ("o", p % c)
        else:
            acc[(x, p)] = ("s", scratch[0])
            scratch[0] += 1
    for (x, p), loc in sorted(acc.items()):
        b.copy(x, ("i", p, 1), (loc[0], loc[1], 1))
    for s in range(n):
        for j in range(c):
            if (s, s * c + j) not in acc:  # an owner with no children (a single rank)
                b.copy(s, ("i", s * c + j, 1), ("o", j, 1))
    _emit_reverse(b, actual, c, acc, lambda x, p: acc.get((x, p), ("i", p)), scratch, _Chain(window))
    return b.build(**_meta([waves], sk, "reduce_scatter", window))


def _emit_reverse(b: ScheduleBuilder, actual: list[_Actual], c: int, acc: dict, src_of, scratch: list[int],
                  chain: _Chain) -> None:
    """Emit the allgather moves reversed in time as reductions towards each piece's owner.

    Allgather move ``u -> v`` of piece ``p`` becomes ``v -> u``: ``v`` sends
    its partial sum (``src_of(v, p)``) and ``u`` combines it into its
    accumulator ``acc[(u, p)]``. A rank with one child reduces on receipt
    (fused receive-reduce); one with several receives each child's sum into
    its own scratch slot and reduces locally, so that the children's
    transfers need not wait for each other.
    """
    T = max((a.end for a in actual), default=0.0)
    n_children: dict[tuple[int, int], int] = {}
    for a in actual:
        key = (a.u, a.comm * c + a.j)
        n_children[key] = n_children.get(key, 0) + 1
    waves: dict[tuple, list[_Actual]] = {}
    for a in actual:
        waves.setdefault(a.wave, []).append(
            _Actual(a.comm, a.j, a.v, a.u, T - a.end, T - a.start, a.wave, -a.depth))
    order = sorted(waves.items(), key=lambda kv: (min(x.start for x in kv[1]), min(x.depth for x in kv[1]), kv[0]))
    for (edge, wi), group in order:
        u, v = edge[1], edge[0]  # the allgather receiver sends its partial sum back to its parent
        deps = chain.deps((u, v))
        items = []
        for a in group:
            p = a.comm * c + a.j
            if n_children[(v, p)] > 1:
                dl = ("s", scratch[0])
                scratch[0] += 1
                items.append((src_of(u, p), dl, p, True))
            else:
                items.append((src_of(u, p), acc[(v, p)], p, False))
        items.sort(key=lambda t: (t[0][0], t[0][1], t[1][0], t[1][1]))
        runs: list[list] = []
        for sl, dl, p, staged in items:
            if runs:
                r = runs[-1]
                if (r[0][0] == sl[0] and r[1][0] == dl[0] and r[0][1] + r[2] == sl[1] and r[1][1] + r[2] == dl[1]
                        and r[3] == staged):
                    r[2] += 1
                    r[4].append(p)
                    continue
            runs.append([sl, dl, 1, staged, [p]])
        sends = []
        for sl, dl, cnt, staged, ps in runs:
            s_id, _ = b.transfer(u, v, (sl[0], sl[1], cnt), (dl[0], dl[1], cnt), reduce=not staged, send_deps=deps)
            sends.append(s_id)
            if staged:
                for k, p in enumerate(ps):
                    loc = acc[(v, p)]
                    b.reduce(v, (dl[0], dl[1] + k, 1), (loc[0], loc[1], 1))
        chain.push((u, v), sends)


def lower_allreduce(rs_waves: Waves, ag_waves: Waves, collective: Collective, topology, sk: Sketch,
                    window: int = 1) -> Schedule:
    """Allreduce = reduce-scatter then allgather over ``n * c`` chunks, partial sums in the output."""
    n, C = collective.n_ranks, collective.chunk_factor
    c = C // n
    b = ScheduleBuilder(collective, "ccsynth-allreduce", topology=topology.name)
    for r in range(n):
        b.copy(r, ("i", 0, C), ("o", 0, C))
    actual = _actual_moves(rs_waves)
    acc = {}
    for a in actual:
        p = a.comm * c + a.j
        acc[(a.u, p)] = ("o", p)
        acc[(a.v, p)] = ("o", p)
    _emit_reverse(b, actual, c, acc, lambda x, p: ("o", p), [0], _Chain(window))
    _emit_forward(b, ag_waves, c, _Chain(window), from_output=True)
    return b.build(**_meta([rs_waves, ag_waves], sk, "allreduce", window))


def lower_allreduce_gather(waves: Waves, collective: Collective, topology, sk: Sketch, window: int = 1) -> Schedule:
    """Allreduce as an allgather of whole buffers followed by local reductions (latency-bound sizes).

    Piece ``(s, j)`` is input chunk ``j`` of rank ``s``; every other rank
    receives it into scratch chunk ``s * c + j`` and adds it to its output.
    """
    n, c = collective.n_ranks, collective.chunk_factor
    b = ScheduleBuilder(collective, "ccsynth-allreduce-gather", topology=topology.name)
    for r in range(n):
        b.copy(r, ("i", 0, c), ("o", 0, c))
    chain = _Chain(window)
    for (edge, wi), group in _waves_in_order(_actual_moves(waves)):
        u, v = edge
        deps = chain.deps(edge)
        sends = []
        for first, count in _runs(sorted(a.comm * c + a.j for a in group)):
            own = all(x // c == u for x in range(first, first + count))
            src = ("i", first - u * c, count) if own else ("s", first, count)
            s_id, _ = b.transfer(u, v, src, ("s", first, count), send_deps=deps)
            sends.append(s_id)
        chain.push(edge, sends)
    for r in range(n):
        for s in range(n):
            if s != r:
                b.reduce(r, ("s", s * c, c), ("o", 0, c))
    return b.build(**_meta([waves], sk, "allreduce", window))


def lower_alltoall(waves: Waves, collective: Collective, topology, sk: Sketch, window: int = 1) -> Schedule:
    """Alltoall: piece ``(s, d, j)`` leaves ``i[d*c+j]`` of ``s`` and lands in ``o[s*c+j]`` of ``d``."""
    n, c = collective.n_ranks, collective.chunk_factor
    b = ScheduleBuilder(collective, "ccsynth-alltoall", topology=topology.name)
    for r in range(n):
        b.copy(r, ("i", r * c, c), ("o", r * c, c))
    actual = _actual_moves(waves)
    # where each piece sits on each rank it visits
    slot: dict[tuple[int, int, int], tuple[str, int]] = {}
    scratch = 0
    for a in actual:
        s, d = divmod(a.comm, n)
        if (s, a.comm, a.j) not in slot:
            slot[(s, a.comm, a.j)] = ("i", d * c + a.j)
        if a.v == d:
            slot[(a.v, a.comm, a.j)] = ("o", s * c + a.j)
        elif (a.v, a.comm, a.j) not in slot:
            slot[(a.v, a.comm, a.j)] = ("s", scratch)
            scratch += 1
    chain = _Chain(window)
    for (edge, wi), group in _waves_in_order(actual):
        u, v = edge
        deps = chain.deps(edge)
        items = sorted((slot[(u, a.comm, a.j)], slot[(v, a.comm, a.j)]) for a in group)
        runs: list[list] = []
        for sl, dl in items:
            if runs:
                psl, pdl, cnt = runs[-1]
                if psl[0] == sl[0] and pdl[0] == dl[0] and psl[1] + cnt == sl[1] and pdl[1] + cnt == dl[1]:
                    runs[-1][2] += 1
                    continue
            runs.append([sl, dl, 1])
        sends = []
        for sl, dl, cnt in runs:
            s_id, _ = b.transfer(u, v, (sl[0], sl[1], cnt), (dl[0], dl[1], cnt), send_deps=deps)
            sends.append(s_id)
        chain.push(edge, sends)
    return b.build(**_meta([waves], sk, "alltoall", window))
