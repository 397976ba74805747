"""GPU check for a machine with GPUs: device choice, CUDA-awareness, device buffers through the communicator.

Run it under the launcher, one rank per GPU (or more)::

    mpiexec -n 2 python -m ccsynth.bench.gpu_check             # staging as the library needs it
    CCSYNTH_CUDA_AWARE=1 mpiexec -n 2 python -m ccsynth.bench.gpu_check --staging never

Every rank prints ``CHECK <name> PASS|FAIL rank <R>: ...`` lines, then rank
0 a table of timings (device buffers through ``ccsynth.Communicator``
against host buffers through the MPI library). What it checks:

* ``device``: the rank's GPU follows its local rank (``CCSYNTH_DEVICE``
  overrides), and the ranks of a node do not all sit on GPU 0;
* ``awareness``: what the MPI library says about CUDA (and where from);
* ``allreduce``/``allgather``/``alltoall``/``bcast``/``alltoallv``/``iallreduce``:
  CuPy arrays give the result of MPI on host copies, with ``stream=``;
* ``reshard``: :func:`ccsynth.reshard` of CuPy shards (the same
  array-like and staging rules as the communicator's), on one mesh of all
  ranks and, with two ranks or more, from the first half to the second
  half of the ranks into a strided device ``out=``;
* ``torch``: a torch CUDA tensor (``__cuda_array_interface__``) and a
  DLPack capsule-only view, if torch is installed;
* ``never``: with ``--staging never`` on a library that is not CUDA-aware,
  the clear error instead of a crash.

Needs CuPy (``pip install cupy-cuda12x``); exits with status 1 if a check failed.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from ccsynth.collectives.communicator import Communicator
from ccsynth.errors import CCSynthError
from ccsynth.kernels.devices import choose_device, local_rank
from ccsynth.synth.default_plan import LazyDefaultPlan
from ccsynth.synth.reshard import DeviceMesh, TensorLayout
from ccsynth.synth.reshard.api import reshard

__all__ = ["main"]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--staging", default="auto", choices=("auto", "always", "never"))
    p.add_argument("--size", type=int, default=1 << 24, help="bytes per rank for the timings (default 16 MiB)")
    p.add_argument("--iters", type=int, default=10)
    args = p.parse_args(argv)
    import cupy as cp
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    rank, n = world.Get_rank(), world.Get_size()
    failed = []

    def report(name, ok, detail=""):
        print(f"CHECK {name} {'PASS' if ok else 'FAIL'} rank {rank}: {detail}", flush=True)
        if not ok:
            failed.append(name)

    c = Communicator(world, default_plan=LazyDefaultPlan(), staging=args.staging)
    ndev = cp.cuda.runtime.getDeviceCount()
    expect = choose_device(ndev).index
    report("device", c.device == expect == cp.cuda.Device().id,
           f"GPU {cp.cuda.Device().id} of {ndev} (local rank {local_rank()}, expected {expect})")
    aw = c.cuda_aware
    report("awareness", True, f"CUDA-aware: {aw.aware} ({aw.source}); staging={args.staging}")
    stream = cp.cuda.Stream(non_blocking=True)
    rng = np.random.default_rng(rank)

    def check(name, fn):
        try:
            fn()
        except CCSynthError as e:
            if args.staging == "never" and aw.aware is not True:
                report("never", "staging='never'" in str(e), str(e)[:120])
                return
            report(name, False, f"{type(e).__name__}: {e}")
        except Exception as e:  # noqa: BLE001 - a check script reports everything
            report(name, False, f"{type(e).__name__}: {e}")

    def allreduce():
        h = rng.random(1 << 16).astype(np.float32)
        with stream:
            d = cp.asarray(h) * 2
        out = cp.empty_like(d)
        c.Allreduce(d, out, stream=stream)
        ref = np.empty_like(h)
        world.Allreduce(h * 2, ref)
        report("allreduce", np.allclose(out.get(), ref, rtol=1e-5), c.last_algorithm)

    def allgather():
        d = cp.full(1000, rank, cp.int64)
        out = cp.empty(1000 * n, cp.int64)
        c.Allgather(d, out)
        report("allgather", bool((out.get() == np.repeat(np.arange(n), 1000)).all()), c.last_algorithm)

    def alltoall():
        d = cp.arange(n * 100, dtype=cp.float64) + 1000 * rank
        out = cp.empty_like(d)
        c.Alltoall(d, out)
        ref = np.empty(n * 100)
        world.Alltoall(d.get(), ref)
        report("alltoall", np.array_equal(out.get(), ref), c.last_algorithm)

    def bcast():
        d = cp.arange(500, dtype=cp.float32) if rank == 0 else cp.zeros(500, cp.float32)
        c.Bcast(d, root=0)
        report("bcast", np.array_equal(d.get(), np.arange(500, dtype=np.float32)), c.last_algorithm)

    def alltoallv():
        counts = np.random.default_rng(5).integers(0, 300, (n, n))
        sc, rc = counts[rank], counts[:, rank]
        d = cp.arange(sc.sum(), dtype=cp.float32) + rank
        out = cp.zeros(int(rc.sum()), cp.float32)
        c.Alltoallv([d, sc], [out, rc])
        ref = np.zeros(int(rc.sum()), np.float32)
        world.Alltoallv([d.get(), sc], [ref, rc])
        report("alltoallv", np.array_equal(out.get(), ref), c.last_algorithm)

    def iallreduce():
        d = cp.ones(1 << 20, cp.float32)
        out = cp.empty_like(d)
        req = c.Iallreduce(d, out)
        x = cp.random.random((2048, 2048))
        (x @ x).sum()
        req.Wait()
        report("iallreduce", bool((out == n).all()), c.last_algorithm)

    def reshard_check():
        shape = (64, 30, 8)  # uneven over most rank counts
        full = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)

        def box(lay, r):
            t = lay.tile_of_rank(r)
            return None if t is None else full[tuple(slice(a, b) for a, b in lay.box(t))]

        src = TensorLayout.of(shape, DeviceMesh((n,)), "S0,R,R")
        dst = TensorLayout.of(shape, DeviceMesh((n,)), "R,S0,R")
        out = reshard(cp.asarray(box(src, rank)), src=src, dst=dst, comm=world, staging=args.staging)
        ok = isinstance(out, cp.ndarray) and np.array_equal(out.get(), box(dst, rank))
        detail = "same mesh"
        if n >= 2:
            half = n // 2
            src = TensorLayout.of(shape, DeviceMesh((half,), range(half)), "S0,R,R")
            dst = TensorLayout.of(shape, DeviceMesh((n - half,), range(half, n)), "R,R,S0")
            mine, want = box(src, rank), box(dst, rank)
            big = None if want is None else cp.full(tuple(2 * k for k in want.shape), -1, cp.float32)
            view = None if big is None else big[::2, ::2, ::2]
            got = reshard(None if mine is None else cp.asarray(mine), src=src, dst=dst, comm=world, dtype="float32",
                          planner="milp", out=view, staging=args.staging)
            ok = ok and ((got is None) if want is None else np.array_equal(view.get(), want))
            detail += ", disjoint halves into a strided out"
        report("reshard", ok, detail)

    def torch_tensors():
        try:
            import torch  # type: ignore[import-not-found]
        except ImportError:
            report("torch", True, "torch not installed: skipped")
            return
        t = torch.full((256,), float(rank), device=f"cuda:{cp.cuda.Device().id}")
        out = torch.empty_like(t)
        c.Allreduce(t, out)
        report("torch", bool((out.cpu().numpy() == sum(range(n))).all()), c.last_algorithm)

    for name, fn in (("allreduce", allreduce), ("allgather", allgather), ("alltoall", alltoall), ("bcast", bcast),
                     ("alltoallv", alltoallv), ("iallreduce", iallreduce), ("reshard", reshard_check),
                     ("torch", torch_tensors)):
        check(name, fn)
    # timings: device buffers through ccsynth against host buffers through MPI
    m = args.size // 4
    d, out = cp.ones(m, cp.float32), cp.empty(m, cp.float32)
    h, hout = np.ones(m, np.float32), np.empty(m, np.float32)
    rows = []
    for label, fn in (("ccsynth device", lambda: c.Allreduce(d, out)), ("MPI host", lambda: world.Allreduce(h, hout))):
        fn()
        world.Barrier()
        t0 = time.perf_counter()
        for _ in range(args.iters):
            fn()
        cp.cuda.Device().synchronize()
        rows.append((label, world.allreduce((time.perf_counter() - t0) / args.iters, op=MPI.MAX)))
    if rank == 0:
        print(f"| allreduce {args.size} B on {n} ranks | time (us) |\n|---|---|")
        for label, t in rows:
            print(f"| {label} | {t * 1e6:.1f} |")
    c.Free()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
