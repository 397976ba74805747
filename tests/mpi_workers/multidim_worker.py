"""mpiexec worker: multi-dimension collectives through ``ccsynth.Communicator(topology=..., scheduler=...)``.

Usage: ``mpiexec -n N python multidim_worker.py TOPOLOGY [SCHEDULER ...]``; a scheduler ``file:PATH`` runs the
phase plan file PATH instead (``ccsynth.Communicator(comm, plan=PATH)``). For every scheduler it runs
allreduce (sum, max, avg), reduce-scatter and allgather on several dtypes and odd counts, in place and not,
and compares each result with MPI's own collective; then checks that every rank derived the same plans, that
one rank's bad buffer raises on every rank (no hang), and that the communicator still works afterwards. Prints
``CASE <name> PASS|FAIL rank <r>: reason`` lines; exits 1 on a failure.
"""

from __future__ import annotations

import sys
import traceback

import numpy as np
from mpi4py import MPI

import ccsynth
from ccsynth.errors import BufferMismatchError, CCSynthError

COUNTS = (1, 7, 1001, 65537)
DTYPES = (np.float64, np.float32, np.int32, np.int64)
MPI_OPS = {"sum": MPI.SUM, "max": MPI.MAX}


def data(rank: int, n: int, dtype, salt: int) -> np.ndarray:
    """Exact in every dtype: small integers."""
    rng = np.random.default_rng(1000 * salt + rank)
    return rng.integers(-50, 50, size=n).astype(dtype)


def check(name: str, ok: bool, why: str = "") -> bool:
    rank = MPI.COMM_WORLD.Get_rank()
    # one write per line: ranks share the pipe, and a line written in pieces can interleave with another's
    sys.stdout.write(f"CASE {name} {'PASS' if ok else 'FAIL'} rank {rank}" + (f": {why}" if why else "") + "\n")
    sys.stdout.flush()
    return ok


def multidim(comm: ccsynth.Communicator) -> bool:
    """Whether the last call ran a multi-dimension schedule (not MPI's own collective as the fallback)."""
    return comm.last_algorithm.startswith("multidim:")


def collectives(comm: ccsynth.Communicator, tag: str) -> bool:
    world = MPI.COMM_WORLD
    n, rank = world.Get_size(), world.Get_rank()
    good = True
    salt = 0
    for dtype in DTYPES:
        for count in COUNTS:
            salt += 1
            for opname, mop in MPI_OPS.items():
                x = data(rank, count, dtype, salt)
                want, got = np.empty_like(x), np.empty_like(x)
                world.Allreduce(x, want, op=mop)
                comm.Allreduce(x, got, op=mop)
                good &= check(f"{tag}-allreduce-{opname}-{np.dtype(dtype).name}-{count}", np.array_equal(want, got)
                              and multidim(comm), comm.last_algorithm)
            x = data(rank, n * count, dtype, salt)
            want, got = np.empty(count, dtype), np.empty(count, dtype)
            world.Reduce_scatter_block(x, want, op=MPI.SUM)
            comm.Reduce_scatter_block(x, got, op=MPI.SUM)
            good &= check(f"{tag}-reduce_scatter-{np.dtype(dtype).name}-{count}", np.array_equal(want, got)
                          and multidim(comm), comm.last_algorithm)
            x = data(rank, count, dtype, salt)
            want, got = np.empty(n * count, dtype), np.empty(n * count, dtype)
            world.Allgather(x, want)
            comm.Allgather(x, got)
            good &= check(f"{tag}-allgather-{np.dtype(dtype).name}-{count}", np.array_equal(want, got)
                          and multidim(comm), comm.last_algorithm)
    # in place, and avg
    x = data(rank, 999, np.float64, 77)
    want = np.empty_like(x)
    world.Allreduce(x, want, op=MPI.SUM)
    buf = x.copy()
    comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
    good &= check(f"{tag}-allreduce-inplace", np.array_equal(buf, want) and multidim(comm), comm.last_algorithm)
    comm.Allreduce(x, buf, op="avg")
    good &= check(f"{tag}-allreduce-avg", np.allclose(buf, want / n) and multidim(comm), comm.last_algorithm)
    big = data(rank, 5 * n + 3, np.float32, 78)
    mine = big[rank * 5:(rank + 1) * 5].copy()
    want = np.empty(5 * n, np.float32)
    world.Allgather(mine, want)
    out = np.zeros(5 * n, np.float32)
    out[rank * 5:(rank + 1) * 5] = mine
    comm.Allgather(MPI.IN_PLACE, out)
    good &= check(f"{tag}-allgather-inplace", np.array_equal(out, want) and multidim(comm), comm.last_algorithm)
    return good


def same_plans(comm: ccsynth.Communicator, tag: str) -> bool:
    """Every rank derived the same plans: those of every call above (the planner keeps one per collective
    and size, 8 B to 2 MiB) and, planned here, the three collectives at 8 B and 1 MiB. (Not at 64 MiB: an LP
    plan of the three there costs each rank about 9 s, and the size changes no input the ranks could
    disagree on.)"""
    planner = comm._planner  # the test looks inside: every rank's plans must be identical
    kept = getattr(planner, "_plans", None)  # a file's phases (FilePhases) keep the other collectives' plans
    kept = getattr(getattr(planner, "_others", None), "_plans", {}) if kept is None else kept
    keys = {(k, s) for k in ("allreduce", "reduce_scatter", "allgather") for s in (8, 1 << 20)} | set(kept)
    sigs = [(key, planner.plan(*key).signature()) for key in sorted(keys)]
    every = MPI.COMM_WORLD.allgather(sigs)
    return check(f"{tag}-same-plans", len(sigs) > 6 and all(s == every[0] for s in every), f"{len(sigs)} plans")


def failure_everywhere(comm: ccsynth.Communicator, tag: str) -> bool:
    """Rank 1 passes a short buffer: every rank raises, then the communicator works again."""
    world = MPI.COMM_WORLD
    rank = world.Get_rank()
    x = np.ones(1000)
    out = np.empty(999 if rank == 1 else 1000)
    raised = None
    try:
        comm.Allreduce(x, out, op=MPI.SUM)
    except CCSynthError as e:
        raised = e
    ok = raised is not None and (rank != 1 or isinstance(raised, BufferMismatchError))
    good = check(f"{tag}-error-everywhere", ok, repr(raised))
    y = np.full(1001, float(rank))
    got = np.empty_like(y)
    comm.Allreduce(y, got, op=MPI.SUM)
    n = world.Get_size()
    return good & check(f"{tag}-after-error", bool(np.all(got == n * (n - 1) / 2)) and multidim(comm),
                        comm.last_algorithm)


def main() -> int:
    topology = sys.argv[1]
    schedulers = sys.argv[2:] or ["themis"]
    good = True
    for sched in schedulers:
        tag = f"{topology.split('@')[0]}-{sched.split('/')[-1]}"
        try:
            if sched.startswith("file:"):
                comm = ccsynth.Communicator(MPI.COMM_WORLD, plan=sched[len("file:"):])
            else:
                comm = ccsynth.Communicator(MPI.COMM_WORLD, topology=topology, scheduler=sched)
            good &= collectives(comm, tag)
            good &= same_plans(comm, tag)
            good &= failure_everywhere(comm, tag)
            comm.Free()
        except Exception:
            good = check(f"{tag}-crashed", False, traceback.format_exc().replace("\n", " | "))
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
