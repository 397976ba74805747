"""Tree packing: max flow, arborescences, the packing LP at the exact bound, lowered schedules that verify."""

from __future__ import annotations

import doctest
import importlib

import networkx as nx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from msccl_runtime import runtime_problems

from ccsynth.collectives.spec import Collective
from ccsynth.collectives.verify import verify
from ccsynth.formats.msccl.export import schedule_to_msccl_xml
from ccsynth.formats.msccl.reader import schedule_from_msccl_xml
from ccsynth.synth.baselines import make_baseline
from ccsynth.synth.bounds import lower_bound
from ccsynth.synth.simulate import simulate
from ccsynth.synth.synthesize import SynthReport, synthesize
from ccsynth.synth.trees.arborescence import min_arborescence, tree_cost
from ccsynth.synth.flows.maxflow import MaxFlow
from ccsynth.synth.flows.network import flow_network
from ccsynth.synth.trees.packing import pack_allreduce, pack_trees
from ccsynth.synth.trees.lowering import lower_out_trees
from ccsynth.synth.trees.search import best_tree_schedule, lower, packing_for, stagger_for
from ccsynth.topologies import catalog
from ccsynth.topologies.model import Link, SharedPort, Switch, Topology
from test_exact_bounds import exact_topology, two_clusters

MODULES = ["flows.network", "flows.maxflow", "flows.symmetry", "flows.throughput", "trees.arborescence", "trees.packing",
           "trees.lowering", "trees.search"]


@pytest.mark.parametrize("name", MODULES)
def test_doctests(name):
    result = doctest.testmod(importlib.import_module(f"ccsynth.synth.{name}"))
    assert result.failed == 0 and result.attempted > 0


def star(leaves=4, bw=25.0, alpha=0.7):
    """A hub (rank 0) and ``leaves`` leaves, one link each way per leaf (issue 11's allreduce example)."""
    links = [Link(0, v, alpha, bw) for v in range(1, leaves + 1)] + [Link(v, 0, alpha, bw) for v in range(1, leaves + 1)]
    return Topology("star5", leaves + 1, links=tuple(links))


# ------------------------------------------------------------------ max flow and arborescences
@settings(max_examples=60, deadline=None)
@given(st.integers(2, 9), st.data())
def test_maxflow_matches_networkx(n, data):
    arcs = [(a, b, float(data.draw(st.sampled_from([1, 2, 5, 12.5]))))
            for a in range(n) for b in range(n) if a != b and data.draw(st.booleans())]
    g = nx.DiGraph()
    g.add_nodes_from(range(n))
    for a, b, c in arcs:
        g.add_edge(a, b, capacity=c)
    mf = MaxFlow(n, [a for a, _, _ in arcs], [b for _, b, _ in arcs], [c for _, _, c in arcs])
    res = mf.run(0, n - 1)
    assert res.value == pytest.approx(nx.maximum_flow_value(g, 0, n - 1))
    cut = sum(c for a, b, c in arcs if res.source_side[a] and not res.source_side[b])
    assert cut == pytest.approx(res.value)  # the reported side is a minimum cut


@settings(max_examples=80, deadline=None)
@given(st.integers(2, 10), st.booleans(), st.data())
def test_min_arborescence_matches_networkx(m, symmetric, data):
    W = np.full((m, m), np.inf)
    for a in range(m):
        for b in range(m):
            if a != b and data.draw(st.integers(0, 2)) > 0:
                W[a, b] = float(data.draw(st.integers(1, 5)))
    if symmetric:
        W = np.minimum(W, W.T)
    root = data.draw(st.integers(0, m - 1))
    g = nx.DiGraph()
    g.add_nodes_from(range(m))
    for a in range(m):
        for b in range(m):
            if np.isfinite(W[a, b]) and b != root:
                g.add_edge(a, b, weight=W[a, b])
    try:
        ref = sum(d["weight"] for _, _, d in nx.minimum_spanning_arborescence(g).edges(data=True))
    except nx.NetworkXException:
        return  # no spanning arborescence (networkx cannot fix the root; some are skipped)
    parent = min_arborescence(W, root)
    assert parent[root] == -1
    for v in range(m):  # every node reaches the root through parents
        seen, u = set(), v
        while u != root:
            assert u not in seen
            seen.add(u)
            u = parent[u]
    assert tree_cost(W, parent) == pytest.approx(ref)


# ------------------------------------------------------------------ the packing meets the exact bound
MACHINES = [catalog.ring(5), catalog.dgx1(), catalog.ndv2(2), catalog.dgx_a100(2), two_clusters(), star(),
            catalog.torus((2, 3)), catalog.hierarchical([(4, 100, 0.5), (2, 25, 2.0)])]


@pytest.mark.parametrize("topo", MACHINES, ids=[t.name for t in MACHINES])
@pytest.mark.parametrize("kind", ["allgather", "reduce_scatter"])
def test_packing_meets_the_exact_bound(topo, kind):
    n = topo.n_ranks
    p = packing_for(topo, kind)
    Z = 1 << 30
    bound = lower_bound(Collective(kind, n), topo, Z)
    assert p.tau * (Z / n) / 1e3 == pytest.approx(bound.bandwidth_us, rel=1e-6)
    assert bound.details["cut_exact"]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(exact_topology(max_n=7), st.sampled_from(["allgather", "reduce_scatter"]))
def test_packed_trees_verify_and_meet_their_bound_on_random_machines(topo, kind):
    if not topo.is_strongly_connected():
        return
    n = topo.n_ranks
    p = pack_trees(topo, range(n), inward=kind == "reduce_scatter")
    # the packing never beats the lower bound; it meets it on graphs and balanced NICs (the catalog machines, see
    # test_packing_meets_the_exact_bound) but not always where a NIC's two sides differ: no splitting of its node
    # keeps the cuts there, and random machines with such NICs have packings 1.1-2x above the cut bound
    Z = 1 << 30
    bound = lower_bound(Collective(kind, n), topo, Z)
    assert p.gap >= 1 - 1e-5
    assert p.tau * (Z / n) / 1e3 >= bound.bandwidth_us * (1 - 1e-6)
    s = lower(p, Collective(kind, n, 4), topo)
    verify(s, topo)
    r = simulate(s, topo, 1 << 26)
    assert r.time_us >= r.lower_bound_us * (1 - 1e-9)


def test_symmetry_packs_one_tree_per_orbit():
    t = catalog.dgx_a100(4)
    p = pack_trees(t, range(32))
    assert p.columns == 1 and len(p.trees) == 32 and p.gap == pytest.approx(1.0)
    # one rail crossing per remote node: the minimum
    tree = p.trees[0]
    rails = sum(1 for par, v in tree.arcs() if t.nodes[par] != t.nodes[v])
    assert rails == 3


@pytest.mark.parametrize("kind", ["allgather", "reduce_scatter", "broadcast", "reduce", "allreduce"])
@pytest.mark.parametrize("topo", [catalog.dgx1(), catalog.ndv2(2), star()], ids=["dgx1", "ndv2x2", "star"])
def test_lowered_schedules_verify(kind, topo):
    n = topo.n_ranks
    p = packing_for(topo, kind, n - 1 if kind in ("broadcast", "reduce") else 0)
    c = 3 * n if kind == "allreduce" else 3
    s = lower(p, Collective(kind, n, c, n - 1 if kind in ("broadcast", "reduce") else 0), topo)
    rep = verify(s, topo)
    assert rep.n_transfers > 0
    r = simulate(s, topo, 1 << 24)
    assert r.time_us >= r.lower_bound_us * (1 - 1e-9)


@pytest.mark.parametrize("kind", ["allgather", "reduce_scatter"])
def test_trees_on_a_rail_machine_are_near_the_bound_at_1GiB(kind):
    # reduce-scatter: in-trees across nodes (issue 11 had not run it beyond 32 ranks; dgx_h100x32 is 1.038x)
    t = catalog.dgx_a100(4)
    choice = best_tree_schedule(t, Collective(kind, 32), 1 << 30)
    verify(choice.schedule, t)
    r = simulate(choice.schedule, t, 1 << 30)
    assert r.time_us == pytest.approx(choice.time_us)
    assert r.gap < 1.05, choice.tried


def test_one_chunk_per_root_keeps_the_nics_busy():
    # dgx_a100x128's allgather has one chunk per root within MSCCL's op limit: every root sends its 1 MiB shard
    # through its NIC once per other node, and with those sends one at a time the NIC idled for each message's
    # overheads and latency (14 of every 56 us there: 1.22x). The same shards on 8 nodes: 1.354x with one send per
    # port, 1.248x with two, 1.147x with the two staggered by half a shard
    t = catalog.dgx_a100(8)
    n = t.n_ranks
    s = lower(packing_for(t, "allgather"), Collective("allgather", n, 1), t)
    verify(s, t)
    assert simulate(s, t, n << 20).gap < 1.18


def test_staggered_sends_are_half_a_shard_apart():
    # two sends of a window that start together end together, and the NIC idles for the next pair's overhead and
    # latency (dgx_a100x16 at 1 MiB shards: 1.169x of the bound); the second send through each NIC goes in halves,
    # half first and half after the last, so that later pairs are half a message apart: 1.068x
    t = catalog.dgx_a100(16)
    n = t.n_ranks
    p = packing_for(t, "allgather")
    s = lower(p, Collective("allgather", n, 1), t)
    verify(s, t)
    assert s.meta["stagger"] == stagger_for("allgather", n) == 3 and s.collective.chunk_factor == 2
    halves = [o for o in s.ops if o.rank == 0 and o.kind == "send" and o.src.buf == "i" and o.src.count == 1]
    # its own shard: to the NIC's second child and the NVSwitch port's, each in halves; and to the NIC's last child
    # (its 15 sends are at least TAIL_SPLIT: test_one_chunk_per_root_ends_with_half_a_chunk)
    assert sorted(o.peer for o in halves) == [2, 2, 16, 16, 120, 120]
    r = simulate(s, t, n << 20)
    assert r.gap < 1.08, r
    plain = lower_out_trees(p.trees, Collective("allgather", n, 1), t, stagger=0)
    assert simulate(plain, t, n << 20).gap > 1.15
    # on 1,024 ranks only the NICs' 127 sends are staggered (the NVSwitch ports' 7 would cost 254 ops per rank)
    assert stagger_for("allgather", 1024) == 9


def test_one_chunk_per_root_ends_with_half_a_chunk():
    # after its NIC's last byte a GPU fans out what that message brought to the 7 others of its node: a whole 1 MiB
    # shard (29 of the 43 us between this allgather and its bound: 1.068x). The last send through a NIC now goes in
    # halves, the second last, and relays forward each piece as it arrives: half a shard is fanned out at the end
    t = catalog.dgx_a100(16)
    n = t.n_ranks
    s = lower(packing_for(t, "allgather"), Collective("allgather", n, 1), t)
    verify(s, t)
    r = simulate(s, t, n << 20, trace=True)
    assert r.gap < 1.05, r
    assert r.trace is not None
    nic = [x for x in r.trace.transfers if x.dst == 0 and x.src // 8 != 0]
    last = max(nic, key=lambda x: x.data_end)
    assert last.chunks.count == 1  # half of a shard (two chunks per shard)
    # the relay forwards the first half of that shard before the second is in
    first = [x for x in r.trace.transfers if x.src == 0 and x.dst // 8 == 0 and x.chunks.index == last.chunks.index - 1]
    assert first and max(x.posted for x in first) < last.done
    assert runtime_problems(schedule_to_msccl_xml(s, topology=t)) == []  # the pieces still load in MSCCL's runtimes


def test_long_nic_chains_take_eight_sends_per_port():
    # with one chunk per root every NIC sends its shard down a chain of one send per other node; the senders drift
    # apart over a long chain (unequal leaf groups: rail and spine latencies differ) and a receiver then serves
    # several at once. Eight sends in flight per NIC keep it fed through that: dgx_a100x128 (127 sends per NIC)
    # 1.059x of the bound with four, 1.030x with eight. The same chains on 2-GPU nodes in leaf groups of 20
    # (20, 20, 20, 4, as dgx_a100x64's scalable units): 1.095x with two, 1.042x with four, 1.013x with eight
    t = catalog.fat_tree(64, 2, leaf_nodes=20)
    n = t.n_ranks
    Z = n << 20  # 1 MiB shards
    choice = best_tree_schedule(t, Collective("allgather", n), Z, chunk_factors=(1,))
    verify(choice.schedule, t)
    assert choice.schedule.meta["send_window"] == 8 and choice.schedule.meta["stagger"] > 0
    bound = lower_bound(Collective("allgather", n), t, Z).time_us
    assert choice.time_us < 1.02 * bound
    four = lower(choice.packing, Collective("allgather", n, 1), t, window=4)
    assert simulate(four, t, Z).time_us > 1.03 * bound


def test_staggered_schedule_exports_to_msccl():
    # the halves are chunks of a collective with twice the chunk factor: MSCCL's runtimes load it, and it reads back
    t = catalog.dgx_a100(4)
    n = t.n_ranks
    s = lower(packing_for(t, "allgather"), Collective("allgather", n, 1), t)
    assert s.meta["stagger"] > 0
    text = schedule_to_msccl_xml(s, topology=t)
    assert runtime_problems(text) == []
    verify(schedule_from_msccl_xml(text), t)


def test_oversubscribed_fat_tree_keeps_several_sends_per_port():
    # a send held back by the 2:1 spine left its NIC idle while the next one waited for it; the search tries the
    # best chunk factor with two, four and all of a rank's sends of a chunk per port as well (fat_tree:16x8:4:2
    # at 1 GiB: 5,925.8 us one at a time, 5,595.2 us two at a time). Here 1.166x of the bound one at a time,
    # 1.126x two, 1.108x all
    t = catalog.fat_tree(8, 2, leaf_nodes=2, oversubscription=2)
    n, Z = t.n_ranks, 1 << 26
    choice = best_tree_schedule(t, Collective("allgather", n), Z)
    verify(choice.schedule, t)
    assert choice.schedule.meta["send_window"] > 2
    one, two = (lower(choice.packing, Collective("allgather", n, choice.chunk_factor), t, window=w) for w in (1, 2))
    assert choice.time_us < 0.96 * simulate(one, t, Z).time_us
    assert choice.time_us < 0.99 * simulate(two, t, Z).time_us



def test_phased_lowering_verifies_on_small_fat_trees():
    for t, c in ((catalog.fat_tree(4, 2, leaf_nodes=2, oversubscription=2), 2),
                 (catalog.fat_tree(8, 2, leaf_nodes=4, oversubscription=2), 4),
                 (catalog.fat_tree(4, 4), 3), (catalog.dgx_a100(2), 4)):
        n = t.n_ranks
        p = packing_for(t, "allgather")
        s = lower_out_trees(p.trees, Collective("allgather", n, c), t, 2, phased=2)
        assert s.meta["phased"] == 2 and s.meta["phases"] >= 1
        verify(s, t)
        b = lower_out_trees(p.trees, Collective("broadcast", n, c, root=1), t, 2, phased=2)
        verify(b, t)
    # the phases are dependencies on the rank's own ops: MSCCL's runtimes load the schedule, and it reads back
    text = schedule_to_msccl_xml(s, topology=t)
    assert runtime_problems(text) == []
    verify(schedule_from_msccl_xml(text), t)


def test_phase_order_is_a_matching_per_phase_and_forwards_follow_their_data():
    from ccsynth.synth.trees import lowering

    t = catalog.fat_tree(8, 2, leaf_nodes=4, oversubscription=2)
    n = t.n_ranks
    p = packing_for(t, "allgather")
    seen = {}
    phase_order = lowering._phase_order

    def spy(sends, lag=None, fits=None):
        seen["sends"], seen["fits"] = sends, fits
        seen["phase"] = order = phase_order(sends, lag, fits)
        return order

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(lowering, "_phase_order", spy)
        lower_out_trees(p.trees, Collective("allgather", n, 4), t, 2, phased=2)
    sends, phase = seen["sends"], seen["phase"]
    assert phase is not None and set(phase) == {x.send for x in sends}
    per: dict[int, list] = {}
    for x in sends:
        per.setdefault(phase[x.send], []).append(x)
    for xs in per.values():
        assert len({x.src for x in xs}) == len(xs) and len({x.dst for x in xs}) == len(xs)
        assert not seen["fits"]([(x.src, x.dst) for x in xs], lambda ab: 0.0)  # the 2:1 spine within its rate
    for x in sends:
        if x.after >= 0:
            assert phase[x.send] >= phase[x.after] + lowering.PHASE_LAG


def test_phased_lowering_beats_unphased_on_an_oversubscribed_fat_tree():
    # fat_tree:8x8:4:2 packs direct trees (a root's NIC to every other node of its leaf group) beside relay trees
    # (one crossing of the spine, a relay there fanning out): its NIC pairs carry 4 to 16 chunks each, and with
    # one first-come-first-served stream per pair under max-min sharing the light pairs finished early and the
    # heavy ones ran below rate (1.104x of the bound at chunk factor 8). In phases, every NIC sends to one partner
    # and hears one at a time: 1.019x
    t = catalog.fat_tree(8, 8, leaf_nodes=4, oversubscription=2)
    n, Z = t.n_ranks, float(1 << 30)
    p = packing_for(t, "allgather")
    fan = [sum(1 for a, b in tr.arcs() if a == tr.root and t.nodes[a] != t.nodes[b]) for tr in p.trees]
    assert max(fan) >= 3 and min(fan) == 1  # direct and relay trees
    bound = lower_bound(Collective("allgather", n), t, Z).time_us
    phased = lower_out_trees(p.trees, Collective("allgather", n, 8), t, 2, phased=2)
    assert phased.meta["phased"] == 2
    verify(phased, t)
    plain = min(simulate(lower_out_trees(p.trees, Collective("allgather", n, 8), t, w), t, Z).time_us for w in (1, 2))
    fast = simulate(phased, t, Z).time_us
    assert plain > 1.08 * bound
    assert fast < 1.04 * bound and fast < 0.95 * plain


def test_chunk_factor_walk_goes_on_while_faster(monkeypatch):
    # dgx_h100x32 at 1 GiB: factor 2 beat factor 1 by 0.4% (2,688.8 -> 2,678.2 us), less than the 1% step the walk
    # required, so factor 4 (2,655.6 us) was never tried. Here the simulator is replaced by those times (none good
    # enough), and the send windows tried at the best factor stop at the first that is not faster
    from ccsynth.synth.trees import search

    t = catalog.dgx_a100(1)
    n = t.n_ranks
    times = {(1, None): 2688.8, (2, None): 2678.2, (4, None): 2655.6, (8, None): 2660.0, (4, 2): 2656.0}
    asked = []

    class Result:
        def __init__(self, us):
            self.time_us = us

    def fake_simulate(schedule, topology, size):
        key = (schedule.meta["chunk_factor_asked"], schedule.meta["window_asked"])
        asked.append(key)
        return Result(times[key])

    def fake_lower(packing, collective, topology, window=None, phased=0):
        s = lower(packing, collective, topology, window, phased)
        return s.with_meta(chunk_factor_asked=collective.chunk_factor, window_asked=window, send_window=window or 1)

    monkeypatch.setattr(search, "simulate", fake_simulate)
    monkeypatch.setattr(search, "lower", fake_lower)
    choice = search.best_tree_schedule(t, Collective("allgather", n), 1 << 20, chunk_factors=(1, 2, 4, 8))
    assert choice.chunk_factor == 4 and choice.time_us == 2655.6
    assert asked == [(1, None), (2, None), (4, None), (8, None), (4, 2)]


# ------------------------------------------------------------------ allreduce beyond reduce-scatter + allgather
def test_star_allreduce_reduces_to_the_hub_and_meets_its_bound():
    t = star()
    Z = 64 << 20
    bound = lower_bound(Collective("allreduce", 5), t, Z)
    assert bound.time_us == pytest.approx(Z / 25e3)  # a leaf's link carries the whole buffer each way: 2,684 us
    p = pack_allreduce(t)
    assert p.tau * Z / 1e3 == pytest.approx(bound.time_us)
    choice = best_tree_schedule(t, Collective("allreduce", 5), Z)
    verify(choice.schedule, t)
    r = simulate(choice.schedule, t, Z)
    assert r.gap < 1.1, (r, choice.tried)
    # reduce-scatter + allgather is far slower: the best baseline (direct, at its best chunk factor 2560) takes
    # 4,300 us (issue 11 reported 3,776 us for the best RS+AG synthesized); a few of its factors here
    direct = min(simulate(make_baseline("direct", Collective("allreduce", 5, c), t), t, Z).time_us
                 for c in (5, 80, 640))
    assert direct > 1.3 * r.time_us, (direct, r.time_us)


# A minute of MILPs (5 ranks: synthesize runs them beside the trees). Covered by python -m ccsynth.bench.bench_synth,
# whose star5 rows synthesize this case (docs/results.md).
@pytest.mark.slow
def test_synthesized_star_allreduce_is_within_1_1_of_its_bound():
    t = star()
    Z = 64 << 20
    s = synthesize(t, Collective("allreduce", 5), size_bytes=Z)
    assert simulate(s, t, Z).gap < 1.1


def test_allreduce_packing_reaches_the_group_bound_across_nodes():
    t = catalog.dgx_a100(4)
    p = packing_for(t, "allreduce")
    Z = 1 << 30
    assert p.tau * Z / 1e3 == pytest.approx(lower_bound(Collective("allreduce", 32), t, Z).bandwidth_us, rel=1e-6)


# ------------------------------------------------------------------ synthesis uses the trees
def test_synthesize_uses_trees_alone_above_the_milp_threshold():
    t = catalog.ring(18)
    report = SynthReport()
    s = synthesize(t, Collective("allgather", 18), size_bytes=1 << 26, report=report, compare_baselines=False)
    assert s.name == "packed_trees" and s.meta["verified"]
    assert not any(st_.name == "routing" for st_ in report.stages)
    assert simulate(s, t, 1 << 26).gap < 1.05


def test_synthesize_broadcast_by_trees():
    t = catalog.ring(6)
    s = synthesize(t, Collective("broadcast", 6, root=3), size_bytes=1 << 24)
    verify(s, t)
    assert s.meta["verified"]


def test_network_of_a_mixed_switch_is_exact():
    # one switch over all ranks, leaves of 3 behind shared uplinks (a 2:1 oversubscribed fat-tree)

    n, k = 9, 3
    leaves = [tuple(range(s, s + k)) for s in range(0, n, k)]
    ports = []
    for i, leaf in enumerate(leaves):
        rest = tuple(r for r in range(n) if r not in leaf)
        ports += [SharedPort(f"up{i}", leaf, rest, 1.5 * 10.0), SharedPort(f"down{i}", rest, leaf, 1.5 * 10.0)]
    t = Topology("fat9", n, switches=(Switch("fabric", tuple(range(n)), 10.0, 1.0),), shared_ports=tuple(ports),
                 nodes=tuple(r // k for r in range(n)))
    assert flow_network(t).exact, flow_network(t).note


def test_packing_of_unbalanced_nics_meets_the_total_capacity_bound():
    """NICs slower out than in: the cut bound (one shard out of a rank) is not reachable, the total-capacity one is."""
    links = tuple(Link(a, b, 2.0, 10.0) for a in range(3) for b in range(3) if a != b)
    ports = []
    for r in range(3):
        others = tuple(x for x in range(3) if x != r)
        ports += [SharedPort(f"nic{r}.tx", (r,), others, 5.0), SharedPort(f"nic{r}.rx", others, (r,), 10.0)]
    topo = Topology("unbalanced_nics", 3, links=links, shared_ports=tuple(ports), nodes=(0, 1, 2))
    p = pack_trees(topo, range(3))
    assert p.gap == pytest.approx(2.0)  # against the cut bound
    Z = 1 << 30
    assert p.tau * (Z / 3) / 1e3 == pytest.approx(lower_bound(Collective("allgather", 3), topo, Z).bandwidth_us)
    # a link and a slower NIC of the same extent keep their own rows under the swap symmetry of two ranks
    two = Topology("two", 2, links=(Link(0, 1, 2.0, 10.0), Link(1, 0, 2.0, 10.0)),
                   shared_ports=(SharedPort("a", (0,), (1,), 5.0), SharedPort("b", (1,), (0,), 5.0),
                                 SharedPort("c", (1,), (0,), 10.0), SharedPort("d", (0,), (1,), 10.0)), nodes=(0, 1))
    assert pack_trees(two, range(2)).gap == pytest.approx(1.0)
