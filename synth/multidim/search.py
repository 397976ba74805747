"""The schedulers' public face: a policy, a chunk count, the dimension-level model's verdict.

:func:`schedule_multidim` runs one scheduler on a topology (or its
:class:`~ccsynth.synth.multidim.network.DimNet`) for one collective and size:

============== ===================================================================
scheduler      chunks and their dimension orders
============== ===================================================================
``fixed``      ascending order for every chunk (:func:`~.policies.fixed_chunks`)
``themis``     Themis's greedy, least-loaded dimension first (:func:`~.policies.themis_chunks`)
``themis-flex`` Themis's flex variant: each chunk sized to close the load gap (:func:`~.policies.themis_flex_chunks`)
``lp``         the lattice LP's orders, rounded to chunks (:func:`~.lp.lp_chunks`); its
               optimum ``T*`` is reported as the bound it is measured against
``auto``       every scheduler above; the fastest in the model wins (ties: the order above)
============== ===================================================================

Every scheduler tries the same chunk counts (:func:`chunk_counts`: 1, 2, 4,
... while a chunk keeps :data:`MIN_CHUNK_BYTES` and the count stays within
:data:`MAX_CHUNKS`, then a grid of counts from 0.75 to 1.5 times each of
the two fastest powers of two, :func:`refine_candidates`), each under both
queue priorities of the dimension-level model
(:data:`~.pipeline.PRIORITIES`), and keeps the fastest in that model
(:func:`~.pipeline.time_chunks`): more chunks pipeline better but pay every
phase's latency and message overheads once more each, and the time is not
convex in the count (Themis's greedy has nothing to balance with one chunk
and can be badly unbalanced with a few; the LP's chunks interleave
differently at every count), so the two best powers of two, which can be
far apart and within a hair of each other, are both refined around; there
are at most 43 counts. The LP, whose every count costs two solves and two
roundings, refines its own roundings around its best power of two only,
and times Themis's and the fixed order's chunks at every count their own
searches try.
Comparisons are therefore at each scheduler's own best chunk
count, as for the baselines (:mod:`ccsynth.synth.baseline_search`).

``lp`` keeps the fastest of its two flows' roundings (equal chunks by the
walk of the shares, equal chunks by the exact rounding of every lattice
edge to a whole number of chunks, :func:`~.lp.rounded_chunks`, and chunks
resized so that each order carries its LP share exactly,
:func:`~.lp.weighted_chunks`; the latter only without ``max_chunks``, since
the IR takes at most four units a chunk) and of Themis's and the fixed
order's chunks for the same count: those are feasible points of the LP's
class (the warm starts a solver would be given), so the LP is never worse
than either, and its own bound ``T*`` holds for all of them. The winner's
chunks are then timed once more in the reverse sequence (the same split,
but the queues fill and drain differently), and the faster sequence is
kept. Where the count is searched (no ``chunks``, no ``max_chunks``), the
winner's first and last chunks are then cut into growing and shrinking
pieces (:mod:`~.ramp`, the depths of :data:`~.ramp.RAMP_DEPTHS`, timed
under the winner's queue priority): the same split, a shorter fill and
drain, ``2 x depth`` chunks more -- so a fixed count stays fixed, and the
IR, which takes at most four units a chunk, gets none. Last, where the
count is searched too, the shares of the winning schedule's orders are
hill-climbed in the model (:mod:`~.shares`: the LP balances floor charges,
the schedule also pays fill, drain and exposed per-message costs), once,
on the winner of the whole search; the tuned chunks whose longest phase is
long (an order that takes a slow dimension early) are then cut into
pieces spread over the sequence and tuned again (:mod:`~.cuts`), and the
model keeps the fastest.
:attr:`MultiDimSchedule.origin` says which one won (``..., reversed``
for the reverse sequence, ``..., ramped to 1/8`` for a ramp of depth 3,
``..., shares tuned``, ``..., long chunks cut, tuned again``).

Nothing here walks the ranks: scheduling 4,096 ranks in 4 dimensions costs
what 16 ranks do (see ``bench/bench_multidim.py``). Every result is a
deterministic function of the topology, the collective and the size (the
LP is solved to optimality), so every rank derives the same schedule.

Example:
    >>> from ccsynth.topologies.catalog import hierarchical
    >>> t = hierarchical([(4, 100), (4, 100)])
    >>> fixed = schedule_multidim(t, "allreduce", 64 << 20, "fixed")
    >>> lp = schedule_multidim(t, "allreduce", 64 << 20, "lp")
    >>> round(fixed.makespan_us / lp.makespan_us, 2) > 1.4    # the LP balances the two dimensions
    True
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field, replace
from collections.abc import Iterable, Sequence

from ccsynth.errors import CollectiveError, InfeasibleError, SizeError, SolverError
from ccsynth.synth.multidim.chunks import ChunkPlan, check_kind
from ccsynth.synth.multidim.cost import PhaseCosts
from ccsynth.synth.multidim.cuts import cut_long_chunks
from ccsynth.synth.multidim.lp import CHARGES, lp_chunks, rounded_chunks, solve_lattice, weighted_chunks
from ccsynth.synth.multidim.network import DimNet, dim_net
from ccsynth.synth.multidim.pipeline import PRIORITIES, DimTiming, time_chunks
from ccsynth.synth.multidim.ramp import RAMP_DEPTHS, ramped_chunks
from ccsynth.synth.multidim.shares import tune_shares
from ccsynth.synth.multidim.policies import equal_units, fixed_chunks, themis_chunks, themis_flex_chunks
from ccsynth.synth.solver import SolverOptions
from ccsynth.tolerance import is_less
from ccsynth.topologies.model import Topology

__all__ = [
    "SCHEDULERS",
    "POLICIES",
    "MAX_CHUNKS",
    "MIN_CHUNK_BYTES",
    "REFINE",
    "REFINE_POINTS",
    "REFINE_CENTRES",
    "RETUNE_TIMINGS",
    "CUT_SLACK",
    "refine_counts",
    "refine_centres",
    "refine_candidates",
    "MultiDimSchedule",
    "chunk_counts",
    "check_scheduler",
    "fastest",
    "schedule_multidim",
    "compare_schedulers",
]

log = logging.getLogger(__name__)

#: the schedulers a user can name (``auto`` runs the others)
SCHEDULERS = ("fixed", "themis", "themis-flex", "lp", "auto")
#: the policies ``auto`` compares, in tie-breaking order
POLICIES = ("fixed", "themis", "themis-flex", "lp")
#: the most chunks a collective is cut into
MAX_CHUNKS = 1024
#: more chunks are tried only while a chunk keeps at least this many bytes
MIN_CHUNK_BYTES = 4096
#: after the powers of two, the counts from the first to the second multiple of the best one are tried too
#: (the model's time is not convex in the count: per-message costs against fill and drain, and how the
#: chunks' orders interleave in the pipeline), on a grid of at most :data:`REFINE_POINTS` counts
REFINE = (0.75, 1.5)
#: the most counts the refinement grid tries (its step grows with the best count): a bound on the search's
#: cost (each count costs the LP two solves and two roundings), not a figure fitted to any result
REFINE_POINTS = 16
#: the refinement's centres: the fastest this many powers of two (ties: fewer chunks). One is not enough: the
#: time is not convex in the count, and two powers of two far apart can be within a hair of each other while
#: only one of them has the real optimum next to it (Themis on ``2x8x8x8@250,175,50,12.5`` at 64 MiB: 2 chunks
#: 592.0 us, 32 chunks 591.7 us, 3 chunks 480.9 us). The LP refines its own roundings around its best count
#: only (each count costs it two solves and two roundings), and the cheap warm starts around these centres of
#: Themis's and the fixed order's own searches (:func:`_search`)
REFINE_CENTRES = 2
#: the most timings the share tuning of the cut chunks makes (:meth:`_Run.tuned`): three times the first
#: tuning's (:data:`~.shares.MAX_TIMINGS`). The cut chunks are more and the climb's steps finer, and on
#: ``2x8x8x8@250,200,100,50`` at 1 GiB it still gains after 500 timings (3652.1 us at 240, 3635.7 at 562); where
#: no move gains it stops early, whatever the cap (``8x8x8x8@400,200,100,50``: 169 timings)
RETUNE_TIMINGS = 720
#: the cut chunks are tuned again only when, before that tuning, they are within this fraction of the tuned
#: winner (cost control: the tuning moves shares by small steps; in the suite a cut that started further behind
#: never caught up -- ``8x8x8x8@400,200,100,50`` at 1 GiB: 14% behind, 5% after 169 timings, 1.2 s of the 4,096-rank
#: search -- while the cuts that won started 0-2.1% behind)
CUT_SLACK = 0.05


@dataclass(frozen=True)
class MultiDimSchedule:
    """A multi-dimension schedule: chunks with their dimension orders, and the model's timing of them."""

    scheduler: str  # the policy that made it (``auto`` names the winner here)
    kind: str
    size_bytes: float
    net: DimNet
    chunks: tuple[ChunkPlan, ...]
    timing: DimTiming
    lp_bound_us: float | None = None  # the LP's own bound T* (lp only)
    origin: str = ""  # where the chunk orders come from (lp: its own rounding or the Themis warm start)
    tried: tuple[tuple[int, float], ...] = field(default=(), compare=False)  # (chunk count, makespan) searched

    @property
    def makespan_us(self) -> float:
        return self.timing.makespan_us

    @property
    def n_chunks(self) -> int:
        return len(self.chunks)

    def order_counts(self) -> list[tuple[tuple[int, ...], int]]:
        """How many chunks (weighted by units) take each reduce-scatter order, most first."""
        counts: dict[tuple[int, ...], int] = {}
        for c in self.chunks:
            counts[c.order] = counts.get(c.order, 0) + c.units
        return sorted(counts.items(), key=lambda oc: (-oc[1], oc[0]))

    def algorithms_used(self) -> list[str]:
        """Per active dimension: the algorithms its phases run (e.g. ``direct`` or ``ring+direct``)."""
        used: list[set[str]] = [set() for _ in self.net.dims]
        for c in self.chunks:
            for d, a in zip(c.order, c.algorithms):
                used[d].add(a)
        return ["+".join(sorted(u)) for u in used]

    def to_dict(self) -> dict:
        """JSON-ready summary (the CLI's ``--json``)."""
        util = self.timing.utilization(self.net)
        return {
            "scheduler": self.scheduler,
            "kind": self.kind,
            "topology": self.net.topology,
            "size_bytes": self.size_bytes,
            "chunks": self.n_chunks,
            "time_us": self.makespan_us,
            "lp_bound_us": self.lp_bound_us,
            "origin": self.origin,
            "orders": [{"order": [self.net.dims[d].name for d in o], "units": u} for o, u in self.order_counts()],
            "dimensions": [
                {"name": spec.name, "size": spec.size, "bw": spec.bw, "algorithm": alg, "busy_us": busy,
                 "sent_bytes": sent, "utilization": u}
                for spec, alg, busy, sent, u in zip(self.net.dims, self.algorithms_used(), self.timing.busy_us,
                                                    self.timing.sent_bytes, util)
            ],
        }


def fastest(schedules: Iterable[MultiDimSchedule]) -> MultiDimSchedule:
    """The fastest of ``schedules`` in the model (ties: the first); CollectiveError if there is none."""
    best: MultiDimSchedule | None = None
    for s in schedules:
        if best is None or is_less(s.makespan_us, best.makespan_us):
            best = s
    if best is None:
        raise CollectiveError("no multi-dimension schedule to choose from")
    return best


def check_scheduler(name: str) -> str:
    """The canonical scheduler name (``themis_flex`` -> ``themis-flex``); CollectiveError for an unknown one."""
    key = str(name).strip().lower().replace("_", "-")
    if key not in SCHEDULERS:
        raise CollectiveError(f"unknown multi-dimension scheduler {name!r}; choose one of: {', '.join(SCHEDULERS)}")
    return key


def _check_size(size_bytes) -> float:
    if isinstance(size_bytes, bool) or not isinstance(size_bytes, (int, float)):
        raise SizeError(f"message size must be a number of bytes, got {size_bytes!r}")
    size = float(size_bytes)
    if not math.isfinite(size) or size <= 0:
        raise SizeError(f"message size must be a positive number of bytes, got {size_bytes!r}")
    return size


def chunk_counts(size_bytes: float) -> tuple[int, ...]:
    """The chunk counts every scheduler tries (see the module docstring).

    >>> chunk_counts(64 << 10)
    (1, 2, 4, 8, 16)
    """
    out = [1]
    while out[-1] * 2 <= MAX_CHUNKS and size_bytes / (out[-1] * 2) >= MIN_CHUNK_BYTES:
        out.append(out[-1] * 2)
    return tuple(out)


#: the LP's warm starts: the policies whose chunks at every count the LP also times (in this order)
WARM_STARTS = ("themis", "fixed")
_WARM = {"themis": (themis_chunks, "Themis"), "fixed": (fixed_chunks, "fixed-order")}


class _Run:
    """One scheduler on one (network, collective, size): builds chunks for a count, times them."""

    def __init__(self, net: DimNet, costs: PhaseCosts, kind: str, size: float, policy: str, options: SolverOptions,
                 weighted: bool = True, ramp: bool = True, shared: tuple[dict, dict] | None = None):
        self.net, self.costs, self.kind, self.size, self.policy, self.options = net, costs, kind, size, policy, options
        self.weighted = weighted  # chunks of unequal units (the IR takes up to 4 units a chunk: off under max_chunks)
        self.ramp = ramp  # the winner's first and last chunks cut into pieces (adds chunks: off at a fixed count)
        # the model's timing of each chunk plan already timed (the roundings and warm starts often coincide), and
        # the fixed order's and Themis's chunks per count; under ``auto`` the runs of one case share both, so the
        # LP's warm starts cost nothing beyond those policies' own searches
        self._timings: dict[tuple[tuple[ChunkPlan, ...], tuple[str, ...]], DimTiming]
        self._plans: dict[tuple[str, int], tuple[ChunkPlan, ...]]
        self._timings, self._plans = ({}, {}) if shared is None else shared
        # per chunk count: the makespan before the ramp (what the search would have found without it)
        self.unramped_us: dict[int, float] = {}
        # lp: per warm start (fixed, themis) and chunk count, its makespan -- what that policy's own search sees
        self.warm_us: dict[str, dict[int, float]] = {}

    def at(self, k: int) -> MultiDimSchedule:
        net, costs, kind, size = self.net, self.costs, self.kind, self.size
        if self.policy == "fixed":
            return self._timed(self._plan("fixed", k), "fixed order")
        if self.policy == "themis":
            return self._timed(self._plan("themis", k), "greedy")
        if self.policy == "themis-flex":
            return self._timed(themis_flex_chunks(net, costs, kind, size, k), "greedy, chunks sized to the load gap")
        bound = None
        candidates = []
        for charge in CHARGES:
            chunks, sol = lp_chunks(net, costs, kind, size, k, self.options, charge)
            if charge == "floor":
                bound = sol.bound_us
            what = "bandwidth" if charge == "floor" else "latency-aware"
            candidates.append((chunks, f"LP flow ({what})"))
            if k > 1:
                try:
                    candidates.append((rounded_chunks(net, costs, kind, sol, self.options),
                                       f"LP flow ({what}), exact rounding"))
                except (InfeasibleError, SolverError) as e:  # a rounding always exists: a solver failure
                    log.warning("exact rounding of the LP flow at %d chunks skipped: %s", k, e)
            if self.weighted and k > 1:
                candidates.append((weighted_chunks(net, costs, kind, chunks, sol), f"LP flow ({what}), weighted chunks"))
        best = fastest([*(self._timed(chunks, origin) for chunks, origin in candidates), *self._warm(k)])
        if k > 1:
            # the winner's chunks in the reverse sequence: the walk puts the orders the LP favours most early;
            # reversed, the chunks that start elsewhere lead, and the queues fill and drain differently (the
            # model decides; only the winner's, since timing every candidate twice would cost a third more)
            best = fastest([best, self._timed(best.chunks[::-1], f"{best.origin}, reversed")])
        if self.ramp and k > 1:
            self.unramped_us[k] = best.makespan_us
            best = self._ramped(best)
        return replace(best, lp_bound_us=bound)

    def _warm(self, k: int, policies: Sequence[str] = WARM_STARTS) -> list[MultiDimSchedule]:
        """Themis's chunks and the fixed order's at ``k`` (those of ``policies``): feasible points of the LP's
        class, warm starts the LP's roundings must beat (their makespans are kept in :attr:`warm_us`)."""
        out = []
        for policy in policies:
            s = self._timed(self._plan(policy, k), f"{_WARM[policy][1]} warm start")
            self.warm_us.setdefault(policy, {})[k] = s.makespan_us
            out.append(s)
        return out

    def warm_at(self, k: int, policies: Sequence[str] = WARM_STARTS) -> MultiDimSchedule:
        """The LP at ``k`` from the warm starts of ``policies`` alone (no LP rounding, ``lp_bound_us`` left
        None: the search solves ``T*`` for the winner only, :meth:`bound_at`): for the counts that Themis's or
        the fixed order's own search tries beyond the LP's (:func:`_search`)."""
        return fastest(self._warm(k, policies))

    def _plan(self, policy: str, k: int) -> tuple[ChunkPlan, ...]:
        """The fixed order's or Themis's chunks at ``k`` (remembered)."""
        plan = self._plans.get((policy, k))
        if plan is None:
            plan = self._plans[(policy, k)] = tuple(_WARM[policy][0](self.net, self.costs, self.kind, self.size,
                                                                     equal_units(k)))
        return plan

    def bound_at(self, k: int) -> float:
        """The LP's own bound ``T*`` at ``k`` chunks."""
        return solve_lattice(self.net, self.costs, self.kind, self.size, k, self.options).bound_us

    def tuned(self, best: MultiDimSchedule) -> MultiDimSchedule:
        """The LP's winner of the whole count search with its orders' shares hill-climbed in the model
        (:mod:`.shares`; under the winner's queue priority), where the count was searched (like the ramp:
        the chunks become unequal); then the tuned chunks with their long phases cut into pieces spread over the
        sequence (:mod:`.cuts`), tuned again (at most :data:`RETUNE_TIMINGS` timings; only when the cut starts
        within :data:`CUT_SLACK` of the tuned chunks); the fastest of the three. Other policies: ``best``
        itself."""
        if self.policy != "lp" or not self.ramp or best.n_chunks < 2:
            return best
        priority = (best.timing.priority,)
        chunks = tune_shares(self.net, self.costs, self.kind, self.size, best.chunks, priority[0])
        tuned = self._timed(chunks, f"{best.origin}, shares tuned", priority)
        found = [best, tuned]
        # the tuned chunks with their long phases cut into pieces (:mod:`.cuts`), the shares tuned again
        cut = cut_long_chunks(self.net, self.costs, self.kind, self.size, chunks, max_chunks=MAX_CHUNKS)
        if cut != chunks and self._timed(cut, "", priority).makespan_us <= tuned.makespan_us * (1 + CUT_SLACK):
            recut = tune_shares(self.net, self.costs, self.kind, self.size, cut, priority[0], RETUNE_TIMINGS)
            found.append(self._timed(recut, f"{best.origin}, shares tuned, long chunks cut, tuned again", priority))
        return replace(fastest(found), lp_bound_us=best.lp_bound_us)

    def _ramped(self, best: MultiDimSchedule) -> MultiDimSchedule:
        """``best`` with its first and last chunks cut into growing and shrinking pieces (:mod:`.ramp`: the
        pipeline's fill and drain shrink, the split and the other chunks stay), at the depths of
        :data:`~.ramp.RAMP_DEPTHS` while each is faster than the one before; the fastest, ``best`` included."""
        # under the queue priority the winner was fastest with: the ramp changes the queues only at the ends
        ramps = (self._timed(ramped_chunks(self.net, self.costs, self.kind, self.size, best.chunks, r),
                             f"{best.origin}, ramped to 1/{1 << r}", (best.timing.priority,)) for r in RAMP_DEPTHS)
        return fastest([best, *ramps])

    def _timed(self, chunks: tuple[ChunkPlan, ...], origin: str,
               priorities: Sequence[str] = PRIORITIES) -> MultiDimSchedule:
        """``chunks`` timed under each of ``priorities`` (default: every queue priority); the fastest."""
        key = (chunks, tuple(priorities))
        timing = self._timings.get(key)
        if timing is None:
            timing = min((time_chunks(self.net, self.costs, self.kind, self.size, chunks, p) for p in priorities),
                         key=lambda t: t.makespan_us)
            self._timings[key] = timing
        return MultiDimSchedule(self.policy, self.kind, self.size, self.net, chunks, timing, origin=origin)


def refine_counts(best: int, counts: Sequence[int]) -> tuple[int, ...]:
    """The counts from ``REFINE[0]`` to ``REFINE[1]`` times the power of two ``best``, on a grid of at most
    :data:`REFINE_POINTS` counts (step 1 while that fits), not tried yet.

    >>> refine_counts(32, (1, 2, 4, 8, 16, 32, 64))
    (24, 26, 28, 30, 34, 36, 38, 40, 42, 44, 46, 48)
    >>> refine_counts(4, (1, 2, 4, 8))
    (3, 5, 6)
    """
    hi = min(max(counts), MAX_CHUNKS, math.floor(best * REFINE[1]))
    lo = max(1, math.ceil(best * REFINE[0]))
    step = max(1, math.ceil((hi - lo) / REFINE_POINTS))
    return tuple(k for k in range(lo, hi + 1, step) if k not in counts)


def _best_k(times: dict[int, float]) -> int:
    """The fastest count of ``times`` (count -> makespan; ties within the tolerance: fewer chunks)."""
    k0 = min(times)
    for k in sorted(times):
        if is_less(times[k], times[k0]):
            k0 = k
    return k0


def refine_centres(times: dict[int, float], n: int = REFINE_CENTRES) -> tuple[int, ...]:
    """The ``n`` fastest counts of ``times`` (count -> makespan), fastest first (ties: fewer chunks): the
    counts the search refines around (:data:`REFINE_CENTRES`).

    >>> refine_centres({1: 915.0, 2: 592.0, 4: 2590.8, 8: 1307.9, 16: 761.3, 32: 591.7, 64: 893.3})
    (32, 2)
    """
    left = dict(times)
    out: list[int] = []
    while left and len(out) < n:
        k = _best_k(left)
        out.append(k)
        del left[k]
    return tuple(out)


def refine_candidates(times: dict[int, float], counts: Sequence[int], n: int = REFINE_CENTRES) -> tuple[int, ...]:
    """The counts the refinement tries beyond ``counts`` (the powers of two, timed in ``times``): the grids of
    :func:`refine_counts` around each of the :func:`refine_centres`, ascending.

    >>> refine_candidates({1: 915.0, 2: 592.0, 4: 2590.8, 8: 1307.9, 16: 761.3, 32: 591.7, 64: 893.3},
    ...                   (1, 2, 4, 8, 16, 32, 64))[:3]
    (3, 24, 26)
    """
    powers = {k: t for k, t in times.items() if k in counts}
    return tuple(sorted({k for c in refine_centres(powers, n) for k in refine_counts(c, counts)}))


def _search(run: _Run, counts: Sequence[int], refine: bool = True) -> MultiDimSchedule:
    """Every chunk count of ``counts``, then (``refine``) the counts around the best ones (see
    :data:`REFINE_CENTRES`); the fastest in the model (ties: fewer units)."""
    found: dict[int, MultiDimSchedule] = {}
    for k in counts:
        found[k] = run.at(k)

    if refine and len(counts) > 1:
        times = {k: s.makespan_us for k, s in found.items()}
        if run.policy == "lp":
            # around the best count, and around the best one before the ramp (where they differ): every count
            # the search without the ramp would have tried is tried, so the ramp never makes the result worse
            ks = set(refine_candidates(times, counts, 1))
            if run.unramped_us:
                ks.update(refine_candidates(run.unramped_us, counts, 1))
        else:
            ks = set(refine_candidates(times, counts))
        for k in sorted(ks):
            if k not in found:
                found[k] = run.at(k)
        # the LP: every count Themis's and the fixed order's own searches try (the same powers of two, refined
        # around the same centres) with at least their chunks, so that the LP is never worse than either
        # (a count both searches try gets both warm starts: the LP's own counts have them already)
        wanted: dict[int, list[str]] = {}
        for policy in WARM_STARTS:
            for k in refine_candidates(run.warm_us.get(policy, {}), counts):
                if k not in found:
                    wanted.setdefault(k, []).append(policy)
        for k, policies in sorted(wanted.items()):
            found[k] = run.warm_at(k, policies)
    tried = tuple((k, found[k].makespan_us) for k in sorted(found))
    k_best = _best_k({k: s.makespan_us for k, s in found.items()})
    best = found[k_best]
    if run.policy == "lp" and best.lp_bound_us is None:  # a warm start won: its count's T* is solved now
        best = replace(best, lp_bound_us=run.bound_at(k_best))
    return replace(run.tuned(best), tried=tried)


def schedule_multidim(topology: Topology | DimNet, kind: str, size_bytes: float, scheduler: str = "auto", *,
                      chunks: int | None = None, max_chunks: int | None = None,
                      options: SolverOptions | None = None) -> MultiDimSchedule:
    """The multi-dimension schedule of ``kind`` (allreduce, reduce_scatter, allgather) that ``scheduler`` makes.

    ``chunks`` fixes the chunk count (default: each scheduler's best, see
    the module docstring); ``max_chunks`` caps the counts tried (the IR
    takes at most :func:`~ccsynth.synth.multidim.lowering.ir_max_chunks`). Raises :class:`~ccsynth.errors.TopologyError` for
    a topology without dimensions, :class:`~ccsynth.errors.CollectiveError`
    for an unknown scheduler or collective, :class:`~ccsynth.errors.SizeError`
    for a bad size.
    """
    return _schedule(topology, kind, size_bytes, scheduler, chunks, max_chunks, options, ({}, {}))


def _schedule(topology: Topology | DimNet, kind: str, size_bytes: float, scheduler: str, chunks: int | None,
              max_chunks: int | None, options: SolverOptions | None, shared: tuple[dict, dict]) -> MultiDimSchedule:
    """:func:`schedule_multidim` with the runs' remembered chunk plans and timings in ``shared`` (one case:
    a chunk plan's timing is the same whichever policy made it, so the runs of one case may share them)."""
    name = check_scheduler(scheduler)
    kind = check_kind(kind)
    size = _check_size(size_bytes)
    net = topology if isinstance(topology, DimNet) else dim_net(topology)
    if chunks is not None:
        if isinstance(chunks, bool) or not isinstance(chunks, int) or not 1 <= chunks <= MAX_CHUNKS:
            raise CollectiveError(f"the chunk count must be an integer from 1 to {MAX_CHUNKS}, got {chunks!r}")
        counts: tuple[int, ...] = (chunks,)
    else:
        counts = chunk_counts(size)
        if max_chunks is not None:
            counts = tuple(k for k in counts if k <= max_chunks) or (1,)
    costs = PhaseCosts(net)
    options = options or SolverOptions()
    t0 = time.perf_counter()
    policies = POLICIES if name == "auto" else (name,)
    found = []
    for policy in policies:
        run = _Run(net, costs, kind, size, policy, options, weighted=max_chunks is None,
                   ramp=max_chunks is None and chunks is None, shared=shared)
        s = _search(run, counts)
        log.info("%s on %s, %s bytes: %d chunks, %.3f us in the dimension model", policy, net.topology, f"{size:.0f}",
                 s.n_chunks, s.makespan_us)
        found.append(s)
    log.debug("scheduled in %.3f s", time.perf_counter() - t0)
    return fastest(found)


def compare_schedulers(topology: Topology | DimNet, kind: str, size_bytes: float,
                       schedulers: Sequence[str] = POLICIES, *, max_chunks: int | None = None,
                       options: SolverOptions | None = None) -> dict[str, MultiDimSchedule]:
    """Several schedulers on the same case (the network is read once, and a chunk plan timed for one scheduler
    is not timed again for another: the LP's warm starts are the other policies' chunks): name -> schedule."""
    net = topology if isinstance(topology, DimNet) else dim_net(topology)
    shared: tuple[dict, dict] = ({}, {})
    return {check_scheduler(s): _schedule(net, kind, size_bytes, s, None, max_chunks, options, shared)
            for s in schedulers}
