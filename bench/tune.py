"""Tuning a plan on the machine that runs it: the plan's departures from the default plan, measured.

A plan made with a default margin (:mod:`ccsynth.synth.tables`) names, per
size, the algorithm the built-in default plan runs there; where the model
picked another, :func:`ccsynth.synth.tables.tune_plan` asks a timer for
both. :func:`mpi_timer` is that timer under mpiexec: the two schedules run
side by side (one iteration of each in turn, after a barrier each, as
``ccsynth bench --interleave`` does), each through ccsynth's drop-in
communicator with a one-row plan -- the path a program calling the plan
takes -- on the benchmark's buffers (:mod:`ccsynth.bench.omb`), in
:data:`TUNE_ROUNDS` rounds whose order alternates (candidate first, then
default first: a fixed place in the iteration biased single passes by up to
10%, docs/results.md); the figure is the median over
rounds of each round's median over iterations of the slowest rank. Both
results are checked against the expected output first (a schedule that
computes a wrong result is refused with an error, whatever its time).

Every rank calls the timer with the same schedules in the same order (the
plan file is the same on all of them), so the ranks meet in the same
collectives.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ccsynth.bench import omb
from ccsynth.bench.algos import PlanAlgorithm
from ccsynth.collectives.mpi_util import mpi_comm
from ccsynth.collectives.plan import MPI_ALGORITHM, Plan, PlanEntry
from ccsynth.collectives.schedule import Schedule
from ccsynth.errors import CCSynthError
from ccsynth.units import format_size

__all__ = ["TUNE_ITERS", "TUNE_WARMUP", "TUNE_ROUNDS", "bench_size", "mpi_timer"]

#: timed iterations of each schedule per size (interleaved, over all rounds), and untimed ones before each round
TUNE_ITERS, TUNE_WARMUP = 50, 5
#: rounds the iterations are split into, the order of the two schedules alternating (even: each first alike)
TUNE_ROUNDS = 4

#: collectives whose benchmark size is per rank (OMB), a ``ranks``-th of the plan's (nccl-tests) size
_PER_RANK = ("allgather", "alltoall")


def bench_size(kind: str, n: int, plan_bytes: int, itemsize: int = 4) -> int:
    """The ``ccsynth bench`` size of ``kind`` on ``n`` ranks at the plan's size ``plan_bytes`` (a multiple of
    the element size, at least one element per rank and block)."""
    size = plan_bytes // n if kind in _PER_RANK else plan_bytes
    unit = itemsize * (n if kind == "reduce_scatter" else 1)
    return max(unit, size - size % unit)


def _benchmark(kind: str) -> omb.Benchmark:
    for b in omb.BENCHMARKS.values():
        if b.kind == kind and not b.pt2pt:
            return b
    raise CCSynthError(f"no benchmark measures {kind}: it cannot be tuned")


class _OneSchedule(PlanAlgorithm):
    """ccsynth's communicator with a plan of one row: ``schedule`` (None: the MPI library's own) at every size."""

    def __init__(self, label: str, schedule: Schedule | None, n: int, kind: str):
        super().__init__(label, None)
        self._plan = Plan((PlanEntry(kind, n, 0, None, schedule, algorithm=label if schedule else MPI_ALGORITHM),))


def mpi_timer(comm, *, iters: int = TUNE_ITERS, warmup: int = TUNE_WARMUP, buffer: str = "numpy",
              dtype: str = "float32", rounds: int = TUNE_ROUNDS
              ) -> Callable[[Schedule | None, Schedule, int], tuple[float, float]]:
    """A timer for :func:`~ccsynth.synth.tables.tune_plan` on ``comm`` (every rank calls it alike): for both
    schedules (us), the median over ``rounds`` rounds (the order alternating) of the median over the round's
    share of ``iters`` interleaved iterations of the slowest rank. ``comm``: an mpi4py intracommunicator or a
    ``ccsynth.Communicator`` (the one it wraps is timed on)."""
    comm = mpi_comm(comm)

    def timer(candidate: Schedule | None, default: Schedule, plan_bytes: int) -> tuple[float, float]:
        kind = default.collective.kind
        ctx = omb.Context(comm, omb.Options(sizes=(), iters=iters, warmup=warmup, buffer=buffer, dtype=dtype))
        size = bench_size(kind, ctx.n, plan_bytes, ctx.itemsize)
        bench = _benchmark(kind)
        algos = [_OneSchedule("candidate", candidate, ctx.n, kind), _OneSchedule("default", default, ctx.n, kind)]
        for a in algos:
            a.setup(kind, ctx)
        cases = [omb.prepare(bench, ctx, a, size) for a in algos]
        for name, case in zip((candidate.name if candidate is not None else MPI_ALGORITHM, default.name), cases):
            omb.fresh_run(ctx, case)
            ok = case.check() if case.check is not None else True
            if not all(comm.allgather(bool(ok))):
                raise CCSynthError(f"{name} computed a wrong {kind} at {format_size(plan_bytes)}: not tuned")
        n_rounds = max(1, min(rounds, iters))
        medians: list[list[float]] = [[], []]
        for k in range(n_rounds):
            order = (0, 1) if k % 2 == 0 else (1, 0)  # candidate first, then default first
            times = omb.measure(comm, [cases[i] for i in order], max(1, iters // n_rounds), warmup)
            per_rank = comm.allgather(times)
            for j, i in enumerate(order):
                medians[i].append(omb.slowest_rank_median([r[j] for r in per_rank]))
        out = tuple(float(np.median(m)) for m in medians)
        del cases
        for a in algos:
            a.comm(ctx).Free()
        return out[0], out[1]

    return timer
