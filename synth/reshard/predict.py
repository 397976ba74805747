"""A resharding plan as the runtime runs it: the task graph its real run is predicted from.

The collectives' predictions lower a schedule the way ccsynth's executor
runs it and simulate that (:mod:`ccsynth.synth.executor_model`); a
resharding plan runs on another executor -- each rank's program of boxes
(:func:`~ccsynth.synth.reshard.program.rank_program`) -- so
:func:`lower_reshard` lowers *that* program, rank by rank, into the same
:class:`~ccsynth.synth.simulate.TaskGraph`, and :func:`predict_reshard`
simulates it with :func:`~ccsynth.synth.simulate.simulate_graph`: the
profile's per-message overheads, rounds, message, local, footprint and
run curves apply exactly as they do to a collective's run.

Every call has the agreement (one allreduce of five integers,
:class:`ccsynth.collectives.reshard_calls.Agreement`), lowered as a
dissemination exchange of small messages (``ceil(log2 n)`` rounds): a
dataflow plan starts after it, an ``alltoallv`` plan runs while it
completes (as ``ccsynth.reshard`` runs a cached one). Then:

=====================  =======================================================
rank program           tasks
=====================  =======================================================
dataflow (``ReshardProgram``)
  receive              a ``recv`` posted after the agreement, then a ``copy``
                       unpacking it where its box is not contiguous
  send                 a ``copy`` packing it where its box is not contiguous
                       (after the ops it depends on), then the ``send``
  copy                 a ``copy`` of its bytes
alltoallv (``AlltoallvProgram``)
  the call             one ``copy`` packing every send (none where the send
                       side is direct), a ``send`` to and a ``recv`` from every
                       peer with bytes to exchange (posted together, as
                       MPICH's Alltoallv does), one ``copy`` unpacking every
                       receive after all of them (none where direct), then one
                       ``copy`` of the local pieces
=====================  =======================================================

Example:
    >>> from ccsynth.synth.reshard import ReshardTask, plan_reshard
    >>> from ccsynth.topologies import fully_connected
    >>> task = ReshardTask.of((64, 64), "float32", (2,), "S0,R", (2,), "R,S0")
    >>> g = lower_reshard(plan_reshard(task, planner="alltoallv"))
    >>> sorted({t.nbytes for t in g.ops if t.kind == "send"})   # the agreement's, then a 4 KiB block each way
    [40, 4096]
    >>> predict_reshard(plan_reshard(task, planner="alltoallv"), fully_connected(2)).time_us > 0
    True
"""

from __future__ import annotations

import logging
import math

from ccsynth.collectives.reshard_alltoallv import AlltoallvProgram
from ccsynth.collectives.reshard_program import COPY, RECV, SEND, ReshardProgram, ShardProgram, contiguous_box
from ccsynth.collectives.schedule import Schedule
from ccsynth.errors import ScheduleError
from ccsynth.graphs import topological_order
from ccsynth.synth.reshard.plan import task_of_schedule
from ccsynth.synth.reshard.program import rank_program
from ccsynth.synth.simulate import SimResult, Task, TaskGraph, simulate_graph
from ccsynth.topologies.model import Topology

__all__ = ["AGREE_BYTES", "lower_reshard", "predict_reshard"]

log = logging.getLogger(__name__)

#: bytes of the agreement's allreduce (five int64)
AGREE_BYTES = 40


class _Builder:
    def __init__(self, itemsize: int):
        self.itemsize = itemsize
        self.tasks: list[Task] = []
        self.sends: dict[tuple, int] = {}
        self.recvs: dict[tuple, int] = {}

    def add(self, rank: int, kind: str, nbytes: int, deps=(), peer: int = -1, label: str = "") -> int:
        i = len(self.tasks)
        self.tasks.append(Task(i, rank, kind, int(nbytes), peer=peer, deps=tuple(sorted(set(deps))), label=label))
        return i

    def send(self, rank: int, peer: int, key, nbytes: int, deps, label: str) -> int:
        t = self.add(rank, "send", nbytes, deps, peer, label)
        self.sends[(rank, peer, key)] = t
        return t

    def recv(self, rank: int, peer: int, key, nbytes: int, deps, label: str) -> int:
        t = self.add(rank, "recv", nbytes, deps, peer, label)
        self.recvs[(peer, rank, key)] = t
        return t

    def matches(self) -> dict[int, int]:
        out: dict[int, int] = {}
        for key, s in self.sends.items():
            r = self.recvs.get(key)
            if r is None:
                raise ScheduleError(f"{self.tasks[s].describe()} has no matching receive in the plan")
            out[s], out[r] = r, s
        if len(out) != 2 * len(self.recvs):
            raise ScheduleError("the lowered resharding has receives that no send matches")
        return out


def _agreement(b: _Builder, n: int, connected) -> list[int]:
    """The agreement's allreduce on every rank, as a dissemination exchange; the last task of each rank (only the
    tasks that start the call where the topology lacks a connection the exchange needs)."""
    last: list[int | None] = [None] * n
    k = 1
    rnd = 0
    pairs = [(r, (r + d) % n) for d in range(1, n) if d & (d - 1) == 0 for r in range(n)]
    while k < n and (connected is None or all(connected(a, c) for a, c in pairs)):
        for r in range(n):
            deps = () if last[r] is None else (last[r],)
            s = b.send(r, (r + k) % n, ("agree", rnd), AGREE_BYTES, deps, f"agreement round {rnd}")
            v = b.recv(r, (r - k) % n, ("agree", rnd), AGREE_BYTES, deps, f"agreement round {rnd}")
            last[r] = b.add(r, "copy", 0, (s, v), label="agreement round done")
        k *= 2
        rnd += 1
    return [b.add(r, "copy", 0, () if t is None else (t,), label="call start") for r, t in enumerate(last)]


def _contig(prog: ShardProgram, buf: str, box) -> bool:
    if buf == "s":
        return True
    shape = prog.src_shape if buf == "i" else prog.dst_shape
    return shape is not None and contiguous_box(shape, box)


def _dataflow(b: _Builder, prog: ReshardProgram, start: int) -> None:
    r, size = prog.rank, b.itemsize
    preds = [list(op.deps) for op in prog.ops]
    order = topological_order(preds) if any(d >= k for k, ds in enumerate(preds) for d in ds) else range(len(preds))
    if order is None:
        raise ScheduleError(f"rank {r}'s resharding program has a cycle")
    last = [start] * len(prog.ops)
    for k in order:
        op = prog.ops[k]
        deps = [start] + [last[d] for d in op.deps]
        nbytes = op.size * size
        if op.kind == RECV:
            t = b.recv(r, op.peer, op.tag, nbytes, [start], f"piece from rank {op.peer}")
            if not _contig(prog, op.dst_buf, op.dst):
                t = b.add(r, "copy", nbytes, [t], label="unpacking a piece")
            last[k] = t
        elif op.kind == SEND:
            if not _contig(prog, op.src_buf, op.src):
                deps = [b.add(r, "copy", nbytes, deps, label="packing a piece")]
            last[k] = b.send(r, op.peer, op.tag, nbytes, deps, f"piece to rank {op.peer}")
        elif op.kind == COPY:
            last[k] = b.add(r, "copy", nbytes, deps, label="local piece")


def _alltoallv(b: _Builder, prog: AlltoallvProgram, start: int) -> None:
    r, size = prog.rank, b.itemsize
    pack = b.add(r, "copy", prog.send.packed_elements * size, [start], label="packing the sends")
    ends = [pack]
    for q in range(prog.n_ranks):
        if q != r and prog.send.counts[q]:
            ends.append(b.send(r, q, "a2av", prog.send.counts[q] * size, [pack], f"Alltoallv to rank {q}"))
        if q != r and prog.recv.counts[q]:
            ends.append(b.recv(r, q, "a2av", prog.recv.counts[q] * size, [start], f"Alltoallv from rank {q}"))
    unpack = b.add(r, "copy", prog.recv.packed_elements * size, ends, label="unpacking the receives")
    local = sum(math.prod(s.stop - s.start for s in dst) for _, dst in prog.local) * size
    b.add(r, "copy", local, [unpack], label="local pieces")


def lower_reshard(schedule: Schedule, topology: Topology | None = None) -> TaskGraph:
    """The tasks one call of the resharding plan ``schedule`` runs, every rank's (see the module docstring).

    ``topology``: where it lacks a connection the agreement's exchange needs (a ring, a cube mesh), the
    agreement is left out of the graph (MPI routes it; the plan's own sends use only the topology's
    connections)."""
    task = task_of_schedule(schedule)
    n = schedule.collective.n_ranks
    itemsize = task.itemsize
    b = _Builder(itemsize)
    agreed = _agreement(b, n, topology.has_connection if topology is not None else None)
    # a cached alltoallv plan runs while the agreement completes (ccsynth.reshard); the others wait for it
    overlap = schedule.meta.get("executor") == "alltoallv"
    start = [b.add(r, "copy", 0, (), label="call start") for r in range(n)] if overlap else agreed
    working = 0
    for r in range(n):
        prog = rank_program(schedule, r)
        if isinstance(prog, AlltoallvProgram):
            _alltoallv(b, prog, start[r])
            staged = prog.send.packed_elements + prog.recv.packed_elements
        else:
            _dataflow(b, cast_dataflow(prog), start[r])
            staged = sum(op.size for op in cast_dataflow(prog).ops if op.kind != COPY)
        shards = sum(math.prod(s) for s in (prog.src_shape, prog.dst_shape) if s is not None)
        working = max(working, (shards + staged) * itemsize)
    kind = schedule.meta.get("executor", "dataflow")
    return TaskGraph(f"{schedule.name}@reshard({kind})", schedule.collective, float(task.nbytes), tuple(b.tasks),
                     b.matches(), working_set_bytes=float(working))


def cast_dataflow(prog: ShardProgram) -> ReshardProgram:
    if not isinstance(prog, ReshardProgram):  # pragma: no cover - rank_program makes one of the two
        raise ScheduleError(f"unknown resharding program {type(prog).__name__}")
    return prog


def predict_reshard(schedule: Schedule, topology: Topology, *, footprint_bytes: float | None = None) -> SimResult:
    """The predicted time of one call of ``schedule`` as the runtime runs it on ``topology`` (its executor's task
    graph, :func:`lower_reshard`, simulated with every size-dependent cost and the run curve of a profile)."""
    if topology.n_ranks != schedule.collective.n_ranks:
        raise ScheduleError(f"plan {schedule.name!r} is for {schedule.collective.n_ranks} ranks; topology "
                            f"{topology.name!r} has {topology.n_ranks}")
    graph = lower_reshard(schedule, topology)
    return simulate_graph(graph, topology, footprint_bytes=footprint_bytes)
