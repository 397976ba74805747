"""Multi-rank checks that no argument error, thread race or mismatch gives a wrong answer, a hang or an abort.

Run under MPI: ``mpiexec -n K python correctness_worker.py CASE [CASE ...]``
(the protocol of ``collectives_worker.py``: one ``CASE <name> PASS|FAIL rank
<R>`` line per case and rank; ``err_*`` cases expect every rank to raise and
make the job exit with status 3). Bad arguments sit on one rank only
(:data:`BAD`, rank 1; the root's own where only the root reads them): every
rank must raise, naming that rank.
"""

from __future__ import annotations

import os
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np
from mpi4py import MPI

import collectives_worker as cw
from ccsynth.communicator import Communicator
from ccsynth.errors import BufferMismatchError, CCSynthError, ConcurrentCallError

WORLD, N, RANK = cw.WORLD, cw.N, cw.RANK
BAD = 1  # the rank with the bad argument


def _named(case: str, fn, rank: int = BAD, exc=BufferMismatchError) -> str:
    """``fn`` must raise ``exc`` on every rank, naming ``rank`` (its own error there)."""
    note = cw.expect_error(case, exc, fn)
    if rank >= 0 and rank != RANK and f"rank {rank}" not in note:
        raise AssertionError(f"rank {RANK}: {case}: the error does not name rank {rank}: {note}")
    return note


def _v(counts, dtype=np.float64):
    counts = np.asarray(counts)
    return np.zeros(int(max(counts.sum(), 0)) + 4, dtype), counts


# -------------------------------------------------------------------- argument errors on one rank
def case_err_alltoallv_negative() -> str:
    c = Communicator(WORLD)
    counts = np.ones(N, int)
    if RANK == BAD:
        counts[0] = -1
    s = np.ones(N + 4)
    return _named("err_alltoallv_negative", lambda: c.Alltoallv([s, counts], [np.zeros(N), np.ones(N, int)]))


def case_err_alltoallv_overflow() -> str:
    c = Communicator(WORLD)
    displs = np.arange(N) * (10 ** 6 if RANK == BAD else 1)
    return _named("err_alltoallv_overflow",
                  lambda: c.Alltoallv([np.ones(N), (np.ones(N, int), displs)], [np.zeros(N), np.ones(N, int)]))


def case_err_alltoallv_dtype() -> str:
    """float32 on every rank but int32 on one (the same size): an error on every rank, without debug mode."""
    c = Communicator(WORLD)
    dt = np.int32 if RANK == BAD else np.float32
    return _named("err_alltoallv_dtype", lambda: c.Alltoallv([np.ones(N, dt), np.ones(N, int)],
                                                             [np.zeros(N, dt), np.ones(N, int)]), rank=-1)


def case_err_allgatherv_negative() -> str:
    c = Communicator(WORLD)
    counts = np.full(N, 2)
    if RANK == BAD:
        counts[-1] = -3
    return _named("err_allgatherv_negative",
                  lambda: c.Allgatherv(np.ones(2), [np.zeros(2 * N), counts]))


def case_err_allgatherv_counts() -> str:
    """Valid counts, but not the same on every rank: the ranks disagree, all raise."""
    c = Communicator(WORLD)
    counts = np.full(N, 2)
    counts[RANK] = 2
    if RANK == BAD:
        counts[0] = 3
    return _named("err_allgatherv_counts",
                  lambda: c.Allgatherv(np.ones(int(counts[RANK])), [np.zeros(2 * N + 1), counts]), rank=-1)


def case_err_reduce_scatter_negative() -> str:
    c = Communicator(WORLD)
    counts = np.full(N, 2)
    if RANK == BAD:
        counts[0] = -2
    return _named("err_reduce_scatter_negative",
                  lambda: c.Reduce_scatter(np.ones(2 * N), np.zeros(2), counts))


def case_err_reduce_scatter_size() -> str:
    """recvcounts taken from every rank's recvbuf (None): one rank's sendbuf does not add up."""
    c = Communicator(WORLD)
    send = np.ones(2 * N + (1 if RANK == BAD else 0))
    return _named("err_reduce_scatter_size", lambda: c.Reduce_scatter(send, np.zeros(2)))


def case_err_gatherv_root_counts() -> str:
    """The root's counts are negative: only the root reads them; every rank raises naming it."""
    c = Communicator(WORLD)
    counts = np.full(N, -1 if RANK == 0 else 1)
    return _named("err_gatherv_root_counts", lambda: c.Gatherv(np.ones(1), [np.zeros(N), counts], root=0), rank=0)


def case_err_gatherv_sendcount() -> str:
    c = Communicator(WORLD)
    m = 2 if RANK == BAD else 1
    return _named("err_gatherv_sendcount",
                  lambda: c.Gatherv(np.ones(m), [np.zeros(N + 1), np.ones(N, int)], root=0))


def case_err_scatterv_overflow() -> str:
    c = Communicator(WORLD)
    displs = np.arange(N) * (100 if RANK == 0 else 1)
    return _named("err_scatterv_overflow",
                  lambda: c.Scatterv([np.ones(N), (np.ones(N, int), displs)], np.zeros(1), root=0), rank=0)


def case_err_readonly_after_first() -> str:
    """A receive buffer made read-only after the first call (the replayed call): refused, not written."""
    c = Communicator(WORLD)
    x, out = np.ones(16), np.zeros(16)
    c.Allreduce(x, out)
    c.Allreduce(x, out)
    if RANK == BAD:
        out[:] = -1
        out.flags.writeable = False

    def call():
        try:
            c.Allreduce(x, out)
        finally:
            if RANK == BAD and not (out == -1).all():
                raise AssertionError("the read-only buffer was written")

    return _named("err_readonly_after_first", call)


# -------------------------------------------------------------------- another call on one rank, without debug mode
def case_err_allreduce_dtype() -> str:
    """float32 everywhere, int32 on one rank (the same size): the tags differ; every rank raises."""
    c = Communicator(WORLD)
    dt = np.int32 if RANK == BAD else np.float32
    c.Allreduce(np.ones(8, np.float32), np.zeros(8, np.float32))  # a good call first
    return _named("err_allreduce_dtype", lambda: c.Allreduce(np.ones(8, dt), np.zeros(8, dt)), rank=-1)


def case_err_allreduce_op() -> str:
    """SUM everywhere, MAX on one rank: every rank raises instead of returning a mix of the two."""
    c = Communicator(WORLD)
    op = MPI.MAX if RANK == BAD else MPI.SUM
    return _named("err_allreduce_op", lambda: c.Allreduce(np.ones(8), np.zeros(8), op=op), rank=-1)


def case_err_reduce_root() -> str:
    """Reduce to root 0 everywhere, root 2 on one rank: no rank returns a wrong result."""
    c = Communicator(WORLD)
    root = N - 1 if RANK == BAD else 0
    return _named("err_reduce_root", lambda: c.Reduce(np.ones(8), np.zeros(8), root=root), rank=-1)


# -------------------------------------------------------------------- threads
def _thread_calls(c, t: int, calls: int, blocking: bool, tally: list[int]) -> None:
    out = np.zeros(3)
    for i in range(calls):
        x = np.full(3, float(RANK + 1000 * t + i))
        want = sum(range(N)) + N * (1000 * t + i)
        try:
            if blocking:
                c.Allreduce(x, out)
            else:
                c.Iallreduce(x, out).Wait()
        except CCSynthError:
            tally[1] += 1
            continue
        tally[0 if (out == want).all() else 2] += 1


def case_threads_at_once() -> str:
    """Two threads call one Communicator at once, non-blocking then blocking: every call is right or raises,
    none is wrong, nothing hangs; afterwards the communicator refuses every call with ConcurrentCallError."""
    notes = []
    for blocking in (False, True):
        c = Communicator(WORLD)
        tally = [[0, 0, 0], [0, 0, 0]]
        ts = [threading.Thread(target=_thread_calls, args=(c, t, 10, blocking, tally[t])) for t in (0, 1)]
        for th in ts:
            th.start()
        for th in ts:
            th.join(60)
        if any(th.is_alive() for th in ts):
            raise AssertionError("a thread hung")
        right, raised, wrong = (sum(x[k] for x in tally) for k in range(3))
        if wrong:
            raise AssertionError(f"{wrong} wrong answer(s) (right {right}, raised {raised})")
        if raised:
            try:
                c.Allreduce(np.ones(3), np.zeros(3))
            except ConcurrentCallError:
                pass
            else:
                raise AssertionError("a communicator used by two threads at once still ran a call")
        c.Free()
        WORLD.Barrier()
        notes.append(f"{'blocking' if blocking else 'nonblocking'}: right {right}, raised {raised}")
    return "; ".join(notes)


def case_threads_in_turn() -> str:
    """Two threads taking turns (one's calls end before the other's begin): every call right."""
    c = Communicator(WORLD)
    tally = [0, 0, 0]
    for t in (0, 1):
        th = threading.Thread(target=_thread_calls, args=(c, t, 10, t == 1, tally))
        th.start()
        th.join(60)
    if tally != [20, 0, 0]:
        raise AssertionError(f"right, raised, wrong = {tally}")
    c.Free()
    return f"thread level {MPI.Query_thread()}"


CASES = {name[5:]: fn for name, fn in globals().items() if name.startswith("case_")}


def main() -> None:
    names = sys.argv[1:]
    for name in names:
        try:
            note = CASES[name]()
        except Exception as e:
            cw.say(cw.case_line(name, "FAIL", f"{type(e).__name__}: {e}"))
            raise
        cw.say(cw.case_line(name, "PASS", note))
    if cw.RAISED:
        sys.exit(3)


if __name__ == "__main__":
    main()
