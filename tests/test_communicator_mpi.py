"""Multi-rank tests: mpiexec launches tests/mpi_workers/collectives_worker.py.

Every case is its own test (``test_every_collective_matches_mpi[3-hand]``),
but the cases of one rank count share a launch, since each launch costs about
a second: the first test of a batch launches the worker with every selected
case of that batch, and each test then reads its own case's
``CASE <name> PASS|FAIL rank <R>`` lines. A case passes when every rank
reports PASS. When a case fails (a FAIL line, or ranks that never finished
it) its test names the case, the rank and the reason; the job was aborted
there, so the cases after it are launched again on their own, and a failure
never hides the verdict of another case. Error cases (``err_*``) pass when
every rank raised the expected error and the job ended on its own, well
before the subprocess timeout: no hang.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field

import pytest

from ccsynth.collectives.mpi_util import find_mpiexec

pytestmark = pytest.mark.mpi

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mpi_workers", "collectives_worker.py")
MPIEXEC = find_mpiexec()
TIMEOUT = 240  # per launch; a hang shows up as this timeout
CASE_LINE = re.compile(r"^CASE (\S+) (PASS|FAIL) rank (\d+)(?:: (.*))?$", re.MULTILINE)


@dataclass
class Launch:
    """One finished (or timed-out) ``mpiexec`` run."""

    cases: tuple[str, ...]  # in the order they ran
    returncode: int | None  # None: killed after the timeout
    out: str  # stdout + stderr
    elapsed: float
    culprit: str | None = None  # the case that did not pass (the job ended there), if any


def _text(data) -> str:
    return data.decode(errors="replace") if isinstance(data, bytes) else (data or "")


def launch(k: int, *cases: str, tmp_path=None, timeout: int = TIMEOUT, worker: str = WORKER) -> Launch:
    """``mpiexec -n k worker cases...``; a hang is a result (``returncode`` None), not an exception."""
    if MPIEXEC is None:
        pytest.skip("mpiexec not found")
    env = dict(os.environ)
    env.pop("CCSYNTH_DEBUG", None)
    if tmp_path is not None:
        env["CCSYNTH_TMP"] = str(tmp_path)
    cmd = [MPIEXEC, "-n", str(k), sys.executable, worker, *cases]
    t0 = time.monotonic()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
        return Launch(cases, proc.returncode, proc.stdout + proc.stderr, time.monotonic() - t0)
    except subprocess.TimeoutExpired as e:  # pragma: no cover - a failure mode
        return Launch(cases, None, _text(e.stdout) + _text(e.stderr), time.monotonic() - t0)


def launch_to_the_end(k: int, case: str, timeout: int) -> Launch:
    """One case that must end on its own (an abort counts): a hang fails the test."""
    run = launch(k, case, timeout=timeout)
    if run.returncode is None:  # pragma: no cover - a failure mode
        pytest.fail(f"mpiexec -n {k} {case} hung for {timeout}s:\n{run.out[-4000:]}", pytrace=False)
    return run


@dataclass
class Verdict:
    """What one case did on every rank, and the launch it ran in."""

    case: str
    k: int
    launch: Launch
    passed: dict[int, str] = field(default_factory=dict)  # rank -> note
    failed: dict[int, str] = field(default_factory=dict)  # rank -> reason
    problem: str = ""  # why the case did not pass; empty when it did

    def check(self, expected_status: int = 0) -> None:
        """Fail the calling test with the case, the rank(s) and the reason."""
        tail = self.launch.out[-4000:]
        if self.problem:
            pytest.fail(f"case {self.case!r} on {self.k} ranks: {self.problem}\n--- output tail ---\n{tail}",
                        pytrace=False)
        status = self.launch.returncode
        if self.launch.culprit is None and status != expected_status:
            pytest.fail(f"case {self.case!r} passed on every rank, but its job ({' '.join(self.launch.cases)}) "
                        f"exited with status {status}, expected {expected_status}\n--- output tail ---\n{tail}",
                        pytrace=False)


def _verdicts(k: int, run: Launch) -> tuple[list[Verdict], bool]:
    """Verdicts of the cases of ``run`` up to the first one that did not pass; True if that was the last one."""
    lines: dict[str, tuple[dict, dict]] = {}
    for m in CASE_LINE.finditer(run.out):
        name, status, rank, detail = m.group(1), m.group(2), int(m.group(3)), m.group(4) or ""
        passed, failed = lines.setdefault(name, ({}, {}))
        (passed if status == "PASS" else failed)[rank] = detail
    out = []
    for case in run.cases:
        passed, failed = lines.get(case, ({}, {}))
        v = Verdict(case, k, run, dict(passed), dict(failed))
        out.append(v)
        if failed:
            v.problem = "; ".join(f"FAIL on rank {r}: {why}" for r, why in sorted(failed.items()))
        elif len(passed) < k:
            missing = [r for r in range(k) if r not in passed]
            ended = (f"the job hung and was killed after {run.elapsed:.0f}s" if run.returncode is None
                     else f"the job ended with status {run.returncode}")
            v.problem = f"rank(s) {missing} never finished it ({ended})"
        else:
            continue
        run.culprit = case
        return out, run.returncode is None
    return out, False


class Batches:
    """One launch per (test, rank count) for all its selected cases; a failed case's followers run again."""

    def __init__(self, session, tmp_path_factory, worker: str = WORKER):
        self.session = session
        self.worker = worker
        self.tmp = tmp_path_factory
        self.results: dict[tuple[str, int, str], Verdict] = {}

    def _selected(self, test: str, k: int) -> list[str]:
        """The cases of ``test`` on ``k`` ranks that this session runs, in order (``-k`` may pick a few)."""
        out = []
        for item in self.session.items:
            spec = getattr(item, "callspec", None)
            if getattr(item, "originalname", None) == test and spec is not None and spec.params.get("k") == k:
                out.append(spec.params["case"])
        return out

    def verdict(self, test: str, k: int, case: str, *, timeout: int = TIMEOUT) -> Verdict:
        key = (test, k, case)
        if key not in self.results:
            todo = [c for c in self._selected(test, k) if (test, k, c) not in self.results] or [case]
            if case not in todo:
                todo.append(case)
            while todo:
                run = launch(k, *todo, tmp_path=self.tmp.mktemp(f"{test}-{k}"), timeout=timeout, worker=self.worker)
                verdicts, hung = _verdicts(k, run)
                for v in verdicts:
                    self.results[(test, k, v.case)] = v
                todo = todo[len(verdicts):]
                if hung:  # no second wait for a hang: the rest did not run
                    for c in todo:
                        self.results[(test, k, c)] = Verdict(
                            c, k, run, problem=f"not run: case {verdicts[-1].case!r} hung before it")
                    todo = []
        return self.results[key]


@pytest.fixture(scope="module")
def batches(request, tmp_path_factory) -> Batches:
    return Batches(request.session, tmp_path_factory)


COLLECTIVE_CASES = ("default", "hand", "baselines", "executor", "specs", "dataflow", "replay", "levels_agree",
                    "generations")


@pytest.mark.parametrize("k,case", [(k, c) for k in (2, 3, 4) for c in COLLECTIVE_CASES])
def test_every_collective_matches_mpi(k, case, batches):
    """Default plan, hand-built schedules and every applicable baseline, against MPI's own collectives:
    all collectives, ops and dtypes, in place and not, counts 1, 7, 1001 (and larger for rings)."""
    batches.verdict("test_every_collective_matches_mpi", k, case).check()


@pytest.mark.parametrize("k,case", [(8, "default_small"), (8, "executor")])
def test_eight_ranks(k, case, batches):
    batches.verdict("test_eight_ranks", k, case).check()


ERRORS = [
    ("err_world", "ScheduleError", "is for 4 ranks"),
    ("err_plan_world", "PlanError", "none on the communicator's 3 ranks"),
    ("err_mismatch", "BufferMismatchError", "sendbuf has 5 element"),
    ("err_dtype", "BufferMismatchError", "dtype float32 but recvbuf has dtype float64"),
    ("err_noncontig", "BufferMismatchError", "not contiguous"),
    ("err_op", "OpError", "unknown reduction op 'xor'"),
    ("err_avg_int", "OpError", "'avg' needs a floating-point buffer"),
    ("err_debug_count", "BufferMismatchError", "ranks disagree"),
    ("err_settings", "CCSynthError", "different settings"),
    ("err_slices", "ScheduleError", "compiled schedule"),
]


@pytest.mark.parametrize("k,case,exc,text", [(3, *e) for e in ERRORS], ids=[e[0] for e in ERRORS])
def test_errors_raise_on_every_rank_without_hanging(k, case, exc, text, batches):
    """A schedule for another world size, mismatched buffers, unknown ops...: every rank raises the
    error before communicating (so none is left waiting) and the job exits non-zero (3) on its own."""
    v = batches.verdict("test_errors_raise_on_every_rank_without_hanging", k, case, timeout=120)
    v.check(expected_status=3)
    for r in range(k):
        note = v.passed[r]
        assert f"raised {exc}: " in note and text in note, (
            f"case {case!r}: rank {r} should raise {exc} ({text!r}), reported: {note}")
    assert v.launch.elapsed < 90


@pytest.mark.parametrize("case,text", [
    ("one_rank", "sendbuf has 5 element"),  # only rank 2 sees its mistake, before communicating
])
def test_unhandled_error_on_one_rank_aborts_the_job(case, text):
    """The abort handler ends the job instead of leaving the other ranks waiting in the collective."""
    run = launch_to_the_end(3, case, timeout=60)
    out = run.out
    assert run.returncode != 0, out[-3000:]
    assert "BufferMismatchError" in out and text in out and "aborting the MPI job" in out, out[-3000:]
    assert "unreachable" not in out
    assert run.elapsed < 45


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
    run = launch_to_the_end(k, case, timeout=60)
    out = run.out
    assert run.returncode != 0, out[-3000:]
    assert "aborting the MPI job" in out and "unreachable" not in out, out[-3000:]
    hits = list(MISMATCH.finditer(out))
    assert hits, f"no BufferMismatchError naming the sizes:\n{out[-3000:]}"
    for m in hits:
        rank, expected, peer = int(m.group(1)), int(m.group(2)), int(m.group(3))
        assert rank != peer and 0 <= rank < k and 0 <= peer < k
        if m.group(5) is not None:
            assert int(m.group(5)) != expected, m.group(0)
    assert run.elapsed < 45
