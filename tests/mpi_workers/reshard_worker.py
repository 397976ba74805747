"""mpiexec worker for tests/test_reshard_mpi.py: random resharding round trips, and bad input.

``reshard_worker.py SEED COUNT`` runs COUNT random cases (meshes of at most
the communicator's size, same, overlapping or disjoint ranks; random Alpa
specs; uneven shapes; every planner) and prints ``CASE <i> PASS rank <r>``;
``reshard_worker.py bad`` checks that a wrong shard on one rank raises on
every rank (and nobody hangs).
"""

from __future__ import annotations

import itertools
import random
import sys

import numpy as np
from mpi4py import MPI

import ccsynth
from ccsynth.errors import BufferMismatchError, LayoutError, PeerError
from ccsynth.synth.reshard import DeviceMesh, TensorLayout

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
    planner = rng.choice(("naive", "broadcast", "milp"))
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
    try:
        ccsynth.reshard(np.zeros(shape, np.float32), src=(((size,), "S0,S0")), dst=dst, comm=comm, shape=(8, 4))
    except LayoutError as e:
        print(f"CASE badspec PASS rank {rank}: {e}", flush=True)
    return 0


if __name__ == "__main__":
    if sys.argv[1] == "bad":
        sys.exit(bad())
    sys.exit(run_cases(int(sys.argv[1]), int(sys.argv[2])))
