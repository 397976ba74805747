"""``Gatherv`` and ``Scatterv``: the MPI library runs them, after every rank's arguments are checked and agreed.

ccsynth has no schedule for the rooted v-collectives; what it adds is that
a bad argument on one rank (a negative or overflowing count or
displacement at the root, a send count that is not the root's count for
that rank, another dtype or root on one rank) raises on *every* rank,
naming the rank, instead of leaving the others inside the MPI library's
collective, which cannot be cancelled. Each rank checks its own buffers,
then the ranks share the outcome, their own count and the root's counts in
one small allgather (:func:`~ccsynth.collectives.agreement.agree_on_args`),
and every rank checks the counts against each other from the same rows.
Specs ccsynth does not read (derived datatypes, ...) go to the MPI library
unchecked on every rank. The non-blocking forms go to the MPI library
directly (:data:`~ccsynth.collectives.fallback.MPI_ONLY`).
"""

from __future__ import annotations

import numpy as np

from ccsynth.collectives.agreement import ARGS_OK, run_checks
from ccsynth.collectives.buffer_specs import check_root, is_in_place, parse, parse_v
from ccsynth.collectives.calls import Calls
from ccsynth.collectives.runtime.channel import mark_shared
from ccsynth.errors import BufferMismatchError

__all__ = ["gatherv", "scatterv"]


def gatherv(calls: Calls, sendbuf, recvbuf, op, root) -> None:
    """The root's recvbuf block ``q`` (``counts[q]`` elements at ``displs[q]``) = rank ``q``'s sendbuf."""
    def check():
        return _rooted(calls, root, sendbuf, recvbuf, "Gatherv", v_spec=recvbuf, v_name="recvbuf",
                       flat_spec=sendbuf, flat_name="sendbuf", flat_out=False)

    _agree_then_mpi(calls, "Gatherv", root, run_checks(check),
                    lambda: calls.coll_comm().Igatherv(sendbuf, recvbuf, root))


def scatterv(calls: Calls, sendbuf, recvbuf, op, root) -> None:
    """Rank ``q``'s recvbuf = the root's sendbuf block ``q`` (``counts[q]`` elements at ``displs[q]``)."""
    def check():
        return _rooted(calls, root, recvbuf, sendbuf, "Scatterv", v_spec=sendbuf, v_name="sendbuf",
                       flat_spec=recvbuf, flat_name="recvbuf", flat_out=True)

    _agree_then_mpi(calls, "Scatterv", root, run_checks(check),
                    lambda: calls.coll_comm().Iscatterv(sendbuf, recvbuf, root))


def _rooted(calls: Calls, root, in_place_spec, _other, name: str, *, v_spec, v_name: str, flat_spec, flat_name: str,
            flat_out: bool):
    """``(dtype name, this rank's count, the root's counts or None)`` after this rank's own checks."""
    n, me = calls.size, calls.rank
    check_root(root, n)
    in_place = is_in_place(in_place_spec)
    if me != root:
        if in_place:
            raise BufferMismatchError(f"MPI.IN_PLACE is allowed only at the root ({root}) of {name}")
        f = parse(flat_spec, flat_name, 1, writable=flat_out).array
        return f.dtype.name, f.size, None
    v = parse_v(v_spec, v_name, n, writable=not flat_out)
    if in_place:
        return v.array.dtype.name, int(v.counts[me]), v.counts
    f = parse(flat_spec, flat_name, 1, writable=flat_out).array
    if f.dtype != v.array.dtype:
        raise BufferMismatchError(f"{flat_name} has dtype {f.dtype.name} but {v_name} has dtype {v.array.dtype.name}")
    return f.dtype.name, f.size, v.counts


def _agree_then_mpi(calls: Calls, name: str, root, outcome, start) -> None:
    """Agree on every rank's checks, counts and signature, then run the MPI library's own ``name``."""
    state, got, err = outcome
    n = calls.size
    row = np.zeros(n + 1, np.int64)
    sig = ""
    if got is not None:
        dtype, count, counts = got
        row[0] = count
        if counts is not None:
            row[1:] = counts
        sig = f"{name} rooted at {root} of {dtype}"
    to_mpi, rows = calls.agree_args(name, state, sig, err, row)
    if not to_mpi and state == ARGS_OK:
        mine, theirs = rows[:, 0], rows[int(root), 1:]
        bad = np.flatnonzero(mine != theirs)
        if bad.size:
            q = int(bad[0])
            e = BufferMismatchError(f"{name} (call {calls.channel.seq}): rank {q} has {int(mine[q])} element(s) "
                                    f"but the root ({root}) counts {int(theirs[q])} for it")
            mark_shared(e)  # every rank finds it in the same rows
            raise e
    calls.fallback.tell((name, "not covered"), "%s has no ccsynth schedule; the MPI library runs it", name)
    calls.mpi_collective(name, start)
    calls.last_algorithm = "mpi"
