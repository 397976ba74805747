"""A verified resharding plan, lowered to one rank's program of boxes (what the MPI executor runs).

A reshard :class:`~ccsynth.collectives.schedule.Schedule` names pieces by
chunk numbers: input chunk ``j`` of rank ``r`` is piece ``inputs[r][j]``,
output chunk ``j`` piece ``outputs[r][j]``, scratch chunk ``j`` relay
``relays[r][j]``. :func:`rank_program` turns every op of one rank into a
:class:`~ccsynth.collectives.reshard_program.BoxOp`: the box of its piece
inside the rank's source or destination shard
(:meth:`~.task.ReshardTask.local_slices`), or its relay slot, and the
message's tag (its number among the messages between the two ranks). The
result, a :class:`~ccsynth.collectives.reshard_program.ReshardProgram`, is
plain data of the collectives layer: the executor there needs nothing of
the task.

Example:
    >>> from ccsynth.synth.reshard import ReshardTask, plan_reshard
    >>> task = ReshardTask.of((4, 4), "float32", (2,), "S0,R", (2,), "R,S0")
    >>> prog = rank_program(plan_reshard(task, planner="naive"), 0)
    >>> prog.src_shape, prog.dst_shape
    ((2, 4), (4, 2))
"""

from __future__ import annotations

from typing import cast

from ccsynth.collectives.explicit import ExplicitCollective
from ccsynth.collectives.reshard_alltoallv import AlltoallvProgram
from ccsynth.collectives.reshard_program import COPY, RECV, SEND, BoxOp, ReshardProgram, ShardProgram
from ccsynth.collectives.schedule import Chunks, Schedule
from ccsynth.errors import ScheduleError
from ccsynth.synth.reshard.plan import task_of_schedule

__all__ = ["rank_program"]

_KINDS = {"send": SEND, "recv": RECV, "copy": COPY}


def rank_program(schedule: Schedule, rank: int) -> ShardProgram:
    """Rank ``rank``'s ops of the reshard plan ``schedule`` as boxes of its shards (see the module doc).

    A plan whose ``meta["executor"]`` is ``"alltoallv"`` becomes an
    :class:`~ccsynth.collectives.reshard_alltoallv.AlltoallvProgram` (its
    hops must be direct, from source shards); any other a
    :class:`~ccsynth.collectives.reshard_program.ReshardProgram`.
    """
    task = task_of_schedule(schedule)
    coll = cast(ExplicitCollective, schedule.collective)  # task_of_schedule refused a uniform (non-explicit) one
    if not 0 <= rank < coll.n_ranks:
        raise ScheduleError(f"rank {rank} is not one of the plan's {coll.n_ranks} ranks")
    src_tile = task.src.tile_of_rank(rank)
    dst_tile = task.dst.tile_of_rank(rank)
    pieces = task.pieces

    def box(chunks: Chunks):
        if chunks.buf == "i":
            if src_tile is None:
                raise ScheduleError(f"rank {rank} holds no source tile, but the plan reads its input")
            return task.local_slices(pieces[coll.inputs[rank][chunks.index]], task.src.box(src_tile))
        if chunks.buf == "s":
            return chunks.index
        if dst_tile is None:
            raise ScheduleError(f"rank {rank} holds no destination tile, but the plan writes its output")
        return task.local_slices(pieces[coll.outputs[rank][chunks.index]], task.dst.box(dst_tile))

    if schedule.meta.get("executor") == "alltoallv":
        return _alltoallv_program(schedule, rank, box)
    mine = schedule.ops_of(rank)
    index = {op.id: k for k, op in enumerate(mine)}
    counters: dict[tuple[int, int], int] = {}
    ops: list[BoxOp] = []
    for op in mine:
        for c in (op.src, op.dst):
            if c is not None and c.count != 1:
                raise ScheduleError(f"{op.describe()}: resharding plans move one piece per op")
        kind = _KINDS.get(op.kind)
        if kind is None:
            raise ScheduleError(f"{op.describe()}: resharding plans do not reduce")
        tag = 0
        if kind != COPY:
            pair = (rank, op.peer) if kind == SEND else (op.peer, rank)
            tag = counters.get(pair, 0)
            counters[pair] = tag + 1
        ops.append(BoxOp(
            kind, op.peer, tag,
            op.src.buf if op.src is not None else "",
            box(op.src) if op.src is not None else None,
            op.dst.buf if op.dst is not None else "",
            box(op.dst) if op.dst is not None else None,
            schedule.op_units(op),
            tuple(index[d] for d in op.deps),
        ))
    relay_shapes = tuple(tuple(b - a for a, b in pieces[p].box) for p in coll.relays[rank])
    return ReshardProgram(
        rank, task.dtype,
        task.src.local_shape(rank) if src_tile is not None else None,
        task.dst.local_shape(rank) if dst_tile is not None else None,
        tuple(ops), relay_shapes, task.src.describe(),
    )


def _alltoallv_program(schedule: Schedule, rank: int, box) -> AlltoallvProgram:
    """The rank's sends, receives and copies of a direct plan, per peer and in piece order on both ends."""
    task = task_of_schedule(schedule)
    coll = cast(ExplicitCollective, schedule.collective)
    n = coll.n_ranks
    sends: list[list] = [[] for _ in range(n)]
    recvs: list[list] = [[] for _ in range(n)]
    local = []
    for op in schedule.ops_of(rank):
        if op.kind == "copy" and op.src is not None and op.dst is not None and op.src.buf == "i" and op.dst.buf == "o":
            local.append((box(op.src), box(op.dst)))
        elif op.kind == "send" and op.src is not None and op.src.buf == "i":
            sends[op.peer].append((coll.inputs[rank][op.src.index], box(op.src)))
        elif op.kind == "recv" and op.dst is not None and op.dst.buf == "o":
            recvs[op.peer].append((coll.outputs[rank][op.dst.index], box(op.dst)))
        else:
            raise ScheduleError(f"{op.describe()}: an alltoallv plan moves pieces straight from source to destination "
                                "shards")
    return AlltoallvProgram(
        rank, task.dtype,
        task.src.local_shape(rank) if task.src.tile_of_rank(rank) is not None else None,
        task.dst.local_shape(rank) if task.dst.tile_of_rank(rank) is not None else None,
        tuple(tuple(b for _, b in sorted(x, key=lambda t: t[0])) for x in sends),
        tuple(tuple(b for _, b in sorted(x, key=lambda t: t[0])) for x in recvs),
        tuple(local), task.src.describe(),
    )
