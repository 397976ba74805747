"""The v-collectives of the drop-in communicator: ``Alltoallv``, ``Allgatherv``, ``Reduce_scatter`` with counts.

Each function is ``f(calls, sendbuf, recvbuf, op, root)`` for
:meth:`Calls.blocking <ccsynth.collectives.calls.Calls.blocking>`; buffer
specs in mpi4py's forms (``[buf, counts]``, ``[buf, (counts, displs)]``,
``[buf, counts, displs, datatype]``, ...:
:func:`~ccsynth.collectives.buffer_specs.parse_v`).

* ``Alltoallv`` and ``Allgatherv`` run explicit schedules with every block
  at its own size (:mod:`~ccsynth.collectives.vschedule`), built once per
  counts signature and kept (:class:`~ccsynth.collectives.vschedule.VScheduleCache`),
  when the plan covers the equal-block collective (alltoall, allgather) at
  the call's size; a plan without it, or the empty plan, leaves the call
  to the MPI library as before. The counts must be the same on every rank:
  ``Alltoallv``'s ranks first share their send and receive counts (one
  small allgather), so that every rank finds a mismatch itself -- no rank
  may raise while another is still in the allgather, which MPI cannot
  cancel.
* ``Reduce_scatter`` with counts (an explicit schedule has no reduction)
  runs the plan's equal-block reduce-scatter on padded blocks
  (:mod:`~ccsynth.collectives.vcounts`); counts so uneven that the padding
  would more than :data:`~ccsynth.collectives.vcounts.MAX_PADDING`-fold
  the messages go to the MPI library, visibly.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

import numpy as np
from mpi4py import MPI

from ccsynth.collectives.agreement import run_checks
from ccsynth.collectives.block_collectives import reduce_scatter_block
from ccsynth.collectives.buffer_specs import PassToMPI, check_op_dtype, is_in_place, parse, parse_v
from ccsynth.collectives.calls import Calls
from ccsynth.collectives.schedule_cache import MPI_PICK
from ccsynth.collectives.explicit_program import ExplicitProgram
from ccsynth.collectives.runtime.channel import mark_shared
from ccsynth.collectives.vcounts import MAX_PADDING, Padding, check_counts, displacements, pack
from ccsynth.collectives.vschedule import V_KINDS
from ccsynth.errors import BufferMismatchError

__all__ = ["alltoallv", "allgatherv", "reduce_scatterv"]

_ZERO_OFFSET = np.zeros(1, np.int64)  # an Allgatherv's one input chunk starts at its sendbuf's start
_NAMES = {"alltoallv": "Alltoallv", "allgatherv": "Allgatherv"}


def _counts_text(counts) -> str:
    """Counts as a signature shows them: the list, or a hash of a long one."""
    c = np.asarray(counts, np.int64)
    return str(c.tolist()) if c.size <= 16 else f"#{zlib.crc32(c.tobytes()):08x} ({c.size} counts, {int(c.sum())} in all)"


def alltoallv(calls: Calls, sendbuf, recvbuf, op, root) -> None:
    """Block ``q`` of recvbuf (``recvcounts[q]`` elements at ``recvdispls[q]``) = rank ``q``'s block for this rank."""
    n = calls.size

    def check():
        if is_in_place(sendbuf):
            raise PassToMPI("MPI.IN_PLACE")
        r = parse_v(recvbuf, "recvbuf", n, writable=True)
        s = parse_v(sendbuf, "sendbuf", n)
        if s.array.dtype != r.array.dtype:
            raise BufferMismatchError(f"sendbuf has dtype {s.array.dtype.name} but recvbuf has dtype "
                                      f"{r.array.dtype.name}")
        return s, r

    state, sr, err = run_checks(check)
    # every rank's send and receive counts with its checks' outcome (one small allgather): the schedule needs the
    # send counts of all, and with the receive counts every rank finds a mismatch itself (see the module doc)
    mine = np.concatenate([sr[0].counts, sr[1].counts]) if sr is not None else np.zeros(2 * n, np.int64)
    sig = f"Alltoallv of {sr[1].array.dtype.name}" if sr is not None else ""
    to_mpi, both = calls.agree_args("Alltoallv", state, sig, err, mine)
    if to_mpi:
        return calls.plain("Alltoallv", "a rank's buffers go to the MPI library",
                           lambda: calls.coll_comm().Ialltoallv(sendbuf, recvbuf))
    s, r = sr
    rows, expects = both[:, :n], both[:, n:]
    if not np.array_equal(rows.T, expects):
        q, p = (int(x) for x in np.argwhere(expects != rows.T)[0])
        e = BufferMismatchError(f"rank {q} expects {int(expects[q, p])} element(s) from rank {p}, which sends "
                                f"{int(rows[p, q])}: the ranks passed different counts to Alltoallv")
        mark_shared(e)  # every rank raises it: nobody needs to be told
        raise e
    rows = np.ascontiguousarray(rows)
    nbytes = int(rows.sum(axis=1).max(initial=0)) * r.array.dtype.itemsize  # the same on every rank
    _run_v(calls, "alltoallv", rows, nbytes, s.array, r.array, s.displs, r.displs,
           lambda: calls.coll_comm().Ialltoallv(sendbuf, recvbuf))


def allgatherv(calls: Calls, sendbuf, recvbuf, op, root) -> None:
    """recvbuf block ``q`` (``counts[q]`` elements at ``displs[q]``) = rank ``q``'s sendbuf."""
    me = calls.rank

    def check():
        r = parse_v(recvbuf, "recvbuf", calls.size, writable=True)
        if is_in_place(sendbuf):
            mine = r.array[int(r.displs[me]):int(r.displs[me] + r.counts[me])]
        else:
            mine = parse(sendbuf, "sendbuf", 1).array
        if mine.dtype != r.array.dtype:
            raise BufferMismatchError(f"sendbuf has dtype {mine.dtype.name} but recvbuf has dtype "
                                      f"{r.array.dtype.name}")
        if mine.size != r.counts[me]:
            raise BufferMismatchError(f"sendbuf has {mine.size} element(s) but recvbuf's counts give rank {me} "
                                      f"{int(r.counts[me])}")
        return r, mine

    state, rm, err = run_checks(check)
    sig = f"Allgatherv of {rm[0].array.dtype.name}, counts {_counts_text(rm[0].counts)}" if rm is not None else ""
    if calls.agree_args("Allgatherv", state, sig, err):
        return calls.plain("Allgatherv", "a rank's buffers go to the MPI library",
                           lambda: calls.coll_comm().Iallgatherv(sendbuf, recvbuf))
    r, mine = rm
    _run_v(calls, "allgatherv", r.counts, r.total * r.array.dtype.itemsize, mine, r.array, _ZERO_OFFSET,
           r.displs, lambda: calls.coll_comm().Iallgatherv(sendbuf, recvbuf))


def reduce_scatterv(calls: Calls, sendbuf, recvbuf, counts_op, root) -> None:
    """Rank ``r`` gets block ``r`` (``recvcounts[r]`` elements) of the reduction; ``counts_op`` is ``(recvcounts, op)``."""
    n, me = calls.size, calls.rank
    recvcounts, op = counts_op
    op = MPI.SUM if op is None else op
    in_place = is_in_place(sendbuf)

    def check():
        opname, mpi_op = calls.ops.resolve(op)
        r = parse(recvbuf, "recvbuf", 1, writable=True)
        c = None if recvcounts is None else check_counts("recvcounts", recvcounts, None, n, 1 << 62)[0]
        s = r.array if in_place else parse(sendbuf, "sendbuf", 1).array
        if not in_place and s.dtype != r.array.dtype:
            raise BufferMismatchError(f"sendbuf has dtype {s.dtype.name} but recvbuf has dtype {r.array.dtype.name}")
        check_op_dtype(opname, s.dtype)
        if c is not None:
            _check_rs_sizes(c, s.size, r.count, me, in_place)
        return opname, mpi_op, r, c, s

    state, got, err = run_checks(check)
    # with recvcounts None (as mpi4py: every rank's receive count) the ranks' counts and sizes ride along
    row = [got[2].count, got[4].size] if got is not None else [0, 0]
    sig = f"Reduce_scatter of {got[4].dtype.name}, op {got[0]}" if got is not None else ""
    if got is not None and got[3] is not None:
        sig += f", recvcounts {_counts_text(got[3])}"
    to_mpi, rows = calls.agree_args("Reduce_scatter", state, sig, err, row if recvcounts is None else [])
    if to_mpi:
        return calls.plain("Reduce_scatter", "a rank's buffers go to the MPI library",
                           lambda: calls.coll_comm().Ireduce_scatter(sendbuf, recvbuf, recvcounts, op))
    opname, mpi_op, r, c, s = got
    if c is None:
        c = np.ascontiguousarray(rows[:, 0])
        bad = [q for q in range(n) if _rs_size_error(c, int(rows[q, 1]), int(rows[q, 0]), q, in_place)]
        if bad:
            e = BufferMismatchError(f"Reduce_scatter (call {calls.channel.seq}) on rank {bad[0]}: "
                                    f"{_rs_size_error(c, int(rows[bad[0], 1]), int(rows[bad[0], 0]), bad[0], in_place)}")
            mark_shared(e)  # every rank finds it in the same rows
            raise e
        recv_counts = c
    else:
        recv_counts = recvcounts
    total = int(c.sum())
    s = s[:total]
    d = displacements(c)
    out = r.array[:int(c[me])]
    pad = _padding(calls, int(c.max(initial=0)), total, s.dtype,
                   lambda: calls.coll_comm().Ireduce_scatter(sendbuf, recvbuf, recv_counts, mpi_op))
    if pad is None:
        calls.finish_avg(opname, out)
        return
    if pad.block == 0:
        calls.last_algorithm = "(empty)"
        return
    sp, _ = calls.private("vsend", s, n * pad.block)
    rp, _ = calls.private("vrecv", s, pad.block)
    pack(sp, s, c, d, pad.block, zero=True)
    reduce_scatter_block(calls, sp, rp, op, 0)
    out[...] = rp[:out.size]


def _rs_size_error(c, send_size: int, recv_count: int, q: int, in_place: bool) -> str:
    """Why rank ``q``'s buffers do not fit the recvcounts ``c`` of a Reduce_scatter ("" if they do)."""
    total = int(c.sum())
    if (send_size < total) if in_place else (send_size != total):
        return f"sendbuf has {send_size} element(s); recvcounts {_counts_text(c)} add up to {total}"
    if recv_count < c[q]:
        return f"recvbuf has {recv_count} element(s); recvcounts gives rank {q} {int(c[q])}"
    return ""


def _check_rs_sizes(c, send_size: int, recv_count: int, q: int, in_place: bool) -> None:
    why = _rs_size_error(c, send_size, recv_count, q, in_place)
    if why:
        raise BufferMismatchError(why)


def _run_v(calls: Calls, kind: str, counts, nbytes: int, send, recv, in_offsets, out_offsets,
           fallback: Callable) -> None:
    """A v-call on its explicit schedule (see the module doc); ``fallback()`` starts the MPI library's own.

    ``counts`` (the count matrix of an Alltoallv, the counts of an
    Allgatherv) and ``nbytes`` (the largest per-rank buffer) are the same
    on every rank.
    """
    name = _NAMES[kind]
    got = calls.cache.choice(V_KINDS[kind], max(nbytes, 1))
    if got is None:
        return calls.plain(name, "no schedule in the plan covers this size", fallback)
    if got is MPI_PICK:
        return calls.mpi_pick(name, fallback)
    if calls.debug:
        calls.agree(f"{kind} (call {calls.channel.seq}) of {nbytes} bytes, {np.dtype(recv.dtype).name}")
    calls.channel.memory.note_message(nbytes)
    me, sig = calls.rank, V_KINDS[kind]
    program = calls.vschedules.get(kind, counts, lambda sched: ExplicitProgram(sched, me, sig))
    program.run(calls.channel, calls.mpi, calls.backend_for(recv), send, recv, in_offsets, out_offsets)
    calls.last_algorithm = program.schedule.name


def _padding(calls: Calls, largest: int, real: int, dtype, fallback: Callable) -> Padding | None:
    """The padded block for a Reduce_scatter with counts (None: too much padding, the MPI library ran it)."""
    n = calls.size
    sched = calls.cache.schedule_for("reduce_scatter", n * max(largest, 1) * np.dtype(dtype).itemsize)
    quantum = sched.collective.chunk_factor if sched is not None else 1
    pad = Padding.of([0] * n, quantum, largest)
    padded = n * pad.block
    if real and padded > MAX_PADDING * real:
        calls.plain("Reduce_scatter", f"counts this uneven (largest {largest}, {real} elements in all) would "
                    f"pad the messages to {padded / real:.1f}x their size", fallback)
        return None
    return pad
