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
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ccsynth.collectives.communicator import Communicator
from ccsynth.errors import CCSynthError
from ccsynth.kernels.devices import choose_device, local_rank
from ccsynth.synth.default_plan import LazyDefaultPlan
from ccsynth.synth.reshard import DeviceMesh, TensorLayout
from ccsynth.synth.reshard.api import reshard

__all__ = ["main"]


@dataclass
class _Run:
    """What every check works with: the options, the communicators, CuPy, and the failures so far."""

    args: argparse.Namespace
    world: Any  # MPI.COMM_WORLD
    c: Communicator
    cp: Any  # the cupy module
    stream: Any  # a non-blocking CuPy stream
    rng: np.random.Generator
    failed: list[str] = field(default_factory=list)

    @property
    def rank(self) -> int:
        return self.world.Get_rank()

    @property
    def n(self) -> int:
        return self.world.Get_size()

    def report(self, name: str, ok: bool, detail: str = "") -> None:
        print(f"CHECK {name} {'PASS' if ok else 'FAIL'} rank {self.rank}: {detail}", flush=True)
        if not ok:
            self.failed.append(name)


def _parse(argv) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--staging", default="auto", choices=("auto", "always", "never"))
    p.add_argument("--size", type=int, default=1 << 24, help="bytes per rank for the timings (default 16 MiB)")
    p.add_argument("--iters", type=int, default=10)
    return p.parse_args(argv)


def _check_setup(run: _Run) -> None:
    """``device`` and ``awareness``: the rank's GPU, and what the MPI library says about CUDA."""
    cp, c = run.cp, run.c
    ndev = cp.cuda.runtime.getDeviceCount()
    expect = choose_device(ndev).index
    run.report("device", c.device == expect == cp.cuda.Device().id,
               f"GPU {cp.cuda.Device().id} of {ndev} (local rank {local_rank()}, expected {expect})")
    aw = c.cuda_aware
    run.report("awareness", True, f"CUDA-aware: {aw.aware} ({aw.source}); staging={run.args.staging}")


def _run_check(run: _Run, name: str, fn: Callable[[_Run], None]) -> None:
    """``fn(run)``, every exception reported as a failure of ``name`` (``never``: the clear error expected)."""
    try:
        fn(run)
    except CCSynthError as e:
        if run.args.staging == "never" and run.c.cuda_aware.aware is not True:
            run.report("never", "staging='never'" in str(e), str(e)[:120])
            return
        run.report(name, False, f"{type(e).__name__}: {e}")
    except Exception as e:  # noqa: BLE001 - a check script reports everything
        run.report(name, False, f"{type(e).__name__}: {e}")


def _check_allreduce(run: _Run) -> None:
    c, world, cp, report = run.c, run.world, run.cp, run.report
    h = run.rng.random(1 << 16).astype(np.float32)
    with run.stream:
        d = cp.asarray(h) * 2
    out = cp.empty_like(d)
    c.Allreduce(d, out, stream=run.stream)
    ref = np.empty_like(h)
    world.Allreduce(h * 2, ref)
    report("allreduce", np.allclose(out.get(), ref, rtol=1e-5), c.last_algorithm)


def _check_allgather(run: _Run) -> None:
    c, rank, n, cp, report = run.c, run.rank, run.n, run.cp, run.report
    d = cp.full(1000, rank, cp.int64)
    out = cp.empty(1000 * n, cp.int64)
    c.Allgather(d, out)
    report("allgather", bool((out.get() == np.repeat(np.arange(n), 1000)).all()), c.last_algorithm)


def _check_alltoall(run: _Run) -> None:
    c, world, rank, n, cp, report = run.c, run.world, run.rank, run.n, run.cp, run.report
    d = cp.arange(n * 100, dtype=cp.float64) + 1000 * rank
    out = cp.empty_like(d)
    c.Alltoall(d, out)
    ref = np.empty(n * 100)
    world.Alltoall(d.get(), ref)
    report("alltoall", np.array_equal(out.get(), ref), c.last_algorithm)


def _check_bcast(run: _Run) -> None:
    c, rank, cp, report = run.c, run.rank, run.cp, run.report
    d = cp.arange(500, dtype=cp.float32) if rank == 0 else cp.zeros(500, cp.float32)
    c.Bcast(d, root=0)
    report("bcast", np.array_equal(d.get(), np.arange(500, dtype=np.float32)), c.last_algorithm)


def _check_alltoallv(run: _Run) -> None:
    c, world, rank, n, cp, report = run.c, run.world, run.rank, run.n, run.cp, run.report
    counts = np.random.default_rng(5).integers(0, 300, (n, n))
    sc, rc = counts[rank], counts[:, rank]
    d = cp.arange(sc.sum(), dtype=cp.float32) + rank
    out = cp.zeros(int(rc.sum()), cp.float32)
    c.Alltoallv([d, sc], [out, rc])
    ref = np.zeros(int(rc.sum()), np.float32)
    world.Alltoallv([d.get(), sc], [ref, rc])
    report("alltoallv", np.array_equal(out.get(), ref), c.last_algorithm)


def _check_iallreduce(run: _Run) -> None:
    c, n, cp, report = run.c, run.n, run.cp, run.report
    d = cp.ones(1 << 20, cp.float32)
    out = cp.empty_like(d)
    req = c.Iallreduce(d, out)
    x = cp.random.random((2048, 2048))
    (x @ x).sum()
    req.Wait()
    report("iallreduce", bool((out == n).all()), c.last_algorithm)


def _check_reshard(run: _Run) -> None:
    world, rank, n, cp, report = run.world, run.rank, run.n, run.cp, run.report
    shape = (64, 30, 8)  # uneven over most rank counts
    full = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)

    def box(lay, r):
        t = lay.tile_of_rank(r)
        return None if t is None else full[tuple(slice(a, b) for a, b in lay.box(t))]

    src = TensorLayout.of(shape, DeviceMesh((n,)), "S0,R,R")
    dst = TensorLayout.of(shape, DeviceMesh((n,)), "R,S0,R")
    out = reshard(cp.asarray(box(src, rank)), src=src, dst=dst, comm=world, staging=run.args.staging)
    ok = isinstance(out, cp.ndarray) and np.array_equal(out.get(), box(dst, rank))
    detail = "same mesh"
    if n >= 2:
        half = n // 2
        src = TensorLayout.of(shape, DeviceMesh((half,), tuple(range(half))), "S0,R,R")
        dst = TensorLayout.of(shape, DeviceMesh((n - half,), tuple(range(half, n))), "R,R,S0")
        mine, want = box(src, rank), box(dst, rank)
        big = None if want is None else cp.full(tuple(2 * k for k in want.shape), -1, cp.float32)
        view = None if big is None else big[::2, ::2, ::2]
        got = reshard(None if mine is None else cp.asarray(mine), src=src, dst=dst, comm=world, dtype="float32",
                      planner="milp", out=view, staging=run.args.staging)
        ok = ok and ((got is None) if view is None else np.array_equal(view.get(), want))  # view: None iff want is
        detail += ", disjoint halves into a strided out"
    report("reshard", ok, detail)


def _check_torch(run: _Run) -> None:
    c, rank, n, cp, report = run.c, run.rank, run.n, run.cp, run.report
    try:
        import torch  # type: ignore[import-not-found]
    except ImportError:
        report("torch", True, "torch not installed: skipped")
        return
    t = torch.full((256,), float(rank), device=f"cuda:{cp.cuda.Device().id}")
    out = torch.empty_like(t)
    c.Allreduce(t, out)
    report("torch", bool((out.cpu().numpy() == sum(range(n))).all()), c.last_algorithm)


#: the checks in the order they run
_CHECKS: tuple[tuple[str, Callable[[_Run], None]], ...] = (
    ("allreduce", _check_allreduce), ("allgather", _check_allgather), ("alltoall", _check_alltoall),
    ("bcast", _check_bcast), ("alltoallv", _check_alltoallv), ("iallreduce", _check_iallreduce),
    ("reshard", _check_reshard), ("torch", _check_torch),
)


def _timings(run: _Run, mpi_max: Any) -> None:
    """Device buffers through ccsynth against host buffers through MPI: an allreduce of ``--size`` bytes."""
    cp, c, world, args = run.cp, run.c, run.world, run.args
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
        rows.append((label, world.allreduce((time.perf_counter() - t0) / args.iters, op=mpi_max)))
    if run.rank == 0:
        print(f"| allreduce {args.size} B on {run.n} ranks | time (us) |\n|---|---|")
        for label, t in rows:
            print(f"| {label} | {t * 1e6:.1f} |")


def main(argv=None) -> int:
    args = _parse(argv)
    import cupy as cp  # optional: only this GPU script needs it
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    c = Communicator(world, default_plan=LazyDefaultPlan(), staging=args.staging)
    run = _Run(args, world, c, cp, cp.cuda.Stream(non_blocking=True), np.random.default_rng(world.Get_rank()))
    _check_setup(run)
    for name, fn in _CHECKS:
        _run_check(run, name, fn)
    _timings(run, MPI.MAX)
    c.Free()
    return 1 if run.failed else 0


if __name__ == "__main__":
    sys.exit(main())
