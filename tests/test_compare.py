"""The plan against the default plan in interleaved rounds (ccsynth.bench.compare): the criterion, the loop."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from ccsynth.bench import compare
from ccsynth.bench.compare import NOISE_FLOOR, Comparison, noise_of, share, verdict
from ccsynth.collectives.plan import save_plan
from ccsynth.collectives.schedule import Schedule
from ccsynth.collectives.spec import Collective
from ccsynth.errors import CCSynthError
from ccsynth.synth import tables
from ccsynth.synth.baselines import make_baseline
from ccsynth.topologies import fully_connected

MPIEXEC = Path(sys.executable).parent / "mpiexec"
QUIET = (1.0, 1.01, 0.99, 1.0, 1.02, 0.98)  # the same schedule against itself on a quiet machine


def test_the_same_schedule_within_its_noise_is_a_tie_however_the_median_falls():
    assert verdict((1.01, 1.03, 0.99, 1.02, 1.0, 1.04), QUIET) == "tie"  # median 1.015: above 1, within the noise
    assert verdict((0.99, 0.97, 1.01, 0.98, 1.0, 0.96), QUIET) == "tie"
    # the strict count ("median ratio <= 1") tells them apart; the verdict does not
    rows = [Comparison(8, (101.5,) * 6, (100.0,) * 6, (100.0,) * 6), Comparison(16, (98.5,) * 6, (100.0,) * 6, (100.0,) * 6)]
    assert [c.verdict for c in rows] == ["tie", "tie"]
    assert share(rows) == {"at_least_as_fast": 1.0, "faster": 0.0, "slower": 0.0, "unresolved": 0.0,
                           "or_same_schedule": 1.0, "strict": 0.5}


def test_a_loss_beyond_the_noise_is_slower_and_a_win_faster():
    assert verdict((1.30, 1.25, 1.35, 1.28, 1.31, 1.29), QUIET) == "slower"
    assert verdict((0.70, 0.75, 0.72, 0.69, 0.71, 0.74), QUIET) == "faster"
    # 6% slower in every round on a quiet machine: beyond 2 standard errors of the median
    assert verdict((1.06, 1.05, 1.07, 1.06, 1.05, 1.06), QUIET) == "slower"


def test_a_consistent_loss_is_slower_even_where_the_control_is_noisy():
    noisy = (0.80, 0.85, 0.90, 1.00, 1.02, 1.05)  # the control strays: its MAD makes a noise band of about 11%
    assert noise_of((1.08,) * 6, noisy) > 0.08
    # median 1.08 is inside that band, but every plan round is above every control round: counted slower
    assert verdict((1.08, 1.07, 1.09, 1.06, 1.10, 1.08), noisy) == "slower"
    # inside the band and mixed with the control's rounds: a tie
    assert verdict((1.08, 0.95, 1.09, 0.90, 1.10, 1.04), noisy) == "tie"


def test_one_round_hit_by_load_does_not_widen_the_noise():
    spiky = (1.0, 1.01, 0.99, 1.0, 0.2, 1.0)  # one control round 5x off
    assert noise_of((1.0,) * 6, spiky) == NOISE_FLOOR  # the MAD ignores it (the largest deviation would be 80%)
    assert verdict((1.12, 1.10, 1.11, 3.0, 1.13, 1.12), spiky) == "slower"  # nor does one plan round
    assert noise_of((1.0,) * 6) == NOISE_FLOOR and verdict((1.015,) * 6, (1.0,) * 6) == "tie"
    with pytest.raises(CCSynthError):
        verdict((), QUIET)


def test_a_noise_band_too_wide_to_decide_is_unresolved_and_no_success():
    wild = (0.2, 1.0, 4.0, 1.2, 0.6, 1.9)  # a loaded machine at 4 MiB: rounds a scheduler time slice apart
    assert noise_of((1.2,) * 6, wild) > compare.MAX_NOISE
    assert verdict((1.25, 1.19, 0.9, 1.4, 1.1, 1.3), wild) == "unresolved"
    assert verdict((5.0, 4.5, 6.0, 4.8, 5.5, 5.2), wild) == "slower"  # beyond even that band: still slower
    rows = [Comparison(8, (10.0,) * 6, (10.0,) * 6, (10.0,) * 6),
            Comparison(16, (12.5, 11.9, 9.0, 14.0, 11.0, 13.0), (10.0,) * 6, tuple(10.0 * c for c in wild))]
    assert share(rows)["at_least_as_fast"] == 0.5 and share(rows)["unresolved"] == 0.5
    assert share(rows)["or_same_schedule"] == 0.5  # not the same schedule: an unresolved size is no success
    same = [rows[0], Comparison(16, rows[1].plan_us, rows[1].default_us, rows[1].control_us, same_schedule=True)]
    assert share(same)["or_same_schedule"] == 1.0 and share(same)["at_least_as_fast"] == 0.5


def test_orders_give_each_case_each_place_and_each_neighbour_alike():
    orders = compare._orders(6)
    assert all(sorted(o) == sorted(compare.CASES) for o in orders)
    for case in compare.CASES:
        assert sorted(o.index(case) for o in orders) == [0, 0, 1, 1, 2, 2]
    follows = [(o[i], o[i + 1]) for o in orders for i in range(2)]
    assert len(set(follows)) == 6 and all(follows.count(p) == 2 for p in set(follows))


def test_documents_round_trip_and_verdicts_are_recomputed():
    rows = [Comparison(8, (10.0, 10.2), (10.0, 10.0), (10.1, 9.9), "ring(c=1)", "ring", True),
            Comparison(16, (15.0, 15.5), (10.0, 10.0), (10.0, 10.0), "direct(c=1)", "ring", False)]
    doc = json.loads(json.dumps(compare.to_dict(rows, {"collective": "allgather"})))
    assert doc["schema"] == compare.SCHEMA and [r["verdict"] for r in doc["rows"]] == ["tie", "slower"]
    back = compare.from_dict(doc)
    assert back == rows and doc["share"] == share(rows)
    text = "\n".join(compare.lines(back))
    assert "the same schedule" in text and "| slower | direct(c=1) | ring |" in text
    with pytest.raises(CCSynthError, match="schema"):
        compare.from_dict({"rows": []})


def test_bench_predict_reports_the_rounds():
    from ccsynth.bench.bench_predict import rounds_summary

    rows = [Comparison(s, (10.0,) * 6, (10.0,) * 6, (10.0,) * 6, "x", "x", True) for s in (8, 16)]
    rows.append(Comparison(32, (13.0,) * 6, (10.0,) * 6, (10.0,) * 6, "y", "x", False))
    text = "\n".join(rounds_summary([("allreduce 2r", compare.to_dict(rows))]))
    assert "| allreduce 2r | 6 | 67% | 0% | 33% | 0% | 67% | 67% | 2 of 3 | 2.0% | 32 B (1.30) |" in text


def _plan(monkeypatch, tmp_path, candidate_us: float) -> Path:
    """An allgather plan on 2 ranks: a ring named "fast" predicted at ``candidate_us`` against the default's 100 us
    (20: the plan leaves the default's recursive doubling at every size; 90: it keeps it)."""
    topo = fully_connected(2)
    ring = make_baseline("ring", Collective("allgather", 2), topo)
    fast = Schedule("fast", ring.collective, ring.ops, ring.scratch_chunks, ring.topology, ring.meta)
    monkeypatch.setattr(tables, "simulate_sizes", lambda s, t, sizes, *, local_bw=None: [
        SimpleNamespace(time_us=candidate_us if s.name == "fast" else 100.0) for _ in sizes])
    plan = tables.build_plan([fast], topo, [1024, 4096, 16384], default_margin=tables.EXECUTOR_MARGIN)
    path = tmp_path / f"plan{candidate_us:g}.json"
    save_plan(plan, path)
    return path


@pytest.mark.mpi
def test_rounds_under_mpiexec_measure_plan_default_and_control(monkeypatch, tmp_path):
    if not MPIEXEC.exists():
        pytest.skip("mpiexec not installed in the virtual environment")
    for candidate_us, same in ((20.0, False), (90.0, True)):
        path, out = _plan(monkeypatch, tmp_path, candidate_us), tmp_path / "cmp.json"
        run = subprocess.run([str(MPIEXEC), "-n", "2", sys.executable, "-m", "ccsynth.bench.compare", str(path), "-c",
                              "allgather", "-m", "512:8K", "--rounds", "3", "-i", "4", "--json", str(out)],
                             capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stdout + run.stderr
        doc = json.loads(out.read_text())
        assert [r["size_bytes"] for r in doc["rows"]] == [512, 1024, 2048, 4096, 8192] and doc["n_ranks"] == 2
        for r in doc["rows"]:
            assert len(r["plan_us"]) == len(r["default_us"]) == len(r["control_us"]) == 3
            assert min(r["plan_us"] + r["default_us"] + r["control_us"]) > 0
            assert r["same_schedule"] is same and r["verdict"] in ("faster", "tie", "slower", "unresolved")
            assert r["plan_algorithm"] == ("recursive_doubling(c=1)" if same else "fast")
            assert r["default_algorithm"] == "recursive_doubling"
        assert "at least as fast" in run.stdout
    bad = subprocess.run([str(MPIEXEC), "-n", "2", sys.executable, "-m", "ccsynth.bench.compare", str(path), "-c",
                          "allgather", "-m", "8", "--rounds", "0"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "--rounds" in bad.stderr
