"""Multi-rank checks of the executor and the drop-in communicator.

Run under MPI: ``mpiexec -n K python collectives_worker.py CASE [CASE ...]``.
The cases run in the order given. After each one, every rank prints one
machine-readable line::

    CASE <name> PASS rank <R>[: <note>]
    CASE <name> FAIL rank <R>: <exception type>: <message>

A failed check raises: the rank prints its FAIL line and re-raises, and the
abort handler then aborts the whole job (non-zero exit, no hang: the other
ranks may be waiting inside a collective, so no rank goes on to the next
case). ``tests/test_communicator_mpi.py`` reads these lines to name the case
and the rank that failed, and launches the cases after it again.
Error cases (``err_*``) expect every rank to raise the same ccsynth error: the
note of their PASS line is ``raised NAME: message``, and a job that ran any
of them exits with status 3.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np
from mpi4py import MPI

from ccsynth.collectives.mpi_util import install_abort_handler

install_abort_handler()

from ccsynth.collectives.executor import CompiledSchedule  # noqa: E402
from ccsynth.collectives.plan import Plan, PlanEntry, save_plan  # noqa: E402
from ccsynth.collectives.runtime.channel import Channel, TagSpace  # noqa: E402
from ccsynth.collectives.spec import Collective  # noqa: E402
from ccsynth.communicator import Communicator  # noqa: E402  (the public one: its default plan is the built-in)
from ccsynth.errors import BufferMismatchError, CCSynthError, OpError, PlanError, ScheduleError  # noqa: E402
from ccsynth.synth.baselines import applicable_baselines, make_baseline  # noqa: E402
from ccsynth.synth.default_plan import baseline_chunk_factor  # noqa: E402
from ccsynth.topologies import fully_connected  # noqa: E402

import schedules as hand  # noqa: E402

__all__ = ["CASES", "case_line", "main"]

WORLD = MPI.COMM_WORLD
N = WORLD.Get_size()
RANK = WORLD.Get_rank()
RNG = np.random.default_rng(1234 + 17 * RANK)

DTYPES = ("float16", "float32", "float64", "int32", "int64", "uint8")
OPS = (MPI.SUM, MPI.PROD, MPI.MIN, MPI.MAX)
OP_NAMES = {MPI.SUM.handle: "SUM", MPI.PROD.handle: "PROD", MPI.MIN.handle: "MIN", MPI.MAX.handle: "MAX"}
KINDS = ("allreduce", "allgather", "reduce_scatter", "alltoall", "broadcast", "reduce")
REDUCING = ("allreduce", "reduce_scatter", "reduce")
TOL = {"float16": 2e-2, "float32": 1e-5, "float64": 1e-12}


# ------------------------------------------------------------------ helpers
def say(msg: str) -> None:
    """One line in one write, so that lines of different ranks do not interleave."""
    sys.stdout.write(msg + "\n")
    sys.stdout.flush()


def data(dtype: str, op, n: int) -> np.ndarray:
    dt = np.dtype(dtype)
    if op is not None and op == MPI.PROD:
        if dt.kind == "f":
            return (0.75 + 0.5 * RNG.random(n)).astype(dt)
        return RNG.integers(1, 4, n).astype(dt)
    if dt.kind == "f":
        return (RNG.random(n) * 4 - 1).astype(dt)
    if dt.kind == "u":
        return RNG.integers(0, 256, n).astype(dt)
    return RNG.integers(-1000, 1000, n).astype(dt)


def same(what: str, got, ref) -> None:
    got, ref = np.asarray(got), np.asarray(ref)
    if got.shape != ref.shape:
        raise AssertionError(f"rank {RANK}: {what}: shape {got.shape} != {ref.shape}")
    if got.dtype.kind == "f":
        tol = TOL[got.dtype.name]
        ok = np.allclose(got.astype(np.float64), ref.astype(np.float64), rtol=tol, atol=tol)
    else:
        ok = np.array_equal(got, ref)
    if not ok:
        bad = np.flatnonzero(~np.isclose(got.astype(np.float64), ref.astype(np.float64), rtol=1e-2, atol=1e-2)
                             if got.dtype.kind == "f" else got != ref)
        i = int(bad[0]) if bad.size else 0
        raise AssertionError(
            f"rank {RANK}: {what}: {bad.size} of {got.size} elements differ, first at [{i}]: {got.flat[i]} != {ref.flat[i]}"
        )


def sizes(kind: str, m: int) -> tuple[int, int]:
    """(send elements, recv elements) per rank for ``m`` per block."""
    return {
        "allreduce": (m, m),
        "allgather": (m, N * m),
        "reduce_scatter": (N * m, m),
        "alltoall": (N * m, N * m),
        "broadcast": (m, m),
        "reduce": (m, m),
    }[kind]


def mpi_reference(kind: str, send, m: int, op, root: int):
    _s_len, r_len = sizes(kind, m)
    ref = np.zeros(r_len, send.dtype)
    if kind == "allreduce":
        WORLD.Allreduce(send, ref, op)
    elif kind == "allgather":
        WORLD.Allgather(send, ref)
    elif kind == "reduce_scatter":
        WORLD.Reduce_scatter_block(send, ref, op)
    elif kind == "alltoall":
        WORLD.Alltoall(send, ref)
    elif kind == "broadcast":
        ref[:] = send
        WORLD.Bcast(ref, root)
    elif kind == "reduce":
        WORLD.Reduce(send, ref, op, root)
    return ref


def ours(c: Communicator, kind: str, send, m: int, op, root: int, in_place: bool):
    """Run ``kind`` on ``c``; returns the array to compare (None where nothing is defined)."""
    _s_len, r_len = sizes(kind, m)
    IP = MPI.IN_PLACE
    if kind == "allreduce":
        recv = send.copy() if in_place else np.full(r_len, 77, send.dtype)
        c.Allreduce(IP if in_place else send, recv, op)
        return recv
    if kind == "allgather":
        recv = np.full(r_len, 77, send.dtype)
        if in_place:
            recv[RANK * m:(RANK + 1) * m] = send
        c.Allgather(IP if in_place else send, recv)
        return recv
    if kind == "reduce_scatter":
        if in_place:
            recv = send.copy()
            c.Reduce_scatter_block(IP, recv, op)
            return recv[:m]
        recv = np.full(r_len, 77, send.dtype)
        c.Reduce_scatter_block(send, recv, op)
        return recv
    if kind == "alltoall":
        recv = send.copy() if in_place else np.full(r_len, 77, send.dtype)
        c.Alltoall(IP if in_place else send, recv)
        return recv
    if kind == "broadcast":
        buf = send.copy() if root == RANK else np.full(m, 77, send.dtype)
        c.Bcast(buf, root)
        return buf
    if kind == "reduce":
        if root == RANK:
            recv = send.copy() if in_place else np.full(r_len, 77, send.dtype)
            c.Reduce(IP if in_place else send, recv, op, root)
            return recv
        c.Reduce(send, None, op, root)
        return None
    raise ValueError(kind)


def exercise(c: Communicator, kinds=KINDS, dtypes=DTYPES, ops=OPS, counts=(1, 7, 1001), roots=(0,),
             in_place=(False, True), expect_schedule: bool = True, label: str = "") -> int:
    """Compare every combination against the MPI library; returns the number of checks."""
    n_checks = 0
    for kind in kinds:
        for dtype in dtypes:
            for m in counts:
                for op in (ops if kind in REDUCING else (None,)):
                    for root in (roots if kind in ("broadcast", "reduce") else (0,)):
                        for ip in (in_place if kind != "broadcast" else (False,)):
                            s_len, _ = sizes(kind, m)
                            send = data(dtype, op, s_len)
                            ref = mpi_reference(kind, send, m, op, root)
                            got = ours(c, kind, send, m, op, root, ip)
                            what = (f"{label}{kind} {dtype} count={m} op={OP_NAMES.get(getattr(op, 'handle', None), '-')}"
                                    f" root={root} in_place={ip} via {c.last_algorithm}")
                            if expect_schedule and c.last_algorithm == "mpi":
                                raise AssertionError(f"rank {RANK}: {what}: fell back to MPI, expected a ccsynth schedule")
                            if got is not None:
                                same(what, got, ref)
                            n_checks += 1
    return n_checks


def single_plan(schedule) -> Plan:
    c = schedule.collective
    return Plan((PlanEntry(c.kind, c.n_ranks, 0, None, schedule),))


RAISED: list[str] = []


def expect_error(case: str, exc_type, fn) -> str:
    """Every rank must raise ``exc_type`` (caught here, reported, then the next case runs).

    Returns the note of the case's PASS line, ``raised NAME: message``. The
    worker exits with status 3 at the end if any error case ran, as a program
    that did not catch the error would exit non-zero.
    """
    try:
        fn()
    except exc_type as e:
        RAISED.append(case)
        WORLD.Barrier()  # every rank got here on its own: nobody is left inside a collective
        return f"raised {type(e).__name__}: {e}"
    raise AssertionError(f"rank {RANK}: {case}: expected {exc_type.__name__}, nothing was raised")


# -------------------------------------------------------------------- cases
def case_default() -> str:
    """The default plan (built-in baselines) against MPI for everything."""
    c = Communicator(WORLD)
    k = exercise(c, roots=(0, N - 1))
    # bandwidth-sized messages take the large-message entries of the default plan (ring, Rabenseifner)
    k += exercise(c, kinds=KINDS, dtypes=("float32", "int64"), ops=(MPI.SUM, MPI.MAX), counts=(20011,),
                  roots=(N // 2,), in_place=(False,))
    return f"{k} checks"


def case_default_small() -> None:
    """A lighter sweep for large rank counts."""
    c = Communicator(WORLD)
    exercise(c, dtypes=("float32", "int32", "uint8"), ops=(MPI.SUM, MPI.MAX), counts=(1, 7, 1001), roots=(N - 1,))
    exercise(c, kinds=("allreduce", "allgather", "reduce_scatter"), dtypes=("float64",), ops=(MPI.SUM,),
             counts=(9001,), in_place=(False,))


def case_dataflow() -> None:
    """Small calls through the dataflow loop too (the straight-line path turned off)."""
    c = Communicator(WORLD, static_max_bytes=0)
    exercise(c, dtypes=("float32", "int64"), ops=(MPI.SUM, MPI.MIN), counts=(1, 7, 1001), roots=(N - 1,))
    for s in hand.all_hand_schedules(N):
        c = Communicator(WORLD, plan=single_plan(s), static_max_bytes=0)
        exercise(c, kinds=(s.collective.kind,), dtypes=("int32",), ops=(MPI.SUM,), counts=(1, 7, 301),
                 roots=((s.collective.root + 1) % N,), in_place=(False,), label=f"{s.name} dataflow: ")


def case_replay() -> None:
    """The same arrays call after call (the communicator replays the call): new contents, in place,
    another root, a reshaped array, a new plan -- every result still matches MPI."""
    c = Communicator(WORLD)
    x = np.empty(11, np.int64)
    y = np.empty(11, np.int64)
    ref = np.empty(11, np.int64)
    for it in range(4):
        x[:] = data("int64", MPI.SUM, 11)
        c.Allreduce(x, y, MPI.SUM)
        WORLD.Allreduce(x, ref, MPI.SUM)
        same(f"replayed allreduce {it}", y, ref)
        y[:] = x
        c.Allreduce(MPI.IN_PLACE, y, MPI.SUM)
        same(f"replayed in-place allreduce {it}", y, ref)
        c.Allreduce(x, y, MPI.MAX)  # another op: not a replay of the SUM call
        WORLD.Allreduce(x, ref, MPI.MAX)
        same(f"replayed max allreduce {it}", y, ref)
    b = np.arange(5, dtype=np.float32) * (RANK + 1)
    for root in (0, N - 1, 0):
        b[:] = np.arange(5) * (RANK + 1)
        c.Bcast(b, root)
        same(f"replayed bcast root {root}", b, np.arange(5, dtype=np.float32) * (root + 1))
    g = np.zeros(N * 3, np.int32)
    s2 = np.full(3, RANK, np.int32)
    c.Allgather(s2, g)
    g.shape = (N, 3)  # the same object, another shape: parsed again
    c.Allgather(s2, g)
    same("allgather into a reshaped array", g, np.repeat(np.arange(N, dtype=np.int32), 3).reshape(N, 3))
    c.plan = single_plan(hand.ring_allgather(N))
    c.Allgather(s2, g)
    if c.last_algorithm != hand.ring_allgather(N).name:
        raise AssertionError(f"rank {RANK}: a new plan was ignored: ran {c.last_algorithm}")
    same("allgather after a new plan", g, np.repeat(np.arange(N, dtype=np.int32), 3).reshape(N, 3))


def case_levels_agree() -> None:
    """If one rank's program could not keep to the levels, no rank takes the straight-line path."""
    for doubtful in (False, True):
        cs = CompiledSchedule(hand.ring_allreduce(N), WORLD.Dup())
        if doubtful and RANK == N - 1:
            cs._levels_ok = False  # as if its compile-time rewrites had broken the level order
        x = data("int64", MPI.SUM, 3 * N)
        y = np.empty_like(x)
        cs.run(x, y, "sum")
        ref = np.empty_like(x)
        WORLD.Allreduce(x, ref)
        same(f"ring allreduce (doubtful={doubtful})", y, ref)
        static = next(iter(cs._layouts.values())).static is not None
        if static == doubtful:
            raise AssertionError(f"rank {RANK}: straight-line path {'taken' if static else 'not taken'} "
                                 f"with doubtful={doubtful}")


def case_generations() -> str:
    """Calls across many communicator generations (a window of 4 calls), with failed calls in between whose
    large sends nobody received: every result still matches MPI, and Free() takes in what is left."""
    ch = Channel.build(WORLD, MPI, tags=TagSpace(slice_bits=10, seq_bits=2, sig_bits=6))
    cs = CompiledSchedule(hand.ring_allreduce(N), ch.comm, channel=ch, slice_bytes=1 << 16)
    failed = 0
    for it in range(14):
        m = 3 * N * (1 + it % 3) if it % 4 else 40000 * N  # every 4th call large (many slices)
        x = data("int64", MPI.SUM, m)
        y = np.zeros(m, np.int64)
        if it % 5 == 2:  # rank 1 fails before communicating; the others have started
            if RANK == 1 % N:
                y = y[::-1]  # not contiguous... (a reversed view is neither C nor F contiguous)
            try:
                ch.open_call()
                try:
                    cs.execute(x, y, "sum")
                except BaseException as e:
                    ch.call_failed(e, "allreduce")
                    raise
            except BufferMismatchError:
                failed += 1
                continue
            raise AssertionError(f"rank {RANK}: call {it} should have failed on every rank")
        cs.run(x, y, "sum")
        ref = np.empty_like(x)
        WORLD.Allreduce(x, ref)
        same(f"generation {ch.generation} call {it}", y, ref)
    if ch.generation < 3 or failed != 3:
        raise AssertionError(f"rank {RANK}: {ch.generation} generations, {failed} failed calls")
    ch.close(free=True)
    return f"{ch.generation} generations, {failed} failed calls"


def case_hand() -> None:
    """Hand-built schedules as single-entry plans, with tiny pipeline slices too."""
    for slice_bytes in (1 << 20, 24):
        for s in hand.all_hand_schedules(N):
            c = Communicator(WORLD, plan=single_plan(s), slice_bytes=slice_bytes)
            root = s.collective.root
            if slice_bytes > 64:
                exercise(c, kinds=(s.collective.kind,), dtypes=("float32", "int64"), ops=(MPI.SUM, MPI.MIN),
                         counts=(1, 7, 1001), roots=(root, (root + 1) % N), label=f"{s.name}: ")
            else:
                exercise(c, kinds=(s.collective.kind,), dtypes=("int32",), ops=(MPI.SUM,), counts=(7, 301),
                         roots=((root + 1) % N,), in_place=(False,), label=f"{s.name} slice={slice_bytes}: ")


def case_baselines() -> None:
    """Every baseline that applies on a fully connected topology, as a single-entry plan."""
    topo = fully_connected(N)
    for kind in KINDS:
        for name in applicable_baselines(Collective(kind, N), topo):
            for cf in sorted({1, baseline_chunk_factor(name, kind, N), 2}):
                coll = Collective(kind, N, cf)
                if name not in applicable_baselines(coll, topo):
                    continue
                s = make_baseline(name, coll, topo)
                c = Communicator(WORLD, plan=single_plan(s))
                exercise(c, kinds=(kind,), dtypes=("int32",), ops=(MPI.SUM, MPI.PROD), counts=(1, 7, 1001),
                         roots=(0, N - 1), label=f"baseline {name} c={cf}: ")
                exercise(c, kinds=(kind,), dtypes=("float64",), ops=(MPI.SUM,), counts=(1001,), roots=(N - 1,),
                         in_place=(False,), label=f"baseline {name} c={cf}: ")


def case_executor() -> None:
    """CompiledSchedule directly: many slice sizes, repeated runs, buffer re-binding, avg."""
    comm = WORLD.Dup()
    s = hand.ring_allreduce(N, pipeline=2)
    for sb in (8, 40, 4096, 1 << 20):
        cs = CompiledSchedule(s, comm, slice_bytes=sb)
        for m in ((0, 1, 5, 2 * N + 1, 301) if sb < 64 else (0, 1, 2 * N + 1, 3001, 100003)):
            for it in range(3):
                x = data("int64", MPI.SUM, m)
                y = np.empty(m, np.int64)
                cs.run(x, y, "sum")
                ref = np.empty(m, np.int64)
                WORLD.Allreduce(x, ref)
                same(f"executor ring slice={sb} m={m} run {it}", y, ref)
    cs = CompiledSchedule(s, comm)
    x = data("float64", MPI.SUM, 1001)
    y = np.empty_like(x)
    cs.run(x, y, "avg")
    ref = np.empty_like(x)
    WORLD.Allreduce(x, ref)
    same("executor avg", y, ref / N)
    # a schedule whose roles are rotated (rooted collective with another root)
    b = hand.direct_broadcast(N, root=0)
    cs = CompiledSchedule(b, comm, roles=[(q + 1) % N for q in range(N)])
    buf = np.arange(10, dtype=np.float32) if RANK == 1 % N else np.zeros(10, np.float32)
    cs.run(buf if RANK == 1 % N else None, None if RANK == 1 % N else buf)
    same("rotated broadcast", buf, np.arange(10, dtype=np.float32))
    # profiled runs count waits and kernels
    cs = CompiledSchedule(s, comm, profile=True)
    x = data("float32", MPI.SUM, 4096)
    cs.run(x, np.empty_like(x))
    if cs.stats.runs != 1 or cs.stats.total_s <= 0:
        raise AssertionError(f"rank {RANK}: profile stats not collected: {cs.stats}")


def case_specs() -> None:
    """Buffer specs, string ops, avg, fallbacks, multi-dimensional arrays."""
    c = Communicator(WORLD)
    m = 13
    x = data("float32", MPI.SUM, m)
    ref = np.empty_like(x)
    WORLD.Allreduce(x, ref, MPI.SUM)
    for send_spec, recv_factory in (
        (lambda: [x, MPI.FLOAT], lambda r: [r, MPI.FLOAT]),
        (lambda: (x, MPI.FLOAT), lambda r: (r, MPI.FLOAT)),
        (lambda: [x, m, MPI.FLOAT], lambda r: [r, m, MPI.FLOAT]),
        (lambda: [x, (m, 0), MPI.FLOAT], lambda r: [r, (m, 0), MPI.FLOAT]),
        (lambda: [x, "f"], lambda r: [r, "f"]),
    ):
        r = np.zeros(m, np.float32)
        c.Allreduce(send_spec(), recv_factory(r), MPI.SUM)
        same(f"allreduce spec {send_spec()!r:.40}", r, ref)
    # a raw byte buffer described by its MPI datatype
    raw = bytearray(m * 4)
    c.Allreduce([x, MPI.FLOAT], [raw, MPI.FLOAT], MPI.SUM)
    same("allreduce into bytearray", np.frombuffer(raw, np.float32), ref)
    # an explicit count smaller than the buffer: only the first count elements take part
    big = np.full(m + 5, -1.0, np.float32)
    c.Allreduce([x, 7, MPI.FLOAT], [big, 7, MPI.FLOAT], MPI.SUM)
    ref7 = np.empty(7, np.float32)
    WORLD.Allreduce([x, 7, MPI.FLOAT], ref7, MPI.SUM)
    same("allreduce explicit count", big[:7], ref7)
    if not np.all(big[7:] == -1):
        raise AssertionError(f"rank {RANK}: allreduce wrote past the explicit count")
    # allgather: an explicit receive count is per rank, as in mpi4py
    r = np.zeros(N * 3, np.int32)
    c.Allgather([np.arange(3, dtype=np.int32) + RANK, 3, MPI.INT], [r, 3, MPI.INT])
    same("allgather per-rank count", r, np.concatenate([np.arange(3, dtype=np.int32) + q for q in range(N)]))
    # 2-D arrays (C and Fortran order) are flat buffers in memory order
    a2 = np.asfortranarray(data("float64", MPI.SUM, 12).reshape(3, 4))
    out2 = np.zeros((3, 4), order="F")
    c.Allreduce(a2, out2)
    ref2 = np.zeros((3, 4), order="F")
    WORLD.Allreduce(a2, ref2)
    same("allreduce fortran 2-D", out2, ref2)
    # ccsynth op names and avg
    for name, mop in (("sum", MPI.SUM), ("MAX", MPI.MAX), ("min", MPI.MIN), ("prod", MPI.PROD)):
        r = np.zeros(m, np.float32)
        c.Allreduce(x, r, op=name)
        rr = np.zeros(m, np.float32)
        WORLD.Allreduce(x, rr, mop)
        same(f"allreduce op={name}", r, rr)
    r = np.zeros(m, np.float64)
    xd = x.astype(np.float64)
    c.Allreduce(xd, r, op="avg")
    rr = np.zeros(m)
    WORLD.Allreduce(xd, rr)
    same("allreduce avg", r, rr / N)
    r = np.zeros(m, np.float64)
    c.Reduce_scatter_block(np.tile(xd, N), r, op="avg")
    same("reduce_scatter avg", r, rr / N)
    # fallbacks: an op and a dtype without ccsynth kernels still give MPI's answer
    xi = data("int32", MPI.SUM, m)
    r, rr = np.zeros(m, np.int32), np.zeros(m, np.int32)
    c.Allreduce(xi, r, MPI.BAND)
    WORLD.Allreduce(xi, rr, MPI.BAND)
    same("allreduce BAND (fallback)", r, rr)
    if c.last_algorithm != "mpi":
        raise AssertionError(f"rank {RANK}: BAND should fall back to MPI, ran {c.last_algorithm}")
    x16 = RNG.integers(-100, 100, m).astype(np.int16)
    r, rr = np.zeros(m, np.int16), np.zeros(m, np.int16)
    c.Allreduce(x16, r, MPI.SUM)
    WORLD.Allreduce(x16, rr, MPI.SUM)
    same("allreduce int16 (fallback)", r, rr)
    # non-reducing collectives move any dtype (complex here) through a schedule
    xc = (RNG.random(5) + 1j * RNG.random(5)).astype(np.complex128)
    r = np.zeros(5 * N, np.complex128)
    c.Allgather(xc, r)
    rr = np.zeros(5 * N, np.complex128)
    WORLD.Allgather(xc, rr)
    if not np.array_equal(r, rr) or c.last_algorithm == "mpi":
        raise AssertionError(f"rank {RANK}: complex allgather wrong or not scheduled ({c.last_algorithm})")
    # delegation to the wrapped communicator
    if c.Get_rank() != RANK or c.Get_size() != N or c.allreduce(1) != N:
        raise AssertionError("delegation to the wrapped communicator failed")
    c.Barrier()
    # a plan that covers only small sizes falls back above them
    small = Plan((PlanEntry("allreduce", N, 0, 64, hand.ring_allreduce(N)),))
    c2 = Communicator(WORLD, plan=small)
    r = np.zeros(100, np.float64)
    c2.Allreduce(np.ones(100), r)
    if c2.last_algorithm != "mpi" or not np.all(r == N):
        raise AssertionError(f"rank {RANK}: uncovered size should use MPI ({c2.last_algorithm})")
    c2.Allreduce(np.ones(4), r[:4])
    if c2.last_algorithm == "mpi" or not np.all(r[:4] == N):
        raise AssertionError(f"rank {RANK}: covered size should use the plan ({c2.last_algorithm})")
    # a plan file path works as well as a Plan object
    path = os.path.join(os.environ.get("CCSYNTH_TMP", "/tmp"), f"ccsynth_plan_{os.getpid()}.json")
    if RANK == 0:
        save_plan(single_plan(hand.ring_allgather(N)), path)
    path = WORLD.bcast(path)
    WORLD.Barrier()
    c3 = Communicator(WORLD, plan=path)
    r = np.zeros(N * 2, np.int64)
    c3.Allgather(np.array([RANK, -RANK], np.int64), r)
    same("allgather from plan file", r, np.array([v for q in range(N) for v in (q, -q)], np.int64))
    WORLD.Barrier()
    if RANK == 0:
        os.remove(path)


def case_err_world() -> str:
    """A schedule built for another rank count: ScheduleError on every rank, before communicating."""
    other = hand.ring_allreduce(N + 1)
    return expect_error("err_world", ScheduleError, lambda: CompiledSchedule(other, WORLD))


def case_err_settings() -> str:
    """Ranks that would cut messages differently: CCSynthError on every rank when the Communicator is built."""
    return expect_error("err_settings", CCSynthError, lambda: Communicator(WORLD, slice_bytes=4096 if RANK == 0 else None))


def case_err_slices() -> str:
    """A bare CompiledSchedule with another slice size on one rank: ScheduleError on every rank at the first run."""
    cs = CompiledSchedule(hand.ring_allreduce(N), WORLD.Dup(), slice_bytes=64 if RANK == 0 else 128)
    return expect_error("err_slices", ScheduleError, lambda: cs.run(np.ones(4 * N), np.zeros(4 * N)))


def case_err_plan_world() -> str:
    """The same through a Communicator whose plan holds only schedules for another size: an unusable
    plan is a PlanError on every rank, in the constructor (not a silent fallback to MPI)."""
    return expect_error("err_plan_world", PlanError,
                        lambda: Communicator(WORLD, plan=single_plan(hand.ring_allreduce(N + 1)), fallback=False))


def case_err_mismatch() -> str:
    c = Communicator(WORLD)
    return expect_error("err_mismatch", BufferMismatchError, lambda: c.Allreduce(np.ones(5, np.float32), np.zeros(6, np.float32)))


def case_err_dtype() -> str:
    c = Communicator(WORLD)
    return expect_error("err_dtype", BufferMismatchError, lambda: c.Allgather(np.ones(5, np.float32), np.zeros(5 * N, np.float64)))


def case_err_noncontig() -> str:
    c = Communicator(WORLD)
    x = np.ones(20, np.float32)[::2]
    return expect_error("err_noncontig", BufferMismatchError, lambda: c.Allreduce(x, np.zeros(10, np.float32)))


def case_err_op() -> str:
    c = Communicator(WORLD)
    return expect_error("err_op", OpError, lambda: c.Allreduce(np.ones(4), np.zeros(4), op="xor"))


def case_err_avg_int() -> str:
    c = Communicator(WORLD)
    return expect_error("err_avg_int", OpError, lambda: c.Allreduce(np.ones(4, np.int32), np.zeros(4, np.int32), op="avg"))


def case_err_debug_count() -> str:
    """debug=True: rank 0 passes a different count; every rank raises instead of hanging or truncating."""
    c = Communicator(WORLD, debug=True)
    m = 8 if RANK else 9
    return expect_error("err_debug_count", BufferMismatchError, lambda: c.Allreduce(np.ones(m), np.zeros(m)))


def case_one_rank() -> None:
    """Only the last rank makes a mistake: its unhandled error aborts the job (the others would wait)."""
    c = Communicator(WORLD)
    m = 6 if RANK == N - 1 else 5
    c.Allreduce(np.ones(5), np.zeros(m))  # rank N-1 raises BufferMismatchError; the rest block until the abort
    raise AssertionError("unreachable: the job should have been aborted")


def case_one_rank_count() -> None:
    """Rank 0 alone passes one element more (no debug check): a peer gets a truncated message,
    raises BufferMismatchError, and the abort handler ends the job."""
    c = Communicator(WORLD)
    m = 9 if RANK == 0 else 8
    c.Allreduce(np.ones(m), np.zeros(m))
    WORLD.Barrier()  # ranks that saw no error wait here until the abort
    raise AssertionError("unreachable: the job should have been aborted")


def _unreachable(what: str) -> None:
    # A rank that finished without an error waits here until the abort; getting past it would
    # mean that every rank accepted messages of the wrong length.
    say(f"rank {RANK}: {what} returned")
    WORLD.Barrier()
    raise AssertionError(f"unreachable: {what} with different counts should have aborted the job")


def case_short_allreduce() -> None:
    """The last rank passes one element fewer (MPI accepts the short messages it sends):
    a peer sees fewer bytes than it expects and raises BufferMismatchError."""
    c = Communicator(WORLD)
    m = 7 if RANK == N - 1 else 8
    c.Allreduce(np.ones(m), np.zeros(m))
    _unreachable("allreduce")


def case_short_allgather() -> None:
    """The same for allgather (raw bytes): the last rank contributes one int32 fewer."""
    c = Communicator(WORLD)
    m = 3 if RANK == N - 1 else 4
    c.Allgather(np.ones(m, np.int32), np.zeros(N * m, np.int32))
    _unreachable("allgather")


def case_short_multislice() -> None:
    """Messages of several pipeline slices, the short one an exact multiple of the slice size
    (8 float64 per slice: 16 vs 32 elements). Its last, empty slice is what gives it away."""
    c = Communicator(WORLD, slice_bytes=64)
    m = 16 if RANK == 0 else 32
    c.Allreduce(np.ones(m), np.zeros(m))
    _unreachable("multi-slice allreduce")


def case_short_empty_chunks() -> None:
    """A ring with one chunk per rank and fewer elements than chunks on rank 0: its empty chunks
    still travel as empty messages, so the peers notice."""
    c = Communicator(WORLD, plan=single_plan(hand.ring_allreduce(N)))  # chunk factor N
    m = 1 if RANK == 0 else N
    c.Allreduce(np.ones(m), np.zeros(m))
    _unreachable("allreduce with empty chunks")


def case_short_dataflow() -> None:
    """The dataflow loop (straight-line path off) checks message lengths of small calls as well."""
    c = Communicator(WORLD, static_max_bytes=0)
    m = 7 if RANK == N - 1 else 8
    c.Allreduce(np.ones(m), np.zeros(m))
    _unreachable("allreduce through the dataflow loop")


def case_short_profiled() -> None:
    """The profiled run loop (and polling instead of blocking) checks message lengths as well."""
    cs = CompiledSchedule(hand.ring_allreduce(N), WORLD.Dup(), profile=True, wait="yield", static_max_bytes=0)
    m = 5 * N - 1 if RANK == N - 1 else 5 * N
    cs.run(np.ones(m), np.zeros(m))
    _unreachable("profiled allreduce")


def case_short_static_profiled() -> None:
    """The same through the straight-line program (profiled, polling)."""
    cs = CompiledSchedule(hand.ring_allreduce(N), WORLD.Dup(), profile=True, wait="yield")
    m = 5 * N - 1 if RANK == N - 1 else 5 * N
    cs.run(np.ones(m), np.zeros(m))
    _unreachable("profiled straight-line allreduce")


CASES = {name[5:]: fn for name, fn in globals().items() if name.startswith("case_")}


def case_line(name: str, status: str, detail: str | None = None) -> str:
    """``CASE <name> PASS|FAIL rank <R>[: <detail>]``, always one line."""
    line = f"CASE {name} {status} rank {RANK}"
    if detail:
        line += ": " + " | ".join(str(detail).splitlines())
    return line


def main() -> None:
    names = sys.argv[1:] or ["default"]
    unknown = [name for name in names if name not in CASES]
    if unknown:
        raise SystemExit(f"unknown case(s) {', '.join(unknown)}; cases: {', '.join(CASES)}")
    for name in names:
        try:
            note = CASES[name]()
        except Exception as e:
            say(case_line(name, "FAIL", f"{type(e).__name__}: {e}"))
            raise  # the abort handler ends the job: other ranks may be waiting inside a collective
        say(case_line(name, "PASS", note))
    if RAISED:
        sys.exit(3)


if __name__ == "__main__":
    main()
