"""Two threads calling one Communicator at once: never a wrong answer, never a hang (stress).

Run it (it launches ``mpiexec`` itself)::

    python -m ccsynth.bench.threads                       # 100 runs, 2 ranks, Iallreduce(...).Wait()
    python -m ccsynth.bench.threads --mode blocking -n 4 --runs 20 --stagger 0.01

Every run builds a ``ccsynth.Communicator`` on ``MPI.COMM_WORLD`` and starts
two threads on every rank; each makes ``--calls`` allreduces of its own data
(thread ``t``, iteration ``i``, rank ``r`` contributes ``r + 1000 t + i``)
and checks every result against the sum it must be. A call either returns
the right sum, or raises (:class:`~ccsynth.errors.ConcurrentCallError` on
the rank that saw two threads at once, the same or a mismatch error on the
others: :mod:`~ccsynth.collectives.call_guard`). Per run the table counts
calls right, raised and **wrong**, and whether the job **hung** (outlived
``--timeout``) or aborted. Runs share a launch (``--per-launch``); a launch
that hangs or aborts loses its remaining runs, which count as hung/aborted.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import threading
import time

import numpy as np

__all__ = ["main"]


def _calls(comm, args, t: int, run: int, tally: list[int]) -> None:
    """Thread ``t``'s allreduces of one run; ``tally``: right, raised, wrong."""
    from ccsynth.errors import CCSynthError

    rank, size = comm.Get_rank(), comm.Get_size()
    out = np.zeros(args.count)
    if t and args.stagger:  # thread 1 starts later, by a different time on each rank
        time.sleep(np.random.default_rng([run, rank]).uniform(0, args.stagger))
    for i in range(args.calls):
        x = np.full(args.count, float(rank + 1000 * t + i))
        want = sum(range(size)) + size * (1000 * t + i)
        try:
            if args.mode == "blocking":
                comm.Allreduce(x, out)
            else:
                comm.Iallreduce(x, out).Wait()
        except CCSynthError:
            tally[1] += 1
            continue
        tally[0 if np.all(out == want) else 2] += 1


def _worker(args) -> None:
    from mpi4py import MPI

    import ccsynth

    world = MPI.COMM_WORLD
    rank = world.Get_rank()
    for run in range(args.runs):
        comm = ccsynth.Communicator(world)
        counts = [[0, 0, 0], [0, 0, 0]]  # right, raised, wrong per thread

        threads = [threading.Thread(target=_calls, args=(comm, args, t, run, counts[t])) for t in (0, 1)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        level = MPI.Query_thread()
        comm.Free()
        world.Barrier()
        right, raised, wrong = (sum(c[k] for c in counts) for k in range(3))
        print(json.dumps(dict(run=run, rank=rank, right=right, raised=raised, wrong=wrong, level=level)), flush=True)


def _launch(args, runs: int) -> tuple[list[dict], str]:
    cmd = ["mpiexec", "-n", str(args.ranks), sys.executable, "-m", "ccsynth.bench.threads", "--worker",
           "--runs", str(runs), "--calls", str(args.calls), "--mode", args.mode, "--count", str(args.count),
           "--stagger", str(args.stagger)]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
        status = "ok" if p.returncode == 0 else "abort"
        out = p.stdout
    except subprocess.TimeoutExpired as e:
        status = "hang"
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
    rows = [json.loads(m) for m in re.findall(r"\{[^{}]*\}", out)]
    return rows, status


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ccsynth.bench.threads", description=__doc__.split("\n")[0])
    ap.add_argument("-n", "--ranks", type=int, default=2)
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--calls", type=int, default=50, help="calls per thread and run")
    ap.add_argument("--count", type=int, default=1, help="float64 elements per call")
    ap.add_argument("--mode", choices=("nonblocking", "blocking"), default="nonblocking")
    ap.add_argument("--stagger", type=float, default=0.0,
                    help="thread 1 starts up to this many seconds late (a different delay on each rank)")
    ap.add_argument("--per-launch", type=int, default=10, help="runs per mpiexec launch")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds a launch may take")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        _worker(args)
        return 0
    t0 = time.monotonic()
    tally = dict(runs=0, right=0, raised=0, wrong=0, wrong_runs=0, hung=0, aborted=0, clean=0)
    left = args.runs
    while left > 0:
        k = min(left, args.per_launch)
        rows, status = _launch(args, k)
        by_run: dict[int, list[dict]] = {}
        for r in rows:
            by_run.setdefault(r["run"], []).append(r)
        for run in range(k):
            got = by_run.get(run, [])
            tally["runs"] += 1
            if len(got) < args.ranks:
                tally["hung" if status == "hang" else "aborted"] += 1
                continue
            for key in ("right", "raised", "wrong"):
                tally[key] += sum(r[key] for r in got)
            wrong = sum(r["wrong"] for r in got)
            tally["wrong_runs"] += wrong > 0
            tally["clean"] += wrong == 0
        left -= k
    print(json.dumps(dict(mode=args.mode, ranks=args.ranks, calls_per_thread=args.calls, **tally,
                          seconds=round(time.monotonic() - t0, 1))))
    return 0 if tally["wrong"] == 0 and tally["hung"] == 0 and tally["aborted"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
