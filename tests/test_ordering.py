"""The list scheduler (ordering) on cases where the right order is clear by hand.

Alpha 1 us and 10 GB/s per direction, pieces of 1000 B: every piece occupies
its connection for 1 + 0.1 = 1.1 us.
"""

import doctest
import importlib

import pytest

from ccsynth.synth.alltoall import route_alltoall
from ccsynth.synth.ordering import fair_share_bandwidth, order_moves
from ccsynth.synth.routing import Routing, route_allgather
from ccsynth.synth.sketch import Sketch
from ccsynth.topologies.model import SharedPort
from toys import bidirectional


def _sequence(plan, edge):
    """(chunk, start, end) of the moves on ``edge``, in sending order."""
    return [(plan.moves[m].comm, plan.moves[m].start, plan.moves[m].end) for m, _ in plan.links[edge]]


def _times(plan, edge):
    """start, end, start, end, ... of the moves on ``edge``, in sending order."""
    return [t for _, start, end in _sequence(plan, edge) for t in (start, end)]


def test_the_chunk_the_receiver_must_forward_goes_first():
    """Line 0 - 1 - 2, alltoall: on 0 -> 1 the chunk for 2 (which rank 1 forwards) and the one for 1 are both
    ready at 0. Sending 0->2 first lets 1 -> 2 carry it at 1.1 us, right after 1's own chunk: 2.2 us in all.
    The other order would leave it waiting until 2.2 us and end at 3.3 us."""
    line = bidirectional(3, [(0, 1), (1, 2)])
    plan = order_moves(route_alltoall(Sketch().bind(line), 1, 1000.0))
    n = 3  # alltoall chunks are numbered s * n + d
    assert _sequence(plan, (0, 1)) == [(0 * n + 2, 0.0, 1.1), (0 * n + 1, 1.1, 2.2)]
    assert _sequence(plan, (1, 2)) == [(1 * n + 2, 0.0, 1.1), (0 * n + 2, 1.1, 2.2)]
    assert _sequence(plan, (2, 1)) == [(2 * n + 0, 0.0, 1.1), (2 * n + 1, 1.1, 2.2)]
    assert _sequence(plan, (1, 0)) == [(1 * n + 0, 0.0, 1.1), (2 * n + 0, 1.1, 2.2)]
    assert plan.makespan_us == pytest.approx(2.2)
    relay = next(m for m in plan.moves if (m.comm, m.u) == (0 * n + 2, 1))
    assert plan.moves[relay.parent].u == 0 and relay.parent_end == pytest.approx(1.1)


def test_overlapped_latencies_start_the_next_piece_during_the_previous_data():
    """One link, two pieces: strictly 2 x (1 + 0.1) us; with overlapped latencies the second piece's alpha
    runs under the first piece's data, so the data go back to back: 1 + 0.1 + 0.1 us."""
    pair = bidirectional(2, [(0, 1)])
    routing = route_allgather(Sketch(symmetry=((1, 2),)).bind(pair), 2, 1000.0)
    strict = order_moves(routing)
    overlapped = order_moves(routing, overlap_alpha=True)
    assert _times(strict, (0, 1)) == pytest.approx([0.0, 1.1, 1.1, 2.2])
    assert _times(overlapped, (0, 1)) == pytest.approx([0.0, 1.1, 0.1, 1.2])
    assert overlapped.makespan_us == pytest.approx(1.2)


def test_symmetric_plans_keep_only_representative_moves():
    ring = bidirectional(4, [(0, 1), (1, 2), (2, 3), (3, 0)])
    plan = order_moves(route_allgather(Sketch(symmetry=((1, 4),)).bind(ring), 1, 1000.0))
    # rank 0's chunk: to both neighbours, then one hop on to the opposite rank
    assert len(plan.moves) == 3 and plan.n_moves_full() == 12
    first, second, relay = sorted(plan.moves, key=lambda m: (m.start, m.u, m.v))
    assert [(m.u, m.v) for m in (first, second)] == [(0, 1), (0, 3)]
    assert first.start == second.start == 0.0 and first.end == second.end == pytest.approx(1.1)
    assert relay.u in (1, 3) and relay.v == 2 and plan.moves[relay.parent].v == relay.u
    assert (relay.start, relay.end) == pytest.approx((1.1, 2.2))


def test_a_shared_port_is_split_by_the_pieces_each_connection_carries():
    """Rank 0's links to 1 and 2 (10 GB/s each) share a 6 GB/s port; 2 pieces go to 1 and 1 to 2."""
    t = bidirectional(3, [(0, 1), (0, 2)], shared_ports=(SharedPort("nic", (0,), (1, 2), 6.0),))
    lt = Sketch().bind(t)
    flows = {(0, 0): {(0, 1): 2, (0, 2): 1}, (1, 0): {}, (2, 0): {}}
    routing = Routing("allgather", lt, 3, 1000.0, [(0, 1, 2)], flows, {}, {}, 0.0, 0, 0, 0)
    eff = fair_share_bandwidth(routing)
    assert eff == pytest.approx({(0, 1): 4.0, (0, 2): 2.0})


def test_docstring_examples():
    result = doctest.testmod(importlib.import_module("ccsynth.synth.ordering"))
    assert result.failed == 0 and result.attempted > 0
