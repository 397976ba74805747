"""mpiexec worker for tests/test_reshard_mpi.py: random resharding round trips, and bad input.

``reshard_worker.py SEED COUNT`` runs COUNT random cases (meshes of at most
the communicator's size, same, overlapping or disjoint ranks; random Alpa
specs; uneven shapes; every planner) and prints ``CASE <i> PASS rank <r>``;
``reshard_worker.py bad`` checks that a wrong shard on one rank raises on
every rank (and nobody hangs). ``reshard_worker.py arraylike SEED COUNT``
passes the shards as array-likes (``__array_interface__`` only: the path a
torch CPU tensor or any buffer takes), ``reshard_worker.py staged SEED
COUNT`` runs the plans through :meth:`ReshardProgram.run_staged` with a
NumPy :class:`Stager` standing in for pinned host memory (the host-side
logic device shards take on a library that is not CUDA-aware).
``reshard_worker.py alltoallv SEED COUNT`` runs the Alltoallv plan kind (and
``auto`` without and with a topology) on fixed meshes and specs and COUNT
random ones, with contiguous and strided shards and ``out=`` views, and
checks ``last_plan()``. ``reshard_worker.py communicator SEED COUNT`` passes a ``ccsynth.Communicator``
as ``comm`` to every entry point that takes one (``ccsynth.reshard``,
:meth:`ReshardProgram.run`, the resharding bench, the tuner's timer, the
multi-dimension runner) and checks the results against NumPy.
"""

from __future__ import annotations

import itertools
import random
import sys

import numpy as np
from mpi4py import MPI

import ccsynth
from ccsynth.collectives.staging import Stager
from ccsynth.errors import BufferMismatchError, LayoutError, PeerError
from ccsynth.synth.reshard import DeviceMesh, ReshardTask, TensorLayout, plan_reshard
from ccsynth.synth.reshard.program import rank_program as ReshardProgram

comm = MPI.COMM_WORLD
rank, size = comm.rank, comm.size


def random_spec(rng: random.Random, ndim: int, mesh_ndim: int) -> str:
    axes = list(range(mesh_ndim))
    rng.shuffle(axes)
    toks = ["R"] * ndim
    for a in axes:
        if rng.random() < 0.6:
            d = rng.randrange(ndim)
            toks[d] = ("S" if toks[d] == "R" else toks[d]) + str(a)
    return ",".join(toks)


def random_mesh(rng: random.Random, n: int) -> tuple[int, ...]:
    shapes = [s for k in (1, 2) for s in itertools.product(range(1, n + 1), repeat=k) if np.prod(s) <= n]
    return rng.choice(shapes)


def case(rng: random.Random):
    ndim = rng.choice((1, 2, 3))
    shape = tuple(rng.randint(1, 9) for _ in range(ndim))
    sm, dm = random_mesh(rng, size), random_mesh(rng, size)
    a, b = int(np.prod(sm)), int(np.prod(dm))
    src_ranks = rng.sample(range(size), a)
    dst_ranks = rng.sample(range(size), b)
    src = TensorLayout.of(shape, DeviceMesh(sm, src_ranks), random_spec(rng, ndim, len(sm)))
    dst = TensorLayout.of(shape, DeviceMesh(dm, dst_ranks), random_spec(rng, ndim, len(dm)))
    dtype = rng.choice(("float32", "int64", "float64"))
    planner = rng.choice(("naive", "broadcast", "milp", "alltoallv", "auto"))
    return shape, src, dst, dtype, planner


def run_cases(seed: int, count: int) -> int:
    rng = random.Random(seed)
    for i in range(count):
        shape, src, dst, dtype, planner = case(rng)
        full = np.arange(int(np.prod(shape)), dtype=dtype).reshape(shape)
        tile = src.tile_of_rank(rank)
        mine = None if tile is None else np.ascontiguousarray(full[tuple(slice(a, b) for a, b in src.box(tile))])
        out = ccsynth.reshard(mine, src=src, dst=dst, comm=comm, dtype=dtype, planner=planner)
        dtile = dst.tile_of_rank(rank)
        want = None if dtile is None else full[tuple(slice(a, b) for a, b in dst.box(dtile))]
        ok = (out is None) if want is None else (out is not None and out.shape == want.shape and np.array_equal(out, want))
        what = f"{shape} {dtype} {src.describe()} ranks {list(src.mesh.ranks)} -> {dst.describe()} ranks {list(dst.mesh.ranks)} ({planner})"
        print(f"CASE {i} {'PASS' if ok else 'FAIL'} rank {rank}: {what}", flush=True)
        if not ok:
            return 1
        # the cached plan again (second call: new call number, same result)
        out2 = ccsynth.reshard(mine, src=src, dst=dst, comm=comm, dtype=dtype, planner=planner)
        if want is not None and not np.array_equal(out2, want):
            print(f"CASE {i} FAIL rank {rank}: second call differs", flush=True)
            return 1
    return 0


class HostArrayLike:
    """An array-like exposing its memory only through ``__array_interface__`` (no DLPack, no CUDA interface)."""

    def __init__(self, a: np.ndarray):
        self.a = a

    @property
    def __array_interface__(self):
        return self.a.__array_interface__


def run_wrapped(seed: int, count: int, mode: str) -> int:
    rng = random.Random(seed)
    stager = Stager(host_empty=np.empty, to_host=np.copyto, to_device=np.copyto)
    for i in range(count):
        shape, src, dst, dtype, planner = case(rng)
        planner = "naive" if planner == "milp" else planner  # every rank plans alike without the MILP's time limit
        full = np.arange(int(np.prod(shape)), dtype=dtype).reshape(shape)
        tile = src.tile_of_rank(rank)
        # a source shard that is not C-contiguous (Fortran order), a destination view with strides
        mine = None if tile is None else np.asfortranarray(full[tuple(slice(a, b) for a, b in src.box(tile))])
        dtile = dst.tile_of_rank(rank)
        want = None if dtile is None else full[tuple(slice(a, b) for a, b in dst.box(dtile))]
        big = None if want is None else np.full(tuple(2 * n for n in want.shape), -1, dtype)
        view = None if big is None else big[tuple(slice(None, None, 2) for _ in want.shape)]
        if mode == "arraylike":
            got = ccsynth.reshard(None if mine is None else HostArrayLike(np.ascontiguousarray(mine)), src=src,
                                  dst=dst, comm=comm, dtype=dtype, planner=planner,
                                  out=None if want is None else HostArrayLike(np.empty(want.shape, dtype)))
            result = None if got is None else got.a
        else:
            task = ReshardTask(shape, dtype, src, dst)
            prog = ReshardProgram(plan_reshard(task, n_ranks=size, planner=planner), rank)
            use_view = want is not None and i % 2 == 0
            result = prog.run_staged(comm, mine, view if use_view else None, stager, call=i, stride=1000)
            if use_view and result is not view:
                result = None
        ok = (result is None) if want is None else (result is not None and np.array_equal(result, want))
        if mode == "staged" and want is not None and i % 2 == 0:
            ok = ok and bool((big[1::2] == -1).all())  # nothing written outside the view
        print(f"CASE {i} {'PASS' if ok else 'FAIL'} rank {rank}: {mode} {shape} {dtype} {src.describe()} -> "
              f"{dst.describe()} ({planner})", flush=True)
        if not ok:
            return 1
    return 0


def with_communicator(seed: int, count: int) -> int:
    """Every entry point that takes ``comm`` also takes a ``ccsynth.Communicator`` (it runs on the comm it wraps)."""
    from ccsynth.bench.reshard import run_reshard_bench
    from ccsynth.bench.tune import mpi_timer
    from ccsynth.collectives.multidim import PhasedRunner
    from ccsynth.synth.baselines import make_baseline

    wrapped = ccsynth.Communicator(comm)
    rng = random.Random(seed)
    for i in range(count):
        shape, src, dst, dtype, planner = case(rng)
        planner = "naive" if planner == "milp" else planner
        full = np.arange(int(np.prod(shape)), dtype=dtype).reshape(shape)
        tile = src.tile_of_rank(rank)
        mine = None if tile is None else np.ascontiguousarray(full[tuple(slice(a, b) for a, b in src.box(tile))])
        dtile = dst.tile_of_rank(rank)
        want = None if dtile is None else full[tuple(slice(a, b) for a, b in dst.box(dtile))]
        got = [ccsynth.reshard(mine, src=src, dst=dst, comm=wrapped, dtype=dtype, planner=planner) for _ in range(2)]
        prog = ReshardProgram(plan_reshard(ReshardTask(shape, dtype, src, dst), n_ranks=size, planner=planner), rank)
        got.append(prog.run(wrapped, mine, call=i, stride=1000))
        ok = all((g is None) if want is None else (g is not None and np.array_equal(g, want)) for g in got)
        print(f"CASE comm{i} {'PASS' if ok else 'FAIL'} rank {rank}: {shape} {src.describe()} -> {dst.describe()} "
              f"({planner})", flush=True)
        if not ok:
            return 1
    task = ReshardTask((8, 6), "float32", TensorLayout.of((8, 6), DeviceMesh((size,)), "S0,R"),
                       TensorLayout.of((8, 6), DeviceMesh((size,)), "R,S0"))
    rows = list(run_reshard_bench(wrapped, task, ["naive", "mpi"], iters=1, warmup=0, validate=True))
    ok = [r.valid for r in rows] == [True, True]
    print(f"CASE commbench {'PASS' if ok else 'FAIL'} rank {rank}: {rows}", flush=True)
    ring = make_baseline("ring", ccsynth.Collective("allgather", size), ccsynth.get_topology(f"ring:{size}"))
    times = mpi_timer(wrapped, iters=2, warmup=0, rounds=1)(ring, ring, 1024)
    ok = len(times) == 2 and all(t > 0 for t in times)
    print(f"CASE commtune {'PASS' if ok else 'FAIL'} rank {rank}: {times}", flush=True)
    runner = PhasedRunner(wrapped, (size,))
    ok = runner.n == size
    print(f"CASE commphases {'PASS' if ok else 'FAIL'} rank {rank}", flush=True)
    try:
        ccsynth.reshard(mine, src=src, dst=dst, comm="world", dtype=dtype)
    except ccsynth.CCSynthError as e:
        print(f"CASE commtype {'PASS' if 'intracommunicator' in str(e) else 'FAIL'} rank {rank}: {e}", flush=True)
    return 0


FIXED = (  # (shape, source mesh, source spec, destination mesh, destination spec)
    ((16, 12, 4), (2, 2), "S0,R,R", (2, 2), "R,S1,R"),
    ((16, 12), (1, 2), "S1,R", (2, 1), "S0,R"),
    ((9, 7), (2,), "S0,R", (2,), "R,S0"),
    ((8, 6, 2), (2, 2), "S01,R,R", (2, 2), "R,S01,R"),
    ((10, 4), (2, 2), "R,R", (2, 2), "S0,S1"),
    ((12, 6), (2, 2), "S0,S1", (2, 2), "R,R"),
)


def alltoallv_cases(seed: int, count: int) -> int:
    """The Alltoallv plan kind, and ``auto``, against NumPy on fixed and random layouts (see the module doc)."""
    from ccsynth.synth.reshard.api import last_plan
    from ccsynth.topologies import fully_connected

    rng = random.Random(seed)
    cases = []
    for shape, sm, sspec, dm, dspec in FIXED:
        if int(np.prod(sm)) <= size and int(np.prod(dm)) <= size:
            cases.append((shape, TensorLayout.of(shape, DeviceMesh(sm), sspec), TensorLayout.of(shape, DeviceMesh(dm), dspec)))
    cases += [case(rng)[:3] for _ in range(count)]
    topo = fully_connected(size)
    fails = 0
    if rank == 0:
        print(f"A2AV CASES {3 * len(cases)}", flush=True)
    for i, (shape, src, dst) in enumerate(cases):
        dtype = ("float32", "int64", "float64", "int16")[i % 4]
        full = np.arange(int(np.prod(shape))).astype(dtype).reshape(shape)
        tile = src.tile_of_rank(rank)
        mine = None if tile is None else np.ascontiguousarray(full[tuple(slice(a, b) for a, b in src.box(tile))])
        if mine is not None and i % 3 == 2:
            mine = np.asfortranarray(mine)  # a strided source shard
        dtile = dst.tile_of_rank(rank)
        want = None if dtile is None else full[tuple(slice(a, b) for a, b in dst.box(dtile))]
        for planner, t in (("alltoallv", None), ("auto", None), ("auto", topo)):
            view = None
            if want is not None and i % 2 == 1:
                big = np.full(tuple(2 * n for n in want.shape), -1, dtype)
                view = big[tuple(slice(None, None, 2) for _ in want.shape)]  # a strided out=
            got = [ccsynth.reshard(mine, src=src, dst=dst, comm=comm, dtype=dtype, planner=planner, topology=t,
                                   out=view) for _ in range(2)]
            info = last_plan()
            ok = all((g is None) if want is None else (g is not None and np.array_equal(g, want)) for g in got)
            ok = ok and (view is None or got[0] is view)
            if planner == "alltoallv" or t is None:
                ok = ok and info["executor"] == "alltoallv" and info["planner"] == "alltoallv"
            else:
                ok = ok and info["planner"] in info["candidates_us"] and info["predicted_us"] == min(
                    info["candidates_us"].values())
            fails += not ok
            print(f"CASE a2av{i} {'PASS' if ok else 'FAIL'} rank {rank}: {shape} {dtype} {src.describe()} -> "
                  f"{dst.describe()} ({planner}{' on ' + t.name if t else ''}: ran {info.get('planner')})", flush=True)
    return int(fails > 0)


def bad() -> int:
    src = TensorLayout.of((8, 4), DeviceMesh((size,)), "S0,R")
    dst = TensorLayout.of((8, 4), DeviceMesh((size,)), "R,S0")
    shape = src.local_shape(rank)
    if rank == size - 1:
        shape = (shape[0] + 1, shape[1])
    try:
        ccsynth.reshard(np.zeros(shape, np.float32), src=src, dst=dst, comm=comm)
    except (BufferMismatchError, PeerError) as e:
        want = BufferMismatchError if rank == size - 1 else PeerError
        print(f"CASE bad {'PASS' if isinstance(e, want) else 'FAIL'} rank {rank}: {type(e).__name__}: {e}", flush=True)
    else:
        print(f"CASE bad FAIL rank {rank}: no error", flush=True)
        return 1
    # a cached alltoallv plan runs while the agreement completes: a bad shard on one rank (after the lookup) and a
    # bad argument on another (before it) still raise on every rank, and nobody hangs
    good = np.zeros(src.local_shape(rank), np.float32)
    ccsynth.reshard(good, src=src, dst=dst, comm=comm, planner="alltoallv")
    for what, mine, staging in (("cachedbad", np.zeros(shape, np.float32), "auto"),
                                ("cachedearly", good, "bogus" if rank == 0 else "auto")):
        want = {size - 1: BufferMismatchError} if what == "cachedbad" else {0: LayoutError}
        try:
            ccsynth.reshard(mine, src=src, dst=dst, comm=comm, planner="alltoallv", staging=staging)
        except (BufferMismatchError, LayoutError, PeerError) as e:
            ok = isinstance(e, want.get(rank, PeerError))
            print(f"CASE {what} {'PASS' if ok else 'FAIL'} rank {rank}: {type(e).__name__}: {e}", flush=True)
        else:
            print(f"CASE {what} FAIL rank {rank}: no error", flush=True)
            return 1
    out = ccsynth.reshard(good, src=src, dst=dst, comm=comm, planner="alltoallv")  # and the plan still runs
    print(f"CASE cachedagain {'PASS' if out.shape == dst.local_shape(rank) else 'FAIL'} rank {rank}", flush=True)
    try:
        ccsynth.reshard(np.zeros(shape, np.float32), src=(((size,), "S0,S0")), dst=dst, comm=comm, shape=(8, 4))
    except LayoutError as e:
        print(f"CASE badspec PASS rank {rank}: {e}", flush=True)
    return 0


if __name__ == "__main__":
    if sys.argv[1] == "bad":
        sys.exit(bad())
    if sys.argv[1] == "alltoallv":
        sys.exit(alltoallv_cases(int(sys.argv[2]), int(sys.argv[3])))
    if sys.argv[1] == "communicator":
        sys.exit(with_communicator(int(sys.argv[2]), int(sys.argv[3])))
    if sys.argv[1] in ("arraylike", "staged"):
        sys.exit(run_wrapped(int(sys.argv[2]), int(sys.argv[3]), sys.argv[1]))
    # the random round trips, then the Alltoallv plan kind's cases (one launch per rank count for both)
    sys.exit(run_cases(int(sys.argv[1]), int(sys.argv[2])) or alltoallv_cases(int(sys.argv[1]), 3))
