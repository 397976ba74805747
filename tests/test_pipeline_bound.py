"""The pipeline bound of a schedule (ccsynth.synth.pipeline_bound) against the simulator it bounds.

The bound must never exceed the simulated time: on random schedules with chains of forwarded messages,
reductions, local work, channels, shared ports, switches, both overhead scopes, protocol switches, size curves and
per-call costs, and on every baseline of several machines at several chunk factors and sizes. Where a
pipeline is all there is (a ring's steps, a hierarchical allgather) it is tight.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ccsynth.collectives.builder import ScheduleBuilder
from ccsynth.collectives.schedule import Chunks, Op, Schedule
from ccsynth.collectives.spec import Collective
from ccsynth.errors import CCSynthError, ScheduleError
from ccsynth.synth.baselines import BASELINES, get_baseline, min_chunk_factor, why_not
from ccsynth.synth.pipeline_bound import pipeline_bound
from ccsynth.synth.simulate import simulate, static_bound
from ccsynth.topologies import get_topology
from ccsynth.topologies.curve import SizeCurve
from ccsynth.topologies.model import Link, SharedPort, Switch, Topology

REL = 1e-9


def _at_most(bound: float, time: float) -> bool:
    return bound <= time * (1 + REL) + 1e-9


@st.composite
def random_case(draw, busy_start: bool = False):
    """A random machine and a random schedule whose ops forward what earlier ops received (pipelines).

    ``busy_start``: first many transfers of the ranks' own input at time 0, a few pairs (and channels) at most,
    so that their streams and engines start busy and what is forwarded queues behind (see
    ``pipeline_bound``'s work of time 0).
    """
    n = draw(st.integers(2, 5))
    bws = st.sampled_from([5.0, 10.0, 25.0])
    alphas = st.sampled_from([0.0, 0.5, 2.0])
    overheads = st.sampled_from([0.0, 0.3, 1.5])
    if draw(st.booleans()):
        links = tuple(Link(a, b, draw(alphas), draw(bws), draw(overheads)) for a in range(n) for b in range(n) if a != b)
        switches: tuple[Switch, ...] = ()
    else:
        links = ()
        switches = (Switch("sw", tuple(range(n)), draw(bws), draw(alphas), draw(overheads)),)
    ports: tuple[SharedPort, ...] = ()
    if draw(st.booleans()):
        srcs = tuple(sorted(draw(st.sets(st.integers(0, n - 1), min_size=1, max_size=n))))
        dsts = tuple(sorted(draw(st.sets(st.integers(0, n - 1), min_size=1, max_size=n))))
        ports = (SharedPort("nic", srcs, dsts, draw(bws)),)
    eager, rendezvous = draw(st.sampled_from([(None, 0.0), (2000.0, 1.5), (0.0, 0.5)]))
    scope = draw(st.sampled_from(["connection", "rank"]))
    curve = draw(st.sampled_from([None, SizeCurve((1000.0, 1 << 20), (1.5, 1.0))]))
    topo = Topology("rand", n, links=links, switches=switches, shared_ports=ports, overhead_scope=scope,
                    eager_limit=eager, rendezvous_alpha=rendezvous,
                    local_overhead=draw(st.sampled_from([0.0, 0.7])), local_bw=draw(st.sampled_from([None, 2.0])),
                    async_progress=draw(st.booleans()) if scope == "rank" else True,
                    receiver_copies=draw(st.booleans()) if scope == "rank" else False,
                    call_overhead=draw(st.sampled_from([0.0, 3.0])), message_curve=curve, local_curve=curve,
                    forward_curve=draw(st.sampled_from([None, SizeCurve((1000.0, 1 << 20), (1.2, 1.1))])))
    c = draw(st.integers(1, 3))
    b = ScheduleBuilder(Collective("allgather", n, c), "random")
    held: list[list[tuple[str, int]]] = [[("i", j) for j in range(c)] for _ in range(n)]  # what each rank has
    for r in range(n):
        b.copy(r, ("i", 0, c), ("o", r * c, c))
    if busy_start:
        pairs = [(a, (a + 1 + draw(st.integers(0, n - 2))) % n) for a in draw(st.lists(st.integers(0, n - 1),
                                                                                      min_size=1, max_size=3))]
        for _ in range(draw(st.integers(2, 12))):
            src, dst = draw(st.sampled_from(pairs))
            slot = draw(st.integers(0, n * c - 1))
            b.transfer(src, dst, ("i", draw(st.integers(0, c - 1))), ("o", slot), reduce=draw(st.booleans()),
                       channel=draw(st.integers(0, 1)))
            held[dst].append(("o", slot))
    for _ in range(draw(st.integers(1, 14))):
        src = draw(st.integers(0, n - 1))
        if draw(st.integers(0, 5)) == 0:
            j = draw(st.integers(0, c - 1))
            b.reduce(src, ("i", j), ("o", src * c + j))
            continue
        dst = draw(st.integers(0, n - 2))
        dst += dst >= src
        buf, idx = draw(st.sampled_from(held[src]))
        slot = draw(st.integers(0, n * c - 1))
        b.transfer(src, dst, (buf, idx), ("o", slot), reduce=draw(st.booleans()), channel=draw(st.integers(0, 1)))
        held[dst].append(("o", slot))
    size = draw(st.sampled_from([0, 1000, 64_000, 1 << 20]))
    return b.build(), topo, size


@settings(suppress_health_check=[HealthCheck.too_slow])  # examples: the hypothesis profile (tests/conftest.py)
@given(random_case())
def test_the_bound_never_exceeds_the_simulated_time(case):
    schedule, topo, size = case
    got = simulate(schedule, topo, size).time_us
    b = pipeline_bound(schedule, topo, size)
    assert _at_most(b.time_us, got), (b, got)
    for part in (b.volume_us, b.engine_us):
        assert _at_most(part + b.call_us, got)


@settings(suppress_health_check=[HealthCheck.too_slow])  # examples: the hypothesis profile (tests/conftest.py)
@given(random_case(busy_start=True))
def test_the_bound_never_exceeds_the_simulated_time_with_streams_busy_from_the_start(case):
    """Streams and engines with many transfers at time 0 and forwarded ones behind them (the work of time 0)."""
    schedule, topo, size = case
    got = simulate(schedule, topo, size).time_us
    b = pipeline_bound(schedule, topo, size)
    assert _at_most(b.time_us, got), (b, got)


def test_a_forwarded_transfer_waits_for_the_streams_work_of_time_0():
    """Four transfers on 0->1 at time 0, then one forwarded on 0->1 and on along 1->3->2: the forwarded one's
    data starts after the four's (first come, first served), so the bound is the simulated time (34 us;
    without the work of time 0 it saw 24 us: the stream's load, or the chain alone)."""
    n = 4
    topo = Topology("l4", n, links=tuple(Link(a, b, 1.0, 10.0, 0.5) for a in range(n) for b in range(n) if a != b))
    b = ScheduleBuilder(Collective("allgather", n, 4), "busy start")
    for j in range(4):
        b.transfer(0, 1, ("i", j), ("o", j))
    b.transfer(2, 0, ("i", 0), ("o", 8))
    b.transfer(0, 1, ("o", 8), ("o", 8))
    b.transfer(1, 3, ("o", 8), ("o", 8))
    b.transfer(3, 2, ("o", 8), ("o", 9))
    schedule = b.build()
    size = 16 * 40_000  # 4 us a chunk
    got = simulate(schedule, topo, size).time_us
    assert got == pytest.approx(34.0)
    assert pipeline_bound(schedule, topo, size).time_us == pytest.approx(got, rel=1e-12)


def test_the_hierarchical_reduce_scatter_bound_sees_the_node_rings_first_step():
    """dgx_h100x4, 1 GiB: every node ring stream first moves its step 0 (posted at time 0) before anything
    else, which delays the rail rings behind it; the bound rises towards the simulated time (0.54-0.60x of it
    without the work of time 0, at least 0.59x with it) and stays below it."""
    topo = get_topology("dgx_h100x4")
    for factor in (2, 4, 8):
        s = get_baseline("hierarchical").build(Collective("reduce_scatter", topo.n_ranks, factor), topo)
        got = simulate(s, topo, 1 << 30).time_us
        b = pipeline_bound(s, topo, 1 << 30).time_us
        assert 0.59 * got <= b <= got, (factor, b, got)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_case())
def test_the_bound_holds_in_any_op_order(case):
    """A schedule whose ids are not a topological order of its transfers (the reversed ops) is bounded alike."""
    schedule, topo, size = case
    n = len(schedule.ops)
    new_id = {op.id: n - 1 - op.id for op in schedule.ops}
    ops = sorted((replace(op, id=new_id[op.id], deps=tuple(sorted(new_id[d] for d in op.deps)))
                  for op in schedule.ops), key=lambda o: o.id)
    reversed_schedule = Schedule(schedule.name, schedule.collective, tuple(ops), schedule.scratch_chunks)
    assert pipeline_bound(reversed_schedule, topo, size).time_us == \
        pytest.approx(pipeline_bound(schedule, topo, size).time_us, rel=1e-12, abs=1e-12)


MACHINES = ["dgx1", "ring:6", "dgx_a100x2", "ndv2x2", "torus:3x3", "hierarchical:2x4@100,25"]
#: (kind, baseline, factor) triples each machine builds (the test's floor: a baseline that stops building fails it)
BUILT_AT_LEAST = {"dgx1": 54, "ring:6": 38, "dgx_a100x2": 60, "ndv2x2": 50, "torus:3x3": 38,
                  "hierarchical:2x4@100,25": 60}
KINDS = ["allgather", "reduce_scatter", "allreduce", "broadcast", "reduce", "alltoall", "gather", "scatter"]


@pytest.mark.parametrize("machine", MACHINES)
def test_every_baseline_is_bounded_at_every_factor_and_size(machine):
    topo = get_topology(machine)
    built = set()
    for kind in KINDS:
        for name in BASELINES:
            base = min_chunk_factor(name, kind, topo)
            for factor in (base, 2 * base):  # one chunk (or the least) and a pipeline of twice as many
                coll = Collective(kind, topo.n_ranks, factor)
                if why_not(name, coll, topo) is not None:
                    continue
                try:
                    sched = get_baseline(name).build(coll, topo)
                except CCSynthError:
                    continue
                built.add((kind, name, factor))
                for size in (1 << 10, 1 << 20, 1 << 28):
                    b = pipeline_bound(sched, topo, size)
                    t = simulate(sched, topo, size).time_us
                    assert _at_most(b.time_us, t), (kind, name, factor, size, b, t)
                    # at least the static bound's volume (the same bytes) and its engines' overheads
                    s = static_bound(sched, topo, size)
                    if topo.forward_curve is None:
                        assert b.volume_us == pytest.approx(s.volume_us, rel=1e-12)
                    assert b.engine_us == pytest.approx(s.engine_us, rel=1e-12)
    # the skips (baselines that do not apply, factors they cannot build) leave every kind and today's count
    assert {k for k, _, _ in built} == set(KINDS) and len(built) >= BUILT_AT_LEAST[machine], sorted(built)


@pytest.mark.parametrize("machine,factors", [("dgx_h100x4", (1, 2, 4, 8)), ("dgx_a100x2", (1, 2, 4, 8))])
def test_a_hierarchical_allgather_is_its_pipeline(machine, factors):
    """Rings along the rails, then around the nodes: the bound sees the fill and the drain (within 1%)."""
    topo = get_topology(machine)
    for factor in factors:
        sched = get_baseline("hierarchical").build(Collective("allgather", topo.n_ranks, factor), topo)
        b = pipeline_bound(sched, topo, 1 << 30)
        t = simulate(sched, topo, 1 << 30).time_us
        assert t * 0.99 <= b.time_us <= t * (1 + REL)
        assert b.time_us > static_bound(sched, topo, 1 << 30).time_us  # what the static bound cannot see


def test_a_pipeline_of_one_message_after_another_is_its_critical_path():
    t = Topology("two", 2, links=(Link(0, 1, 1.0, 10.0, 0.5), Link(1, 0, 1.0, 10.0, 0.5)))
    b = ScheduleBuilder(Collective("allgather", 2, 2), "chain")
    for r in range(2):
        b.copy(r, ("i", 0, 2), ("o", 2 * r, 2))
    b.transfer(0, 1, ("i", 0), ("o", 0))
    b.transfer(1, 0, ("o", 0), ("s", 0))  # back, once it has arrived
    b.transfer(0, 1, ("i", 1), ("o", 1))
    b.transfer(1, 0, ("i", 0, 2), ("o", 2, 2))
    s = b.build()
    size = 40_000  # 10,000 bytes a chunk: 1 us at 10 GB/s
    got = pipeline_bound(s, t, size)
    assert got.time_us == pytest.approx(simulate(s, t, size).time_us, rel=1e-12)
    assert got.path_us == pytest.approx(2 * (0.5 + 1.0 + 1.0 + 0.5), rel=1e-12)


def test_a_deadlocked_schedule_is_refused():
    ops = (Op(0, 0, "recv", dst=Chunks("o", 1), peer=1), Op(1, 0, "send", src=Chunks("i", 0), peer=1, deps=(0,)),
           Op(2, 1, "recv", dst=Chunks("o", 0), peer=0), Op(3, 1, "send", src=Chunks("i", 0), peer=0, deps=(2,)))
    s = Schedule("dead", Collective("allgather", 2), ops)
    t = Topology("two", 2, links=(Link(0, 1, 1.0, 10.0), Link(1, 0, 1.0, 10.0)))
    with pytest.raises(ScheduleError, match="deadlock"):
        simulate(s, t, 1000)
    with pytest.raises(ScheduleError, match="deadlock"):
        pipeline_bound(s, t, 1000)
