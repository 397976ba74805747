"""A schedule as ccsynth's executor runs it: the task graph a run is predicted from.

The simulator's own view of a schedule (:mod:`ccsynth.synth.simulate`) is
one message per send op, one local step per copy or reduction. ccsynth's
MPI executor (:class:`~ccsynth.collectives.executor.CompiledSchedule`) runs
something else, and from 1 MiB up the difference decides the time:

* it *rewrites* each rank's ops (:mod:`ccsynth.collectives.runtime.local_program`):
  a send of chunks that a copy just wrote is sent from the copy's source,
  and a ``copy X -> D`` followed by a receive-reduce into ``D`` becomes one
  fused pass (``D = X + received``), so the copy costs nothing of its own;
* it cuts every op into *pipeline slices* of ``slice_bytes``
  (:mod:`ccsynth.collectives.runtime.layout`; 1 MiB for reducing
  collectives, 4 MiB for the others): every slice is an MPI message of its
  own, with its own per-message overhead, and a message always ends with a
  shorter, possibly empty, slice;
* a slice waits only for the slices it overlaps in memory, so a chunk that
  is still arriving is already being reduced and forwarded slice by slice
  (what makes a ring fast);
* receives that reduce are posted at the start of the call into a private
  staging area; their reduction waits for its inputs and for the data;
* messages of scattered chunks are packed into (unpacked from) staging by
  copies.

:func:`lower_for_executor` therefore runs the executor's own compile steps
-- the same functions, without MPI -- for every rank, and turns each rank's
slice graph into :class:`~ccsynth.synth.simulate.Task` s:

=================  ==========================================================
slice node         tasks (in this order; the node's successors wait for the last)
=================  ==========================================================
send               a ``copy`` packing it (if scattered), then the ``send``
receive            the ``recv``, then a ``copy`` unpacking it (if scattered)
receive-reduce     a ``recv`` with no dependencies (posted at the start), then
                   a ``reduce`` of its bytes that waits for the node's
                   predecessors and for the ``recv``
local              one ``copy`` or ``reduce`` of all its work items' bytes
join               an empty ``copy`` (free)
=================  ==========================================================

A send slice matches the receive slice of the same pair of ranks and tag.
Local work is counted in bytes of the *result*, copies and reductions
alike, as the simulator charges them (``bytes / local_bw``): measured on
this project's 2-core machine, NumPy's copy, in-place sum and fused
``dst = a + b`` run within about 25% of one another once the buffers
outgrow the caches (copy 4.0, sum 4.8, fused 3.7 GB/s at 64 MiB, two ranks),
and ``ccsynth topo profile`` takes the fused kernel's rate, the one
reducing collectives run most.

:func:`simulate_run` simulates that graph (:func:`~ccsynth.synth.simulate.simulate_graph`):
the prediction of one call of a compiled schedule at one message size,
which ``ccsynth bench --predict`` prints beside what it measures.

What the lowering leaves out: the straight-line path of small calls
(:mod:`ccsynth.collectives.static_program`) runs a rank's slices in one
fixed order; the graph keeps only their dependencies (the simulator's
engine serves work first come first served), which is the same order
whenever a rank has one thing to do at a time.

Example:
    >>> from ccsynth.collectives.spec import Collective
    >>> from ccsynth.synth.baselines import make_baseline
    >>> from ccsynth.topologies import fully_connected
    >>> ring = make_baseline("ring", Collective("allreduce", 2, 2), fully_connected(2))
    >>> g = lower_for_executor(ring, 4 << 20)   # 2 MiB per chunk: 2 slices of 1 MiB and an empty one
    >>> sorted({t.nbytes for t in g.ops if t.kind == "send"})
    [0, 1048576]
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from ccsynth.collectives.runtime.constants import (
    DEFAULT_COPY_SLICE_BYTES, DEFAULT_SLICE_BYTES, K_LOCAL, K_RECV, K_RRED, K_SEND, STATIC_MAX_BYTES,
    W_COPY,
)
from ccsynth.collectives.runtime.layout import Layout, build_layout
from ccsynth.collectives.runtime.local_program import LocalProgram, build_local_program
from ccsynth.collectives.schedule import Schedule
from ccsynth.errors import ScheduleError, SizeError
from ccsynth.graphs import topological_order
from ccsynth.synth.simulate import SimResult, Task, TaskGraph, simulate_graph
from ccsynth.topologies.model import Topology

__all__ = ["ExecutorSettings", "executor_programs", "lower_for_executor", "simulate_run", "default_slice_bytes",
           "working_set_run"]

log = logging.getLogger(__name__)

_TAG_LIMIT = 1 << 40  # no tag limit here: the model sends nothing, and matching needs tags unique


def default_slice_bytes(schedule: Schedule) -> int:
    """The executor's default slice size for ``schedule`` (1 MiB reducing, 4 MiB otherwise)."""
    return DEFAULT_SLICE_BYTES if schedule.collective.is_reducing else DEFAULT_COPY_SLICE_BYTES


@dataclass(frozen=True)
class ExecutorSettings:
    """What the executor is told when it compiles (the bench's and communicator's defaults).

    ``itemsize``: bytes per element of a reducing collective's dtype (the
    executor moves raw bytes for the others); ``slice_bytes``: None for the
    executor's default; ``fuse``: copy + receive-reduce fusion.
    """

    itemsize: int = 4
    slice_bytes: int | None = None
    fuse: bool = True
    static_max_bytes: int = STATIC_MAX_BYTES


def _block_count(schedule: Schedule, size_bytes: float, itemsize: int) -> int:
    """Elements per block for a message of ``size_bytes`` (nccl-tests size)."""
    c = schedule.collective
    blocks = max(c.in_chunks, c.out_chunks) // c.chunk_factor
    return int(size_bytes // (blocks * itemsize))


def executor_programs(schedule: Schedule, settings: ExecutorSettings | None = None) -> tuple[LocalProgram, ...]:
    """Every rank's local program of ``schedule`` (the size-independent compile step; the executor too builds it
    once and lays it out per size). Pass it to :func:`lower_for_executor` to lower one schedule at many sizes."""
    settings = settings or ExecutorSettings()
    n = schedule.collective.n_ranks
    return tuple(build_local_program(schedule, q, q, fuse_ops=settings.fuse) for q in range(n))


def lower_for_executor(schedule: Schedule, size_bytes: float, settings: ExecutorSettings | None = None, *,
                       programs: tuple[LocalProgram, ...] | None = None) -> TaskGraph:
    """The tasks ccsynth's executor runs for one call of ``schedule`` at ``size_bytes`` (see the module docstring).

    ``programs``: :func:`executor_programs` of ``schedule`` with the same
    settings, when lowering it at several sizes (built here otherwise).
    Raises :class:`ScheduleError` where the executor would refuse the
    schedule (a race, a cycle) or the size (a count its chunks cannot
    split), :class:`SizeError` for a bad size.
    """
    settings = settings or ExecutorSettings()
    if isinstance(size_bytes, bool) or not isinstance(size_bytes, (int, float)) or not size_bytes >= 0:
        raise SizeError(f"message size must be a non-negative number of bytes, got {size_bytes!r}")
    coll = schedule.collective
    itemsize = settings.itemsize if coll.is_reducing else 1
    dtype = np.dtype(f"u{itemsize}") if itemsize in (1, 2, 4, 8) else np.dtype((np.void, itemsize))
    slice_bytes = settings.slice_bytes or default_slice_bytes(schedule)
    m = _block_count(schedule, size_bytes, itemsize)
    n, cf = coll.n_ranks, coll.chunk_factor
    layouts: list[Layout] = []
    levels_ok = True
    if programs is None:
        programs = executor_programs(schedule, settings)
    for q in range(n):
        program = programs[q]
        if not program.uneven_ok and m % cf:
            raise ScheduleError(
                f"schedule {schedule.name!r} keeps chunks in slots of other sizes, so it needs an element count per "
                f"block that its chunk factor {cf} divides (got {m} at {size_bytes:g} bytes)"
            )
        levels_ok = levels_ok and program.levels_ok
        layouts.append(build_layout(
            program, dtype, m, chunk_factor=cf, scratch_chunks=schedule.scratch_chunks,
            in_blocks=coll.in_chunks // cf, out_blocks=coll.out_chunks // cf, slice_bytes=slice_bytes,
            peers=tuple(range(n)), tag_limit=_TAG_LIMIT, rank=q,
        ))
    straight = levels_ok and all(
        lay.one_slice_each and lay.largest_message <= settings.static_max_bytes for lay in layouts
    )
    builder = _TaskBuilder(itemsize)
    for q, lay in enumerate(layouts):
        builder.add_rank(q, lay)
    matches = builder.match()
    path = "straight-line" if straight else "dataflow"
    return TaskGraph(f"{schedule.name}@executor({path})", coll, size_bytes, tuple(builder.tasks), matches,
                     working_set_bytes=float(max(_layout_bytes(lay) for lay in layouts)))


def _layout_bytes(lay: Layout) -> int:
    """Bytes of the buffers one rank's call touches: the caller's input and output, the executor's scratch and
    staging (the footprint of a call repeated back to back, :mod:`ccsynth.synth.simulate`)."""
    return (lay.in_len + lay.out_len + lay.scratch_len + lay.staging_len) * lay.dtype.itemsize


class _TaskBuilder:
    """Tasks of every rank's slice graph, and the message ends to match."""

    def __init__(self, itemsize: int):
        self.itemsize = itemsize
        self.tasks: list[Task] = []
        self.sends: dict[tuple[int, int, int], int] = {}  # (src, dst, tag) -> send task
        self.recvs: dict[tuple[int, int, int], int] = {}  # (src, dst, tag) -> recv task

    def _add(self, rank: int, kind: str, nbytes: int, deps, **kw) -> int:
        i = len(self.tasks)
        self.tasks.append(Task(i, rank, kind, int(nbytes), deps=tuple(sorted(set(deps))), **kw))
        return i

    def _work_bytes(self, items) -> tuple[int, bool]:
        """Bytes a node's kernels produce, and whether any of them reduces."""
        nbytes = sum(it.dst.size for it in items) * self.itemsize
        return nbytes, any(it.mode != W_COPY for it in items)

    def _local(self, rank: int, items, deps, label: str) -> int:
        nbytes, reduces = self._work_bytes(items)
        if reduces:
            return self._add(rank, "reduce", nbytes, deps, label=label)
        return self._add(rank, "copy", nbytes, deps, label=label)

    def add_rank(self, rank: int, lay: Layout) -> None:
        preds: list[list[int]] = [[] for _ in range(lay.n_nodes)]
        for u, succ in enumerate(lay.succ):
            for v in succ:
                preds[v].append(u)
        last = [-1] * lay.n_nodes  # the task a node's successors wait for
        order = _node_order(preds)
        for v in order:
            deps = [last[u] for u in preds[v]]
            k = lay.kind[v]
            work = lay.work.get(v)
            if k == K_SEND:
                peer, tag, region = lay.mpi[v]
                if work:
                    deps = [self._local(rank, work, deps, f"packing slice node {v}")]
                t = self._add(rank, "send", region.size * self.itemsize, deps, peer=peer, label=f"slice node {v}")
                self.sends[(rank, peer, tag)] = t
            elif k == K_RECV:
                peer, tag, region = lay.mpi[v]
                t = self._add(rank, "recv", region.size * self.itemsize, deps, peer=peer, label=f"slice node {v}")
                self.recvs[(peer, rank, tag)] = t
                if work:
                    t = self._local(rank, work, [t], f"unpacking slice node {v}")
            elif k == K_RRED:
                peer, tag, region = lay.mpi[v]
                r = self._add(rank, "recv", region.size * self.itemsize, (), peer=peer, label=f"slice node {v}, posted at the start")
                self.recvs[(peer, rank, tag)] = r
                t = self._local(rank, work or (), deps + [r], f"reducing slice node {v}")
            elif k == K_LOCAL:
                t = self._local(rank, work or (), deps, f"slice node {v}")
            else:  # K_JOIN
                t = self._add(rank, "copy", 0, deps, label=f"join node {v}")
            last[v] = t

    def match(self) -> dict[int, int]:
        out: dict[int, int] = {}
        for key, s in self.sends.items():
            r = self.recvs.get(key)
            if r is None:  # pragma: no cover - the layout numbers both ends alike
                raise ScheduleError(f"{self.tasks[s].describe()} has no matching receive (tag {key[2]})")
            out[s], out[r] = r, s
        if len(out) != 2 * len(self.recvs):  # pragma: no cover
            raise ScheduleError("the lowered program has receives that no send matches")
        return out


def _node_order(preds: list[list[int]]) -> list[int]:
    """The nodes in an order where every predecessor comes first (the layout's are nearly in it)."""
    if all(u < v for v, ps in enumerate(preds) for u in ps):
        return list(range(len(preds)))
    order = topological_order(preds)
    if order is None:  # pragma: no cover - the local program refuses cycles
        raise ScheduleError("the executor's slice graph has a cycle")
    return order


def simulate_run(
    schedule: Schedule, topology: Topology, size_bytes: float, settings: ExecutorSettings | None = None, *,
    footprint_bytes: float | None = None,
) -> SimResult:
    """Predict one call of ``schedule`` run by ccsynth's executor at ``size_bytes`` on ``topology``.

    ``footprint_bytes``: the bytes a rank touches between two calls on the same buffers, where the topology
    has a ``footprint_curve`` (None: the call's own working set, :func:`working_set_run`).
    """
    graph = lower_for_executor(schedule, size_bytes, settings)
    result = simulate_graph(graph, topology, footprint_bytes=footprint_bytes)
    log.debug("predicted %s on %s at %g bytes: %.6g us (%d tasks)", schedule.name, topology.name, size_bytes,
              result.time_us, len(graph.ops))
    return result


def working_set_run(schedule: Schedule, size_bytes: float, settings: ExecutorSettings | None = None) -> float:
    """Bytes of buffers the busiest rank touches in one call of ``schedule`` run by the executor at ``size_bytes``
    (input, output, scratch, staging): its footprint when called back to back; the sum of several such is the
    footprint of calls interleaved (``ccsynth bench --interleave``)."""
    return lower_for_executor(schedule, size_bytes, settings).working_set_bytes
