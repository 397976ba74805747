"""A multi-dimension schedule as a Schedule IR: verified, simulated and exported like any other.

Up to :data:`MAX_IR_RANKS` ranks and within ccsynth.limits and
:data:`IR_MAX_OPS` (:func:`fits_ir`, :func:`ir_refusal`: the IR names every
rank's every message, and a schedule of unequal chunks needs as many IR
chunks as it has units); beyond that a schedule is written as the phase
plan file (:mod:`ccsynth.formats.phase_plan_file`), which the MPI runtime
runs and the dimension-level model prices, at any chunk and rank count.

Layout. The collective's chunk factor makes every chunk of the schedule
``n`` slots (one per rank, ``units_k`` IR chunks each): allreduce
``("allreduce", n, U * n)``, reduce-scatter and allgather ``(kind, n, U)``
with ``U`` the total units. Chunk ``k`` occupies slots ``[u_k n, (u_k +
units_k) n)`` of the working buffer -- the output buffer for allreduce
(every rank first copies its input there), scratch for reduce-scatter and
allgather -- and slot ``j`` of it belongs to the rank whose coordinates,
read as digits in the chunk's reduce-scatter order (first dimension most
significant), make ``j``. So every phase's blocks are contiguous ranges:
a reduce-scatter phase on dimension ``d`` splits the rank's current range
into ``p_d`` blocks by its coordinate in ``d``, an allgather phase joins
them back. Reduce-scatter first packs its input into that layout and
finally copies its own slot out; allgather puts its input in its slot and
finally unpacks every slot to its place in the output (local copies, free
in the simulator).

Phases. ``ring``: ``p - 1`` steps along the dimension's ring order
(:attr:`~ccsynth.synth.multidim.network.DimSpec.ring_order`), each rank
forwarding one block per step (reduce-scatter: fused receive-reduce).
``direct``: every rank sends each peer its block at once; reduce-scatter
receives into scratch slots of its own and then reduces them into the
block one by one.

Order. Tasks are emitted in the schedule order of the dimension-level
model (:attr:`~ccsynth.synth.multidim.pipeline.DimTiming.tasks`); the data
dependencies follow from the buffers. On top, each dimension keeps the
model's window (:func:`~ccsynth.synth.multidim.pipeline.window_of`): the
first sends of a phase on every rank wait for that rank's ops of the phase
``W`` places earlier on the same dimension. So the simulator runs what the
model timed, and the schedule cannot deadlock (see the pipeline module).

Example:
    >>> from ccsynth.topologies.catalog import hierarchical
    >>> from ccsynth.synth.multidim.search import schedule_multidim
    >>> from ccsynth.collectives.verify import verify
    >>> t = hierarchical([(2, 100), (2, 50)])
    >>> s = to_schedule(schedule_multidim(t, "allreduce", 1 << 20, "themis", chunks=2), t)
    >>> s.collective.describe(), verify(s, t).n_ops > 0
    ('allreduce on 4 ranks, 8 chunk(s) per piece', True)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ccsynth import limits
from ccsynth.collectives.builder import ScheduleBuilder
from ccsynth.collectives.schedule import Schedule
from ccsynth.collectives.spec import Collective
from ccsynth.errors import CollectiveError, TopologyError
from ccsynth.synth.multidim.chunks import ChunkPlan, chunk_steps
from ccsynth.synth.multidim.network import DimNet
from ccsynth.synth.multidim.pipeline import window_of
from ccsynth.synth.multidim.search import MultiDimSchedule
from ccsynth.topologies.model import Topology

__all__ = ["MAX_IR_RANKS", "IR_MAX_OPS", "to_schedule", "slot_of", "collective_for", "fits_ir", "ir_refusal", "ir_max_chunks"]

#: the largest rank count lowered to the IR
MAX_IR_RANKS = 128
#: chunk counts for the IR are kept to schedules of at most this many ops (building and proving one costs about
#: 0.1 ms and 0.15 ms per op on one core: some 30 s at this size)
IR_MAX_OPS = 1 << 17


def slot_of(net: DimNet, order: tuple[int, ...], rank: int) -> int:
    """The slot of ``rank`` in a chunk of reduce-scatter order ``order``: its coordinates as digits, first most significant.

    >>> from ccsynth.topologies.catalog import hierarchical
    >>> from ccsynth.synth.multidim.network import dim_net
    >>> net = dim_net(hierarchical([(2, 100), (3, 50)]))
    >>> [slot_of(net, (0, 1), r) for r in range(6)], [slot_of(net, (1, 0), r) for r in range(6)]
    ([0, 3, 1, 4, 2, 5], [0, 1, 2, 3, 4, 5])
    """
    j = 0
    for d in order:
        j = j * net.dims[d].size + net.coordinate(rank, d)
    return j


def collective_for(kind: str, n_ranks: int, units: int) -> Collective:
    """The IR collective of a schedule of ``units`` units (see the module docstring)."""
    return Collective(kind, n_ranks, units * n_ranks if kind == "allreduce" else units)


@dataclass(frozen=True)
class _Range:
    """A rank's range before a reduce-scatter phase (after an allgather phase) and its blocks, in IR chunks."""

    start: int
    block: int  # chunks per block; the range has p blocks

    def of(self, c: int) -> int:
        return self.start + c * self.block


class _Lowering:
    """Emits one schedule; see :func:`to_schedule`."""

    def __init__(self, md: MultiDimSchedule, topology: Topology):
        self.md = md
        self.net = md.net
        self.kind = md.kind
        self.n = topology.n_ranks
        units = [c.units for c in md.chunks]
        self.u0 = [sum(units[:k]) for k in range(len(units))]
        self.total_units = sum(units)
        self.coll = collective_for(self.kind, self.n, self.total_units)
        self.b = ScheduleBuilder(self.coll, f"multidim-{md.scheduler}", topology=topology.name)
        self.work = "o" if self.kind == "allreduce" else "s"
        self.scratch_next = 0 if self.kind == "allreduce" else self.total_units * self.n
        self.steps = [chunk_steps(self.net, self.kind, c) for c in md.chunks]
        self.per_dim: list[list[tuple[str, list[list[int]]]]] = [[] for _ in self.net.dims]  # (algorithm, ops per rank)
        self.bases = [sorted({r - self.net.coordinate(r, d) * spec.stride for r in range(self.n)})
                      for d, spec in enumerate(self.net.dims)]

    # ------------------------------------------------------------ layout
    def range_at(self, k: int, level: int, rank: int) -> _Range:
        """Rank's range before reduce-scatter level ``level`` of chunk ``k`` (the level's dimension splits it)."""
        chunk: ChunkPlan = self.md.chunks[k]
        order = chunk.order
        prefix = 0
        for d in order[:level]:
            prefix = prefix * self.net.dims[d].size + self.net.coordinate(rank, d)
        rest = math.prod(self.net.dims[d].size for d in order[level:])
        start = self.u0[k] * self.n + prefix * rest * chunk.units
        return _Range(start, rest // self.net.dims[order[level]].size * chunk.units)

    # ------------------------------------------------------------ program
    def build(self) -> Schedule:
        for k in range(len(self.md.chunks)):
            self.start_chunk(k)
        last_task = {}
        for i, t in enumerate(self.md.timing.tasks):
            last_task[t.chunk] = i
        for i, t in enumerate(self.md.timing.tasks):
            self.task(t.chunk, t.step)
            if last_task[t.chunk] == i:
                self.finish_chunk(t.chunk)
        return self.b.build(algorithm="multidim", scheduler=self.md.scheduler, chunks=len(self.md.chunks),
                            orders=[list(c.order) for c in self.md.chunks],
                            dimensions=[d.name for d in self.net.dims], model_us=self.md.makespan_us)

    def start_chunk(self, k: int) -> None:
        b, n, c = self.b, self.n, self.md.chunks[k]
        u = c.units
        if self.kind == "allreduce":
            if k == 0:
                for r in range(n):
                    b.copy(r, ("i", 0, self.coll.chunk_factor), ("o", 0, self.coll.chunk_factor))
            return
        for r in range(n):
            if self.kind == "reduce_scatter":
                for q in range(n):
                    b.copy(r, ("i", q * self.total_units + self.u0[k], u), ("s", self.slot(k, q), u))
            else:
                b.copy(r, ("i", self.u0[k], u), ("s", self.slot(k, r), u))

    def finish_chunk(self, k: int) -> None:
        b, n, u = self.b, self.n, self.md.chunks[k].units
        if self.kind == "reduce_scatter":
            for r in range(n):
                b.copy(r, ("s", self.slot(k, r), u), ("o", self.u0[k], u))
        elif self.kind == "allgather":
            for r in range(n):
                for q in range(n):
                    b.copy(r, ("s", self.slot(k, q), u), ("o", q * self.total_units + self.u0[k], u))

    def slot(self, k: int, rank: int) -> int:
        c = self.md.chunks[k]
        return (self.u0[k] * self.n) + slot_of(self.net, c.order, rank) * c.units

    def task(self, k: int, i: int) -> None:
        step = self.steps[k][i]
        d = step.dim
        level = self.md.chunks[k].order.index(d)
        history = self.per_dim[d]
        w = window_of(step.algorithm, history[-1][0] if history else None)
        wait = history[-w][1] if len(history) >= w else None
        ops: list[list[int]] = [[] for _ in range(self.n)]
        slots = self.scratch_next  # a direct reduce-scatter's receive slots: the same on every group (disjoint ranks)
        if step.algorithm == "direct" and step.reduce:
            self.scratch_next += (self.net.dims[d].size - 1) * self.range_at(k, level, 0).block
        for base in self.bases[d]:
            group = [base + c * self.net.dims[d].stride for c in range(self.net.dims[d].size)]
            rng = self.range_at(k, level, group[0])
            if step.algorithm == "ring":
                self.ring(d, group, rng, step.reduce, wait, ops)
            else:
                self.direct(group, rng, step.reduce, wait, ops, slots)
        history.append((step.algorithm, ops))

    def ring(self, d: int, group: list[int], rng: _Range, reduce: bool, wait, ops) -> None:
        order = self.net.dims[d].ring_order
        if order is None:
            raise CollectiveError(f"dimension {self.net.dims[d].name!r} of {self.net.topology!r} has no ring")
        p = len(order)
        bs, buf = rng.block, self.work
        for s in range(p - 1):
            for q in range(p):
                src, dst = group[order[q]], group[order[(q + 1) % p]]
                owner = order[(q - s - 1) % p] if reduce else order[(q - s) % p]
                at = (buf, rng.of(owner), bs)
                deps = wait[src] if (s == 0 and wait is not None) else ()
                sid, rid = self.b.transfer(src, dst, at, at, reduce=reduce, send_deps=deps)
                ops[src].append(sid)
                ops[dst].append(rid)

    def direct(self, group: list[int], rng: _Range, reduce: bool, wait, ops, slots: int) -> None:
        p = len(group)
        bs, buf = rng.block, self.work
        for t in range(1, p):
            for a in range(p):
                c = (a + t) % p
                src, dst = group[a], group[c]
                deps = wait[src] if wait is not None else ()
                if reduce:
                    into = ("s", slots + (t - 1) * bs, bs)
                    sid, rid = self.b.transfer(src, dst, (buf, rng.of(c), bs), into, send_deps=deps)
                else:
                    at = (buf, rng.of(a), bs)
                    sid, rid = self.b.transfer(src, dst, at, at, send_deps=deps)
                ops[src].append(sid)
                ops[dst].append(rid)
        if reduce:
            for c in range(p):
                for t in range(1, p):
                    ops[group[c]].append(self.b.reduce(group[c], ("s", slots + (t - 1) * bs, bs), (buf, rng.of(c), bs)))


def _ir_ops(kind: str, net: DimNet, chunks: int) -> int:
    """An upper bound on the ops of a schedule of ``chunks`` chunks (see :class:`_Lowering`)."""
    n = net.n_ranks
    phases = sum(d.size - 1 for d in net.dims)
    per_chunk = {"allreduce": 5 * n * phases, "reduce_scatter": 3 * n * phases + n * n + n,
                 "allgather": 2 * n * phases + n + n * n}[kind]
    return chunks * per_chunk + n


def _too_large(kind: str, net: DimNet, chunks: int, units: int) -> str | None:
    """Why a schedule of ``chunks`` chunks of ``units`` units in all does not become an IR (the limit it
    passes: :data:`MAX_IR_RANKS`, ccsynth.limits, :data:`IR_MAX_OPS`), or None where it does."""
    n = net.n_ranks
    if n > MAX_IR_RANKS:
        return f"{n} ranks, above MAX_IR_RANKS = {MAX_IR_RANKS}"
    try:
        coll = collective_for(kind, n, units)
    except CollectiveError as e:
        return str(e)
    scratch = units * n * (net.n_dims + 1)
    total = n * (coll.in_chunks + coll.out_chunks + scratch)
    if total > limits.MAX_SCHEDULE_CHUNKS:
        return f"{total} buffer chunks for {units} units, above MAX_SCHEDULE_CHUNKS = {limits.MAX_SCHEDULE_CHUNKS}"
    if scratch > limits.MAX_SCRATCH_CHUNKS:
        return f"{scratch} scratch chunks for {units} units, above MAX_SCRATCH_CHUNKS = {limits.MAX_SCRATCH_CHUNKS}"
    ops = _ir_ops(kind, net, chunks)
    if ops > IR_MAX_OPS:
        return f"up to {ops} ops for {chunks} chunks, above IR_MAX_OPS = {IR_MAX_OPS}"
    return None


def ir_refusal(md: MultiDimSchedule) -> str | None:
    """Why ``md``, at its own chunks and units, does not become a Schedule IR (:func:`to_schedule`), or None
    where it does: at most :data:`MAX_IR_RANKS` ranks, within ccsynth.limits and :data:`IR_MAX_OPS`."""
    return _too_large(md.kind, md.net, md.n_chunks, sum(c.units for c in md.chunks))


def fits_ir(md: MultiDimSchedule) -> bool:
    """Whether ``md`` itself, at its own chunks and units, becomes a Schedule IR (see :func:`ir_refusal`)."""
    return ir_refusal(md) is None


def ir_max_chunks(kind: str, net: DimNet) -> int:
    """The most chunks (a power of two) whose schedule the IR takes: within ccsynth.limits and :data:`IR_MAX_OPS`.

    It allows four units per chunk in all, more than any scheduler under ``max_chunks`` uses (Themis's flex
    variant cuts ``k`` units into fewer chunks), so the bound holds for every scheduler.

    >>> from ccsynth.topologies.catalog import hierarchical
    >>> from ccsynth.synth.multidim.network import dim_net
    >>> ir_max_chunks("allreduce", dim_net(hierarchical([(4, 200), (8, 100), (4, 50)])))
    8
    """
    n = net.n_ranks
    if n > MAX_IR_RANKS:
        raise CollectiveError(f"a multi-dimension schedule becomes a Schedule IR on at most MAX_IR_RANKS = "
                              f"{MAX_IR_RANKS} ranks; {net.topology!r} has {n}")
    best = 0
    k = 1
    while k <= 1 << 20 and _too_large(kind, net, k, 4 * k) is None:
        best = k
        k *= 2
    if best == 0:
        raise CollectiveError(f"{kind} on {net.topology!r}: even one chunk makes a schedule larger than the IR takes")
    return best


def to_schedule(md: MultiDimSchedule, topology: Topology) -> Schedule:
    """``md`` as a Schedule IR on ``topology`` (unverified; :func:`ccsynth.collectives.verify.verify` proves it).

    Raises :class:`~ccsynth.errors.CollectiveError` above :data:`MAX_IR_RANKS`
    ranks and :class:`~ccsynth.errors.TopologyError` if ``topology`` is not
    the one ``md`` was scheduled for.
    """
    if topology.n_ranks > MAX_IR_RANKS:
        raise CollectiveError(
            f"a multi-dimension schedule becomes a Schedule IR on at most MAX_IR_RANKS = {MAX_IR_RANKS} ranks; "
            f"{topology.name!r} has {topology.n_ranks} (the dimension-level model and the MPI phase plan have no "
            f"such limit)"
        )
    if topology.name != md.net.topology or topology.n_ranks != md.net.n_ranks:
        raise TopologyError(f"the schedule was made for topology {md.net.topology!r}, not {topology.name!r}")
    return _Lowering(md, topology).build()
