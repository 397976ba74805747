"""Multi-dimension schedulers (synth/multidim): hand-checked cases, verification, the model vs the simulator,
determinism, the phase plan, the CLI and bad input."""

from __future__ import annotations

import json
from itertools import pairwise

import pytest
from mpi4py import MPI
from hypothesis import given, settings
from hypothesis import strategies as st

from ccsynth.cli import main as cli_main
from ccsynth.collectives.spec import Collective
from ccsynth.collectives.verify import verify
from ccsynth.errors import CCSynthError, CollectiveError, SizeError, TopologyError
from ccsynth.formats.files import get_topology
from ccsynth.formats.msccl import schedule_to_msccl_xml
from ccsynth.synth.multidim import POLICIES, compare_schedulers, dim_net, schedule_multidim
from ccsynth.synth.multidim.chunks import make_chunk
from ccsynth.synth.multidim.cost import PhaseCosts
from ccsynth.synth.multidim.lowering import MAX_IR_RANKS, ir_max_chunks, to_schedule
from ccsynth.synth.multidim.lp import bandwidth_bound, pipelined_bound, rounded_bound
from ccsynth.synth.multidim.phases import PhasePlanner, to_phase_plan
from ccsynth.synth.multidim.pipeline import time_chunks
from ccsynth.synth.multidim.utilization import dimension_utilization
from ccsynth.synth.simulate import simulate
from ccsynth.topologies.catalog import hierarchical
from ccsynth.topologies.model import Switch, Topology

#: every topology of the cross-check (16-24 ranks; 2D to 4D, balanced and imbalanced, the machines as 2D; 128 ranks:
#: test_model_matches_simulator_at_128_ranks). The imbalanced 2D case with its slow dimension first is 4x4, not
#: 8x4: the same imbalance, a third of the cost (8x4's fixed and flex orders lower to 80-97k ops per schedule)
CROSS_CHECK = [
    "hierarchical:2x2@200,50",
    "hierarchical:4x4@100,100",
    "hierarchical:2x3x2@200,100,50",
    "hierarchical:2x2x2x2@400,200,100,50",
    "hierarchical:4x4@50,200",
    "ndv2x2",
    "dgx_a100x2",
    "torus:4x4",
    "fat_tree:4x4",
]


# ------------------------------------------------------------------ cases known by hand
def test_one_chunk_reduce_scatter_takes_the_fast_dimension_first():
    # 4 x 4, dimension 0 at 25 GB/s, dimension 1 at 100: reducing over dimension 1 first moves 3/4 of the data at
    # 100 GB/s and 3/16 at 25 (0.015 S us/MB), the fixed order 3/4 at 25 and 3/16 at 100 (0.032 S): twice as slow.
    t = hierarchical([(4, 25, 0.0, 0.0), (4, 100, 0.0, 0.0)])
    size = 64 << 20
    fixed = schedule_multidim(t, "reduce_scatter", size, "fixed", chunks=1)
    lp = schedule_multidim(t, "reduce_scatter", size, "lp", chunks=1)
    assert fixed.chunks[0].order == (0, 1)
    assert lp.chunks[0].order == (1, 0)
    assert fixed.makespan_us == pytest.approx(size * (0.75 / 25e3 + 0.1875 / 100e3), rel=1e-6)
    assert lp.makespan_us == pytest.approx(size * (0.75 / 100e3 + 0.1875 / 25e3), rel=1e-6)
    assert fixed.makespan_us / lp.makespan_us == pytest.approx(0.031875 / 0.015, rel=1e-6)


def test_symmetric_dimensions_split_half_and_half():
    # two alike dimensions: the LP sends half the data each way and halves the busiest dimension's load
    t = hierarchical([(4, 100, 0.0, 0.0), (4, 100, 0.0, 0.0)])
    lp = schedule_multidim(t, "allreduce", 1 << 30, "lp", chunks=16)
    counts = dict(lp.order_counts())
    assert counts == {(0, 1): 8, (1, 0): 8}
    themis = schedule_multidim(t, "allreduce", 1 << 30, "themis", chunks=16)
    assert dict(themis.order_counts()) == {(0, 1): 8, (1, 0): 8}  # Themis alternates
    fixed = schedule_multidim(t, "allreduce", 1 << 30, "fixed", chunks=16)
    assert fixed.makespan_us / lp.makespan_us > 1.4


def test_themis_load_formula_and_threshold():
    from ccsynth.synth.multidim.chunks import make_chunk
    from ccsynth.synth.multidim.load import DimLoads
    from ccsynth.synth.multidim.policies import THEMIS_THRESHOLD, themis_chunks

    net = dim_net(hierarchical([(4, 200), (2, 50)]))
    costs = PhaseCosts(net)
    loads = DimLoads(net, costs, "allreduce")
    loads.add(make_chunk(net, costs, "allreduce", (0, 1), 1000.0), 1000.0)
    # load_d += bytes (p_d - 1) / p_d / (BW_d / BW_0), twice for allreduce; bytes /= p_d
    assert loads.values == pytest.approx([2 * 750.0, 2 * 250 * 0.5 / (50 / 200)])
    assert loads.least_loaded_first() == (1, 0)
    # the first chunk takes the natural order (nothing loaded: below the threshold), the next least loaded first
    chunks = themis_chunks(net, costs, "allreduce", 1 << 20, [1, 1])
    assert chunks[0].order == (0, 1) and chunks[1].order == (1, 0)
    assert 0 < THEMIS_THRESHOLD < 1


def test_count_search_refines_around_the_two_fastest_powers_of_two():
    # Themis's greedy on 2x4x4@200,100,50 at 1 MiB: 1 chunk 79.8 us (nothing to balance), 2 chunks 80.2 us, 3 chunks
    # 74.4 us, 4 chunks 81.1 us: not convex in the count. Refining around the fastest power of two alone (1: an
    # empty grid) kept 79.8 us; the second fastest (2) has the optimum beside it. The same as Themis on
    # 2x8x8x8@250,175,50,12.5 at 64 MiB (2 chunks 592.0, 32 chunks 591.7, 3 chunks 480.9 us)
    from ccsynth.synth.multidim.search import chunk_counts, refine_candidates, refine_centres, refine_counts

    net = dim_net(get_topology("hierarchical:2x4x4@200,100,50"))
    size = 1 << 20
    counts = chunk_counts(size)
    themis = schedule_multidim(net, "allreduce", size, "themis")
    tried = dict(themis.tried)
    centres = refine_centres({k: tried[k] for k in counts})
    assert len(centres) == 2 and tried[centres[0]] <= tried[centres[1]]
    assert all(tried[c] <= tried[k] for c in centres for k in counts if k not in centres)
    # every count of both centres' grids was evaluated, and the pick is the fastest of all evaluated
    assert set(refine_candidates(tried, counts)) == {k for c in centres for k in refine_counts(c, counts)}
    assert set(tried) == set(counts) | set(refine_candidates(tried, counts))
    assert themis.makespan_us == min(tried.values())
    assert themis.n_chunks == min(k for k, t in tried.items() if t == themis.makespan_us)
    # the search around the best power of two alone (the former one) would have kept a slower count
    single = set(counts) | set(refine_counts(centres[0], counts))
    assert themis.n_chunks not in single
    assert themis.makespan_us < 0.95 * min(tried[k] for k in single)
    assert schedule_multidim(net, "allreduce", size, "themis", chunks=themis.n_chunks).makespan_us == pytest.approx(
        themis.makespan_us, rel=1e-12)
    # the fixed order's search takes the same centres' grids, and the LP times both policies' whole candidate sets
    fixed = schedule_multidim(net, "allreduce", size, "fixed")
    f_tried = dict(fixed.tried)
    assert set(f_tried) == set(counts) | set(refine_candidates(f_tried, counts))
    lp = schedule_multidim(net, "allreduce", size, "lp")
    assert set(tried) | set(f_tried) <= {k for k, _ in lp.tried}
    assert lp.makespan_us <= min(themis.makespan_us, fixed.makespan_us) * (1 + 1e-9)
    assert lp.lp_bound_us is not None and lp.lp_bound_us <= lp.makespan_us * (1 + 1e-9)


def test_lp_warm_refinement_takes_each_policys_whole_candidate_set():
    # the count search on made-up, non-convex times (a stand-in for _Run): Themis's fastest powers of two are 32 and
    # 16, its optimum 24 lies between them; the fixed order's grids cover 24 too (its centres 32 and 64), the LP's
    # own roundings are best at 4 (45, faster than both policies' powers of two: its own grid stays at 3-6). The LP must time Themis's chunks at 24 even though the fixed order's search asks
    # for that count as well (a first version gave such a count the fixed order's warm start only)
    from ccsynth.synth.multidim.pipeline import DimTiming
    from ccsynth.synth.multidim.search import MultiDimSchedule, _search, refine_candidates, refine_counts

    counts = (1, 2, 4, 8, 16, 32, 64)
    profiles = {
        "themis": lambda k: {16: 51.0, 32: 50.0, 24: 40.0}.get(k, 90.0 + k),
        "fixed": lambda k: {32: 60.0, 64: 61.0}.get(k, 70.0 + k / 100),
        "lp": lambda k: {4: 45.0}.get(k, 100.0 + k),
    }

    def schedule(t: float) -> MultiDimSchedule:
        return MultiDimSchedule("stub", "allreduce", 1.0, None, (), DimTiming(t, (), (), ()))  # type: ignore[arg-type]

    class Run:
        def __init__(self, policy):
            self.policy, self.unramped_us, self.warm_us, self.warm_calls = policy, {}, {}, []

        def at(self, k):
            if self.policy != "lp":
                return schedule(profiles[self.policy](k))
            for p in ("themis", "fixed"):
                self.warm_us.setdefault(p, {})[k] = profiles[p](k)
            return schedule(min(profiles[p](k) for p in profiles))

        def warm_at(self, k, policies):
            self.warm_calls.append((k, tuple(policies)))
            return schedule(min(profiles[p](k) for p in policies))

        def bound_at(self, k):
            return 1.0

        def tuned(self, best):
            return best

    themis = _search(Run("themis"), counts)
    assert themis.makespan_us == 40.0
    assert set(dict(themis.tried)) == set(counts) | set(refine_counts(32, counts)) | set(refine_counts(16, counts))
    assert refine_candidates(dict(themis.tried), counts) == tuple(sorted(set(dict(themis.tried)) - set(counts)))
    run = Run("lp")
    lp = _search(run, counts)
    assert lp.makespan_us == 40.0
    assert (24, ("themis", "fixed")) in run.warm_calls
    assert all(dict(lp.tried)[k] <= t for k, t in themis.tried)


def test_lp_is_never_worse_than_themis_and_respects_its_bound():
    # 1 GiB where it is issue 12's target (8x8x8x8); 64 MiB on the others, where the search takes the same steps
    # (every power of two, the refinement, the ramp, the tuned shares) over fewer chunks (at 1 GiB ndv2x4's fixed
    # order takes 1,024)
    for spec, sizes in (("hierarchical:4x8x4@200,100,50", (1 << 20, 1 << 26)),
                        ("hierarchical:8x8x8x8@400,200,100,50", (1 << 20, 1 << 30)), ("ndv2x4", (1 << 20, 1 << 26))):
        net = dim_net(get_topology(spec))
        for size in sizes:
            got = compare_schedulers(net, "allreduce", size, ("fixed", "themis", "lp"))
            assert got["lp"].makespan_us <= got["themis"].makespan_us * (1 + 1e-9)
            assert got["lp"].makespan_us <= got["fixed"].makespan_us * (1 + 1e-9)
            assert got["lp"].lp_bound_us <= got["lp"].makespan_us * (1 + 1e-9)
            assert bandwidth_bound(net, PhaseCosts(net), "allreduce", size) <= got["lp"].makespan_us * (1 + 1e-9)
            if spec.startswith("hierarchical:8x8x8x8") and size == 1 << 30:
                # issue 12's target: within 2% of its pipelined bound (tuned shares: 2919.8 us, that bound 2871.0, T* 2862.6)
                assert got["lp"].makespan_us <= 1.02 * pipelined_bound(net, PhaseCosts(net), "allreduce", size,
                                                                       got["lp"].chunks)
                assert got["lp"].makespan_us <= 1.022 * got["lp"].lp_bound_us
                assert got["lp"].origin.endswith("shares tuned")


# ------------------------------------------------------------------ IR, verification, simulator
@pytest.mark.parametrize("spec", CROSS_CHECK)
def test_every_scheduler_verifies_and_the_model_matches_the_simulator(spec):
    t = get_topology(spec)
    net = dim_net(t)
    costs = PhaseCosts(net)
    worst = 0.0
    for kind in ("allreduce", "reduce_scatter", "allgather"):
        cap = ir_max_chunks(kind, net)
        for policy in POLICIES:
            for size in (1 << 14, 1 << 24):
                md = schedule_multidim(net, kind, size, policy, max_chunks=cap)
                sched = to_schedule(md, t)
                verify(sched, t)
                sim = simulate(sched, t, size).time_us
                worst = max(worst, abs(sim - md.makespan_us) / sim)
                if len({c.units for c in md.chunks}) == 1:  # the LP's bounds are for equal chunks
                    bound = pipelined_bound(net, costs, kind, size, md.chunks)
                    assert bound <= sim * (1 + 1e-9), (kind, policy, size, bound, sim)
                    assert bound <= md.makespan_us * (1 + 1e-9), (kind, policy, size, bound, md.makespan_us)
                    exact = rounded_bound(net, costs, kind, size, md.n_chunks)
                    assert exact <= sim * (1 + 1e-9), (kind, policy, size, exact, sim)
                    assert exact <= md.makespan_us * (1 + 1e-9), (kind, policy, size, exact, md.makespan_us)
    assert worst <= 0.05, f"{spec}: the dimension-level model is {worst:.1%} from the event-driven simulator"


def test_model_matches_simulator_at_128_ranks():
    t = get_topology("hierarchical:4x8x4@200,100,50")
    net = dim_net(t)
    for policy in ("fixed", "lp"):
        md = schedule_multidim(net, "allreduce", 64 << 20, policy, max_chunks=2)
        sched = to_schedule(md, t)
        verify(sched, t)
        sim = simulate(sched, t, 64 << 20).time_us
        assert abs(sim - md.makespan_us) / sim <= 0.05


def test_msccl_export_and_utilization():
    t = get_topology("hierarchical:2x2x2@200,100,50")
    md = schedule_multidim(t, "allreduce", 1 << 22, "themis", max_chunks=4)
    sched = to_schedule(md, t)
    verify(sched, t)
    xml = schedule_to_msccl_xml(sched, topology=t)
    assert xml.startswith("<algo") and 'coll="allreduce"' in xml
    sim = simulate(sched, t, 1 << 22)
    use = dimension_utilization(sched, t, 1 << 22, sim.time_us)
    assert [u.name for u in use] == ["dim0", "dim1", "dim2"]
    assert all(0 < u.utilization <= 1 + 1e-9 for u in use)


def test_utilization_counts_the_real_bytes_of_a_reshard_and_charges_cross_host_messages_to_the_nic(tmp_path, capsys):
    # an explicit (reshard) schedule's sends were counted as chunks (1.0 "bytes"), and every message between ranks
    # differing in both coordinates went to a phantom dimension "other" of size 0
    import numpy as np

    out = tmp_path / "rs.json"
    assert cli_main(["reshard", "--shape", "64x64x16", "--src-mesh", "2x2", "--src-spec", "S0,R,R", "--dst-mesh",
                     "2x2", "--dst-spec", "R,S1,R", "-t", "shared_nic:2x4", "--planner", "naive", "-o",
                     str(out)]) == 0
    capsys.readouterr()
    assert cli_main(["simulate", str(out), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)["results"][0]
    sched = json.loads(out.read_text())
    pieces = np.array(sched["collective"]["pieces"])
    t = get_topology("shared_nic:2x4")
    # every send's bytes, by hand: the units of its chunks (its pieces' element counts) times 4 (float32)
    inputs = sched["collective"]["inputs"]
    want = {"switch": 0.0, "nic": 0.0}
    for op in sched["ops"]:
        if op["op"] == "send":
            buf, start, count = op["src"]
            assert buf == "i"  # the naive plan sends from the source shards only
            units = sum(pieces[inputs[op["rank"]][i]] for i in range(start, start + count))
            host = [r // 4 for r in (op["rank"], op["peer"])]
            want["nic" if host[0] != host[1] else "switch"] += 4.0 * units / t.n_ranks
    assert res["size_bytes"] == 64 * 64 * 16 * 4
    got = {d["name"]: d for d in res["dimensions"]}
    assert set(got) == {"switch", "nic"}
    assert got["nic"]["sent_bytes"] == pytest.approx(want["nic"]) and want["nic"] > 0
    assert got["switch"]["sent_bytes"] == pytest.approx(want["switch"])
    assert got["nic"]["utilization"] == pytest.approx(want["nic"] / (3.125e3 * res["time_us"]))
    assert 0 < got["nic"]["utilization"] <= 1


def test_synthesize_compares_against_the_multidim_schedulers():
    from ccsynth.synth.synthesize import SynthReport, synthesize

    t = get_topology("hierarchical:2x2@200,50")
    report = SynthReport()
    synthesize(t, Collective("allreduce", 4), size_bytes=1 << 24, report=report)
    assert report.multidim and report.multidim["time_us"] > 0
    assert set(report.multidim["model_us"]) == set(POLICIES)


# ------------------------------------------------------------------ determinism, phase plans
def test_schedules_and_plans_are_deterministic():
    t = get_topology("hierarchical:4x8x4@200,100,50")
    for policy in ("themis", "themis-flex", "lp", "auto"):
        a = schedule_multidim(t, "allreduce", 64 << 20, policy)
        b = schedule_multidim(get_topology("hierarchical:4x8x4@200,100,50"), "allreduce", 64 << 20, policy)
        assert a.chunks == b.chunks and a.timing.tasks == b.timing.tasks
        assert to_phase_plan(a).signature() == to_phase_plan(b).signature()


def test_scheduling_4096_ranks_never_walks_the_ranks():
    net = dim_net(get_topology("hierarchical:8x8x8x8@400,200,100,50"))
    md = schedule_multidim(net, "allreduce", 1 << 30, "themis")
    assert md.n_chunks >= 8 and md.net.n_ranks == 4096
    plan = to_phase_plan(md)
    assert plan.n_ranks == 4096 and len(plan.tasks) == 8 * len(plan.chunks)


# ------------------------------------------------------------------ bad input
def test_bad_input_errors():
    plain = Topology("plain4", 4, switches=(Switch("sw", (0, 1, 2, 3), 10.0, 1.0),))
    with pytest.raises(TopologyError, match="no network dimensions"):
        schedule_multidim(plain, "allreduce", 1 << 20, "themis")
    with pytest.raises(CollectiveError, match="unknown multi-dimension scheduler"):
        schedule_multidim(hierarchical([(2, 100), (2, 50)]), "allreduce", 1 << 20, "greedy")
    with pytest.raises(CollectiveError, match="allreduce, reduce_scatter, allgather"):
        schedule_multidim(hierarchical([(2, 100), (2, 50)]), "alltoall", 1 << 20, "themis")
    with pytest.raises(SizeError):
        schedule_multidim(hierarchical([(2, 100), (2, 50)]), "allreduce", -5, "themis")
    with pytest.raises(TopologyError, match="has 8 ranks but the communicator has 4"):
        PhasePlanner(get_topology("hierarchical:2x2x2@200,100,50"), "themis", n_ranks=4)
    with pytest.raises(CollectiveError):
        to_schedule(schedule_multidim(get_topology("hierarchical:8x8x4@200,100,50"), "allreduce", 1 << 20,
                                      "fixed", chunks=1), get_topology("hierarchical:8x8x4@200,100,50"))
    assert MAX_IR_RANKS == 128


@pytest.mark.parametrize("argv,match", [
    (["synth", "-t", "hierarchical:2x2@100,50", "-c", "allreduce", "--scheduler", "bogus"], "unknown multi-dimension"),
    (["synth", "-t", "hierarchical:2x2@100,50", "-c", "alltoall", "--scheduler", "lp"], "allreduce, reduce_scatter"),
    (["synth", "-t", "hierarchical:2x2x2", "-c", "allreduce", "--scheduler", "lp"], "GB/s of each dimension"),
    (["synth", "-t", "hierarchical:4x4@100,50", "-c", "allreduce", "--scheduler", "lp", "--sizes", "1K:1M"],
     "one --size"),
])
def test_cli_bad_input_exits_2(argv, match, capsys):
    assert cli_main(argv) == 2
    err = capsys.readouterr().err
    assert match in err and "Traceback" not in err


def test_cli_scheduler_without_dimensions_exits_2(tmp_path, capsys):
    from ccsynth.topologies.io import save_topology

    path = tmp_path / "plain.json"
    save_topology(Topology("plain4", 4, switches=(Switch("sw", (0, 1, 2, 3), 10.0, 1.0),)), str(path))
    assert cli_main(["synth", "-t", str(path), "-c", "allreduce", "--scheduler", "themis"]) == 2
    assert "needs a topology with network dimensions" in capsys.readouterr().err


def test_cli_synth_scheduler_json_and_simulate(tmp_path, capsys):
    out = tmp_path / "md.json"
    assert cli_main(["synth", "-t", "hierarchical:2x2x2@200,100,50", "-c", "allreduce", "--scheduler", "auto",
                     "-s", "4M", "-o", str(out), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["schema"] == "ccsynth.synth.multidim/1" and got["output_format"] == "json"
    assert set(got["schedulers"]) == set(POLICIES)
    assert got["ir"]["model_error"] <= 0.05 and 0 < got["utilization"] <= 1
    assert got["chosen"]["time_us"] == min(s["time_us"] for s in got["schedulers"].values())
    assert cli_main(["simulate", str(out), "-s", "4M", "--json"]) == 0
    sim = json.loads(capsys.readouterr().out)
    assert sim["results"][0]["time_us"] == got["time_us"]  # the printed figure is the written file's
    assert [d["name"] for d in sim["results"][0]["dimensions"]] == ["dim0", "dim1", "dim2"]
    assert cli_main(["simulate", str(out), "-s", "4M"]) == 0
    assert "per-dimension utilization" in capsys.readouterr().out
    # the text report of a lowered schedule (it printed a KeyError once)
    assert cli_main(["synth", "-t", "hierarchical:2x2x2@200,100,50", "-c", "allreduce", "--scheduler", "themis",
                     "-s", "4M"]) == 0
    assert "Schedule IR:" in capsys.readouterr().out


def test_cli_4096_ranks_prints_the_model(capsys):
    assert cli_main(["synth", "-t", "hierarchical:8x8x8x8@400,200,100,50", "-c", "allreduce", "--scheduler",
                     "themis", "-s", "64M", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["n_ranks"] == 4096 and "ir" not in got and got["chosen"]["scheduler"] == "themis"


def test_communicator_bad_input_before_communicating():
    import ccsynth

    with pytest.raises(TopologyError, match="has 8 ranks but the communicator has 1"):
        ccsynth.Communicator(MPI.COMM_SELF, topology="hierarchical:2x2x2@200,100,50", scheduler="themis")
    with pytest.raises(CollectiveError, match="unknown multi-dimension scheduler"):
        ccsynth.Communicator(MPI.COMM_SELF, topology="hierarchical:2x2x2@200,100,50", scheduler="nope")
    with pytest.raises(CCSynthError):
        ccsynth.Communicator(MPI.COMM_SELF, scheduler="themis")


# ------------------------------------------------------------------ issue 12 follow-up: Themis's margin, the LP's rounding, profiled costs
def test_themis_beats_fixed_by_the_hand_computed_margin():
    # 4x4 at 100 and 50 GB/s, no latency or overhead: per byte of S (in S / 100 GB/s) the fixed order loads
    # dimension 0 with 2 x 3/4 = 1.5 and dimension 1 with 2 x 1/4 x 3/4 x 2 = 0.75; a share x in the order
    # (1, 0) gives 1.5 - 1.125 x and 0.75 + 2.25 x, equal at x = 2/9: 1.25. So balancing gains 1.5 / 1.25 = 1.2x.
    from ccsynth.topologies.model import BYTES_PER_US_PER_GBPS

    net = dim_net(hierarchical([(4, 100, 0.0, 0.0), (4, 50, 0.0, 0.0)]))
    size = 1 << 26
    unit = size / (100 * BYTES_PER_US_PER_GBPS)
    fixed = schedule_multidim(net, "allreduce", size, "fixed", chunks=32)
    themis = schedule_multidim(net, "allreduce", size, "themis", chunks=32)
    lp = schedule_multidim(net, "allreduce", size, "lp", chunks=32)
    assert fixed.makespan_us == pytest.approx(1.5 * unit, rel=1e-9)  # dimension 0's load; the pipeline hides the rest
    assert lp.makespan_us == pytest.approx(1.25 * unit, rel=2e-3)
    assert themis.makespan_us <= 1.26 * unit  # the greedy is within one chunk of the balance
    assert fixed.makespan_us / themis.makespan_us >= 1.19
    share = sum(u for o, u in themis.order_counts() if o == (1, 0)) / 32
    assert share == pytest.approx(2 / 9, abs=1 / 32)


def test_themis_flex_sizes_chunks_to_the_load_gap():
    from ccsynth.synth.multidim.policies import themis_flex_chunks

    net = dim_net(hierarchical([(4, 100, 0.0, 0.0), (4, 100, 0.0, 0.0)]))
    chunks = themis_flex_chunks(net, PhaseCosts(net), "allreduce", 1 << 20, 8)
    assert sum(c.units for c in chunks) == 8
    # per unit, the order (0, 1) loads dim 0 by 1.5 and dim 1 by 0.375 (x 2 halves, / 4 ranks); (1, 0) the
    # reverse. After one natural unit the gap (1.125) closes at 1.5 - 0.375 per unit of (1, 0): one unit
    assert [(c.order, c.units) for c in chunks][:3] == [((0, 1), 1), ((1, 0), 1), ((0, 1), 1)]
    # 8 x 2 ranks: a unit of (0, 1) loads dim 0 by 1.75 and dim 1 by 0.125; a unit of (1, 0) dim 1 by 1 and
    # dim 0 by 0.875. After one natural unit the gap (1.625) closes at 1 - 0.875 per unit: one chunk of 13 units
    skewed = dim_net(hierarchical([(8, 100, 0.0, 0.0), (2, 100, 0.0, 0.0)]))
    chunks = themis_flex_chunks(skewed, PhaseCosts(skewed), "allreduce", 1 << 20, 16)
    assert [(c.order, c.units) for c in chunks] == [((0, 1), 1), ((1, 0), 13), ((0, 1), 1), ((1, 0), 1)]


@pytest.mark.parametrize("name", ["dgx_a100x16", "ndv2x16"])
def test_themis_flex_does_not_lose_the_pipeline_where_nothing_needs_balancing(name):
    # least-loaded-first is the natural order there (the NIC is the busiest dimension under it): sized by its
    # first phase alone, the flex chunk grew to the rest of the data (0.92x the fixed order at 1 GiB); net of
    # what it adds to the busiest dimension it cannot close the gap, so flex pipelines like the fixed order
    net = dim_net(get_topology(name))
    fixed = schedule_multidim(net, "allreduce", 1 << 30, "fixed")
    flex = schedule_multidim(net, "allreduce", 1 << 30, "themis-flex")
    assert flex.makespan_us <= fixed.makespan_us * (1 + 1e-6)
    assert {o for o, _ in flex.order_counts()} == {(0, 1)}


def test_lp_rounding_is_exact_and_the_gap_to_its_bound_is_per_message_cost():
    from ccsynth.synth.multidim.lp import WEIGHT_UNITS, lp_chunks, weighted_chunks

    # the weighted rounding gives every order its LP share to 1 / (WEIGHT_UNITS x chunks)
    net = dim_net(get_topology("hierarchical:8x8x8x8@400,200,100,50"))
    costs = PhaseCosts(net)
    chunks, sol = lp_chunks(net, costs, "allreduce", 1 << 30, 32)
    weighted = weighted_chunks(net, costs, "allreduce", chunks, sol)
    total = sum(c.units for c in weighted)
    for order, share in sol.fractions:
        got = sum(c.units for c in weighted if c.order == order) / total
        assert got == pytest.approx(share, abs=2 / (WEIGHT_UNITS * 32))
    # without per-message overhead the LP's schedule is within 2% of its own bound: the rounding loses nothing
    # more; the rest of its gap on the catalog's 4D fabrics is overhead its bandwidth bound leaves out
    free = dim_net(hierarchical([(8, 400, 0.7, 0.0), (8, 200, 2.6, 0.0), (8, 100, 2.6, 0.0), (8, 50, 2.6, 0.0)]))
    lp = schedule_multidim(free, "allreduce", 1 << 30, "lp", chunks=128)
    assert lp.makespan_us <= 1.02 * lp.lp_bound_us


def test_exact_rounding_keeps_every_edge_within_a_chunk_and_its_bound_is_the_best_rounding():
    from ccsynth.synth.multidim.lp import lattice_walk, round_flow, rounded_chunks, solve_lattice

    net = dim_net(get_topology("hierarchical:8x8x8x8@400,200,100,50"))
    costs = PhaseCosts(net)
    size, k = 1 << 30, 48
    sol = solve_lattice(net, costs, "allreduce", size, k)
    shares = dict(sol.flows)
    rounded = round_flow(net, costs, "allreduce", size, sol)
    for e, x in rounded.items():
        assert abs(x * k - round(x * k)) < 1e-9  # whole chunks
        assert abs(x - shares[e]) < 1 / k + 1e-9  # within one chunk of the LP's share
    assert sum(x for (s, _), x in rounded.items() if s == 0) == pytest.approx(1.0)

    def busiest(flows):  # the busiest dimension's floor charges in the chunks the walk makes of a flow
        orders = lattice_walk(net, costs, "allreduce", size, flows, k)
        chunks = [make_chunk(net, costs, "allreduce", o, size / k) for o in orders]
        busy = [0.0] * net.n_dims
        for task in time_chunks(net, costs, "allreduce", size, chunks).tasks:
            busy[task.dim] += costs.floor(task.dim, task.algorithm, task.range_bytes, reduce=task.reduce)
        return max(busy)

    chunks = rounded_chunks(net, costs, "allreduce", sol)
    assert len(chunks) == k
    # the walk of the LP's fractions overloads a dimension by 5% here; the exact rounding by under 3%
    assert busiest(rounded) <= busiest(shares) * (1 + 1e-9)
    assert busiest(rounded) <= 1.03 * sol.bound_us
    # whole chunks cost the bound itself almost nothing: the best rounding is within 0.1% of T*
    exact = rounded_bound(net, costs, "allreduce", size, k)
    assert sol.bound_us * (1 - 1e-9) <= exact <= 1.001 * sol.bound_us
    lp = schedule_multidim(net, "allreduce", size, "lp", chunks=k)
    assert exact <= lp.makespan_us


def test_lp_tries_its_winning_chunks_in_the_reverse_sequence():
    # 20 chunks on 4x4x2@200,100,50 at 1 GiB: reversed, the LP's winning chunks take 6038.3 us instead of 6231.3
    # (2x2x2x2@250,200,100,50 at 24 chunks, the earlier case, gains nothing since its 2-rank phases run direct)
    from ccsynth.synth.multidim.pipeline import PRIORITIES

    net = dim_net(get_topology("hierarchical:4x4x2@200,100,50"))
    costs = PhaseCosts(net)
    size = 1 << 30
    lp = schedule_multidim(net, "allreduce", size, "lp", chunks=20)
    assert lp.origin.endswith(", reversed")
    forward = min(time_chunks(net, costs, "allreduce", size, lp.chunks[::-1], p).makespan_us for p in PRIORITIES)
    assert lp.makespan_us < forward * (1 - 0.02)
    assert lp.makespan_us == pytest.approx(6038.32, abs=0.01)
    # still deterministic, and never worse than Themis at the same count
    assert schedule_multidim(net, "allreduce", size, "lp", chunks=20).chunks == lp.chunks
    assert lp.makespan_us <= schedule_multidim(net, "allreduce", size, "themis", chunks=20).makespan_us


def test_pipelined_bound_adds_the_fill_and_drain_every_schedule_pays():
    from ccsynth.synth.multidim.lp import message_latency, solve_lattice
    from ccsynth.topologies.model import BYTES_PER_US_PER_GBPS

    # Themis's artifact sample: no chunk may sensibly start on the 12.5 GB/s dimension, so it idles while the
    # first chunk reduce-scatters on dimension 0 and while the last one gathers there; T* lets it work throughout.
    # Each of those phases pays a message's overheads and latency on dimension 0 (1.35 + 0.7 + 1.35 us) beyond
    # its bytes, and the 12.5 GB/s dimension its own first and last message's (5.7 + 2.6 + 5.7 us)
    net = dim_net(get_topology("hierarchical:2x8x2@250,175,12.5"))
    costs = PhaseCosts(net)
    size = 1 << 30
    assert [message_latency(net, d) for d in range(3)] == pytest.approx([3.4, 14.0, 14.0])
    lp = schedule_multidim(net, "allreduce", size, "lp", chunks=20)
    t_star = solve_lattice(net, costs, "allreduce", size, 20).bound_us
    bound = pipelined_bound(net, costs, "allreduce", size, lp.chunks)
    # one reduce-scatter phase of a 1/20 chunk on dimension 0 (2 ranks, 250 GB/s), before and after
    phase = (size / 20) / 2 / (250 * BYTES_PER_US_PER_GBPS)
    assert bound == pytest.approx(t_star + 2 * (phase + 3.4) + 14.0, rel=1e-6)
    assert t_star < bound <= lp.makespan_us
    for spec in ("hierarchical:4x4x4x4@100,100,100,100", "hierarchical:2x2@200,50"):
        other = dim_net(get_topology(spec))
        md = schedule_multidim(other, "allreduce", 1 << 26, "fixed", chunks=8)
        t_star = solve_lattice(other, PhaseCosts(other), "allreduce", 1 << 26, 8).bound_us
        assert t_star * (1 - 1e-9) <= pipelined_bound(other, PhaseCosts(other), "allreduce", 1 << 26, md.chunks)


def test_pipelined_bound_holds_in_the_model_on_the_4d_fabrics():
    # every scheduler at 1 GiB on the 4D fabrics of the benchmark (too large for the simulator); every phase runs
    # direct there, whose floor charge is linear in the bytes, so the LP's weighted chunks are bound too
    for spec in ("hierarchical:8x8x8x8@400,200,100,50", "hierarchical:2x8x8x8@250,200,100,50",
                 "hierarchical:2x8x8x8@250,175,50,12.5"):
        net = dim_net(get_topology(spec))
        costs = PhaseCosts(net)
        for policy, k in (("fixed", 64), ("themis", 40), ("lp", 40), ("lp", 72)):
            md = schedule_multidim(net, "allreduce", 1 << 30, policy, chunks=k)
            assert {a for c in md.chunks for a in c.algorithms} == {"direct"}
            bound = pipelined_bound(net, costs, "allreduce", 1 << 30, md.chunks)
            assert bound <= md.makespan_us * (1 + 1e-9), (spec, policy, k, bound, md.makespan_us)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.integers(2, 4), st.sampled_from([12.5, 50.0, 100.0, 200.0]), st.sampled_from([0.0, 0.7, 2.6]),
                          st.sampled_from([0.0, 1.35, 5.7])), min_size=2, max_size=3),
       st.sampled_from(["allreduce", "reduce_scatter", "allgather"]), st.sampled_from([1 << 12, 1 << 20, 1 << 26]),
       st.integers(1, 4), st.randoms(use_true_random=False))
def test_pipelined_bound_holds_for_any_equal_chunks_in_the_simulator(dims, kind, size, k, rnd):
    # any dimension orders (not only a scheduler's), any small hierarchy: the bound is below the event-driven
    # simulator's time and the dimension-level model's
    from ccsynth.synth.multidim.search import MultiDimSchedule

    t = hierarchical(dims)
    net = dim_net(t)
    costs = PhaseCosts(net)
    k = min(k, ir_max_chunks(kind, net))
    orders = [tuple(rnd.sample(range(net.n_dims), net.n_dims)) for _ in range(k)]
    chunks = tuple(make_chunk(net, costs, kind, o, size / k) for o in orders)
    timing = time_chunks(net, costs, kind, size, chunks)
    sim = simulate(to_schedule(MultiDimSchedule("lp", kind, size, net, chunks, timing), t), t, size).time_us
    bound = pipelined_bound(net, costs, kind, size, chunks)
    assert bound <= sim * (1 + 1e-9), (bound, sim)
    assert bound <= timing.makespan_us * (1 + 1e-9), (bound, timing.makespan_us)


def test_the_model_charges_a_profiled_topology_like_the_simulator():
    import dataclasses

    t = dataclasses.replace(hierarchical([(2, 100), (4, 25)]), eager_limit=8192.0, rendezvous_alpha=3.0,
                            local_bw=20.0, local_overhead=0.5, call_overhead=2.0)
    net = dim_net(t)
    assert (net.eager_limit, net.rendezvous_alpha, net.local_overhead, net.call_overhead) == (8192.0, 3.0, 0.5, 2.0)
    for kind in ("allreduce", "reduce_scatter", "allgather"):
        cap = ir_max_chunks(kind, net)
        for policy in ("fixed", "themis", "lp"):
            for size in (1 << 12, 1 << 22):
                md = schedule_multidim(net, kind, size, policy, max_chunks=cap)
                sim = simulate(to_schedule(md, t), t, size).time_us
                assert md.makespan_us == pytest.approx(sim, rel=0.05), (kind, policy, size)


def test_two_rank_dimensions_run_direct_on_ties():
    # on 2 ranks ring and direct send one message each way and take the same time alone; direct wins the tie,
    # since direct phases overlap in a pipeline (the next one's latency and overheads hide behind these bytes)
    from ccsynth.synth.multidim.chunks import ChunkPlan
    from ccsynth.synth.multidim.policies import equal_units, fixed_chunks

    net = dim_net(get_topology("hierarchical:2x8x2@250,175,12.5"))
    costs = PhaseCosts(net)
    for d in (0, 2):
        assert costs.time(d, "ring", 1 << 24, reduce=True) == pytest.approx(costs.time(d, "direct", 1 << 24, reduce=True))
        assert costs.best(d, 1 << 24, reduce=True).algorithm == "direct"
    size, k = 1 << 30, 64
    direct = fixed_chunks(net, costs, "allreduce", size, equal_units(k))
    assert {c.algorithms for c in direct} == {("direct", "direct", "direct")}
    ring = tuple(ChunkPlan(c.order, ("ring", "direct", "ring"), c.units) for c in direct)
    t_direct = time_chunks(net, costs, "allreduce", size, direct).makespan_us
    t_ring = time_chunks(net, costs, "allreduce", size, ring).makespan_us
    # the 12.5 GB/s dimension (the bottleneck) pays alpha + 2 overheads (2.6 + 2 x 5.7 us) per ring phase, two a chunk
    assert t_ring - t_direct == pytest.approx(2 * k * 14.0, rel=0.05)


def test_tuned_shares_move_data_between_orders_and_never_lose():
    from ccsynth.synth.multidim.lp import lp_chunks
    from ccsynth.synth.multidim.shares import GRAIN, tune_shares, with_shares

    net = dim_net(get_topology("hierarchical:8x8x8x8@400,200,100,50"))
    costs = PhaseCosts(net)
    size, k = 1 << 30, 40
    chunks, _ = lp_chunks(net, costs, "allreduce", size, k)
    start = time_chunks(net, costs, "allreduce", size, chunks, "phase").makespan_us
    tuned = tune_shares(net, costs, "allreduce", size, chunks, "phase")
    got = time_chunks(net, costs, "allreduce", size, tuned, "phase").makespan_us
    assert got < start * (1 - 0.005)  # the walk's shares at 40 chunks: 2990.1 -> 2951.6 us
    assert [c.order for c in tuned] == [c.order for c in chunks]  # the sequence and each order's count stay
    assert sum(c.units for c in tuned) > GRAIN * k // 2  # finer units: chunks of unequal size
    assert tune_shares(net, costs, "allreduce", size, chunks, "phase") == tuned  # deterministic
    # with_shares gives each order the share asked for, to the grain
    shares = {(0, 1, 2, 3): 0.6, (1, 2, 3, 0): 0.25}  # from 0.625 and 0.225 (the other two keep 0.1 and 0.05)
    resized = with_shares(net, costs, "allreduce", size, chunks, shares)
    total = sum(c.units for c in resized)
    for order, x in shares.items():
        assert sum(c.units for c in resized if c.order == order) / total == pytest.approx(x, abs=0.01)
    # one order only: nothing to move
    fixed = schedule_multidim(net, "allreduce", size, "fixed", chunks=8).chunks
    assert tune_shares(net, costs, "allreduce", size, fixed, "chunk") == fixed


def test_cut_long_chunks_keeps_every_orders_bytes_and_spreads_the_pieces():
    from ccsynth.synth.multidim.cuts import MAX_PIECES, cut_long_chunks, longest_phase
    from ccsynth.synth.multidim.pipeline import chunk_bytes

    net = dim_net(get_topology("hierarchical:2x8x8x8@250,175,50,12.5"))
    costs = PhaseCosts(net)
    size = 1 << 30
    # 12 chunks of the main order, 2 of an order with half a chunk on the 12.5 GB/s dimension (7x as long a phase)
    orders = [(0, 1, 2, 3)] * 6 + [(0, 3, 2, 1)] + [(0, 1, 2, 3)] * 6 + [(0, 3, 2, 1)]
    chunks = tuple(make_chunk(net, costs, "allreduce", o, size / len(orders)) for o in orders)
    cut = cut_long_chunks(net, costs, "allreduce", size, chunks)
    assert cut == cut_long_chunks(net, costs, "allreduce", size, chunks)  # deterministic

    def shares(plan):
        total = sum(c.units for c in plan)
        out: dict = {}
        for c in plan:
            out[c.order] = out.get(c.order, 0) + c.units / total
        return out

    assert shares(cut) == pytest.approx(shares(chunks), abs=1e-12)  # every order keeps its bytes exactly
    slow = [i for i, c in enumerate(cut) if c.order == (0, 3, 2, 1)]
    assert 2 < len(slow) <= 2 * MAX_PIECES and len({cut[i].units for i in slow}) == 1  # equal pieces
    assert len({c for c in cut if c.order == (0, 1, 2, 3)}) == 1  # the others are not cut
    # spread over the whole sequence (not where their chunks were), and no longer the schedule's long phases
    assert slow[0] < len(cut) / 4 and slow[-1] > 3 * len(cut) / 4 and max(b - a for a, b in pairwise(slow)) <= 3
    sizes = chunk_bytes(size, cut)
    longest = [longest_phase(costs, "allreduce", c, b) for c, b in zip(cut, sizes)]
    typical = sorted(longest)[len(longest) // 2]
    assert max(longest[i] for i in slow) < 2 * typical
    # nothing long: unchanged; too many pieces for the cap: unchanged
    even = tuple(c for c in chunks if c.order == (0, 1, 2, 3))
    assert cut_long_chunks(net, costs, "allreduce", size, even) == even
    assert cut_long_chunks(net, costs, "allreduce", size, chunks, max_chunks=len(chunks)) == chunks


# 30 s of LP search on a 1,024-rank 4D fabric; covered by python -m ccsynth.bench.bench_multidim, whose 1 GiB rows
# check the LP against T* (this row among them)
@pytest.mark.slow
def test_lp_within_two_percent_of_its_bound_where_one_order_has_a_long_phase():
    # issue 12's target on the 4D fabric whose LP split gives 4.5% of the data an order with half a chunk on the
    # 12.5 GB/s dimension: before the cut (h46-themis) 4635.5 us, 1.027 x T* (4512.2); cut and tuned again 4601.2
    net = dim_net(get_topology("hierarchical:2x8x8x8@250,175,50,12.5"))
    size = 1 << 30
    lp = schedule_multidim(net, "allreduce", size, "lp")
    assert lp.lp_bound_us == pytest.approx(4512.2, abs=0.1)
    assert lp.makespan_us <= 1.02 * lp.lp_bound_us
    assert "long chunks cut" in lp.origin
    assert schedule_multidim(net, "allreduce", size, "lp").chunks == lp.chunks  # deterministic
