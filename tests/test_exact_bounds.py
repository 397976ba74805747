"""The exact cut bounds (max flow on the flow network) against brute force: every cut with its exact LP capacity."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ccsynth.collectives.spec import Collective
from ccsynth.synth.bounds import lower_bound
from ccsynth.synth.cut_enumeration import brute_force_cut, lp_capacity_into
from ccsynth.synth.flows.network import flow_network
from ccsynth.synth.flows.symmetry import is_automorphism, translations
from ccsynth.topologies import catalog
from ccsynth.topologies.model import Link, SharedPort, Switch, Topology

Z = float(1 << 26)
KINDS = ("allgather", "reduce_scatter", "allreduce", "broadcast", "reduce", "gather", "scatter")
BWS = st.sampled_from([5.0, 10.0, 12.5, 25.0, 50.0])


@st.composite
def exact_topology(draw, min_n=2, max_n=8):
    """Random machines of the shapes the flow network models exactly: links, switches, nodes behind NICs."""
    n = draw(st.integers(min_n, max_n))
    style = draw(st.sampled_from(["links", "switches", "nic_links", "rails"]))
    links, switches, ports, nodes = [], [], [], ()
    if style == "links":
        # a ring backbone so the machine is connected, plus random extra links of random bandwidth
        pairs = {(a, (a + 1) % n) for a in range(n)} | {((a + 1) % n, a) for a in range(n) if draw(st.booleans())}
        pairs |= {(a, b) for a in range(n) for b in range(n) if a != b and draw(st.integers(0, 3)) == 0}
        links = [Link(a, b, 1.0, draw(BWS)) for a, b in sorted(pairs)]
    else:
        g = draw(st.integers(1, max(1, n // 2)))
        groups = [tuple(range(s, min(s + g, n))) for s in range(0, n, g)]
        nodes = tuple(k for k, grp in enumerate(groups) for _ in grp)
        intra = draw(BWS)
        switches = [Switch(f"nv{k}", grp, intra, 0.5) for k, grp in enumerate(groups) if len(grp) > 1]
        if style == "switches":
            # random switches joining one rank of every group (no pair twice)
            for i in range(g):
                members = tuple(grp[i] for grp in groups if i < len(grp))
                if len(members) > 1:
                    switches.append(Switch(f"rail{i}", members, draw(BWS), 2.0))
        elif style == "rails":
            members = tuple(grp[0] for grp in groups)
            if len(members) > 1:
                switches.append(Switch("rail", members, draw(BWS), 2.0))
            for grp in groups:
                for r in grp[1:]:
                    other = groups[(nodes[r] + 1) % len(groups)]
                    if other is not grp:
                        links += [Link(r, other[0], 2.0, draw(BWS)), Link(other[0], r, 2.0, draw(BWS))]
        else:
            # every cross pair linked; each node's traffic shares one NIC per direction (or two NICs per node)
            split = draw(st.booleans())
            for k, grp in enumerate(groups):
                others = tuple(r for r in range(n) if nodes[r] != k)
                if not others:
                    continue
                parts = [grp[: len(grp) // 2], grp[len(grp) // 2:]] if split and len(grp) > 1 else [grp]
                for j, part in enumerate(parts):
                    ports.append(SharedPort(f"nic{k}.{j}.tx", part, others, draw(BWS)))
                    ports.append(SharedPort(f"nic{k}.{j}.rx", others, part, draw(BWS)))
            # links at least as fast as the NICs (a NIC caps each of its links, as on NDv2)
            fast = max((p.bw for p in ports), default=10.0) * draw(st.sampled_from([1.0, 2.0]))
            links = [Link(a, b, 2.0, fast) for a in range(n) for b in range(n) if nodes[a] != nodes[b]]
    return Topology(f"rand-{style}", n, links=tuple(links), switches=tuple(switches), shared_ports=tuple(ports),
                    nodes=nodes)


@st.composite
def any_topology(draw, max_n=7):
    """Random machines with an arbitrary extra shared port: the network may only relax them."""
    t = draw(exact_topology(max_n=max_n))
    n = t.n_ranks
    srcs = tuple(sorted(draw(st.sets(st.integers(0, n - 1), min_size=1, max_size=n))))
    dsts = tuple(sorted(draw(st.sets(st.integers(0, n - 1), min_size=1, max_size=n))))
    cap = SharedPort("cap", srcs, dsts, draw(BWS))
    return Topology(t.name + "+cap", n, links=t.links, switches=t.switches, shared_ports=t.shared_ports + (cap,),
                    nodes=t.nodes)


def _cut_us(kind, topo, root):
    return lower_bound(Collective(kind, topo.n_ranks, root=root), topo, Z).details


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(exact_topology(), st.sampled_from(KINDS), st.data())
def test_exact_cut_bound_equals_brute_force(topo, kind, data):
    root = data.draw(st.integers(0, topo.n_ranks - 1)) if kind in ("broadcast", "reduce", "gather", "scatter") else 0
    assert flow_network(topo).exact, flow_network(topo).note
    details = _cut_us(kind, topo, root)
    ref = brute_force_cut(kind, topo, root).us_per_byte * Z
    assert details["cut_exact"]
    if math.isinf(ref):
        assert math.isinf(details["cut"])
    else:
        assert details["cut"] == pytest.approx(ref, rel=1e-9), details["cut_which"]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(any_topology(), st.sampled_from(("allgather", "reduce_scatter", "allreduce", "broadcast")))
def test_cut_bound_never_above_brute_force_and_exact_when_it_says_so(topo, kind):
    details = _cut_us(kind, topo, 0)
    ref = brute_force_cut(kind, topo, 0).us_per_byte * Z
    if math.isinf(ref):
        return
    assert details["cut"] <= ref * (1 + 1e-9)
    if details["cut_exact"]:
        assert details["cut"] == pytest.approx(ref, rel=1e-9)
    else:
        assert "relax" in details["cut_which"]


# About 2 minutes of LPs (2^14 cuts each). Covered by python -m ccsynth.bench.bench_synth, which compares every
# bound with brute force wherever it runs (up to 14 ranks) and records the result in docs/results.md.
@pytest.mark.slow
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(exact_topology(min_n=12, max_n=14), st.sampled_from(("allgather", "reduce_scatter", "allreduce")))
def test_exact_cut_bound_equals_brute_force_up_to_14_ranks(topo, kind):
    ref = brute_force_cut(kind, topo).us_per_byte * Z
    assert _cut_us(kind, topo, 0)["cut"] == pytest.approx(ref, rel=1e-9)


def two_clusters(k=9, fast=25.0, slow=3.75):
    """Two fully connected clusters of ``k`` ranks joined by one slow link pair (issue 11's 18-rank example)."""
    links = [Link(a, b, 0.7, fast) for base in (0, k) for a in range(base, base + k) for b in range(base, base + k)
             if a != b]
    links += [Link(0, k, 2.6, slow), Link(k, 0, 2.6, slow)]
    return Topology("two_clusters", 2 * k, links=tuple(links))


def test_two_clusters_bound_is_the_slow_link():
    t = two_clusters()
    b = lower_bound(Collective("allgather", 18), t, 64 << 20)
    # half of the data crosses the 3.75 GB/s link: 8,948 us (the old family of cuts reported 634 us)
    assert b.time_us == pytest.approx(0.5 * (64 << 20) / 3.75e3)
    assert (b.details["cut_exact"] and "9/18*Z" in b.which) or "1/2*Z" in b.which


def test_catalog_networks_are_exact():
    for t in (catalog.dgx1(), catalog.ndv2(3), catalog.dgx_a100(4), catalog.dgx_h100(2), catalog.torus((3, 4)),
              catalog.hierarchical([(4, 100, 0.5), (3, 25, 2.0)])):
        net = flow_network(t)
        assert net.exact, (t.name, net.note)


def test_lp_capacity_of_a_nic_cut():
    t = catalog.ndv2(2)
    assert lp_capacity_into(t, frozenset(range(8, 16))) == pytest.approx(12.5)


def test_translations_are_automorphisms():
    t = catalog.dgx_a100(4)
    g = translations(t)
    assert g.order == 32 and g.representatives == (0,)
    for shift in g.elements():
        assert is_automorphism(t, g.permutation(shift))
    nd = translations(catalog.ndv2(3))
    assert nd.order == 3 and len(nd.representatives) == 8


def test_large_machine_bound_is_fast_and_exact():
    import time

    t = catalog.dgx_a100(32)
    t0 = time.perf_counter()
    b = lower_bound(Collective("allgather", 256), t, 1 << 30)
    assert time.perf_counter() - t0 < 30
    # a node (8 ranks) receives 31/32 of the data through its 8 rails of 25 GB/s
    assert b.time_us == pytest.approx(31 / 32 * (1 << 30) / 200e3)
    assert b.details["cut_exact"]


@pytest.mark.parametrize("spec,exact", [("fat_tree:4x2:2", True), ("fat_tree:4x2:2:2", False)])
@pytest.mark.parametrize("kind", ["allgather", "reduce_scatter"])
def test_spine_networks_against_brute_force(spec, exact, kind):
    """A non-blocking spine keeps the network exact (no path joins two ranks of one node through it); capped
    up-links make it a relaxation, labelled so, and the bound is still a real cut's (here the best one)."""
    t = catalog.fat_tree(*[int(x) for x in spec.split(":")[1].split("x")],
                         leaf_nodes=int(spec.split(":")[2]),
                         oversubscription=float(spec.split(":")[3]) if spec.count(":") > 2 else 1.0)
    net = flow_network(t)
    assert net.exact is exact, net.note
    b = lower_bound(Collective(kind, t.n_ranks), t, 1e6)
    assert b.details["cut_exact"] is exact
    assert b.details["cut"] == pytest.approx(brute_force_cut(kind, t).us_per_byte * 1e6, rel=1e-9)


def test_spine_of_dgx_a100_joins_other_nodes_only():
    t = catalog.dgx_a100(3)
    net = flow_network(t)
    assert net.exact
    # every rank reaches every rank of another node through its rail ports: 7 of the 8 GPUs of a node through the
    # spine, one through its own rail leaf; the rail ports cap a node's inflow at 8 x 25 GB/s
    b = lower_bound(Collective("allgather", 24), t, 1 << 30)
    assert b.time_us == pytest.approx(2 / 3 * (1 << 30) / 200e3)
