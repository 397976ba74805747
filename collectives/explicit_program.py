"""One rank's part of an explicit schedule, run on flat buffers whose chunks have their own extents.

The executor (:mod:`~ccsynth.collectives.executor`) runs equal-chunk
schedules, sliced and pipelined; resharding plans run on tensor boxes
(:mod:`~ccsynth.collectives.reshard_program`). A v-collective
(:mod:`~ccsynth.collectives.vschedule`) is in between: flat buffers as the
collectives, chunks of their own extents as resharding. This runner takes
the schedule of an :class:`~ccsynth.collectives.explicit.ExplicitCollective`
and, per call, where each of this rank's chunks starts: input chunk ``j`` is
``units(i, j)`` elements of ``send`` at ``in_offsets[j]``, output chunk
``j`` the same of ``recv`` at ``out_offsets[j]`` (the caller's
displacements: nothing is packed or copied besides the schedule's own
copies).

A run is dataflow, as the executor's: a receive is posted and a send or a
copy started as soon as the ops it depends on are done; a message moves
its chunks' bytes (an op over several chunks needs them adjacent in the
buffer); an op of zero units moves no message and is done at once (both
sides know the extents). Message ``k`` between a pair of ranks (per
direction) has tag ``channel.base + signature + k`` (:mod:`.runtime.channel`:
no call can take another call's message), and the waits watch the
channel's control line, so that a rank that fails makes the others raise
instead of wait. Every receive checks the length of what arrived.
Relay (scratch) chunks and reductions are not supported: the v-schedules
have neither.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ccsynth.collectives.runtime.channel import Channel
from ccsynth.collectives.runtime.primitives import MpiCalls
from ccsynth.collectives.schedule import Chunks, Schedule
from ccsynth.errors import BufferMismatchError, ScheduleError

__all__ = ["ExplicitOp", "ExplicitProgram"]

_SEND, _RECV, _COPY = 0, 1, 2


@dataclass(frozen=True)
class ExplicitOp:
    """One op of this rank: kind, peer, tag within the call, chunks read (src) and written (dst), units, deps."""

    kind: int
    peer: int
    tag: int
    src: Chunks | None
    dst: Chunks | None
    units: int
    deps: tuple[int, ...]


class ExplicitProgram:
    """This rank's ops of an explicit ``schedule``, ready to run (see the module docstring)."""

    def __init__(self, schedule: Schedule, rank: int, signature_kind: str):
        coll = schedule.collective
        if coll.uniform:
            raise ScheduleError(f"schedule {schedule.name!r} has equal chunks: run it with CompiledSchedule")
        if schedule.scratch_chunks:
            raise ScheduleError(f"schedule {schedule.name!r} uses relay chunks, which this runner does not support")
        self.schedule = schedule
        self.rank = rank
        self.signature_kind = signature_kind
        mine = schedule.ops_of(rank)
        index = {op.id: k for k, op in enumerate(mine)}
        pairs: dict[tuple[int, int], int] = {}
        ops = []
        for op in mine:
            if op.kind == "reduce" or op.reduce:
                raise ScheduleError(f"{op.describe()}: explicit schedules do not reduce")
            kind = {"send": _SEND, "recv": _RECV, "copy": _COPY}[op.kind]
            tag = 0
            if kind != _COPY:
                pair = (op.peer, kind)
                tag = pairs.get(pair, 0)
                pairs[pair] = tag + 1
            ops.append(ExplicitOp(kind, op.peer, tag, op.src, op.dst, schedule.op_units(op),
                               tuple(index[d] for d in op.deps)))
        self.ops = tuple(ops)
        self.max_tag = max(pairs.values(), default=0)
        self.dependents: list[list[int]] = [[] for _ in ops]
        for k, lop in enumerate(ops):
            for d in lop.deps:
                self.dependents[d].append(k)
        self._units = {buf: [coll.chunk_units(rank, buf, j) for j in range(schedule.buffer_chunks(buf))]
                       for buf in ("i", "o")}

    def extents(self, buf: str) -> list[int]:
        """Units of every chunk of this rank's ``buf`` ("i" or "o")."""
        return self._units[buf]

    def _segment(self, arrays: dict, offsets: dict, c: Chunks | None):
        if c is None:
            raise ScheduleError(f"{self.schedule.name}: an op of rank {self.rank} names no chunks")
        units = self._units[c.buf]
        offs = offsets[c.buf]
        start = int(offs[c.index])
        end = start
        for j in c.indices():
            if int(offs[j]) != end:
                raise BufferMismatchError(f"chunks {c} of rank {self.rank} are not adjacent in the buffer")
            end += units[j]
        return arrays[c.buf][start:end]

    def run(self, channel: Channel, mpi: MpiCalls, backend, send, recv, in_offsets, out_offsets) -> None:
        """One call on this rank (``channel.open_call()`` done by the caller): ``recv``'s blocks filled."""
        if self.max_tag >= channel.tags.slice_limit:
            raise ScheduleError(f"{self.schedule.name}: {self.max_tag} messages between one pair of ranks "
                                f"exceed the {channel.tags.slice_limit} tags of a call")
        arrays = {"i": send, "o": recv}
        offsets = {"i": in_offsets, "o": out_offsets}
        MPI = channel.MPI
        comm = channel.comm
        base = channel.base + channel.tags.signature(self.signature_kind)
        itemsize = np.dtype(recv.dtype).itemsize
        ops = self.ops
        n = len(ops)
        pending = [len(op.deps) for op in ops]
        ready = [k for k in range(n) if pending[k] == 0]
        reqs: list[Any] = []
        req_op: list[int] = []
        n_done = 0
        device = backend.is_device
        synced = False

        def done(k: int) -> None:
            nonlocal n_done
            n_done += 1
            for j in self.dependents[k]:
                pending[j] -= 1
                if pending[j] == 0:
                    ready.append(j)

        try:
            while n_done < n:
                while ready:
                    k = ready.pop()
                    op = ops[k]
                    if op.units == 0:
                        done(k)
                    elif op.kind == _COPY:
                        backend.copy(self._segment(arrays, offsets, op.dst), self._segment(arrays, offsets, op.src))
                        done(k)
                    elif op.kind == _RECV:
                        seg = self._segment(arrays, offsets, op.dst)
                        reqs.append(comm.Irecv([seg, seg.size * itemsize, MPI.BYTE], op.peer, base + op.tag))
                        req_op.append(k)
                    else:
                        if device and not synced:
                            backend.synchronize()  # copies queued before MPI reads the device buffer
                            synced = True
                        seg = self._segment(arrays, offsets, op.src)
                        reqs.append(comm.Isend([seg, seg.size * itemsize, MPI.BYTE], op.peer, base + op.tag))
                        req_op.append(k)
                if n_done >= n:
                    break
                if not any(reqs):
                    raise ScheduleError(f"rank {self.rank}: {self.schedule.name} stalls ({n - n_done} ops never ready)")
                both = reqs + [channel.ctrl]
                sts = mpi.statuses
                for j, i in enumerate(mpi.wait_some(both, sts)):
                    if i == len(reqs):
                        channel.notice(sts[j])  # raises if another rank failed this call
                        continue
                    k = req_op[i]
                    reqs[i] = MPI.REQUEST_NULL
                    op = ops[k]
                    if op.kind == _RECV:
                        got = sts[j].Get_count(mpi.byte)
                        if got != op.units * itemsize:
                            raise BufferMismatchError(
                                f"rank {self.rank} expected {op.units * itemsize} bytes from rank {op.peer} but "
                                f"received {got} in {self.schedule.name}: the ranks passed different counts")
                    done(k)
        except BaseException:
            recvs = [r for r, k in zip(reqs, req_op) if r and ops[k].kind == _RECV]
            sends = [r for r, k in zip(reqs, req_op) if r and ops[k].kind == _SEND]
            channel.abandon(recvs, sends, (send, recv))
            raise
        if device:
            backend.synchronize()
