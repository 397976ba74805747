"""Multi-rank tests of the Python user path (issue 14): ``tests/mpi_workers/api_worker.py`` under mpiexec.

Each test launches the worker with its cases and requires a PASS line from
every rank for every case.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from ccsynth.collectives.mpi_util import find_mpiexec

pytestmark = pytest.mark.mpi

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mpi_workers", "api_worker.py")
MPIEXEC = find_mpiexec()
LINE = re.compile(r"^CASE (\S+) (PASS|FAIL) rank (\d+)(?:: (.*))?$", re.MULTILINE)


def run_cases(k: int, *cases: str, tmp_path, timeout: int = 240, env: dict | None = None) -> dict:
    """``{case: {rank: note}}`` of a launch in which every rank passed every case (else the test fails)."""
    if MPIEXEC is None:
        pytest.skip("mpiexec not found")
    full = dict(os.environ, CCSYNTH_TMP=str(tmp_path), OMP_NUM_THREADS="1", **(env or {}))
    full.pop("CCSYNTH_DEBUG", None)
    p = subprocess.run([MPIEXEC, "-n", str(k), sys.executable, WORKER, *cases], capture_output=True, text=True,
                       timeout=timeout, env=full)
    out = p.stdout + p.stderr
    got: dict = {}
    for name, status, rank, note in LINE.findall(p.stdout):
        assert status == "PASS", f"case {name} failed on rank {rank}: {note}\n{out[-3000:]}"
        got.setdefault(name, {})[int(rank)] = note
    for c in cases:
        assert len(got.get(c, {})) == k, f"case {c}: not every rank passed (exit {p.returncode})\n{out[-3000:]}"
    assert p.returncode == 0, out[-3000:]
    return got


def test_synthesize_then_communicator_on_4_ranks(tmp_path):
    """Allreduce plan from ccsynth.synthesize + default allgather, both on ccsynth schedules; fallbacks visible."""
    got = run_cases(4, "synth_path", "schedule_inputs", tmp_path=tmp_path)
    assert len(set(got["synth_path"].values())) == 1  # every rank has the same fingerprint


def test_mismatched_or_unusable_plans_raise_on_every_rank(tmp_path):
    got = run_cases(4, "err_plan_differs", "err_plan_unusable", tmp_path=tmp_path)
    for notes in got.values():
        assert all(n.startswith("raised PlanError") for n in notes.values()), notes


def test_array_likes_are_buffers(tmp_path):
    """bytearray, memoryview, __array__ and __dlpack__ objects run on ccsynth schedules, equal to MPI."""
    got = run_cases(3, "arraylikes", tmp_path=tmp_path)
    assert all("mpi" not in note for note in got["arraylikes"].values())


def test_memory_returns_after_arrays_are_freed(tmp_path):
    """Cached bindings and replays hold no user buffer: RSS returns once the arrays are deleted."""
    run_cases(2, "memory_returns", tmp_path=tmp_path)


@pytest.mark.parametrize("k", [2, 3])
def test_nonblocking_collectives_equal_mpi(k, tmp_path):
    """Iallreduce, Ireduce_scatter_block, Iallgather, Ialltoall, Ibcast on ccsynth schedules, several in flight."""
    got = run_cases(k, "nonblocking", "nonblocking_errors", tmp_path=tmp_path)
    assert all("mpi" not in note.split(",") for note in got["nonblocking"].values()), got


def test_nonblocking_allreduce_overlaps_computation(capsys):
    """bench/overlap.py: Iallreduce + computation on another engine (sleep) takes less than their sum (medians of
    9 calls: the machine may be shared)."""
    from ccsynth.bench.overlap import main

    if MPIEXEC is None:
        pytest.skip("mpiexec not found")
    assert main(["-n", "2", "--size", "4M", "--compute", "sleep", "--iters", "9", "--json"]) == 0
    row = json.loads(capsys.readouterr().out)[0]
    assert row["algorithm"] != "mpi"
    assert row["both_ms"] < 0.9 * row["sum_ms"], row


@pytest.mark.parametrize("k", [3, 4])
def test_variable_counts_equal_mpi(k, tmp_path):
    """Alltoallv with random counts, Allgatherv and Reduce_scatter with counts on ccsynth schedules; Split/Dup."""
    run_cases(k, "vcounts", "split_dup", tmp_path=tmp_path)


def test_device_buffers_are_staged_when_mpi_is_not_cuda_aware(tmp_path):
    """Host arrays posing as device arrays: staged copies, results equal MPI; staging='never' raises clearly."""
    run_cases(2, "staging", tmp_path=tmp_path, env={"CCSYNTH_CUDA_AWARE": ""})


@pytest.mark.parametrize("k", [2, 3, 4])
def test_v_collectives_run_explicit_schedules_equal_to_mpi(k, tmp_path):
    """Alltoallv/Allgatherv: every block at its own size (no padding), random counts with zeros, several dtypes."""
    got = run_cases(k, "vcounts_explicit", tmp_path=tmp_path)
    assert all("mismatch BufferMismatchError" in n for n in got["vcounts_explicit"].values()), got
