"""The synthesizer stage by stage on small topologies, the public synthesize(), solver handling and the CLI."""

import json
import os
import subprocess
import sys
import tempfile

import pulp
import pytest

from ccsynth.collectives.spec import Collective
from ccsynth.collectives.verify import verify
from ccsynth.errors import CollectiveError, InfeasibleError, SketchError, SolverError
from ccsynth.synth.alltoall import route_alltoall
from ccsynth.synth.contiguity import chain_waves, dp_waves, schedule_waves
from ccsynth.synth.ordering import order_moves
from ccsynth.synth.routing import route_allgather
from ccsynth.synth.simulate import simulate
from ccsynth.synth.sketch import InterNode, Sketch, load_sketch
from ccsynth.synth.solver import SolverOptions, solve
from ccsynth.synth.lowering import lower_allgather
from ccsynth.synth.synthesize import synthesize
from ccsynth.topologies import catalog
from ccsynth.topologies.model import Link, Topology
from toys import toy_two_nodes

DATA = os.path.join(os.path.dirname(__file__), "data")
KINDS = ("allgather", "reduce_scatter", "allreduce", "alltoall")


def ring4():
    return catalog.ring(4)


# ----------------------------------------------------------------------------- routing
def test_routing_symmetry_divides_the_model_by_the_group_order():
    t = ring4()
    full = route_allgather(Sketch().bind(t), 2, 1000.0)
    sym = route_allgather(Sketch(symmetry=((1, 4),)).bind(t), 2, 1000.0)
    assert sym.lt.group.order == 4
    # documented factor: variables and bandwidth rows shrink by |G| (the +1 is T)
    assert (full.n_vars - 1) == 4 * (sym.n_vars - 1)
    assert sym.n_vars_full == full.n_vars
    assert sym.n_constraints < full.n_constraints
    assert sym.t_bw_us == pytest.approx(full.t_bw_us)


def test_routing_dgx1_symmetry_factor_and_bandwidth_optimum():
    t = catalog.dgx1()
    r = route_allgather(Sketch(symmetry=((4, 8), (2, 4)), detours=1).bind(t), 6, 1 << 20)
    assert (r.n_vars_full - 1) == 4 * (r.n_vars - 1)
    # 7 pieces of 6 x 1 MiB into every GPU over 150 GB/s of NVLink: the detours reach the ingress bound
    assert r.t_bw_us == pytest.approx(7 * 6 * (1 << 20) / 150e3, rel=1e-6)
    # min-hop routes alone cannot balance the links
    r0 = route_allgather(Sketch(symmetry=((4, 8), (2, 4))).bind(t), 6, 1 << 20)
    assert r0.t_bw_us > r.t_bw_us * 1.1


def test_routing_flows_are_spanning_arborescences():
    t = catalog.dgx1()
    r = route_allgather(Sketch(symmetry=((4, 8),), detours=1).bind(t), 2, 1000.0)
    for (s, _k), flow in r.flows.items():
        into = {}
        for (u, v), cnt in flow.items():
            assert t.has_connection(u, v) and v != s
            into[v] = into.get(v, 0) + cnt
        assert into == {v: 2 for v in range(8) if v != s}


def test_routing_respects_relay_rules_and_shared_nic():
    t = toy_two_nodes()
    sk = load_sketch(os.path.join(DATA, "ccsynth_sketch_toy.json"))
    r = route_allgather(sk.bind(t), 2, 1000.0)
    for (s, _), flow in r.flows.items():
        for (u, v) in flow:
            if t.nodes[u] != t.nodes[v] and t.nodes[u] == t.nodes[s]:
                assert u == s  # every GPU sends only its own chunk across
    # the shared NIC carries each chunk once per direction: 2 chunks x 2 pieces x 1000 B / 10 GB/s
    assert r.t_bw_us == pytest.approx(0.4)


def test_switch_policies_change_the_connections_used():
    """uc-min relays through few switch connections (here a ring), uc-max spreads over all, at the same T."""
    from ccsynth.synth.sketch import SwitchRule
    from ccsynth.topologies.model import Switch

    t = Topology("sw6", 6, switches=(Switch("sw", tuple(range(6)), 10.0, 1.0),))
    used, tbw = {}, {}
    for pol in ("uc-min", "uc-max"):
        sk = Sketch(switches=(SwitchRule((), pol),), detours=1, symmetry=((1, 6),))
        r = route_allgather(sk.bind(t), 2, 1000.0)
        used[pol] = {e for f in r.flows.values() for e, k in f.items() if k}
        tbw[pol] = r.t_bw_us
    assert len(used["uc-min"]) == 6 and len(used["uc-max"]) == 30
    assert tbw["uc-min"] == pytest.approx(tbw["uc-max"])


def test_alltoall_milp_and_lp():
    t = catalog.dgx1()
    lt = Sketch(symmetry=((4, 8), (2, 4))).bind(t)
    m = route_alltoall(lt, 2, 1000.0, method="milp")
    l = route_alltoall(lt, 2, 1000.0, method="lp")
    assert m.method == "milp" and l.method == "lp"
    for r in (m, l):
        assert len(r.flows) == 56
        for (s, _d), fl in r.flows.items():
            out = sum(k for (u, v), k in fl.items() if u == s)
            assert out == 2
    assert l.t_bw_us >= m.t_bw_us * 0.999


# ----------------------------------------------------------------------------- ordering and contiguity
def test_ordering_schedules_every_piece_once():
    t = catalog.dgx1()
    lt = Sketch(symmetry=((4, 8), (2, 4))).bind(t)
    plan = order_moves(route_allgather(lt, 2, 1000.0))
    assert plan.n_moves_full() == 8 * 7 * 2
    for m in plan.moves:
        assert m.end > m.start >= 0
        if m.parent >= 0:
            assert plan.moves[m.parent].end <= m.start + 1e-9


def _sends_on(sched, u, v):
    return sum(1 for op in sched.ops if op.kind == "send" and op.rank == u and op.peer == v)


def test_contiguity_groups_pieces_on_high_alpha_links():
    """alpha 5 us vs 0.01 us per piece: one wave carries all 4 pieces, one transfer instead of 4."""
    pair = Topology("p", 2, links=(Link(0, 1, 5.0, 10.0), Link(1, 0, 5.0, 10.0)))
    lt = Sketch(symmetry=((1, 2),)).bind(pair)
    plan = order_moves(route_allgather(lt, 4, 100.0))
    chain = chain_waves(plan)
    grouped = schedule_waves(plan)
    assert chain.n_waves() == 4 and grouped.n_waves() == 1
    assert grouped.makespan_us == pytest.approx(5.04) and chain.makespan_us == pytest.approx(20.04)
    coll = Collective("allgather", 2, 4)
    s_chain = lower_allgather(chain, coll, pair, lt.sketch)
    s_group = lower_allgather(grouped, coll, pair, lt.sketch)
    assert _sends_on(s_chain, 0, 1) == 4 and _sends_on(s_group, 0, 1) == 1
    assert simulate(s_group, pair, 800).time_us == pytest.approx(5.04)
    assert simulate(s_chain, pair, 800).time_us == pytest.approx(20.04)


def test_contiguity_keeps_pieces_apart_on_low_alpha_links():
    """alpha 0.01 us vs 10 us per piece: grouping would only delay forwarding; every piece is its own wave."""
    line = Topology("l3", 3, links=(Link(0, 1, 0.01, 10.0), Link(1, 2, 0.01, 10.0), Link(2, 0, 0.01, 10.0)))
    plan = order_moves(route_allgather(Sketch(symmetry=((1, 3),)).bind(line), 4, 100_000.0))
    w = schedule_waves(plan)
    assert w.n_waves() == len(plan.moves)


def test_dp_waves_never_worse_than_list_schedule():
    t = toy_two_nodes()
    lt = Sketch(symmetry=((2, 4),), internode=InterNode(pattern="direct-map")).bind(t)
    plan = order_moves(route_allgather(lt, 4, 64.0))
    assert dp_waves(plan).makespan_us <= plan.makespan_us + 1e-9


# ----------------------------------------------------------------------------- synthesize
SMALL = [("ring4", catalog.ring(4)), ("full4", catalog.fully_connected(4)), ("toy2x2", toy_two_nodes()),
         ("dgx1", catalog.dgx1())]


@pytest.mark.parametrize("name,topo", SMALL, ids=[n for n, _ in SMALL])
@pytest.mark.parametrize("kind", KINDS)
def test_synthesize_verifies_on_small_topologies(name, topo, kind):
    size = 64 << 10
    s = synthesize(topo, Collective(kind, topo.n_ranks), size_bytes=size)
    assert s.meta["verified"] and s.collective.kind == kind
    verify(s, topo)  # again, independently
    r = simulate(s, topo, size)
    assert r.time_us >= r.lower_bound_us * (1 - 1e-9)
    assert s.meta["predicted_us"] == pytest.approx(r.time_us)


def test_reduce_scatter_reduces_and_allreduce_uses_n_blocks():
    t = ring4()
    rs = synthesize(t, Collective("reduce_scatter", 4), size_bytes=1 << 20)
    assert any(op.kind == "recv" and op.reduce for op in rs.ops) or any(op.kind == "reduce" for op in rs.ops)
    ar = synthesize(t, Collective("allreduce", 4, chunk_factor=2), size_bytes=4 << 20, compare_baselines=False)
    assert ar.collective.chunk_factor == 8  # n * c blocks: reduce-scatter then allgather
    assert ar.meta["sketch"]["chunk_factor"] == 2


def test_synthesize_is_deterministic():
    t = toy_two_nodes()
    a = synthesize(t, Collective("allgather", 4), size_bytes=1 << 20)
    b = synthesize(t, Collective("allgather", 4), size_bytes=1 << 20)
    assert a.ops == b.ops


def test_synthesize_with_taccl_sketch_and_cbc():
    t = toy_two_nodes()
    sk = load_sketch(os.path.join(DATA, "ccsynth_sketch_toy.json"))
    s = synthesize(t, Collective("allgather", 4), sk, SolverOptions(solver="cbc", time_limit=30), size_bytes=1 << 16,
                   compare_baselines=False)
    assert s.meta["sketch"]["name"] == "toy-relay" and s.collective.chunk_factor == 2
    # relay rule: a GPU sends only its own pieces to the other node
    for op in s.ops:
        if op.kind == "send" and t.nodes[op.rank] != t.nodes[op.peer]:
            assert op.src.buf == "i" or all(i // 2 == op.rank for i in op.src.indices())


def test_synthesize_bad_input():
    t = catalog.dgx1()
    with pytest.raises(CollectiveError, match="gather"):
        synthesize(t, Collective("gather", 8))
    with pytest.raises(SketchError, match="does not map"):
        synthesize(t, Collective("allgather", 8), Sketch(symmetry=((1, 8),)))


# ----------------------------------------------------------------------------- solver handling
def test_solver_options_validation():
    with pytest.raises(SolverError, match="gurobi"):
        SolverOptions(solver="gurobi")
    with pytest.raises(SolverError, match="time limit"):
        SolverOptions(time_limit=-1)
    with pytest.raises(SolverError, match="gap"):
        SolverOptions(gap=2)
    with pytest.raises(SolverError, match="threads"):
        SolverOptions(threads=0)


@pytest.mark.parametrize("solver", ["highs", "cbc"])
def test_infeasible_model_raises(solver):
    prob = pulp.LpProblem("bad", pulp.LpMinimize)
    x = prob.add_variable("x", lowBound=0, upBound=1, cat="Integer")
    prob += x
    prob += (x >= 2, "impossible")
    with pytest.raises(InfeasibleError, match="infeasible"):
        solve(prob, SolverOptions(solver=solver), "test")


def test_cbc_leaves_no_files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    before = set(os.listdir(tempfile.gettempdir()))
    prob = pulp.LpProblem("tiny", pulp.LpMinimize)
    x = prob.add_variable("x", lowBound=0, cat="Integer")
    prob += x
    prob += (x >= 1.5, "at_least")
    res = solve(prob, SolverOptions(solver="cbc"), "test", warm_start={x: 3})
    assert res.objective == 2 and res.solver == "cbc"
    assert os.listdir(tmp_path) == []
    leftover = {f for f in set(os.listdir(tempfile.gettempdir())) - before if "ccsynth" in f or f.endswith((".mps", ".sol"))}
    assert not leftover


def test_missing_solver_is_reported(monkeypatch):
    import ccsynth.synth.solver as solver_mod

    monkeypatch.setattr(solver_mod, "available_solvers", lambda: ["cbc"])
    with pytest.raises(SolverError, match=r"'highs' is not installed.*--solver cbc"):
        solver_mod.resolve_solver("highs")


# ----------------------------------------------------------------------------- CLI
def run_cli(*args, cwd):
    p = subprocess.run([sys.executable, "-m", "ccsynth", *args], capture_output=True, text=True, cwd=cwd, timeout=300)
    return p.returncode, p.stdout, p.stderr


def test_cli_synth_json_and_files(tmp_path):
    code, out, err = run_cli("synth", "-t", "ring:4", "-c", "allgather", "-s", "64K", "-o", "algo.json", "--json",
                             cwd=tmp_path)
    assert code == 0, err
    d = json.loads(out)
    assert d["verified"] and d["time_us"] >= d["lower_bound_us"] > 0 and d["speedup"] > 0
    assert d["schema"] == "ccsynth.synth/1" and d["busbw_GBps"] == pytest.approx(d["algbw_GBps"] * 3 / 4)
    assert len(set(err.splitlines())) == len(err.splitlines())  # stage heartbeats at most (-v: every stage), none twice
    from ccsynth.formats.files import load_schedule

    load_schedule(tmp_path / "algo.json", topology=ring4())
    code, out, err = run_cli("synth", "-t", "ring:4", "-c", "allreduce", "-s", "1K", "-o", "algo.xml", cwd=tmp_path)
    assert code == 0, err
    assert "speedup" in out and "gap" in out and (tmp_path / "algo.xml").read_text().startswith("<algo")
    code, out, err = run_cli("synth", "-t", "ring:4", "-c", "allgather", "--sizes", "1K,16K", "-o", "plan.json",
                             cwd=tmp_path)
    assert code == 0, err
    from ccsynth.collectives.plan import load_plan

    plan = load_plan(tmp_path / "plan.json")
    assert plan.select("allgather", 4, 1024) is not None and plan.select("allgather", 4, 1 << 14) is not None


def test_cli_synth_bad_input(tmp_path):
    code, _out, err = run_cli("synth", "-t", "toy", "-c", "allgather", cwd=tmp_path)
    assert code == 2 and "Traceback" not in err
    code, _out, err = run_cli("synth", "-t", "dgx2", "-c", "allgather", "--sketch",
                              os.path.join(DATA, "taccl_sketch_bad_policy.json"), cwd=tmp_path)
    assert code == 2 and "uc-mid" in err and "Traceback" not in err
    code, _out, err = run_cli("synth", "-t", "ndv2x2", "-c", "allgather", "--sketch",
                              os.path.join(DATA, "taccl_sketch_relay_unreachable.json"), cwd=tmp_path)
    assert code == 2 and "cannot reach" in err and "routing" not in err  # detected before any solver ran
    code, _out, err = run_cli("synth", "-t", "ring:4", "-c", "gather", cwd=tmp_path)  # broadcast: packed trees now
    assert code == 2 and "gather" in err
    code, _out, err = run_cli("synth", "-t", "ring:4", "-c", "allgather", "--solver", "gurobi", cwd=tmp_path)
    assert code == 2
    assert os.listdir(tmp_path) == []


def test_synthesize_never_returns_a_schedule_slower_than_a_baseline_at_its_best_chunk_factor():
    from ccsynth.synth.baseline_search import best_for
    from ccsynth.synth.synthesize import SynthReport
    from ccsynth.topologies import get_topology

    topo = get_topology("dgx1")
    for kind, size in (("allgather", 64 << 20), ("allreduce", 1 << 20), ("alltoall", 1 << 10)):
        report = SynthReport()
        s = synthesize(topo, Collective(kind, 8), size_bytes=size, report=report)
        got = simulate(s, topo, size).time_us
        assert report.baselines, kind
        # every baseline, re-searched independently at its own best chunk factor, is no faster
        for b in report.baselines:
            best = best_for(b["name"], Collective(kind, 8), topo, size)
            assert got <= best.result.time_us * (1 + 1e-9), (kind, b)
        assert s.meta["chosen"] == report.chosen
        assert report.synthesized_path in ("milp", "trees", "multidim"), kind
        if report.chosen == "baseline":
            assert report.synthesized_us > got
            assert report.warnings and "returning the baseline" in report.warnings[-1]


def test_trees_benchmark_row_reports_the_synthesized_and_the_written_schedule():
    # bench_synth --suite trees runs the synthesis as `ccsynth synth` does (baselines compared) and says both
    from ccsynth.bench.bench_synth import star, tree_case, tree_markdown

    row = tree_case(star(), "allgather", 64 << 20)
    assert row["path"] == "milp" and row["chosen"] == "synthesized"
    assert row["time_us"] == row["synthesized_us"] and 1.0 <= row["gap"] < 1.01
    assert row["brute_force_equal"] is True
    assert row["baseline"] == "direct" and row["speedup"] >= 1.0
    assert row["time_us"] <= row["baseline_us"]
    line = tree_markdown([row]).splitlines()[-1]
    assert "| milp |" in line and "(direct, c=" in line


def test_multi_ring_on_dgx1_is_compared_at_its_best_chunk_factor():
    # issue 10: multi_ring was compared at one chunk factor while another was much faster
    from ccsynth.synth.baseline_search import best_for, chunk_factor_ladder
    from ccsynth.synth.baselines import make_baseline
    from ccsynth.topologies import get_topology

    topo = get_topology("dgx1")
    coll = Collective("allreduce", 8)
    best = best_for("multi_ring", coll, topo, 64 << 20)
    for f in chunk_factor_ladder("multi_ring", "allreduce", topo, 64 << 20):
        s = make_baseline("multi_ring", Collective("allreduce", 8, f), topo)
        assert simulate(s, topo, 64 << 20).time_us >= best.result.time_us * (1 - 1e-9)
