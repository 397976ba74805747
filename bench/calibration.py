"""Reference collectives: what a whole run costs beside what the probes predict (``Topology.run_curve``).

Every figure ``ccsynth topo profile`` fits comes from a *probe*: one
message pattern (chains, windows, forwards, rounds) whose time the
simulator reproduces. A collective is many patterns at once, run back to
back through the executor and interleaved with other algorithms, and on a
machine whose ranks outnumber its cores it meets what no single probe does:
on the project's 2-core machine with 4 ranks every algorithm's rows from
8 B to 256 KiB ran 1.2-1.8x their prediction, all alike (ring, recursive
doubling, direct, the default plan), while the 2-rank rows met theirs. The
error is a factor of the *size*, common to every schedule: the same benchmark
run minutes apart reproduces its rows within 2-10%, and the factor of one
run's ring and recursive-doubling rows, applied to another run's
predictions by input bytes per rank, brought 30 of 30 size bands from
64 KiB within 25% (docs/results.md).

So the profile ends by measuring what it predicts: per size of
:data:`SIZES` (input bytes per rank), an allreduce and an allgather
(:data:`REFERENCE_KINDS`) by ccsynth's ring and recursive doubling
(:data:`REFERENCE_ALGORITHMS`, the baselines of ``ccsynth bench --algo``,
run by the executor) and by the MPI library (:data:`MPI`), all six
interleaved iteration by iteration as ``ccsynth bench --interleave`` runs
them (:func:`measure_calibration`, with :mod:`ccsynth.bench.omb`'s loop and
figure: the slowest rank's median). The MPI rows have no prediction; they
run so that the references meet the conditions of a benchmark beside MPI's
own collective (the interleaving matters: a 2-rank allgather of 64 KiB took
9.3 us beside one other algorithm and 13.4 us beside five). Per size the
factor is the geometric mean of measured / predicted over the references
(:func:`fit_run_curve`, predictions by
:func:`~ccsynth.synth.executor_model.simulate_run` on the fitted topology
at the footprint of all six calls, :func:`predicted_rows`), kept within
:data:`RUN_RANGE`; ``Topology.run_curve`` holds them, and
:func:`~ccsynth.synth.simulate.simulate_graph` multiplies a run's time by
the curve at the call's input bytes per rank.

The references are whole runs of the algorithms a benchmark compares, so
their own errors after the correction measure nothing new; docs/results.md
reports the errors of the other rows beside them. The MPI rows' times are
kept too (:func:`mpi_reference`, ``Topology.mpi_reference``): the yardstick
by which ``ccsynth bench --predict`` tells how far the machine has moved
since it was profiled (:mod:`ccsynth.topologies.reference`).

Example:
    >>> rows = [CalibrationRow("allreduce", "ring", 1024, 1024, (12.0, 10.0, 11.0))]
    >>> rows[0].measured_us
    11.0
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from ccsynth.bench import omb
from ccsynth.bench.algos import MpiAlgorithm, ScheduleAlgorithm, baseline_chunk_factor
from ccsynth.bench.predict import has_footprint_terms, interleaved_footprint
from ccsynth.collectives.schedule import Schedule
from ccsynth.collectives.spec import Collective
from ccsynth.errors import ScheduleError
from ccsynth.synth.baselines import make_baseline
from ccsynth.synth.executor_model import ExecutorSettings, simulate_run
from ccsynth.topologies.catalog import fully_connected
from ccsynth.topologies.curve import SizeCurve
from ccsynth.topologies.model import Topology
from ccsynth.topologies.reference import ReferenceTimes

__all__ = ["REFERENCE_ALGORITHMS", "REFERENCE_KINDS", "MPI", "SIZES", "QUICK_SIZES", "RUN_RANGE", "DTYPE",
           "MAX_BUFFER", "CalibrationRow", "run_size", "reference_kinds", "reference_schedules", "measure_calibration", "merge_passes",
           "predicted_rows", "fit_run_curve", "mpi_reference"]

log = logging.getLogger(__name__)

#: ccsynth's algorithms whose runs are predicted and measured (baselines, run by the executor)
REFERENCE_ALGORITHMS = ("ring", "recursive_doubling")
#: the collectives they run: one that reduces, one that does not
REFERENCE_KINDS = ("allreduce", "allgather")
#: the MPI library's own collective, interleaved with the references (no prediction)
MPI = "mpi"
#: input bytes per rank of the reference runs (a run curve's points)
SIZES = (64, 1 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20)
QUICK_SIZES = (1 << 10, 64 << 10, 1 << 20)
#: a run factor is kept within these (beyond them a measurement is broken, not the model)
RUN_RANGE = (0.1, 10.0)
#: the element type of the reference runs
DTYPE = "float32"
#: no reference run allocates a buffer larger than this per rank (an allgather's output is n times its input:
#: on 64 ranks 16 MiB each would be 1 GiB per buffer); the larger sizes keep the allreduce alone
MAX_BUFFER = 64 << 20


@dataclass(frozen=True)
class CalibrationRow:
    """One reference run: ``kind`` by ``algorithm`` at ``input_bytes`` per rank (the point of :data:`SIZES` it
    stands for), ``nbytes`` its nccl-tests size as run, ``us`` its time in every pass (the slowest rank's median)."""

    kind: str
    algorithm: str
    input_bytes: int
    nbytes: int
    us: tuple[float, ...]

    @property
    def measured_us(self) -> float:
        """The median over passes (the benchmark's rows, which it predicts, are one run each)."""
        return float(np.median(self.us))


def run_size(kind: str, n: int, input_bytes: int, itemsize: int) -> int:
    """The OMB size (``ccsynth bench``'s Size column) of a reference run of ``kind`` on ``n`` ranks closest above
    ``input_bytes`` per rank that every reference schedule can split: an allreduce's buffer a whole number of
    elements per chunk, an allgather's whole elements."""
    per = itemsize * baseline_chunk_factor(kind, n)
    return per * max(1, -(-int(input_bytes) // per))


def reference_kinds(n: int, input_bytes: int, itemsize: int = 4) -> tuple[str, ...]:
    """The kinds of :data:`REFERENCE_KINDS` run at ``input_bytes`` per rank on ``n`` ranks: those whose largest
    buffer (an allgather's output: ``n`` inputs) stays within :data:`MAX_BUFFER`."""
    def largest(kind: str) -> int:
        size = run_size(kind, n, input_bytes, itemsize)
        return size * n if kind == "allgather" else size

    return tuple(kind for kind in REFERENCE_KINDS if largest(kind) <= MAX_BUFFER)


def reference_schedules(kind: str, n: int) -> dict[str, Schedule]:
    """The reference schedules of ``kind`` on ``n`` ranks, as ``ccsynth bench --algo`` builds them."""
    coll = Collective(kind, n, baseline_chunk_factor(kind, n))
    return {name: make_baseline(name, coll, fully_connected(n)) for name in REFERENCE_ALGORITHMS}


def measure_calibration(comm, sizes: Sequence[int], iterations: Callable[[int], tuple[int, int]],
                        progress: Callable[[int], None] | None = None) -> list[CalibrationRow]:
    """One pass of reference runs on every rank (call it on every rank): per size of ``sizes`` (input bytes per
    rank) every kind of :data:`REFERENCE_KINDS` (:func:`reference_kinds`: within :data:`MAX_BUFFER`) by :data:`MPI`
    and each of :data:`REFERENCE_ALGORITHMS`,
    interleaved (:func:`ccsynth.bench.omb.measure`); ``iterations(size)`` gives (timed, warm-up) iterations and
    ``progress(size)`` is called before each size. Rows with one time each (:func:`merge_passes` joins passes)."""
    ctx = omb.Context(comm, omb.Options(sizes=tuple(sizes), dtype=DTYPE))
    algos = [MpiAlgorithm(), *(ScheduleAlgorithm(name) for name in REFERENCE_ALGORITHMS)]
    for kind in REFERENCE_KINDS:
        for algo in algos:
            algo.setup(kind, ctx)
    rows: list[CalibrationRow] = []
    try:
        for size in sizes:
            if progress is not None:
                progress(size)
            labels, cases = [], []
            for kind in reference_kinds(ctx.n, size, ctx.itemsize):
                osize = run_size(kind, ctx.n, size, ctx.itemsize)
                for algo in algos:
                    labels.append((kind, algo.name))
                    cases.append(omb.prepare(omb.BENCHMARKS[kind], ctx, algo, osize))
            iters, warmup = iterations(size)
            times = omb.measure(comm, cases, iters, warmup)
            for (kind, name), case, local in zip(labels, cases, times):
                us = omb.slowest_rank_median(comm.allgather(local))
                rows.append(CalibrationRow(kind, name, int(size), int(case.nbytes), (us,)))
            del cases
    finally:
        for algo in algos:
            algo.free()
    return rows


def merge_passes(passes: Iterable[Sequence[CalibrationRow]]) -> tuple[CalibrationRow, ...]:
    """The rows of several passes of :func:`measure_calibration` as one row per run with every pass's time."""
    merged: dict[tuple[str, str, int, int], list[float]] = {}
    for rows in passes:
        for r in rows:
            merged.setdefault((r.kind, r.algorithm, r.input_bytes, r.nbytes), []).extend(r.us)
    return tuple(CalibrationRow(k, a, i, b, tuple(us)) for (k, a, i, b), us in merged.items())


def predicted_rows(topology: Topology, rows: Sequence[CalibrationRow]) -> list[float | None]:
    """Per row the executor's predicted time on ``topology`` (None for :data:`MPI`'s rows and for a size a
    schedule cannot split), each at the footprint of all the rows of its size run in turn (where the topology
    prices a footprint)."""
    n = topology.n_ranks
    settings = ExecutorSettings(itemsize=np.dtype(DTYPE).itemsize)
    refs = {kind: reference_schedules(kind, n) for kind in {r.kind for r in rows}}
    footprints: dict[int, float | None] = {}
    if has_footprint_terms(topology):
        for size in {r.input_bytes for r in rows}:
            same = [r for r in rows if r.input_bytes == size]
            footprints[size] = sum(interleaved_footprint(r.kind, n, r.nbytes, [refs[r.kind].get(r.algorithm)],
                                                         settings) for r in same)
    out: list[float | None] = []
    for r in rows:
        schedule = refs[r.kind].get(r.algorithm)
        if schedule is None:
            out.append(None)
            continue
        try:
            out.append(simulate_run(schedule, topology, r.nbytes, settings,
                                    footprint_bytes=footprints.get(r.input_bytes)).time_us)
        except ScheduleError as e:
            log.info("no prediction for reference %s %s at %d bytes: %s", r.algorithm, r.kind, r.nbytes, e)
            out.append(None)
    return out


def fit_run_curve(topology: Topology, rows: Sequence[CalibrationRow]) -> SizeCurve | None:
    """``Topology.run_curve`` from the reference runs ``rows`` on a fitted ``topology`` (its own run curve, if
    any, left out): per input size the geometric mean of measured / predicted over the predicted rows, within
    :data:`RUN_RANGE`. None without rows to fit."""
    topo = replace(topology, run_curve=None)
    preds = predicted_rows(topo, rows)
    logs: dict[int, list[float]] = {}
    for r, p in zip(rows, preds):
        if p is not None and p > 0 and r.measured_us > 0:
            logs.setdefault(r.input_bytes, []).append(math.log(r.measured_us / p))
    if not logs:
        return None
    lo, hi = RUN_RANGE
    sizes = sorted(logs)
    factors = [min(hi, max(lo, math.exp(sum(logs[s]) / len(logs[s])))) for s in sizes]
    log.info("run curve: %s", ", ".join(f"{s} B x{f:.3g}" for s, f in zip(sizes, factors)))
    return SizeCurve(tuple(float(s) for s in sizes), tuple(factors))


def mpi_reference(rows: Sequence[CalibrationRow]) -> tuple[ReferenceTimes, ...]:
    """Per kind, MPI's own times of the reference runs by input bytes per rank (``Topology.mpi_reference``)."""
    out = []
    for kind in REFERENCE_KINDS:
        points = sorted({r.input_bytes: r.measured_us for r in rows
                         if r.kind == kind and r.algorithm == MPI and r.measured_us > 0}.items())
        if points:
            out.append(ReferenceTimes(kind, tuple(float(s) for s, _ in points), tuple(t for _, t in points)))
    return tuple(out)
