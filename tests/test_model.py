"""The Topology model: validation, connections, bandwidth constraints, transformers."""

import networkx as nx
import pytest

from ccsynth.errors import TopologyError
from ccsynth.topologies.model import Dimension, Link, SharedPort, Spine, Switch, Topology


def two_nodes():
    # 2 nodes x 2 ranks; inside a node a link each way; across nodes every pair
    # is connected but one NIC per node caps the traffic leaving/entering it.
    links = [Link(0, 1, 0.5, 50.0), Link(1, 0, 0.5, 50.0), Link(2, 3, 0.5, 50.0), Link(3, 2, 0.5, 50.0)]
    for a in (0, 1):
        for b in (2, 3):
            links += [Link(a, b, 2.0, 12.5), Link(b, a, 2.0, 12.5)]
    ports = (
        SharedPort("nic0.tx", (0, 1), (2, 3), 10.0),
        SharedPort("nic0.rx", (2, 3), (0, 1), 10.0),
        SharedPort("nic1.tx", (2, 3), (0, 1), 10.0),
        SharedPort("nic1.rx", (0, 1), (2, 3), 10.0),
    )
    return Topology("toy", 4, links=tuple(links), shared_ports=ports, nodes=(0, 0, 1, 1))


def test_connection_cost_and_resources():
    t = two_nodes()
    c = t.connection(0, 2)
    assert c.alpha == 2.0
    assert c.bw == 10.0  # the shared NIC caps the link
    assert set(c.resources) == {"link:0->2", "nic0.tx", "nic1.rx"}
    assert c.time_us(10_000) == pytest.approx(2.0 + 1.0)
    assert t.connection(0, 1).resources == ("link:0->1",)
    assert t.connection(0, 0) is None
    assert t.n_nodes == 2 and t.node_ranks(1) == (2, 3)


def test_bandwidth_constraints_cover_every_resource():
    t = two_nodes()
    names = {b.name: b for b in t.bandwidth_constraints()}
    for c in t.connections():
        for r in c.resources:
            assert r in names and names[r].covers(c.src, c.dst)
    assert names["nic0.tx"].bw == 10.0


def test_switch_expands_to_ports():
    t = Topology("sw", 3, switches=(Switch("nvs", (0, 1, 2), 100.0, 0.7),))
    assert len(t.connections()) == 6
    c = t.connection(2, 0)
    assert c.resources == ("nvs:tx2", "nvs:rx0") and c.bw == 100.0
    names = {b.name for b in t.bandwidth_constraints()}
    assert names == {f"nvs:{d}{r}" for d in ("tx", "rx") for r in range(3)}


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(links=(Link(0, 5, 1, 1),)), "unknown rank 5"),
        (dict(links=(Link(0, 1, 1, -1),)), "must be a finite positive"),
        (dict(links=(Link(0, 1, -1, 1),)), "non-negative"),
        (dict(links=(Link(0, 0, 1, 1),)), "self-loop"),
        (dict(links=(Link(0, 1, 1, 1), Link(0, 1, 1, 2))), "two connections 0->1"),
        (dict(switches=(Switch("s", (0,), 1, 1),)), "at least two"),
        (dict(links=(Link(0, 1, 1, 1),), switches=(Switch("s", (0, 1), 1, 1),)), "two connections"),
        (dict(nodes=(0, 0)), "'nodes' has 2 entries"),
        (dict(dims=(Dimension("x", 2, 1, 1),)), "multiply to 2"),
        (dict(links=(Link(0, 1, 1, "fast"),)), "must be a number"),
    ],
)
def test_bad_topologies_name_the_problem(kwargs, words):
    with pytest.raises(TopologyError, match=words):
        Topology("bad", 3, **kwargs)


def test_reversed_is_a_new_object_with_flipped_directions():
    t = two_nodes()
    r = t.reversed()
    assert r is not t and t.connection(0, 2).resources  # original untouched
    assert {(l.src, l.dst) for l in r.links} == {(l.dst, l.src) for l in t.links}
    sp = {s.name: s for s in r.shared_ports}
    assert sp["nic0.tx"].srcs == (2, 3) and sp["nic0.tx"].dsts == (0, 1)
    assert r.reversed() == t


def test_networkx_round_trip_and_connectivity():
    t = two_nodes()
    g = t.to_networkx()
    assert g.number_of_edges() == len(t.connections())
    back = Topology.from_networkx(g, "toy2")
    assert {(c.src, c.dst) for c in back.connections()} == {(c.src, c.dst) for c in t.connections()}
    assert t.is_strongly_connected()
    broken = Topology("broken", 3, links=(Link(0, 1, 1, 1), Link(1, 0, 1, 1)))
    with pytest.raises(TopologyError, match="not connected"):
        broken.require_connected("allgather")
    with pytest.raises(TopologyError):
        Topology.from_networkx(nx.DiGraph([(0, 1)]))


def test_coords_mixed_radix():
    t = Topology("h", 6, dims=(Dimension("a", 2, 10, 1), Dimension("b", 3, 5, 2)))
    assert [t.coords(r) for r in range(6)] == [(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2)]


# ------------------------------------------------------------------ spines (two-tier fat trees)
def spine_toy(uplink=None, ports=()):
    # 3 nodes x 2 GPUs; GPU i of every node on leaf "r{i}"; a spine joins the two leaves
    switches = tuple(Switch(f"n{k}", (2 * k, 2 * k + 1), 100.0, 0.5) for k in range(3))
    leaves = (Switch("r0", (0, 2, 4), 10.0, 2.0, 1.0), Switch("r1", (1, 3, 5), 20.0, 2.0, 1.0))
    return Topology("fat", 6, switches=switches + leaves, nodes=(0, 0, 1, 1, 2, 2), shared_ports=ports,
                    spines=(Spine("sp", ("r0", "r1"), 2.6, 1.5, uplink),))


def test_spine_connects_other_leaves_on_other_nodes():
    t = spine_toy()
    c = t.connection(0, 3)
    assert (c.via, c.alpha, c.overhead, c.bw) == ("sp", 2.6, 1.5, 10.0)
    assert c.resources == ("r0:tx0", "r1:rx3")  # the NIC ports it shares with the leaf's own traffic
    assert t.connection(0, 2).via == "r0" and t.connection(0, 1).via == "n0"  # same leaf; same node
    assert t.neighbors_out(0) == (1, 2, 3, 4, 5)
    assert [c.dst for c in t.connections_from(0)] == [1, 2, 3, 4, 5]
    names = {b.name: b for b in t.bandwidth_constraints()}
    for c in t.connections():
        for r in c.resources:
            assert names[r].covers(c.src, c.dst) and t.resource_bw[r] == names[r].bw
    assert t.reversed().reversed() == t and t.reversed().connection(3, 0).via == "sp"


def test_spine_up_links_and_counts():
    t = spine_toy(uplink=15.0, ports=(SharedPort("cap", (0,), (5,), 4.0),))
    c = t.connection(2, 1)
    assert c.resources == ("r0:tx2", "r1:rx1", "sp:up.r0", "sp:down.r1") and t.resource_bw["sp:up.r0"] == 15.0
    assert t.connection(0, 5).bw == 4.0 and t.connection(0, 5).resources[-1] == "cap"
    from collections import Counter

    by_hand = Counter(("spine" if c.via == "sp" else "link" if c.via.startswith("link:") else "switch",
                       c.alpha, c.bw, c.overhead) for c in t.connections())
    assert {(k.kind, k.alpha, k.bw, k.overhead): k.count for k in t.connection_classes()} == dict(by_hand)
    assert t.connection_count() == len(t.connections()) == 30


@pytest.mark.parametrize(
    "change, words",
    [
        (dict(spines=(Spine("sp", ("r0", "nope"), 1.0),)), "leaf 'nope' is not a switch"),
        (dict(spines=(Spine("sp", ("r0",), 1.0),)), "at least two distinct leaf"),
        (dict(spines=(Spine("sp", ("r0", "r1"), 1.0, uplink_bw=0),)), "up-link bandwidth"),
        (dict(spines=(Spine("sp", ("r0", "r1"), 1.0), Spine("sp2", ("r0", "r1"), 1.0))), "sits on leaf"),
        (dict(links=(Link(0, 3, 1.0, 1.0),)), r"two connections 0->3 \(link:0->3 and spine sp\)"),
        (dict(spines=(Spine("n0", ("r0", "r1"), 1.0),)), "duplicate resource name 'n0'"),
    ],
)
def test_bad_spines_name_the_problem(change, words):
    base = spine_toy()
    with pytest.raises(TopologyError, match=words):
        Topology(base.name, base.n_ranks, switches=base.switches, nodes=base.nodes,
                 **{"spines": base.spines, **change})


def test_switch_across_spine_leaves_is_a_duplicate():
    base = spine_toy()
    with pytest.raises(TopologyError, match=r"two connections 0->3 \(switch big and spine sp\)"):
        Topology(base.name, 6, switches=base.switches + (Switch("big", (0, 3), 1.0, 1.0),), nodes=base.nodes,
                 spines=base.spines)
    one = Topology("one", 3, switches=(Switch("a", (0, 1), 1.0, 1.0), Switch("b", (2,), 1.0, 1.0)), nodes=(0, 1, 2),
                   spines=(Spine("sp", ("a", "b"), 1.0),))  # a leaf of one rank: a scalable unit of one node
    assert one.connection(2, 0).via == "sp"
    with pytest.raises(TopologyError, match="at least two distinct ranks"):
        Topology("lone", 3, switches=(Switch("b", (2,), 1.0, 1.0),))
