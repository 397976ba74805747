"""Tests of the baseline algorithms (ccsynth.synth.baselines).

Every (algorithm, collective) pair is built and proven by the verifier on
generic topologies (ring, fully connected, n = 2..9, chunk factors 1..3,
every root drawn by hypothesis) and on the machines of the catalog; the
applicable names are checked against rules stated independently here; each
algorithm's structure (who talks to whom, how much) is checked against its
textbook definition; unsupported cases raise CollectiveError.
"""

from __future__ import annotations

import doctest
import importlib
import math
import time
from collections import Counter

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ccsynth.collectives.spec import KINDS, ROOTED, Collective
from ccsynth.collectives.verify import verify
from ccsynth.errors import CollectiveError
from ccsynth.synth.baselines import (
    BASELINES,
    applicable_baselines,
    get_baseline,
    make_baseline,
    min_chunk_factor,
    why_not,
)
from ccsynth.synth.baselines._util import find_ring, is_ring, split
from ccsynth.synth.baselines.multi_ring import find_rings
from ccsynth.synth.simulate import simulate
from ccsynth.topologies import get_topology
from ccsynth.topologies.catalog import dgx1, fully_connected, ring, torus
from ccsynth.topologies.model import Link, Switch, Topology
from toys import assert_verified

NAMES = ("ring", "multi_ring", "recursive_doubling", "recursive_halving", "direct", "one_shot", "binomial_tree",
         "hierarchical")
MACHINES = ("dgx1", "ndv2x2", "dgx_a100x2", "torus:2x4")


def roots(kind: str, n: int) -> list[int]:
    return sorted({0, n - 1, n // 2}) if kind in ROOTED else [0]


def sends(schedule):
    return [op for op in schedule.ops if op.kind == "send"]


def build_all(topo: Topology, c: int, kinds=KINDS) -> int:
    """make_baseline for every applicable (name, kind, root); returns how many were built."""
    built = 0
    for kind in kinds:
        for root in roots(kind, topo.n_ranks):
            coll = Collective(kind, topo.n_ranks, c, root)
            for name in applicable_baselines(coll, topo):
                s = make_baseline(name, coll, topo)
                assert_verified(s, topo)
                assert s.name == name and s.topology == topo.name
                assert s.meta["algorithm"] == name and s.collective == coll
                built += 1
    return built


# ------------------------------------------------------------------ registry
def test_registry_names_and_kinds():
    assert tuple(BASELINES) == NAMES
    for name, b in BASELINES.items():
        assert b.name == name and b.description and b.kinds
        assert set(b.kinds) <= set(KINDS)
    assert BASELINES["direct"].supports("alltoall")
    assert not BASELINES["ring"].supports("alltoall")
    # every collective has at least one baseline
    assert set(KINDS) == {k for b in BASELINES.values() for k in b.kinds}


def test_unknown_name_lists_the_names():
    with pytest.raises(CollectiveError) as e:
        make_baseline("bruck", Collective("allgather", 4), fully_connected(4))
    for name in NAMES:
        assert name in str(e.value)
    assert get_baseline("Binomial-Tree").name == "binomial_tree"


@pytest.mark.parametrize(
    "name, kind",
    [("ring", "alltoall"), ("ring", "gather"), ("recursive_doubling", "reduce_scatter"),
     ("recursive_halving", "allgather"), ("binomial_tree", "allreduce"), ("hierarchical", "broadcast")],
)
def test_unsupported_kind_raises(name, kind):
    topo = get_topology("ndv2x2")
    coll = Collective(kind, 16, 1)
    with pytest.raises(CollectiveError, match=f"{name} does not implement {kind}"):
        make_baseline(name, coll, topo)
    assert name not in applicable_baselines(coll, topo)


def test_rank_count_mismatch_raises():
    with pytest.raises(CollectiveError, match="5 ranks but topology 'ring:4' has 4"):
        make_baseline("ring", Collective("allgather", 5), ring(4))


def test_missing_links_make_algorithms_inapplicable():
    # ring:4 lacks 0<->2, which recursive doubling/halving and the binomial tree need
    with pytest.raises(CollectiveError, match="lacks: 0->2"):
        make_baseline("recursive_doubling", Collective("allgather", 4), ring(4))
    with pytest.raises(CollectiveError, match="binomial tree rooted at rank 0 needs connections"):
        make_baseline("binomial_tree", Collective("broadcast", 4), ring(4))
    with pytest.raises(CollectiveError, match="single node"):
        make_baseline("hierarchical", Collective("allreduce", 8), dgx1())
    assert why_not("hierarchical", Collective("allreduce", 8), dgx1()).endswith("need several")
    assert why_not("ring", Collective("allreduce", 8), dgx1()) is None


def test_no_ring_raises_clearly():
    star = Topology("star", 5, links=tuple(l for r in range(1, 5) for l in (Link(0, r, 1.0, 10.0), Link(r, 0, 1.0, 10.0))))
    with pytest.raises(CollectiveError, match="topology 'star' has no ring through all 5 ranks"):
        make_baseline("ring", Collective("allreduce", 5), star)
    # ... while direct still works by relaying through the hub
    s = make_baseline("direct", Collective("alltoall", 5), star)
    assert s.meta["relayed"] == 4 * 3
    assert applicable_baselines(Collective("allgather", 5), star) == ["direct"]


def test_unreachable_rank_raises():
    split_topo = Topology("two-islands", 4, links=(Link(0, 1, 1, 1), Link(1, 0, 1, 1), Link(2, 3, 1, 1), Link(3, 2, 1, 1)))
    with pytest.raises(CollectiveError, match="cannot reach"):
        make_baseline("direct", Collective("alltoall", 4), split_topo)
    assert applicable_baselines(Collective("allgather", 4), split_topo) == []


# ------------------------------------------------------- generic topologies
def expected_generic(kind: str, n: int, shape: str, c: int) -> list[str]:
    """Which names must be applicable on ring(n) / fully_connected(n), from first principles.

    Both have room for a second ring (the reverse one) from 3 ranks on, and
    multi_ring needs at least 2 chunks to share out. Recursive doubling/halving
    and the binomial tree talk to rank +-2^k; a ring of n ranks has those links
    only for n <= 3. Direct and one-shot always work (relayed on a ring).
    Hierarchical needs several nodes.
    """
    dense = shape == "fully_connected" or n <= 3
    out = []
    if kind in ("allgather", "reduce_scatter", "allreduce", "broadcast", "reduce"):
        out.append("ring")
        if n >= 3 and c >= 2:
            out.append("multi_ring")
    if dense and kind in ("allgather", "allreduce"):
        out.append("recursive_doubling")
    if dense and kind in ("reduce_scatter", "allreduce"):
        out.append("recursive_halving")
    out.append("direct")
    if kind == "allreduce":
        out.append("one_shot")
    if dense and kind in ("broadcast", "reduce", "gather", "scatter"):
        out.append("binomial_tree")
    return out


@pytest.mark.parametrize("shape", ["ring", "fully_connected"])
def test_every_baseline_verifies_on_generic_topologies(shape):
    t0 = time.time()
    built = 0
    for n in range(2, 10):
        topo = ring(n) if shape == "ring" else fully_connected(n)
        for c in (1, 2, 3):
            for kind in KINDS:
                assert applicable_baselines(Collective(kind, n, c), topo) == expected_generic(kind, n, shape, c), (kind, n, c)
            built += build_all(topo, c)
    assert built > 500
    assert time.time() - t0 < 30


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(2, 9),
    c=st.integers(1, 3),
    kind=st.sampled_from(KINDS),
    root_frac=st.floats(0, 0.999),
    shape=st.sampled_from(["ring", "fully_connected"]),
)
def test_property_any_root(n, c, kind, root_frac, shape):
    topo = ring(n) if shape == "ring" else fully_connected(n)
    root = int(root_frac * n) if kind in ROOTED else 0
    coll = Collective(kind, n, c, root)
    names = applicable_baselines(coll, topo)
    assert names == expected_generic(kind, n, shape, c)
    for name in names:
        verify(make_baseline(name, coll, topo), topo)


# ------------------------------------------------------------------- machines
# kind -> names at chunk factor 2
EXPECTED_MACHINES = {
    # dgx1: a hypercube plus extra links, so every partner 2^k is a neighbour; 6 NVLinks per GPU: room for rings
    "dgx1": {
        "allgather": ["ring", "multi_ring", "recursive_doubling", "direct"],
        "reduce_scatter": ["ring", "multi_ring", "recursive_halving", "direct"],
        "allreduce": ["ring", "multi_ring", "recursive_doubling", "recursive_halving", "direct", "one_shot"],
        "alltoall": ["direct"],
        "broadcast": ["ring", "multi_ring", "direct", "binomial_tree"],
        "gather": ["direct", "binomial_tree"],
    },
    "torus:2x4": {  # rank r and r^4 are two hops apart in the 4-ring: no recursive algorithms, no tree
        "allgather": ["ring", "multi_ring", "direct"],
        "allreduce": ["ring", "multi_ring", "direct", "one_shot"],
        "reduce": ["ring", "multi_ring", "direct"],
        "scatter": ["direct"],
    },
}
for _m, _multi in (("ndv2x2", []), ("dgx_a100x2", ["multi_ring"])):  # ndv2's one NIC per node fits one ring
    EXPECTED_MACHINES[_m] = {
        "allgather": ["ring", *_multi, "recursive_doubling", "direct", "hierarchical"],
        "reduce_scatter": ["ring", *_multi, "recursive_halving", "direct", "hierarchical"],
        "allreduce": ["ring", *_multi, "recursive_doubling", "recursive_halving", "direct", "one_shot", "hierarchical"],
        "alltoall": ["direct"],
        "reduce": ["ring", *_multi, "direct", "binomial_tree"],
    }


@pytest.mark.parametrize("machine", MACHINES)
def test_machines(machine):
    topo = get_topology(machine)
    for kind, names in EXPECTED_MACHINES[machine].items():
        for root in roots(kind, topo.n_ranks):
            assert applicable_baselines(Collective(kind, topo.n_ranks, 2, root), topo) == names, (kind, root)
    for c in (1, 2):
        build_all(topo, c)


def test_dgx1_tree_fits_any_root_via_xor():
    topo = dgx1()
    for root in range(8):
        s = make_baseline("binomial_tree", Collective("broadcast", 8, 2, root), topo)
        assert s.meta["mapping"] in ("shift", "xor")
        for op in sends(s):
            assert topo.has_connection(op.rank, op.peer)
    assert make_baseline("binomial_tree", Collective("broadcast", 8, 1, 3), topo).meta["mapping"] == "xor"


@pytest.mark.parametrize("spec", ["hierarchical:4x8x4@200,50,10", "dgx_h100x4", "ndv2x3"])
def test_larger_fabrics_have_rings(spec):
    topo = get_topology(spec)
    t0 = time.time()
    order = find_ring(topo)
    assert order is not None and sorted(order) == list(range(topo.n_ranks))
    assert all(topo.has_connection(order[i], order[(i + 1) % len(order)]) for i in range(len(order)))
    assert time.time() - t0 < 2
    s = make_baseline("hierarchical", Collective("allreduce", topo.n_ranks, 2), topo)
    assert len(s.meta["rails"]) == topo.n_ranks // topo.n_nodes


# ------------------------------------------------------------ ring discovery
def test_find_ring_on_dgx1_and_missing_rings():
    order = find_ring(dgx1())
    assert sorted(order) == list(range(8))
    assert all(dgx1().has_connection(order[i], order[(i + 1) % 8]) for i in range(8))
    g = nx.petersen_graph().to_directed()  # famously has no Hamiltonian cycle
    for u, v in g.edges:
        g[u][v].update(alpha=1.0, bw=1.0)
    t0 = time.time()
    assert find_ring(Topology.from_networkx(g, "petersen")) is None
    assert time.time() - t0 < 2
    one_way = Topology("one-way", 4, links=tuple(Link((a + 1) % 4, a, 1.0, 1.0) for a in range(4)))
    assert find_ring(one_way) == (3, 2, 1, 0)


def test_ring_search_scales():
    import random

    perm = list(range(1500))
    random.Random(7).shuffle(perm)  # a ring in scrambled rank order: the search must walk 1500 deep
    links = tuple(l for i in range(1500) for l in (Link(perm[i], perm[(i + 1) % 1500], 1.0, 1.0),
                                                   Link(perm[(i + 1) % 1500], perm[i], 1.0, 1.0)))
    t0 = time.time()
    order = find_ring(Topology("scrambled", 1500, links=links))
    assert order is not None and sorted(order) == list(range(1500))
    topo = torus((16, 16))  # reflected Gray order over the coordinates
    assert find_ring(topo)[:5] == (0, 1, 2, 3, 4) and is_ring(topo, find_ring(topo))
    assert time.time() - t0 < 3


@pytest.mark.parametrize("sizes", [(3, 3), (5, 7), (3, 3, 3), (63, 63), (9, 15, 5)])
def test_odd_tori_have_a_ring(sizes):
    # every dimension odd: no Gray cycle, and a depth-first search gets lost on 63 x 63; a snake through
    # columns 1.. plus the way back up column 0 (over dimension 0's wrap-around) is a Hamiltonian cycle
    topo = torus(sizes)
    t0 = time.time()
    order = find_ring(topo)
    assert order is not None and sorted(order) == list(range(topo.n_ranks)) and is_ring(topo, order)
    assert time.time() - t0 < 2


def test_multi_node_ring_crosses_the_network_once_each_way():
    for spec in ("ndv2x2", "dgx_a100x2"):
        topo = get_topology(spec)
        order = find_ring(topo)
        crossings = sum(topo.nodes[order[i]] != topo.nodes[order[(i + 1) % 16]] for i in range(16))
        assert crossings == 2, spec


# ------------------------------------------------------ algorithm structure
def per_rank_send_chunks(schedule) -> Counter:
    out = Counter()
    for op in sends(schedule):
        out[op.rank] += op.count
    return out


@pytest.mark.parametrize("n", [3, 4, 7])
def test_ring_structure(n):
    topo = fully_connected(n)
    c = 2 * n
    for kind in ("allgather", "reduce_scatter", "allreduce"):
        s = make_baseline("ring", Collective(kind, n, c), topo)
        order = s.meta["ring"]
        nxt = {order[i]: order[(i + 1) % n] for i in range(n)}
        assert all(op.peer == nxt[op.rank] for op in sends(s))  # only to the ring successor
        assert all(op.count == 1 for op in sends(s))  # chunk by chunk: pipelined
        per_rank = per_rank_send_chunks(s)
        if kind == "allreduce":  # Patarasuk-Yuan: 2(n-1)/n of the buffer per rank
            assert set(per_rank.values()) == {2 * (n - 1) * c // n}
        elif kind == "allgather":
            assert set(per_rank.values()) == {(n - 1) * c}
        else:
            assert set(per_rank.values()) == {(n - 1) * c}
    s = make_baseline("ring", Collective("broadcast", n, 3, root=1), topo)
    receivers = Counter(op.peer for op in sends(s))
    assert 1 not in receivers and set(receivers.values()) == {3}  # a chain: each non-root gets every chunk once


def test_ring_allreduce_busbw_traffic_matches_lower_bound_shape():
    n, c = 8, 16
    s = make_baseline("ring", Collective("allreduce", n, c), dgx1())
    total = sum(op.count for op in sends(s))
    assert total == 2 * (n - 1) * c


@pytest.mark.parametrize("n", [4, 8, 6])
def test_recursive_structure(n):
    topo = fully_connected(n)
    P = 1 << (n.bit_length() - 1)
    s = make_baseline("recursive_doubling", Collective("allgather", n, 1), topo)
    for op in sends(s):
        pair = {op.rank, op.peer}
        assert op.rank ^ op.peer in [1 << k for k in range(int(math.log2(P)))] or max(pair) - min(pair) == P
    if n == P:  # log2(n) exchanges per rank, doubling in size
        for r in range(n):
            assert [op.count for op in sends(s) if op.rank == r] == [1 << k for k in range(int(math.log2(n)))]
        rh = make_baseline("recursive_halving", Collective("reduce_scatter", n, 1), topo)
        for r in range(n):
            assert [op.count for op in sends(rh) if op.rank == r] == [n >> (k + 1) for k in range(int(math.log2(n)))]
        rab = make_baseline("recursive_halving", Collective("allreduce", n, n), topo)
        assert set(per_rank_send_chunks(rab).values()) == {2 * (n - 1)}  # bandwidth-optimal like the ring
    else:  # the extra ranks only talk to their partner P + i <-> i
        for e in range(P, n):
            assert {op.peer for op in s.ops if op.rank == e and op.kind in ("send", "recv")} == {e - P}


def test_direct_structure():
    n, c = 5, 2
    s = make_baseline("direct", Collective("alltoall", n, c), fully_connected(n))
    pairs = Counter((op.rank, op.peer) for op in sends(s))
    assert set(pairs) == {(a, b) for a in range(n) for b in range(n) if a != b}
    assert set(pairs.values()) == {1} and all(op.count == c for op in sends(s))
    assert s.meta["relayed"] == 0
    # rounds: the k-th sends of all ranks go to r+k: a permutation, no hot spot
    first = [next(op.peer for op in sends(s) if op.rank == r) for r in range(n)]
    assert first == [(r + 1) % n for r in range(n)]
    rs = make_baseline("direct", Collective("reduce_scatter", n, c), fully_connected(n))
    assert rs.scratch_chunks == (n - 1) * c


def test_direct_relays_along_shortest_paths_on_a_ring():
    n = 6
    topo = ring(n)
    s = make_baseline("direct", Collective("alltoall", n, 2), topo)
    assert s.meta["relayed"] == n * (n - 3)  # peers at distance 2 and 3
    dist = dict(nx.all_pairs_shortest_path_length(topo.graph))
    # bytes on the wire = sum of hop distances: shortest paths only
    assert sum(op.count for op in sends(s)) == 2 * sum(dist[a][b] for a in range(n) for b in range(n))


@pytest.mark.parametrize("n", [5, 8])
def test_binomial_tree_structure(n):
    topo = fully_connected(n)
    depth = (n - 1).bit_length()
    s = make_baseline("binomial_tree", Collective("broadcast", n, 2, root=2), topo)
    got = Counter(op.rank for op in s.ops if op.kind == "recv")
    assert 2 not in got and set(got.values()) == {2}  # each non-root receives each chunk once
    assert Counter(op.rank for op in sends(s))[2] == 2 * depth  # the root sends to log n children
    g = make_baseline("binomial_tree", Collective("gather", n, 1, root=0), topo)
    assert Counter(op.peer for op in sends(g))[0] == depth  # root hears from log n subtrees


def test_hierarchical_keeps_network_traffic_on_rails():
    topo = get_topology("dgx_a100x2")
    for kind in ("allreduce", "allgather", "reduce_scatter"):
        s = make_baseline("hierarchical", Collective(kind, 16, 8), topo)
        for op in sends(s):
            if topo.nodes[op.rank] != topo.nodes[op.peer]:
                assert op.rank % 8 == op.peer % 8  # only along a rail
    s = make_baseline("hierarchical", Collective("allgather", 16, 1), topo)
    cross = sum(op.count for op in sends(s) if topo.nodes[op.rank] != topo.nodes[op.peer])
    assert cross == 16  # each piece crosses the network exactly once


@pytest.mark.parametrize("kind", ["reduce_scatter", "allreduce"])
def test_hierarchical_node_reduction_runs_in_rounds_beside_the_network(kind):
    # the node reduce-scatter in rounds, in the order the rail rings need them: the network starts long before
    # the node phase ends, and the whole is well under the two phases back to back (as before)
    topo = get_topology("dgx_a100x4")
    n, size = topo.n_ranks, 64 << 20
    c = 4 if kind == "reduce_scatter" else 4 * n
    s = make_baseline("hierarchical", Collective(kind, n, c), topo)
    verify(s, topo)
    r = simulate(s, topo, size, trace=True)
    assert r.trace is not None
    nic = [t for t in r.trace.transfers if topo.nodes[t.src] != topo.nodes[t.dst]]
    node_end = max(t.data_end for t in r.trace.transfers if topo.nodes[t.src] == topo.nodes[t.dst])
    assert min(t.data_start for t in nic) < 0.15 * r.time_us  # before: 181 of 460 us (rs), of 749 (ar)
    assert min(t.data_start for t in nic) < 0.25 * node_end
    assert r.gap < (1.5 if kind == "reduce_scatter" else 1.35)  # before: 1.83x, 1.49x


def test_paced_sends_wait_for_the_send_a_window_before_on_their_pair():
    from ccsynth.collectives.builder import ScheduleBuilder
    from ccsynth.synth.baselines._util import Places, own_block_home

    b = ScheduleBuilder(Collective("reduce_scatter", 2, 4), "t")
    p = Places(b, own_block_home(4))
    for r in range(2):
        for k in range(8):
            p.put(r, k, ("i", k))
    with p.paced(2):
        for k in range(4):
            p.send(0, 1, [4 + k])  # independent chunks: only the pacing orders them
    p.send(0, 1, [4])  # outside the block: unpaced again
    sends = [op for op in b.build().ops if op.kind == "send"]
    assert [op.deps for op in sends[:2]] == [(), ()]
    assert sends[0].id in sends[2].deps and sends[1].id in sends[3].deps
    assert sends[0].id not in sends[3].deps and sends[4].deps == ()
    with pytest.raises(ValueError, match="window"), p.paced(0):
        pass


def test_allreduce_with_fewer_chunks_than_ranks_still_verifies():
    assert split(range(2), 5) == [[0], [1], [], [], []]
    for name in ("ring", "recursive_halving", "direct", "hierarchical"):
        topo = get_topology("ndv2x2")
        verify(make_baseline(name, Collective("allreduce", 16, 1), topo), topo)


def test_hypothetical_two_node_switch_topology():
    t = Topology("2x2", 4, switches=(Switch("a", (0, 1), 10.0, 1.0), Switch("b", (2, 3), 10.0, 1.0),
                                      Switch("r0", (0, 2), 5.0, 2.0), Switch("r1", (1, 3), 5.0, 2.0)), nodes=(0, 0, 1, 1))
    assert applicable_baselines(Collective("allreduce", 4, 4), t) == [  # a 2x2 square: two rings, both ways round
        "ring", "multi_ring", "recursive_doubling", "recursive_halving", "direct", "one_shot", "hierarchical"]
    build_all(t, 3)


def test_one_shot_allreduce_is_one_hop_and_sums_in_rank_order():
    t = fully_connected(4)
    s = make_baseline("one_shot", Collective("allreduce", 4, 2), t)
    assert sum(op.kind == "send" for op in s.ops) == 12 and s.meta["relayed"] == 0
    for r in range(4):
        # every rank: o = x_0, then += x_1, x_2, x_3 (its own input at its own turn)
        mine = [op for op in s.ops if op.rank == r and op.kind in ("copy", "reduce")]
        srcs = [(op.src.buf, op.src.index) for op in mine]
        assert srcs == [("i", 0) if q == r else ("s", 2 * q) for q in range(4)]
    # relayed where two ranks have no link (a unidirectional ring), still verified
    u = Topology("u4", 4, links=tuple(Link(i, (i + 1) % 4, 1.0, 10.0) for i in range(4)))
    s = make_baseline("one_shot", Collective("allreduce", 4), u)
    assert s.meta["relayed"] == 8


def test_multi_ring_finds_the_nvlink_rings_of_dgx1():
    topo = dgx1()
    rings = find_rings(topo)
    assert len(rings) == 6  # one per NVLink of a GPU
    uses = Counter()
    for order in rings:
        assert is_ring(topo, order) and sorted(order) == list(range(8))
        uses.update((order[i], order[(i + 1) % 8]) for i in range(8))
    for (a, b), u in uses.items():  # no link carries more rings than it has NVLinks (25 GB/s each)
        assert u <= topo.connection(a, b).bw / 25.0
    s = make_baseline("multi_ring", Collective("allgather", 8, 12), topo)
    assert len(s.meta["rings"]) == 6
    for op in sends(s):  # ring k's transfers are on channel k and go to the successor on ring k
        o = s.meta["rings"][op.channel]
        assert o[(o.index(op.rank) + 1) % 8] == op.peer
    assert Counter(op.channel for op in sends(s)) == dict.fromkeys(range(6), 8 * 7 * 2)  # 2 of 12 chunks per ring


def test_min_chunk_factor():
    assert min_chunk_factor("multi_ring", "allgather", dgx1()) == 6
    assert min_chunk_factor("multi_ring", "all-reduce", dgx1()) == 48
    assert min_chunk_factor("hierarchical", "allreduce", get_topology("ndv2x2")) == 16
    assert min_chunk_factor("binomial_tree", "broadcast", dgx1()) == 1
    for name, topo in (("ring", dgx1()), ("multi_ring", dgx1()), ("recursive_halving", dgx1()), ("direct", fully_connected(8))):
        c = min_chunk_factor(name, "allreduce", topo)
        s = make_baseline(name, Collective("allreduce", 8, c), topo)
        # with that factor every rank sends something in every ring/block: all ranks busy, evenly
        per_rank = per_rank_send_chunks(s)
        assert len(per_rank) == 8 and len(set(per_rank.values())) == 1, name


def test_multi_ring_limits_and_speed():
    with pytest.raises(CollectiveError, match="only one ring"):
        make_baseline("multi_ring", Collective("allreduce", 16, 4), get_topology("ndv2x2"))
    with pytest.raises(CollectiveError, match="chunk factor 1"):
        make_baseline("multi_ring", Collective("allreduce", 8, 1), ring(8))
    s = make_baseline("multi_ring", Collective("allreduce", 8, 3), dgx1())
    assert len(s.meta["rings"]) == 3  # never more rings than chunks
    topo = ring(8)
    one = make_baseline("ring", Collective("allreduce", 8, 16), topo)
    two = make_baseline("multi_ring", Collective("allreduce", 8, 16), topo)
    assert two.meta["rings"] == [list(range(8)), list(range(7, -1, -1))]
    size = 1 << 28
    ratio = simulate(one, topo, size).time_us / simulate(two, topo, size).time_us
    assert 1.9 < ratio < 2.1  # both directions of every link busy


@pytest.mark.parametrize("module", ["_util", "ring", "multi_ring", "recursive", "direct", "tree", "hierarchical", "__init__"])
def test_docstring_examples(module):
    mod = importlib.import_module("ccsynth.synth.baselines" + ("" if module == "__init__" else f".{module}"))
    result = doctest.testmod(mod)
    assert result.failed == 0 and result.attempted > 0
