"""MILP-optimal senders and entries for a resharding (PuLP, solved through :mod:`ccsynth.synth.solver`).

For every far delivery (a piece that must reach a host where no rank holds
it, :mod:`.delivery`) the model picks one sender among the piece's holders
(``x[d, s]``) and one entry among its destinations on that host
(``y[d, e]``); unlike the broadcast plan, each destination host of a piece
may get it from another sender. It minimises ``T``, the predicted
completion time of the network phase, under every port limit the planners
know (:class:`~.plan.Fabric`): for each NIC group and each rank, the bytes
it sends off its host (and receives from other hosts) divided by its
capacity is at most ``T``; the busiest rank's time, weighted by 0.01, breaks
ties (where one NIC fixes ``T``, the ranks behind it still balance). Local copies and sends inside a host are fixed
as in every plan (a host's own links are an order of magnitude faster than
its NIC). The greedy broadcast plan is the warm start, so a time-limited
solve is never worse than it; constraints are named, solver options come
in from outside (:class:`~ccsynth.synth.solver.SolverOptions`).
"""

from __future__ import annotations

import logging

import pulp

from ccsynth.synth.reshard.broadcast import greedy_choices
from ccsynth.synth.reshard.delivery import Choice, far_deliveries, hops_of
from ccsynth.synth.reshard.plan import Fabric, Hop
from ccsynth.synth.reshard.task import ReshardTask
from ccsynth.synth.solver import SolverOptions, solve, value
from ccsynth.topologies.model import BYTES_PER_US_PER_GBPS

__all__ = ["milp_choices", "milp_hops"]

log = logging.getLogger(__name__)

_TIE = 0.01  # weight of the busiest rank's time in the objective, after the completion time T


def milp_choices(task: ReshardTask, fabric: Fabric, options: SolverOptions) -> dict[tuple[int, int], Choice]:
    fds = far_deliveries(task, fabric)
    warm = greedy_choices(task, fabric)
    if not fds:
        return warm
    prob = pulp.LpProblem("reshard", pulp.LpMinimize)
    T = prob.add_variable("T", lowBound=0)
    U = prob.add_variable("U", lowBound=0)  # the busiest rank: a tie-breaker where a NIC dominates T
    x = {(k, s): prob.add_variable(f"x_{k}_{s}", cat="Binary") for k, fd in enumerate(fds) for s in fd.holders}
    y = {(k, e): prob.add_variable(f"y_{k}_{e}", cat="Binary") for k, fd in enumerate(fds) for e in fd.ranks}
    prob += T + _TIE * U
    for k, fd in enumerate(fds):
        linked = any(fabric.connected(s, e) for s in fd.holders for e in fd.ranks)
        for s in fd.holders:
            for e in fd.ranks:
                if linked and not fabric.connected(s, e):
                    prob += (x[k, s] + y[k, e] <= 1, f"no_link_{k}_{s}_{e}")
        prob += (pulp.lpSum(x[k, s] for s in fd.holders) == 1, f"one_sender_{k}")
        prob += (pulp.lpSum(y[k, e] for e in fd.ranks) == 1, f"one_entry_{k}")

    def us(nbytes: float, cap: float) -> float:
        return nbytes / (cap * BYTES_PER_US_PER_GBPS) if cap else 0.0

    terms: dict[tuple[str, int], list] = {}
    for (k, s), var in x.items():
        size = fds[k].size
        terms.setdefault(("nic_out", fabric.nic[s]), []).append(us(size, fabric.nic_out.get(fabric.nic[s], 0)) * var)
        terms.setdefault(("rank_out", s), []).append(us(size, fabric.rank_out[s]) * var)
    for (k, e), var in y.items():
        size = fds[k].size
        terms.setdefault(("nic_in", fabric.nic[e]), []).append(us(size, fabric.nic_in.get(fabric.nic[e], 0)) * var)
        terms.setdefault(("rank_in", e), []).append(us(size, fabric.rank_in[e]) * var)
    for (what, who), ts in sorted(terms.items()):
        prob += (pulp.lpSum(ts) <= T, f"{what}_{who}")
        if what.startswith("rank"):
            prob += (pulp.lpSum(ts) <= U, f"busiest_{what}_{who}")
    start = {}
    for k, fd in enumerate(fds):
        c = warm[(fd.piece, fd.host)]
        for s in fd.holders:
            start[x[k, s]] = 1.0 if s == c.sender else 0.0
        for e in fd.ranks:
            start[y[k, e]] = 1.0 if e == c.entry else 0.0
    res = solve(prob, options, "reshard senders", warm_start=start)
    log.info("%s", res.describe())
    out = {}
    for k, fd in enumerate(fds):
        s = max(fd.holders, key=lambda r: (value(x[k, r]), -r))
        e = max(fd.ranks, key=lambda r: (value(y[k, r]), -r))
        out[(fd.piece, fd.host)] = Choice(s, e)
    return out


def milp_hops(task: ReshardTask, fabric: Fabric, options: SolverOptions) -> list[Hop]:
    return hops_of(task, fabric, milp_choices(task, fabric, options))
