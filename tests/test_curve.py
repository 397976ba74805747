"""Size-dependent costs (topologies/curve.py): the curve, the simulator's use of it, bounds, the topology file."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ccsynth.collectives.builder import ScheduleBuilder
from ccsynth.collectives.spec import Collective
from ccsynth.errors import SizeError, TopologyError
from ccsynth.synth.baselines import make_baseline
from ccsynth.synth.executor_model import simulate_run
from ccsynth.synth.simulate import simulate
from ccsynth.topologies import fully_connected
from ccsynth.topologies.curve import SizeCurve
from ccsynth.topologies.io import topology_from_dict, topology_to_dict, topology_to_json
from ccsynth.topologies.model import Link, Topology


def pair(curve: SizeCurve | None = None, local_curve: SizeCurve | None = None, **kw) -> Topology:
    # 1 us latency, 10 GB/s = 1e4 bytes per us
    return Topology("pair", 2, links=(Link(0, 1, 1.0, 10.0), Link(1, 0, 1.0, 10.0)), message_curve=curve,
                    local_curve=local_curve, **kw)


def exchange():
    """Each rank sends its one chunk to the other (allgather on 2 ranks): one message each way."""
    b = ScheduleBuilder(Collective("allgather", 2), "pairwise")
    _ = b.transfer(0, 1, ("i", 0), ("o", 0))
    _ = b.transfer(1, 0, ("i", 0), ("o", 1))
    return b.build()


# ------------------------------------------------------------------ the curve
def test_cost_is_piecewise_linear_between_points_and_flat_factor_outside():
    c = SizeCurve((10_000, 40_000), (0.5, 1.0))
    assert c.cost_bytes(10_000) == 5_000
    assert c.cost_bytes(40_000) == 40_000
    # halfway in bytes between the points: halfway in cost, 5000 + (40000 - 5000) / 2
    assert c.cost_bytes(25_000) == pytest.approx(22_500)
    assert c.cost_bytes(2_000) == 1_000  # below: the first factor
    assert c.cost_bytes(100_000) == 100_000  # above: the last factor
    assert c.cost_bytes(0) == 0
    assert c.fastest == 0.5
    assert c.factor(25_000) == pytest.approx(0.9)


@pytest.mark.parametrize("sizes, factors", [((), ()), ((1, 2), (1.0,)), ((2, 1), (1.0, 1.0)), ((0,), (1.0,)),
                                            ((1,), (0.0,)), ((1,), (float("nan"),)), ((1,), (1e9,))])
def test_bad_curves_are_refused(sizes, factors):
    with pytest.raises(TopologyError):
        SizeCurve(sizes, factors)


# ------------------------------------------------------------------ the simulator, by hand
@pytest.mark.parametrize("size, expected", [
    # the call's size picks the factor; each message (half the size) moves factor x its bytes
    (10_000, 1.0 + 0.5 * 5_000 / 1e4),  # on the first point: half its bytes' time
    (40_000, 1.0 + 20_000 / 1e4),  # the last point, factor 1
    (25_000, 1.0 + 0.9 * 12_500 / 1e4),  # cost interpolated: (5000 + 35000 / 2) / 25000 = 0.9
    (400_000, 1.0 + 200_000 / 1e4),  # beyond the last point: factor 1
    (2_000, 1.0 + 0.5 * 1_000 / 1e4),  # below the first point: its factor
])
def test_simulator_charges_every_message_the_calls_factor(size, expected):
    t = pair(SizeCurve((10_000, 40_000), (0.5, 1.0)))
    assert simulate(exchange(), t, size).time_us == pytest.approx(expected)


def test_without_a_curve_the_constants_alone():
    assert simulate(exchange(), pair(), 20_000).time_us == pytest.approx(1.0 + 1.0)
    # a curve of factor 1 everywhere is the constant model
    assert simulate(exchange(), pair(SizeCurve((1.0,), (1.0,))), 50_000).time_us == \
        simulate(exchange(), pair(), 50_000).time_us


def test_curve_cost_shares_bandwidth_and_queues_on_a_stream():
    """Two messages on one connection and channel: the data phases run one after another, each at its cost;
    the factor is the call's (40 KB), not the message's (10 KB)."""
    b = ScheduleBuilder(Collective("allgather", 2, 2), "two")
    for j in range(2):
        b.transfer(0, 1, ("i", j), ("o", j))
        b.transfer(1, 0, ("i", j), ("o", 2 + j))
    s = b.build()
    t = pair(SizeCurve((1_000, 100_000), (0.25, 1.0)))
    # 40 KB: e = 250 + (100000 - 250) * 39000 / 99000 bytes for 40 KB; each 10 KB chunk a quarter of that
    factor = (250 + (100_000 - 250) * 39_000 / 99_000) / 40_000
    assert simulate(s, t, 40_000).time_us == pytest.approx(1.0 + 2 * factor * 10_000 / 1e4)


def test_local_curve_scales_local_copies_and_reductions():
    b = ScheduleBuilder(Collective("allgather", 2), "copies")
    for r in range(2):
        b.copy(r, ("i", 0), ("o", r))
    s = b.build()
    base = dict(local_bw=1.0, local_overhead=0.5)  # 1e3 bytes per us, 0.5 us a call
    curve = SizeCurve((1_000, 16_000), (0.5, 1.0))
    assert simulate(s, pair(**base), 8_000).time_us == pytest.approx(0.5 + 4.0)
    # a call of 8 KB: factor (500 + 15500 * 7000 / 15000) / 8000; each copy moves 4 KB
    factor = (500 + 15_500 * 7 / 15) / 8_000
    assert simulate(s, pair(local_curve=curve, **base), 8_000).time_us == pytest.approx(0.5 + factor * 4.0)


def test_executor_model_uses_the_curves():
    ring = make_baseline("ring", Collective("allreduce", 2, 2), fully_connected(2))
    t0 = Topology("fc2", 2, links=(Link(0, 1, 1.0, 2.0, 0.5), Link(1, 0, 1.0, 2.0, 0.5)), local_bw=2.0,
                  overhead_scope="rank")
    fast = SizeCurve((4096.0, 1 << 20), (0.5, 0.5))
    t1 = Topology("fc2", 2, links=t0.links, local_bw=2.0, overhead_scope="rank", message_curve=fast, local_curve=fast)
    a, b = simulate_run(ring, t0, 1 << 20).time_us, simulate_run(ring, t1, 1 << 20).time_us
    assert b < 0.6 * a


# ------------------------------------------------------------------ bounds
def test_fastest_scales_every_bandwidth_by_the_fastest_factor():
    t = pair(SizeCurve((1_000, 10_000), (2.0, 0.5)), SizeCurve((1_000.0,), (0.25,)), local_bw=3.0)
    f = t.fastest
    assert f.message_curve is None and f.local_curve is None
    assert [l.bw for l in f.links] == [20.0, 20.0]
    assert f.local_bw == 12.0
    assert pair().fastest is not None and pair().fastest == pair()


curves = st.lists(st.tuples(st.floats(1.0, 1e7), st.floats(0.05, 20.0)), min_size=1, max_size=5).map(
    lambda pts: sorted(dict(pts).items())).map(lambda pts: SizeCurve(tuple(m for m, _ in pts), tuple(f for _, f in pts)))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(curve=curves, local=st.one_of(st.none(), curves), size=st.floats(1.0, 1e8),
       algo=st.sampled_from(["ring", "recursive_doubling", "direct", "one_shot"]))
def test_bounds_never_above_the_simulated_time_with_curves(curve, local, size, algo):
    topo = fully_connected(4)
    t = Topology("fc4c", 4, links=tuple(Link(c.src, c.dst, c.alpha, c.bw, c.overhead) for c in topo.connections()),
                 local_bw=5.0, message_curve=curve, local_curve=local)
    s = make_baseline(algo, Collective("allreduce", 4, 4 if algo == "ring" else 1), t)
    r = simulate(s, t, size)
    assert r.lower_bound_us <= r.time_us * (1 + 1e-9)


# ------------------------------------------------------------------ the topology file
def test_topology_file_round_trips_the_curves():
    t = pair(SizeCurve((4096, 65536), (0.6, 1.0)), SizeCurve((1024.0, 1 << 24), (0.3, 1.0)), local_bw=4.0)
    d = json.loads(topology_to_json(t))
    assert d["message_curve"] == {"version": 1, "sizes_bytes": [4096.0, 65536.0], "factors": [0.6, 1.0]}
    assert topology_from_dict(d) == t
    # no curve: no key, and the file reads as before
    assert "message_curve" not in topology_to_dict(pair())


@pytest.mark.parametrize("bad, message", [
    ({"sizes_bytes": [1, 2], "factors": [1.0]}, "as many factors"),
    ({"sizes_bytes": [1], "factors": [1.0], "version": 2}, "version"),
    ({"sizes_bytes": [1], "factors": [1.0], "points": 3}, "unknown key"),
    ([1, 2], "must be an object"),
    ({"sizes_bytes": [2, 1], "factors": [1.0, 1.0]}, "increase"),
])
def test_bad_curves_in_a_file_name_the_key(bad, message):
    d = topology_to_dict(pair())
    d["message_curve"] = bad
    with pytest.raises(TopologyError, match=message) as e:
        topology_from_dict(d)
    assert "message_curve" in str(e.value)


# ------------------------------------------------------------------ forwarded messages
def forward_chain():
    """Rank 0 sends its chunk to rank 1, which passes it back (a forward: its send waits for its receive)."""
    b = ScheduleBuilder(Collective("allgather", 2, 2), "chain")
    b.transfer(0, 1, ("i", 0), ("o", 0))
    b.transfer(1, 0, ("o", 0), ("o", 1))
    return b.build()


def test_forwarded_messages_pay_the_forward_factor_and_fresh_ones_do_not():
    fwd = SizeCurve((10_000.0,), (3.0,))
    # allgather of 2 x 2 chunks, 40 KB: 10 KB per chunk; 1 us a message of it at 1e4 bytes per us
    plain = simulate(forward_chain(), pair(), 40_000).time_us
    assert plain == pytest.approx(2 * (1.0 + 1.0))
    # the second message forwards what the first brought: 3x its bytes
    assert simulate(forward_chain(), pair(forward_curve=fwd), 40_000).time_us == pytest.approx(2.0 + 1.0 + 3.0)
    # an exchange of the call's own inputs forwards nothing
    assert simulate(exchange(), pair(forward_curve=fwd), 20_000).time_us == simulate(exchange(), pair(), 20_000).time_us


def test_a_send_after_local_work_on_received_data_is_a_forward():
    b = ScheduleBuilder(Collective("allgather", 2, 2), "via copy")
    b.transfer(0, 1, ("i", 0), ("o", 0))
    b.copy(1, ("o", 0), ("o", 1))
    b.transfer(1, 0, ("o", 1), ("o", 2))
    s = b.build()
    fwd = SizeCurve((10_000.0,), (2.0,))
    assert simulate(s, pair(forward_curve=fwd), 40_000).time_us == pytest.approx(2.0 + 1.0 + 2.0)


def test_forward_curve_checks_and_round_trips():
    with pytest.raises(TopologyError, match="at least 1"):
        pair(forward_curve=SizeCurve((1.0,), (0.5,)))
    t = pair(forward_curve=SizeCurve((4096.0, 1 << 20), (1.0, 4.0)))
    d = json.loads(topology_to_json(t))
    assert d["forward_curve"]["factors"] == [1.0, 4.0]
    assert topology_from_dict(d) == t
    assert t.fastest.forward_curve is None
    assert "forward_curve" not in topology_to_dict(pair())


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fwd=curves.map(lambda c: SizeCurve(c.sizes, tuple(max(1.0, f) for f in c.factors))), size=st.floats(1.0, 1e8),
       algo=st.sampled_from(["ring", "recursive_halving", "direct"]))
def test_bounds_never_above_the_simulated_time_with_forwards(fwd, size, algo):
    topo = fully_connected(4)
    t = Topology("fc4f", 4, links=tuple(Link(c.src, c.dst, c.alpha, c.bw, c.overhead) for c in topo.connections()),
                 local_bw=5.0, forward_curve=fwd)
    s = make_baseline(algo, Collective("allreduce", 4, 4), t)
    r = simulate(s, t, size)
    assert r.lower_bound_us <= r.time_us * (1 + 1e-9)


# ------------------------------------------------------------------ footprint (issue 10, h29-cache)
FOOT = SizeCurve((1_000_000.0, 4_000_000.0), (1.0, 3.0))


def test_footprint_factor_scales_messages_by_the_calls_footprint_by_hand():
    """exchange(): one message each way of half the size; a schedule's own working set is its input and output
    chunks (1 + 2 of S/2 each: 1.5 S per rank)."""
    t = pair(footprint_curve=FOOT)
    # 20 KB call: working set 30 KB, below the first point: factor 1, 1 us + 10 KB / 1e4
    assert simulate(exchange(), t, 20_000).time_us == pytest.approx(1.0 + 1.0)
    # told a footprint of 2.5 MB: cost (1e6 + (12e6 - 1e6) * 1.5e6 / 3e6) / 2.5e6 = 2.6 per byte
    assert simulate(exchange(), t, 20_000, footprint_bytes=2_500_000).time_us == pytest.approx(1.0 + 2.6)
    # beyond the last point: 3x; a 4 MB call's own working set is 6 MB
    assert simulate(exchange(), t, 4_000_000).time_us == pytest.approx(1.0 + 3.0 * 2_000_000 / 1e4)


def test_footprint_multiplies_the_message_curve_and_leaves_local_work_alone():
    copies = ScheduleBuilder(Collective("allgather", 2), "copies")
    for r in range(2):
        copies.copy(r, ("i", 0), ("o", r))
    t = pair(SizeCurve((1.0,), (0.5,)), footprint_curve=FOOT, local_bw=1.0, overhead_scope="rank")
    # each copy 10 KB at 1e3 B/us = 10 us, whatever the footprint
    assert simulate(copies.build(), t, 20_000, footprint_bytes=4e6).time_us == pytest.approx(10.0)
    # the message: 10 KB x 0.5 (message curve) x 3 (footprint) = 15 KB at 1e4 B/us = 1.5 us after 1 us latency
    assert simulate(exchange(), t, 20_000, footprint_bytes=4e6).time_us == pytest.approx(1.0 + 1.5)


def test_without_a_footprint_curve_the_footprint_changes_nothing():
    for fp in (None, 0.0, 1e9):
        assert simulate(exchange(), pair(), 20_000, footprint_bytes=fp).time_us == pytest.approx(2.0)
    with pytest.raises(SizeError, match="footprint"):
        simulate(exchange(), pair(footprint_curve=FOOT), 20_000, footprint_bytes=-1.0)


def test_executor_working_set_and_interleaved_footprint():
    """The executor's working set of a 2-rank ring allreduce at 1 MiB: input, output and staging for the received
    half (1 + 1 + 0.5 MiB); interleaved with MPI's own (input and output: 2 MiB) the footprint is their sum, and
    the prediction at that footprint is the topology's factor times the bytes."""
    from ccsynth.bench.predict import interleaved_footprint
    from ccsynth.synth.executor_model import ExecutorSettings, working_set_run
    ring = make_baseline("ring", Collective("allreduce", 2, 2), fully_connected(2))
    assert working_set_run(ring, 1 << 20) == 2.5 * (1 << 20)
    assert interleaved_footprint("allreduce", 2, 1 << 20, [ring, None], ExecutorSettings()) == 4.5 * (1 << 20)
    t0 = Topology("fc2", 2, links=(Link(0, 1, 1.0, 2.0, 0.5), Link(1, 0, 1.0, 2.0, 0.5)), local_bw=2.0,
                  overhead_scope="rank")
    flat = simulate_run(ring, t0, 1 << 20).time_us
    t = Topology("fc2", 2, links=t0.links, local_bw=2.0, overhead_scope="rank",
                 footprint_curve=SizeCurve((3.0 * (1 << 20),), (1.0,)))
    assert simulate_run(ring, t, 1 << 20).time_us == flat  # its own 2.5 MiB: factor 1
    # a footprint where messages cost twice as much: slower, by less than twice (latency, overheads, local work)
    t2 = Topology("fc2", 2, links=t0.links, local_bw=2.0, overhead_scope="rank",
                  footprint_curve=SizeCurve((3.0 * (1 << 20), 6.0 * (1 << 20)), (1.0, 2.0)))
    slow = simulate_run(ring, t2, 1 << 20, footprint_bytes=8.0 * (1 << 20)).time_us
    assert flat < slow < 2 * flat


def test_catalog_topologies_have_no_footprint_curve_and_round_trip_one():
    from ccsynth.formats.files import list_topologies, get_topology
    for spec, _ in list_topologies():
        if "PATH" not in spec:
            assert get_topology(spec).footprint_curve is None
    t = pair(footprint_curve=FOOT)
    d = topology_to_dict(t)
    assert d["footprint_curve"] == {"version": 1, "sizes_bytes": [1e6, 4e6], "factors": [1.0, 3.0]}
    assert topology_from_dict(json.loads(topology_to_json(t))) == t
    assert "footprint_curve" not in topology_to_dict(pair())
    with pytest.raises(TopologyError, match="footprint_curve"):
        topology_from_dict({**d, "footprint_curve": {"sizes_bytes": [1.0], "factors": [0.0]}})


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([1e3, 3e4, 2e6, 5e7]), st.sampled_from(["ring", "recursive_doubling", "direct"]),
       st.sampled_from([None, 1e6, 1e8]))
def test_bounds_never_above_the_simulated_time_with_a_footprint(size, algo, fp):
    from ccsynth.synth.bounds import lower_bound
    s = make_baseline(algo, Collective("allreduce", 4, 4), fully_connected(4))
    base = fully_connected(4)
    t = Topology(base.name, 4, links=base.links, switches=base.switches, footprint_curve=SizeCurve((1e6, 1e7), (1.0, 2.5)))
    assert lower_bound(s.collective, t, size).time_us <= simulate(s, t, size, footprint_bytes=fp).time_us * (1 + 1e-9)


def test_a_ladder_of_footprints_interpolates_between_neighbours_only():
    """A footprint curve with points a factor of 2 apart (``ccsynth topo profile``'s ladder, h49-probes): between
    two points the cost is linear, so the factor moves from one point's to the next's and no further (hand-computed:
    at 6 MiB, e = 4 + (2 x 8 - 4) x 2 / 4 = 10 MiB, factor 10 / 6), and a point beyond changes nothing below it."""
    M = float(1 << 20)
    c = SizeCurve((2 * M, 4 * M, 8 * M), (1.0, 1.0, 2.0))
    assert c.factor(3 * M) == pytest.approx(1.0) and c.factor(6 * M) == pytest.approx(10 / 6)
    more = SizeCurve((2 * M, 4 * M, 8 * M, 16 * M), (1.0, 1.0, 2.0, 4.0))
    grid = [M * (2 + k / 8) for k in range(8 * 14 + 1)]
    assert [more.factor(m) for m in grid if m <= 8 * M] == [c.factor(m) for m in grid if m <= 8 * M]
    assert all(a <= b + 1e-12 for a, b in zip([more.factor(m) for m in grid], [more.factor(m) for m in grid][1:]))
