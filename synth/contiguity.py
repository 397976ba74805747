"""Contiguity and scheduling MILP (TACCL stage 3): exact send times, and which pieces go together.

Input: a :class:`~ccsynth.synth.ordering.TransferPlan` -- the moves and the
order of the moves on every connection. On each connection consecutive
moves are grouped into *waves*: the moves of one wave start together and
travel as one transfer (``alpha + beta * bytes of the wave``: one latency
for all of them), the next wave starts when the previous one has arrived.
Sending every piece in its own wave pipelines best (a relay can forward
the first piece while the next is on the wire) but pays ``alpha`` per
piece; one wave pays ``alpha`` once. On connections where ``alpha`` is high
compared with the time of one piece, grouping wins; the MILP decides.

Here a connection's ``alpha`` is its whole per-message cost, the latency
plus the per-message overhead on both ends
(:attr:`~ccsynth.topologies.model.Connection.message_us`): what merging two
pieces into one message saves, as TACCL's per-send cost.

Model, over the representative moves (symmetric schedules: the times of a
move's images are its own, so the model shrinks by the group order). For
the ``i``-th move on connection ``e`` (``alpha_e``, ``beta_e`` = us per
byte at the connection's fair share of bandwidth, ``b`` bytes per piece):

* ``S_i`` start of its wave, ``F_i`` its arrival (the end of its wave),
  ``C_i`` the running end of the wave up to move ``i``;
* ``g_i`` binary: move ``i + 1`` travels in the same wave as move ``i``
  (only on *high-alpha* connections, where ``alpha_e > ALPHA_SHARE *
  beta_e * b``, and only where move ``i + 1`` is ready in the list schedule
  by the time move ``i`` starts; elsewhere a new wave begins);
* ``ready_i``: ``S_i >= F_parent(i)`` (a relay forwards what it holds);
* ``order_i``: ``S_{i+1} >= S_i``; ``same_i``: ``S_{i+1} <= S_i + M (1 - g_i)``;
* ``next_i``: ``S_{i+1} >= F_i - M g_i`` (a new wave waits for the last);
* ``dur_i``: ``C_i >= S_i + alpha_e + beta_e b``; ``grow_i``:
  ``C_{i+1} >= C_i + beta_e b - M (1 - g_i)``; ``arrive_i``: ``F_i >= C_i``
  and ``F_i >= F_{i+1} - M (1 - g_i)``;
* ``T >= F_i``; minimise ``T`` plus a small weight on the sum of arrivals.

``M`` is the makespan of the list schedule (every move in its own wave is
a feasible solution with exactly that makespan, so the optimum is never
worse than the heuristic order). The MILP starts from the waves of a fast
heuristic (:func:`dp_waves`: per connection, a dynamic program over its
sequence picks the grouping that minimises the latest arrival plus
downstream work, one connection at a time) and is kept only where it
improves on it; a time-limited solve thus never makes things worse.

Example:
    >>> from ccsynth.topologies.model import Link, Topology
    >>> from ccsynth.synth.sketch import Sketch
    >>> from ccsynth.synth.routing import route_allgather
    >>> from ccsynth.synth.ordering import order_moves
    >>> pair = Topology("p", 2, links=(Link(0, 1, 5.0, 10.0), Link(1, 0, 5.0, 10.0)))
    >>> lt = Sketch(symmetry=((1, 2),)).bind(pair)
    >>> plan = order_moves(route_allgather(lt, 4, 100.0))      # 4 pieces, alpha 5 us, 0.01 us each
    >>> w = schedule_waves(plan)
    >>> w.groups[(0, 1)], round(w.makespan_us, 2)                # one wave: 5 + 4 * 0.01
    ([[0, 1, 2, 3]], 5.04)
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import pulp

from ccsynth.errors import InfeasibleError
from ccsynth.graphs import topological_order
from ccsynth.synth.ordering import TransferPlan
from ccsynth.synth.routing import Edge
from ccsynth.synth.solver import SolveResult, SolverOptions, solve, value
from ccsynth.tolerance import EVENT_REL, is_greater, is_less
from ccsynth.topologies.model import BYTES_PER_US_PER_GBPS

__all__ = ["ALPHA_SHARE", "ARRIVAL_WEIGHT", "MAX_MILP_MOVES", "MAX_MILP_BINARIES", "Waves", "chain_waves",
           "single_waves", "dp_waves", "schedule_waves"]

log = logging.getLogger(__name__)

#: a connection is "high-alpha" (grouping is considered) when alpha exceeds this share of one piece's time
ALPHA_SHARE = 0.001
#: weight of the sum of arrival times relative to the makespan
ARRIVAL_WEIGHT = 1e-3
#: above this many representative moves, or candidate groupings, the MILP is skipped (DP waves are kept)
MAX_MILP_MOVES = 4000
MAX_MILP_BINARIES = 400


@dataclass
class Waves:
    """Per representative connection, its moves (positions in ``plan.links[e]``) grouped into waves."""

    plan: TransferPlan
    groups: dict[Edge, list[list[int]]]
    start: dict[int, float]
    end: dict[int, float]
    makespan_us: float
    method: str
    solve: SolveResult | None = None
    meta: dict = field(default_factory=dict)

    def n_waves(self) -> int:
        return sum(len(g) for g in self.groups.values())


def chain_waves(plan: TransferPlan) -> Waves:
    """Every move in its own wave, at the list scheduler's times."""
    groups = {e: [[i] for i in range(len(seq))] for e, seq in plan.links.items()}
    return Waves(plan, groups, {m.id: m.start for m in plan.moves}, {m.id: m.end for m in plan.moves},
                 plan.makespan_us, "list-schedule")


def _timing(plan: TransferPlan, groups: dict[Edge, list[list[int]]]) -> tuple[dict[int, float], dict[int, float], float]:
    """Earliest start/arrival of every move for the given waves (a longest-path pass over waves).

    Raises :class:`InfeasibleError` if the waves depend on each other in a cycle.
    """
    b = plan.routing.chunk_bytes
    topo = plan.lt.topology
    moves = plan.moves
    wave_of: dict[int, tuple[Edge, int]] = {}
    members: dict[tuple[Edge, int], list[int]] = {}
    for e, waves in groups.items():
        for wi, w in enumerate(waves):
            key = (e, wi)
            members[key] = [plan.links[e][pos][0] for pos in w]
            for mid in members[key]:
                wave_of[mid] = key
    preds: dict[tuple[Edge, int], list[tuple[Edge, int]]] = {}
    for key, mids in members.items():
        e, wi = key
        before = {(e, wi - 1)} if wi > 0 else set()
        for m in mids:
            p = moves[m].parent
            if p >= 0:
                before.add(wave_of[p])
        if key in before:
            raise InfeasibleError("contiguity: a wave would carry a piece before it arrives")
        preds[key] = list(before)
    order = topological_order(preds, depth_first=True)  # the fastest order; any gives the same times
    if order is None:
        raise InfeasibleError("contiguity: the wave structure has a cyclic dependency")
    start: dict[int, float] = {}
    end: dict[int, float] = {}
    wave_end: dict[tuple[Edge, int], float] = {}
    for key in order:
        e, wi = key
        mids = members[key]
        s = wave_end[(e, wi - 1)] if wi > 0 else 0.0
        for m in mids:
            p = moves[m].parent
            if p >= 0:
                s = max(s, end[p])
        f = s + topo.connection(*e).message_us + len(mids) * b / (plan.eff_bw[e] * BYTES_PER_US_PER_GBPS)
        for m in mids:
            start[m], end[m] = s, f
        wave_end[key] = f
    return start, end, max(end.values(), default=0.0)


def _tails(plan: TransferPlan, end: dict[int, float]) -> dict[int, float]:
    """Time from each move's arrival to the last arrival among its descendants."""
    moves = plan.moves
    children: dict[int, list[int]] = {}
    for m in moves:
        if m.parent >= 0:
            children.setdefault(m.parent, []).append(m.id)
    tail: dict[int, float] = {}
    for m in sorted(moves, key=lambda m: -end[m.id]):
        t = 0.0
        for k in children.get(m.id, ()):
            t = max(t, end[k] - end[m.id] + tail.get(k, 0.0))
        tail[m.id] = t
    return tail


def single_waves(plan: TransferPlan) -> Waves:
    """All moves of a connection in one wave (the latency-optimal extreme)."""
    groups = {e: [list(range(len(seq)))] if seq else [] for e, seq in plan.links.items()}
    s, f, mk = _timing(plan, groups)
    return Waves(plan, groups, s, f, mk, "single-wave")


def _mergeable(plan: TransferPlan) -> dict[Edge, list[bool]]:
    """Which consecutive pairs on each connection may share a wave (see the module doc)."""
    topo = plan.lt.topology
    b = plan.routing.chunk_bytes
    out = {}
    for e, seq in plan.links.items():
        alpha = topo.connection(*e).message_us
        pp = b / (plan.eff_bw[e] * BYTES_PER_US_PER_GBPS)
        high = alpha > ALPHA_SHARE * pp
        ok = []
        for i in range(len(seq) - 1):
            a, z = plan.moves[seq[i][0]], plan.moves[seq[i + 1][0]]
            ok.append(bool(high and not is_greater(z.parent_end, a.start + alpha)))
        out[e] = ok
    return out


def _dp_link(ready: list[float], tails: list[float], ok: list[bool], alpha: float, pp: float) -> list[list[int]]:
    """Best grouping of one connection's moves, other connections fixed (Pareto DP over prefixes).

    Minimises max over moves of (arrival + tail), then the last wave's end.
    """
    K = len(ready)
    fronts: list[list[tuple[float, float, int, int]]] = [[] for _ in range(K)]  # (end, obj, a, index in front[a-1])
    for bnd in range(K):
        cands = []
        r_max, t_max = 0.0, 0.0
        a = bnd
        while a >= 0:
            r_max = max(r_max, ready[a])
            t_max = max(t_max, tails[a])
            prev = fronts[a - 1] if a > 0 else [(0.0, 0.0, -1, -1)]
            for pi, (pend, pobj, _, _) in enumerate(prev):
                st = max(pend, r_max)
                en = st + alpha + (bnd - a + 1) * pp
                cands.append((en, max(pobj, en + t_max), a, pi))
            if a == 0 or not ok[a - 1]:
                break
            a -= 1
        cands.sort()
        front: list[tuple[float, float, int, int]] = []
        for c in cands:
            if not front or is_less(c[1], front[-1][1], EVENT_REL):
                front.append(c)
        fronts[bnd] = front[:8]
    # backtrack from the best objective at the end
    last = min(range(len(fronts[K - 1])), key=lambda i: (fronts[K - 1][i][1], fronts[K - 1][i][0]))
    waves = []
    bnd, idx = K - 1, last
    while bnd >= 0:
        _, _, a, pi = fronts[bnd][idx]
        waves.append(list(range(a, bnd + 1)))
        bnd, idx = a - 1, pi
    waves.reverse()
    return waves


def dp_waves(plan: TransferPlan, groups: dict[Edge, list[list[int]]] | None = None, passes: int = 4) -> Waves:
    """Coordinate descent: regroup one connection at a time by :func:`_dp_link`, keep improvements."""
    topo = plan.lt.topology
    b = plan.routing.chunk_bytes
    ok = _mergeable(plan)
    groups = {e: [list(w) for w in ws] for e, ws in (groups or chain_waves(plan).groups).items()}
    start, end, mk = _timing(plan, groups)
    for _ in range(passes):
        improved = False
        tails = _tails(plan, end)
        # most critical connections first
        crit = sorted(plan.links, key=lambda e: -max((end[m] + tails[m] for m, _ in plan.links[e]), default=0.0))
        for e in crit:
            seq = plan.links[e]
            if len(seq) < 2 or not any(ok[e]):
                continue
            alpha = topo.connection(*e).message_us
            pp = b / (plan.eff_bw[e] * BYTES_PER_US_PER_GBPS)
            ready = [end[plan.moves[m].parent] if plan.moves[m].parent >= 0 else 0.0 for m, _ in seq]
            tl = [tails[m] for m, _ in seq]
            new = _dp_link(ready, tl, ok[e], alpha, pp)
            if new == groups[e]:
                continue
            trial = dict(groups)
            trial[e] = new
            try:
                s2, e2, mk2 = _timing(plan, trial)
            except InfeasibleError:
                continue
            if is_less(mk2, mk) or (not is_greater(mk2, mk) and is_less(sum(e2.values()), sum(end.values()))):
                groups, start, end, mk = trial, s2, e2, mk2
                tails = _tails(plan, end)
                improved = True
        if not improved:
            break
    return Waves(plan, groups, start, end, mk, "dp")


def schedule_waves(plan: TransferPlan, options: SolverOptions | None = None, *, time_limit: float | None = None,
                   use_milp: bool = True, quiet_timeout: bool = False) -> Waves:
    """Group moves into waves: dynamic-programming heuristic, then the MILP (warm-started from it).

    The MILP runs when it has at most :data:`MAX_MILP_BINARIES` binaries and
    ``use_milp`` is set; its result is kept only if it beats the heuristic.
    ``quiet_timeout`` logs a time-out at INFO instead of WARNING (for a
    default time budget the caller did not ask for).
    """
    options = options or SolverOptions()
    topo = plan.lt.topology
    b = plan.routing.chunk_bytes
    moves = plan.moves
    chain = chain_waves(plan)
    if not moves:
        return chain
    heur = dp_waves(plan)
    if heur.makespan_us > chain.makespan_us:
        heur = chain
    ok = _mergeable(plan)
    n_bin = sum(sum(v) for v in ok.values())
    if not use_milp or n_bin == 0 or n_bin > MAX_MILP_BINARIES or len(moves) > MAX_MILP_MOVES:
        if n_bin > MAX_MILP_BINARIES:
            log.info("contiguity: %d candidate groupings exceed the MILP limit %d; using the DP heuristic",
                     n_bin, MAX_MILP_BINARIES)
        return heur
    UB = chain.makespan_us
    M = UB * 1.0001 + 1e-6
    prob = pulp.LpProblem("contiguity", pulp.LpMinimize)
    T = prob.add_variable("T", lowBound=0, upBound=M)
    S = {m.id: prob.add_variable(f"S_{m.id}", lowBound=0, upBound=M) for m in moves}
    F = {m.id: prob.add_variable(f"F_{m.id}", lowBound=0, upBound=M) for m in moves}
    C = {m.id: prob.add_variable(f"C_{m.id}", lowBound=0, upBound=M) for m in moves}
    G: dict[tuple[Edge, int], pulp.LpVariable] = {}
    for m in moves:
        if m.parent >= 0:
            prob += (S[m.id] >= F[m.parent], f"ready_{m.id}")
        prob += (F[m.id] >= C[m.id], f"arrive_{m.id}")
        prob += (F[m.id] <= T, f"makespan_{m.id}")
    pp_of = {}
    for e, seq in sorted(plan.links.items()):
        alpha = topo.connection(*e).message_us
        pp = b / (plan.eff_bw[e] * BYTES_PER_US_PER_GBPS)
        pp_of[e] = pp
        ids = [mid for mid, _ in seq]
        for mid in ids:
            prob += (C[mid] >= S[mid] + alpha + pp, f"dur_{mid}")
        for i in range(len(ids) - 1):
            a, z = ids[i], ids[i + 1]
            prob += (S[z] >= S[a], f"order_{a}_{z}")
            if ok[e][i]:
                g = prob.add_variable(f"g_{e[0]}_{e[1]}_{i}", cat="Binary")
                G[(e, i)] = g
                prob += (S[z] <= S[a] + M * (1 - g), f"same_{a}_{z}")
                prob += (S[z] >= F[a] - M * g, f"next_{a}_{z}")
                prob += (C[z] >= C[a] + pp - M * (1 - g), f"grow_{a}_{z}")
                prob += (F[a] >= F[z] - M * (1 - g), f"arrive_with_{a}_{z}")
            else:
                prob += (S[z] >= F[a], f"next_{a}_{z}")
    prob += T + (ARRIVAL_WEIGHT / len(moves)) * pulp.lpSum(F.values())
    warm = _warm_values(plan, heur, S, F, C, G, T, pp_of)
    try:
        result = solve(prob, options, "contiguity", time_limit=time_limit, warm_start=warm, quiet_timeout=quiet_timeout)
    except InfeasibleError as exc:
        log.warning("contiguity: %s; keeping the heuristic waves", exc)
        return heur
    groups: dict[Edge, list[list[int]]] = {}
    for e, seq in plan.links.items():
        waves: list[list[int]] = []
        for i in range(len(seq)):
            if i > 0 and (e, i - 1) in G and value(G[(e, i - 1)]) > 0.5:
                waves[-1].append(i)
            else:
                waves.append([i])
        groups[e] = waves
    try:
        start, end, mk = _timing(plan, groups)
    except InfeasibleError:
        return heur
    if is_greater(mk, heur.makespan_us):
        log.info("contiguity: MILP waves (%.3f us) are not better than the heuristic (%.3f us)", mk, heur.makespan_us)
        return heur
    w = Waves(plan, groups, start, end, mk, "milp", result, {"binaries": len(G)})
    log.info("contiguity: %d waves for %d moves (%d binaries), estimated %.3f us (heuristic %.3f us, list schedule %.3f us)",
             w.n_waves(), len(moves), len(G), mk, heur.makespan_us, chain.makespan_us)
    return w


def _warm_values(plan: TransferPlan, w: Waves, S, F, C, G, T, pp_of) -> dict:
    """The heuristic's waves as a complete MILP solution (the solver's first incumbent)."""
    vals = {T: w.makespan_us}
    for e, waves in w.groups.items():
        seq = plan.links[e]
        in_same = set()
        for wave in waves:
            for k, pos in enumerate(wave):
                mid = seq[pos][0]
                vals[S[mid]] = w.start[mid]
                vals[F[mid]] = w.end[mid]
                vals[C[mid]] = w.start[mid] + plan.lt.topology.connection(*e).message_us + (k + 1) * pp_of[e]
                if k > 0:
                    in_same.add(wave[k - 1])
        for i in range(len(seq) - 1):
            if (e, i) in G:
                vals[G[(e, i)]] = 1.0 if i in in_same else 0.0
    return vals
