"""Run a resharding plan over MPI on the local shards themselves (NumPy or CuPy).

:class:`ReshardProgram` is one rank's part of a plan (a verified reshard
:class:`~ccsynth.collectives.schedule.Schedule`, whose meta carries the
task). Chunks of a reshard plan are not ranges of a flat buffer but boxes of
the rank's local shard: input chunk ``j`` is the box of piece
``inputs[rank][j]`` inside the source shard, output chunk ``j`` the box of
piece ``outputs[rank][j]`` inside the destination shard
(:meth:`~.task.ReshardTask.local_slices`). So nothing is ever copied whole:

* a ``send`` whose box is contiguous in memory (a slab of whole rows) is
  sent straight from the shard; any other box is packed into a staging
  buffer of the piece's size (:meth:`~ccsynth.kernels.base.Backend.pack`);
* a ``recv`` into a contiguous box receives in place; any other receives
  into staging and is unpacked when it arrives;
* a ``copy`` copies one box into the other;
* a relay slot (a scratch chunk, where the topology has no direct
  connection) is an array of its piece's shape, allocated per run.

The run is dataflow, as the collectives' executor: every receive is posted
at the start, a send or copy starts once the ops it depends on are done
(a forward waits for the receive that brought its piece), and the loop
waits for MPI only when nothing else is ready (``Waitsome``, or polling with
yields where ranks outnumber cores, as the collectives' executor does). Message ``k`` from rank
``a`` to rank ``b`` carries tag ``call * stride + k``, with ``call`` the
call number of the program (every rank runs its resharding calls in the
same order, as MPI requires of collectives), so no call can take another
call's message. On a device the backend is synchronised before MPI reads a
packed buffer.

Device shards and an MPI library that cannot read device memory:
:meth:`ReshardProgram.run_staged` runs the same plan on host stand-ins from
the communicator's :class:`~ccsynth.collectives.staging.Stager` (pinned
host buffers kept across calls): the source shard is copied to the host
once, the plan runs there on the NumPy kernels, and the destination shard
is copied back once. Whether a call stages is the communicator's rule too
(:func:`~ccsynth.collectives.staging.decide`, in :mod:`.api`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import cast

import numpy as np

from ccsynth.collectives.explicit import ExplicitCollective
from ccsynth.collectives.mpi_util import mpi_comm
from ccsynth.collectives.runtime.primitives import mpi_calls, resolve_wait_mode
from ccsynth.collectives.schedule import Schedule
from ccsynth.collectives.staging import Stager
from ccsynth.errors import BufferMismatchError, ScheduleError
from ccsynth.kernels import backend_for
from ccsynth.synth.reshard.plan import task_of_schedule

__all__ = ["BoxOp", "ReshardProgram"]

log = logging.getLogger(__name__)

_SEND, _RECV, _COPY = 0, 1, 2


@dataclass(frozen=True)
class BoxOp:
    """One op of this rank: its kind, peer, tag, the boxes it reads and writes, its dependencies."""

    kind: int
    peer: int
    tag: int
    src_buf: str  # "i" (source shard), "o" (destination shard), "s" (relay slot)
    src: tuple[slice, ...] | None  # box inside that array (or the relay slot's number)
    dst_buf: str
    dst: tuple[slice, ...] | None
    size: int  # elements
    deps: tuple[int, ...]  # indices into the rank's op list

    @property
    def forward(self) -> bool:
        return self.src_buf != "i"


class ReshardProgram:
    """One rank's ops of a resharding plan, ready to run on local shards."""

    def __init__(self, schedule: Schedule, rank: int):
        task = task_of_schedule(schedule)
        coll = cast(ExplicitCollective, schedule.collective)  # task_of_schedule refused a uniform (non-explicit) one
        if not 0 <= rank < coll.n_ranks:
            raise ScheduleError(f"rank {rank} is not one of the plan's {coll.n_ranks} ranks")
        self.task = task
        self.rank = rank
        self.dtype = np.dtype(task.dtype)
        src_tile = task.src.tile_of_rank(rank)
        dst_tile = task.dst.tile_of_rank(rank)
        self.src_shape = task.src.local_shape(rank) if src_tile is not None else None
        self.dst_shape = task.dst.local_shape(rank) if dst_tile is not None else None
        pieces = task.pieces
        mine = schedule.ops_of(rank)
        index = {op.id: k for k, op in enumerate(mine)}
        counters: dict[tuple[int, int], int] = {}
        ops: list[BoxOp] = []
        self.max_tag = 0
        for op in mine:
            def box(chunks):
                if chunks.buf == "i":
                    if src_tile is None:
                        raise ScheduleError(f"rank {rank} holds no source tile, but the plan reads its input")
                    return task.local_slices(pieces[coll.inputs[rank][chunks.index]], task.src.box(src_tile))
                if chunks.buf == "s":
                    return chunks.index
                if dst_tile is None:
                    raise ScheduleError(f"rank {rank} holds no destination tile, but the plan writes its output")
                return task.local_slices(pieces[coll.outputs[rank][chunks.index]], task.dst.box(dst_tile))

            for c in (op.src, op.dst):
                if c is not None and c.count != 1:
                    raise ScheduleError(f"{op.describe()}: resharding plans move one piece per op")
            pair = (rank, op.peer) if op.kind == "send" else (op.peer, rank)
            tag = 0
            if op.kind in ("send", "recv"):
                tag = counters.get(pair, 0)
                counters[pair] = tag + 1
                self.max_tag = max(self.max_tag, tag)
            kind = {"send": _SEND, "recv": _RECV, "copy": _COPY}.get(op.kind)
            if kind is None:
                raise ScheduleError(f"{op.describe()}: resharding plans do not reduce")
            ops.append(BoxOp(
                kind, op.peer, tag,
                op.src.buf if op.src is not None else "",
                box(op.src) if op.src is not None else None,
                op.dst.buf if op.dst is not None else "",
                box(op.dst) if op.dst is not None else None,
                schedule.op_units(op),
                tuple(index[d] for d in op.deps),
            ))
        self.relay_shapes = tuple(
            tuple(b - a for a, b in pieces[p].box) for p in coll.relays[rank]
        )
        self.ops = tuple(ops)
        self.dependents: list[list[int]] = [[] for _ in ops]
        for k, lop in enumerate(ops):
            for d in lop.deps:
                self.dependents[d].append(k)

    def check_input(self, local_src, out=None) -> None:
        """Raise :class:`BufferMismatchError` unless ``local_src`` is this rank's source shard (and ``out``
        None or an array for its destination shard)."""
        if out is not None and (self.dst_shape is None or tuple(getattr(out, "shape", ())) != self.dst_shape
                                or np.dtype(out.dtype) != self.dtype):
            raise BufferMismatchError(f"rank {self.rank}: out must be None or {self.dtype} of shape {self.dst_shape}")
        if self.src_shape is None:
            return
        if local_src is None:
            raise BufferMismatchError(f"rank {self.rank} is on the source mesh and must pass its shard of shape "
                                      f"{self.src_shape}, got None")
        shape = tuple(getattr(local_src, "shape", ()))
        if shape != self.src_shape:
            raise BufferMismatchError(f"rank {self.rank}: the source shard must have shape {self.src_shape} "
                                      f"({self.task.src.describe()}), got {shape}")
        if np.dtype(local_src.dtype) != self.dtype:
            raise BufferMismatchError(f"rank {self.rank}: the source shard must be {self.dtype}, got {local_src.dtype}")

    def run(self, comm, local_src, out=None, *, call: int = 0, stride: int | None = None, wait: str = "auto"):
        """Run on ``comm``; returns this rank's destination shard (``out`` if given), or None off the mesh.

        ``wait``: how to wait for MPI (:func:`~ccsynth.collectives.runtime.primitives.resolve_wait_mode`:
        ``Waitsome``, or polling with yields where ranks outnumber cores).
        """
        from mpi4py import MPI  # initialises MPI: only when a plan runs

        comm = mpi_comm(comm)  # a ccsynth.Communicator: its sends and receives are the wrapped comm's
        calls = mpi_calls(MPI, resolve_wait_mode(wait))

        self.check_input(local_src, out)
        ref = local_src if local_src is not None else out
        be = backend_for(ref) if ref is not None else backend_for(np.empty(0))
        xp = be.xp
        if self.dst_shape is not None:
            if out is None:
                out = xp.empty(self.dst_shape, dtype=self.dtype)
        base = call * stride if stride else 0
        ops = self.ops
        n = len(ops)
        pending = [len(op.deps) for op in ops]
        staging: dict[int, object] = {}
        reqs: list = []
        req_op: list[int] = []
        ready = [k for k in range(n) if pending[k] == 0 and ops[k].kind != _RECV]
        n_done = 0

        relays = [xp.empty(shape, dtype=self.dtype) for shape in self.relay_shapes]

        def view(op: BoxOp, src: bool):
            buf, box = (op.src_buf, op.src) if src else (op.dst_buf, op.dst)
            if buf == "s":
                return relays[cast(int, box)]
            return (out if buf == "o" else local_src)[box]

        def done(k: int) -> None:
            nonlocal n_done
            n_done += 1
            for j in self.dependents[k]:
                pending[j] -= 1
                if pending[j] == 0 and ops[j].kind != _RECV:
                    ready.append(j)

        for k, op in enumerate(ops):
            if op.kind == _RECV:
                v = view(op, False)
                if _contiguous(v):
                    buf = v
                else:
                    buf = staging[k] = be.empty(op.size, self.dtype)
                reqs.append(comm.Irecv(_mpi_buf(buf), source=op.peer, tag=base + op.tag))
                req_op.append(k)
        while n_done < n:
            while ready:
                k = ready.pop()
                op = ops[k]
                if op.kind == _COPY:
                    be.copy(view(op, False), view(op, True))
                    done(k)
                    continue
                v = view(op, True)
                if _contiguous(v):
                    buf = v
                else:
                    buf = staging[k] = be.empty(op.size, self.dtype)
                    be.pack(buf, out if op.src_buf == "o" else local_src, op.src)
                be.synchronize()
                reqs.append(comm.Isend(_mpi_buf(buf), dest=op.peer, tag=base + op.tag))
                req_op.append(k)
            if n_done >= n:
                break
            live = [i for i, r in enumerate(reqs) if r != MPI.REQUEST_NULL]
            if not live:
                raise ScheduleError(f"rank {self.rank}: resharding plan stalls ({n - n_done} ops never ready)")
            idx = calls.wait_some(reqs, calls.statuses)
            for i in idx or ():
                k = req_op[i]
                reqs[i] = MPI.REQUEST_NULL
                op = ops[k]
                if op.kind == _RECV and k in staging:
                    be.unpack(staging.pop(k), out, op.dst)  # staged receives are only into "o" boxes
                else:
                    staging.pop(k, None)
                done(k)
        be.synchronize()
        return out

    def run_staged(self, comm, local_src, out, stager: Stager, *, call: int = 0, stride: int | None = None,
                   wait: str = "auto"):
        """:meth:`run` on host stand-ins of (device) shards from ``stager``; see the module docstring.

        Returns ``out`` (or, where it is None on a destination rank, a new
        array of the source shard's kind: a device array for a device
        shard), filled; None off the destination mesh.
        """
        self.check_input(local_src, out)
        host_src = None
        if local_src is not None:
            h, _ = stager.stage(_c_contiguous(local_src), "reshard.src", copy_in=True, copy_back=False)
            host_src = h.reshape(self.src_shape)
        if self.dst_shape is None:
            self.run(comm, host_src, None, call=call, stride=stride, wait=wait)
            return None
        if out is None:
            ref = local_src if local_src is not None else np.empty(0, self.dtype)
            out = backend_for(ref).xp.empty(self.dst_shape, dtype=self.dtype)
        target = out if _contiguous(out) else backend_for(out).xp.empty(self.dst_shape, dtype=self.dtype)
        h, back = stager.stage(target, "reshard.dst", copy_in=False, copy_back=True)
        self.run(comm, host_src, h.reshape(self.dst_shape), call=call, stride=stride, wait=wait)
        if back is not None:
            back()
        if target is not out:
            backend_for(out).copy(out, target)
        return out


def _c_contiguous(a):
    """``a`` itself when C-contiguous, else a contiguous copy of the same kind (NumPy or CuPy)."""
    return a if _contiguous(a) else backend_for(a).xp.ascontiguousarray(a)


def _contiguous(a) -> bool:
    return bool(a.flags.c_contiguous)


def _mpi_buf(a):
    """A buffer spec MPI accepts for a C-contiguous array (NumPy or CuPy) of any dtype: its bytes."""
    from mpi4py import MPI

    return [a, a.size * a.dtype.itemsize, MPI.BYTE]
