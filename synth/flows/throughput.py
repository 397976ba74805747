"""Optimal throughputs by max flow: the exact cut bounds, each with the cut that attains it.

Notation: ``V`` the ranks (ForestColl's compute nodes), the flow network of
:mod:`~ccsynth.synth.flows.network`, ``B-(S)`` the least capacity of a
network cut with the ranks of ``S`` on the sink side and the other ranks on
the source side (auxiliary nodes placed freely) -- the LP capacity of the
connections crossing into ``S`` when the network is exact.

**Allgather** (:func:`allgather_rate`). Every rank must stream its shard to
every other rank; at rate ``lam`` per shard the ranks outside ``S`` send
``lam |V \\ S|`` into ``S``, so ``lam* = min over S (containing a rank, not
all of them) of B-(S) / |V \\ S|`` and the optimal time is ``(Z/n) / lam*``
-- ForestColl's ``T*``. The test (ForestColl's): add a source ``s`` with an
arc ``s -> v`` of capacity ``lam`` to every rank; then ``maxflow(s, t) >= n
lam`` for every rank ``t`` iff ``B-(S) >= lam |V \\ S|`` for every ``S``: a
cut ``X`` (``s`` in ``X``, ``t`` not) costs ``lam |V \\ X| + B+(X)``, and
with ``S`` the complement of ``X`` that is ``>= n lam`` iff ``B-(S) >= lam
|V \\ S|``. The search is Dinkelbach's, sink by sink: with the current
``lam`` (the best ratio of any cut seen), a max flow to ``t`` either reaches
``n lam`` (no cut containing ``t`` is worse: certified, and it stays
certified for smaller ``lam``, since ``B-(S) - lam |V \\ S|`` only grows as
``lam`` falls) or its min cut ``S`` has a smaller ratio, which becomes
``lam``, and ``t`` is tested again. Each test stops as soon as the flow
reaches ``n lam``. With a symmetry group (:mod:`~ccsynth.synth.flows.symmetry`)
one sink per orbit suffices: an automorphism fixing ``s`` maps max flows
to max flows.

**Rooted** (:func:`rooted_rate`): a broadcast from ``root`` at rate ``lam``
needs ``lam <= min over t of maxflow(root, t)`` (every ``S`` without the
root receives all of ``Z``), and Edmonds' branching theorem says that much
is attainable by arborescences. Reduce is the same on the reversed network.

**Gather** (:func:`gather_rate`): every ``S`` containing the root receives
the shards of the ranks outside it: the allgather test with the root as the
only sink. Scatter: the reversed network.

**Minimum pairwise cut** (:func:`min_pair_cut`): ``min over S of B-(S)`` =
``min over t (maxflow(r0, t), maxflow(t, r0))`` for any fixed ``r0`` (a cut
has ``r0`` on one side); with a group transitive on the ranks the first
half suffices (every pair maps onto a pair ``(r0, t)``).

Example:
    >>> from ccsynth.topologies.catalog import ring
    >>> from ccsynth.synth.flows.network import flow_network
    >>> rc = allgather_rate(flow_network(ring(4, bw=10.0)))
    >>> round(rc.rate, 9), rc.outside          # B-(S) = 20 GB/s for one rank, 3 shards enter it
    (6.666666667, 3)
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from collections.abc import Iterable

from ccsynth.synth.flows.maxflow import MaxFlow
from ccsynth.synth.flows.network import FlowNetwork
from ccsynth.synth.flows.symmetry import Translations
from ccsynth.tolerance import EVENT_REL

__all__ = ["RateCut", "allgather_rate", "rooted_rate", "gather_rate", "min_pair_cut"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RateCut:
    """An optimal rate (GB/s per unit of demand) and a cut attaining it.

    ``inside``: the ranks on the sink side of the cut; ``capacity``: its
    ``B-`` (GB/s); ``outside``: how many units of demand must cross it (the
    ranks outside for allgather/gather, 1 for rooted and pairwise cuts).
    ``rate == capacity / outside``; ``inf`` when nothing needs to cross.
    """

    rate: float
    inside: frozenset[int]
    capacity: float
    outside: int


def _with_source(net: FlowNetwork) -> tuple[MaxFlow, int, int]:
    """The network plus a source with an arc to every rank; (solver, source node, first source arc)."""
    s = net.n_nodes
    first = net.n_arcs
    tails = list(net.tails) + [s] * net.n_ranks
    heads = list(net.heads) + list(range(net.n_ranks))
    caps = list(net.caps) + [0.0] * net.n_ranks
    return MaxFlow(net.n_nodes + 1, tails, heads, caps), s, first


def _cut_capacity(net: FlowNetwork, side: bytearray) -> float:
    """``B+`` of the source side ``side`` over the network's own arcs (no source arcs)."""
    total = 0.0
    for u, v, c in zip(net.tails, net.heads, net.caps):
        if side[u] and not side[v]:
            total += c
    return total


def _demand_rate(net: FlowNetwork, sinks: Iterable[int], start: float) -> RateCut:
    """Dinkelbach over the sinks with a source arc of ``lam`` into every rank (see the module docstring)."""
    n = net.n_ranks
    mf, s, first = _with_source(net)
    lam = start
    best = RateCut(math.inf, frozenset(), math.inf, 0)
    for t in sinks:
        while True:
            for v in range(n):
                mf.set_capacity(first + v, lam)
            target = n * lam
            res = mf.run(s, t, limit=target * (1 - EVENT_REL))
            if res.source_side is None:
                break
            side = res.source_side
            outside = sum(side[v] for v in range(n))
            cap = _cut_capacity(net, side)
            if outside == 0:  # pragma: no cover - the flow fell short, so some source arc is cut
                break
            ratio = cap / outside
            if ratio >= lam * (1 - EVENT_REL):
                break
            lam = ratio
            best = RateCut(ratio, frozenset(v for v in range(n) if not side[v]), cap, outside)
            log.debug("cut into %d ranks at %.6g GB/s: rate %.6g", n - outside, cap, ratio)
    return best


def allgather_rate(net: FlowNetwork, group: Translations | None = None) -> RateCut:
    """``lam*``: the best rate at which every rank's shard can reach every rank (module docstring)."""
    n = net.n_ranks
    if n < 2:
        return RateCut(math.inf, frozenset(range(n)), 0.0, 0)
    sinks = group.representatives if group is not None else tuple(range(n))
    start = net.total_capacity() + 1.0
    return _demand_rate(net, sinks, start)


def gather_rate(net: FlowNetwork, root: int) -> RateCut:
    """The best rate at which every rank's shard can reach ``root`` (the cuts containing the root)."""
    if net.n_ranks < 2:
        return RateCut(math.inf, frozenset((root,)), 0.0, 0)
    return _demand_rate(net, (root,), net.total_capacity() + 1.0)


def _pair_min(net: FlowNetwork, pairs: Iterable[tuple[int, int]]) -> RateCut:
    mf = MaxFlow(net.n_nodes, net.tails, net.heads, net.caps)
    n = net.n_ranks
    best = RateCut(math.inf, frozenset(), math.inf, 1)
    for a, b in pairs:
        res = mf.run(a, b, limit=best.capacity * (1 - EVENT_REL))
        if res.source_side is None:
            continue
        best = RateCut(res.value, frozenset(v for v in range(n) if not res.source_side[v]), res.value, 1)
    return best


def rooted_rate(net: FlowNetwork, root: int) -> RateCut:
    """``min over t of maxflow(root, t)``: the broadcast rate from ``root``."""
    return _pair_min(net, ((root, t) for t in range(net.n_ranks) if t != root))


def min_pair_cut(net: FlowNetwork, group: Translations | None = None) -> RateCut:
    """The least ``B-(S)`` over every proper non-empty set of ranks ``S`` (module docstring)."""
    n = net.n_ranks
    pairs = [(0, t) for t in range(1, n)]
    if group is None or group.order < n:
        pairs += [(t, 0) for t in range(1, n)]
    return _pair_min(net, pairs)
