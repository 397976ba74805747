"""MILP-optimal senders and entries for a resharding (PuLP, solved through :mod:`ccsynth.synth.solver`).

For every far delivery (a piece that must reach a host where no rank holds
it, :mod:`.delivery`) the model picks one sender (``x[d, s]``) among the
piece's holders and the entries of the far hosts before it (a forward,
allowed only from the entry that host chose: ``x[d, s] <= y[d', s]``), and
one entry among its destinations on that host (``y[d, e]``). It minimises ``T``, the predicted
completion time of the network phase, under every port limit the planners
know (:class:`~.plan.Fabric`): for each NIC group and each rank, the bytes
it sends off its host (and receives from other hosts) divided by its
capacity is at most ``T``; the busiest rank's time, weighted by 0.01, breaks
ties (where one NIC fixes ``T``, the ranks behind it still balance), and the
forwarded bytes, weighted by 0.001, make a forward (one hop and its delay
more) the choice only where it lowers ``T``; the busiest NIC group's
forwards (its time, weighted by 0.01) spread the forwards that are needed
over the destination hosts, so that no host relays most of the tensor
while it is still receiving it (the model is a fluid one: it counts bytes
per port, not when a forwarded slab can leave; spreading keeps each
forwarding stream no faster than its piece arrives). Local copies and sends inside a host are fixed
as in every plan (a host's own links are an order of magnitude faster than
its NIC). The greedy broadcast plan is the warm start, so a time-limited
solve is never worse than it; constraints are named, solver options come
in from outside (:class:`~ccsynth.synth.solver.SolverOptions`).
``funnel=True`` solves the same model over one sender and one entry per
NIC group (:func:`.delivery.far_deliveries`): a smaller model, and plans
whose NICs each carry one stream (see :mod:`.planner`).
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


def milp_choices(task: ReshardTask, fabric: Fabric, options: SolverOptions, *,
                 funnel: bool = False) -> dict[tuple[int, int], Choice]:
    fds = far_deliveries(task, fabric, funnel=funnel)
    warm = greedy_choices(task, fabric, funnel=funnel)
    if not fds:
        return warm
    prob = pulp.LpProblem("reshard", pulp.LpMinimize)
    T = prob.add_variable("T", lowBound=0)
    U = prob.add_variable("U", lowBound=0)  # the busiest rank: a tie-breaker where a NIC dominates T
    # senders: the piece's holders, or a destination of a far host of the same piece served before (forward)
    earlier: dict[int, list[int]] = {}
    seen: dict[int, list[int]] = {}
    for k, fd in sorted(enumerate(fds), key=lambda kf: (kf[1].piece, kf[1].host)):
        earlier[k] = list(seen.get(fd.piece, ()))
        seen.setdefault(fd.piece, []).append(k)
    cand = {k: [(s, None) for s in fd.holders] + [(s, j) for j in earlier[k] for s in fds[j].ranks]
            for k, fd in enumerate(fds)}
    x = {(k, s): prob.add_variable(f"x_{k}_{s}", cat="Binary") for k in cand for s, _ in cand[k]}
    y = {(k, e): prob.add_variable(f"y_{k}_{e}", cat="Binary") for k, fd in enumerate(fds) for e in fd.ranks}
    def us(nbytes: float, cap: float) -> float:
        return nbytes / (cap * BYTES_PER_US_PER_GBPS) if cap else 0.0

    forwarded = pulp.lpSum(us(fds[k].size, fabric.nic_out.get(fabric.nic[s], 0) or 1.0) * x[k, s]
                           for k in cand for s, j in cand[k] if j is not None)
    F = prob.add_variable("F", lowBound=0)  # the busiest NIC group's forwards: spread them over the hosts
    prob += T + _TIE * U + _TIE * 0.1 * forwarded + _TIE * F
    fwd_terms: dict[int, list] = {}
    for k in cand:
        for s, j in cand[k]:
            if j is not None:
                cap = fabric.nic_out.get(fabric.nic[s], 0) or 1.0
                fwd_terms.setdefault(fabric.nic[s], []).append(us(fds[k].size, cap) * x[k, s])
    for g, ts in sorted(fwd_terms.items()):
        prob += (pulp.lpSum(ts) <= F, f"forwards_of_{g}")
    for k, fd in enumerate(fds):
        linked = any(fabric.connected(s, e) for s, _ in cand[k] for e in fd.ranks)
        for s, j in cand[k]:
            if j is not None:  # a forward: only from the entry that host j actually chose
                prob += (x[k, s] <= y[j, s], f"forward_from_entry_{k}_{s}")
            for e in fd.ranks:
                if linked and not fabric.connected(s, e):
                    prob += (x[k, s] + y[k, e] <= 1, f"no_link_{k}_{s}_{e}")
        prob += (pulp.lpSum(x[k, s] for s, _ in cand[k]) == 1, f"one_sender_{k}")
        prob += (pulp.lpSum(y[k, e] for e in fd.ranks) == 1, f"one_entry_{k}")

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
        for s, j in cand[k]:
            start[x[k, s]] = 1.0 if (s == c.sender and (j is not None) == c.forward) else 0.0
        for e in fd.ranks:
            start[y[k, e]] = 1.0 if e == c.entry else 0.0
    res = solve(prob, options, "reshard senders", warm_start=start)
    log.info("%s", res.describe())
    out = {}
    for k, fd in enumerate(fds):
        s, j = max(cand[k], key=lambda c: (value(x[k, c[0]]), -c[0]))
        e = max(fd.ranks, key=lambda r: (value(y[k, r]), -r))
        out[(fd.piece, fd.host)] = Choice(s, e, j is not None)
    return out


def milp_hops(task: ReshardTask, fabric: Fabric, options: SolverOptions, *, funnel: bool = False) -> list[Hop]:
    return hops_of(task, fabric, milp_choices(task, fabric, options, funnel=funnel))
