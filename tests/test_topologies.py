"""Tests of the topology catalog, spec names, JSON files and TACCL import (ccsynth.formats)."""

from __future__ import annotations

import copy
import itertools
import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ccsynth.errors import TopologyError
from ccsynth.formats import files as formats_files
from ccsynth.formats.taccl_topology import load_taccl_topology
from ccsynth.topologies import (
    Dimension,
    Link,
    SharedPort,
    Switch,
    Topology,
    dgx1,
    dgx2,
    dgx_a100,
    dgx_h100,
    fat_tree,
    fully_connected,
    get_topology,
    hierarchical,
    list_topologies,
    load_topology,
    ndv2,
    ring,
    save_topology,
    topology_from_dict,
    topology_to_dict,
    torus,
)

DATA = Path(__file__).parent / "data"

# The DGX-1 NVLink count matrix from DESIGN.md, typed in again here so that the
# catalog's copy is checked against an independent one.
DGX1_MATRIX = [
    [0, 2, 1, 1, 2, 0, 0, 0],
    [2, 0, 1, 2, 0, 1, 0, 0],
    [1, 1, 0, 2, 0, 0, 2, 0],
    [1, 2, 2, 0, 0, 0, 0, 1],
    [2, 0, 0, 0, 0, 2, 1, 1],
    [0, 1, 0, 0, 2, 0, 1, 2],
    [0, 0, 2, 0, 1, 1, 0, 2],
    [0, 0, 0, 1, 1, 2, 2, 0],
]

# spec -> (n_ranks, n_nodes, number of directed connections)
CATALOG = {
    "dgx1": (8, 1, 32),
    "dgx2": (16, 1, 16 * 15),
    "ndv2": (8, 1, 32),
    "ndv2x2": (16, 2, 2 * 32 + 16 * 8),
    "ndv2x3": (24, 3, 3 * 32 + 24 * 16),
    "dgx_a100": (8, 1, 56),
    # rails and spine: every GPU reaches every GPU of the other nodes (same rail on its leaf, others through the spine)
    "dgx_a100x4": (32, 4, 4 * 56 + 32 * 24),
    "dgx_h100": (8, 1, 56),
    "dgx_h100x2": (16, 2, 2 * 56 + 16 * 8),
    "fat_tree:4x2": (8, 4, 4 * 2 + 8 * 6),
    "fat_tree:6x4:2:2": (24, 6, 6 * 12 + 24 * 20),
    "fat_tree:6x1:4": (6, 6, 6 * 5),
    "shared_nic:4x4": (16, 4, 4 * 12 + 16 * 12),
    "shared_nic:3x1": (3, 3, 6),
    "ring:2": (2, 1, 2),
    "ring:8": (8, 1, 16),
    "fully_connected:5": (5, 1, 20),
    "torus:4x4": (16, 1, 64),
    "torus:4x2x3": (24, 1, 24 * (2 + 1 + 2)),
    "hierarchical:4x8x4@200,100,50": (128, 32, 128 * (3 + 7 + 3)),
}


@pytest.mark.parametrize("spec", sorted(CATALOG))
def test_catalog_entry_builds_with_expected_shape(spec):
    n, n_nodes, n_conn = CATALOG[spec]
    t = get_topology(spec)
    assert t.name == spec
    assert t.n_ranks == n
    assert t.n_nodes == n_nodes
    assert len(t.connections()) == n_conn
    assert t.is_strongly_connected()
    assert t.description and t.sources
    # the canonical name builds the same topology again
    assert get_topology(t.name) == t
    # every connection's resources are real bandwidth constraints
    names = {c.name for c in t.bandwidth_constraints()}
    for c in t.connections():
        assert set(c.resources) <= names


def test_dgx1_matches_the_nvlink_matrix():
    t = dgx1()
    pairs = [(i, j) for i in range(8) for j in range(8) if DGX1_MATRIX[i][j] > 0]
    assert len(t.links) == len(pairs) == 32
    for i, j in itertools.product(range(8), repeat=2):
        c = t.connection(i, j)
        if DGX1_MATRIX[i][j] == 0:
            assert c is None
        else:
            assert c.bw == 25.0 * DGX1_MATRIX[i][j]
            assert c.alpha == pytest.approx(0.7)
    # six NVLinks per GPU: 150 GB/s out of every GPU
    for r in range(8):
        assert sum(t.connection(r, d).bw for d in t.neighbors_out(r)) == 150.0
    doubled = [l for l in t.links if l.bw == 50.0]
    assert len(doubled) == 16  # 8 pairs, both directions


def test_dgx2_is_one_nvswitch():
    t = dgx2()
    assert [s.name for s in t.switches] == ["nvswitch"]
    assert t.connection(0, 15).bw == 150.0
    ports = [c for c in t.bandwidth_constraints() if c.name.startswith("nvswitch:tx")]
    assert len(ports) == 16 and all(p.bw == 150.0 for p in ports)


def test_ndv2x2_nic_is_shared():
    t = ndv2(2)
    assert t.nodes == (0,) * 8 + (1,) * 8
    constraints = {c.name: c for c in t.bandwidth_constraints()}
    tx0 = constraints["nic0.tx"]
    assert tx0.srcs == frozenset(range(8)) and tx0.dsts == frozenset(range(8, 16)) and tx0.bw == 12.5
    rx1 = constraints["nic1.rx"]
    assert rx1.srcs == frozenset(range(8)) and rx1.dsts == frozenset(range(8, 16))
    # an inter-node transfer uses its link and both NICs; an intra-node one neither NIC
    c = t.connection(3, 12)
    assert c.alpha == pytest.approx(2.6) and c.bw == 12.5
    assert set(c.resources) == {"link:3->12", "nic0.tx", "nic1.rx"}
    assert t.connection(8, 9).resources == ("link:8->9",)
    assert t.connection(8, 9).bw == 50.0
    # ndv2 with one node is dgx1 under another name
    assert ndv2(1).links == dgx1().links and ndv2(1).name == "ndv2"


def test_reversed_flips_shared_ports():
    t = ndv2(2)
    r = t.reversed()
    port = {p.name: p for p in r.shared_ports}["nic0.tx"]
    assert port.srcs == tuple(range(8, 16)) and port.dsts == tuple(range(8))
    assert set(r.connection(12, 3).resources) == {"link:12->3", "nic0.tx", "nic1.rx"}
    assert r.connection(3, 12).resources == ("link:3->12", "nic0.rx", "nic1.tx")
    assert r.reversed() == t


@pytest.mark.parametrize("build, nvswitch, nic", [(dgx_a100, 300.0, 25.0), (dgx_h100, 450.0, 50.0)])
def test_dgx_rails(build, nvswitch, nic):
    t = build(3)
    assert t.n_ranks == 24
    assert {s.name for s in t.switches} == {f"nvswitch{k}" for k in range(3)} | {f"rail{i}" for i in range(8)}
    rail2 = {s.name: s for s in t.switches}["rail2"]
    assert rail2.ranks == (2, 10, 18) and rail2.bw == nic
    assert t.connection(2, 18).via == "rail2" and t.connection(2, 18).bw == nic
    assert t.connection(2, 18).alpha == 2.6  # same rail: one hop, on the leaf
    assert t.connection(2, 5).bw == nvswitch
    # other rail, other node: through the spine, on both NICs, two switch hops more
    c = t.connection(2, 13)
    assert c.via == "spine" and c.bw == nic and c.alpha == pytest.approx(2.6 + 2 * 0.3) and c.overhead == 5.7
    assert c.resources == ("rail2:tx2", "rail5:rx13")
    assert t.connection(2, 18).resources == ("rail2:tx2", "rail2:rx18")  # the same NIC port as the spine traffic
    assert [d.size for d in t.dims] == [8, 3]
    single = build(1)
    assert [s.name for s in single.switches] == ["nvswitch0"] and not single.spines


@pytest.mark.parametrize("build, su", [(dgx_a100, 20), (dgx_h100, 32)])
def test_dgx_scalable_units(build, su):
    # beyond one scalable unit each SU has its own rail leaves; same rail, other SU: through the spine
    t = build(su + 2)
    leaves = [s for s in t.switches if "rail" in s.name]
    assert len(leaves) == 16 and leaves[0].name == "su0.rail0" and len(leaves[0].ranks) == su
    last = {s.name: s for s in leaves}["su1.rail3"]
    assert last.ranks == (8 * su + 3, 8 * su + 11)
    assert t.connection(3, 8 * (su - 1) + 3).via == "su0.rail3"
    assert t.connection(3, 8 * su + 3).via == "spine"
    assert t.spines[0].uplink_bw is None  # non-blocking


def test_catalog_at_scale_builds_fast_and_counts_its_connections():
    import time

    start = time.perf_counter()
    t = get_topology("dgx_a100x128")
    built = time.perf_counter() - start
    assert t.n_ranks == 1024 and built < 2.0
    assert t.connection_count() == 1024 * 1023  # every pair: NVSwitch, a rail leaf or the spine
    kinds = {(c.kind, c.alpha): c.count for c in t.connection_classes()}
    assert kinds[("switch", 0.7)] == 128 * 56
    assert kinds[("spine", 3.2)] + kinds[("switch", 2.6)] == 1024 * 1016
    assert t.connection(5, 1021).via == "spine" and t.connection(5, 1021).resources == ("su0.rail5:tx5", "su6.rail5:rx1021")
    assert len(t.connections_from(0)) == 1023
    assert get_topology(t.name) == t
    h = get_topology("dgx_h100x32")
    assert h.n_ranks == 256 and h.connection_count() == 256 * 255 and len(h.spines[0].leaves) == 8


def test_fat_tree_oversubscription_caps_the_up_links():
    t = fat_tree(8, 4, leaf_nodes=4, oversubscription=2)
    assert t.name == "fat_tree:8x4:4:2" and get_topology(t.name) == t
    assert t.spines[0].uplink_bw == 4 * 25 / 2
    same_leaf, other_rail, other_group = t.connection(0, 4), t.connection(0, 5), t.connection(0, 16)
    assert same_leaf.via == "su0.rail0" and same_leaf.resources == ("su0.rail0:tx0", "su0.rail0:rx4")
    assert other_rail.resources == ("su0.rail0:tx0", "su0.rail1:rx5", "spine:up.su0.rail0", "spine:down.su0.rail1")
    assert other_group.via == "spine" and other_group.bw == 25.0
    caps = {c.name: c for c in t.bandwidth_constraints()}
    assert caps["spine:up.su0.rail0"].bw == 50.0 and caps["spine:up.su0.rail0"].srcs == frozenset({0, 4, 8, 12})
    assert t.resource_bw["spine:down.su1.rail3"] == 50.0
    assert fat_tree(8, 4).spines[0].uplink_bw is None  # 1:1 is non-blocking
    assert get_topology("fattree:8x4@100,50/1,3").connection(0, 5).alpha == 3.6
    one_gpu = fat_tree(3, 1)
    assert [s.name for s in one_gpu.switches] == ["rail0"] and not one_gpu.spines


def test_shared_nic_hosts_share_one_nic_per_host():
    t = get_topology("shared_nic:5x4")
    assert t.name == "shared_nic:5x4" and t.nodes[4] == 1
    inside, across = t.connection(0, 3), t.connection(1, 6)
    assert inside.via == "host0" and inside.bw == 150.0 and inside.alpha == 0.7
    assert across.bw == 12.5 and across.alpha == 2.6 and across.resources == ("link:1->6", "nic0.tx", "nic1.rx")
    caps = {c.name: c for c in t.bandwidth_constraints()}
    assert caps["nic0.tx"].bw == 12.5 and caps["nic0.tx"].srcs == frozenset(range(4))
    custom = get_topology("shared-nic:2x8@300,25/1,3")
    assert custom.name == "shared_nic:2x8@300,25/1,3" and custom.connection(0, 8).alpha == 3.0
    with pytest.raises(TopologyError, match="HOSTSxGPUS"):
        get_topology("shared_nic:16")
    with pytest.raises(TopologyError, match="two bandwidths"):
        get_topology("shared_nic:2x4@100")


def test_ring_and_fully_connected():
    r2 = ring(2)
    assert [(l.src, l.dst) for l in r2.links] == [(0, 1), (1, 0)]
    r5 = ring(5, bw=10, alpha=1.5)
    assert r5.name == "ring:5@10/1.5"
    assert all(set(r5.neighbors_out(i)) == {(i + 1) % 5, (i - 1) % 5} for i in range(5))
    # alpha + bytes / bw + the per-message overhead on both ends
    assert r5.connection(0, 4).time_us(10_000) == pytest.approx(1.5 + 1.0 + 2 * 1.35)
    assert ring(5, bw=10, alpha=1.5, overhead=0).connection(0, 4).time_us(10_000) == pytest.approx(2.5)
    f = fully_connected(4)
    assert all(f.has_connection(a, b) for a in range(4) for b in range(4) if a != b)


def test_torus_links_and_dims():
    t = torus((4, 4))
    assert len(t.links) == 64
    for r in range(16):
        x, y = t.coords(r)
        expect = {((x + dx) % 4) + 4 * y for dx in (1, -1)} | {x + 4 * ((y + dy) % 4) for dy in (1, -1)}
        assert set(t.neighbors_out(r)) == expect
    t2 = torus((2, 3), bw=(10, 20))
    assert set(t2.neighbors_out(0)) == {1, 2, 4}
    assert t2.connection(0, 1).bw == 10 and t2.connection(0, 2).bw == 20
    assert [(d.size, d.bw) for d in t2.dims] == [(2, 10.0), (3, 40.0)]
    assert t2.name == "torus:2x3@10,20"
    assert len(torus((4, 1)).links) == 8  # the size-1 dimension adds nothing


def test_hierarchical_groups():
    t = hierarchical([(2, 100, 0.5), (3, 20), (2, 5, 3.0)])
    assert t.n_ranks == 12
    assert t.nodes == tuple(r // 2 for r in range(12))
    assert [d.bw for d in t.dims] == [100.0, 20.0, 5.0]
    for sw in t.switches:
        d = int(sw.name.split(".")[0][1:])
        coords = [t.coords(r) for r in sw.ranks]
        # members differ exactly in coordinate d
        assert len({c[d] for c in coords}) == t.dims[d].size
        assert len({c[:d] + c[d + 1:] for c in coords}) == 1
    assert t.connection(0, 2).via == "d1.g0" and t.connection(0, 2).bw == 20.0
    assert t.connection(0, 2).alpha == pytest.approx(2.6)  # default alpha above dimension 0
    assert t.connection(1, 7).via == "d2.g1"
    assert not t.has_connection(0, 3)  # differs in two coordinates
    assert t.name == "hierarchical:2x3x2@100,20,5/0.5,2.6,3"
    assert get_topology(t.name) == t


@pytest.mark.parametrize(
    "build, words",
    [
        (lambda: ring(1), "at least 2"),
        (lambda: ring(2.5), "must be an integer"),
        (lambda: ring(4, bw=0), "positive"),
        (lambda: ring(4, alpha=-1), "non-negative"),
        (lambda: fully_connected(True), "must be an integer"),
        (lambda: fully_connected(100000), "more than ccsynth builds"),
        (lambda: torus(()), "at least one dimension"),
        (lambda: torus((1, 1)), "needs at least 2"),
        (lambda: torus((4, 4), bw=(1, 2, 3)), "one per dimension"),
        (lambda: hierarchical([]), "at least one dimension"),
        (lambda: hierarchical([(4,)]), "(size, GB/s"),
        (lambda: hierarchical([(4, -5)]), "positive"),
        (lambda: ndv2(0), "at least 1"),
        (lambda: dgx_a100(1000), "more than ccsynth builds"),
    ],
)
def test_catalog_rejects_silly_inputs(build, words):
    with pytest.raises(TopologyError, match=None) as e:
        build()
    assert words in str(e.value)


# ------------------------------------------------------------------ spec names
@pytest.mark.parametrize(
    "spec, name",
    [
        ("ndv2x1", "ndv2"),
        ("NDv2x2", "ndv2x2"),
        ("dgx-a100x4", "dgx_a100x4"),
        ("full:4", "fully_connected:4"),
        ("ring:8@25/0.7", "ring:8"),
        ("torus:4x4@25,25", "torus:4x4"),
        ("torus:4x4x2", "torus:4x4x2"),
        ("hierarchical:4x8x4@200,100,50/0.7,2.6,2.6", "hierarchical:4x8x4@200,100,50"),
        ("hierarchical:4x2@100", "hierarchical:4x2@100,100"),
        ("hierarchical:4x2@100/1", "hierarchical:4x2@100,100/1,1"),
    ],
)
def test_spec_canonical_names(spec, name):
    t = get_topology(spec)
    assert t.name == name
    assert get_topology(name) == t


@pytest.mark.parametrize(
    "spec, words",
    [
        ("dgx3", ["unknown topology 'dgx3'", "did you mean 'dgx2'", "ndv2", "hierarchical"]),
        ("rnig:8", ["did you mean 'ring'"]),
        ("zzz", ["unknown topology", "Valid names: dgx1"]),
        ("ring", ["needs sizes", "ring:8"]),
        ("ring:x", ["ring needs sizes"]),
        ("ring:4@1,2", ["one bandwidth"]),
        ("ring:4@fast", ["numbers separated by commas"]),
        ("dgx1x2", ["single machine", "ndv2xN"]),
        ("hierarchical:4x4", ["needs the GB/s"]),
        ("hierarchical:4x4@1,2,3", ["give 1 or 2 bandwidths"]),
        ("ndv2x0", ["at least 1"]),
        ("", ["non-empty"]),
        ("missing_file.json", ["cannot read", "missing_file.json"]),
    ],
)
def test_spec_errors(spec, words):
    with pytest.raises(TopologyError) as e:
        get_topology(spec)
    for w in words:
        assert w in str(e.value)


def test_list_topologies_rows_parse():
    rows = list_topologies()
    assert all(isinstance(a, str) and isinstance(b, str) and b for a, b in rows)
    specs = [spec for spec, _ in rows if not spec.startswith("PATH")]
    assert {"dgx1", "dgx2", "ndv2x2", "dgx_a100x4", "ring:8", "torus:4x4"} <= set(specs)
    for spec in specs:
        assert get_topology(spec).name == spec
    # ccsynth topo list shows the foreign files too
    every = formats_files.list_topologies()
    assert every[: len(rows)] == rows and "TACCL" in every[-1][1]


# ------------------------------------------------------------------ JSON files
@pytest.mark.parametrize("spec", sorted(CATALOG))
def test_save_load_catalog(spec, tmp_path):
    t = get_topology(spec)
    path = tmp_path / "t.json"
    save_topology(t, path)
    back = load_topology(path)
    assert back == t and back.sources == t.sources
    assert get_topology(str(path)) == t


def test_sample_file_v1():
    t = load_topology(DATA / "topology_v1_sample.json")
    assert t.name == "two-nodes-of-two" and t.n_ranks == 4 and t.nodes == (0, 0, 1, 1)
    c = t.connection(0, 2)
    assert (c.alpha, c.bw, c.resources) == (2.6, 12.5, ("link:0->2", "nic0.tx"))
    assert t.connection(3, 2).via == "sw1" and t.connection(3, 2).bw == 100.0
    assert [d.name for d in t.dims] == ["local", "net"]
    d = json.loads((DATA / "topology_v1_sample.json").read_text())
    d.pop("_comment")
    assert topology_to_dict(t) == d


@st.composite
def topologies(draw):
    n = draw(st.integers(2, 6))
    bw = st.floats(1e-3, 1e4, allow_nan=False, allow_infinity=False)
    alpha = st.floats(0, 100, allow_nan=False, allow_infinity=False)
    ranks = list(range(n))
    # switches over disjoint groups; links only between ranks of different groups
    order = draw(st.permutations(ranks))
    cuts = sorted(draw(st.sets(st.integers(1, n - 1), max_size=2)))
    groups = [order[a:b] for a, b in zip([0, *cuts], [*cuts, n])]
    switches = []
    group_of = {}
    for g_id, group in enumerate(groups):
        for r in group:
            group_of[r] = g_id
        if len(group) >= 2 and draw(st.booleans()):
            switches.append(Switch(f"sw{g_id}", tuple(group), draw(bw), draw(alpha)))
    switched = {r for s in switches for r in s.ranks}
    pairs = [(a, b) for a in ranks for b in ranks if a != b and not (a in switched and group_of[a] == group_of[b])]
    chosen = draw(st.lists(st.sampled_from(pairs), unique=True, max_size=len(pairs))) if pairs else []
    links = [Link(a, b, draw(alpha), draw(bw)) for a, b in chosen]
    ports = []
    for k in range(draw(st.integers(0, 2))):
        srcs = draw(st.lists(st.sampled_from(ranks), min_size=1, max_size=n, unique=True))
        dsts = draw(st.lists(st.sampled_from(ranks), min_size=1, max_size=n, unique=True))
        ports.append(SharedPort(f"port{k}", tuple(srcs), tuple(dsts), draw(bw)))
    nodes = tuple(draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)))
    dims = ()
    if draw(st.booleans()):
        a = draw(st.sampled_from([d for d in range(1, n + 1) if n % d == 0]))
        dims = (Dimension("x", a, draw(bw), draw(alpha)), Dimension("y", n // a, draw(bw), draw(alpha)))
    name = draw(st.text(min_size=1, max_size=12))
    sources = tuple(draw(st.lists(st.text(max_size=20), max_size=2)))
    return Topology(name, n, tuple(links), tuple(switches), tuple(ports), nodes, dims, draw(st.text(max_size=30)), sources)


@settings(max_examples=60, deadline=None)
@given(topologies())
def test_json_round_trip(t):
    d = topology_to_dict(t)
    back = topology_from_dict(json.loads(json.dumps(d)))
    assert back == t
    assert back.sources == t.sources
    assert topology_to_dict(back) == d
    assert topology_to_dict(topology_from_dict(d)) == d


def test_per_call_overhead_round_trips_and_is_left_out_when_zero():
    t = replace(_sample_topology(), local_bw=4.0, overhead_scope="rank", call_overhead=2.5, eager_limit=8000.0,
                rendezvous_alpha=3.0, local_overhead=1.5)
    d = topology_to_dict(t)
    assert d["call_overhead_us"] == 2.5 and topology_from_dict(json.loads(json.dumps(d))) == t
    assert (d["eager_limit_bytes"], d["rendezvous_alpha_us"], d["local_overhead_us"]) == (8000.0, 3.0, 1.5)
    assert t.message_alpha(1.0, 8000) == 1.0 and t.message_alpha(1.0, 8001) == 4.0
    assert "call_overhead_us" not in topology_to_dict(_sample_topology())
    assert topology_from_dict(topology_to_dict(_sample_topology())).call_overhead == 0.0
    with pytest.raises(TopologyError, match="per-call overhead"):
        replace(t, call_overhead=float("inf"))


def _sample_topology() -> Topology:
    return topology_from_dict(_sample_dict())


def _sample_dict() -> dict:
    return topology_to_dict(
        Topology(
            "sample",
            4,
            links=(Link(0, 1, 1.0, 10.0), Link(1, 0, 1.0, 10.0), Link(2, 3, 1.0, 10.0), Link(3, 2, 1.0, 10.0)),
            switches=(Switch("sw", (0, 2), 50.0, 0.5),),
            shared_ports=(SharedPort("p", (0, 1), (2, 3), 5.0),),
            dims=(Dimension("a", 2, 10.0, 1.0), Dimension("b", 2, 5.0, 1.0)),
        )
    )


def _set(path, value):
    def mutate(d):
        *head, last = path
        for key in head:
            d = d[key]
        d[last] = value

    return mutate


def _delete(path):
    def mutate(d):
        *head, last = path
        for key in head:
            d = d[key]
        del d[last]

    return mutate


@pytest.mark.parametrize(
    "mutate, words",
    [
        (_set(["links", 3, "bw_GBps"], -1), "links[3].bw_GBps must be positive, got -1"),
        (_set(["links", 3, "bw_GBps"], 0), "links[3].bw_GBps must be positive"),
        (_set(["links", 2, "alpha_us"], -0.5), "links[2].alpha_us must not be negative"),
        (_set(["links", 0, "bw_GBps"], float("nan")), "links[0].bw_GBps must be a finite number"),
        (_set(["links", 0, "bw_GBps"], "10"), "links[0].bw_GBps must be a number, got string"),
        (_set(["links", 0, "bw_GBps"], True), "links[0].bw_GBps must be a number"),
        (_set(["links", 0, "dst"], 9), "links[0].dst names unknown rank 9 (ranks are 0..3)"),
        (_set(["links", 0, "dst"], 0), "links[0] is a self-loop"),
        (_set(["links", 1], [1, 0]), "links[1] must be an object"),
        (_delete(["links", 1, "alpha_us"]), "links[1] is missing field 'alpha_us'"),
        (_set(["links", 1, "latency"], 3), "links[1] has unknown field 'latency'"),
        (_set(["links"], {}), "links must be a list"),
        (_set(["lnks"], []), "unknown field 'lnks'"),
        (_set(["version"], 2), "topology format version 2 is not supported"),
        (_set(["version"], True), "version True is not supported"),
        (_delete(["version"]), "missing field 'version'"),
        (_set(["format"], "taccl"), "not a ccsynth topology"),
        (_delete(["format"]), "missing field 'format'"),
        (_delete(["name"]), "missing field 'name'"),
        (_set(["name"], 5), "name must be a string"),
        (_set(["n_ranks"], "4"), "n_ranks must be an integer"),
        (_set(["n_ranks"], 0), "n_ranks must be at least 1"),
        (_set(["nodes"], [0, 0, 1]), "nodes has 3 entries for 4 ranks"),
        (_set(["nodes", 2], -1), "nodes[2] must be at least 0"),
        (_set(["switches", 0, "ranks"], [0, 5]), "switches[0].ranks[1] names unknown rank 5"),
        (_set(["switches", 0, "ranks"], [0, 1]), "two connections 0->1"),
        (_set(["switches", 0, "ranks"], [2, 2]), "at least two distinct ranks"),
        (_set(["shared_ports", 0, "name"], "sw"), "duplicate resource name 'sw'"),
        (_set(["shared_ports", 0, "dsts"], 3), "shared_ports[0].dsts must be a list"),
        (_set(["dims", 1, "size"], 3), "multiply to 6, not 4 ranks"),
        (_set(["dims", 1, "size"], 0), "dims[1].size must be at least 1"),
        (_set(["sources"], "datasheet"), "sources must be a list"),
        (_set(["call_overhead_us"], -1), "call_overhead_us must not be negative"),
        (_set(["call_overhead_us"], "3"), "call_overhead_us must be a number"),
        (_set(["rendezvous_alpha_us"], -2), "rendezvous_alpha_us must not be negative"),
        (_set(["local_overhead_us"], -1), "local_overhead_us must not be negative"),
        (_set(["eager_limit_bytes"], None), "eager_limit_bytes must be a number"),
    ],
)
def test_malformed_dicts(mutate, words):
    d = _sample_dict()
    topology_from_dict(copy.deepcopy(d))  # the unmutated sample is valid
    mutate(d)
    with pytest.raises(TopologyError) as e:
        topology_from_dict(d)
    assert words in str(e.value)


def test_malformed_files(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "ccsynth.topology", "version": 1,')
    with pytest.raises(TopologyError, match="bad.json.*is not valid JSON.*line 1"):
        load_topology(bad)
    bad.write_text("[1, 2]")
    with pytest.raises(TopologyError, match="must be a JSON object, got list"):
        load_topology(bad)
    d = _sample_dict()
    d["links"][3]["bw_GBps"] = -1
    bad.write_text(json.dumps(d))
    with pytest.raises(TopologyError, match=r"bad.json: links\[3\].bw_GBps must be positive, got -1"):
        load_topology(bad)
    with pytest.raises(TopologyError, match="cannot read topology"):
        load_topology(tmp_path / "absent.json")
    good = tmp_path / "good.json"
    good.write_text(json.dumps(_sample_dict()))
    with pytest.raises(TopologyError, match="apply to TACCL topology files only"):
        formats_files.get_topology(f"{good}?nodes=2")
    with pytest.raises(TopologyError, match="apply to TACCL topology files only"):
        get_topology(f"{good}?nodes=2")
    with pytest.raises(TopologyError, match="cannot write topology"):
        save_topology(ring(3), tmp_path / "no_such_dir" / "t.json")


# ------------------------------------------------------------------ TACCL import
def test_taccl_ndv2_profile():
    path = DATA / "taccl_ndv2_1MB.json"
    t = load_taccl_topology(path)
    mib = 1 << 20
    assert t.n_ranks == 8 and t.name == "sample_ndv2_1MB"
    # beta 23 us per MiB for a doubled NVLink pair, 46 for a single one
    assert t.connection(0, 1).bw == pytest.approx(mib / 23 / 1e3)  # 45.59 GB/s
    assert t.connection(0, 2).bw == pytest.approx(mib / 46 / 1e3)  # 22.80 GB/s
    assert t.connection(0, 1).alpha == pytest.approx(0.3)
    assert {(l.src, l.dst) for l in t.links} == {(l.src, l.dst) for l in dgx1().links}
    t2 = load_taccl_topology(path, nodes=2)
    assert t2.name == "sample_ndv2_1MBx2" and t2.n_nodes == 2
    c = t2.connection(1, 14)
    assert c.alpha == pytest.approx(2.6) and c.bw == pytest.approx(mib / 105 / 1e3)  # 9.99 GB/s
    assert set(c.resources) == {"link:1->14", "nic0.tx", "nic1.rx"}
    assert t2.is_strongly_connected()
    # the spec string form, and load_topology's detection, agree
    assert formats_files.get_topology(f"{path}?nodes=2") == t2
    assert formats_files.load_topology(path) == t
    assert formats_files.get_topology(str(path)) == t
    # ccsynth.topologies reads ccsynth's own files only
    with pytest.raises(TopologyError, match="not a ccsynth topology"):
        load_topology(path)
    with pytest.raises(TopologyError, match="apply to TACCL topology files only"):
        get_topology(f"{path}?nodes=2")


def test_taccl_custom_matrices_are_dst_src_and_scaled():
    path = DATA / "taccl_custom_32KB.json"
    t = load_taccl_topology(path, time_scale=10)
    per_link = 32768 / (8 / 10) / 1e3  # one link of beta 8 (x10) per 32 KiB
    # links[0][1] == 2: two parallel links 1 -> 0; links[1][0] == 1: one link 0 -> 1
    assert t.connection(1, 0).bw == pytest.approx(2 * per_link)
    assert t.connection(0, 1).bw == pytest.approx(per_link)
    assert t.connection(0, 3).bw == pytest.approx(32768 / 1.6 / 1e3)
    assert not t.has_connection(0, 2)
    assert t.connection(0, 1).alpha == pytest.approx(0.5)
    t2 = formats_files.get_topology(f"{path}?nodes=2&scale=10")
    ports = {p.name: p for p in t2.shared_ports}
    assert ports["nic1.0.tx"].srcs == (4, 5) and ports["nic1.1.tx"].srcs == (6, 7)
    assert ports["nic1.1.rx"].srcs == (0, 1, 2, 3)
    assert t2.connection(0, 5).alpha == pytest.approx(2.0)
    assert t2.connection(0, 5).bw == pytest.approx(32768 / 3.2 / 1e3)
    # without the scale option the size in its name gives TACCL's factor for 32 KB profiles, x10
    inferred = load_taccl_topology(path)
    assert inferred.connections() == t.connections() and "TACCL's factor x10" in inferred.description
    assert load_taccl_topology(path, time_scale=1).connection(0, 1).bw == pytest.approx(per_link / 10)


def test_taccl_hub_and_spoke_is_a_switch():
    t = load_taccl_topology(DATA / "taccl_hub_1KB.json", nodes=2, time_scale=100, chunk_bytes=2048)
    assert [s.name for s in t.switches] == ["switch0", "switch1"]
    assert t.connection(0, 3).bw == pytest.approx(2048 / 0.01 / 1e3)
    assert t.connection(0, 3).alpha == pytest.approx(0.5)
    assert t.connection(0, 4).alpha == pytest.approx(2.5)
    assert len(t.shared_ports) == 2 * 2 * 4  # one NIC per GPU, tx and rx


@pytest.mark.parametrize(
    "doc, kwargs, words",
    [
        ({"gpus_per_node": 8, "alpha": 1, "node_betas_list": [1, 2]}, {}, "missing field 'name'"),
        ({"name": "x_1MB", "gpus_per_node": 0, "alpha": 1, "node_betas_list": [1]}, {}, "gpus_per_node must be a positive"),
        ({"name": "x_1MB", "gpus_per_node": 4, "alpha": 1, "node_betas_list": [1, 2]}, {}, "needs gpus_per_node 8"),
        ({"name": "x_1MB", "gpus_per_node": 4, "alpha": 1, "node_betas_list": [0]}, {}, "node_betas_list[0] must be positive"),
        ({"name": "x_1MB", "gpus_per_node": 4, "alpha": 1, "node_betas_list": [1]}, {"nodes": 2}, "no inter-node profile"),
        ({"name": "x_1MB", "gpus_per_node": 4, "alpha": 1, "node_betas_list": [1]}, {"kind": "mesh"}, "kind must be one of"),
        ({"name": "x_1MB", "gpus_per_node": 2, "alpha": 1, "links": [[0, 1]], "betas": [[0, 1], [1, 0]]}, {}, "2x2 matrix"),
        ({"name": "x_1MB", "gpus_per_node": 2, "alpha": 1, "links": [[1, 1], [1, 0]], "betas": [[1, 1], [1, 0]]}, {},
         "self-loop"),
        ({"name": "x_1MB", "gpus_per_node": 2, "alpha": -1, "node_betas_list": [1]}, {}, "alpha must be non-negative"),
    ],
)
def test_taccl_errors(doc, kwargs, words, tmp_path):
    path = tmp_path / "taccl.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(TopologyError) as e:
        load_taccl_topology(path, **kwargs)
    assert words in str(e.value)


def test_taccl_spec_option_errors():
    path = DATA / "taccl_ndv2_1MB.json"
    with pytest.raises(TopologyError, match="unknown option 'gpus'"):
        formats_files.get_topology(f"{path}?gpus=4")
    with pytest.raises(TopologyError, match="bad value 'two' for option 'nodes'"):
        formats_files.get_topology(f"{path}?nodes=two")
    with pytest.raises(TopologyError, match="key=value"):
        formats_files.get_topology(f"{path}?nodes")
    t = formats_files.get_topology(f"{path}?chunk=2M")
    assert t.connection(0, 1).bw == pytest.approx(2 * (1 << 20) / 23 / 1e3)
    assert math.isclose(formats_files.get_topology(f"{path}?scale=2").connection(0, 1).alpha, 0.15)
