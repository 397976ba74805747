"""``ccsynth bench``: OMB-style microbenchmarks, end to end under mpiexec, and their pieces."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from ccsynth.bench import report
from ccsynth.bench import validate as V
from ccsynth.bench.omb import BENCHMARKS, Options, Row

VENV_BIN = Path(sys.executable).parent
MPIEXEC = VENV_BIN / "mpiexec"
TIMEOUT = 120


def _ccsynth(*args: str, ranks: int | None = None, timeout: int = TIMEOUT, cwd=None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "ccsynth", "bench", *args]
    if ranks is not None:
        if not MPIEXEC.exists():
            pytest.skip("mpiexec not installed in the virtual environment")
        cmd = [str(MPIEXEC), "-n", str(ranks), *cmd]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env)


def _tables(stdout: str) -> dict[str, dict]:
    """algorithm -> {"header": [# lines], "columns": str, "rows": [[cells]]} parsed from the OMB output."""
    tables: dict[str, dict] = {}
    current = None
    for line in stdout.splitlines():
        if line.startswith("# OMB Python MPI"):
            current = {"header": [line], "rows": []}
        elif line.startswith(("# Comparison", "# Profile")):
            current = {"header": [line], "rows": []}
            tables["__comparison__" if line.startswith("# Comparison") else "__profile__"] = current
        elif current is None or not line.strip():
            continue
        elif line.startswith("#"):
            current["header"].append(line)
            if line.startswith("# ccsynth algorithm: "):
                tables[line.split(": ", 1)[1]] = current
        else:
            current["rows"].append(line.split())
    return tables


def _pow2(lo: int, hi: int) -> list[int]:
    out, p = [], lo
    while p <= hi:
        out.append(p)
        p *= 2
    return out


def _assert_clean_run(proc: subprocess.CompletedProcess) -> None:
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert "Traceback" not in proc.stderr


def _have_gpu() -> bool:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


# ------------------------------------------------------------ end to end
@pytest.mark.mpi
@pytest.mark.parametrize("ranks", [2, 4])
def test_allreduce_mpi_and_ring_side_by_side(ranks, tmp_path):
    out = tmp_path / "ar.json"
    proc = _ccsynth("allreduce", "-m", "8:64K", "-c", "--algo", "mpi,ring", "-i", "5", "-x", "1", "--json", str(out), "--profile",
                    ranks=ranks)
    _assert_clean_run(proc)
    tables = _tables(proc.stdout)
    sizes = _pow2(8, 64 * 1024)
    for algo in ("mpi", "ring"):
        t = tables[algo]
        assert t["header"][0] == "# OMB Python MPI Allreduce Test"
        assert any(h.startswith("# Size (B)") and "Avg Latency(us)" in h and "busbw(GB/s)" in h for h in t["header"])
        assert [int(r[0]) for r in t["rows"]] == sizes
        assert all(r[-1] == "Pass" for r in t["rows"]), t["rows"]
        assert all(float(r[1]) > 0 for r in t["rows"])
    comp = tables["__comparison__"]
    assert [int(r[0]) for r in comp["rows"]] == sizes
    doc = json.loads(out.read_text())
    assert doc["benchmark"] == "allreduce" and doc["n_ranks"] == ranks
    assert doc["algorithms"] == ["mpi", "ring"]
    for algo in ("mpi", "ring"):
        rows = doc["results"][algo]
        assert [r["size_bytes"] for r in rows] == sizes
        assert all(r["valid"] is True and r["nccl_size_bytes"] == r["size_bytes"] and r["n_iterations"] == 5 for r in rows)
        # busbw = algbw * 2(n-1)/n for allreduce (nccl-tests)
        assert all(r["busbw_GBps"] == pytest.approx(r["algbw_GBps"] * 2 * (ranks - 1) / ranks) for r in rows)
    # --profile: the executor's breakdown per size for the ccsynth schedule (not for MPI's own)
    assert [int(r[0]) for r in tables["__profile__"]["rows"]] == sizes
    prof = doc["results"]["ring"][-1]["profile"]
    assert prof["total"] > 0 and prof["wait_calls"] >= 1 and "profile" not in doc["results"]["mpi"][0]
    ratio = doc["comparison"]["rows"][0]
    assert doc["comparison"]["base"] == "mpi"
    assert ratio["ratio"]["ring"] == pytest.approx(doc["results"]["ring"][0]["avg_us"] / doc["results"]["mpi"][0]["avg_us"])


@pytest.mark.mpi
def test_allgather_default_plan_four_ranks(tmp_path):
    out = tmp_path / "ag.json"
    proc = _ccsynth("allgather", "-m", "4:16K", "-c", "-f", "--algo", "mpi,default", "-i", "4", "-x", "1", "--json", str(out),
                    "--interleave", ranks=4)
    _assert_clean_run(proc)
    # --interleave: one progress line per size on stderr, naming every algorithm
    progress = [ln for ln in proc.stderr.splitlines() if ln.startswith("# allgather ")]
    assert len(progress) == len(_pow2(4, 16 * 1024)) and all("mpi " in ln and "default " in ln for ln in progress)
    tables = _tables(proc.stdout)
    for algo in ("mpi", "default"):
        rows = tables[algo]["rows"]
        assert [int(r[0]) for r in rows] == _pow2(4, 16 * 1024)
        assert all("Pass" in r for r in rows)
        # -f: min <= avg <= max, and the iteration count
        for r in rows:
            avg, lo, hi, iters = float(r[1]), float(r[2]), float(r[3]), int(r[4])
            assert lo <= avg <= hi and iters == 4
    doc = json.loads(out.read_text())
    # allgather's OMB size is what one rank sends; nccl-tests' is the whole receive buffer
    assert all(r["nccl_size_bytes"] == 4 * r["size_bytes"] for r in doc["results"]["mpi"])
    # the default plan (recursive doubling, then ring on 4 ranks) runs every size, never MPI's own
    assert all(r["algorithm"] and r["algorithm"] != "mpi" for r in doc["results"]["default"])


@pytest.mark.mpi
@pytest.mark.parametrize(
    "name,algo,title",
    [
        ("reduce_scatter", "mpi,ring", "Reduce_scatter"),
        ("alltoall", "mpi,direct", "Alltoall"),
        ("bcast", "mpi,binomial_tree", "Broadcast"),
        ("reduce", "mpi,ring", "Reduce"),
    ],
)
def test_other_collectives_validate_on_three_ranks(name, algo, title):
    proc = _ccsynth(name, "-m", "4:4K", "-c", "--algo", algo, "-i", "3", "-x", "1", "--dtype", "int32", ranks=3)
    _assert_clean_run(proc)
    tables = _tables(proc.stdout)
    unit = 4 * 3 if name == "reduce_scatter" else 4  # reduce_scatter needs one element per rank
    for a in algo.split(","):
        assert tables[a]["header"][0] == f"# OMB Python MPI {title} Test"
        rows = tables[a]["rows"]
        assert [int(r[0]) for r in rows] == [s for s in _pow2(4, 4096) if s >= unit]
        assert all(r[-1] == "Pass" for r in rows), rows


@pytest.mark.mpi
def test_latency_and_bw_print_omb_headers(tmp_path):
    proc = _ccsynth("latency", "-m", "0:1K", "-c", "-i", "20", "-x", "2", ranks=2)
    _assert_clean_run(proc)
    t = _tables(proc.stdout)["mpi"]
    assert t["header"][0] == "# OMB Python MPI Latency Test"
    assert [int(r[0]) for r in t["rows"]] == [0, *_pow2(1, 1024)]
    assert all(r[-1] == "Pass" for r in t["rows"])

    proc = _ccsynth("bw", "-m", "1:4K", "-c", "-W", "4", "-i", "5", "-x", "1", ranks=2)
    _assert_clean_run(proc)
    t = _tables(proc.stdout)["mpi"]
    assert t["header"][0] == "# OMB Python MPI Bandwidth Test"
    assert any("Bandwidth (MB/s)" in h for h in t["header"])
    assert [int(r[0]) for r in t["rows"]] == _pow2(1, 4096)
    # Bandwidth (MB/s) = Size / per-message time (us)
    for r in t["rows"]:
        assert float(r[1]) == pytest.approx(int(r[0]) / float(r[2]), rel=0.02, abs=0.01)


@pytest.mark.mpi
def test_barrier_has_no_size_column():
    proc = _ccsynth("barrier", "-f", "-i", "10", ranks=3)
    _assert_clean_run(proc)
    lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
    assert lines[0] == "# OMB Python MPI Barrier Test"
    header = next(ln for ln in lines if "Avg Latency(us)" in ln)
    assert "Size" not in header
    row = lines[-1].split()
    assert len(row) == 4 and float(row[1]) <= float(row[0]) <= float(row[2]) and row[3] == "10"


@pytest.mark.mpi
def test_plan_for_another_world_size_fails_on_every_rank(tmp_path):
    from ccsynth.collectives.plan import Plan, PlanEntry, save_plan
    from ccsynth.collectives.spec import Collective
    from ccsynth.synth.baselines import make_baseline
    from ccsynth.topologies import fully_connected

    sched = make_baseline("ring", Collective("allreduce", 2, chunk_factor=2), fully_connected(2))
    path = tmp_path / "plan2.json"
    save_plan(Plan((PlanEntry("allreduce", 2, 0, None, sched),)), path)
    proc = _ccsynth("allreduce", "-m", "8:64", "--algo", f"mpi,plan:{path}", ranks=3, timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if "error" in ln]
    assert len(errors) == 1 and "allreduce" in errors[0] and "3 ranks" in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert "# OMB" not in proc.stdout  # nothing ran


@pytest.mark.parametrize(
    "args,needle",
    [
        (["allreduce", "-m", "foo"], "bad size 'foo'"),
        (["allreduce", "-m", "64K:8"], "above maximum"),
        (["allreduce", "-i", "0"], "at least 1"),
        (["allreduce", "--dtype", "int8"], "int8"),
        (["allreduce", "--buffer", "tpu"], "tpu"),
        (["nosuch"], "nosuch"),
        (["allreduce", "--algo", "mpi,warp"], "unknown algorithm 'warp'"),
        (["allreduce", "--algo", "plan:/no/such/plan.json"], "does not exist"),
        (["latency"], "two ranks"),
        (["allreduce", "--buffer", "cupy", "-m", "8"], "cupy"),  # where CuPy or a GPU is missing
        (["allreduce", "--json", "/no/such/dir/x.json"], "does not exist"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(args, needle):
    if "cupy" in args and _have_gpu():
        pytest.skip("CuPy and a GPU are present: --buffer cupy is valid here")
    proc = _ccsynth(*args, timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if "error:" in ln]
    assert len(errors) == 1 and needle in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""


def test_unknown_algorithm_names_valid_ones():
    from ccsynth.bench.algos import parse_algorithms
    from ccsynth.errors import CCSynthError

    with pytest.raises(CCSynthError, match=r"unknown algorithm 'rings'.*mpi, default, plan:FILE, ring"):
        parse_algorithms("mpi,rings")


# ----------------------------------------------------------- in process
def test_in_process_run_detects_a_wrong_result():
    """The shared loop marks Fail when an algorithm leaves a wrong answer (one rank, COMM_SELF)."""
    from mpi4py import MPI

    from ccsynth.bench.algos import Algorithm, MpiAlgorithm
    from ccsynth.bench.omb import Context, run_benchmark

    class Broken(Algorithm):
        name = "broken"

        def collective(self, kind, ctx):
            def fn(send, recv):
                recv[...] = send
                recv[-1:] += 1  # off by one in the last element

            return fn

    ctx = Context(MPI.COMM_SELF, Options(sizes=(4, 64), iters=2, warmup=1, validate=True))
    good = list(run_benchmark(BENCHMARKS["allreduce"], ctx, MpiAlgorithm()))
    bad = list(run_benchmark(BENCHMARKS["allreduce"], ctx, Broken()))
    assert [r.valid for r in good] == [True, True]
    assert [r.valid for r in bad] == [False, False]
    assert [r.size for r in bad] == [4, 64] and all(r.iterations == 2 and r.avg_us > 0 for r in bad)


@pytest.mark.parametrize("dtype", V.DTYPES)
@pytest.mark.parametrize("n", [1, 3, 8, 64])
def test_reference_matches_a_plain_numpy_reduction(dtype, n):
    count = 5
    ins = [V.pattern(r, n * count, dtype, n_ranks=n).astype(np.float64) for r in range(n)]
    total = np.sum(ins, axis=0)
    assert total.max() <= {"float16": 2048, "uint8": 255}.get(dtype, 2**24)  # the sum is exact in dtype
    for rank in (0, n - 1):
        rs = V.expected("reduce_scatter", rank, n, count, dtype)
        assert rs.dtype == np.dtype(dtype) and np.array_equal(rs, total[rank * count:(rank + 1) * count].astype(dtype))
        a2a = V.expected("alltoall", rank, n, count, dtype)
        assert np.array_equal(a2a, np.concatenate([ins[q][rank * count:(rank + 1) * count] for q in range(n)]).astype(dtype))
    ag = V.expected("allgather", 0, n, count, dtype)
    assert np.array_equal(ag, np.concatenate([i[:count] for i in ins]).astype(dtype))
    assert np.array_equal(V.expected("allreduce", 0, n, count, dtype), np.sum([i[:count] for i in ins], axis=0).astype(dtype))
    assert V.expected("reduce", 1 % n, n, count, dtype, root=0) is None or n == 1
    assert np.array_equal(V.expected("broadcast", 0, n, count, dtype, root=n - 1), ins[n - 1][:count].astype(dtype))
    assert not (V.pattern(0, 100, dtype, n_ranks=n) == V.sentinel(dtype)).any()


def test_size_option_parses_omb_ranges():
    from ccsynth.commands.bench import _sizes

    parse = _sizes("4:1M")
    assert parse("8:64") == (8, 16, 32, 64)
    assert parse("16") == (4, 8, 16)  # MAX alone starts at the default minimum, as OMB's -m
    assert parse("1K:") == tuple(_pow2(1024, 1 << 20))
    assert _sizes("0:4M")("0:4") == (0, 1, 2, 4)
    assert parse("1M,8,64K") == (8, 65536, 1 << 20)


def _rows(scale: float) -> list[Row]:
    return [Row(s, s, s // 4, 10, scale * (1 + s / 1e3), scale, scale * 3, s / (scale * 1e3), s / (scale * 1e3) * 1.5, True) for s in (8, 1024)]


def test_report_tables_comparison_and_json():
    bench, opts = BENCHMARKS["allreduce"], Options(sizes=(8, 1024), validate=True, full=True)
    results = {"mpi": _rows(10.0), "ring": _rows(20.0)}
    lines = report.table_lines(bench, "ring", results["ring"], opts, {"n_ranks": 4, "dtype": "float32", "buffer": "numpy"})
    assert lines[0] == "# OMB Python MPI Allreduce Test" and lines[1] == "# ccsynth algorithm: ring"
    header = lines[-3]
    assert header.startswith("# Size (B)") and header.split()[-1] == "Validation"
    # every row lines up under the header: same number of fields and right edges
    assert len(lines[-1].split()) == 8 and len(lines[-1]) == len(header)
    comp = report.comparison_lines(bench, results)
    assert "relative to mpi" in comp[0]
    assert [ln.split() for ln in comp[2:]] == [["8", "10.08", "2.00"], ["1024", "20.24", "2.00"]]
    doc = json.loads(json.dumps(report.to_json(bench, {"n_ranks": 4}, results)))
    assert doc["schema"] == "ccsynth.bench/1" and doc["results"]["ring"][1]["avg_us"] == pytest.approx(40.48)
    assert doc["comparison"]["rows"][0]["ratio"] == {"ring": pytest.approx(2.0)}


def test_plot_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    from ccsynth.bench.plot import plot_results

    path = tmp_path / "bench.png"
    plot_results(BENCHMARKS["allreduce"], {"mpi": _rows(10.0), "ring": _rows(20.0)}, path, "4 ranks")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.mpi
def test_cupy_buffers_with_a_ccsynth_schedule():
    if not _have_gpu():
        pytest.skip("needs CuPy and a GPU")
    proc = _ccsynth("allreduce", "-m", "8:1M", "-c", "--buffer", "cupy", "--algo", "ring", "-i", "3", "-x", "1", ranks=2)
    _assert_clean_run(proc)
    rows = _tables(proc.stdout)["ring"]["rows"]
    assert [int(r[0]) for r in rows] == _pow2(8, 1 << 20) and all(r[-1] == "Pass" for r in rows)


def test_known_baseline_names_follow_the_registry():
    from ccsynth.bench.algos import baseline_names, valid_names
    from ccsynth.synth.baselines import BASELINES

    assert baseline_names() == tuple(BASELINES)
    assert all(name in valid_names().split(", ") for name in BASELINES)


# ------------------------------------------------------------ --predict
def test_predicted_columns_line_up_and_json_keeps_them():
    bench = BENCHMARKS["allreduce"]
    opts = Options(sizes=(8, 1024), validate=True, predict="machine")
    rows = [replace(r, median_us=r.avg_us, predicted_us=r.avg_us / 2) for r in _rows(10.0)]
    lines = report.table_lines(bench, "ring", rows, opts, {"n_ranks": 4, "dtype": "float32", "buffer": "numpy",
                                                           "predict": "machine"})
    header = lines[-3]
    assert header.split()[-2:] == ["Predicted(us)", "Meas/Pred"] and any(ln.startswith("# Predicted:") for ln in lines)
    assert len(lines[-1]) == len(header) and lines[-1].split()[-2:] == [f"{rows[-1].avg_us / 2:.2f}", "2.00"]
    mpi_line = report.format_row(bench, _rows(10.0)[0], opts)
    assert mpi_line.split()[-2:] == ["-", "-"] and len(mpi_line) == len(header)
    d = rows[0].to_dict()
    assert d["predicted_us"] == rows[0].predicted_us and d["measured_over_predicted"] == pytest.approx(2.0)
    assert "predicted_us" not in _rows(10.0)[0].to_dict()


def test_prediction_error_per_size_band():
    from ccsynth.bench.predict import band_of, error_lines, error_table

    assert [band_of(s) for s in (32 << 10, 64 << 10, 256 << 10, 512 << 10)] == [-1, 0, 0, 1]
    sizes = [8, 16, 32 << 10, 64 << 10, 128 << 10, 1 << 20]
    mk = lambda s, meas, pred: replace(Row(s, s, s, 1, meas, meas, meas, 0, 0), median_us=meas, predicted_us=pred)  # noqa: E731
    results = {"ring": [mk(s, 1.5, 1.0) for s in sizes], "plan:p.json": [mk(s, 1.0, 1.25) for s in sizes],
               "mpi": [Row(s, s, s, 1, 1.0, 1, 1, 0, 0, median_us=1.0) for s in sizes]}
    table = error_table(results)
    assert [d.label for d in table] == ["8 B", "16 B", "32K", "64K-128K", "1M"]
    band = table[3]
    assert band.rows == 4 and band.worst == pytest.approx(0.5) and band.worst_at.startswith("ring at ")
    assert band.median == pytest.approx((0.5 + 0.2) / 2)
    assert error_lines(results)[0].startswith("# Prediction error") and error_lines({"mpi": results["mpi"]}) == []


def test_predictor_simulates_the_schedule_that_ran():
    from ccsynth.bench.predict import Predictor, load_predict_topology
    from ccsynth.collectives.spec import Collective
    from ccsynth.errors import CCSynthError
    from ccsynth.synth.baselines import make_baseline
    from ccsynth.synth.executor_model import simulate_run
    from ccsynth.topologies import fully_connected

    topo = load_predict_topology("fully_connected:2", 2)
    ring = make_baseline("ring", Collective("allreduce", 2, 2), fully_connected(2))

    class Algo:
        name = "ring"  # a bench column's name: a baseline, not through ccsynth's communicator

        def schedule_for(self, kind, ctx, nbytes):
            return ring

    class Ctx:
        itemsize = 4

    p = Predictor(topo, "allreduce", Ctx())
    row = Row(1 << 20, 1 << 20, 1 << 18, 1, 1.0, 1, 1, 0, 0, algorithm="ring", median_us=1.0)
    assert p.predict(Algo(), row) == pytest.approx(simulate_run(ring, topo, 1 << 20).time_us)
    assert p.annotate(Algo(), row).predicted_us == p.predict(Algo(), row)
    assert p.predict(Algo(), replace(row, algorithm="mpi")) is None  # the communicator fell back to MPI's own
    with pytest.raises(CCSynthError, match="describes 4 ranks but the benchmark runs on 2"):
        load_predict_topology("fully_connected:4", 2)


@pytest.mark.mpi
def test_predict_prints_predictions_beside_measured_rows(tmp_path):
    out = tmp_path / "p.json"
    proc = _ccsynth("allreduce", "-m", "8:64K", "--algo", "mpi,ring,default", "-i", "3", "-x", "1", "--predict",
                    "fully_connected:2", "--json", str(out), ranks=2)
    _assert_clean_run(proc)
    tables = _tables(proc.stdout)
    assert all(r[-2:] == ["-", "-"] for r in tables["mpi"]["rows"])
    for algo in ("ring", "default"):
        rows = tables[algo]["rows"]
        assert any(h.split()[-2:] == ["Predicted(us)", "Meas/Pred"] or "Meas/Pred" in h for h in tables[algo]["header"])
        assert all(float(r[4]) > 0 and float(r[5]) > 0 for r in rows), rows
    assert "# Prediction error" in proc.stdout
    doc = json.loads(out.read_text())
    assert doc["predict"] == "fully_connected:2" and doc["predict_topology"] == "fully_connected:2"
    assert all("predicted_us" not in r for r in doc["results"]["mpi"])
    for r in doc["results"]["ring"] + doc["results"]["default"]:
        assert r["predicted_us"] > 0 and r["measured_over_predicted"] == pytest.approx(r["median_us"] / r["predicted_us"])
    assert doc["prediction_error"] and {"label", "median", "worst", "worst_at"} <= set(doc["prediction_error"][0])


@pytest.mark.mpi
def test_predict_with_a_topology_of_another_rank_count_fails_on_every_rank():
    proc = _ccsynth("allreduce", "-m", "8:64", "--algo", "ring", "--predict", "fully_connected:4", ranks=2)
    assert proc.returncode == 2
    assert proc.stderr.count("describes 4 ranks but the benchmark runs on 2") == 1, proc.stderr
