"""The dimension-level cost model: chunks flowing through a queue per dimension.

This is how Themis and its simulator measure a multi-dimension collective,
at the level of dimensions and chunks, never of ranks (so 4,096 ranks cost
what 8 do), with the per-message costs of the event-driven simulator:

* every phase of every chunk is a *task* on its dimension; a task is
  *ready* when the chunk's previous phase is done (its first phase: at
  time 0);
* a dimension starts ready tasks in priority order (:data:`PRIORITIES`:
  the oldest chunk first, or the earliest phase first) while its *window*
  allows (:func:`window_of`): a ring phase runs alone, direct phases may
  overlap up to :data:`DIRECT_WINDOW` deep -- the next one's send
  overheads and latency hide behind the bytes of the one before, whose
  bytes go first on every connection (the simulator's streams are first
  come first served);
* a task's time is the phase time of :class:`~ccsynth.synth.multidim.cost.PhaseCosts`
  (a ring from its start; a direct phase queued behind the previous direct
  phase's send overheads, bytes and receive overheads, :func:`~ccsynth.synth.multidim.cost.direct_time`);
* chunks are independent otherwise, so phases of different chunks on
  different dimensions overlap: the pipeline;
* a chunk's first phase waits for the local copies before it, and the
  collective for every chunk's copies after its last phase
  (:meth:`~ccsynth.synth.multidim.cost.PhaseCosts.copies_before`; free
  without a ``local_bw`` or ``local_overhead``, as in the catalog).

All groups of a dimension run in lockstep (they are alike), so one
representative group stands for all of them: the model is exact for the
catalog's switched hierarchies and machines (see ``docs/results.md`` for
the cross-check against the event-driven simulator).

:func:`time_chunks` returns the makespan, each dimension's busy time (how
long it had a phase in flight) and the bytes a rank sends in it, and the
tasks in the order they were started. That order is *the* schedule order:
every rank derives the same one, each task's previous phase comes before
it, and the tasks of one dimension appear in the order the dimension runs
them. The lowering to the IR (:mod:`ccsynth.synth.multidim.lowering`)
keeps each dimension's window in that order on every rank, and the MPI
execution runs each dimension's tasks in it, so neither can deadlock (the
first unfinished task in that order can always run).

Example:
    >>> from ccsynth.topologies.catalog import hierarchical
    >>> from ccsynth.synth.multidim.network import dim_net
    >>> from ccsynth.synth.multidim.chunks import ChunkPlan
    >>> net = dim_net(hierarchical([(2, 100, 1.0, 0.0), (2, 100, 1.0, 0.0)]))
    >>> chunks = [ChunkPlan((0, 1), ("direct", "direct")), ChunkPlan((1, 0), ("direct", "direct"))]
    >>> t = time_chunks(net, PhaseCosts(net), "reduce_scatter", 4e6, chunks)
    >>> t.makespan_us, [(x.chunk, x.dim, x.start_us) for x in t.tasks]   # both dimensions busy from the start
    (17.0, [(0, 0, 0.0), (1, 1, 0.0), (1, 0, 11.0), (0, 1, 11.0)])
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import NamedTuple
from collections.abc import Sequence

from ccsynth.errors import CollectiveError
from ccsynth.synth.multidim.chunks import ChunkPlan, chunk_steps
from ccsynth.synth.multidim.cost import PhaseCosts
from ccsynth.synth.multidim.network import DimNet
from ccsynth.topologies.model import BYTES_PER_US_PER_GBPS

__all__ = ["DIRECT_WINDOW", "PRIORITIES", "Task", "DimTiming", "window_of", "time_chunks", "replay_tasks", "chunk_bytes"]

#: direct phases a dimension may have in flight at once (see :func:`window_of`)
DIRECT_WINDOW = 16
#: which ready phase a dimension runs first: the oldest chunk's, or the earliest phase (of the oldest chunk)
PRIORITIES = ("chunk", "phase")


class Task(NamedTuple):
    """One phase of one chunk, as the model runs it (a named tuple, not a frozen dataclass: the model makes one
    per phase of every chunk it times, half a million in a 4,096-rank search, and a frozen dataclass takes three
    times as long to build)."""

    chunk: int
    step: int  # position in the chunk's phases (chunk_steps)
    dim: int
    algorithm: str
    range_bytes: float  # what a rank holds before (reduce-scatter) or after (allgather) the phase
    reduce: bool
    start_us: float
    end_us: float


@dataclass(frozen=True)
class DimTiming:
    """The model's verdict on a chunk plan."""

    makespan_us: float
    busy_us: tuple[float, ...]  # per active dimension: the sum of its tasks' times
    sent_bytes: tuple[float, ...]  # per active dimension: bytes one rank sends there
    tasks: tuple[Task, ...]  # in schedule order (see the module docstring)
    priority: str = PRIORITIES[0]  # the queue priority it was timed under

    def utilization(self, net: DimNet) -> tuple[float, ...]:
        """Per dimension: the fraction of its bandwidth (``Dimension.bw`` per rank) used over the makespan."""
        if self.makespan_us <= 0:
            return tuple(0.0 for _ in net.dims)
        return tuple(b / (spec.bw * BYTES_PER_US_PER_GBPS * self.makespan_us)
                     for b, spec in zip(self.sent_bytes, net.dims))

    def busy_fraction(self) -> tuple[float, ...]:
        """Per dimension: the fraction of the makespan it was running a task."""
        if self.makespan_us <= 0:
            return tuple(0.0 for _ in self.busy_us)
        return tuple(b / self.makespan_us for b in self.busy_us)


def chunk_bytes(size_bytes: float, chunks: Sequence[ChunkPlan]) -> list[float]:
    """Bytes of every chunk: ``size * units / total units``."""
    total = sum(c.units for c in chunks)
    return [size_bytes * c.units / total for c in chunks]


def window_of(algorithm: str, previous: str | None) -> int:
    """How many phases a dimension may have in flight when a phase of ``algorithm`` follows one of ``previous``.

    Two direct phases overlap (the second's overheads and latency hide
    behind the first's bytes); a ring phase runs alone.
    """
    return DIRECT_WINDOW if algorithm == "direct" and previous in (None, "direct") else 1


@dataclass
class _Dim:
    """One dimension's queue and the state its next phase starts from."""

    ready: list  # heap of (chunk, step)
    flight: list  # done times of the phases in flight, oldest first
    last: str | None = None  # algorithm of the last phase started
    data_free: float = -math.inf
    recv_free: float = -math.inf
    send_free: float = -math.inf
    busy_until: float = 0.0
    busy: float = 0.0
    sent: float = 0.0

    def can_start(self, algorithm: str) -> bool:
        return len(self.flight) < window_of(algorithm, self.last)


def _key(priority: str, k: int, i: int) -> tuple[int, int, int, int]:
    """Queue key of phase ``i`` of chunk ``k`` (the lowest runs first), ending in ``(k, i)``."""
    return (k, i, k, i) if priority == "chunk" else (i, k, k, i)


def time_chunks(net: DimNet, costs: PhaseCosts, kind: str, size_bytes: float, chunks: Sequence[ChunkPlan],
                priority: str = "chunk") -> DimTiming:
    """Run ``chunks`` through the per-dimension queues (see the module docstring)."""
    if priority not in PRIORITIES:
        raise CollectiveError(f"unknown queue priority {priority!r}; choose one of: {', '.join(PRIORITIES)}")
    steps = [chunk_steps(net, kind, c) for c in chunks]
    sizes = chunk_bytes(size_bytes, chunks)
    dims = [_Dim([], []) for _ in net.dims]
    # local copies before a chunk's first phase and after its last (free without local costs; see cost.py)
    arrivals = [(costs.copies_before(kind, size_bytes, sizes[k]), k) for k in range(len(chunks)) if steps[k]]
    heapq.heapify(arrivals)
    running: list[tuple[float, int, int]] = []  # (done, chunk, step)
    tasks: list[Task] = []
    now = makespan = 0.0
    while True:
        while arrivals and arrivals[0][0] <= now:
            k = heapq.heappop(arrivals)[1]
            heapq.heappush(dims[steps[k][0].dim].ready, _key(priority, k, 0))
        for d, q in enumerate(dims):
            while q.ready and q.can_start(steps[q.ready[0][2]][q.ready[0][3]].algorithm):
                k, i = heapq.heappop(q.ready)[2:]
                done = _start(costs, q, d, steps[k][i], sizes[k], now)
                tasks.append(Task(k, i, d, steps[k][i].algorithm, sizes[k] * steps[k][i].fraction, steps[k][i].reduce,
                                  now, done))
                heapq.heappush(running, (done, k, i))
        if not running and not arrivals:
            break
        now = min(running[0][0] if running else math.inf, arrivals[0][0] if arrivals else math.inf)
        while running and running[0][0] <= now:
            done, k, i = heapq.heappop(running)
            dims[steps[k][i].dim].flight.remove(done)
            if i + 1 < len(steps[k]):
                heapq.heappush(dims[steps[k][i + 1].dim].ready, _key(priority, k, i + 1))
            else:
                makespan = max(makespan, done + costs.copies_after(kind, sizes[k]))
    if tasks:
        makespan += net.call_overhead  # once per call (0 in the catalog; see DimNet)
    return DimTiming(makespan, tuple(q.busy for q in dims), tuple(q.sent for q in dims), tuple(tasks), priority)


def replay_tasks(net: DimNet, costs: PhaseCosts, kind: str, size_bytes: float, chunks: Sequence[ChunkPlan],
                 order: Sequence[tuple[int, int]]) -> DimTiming:
    """Run ``chunks`` with every dimension taking its tasks in the order ``order`` gives them (``(chunk,
    step)`` pairs, each phase of each chunk once, each after the chunk's previous phase; see the module
    docstring). CollectiveError if ``order`` is not such a list or cannot run (a dimension waits on a phase
    that can never be ready)."""
    steps = [chunk_steps(net, kind, c) for c in chunks]
    want = sum(len(s) for s in steps)
    if len(order) != want or len(set(order)) != want or any(not (0 <= k < len(chunks) and 0 <= i < len(steps[k]))
                                                          for k, i in order):
        raise CollectiveError(f"a schedule order lists every phase of every chunk once ({want}); got {len(order)} "
                              f"entries of which {len(set(order))} differ")
    sizes = chunk_bytes(size_bytes, chunks)
    queues: list[list[tuple[int, int]]] = [[] for _ in net.dims]
    for k, i in order:
        queues[steps[k][i].dim].append((k, i))
    heads = [0] * len(net.dims)
    dims = [_Dim([], []) for _ in net.dims]
    ready_at: dict[tuple[int, int], float] = {}
    arrivals = sorted((costs.copies_before(kind, size_bytes, sizes[k]), k) for k in range(len(chunks)) if steps[k])
    running: list[tuple[float, int, int]] = []
    tasks: list[Task] = []
    now = makespan = 0.0
    a = 0
    while True:
        while a < len(arrivals) and arrivals[a][0] <= now:
            ready_at[(arrivals[a][1], 0)] = now
            a += 1
        for d, q in enumerate(dims):
            while heads[d] < len(queues[d]):
                k, i = queues[d][heads[d]]
                if (k, i) not in ready_at or not q.can_start(steps[k][i].algorithm):
                    break
                heads[d] += 1
                done = _start(costs, q, d, steps[k][i], sizes[k], now)
                tasks.append(Task(k, i, d, steps[k][i].algorithm, sizes[k] * steps[k][i].fraction, steps[k][i].reduce,
                                  now, done))
                heapq.heappush(running, (done, k, i))
        if not running and a == len(arrivals):
            break
        now = min(running[0][0] if running else math.inf, arrivals[a][0] if a < len(arrivals) else math.inf)
        while running and running[0][0] <= now:
            done, k, i = heapq.heappop(running)
            dims[steps[k][i].dim].flight.remove(done)
            if i + 1 < len(steps[k]):
                ready_at[(k, i + 1)] = done
            else:
                makespan = max(makespan, done + costs.copies_after(kind, sizes[k]))
    if len(tasks) != want:
        stuck = [queues[d][heads[d]] for d in range(len(dims)) if heads[d] < len(queues[d])]
        raise CollectiveError("the schedule order cannot run: every dimension waits on a phase that is never ready "
                              f"(chunk, phase): {stuck[:4]}")
    if tasks:
        makespan += net.call_overhead
    return DimTiming(makespan, tuple(q.busy for q in dims), tuple(q.sent for q in dims), tuple(tasks))


def _start(costs: PhaseCosts, q: _Dim, d: int, step, chunk: float, now: float) -> float:
    """Start ``step`` on dimension ``d`` at ``now``; returns when it is done."""
    m = chunk * step.fraction
    if step.algorithm == "direct":
        t = costs.direct(d, m, reduce=step.reduce, start=now, data_free=q.data_free, recv_free=q.recv_free,
                         send_free=q.send_free)
        q.data_free, q.recv_free, q.send_free, done = t.data_end, t.received, t.posted, t.done
    else:
        done = now + costs.time(d, step.algorithm, m, reduce=step.reduce)
        q.data_free = q.recv_free = q.send_free = done
    q.busy += done - max(now, q.busy_until)
    q.busy_until = max(q.busy_until, done)
    q.sent += costs.sent_bytes(d, m)
    q.flight.append(done)
    q.last = step.algorithm
    return done
