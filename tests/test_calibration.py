"""The run curve (``Topology.run_curve``) and the reference collectives that measure it (bench/calibration.py)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from ccsynth.bench import calibration as cal
from ccsynth.bench.predict import interleaved_footprint
from ccsynth.bench.profile import KernelRates, Probe, ProfileOptions, RawProfile, patterns
from ccsynth.bench.profile_raw import raw_from_dict, raw_to_dict
from ccsynth.collectives.spec import Collective
from ccsynth.errors import TopologyError
from ccsynth.synth.baselines import make_baseline
from ccsynth.synth.executor_model import ExecutorSettings, lower_for_executor, simulate_run, working_set_run
from ccsynth.synth.simulate import input_bytes_per_rank, run_factor, simulate, simulate_graph
from ccsynth.topologies import fully_connected
from ccsynth.topologies.curve import SizeCurve
from ccsynth.topologies.io import topology_from_dict, topology_to_dict
from ccsynth.topologies.model import Link, Topology
from ccsynth.topologies.reference import ReferenceTimes
from toys import assert_verified

MPIEXEC = Path(sys.executable).parent / "mpiexec"
RUN = SizeCurve((1000.0, 4000.0), (2.0, 0.5))


def machine(n: int = 2, **kw) -> Topology:
    """A profiled-looking machine: one engine per rank, 1 us + 0.5 us per message end, 5 GB/s, local work 10 GB/s."""
    links = tuple(Link(a, b, 1.0, 5.0, 0.5) for a in range(n) for b in range(n) if a != b)
    return Topology(f"m{n}", n, links=links, overhead_scope="rank", local_bw=10.0, call_overhead=2.0, **kw)


# ------------------------------------------------------------------ the simulator
def test_input_bytes_per_rank_is_the_collectives_input_chunks():
    assert input_bytes_per_rank(Collective("allreduce", 4, 4), 4096) == 4096
    assert input_bytes_per_rank(Collective("allgather", 4), 4096) == 1024  # one shard of the nccl-tests size
    assert input_bytes_per_rank(Collective("reduce_scatter", 4), 4096) == 4096  # the whole input buffer


@pytest.mark.parametrize("kind,size,at", [("allreduce", 1000, 1000), ("allreduce", 2500, 2500),
                                          ("allgather", 16_000, 8000), ("allgather", 400, 200)])
def test_a_whole_run_is_scaled_by_the_run_curve_at_its_input_bytes(kind, size, at):
    coll = Collective(kind, 2, 2 if kind == "allreduce" else 1)
    s = make_baseline("ring", coll, fully_connected(2))
    plain, curved = machine(), machine(run_curve=RUN)
    graph = lower_for_executor(s, size)
    base, scaled = simulate_graph(graph, plain), simulate_graph(graph, curved)
    # by hand: e(m) linear between (1000, 2000) and (4000, 2000): the factor is 2000 / m there, 2 below, 0.5 above
    want = 2.0 if at <= 1000 else 0.5 if at >= 4000 else 2000.0 / at
    assert run_factor(curved, coll, size) == pytest.approx(want)
    assert scaled.time_us == pytest.approx(base.time_us * want)
    assert scaled.algbw == pytest.approx(base.algbw / want) and scaled.busbw == pytest.approx(base.busbw / want)
    assert scaled.lower_bound_us == base.lower_bound_us and scaled.gap == pytest.approx(base.gap * want)
    assert simulate_run(s, curved, size).time_us == pytest.approx(scaled.time_us)
    assert run_factor(plain, coll, size) == 1.0


def test_a_schedule_and_its_bound_ignore_the_run_curve():
    """Synthesis compares schedules with simulate: a factor common to all of them must not move it."""
    s = make_baseline("ring", Collective("allreduce", 4, 4), fully_connected(4))
    for size in (64, 4096, 1 << 20):
        a, b = simulate(s, machine(4), size), simulate(s, machine(4, run_curve=RUN), size)
        assert a.time_us == b.time_us and a.lower_bound_us == b.lower_bound_us
    assert machine(4, run_curve=RUN).fastest.run_curve == RUN  # no byte moves faster: bounds keep it as it is


def test_run_curve_in_the_topology_file_and_its_errors():
    t = machine(run_curve=RUN)
    d = topology_to_dict(t)
    assert d["run_curve"] == {"version": 1, "sizes_bytes": [1000.0, 4000.0], "factors": [2.0, 0.5]}
    assert topology_from_dict(json.loads(json.dumps(d))) == t
    assert "run_curve" not in topology_to_dict(machine())
    bad = dict(d, run_curve={"version": 1, "sizes_bytes": [1000], "factors": [0]})
    with pytest.raises(TopologyError, match="run_curve"):
        topology_from_dict(bad)
    with pytest.raises(TopologyError, match="run_curve must be a SizeCurve"):
        machine(run_curve=[(1000, 2.0)])


# ------------------------------------------------------------------ the references
@pytest.mark.parametrize("n", [2, 3, 4])
@pytest.mark.parametrize("kind", cal.REFERENCE_KINDS)
def test_reference_schedules_are_the_bench_baselines_and_implement_their_collective(n, kind):
    refs = cal.reference_schedules(kind, n)
    assert tuple(refs) == cal.REFERENCE_ALGORITHMS
    for s in refs.values():
        assert_verified(s)
        assert s.collective.kind == kind and s.collective.n_ranks == n
        assert s.collective.chunk_factor == (n if kind == "allreduce" else 1)


def test_run_size_is_one_every_reference_splits():
    assert cal.run_size("allreduce", 4, 64, 4) == 64
    assert cal.run_size("allreduce", 3, 64, 4) == 72  # 18 floats: 6 per chunk
    assert cal.run_size("allgather", 3, 64, 4) == 64
    assert cal.run_size("allreduce", 4, 1, 4) == 16  # at least one element per chunk


def test_reference_kinds_keep_every_buffer_within_the_cap():
    assert cal.reference_kinds(4, 16 << 20) == cal.REFERENCE_KINDS  # allgather output 64 MiB: at the cap
    assert cal.reference_kinds(8, 16 << 20) == ("allreduce",)  # 128 MiB would be past it
    assert cal.reference_kinds(64, 1 << 20) == cal.REFERENCE_KINDS and cal.reference_kinds(128, 1 << 20) == ("allreduce",)
    assert all(cal.reference_kinds(n, s) == cal.REFERENCE_KINDS for n in (2, 3, 4) for s in cal.SIZES)


def rows_for(topology: Topology, factors: dict[int, tuple[float, ...]]) -> list[cal.CalibrationRow]:
    """Reference rows whose times are the predictions times the given factors (per size: one per reference row),
    beside an MPI row per kind (no prediction)."""
    n = topology.n_ranks
    rows = []
    for size in factors:
        for kind in cal.REFERENCE_KINDS:
            nbytes = cal.run_size(kind, n, size, 4) * (n if kind == "allgather" else 1)
            rows.append(cal.CalibrationRow(kind, cal.MPI, size, nbytes, (1.0,)))
            rows += [cal.CalibrationRow(kind, name, size, nbytes, (0.0,)) for name in cal.REFERENCE_ALGORITHMS]
    preds = cal.predicted_rows(topology, rows)
    out, it = [], {s: iter(f) for s, f in factors.items()}
    for r, p in zip(rows, preds):
        out.append(r if p is None else replace(r, us=(p * next(it[r.input_bytes]),)))
    return out


def test_fit_recovers_the_factor_of_every_size():
    t = machine(2)
    rows = rows_for(t, {64: (1.5,) * 4, 65536: (0.8,) * 4, 1 << 20: (1.2,) * 4})
    curve = cal.fit_run_curve(t, rows)
    assert curve.sizes == (64.0, 65536.0, 1048576.0)
    assert curve.factors == pytest.approx((1.5, 0.8, 1.2))
    # the topology's own run curve is left out of the predictions it is fitted on
    assert cal.fit_run_curve(replace(t, run_curve=RUN), rows).factors == pytest.approx(curve.factors)


def test_fit_takes_the_geometric_mean_clamps_and_needs_predicted_rows():
    t = machine(2)
    curve = cal.fit_run_curve(t, rows_for(t, {1024: (2.0, 0.5, 4.0, 0.25), 4096: (50.0,) * 4, 8192: (0.001,) * 4}))
    assert curve.factors == pytest.approx((1.0, cal.RUN_RANGE[1], cal.RUN_RANGE[0]))
    assert cal.fit_run_curve(t, []) is None
    assert cal.fit_run_curve(t, [cal.CalibrationRow("allreduce", cal.MPI, 64, 64, (5.0,))]) is None


def test_predictions_are_at_the_footprint_of_every_row_of_their_size():
    fp = SizeCurve((1 << 20, 64 << 20), (1.0, 3.0))
    t = machine(2, footprint_curve=fp)
    size = 4 << 20
    rows = [cal.CalibrationRow(k, a, size, cal.run_size(k, 2, size, 4) * (2 if k == "allgather" else 1), (1.0,))
            for k in cal.REFERENCE_KINDS for a in (cal.MPI, *cal.REFERENCE_ALGORITHMS)]
    settings = ExecutorSettings(itemsize=4)
    total = 0.0
    for r in rows:  # by hand: MPI's rows their input and output, the schedules the executor's working set
        if r.algorithm == cal.MPI:
            total += size * (1 + (2 if r.kind == "allgather" else 1))
        else:
            total += working_set_run(cal.reference_schedules(r.kind, 2)[r.algorithm], r.nbytes, settings)
    assert total == pytest.approx(sum(interleaved_footprint(r.kind, 2, r.nbytes, [None if r.algorithm == cal.MPI else
                                                                                  cal.reference_schedules(r.kind, 2)[r.algorithm]],
                                                            settings) for r in rows))
    preds = cal.predicted_rows(t, rows)
    for r, p in zip(rows, preds):
        if r.algorithm == cal.MPI:
            assert p is None
        else:
            s = cal.reference_schedules(r.kind, 2)[r.algorithm]
            assert p == pytest.approx(simulate_run(s, t, r.nbytes, settings, footprint_bytes=total).time_us)
            assert p > simulate_run(s, t, r.nbytes, settings).time_us  # its own working set alone: cheaper


def test_passes_merge_into_one_row_per_run_with_the_median():
    a = [cal.CalibrationRow("allreduce", "ring", 64, 64, (3.0,)), cal.CalibrationRow("allreduce", "mpi", 64, 64, (1.0,))]
    b = [cal.CalibrationRow("allreduce", "ring", 64, 64, (5.0,)), cal.CalibrationRow("allreduce", "mpi", 64, 64, (2.0,))]
    c = [cal.CalibrationRow("allreduce", "ring", 64, 64, (4.5,))]
    merged = cal.merge_passes([a, b, c])
    assert [(r.algorithm, r.us) for r in merged] == [("ring", (3.0, 5.0, 4.5)), ("mpi", (1.0, 2.0))]
    assert merged[0].measured_us == 4.5 and merged[1].measured_us == 1.5


# ------------------------------------------------------------------ the raw profile
def _raw(calibration=()) -> RawProfile:
    pat = patterns([0, 0])[0]
    return RawProfile(2, ProfileOptions(quick=True), ("h", "h"), (2, 2), "MPI", "2026-12-03 04:00 UTC", "0.1",
                      ((Probe(pat, "chain", 1, 8), (3.0, 2.5)),), (), (), KernelRates(5.0, 6.0, 4.5, 1 << 24),
                      calibration=tuple(calibration))


def test_raw_profile_keeps_the_reference_runs_and_an_older_file_has_none():
    rows = (cal.CalibrationRow("allgather", "ring", 1024, 2048, (7.5, 7.0)),
            cal.CalibrationRow("allgather", "mpi", 1024, 2048, (5.25,)))
    raw = _raw(rows)
    doc = json.loads(json.dumps(raw_to_dict(raw)))
    assert doc["calibration"][0] == {"collective": "allgather", "algorithm": "ring", "input_bytes": 1024,
                                     "nbytes": 2048, "us": [7.5, 7.0]}
    assert raw_from_dict(doc) == raw
    old = {k: v for k, v in doc.items() if k != "calibration"}
    assert raw_from_dict(old).calibration == ()
    assert not ProfileOptions(calibrate=False).calibration_sizes
    assert ProfileOptions(quick=True).calibration_sizes == cal.QUICK_SIZES
    assert ProfileOptions().calibration_sizes == cal.SIZES
    # bench's iteration counts shared among the passes: 200 small, 20 large over 3 passes
    assert ProfileOptions().calibration_iterations(1024) == (67, 20)
    assert ProfileOptions().calibration_iterations(1 << 20) == (7, 2)


# ------------------------------------------------------------------ under MPI
WORKER = """
import json, sys
from mpi4py import MPI
from ccsynth.bench import calibration as cal
seen = []
rows = cal.measure_calibration(MPI.COMM_WORLD, (1024, 65536), lambda s: (3, 1), seen.append)
if MPI.COMM_WORLD.Get_rank() == 0:
    print(json.dumps({"seen": seen, "rows": [[r.kind, r.algorithm, r.input_bytes, r.nbytes, list(r.us)] for r in rows]}))
"""


@pytest.mark.mpi
@pytest.mark.parametrize("ranks", [2, 3])
def test_reference_runs_under_mpi(ranks):
    if not MPIEXEC.exists():
        pytest.skip("mpiexec not installed in the virtual environment")
    proc = subprocess.run([str(MPIEXEC), "-n", str(ranks), sys.executable, "-c", WORKER], capture_output=True,
                          text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["seen"] == [1024, 65536]
    got = {(k, a, i): (b, us) for k, a, i, b, us in doc["rows"]}
    assert len(got) == len(doc["rows"]) == 2 * len(cal.REFERENCE_KINDS) * (1 + len(cal.REFERENCE_ALGORITHMS))
    for (kind, algo, size), (nbytes, us) in got.items():
        assert algo in (cal.MPI, *cal.REFERENCE_ALGORITHMS) and kind in cal.REFERENCE_KINDS
        per_rank = cal.run_size(kind, ranks, size, 4)
        assert nbytes == per_rank * (ranks if kind == "allgather" else 1)
        assert len(us) == 1 and math.isfinite(us[0]) and us[0] > 0


# ------------------------------------------------------------------ MPI's own times: the machine's drift
def test_reference_times_interpolate_in_log_log_and_extrapolate_by_regime():
    r = ReferenceTimes("allreduce", (1024, 16384, 1 << 20), (10.0, 40.0, 640.0))
    assert r.time_us(64) == 10.0 and r.time_us(1024) == 10.0  # below: latency-bound, the first point's time
    # between 1 KiB and 16 KiB the time goes as size**0.5 (x16 in bytes, x4 in time): 4 KiB -> x2
    assert r.time_us(4096) == pytest.approx(20.0)
    assert r.time_us(1 << 20) == 640.0 and r.time_us(4 << 20) == pytest.approx(2560.0)  # above: in proportion
    for bad in [dict(sizes=(2, 1), us=(1.0, 2.0)), dict(sizes=(1,), us=(0.0,)), dict(sizes=(), us=()),
                dict(sizes=(1, 2), us=(1.0,))]:
        with pytest.raises(TopologyError, match="MPI reference"):
            ReferenceTimes("allreduce", **bad)


def test_mpi_reference_in_the_topology_file_and_its_errors():
    refs = (ReferenceTimes("allreduce", (64.0, 1024.0), (4.0, 5.0)), ReferenceTimes("allgather", (64.0,), (3.0,)))
    t = machine(mpi_reference=refs)
    d = json.loads(json.dumps(topology_to_dict(t)))
    assert d["mpi_reference"]["collectives"][0] == {"collective": "allreduce", "sizes_bytes": [64.0, 1024.0],
                                                    "us": [4.0, 5.0]}
    assert topology_from_dict(d) == t and t.mpi_reference_for("allgather") == refs[1]
    assert t.mpi_reference_for("alltoall") is None and "mpi_reference" not in topology_to_dict(machine())
    with pytest.raises(TopologyError, match="two MPI references"):
        machine(mpi_reference=(refs[0], refs[0]))
    bad = json.loads(json.dumps(d))
    bad["mpi_reference"]["collectives"][1]["us"] = [-3.0]
    with pytest.raises(TopologyError, match=r"mpi_reference\.collectives\[1\]\.us\[0\]"):
        topology_from_dict(bad)
    bad["mpi_reference"]["collectives"][1] = {"collective": "allgather", "sizes": [1], "us": [1]}
    with pytest.raises(TopologyError, match="unknown key 'sizes'"):
        topology_from_dict(bad)


def test_the_profile_keeps_mpis_reference_times_per_kind():
    rows = [cal.CalibrationRow("allreduce", cal.MPI, 1024, 1024, (6.0, 4.0, 5.0)),
            cal.CalibrationRow("allreduce", cal.MPI, 64, 64, (3.0,)),
            cal.CalibrationRow("allreduce", "ring", 64, 64, (9.0,)),
            cal.CalibrationRow("allgather", cal.MPI, 64, 128, (2.5,))]
    refs = cal.mpi_reference(rows)
    assert refs == (ReferenceTimes("allreduce", (64.0, 1024.0), (3.0, 5.0)), ReferenceTimes("allgather", (64.0,), (2.5,)))
    assert cal.mpi_reference([r for r in rows if r.algorithm != cal.MPI]) == ()


def test_drift_of_mpis_own_rows_per_band_by_hand():
    from types import SimpleNamespace

    from ccsynth.bench.bench_predict import drift_summary
    from ccsynth.bench.predict import drift_lines, drift_table

    t = machine(mpi_reference=(ReferenceTimes("allreduce", (1024.0, 1 << 20), (10.0, 1000.0)),))

    def row(size, us):
        return SimpleNamespace(size=size, median_us=us)

    results = {"mpi": [row(1024, 12.0), row(2048, 13.0), row(65536, 320.0), row(1 << 20, 1000.0)],
               "ring": [row(1024, 50.0)]}
    # profiled: 10 us at 1 KiB, 1000 us at 1 MiB, log-log between: x1024 in bytes is x100 in time, so a size
    # 2**k times 1 KiB took 10 * 2**(k * e) us with e = log(100) / log(1024)
    e = math.log(100) / math.log(1024)
    table = drift_table(results, t.mpi_reference_for("allreduce"))
    assert [(d.label, d.rows) for d in table] == [("1K-2K", 2), ("64K", 1), ("1M", 1)]
    assert table[0].median == pytest.approx((1.2 + 13.0 / (10 * 2 ** e)) / 2)
    assert (table[0].least, table[0].most) == (pytest.approx(13.0 / (10 * 2 ** e)), pytest.approx(1.2))
    assert table[1].median == pytest.approx(320.0 / (10 * 2 ** (6 * e))) and table[2].median == pytest.approx(1.0)
    lines = drift_lines(results, t, "allreduce", "m.json")
    assert "MPI's own allreduce / its time when m.json was profiled" in lines[0]
    assert lines[-1].startswith("# MPI's own allreduce moved by more than 25%") and "64K" in lines[-1]
    assert "1M" not in lines[-1]
    assert drift_table(results, t.mpi_reference_for("allgather")) == []
    assert drift_table({"ring": []}, t.mpi_reference_for("allreduce")) == []
    case = {"n": 2, "topology": topology_to_dict(t), "runs": {"allreduce": {"json": {"results": {
        "mpi": [{"size_bytes": 1024, "median_us": 12.0}]}}}}}
    summary = drift_summary([case])
    assert "| 1K | 1.20x |" in summary and "| sizes | allreduce 2r |" in summary
