"""Allgather routing on topologies small enough to check by hand: weights, distances, candidate DAGs, the MILP.

Every topology here has alpha 1 us and 10 GB/s per direction unless said
otherwise, so a piece of 1000 B takes 0.1 us of bandwidth time on a link and
every latency weight is 1 + 0.001 (the per-hop term) = 1.001.
"""

import doctest
import importlib

import pytest

from ccsynth.synth.paths import HOP_SHARE, LatencyPaths, latency_weights
from ccsynth.synth.routing import CandidateDag, candidate_edges, route_allgather
from ccsynth.synth.sketch import Sketch
from ccsynth.topologies.model import Link, Topology
from toys import bidirectional


def line3() -> Topology:
    """0 - 1 - 2"""
    return bidirectional(3, [(0, 1), (1, 2)])


def ring4() -> Topology:
    """0 - 1 - 2 - 3 - 0"""
    return bidirectional(4, [(0, 1), (1, 2), (2, 3), (3, 0)])


def triangle() -> Topology:
    return bidirectional(3, [(0, 1), (1, 2), (2, 0)])


# ----------------------------------------------------------------------------- weights and distances
def test_weights_add_a_per_hop_share_of_the_smallest_alpha():
    t = Topology("mixed", 3, links=(Link(0, 1, 2.0, 10.0), Link(1, 0, 2.0, 10.0), Link(1, 2, 0.5, 10.0),
                                    Link(2, 1, 0.5, 10.0)))
    w = latency_weights(Sketch().bind(t))
    assert HOP_SHARE == 1e-3
    assert w == {(0, 1): 2.0005, (1, 0): 2.0005, (1, 2): 0.5005, (2, 1): 0.5005}


def test_weights_when_every_alpha_is_zero_count_hops():
    w = latency_weights(Sketch().bind(bidirectional(3, [(0, 1), (1, 2)], alpha=0.0)))
    assert set(w.values()) == {1e-3}


def test_distances_from_and_to_respect_the_edge_filter():
    paths = LatencyPaths(Sketch().bind(ring4()))
    everything = paths.distances_from(0, lambda u, v: True)
    assert everything == pytest.approx({0: 0.0, 1: 1.001, 3: 1.001, 2: 2.002})
    clockwise = paths.distances_from(0, lambda u, v: v == (u + 1) % 4)
    assert clockwise == pytest.approx({0: 0.0, 1: 1.001, 2: 2.002, 3: 3.003})
    # towards 0 clockwise only: 3 is one hop away, 1 three hops
    assert paths.distances_to(0, lambda u, v: v == (u + 1) % 4) == pytest.approx({0: 0.0, 3: 1.001, 2: 2.002,
                                                                                    1: 3.003})
    # a rank the filter cuts off is absent
    assert paths.distances_from(0, lambda u, v: (u, v) != (0, 1) and (u, v) != (0, 3)) == {0: 0}


# ----------------------------------------------------------------------------- candidate DAGs
def test_line_candidates_are_the_unique_paths():
    lt = Sketch().bind(line3())
    assert candidate_edges(lt, 0, 0, 0) == CandidateDag(
        edges=[(0, 1), (1, 2)], order=[0, 1, 2], slack={(0, 1): 0.0, (1, 2): 0.0}, layer={0: 0, 1: 1, 2: 2})
    # from the middle both ends are one hop away; ties go by rank offset (2 is 1 after 1, 0 is 2 after)
    mid = candidate_edges(lt, 1, 0, 0)
    assert mid.order == [1, 2, 0]
    assert mid.edges == [(1, 2), (1, 0)]
    assert mid.layer == {1: 0, 2: 1, 0: 1}
    # on a line there is nothing sideways: detours change nothing
    assert candidate_edges(lt, 1, 0, 1) == mid


def test_ring_candidates_reach_the_opposite_rank_both_ways():
    dag = candidate_edges(Sketch().bind(ring4()), 0, 0, 0)
    assert dag.order == [0, 1, 3, 2]
    assert dag.edges == [(0, 1), (0, 3), (1, 2), (3, 2)]  # by receiver, then sender, in that order
    assert dag.layer == {0: 0, 1: 1, 3: 1, 2: 2}
    assert set(dag.slack.values()) == {0.0}


def test_detours_add_sideways_edges_with_their_latency_slack():
    lt = Sketch().bind(triangle())
    direct = candidate_edges(lt, 0, 0, 0)
    assert direct.edges == [(0, 1), (0, 2)]
    side = candidate_edges(lt, 0, 0, 1)
    # 1 and 2 are both one hop from 0: the edges between them go sideways, one weight longer than direct
    assert side.edges == [(0, 1), (2, 1), (0, 2), (1, 2)]
    assert side.slack[(0, 1)] == side.slack[(0, 2)] == 0.0
    assert side.slack[(1, 2)] == pytest.approx(1.001) and side.slack[(2, 1)] == pytest.approx(1.001)
    assert side.layer == {0: 0, 1: 1, 2: 1}


def test_fewer_hops_win_a_latency_tie():
    """0 -> 2 directly (alpha 2) ties with 0 -> 1 -> 2 (alpha 1 + 1); the per-hop term keeps only the direct edge."""
    t = Topology("tie", 3, links=(Link(0, 1, 1.0, 10.0), Link(1, 0, 1.0, 10.0), Link(1, 2, 1.0, 10.0),
                                  Link(2, 1, 1.0, 10.0), Link(0, 2, 2.0, 10.0), Link(2, 0, 2.0, 10.0)))
    dag = candidate_edges(Sketch().bind(t), 0, 0, 0)
    assert dag.edges == [(0, 1), (0, 2)]
    assert dag.layer == {0: 0, 1: 1, 2: 2}


# ----------------------------------------------------------------------------- the MILP
def test_line_routing_is_forced_and_its_bandwidth_time_is_two_pieces():
    r = route_allgather(Sketch().bind(line3()), 1, 1000.0)
    assert r.flows == {(0, 0): {(0, 1): 1, (1, 2): 1}, (1, 0): {(1, 2): 1, (1, 0): 1}, (2, 0): {(2, 1): 1, (1, 0): 1}}
    # link 0->1 carries only rank 0's chunk, link 1->2 those of ranks 0 and 1: 2 x 1000 B / 10 GB/s
    assert r.t_bw_us == pytest.approx(0.2)


@pytest.mark.parametrize("symmetry", [(), ((1, 4),)])
def test_ring_routing_splits_the_pieces_for_the_opposite_rank(symmetry):
    """Two pieces per rank on a 4-ring: 6 piece-hops per source, 24 over 8 links, so T = 3 x 0.1 us exactly
    when every source sends one piece for the opposite rank each way (not splitting puts 4 on some link)."""
    r = route_allgather(Sketch(symmetry=symmetry).bind(ring4()), 2, 1000.0)
    assert r.t_bw_us == pytest.approx(0.3)
    for s in range(4):
        left, right, opposite = (s - 1) % 4, (s + 1) % 4, (s + 2) % 4
        assert r.flows[(s, 0)] == {(s, right): 2, (s, left): 2, (right, opposite): 1, (left, opposite): 1}


def test_symmetry_makes_every_source_an_image_of_the_representative():
    r = route_allgather(Sketch(symmetry=((1, 4),)).bind(ring4()), 1, 1000.0)
    rep = r.flows[(0, 0)]
    for s in range(4):
        assert r.flows[(s, 0)] == {((u + s) % 4, (v + s) % 4): k for (u, v), k in rep.items()}
    assert r.n_vars_full - 1 == 4 * (r.n_vars - 1)


@pytest.mark.parametrize("module", ["paths", "routing"])
def test_docstring_examples(module):
    result = doctest.testmod(importlib.import_module(f"ccsynth.synth.{module}"))
    assert result.failed == 0 and result.attempted > 0
