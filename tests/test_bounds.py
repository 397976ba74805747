"""Tests of the lower bounds: closed forms, capacities, and validity against the simulator."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ccsynth.collectives.builder import ScheduleBuilder
from ccsynth.collectives.spec import KINDS, Collective
from ccsynth.collectives.verify import verify
from ccsynth.errors import CollectiveError, SizeError, TopologyError
from ccsynth.synth.bounds import FORMULAS, cover_capacity, lower_bound, per_collective_bound
from ccsynth.synth.simulate import simulate, simulate_sizes
from ccsynth.topologies import catalog
from ccsynth.topologies.model import Link, SharedPort, Switch, Topology

GB = 1e3
Z = float(1 << 26)


def uring(n, bw=10.0, alpha=1.0):
    return Topology(f"uring{n}", n, links=tuple(Link(i, (i + 1) % n, alpha, bw) for i in range(n)))


def switch(n, bw=10.0, alpha=1.0):
    return Topology(f"sw{n}", n, switches=(Switch("sw", tuple(range(n)), bw, alpha),))


def bound(kind, topo, size=Z, **kw):
    return lower_bound(Collective(kind, topo.n_ranks, **kw), topo, size)


# ------------------------------------------------------------- closed forms
@pytest.mark.parametrize("n", [2, 3, 5, 8, 12, 20])
def test_unidirectional_ring(n):
    B, a = 10.0, 1.0
    t = uring(n, B, a)
    assert bound("allgather", t).time_us == pytest.approx((n - 1) / n * Z / (B * GB))
    assert bound("reduce_scatter", t).time_us == pytest.approx((n - 1) / n * Z / (B * GB))
    ar = bound("allreduce", t)
    # the classic 2(n-1)/n * S/B of DESIGN.md
    assert ar.time_us == pytest.approx(2 * (n - 1) / n * Z / (B * GB))
    assert ar.which.startswith("aggregate") or n == 2
    # a chunk from q to q-1 crosses n-1 links: sum of hops = n * n(n-1)/2
    assert bound("alltoall", t).time_us == pytest.approx((n - 1) / 2 * Z / (B * GB))
    assert bound("broadcast", t).time_us == pytest.approx(Z / (B * GB))
    # latency: the farthest pair is n-1 hops away
    lat = bound("allgather", t, size=0)
    assert lat.time_us == lat.latency_us == pytest.approx((n - 1) * a)
    assert lat.which.startswith("latency")
    assert bound("broadcast", t, size=0, root=1).time_us == pytest.approx((n - 1) * a)


@pytest.mark.parametrize("n", [3, 4, 8, 13, 18])
def test_bidirectional_ring_from_catalog(n):
    t = catalog.ring(n, bw=25.0, alpha=0.5)
    B = 25.0
    assert bound("allgather", t).time_us == pytest.approx((n - 1) / (2 * n) * Z / (B * GB))
    assert bound("allreduce", t).time_us == pytest.approx((n - 1) / n * Z / (B * GB))
    # latency: n // 2 hops, each alpha plus the per-message overhead on both ends
    o = catalog.DEFAULT_OVERHEAD
    assert bound("allreduce", t, size=0).time_us == pytest.approx((n // 2) * (0.5 + 2 * o))
    no_overhead = catalog.ring(n, bw=25.0, alpha=0.5, overhead=0.0)
    assert bound("allreduce", no_overhead, size=0).time_us == pytest.approx((n // 2) * 0.5)


@pytest.mark.parametrize("n", [2, 4, 7, 10])
def test_fully_connected(n):
    B = 25.0
    t = catalog.fully_connected(n, bw=B, alpha=0.7)
    assert bound("allgather", t).time_us == pytest.approx(Z / (n * B * GB))
    assert bound("reduce_scatter", t).time_us == pytest.approx(Z / (n * B * GB))
    assert bound("alltoall", t).time_us == pytest.approx(Z / (n * B * GB))
    assert bound("allreduce", t).time_us == pytest.approx(2 * Z / (n * B * GB))
    # broadcast: the root's egress of (n-1) links carries Z at least once
    assert bound("broadcast", t).time_us == pytest.approx(Z / ((n - 1) * B * GB))
    assert bound("gather", t, size=0).time_us == pytest.approx(0.7 + 2 * catalog.DEFAULT_OVERHEAD)


@pytest.mark.parametrize("n", [4, 9, 16, 24])
def test_switch(n):
    B = 100.0
    t = switch(n, B, 0.5)
    assert bound("allgather", t).time_us == pytest.approx((n - 1) / n * Z / (B * GB))
    assert bound("alltoall", t).time_us == pytest.approx((n - 1) / n * Z / (B * GB))
    assert bound("allreduce", t).time_us == pytest.approx(2 * (n - 1) / n * Z / (B * GB))
    assert bound("reduce", t).time_us == pytest.approx(Z / (B * GB))


def test_shared_nic_between_nodes_is_the_binding_cut():
    t = catalog.ndv2(2)
    b = bound("allgather", t)
    # half the data (the other node's shards) enters a node through one 12.5 GB/s NIC
    assert b.time_us == pytest.approx(0.5 * Z / (12.5 * GB))
    assert b.which.startswith("cut") and "12.5 GB/s" in b.which
    assert bound("allreduce", t).time_us == pytest.approx(Z / (12.5 * GB))


def test_dgx1_allreduce_uses_the_total_nvlink_capacity():
    t = catalog.dgx1()
    # 8 GPUs x 6 NVLinks x 25 GB/s = 1200 GB/s of egress in total
    assert bound("allreduce", t).time_us == pytest.approx(14 * Z / (1200 * GB))


def test_allreduce_across_three_or_more_nodes_counts_the_gossip_between_nodes():
    # 2(p-1) Z must cross between p nodes; each node's NICs carry 8 x 25 GB/s (dgx_a100) or 12.5 GB/s (ndv2)
    b = bound("allreduce", catalog.dgx_a100(4))
    assert b.time_us == pytest.approx(6 * Z / (4 * 200 * GB))
    assert "between 4 groups (nodes)" in b.which
    assert bound("allreduce", catalog.ndv2(3)).time_us == pytest.approx(4 * Z / (3 * 12.5 * GB))
    # two nodes: the same as the per-node cut (a node receives Z)
    assert bound("allreduce", catalog.ndv2(2)).time_us == pytest.approx(Z / (12.5 * GB))
    # the other collectives gain nothing from grouping: their cut bounds already sum to (p-1) Z
    assert bound("allgather", catalog.dgx_a100(4)).time_us == pytest.approx(0.75 * Z / (200 * GB))


def _multi_node_topology(group_sizes, intra_bw, nic_bw, alpha=0.5, ib_alpha=2.0):
    """Nodes of the given sizes: a switch inside each, every cross pair linked behind a shared NIC per node."""
    starts = [sum(group_sizes[:g]) for g in range(len(group_sizes))]
    groups = [tuple(range(s0, s0 + k)) for s0, k in zip(starts, group_sizes)]
    n = sum(group_sizes)
    switches = tuple(Switch(f"nv{g}", m, intra_bw, alpha) for g, m in enumerate(groups) if len(m) > 1)
    links = tuple(Link(a, b, ib_alpha, nic_bw) for g in groups for a in g for b in range(n) if b not in g)
    ports = tuple(
        SharedPort(f"nic{g}.{d}", m, tuple(r for r in range(n) if r not in m), nic_bw)
        for g, m in enumerate(groups) for d in ("tx",)
    ) + tuple(SharedPort(f"nic{g}.rx", tuple(r for r in range(n) if r not in m), m, nic_bw) for g, m in enumerate(groups))
    nodes = tuple(g for g, m in enumerate(groups) for _ in m)
    return Topology(f"nodes{'-'.join(map(str, group_sizes))}", n, links=links, switches=switches,
                    shared_ports=ports, nodes=nodes)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.integers(1, 3), min_size=3, max_size=4),
    st.sampled_from([20.0, 100.0]),
    st.sampled_from([5.0, 12.5]),
    st.sampled_from([1 << 12, 1 << 24]),
)
def test_no_allreduce_beats_the_bound_across_nodes(group_sizes, intra_bw, nic_bw, size):
    from ccsynth.synth.baselines import applicable_baselines, make_baseline, min_chunk_factor

    topo = _multi_node_topology(group_sizes, intra_bw, nic_bw)
    n = topo.n_ranks
    scheds = [direct_allreduce(n), ring_allreduce(n)]
    for name in applicable_baselines(Collective("allreduce", n), topo):
        c = min_chunk_factor(name, "allreduce", topo)
        for cf in (c, 4 * c):
            scheds.append(make_baseline(name, Collective("allreduce", n, chunk_factor=cf), topo))
    best = min(simulate(s, topo, size).time_us for s in scheds)
    b = bound("allreduce", topo, size)
    assert best >= b.time_us * (1 - 1e-9)
    if size >= 1 << 24 and len(set(group_sizes)) == 1 and intra_bw >= 8 * nic_bw:
        # equal nodes behind NICs 8x slower than NVLink: the hierarchical baseline is within 1.04-1.09x (tight bound)
        assert best <= 1.15 * b.time_us, (best, b)


# ~30 s of MILPs. Covered by bench/bench_synth.py, which synthesizes allreduce across nodes (ndv2x2,
# dgx_a100x4, ndv2x10 at 1K/1M/64M) and reports each schedule's gap to the lower bound (docs/results.md).
@pytest.mark.slow
def test_synthesized_allreduce_across_four_nodes_is_near_the_group_bound():
    from ccsynth.synth.synthesize import synthesize

    topo = _multi_node_topology([2, 2, 2, 2], 100.0, 12.5)
    sched = synthesize(topo, Collective("allreduce", 8), size_bytes=1 << 24)
    r = simulate(sched, topo, 1 << 24)
    assert r.time_us >= r.lower_bound_us * (1 - 1e-9)
    assert r.gap < 1.05, r


def test_one_rank_and_errors():
    t1 = Topology("one", 1)
    b = lower_bound(Collective("allreduce", 1), t1, 1 << 20)
    assert b.time_us == 0.0 and b.which.startswith("trivial")
    with pytest.raises(TopologyError, match="4 ranks.*collective has 5"):
        lower_bound(Collective("allgather", 5), uring(4), 10)
    with pytest.raises(SizeError):
        lower_bound(Collective("allgather", 4), uring(4), -5)


def test_bound_is_linear_in_size_above_latency():
    t = catalog.dgx1()
    b1, b2 = bound("allgather", t, 1 << 24), bound("allgather", t, 1 << 25)
    assert b2.bandwidth_us == pytest.approx(2 * b1.bandwidth_us)
    assert b1.latency_us == b2.latency_us > 0
    assert b1.to_dict()["time_us"] == b1.time_us
    assert set(b1.details) >= {"cut", "aggregate", "latency"}


def test_formulas_cover_every_kind():
    assert set(FORMULAS) == set(KINDS)
    for kind in KINDS:
        lines = per_collective_bound(kind)
        assert len(lines) == 3 and lines[0].startswith("cut")
    assert per_collective_bound("all-reduce") == FORMULAS["allreduce"]
    with pytest.raises(CollectiveError):
        per_collective_bound("allscatter")


def test_unreachable_rank_gives_an_infinite_bound():
    t = Topology("oneway", 3, links=(Link(0, 1, 1.0, 10.0), Link(1, 2, 1.0, 10.0)))
    assert bound("allgather", t).time_us == float("inf")
    assert bound("broadcast", t).time_us == pytest.approx(Z / (10 * GB))


# --------------------------------------------------------------- capacities
def test_cover_capacity_exact_cases():
    t = switch(6, 10.0)
    rbw = t.resource_bw
    half = [t.connection(a, b) for a in range(3) for b in range(3, 6)]
    assert cover_capacity(half, rbw) == pytest.approx(30.0)
    uneven = [t.connection(a, b) for a in range(1) for b in range(1, 6)]
    assert cover_capacity(uneven, rbw) == pytest.approx(10.0)
    nd = catalog.ndv2(2)
    into_node1 = [c for c in nd.connections() if nd.nodes[c.src] == 0 and nd.nodes[c.dst] == 1]
    assert cover_capacity(into_node1, nd.resource_bw) == pytest.approx(12.5)
    assert cover_capacity([], rbw) == 0.0
    r = uring(4, 7.0)
    assert cover_capacity(r.connections(), r.resource_bw) == pytest.approx(28.0)


def _lp_max_rate(conns, rbw):
    """The exact packing LP (max total rate under every resource), solved by HiGHS."""
    import highspy

    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    x = [h.addVariable(lb=0.0, ub=c.bw) for c in conns]
    by_res = {}
    for v, c in zip(x, conns):
        for r in c.resources:
            by_res.setdefault(r, []).append(v)
    for r, vs in by_res.items():
        h.addConstr(sum(vs[1:], vs[0]) <= rbw[r])
    h.maximize(sum(x[1:], x[0]))
    return h.getObjectiveValue()


@st.composite
def random_topology(draw, max_n=5):
    n = draw(st.integers(2, max_n))
    bws = st.sampled_from([5.0, 10.0, 25.0, 50.0])
    alphas = st.sampled_from([0.0, 0.3, 1.0, 2.6])
    links, switches, ports = [], [], []
    style = draw(st.sampled_from(["full", "switch", "nodes"]))
    if style == "full":
        links = [Link(a, b, draw(alphas), draw(bws)) for a in range(n) for b in range(n) if a != b]
    elif style == "switch":
        switches = [Switch("sw", tuple(range(n)), draw(bws), draw(alphas))]
    else:
        # two "nodes" on switches, every cross pair linked, the links behind a shared NIC per node
        half = max(1, n // 2)
        groups = [tuple(range(half)), tuple(range(half, n))]
        switches = [Switch(f"nv{k}", g, draw(bws), draw(alphas)) for k, g in enumerate(groups) if len(g) > 1]
        ib_alpha, ib_bw = draw(alphas), draw(bws)
        links = [Link(a, b, ib_alpha, ib_bw) for g, o in (groups, groups[::-1]) for a in g for b in o]
        nic = draw(bws)
        ports = [SharedPort(f"nic{k}.tx", groups[k], groups[1 - k], nic) for k in range(2)]
    if style != "nodes" and draw(st.booleans()):
        srcs = tuple(sorted(draw(st.sets(st.integers(0, n - 1), min_size=1, max_size=n))))
        dsts = tuple(sorted(draw(st.sets(st.integers(0, n - 1), min_size=1, max_size=n))))
        ports.append(SharedPort("cap", srcs, dsts, draw(bws)))
    return Topology("rand", n, links=tuple(links), switches=tuple(switches), shared_ports=tuple(ports))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_topology(max_n=6), st.data())
def test_cover_capacity_never_below_the_exact_lp(topo, data):
    conns = topo.connections()
    pick = data.draw(st.lists(st.sampled_from(conns), min_size=1, max_size=len(conns), unique=True))
    assert cover_capacity(pick, topo.resource_bw) >= _lp_max_rate(pick, topo.resource_bw) * (1 - 1e-9)


# ------------------------------------------ validity: no schedule beats it
def direct_allgather(n, c):
    b = ScheduleBuilder(Collective("allgather", n, chunk_factor=c), "direct_ag")
    for r in range(n):
        b.copy(r, ("i", 0, c), ("o", r * c, c))
    for k in range(1, n):
        for q in range(n):
            for j in range(c):
                b.transfer(q, (q + k) % n, ("i", j), ("o", q * c + j))
    return b.build()


def direct_allreduce(n):
    """Reduce-scatter then allgather, every piece sent straight to its owner (chunk factor n)."""
    b = ScheduleBuilder(Collective("allreduce", n, chunk_factor=n), "direct_ar", scratch_chunks=n)
    for d in range(n):
        b.copy(d, ("i", d), ("o", d))
    for k in range(1, n):
        for q in range(n):
            d = (q + k) % n
            b.transfer(q, d, ("i", d), ("s", q))
    for d in range(n):
        for q in range(n):
            if q != d:
                b.reduce(d, ("s", q), ("o", d))
    for k in range(1, n):
        for d in range(n):
            b.transfer(d, (d + k) % n, ("o", d), ("o", d))
    return b.build()


def ring_allreduce(n):
    """Classic ring allreduce on ranks 0 -> 1 -> ... -> n-1 -> 0 (chunk factor n)."""
    b = ScheduleBuilder(Collective("allreduce", n, chunk_factor=n), "ring_ar", scratch_chunks=n)
    for r in range(n):
        b.copy(r, ("i", 0, n), ("o", 0, n))
    for step in range(n - 1):
        for r in range(n):
            p = (r - step) % n
            b.transfer(r, (r + 1) % n, ("o", p), ("s", p))
            b.reduce((r + 1) % n, ("s", p), ("o", p))
    for step in range(n - 1):
        for r in range(n):
            p = (r + 1 - step) % n
            b.transfer(r, (r + 1) % n, ("o", p), ("o", p))
    return b.build()


def test_hand_built_schedules_are_correct():
    for s in (direct_allgather(4, 2), direct_allreduce(4), ring_allreduce(5)):
        verify(s)


def test_bounds_are_tight_for_optimal_schedules():
    n, B, a = 5, 10.0, 1.0
    r = simulate(ring_allreduce(n), uring(n, B, a), Z)
    assert r.time_us == pytest.approx(2 * (n - 1) * (a + Z / n / (B * GB)))
    assert r.lower_bound_us == pytest.approx(2 * (n - 1) / n * Z / (B * GB))
    assert 1 < r.gap < 1.001
    t = catalog.fully_connected(4, bw=B, alpha=a, overhead=0.0)
    r = simulate(direct_allreduce(4), t, Z)
    assert r.time_us == pytest.approx(2 * a + 2 * Z / (4 * B * GB))
    assert 1 < r.gap < 1.001
    r = simulate(direct_allgather(6, 1), switch(6, B, a), Z)
    assert r.time_us == pytest.approx(a + 5 / 6 * Z / (B * GB))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    random_topology(max_n=5),
    st.sampled_from(["allgather", "allreduce"]),
    st.integers(1, 2),
    st.sampled_from([0, 1000, 1 << 16, 1 << 22, 3 << 26]),
)
def test_no_direct_schedule_beats_the_bound(topo, kind, c, size):
    n = topo.n_ranks
    sched = direct_allgather(n, c) if kind == "allgather" else direct_allreduce(n)
    for r in simulate_sizes(sched, topo, [size, size + 12345]):
        assert r.time_us >= r.lower_bound_us * (1 - 1e-9)


def _baseline_cases():
    from ccsynth.synth.baselines import applicable_baselines, min_chunk_factor

    out = []
    topos = [uring(5, 10.0, 1.0), catalog.torus((2, 3)), catalog.dgx1(), catalog.ndv2(2),
             catalog.hierarchical([(2, 50, 0.5), (3, 20, 2.0)])]
    for topo, kind in itertools.product(topos, KINDS):
        roots = (0, topo.n_ranks - 1) if kind in ("broadcast", "reduce", "gather", "scatter") else (0,)
        for root in roots:
            for name in applicable_baselines(Collective(kind, topo.n_ranks, root=root), topo):
                c = min_chunk_factor(name, kind, topo)
                out.append((topo, Collective(kind, topo.n_ranks, chunk_factor=c, root=root), name))
    return out


def test_no_baseline_beats_the_bound():
    from ccsynth.synth.baselines import make_baseline

    cases = _baseline_cases()
    assert len(cases) > 50
    for topo, coll, name in cases:
        sched = make_baseline(name, coll, topo)
        for r in simulate_sizes(sched, topo, [0, 4096, 1 << 26]):
            assert r.time_us >= r.lower_bound_us * (1 - 1e-9), (topo.name, coll, name, r)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_topology(max_n=5), st.integers(9, 11), st.sampled_from(["allgather", "alltoall", "broadcast"]))
def test_vectorised_cut_capacities_are_upper_bounds(small, n, kind):
    # the exhaustive search for 9..16 ranks estimates capacities cheaply: they must stay >= the exact LP
    from ccsynth.synth.bounds import _net, _vectorised_top_cuts

    topo = Topology(
        "grown", n,
        links=small.links + tuple(Link(a, (a + 1) % n, 1.0, 5.0) for a in range(small.n_ranks - 1, n)),
        switches=small.switches, shared_ports=small.shared_ports,
    )
    conns = topo.connections()
    for mask, (cap_in, cap_out) in _vectorised_top_cuts(kind, n, 0, _net(topo)).items():
        inside = {r for r in range(n) if (mask >> r) & 1}
        into = [c for c in conns if c.dst in inside and c.src not in inside]
        out = [c for c in conns if c.src in inside and c.dst not in inside]
        assert cap_in >= (_lp_max_rate(into, topo.resource_bw) if into else 0.0) * (1 - 1e-9)
        assert cap_out >= (_lp_max_rate(out, topo.resource_bw) if out else 0.0) * (1 - 1e-9)
