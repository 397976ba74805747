"""Overlap of non-blocking collectives with computation: is compute + communication faster than their sum?

Run it (it launches ``mpiexec`` itself; ``--worker`` is the part each rank runs)::

    python -m ccsynth.bench.overlap                        # 2 ranks, 16 MiB allreduce, both kinds of compute
    python -m ccsynth.bench.overlap -n 4 --size 64M --collective allgather

Per rank, three timings (median of ``--iters`` after a warm-up, the slowest
rank's):

* ``comm`` -- ``req = comm.I<collective>(...); req.Wait()``;
* ``compute`` -- the computation alone, sized to take about as long as ``comm``;
* ``both`` -- start the collective, compute, then ``Wait``.

``overlap = (comm + compute - both) / min(comm, compute)``: 1 when the
shorter one hides entirely behind the longer, 0 when they run one after the
other. Two kinds of computation: ``sleep`` stands for work on another engine
(a GPU kernel, I/O: the CPU is free), ``matmul`` for NumPy work on the same
CPU (it releases the GIL, but competes with the progress thread for cores:
with fewer cores than ranks x 2 threads it cannot overlap much).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from ccsynth.collectives.mpi_util import find_mpiexec
from ccsynth.units import parse_size

__all__ = ["main", "worker", "overlap_ratio"]


def overlap_ratio(comm: float, compute: float, both: float) -> float:
    """How much of the shorter of two activities hid behind the other (0: none, 1: all)."""
    shorter = min(comm, compute)
    return 0.0 if shorter <= 0 else (comm + compute - both) / shorter


def _median(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[len(xs) // 2]


def worker(args) -> None:
    # The worker side only: importing mpi4py.MPI (and the communicator, an MPI.Intracomm subclass) starts
    # MPI, and the driver, which launches mpiexec, must not.
    import numpy as np
    from mpi4py import MPI

    from ccsynth.collectives.communicator import Communicator
    from ccsynth.synth.default_plan import LazyDefaultPlan

    world = MPI.COMM_WORLD
    c = Communicator(world, default_plan=LazyDefaultPlan())  # what ccsynth.Communicator is
    n, rank = world.Get_size(), world.Get_rank()
    m = parse_size(args.size) // 4
    x = np.ones(m, np.float32)
    if args.collective == "allreduce":
        out = np.empty(m, np.float32)
        start = lambda: c.Iallreduce(x, out)  # noqa: E731
    elif args.collective == "allgather":
        xs = np.ones(m // n, np.float32)
        out = np.empty((m // n) * n, np.float32)
        start = lambda: c.Iallgather(xs, out)  # noqa: E731
    else:
        out = np.empty(m, np.float32)
        start = lambda: c.Ialltoall(x, out)  # noqa: E731

    def timed(fn) -> float:
        world.Barrier()
        t0 = time.perf_counter()
        fn()
        return world.allreduce(time.perf_counter() - t0, op=MPI.MAX)

    comm_t = _median([timed(lambda: start().Wait()) for _ in range(args.iters + 1)][1:])
    rows = []
    for kind in args.compute.split(","):
        if kind == "sleep":
            compute = lambda: time.sleep(comm_t)  # noqa: E731
        else:
            k = 256
            a = np.random.default_rng(rank).random((k, k))
            a @ a
            t0 = time.perf_counter()
            for _ in range(5):
                a @ a
            reps = max(1, round(comm_t / max((time.perf_counter() - t0) / 5, 1e-6)))

            def compute(a=a, reps=reps):
                for _ in range(reps):
                    a @ a

        comp_t = _median([timed(compute) for _ in range(args.iters)])

        def both(compute=compute):
            req = start()
            compute()
            req.Wait()

        both_t = _median([timed(both) for _ in range(args.iters + 1)][1:])
        rows.append({"ranks": n, "collective": args.collective, "size": args.size, "compute": kind,
                     "comm_ms": comm_t * 1e3, "compute_ms": comp_t * 1e3, "both_ms": both_t * 1e3,
                     "sum_ms": (comm_t + comp_t) * 1e3, "overlap": overlap_ratio(comm_t, comp_t, both_t),
                     "algorithm": c.last_algorithm})
    if rank == 0:
        print("RESULT " + json.dumps(rows), flush=True)
    c.Free()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-n", "--ranks", type=int, default=2)
    p.add_argument("--size", default="16M", help="message size (bytes, 16M, ...)")
    p.add_argument("--collective", default="allreduce", choices=("allreduce", "allgather", "alltoall"))
    p.add_argument("--compute", default="sleep,matmul", help="comma-separated: sleep, matmul")
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        worker(args)
        return 0
    mpiexec = find_mpiexec()
    if mpiexec is None:
        print("mpiexec not found", file=sys.stderr)
        return 2
    cmd = [mpiexec, "-n", str(args.ranks), sys.executable, "-m", "ccsynth.bench.overlap", "--worker",
           "--size", args.size, "--collective", args.collective, "--compute", args.compute, "--iters", str(args.iters)]
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    run = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    rows = [json.loads(line[7:]) for line in run.stdout.splitlines() if line.startswith("RESULT ")]
    if run.returncode != 0 or not rows:
        print(run.stdout[-2000:] + run.stderr[-2000:], file=sys.stderr)
        return 1
    rows = rows[0]
    if args.json:
        print(json.dumps(rows))
        return 0
    print("| ranks | collective | size | compute | comm ms | compute ms | both ms | sum ms | overlap | algorithm |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['ranks']} | {r['collective']} | {r['size']} | {r['compute']} | {r['comm_ms']:.2f} | "
              f"{r['compute_ms']:.2f} | {r['both_ms']:.2f} | {r['sum_ms']:.2f} | {r['overlap']:.2f} | {r['algorithm']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
