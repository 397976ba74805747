"""Tuning a plan by measurement (ccsynth.synth.tables.tune_plan, ccsynth.bench.tune, ``ccsynth tune``)."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from ccsynth.bench.tune import bench_size
from ccsynth.collectives.plan import Plan, load_plan, save_plan
from ccsynth.collectives.schedule import Schedule
from ccsynth.collectives.spec import Collective
from ccsynth.errors import PlanError
from ccsynth.synth import tables
from ccsynth.synth.baselines import make_baseline
from ccsynth.synth.tables import TUNE_REL, build_plan, departures, keeps_candidate, tune_plan
from ccsynth.topologies import fully_connected

MPIEXEC = Path(sys.executable).parent / "mpiexec"
SIZES = [1024, 4096, 16384]  # the default plan runs recursive doubling for allgather on 2 ranks at all three


def _plan(monkeypatch, candidate_us: float = 20.0):
    """An allgather plan on 2 ranks whose model puts a candidate ("fast", a ring) at ``candidate_us`` against the
    default's algorithm at 100 us at every size: with the default margin the candidate takes every size."""
    topo = fully_connected(2)
    ring = make_baseline("ring", Collective("allgather", 2), topo)
    fast = Schedule("fast", ring.collective, ring.ops, ring.scratch_chunks, ring.topology, ring.meta)

    def fake(schedule, topology, sizes, *, local_bw=None):
        return [SimpleNamespace(time_us=candidate_us if schedule.name == "fast" else 100.0) for _ in sizes]

    monkeypatch.setattr(tables, "simulate_sizes", fake)
    return build_plan([fast], topo, SIZES, default_margin=tables.EXECUTOR_MARGIN), topo


def test_keeps_candidate_only_when_measured_faster_by_more_than_the_noise():
    assert keeps_candidate(94.0, 100.0) and not keeps_candidate(95.0, 100.0) and not keeps_candidate(99.0, 100.0)
    assert not keeps_candidate(120.0, 100.0) and keeps_candidate(89.0, 100.0, rel=0.1)
    assert TUNE_REL == 0.05


def test_tune_measures_only_the_departures_and_keeps_the_faster(monkeypatch):
    plan, topo = _plan(monkeypatch)
    assert [(d.size, d.candidate, d.default) for d in departures(plan)] == [
        (s, "fast", "recursive_doubling(c=1)") for s in SIZES]
    measured = {1024: (80.0, 100.0), 4096: (98.0, 100.0), 16384: (130.0, 100.0)}  # faster, a tie, slower
    calls = []

    def timer(candidate, default, size):
        calls.append((candidate.name, default.name, size))
        return measured[size]

    tuned, choices = tune_plan(plan, topo, timer, mpi=False)
    assert calls == [("fast", "recursive_doubling(c=1)", s) for s in SIZES]
    assert [c.kept for c in choices] == ["fast", "recursive_doubling(c=1)", "recursive_doubling(c=1)"]
    # entries merged again: the candidate below the midpoint of 1K and 4K (2K), the default's algorithm above
    assert [(e.algorithm, e.min_bytes, e.max_bytes) for e in tuned.entries] == [
        ("fast", 0, 2048), ("recursive_doubling(c=1)", 2048, None)]
    assert tuned.entries[1].predicted_us == 100.0 and tuned.entries[0].predicted_us == 20.0
    assert tuned.meta["tables"][0]["winners"] == ["fast", "recursive_doubling(c=1)", "recursive_doubling(c=1)"]
    assert [t["kept"] for t in tuned.meta["tuned"]] == [c.kept for c in choices]
    # only the kept departure is left: the candidate at 1K (at 4K and 16K the tuned plan runs the default's)
    assert [(d.size, d.candidate, d.default) for d in departures(tuned)] == [(1024, "fast", "recursive_doubling(c=1)")]
    # a tuned plan is a plan like any other: saved and loaded with its record
    back = Plan.from_dict(json.loads(json.dumps(tuned.to_dict())))
    assert [e.algorithm for e in back.entries] == [e.algorithm for e in tuned.entries]


def test_a_plan_that_runs_the_default_everywhere_is_not_measured(monkeypatch):
    plan, topo = _plan(monkeypatch, candidate_us=50.0)  # 50% faster: within the margin, the default stays
    assert departures(plan) == []
    tuned, choices = tune_plan(plan, topo, lambda *a: pytest.fail("nothing to measure"), mpi=False)
    assert choices == [] and [e.algorithm for e in tuned.entries] == [e.algorithm for e in plan.entries]


def test_tune_measures_mpi_beside_the_kept_schedule_and_keeps_the_faster(monkeypatch):
    """MPI's own collective (the timer's None) is measured at every size against what the plan keeps there; a
    schedule stays only where faster than MPI by more than the noise, else the size runs MPI ("mpi" rows)."""
    plan, topo = _plan(monkeypatch)
    departure = {1024: (80.0, 100.0), 4096: (80.0, 100.0), 16384: (80.0, 100.0)}  # "fast" kept everywhere
    against_mpi = {1024: (50.0, 80.0), 4096: (79.0, 80.0), 16384: (100.0, 80.0)}  # MPI faster, a tie, slower
    calls = []

    def timer(candidate, default, size):
        calls.append((None if candidate is None else candidate.name, default.name, size))
        return (against_mpi if candidate is None else departure)[size]

    tuned, choices = tune_plan(plan, topo, timer)
    assert calls == [("fast", "recursive_doubling(c=1)", s) for s in SIZES] + [(None, "fast", s) for s in SIZES]
    assert [c.kept for c in choices[3:]] == ["mpi", "mpi", "fast"]
    assert [(e.algorithm, e.min_bytes, e.max_bytes, e.schedule is None) for e in tuned.entries] == [
        ("mpi", 0, 8192, True), ("fast", 8192, None, False)]
    back = Plan.from_dict(json.loads(json.dumps(tuned.to_dict())))  # "mpi" rows round-trip without a schedule
    assert back.entry_for("allgather", 2, 100).is_mpi and back.select("allgather", 2, 100) is None
    assert [d.candidate for d in departures(back)] == ["mpi", "mpi", "fast"]
    again, _ = tune_plan(back, topo, lambda c, d, size: (1.0, 2.0))  # tuned again: MPI (and "fast") measure faster
    assert [e.algorithm for e in again.entries] == ["mpi"]


def test_a_plan_without_defaults_has_no_departures(monkeypatch):
    plan, topo = _plan(monkeypatch)
    bare = Plan.from_dict({**plan.to_dict(), "meta": {}})
    assert departures(bare) == []
    broken = Plan.from_dict(json.loads(json.dumps(plan.to_dict())))
    broken.meta["tables"][0]["winners"][0] = "lost"
    with pytest.raises(PlanError, match="no schedule"):
        tune_plan(broken, topo, lambda *a: (1.0, 1.0))


def test_bench_size_is_the_benchmarks_per_rank_size():
    assert bench_size("allreduce", 4, 4096) == 4096
    assert bench_size("allgather", 4, 4096) == 1024 and bench_size("allgather", 4, 8) == 4
    assert bench_size("reduce_scatter", 4, 24) == 16 and bench_size("alltoall", 2, 4096) == 2048


@pytest.mark.mpi
def test_tune_under_mpiexec_keeps_one_of_the_two_and_the_plan_runs_right(monkeypatch, tmp_path):
    if not MPIEXEC.exists():
        pytest.skip("mpiexec not installed in the virtual environment")
    plan, _ = _plan(monkeypatch)
    path, out = tmp_path / "plan.json", tmp_path / "tuned.json"
    save_plan(plan, path)
    run = subprocess.run([str(MPIEXEC), "-n", "2", sys.executable, "-m", "ccsynth", "tune", str(path), "-t",
                          "fully_connected:2", "-o", str(out), "-i", "5", "--json"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout + run.stderr
    doc = json.loads(run.stdout)
    assert doc["schema"] == "ccsynth.tune/1" and [c["size_bytes"] for c in doc["choices"]] == SIZES + SIZES
    for c in doc["choices"]:
        assert c["kept"] in (c["candidate"], c["default"]) and c["candidate_us"] > 0 and c["default_us"] > 0
        assert (c["kept"] == c["candidate"]) == (not keeps_candidate(c["default_us"], c["candidate_us"])
                                                 if c["candidate"] == "mpi" else
                                                 keeps_candidate(c["candidate_us"], c["default_us"]))
    tuned = load_plan(out)
    for c in doc["choices"][len(SIZES):]:  # measured against MPI last: what the tuned plan runs
        assert c["candidate"] == "mpi" and tuned.entry_for("allgather", 2, c["size_bytes"]).algorithm == c["kept"]
    # the tuned plan computes the right allgather (checked against the expected result, -c)
    bench = subprocess.run([str(MPIEXEC), "-n", "2", sys.executable, "-m", "ccsynth", "bench", "allgather", "-m",
                            "256:4K", "-c", "-i", "3", "-x", "1", "--algo", f"plan:{out}"],
                           capture_output=True, text=True, timeout=300)
    assert bench.returncode == 0 and "Fail" not in bench.stdout and "Pass" in bench.stdout, bench.stdout + bench.stderr
    wrong = subprocess.run([str(MPIEXEC), "-n", "1", sys.executable, "-m", "ccsynth", "tune", str(path), "-t",
                            "fully_connected:2"], capture_output=True, text=True, timeout=120)
    assert wrong.returncode == 2 and "mpiexec -n 2" in wrong.stderr



@pytest.mark.mpi
def test_tune_refuses_a_plan_for_other_ranks_or_without_tables_once(monkeypatch, tmp_path):
    """A plan made for 2 ranks tuned on a 3-rank topology, a plan without decision tables, and a bad option: one
    clear error (from rank 0 only) and exit status 2, no "nothing to tune" success."""
    if not MPIEXEC.exists():
        pytest.skip("mpiexec not installed in the virtual environment")
    plan, _ = _plan(monkeypatch)
    path, bare = tmp_path / "plan.json", tmp_path / "bare.json"
    save_plan(plan, path)
    save_plan(replace(plan, meta={k: v for k, v in plan.meta.items() if k != "tables"}), bare)

    def tune(n, *args):
        return subprocess.run([str(MPIEXEC), "-n", str(n), sys.executable, "-m", "ccsynth", "tune", *args],
                              capture_output=True, text=True, timeout=120)

    other = tune(3, str(path), "-t", "fully_connected:3")
    assert other.returncode == 2 and "nothing to tune" not in other.stdout, other.stdout + other.stderr
    assert other.stderr.count("error:") == 1 and "schedules for 2 ranks, the topology 3" in other.stderr
    untabled = tune(2, str(bare), "-t", "fully_connected:2")
    assert untabled.returncode == 2 and untabled.stderr.count("error:") == 1, untabled.stderr
    assert "no decision tables" in untabled.stderr
    badopt = tune(2, str(path), "-t", "fully_connected:2", "--no-such-option")
    assert badopt.returncode == 2 and badopt.stderr.count("tune has no option --no-such-option") == 1, badopt.stderr


def test_pick_winner_fastest_ties_to_fewer_ops_and_keeps_the_default_within_the_margin():
    from ccsynth.synth.tables import pick_winner

    assert pick_winner([10.0, 8.0, 9.0], [5, 5, 5]) == 1
    assert pick_winner([10.0, 10.0 * (1 + 1e-12)], [9, 3]) == 1  # a tie: fewer ops
    assert pick_winner([float("inf"), float("nan")], [1, 1]) is None
    assert pick_winner([100.0, 80.0], [1, 1], default=0, margin=0.25) == 0  # 20% faster: within 25%
    assert pick_winner([100.0, 70.0], [1, 1], default=0, margin=0.25) == 1  # 30% faster: beyond it
    assert pick_winner([100.0, 70.0], [1, 1], default=0, margin=None) == 1


def _policy_case():
    """A 2-rank allreduce run of three sizes: the plan leaves the default (``d``) for ``ring(c=2)`` at 1K (measured
    faster) and for a synthesized schedule at 4K (measured slower), the default's algorithm at 16K."""
    def rows(times, algo="x"):
        return [SimpleNamespace(size=s, median_us=t, algorithm=algo) for s, t in zip(SIZES, times)]

    results = {"default": rows([10.0, 10.0, 10.0]), "plan": rows([8.0, 13.0, 10.2]), "ring": rows([8.0, 9.0, 30.0])}
    table = {"sizes": SIZES, "winners": ["ring(c=2)", "ccsynth@4K", "d"], "defaults": ["d", "d", "d"],
             "candidates": [{"algorithm": "d", "ops": 4, "times_us": [10.0, 10.0, 10.0]},
                            {"algorithm": "ring(c=2)", "ops": 8, "times_us": [7.0, 7.0, 20.0]},
                            {"algorithm": "ccsynth@4K", "ops": 6, "times_us": [9.0, 6.0, 9.5]}]}
    return table, results


def test_policies_are_judged_on_the_measured_rows():
    from ccsynth.bench.bench_predict import _margin_pick, _tuned_pick, policy_outcome

    table, results = _policy_case()
    as_run = policy_outcome("allreduce", 2, table, results, lambda j, size: table["winners"][j])
    # 1K: 8 <= 10; 4K: 13 > 10.5; 16K: the default's algorithm run by the plan, 10.2 > 10 (noise) but within 5%
    assert (as_run.sizes, as_run.departures, as_run.departure_ratios) == (3, 2, (0.8, 1.3))
    assert (as_run.strict, as_run.same_or_faster, as_run.within_5pct) == (1 / 3, 2 / 3, 2 / 3)
    tuned = policy_outcome("allreduce", 2, table, results, _tuned_pick("allreduce", 2, table, None, results))
    assert tuned.departures == 1 and tuned.departure_ratios == (0.8,) and tuned.same_or_faster == 1.0
    # the margin re-picks from the saved predictions: 30% faster (ring at 1K, 40% the synthesized at 4K) pass 25%,
    # at 50% only the default's algorithm is left; the ring is measured in its column only at the bench's chunk
    # factor (2 ranks: 2), the synthesized schedule only in the plan's row
    assert policy_outcome("allreduce", 2, table, results, _margin_pick(table, 0.25)).departures == 2
    assert policy_outcome("allreduce", 2, table, results, _margin_pick(table, 0.5)).departures == 0
    other = {"default": results["default"], "plan": results["plan"],
             "ring": [SimpleNamespace(size=s, median_us=t) for s, t in zip(SIZES, (12.0, 9.0, 9.0))]}
    cross = policy_outcome("allreduce", 2, table, results, _tuned_pick("allreduce", 2, table, other, results))
    assert cross.departures == 0  # the other run measured the ring slower at 1K, and not the synthesized one


def test_bench_predict_tunes_each_plan_before_its_bench(monkeypatch, tmp_path):
    from ccsynth.bench import bench_predict

    ran = []

    def fake_run(cmd, log, max_load=None, max_wait=0.0, env=None):
        ran.append(cmd)
        if "profile" in cmd:
            Path(cmd[cmd.index("-o") + 1]).write_text(json.dumps({"n_ranks": 2}))
        if "--json" in cmd:
            Path(cmd[cmd.index("--json") + 1]).write_text(json.dumps({"results": {}}))

    monkeypatch.setattr(bench_predict, "_run", fake_run)
    case = bench_predict.run_case(2, ["allgather"], tmp_path, "8:1K", True, [], tune=True)
    tune = next(c for c in ran if "tune" in c)
    assert tune[tune.index("tune") + 1] == str(tmp_path / "plan_allgather2.json")
    assert tune[tune.index("-o") + 1] == str(tmp_path / "tuned_allgather2.json") and tune[:3] == [tune[0], "-n", "2"]
    bench = next(c for c in ran if "bench" in c)
    assert f"plan:{tmp_path / 'tuned_allgather2.json'}" in bench[bench.index("--algo") + 1].split(",")
    assert case["runs"]["allgather"]["plan"] == f"plan:{tmp_path / 'tuned_allgather2.json'}"
    assert ran.index(tune) < ran.index(bench)  # tuned before the bench
    # then the tuned plan against the default plan in rounds (ccsynth.bench.compare)
    rounds = ran[-1]
    assert rounds[rounds.index("-m") + 1] == "ccsynth.bench.compare" and str(tmp_path / "tuned_allgather2.json") in rounds
    assert rounds[rounds.index("--json") + 1] == str(tmp_path / "compare_allgather2.json")
    assert "compare" in case["runs"]["allgather"]


def test_loss_margin_is_the_largest_predicted_gain_measured_a_loss():
    from ccsynth.bench.bench_predict import loss_margin

    def row(size, measured, predicted):
        return {"size_bytes": size, "median_us": measured, "predicted_us": predicted, "algorithm": "x"}

    doc = {"results": {
        "mpi": [row(8, 50.0, None), row(16, 50.0, None)],
        "default": [row(8, 10.0, 10.0), row(16, 10.0, 10.0)],
        "ring": [row(8, 12.0, 4.0),  # predicted 60% faster, measured 1.2x: a loss
                 row(16, 9.0, 2.0)],  # predicted 80% faster and right: no loss
        "direct": [row(8, 10.4, 1.0),  # predicted 90% faster, measured 1.04x: within one pass's noise (5%)
                   row(32, 30.0, 1.0)],  # no default row at this size: not judged
    }}
    assert loss_margin([{"n": 2, "runs": {"allreduce": {"json": doc}}}]) == pytest.approx(0.6)
    assert loss_margin([{"n": 2, "runs": {"allreduce": {"json": doc}}}], rel=0.01) == pytest.approx(0.9)
    assert loss_margin([]) == 0.0
