"""Multi-rank checks of the Python user path (issue 14): plans in, requests, v-collectives, array-likes, memory.

Run under MPI: ``mpiexec -n K python api_worker.py CASE [CASE ...]``. Every
rank prints ``CASE <name> PASS rank <R>[: note]`` or ``CASE <name> FAIL
rank <R>: ...`` per case (then the abort handler ends the job);
``tests/test_api_mpi.py`` reads them.
"""

from __future__ import annotations

import gc
import logging
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np
from mpi4py import MPI

from ccsynth.collectives.mpi_util import install_abort_handler

install_abort_handler()

import ccsynth  # noqa: E402
from ccsynth.collectives.plan import Plan, PlanEntry, save_plan  # noqa: E402
from ccsynth.collectives.schedule import save_schedule  # noqa: E402
from ccsynth.errors import PlanError  # noqa: E402
from ccsynth.collectives import block_collectives  # noqa: E402
from ccsynth.collectives.spec import Collective  # noqa: E402
from ccsynth.synth.baselines import make_baseline  # noqa: E402
from ccsynth.synth.default_plan import MPI_BELOW  # noqa: E402
from ccsynth.topologies import fully_connected  # noqa: E402

import schedules as hand  # noqa: E402

__all__ = ["CASES", "main"]

WORLD = MPI.COMM_WORLD
N = WORLD.Get_size()
RANK = WORLD.Get_rank()
TMP = os.environ.get("CCSYNTH_TMP", "/tmp")


def say(msg: str) -> None:
    sys.stdout.write(msg + "\n")
    sys.stdout.flush()


def check(cond: bool, what: str) -> None:
    if not cond:
        raise AssertionError(f"rank {RANK}: {what}")


def same(what: str, got, ref) -> None:
    got, ref = np.asarray(got), np.asarray(ref)
    check(got.shape == ref.shape and np.allclose(got, ref), f"{what}: {got.ravel()[:6]} != {ref.ravel()[:6]}")


class Warnings(logging.Handler):
    """Collects ccsynth's log records at WARNING and above."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.records: list[str] = []

    def emit(self, record):
        self.records.append(record.getMessage())


WARNINGS = Warnings()
logging.getLogger("ccsynth").addHandler(WARNINGS)


def shared_path(name: str) -> str:
    return WORLD.bcast(os.path.join(TMP, f"{name}_{os.getpid()}.json") if RANK == 0 else None)


# ------------------------------------------------------------------ deliverable 1: one path
def case_synth_path() -> str:
    """synthesize -> plan file -> Communicator: allreduce on the plan, allgather on the default plan, both ccsynth."""
    path = shared_path("allreduce_plan")
    if RANK == 0:
        plan = ccsynth.synthesize(f"fully_connected:{N}", "allreduce", sizes=[4096, 1 << 16])
        save_plan(plan, path)
    WORLD.Barrier()
    c = ccsynth.Communicator(WORLD, plan=path)
    x = np.arange(4096, dtype=np.float32) * (RANK + 1)
    out, ref = np.empty_like(x), np.empty_like(x)
    c.Allreduce(x, out)
    WORLD.Allreduce(x, ref)
    same("allreduce on the synthesized plan", out, ref)
    names = {e.algorithm for e in c.plan.entries}
    check(c.last_algorithm in names, f"allreduce ran {c.last_algorithm}, not one of the plan's {sorted(names)}")
    g = np.empty(N * 100, np.int64)
    c.Allgather(np.full(100, RANK, np.int64), g)
    same("allgather on the default plan", g, np.repeat(np.arange(N), 100))
    check(c.last_algorithm not in ("mpi", ""), f"allgather should run the default plan, ran {c.last_algorithm!r}")
    gathered = np.empty(N, np.int64) if RANK == 0 else None
    c.Gather(np.array([RANK], np.int64), gathered, root=0)
    check(c.last_algorithm == "mpi", f"Gather goes to MPI and says so: last_algorithm {c.last_algorithm!r}")
    if RANK == 0:
        check(any("Gather" in w for w in WARNINGS.records), f"no WARNING for Gather on rank 0: {WARNINGS.records}")
    else:
        check(not WARNINGS.records, f"warnings on rank {RANK}: {WARNINGS.records}")
    fp = c.plan_fingerprint
    c.Free()
    WORLD.Barrier()
    if RANK == 0:
        os.remove(path)
    return f"plan {fp}"


def case_schedule_inputs() -> str:
    """A Schedule, a schedule file and a list of them merged are plans too; uncovered sizes of a covered kind go to MPI."""
    path = shared_path("allgather_schedule")
    if RANK == 0:
        save_schedule(hand.ring_allgather(N), path)
    WORLD.Barrier()
    c = ccsynth.Communicator(WORLD, plan=[hand.ring_allreduce(N), path])
    x = np.ones(8 * N)
    out = np.empty_like(x)
    c.Allreduce(x, out)
    same("allreduce from a Schedule", out, np.full(8 * N, N))
    check(c.last_algorithm == hand.ring_allreduce(N).name, f"ran {c.last_algorithm}")
    g = np.empty(N * 3)
    c.Allgather(np.full(3, float(RANK)), g)
    same("allgather from a schedule file", g, np.repeat(np.arange(N, dtype=float), 3))
    check(c.last_algorithm == hand.ring_allgather(N).name, f"ran {c.last_algorithm}")
    c.Free()
    small = ccsynth.Communicator(WORLD, plan=Plan((PlanEntry("allreduce", N, 0, 64, hand.ring_allreduce(N)),)))
    small.Allreduce(np.ones(100), out := np.zeros(100))
    check(small.last_algorithm == "mpi" and np.all(out == N), f"uncovered size: {small.last_algorithm}")
    if RANK == 0:
        check(any("allreduce of 800 bytes" in w for w in WARNINGS.records), f"no warning: {WARNINGS.records}")
    small.Free()
    WORLD.Barrier()
    if RANK == 0:
        os.remove(path)
    return "ok"


def expect_plan_error(fn, *texts) -> str:
    try:
        fn()
    except PlanError as e:
        for t in texts:
            check(t in str(e), f"PlanError should mention {t!r}: {e}")
        WORLD.Barrier()
        return f"raised PlanError: {e}"
    raise AssertionError(f"rank {RANK}: no PlanError")


def case_err_plan_differs() -> str:
    """Rank 1 without the plan the others load: PlanError on every rank, naming the ranks."""
    plan = Plan((PlanEntry("allreduce", N, 0, None, hand.ring_allreduce(N)),))
    return expect_plan_error(lambda: ccsynth.Communicator(WORLD, plan=None if RANK == 1 else plan),
                             "different plans", "rank 1: the default plan")


def case_err_plan_unusable() -> str:
    """A plan for another rank count (on rank 0 only): PlanError on every rank, naming rank 0."""
    plan = Plan((PlanEntry("allreduce", N + 1, 0, None, hand.ring_allreduce(N + 1)),)) if RANK == 0 else None
    return expect_plan_error(lambda: ccsynth.Communicator(WORLD, plan=plan), "rank(s) 0", f"{N} ranks")


# ------------------------------------------------------------------ deliverable 2: array-likes, memory
class DlpackOnly:
    """Exposes its memory through DLPack alone (like a torch CPU tensor without __array__)."""

    def __init__(self, a):
        self._a = a

    def __dlpack__(self, **kw):
        return self._a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


class ArrayMethod:
    """Exposes its memory through __array__ (a view of what it holds)."""

    def __init__(self, a):
        self._a = a

    def __array__(self, dtype=None, copy=None):
        return self._a


class CopyingArray(ArrayMethod):
    def __array__(self, dtype=None, copy=None):
        return self._a.copy()


def case_arraylikes() -> str:
    """bytearray, memoryview, __array__, __dlpack__ buffers run on ccsynth schedules and equal MPI."""
    c = ccsynth.Communicator(WORLD)
    ran = []
    send = bytearray(bytes([RANK + 1]) * 64)
    recv = bytearray(64 * N)
    c.Allgather(send, recv)
    same("allgather of bytearrays", np.frombuffer(recv, np.uint8), np.repeat(np.arange(1, N + 1, dtype=np.uint8), 64))
    ran.append(c.last_algorithm)
    out = np.zeros(32)
    c.Allreduce(memoryview(np.full(32, float(RANK))), memoryview(out))
    same("allreduce of memoryviews", out, np.full(32, sum(range(N)), float))
    ran.append(c.last_algorithm)
    held = np.zeros(32)
    c.Allreduce(DlpackOnly(np.full(32, 1.0)), ArrayMethod(held))
    same("allreduce __dlpack__ -> __array__", held, np.full(32, float(N)))
    ran.append(c.last_algorithm)
    out = np.zeros(16, np.float32)
    c.Bcast(DlpackOnly(out) if RANK else DlpackOnly(np.arange(16, dtype=np.float32)), root=0)
    if RANK:
        same("bcast into a __dlpack__ object", out, np.arange(16, dtype=np.float32))
    ran.append(c.last_algorithm)
    check("mpi" not in ran, f"array-likes went to MPI: {ran}")
    try:
        c.Allreduce(np.ones(4), CopyingArray(np.zeros(4)))
    except ccsynth.BufferMismatchError as e:
        check("returns a copy" in str(e), str(e))
    else:
        raise AssertionError("a receive buffer whose __array__ copies must be refused")
    c.Free()
    return ",".join(ran)


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def case_memory_returns() -> str:
    """Six allreduces on new 32 MiB arrays, all deleted: resident memory returns (nothing but the budgeted cache held)."""
    import weakref

    c = ccsynth.Communicator(WORLD)
    m = (32 << 20) // 8
    warm = np.ones(m)
    c.Allreduce(warm, np.empty(m))
    c.Allreduce(MPI.IN_PLACE, warm)
    del warm
    gc.collect()
    base = rss_mib()
    refs = []
    for i in range(6):
        x = np.full(m, float(RANK + i))
        y = np.empty(m)
        c.Allreduce(x, y) if i % 2 == 0 else c.Allreduce(MPI.IN_PLACE, x)
        refs += [weakref.ref(x), weakref.ref(y)]
        del x, y
    gc.collect()
    alive = sum(r() is not None for r in refs)
    check(alive == 0, f"{alive} of the caller's arrays are still alive after the calls")
    grown = rss_mib() - base
    check(grown < 40, f"resident memory is {grown:.0f} MiB above the start after freeing every array")
    c.Free()
    return f"grew {grown:.1f} MiB, cache {c.cached_bytes >> 20} MiB"


# ------------------------------------------------------------------ deliverable 3: non-blocking
def case_nonblocking() -> str:
    """I* calls run ccsynth schedules, several in flight at once, equal to MPI; Wait/Test/waitall; MPI's ops too."""
    from ccsynth.collectives.requests import waitall

    c = ccsynth.Communicator(WORLD)
    rng = np.random.default_rng(7 + RANK)
    ran = []
    for m in (5, 3000, 70000):
        x = rng.random(m)
        ar, rs, ag, a2a = np.empty(m), np.empty(m // N or 1), np.empty(N * m), np.empty(N * m)
        xs = rng.random(N * (m // N or 1))
        xa = rng.random(N * m)
        b = x.copy() if RANK == 1 % N else np.zeros(m)
        reqs = [c.Iallreduce(x, ar), c.Ireduce_scatter_block(xs, rs), c.Iallgather(x, ag), c.Ialltoall(xa, a2a),
                c.Ibcast(b, root=1 % N)]
        np.dot(rng.random((200, 200)), rng.random((200, 200)))  # compute meanwhile
        reqs[0].Wait()
        waitall(reqs)
        check(all(r.Test() for r in reqs), "a request is not done after waitall")
        ref = np.empty(m)
        WORLD.Allreduce(x, ref)
        same(f"Iallreduce {m}", ar, ref)
        ref = np.empty_like(rs)
        WORLD.Reduce_scatter_block(xs, ref)
        same(f"Ireduce_scatter_block {m}", rs, ref)
        ref = np.empty_like(ag)
        WORLD.Allgather(x, ref)
        same(f"Iallgather {m}", ag, ref)
        ref = np.empty_like(a2a)
        WORLD.Alltoall(xa, ref)
        same(f"Ialltoall {m}", a2a, ref)
        ref = x.copy()
        WORLD.Bcast(ref, root=1 % N)
        same(f"Ibcast {m}", b, ref)
        ran.append(c.last_algorithm)
    # an op without a ccsynth kernel: the MPI library's own, still non-blocking, on a communicator of its own
    i = np.full(4, RANK + 1, np.int64)
    o = np.empty(4, np.int64)
    r = c.Iallreduce(i, o, op=MPI.BOR)
    WORLD.Barrier()  # the caller's own collective on the wrapped comm meanwhile
    r.Wait()
    ref = np.empty(4, np.int64)
    WORLD.Allreduce(i, ref, op=MPI.BOR)
    same("Iallreduce BOR", o, ref)
    check(c.last_algorithm == "mpi", f"BOR ran {c.last_algorithm}")
    # a blocking call after pending ones waits for them (program order)
    y = np.empty(8)
    r1 = c.Iallreduce(np.ones(8), y)
    z = np.empty(8)
    c.Allreduce(y, z)
    check(r1.Test(), "the blocking call did not wait for the pending one")
    same("blocking after non-blocking", z, np.full(8, N * N))
    c.Free()
    return ",".join(ran)


def case_nonblocking_errors() -> str:
    """A check that fails on one rank: every rank's request raises at Wait, and the communicator goes on."""
    c = ccsynth.Communicator(WORLD)
    bad = np.ones(5 if RANK == 0 else 4)
    r = c.Iallreduce(bad, np.empty(4))
    try:
        r.Wait()
    except ccsynth.CCSynthError as e:
        note = type(e).__name__
    else:
        raise AssertionError("no error at Wait")
    out = np.empty(4)
    c.Iallreduce(np.ones(4), out).Wait()
    same("after a failed request", out, np.full(4, N))
    c.Free()
    return note


# ------------------------------------------------------------------ deliverable 4: variable counts, Split/Dup
def case_vcounts() -> str:
    """Alltoallv with random counts, Allgatherv, Reduce_scatter with counts: ccsynth schedules, equal to MPI."""
    c = ccsynth.Communicator(WORLD)
    rng = np.random.default_rng(99)  # the same on every rank: the count matrix
    ran = []
    for trial, hi in enumerate((3, 40, 1000, 1)):
        counts = rng.integers(max(0, hi // 3), hi + 1, size=(N, N))  # counts[p, q]: p sends to q
        if trial == 3:
            counts[:] = 0
        sc, rc = counts[RANK], counts[:, RANK]
        for dtype in (np.float64, np.int32):
            send = (np.arange(sc.sum()) + 1000 * RANK).astype(dtype)
            recv = np.full(rc.sum() + 3, -1, dtype)
            ref = recv.copy()
            rd = np.concatenate([[0], np.cumsum(rc)[:-1]]).astype(int)
            c.Alltoallv([send, sc], [recv, (rc, rd)])
            WORLD.Alltoallv([send, sc], [ref, (rc, rd)])
            same(f"Alltoallv trial {trial} {np.dtype(dtype).name}", recv, ref)
            ran.append(c.last_algorithm)
        gc_ = counts[0]
        mine = np.full(gc_[RANK], RANK + 0.5)
        out, ref = np.empty(gc_.sum()), np.empty(gc_.sum())
        c.Allgatherv(mine, [out, gc_])
        WORLD.Allgatherv(mine, [ref, gc_])
        same(f"Allgatherv trial {trial}", out, ref)
        ran.append(c.last_algorithm)
        x = rng.random(gc_.sum()) + RANK
        out, ref = np.empty(gc_[RANK]), np.empty(gc_[RANK])
        c.Reduce_scatter(x, out, gc_, MPI.SUM)
        WORLD.Reduce_scatter(x, ref, gc_, MPI.SUM)
        same(f"Reduce_scatter trial {trial}", out, ref)
        ran.append(c.last_algorithm)
    check("mpi" not in ran, f"v-collectives went to MPI: {ran}")
    # the non-blocking forms, all three in flight at once
    counts = rng.integers(0, 50, size=(N, N))
    sc, rc = counts[RANK], counts[:, RANK]
    send = np.arange(sc.sum(), dtype=np.float64) + RANK
    a2a, a2a_ref = np.empty(rc.sum()), np.empty(rc.sum())
    gc_ = counts[0]
    ag, ag_ref = np.empty(gc_.sum()), np.empty(gc_.sum())
    x = np.arange(gc_.sum(), dtype=np.float64)
    rs, rs_ref = np.empty(gc_[RANK]), np.empty(gc_[RANK])
    reqs = [c.Ialltoallv([send, sc], [a2a, rc]), c.Iallgatherv(np.full(gc_[RANK], 1.0 * RANK), [ag, gc_]),
            c.Ireduce_scatter(x, rs, gc_)]
    ccsynth.waitall(reqs)
    WORLD.Alltoallv([send, sc], [a2a_ref, rc])
    WORLD.Allgatherv(np.full(gc_[RANK], 1.0 * RANK), [ag_ref, gc_])
    WORLD.Reduce_scatter(x, rs_ref, gc_)
    same("Ialltoallv", a2a, a2a_ref)
    same("Iallgatherv", ag, ag_ref)
    same("Ireduce_scatter", rs, rs_ref)
    # very skewed counts: one block of 5000 among ones runs on the explicit schedule, every block at its size
    big = np.ones((N, N), np.int64)
    big[0, 1] = 5000
    sc, rc = big[RANK], big[:, RANK]
    send = np.ones(sc.sum())
    recv = np.empty(rc.sum())
    c.Alltoallv([send, sc], [recv, rc])
    check(c.last_algorithm == "alltoallv-direct" and np.all(recv == 1), f"skewed Alltoallv ran {c.last_algorithm}")
    c.Free()
    return f"{len(ran)} calls"


def case_vcounts_explicit() -> str:
    """Alltoallv/Allgatherv on explicit schedules: random counts (zeros included), gaps between blocks, several
    dtypes, equal to MPI; no padding (the schedule's pieces are the counts); counts that disagree raise."""
    c = ccsynth.Communicator(WORLD)
    rng = np.random.default_rng(7)  # the same on every rank
    trials = 0
    for trial in range(6):
        counts = rng.integers(0, (2, 9, 300)[trial % 3] + 1, size=(N, N))
        counts[rng.random((N, N)) < 0.3] = 0  # zeros
        if trial == 5:
            counts[:] = 0
            counts[0, N - 1] = 100_000  # one huge block among empty ones
        sc, rc = counts[RANK], counts[:, RANK]
        gap = int(rng.integers(0, 4))
        sd = (np.concatenate([[0], np.cumsum(sc)[:-1]]) + gap * np.arange(N)).astype(np.int64)
        rd = np.concatenate([[0], np.cumsum(rc[::-1])[:-1]])[::-1].astype(np.int64) + gap  # blocks in reverse order
        for dtype in (np.float32, np.float64, np.int64, np.int8, np.complex128):
            send = (np.arange(sc.sum() + gap * N) % 100 + 7 * RANK).astype(dtype)
            recv = np.full(rc.sum() + gap * N + 2, -1, dtype)
            ref = recv.copy()
            c.Alltoallv([send, (sc, sd)], [recv, (rc, rd)])
            WORLD.Alltoallv([send, (sc, sd)], [ref, (rc, rd)])
            check(np.array_equal(recv, ref), f"Alltoallv trial {trial} {np.dtype(dtype).name}: {recv[:8]} != {ref[:8]}")
            check(c.last_algorithm == "alltoallv-direct", f"Alltoallv ran {c.last_algorithm}")
            gc_ = counts[(trial + 1) % N]
            gd = (np.concatenate([[0], np.cumsum(gc_)[:-1]]) + gap * np.arange(N)).astype(np.int64)
            mine = (np.arange(gc_[RANK]) + 3 * RANK).astype(dtype)
            out = np.full(gc_.sum() + gap * N, -1, dtype)
            gref = out.copy()
            c.Allgatherv(mine, [out, (gc_, gd)])
            WORLD.Allgatherv(mine, [gref, (gc_, gd)])
            check(np.array_equal(out, gref), f"Allgatherv trial {trial} {np.dtype(dtype).name}")
            check(c.last_algorithm == "allgatherv-direct", f"Allgatherv ran {c.last_algorithm}")
            trials += 2
    # in place: the own block is already where it belongs
    gc_ = np.arange(N) + 1
    gd = np.concatenate([[0], np.cumsum(gc_)[:-1]])
    out = np.full(gc_.sum(), -1.0)
    out[gd[RANK]:gd[RANK] + gc_[RANK]] = RANK
    c.Allgatherv(MPI.IN_PLACE, [out, gc_])
    check(np.array_equal(out, np.repeat(np.arange(N, dtype=float), gc_)), f"in-place Allgatherv: {out}")
    # a rank that expects another count than its peer sends: every rank raises
    counts = np.ones((N, N), np.int64)
    rc = counts[:, RANK].copy()
    if RANK == 1:
        rc[0] = 2
    try:
        c.Alltoallv([np.ones(N), counts[RANK]], [np.empty(rc.sum()), rc])
    except ccsynth.CCSynthError as e:
        note = type(e).__name__
    else:
        raise AssertionError("mismatched Alltoallv counts were not caught")
    # Allgatherv counts that disagree (rank 1 expects 2 elements of rank 0, which sends 1): the receive's
    # length check raises on rank 1 (ranks whose own messages all arrived may have finished the call)
    gc_ = np.ones(N, np.int64)
    if RANK == 1:
        gc_[0] = 2
    note2 = "-"
    try:
        c.Allgatherv(np.ones(int(gc_[RANK])), [np.empty(gc_.sum()), gc_])
    except ccsynth.CCSynthError as e:
        note2 = type(e).__name__
    check(RANK != 1 or note2 == "BufferMismatchError", f"rank 1 did not see the short message: {note2}")
    out = np.empty(N)
    c.Allgatherv(np.full(1, float(RANK)), [out, np.ones(N, np.int64)])  # the communicator goes on
    check(np.array_equal(out, np.arange(N, dtype=float)), f"Allgatherv after a failed one: {out}")
    check(len(c._vschedules) <= 64, "the explicit schedule cache grows without bound")
    c.Free()
    return f"{trials} calls, mismatch {note}, {note2}"


def case_split_dup() -> str:
    """Split and Dup return ccsynth communicators; .comm is mpi4py's."""
    c = ccsynth.Communicator(WORLD)
    d = c.Dup()
    check(isinstance(d, ccsynth.Communicator) and isinstance(d.comm, MPI.Comm), f"Dup gave {type(d)}")
    half = c.Split(RANK % 2, RANK)
    check(isinstance(half, ccsynth.Communicator), f"Split gave {type(half)}")
    out = np.empty(4)
    half.Allreduce(np.full(4, 1.0), out)
    same("allreduce on a split", out, np.full(4, float(half.Get_size())))
    check(half.Get_size() == 1 or half.last_algorithm != "mpi", f"split ran {half.last_algorithm}")
    none = c.Split(MPI.UNDEFINED if RANK == 0 else 0, RANK)
    check((none is None) == (RANK == 0), "a rank with MPI.UNDEFINED gets None")
    # it is an MPI.Intracomm on the same communicator: mpi4py's own methods work on it, mpi4py's functions take it
    for x in (c, d, half):
        check(isinstance(x, MPI.Intracomm) and isinstance(x, MPI.Comm) and x == x.comm, f"{x!r} is not an Intracomm")
    check(c.allreduce(RANK) == N * (N - 1) // 2 and c.Get_group().Get_size() == N, "mpi4py's allreduce/Get_group")
    check(c.bcast("x" if RANK == 0 else None, root=0) == "x", "mpi4py's pickle bcast")
    if N > 1:
        if RANK == 0:
            c.Send(np.arange(3.0), dest=1, tag=5)
        elif RANK == 1:
            got = np.empty(3)
            c.Recv(got, source=0, tag=5)
            same("Send/Recv on the ccsynth communicator", got, np.arange(3.0))
    other = MPI.Intracomm(c)  # a plain mpi4py handle made from it
    check(MPI.Comm.Compare(other, WORLD) == MPI.IDENT, "a plain handle made from it is the same communicator")
    grp = c.Create_group(c.Get_group())
    check(isinstance(grp, ccsynth.Communicator) and grp.Get_size() == N, f"Create_group gave {type(grp)}")
    clone, req = c.Idup()
    req.Wait()
    out = np.empty(2)
    clone.Allreduce(np.ones(2), out)
    same("allreduce on an Idup", out, np.full(2, float(N)))
    for x in (d, half, none, grp, clone, c):
        if x is not None:
            x.Free()
    check(WORLD.allreduce(1) == N, "Free of a ccsynth communicator left the wrapped one usable")
    return "ok"


# ------------------------------------------------------------------ deliverable 5: GPUs (staging logic on host arrays)
class FakeDevice(np.ndarray):
    """A host array that says it is device memory: exercises the staging path without a GPU."""

    @property
    def __cuda_array_interface__(self):
        return {"shape": self.shape, "typestr": self.dtype.str, "data": (self.ctypes.data, False), "version": 3}


def fake(a):
    return np.ascontiguousarray(a).view(FakeDevice)


def case_staging() -> str:
    """Device buffers on an MPI library that is not CUDA-aware: staged through host buffers, results equal MPI."""
    from ccsynth.collectives.staging import Stager

    c = ccsynth.Communicator(WORLD)
    check(c.cuda_aware.aware is not True, f"this MPI reports CUDA-awareness: {c.cuda_aware}")
    copies = []

    def to_host(dst, src):
        copies.append("h")
        np.copyto(dst, src)

    def to_device(dst, src):
        copies.append("d")
        np.copyto(dst, src)

    c._stager = Stager(np.empty, to_host, to_device)
    x = fake(np.arange(10.0) + RANK)
    out = fake(np.zeros(10))
    c.Allreduce(x, out)
    same("staged allreduce", out, np.arange(10.0) * N + sum(range(N)))
    check(copies == ["h", "d"], f"copies {copies}")
    check(c.last_algorithm != "mpi", f"ran {c.last_algorithm}")
    buf = fake(np.arange(6.0) if RANK == 0 else np.zeros(6))
    c.Bcast(buf, root=0)
    same("staged bcast", buf, np.arange(6.0))
    y = fake(np.full(4, 1.0))
    c.Allreduce(MPI.IN_PLACE, y)
    same("staged in-place allreduce", y, np.full(4, float(N)))
    g = fake(np.zeros(3 * N))
    c.Iallgather(fake(np.full(3, float(RANK))), g).Wait()
    same("staged Iallgather", g, np.repeat(np.arange(N, dtype=float), 3))
    if RANK == 0:
        check(any("staged through pinned host memory" in w for w in WARNINGS.records), f"{WARNINGS.records}")
    c.Free()
    never = ccsynth.Communicator(WORLD, staging="never")
    try:
        never.Allreduce(fake(np.ones(4)), fake(np.zeros(4)))
    except ccsynth.CCSynthError as e:
        check("staging='never'" in str(e) and "CCSYNTH_CUDA_AWARE=1" in str(e), str(e))
    else:
        raise AssertionError("staging='never' on a library that is not CUDA-aware must raise")
    never.Free()
    return "ok"


# ------------------------------------------------------------ MPI's own collective as a plan algorithm, the fast path
# (issue 29; tests/test_mpi_algorithm.py launches these with CCSYNTH_DEFAULT_MPI=1, the default plan users get)

def allreduce_ref(x, op=MPI.SUM):
    out = np.empty_like(x)
    WORLD.Allreduce(x, out, op=op)
    return out


def case_default_plan_picks_mpi_at_small_sizes() -> str:
    c = ccsynth.Communicator(WORLD)
    x = np.arange(2, dtype=np.float32) + RANK
    y = np.empty_like(x)
    c.Allreduce(x, y)
    check(c.last_algorithm == "mpi" and np.array_equal(y, allreduce_ref(x)), f"8 B allreduce ran {c.last_algorithm}")
    g = np.empty(2 * N, np.float32)
    c.Allgather(x, g)
    ref = np.empty_like(g)
    WORLD.Allgather(x, ref)
    check(c.last_algorithm == "mpi" and np.array_equal(g, ref), f"allgather ran {c.last_algorithm}")
    below = MPI_BELOW["allreduce"].get(N, MPI_BELOW["allreduce"][0])
    big = np.full(below // 4, RANK + 1, np.float32)  # from the threshold up: a ccsynth schedule
    out = np.empty_like(big)
    c.Allreduce(big, out)
    check(c.last_algorithm != "mpi" and np.array_equal(out, allreduce_ref(big)), f"{below} B ran {c.last_algorithm}")
    c.Free()
    return f"large allreduce: {c.last_algorithm}"


def case_plan_naming_mpi_runs_mpi() -> str:
    ring = make_baseline("ring", Collective("allgather", N), fully_connected(N))
    plan = Plan((PlanEntry("allgather", N, 0, 1024, ring), PlanEntry("allgather", N, 1024, None, None, algorithm="mpi")))
    c = ccsynth.Communicator(WORLD, plan=plan, fallback=False)  # "mpi" is a choice, not a fallback: no error
    for count in (4, 1024):
        x = np.arange(count, dtype=np.float32) * (RANK + 1)
        g, ref = np.empty(count * N, np.float32), np.empty(count * N, np.float32)
        c.Allgather(x, g)
        WORLD.Allgather(x, ref)
        want = ring.name if count * N * 4 < 1024 else "mpi"
        check(c.last_algorithm == want and np.array_equal(g, ref), f"{count} floats ran {c.last_algorithm}, not {want}")
    c.Free()
    return ""


class Counted:
    """block_collectives.allreduce counting the calls read in full (a replay does not read them)."""

    def __init__(self):
        self.orig, self.n = block_collectives.allreduce, 0
        block_collectives.allreduce = self

    def __call__(self, *args):
        self.n += 1
        return self.orig(*args)


def _fast_path_cases(c, counted: Counted, count: int) -> None:
    """Repeated allreduces of ``count`` elements on ``c``: replayed when they repeat, never a stale binding."""
    x = np.zeros(count, np.float32)
    y = np.empty_like(x)
    for i in range(4):  # the same arrays, new contents: read in full once, then replayed
        x[:] = np.arange(count) + RANK * i
        c.Allreduce(x, y)
        check(np.array_equal(y, allreduce_ref(x)), f"same buffer, call {i}: {y[:4]}")
    check(counted.n == 1, f"a repeated call was read in full {counted.n} times, not once")
    for i in range(3):  # a new buffer of the same shape each time (ids may be reused): never the old binding
        x2 = np.full(count, RANK + 10 * i, np.float32)
        c.Allreduce(x2, y)
        check(np.array_equal(y, allreduce_ref(x2)), f"new buffer {i}: {y[:4]}")
    x64, y64 = np.full(count, RANK + 0.5), np.empty(count)  # another dtype
    c.Allreduce(x64, y64)
    c.Allreduce(x64, y64)
    check(np.array_equal(y64, allreduce_ref(x64)), f"float64: {y64[:4]}")
    xi, yi = np.arange(count, dtype=np.float32), np.empty(count, np.float32)
    c.Allreduce(xi, yi)
    xi.dtype = yi.dtype = np.int32  # the same objects reinterpreted: read again, not replayed as float32
    c.Allreduce(xi, yi)
    check(np.array_equal(yi, allreduce_ref(xi)), "the same arrays with a new dtype were replayed stale")
    inp = np.full(count, RANK + 1.0, np.float32)  # in place, twice: the private copy is made on every run
    for _ in range(2):
        inp[:] = RANK + 1.0
        c.Allreduce(MPI.IN_PLACE, inp)
        check(np.all(inp == N * (N + 1) / 2), f"in place: {inp[:4]}")
    c.Allreduce(x, y, op="avg")
    c.Allreduce(x, y, op="avg")
    check(np.allclose(y, allreduce_ref(x) / N), "avg replayed wrong")


def case_fast_path_is_never_stale() -> str:
    counted = Counted()
    try:
        mpi = ccsynth.Communicator(WORLD)  # 8 B: the default plan's MPI row
        _fast_path_cases(mpi, counted, 2)
        check(mpi.last_algorithm == "mpi", f"ran {mpi.last_algorithm}")
        ring = make_baseline("ring", Collective("allreduce", N, N), fully_connected(N))
        sched = ccsynth.Communicator(WORLD, plan=ring)
        counted.n = 0
        _fast_path_cases(sched, counted, 4 * N)
        check(sched.last_algorithm == ring.name, f"ran {sched.last_algorithm}")
        a, b = np.ones(2, np.float32), np.ones(2, np.float32)  # two call sites alternating: both replayed
        ya, yb = np.empty_like(a), np.empty_like(b)
        counted.n = 0
        for _ in range(3):
            mpi.Allreduce(a, ya)
            mpi.Allreduce(b, yb)
        check(counted.n == 2 and np.all(ya == N) and np.all(yb == N), f"two call sites read {counted.n} times")
        mpi.Free()
        sched.Free()
    finally:
        block_collectives.allreduce = counted.orig
    return ""



CASES = {name[5:]: fn for name, fn in list(globals().items()) if name.startswith("case_")}


def main() -> None:
    for name in sys.argv[1:]:
        WARNINGS.records.clear()
        try:
            note = CASES[name]()
        except Exception as e:
            say(f"CASE {name} FAIL rank {RANK}: {type(e).__name__}: " + " | ".join(str(e).splitlines()))
            raise
        say(f"CASE {name} PASS rank {RANK}" + (f": {note}" if note else ""))


if __name__ == "__main__":
    main()
