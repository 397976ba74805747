"""One rank's part of a resharding plan run as one ``MPI_Alltoallv`` (the plan kind ``alltoallv``).

The plan says, per peer, which boxes of this rank's source shard go to it
and which boxes of its destination shard come from it (in the same order on
both sides: by piece), and which pieces it copies locally. A call:

1. *sends*: where every peer's boxes are one box each, contiguous in the
   source shard, the shard itself is the send buffer (each peer's
   displacement is its box's offset: no copy); otherwise every box is
   packed, one NumPy copy per box, into a send buffer kept across calls;
2. *receives* the same way: straight into the destination shard where
   every peer's boxes are one contiguous box each, else into a buffer kept
   across calls and unpacked, one copy per box, after the call;
3. one ``Alltoallv`` (counts in elements of the dtype's MPI type, bytes
   for any other dtype), then the local copies.

This is what a user writes with MPI alone (the ``mpi`` row of ``ccsynth
bench reshard``), less the copies that contiguous boxes make needless and
with the senders of replicated pieces balanced by the planner
(:func:`ccsynth.synth.reshard.alltoallv.alltoallv_hops`) instead of always
the first replica. The synthesizer builds it from a verified plan
(:func:`ccsynth.synth.reshard.program.rank_program`); the prediction of its
run is :func:`ccsynth.synth.reshard.predict.lower_reshard`.
"""

from __future__ import annotations

import logging
import math

import numpy as np

from ccsynth.collectives.mpi_util import mpi_comm
from ccsynth.collectives.reshard_program import ShardProgram, contiguous_box
from ccsynth.kernels import backend_for

__all__ = ["AlltoallvProgram", "box_offset"]

log = logging.getLogger(__name__)

Box = tuple[slice, ...]


def box_offset(shape, box: Box) -> int:
    """Element offset of ``box``'s first element in a C-contiguous array of ``shape``."""
    off = 0
    for s, n in zip(box, shape):
        off = off * n + (s.start or 0)
    return off


def _size(box: Box) -> int:
    return math.prod(max(0, s.stop - s.start) for s in box)


class _Side:
    """One direction of the exchange: per peer the boxes in this rank's shard, counts, and whether direct."""

    def __init__(self, shape, per_peer: tuple[tuple[Box, ...], ...]):
        self.boxes = per_peer
        self.counts = [sum(_size(b) for b in boxes) for boxes in per_peer]
        # direct: every peer's boxes are one box, contiguous in the shard (the shard itself is the buffer)
        self.direct = shape is not None and all(
            len(boxes) <= 1 and all(contiguous_box(shape, b) for b in boxes) for boxes in per_peer)
        if self.direct:
            self.displs = [box_offset(shape, boxes[0]) if boxes and c else 0
                           for boxes, c in zip(per_peer, self.counts)]
        else:
            self.displs = [int(d) for d in np.cumsum([0] + self.counts[:-1])]
        self.total = sum(self.counts)

    @property
    def packed_elements(self) -> int:
        """Elements copied to or from a staging buffer per call (0 when direct)."""
        return 0 if self.direct else self.total


class AlltoallvProgram(ShardProgram):
    """One rank's resharding in one ``MPI_Alltoallv`` (see the module docstring).

    ``sends[q]``/``recvs[q]``: the boxes of this rank's source/destination
    shard that go to/come from rank ``q`` (pieces in the same order on both
    ends); ``local``: ``(source box, destination box)`` pairs copied here.
    """

    executor = "alltoallv"

    def __init__(self, rank: int, dtype, src_shape, dst_shape, sends: tuple[tuple[Box, ...], ...],
                 recvs: tuple[tuple[Box, ...], ...], local: tuple[tuple[Box, Box], ...], source: str = "") -> None:
        super().__init__(rank, dtype, src_shape, dst_shape, source)
        if len(sends) != len(recvs):
            raise ValueError("an Alltoallv program needs a send and a receive list per rank")
        self.n_ranks = len(sends)
        self.send = _Side(src_shape, tuple(tuple(b) for b in sends))
        self.recv = _Side(dst_shape, tuple(tuple(b) for b in recvs))
        self.local = tuple(local)
        self._mpi_specs: tuple | None = None

    def _specs(self, MPI) -> tuple:
        """The MPI type of one element and both sides' counts and displacements in it (built once): the dtype's
        own type, else bytes."""
        if self._mpi_specs is None:
            from mpi4py.util.dtlib import from_numpy_dtype

            try:
                mtype, k = from_numpy_dtype(self.dtype), 1
            except (ValueError, KeyError, TypeError):
                mtype, k = MPI.BYTE, self.dtype.itemsize
            s, r = self.send, self.recv
            self._mpi_specs = (mtype, ([c * k for c in s.counts], [d * k for d in s.displs]),
                               ([c * k for c in r.counts], [d * k for d in r.displs]))
        return self._mpi_specs

    def run(self, comm, local_src, out=None, *, call: int = 0, stride: int | None = None, wait: str = "auto"):
        """Run on ``comm`` (every rank of it calls); returns the destination shard (``out`` if given) or None.

        ``call``, ``stride`` and ``wait`` are accepted for the dataflow
        program's signature; one collective needs no tags and waits in MPI.
        """
        from mpi4py import MPI  # initialises MPI: only when a plan runs

        comm = mpi_comm(comm)
        self.check_input(local_src, out)
        if out is not None and not out.flags.c_contiguous:  # received into a contiguous shard, then copied
            res = self.run(comm, local_src, None)
            backend_for(out).copy(out, res)
            return out
        ref = local_src if local_src is not None else out
        be = backend_for(ref) if ref is not None else backend_for(np.empty(0))
        if self.dst_shape is not None and out is None:
            out = be.xp.empty(self.dst_shape, dtype=self.dtype)
        sbuf = self.send_buffer(be, local_src)
        rbuf = self.recv_buffer(be, out)
        mtype, sspec, rspec = self._specs(MPI)
        be.synchronize()
        comm.Alltoallv([sbuf, sspec, mtype], [rbuf, rspec, mtype])
        self.finish(be, local_src, out, rbuf)
        return out

    def send_buffer(self, be, local_src):
        """The flat send buffer: the source shard itself where the send side is direct, else the boxes packed."""
        s = self.send
        if s.direct and local_src is not None:
            return local_src.reshape(-1)
        sbuf = self.buffer(be, "send", max(s.total, 1))
        pos = 0
        for boxes in s.boxes:
            for b in boxes:
                tile = local_src[b]
                be.copy(sbuf[pos:pos + tile.size].reshape(tile.shape), tile)
                pos += tile.size
        return sbuf

    def recv_buffer(self, be, out):
        """The flat receive buffer: the (C-contiguous) destination shard where the receive side is direct."""
        return out.reshape(-1) if self.recv.direct and out is not None else self.buffer(be, "recv", max(self.recv.total, 1))

    def finish(self, be, local_src, out, rbuf) -> None:
        """After the exchange: unpack the received boxes (unless received in place), copy the local pieces."""
        if out is None:
            return
        if not self.recv.direct:
            pos = 0
            for boxes in self.recv.boxes:
                for b in boxes:
                    tile = out[b]
                    be.copy(tile, rbuf[pos:pos + tile.size].reshape(tile.shape))
                    pos += tile.size
        for src_box, dst_box in self.local:
            be.copy(out[dst_box], local_src[src_box])
        be.synchronize()
