"""One rank's part of a resharding plan, run over MPI on the local shards themselves (NumPy or CuPy).

A :class:`ReshardProgram` is data: the rank's ops as :class:`BoxOp` s whose
chunks are not ranges of a flat buffer but boxes of the rank's local shard
(the synthesizer lowers a verified reshard schedule into it:
:func:`ccsynth.synth.reshard.program.rank_program`; this layer never imports
the synthesizer). So nothing is ever copied whole:

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
a :class:`~ccsynth.collectives.staging.Stager` (pinned host buffers kept
across calls): the source shard is copied to the host once, the plan runs
there on the NumPy kernels, and the destination shard is copied back once.
Whether a call stages is the communicator's rule too
(:func:`~ccsynth.collectives.staging.decide`, in :mod:`.reshard_calls`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from ccsynth.collectives.mpi_util import mpi_comm
from ccsynth.collectives.runtime.primitives import mpi_calls, resolve_wait_mode
from ccsynth.collectives.staging import Stager
from ccsynth.errors import BufferMismatchError, ScheduleError
from ccsynth.kernels import backend_for

__all__ = ["SEND", "RECV", "COPY", "BoxOp", "ShardProgram", "ReshardProgram", "contiguous_box"]

log = logging.getLogger(__name__)

#: the kinds of a :class:`BoxOp`
SEND, RECV, COPY = 0, 1, 2


@dataclass(frozen=True)
class BoxOp:
    """One op of this rank: its kind, peer, tag, the boxes it reads and writes, its dependencies."""

    kind: int  # SEND, RECV or COPY
    peer: int
    tag: int
    src_buf: str  # "i" (source shard), "o" (destination shard), "s" (relay slot)
    src: tuple[slice, ...] | int | None  # box inside that array (or the relay slot's number)
    dst_buf: str
    dst: tuple[slice, ...] | int | None
    size: int  # elements
    deps: tuple[int, ...]  # indices into the rank's op list

    @property
    def forward(self) -> bool:
        return self.src_buf != "i"


class ShardProgram:
    """What every rank program of a resharding has: its shards' shapes, the input check, the staged run.

    ``src_shape``/``dst_shape``: the rank's shards (None off that mesh);
    ``source``: the source layout as a user reads it (for error messages).
    Subclasses run the plan (:meth:`run`): :class:`ReshardProgram` as
    point-to-point dataflow, :class:`~ccsynth.collectives.reshard_alltoallv.AlltoallvProgram`
    in one ``MPI_Alltoallv``.
    """

    #: what runs the plan (``ccsynth bench reshard`` prints it as the path)
    executor = "dataflow"

    def __init__(self, rank: int, dtype, src_shape: tuple[int, ...] | None, dst_shape: tuple[int, ...] | None,
                 source: str = "") -> None:
        self.rank = rank
        self.dtype = np.dtype(dtype)
        self.src_shape = src_shape
        self.dst_shape = dst_shape
        self.source = source
        self._buffers: dict = {}  # (backend, name) -> staging array kept across calls (no page faults per call)

    def buffer(self, be, name: str, shape) -> Any:
        """A staging array of ``shape`` kept across calls (one per backend and name)."""
        key = (type(be).__name__, name)
        a = self._buffers.get(key)
        shape = tuple(shape) if isinstance(shape, tuple) else (int(shape),)
        if a is None or a.shape != shape:
            a = self._buffers[key] = be.xp.empty(shape, dtype=self.dtype)
        return a

    def run(self, comm, local_src, out=None, *, call: int = 0, stride: int | None = None, wait: str = "auto"):
        raise NotImplementedError

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
                                      f"({self.source}), got {shape}")
        if np.dtype(local_src.dtype) != self.dtype:
            raise BufferMismatchError(f"rank {self.rank}: the source shard must be {self.dtype}, got {local_src.dtype}")

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


class ReshardProgram(ShardProgram):
    """One rank's ops of a resharding plan, ready to run on local shards as dataflow (see the module docstring).

    ``relay_shapes``: the shapes of its relay slots.
    """

    def __init__(self, rank: int, dtype, src_shape: tuple[int, ...] | None, dst_shape: tuple[int, ...] | None,
                 ops: tuple[BoxOp, ...], relay_shapes: tuple[tuple[int, ...], ...], source: str = "") -> None:
        super().__init__(rank, dtype, src_shape, dst_shape, source)
        self.ops = tuple(ops)
        self.relay_shapes = tuple(relay_shapes)
        self.max_tag = max((op.tag for op in self.ops), default=0)
        self.dependents: list[list[int]] = [[] for _ in self.ops]
        for k, lop in enumerate(self.ops):
            for d in lop.deps:
                self.dependents[d].append(k)

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
        ready = [k for k in range(n) if pending[k] == 0 and ops[k].kind != RECV]
        n_done = 0

        relays = [self.buffer(be, f"relay {j}", shape) for j, shape in enumerate(self.relay_shapes)]

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
                if pending[j] == 0 and ops[j].kind != RECV:
                    ready.append(j)

        for k, op in enumerate(ops):
            if op.kind == RECV:
                v = view(op, False)
                if _contiguous(v):
                    buf = v
                else:
                    buf = staging[k] = self.buffer(be, f"op {k}", op.size)
                reqs.append(comm.Irecv(_mpi_buf(buf, MPI), source=op.peer, tag=base + op.tag))
                req_op.append(k)
        while n_done < n:
            while ready:
                k = ready.pop()
                op = ops[k]
                if op.kind == COPY:
                    be.copy(view(op, False), view(op, True))
                    done(k)
                    continue
                v = view(op, True)
                if _contiguous(v):
                    buf = v
                else:
                    buf = staging[k] = self.buffer(be, f"op {k}", op.size)
                    be.pack(buf, out if op.src_buf == "o" else local_src, op.src)
                be.synchronize()
                reqs.append(comm.Isend(_mpi_buf(buf, MPI), dest=op.peer, tag=base + op.tag))
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
                if op.kind == RECV and k in staging:
                    be.unpack(staging.pop(k), out, op.dst)  # staged receives are only into "o" boxes
                else:
                    staging.pop(k, None)
                done(k)
        be.synchronize()
        return out


def _c_contiguous(a):
    """``a`` itself when C-contiguous, else a contiguous copy of the same kind (NumPy or CuPy)."""
    return a if _contiguous(a) else backend_for(a).xp.ascontiguousarray(a)


def contiguous_box(shape, box) -> bool:
    """Whether ``array[box]`` is C-contiguous for a C-contiguous ``array`` of ``shape`` (``box``: slices of step 1).

    True when every dimension after the first one the box cuts short is whole, and every one before it is one
    element wide (or the box is empty).
    """
    ext = [len(range(*s.indices(n))) for s, n in zip(box, shape)]
    if 0 in ext:
        return True
    d = 0
    while d < len(ext) and ext[d] == 1:
        d += 1
    return all(ext[k] == shape[k] for k in range(d + 1, len(ext)))


def _contiguous(a) -> bool:
    return bool(a.flags.c_contiguous)


def _mpi_buf(a, MPI):
    """A buffer spec MPI accepts for a C-contiguous array (NumPy or CuPy) of any dtype: its bytes."""
    return [a, a.size * a.dtype.itemsize, MPI.BYTE]
