"""Multi-rank reliability: a fault on one rank never gives any rank a wrong buffer, and nothing hangs.

The scenarios are those of the fault-injection benchmark
(``python -m ccsynth.bench.faults``, results in docs/results.md): each
runs under ``mpiexec`` with the drop-in Communicator and reports, per rank,
whether the faulty call raised (and what), returned the right result or a
WRONG one, and whether a correct call afterwards worked. Scenarios that end
in a normal way share one launch; those that end the job (a killed rank, an
abort, an uncaught error, a skipped call) get one each. Every test names
the scenario, the rank count, and per rank what happened.

The default run covers every collective on 4 ranks and the job-ending
faults on 3 ranks (about 40 s); the same scenarios on 2 to 6 ranks are the
benchmark's (``-m slow`` runs a 6-rank share of them here too).
"""

from __future__ import annotations

import os

import pytest

from ccsynth.bench import faults
from ccsynth.collectives.mpi_util import find_mpiexec

pytestmark = [pytest.mark.mpi, pytest.mark.skipif(find_mpiexec() is None, reason="mpiexec not found")]

SHARED = [name for name, s in faults.SCENARIOS.items() if not s.alone]
ALONE = ["kill/allreduce", "kill-large/allreduce", "uncaught", "mpi-fallback", "skip-warm/allreduce",
         "exit-after-large", "memory-200-sizes"]
SLOW_ALONE = ["skip/allreduce", "skip-warm/broadcast", "roots/broadcast", "roots-warm/broadcast", "kill/reduce"]
LIMIT = 120.0  # seconds per launch: a hang shows up as the outcome HANG, not as a stuck test run


@pytest.fixture(autouse=True)
def short_timeouts(monkeypatch):
    monkeypatch.setenv("CCSYNTH_FAULT_TIMEOUT", "2")  # the workers' timeout= where a scenario needs one


@pytest.fixture(scope="module")
def shared_outcomes():
    """Every shared scenario on 4 ranks, in one launch (relaunched after a scenario that ended the job)."""
    saved = os.environ.get("CCSYNTH_FAULT_TIMEOUT")
    os.environ["CCSYNTH_FAULT_TIMEOUT"] = "2"
    try:
        return {o.scenario: o for o in faults.run_scenarios(SHARED, [4], LIMIT)}
    finally:
        if saved is None:
            os.environ.pop("CCSYNTH_FAULT_TIMEOUT")
        else:
            os.environ["CCSYNTH_FAULT_TIMEOUT"] = saved


def _explain(o: faults.Outcome) -> str:
    per_rank = "; ".join(f"rank {r}: " + ", ".join(f"{st} ({d[:120]})" for st, _, d in lines)
                         for r, lines in sorted(o.lines.items()))
    return f"{o.scenario} on {o.n} ranks: {o.outcome} (expected {o.expected}): {o.detail}\n{per_rank}"


def _check(o: faults.Outcome) -> None:
    assert o.outcome not in ("WRONG", "HANG", "OVER", "unfinished"), _explain(o)
    assert o.as_expected, _explain(o)
    assert "MISLEADING" not in o.detail, _explain(o)
    if o.outcome == "clean error" and not o.scenario.startswith(("skip", "roots", "uncaught")):
        after = {r: [st for st, _, _ in lines if st.startswith("AFTER-")] for r, lines in o.lines.items()}
        assert all(a and all(st == "AFTER-OK" for st in a) for a in after.values()), (
            "the call after the fault must work on every rank: " + _explain(o))


@pytest.mark.parametrize("name", SHARED)
def test_a_fault_on_one_rank_is_an_error_on_every_rank(name, shared_outcomes):
    """Local mistakes, counts that differ, Reduce(IN_PLACE) off the root, the issue's own report: every rank
    raises (or, in a rooted collective, finishes with the right result), and the next call is right."""
    _check(shared_outcomes[name])


@pytest.mark.parametrize("name", ALONE)
def test_faults_that_end_the_call_or_the_job(name):
    """A killed rank (the launcher aborts: no wrong buffer, no misleading message), an uncaught error without
    an abort handler, a failure while the others are in the MPI library's collective (ccsynth aborts, naming
    the rank), a skipped call (timeouts), exit right after large collectives, 200 distinct sizes in bounded
    memory."""
    (o,) = faults.run_scenarios([name], [3], LIMIT)
    _check(o)
    if name.startswith(("kill", "mpi-fallback", "uncaught")):
        assert o.seconds < 30, _explain(o)


@pytest.mark.slow  # covered by the fault-injection benchmark: python -m ccsynth.bench.faults -n 2,4,6
@pytest.mark.parametrize("name", SLOW_ALONE)
@pytest.mark.parametrize("n", [2, 6])
def test_more_faults_on_more_rank_counts(name, n):
    (o,) = faults.run_scenarios([name], [n], LIMIT)
    _check(o)
