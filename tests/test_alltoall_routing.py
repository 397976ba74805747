"""Alltoall routing on a 4-rank ring and a 3-rank line, checked by hand.

Alpha 1 us and 10 GB/s per direction: a piece of 1000 B takes 0.1 us of
bandwidth time on a link.
"""

import doctest
import importlib

import pytest

from ccsynth.synth.alltoall import _round_flow, commodity_edges, route_alltoall
from ccsynth.synth.paths import LatencyPaths
from ccsynth.synth.sketch import Sketch
from ccsynth.topologies.model import Topology
from toys import bidirectional


def ring4() -> Topology:
    return bidirectional(4, [(0, 1), (1, 2), (2, 3), (3, 0)])


def test_commodity_candidates_are_its_shortest_paths():
    lt = Sketch().bind(ring4())
    paths = LatencyPaths(lt)
    assert commodity_edges(lt, 0, 1, 0, paths, [0]) == [(0, 1)]
    assert commodity_edges(lt, 0, 3, 0, paths, [0]) == [(0, 3)]
    # the opposite rank: both directions are shortest; edges by distance from the source
    assert commodity_edges(lt, 0, 2, 0, paths, [0]) == [(0, 1), (0, 3), (1, 2), (3, 2)]


@pytest.mark.parametrize("method", ["milp", "lp"])
def test_ring_alltoall_takes_the_shortest_direction_and_splits_the_opposite_chunk(method):
    """Per source: 2 pieces to each neighbour (1 hop) and 2 to the opposite rank (2 hops): 32 piece-hops over
    8 links, so T >= 4 x 0.1 us; with the rotation symmetry only splitting the opposite chunk reaches it."""
    r = route_alltoall(Sketch(symmetry=((1, 4),)).bind(ring4()), 2, 1000.0, method=method)
    assert r.method == method
    assert r.t_bw_us == pytest.approx(0.4)
    for s in range(4):
        right, opposite, left = (s + 1) % 4, (s + 2) % 4, (s + 3) % 4
        assert r.flows[(s, right)] == {(s, right): 2}
        assert r.flows[(s, left)] == {(s, left): 2}
        assert r.flows[(s, opposite)] == {(s, right): 1, (right, opposite): 1, (s, left): 1, (left, opposite): 1}


def test_line_alltoall_routes_through_the_middle():
    line = bidirectional(3, [(0, 1), (1, 2)])
    r = route_alltoall(Sketch().bind(line), 1, 1000.0)
    assert r.flows[(0, 2)] == {(0, 1): 1, (1, 2): 1}
    assert r.flows[(2, 0)] == {(2, 1): 1, (1, 0): 1}
    assert r.flows[(0, 1)] == {(0, 1): 1} and r.flows[(1, 0)] == {(1, 0): 1}
    # link 0->1 carries the chunks 0->1 and 0->2
    assert r.t_bw_us == pytest.approx(0.2)


def test_lp_rounding_gives_pieces_to_paths_by_largest_remainder():
    edges = [(0, 1), (0, 3), (1, 2), (3, 2)]
    # 1.5 pieces one way, 0.5 the other: shares 1.5 and 0.5 of c=2, floors 1 and 0, the tied remainder
    # goes to the first path found (the one carrying more)
    got = _round_flow((0, 2), edges, {(0, 1): 1.5, (1, 2): 1.5, (0, 3): 0.5, (3, 2): 0.5}, 2)
    assert got == {(0, 1): 2, (1, 2): 2}
    # 3 pieces split 2.4 / 0.6: floors 2 and 0, remainders 0.4 and 0.6: the second path gets the third piece
    got = _round_flow((0, 2), edges, {(0, 1): 2.4, (1, 2): 2.4, (0, 3): 0.6, (3, 2): 0.6}, 3)
    assert got == {(0, 1): 2, (1, 2): 2, (0, 3): 1, (3, 2): 1}
    # flow below the tolerance is no path
    got = _round_flow((0, 2), edges, {(0, 1): 2.0, (1, 2): 2.0, (0, 3): 1e-12, (3, 2): 1e-12}, 2)
    assert got == {(0, 1): 2, (1, 2): 2}


def test_docstring_examples():
    result = doctest.testmod(importlib.import_module("ccsynth.synth.alltoall"))
    assert result.failed == 0 and result.attempted > 0
