"""``ccsynth bench`` conventions (issue 14): nccl-tests mode, non-blocking and v-collective benchmarks, OMB's -d/-T,
the oversubscription warning."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ccsynth.bench import nccl as N
from ccsynth.bench import nonblocking as NB
from ccsynth.bench.omb import BENCHMARKS, Options

VENV_BIN = Path(sys.executable).parent
MPIEXEC = VENV_BIN / "mpiexec"
TIMEOUT = 180


def _bench(*args: str, ranks: int | None = None, timeout: int = TIMEOUT) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "ccsynth", "bench", *args]
    if ranks is not None:
        if not MPIEXEC.exists():
            pytest.skip("mpiexec not installed in the virtual environment")
        cmd = [str(MPIEXEC), "-n", str(ranks), *cmd]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)


def _ok(proc):
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr


# nccl-tests' data row: size count type redop root, then time algbw busbw #wrong twice
ROW = re.compile(r"^ {0,11}\d+ +\d+ +\w+ +\w+ +-?\d+( +[\d.]+ +[\d.]+ +[\d.]+ +(\d+|N/A)){2}$")


# ------------------------------------------------------------------ nccl-tests mode
@pytest.mark.mpi
def test_nccl_tests_format_under_two_ranks(tmp_path):
    out = tmp_path / "ar.json"
    proc = _bench("all_reduce_perf", "-b", "8", "-e", "128", "-f", "2", "-n", "3", "-w", "1", "--json", str(out),
                  "--algo", "mpi,ring", ranks=2)
    _ok(proc)
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("# nThread 1 nGpus 1 minBytes 8 maxBytes 128 step: 2(factor) warmup iters: 1 iters: 3")
    assert "# Using devices" in lines
    head = [i for i, ln in enumerate(lines) if ln.split()[1:3] == ["size", "count"]]
    assert len(head) == 2  # one table per algorithm
    i = head[0]
    assert "out-of-place" in lines[i - 1] and "in-place" in lines[i - 1]
    assert lines[i].split() == ["#", "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong",
                                "time", "algbw", "busbw", "#wrong"]
    assert lines[i + 1].split()[:3] == ["#", "(B)", "(elements)"]
    rows = [ln for ln in lines[i + 2:] if not ln.startswith("#")][:5]
    assert all(ROW.match(r) for r in rows), rows
    assert [int(r.split()[0]) for r in rows] == [8, 16, 32, 64, 128]
    assert rows[0].split()[1:5] == ["2", "float", "sum", "-1"]
    assert all(r.split()[8] == "0" and r.split()[12] == "0" for r in rows)  # no wrong element, either place
    assert lines.count("# Out of bounds values : 0 OK") == 2
    avg = [ln for ln in lines if ln.startswith("# Avg bus bandwidth    : ")]
    doc = json.loads(out.read_text())
    assert doc["schema"] == "ccsynth.bench.nccl/1" and doc["test"] == "all_reduce_perf" and doc["n_ranks"] == 2
    mpi_rows = doc["results"]["mpi"]
    busbws = [r[p]["busbw_GBps"] for r in mpi_rows for p in ("out_of_place", "in_place")]
    assert doc["avg_busbw_GBps"]["mpi"] == pytest.approx(sum(busbws) / len(busbws))
    assert float(avg[0].split(":")[1]) == pytest.approx(doc["avg_busbw_GBps"]["mpi"], rel=1e-4, abs=1e-9)
    assert all(r["out_of_place"]["n_wrong"] == 0 and r["in_place"]["n_wrong"] == 0 for r in mpi_rows)
    assert [r["size_bytes"] for r in mpi_rows] == [8, 16, 32, 64, 128]


@pytest.mark.mpi
@pytest.mark.parametrize("test,algo", [("all_gather_perf", "mpi,default,ring"), ("reduce_scatter_perf", "ring"),
                                       ("alltoall_perf", "direct"), ("reduce_perf", "ring")])
def test_nccl_tests_in_place_rows_are_right_for_every_algorithm(test, algo):
    proc = _bench(test, "-b", "24", "-e", "96", "-f", "4", "-n", "2", "-w", "1", "-d", "int32", "--algo", algo,
                  ranks=3)
    _ok(proc)
    rows = [ln for ln in proc.stdout.splitlines() if ROW.match(ln)]
    assert len(rows) == 2 * len(algo.split(","))
    assert all(r.split()[2] == "int32" and r.split()[8] == "0" and r.split()[12] == "0" for r in rows)
    assert proc.stdout.count("# Out of bounds values : 0 OK") == len(algo.split(","))


@pytest.mark.mpi
def test_nccl_tests_without_check_reads_na():
    proc = _bench("broadcast_perf", "-b", "8", "-e", "8", "-n", "2", "-w", "0", "-c", "0", "-v", ranks=2)
    _ok(proc)
    [row] = [ln for ln in proc.stdout.splitlines() if ROW.match(ln)]
    assert row.split()[8] == "N/A" and row.split()[12] == "N/A" and row.split()[3:5] == ["none", "0"]
    # -v: a [k/N] line per row on standard error, from rank 0 only
    assert [ln.split()[:2] for ln in proc.stderr.splitlines() if ln.startswith("[")] == [["[1/1]", "broadcast_perf"]]


def test_nccl_sizes_and_columns():
    assert N.nccl_sizes(8, 128, 2, 0) == (8, 16, 32, 64, 128)
    assert N.nccl_sizes(0, 4, 2, 0) == (0, 1, 2, 4)
    assert N.nccl_sizes(1 << 20, 3 << 20, 1, 1 << 20) == (1 << 20, 2 << 20, 3 << 20)
    assert N.format_time(5.0) == "   5.00" and N.format_time(123.45) == "  123.5" and N.format_time(54321.0) == "  54321"
    row = N.NcclRow(1024, 256, "float", "sum", -1, N.Place(12.5, 0.08, 0.12, 0), N.Place(11.0, 0.09, 0.14, None))
    assert ROW.match(N.format_row(row)) and N.format_row(row).endswith("N/A")
    assert N.footer_lines([row])[:2] == ["# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 0.13 "]


def test_nccl_mode_counts_wrong_elements_in_process():
    """A wrong result shows in #wrong and FAILED (one rank, COMM_SELF); the command then exits 1."""
    from mpi4py import MPI

    from ccsynth.bench.algos import MpiAlgorithm
    from ccsynth.bench.omb import Context

    class Broken(MpiAlgorithm):
        name = "broken"

        def collective(self, kind, ctx):
            def fn(send, recv):
                recv[...] = send
                recv[:1] += 1

            return fn

        def in_place(self, kind, ctx):
            return lambda buf: buf.__setitem__(slice(0, 2), buf[:2] + 1)

    ctx = Context(MPI.COMM_SELF, Options(sizes=(16,), buffer="numpy"))
    rows = list(N.run_nccl(BENCHMARKS["allreduce"], ctx, Broken(), N.NcclOptions(16, 16, 2, 0, iters=1, warmup=0)))
    assert [(r.out_of_place.n_wrong, r.in_place.n_wrong) for r in rows] == [(1, 2)]
    assert N.footer_lines(rows)[0] == "# Out of bounds values : 3 FAILED"


# ------------------------------------------------------------------ non-blocking and v-collectives
@pytest.mark.mpi
def test_nonblocking_benchmark_reports_overlap(tmp_path):
    out = tmp_path / "nb.json"
    proc = _bench("iallreduce", "-m", "4:64", "-c", "-i", "4", "-x", "1", "--algo", "mpi,default", "--json", str(out),
                  ranks=2)
    _ok(proc)
    lines = proc.stdout.splitlines()
    assert lines[0] == "# OMB Python MPI Non-blocking Allreduce Latency Test"
    assert lines[1] == "# Overall = Coll. Init + Compute + MPI_Test + MPI_Wait"
    header = next(ln for ln in lines if ln.startswith("# Size"))
    assert header.split()[2:6] == ["Overall(us)", "Compute(us)", "Pure", "Comm.(us)"]
    doc = json.loads(out.read_text())
    assert doc["schema"] == "ccsynth.bench.nonblocking/1" and doc["algorithms"] == ["mpi", "default"]
    for rows in doc["results"].values():
        assert [r["size_bytes"] for r in rows] == [4, 8, 16, 32, 64]
        assert all(r["valid"] is True and 0 <= r["overlap_pct"] <= 100 and r["pure_comm_us"] > 0 for r in rows)


@pytest.mark.mpi
def test_nonblocking_broadcast_and_alltoall_validate():
    for name, algo in (("ibcast", "mpi,binomial_tree"), ("ialltoall", "direct"), ("iallgather", "ring"),
                       ("ireduce_scatter", "mpi")):
        proc = _bench(name, "-m", "12:48", "-c", "-i", "2", "-x", "1", "--algo", algo, ranks=3)
        _ok(proc)
        rows = [ln for ln in proc.stdout.splitlines() if ln and ln[0].isdigit()]
        assert rows and all("Pass" in r for r in rows), (name, proc.stdout)


def test_overlap_formula():
    assert NB.overlap_percent(10.0, 10.0, 10.0) == 100.0  # communication hid entirely
    assert NB.overlap_percent(20.0, 10.0, 10.0) == 0.0  # one after the other
    assert NB.overlap_percent(15.0, 10.0, 10.0) == pytest.approx(50.0)
    assert NB.overlap_percent(35.0, 10.0, 10.0) == 0.0 and NB.overlap_percent(1.0, 0.0, 0.0) == 0.0


@pytest.mark.mpi
@pytest.mark.parametrize("name,algo", [("alltoallv", "mpi,default,direct"), ("allgatherv", "mpi,default,ring")])
def test_variable_count_benchmarks_validate(name, algo):
    proc = _bench(name, "-m", "4:256", "-c", "-i", "3", "-x", "1", "--algo", algo, "-T", "mpi_int", ranks=3)
    _ok(proc)
    assert "dtype: int32" in proc.stdout
    title = "All-to-Allv" if name == "alltoallv" else "Allgatherv"
    assert proc.stdout.count(f"# OMB Python MPI {title} Test") == len(algo.split(","))
    rows = [ln for ln in proc.stdout.splitlines() if ln[:1].isdigit() and ("Pass" in ln or "Fail" in ln)]
    assert len(rows) == 7 * len(algo.split(",")) and all("Pass" in r for r in rows)  # 4..256 B, every algorithm


# ------------------------------------------------------------------ OMB flags, errors, warnings
def _have_gpu() -> bool:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # noqa: BLE001
        return False


@pytest.mark.parametrize("args,needle", [
    (["allreduce", "-d", "cuda", "-m", "8"], "CuPy"),
    (["allreduce", "-d", "tpu"], "'tpu' is not a device"),
    (["allreduce", "-T", "mpi_quad"], "'mpi_quad' is not a type"),
    (["all_reduce_perf", "-d", "bfloat"], "'bfloat' is not a datatype"),
    (["all_reduce_perf", "-b", "1K", "-e", "8"], "between 0 and the last"),
    (["iallreduce", "-m", "foo"], "bad size 'foo'"),
])
def test_bad_bench_flags_exit_2_with_one_line(args, needle):
    if "cuda" in args and _have_gpu():
        pytest.skip("CuPy and a GPU are present: -d cuda is valid here")
    proc = _bench(*args, timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if "error" in ln]
    assert len(errors) == 1 and needle in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""


def test_omb_flags_parse():
    from ccsynth.cli import build_parser

    args = build_parser().parse_args(["bench", "allreduce", "-d", "cuda", "-T", "mpi_float", "-i", "5", "-x", "2",
                                      "-f", "-c"])
    assert (args.buffer, args.dtype, args.iterations, args.warmup, args.full, args.validation) == \
        ("cupy", "float32", 5, 2, True, True)
    args = build_parser().parse_args(["bench", "allreduce", "-d", "cpu", "--dtype", "int64"])
    assert (args.buffer, args.dtype) == ("numpy", "int64")
    args = build_parser().parse_args(["bench", "all_gather_perf", "-b", "8", "-e", "128M", "-f", "2", "-n", "7",
                                      "-w", "3", "-c", "0", "-d", "half"])
    assert (args.minbytes, args.maxbytes, args.stepfactor, args.iters, args.warmup_iters, args.check, args.dtype) == \
        (8, 128 << 20, 2, 7, 3, 0, "float16")


class _FakeComm:
    def __init__(self, rank):
        self.rank = rank

    def Get_rank(self):
        return self.rank


def test_warning_when_ranks_outnumber_cores(caplog):
    from ccsynth.commands.bench import _warn_oversubscribed

    cores = os.cpu_count()
    with caplog.at_level(logging.WARNING, logger="ccsynth"):
        _warn_oversubscribed(_FakeComm(0), cores)
        _warn_oversubscribed(_FakeComm(1), cores + 1)  # only rank 0 speaks
        assert not caplog.records
        _warn_oversubscribed(_FakeComm(0), cores + 1)
    [rec] = caplog.records
    assert f"{cores + 1} ranks share this node's {cores} cores" in rec.getMessage()


@pytest.mark.mpi
def test_oversubscribed_run_warns_once_and_quiet_hides_it():
    ranks = (os.cpu_count() or 1) + 1
    if ranks > 8:
        pytest.skip("too many cores here to oversubscribe cheaply")
    proc = _bench("barrier", "-i", "2", "-x", "0", ranks=ranks)
    _ok(proc)
    assert proc.stderr.count("cores: ranks wait for a core") == 1
    proc = _bench("barrier", "-i", "2", "-x", "0", "-q", ranks=ranks)
    _ok(proc)
    assert "cores" not in proc.stderr


def test_in_place_case_layouts_in_process():
    """Every in-place layout checks out against MPI itself on one rank."""
    from mpi4py import MPI

    from ccsynth.bench.algos import MpiAlgorithm
    from ccsynth.bench.omb import Context

    ctx = Context(MPI.COMM_SELF, Options(sizes=(16,), validate=True))
    for kind in ("allreduce", "allgather", "reduce_scatter", "alltoall", "reduce", "broadcast"):
        case = N.prepare_in_place(ctx, MpiAlgorithm(), kind, 4, 16)
        case.reset()
        case.step()
        assert case.wrong() == 0 and case.check(), kind
    assert np.dtype(ctx.dtype) == np.float32


# ------------------------------------------------------------------ OMB -z/-k/-l, nccl-tests -o/-r/-g/-t/-a/-z
def test_more_omb_and_nccl_flags_parse():
    from ccsynth.cli import build_parser

    p = build_parser()
    a = p.parse_args(["bench", "allreduce", "-z", "-l"])
    assert a.tail == (99.0, 90.0, 50.0) and a.in_place
    assert p.parse_args(["bench", "allreduce", "-z", "50,99"]).tail == (50.0, 99.0)
    assert p.parse_args(["bench", "allreduce"]).tail is None
    assert p.parse_args(["bench", "reduce", "-k", "rotate"]).root_rank == (0, True)
    assert p.parse_args(["bench", "bcast", "-k", "fixed:2"]).root_rank == (2, False)
    assert p.parse_args(["bench", "bcast", "--root-rank", "1"]).root_rank == (1, False)
    a = p.parse_args(["bench", "reduce_perf", "-o", "max", "-r", "1", "-a", "3", "-z", "1", "-g", "1", "-t", "1"])
    assert (a.op, a.root, a.average, a.blocking, a.ngpus, a.nthreads) == ("max", 1, 3, 1, 1, 1)


@pytest.mark.parametrize("args,needle", [
    (["allreduce", "-z", "0"], "outside 1-99"),
    (["reduce", "-k", "sideways"], "fixed:RANK"),
    (["allreduce", "-k", "1"], "bench allreduce has no option -k (an option of bench bcast"),  # rooted ones only
    (["alltoallv", "-l"], "bench alltoallv has no option -l (an option of bench allgather"),  # MPI_IN_PLACE ones
    (["all_reduce_perf", "-o", "xor"], "'xor' is not a reduction op"),
    (["all_reduce_perf", "-a", "4"], "invalid choice"),
])
def test_bad_convention_flags_exit_2(args, needle):
    proc = _bench(*args, timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert needle in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.mpi
@pytest.mark.parametrize("args,needle", [
    (["all_reduce_perf", "-g", "2"], "-g 2 -t 1: ccsynth bench runs one rank per process"),
    (["all_reduce_perf", "-t", "4"], "-g 1 -t 4"),
    (["all_reduce_perf", "-o", "avg", "--algo", "mpi"], "avg is ccsynth's and NCCL's"),
    (["all_reduce_perf", "-o", "avg", "-d", "int32", "--algo", "default"], "op avg needs a floating-point type"),
    (["reduce_perf", "-r", "2"], "root 2 is not a rank of this 2-rank run"),
    (["reduce", "-l", "-k", "rotate"], "cannot be combined"),
])
def test_flag_values_that_do_not_fit_the_run_are_refused(args, needle):
    proc = _bench(*args, "-b" if args[0].endswith("_perf") else "-m", "8", *(["-e", "8"] if args[0].endswith("_perf") else []),
                  ranks=2, timeout=120)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert needle in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.mpi
def test_nccl_ops_roots_average_and_blocking_validate(tmp_path):
    for op in ("prod", "min", "max", "avg"):
        out = tmp_path / f"{op}.json"
        proc = _bench("reduce_perf", "-b", "8", "-e", "64", "-f", "2", "-n", "2", "-w", "1", "-o", op, "-r", "1",
                      "-a", "3", "-z", "1", "--algo", "default,ring" + (",mpi" if op != "avg" else ""),
                      "--json", str(out), ranks=2)
        _ok(proc)
        rows = [ln for ln in proc.stdout.splitlines() if ROW.match(ln)]
        assert rows and all(ln.split()[3:5] == [op, "1"] for ln in rows), proc.stdout
        assert "# average: 3 (max over ranks) blocking: 1" in proc.stdout
        doc = json.loads(out.read_text())
        assert doc["average_mode"] == 3 and doc["blocking"] is True and not any(doc["n_wrong"].values())


@pytest.mark.mpi
def test_omb_tail_latencies_rotating_roots_and_in_place(tmp_path):
    out = tmp_path / "z.json"
    proc = _bench("allreduce", "-m", "8:32", "-i", "6", "-x", "1", "-c", "-z", "50,99", "-l", "--algo", "mpi,default",
                  "--json", str(out), ranks=2)
    _ok(proc)
    assert "P50 Tail Lat(us)" in proc.stdout and "P99 Tail Lat(us)" in proc.stdout and "in place" in proc.stdout
    doc = json.loads(out.read_text())
    for rows in doc["results"].values():
        for r in rows:
            assert set(r["tail_us"]) == {"p50", "p99"} and r["tail_us"]["p50"] <= r["tail_us"]["p99"]
            assert r["valid"] is True
    for name in ("reduce", "bcast"):
        proc = _bench(name, "-m", "8:64", "-i", "5", "-x", "1", "-c", "-k", "rotate", "--algo", "mpi,default,binomial_tree",
                      ranks=3)
        _ok(proc)
        assert "root: rotate" in proc.stdout
        rows = [ln for ln in proc.stdout.splitlines() if ln[:1].isdigit() and ("Pass" in ln or "Fail" in ln)]
        assert len(rows) == 4 * 3 and all("Pass" in r for r in rows), proc.stdout


def test_references_of_every_op():
    from ccsynth.bench import validate as V

    n, count = 3, 5
    pats = np.stack([V.pattern(r, count, np.float32, n_ranks=n) for r in range(n)]).astype(np.float64)
    for op, fold in (("sum", np.sum), ("prod", np.prod), ("min", np.min), ("max", np.max)):
        assert V.expected("allreduce", 0, n, count, np.float32, op=op).tolist() == fold(pats, axis=0).tolist(), op
    assert np.allclose(V.expected("allreduce", 0, n, count, np.float32, op="avg"), pats.mean(axis=0))


# ------------------------------------------------------------------ v-benchmarks with unequal counts
def test_count_distributions():
    from ccsynth.bench.omb import count_matrix

    assert count_matrix("alltoallv", 3, 4, "equal").tolist() == [[4] * 3] * 3
    r = count_matrix("alltoallv", 4, 10, "random", seed=5)
    assert r.shape == (4, 4) and r.min() >= 0 and r.max() <= 20
    assert (r == count_matrix("alltoallv", 4, 10, "random", seed=5)).all()  # the same on every rank
    assert not (r == count_matrix("alltoallv", 4, 10, "random", seed=6)).all()
    s = count_matrix("alltoallv", 4, 10, "skewed")
    assert (s.sum(axis=1) == 40).all() and (s[:, 0] == 20).all()
    g = count_matrix("allgatherv", 3, 7, "skewed")
    assert g.shape == (1, 3) and g.sum() == 21 and g[0, 0] == 10
    with pytest.raises(Exception, match="unknown count distribution"):
        count_matrix("alltoallv", 2, 1, "zipf")


@pytest.mark.mpi
@pytest.mark.parametrize("ranks", [2, 3])
@pytest.mark.parametrize("name,algo", [("alltoallv", "mpi,default,direct"), ("allgatherv", "mpi,default,ring")])
def test_uneven_count_benchmarks_validate(name, algo, ranks, tmp_path):
    for how in ("random", "skewed"):
        out = tmp_path / f"{how}.json"
        proc = _bench(name, "-m", "8:1K", "-c", "-i", "2", "-x", "1", "--counts", how, "--seed", "11",
                      "-T", "float64" if how == "random" else "int32", "--algo", algo, "--json", str(out), ranks=ranks)
        _ok(proc)
        assert f"counts: {how} (seed 11)" in proc.stdout
        rows = [ln for ln in proc.stdout.splitlines() if ln[:1].isdigit() and ("Pass" in ln or "Fail" in ln)]
        assert len(rows) == 8 * len(algo.split(",")) and all("Pass" in r for r in rows), proc.stdout  # 8 B .. 1 KiB
        doc = json.loads(out.read_text())
        assert doc["counts"] == how and doc["seed"] == 11
        ran = {r["algorithm"] for r in doc["results"]["default"]}
        assert ran == {f"{name}-direct"}, ran  # ccsynth's explicit schedule, every block at its own size
