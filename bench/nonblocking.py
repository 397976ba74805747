"""Non-blocking collective benchmarks, as OMB's ``osu_iallreduce`` and siblings: how much communication overlaps compute.

For every size, two timed loops of the same call through the algorithm's
communicator (``Iallreduce``, ``Iallgather``, ``Ireduce_scatter_block``,
``Ialltoall``, ``Ibcast``: MPI's own for ``--algo mpi``, ccsynth's
:class:`~ccsynth.collectives.communicator.Communicator` for ``default``,
``plan:FILE`` and the baselines):

1. *pure communication*: start, then ``Wait`` at once;
2. *overall*: start, compute for as long as the pure communication took
   (the average over ranks), then ``Wait``.

``overlap = 100 * (1 - (overall - compute) / pure)``, clamped to [0, 100]:
100 % when the communication hid entirely behind the compute, 0 % when the
two ran one after the other. The compute is NumPy work in small slices with a
``Test`` on the request between slices -- OMB's compute with probes: a
library that progresses only inside its own calls (MPICH without a progress
thread, ccsynth's progress on every call) gets its chances, one with a
progress thread does not need them.

The timing loop, the barriers, validation (``-c``) and the per-rank
statistics are OMB's, shared with every other benchmark
(:func:`ccsynth.bench.omb.measure`): the benchmark's own ``prepare`` builds
the buffers and checks, with an :class:`Overlapped` algorithm whose blocking
call is start, compute, wait.

Output (OMB's non-blocking layout)::

    # OMB Python MPI Non-blocking Allreduce Latency Test
    # Overall = Coll. Init + Compute + MPI_Test + MPI_Wait
    # Size           Overall(us)       Compute(us)    Pure Comm.(us)        Overlap(%)
    4                      11.09              6.10              5.18              3.46
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from collections.abc import Callable, Iterator, Mapping, Sequence

import numpy as np

from ccsynth.bench.algos import Algorithm
from ccsynth.bench.omb import BENCHMARKS, Benchmark, Context, fresh_run, measure

__all__ = ["NONBLOCKING", "SCHEMA", "NbcRow", "Overlapped", "compute", "overlap_percent", "run_nonblocking",
           "title_lines", "header_line", "format_row", "to_json"]

#: OMB's names -> the blocking benchmark whose buffers and checks they share
NONBLOCKING = {
    "iallreduce": "allreduce",
    "iallgather": "allgather",
    "ireduce_scatter": "reduce_scatter",
    "ialltoall": "alltoall",
    "ibcast": "bcast",
}
SCHEMA = "ccsynth.bench.nonblocking/1"
SIZE_W, NUM_W = 10, 18
_SLICE = 256  # elements of NumPy work between two Test calls (about a microsecond)


@dataclass(frozen=True)
class NbcRow:
    """One size: times in microseconds, averaged over ranks."""

    size: int
    nbytes: int
    iterations: int
    overall_us: float
    compute_us: float
    pure_us: float
    overlap_pct: float
    valid: bool | None = None
    algorithm: str = ""

    def to_dict(self) -> dict:
        return {"size_bytes": self.size, "nccl_size_bytes": self.nbytes, "n_iterations": self.iterations,
                "overall_us": self.overall_us, "compute_us": self.compute_us, "pure_comm_us": self.pure_us,
                "overlap_pct": self.overlap_pct, "valid": self.valid, "algorithm": self.algorithm}


def compute(seconds: float, request, clock: Callable[[], float] = time.perf_counter) -> None:
    """Busy NumPy work for ``seconds``, testing ``request`` between small slices (see the module docstring)."""
    a = np.ones(_SLICE)
    end = clock() + seconds
    done = False
    while clock() < end:
        a *= 1.000001
        if not done:
            done = bool(request.Test())


def overlap_percent(overall_us: float, compute_us: float, pure_us: float) -> float:
    """OMB's overlap: the share of the pure communication time that hid behind compute, in [0, 100]."""
    if pure_us <= 0:
        return 0.0
    return float(min(100.0, max(0.0, 100.0 * (1.0 - (overall_us - compute_us) / pure_us))))


class Overlapped(Algorithm):
    """``inner``'s non-blocking call made blocking: start, compute :attr:`compute_s` seconds, wait."""

    def __init__(self, inner: Algorithm):
        self.inner = inner
        self.name = inner.name
        self.compute_s = 0.0
        self.computed_s = 0.0  # compute time since the last reset
        self.calls = 0

    def setup(self, kind, ctx) -> None:
        self.inner.setup(kind, ctx)

    def collective(self, kind: str, ctx) -> Callable:
        start = self.inner.nonblocking(kind, ctx)

        def call(*bufs):
            req = start(*bufs)
            if self.compute_s > 0:
                t0 = time.perf_counter()
                compute(self.compute_s, req)
                self.computed_s += time.perf_counter() - t0
            self.calls += 1
            req.Wait()

        return call

    def chosen(self, kind: str, ctx, nbytes: int) -> str:
        return self.inner.ran(ctx)

    def compute_us(self) -> float:
        """Compute time per call since the last reset (the end of the warm-up), in microseconds."""
        return 1e6 * self.computed_s / max(self.calls, 1)

    def stats_reader(self, kind: str, ctx):
        def reset():
            self.computed_s, self.calls = 0.0, 0

        return (lambda: {"compute": self.compute_us()}), reset


def run_nonblocking(bench: Benchmark, ctx: Context, algo: Algorithm) -> Iterator[NbcRow]:
    """Pure communication, then communication with compute, at every size; one row per size, on every rank."""
    comm, opts = ctx.comm, ctx.options
    wrapped = Overlapped(algo)
    for size in opts.sizes:
        wrapped.compute_s = 0.0
        case = bench.prepare(ctx, wrapped, size)
        iters, warmup = opts.iterations(size)
        [pure] = measure(comm, [case], iters, warmup)
        pure_us = sum(comm.allgather(float(pure.mean()))) / ctx.n
        wrapped.compute_s = pure_us * 1e-6
        [overall] = measure(comm, [case], iters, warmup)  # stats_reset after the warm-up zeroes the compute time
        compute_local = wrapped.compute_us()
        ok = None
        if opts.validate and case.check is not None:
            fresh_run(ctx, case)
            ok = bool(case.check())
        per_rank = comm.allgather((float(overall.mean()), compute_local, ok))
        overall_us = sum(o for o, _, _ in per_rank) / ctx.n
        compute_us = sum(c for _, c, _ in per_rank) / ctx.n
        checks = [v for _, _, v in per_rank if v is not None]
        name = case.algorithm() if callable(case.algorithm) else case.algorithm
        yield NbcRow(size, case.nbytes, iters, overall_us, compute_us, pure_us,
                     overlap_percent(overall_us, compute_us, pure_us), all(checks) if checks else None, name)
        del case


# ------------------------------------------------------------------ output
def title_lines(name: str, algo_name: str, meta: Mapping) -> list[str]:
    title = BENCHMARKS[NONBLOCKING[name]].title
    return [f"# OMB Python MPI Non-blocking {title} Latency Test",
            "# Overall = Coll. Init + Compute + MPI_Test + MPI_Wait",
            f"# ccsynth algorithm: {algo_name}",
            f"# ranks: {meta.get('n_ranks')}  dtype: {meta.get('dtype')}  buffer: {meta.get('buffer')}"]


def header_line(validate: bool, with_algorithm: bool = False) -> str:
    out = "# Size".ljust(SIZE_W) + "".join(f"{h:>{NUM_W}}" for h in ("Overall(us)", "Compute(us)", "Pure Comm.(us)",
                                                                      "Overlap(%)"))
    if validate:
        out += f"{'Validation':>12}"
    if with_algorithm:
        out += "  Algorithm"
    return out


def format_row(row: NbcRow, validate: bool, with_algorithm: bool = False) -> str:
    out = f"{row.size:<{SIZE_W}d}" + "".join(f"{v:{NUM_W}.2f}" for v in (row.overall_us, row.compute_us, row.pure_us,
                                                                         row.overlap_pct))
    if validate:
        out += f"{'N/A' if row.valid is None else ('Pass' if row.valid else 'Fail'):>12}"
    if with_algorithm:
        out += f"  {row.algorithm}"
    return out


def to_json(name: str, meta: Mapping, results: Mapping[str, Sequence[NbcRow]]) -> dict:
    """Everything measured (``"schema": "ccsynth.bench.nonblocking/1"``)."""
    return {"schema": SCHEMA, "benchmark": name, "collective": BENCHMARKS[NONBLOCKING[name]].kind, **dict(meta),
            "algorithms": list(results),
            "results": {a: [r.to_dict() for r in rows] for a, rows in results.items()}}
