"""The equal-block collectives' arguments: what each call reads, checks, and hands to a schedule or to MPI.

One function per collective (``Allreduce``, ``Reduce_scatter_block``,
``Reduce``, ``Allgather``, ``Alltoall``, ``Bcast``), each
``f(calls, sendbuf, recvbuf, op, root)`` for :meth:`Calls.blocking
<ccsynth.collectives.calls.Calls.blocking>`. Each one

1. notes the call's arguments (:class:`~ccsynth.collectives.schedule_cache.CallArgs`,
   for the replay of a repeated call);
2. parses the buffer specs with mpi4py's rules
   (:mod:`~ccsynth.collectives.buffer_specs`); a form ccsynth does not run
   goes to the MPI library's own collective with the original arguments
   (:meth:`Calls.plain <ccsynth.collectives.calls.Calls.plain>`);
3. checks that the buffers agree (:class:`~ccsynth.errors.BufferMismatchError`
   names the argument and the size it should have) and that the op suits
   the dtype, on this rank, before any communication;
4. hands :meth:`Calls.run <ccsynth.collectives.calls.Calls.run>` the
   message size (nccl-tests convention: the larger per-rank buffer in
   bytes), the schedule's input and output arrays, and the MPI library's
   collective to fall back on (``avg`` there: a sum, then a division).

``MPI.IN_PLACE``: where MPI allows it (not for ``Bcast``; for ``Reduce``
only at the root) the schedule runs on a private copy of the input
(``copy_of``), since it reads its input while it writes its output.
"""

from __future__ import annotations

from mpi4py import MPI

from ccsynth.collectives.buffer_specs import PassToMPI, check_op_dtype, check_root, check_same, is_in_place, parse
from ccsynth.collectives.calls import Calls
from ccsynth.collectives.schedule_cache import CallArgs
from ccsynth.errors import BufferMismatchError

__all__ = ["allreduce", "reduce_scatter_block", "reduce", "allgather", "alltoall", "bcast"]


def allreduce(calls: Calls, sendbuf, recvbuf, op, root) -> None:
    """``recvbuf = op over ranks of sendbuf`` (``MPI.IN_PLACE`` as sendbuf: recvbuf is the input)."""
    calls.current = CallArgs("allreduce", sendbuf, recvbuf, op, 0)
    op = MPI.SUM if op is None else op
    try:
        opname, mpi_op = calls.ops.resolve(op)
        r = parse(recvbuf, "recvbuf", 1, writable=True)
        s = None if is_in_place(sendbuf) else parse(sendbuf, "sendbuf", 1)
    except PassToMPI as f:
        return calls.plain("Allreduce", str(f), lambda: calls.coll_comm().Iallreduce(sendbuf, recvbuf, op))
    m, dt = r.count, r.array.dtype
    if s is not None:
        check_same(s, r, "sendbuf", "recvbuf", m)
    check_op_dtype(opname, dt)
    copy_of = None
    if s is None:  # in place
        inp, copy_of = None, r.array  # the schedule works on a private copy of it (made in Calls.run)
    else:
        inp = s.array

    def fb():
        calls.mpi_collective("Allreduce", lambda: calls.coll_comm().Iallreduce(sendbuf, recvbuf, mpi_op))
        calls.finish_avg(opname, r.array)

    calls.run("allreduce", m * dt.itemsize, m, dt, opname, 0, r.array, inp, r.array, fb, copy_of)


def reduce_scatter_block(calls: Calls, sendbuf, recvbuf, op, root) -> None:
    """Rank ``r`` gets block ``r`` of the reduction of everyone's sendbuf (n blocks)."""
    calls.current = CallArgs("reduce_scatter", sendbuf, recvbuf, op, 0)
    op = MPI.SUM if op is None else op
    n = calls.size
    try:
        opname, mpi_op = calls.ops.resolve(op)
        if is_in_place(sendbuf):
            r = parse(recvbuf, "recvbuf", n, writable=True)
            s = None
        else:
            r = parse(recvbuf, "recvbuf", 1, writable=True)
            s = parse(sendbuf, "sendbuf", n)
    except PassToMPI as f:
        return calls.plain("Reduce_scatter_block", str(f),
                           lambda: calls.coll_comm().Ireduce_scatter_block(sendbuf, recvbuf, op))
    m, dt = r.count, r.array.dtype
    if s is not None:
        check_same(s, r, "sendbuf", "recvbuf", m, blocks=n, what_count=f"{n} x {m} (one block per rank)")
    check_op_dtype(opname, dt)
    copy_of = None
    if s is None:  # in place
        inp, copy_of = None, r.array  # the schedule works on a private copy of it (made in Calls.run)
        out = r.array[:m]
    else:
        inp, out = s.array, r.array

    def fb():
        calls.mpi_collective("Reduce_scatter_block",
                             lambda: calls.coll_comm().Ireduce_scatter_block(sendbuf, recvbuf, mpi_op))
        calls.finish_avg(opname, out)

    calls.run("reduce_scatter", n * m * dt.itemsize, m, dt, opname, 0, r.array, inp, out, fb, copy_of)


def reduce(calls: Calls, sendbuf, recvbuf, op, root) -> None:
    """``recvbuf`` on ``root`` = op over ranks of sendbuf; recvbuf is ignored elsewhere."""
    op = MPI.SUM if op is None else op
    check_root(root, calls.size)
    calls.current = CallArgs("reduce", sendbuf, recvbuf, op, root)
    at_root = calls.rank == root
    try:
        opname, mpi_op = calls.ops.resolve(op)
        in_place = is_in_place(sendbuf)
        if in_place and not at_root:
            raise BufferMismatchError(f"MPI.IN_PLACE is allowed only at the root ({root}) of Reduce; "
                                      f"rank {calls.rank} passed it")
        r = parse(recvbuf, "recvbuf", 1, writable=True) if at_root else None
        s = None if in_place else parse(sendbuf, "sendbuf", 1)
    except PassToMPI as f:
        return calls.plain("Reduce", str(f), lambda: calls.coll_comm().Ireduce(sendbuf, recvbuf, op, root))
    ref = r if r is not None else s
    if ref is None:  # not reached: off the root IN_PLACE is refused above, so sendbuf was parsed
        raise BufferMismatchError(f"Reduce on rank {calls.rank} got neither a sendbuf nor a recvbuf")
    m, dt = ref.count, ref.array.dtype
    if r is not None and s is not None:
        check_same(s, r, "sendbuf", "recvbuf", m)
    check_op_dtype(opname, dt)
    copy_of = None
    if s is None:  # in place, so at the root: ref is recvbuf
        inp, copy_of = None, ref.array  # the schedule works on a private copy of it (made in Calls.run)
    else:
        inp = s.array
    out = r.array if r is not None else None

    def fb():
        calls.mpi_collective("Reduce", lambda: calls.coll_comm().Ireduce(sendbuf, recvbuf, mpi_op, root))
        if out is not None:
            calls.finish_avg(opname, out)

    calls.run("reduce", m * dt.itemsize, m, dt, opname, root, ref.array, inp, out, fb, copy_of)


def allgather(calls: Calls, sendbuf, recvbuf, op, root) -> None:
    """recvbuf block ``q`` = sendbuf of rank ``q`` (``MPI.IN_PLACE``: this rank's block is the input)."""
    calls.current = CallArgs("allgather", sendbuf, recvbuf, None, 0)
    n = calls.size
    try:
        r = parse(recvbuf, "recvbuf", n, writable=True)
        s = None if is_in_place(sendbuf) else parse(sendbuf, "sendbuf", 1)
    except PassToMPI as f:
        return calls.plain("Allgather", str(f), lambda: calls.coll_comm().Iallgather(sendbuf, recvbuf))
    m, dt = r.count, r.array.dtype
    if s is not None:
        check_same(s, r, "sendbuf", "recvbuf", m, recv_blocks=n)
    copy_of = None
    if s is None:  # in place
        inp, copy_of = None, r.array[calls.rank * m:(calls.rank + 1) * m]  # copied in Calls.run, as above
    else:
        inp = s.array
    calls.run("allgather", n * m * dt.itemsize, m, dt, "sum", 0, r.array, inp, r.array,
              lambda: calls.mpi_collective("Allgather", lambda: calls.coll_comm().Iallgather(sendbuf, recvbuf)),
              copy_of)


def alltoall(calls: Calls, sendbuf, recvbuf, op, root) -> None:
    """recvbuf block ``q`` = block ``rank`` of rank ``q``'s sendbuf."""
    calls.current = CallArgs("alltoall", sendbuf, recvbuf, None, 0)
    n = calls.size
    try:
        r = parse(recvbuf, "recvbuf", n, writable=True)
        s = None if is_in_place(sendbuf) else parse(sendbuf, "sendbuf", n)
    except PassToMPI as f:
        return calls.plain("Alltoall", str(f), lambda: calls.coll_comm().Ialltoall(sendbuf, recvbuf))
    m, dt = r.count, r.array.dtype
    if s is not None:
        check_same(s, r, "sendbuf", "recvbuf", m, blocks=n, recv_blocks=n, what_count=f"{n} x {m} (one block per rank)")
    copy_of = None
    if s is None:  # in place
        inp, copy_of = None, r.array  # the schedule works on a private copy of it (made in Calls.run)
    else:
        inp = s.array
    calls.run("alltoall", n * m * dt.itemsize, m, dt, "sum", 0, r.array, inp, r.array,
              lambda: calls.mpi_collective("Alltoall", lambda: calls.coll_comm().Ialltoall(sendbuf, recvbuf)),
              copy_of)


def bcast(calls: Calls, buf, _none, op, root) -> None:
    """Every rank's ``buf`` = the root's."""
    check_root(root, calls.size)
    calls.current = CallArgs("broadcast", buf, None, None, root)
    if buf is not None and is_in_place(buf):
        raise BufferMismatchError("Bcast takes one buffer; MPI.IN_PLACE has no meaning there")
    at_root = calls.rank == root
    try:
        b = parse(buf, "buf", 1, writable=not at_root)
    except PassToMPI as f:
        return calls.plain("Bcast", str(f), lambda: calls.coll_comm().Ibcast(buf, root))
    m, dt = b.count, b.array.dtype
    calls.run("broadcast", m * dt.itemsize, m, dt, "sum", root, b.array,
              b.array if at_root else None, None if at_root else b.array,
              lambda: calls.mpi_collective("Bcast", lambda: calls.coll_comm().Ibcast(buf, root)))
