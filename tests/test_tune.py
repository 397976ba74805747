"""Tuning a plan by measurement (ccsynth.synth.tables.tune_plan, ccsynth.bench.tune, ``ccsynth tune``)."""

from __future__ import annotations

import json
import subprocess
import sys
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


def _plan(monkeypatch, candidate_us: float = 50.0):
    """An allgather plan on 2 ranks whose model puts a candidate ("fast", a ring) at ``candidate_us`` against the
    default's algorithm at 100 us at every size: with the default margin the candidate takes every size."""
    topo = fully_connected(2)
    ring = make_baseline("ring", Collective("allgather", 2), topo)
    fast = Schedule("fast", ring.collective, ring.ops, ring.scratch_chunks, ring.topology, ring.meta)

    def fake(schedule, topology, sizes, *, local_bw=None):
        return [SimpleNamespace(time_us=candidate_us if schedule.name == "fast" else 100.0) for _ in sizes]

    monkeypatch.setattr(tables, "simulate_sizes", fake)
    return build_plan([fast], topo, SIZES, default_margin=tables.DEFAULT_MARGIN), topo


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

    tuned, choices = tune_plan(plan, topo, timer)
    assert calls == [("fast", "recursive_doubling(c=1)", s) for s in SIZES]
    assert [c.kept for c in choices] == ["fast", "recursive_doubling(c=1)", "recursive_doubling(c=1)"]
    # entries merged again: the candidate below the midpoint of 1K and 4K (2K), the default's algorithm above
    assert [(e.algorithm, e.min_bytes, e.max_bytes) for e in tuned.entries] == [
        ("fast", 0, 2048), ("recursive_doubling(c=1)", 2048, None)]
    assert tuned.entries[1].predicted_us == 100.0 and tuned.entries[0].predicted_us == 50.0
    assert tuned.meta["tables"][0]["winners"] == ["fast", "recursive_doubling(c=1)", "recursive_doubling(c=1)"]
    assert [t["kept"] for t in tuned.meta["tuned"]] == [c.kept for c in choices]
    assert departures(tuned) == departures(tuned)[:1]  # only the kept departure is left
    # a tuned plan is a plan like any other: saved and loaded with its record
    back = Plan.from_dict(json.loads(json.dumps(tuned.to_dict())))
    assert [e.algorithm for e in back.entries] == [e.algorithm for e in tuned.entries]


def test_a_plan_that_runs_the_default_everywhere_is_not_measured(monkeypatch):
    plan, topo = _plan(monkeypatch, candidate_us=90.0)  # 10% faster: within the margin, the default stays
    assert departures(plan) == []
    tuned, choices = tune_plan(plan, topo, lambda *a: pytest.fail("nothing to measure"))
    assert choices == [] and [e.algorithm for e in tuned.entries] == [e.algorithm for e in plan.entries]


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
    assert doc["schema"] == "ccsynth.tune/1" and [c["size"] for c in doc["choices"]] == SIZES
    for c in doc["choices"]:
        assert c["kept"] in (c["candidate"], c["default"]) and c["candidate_us"] > 0 and c["default_us"] > 0
        assert (c["kept"] == c["candidate"]) == keeps_candidate(c["candidate_us"], c["default_us"])
    tuned = load_plan(out)
    for c in doc["choices"]:
        assert tuned.entry_for("allgather", 2, c["size"]).algorithm == c["kept"]
    # the tuned plan computes the right allgather (checked against the expected result, -c)
    bench = subprocess.run([str(MPIEXEC), "-n", "2", sys.executable, "-m", "ccsynth", "bench", "allgather", "-m",
                            "256:4K", "-c", "-i", "3", "-x", "1", "--algo", f"plan:{out}"],
                           capture_output=True, text=True, timeout=300)
    assert bench.returncode == 0 and "Fail" not in bench.stdout and "Pass" in bench.stdout, bench.stdout + bench.stderr
    wrong = subprocess.run([str(MPIEXEC), "-n", "1", sys.executable, "-m", "ccsynth", "tune", str(path), "-t",
                            "fully_connected:2"], capture_output=True, text=True, timeout=120)
    assert wrong.returncode == 2 and "mpiexec -n 2" in wrong.stderr
