"""Multi-rank tests of the Python user path (issue 14): ``tests/mpi_workers/api_worker.py`` under mpiexec.

Each test requires a PASS line from every rank for each of its cases. The tests
of :data:`SHARED` share one launch per rank count (every launch costs each rank
its imports); a failure names the case and the rank, or the case that ended the
job before it. The others, whose conditions a shared job would change (resident
memory, the environment), launch on their own.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

from dataclasses import dataclass

import pytest

from ccsynth.collectives.mpi_util import find_mpiexec

pytestmark = pytest.mark.mpi

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mpi_workers", "api_worker.py")
MPIEXEC = find_mpiexec()
LINE = re.compile(r"^CASE (\S+) (PASS|FAIL) rank (\d+)(?:: (.*))?$", re.MULTILINE)


@dataclass
class Launch:
    """One ``mpiexec -n k worker CASE...``: what each case printed on each rank."""

    cases: tuple[str, ...]
    returncode: int
    out: str  # stdout + stderr
    lines: dict[str, dict[int, tuple[str, str]]]  # case -> rank -> (PASS or FAIL, note)


def launch(k: int, *cases: str, tmp_path, timeout: int = 240, env: dict | None = None) -> Launch:
    if MPIEXEC is None:
        pytest.skip("mpiexec not found")
    full = dict(os.environ, CCSYNTH_TMP=str(tmp_path), OMP_NUM_THREADS="1", **(env or {}))
    full.pop("CCSYNTH_DEBUG", None)
    try:
        p = subprocess.run([MPIEXEC, "-n", str(k), sys.executable, WORKER, *cases], capture_output=True, text=True,
                           timeout=timeout, env=full)
        returncode, stdout, stderr = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:  # a hang: the cases that did not finish fail, naming it
        returncode, stdout, stderr = -1, _text(e.stdout), _text(e.stderr) + f"\n(killed after {timeout} s)"
    lines: dict = {}
    for name, status, rank, note in LINE.findall(stdout):
        lines.setdefault(name, {})[int(rank)] = (status, note)
    return Launch(cases, returncode, stdout + stderr, lines)


def _text(data) -> str:
    return data.decode(errors="replace") if isinstance(data, bytes) else (data or "")


def passed(k: int, run: Launch, cases: tuple[str, ...]) -> dict:
    """``{case: {rank: note}}`` if every rank passed each of ``cases`` in ``run`` (else the test fails, naming the
    case, the rank and the reason, or the case before it that ended the job)."""
    got: dict = {}
    for c in cases:
        ranks = run.lines.get(c, {})
        failed = {r: note for r, (status, note) in ranks.items() if status == "FAIL"}
        assert not failed, f"case {c} failed: " + "; ".join(f"rank {r}: {n}" for r, n in sorted(failed.items())) + \
            f"\n{run.out[-3000:]}"
        if len(ranks) < k:
            before = [b for b in run.cases[:run.cases.index(c)] if any(s == "FAIL" for s, _ in run.lines.get(b, {}).values())]
            why = f"case {before[0]} failed before it" if before else f"the job ended with status {run.returncode}"
            pytest.fail(f"case {c}: rank(s) {sorted(set(range(k)) - set(ranks))} never finished it ({why})\n"
                        f"{run.out[-3000:]}", pytrace=False)
        got[c] = {r: note for r, (_s, note) in ranks.items()}
    return got


def run_cases(k: int, *cases: str, tmp_path, timeout: int = 240, env: dict | None = None) -> dict:
    """``{case: {rank: note}}`` of a launch of its own in which every rank passed every case (else the test fails)."""
    run = launch(k, *cases, tmp_path=tmp_path, timeout=timeout, env=env)
    got = passed(k, run, cases)
    assert run.returncode == 0, run.out[-3000:]
    return got


#: the worker cases of the tests that share a launch per rank count, by test (and rank count where parametrized)
SHARED = {
    ("test_synthesize_then_communicator_on_4_ranks", 4): ("synth_path", "schedule_inputs"),
    ("test_mismatched_or_unusable_plans_raise_on_every_rank", 4): ("err_plan_differs", "err_plan_unusable"),
    ("test_array_likes_are_buffers", 3): ("arraylikes",),
    ("test_nonblocking_collectives_equal_mpi", 2): ("nonblocking", "nonblocking_errors"),
    ("test_nonblocking_collectives_equal_mpi", 3): ("nonblocking", "nonblocking_errors"),
    ("test_variable_counts_equal_mpi", 3): ("vcounts", "split_dup"),
    ("test_variable_counts_equal_mpi", 4): ("vcounts", "split_dup"),
    ("test_v_collectives_run_explicit_schedules_equal_to_mpi", 2): ("vcounts_explicit",),
    ("test_v_collectives_run_explicit_schedules_equal_to_mpi", 3): ("vcounts_explicit",),
    ("test_v_collectives_run_explicit_schedules_equal_to_mpi", 4): ("vcounts_explicit",),
}


class Shared:
    """One launch per rank count for the cases of every selected test in :data:`SHARED` (each launch costs every
    rank its imports); each test then checks only its own cases."""

    def __init__(self, session, tmp_path_factory):
        self.session, self.tmp = session, tmp_path_factory
        self.runs: dict[int, Launch] = {}

    def cases(self, test: str, k: int) -> dict:
        if k not in self.runs:
            todo: list[str] = []
            for key in [*self._selected(), (test, k)]:
                if key[1] == k:
                    todo += [c for c in SHARED[key] if c not in todo]
            self.runs[k] = launch(k, *todo, tmp_path=self.tmp.mktemp(f"shared{k}"))
        run = self.runs[k]
        got = passed(k, run, SHARED[test, k])
        assert run.returncode == 0 or any(s == "FAIL" for r in run.lines.values() for s, _ in r.values()), \
            run.out[-3000:]
        return got

    def _selected(self) -> list[tuple[str, int]]:
        """The (test, rank count) keys of SHARED that this session runs, in order (``-k`` may pick a few)."""
        out = []
        for item in self.session.items:
            test = getattr(item, "originalname", None)
            spec = getattr(item, "callspec", None)
            ks = [spec.params["k"]] if spec is not None and "k" in spec.params else [k for t, k in SHARED if t == test]
            out += [(test, k) for k in ks if (test, k) in SHARED]
        return out


@pytest.fixture(scope="module")
def shared(request, tmp_path_factory) -> Shared:
    return Shared(request.session, tmp_path_factory)


def test_synthesize_then_communicator_on_4_ranks(shared):
    """Allreduce plan from ccsynth.synthesize + default allgather, both on ccsynth schedules; fallbacks visible."""
    got = shared.cases("test_synthesize_then_communicator_on_4_ranks", 4)
    assert len(set(got["synth_path"].values())) == 1  # every rank has the same fingerprint


def test_mismatched_or_unusable_plans_raise_on_every_rank(shared):
    got = shared.cases("test_mismatched_or_unusable_plans_raise_on_every_rank", 4)
    for notes in got.values():
        assert all(n.startswith("raised PlanError") for n in notes.values()), notes


def test_array_likes_are_buffers(shared):
    """bytearray, memoryview, __array__ and __dlpack__ objects run on ccsynth schedules, equal to MPI."""
    got = shared.cases("test_array_likes_are_buffers", 3)
    assert all("mpi" not in note for note in got["arraylikes"].values())


def test_memory_returns_after_arrays_are_freed(tmp_path):
    """Cached bindings and replays hold no user buffer: RSS returns once the arrays are deleted."""
    run_cases(2, "memory_returns", tmp_path=tmp_path)


@pytest.mark.parametrize("k", [2, 3])
def test_nonblocking_collectives_equal_mpi(k, shared):
    """Iallreduce, Ireduce_scatter_block, Iallgather, Ialltoall, Ibcast on ccsynth schedules, several in flight."""
    got = shared.cases("test_nonblocking_collectives_equal_mpi", k)
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
def test_variable_counts_equal_mpi(k, shared):
    """Alltoallv with random counts, Allgatherv and Reduce_scatter with counts on ccsynth schedules; Split/Dup."""
    shared.cases("test_variable_counts_equal_mpi", k)


def test_device_buffers_are_staged_when_mpi_is_not_cuda_aware(tmp_path):
    """Host arrays posing as device arrays: staged copies, results equal MPI; staging='never' raises clearly."""
    run_cases(2, "staging", tmp_path=tmp_path, env={"CCSYNTH_CUDA_AWARE": ""})


@pytest.mark.parametrize("k", [2, 3, 4])
def test_v_collectives_run_explicit_schedules_equal_to_mpi(k, shared):
    """Alltoallv/Allgatherv: every block at its own size (no padding), random counts with zeros, several dtypes."""
    got = shared.cases("test_v_collectives_run_explicit_schedules_equal_to_mpi", k)
    assert all("mismatch BufferMismatchError" in n for n in got["vcounts_explicit"].values()), got
