"""Share tuning: the winner's split between dimension orders moved, a little, by the model.

The lattice LP (:mod:`~ccsynth.synth.multidim.lp`) splits the data among
dimension orders so that the busiest dimension's *floor* charges are least;
a schedule's dimensions also pay what the LP cannot see -- the pipeline's
fill and drain, per-message latency and overheads no earlier phase hid
(:mod:`~ccsynth.synth.multidim.losses`) -- and those differ by dimension. So
the best split for the schedule is near the LP's, not at it: on
``hierarchical:8x8x8x8@400,200,100,50`` at 1 GiB the rounding to whole
chunks leaves dimension 0 2.7% above ``T*`` and the exact shares leave no
dimension room for its fill and drain (3101 us against 2950;
``docs/results.md``).

:func:`tune_shares` searches between them with the model itself: it moves
a share of the data from the chunks of one order to those of another
(every chunk of an order scaled alike, so the sequence, the ramp's pieces
and each order's chunk count stay), keeps a move when the model's makespan
drops, and halves the step from ``1/K`` (``K`` chunks) down to
``1/(`` :data:`FINEST` ``K)``, then starts again from ``1/K`` while a pass
gained, at most :data:`MAX_TIMINGS` timings in all (about 0.7 s on the
4,096-rank fabric; the second pass takes ``8x8x8x8@400,200,100,50`` at
1 GiB from 2923.1 to 2919.8 us). Chunks become unequal, in whole units
of a finer grain (:data:`GRAIN` units per unit before); each order carries
the bytes it is given. A first-improvement hill climb: deterministic, and
never worse than its start (a move is kept only when the model's time
drops by more than the tolerance).

Example:
    >>> from ccsynth.topologies.catalog import hierarchical
    >>> from ccsynth.synth.multidim.network import dim_net
    >>> from ccsynth.synth.multidim.cost import PhaseCosts
    >>> from ccsynth.synth.multidim.policies import themis_chunks, equal_units
    >>> from ccsynth.synth.multidim.pipeline import time_chunks
    >>> net = dim_net(hierarchical([(4, 200), (4, 50)]))
    >>> costs = PhaseCosts(net)
    >>> chunks = themis_chunks(net, costs, "allreduce", 1 << 26, equal_units(8))
    >>> tuned = tune_shares(net, costs, "allreduce", 1 << 26, chunks, "chunk")
    >>> time_chunks(net, costs, "allreduce", 1 << 26, tuned).makespan_us <= \\
    ...     time_chunks(net, costs, "allreduce", 1 << 26, chunks).makespan_us
    True
"""

from __future__ import annotations

from collections.abc import Sequence

from ccsynth.synth.multidim.chunks import ChunkPlan, make_chunk
from ccsynth.synth.multidim.cost import PhaseCosts
from ccsynth.synth.multidim.network import DimNet
from ccsynth.synth.multidim.pipeline import time_chunks
from ccsynth.tolerance import is_less

__all__ = ["GRAIN", "FINEST", "MAX_TIMINGS", "tune_shares", "with_shares"]

#: each unit of the plan tuned becomes this many units (fine enough that the finest step, spread over an
#: order's chunks, still moves whole units)
GRAIN = 64
#: the smallest step moves ``1 / (FINEST x K)`` of the data
FINEST = 16
#: the most timings one tuning makes (a bound on its cost: each is one run of the model)
MAX_TIMINGS = 240


def _largest_remainder(weights: Sequence[float], total: int) -> list[int]:
    """``total`` whole units split in proportion to ``weights`` (at least one each): the floors, then one more
    to the largest remainders (ties: the earlier)."""
    total = max(total, len(weights))
    w = sum(weights)
    exact = [total * x / w for x in weights]
    out = [max(1, int(x)) for x in exact]
    left = total - sum(out)
    for i in sorted(range(len(weights)), key=lambda i: (-(exact[i] - int(exact[i])), i))[:max(0, left)]:
        out[i] += 1
    return out


def with_shares(net: DimNet, costs: PhaseCosts, kind: str, size_bytes: float, chunks: Sequence[ChunkPlan],
                shares: dict[tuple[int, ...], float]) -> tuple[ChunkPlan, ...]:
    """``chunks`` with every order's chunks scaled alike so that order ``o`` carries ``shares[o]`` of the data
    (orders not named keep theirs), in whole units: :data:`GRAIN` per unit of ``chunks`` in all, each order's
    units split among its chunks by largest remainder (so that a step finer than one unit per chunk still
    moves the order's total); each phase's algorithm is chosen again for the new sizes."""
    total = sum(c.units for c in chunks)
    members: dict[tuple[int, ...], list[int]] = {}
    for i, c in enumerate(chunks):
        members.setdefault(c.order, []).append(i)
    units = [0] * len(chunks)
    for order, idx in members.items():
        have = sum(chunks[i].units for i in idx) / total
        want = round(GRAIN * total * shares.get(order, have))
        for i, u in zip(idx, _largest_remainder([chunks[i].units for i in idx], want)):
            units[i] = u
    new_total = sum(units)
    return tuple(make_chunk(net, costs, kind, c.order, size_bytes * u / new_total, u) for c, u in zip(chunks, units))


def tune_shares(net: DimNet, costs: PhaseCosts, kind: str, size_bytes: float, chunks: Sequence[ChunkPlan],
                priority: str, max_timings: int = MAX_TIMINGS) -> tuple[ChunkPlan, ...]:
    """``chunks`` with the shares of their orders hill-climbed in the model under ``priority`` (see the module
    docstring), at most ``max_timings`` runs of the model; ``chunks`` themselves where no move gains or there is
    one order only."""
    total = sum(c.units for c in chunks)
    shares: dict[tuple[int, ...], float] = {}
    for c in chunks:
        shares[c.order] = shares.get(c.order, 0.0) + c.units / total
    orders = sorted(shares, key=lambda o: (-shares[o], o))
    if len(orders) < 2:
        return tuple(chunks)
    best_chunks = tuple(chunks)
    best = time_chunks(net, costs, kind, size_bytes, best_chunks, priority).makespan_us
    timings = 1
    gained = True
    while gained and timings < max_timings:  # the steps again from the coarsest while a pass gains
        gained = False
        step = 1.0 / len(chunks)
        while step >= 1.0 / (FINEST * len(chunks)) and timings < max_timings:
            moved = True
            while moved and timings < max_timings:
                moved = False
                for a in orders:
                    for b in orders:
                        if a == b or shares[a] - step < 1.0 / (GRAIN * total) or timings >= max_timings:
                            continue
                        trial = dict(shares)
                        trial[a] -= step
                        trial[b] += step
                        candidate = with_shares(net, costs, kind, size_bytes, chunks, trial)
                        t = time_chunks(net, costs, kind, size_bytes, candidate, priority).makespan_us
                        timings += 1
                        if is_less(t, best):
                            best, best_chunks, shares, moved, gained = t, candidate, trial, True, True
            step /= 2
    return best_chunks
