"""Worker of tests/test_mpi_algorithm.py: MPI's own collective as a plan algorithm, and the fast path of repeated calls.

``mpiexec -n N python mpi_algorithm_worker.py CASE...`` prints ``CASE name PASS rank r`` (or FAIL, with the
reason) per case; every result is compared with mpi4py's own collective on the same inputs.
"""

from __future__ import annotations

import sys

import numpy as np
from mpi4py import MPI

import ccsynth
from ccsynth.collectives import block_collectives
from ccsynth.collectives.plan import Plan, PlanEntry
from ccsynth.collectives.spec import Collective
from ccsynth.synth.baselines import make_baseline
from ccsynth.synth.default_plan import MPI_BELOW
from ccsynth.topologies import fully_connected

WORLD = MPI.COMM_WORLD
RANK, N = WORLD.Get_rank(), WORLD.Get_size()


def check(cond: bool, what: str) -> None:
    if not cond:
        raise AssertionError(f"rank {RANK}: {what}")


def allreduce_ref(x, op=MPI.SUM):
    out = np.empty_like(x)
    WORLD.Allreduce(x, out, op=op)
    return out


def default_plan_picks_mpi_at_small_sizes() -> str:
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


def plan_naming_mpi_runs_mpi() -> str:
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


def fast_path_is_never_stale() -> str:
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


CASES = {f.__name__: f for f in (default_plan_picks_mpi_at_small_sizes, plan_naming_mpi_runs_mpi,
                                 fast_path_is_never_stale)}


def say(line: str) -> None:
    """One line in one write (the ranks' lines must not interleave)."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def main() -> None:
    for name in sys.argv[1:]:
        try:
            note = CASES[name]()
        except Exception as e:
            say(f"CASE {name} FAIL rank {RANK}: {type(e).__name__}: " + " | ".join(str(e).splitlines()))
            raise
        say(f"CASE {name} PASS rank {RANK}" + (f": {note}" if note else ""))


if __name__ == "__main__":
    main()
