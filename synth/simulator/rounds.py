"""Receive rounds: what a topology's ``round_cost`` charges a rank waiting on several peers at once.

A receive's round is its *hop level* -- the most messages on a chain of
dependencies and matched messages ending at it -- and a rank's receives at
one level form one round, of ``k`` peers (the distinct ranks they come
from). The round's last receive completes ``c(k)`` later than its bytes
arrive (a delay, not work; see :mod:`ccsynth.synth.simulate`). The levels
depend on the schedule alone, so they are computed once per schedule
(:mod:`~ccsynth.synth.simulator.tables`); the event loop counts arrivals
down per round (:func:`round_due`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ccsynth.graphs import topological_order
from ccsynth.topologies.rounds import RoundCost

__all__ = ["ReceiveRounds", "receive_rounds", "round_due"]


@dataclass(frozen=True)
class ReceiveRounds:
    """The rounds of every rank (see the module docstring): ``of[i]`` is the round of op ``i`` (-1: not a
    receive), ``size[g]`` the receives of round ``g``, ``peers[g]`` the distinct ranks they come from and
    ``cost[g]`` its extra us."""

    of: tuple[int, ...]
    size: tuple[int, ...]
    peers: tuple[int, ...]
    cost: tuple[float, ...]


def receive_rounds(ops, matches: Mapping[int, int], cost: RoundCost) -> ReceiveRounds | None:
    """The rounds of the receives of ``ops`` (a schedule's or a task graph's; ``matches``: send <-> recv)
    with their costs under ``cost``; None where the dependencies and matches have a cycle (the run then
    reports the deadlock)."""
    n = len(ops)
    preds = [tuple(op.deps) + ((matches[i],) if op.kind == "recv" else ()) for i, op in enumerate(ops)]
    order = topological_order(preds)
    if order is None:
        return None
    level = [0] * n
    for i in order:
        lv = max((level[d] for d in ops[i].deps), default=0)
        if ops[i].kind == "recv":
            lv = max(lv, level[matches[i]] + 1)
        level[i] = lv
    index: dict[tuple[int, int], int] = {}
    of = [-1] * n
    size: list[int] = []
    senders: list[set[int]] = []
    for op in ops:
        if op.kind != "recv":
            continue
        key = (op.rank, level[op.id])
        g = index.get(key)
        if g is None:
            g = index[key] = len(size)
            size.append(0)
            senders.append(set())
        of[op.id] = g
        size[g] += 1
        senders[g].add(op.peer)
    peers = tuple(len(s) for s in senders)
    return ReceiveRounds(tuple(of), tuple(size), peers, tuple(cost.cost_us(k) for k in peers))


def round_due(rounds: ReceiveRounds, left: list[int], r: int) -> float:
    """Receive ``r`` has its bytes: the cost of its round if it is the round's last (0 otherwise).

    ``left[g]``: the receives of round ``g`` still to arrive (counted down here)."""
    g = rounds.of[r]
    left[g] -= 1
    return rounds.cost[g] if left[g] == 0 else 0.0
