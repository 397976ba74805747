"""Lowering waves to schedules: wave windows, merged transfers, reductions towards the owner."""

import doctest
import importlib

import pytest

from ccsynth.collectives.spec import Collective
from ccsynth.collectives.verify import verify
from ccsynth.synth.contiguity import chain_waves, single_waves
from ccsynth.synth.lowering import lower_allgather, lower_reduce_scatter
from ccsynth.synth.ordering import order_moves
from ccsynth.synth.routing import route_allgather
from ccsynth.synth.sketch import Sketch
from ccsynth.topologies.model import Link, Topology

PAIR = Topology("p", 2, links=(Link(0, 1, 5.0, 10.0), Link(1, 0, 5.0, 10.0)))
PAIR_SKETCH = Sketch(symmetry=((1, 2),))


def _sends(sched, rank):
    return [op for op in sched.ops if op.rank == rank and op.kind == "send"]


@pytest.mark.parametrize("window, second_waits", [(1, True), (0, False), (2, False)])
def test_wave_window_orders_the_waves_of_a_connection(window, second_waits):
    """Two pieces per rank, a wave each: with window 1 the second send waits for the first; with 0 (data only)
    or 2 (two waves in flight) it does not."""
    plan = order_moves(route_allgather(PAIR_SKETCH.bind(PAIR), 2, 100.0))
    s = lower_allgather(chain_waves(plan), Collective("allgather", 2, 2), PAIR, PAIR_SKETCH, window)
    verify(s, PAIR)
    first, second = _sends(s, 0)
    assert (first.src.index, second.src.index) == (0, 1)
    assert (first.id in second.deps) is second_waits
    assert s.meta["wave_window"] == window


def test_a_wave_of_adjacent_pieces_is_one_transfer():
    plan = order_moves(route_allgather(PAIR_SKETCH.bind(PAIR), 2, 100.0))
    s = lower_allgather(single_waves(plan), Collective("allgather", 2, 2), PAIR, PAIR_SKETCH)
    verify(s, PAIR)
    (send,) = _sends(s, 0)
    assert (send.src.buf, send.src.index, send.src.count) == ("i", 0, 2)
    (recv,) = [op for op in s.ops if op.rank == 1 and op.kind == "recv"]
    assert (recv.dst.buf, recv.dst.index, recv.dst.count) == ("o", 0, 2)


def test_reduce_scatter_stages_the_sums_of_several_children():
    """Star 1 - 0 - 2: rank 0's piece gets partial sums from both leaves; each lands in its own scratch chunk
    and is reduced locally. The leaves' pieces pass through 0, which has one child each: fused recv-reduce."""
    star = Topology("star", 3, links=tuple(Link(a, b, 1.0, 10.0) for x, y in ((0, 1), (0, 2))
                                           for a, b in ((x, y), (y, x))))
    plan = order_moves(route_allgather(Sketch().bind(star.reversed()), 1, 1000.0))
    s = lower_reduce_scatter(chain_waves(plan), Collective("reduce_scatter", 3, 1), star, Sketch())
    verify(s, star)
    recvs = [op for op in s.ops if op.rank == 0 and op.kind == "recv"]
    staged = [op for op in recvs if not op.reduce]
    fused = [op for op in recvs if op.reduce]
    assert sorted(op.peer for op in staged) == [1, 2] and all(op.dst.buf == "s" for op in staged)
    assert sorted(op.peer for op in fused) == [1, 2]
    local = [op for op in s.ops if op.rank == 0 and op.kind == "reduce"]
    assert sorted(op.src.index for op in local) == sorted(op.dst.index for op in staged)
    assert all((op.dst.buf, op.dst.index) == ("o", 0) for op in local)
    # the leaves receive their sums fused into their output
    for leaf in (1, 2):
        (recv,) = [op for op in s.ops if op.rank == leaf and op.kind == "recv"]
        assert recv.reduce and (recv.dst.buf, recv.dst.index) == ("o", 0)


def test_docstring_examples():
    result = doctest.testmod(importlib.import_module("ccsynth.synth.lowering"))
    assert result.failed == 0 and result.attempted > 0


def test_gather_allreduce_merges_own_and_relayed_pieces_correctly():
    # dgx1, 4 KiB, single waves: a relay forwards its own piece and relayed ones in one message.
    # The lowering once read the relay's own piece from a scratch slot nothing wrote (caught by verify).
    from ccsynth.collectives.spec import Collective
    from ccsynth.collectives.verify import verify
    from ccsynth.synth.contiguity import single_waves
    from ccsynth.synth.lowering import lower_allreduce_gather
    from ccsynth.synth.ordering import order_moves
    from ccsynth.synth.routing import route_allgather
    from ccsynth.synth.sketch import default_sketch
    from ccsynth.topologies import get_topology

    topo = get_topology("dgx1")
    coll = Collective("allreduce", 8)
    sk = default_sketch(topo, coll, 4096)
    lt = sk.bind(topo)
    plan = order_moves(route_allgather(lt, 1, 4096.0))
    for window in (0, 1, 2):
        verify(lower_allreduce_gather(single_waves(plan), coll, topo, sk, window), topo)
