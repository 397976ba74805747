"""Beyond Themis: an LP that splits the data over dimension orders to balance the dimensions.

Themis decides chunk by chunk, greedily. This module decides all at once:
how much of the data takes each reduce-scatter order, so that the busiest
dimension is as little busy as possible. Orders are paths in the *lattice
of partially reduced states*: a state is the set ``S`` of dimensions a
chunk has already reduced over, and an edge ``S -> S + {d}`` is a phase on
dimension ``d`` over the range ``chunk / prod(p_j, j in S)``. A share of
the data is a flow from the empty set to the full set, so the model is a
flow over ``D * 2^(D-1)`` edges (32 for four dimensions), and every flow
decomposes into orders (:func:`decompose`).

For ``K`` equal chunks of ``S / K`` bytes, a chunk crossing edge ``e``
occupies its dimension for ``tau_e``, and with ``f_e`` the share of the
data on edge ``e``::

    minimise T
    subject to  sum over the edges e of dimension d of  K f_e tau_e <= T    for every dimension d
                sum over the edges out of {} of f_e = 1
                flow in = flow out at every state but {} and the full set
                f_e >= 0

With ``tau_e`` the time a phase occupies its dimension *whatever overlaps
it* (:meth:`~ccsynth.synth.multidim.cost.PhaseCosts.floor`: a ring phase
all of its time, a direct phase the time its bytes take on the streams --
its overheads and latency can hide behind the previous phase's bytes), the
optimum ``T*`` is a lower bound on the makespan of every schedule of ``K``
equal chunks in dimension orders with these per-dimension algorithms, in
the dimension-level model (:mod:`ccsynth.synth.multidim.pipeline`), Themis's
and the fixed order's included: the *LP's own bound*, reported with its
schedules. Rounding to whole chunks and the pipeline's fill, drain and
exposed latencies are what a schedule adds to it.

The LP is degenerate (only the busiest dimensions are tight), so a second
stage picks, among the optimal flows, the one whose chunks spend the least
time in all (latency included): fewer small latency-bound phases, shorter
chains. The same LP with every phase charged its whole time
(``charge="full"``) gives a second, latency-aware flow; its value is no
bound (latencies can overlap), only its schedule is used.

:func:`lattice_walk` turns a flow into ``K`` chunks: chunk by chunk, it
walks the lattice from the empty state along the edge furthest behind its
share of the flow (ties: the least loaded dimension, Themis's rule), so
that every prefix of the chunk sequence follows the flow.
:func:`round_flow` first rounds the flow exactly to whole chunks (every
edge ``K f_e`` down or up, the busiest dimension least: a MILP of one
small integer per edge), so that the walk need not round; the same MILP
without the down-or-up restriction is :func:`rounded_bound`, the own bound
made exact for ``K`` equal chunks.

Example:
    >>> from ccsynth.topologies.catalog import hierarchical
    >>> from ccsynth.synth.multidim.network import dim_net
    >>> from ccsynth.synth.multidim.cost import PhaseCosts
    >>> net = dim_net(hierarchical([(4, 100, 0.0, 0.0), (4, 100, 0.0, 0.0)]))
    >>> sol = solve_lattice(net, PhaseCosts(net), "allreduce", 1 << 20, 4)
    >>> [(order, round(x, 3)) for order, x in sol.fractions]   # symmetric dimensions: half the data each way
    [((0, 1), 0.5), ((1, 0), 0.5)]
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import pulp

from ccsynth.errors import CollectiveError, InfeasibleError
from ccsynth.synth.multidim.chunks import ChunkPlan, make_chunk
from ccsynth.synth.multidim.cost import PhaseCosts
from ccsynth.synth.multidim.load import DimLoads
from ccsynth.synth.multidim.network import DimNet
from ccsynth.synth.solver import SolverOptions, solve, value

__all__ = ["CHARGES", "WEIGHT_UNITS", "LatticeSolution", "solve_lattice", "decompose", "lattice_walk", "lp_chunks",
           "round_flow", "rounded_chunks", "rounded_bound", "weighted_chunks", "bandwidth_bound", "fixed_order_load",
           "load_imbalance", "message_latency", "pipelined_bound"]

log = logging.getLogger(__name__)

#: how the LP charges a phase: ``floor`` (what it occupies whatever overlaps it: the bound) or ``full``;
#: ``bandwidth`` (the bytes at the dimension's fastest per-byte rate, no latency) is :func:`bandwidth_bound`'s
CHARGES = ("floor", "full")
#: units per chunk (on average) of :func:`weighted_chunks`: the grain of its shares is 1 / (this x chunks)
WEIGHT_UNITS = 16
#: flows below this (a share of the data) are solver noise, not an order
_FLOW_EPS = 1e-9
#: a share this close to a whole number of chunks (times K) counts as that number (solver noise)
_ROUND_EPS = 1e-6
#: the second stage keeps T within this relative distance of the optimum
_SECOND_STAGE_SLACK = 1e-6

Edge = tuple[int, int]  # (state as a bit set of reduced dimensions, dimension)


@dataclass(frozen=True)
class LatticeSolution:
    """The LP's answer for ``chunks`` equal chunks.

    ``flows`` maps every lattice edge to its share of the data,
    ``fractions`` the orders those shares decompose into (largest first),
    ``bound_us`` is the optimum ``T*`` (a bound only with ``charge="floor"``).
    """

    flows: tuple[tuple[Edge, float], ...]
    fractions: tuple[tuple[tuple[int, ...], float], ...]
    bound_us: float
    chunks: int
    charge: str
    seconds: float
    size_bytes: float = 0.0


def _phase_charge(costs: PhaseCosts, kind: str, d: int, m: float, charge: str) -> float:
    """What one chunk's phase(s) over ``m`` bytes on dimension ``d`` cost the dimension (both halves of an allreduce)."""
    reduce = kind != "allgather"
    if charge == "bandwidth":
        rate = min(costs.us_per_byte(d, a) for a in costs.net.dims[d].algorithms)
        return (2 if kind == "allreduce" else 1) * costs.sent_bytes(d, m) * rate
    alg = costs.best(d, m, reduce=reduce).algorithm
    fn = costs.floor if charge == "floor" else costs.time
    if kind == "allreduce":
        return fn(d, alg, m, reduce=True) + fn(d, alg, m, reduce=False)
    return fn(d, alg, m, reduce=reduce)


def solve_lattice(net: DimNet, costs: PhaseCosts, kind: str, size_bytes: float, chunks: int,
                  options: SolverOptions | None = None, charge: str = "floor",
                  head_us: dict[int, float] | None = None) -> LatticeSolution:
    """Solve the lattice LP for ``chunks`` equal chunks, then its second stage (see the module docstring).

    ``head_us`` adds, per dimension, a time its phases cannot use (``busy_d + head_us[d] <= T``): with the
    fill, drain and exposed costs a schedule measured (:mod:`~ccsynth.synth.multidim.losses`) the optimum is
    what a split could reach if those stayed -- an estimate, no bound."""
    if charge not in CHARGES + ("bandwidth",):
        raise CollectiveError(f"unknown LP charge {charge!r}; choose one of: {', '.join(CHARGES)}")
    options = options or SolverOptions()
    n_dims = net.n_dims
    prob, t, f, whole = _lattice_lp(net, costs, kind, size_bytes, chunks, charge, head_us)
    first = solve(prob, options, stage=f"multidim lattice LP ({chunks} chunks, {charge})")
    t_star = value(t)
    if charge == "bandwidth":  # a bound only: no second stage
        flows = {e: max(0.0, value(var)) for e, var in f.items()}
        return LatticeSolution(tuple(sorted(flows.items())), decompose(flows, n_dims), t_star, chunks, charge,
                               first.seconds, size_bytes)
    prob += (t <= t_star * (1 + _SECOND_STAGE_SLACK), "keep_optimum")
    prob.setObjective(pulp.lpSum(var * whole[e] for e, var in f.items()))
    second = solve(prob, options, stage=f"multidim lattice LP, second stage ({chunks} chunks, {charge})")
    flows = {e: max(0.0, value(var)) for e, var in f.items()}
    return LatticeSolution(tuple(sorted(flows.items())), decompose(flows, n_dims), t_star, chunks, charge,
                           first.seconds + second.seconds, size_bytes)


def _lattice_lp(net: DimNet, costs: PhaseCosts, kind: str, size_bytes: float, chunks: int, charge: str,
                head_us: dict[int, float] | None = None, counts: dict[Edge, tuple[int, int]] | None = None):
    """The lattice LP of the module docstring: (problem, T, flow variables, each edge's full charge).

    ``head_us`` adds, per dimension, a time its phases cannot use (the
    fill and drain of :func:`pipelined_bound`): ``busy_d + head_us[d] <= T``.
    With ``counts`` the variables are whole numbers of chunks instead of
    shares (``n_e = K f_e``, a MILP), each within ``counts[e]`` (default 0
    to ``K``).
    """
    head_us = head_us or {}
    whole_chunks = counts is not None
    counts = counts or {}
    n_dims = net.n_dims
    full = (1 << n_dims) - 1
    chunk = size_bytes / chunks
    prob = pulp.LpProblem("multidim_lattice", pulp.LpMinimize)
    t = prob.add_variable("T", lowBound=0)
    f: dict[Edge, pulp.LpVariable] = {}
    tau: dict[Edge, float] = {}
    whole: dict[Edge, float] = {}
    for s in range(full):
        reduced = math.prod(net.dims[j].size for j in range(n_dims) if s >> j & 1)
        for d in range(n_dims):
            if not s >> d & 1:
                if whole_chunks:
                    lo, hi = counts.get((s, d), (0, chunks))
                    f[(s, d)] = prob.add_variable(f"n_{s}_{d}", lowBound=lo, upBound=hi, cat="Integer")
                else:
                    f[(s, d)] = prob.add_variable(f"f_{s}_{d}", lowBound=0)
                tau[(s, d)] = _phase_charge(costs, kind, d, chunk / reduced, charge)
                whole[(s, d)] = _phase_charge(costs, kind, d, chunk / reduced, "full")
    prob += t
    prob += (pulp.lpSum(f[(0, d)] for d in range(n_dims)) == (chunks if whole_chunks else 1), "source")
    for s in range(1, full):
        inflow = pulp.lpSum(f[(s & ~(1 << d), d)] for d in range(n_dims) if s >> d & 1)
        outflow = pulp.lpSum(f[(s, d)] for d in range(n_dims) if not s >> d & 1)
        prob += (inflow == outflow, f"conserve_{s}")
    for d in range(n_dims):
        per_unit = 1 if whole_chunks else chunks  # a count is already K x the share
        busy = pulp.lpSum(per_unit * tau[e] * var for e, var in f.items() if e[1] == d)
        prob += (busy + head_us.get(d, 0.0) <= t, f"busy_{d}")
    return prob, t, f, whole


def decompose(flows: dict[Edge, float], n_dims: int) -> tuple[tuple[tuple[int, ...], float], ...]:
    """Orders carrying the lattice flow ``flows[(state, dim)]``, largest first; deterministic.

    From the empty state, follow the edge of largest remaining flow (ties:
    the lower dimension) to the full state; that path carries the smallest
    flow along it; subtract and repeat while flow leaves the empty state.
    """
    left = {e: max(0.0, x) for e, x in flows.items()}
    full = (1 << n_dims) - 1
    out: dict[tuple[int, ...], float] = {}
    for _ in range(len(left) + 1):  # each round empties at least one edge
        if sum(left.get((0, d), 0.0) for d in range(n_dims)) <= _FLOW_EPS:
            break
        s, edges = 0, []
        while s != full:
            d = max((d for d in range(n_dims) if not s >> d & 1), key=lambda d: (left[(s, d)], -d))
            edges.append((s, d))
            s |= 1 << d
        x = min(left[e] for e in edges)
        if x <= _FLOW_EPS:
            break
        for e in edges:
            left[e] -= x
        order = tuple(d for _, d in edges)
        out[order] = out.get(order, 0.0) + x
    total = sum(out.values()) or 1.0
    return tuple(sorted(((o, x / total) for o, x in out.items()), key=lambda ox: (-ox[1], ox[0])))


def lattice_walk(net: DimNet, costs: PhaseCosts, kind: str, size_bytes: float, flows: dict[Edge, float],
                 chunks: int) -> list[tuple[int, ...]]:
    """``chunks`` orders that follow ``flows`` (see the module docstring)."""
    used = dict.fromkeys(flows, 0)
    n_dims = net.n_dims
    full = (1 << n_dims) - 1
    loads = DimLoads(net, costs, kind)
    b = size_bytes / chunks
    out = []
    for j in range(chunks):
        rank = {d: i for i, d in enumerate(loads.least_loaded_first())}
        s, order = 0, []
        while s != full:
            d = max((d for d in range(n_dims) if not s >> d & 1),
                    key=lambda d: (round(flows[(s, d)] * (j + 1) - used[(s, d)], 9), -rank[d]))
            used[(s, d)] += 1
            order.append(d)
            s |= 1 << d
        loads.add(make_chunk(net, costs, kind, tuple(order), b), b)
        out.append(tuple(order))
    return out


def lp_chunks(net: DimNet, costs: PhaseCosts, kind: str, size_bytes: float, chunks: int,
              options: SolverOptions | None = None, charge: str = "floor"
              ) -> tuple[tuple[ChunkPlan, ...], LatticeSolution]:
    """``chunks`` equal chunks following the LP's flow, and the LP's solution."""
    sol = solve_lattice(net, costs, kind, size_bytes, chunks, options, charge)
    orders = lattice_walk(net, costs, kind, size_bytes, dict(sol.flows), chunks)
    b = size_bytes / chunks
    log.debug("lattice LP (%s), %d chunks: T* %.3f us; orders %s", charge, chunks, sol.bound_us,
              ", ".join(f"{'-'.join(map(str, o))}: {x:.3f}" for o, x in sol.fractions))
    return tuple(make_chunk(net, costs, kind, o, b) for o in orders), sol


def _solve_whole(prob: pulp.LpProblem, options: SolverOptions, stage: str) -> None:
    """Solve a whole-chunk MILP; where HiGHS's MIP solver reports its own answer numerically infeasible (it
    does on some of these tiny models: "claims optimality, but with ... infeasibilities"), solve it again with
    CBC, PuLP's bundled solver."""
    try:
        solve(prob, options, stage=stage)
    except InfeasibleError as e:
        if options.solver == "cbc":
            raise
        log.info("%s; solving it with CBC", e)
        solve(prob, replace(options, solver="cbc"), stage=stage)


def rounded_bound(net: DimNet, costs: PhaseCosts, kind: str, size_bytes: float, chunks: int,
                  options: SolverOptions | None = None) -> float:
    """The LP's own bound made exact about rounding: the lattice LP (charge ``floor``) with every edge
    carrying a whole number of the ``chunks`` equal chunks -- a small MILP (one integer per lattice edge,
    32 in four dimensions; flows of whole chunks decompose into whole chunks per order).

    Every schedule of ``chunks`` equal chunks in dimension orders sends a whole number of chunks over each
    lattice edge, and each dimension is busy at least the ``floor`` charges of its phases, so this optimum
    bounds its makespan in the dimension-level model, as ``T*`` does, and is at least ``T*``: it is the best
    that the busiest dimension can do at this chunk count. On the 4D fabrics of ``docs/results.md`` it is
    within 0.1% of ``T*``: rounding to whole chunks costs the bound nothing there, so what a schedule loses
    to ``T*`` is its pipeline (see there).
    """
    options = options or SolverOptions()
    prob, t, _, _ = _lattice_lp(net, costs, kind, size_bytes, chunks, "floor", counts={})
    _solve_whole(prob, options, f"multidim rounded bound ({chunks} chunks)")
    return value(t)


def round_flow(net: DimNet, costs: PhaseCosts, kind: str, size_bytes: float, sol: LatticeSolution,
               options: SolverOptions | None = None) -> dict[Edge, float]:
    """``sol``'s flow rounded exactly to whole chunks: every edge keeps its ``K x share`` rounded down or up
    (a whole flow within one chunk of every edge's share exists: the flow polytope's vertices are whole),
    choosing among those roundings the one whose busiest dimension (charged ``floor``) is least, then,
    as the LP's second stage, the one whose chunks spend the least time in all. The walk
    (:func:`lattice_walk`) rounds the shares one chunk at a time instead, which leaves the busiest
    dimension up to a chunk's phases heavier than needed. Returns the rounded shares (multiples of ``1/K``).
    """
    options = options or SolverOptions()
    k = sol.chunks
    shares = dict(sol.flows)
    ranges = {e: (math.floor(k * x + _ROUND_EPS), math.ceil(k * x - _ROUND_EPS)) for e, x in shares.items()}
    prob, t, n, whole = _lattice_lp(net, costs, kind, size_bytes, k, "floor", counts=ranges)
    _solve_whole(prob, options, f"multidim exact rounding ({k} chunks)")
    prob += (t <= value(t) * (1 + _SECOND_STAGE_SLACK), "keep_optimum")
    prob.setObjective(pulp.lpSum(var * whole[e] for e, var in n.items()))
    _solve_whole(prob, options, f"multidim exact rounding, second stage ({k} chunks)")
    return {e: round(value(var)) / k for e, var in n.items()}


def rounded_chunks(net: DimNet, costs: PhaseCosts, kind: str, sol: LatticeSolution,
                   options: SolverOptions | None = None) -> tuple[ChunkPlan, ...]:
    """``sol.chunks`` equal chunks following :func:`round_flow`'s exact rounding of ``sol``'s flow."""
    flows = round_flow(net, costs, kind, sol.size_bytes, sol, options)
    orders = lattice_walk(net, costs, kind, sol.size_bytes, flows, sol.chunks)
    b = sol.size_bytes / sol.chunks
    return tuple(make_chunk(net, costs, kind, o, b) for o in orders)


def weighted_chunks(net: DimNet, costs: PhaseCosts, kind: str, chunks: tuple[ChunkPlan, ...],
                    sol: LatticeSolution) -> tuple[ChunkPlan, ...]:
    """``chunks`` (the walk of :func:`lp_chunks`) resized so that each order carries its LP share exactly.

    With ``K`` equal chunks an order's share is a multiple of ``1 / K``; in
    four dimensions (24 orders) that rounding costs several percent. Here
    the chunks keep their number and orders, but each order's chunks split
    ``share x WEIGHT_UNITS x K`` units among them (at least one each), so
    the shares are exact to ``1 / (WEIGHT_UNITS x K)``. Orders the
    decomposition does not name keep an equal chunk's units. The per-phase
    algorithm is chosen again for the new sizes.
    """
    k = len(chunks)
    total = WEIGHT_UNITS * k
    share = dict(sol.fractions)
    count: dict[tuple[int, ...], int] = {}
    for c in chunks:
        count[c.order] = count.get(c.order, 0) + 1
    left = {o: (round(share[o] * total) if o in share else WEIGHT_UNITS * n) for o, n in count.items()}
    out = []
    seen: dict[tuple[int, ...], int] = {}
    for c in chunks:
        i = seen.get(c.order, 0)
        seen[c.order] = i + 1
        n = count[c.order]
        units = max(1, left[c.order] // n + (1 if i < left[c.order] % n else 0))
        out.append((c.order, units))
    size = sum(u for _, u in out)
    return tuple(make_chunk(net, costs, kind, o, sol.size_bytes * u / size, u) for o, u in out)


def bandwidth_bound(net: DimNet, costs: PhaseCosts, kind: str, size_bytes: float,
                    options: SolverOptions | None = None) -> float:
    """The least time (us) the busiest dimension needs for the bytes alone, over every split of the data
    among dimension orders: the lattice LP with every phase charged its bytes at the dimension's fastest
    per-byte rate (no latency, no overhead; linear in the chunk size, so one chunk says it all).

    It bounds every schedule of per-dimension phases in dimension orders, whatever its chunks; the
    benchmark's *utilization* is this bound over a schedule's time.
    """
    return solve_lattice(net, costs, kind, size_bytes, 1, options, "bandwidth").bound_us


def fixed_order_load(net: DimNet, costs: PhaseCosts, kind: str, size_bytes: float) -> float:
    """The time (us) the busiest dimension needs for its bytes under the fixed order (every byte in ascending
    dimension order), charged like :func:`bandwidth_bound` (bytes at the dimension's fastest per-byte rate, no
    latency, no overhead): what the fixed order cannot beat, however it pipelines."""
    busy = [0.0] * net.n_dims
    m = size_bytes
    for d in range(net.n_dims):
        busy[d] = _phase_charge(costs, kind, d, m, "bandwidth")
        m /= net.dims[d].size
    return max(busy)


def load_imbalance(net: DimNet, costs: PhaseCosts, kind: str, size_bytes: float,
                   options: SolverOptions | None = None) -> float:
    """Themis's imbalance: :func:`fixed_order_load` over :func:`bandwidth_bound` (>= 1).

    In Themis's terms a system is imbalanced when the baseline's fixed order
    loads its dimensions unevenly against their bandwidths, so that the
    busiest one needs longer than a balanced split of the data would
    (1.0: the fixed order is already balanced, nothing to gain; 1.6: the
    best balance is 1.6x faster in bandwidth terms). It is a property of the
    network and the collective, not of the size (both terms are linear in it).

    >>> from ccsynth.topologies.catalog import hierarchical
    >>> from ccsynth.synth.multidim.network import dim_net
    >>> net = dim_net(hierarchical([(4, 100), (4, 100)]))
    >>> # fixed order: dim 0 sends 3/4 of the data, dim 1 3/16; balanced: 15/32 each
    >>> round(load_imbalance(net, PhaseCosts(net), "allreduce", 1 << 20), 3)
    1.6
    """
    return fixed_order_load(net, costs, kind, size_bytes) / bandwidth_bound(net, costs, kind, size_bytes, options)


def message_latency(net: DimNet, d: int) -> float:
    """The least a message on dimension ``d`` pays beyond its bytes: its sender's overhead, its latency and its
    receiver's overhead, each the least over the dimension's connections (``DirectCost.alpha_min`` and
    ``overhead_min``); 0 for a dimension without ``direct`` (its ring hops are read per ring position, the
    worst over the groups, so they give no least figure)."""
    c = net.dims[d].direct
    return 0.0 if c is None else c.alpha_min + 2 * c.overhead_min


def pipelined_bound(net: DimNet, costs: PhaseCosts, kind: str, size_bytes: float, chunks: Sequence[ChunkPlan],
                    options: SolverOptions | None = None) -> float:
    """The LP's own bound (``T*``, charge ``floor``) for the count of ``chunks``, plus what every schedule of
    such chunks pays beyond its floor charges: each dimension's first and last message costs and, in an
    allreduce, the pipeline's fill and drain.

    *Message costs.* A dimension's floor charge of a direct phase is its bytes on the streams; the dimension's
    first bytes flow only after its first message's sender overhead and latency, and its last phase ends
    only after its last message's receive overhead, so each dimension ``d`` whose lattice edges are all
    charged the direct floor is busy at least ``message_latency(d)`` (overhead + alpha + overhead, the
    least over its connections) beyond its floor charges. Where a schedule runs a ring phase on such a
    dimension instead (a ramp piece, a resized chunk), that phase holds the dimension alone for at least its
    bytes at the ring's rate (no faster than direct's) plus the same latency and overheads, so the charge
    still holds. A dimension with an edge charged the ring floor (its whole time, latency included) gets
    none (it would count a first ring's latency twice).

    *Fill and drain.* ``T*`` lets every dimension work from time 0 to the end. It cannot, in a
    dimension ``d`` no chunk starts on: a chunk's first phase on ``d`` needs
    the data its previous phase reduced (a rank sends only reduced ranges),
    so ``d`` waits at least one first phase of a chunk on another dimension;
    and in an allreduce the chunk whose allgather last used ``d`` still
    gathers on its first dimension afterwards (the allgather runs the
    reduce-scatter's order reversed, ending where it began), so ``d`` is
    idle at least one such phase before the end. Both are charged at the
    bytes alone (:func:`bandwidth_bound`'s charge: a phase of ``m`` bytes
    takes at least its sent bytes at the dimension's fastest per-byte rate)
    plus that dimension's :func:`message_latency` (a phase is a message at least: ring or direct, it pays one
    sender overhead, one latency and one receive overhead beyond its bytes),
    for the *smallest* chunk of ``chunks``, the one that may go first or
    last. A dimension that some chunk starts on pays neither, but then that
    chunk (at least the smallest chunk's share of the data) takes an order
    starting there. So, for every non-empty set ``F`` of dimensions chunks
    may start on: the lattice LP with the flow out of the empty state
    restricted to ``F`` (at least the smallest share on each) and every
    dimension outside ``F`` charged ``2 x`` the cheapest first phase from
    ``F``, every dimension its message costs; the bound is the least of these optima (``2^D - 1`` small LPs,
    15 for four dimensions). Other collectives: ``T*`` with the message costs.

    It is at least ``T*`` and holds where ``T*``
    holds: for schedules of ``len(chunks)`` equal chunks (with chunks of
    unequal size, :func:`weighted_chunks`, Themis's flex and the ramped
    chunks of :mod:`~ccsynth.synth.multidim.ramp`, ``T*`` charges every
    chunk the average chunk's per-phase latency on the ring-charged edges, which is what the bound's
    ratios in ``docs/results.md`` take as given for them too; on the direct-charged edges the floor is
    linear in the bytes and the bound holds for any chunk sizes);
    ``tests/test_multidim.py`` checks it against the event-driven simulator
    for every equal-chunk scheduler on every topology of the cross-check (up
    to 128 ranks) and the dimension-level model on the 4D fabrics.
    """
    options = options or SolverOptions()
    k = len(chunks)
    if k == 0:
        raise CollectiveError("pipelined_bound needs at least one chunk")
    n_dims = net.n_dims
    reduce = kind != "allgather"
    chunk = size_bytes / k
    own = {}
    for d in range(n_dims):
        ranges = [chunk / math.prod(net.dims[j].size for j in range(n_dims) if s >> j & 1)
                  for s in range(1 << n_dims) if not s >> d & 1]
        if all(costs.best(d, m, reduce=reduce).algorithm == "direct" for m in ranges):
            own[d] = message_latency(net, d)
    if kind != "allreduce":
        prob, t, _, _ = _lattice_lp(net, costs, kind, size_bytes, k, "floor", own)
        solve(prob, options, stage=f"multidim pipelined bound ({k} chunks)")
        return value(t)
    units = sum(c.units for c in chunks)
    share = min(c.units for c in chunks) / units
    smallest = size_bytes * share
    # one reduce-scatter phase of the smallest chunk, first in its order (half an allreduce's charge), and one
    # message's latency and overheads
    first_phase = [_phase_charge(costs, kind, d, smallest, "bandwidth") / 2 + message_latency(net, d)
                   for d in range(n_dims)]
    best = math.inf
    for starts in range(1, 1 << n_dims):
        if bin(starts).count("1") * share > 1 + _FLOW_EPS:  # fewer chunks than starting dimensions
            continue
        heads = {d: own.get(d, 0.0) + (0.0 if starts >> d & 1 else
                                       2 * min(first_phase[j] for j in range(n_dims) if starts >> j & 1))
                 for d in range(n_dims)}
        prob, t, f, _ = _lattice_lp(net, costs, kind, size_bytes, k, "floor", heads)
        for d in range(n_dims):
            if starts >> d & 1:
                prob += (f[(0, d)] >= share, f"starts_{d}")
            else:
                prob += (f[(0, d)] == 0, f"no_start_{d}")
        solve(prob, options, stage=f"multidim pipelined bound ({k} chunks, starts {starts:b})")
        best = min(best, value(t))
    return best
