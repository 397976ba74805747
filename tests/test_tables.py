"""Per-size algorithm tables (ccsynth.synth.tables)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from ccsynth.collectives.builder import ScheduleBuilder
from ccsynth.collectives.schedule import Schedule
from ccsynth.collectives.spec import Collective
from ccsynth.errors import PlanError
from ccsynth.collectives.plan import load_plan, save_plan
from ccsynth.synth import tables
from ccsynth.synth.baselines import make_baseline
from ccsynth.synth.executor_model import simulate_run
from ccsynth.synth.tables import EXECUTOR_MARGIN, MODEL_MARGIN, build_plan, margin_for, candidates_for, plan_table
from ccsynth.topologies.model import Link, SharedPort, Topology

N = 4
ALPHA = 1.0  # us
BW = 10.0  # GB/s = 1e4 bytes/us


def port_limited(n: int = N) -> Topology:
    """All-to-all links, but each rank's sends share one port of BW."""
    links = tuple(Link(a, b, ALPHA, BW) for a in range(n) for b in range(n) if a != b)
    ports = tuple(SharedPort(f"port{a}", (a,), tuple(b for b in range(n) if b != a), BW) for a in range(n))
    return Topology("port_limited", n, links=links, shared_ports=ports)


def direct_allreduce(n: int = N) -> Schedule:
    """One step: everyone sends its whole buffer to everyone (alpha + 3S/BW)."""
    b = ScheduleBuilder(Collective("allreduce", n), "direct")
    for r in range(n):
        b.copy(r, ("i", 0), ("o", 0))
    for r in range(n):
        for q in range(n):
            if q != r:  # into the receiver's scratch slot for sender r
                b.transfer(r, q, ("i", 0), ("s", r if r < q else r - 1))
    for r in range(n):
        for k in range(n - 1):
            b.reduce(r, ("s", k), ("o", 0))
    return b.build()


def ring_allreduce(n: int = N) -> Schedule:
    """2(n-1) steps of S/n each (6 alpha + 1.5 S/BW)."""
    b = ScheduleBuilder(Collective("allreduce", n, n), "ring")
    for r in range(n):
        b.copy(r, ("i", 0, n), ("o", 0, n))
    for step in range(n - 1):
        for r in range(n):
            b.transfer(r, (r + 1) % n, ("o", (r - step) % n), ("o", (r - step) % n), reduce=True)
    for step in range(n - 1):
        for r in range(n):
            j = (r + 1 - step) % n
            b.transfer(r, (r + 1) % n, ("o", j), ("o", j))
    return b.build()


SIZES = [1 << k for k in range(10, 21)]  # 1K .. 1M; direct = ring at 5*ALPHA*BW*1e3/1.5 ~ 33 KB


def test_small_and_large_winners_make_two_ranges():
    topo = port_limited()
    plan = build_plan([ring_allreduce(), direct_allreduce()], topo, SIZES)
    assert [(e.algorithm, e.min_bytes, e.max_bytes) for e in plan.entries] == [
        ("direct", 0, round(math.sqrt(32768 * 65536))),
        ("ring", round(math.sqrt(32768 * 65536)), None),
    ]
    assert plan.select("allreduce", N, 0).name == "direct"
    assert plan.select("allreduce", N, 46340).name == "direct"
    assert plan.select("allreduce", N, 46341).name == "ring"
    assert plan.select("allreduce", N, 1 << 30).name == "ring"
    assert plan.select("allgather", N, 1024) is None
    # predicted time: the winner's at the largest measured size of its range
    direct, ring = plan.entries
    assert direct.predicted_us == pytest.approx(ALPHA + 3 * 32768 / (BW * 1e3), rel=1e-6)
    assert ring.predicted_us == pytest.approx(6 * ALPHA + 1.5 * (1 << 20) / (BW * 1e3), rel=1e-6)
    assert plan.topology == "port_limited" and plan.meta["sizes"] == SIZES


def test_dict_input_and_times_table():
    topo = port_limited()
    plan = build_plan({("allreduce", N): [direct_allreduce(), ring_allreduce()]}, topo, [1024, 1 << 20])
    headers, rows = plan_table(plan, times=True)
    assert headers == ["collective", "ranks", "size", "direct_us", "ring_us", "best"]
    assert [r[2] for r in rows] == ["1K", "1M"] and [r[-1] for r in rows] == ["direct", "ring"]
    assert rows[0][3] < rows[0][4] and rows[1][3] > rows[1][4]
    headers, rows = plan_table(plan)
    assert headers[:4] == ["collective", "ranks", "from", "to"]
    assert rows == [
        ["allreduce", N, "0", "32K", "direct", pytest.approx(rows[0][5])],
        ["allreduce", N, "32K", "inf", "ring", pytest.approx(rows[1][5])],
    ]


def test_ties_go_to_fewer_ops():
    topo = port_limited()
    lean = ring_allreduce()
    b = ScheduleBuilder(Collective("allreduce", N, N), "ring_with_copies")
    for op in lean.ops:  # the same schedule plus a free local copy per rank
        if op.kind == "send":
            continue
        if op.kind == "recv":
            snd = lean.ops[lean.matches[op.id]]
            b.transfer(snd.rank, op.rank, snd.src, op.dst, reduce=op.reduce)
        else:
            getattr(b, op.kind)(op.rank, op.src, op.dst)
    for r in range(N):
        b.copy(r, ("i", 0), ("s", 0))
    fat = b.build()
    plan = build_plan([fat, lean], topo, [1024, 1 << 20])
    assert [e.algorithm for e in plan.entries] == ["ring"]
    assert plan.entries[0].min_bytes == 0 and plan.entries[0].max_bytes is None


def test_repeated_names_and_several_collectives():
    topo = port_limited()
    plan = build_plan([ring_allreduce(), ring_allreduce(), *candidates_for(Collective("allgather", N), topo)], topo, [4096])
    kinds = {(e.kind, e.n_ranks) for e in plan.entries}
    assert kinds == {("allgather", N), ("allreduce", N)}
    table = next(t for t in plan.meta["tables"] if t["kind"] == "allreduce")
    assert [c["algorithm"] for c in table["candidates"]] == ["ring", "ring#2"]
    assert table["winners"] == ["ring"]  # the first of equals


def test_plan_saves_and_loads(tmp_path):
    plan = build_plan([ring_allreduce(), direct_allreduce()], port_limited(), SIZES)
    path = tmp_path / "plan.json"
    save_plan(plan, path)
    back = load_plan(path)  # verifies every schedule
    assert [(e.algorithm, e.min_bytes, e.max_bytes) for e in back.entries] == [
        (e.algorithm, e.min_bytes, e.max_bytes) for e in plan.entries
    ]
    assert back.meta["tables"][0]["winners"] == plan.meta["tables"][0]["winners"]


def test_candidates_for_builds_verified_baselines():
    from ccsynth.collectives.verify import verify

    topo = port_limited()
    cands = candidates_for(Collective("allreduce", N), topo)
    assert len(cands) >= 2 and len({c.name for c in cands}) == len(cands)
    for c in cands:
        verify(c, topo)


def test_bad_input():
    topo = port_limited()
    with pytest.raises(PlanError, match="no message sizes"):
        build_plan([ring_allreduce()], topo, [])
    with pytest.raises(PlanError, match="no candidate"):
        build_plan([], topo, [1024])
    with pytest.raises(PlanError, match="does not fit topology"):
        build_plan([ring_allreduce(3)], topo, [1024])
    with pytest.raises(PlanError, match="listed under"):
        build_plan({("allgather", N): [ring_allreduce()]}, topo, [1024])
    with pytest.raises(PlanError, match="positive"):
        build_plan([ring_allreduce()], topo, [0, 1024])


# ------------------------------------------------------------------ the default plan's margin
def _margin_case(monkeypatch, candidate_us: float, margin: float | None = EXECUTOR_MARGIN):
    """A plan for allgather on 2 ranks at 1 KiB (the default plan: recursive doubling) with one other candidate,
    simulated times fixed: the default's algorithm 100 us, the candidate ``candidate_us``."""
    topo = Topology("fc2", 2, links=(Link(0, 1, ALPHA, BW), Link(1, 0, ALPHA, BW)))
    ring = make_baseline("ring", Collective("allgather", 2), topo)
    fast = Schedule("fast", ring.collective, ring.ops, ring.scratch_chunks, ring.topology, ring.meta)

    def fake(schedule, topology, sizes, *, local_bw=None):
        t = candidate_us if schedule.name == "fast" else 100.0
        return [SimpleNamespace(time_us=t) for _ in sizes]

    monkeypatch.setattr(tables, "simulate_sizes", fake)
    return build_plan([fast], topo, [1024], default_margin=margin)


def test_a_candidate_a_little_faster_does_not_replace_the_default_choice(monkeypatch):
    plan = _margin_case(monkeypatch, 97.0)  # 3% faster: within the model's error
    assert [e.algorithm for e in _margin_case(monkeypatch, 35.0).entries] == ["recursive_doubling(c=1)"]  # 65%: too
    [entry] = plan.entries
    assert entry.algorithm == "recursive_doubling(c=1)"
    table = plan.meta["tables"][0]
    assert table["defaults"] == ["recursive_doubling(c=1)"] and table["default_margin"] == EXECUTOR_MARGIN


def test_a_candidate_much_faster_replaces_the_default_choice(monkeypatch):
    plan = _margin_case(monkeypatch, 25.0)  # 75% faster: beyond the margin
    assert [e.algorithm for e in plan.entries] == ["fast"]


def test_without_a_margin_the_fastest_wins_and_the_default_is_no_candidate(monkeypatch):
    assert [e.algorithm for e in _margin_case(monkeypatch, 97.0, margin=0.0).entries] == ["fast"]
    plan = _margin_case(monkeypatch, 130.0, margin=None)  # the old policy: only the candidates given
    assert [e.algorithm for e in plan.entries] == ["fast"]
    assert "defaults" not in plan.meta["tables"][0]


def test_the_auto_margin_is_the_measured_one_on_executor_machines_only(monkeypatch):
    """"auto": 70% where ccsynth's executor runs the plan (the model's measured error), 25% on a GPU/catalog model:
    a candidate predicted 50% faster replaces the default on the catalog model only."""
    gpu = Topology("fc2", 2, links=(Link(0, 1, ALPHA, BW), Link(1, 0, ALPHA, BW)))
    cpu = Topology("cpu2", 2, links=gpu.links, overhead_scope="rank", local_bw=5.0)
    assert margin_for(gpu) == MODEL_MARGIN == 0.25 and margin_for(cpu) == EXECUTOR_MARGIN == 0.70
    plan = _margin_case(monkeypatch, 50.0, margin="auto")  # the helper's topology is a GPU-runtime model
    assert [e.algorithm for e in plan.entries] == ["fast"] and plan.meta["tables"][0]["default_margin"] == 0.25
    with pytest.raises(PlanError, match="margin"):
        _margin_case(monkeypatch, 50.0, margin="some")


def test_the_default_choice_is_always_a_candidate_and_a_bad_margin_is_refused(monkeypatch):
    plan = _margin_case(monkeypatch, 130.0)  # the only candidate given is slower: the default's algorithm wins
    assert [e.algorithm for e in plan.entries] == ["recursive_doubling(c=1)"]
    with pytest.raises(PlanError, match="margin"):
        _margin_case(monkeypatch, 50.0, margin=1.5)


def test_on_an_executor_machine_candidates_are_judged_as_the_executor_runs_them(monkeypatch):
    """overhead_scope "rank": the executor model's times; a candidate too large to compile is no candidate."""
    topo = Topology("cpu2", 2, links=(Link(0, 1, ALPHA, BW, 0.5), Link(1, 0, ALPHA, BW, 0.5)), overhead_scope="rank",
                    local_bw=5.0)
    small = make_baseline("ring", Collective("allreduce", 2, 2), topo)
    big = make_baseline("ring", Collective("allreduce", 2, 64), topo)
    big = Schedule("big", big.collective, big.ops, big.scratch_chunks, big.topology, big.meta)
    plan = build_plan([small, big], topo, [1 << 20])
    times = {c["algorithm"]: c["times_us"][0] for c in plan.meta["tables"][0]["candidates"]}
    assert times["ring"] == pytest.approx(simulate_run(small, topo, 1 << 20).time_us)
    monkeypatch.setattr(tables, "EXECUTOR_MAX_OPS", len(big.ops) - 1)
    plan = build_plan([small, big], topo, [1 << 20])
    assert math.isinf({c["algorithm"]: c["times_us"][0] for c in plan.meta["tables"][0]["candidates"]}["big"])
    assert [e.algorithm for e in plan.entries] == ["ring"]
