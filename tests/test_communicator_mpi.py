"""Multi-rank tests: mpiexec launches tests/mpi_workers/collectives_worker.py.

Each test passes only if every rank exits 0 (or, for the error cases, every
rank reports the expected error and the job ends on its own well before the
subprocess timeout: no hang). Many checks are batched into one launch because
each launch costs about half a second.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import pytest

from ccsynth.collectives.mpi_util import find_mpiexec

pytestmark = pytest.mark.mpi

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mpi_workers", "collectives_worker.py")
MPIEXEC = find_mpiexec()
TIMEOUT = 240  # per launch; a hang shows up as this timeout


def launch(k: int, *cases: str, tmp_path=None, timeout: int = TIMEOUT):
    if MPIEXEC is None:
        pytest.skip("mpiexec not found")
    env = dict(os.environ)
    env.pop("CCSYNTH_DEBUG", None)
    if tmp_path is not None:
        env["CCSYNTH_TMP"] = str(tmp_path)
    cmd = [MPIEXEC, "-n", str(k), sys.executable, WORKER, *cases]
    t0 = time.monotonic()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired as e:  # pragma: no cover - a failure mode
        pytest.fail(f"{' '.join(cmd)} hung for {timeout}s:\n{e.stdout}\n{e.stderr}")
    return proc, time.monotonic() - t0


def expect_ok(k: int, *cases: str, tmp_path=None):
    proc, _ = launch(k, *cases, tmp_path=tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"mpiexec -n {k} {' '.join(cases)} failed ({proc.returncode}):\n{out[-6000:]}"
    for case in cases:
        for r in range(k):
            assert f"rank {r}: {case} ok" in proc.stdout, f"rank {r} did not finish {case}:\n{out[-4000:]}"


@pytest.mark.parametrize("k", [2, 3, 4])
def test_every_collective_matches_mpi(k, tmp_path):
    """Default plan, hand-built schedules and every applicable baseline, against MPI's own collectives:
    all collectives, ops and dtypes, in place and not, counts 1, 7, 1001 (and larger for rings)."""
    expect_ok(k, "default", "hand", "baselines", "executor", "specs", "dataflow", "replay", "levels_agree", tmp_path=tmp_path)


def test_eight_ranks(tmp_path):
    expect_ok(8, "default_small", "executor", tmp_path=tmp_path)


ERRORS = [
    ("err_world", "ScheduleError", "is for 4 ranks"),
    ("err_plan_world", "PlanError", "no ccsynth schedule"),
    ("err_mismatch", "BufferMismatchError", "sendbuf has 5 element"),
    ("err_dtype", "BufferMismatchError", "dtype float32 but recvbuf has dtype float64"),
    ("err_noncontig", "BufferMismatchError", "not contiguous"),
    ("err_op", "OpError", "unknown reduction op 'xor'"),
    ("err_avg_int", "OpError", "'avg' needs a floating-point buffer"),
    ("err_debug_count", "BufferMismatchError", "ranks disagree"),
    ("err_settings", "CCSynthError", "different settings"),
    ("err_slices", "ScheduleError", "compiled schedule"),
]


@pytest.mark.parametrize("k", [3])
def test_errors_raise_on_every_rank_without_hanging(k):
    """A schedule for another world size, mismatched buffers, unknown ops...: every rank raises the
    error before communicating (so none is left waiting) and the job exits non-zero on its own."""
    proc, elapsed = launch(k, *(e[0] for e in ERRORS), timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 3, f"expected exit status 3, got {proc.returncode}:\n{out[-4000:]}"
    lines = proc.stdout.splitlines()
    for case, exc, text in ERRORS:
        assert all(f"rank {r}: {case} ok" in proc.stdout for r in range(k)), f"{case}:\n{out[-4000:]}"
    for exc, text in {(e[1], e[2]) for e in ERRORS}:
        hits = [ln for ln in lines if f"raised {exc}: " in ln and text in ln]
        assert len(hits) == k, f"expected {k} ranks to raise {exc} ({text!r}):\n{out[-4000:]}"
    assert elapsed < 90


@pytest.mark.parametrize("case,text", [
    ("one_rank", "sendbuf has 5 element"),  # only rank 2 sees its mistake, before communicating
])
def test_unhandled_error_on_one_rank_aborts_the_job(case, text):
    """The abort handler ends the job instead of leaving the other ranks waiting in the collective."""
    proc, elapsed = launch(3, case, timeout=60)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert "BufferMismatchError" in out and text in out and "aborting the MPI job" in out, out[-3000:]
    assert "unreachable" not in out
    assert elapsed < 45


# A rank that receives a message of the wrong length names itself, the peer and both byte counts.
MISMATCH = re.compile(
    r"BufferMismatchError: rank (\d+) expected (\d+) bytes from rank (\d+) \(message tag \d+\) "
    r"but (received (\d+)|was sent more \(MPI truncated the message\)), running schedule .*"
    r"the ranks passed different counts"
)


@pytest.mark.parametrize("k,case", [
    (3, "short_allreduce"),  # the last rank passes 7 float64 instead of 8
    (2, "short_allgather"),  # the last rank contributes 3 int32 instead of 4
    (4, "short_multislice"),  # 2 full slices against 4: the short message's empty last slice tells
    (3, "short_empty_chunks"),  # 1 element in a ring of 3 chunks: empty chunks still travel
    (3, "one_rank_count"),  # rank 0 passes one element more: its peers' receives truncate
    (2, "short_profiled"),  # CompiledSchedule(profile=True, wait="yield"): the other run loop
    (3, "short_static_profiled"),  # the same through the straight-line program
    (3, "short_dataflow"),  # small messages through the dataflow loop instead of the straight-line one
])
def test_ranks_with_different_counts_abort_with_the_sizes(k, case):
    """One rank passes another count than the others (no debug check): some rank receives fewer
    bytes than it expects (MPI accepts that silently) or more (MPI truncates): it raises
    BufferMismatchError, the abort handler ends the job quickly, and nobody returns wrong data."""
    proc, elapsed = launch(k, case, timeout=60)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert "aborting the MPI job" in out and "unreachable" not in out, out[-3000:]
    hits = [m for m in MISMATCH.finditer(out)]
    assert hits, f"no BufferMismatchError naming the sizes:\n{out[-3000:]}"
    for m in hits:
        rank, expected, peer = int(m.group(1)), int(m.group(2)), int(m.group(3))
        assert rank != peer and 0 <= rank < k and 0 <= peer < k
        if m.group(5) is not None:
            assert int(m.group(5)) != expected, m.group(0)
    assert elapsed < 45
