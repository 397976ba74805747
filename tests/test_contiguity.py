"""Contiguity (which pieces travel together): cases where merging pays, and where it must not.

Pieces of 10000 B at 10 GB/s take 1 us of data on a link; a wave of ``k``
pieces costs ``alpha + k`` us.
"""

import doctest
import importlib

import pytest

from ccsynth.synth.contiguity import ALPHA_SHARE, chain_waves, dp_waves, schedule_waves, single_waves
from ccsynth.synth.ordering import order_moves
from ccsynth.synth.routing import Routing, route_allgather
from ccsynth.synth.sketch import Sketch
from ccsynth.topologies.model import Link, Topology


def relay_plan(alpha_01: float, alpha_12: float):
    """Rank 0's two pieces travel 0 -> 1 -> 2 (a hand-made routing: only that chunk moves)."""
    links = (Link(0, 1, alpha_01, 10.0), Link(1, 0, alpha_01, 10.0), Link(1, 2, alpha_12, 10.0),
             Link(2, 1, alpha_12, 10.0))
    lt = Sketch().bind(Topology("relay", 3, links=links))
    flows = {(0, 0): {(0, 1): 2, (1, 2): 2}, (1, 0): {}, (2, 0): {}}
    return order_moves(Routing("allgather", lt, 2, 10_000.0, [(0, 1)], flows, {}, {}, 0.0, 0, 0, 0))


def test_high_alpha_hop_merges_and_low_alpha_hop_does_not():
    """alpha 5 on 0 -> 1, 0 on 1 -> 2. One piece per wave: 0 -> 1 at [0, 6] and [6, 12], 1 -> 2 at [6, 7] and
    [12, 13]: 13 us. One wave on 0 -> 1 ([0, 7]), then the pieces one by one on 1 -> 2: 9 us."""
    plan = relay_plan(5.0, 0.0)
    assert plan.makespan_us == pytest.approx(13.0)
    for w in (dp_waves(plan), schedule_waves(plan)):
        assert w.groups == {(0, 1): [[0, 1]], (1, 2): [[0], [1]]}
        assert w.makespan_us == pytest.approx(9.0)
        assert sorted(w.end.values()) == pytest.approx([7.0, 7.0, 8.0, 9.0])


def test_low_alpha_relay_keeps_pieces_apart():
    """alpha 0.2 everywhere: piece by piece the relay forwards the first piece while the second is on the wire
    (3 x 1.2 = 3.6 us); one wave per link would wait for both pieces at every hop (2 x 2.2 = 4.4 us)."""
    plan = relay_plan(0.2, 0.2)
    assert single_waves(plan).makespan_us == pytest.approx(4.4)
    for w in (dp_waves(plan), schedule_waves(plan)):
        assert w.groups == {(0, 1): [[0], [1]], (1, 2): [[0], [1]]}
        assert w.makespan_us == pytest.approx(3.6)


def test_one_hop_high_alpha_sends_everything_in_one_wave():
    """4 pieces of 0.01 us behind an alpha of 5 us: 5 + 4 x 0.01 instead of 4 x 5.01."""
    pair = Topology("p", 2, links=(Link(0, 1, 5.0, 10.0), Link(1, 0, 5.0, 10.0)))
    plan = order_moves(route_allgather(Sketch(symmetry=((1, 2),)).bind(pair), 4, 100.0))
    assert chain_waves(plan).makespan_us == pytest.approx(20.04)
    w = schedule_waves(plan)
    assert w.groups == {(0, 1): [[0, 1, 2, 3]]}
    assert w.makespan_us == pytest.approx(5.04)


def test_negligible_alpha_is_never_grouped():
    """alpha below ALPHA_SHARE of a piece's time: no grouping is even considered."""
    pp = 0.01
    pair = Topology("p", 2, links=(Link(0, 1, ALPHA_SHARE * pp / 2, 10.0), Link(1, 0, ALPHA_SHARE * pp / 2, 10.0)))
    plan = order_moves(route_allgather(Sketch(symmetry=((1, 2),)).bind(pair), 4, 100.0))
    w = schedule_waves(plan)
    assert w.method == "dp" and w.solve is None
    assert w.groups == {(0, 1): [[0], [1], [2], [3]]}
    assert w.makespan_us == pytest.approx(4 * (pp + ALPHA_SHARE * pp / 2))


def test_docstring_examples():
    result = doctest.testmod(importlib.import_module("ccsynth.synth.contiguity"))
    assert result.failed == 0 and result.attempted > 0
