"""``ccsynth bench ... --predict TOPOLOGY``: the simulator's prediction beside every measured row.

For every algorithm that runs a schedule -- a baseline, ``default``,
``plan:FILE`` -- and every size, :class:`Predictor` takes the schedule that
actually ran at that size (the plan's entry for it, the baseline at the
chunk factor the bench built it with; none where the communicator fell
back to MPI's own collective) and predicts one call of it run by ccsynth's
executor on the topology (:func:`ccsynth.synth.executor_model.simulate_run`:
the schedule cut into the executor's pipeline slices, with its fusions and
its pre-posted receives, then simulated). ``mpi`` rows get no prediction:
there is no schedule to simulate. The rows that run through ccsynth's
communicator (``default``, ``plan:FILE``; a baseline runs its compiled
schedule directly) get the topology's ``communicator_overhead`` on top
(:func:`via_communicator`): the communicator's own per-call cost, which
``ccsynth topo profile`` measures beside the executor's and the simulator
never adds (0 in the catalog and in profiles written before it existed).

**Footprint.** Where the topology has a ``footprint_curve`` or a ``cold_call`` (a profile
measures one), a call's bytes cost more the more data a rank touches
between two calls on the same buffers (:mod:`ccsynth.synth.simulate`).
Run alone, a row's footprint is its own call's working set; with
``--interleave`` every algorithm of a size runs in turn, each on buffers of
its own, so a row's footprint is the working sets of all of them together
(:func:`interleaved_footprint`: each schedule's as the executor lays it
out, MPI's own collective its input and output).

What is compared: the *measured* figure is ``Row.median_us``, the median
over iterations of the slowest rank's time -- what the simulator's
makespan, the time until the last rank is done, predicts -- and the ratio
is ``measured / predicted`` (1.00 is a perfect prediction; above 1 the
machine is slower than predicted). :func:`error_table` summarises the
ratios as ``|measured / predicted - 1|`` per size decade (median and
worst), the figure ``docs/results.md`` reports.

**Re-predicting a saved run.** :func:`repredict_document` takes the
``--json`` document of a bench that ran with ``--predict`` and recomputes
every row's prediction with the model as it is *now* (and, if given,
another topology file): the schedule that ran is rebuilt from the row --
a baseline at the chunk factor the bench builds it with, ``default`` from
the built-in plan, ``plan:FILE`` from the plan file (looked up beside the
document when it has moved) -- and lowered and simulated as above. Model
changes are judged against fixed measurements this way, with no machine
time (``python -m ccsynth.bench.bench_predict --repredict DIR``).

Example:
    >>> from ccsynth.bench.omb import Row
    >>> rows = [Row(s, s, s // 4, 10, 2.0 * s, 1, 1, 0, 0, median_us=2.0 * s, predicted_us=s) for s in (8, 64, 1024)]
    >>> [(d.label, round(d.median, 2)) for d in error_table({"ring": rows})]
    [('8 B', 1.0), ('64 B', 1.0), ('1K', 1.0)]
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, replace
from collections.abc import Mapping, Sequence

import numpy as np

from pathlib import Path

from ccsynth.collectives.plan import Plan, load_plan
from ccsynth.collectives.schedule import Schedule
from ccsynth.collectives.spec import Collective
from ccsynth.errors import CCSynthError, ScheduleError
from ccsynth.formats.files import get_topology
from ccsynth.synth.baselines import BASELINES, make_baseline
from ccsynth.synth.default_plan import LazyDefaultPlan
from ccsynth.synth.executor_model import ExecutorSettings, simulate_run, working_set_run
from ccsynth.topologies import fully_connected
from ccsynth.topologies.model import Topology
from ccsynth.topologies.reference import ReferenceTimes
from ccsynth.units import format_size

__all__ = ["Predictor", "load_predict_topology", "SavedRun", "repredict_document", "via_communicator",
           "has_footprint_terms", "interleaved_footprint", "BAND_ANCHOR", "DecadeError", "band_of", "error_table", "error_lines",
           "DriftBand", "DRIFT_NOTE", "drift_table", "drift_lines"]

log = logging.getLogger(__name__)


def load_predict_topology(spec: str, n_ranks: int) -> Topology:
    """The topology of ``--predict`` (a file or catalog name); CCSynthError if its rank count differs."""
    topo = get_topology(spec)
    if topo.n_ranks != n_ranks:
        raise CCSynthError(
            f"--predict {spec!r} describes {topo.n_ranks} ranks but the benchmark runs on {n_ranks}; "
            f"profile this rank count (mpiexec -n {n_ranks} ccsynth topo profile -o machine.json) or start "
            f"{topo.n_ranks} ranks"
        )
    return topo


class Predictor:
    """Predicted times of the rows of one benchmark run on ``topology`` (cached per schedule and size)."""

    def __init__(self, topology: Topology, kind: str, ctx):
        self.topology = topology
        self.kind = kind
        self.ctx = ctx
        self.settings = ExecutorSettings(itemsize=ctx.itemsize)
        self._cache: dict[tuple[int, int, float | None], float | None] = {}

    def predict(self, algo, row, footprint_bytes: float | None = None) -> float | None:
        """Predicted us of ``row`` of ``algo``; None for MPI's own collective (or a row that fell back to it).
        ``footprint_bytes``: the call's footprint per rank (None: its own working set; see the module docstring)."""
        if row.algorithm == "mpi" or row.algorithm.startswith("mpi "):
            return None
        schedule = algo.schedule_for(self.kind, self.ctx, row.nbytes)
        if schedule is None:
            return None
        key = (id(schedule), row.nbytes, footprint_bytes)
        if key not in self._cache:
            try:
                self._cache[key] = simulate_run(schedule, self.topology, row.nbytes, self.settings,
                                                footprint_bytes=footprint_bytes).time_us
            except ScheduleError as e:  # a size this schedule cannot split: the row ran on MPI's own
                log.info("no prediction for %s at %d bytes: %s", schedule.name, row.nbytes, e)
                self._cache[key] = None
        pred = self._cache[key]
        if pred is not None and via_communicator(algo.name):
            pred += self.topology.communicator_overhead
        return pred

    def annotate(self, algo, row, footprint_bytes: float | None = None):
        """``row`` with ``predicted_us`` set (unchanged for rows without a schedule)."""
        pred = self.predict(algo, row, footprint_bytes)
        return row if pred is None else replace(row, predicted_us=pred)

    def interleaved_footprint(self, algos, nbytes: int) -> float | None:
        """The footprint of every row of ``algos`` run in turn at ``nbytes`` (None where the topology prices no
        footprint: nothing to compute)."""
        if not has_footprint_terms(self.topology):
            return None
        return interleaved_footprint(self.kind, self.topology.n_ranks, nbytes,
                                     [a.schedule_for(self.kind, self.ctx, nbytes) for a in algos], self.settings)


def has_footprint_terms(topology: Topology) -> bool:
    """Whether ``topology`` prices a call by its footprint (a ``footprint_curve`` or a ``cold_call``)."""
    return topology.footprint_curve is not None or topology.cold_call is not None


def interleaved_footprint(kind: str, n: int, nbytes: int, schedules: Sequence[Schedule | None],
                          settings: ExecutorSettings) -> float:
    """Bytes one rank touches between two calls of the same algorithm when ``schedules`` run in turn at ``nbytes``
    (nccl-tests size), each on buffers of its own: the sum of their working sets (the executor's layout; None --
    MPI's own collective -- its input and output, a schedule the size cannot split the same)."""
    coll = Collective(kind, n)
    own = coll.chunk_bytes(float(nbytes)) * (coll.in_chunks + coll.out_chunks)
    total = 0.0
    for s in schedules:
        ws = own
        if s is not None:
            try:
                ws = working_set_run(s, nbytes, settings)
            except ScheduleError:
                ws = own
        total += ws
    return total


class SavedRun:
    """The schedules of a saved bench document (``--json``), rebuilt per column and size (see the module docstring).

    ``folder``: where to look for a ``plan:FILE`` whose recorded path no
    longer exists (the file of that name beside the document).
    """

    def __init__(self, doc: Mapping, folder: str | Path | None = None):
        self.kind = str(doc["collective"])
        self.n = int(doc["n_ranks"])
        self.itemsize = int(np.dtype(doc.get("dtype", "float32")).itemsize)
        self.chunks = _chunks_option(str(doc.get("command", "")))
        self.folder = Path(folder) if folder is not None else None
        self._default = LazyDefaultPlan()
        self._plans: dict[str, Plan] = {}
        self._baselines: dict[str, Schedule] = {}

    def _plan(self, path: str) -> Plan:
        if path not in self._plans:
            p = Path(path)
            if not p.exists() and self.folder is not None:
                p = self.folder / p.name
            self._plans[path] = load_plan(p)
        return self._plans[path]

    def schedule(self, column: str, row: Mapping) -> Schedule | None:
        """The schedule column ``column`` ran at ``row`` (None: MPI's own collective, or a fallback to it)."""
        algorithm = str(row.get("algorithm", column))
        if column == "mpi" or algorithm.startswith("mpi"):
            return None
        nbytes = _nccl_size(row)
        if column in ("default", "plan"):
            entry = self._default.entry_for(self.kind, self.n, nbytes)
        elif column.startswith("plan:"):
            entry = self._plan(column[len("plan:"):]).entry_for(self.kind, self.n, nbytes)
        elif column in BASELINES:
            if column not in self._baselines:
                cf = self.chunks or (self.n if self.kind == "allreduce" else 1)
                self._baselines[column] = make_baseline(column, Collective(self.kind, self.n, cf),
                                                        fully_connected(self.n))
            return self._baselines[column]
        else:
            return None
        return entry.schedule if entry is not None else None


def via_communicator(column: str) -> bool:
    """Whether the bench column ``column`` runs through ccsynth's communicator (``default``, ``plan``,
    ``plan:FILE``), whose per-call cost its predictions add (see the module docstring)."""
    return column in ("default", "plan") or column.startswith("plan:")
def _footprints(doc: Mapping, saved: SavedRun, topology: Topology, settings: ExecutorSettings) -> dict[int, float]:
    """Per size of an ``--interleave`` run, the footprint of its rows (:func:`interleaved_footprint`); empty for a
    run of one algorithm at a time, or where the topology prices no footprint (each row: its own call's)."""
    if not has_footprint_terms(topology) or "--interleave" not in str(doc.get("command", "")).split():
        return {}
    by_size: dict[int, list[Schedule | None]] = {}
    for column, rows in doc["results"].items():
        for row in rows:
            by_size.setdefault(_nccl_size(row), []).append(saved.schedule(column, row))
    return {size: interleaved_footprint(saved.kind, saved.n, size, schedules, settings)
            for size, schedules in by_size.items()}


def _nccl_size(row: Mapping) -> int:
    """A saved row's nccl-tests size (what plans and the predictor are indexed by; OMB's own size differs for
    allgather, say)."""
    return int(row.get("nccl_size_bytes", row["size_bytes"]))


def _chunks_option(command: str) -> int | None:
    """The ``--chunks`` of a recorded bench command line (None when it had none)."""
    words = command.split()
    for i, w in enumerate(words):
        if w == "--chunks" and i + 1 < len(words):
            return int(words[i + 1])
        if w.startswith("--chunks="):
            return int(w.split("=", 1)[1])
    return None


def repredict_document(doc: Mapping, topology: Topology, folder: str | Path | None = None) -> dict:
    """``doc`` (a bench ``--json`` document) with every row's ``predicted_us`` recomputed on ``topology``.

    Rows without a schedule lose their prediction; the document's
    ``prediction_error`` is recomputed too. Raises :class:`CCSynthError`
    when the topology's rank count differs from the run's.
    """
    saved = SavedRun(doc, folder)
    if topology.n_ranks != saved.n:
        raise CCSynthError(f"topology {topology.name!r} has {topology.n_ranks} ranks; the run had {saved.n}")
    settings = ExecutorSettings(itemsize=saved.itemsize)
    cache: dict[tuple[int, int], float | None] = {}
    results: dict[str, list[dict]] = {}
    footprints = _footprints(doc, saved, topology, settings)
    for column, rows in doc["results"].items():
        out = []
        for row in rows:
            new = {k: v for k, v in row.items() if k != "predicted_us"}
            schedule = saved.schedule(column, row)
            if schedule is not None:
                key = (id(schedule), _nccl_size(row))
                if key not in cache:
                    try:
                        cache[key] = simulate_run(schedule, topology, key[1], settings,
                                                  footprint_bytes=footprints.get(key[1])).time_us
                    except ScheduleError as e:
                        log.info("no prediction for %s at %s bytes: %s", schedule.name, key[1], e)
                        cache[key] = None
                pred = cache[key]
                if pred is not None:
                    new["predicted_us"] = pred + (topology.communicator_overhead if via_communicator(column) else 0.0)
            out.append(new)
        results[column] = out
    redone = dict(doc)
    redone["results"] = results
    redone["predict"] = topology.name
    return redone


#: size bands of the error table start at multiples of 8 of this (so that one starts at 64 KiB)
BAND_ANCHOR = 64 << 10


@dataclass(frozen=True)
class DecadeError:
    """``|measured / predicted - 1|`` over the rows of one size band (a factor of 8: three powers of two)."""

    label: str
    lo: int  # smallest size in the band
    hi: int  # largest size in the band
    rows: int
    median: float
    worst: float
    worst_at: str


def band_of(size: int) -> int:
    """The band index of ``size``: band ``k`` holds ``[64 KiB * 8**k, 64 KiB * 8**(k+1))``."""
    return math.floor(math.log(max(size, 1) / BAND_ANCHOR, 8) + 1e-9)


def error_table(results: Mapping[str, Sequence]) -> list[DecadeError]:
    """Median and worst ``|measured / predicted - 1|`` per size band over every predicted row of ``results``.

    Bands are factors of 8 anchored at 64 KiB (..., 8-32 KiB, 64-256 KiB,
    512 KiB-2 MiB, ...), so none straddles 64 KiB.
    """
    by_band: dict[int, list[tuple[float, str, int]]] = {}
    for name, rows in results.items():
        for r in rows:
            if getattr(r, "predicted_us", None) and r.median_us:
                by_band.setdefault(band_of(r.size), []).append((abs(r.median_us / r.predicted_us - 1), name, r.size))
    out = []
    for k in sorted(by_band):
        errs = by_band[k]
        sizes = sorted({e[2] for e in errs})
        worst = max(errs)
        label = _size(sizes[0]) + (f"-{_size(sizes[-1])}" if len(sizes) > 1 else "")
        out.append(DecadeError(label, sizes[0], sizes[-1], len(errs), float(np.median([e[0] for e in errs])),
                               worst[0], f"{worst[1]} at {_size(worst[2])}"))
    return out


def _size(nbytes: int) -> str:
    text = format_size(nbytes)
    return f"{text} B" if text.isdigit() else text


def error_lines(results: Mapping[str, Sequence]) -> list[str]:
    """The error table as lines for the end of the bench output."""
    table = error_table(results)
    if not table:
        return []
    lines = ["# Prediction error: |measured / predicted - 1| per size band, over every predicted row "
             "(measured: median over iterations of the slowest rank)",
             f"# {'sizes':<18}{'rows':>6}{'median':>9}{'worst':>9}  worst at"]
    for d in table:
        lines.append(f"  {d.label:<18}{d.rows:6d}{100 * d.median:8.0f}%{100 * d.worst:8.0f}%  {d.worst_at}")
    return lines


#: a band whose MPI drift leaves ``[1 / (1 + this), 1 + this]`` gets a word in the drift lines
DRIFT_NOTE = 0.25


@dataclass(frozen=True)
class DriftBand:
    """MPI's own collective in one size band of a run, over its time when the machine was profiled."""

    label: str
    lo: int
    hi: int
    rows: int
    median: float  # median over the band's sizes of measured / profiled
    least: float
    most: float


def drift_table(results: Mapping[str, Sequence], reference: ReferenceTimes | None) -> list[DriftBand]:
    """Per size band, MPI's measured median over ``reference``, its time when the machine was profiled
    (``Topology.mpi_reference_for(kind)``, by the row's OMB size: input bytes per rank for allreduce and
    allgather); empty without a reference or without an ``mpi`` column."""
    rows = results.get("mpi")
    if reference is None or not rows:
        return []
    by_band: dict[int, list[tuple[int, float]]] = {}
    for r in rows:
        if r.median_us and r.median_us > 0:
            by_band.setdefault(band_of(r.size), []).append((r.size, r.median_us / reference.time_us(r.size)))
    out = []
    for k in sorted(by_band):
        got = sorted(by_band[k])
        ratios = [q for _, q in got]
        label = _size(got[0][0]) + (f"-{_size(got[-1][0])}" if len(got) > 1 else "")
        out.append(DriftBand(label, got[0][0], got[-1][0], len(got), float(np.median(ratios)), min(ratios),
                             max(ratios)))
    return out


def drift_lines(results: Mapping[str, Sequence], topology: Topology, kind: str, source: str) -> list[str]:
    """The drift table as lines for the end of the bench output (``source``: the topology as the user named it)."""
    table = drift_table(results, topology.mpi_reference_for(kind))
    if not table:
        return []
    lines = [f"# The machine since its profile: MPI's own {kind} / its time when {source} was profiled, per size "
             "band (no prediction uses it; a prediction carries the machine's move as error)",
             f"# {'sizes':<18}{'rows':>6}{'median':>9}  range"]
    for d in table:
        lines.append(f"  {d.label:<18}{d.rows:6d}{d.median:8.2f}x  {d.least:.2f}-{d.most:.2f}x")
    moved = [d.label for d in table if not 1 / (1 + DRIFT_NOTE) <= d.median <= 1 + DRIFT_NOTE]
    if moved:
        lines.append(f"# MPI's own {kind} moved by more than {100 * DRIFT_NOTE:g}% since the profile at "
                     f"{', '.join(moved)}: the machine is not what was profiled there (profile again: ccsynth topo "
                     "profile)")
    return lines
