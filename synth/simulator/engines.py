"""Engines: who pays the per-message overheads and the local work, one item at a time.

An engine (see :mod:`ccsynth.synth.simulate`: per rank, or per (rank, peer,
channel, direction) with ``overhead_scope="connection"``) serves its work
first come first served; work arriving at the same instant is served in op
id order. Work is collected as it arrives during one instant
(:meth:`Engines.queue`) and served together at its end
(:meth:`Engines.serve`), which schedules the event that ends each item.
"""

from __future__ import annotations

import heapq

from ccsynth.synth.trace import Recorder

__all__ = ["Engines"]


class Engines:
    """The engines of one run: when each is next free, and its busy time."""

    def __init__(self, n_engines: int, engine_of: list[int]):
        self.engine_of = engine_of
        self.free_at = [0.0] * n_engines
        self.busy = [0.0] * n_engines
        self.arrivals: list[tuple[int, float, int]] = []  # (op, cost, event) arrived at the current instant

    def queue(self, i: int, cost: float, event: int) -> None:
        """Op ``i`` needs ``cost`` us of its engine, then raises ``event``; served by :meth:`serve`."""
        self.arrivals.append((i, cost, event))

    def serve(self, now: float, heap: list[tuple[float, int, int]], rec: Recorder | None) -> None:
        """Serve the work that arrived at ``now``: each item's end goes on the event ``heap``."""
        free_at, busy, engine_of = self.free_at, self.busy, self.engine_of
        arrivals = self.arrivals
        arrivals.sort()
        for i, cost, event in arrivals:
            e = engine_of[i]
            start = free_at[e] if free_at[e] > now else now
            free_at[e] = start + cost
            busy[e] += cost
            heapq.heappush(heap, (start + cost, i, event))
            if rec is not None:
                rec.work.append((i, start, start + cost))
        arrivals.clear()

    def idle_after(self, i: int, j: int) -> float:
        """When the engines of ops ``i`` and ``j`` are both free."""
        return max(self.free_at[self.engine_of[i]], self.free_at[self.engine_of[j]])

    def occupy(self, i: int, until: float, now: float) -> None:
        """Op ``i``'s engine works at least until ``until`` (a receiver's copy; see :mod:`ccsynth.synth.simulate`)."""
        e = self.engine_of[i]
        if self.free_at[e] < until:
            self.busy[e] += until - max(self.free_at[e], now)
            self.free_at[e] = until

    def busy_us(self, engine_rank: list[int], into: dict[str, float]) -> dict[str, float]:
        """Add each engine's busy time to its rank's entry (``rank<r>``) of ``into``."""
        for e, t in enumerate(self.busy):
            if t > 0:
                name = f"rank{engine_rank[e]}"
                into[name] = into.get(name, 0.0) + t
        return into
