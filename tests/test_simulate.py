"""Tests of the event-driven alpha-beta simulator with max-min bandwidth sharing."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ccsynth.collectives.builder import ScheduleBuilder
from ccsynth.collectives.schedule import Chunks, Op, Schedule
from ccsynth.collectives.spec import Collective
from ccsynth.errors import ScheduleError, SizeError, TopologyError
from ccsynth.synth.executor_model import ExecutorSettings, lower_for_executor
from ccsynth.synth.simulate import SimResult, Task, TaskGraph, simulate, simulate_graph, simulate_sizes
from ccsynth.topologies import catalog
from ccsynth.topologies.io import topology_from_dict, topology_to_dict
from ccsynth.topologies.model import Link, SharedPort, Switch, Topology
import itertools

GB = 1e3  # bytes per us per GB/s


def links(*specs, n=None, ports=(), switches=()):
    """Topology from (src, dst, alpha, bw) tuples."""
    ls = tuple(Link(*s) for s in specs)
    n = n or 1 + max([max(l.src, l.dst) for l in ls] + [r for sw in switches for r in sw.ranks] + [0])
    return Topology("t", n, links=ls, shared_ports=tuple(ports), switches=tuple(switches))


def alltoall_builder(n, c=1):
    return ScheduleBuilder(Collective("alltoall", n, chunk_factor=c), "hand")


# --------------------------------------------------------------- exact times
def test_one_transfer_is_alpha_plus_bytes_over_bw():
    t = links((0, 1, 1.5, 10.0), (1, 0, 1.5, 10.0))
    b = alltoall_builder(2)
    b.transfer(0, 1, ("i", 1), ("o", 0))
    s = b.build()
    size = 80_000  # 2 chunks of 40 KB
    r = simulate(s, t, size)
    assert r.time_us == pytest.approx(1.5 + 40_000 / (10 * GB), rel=1e-12)
    assert r.n_ops == 2
    assert r.algbw == pytest.approx(size / (r.time_us * GB))
    assert r.busbw == pytest.approx(r.algbw * 0.5)
    assert r.busy_us == {"link:0->1": pytest.approx(4.0)}


def test_two_transfers_sharing_a_link_each_get_half():
    t = links((0, 1, 2.0, 10.0), (1, 0, 2.0, 10.0))
    b = alltoall_builder(2, c=2)
    b.transfer(0, 1, ("i", 2), ("o", 0))
    b.transfer(0, 1, ("i", 3), ("o", 1))
    size = 4 * 10_000  # 10 KB chunks
    r = simulate(b.build(), t, size)
    assert r.time_us == pytest.approx(2.0 + 2 * 10_000 / (10 * GB), rel=1e-12)
    assert r.utilisation["link:0->1"] == pytest.approx(2.0 / 4.0)


def test_two_transfers_on_different_links_run_in_parallel():
    t = links((0, 1, 2.0, 10.0), (1, 0, 2.0, 10.0))
    b = alltoall_builder(2)
    b.transfer(0, 1, ("i", 1), ("o", 0))
    b.transfer(1, 0, ("i", 0), ("o", 1))
    r = simulate(b.build(), t, 20_000)
    assert r.time_us == pytest.approx(2.0 + 1.0, rel=1e-12)


def test_chain_of_dependencies_adds_up():
    # 0 -> 1 -> 2: rank 1 forwards what it received (builder adds the dependency)
    t = links((0, 1, 1.0, 10.0), (1, 2, 3.0, 5.0))
    b = ScheduleBuilder(Collective("broadcast", 3), "chain")
    b.transfer(0, 1, ("i", 0), ("o", 0))
    b.transfer(1, 2, ("o", 0), ("o", 0))
    s = b.build()
    assert s.ops[2].deps == (1,)
    r = simulate(s, t, 10_000)
    assert r.time_us == pytest.approx((1.0 + 1.0) + (3.0 + 2.0), rel=1e-12)


def test_shared_port_caps_two_links():
    port = SharedPort("nic0", (0,), (1, 2), 10.0)
    t = links((0, 1, 1.0, 10.0), (0, 2, 1.0, 10.0), ports=(port,))
    b = ScheduleBuilder(Collective("scatter", 3), "s")
    b.transfer(0, 1, ("i", 1), ("o", 0))
    b.transfer(0, 2, ("i", 2), ("o", 0))
    r = simulate(b.build(), t, 30_000)  # 10 KB chunks: 1 us each alone
    assert r.time_us == pytest.approx(1.0 + 2.0, rel=1e-12)
    assert r.busy_us["nic0"] == pytest.approx(2.0)


def test_switch_ports_are_shared_between_senders_into_one_rank():
    t = Topology("sw", 3, switches=(Switch("sw", (0, 1, 2), 10.0, 0.5),))
    b = ScheduleBuilder(Collective("gather", 3), "g")
    b.transfer(1, 0, ("i", 0), ("o", 1))
    b.transfer(2, 0, ("i", 0), ("o", 2))
    r = simulate(b.build(), t, 30_000)
    assert r.time_us == pytest.approx(0.5 + 2.0, rel=1e-12)
    assert set(r.busy_us) == {"sw:tx1", "sw:tx2", "sw:rx0"}


def test_short_transfer_leaves_and_the_long_one_speeds_up():
    # 1 and 3 chunks of 1000 B on a 1 GB/s link: 500 B/us each until t=2, then 1000 B/us
    t = links((0, 1, 0.0, 1.0), (1, 0, 0.0, 1.0))
    b = alltoall_builder(2, c=4)
    b.transfer(0, 1, ("i", 4, 1), ("o", 0, 1))
    b.transfer(0, 1, ("i", 5, 3), ("o", 1, 3))
    r = simulate(b.build(), t, 8 * 1000)
    assert r.time_us == pytest.approx(4.0, rel=1e-12)


def test_a_stream_serves_transfers_in_order_while_channels_share():
    # two 10 KB chunks 0 -> 1 (1 us each alone), then rank 1 forwards the first to rank 2
    t = links((0, 1, 0.0, 10.0), (1, 2, 0.0, 10.0), n=3)

    def sched(channel_b):
        b = alltoall_builder(3, c=2)
        b.transfer(0, 1, ("i", 0), ("o", 0))
        b.transfer(0, 1, ("i", 1), ("o", 1), channel=channel_b)
        b.transfer(1, 2, ("o", 0), ("o", 0))
        return b.build()

    # one stream: the first chunk lands at 1 us and is forwarded during 1..2 us
    assert simulate(sched(0), t, 60_000).time_us == pytest.approx(2.0)
    # two channels share the link: both land at 2 us, the forward ends at 3 us
    assert simulate(sched(1), t, 60_000).time_us == pytest.approx(3.0)


def test_max_min_fairness_gives_the_unconstrained_flow_the_rest():
    # flows A: port a only; B: ports a and p; C: port p only. cap(a)=10, cap(p)=4 GB/s
    # max-min: B = C = 2, A = 8. Each moves 8 KB: A ends at t=1, then B, C share p until t=4.
    port = SharedPort("p", (0, 1), (2,), 4.0)
    a_port = SharedPort("a", (0,), (2, 3), 10.0)
    t = links((0, 2, 0.0, 100.0), (1, 2, 0.0, 100.0), (0, 3, 0.0, 100.0), ports=(port, a_port), n=4)
    b = alltoall_builder(4)
    b.transfer(0, 3, ("i", 3), ("o", 0))  # A: port a
    b.transfer(0, 2, ("i", 2), ("o", 0))  # B: ports a and p
    b.transfer(1, 2, ("i", 2), ("o", 1))  # C: port p
    r = simulate(b.build(), t, 4 * 8000)
    assert r.time_us == pytest.approx(4.0, rel=1e-12)


def test_zero_alpha_zero_size_takes_no_time_and_size_zero_costs_latency():
    t = links((0, 1, 0.0, 10.0), (1, 0, 0.0, 10.0))
    b = alltoall_builder(2)
    b.transfer(0, 1, ("i", 1), ("o", 0))
    assert simulate(b.build(), t, 0).time_us == 0.0
    t2 = links((0, 1, 2.5, 10.0), (1, 0, 2.5, 10.0))
    r = simulate(b.build(), t2, 0)
    assert r.time_us == 2.5
    assert r.algbw == 0.0


def test_local_ops_are_free_unless_local_bw_is_given():
    t = links((0, 1, 1.0, 10.0), (1, 0, 1.0, 10.0))
    b = ScheduleBuilder(Collective("allgather", 2), "ag")
    b.copy(0, ("i", 0), ("o", 0))
    b.transfer(0, 1, ("o", 0), ("o", 0))  # depends on the copy
    s = b.build()
    assert simulate(s, t, 20_000).time_us == pytest.approx(2.0)
    # 10 KB at 5 GB/s = 2 us of copy before the 2 us transfer
    assert simulate(s, t, 20_000, local_bw=5.0).time_us == pytest.approx(4.0)
    with pytest.raises(TopologyError, match="local copy bandwidth"):
        simulate(s, t, 20_000, local_bw=0)


def test_rendezvous_transfer_waits_for_the_receiver():
    # rank 1 posts its receive only after its own send to 2 completes
    t = links((0, 1, 1.0, 10.0), (1, 2, 1.0, 10.0))
    ops = (
        Op(0, 0, "send", src=Chunks("i", 0), peer=1),
        Op(1, 1, "send", src=Chunks("i", 0), peer=2),
        Op(2, 1, "recv", dst=Chunks("o", 0), peer=0, deps=(1,)),
        Op(3, 2, "recv", dst=Chunks("o", 0), peer=1),
    )
    s = Schedule("rdv", Collective("allreduce", 3), ops)
    assert simulate(s, t, 10_000).time_us == pytest.approx(4.0)


# ------------------------------------------------------------------ errors
def test_missing_connection_names_the_op():
    t = links((0, 1, 1.0, 10.0), (1, 0, 1.0, 10.0), n=3)
    b = alltoall_builder(3)
    b.transfer(0, 1, ("i", 1), ("o", 0))
    b.transfer(0, 2, ("i", 2), ("o", 0))
    with pytest.raises(ScheduleError, match=r"op 2 \(rank 0: send i\[2\] -> rank 2\).*0->2"):
        simulate(b.build(), t, 1000)


def test_rank_count_mismatch():
    t = links((0, 1, 1.0, 10.0), (1, 0, 1.0, 10.0))
    b = alltoall_builder(4)
    b.transfer(0, 1, ("i", 1), ("o", 0))
    with pytest.raises(ScheduleError, match="4 ranks.*2"):
        simulate(b.build(), t, 1000)


def test_deadlock_is_reported():
    # each rank waits for its own send before posting its receive (in-place swap)
    t = links((0, 1, 1.0, 10.0), (1, 0, 1.0, 10.0))
    ops = (
        Op(0, 0, "send", src=Chunks("o", 0), peer=1),
        Op(1, 0, "recv", dst=Chunks("o", 0), peer=1, deps=(0,)),
        Op(2, 1, "send", src=Chunks("o", 0), peer=0),
        Op(3, 1, "recv", dst=Chunks("o", 0), peer=0, deps=(2,)),
    )
    s = Schedule("swap", Collective("allreduce", 2), ops)
    with pytest.raises(ScheduleError, match="deadlocks"):
        simulate(s, t, 1000)


def test_bad_size():
    t = links((0, 1, 1.0, 10.0), (1, 0, 1.0, 10.0))
    b = alltoall_builder(2)
    b.transfer(0, 1, ("i", 1), ("o", 0))
    with pytest.raises(SizeError):
        simulate(b.build(), t, -1)


# ----------------------------------------------------------- result object
def test_deterministic_and_sizes_and_json():
    t = Topology("sw", 4, switches=(Switch("sw", (0, 1, 2, 3), 7.0, 0.3),))
    b = alltoall_builder(4, c=2)
    for q in range(4):
        for d in range(4):
            if q != d:
                b.transfer(q, d, ("i", 2 * d, 2), ("o", 2 * q, 2))
    s = b.build()
    r1, r2 = simulate(s, t, 1 << 20), simulate(s, t, 1 << 20)
    assert r1 == r2 and r1.busy_us == r2.busy_us
    rs = simulate_sizes(s, t, [1024, 1 << 20, 1 << 24])
    assert [r.size_bytes for r in rs] == [1024, 1 << 20, 1 << 24]
    assert rs[1] == r1
    assert all(a.time_us < b.time_us for a, b in itertools.pairwise(rs))
    assert all(r.time_us >= r.lower_bound_us * (1 - 1e-9) and r.gap >= 1 - 1e-9 for r in rs)
    d = json.loads(json.dumps(r1.to_dict(resources=True)))
    assert d["time_us"] == r1.time_us and d["lower_bound_us"] == r1.lower_bound_us
    assert d["utilisation"]["sw:rx0"] == pytest.approx(r1.utilisation["sw:rx0"])
    assert isinstance(r1, SimResult)


def test_direct_alltoall_on_a_switch_meets_the_bound():
    n = 8
    t = Topology("sw", n, switches=(Switch("sw", tuple(range(n)), 50.0, 1.0),))
    b = alltoall_builder(n)
    for r in range(n):
        b.copy(r, ("i", r), ("o", r))
    for k in range(1, n):
        for q in range(n):
            d = (q + k) % n
            b.transfer(q, d, ("i", d), ("o", q))
    size = 1 << 26
    r = simulate(b.build(), t, size)
    # every port carries 7 chunks at once: alpha + 7/8 * size / bw
    assert r.time_us == pytest.approx(1.0 + 7 / 8 * size / (50 * GB), rel=1e-9)
    assert r.gap == pytest.approx(r.time_us / ((n - 1) / n * size / (50 * GB)), rel=1e-9)


# ------------------------------------------- against a naive reference model
def _maxmin_naive(flows, res_of, cap):
    rate, active = {}, set(flows)
    used = {r: 0.0 for f in flows for r in res_of[f]}
    while active:
        load = {r: sum(1 for f in active if r in res_of[f]) for r in used}
        level = min((cap[r] - used[r]) / k for r, k in load.items() if k)
        sat = {r for r, k in load.items() if k and (cap[r] - used[r]) / k <= level * (1 + 1e-12)}
        for f in sorted(active):
            if sat & set(res_of[f]):
                rate[f] = level
                active.discard(f)
                for r in res_of[f]:
                    used[r] += level
    return rate


def reference_time(schedule, topology, size, local_bw=None):
    """Time-stepping re-implementation of the documented model, written plainly."""
    return _reference(schedule.ops, schedule.matches, schedule.collective.chunk_bytes(size), topology, local_bw)


def reference_time_graph(graph, topology, local_bw=None):
    """The same reference on a task graph: its tasks count bytes, so a unit is one byte."""
    return _reference(graph.ops, graph.matches, 1.0, topology, local_bw)


def _reference(ops, match, chunk, topology, local_bw=None):
    local_bw = local_bw if local_bw is not None else topology.local_bw
    cap = {k: v * GB for k, v in topology.resource_bw.items()}

    def conn(op):
        return topology.connection(op.rank, op.peer) if op.kind == "send" else topology.connection(op.peer, op.rank)

    done, ready, posted, started, timers = {}, set(), set(), set(), []
    arrived = []  # engine work that arrived at this instant: (op id, cost, what)
    free_at = {}  # engine -> when it is free

    def engine(op):
        if topology.overhead_scope == "rank":
            return op.rank
        if op.kind in ("send", "recv"):
            return (op.rank, op.kind, op.peer, op.channel)
        return ("local", op.id)

    heads, queues = {}, {}  # stream (src, dst, channel) -> [send id, bytes left] / waiting send ids
    now = 0.0

    def reduce_cost(op):
        if op.count * chunk <= 0:
            return 0.0
        return topology.local_overhead + (op.count * chunk / (local_bw * GB) if local_bw else 0.0)

    while len(done) < len(ops):
        changed = True
        while changed:
            changed = False
            for op in ops:
                if op.id not in ready and all(d in done for d in op.deps):
                    ready.add(op.id)
                    changed = True
                    if op.kind in ("copy", "reduce"):
                        cost = reduce_cost(op)
                        if cost:
                            arrived.append((op.id, cost, "local"))
                        else:
                            done[op.id] = now
                    elif op.kind == "send" and conn(op).overhead > 0:
                        arrived.append((op.id, conn(op).overhead, "posted"))
                    else:
                        posted.add(op.id)
            for op in ops:
                if op.kind == "send" and op.id not in started and op.id in posted and match[op.id] in posted:
                    started.add(op.id)
                    changed = True
                    timers.append((now + topology.message_alpha(conn(op).alpha, op.count * chunk), op.id, "data"))
            for ev in sorted(e for e in timers if e[0] <= now * (1 + 1e-12)):
                timers.remove(ev)
                changed = True
                _t, i, what = ev
                if what in ("local", "received"):
                    done[i] = now
                elif what == "posted":
                    posted.add(i)
                elif ops[i].count * chunk == 0:
                    done[i] = now
                    arrived.append((match[i], None, "arrived"))
                else:
                    key = (ops[i].rank, ops[i].peer, ops[i].channel)
                    if key in heads:
                        queues.setdefault(key, []).append(i)
                    else:
                        heads[key] = [i, ops[i].count * chunk]
            for i, cost, what in [a for a in arrived if a[2] == "arrived"]:
                arrived.remove((i, cost, what))
                op = ops[i]
                cost = conn(op).overhead + (reduce_cost(op) if op.reduce else 0.0)
                if cost:
                    arrived.append((i, cost, "received"))
                else:
                    done[i] = now
                    changed = True
        for i, cost, what in sorted(arrived):  # first come first served, same instant by op id
            e = engine(ops[i])
            start = max(now, free_at.get(e, 0.0))
            free_at[e] = start + cost
            timers.append((start + cost, i, what))
        arrived.clear()
        if len(done) == len(ops):
            break
        res_of = {k: topology.connection(k[0], k[1]).resources for k in heads}
        rates = _maxmin_naive(list(heads), res_of, cap)
        nxt = min([e[0] for e in timers] + [now + heads[k][1] / rates[k] for k in heads])
        for k in sorted(heads):
            heads[k][1] -= rates[k] * (nxt - now)
            if heads[k][1] <= 1e-9 * chunk:
                f = heads.pop(k)[0]
                done[f] = nxt
                arrived.append((match[f], None, "arrived"))
                if queues.get(k):
                    g = queues[k].pop(0)
                    heads[k] = [g, ops[g].count * chunk]
        now = nxt
    return max(done.values(), default=0.0) + (topology.call_overhead if ops else 0.0)


@st.composite
def random_case(draw):
    n = draw(st.integers(2, 4))
    bws = st.sampled_from([5.0, 10.0, 25.0])
    alphas = st.sampled_from([0.0, 0.5, 2.0])
    overheads = st.sampled_from([0.0, 0.0, 0.3, 1.5])
    if draw(st.booleans()):
        topo_links = tuple(Link(a, b, draw(alphas), draw(bws), draw(overheads)) for a in range(n) for b in range(n) if a != b)
        switches = ()
    else:
        topo_links = ()
        switches = (Switch("sw", tuple(range(n)), draw(bws), draw(alphas), draw(overheads)),)
    ports = ()
    if draw(st.booleans()):
        srcs = tuple(sorted(draw(st.sets(st.integers(0, n - 1), min_size=1, max_size=n))))
        dsts = tuple(sorted(draw(st.sets(st.integers(0, n - 1), min_size=1, max_size=n))))
        ports = (SharedPort("nic", srcs, dsts, draw(bws)),)
    eager, rendezvous = draw(st.sampled_from([(None, 0.0), (None, 0.0), (2000.0, 1.5), (0.0, 0.5)]))
    local_overhead = draw(st.sampled_from([0.0, 0.0, 0.7]))
    topo = Topology("rand", n, links=topo_links, switches=switches, shared_ports=ports,
                    overhead_scope=draw(st.sampled_from(["connection", "rank"])), eager_limit=eager,
                    rendezvous_alpha=rendezvous, local_overhead=local_overhead)
    c = 2
    b = alltoall_builder(n, c)
    for _ in range(draw(st.integers(1, 9))):
        src = draw(st.integers(0, n - 1))
        if draw(st.integers(0, 4)) == 0:
            j = draw(st.integers(0, n * c - 2))
            b.copy(src, ("i", j, 2), ("s", j, 2))
            continue
        dst = draw(st.integers(0, n - 2))
        dst = dst + (dst >= src)
        count = draw(st.integers(1, 2))
        j = draw(st.integers(0, n * c - count))
        k = draw(st.integers(0, n * c - count))
        b.transfer(src, dst, ("i", j, count), ("o", k, count), reduce=draw(st.booleans()), channel=draw(st.integers(0, 1)))
    size = draw(st.sampled_from([0, 1000, 64_000, 1 << 20]))
    local_bw = draw(st.sampled_from([None, 2.0]))
    return b.build(), topo, size, local_bw


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_case())
def test_matches_naive_reference_model(case):
    schedule, topo, size, local_bw = case
    got = simulate(schedule, topo, size, local_bw=local_bw)
    want = reference_time(schedule, topo, size, local_bw)
    assert got.time_us == pytest.approx(want, rel=1e-9, abs=1e-9)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_case(), st.sampled_from([4096, 65536]), st.sampled_from([0.0, 3.0]))
def test_task_graphs_match_the_naive_reference_model(case, slice_bytes, call):
    """The executor's lowering (slices, empty last slices, pre-posted receive-reduces) under the same model."""
    schedule, topo, size, local_bw = case
    topo = replace(topo, call_overhead=call)
    size = min(size, 1 << 18)
    size -= size % (schedule.collective.size_chunks * 4)  # whole float32 elements in every chunk
    graph = lower_for_executor(schedule, size, ExecutorSettings(slice_bytes=slice_bytes))
    got = simulate_graph(graph, topo, local_bw=local_bw)
    assert got.time_us == pytest.approx(reference_time_graph(graph, topo, local_bw), rel=1e-9, abs=1e-9)
    assert got.n_ops == len(graph.ops) and got.size_bytes == size


def test_call_overhead_is_added_once_per_call():
    b = alltoall_builder(2)
    b.transfer(0, 1, ("i", 1), ("o", 0))
    b.transfer(0, 1, ("i", 0), ("o", 1))
    base = links((0, 1, 1.0, 10.0), (1, 0, 1.0, 10.0))
    t = simulate(b.build(), base, 20_000).time_us
    assert simulate(b.build(), replace(base, call_overhead=2.5), 20_000).time_us == pytest.approx(t + 2.5)
    assert t == pytest.approx(1 + 1 + 1)  # alpha, then two 10 KB chunks back to back at 10 GB/s


def test_messages_beyond_the_eager_limit_pay_the_rendezvous_latency():
    b = alltoall_builder(2)
    b.transfer(0, 1, ("i", 1), ("o", 0))
    base = links((0, 1, 1.0, 10.0), (1, 0, 1.0, 10.0))
    switch = replace(base, eager_limit=8_000, rendezvous_alpha=4.0)
    assert simulate(b.build(), switch, 2 * 8_000).time_us == pytest.approx(1.0 + 0.8)  # 8000 B: eager
    assert simulate(b.build(), switch, 2 * 8_001).time_us == pytest.approx(1.0 + 4.0 + 0.8001)
    assert simulate(b.build(), replace(base, eager_limit=8_000), 2 * 8_001).time_us == pytest.approx(1.8001)


def test_local_ops_pay_a_fixed_cost_per_kernel_call():
    b = alltoall_builder(2)
    b.copy(0, ("i", 0), ("o", 0))
    b.transfer(0, 1, ("i", 1), ("o", 1), reduce=True)
    t = replace(links((0, 1, 1.0, 10.0), (1, 0, 1.0, 10.0)), local_overhead=0.5)
    # 20 KB chunks. The copy: 0.5 + 4 (at 5 GB/s); the receive-reduce: 1 (alpha) + 2 (data) + 0.5 + 4 (reduction)
    r = simulate(b.build(), t, 40_000, local_bw=5.0)
    assert r.time_us == pytest.approx(1 + 2 + 0.5 + 4)
    assert simulate(b.build(), t, 40_000).time_us == pytest.approx(1 + 2 + 0.5)  # no local_bw: the call only
    assert simulate(b.build(), t, 0).time_us == 1.0  # no bytes, no kernel call: the latency alone


def test_task_graph_zero_byte_messages_pay_overheads_and_latency():
    coll = Collective("allgather", 2)
    tasks = (Task(0, 0, "send", 0, peer=1), Task(1, 1, "recv", 0, peer=0), Task(2, 1, "copy", 0, deps=(1,)))
    g = TaskGraph("empty", coll, 0, tasks, {0: 1, 1: 0})
    topo = Topology("pair", 2, links=(Link(0, 1, 1.0, 10.0, 0.5), Link(1, 0, 1.0, 10.0, 0.5)), overhead_scope="rank")
    assert simulate_graph(g, topo).time_us == pytest.approx(0.5 + 1.0 + 0.5)


def test_task_graph_rejects_unmatched_and_unknown_tasks():
    coll = Collective("allgather", 2)
    with pytest.raises(ScheduleError, match="no matching partner"):
        TaskGraph("bad", coll, 0, (Task(0, 0, "send", 8, peer=1),), {})
    with pytest.raises(ScheduleError, match="unknown kind"):
        TaskGraph("bad", coll, 0, (Task(0, 0, "teleport", 8),), {})


# ------------------------------------------------------------ per-message overhead (LogGP o)
def _pair(alpha=1.0, bw=10.0, overhead=0.5):
    return Topology("pair", 2, links=(Link(0, 1, alpha, bw, overhead), Link(1, 0, alpha, bw, overhead)))


def test_one_message_pays_the_overhead_on_both_ends():
    b = alltoall_builder(2)
    b.transfer(0, 1, ("i", 1), ("o", 0))
    # 10 KB chunk: 0.5 (sender) + 1 (alpha) + 1 (10 KB at 10 GB/s) + 0.5 (receiver)
    assert simulate(b.build(), _pair(), 20_000).time_us == pytest.approx(3.0)
    # a zero-byte message still costs the overheads and the latency
    assert simulate(b.build(), _pair(), 0).time_us == pytest.approx(2.0)


def test_a_rank_pays_its_overheads_one_after_another():
    # rank 0 sends to three peers at once on separate links: its overheads serialise,
    # the transfers and the receivers' overheads overlap
    n = 4
    links = tuple(Link(0, d, 1.0, 10.0, 0.5) for d in range(1, n)) + tuple(Link(d, 0, 1.0, 10.0, 0.5) for d in range(1, n))
    b = ScheduleBuilder(Collective("broadcast", n), "fan")
    for d in range(1, n):
        b.transfer(0, d, ("i", 0), ("o", 0))
    cpu = Topology("star", n, links=links, overhead_scope="rank")
    r = simulate(b.build(), cpu, 10_000)
    # one engine per rank: the last send is posted at 3 * 0.5, then alpha 1, 1 us of data, 0.5 on the receiver
    assert r.time_us == pytest.approx(3 * 0.5 + 1.0 + 1.0 + 0.5)
    assert r.busy_us["rank0"] == pytest.approx(1.5)
    # an engine per connection (GPU threadblocks): the three sends are posted together
    gpu = Topology("star", n, links=links)
    assert gpu.overhead_scope == "connection"
    assert simulate(b.build(), gpu, 10_000).time_us == pytest.approx(0.5 + 1.0 + 1.0 + 0.5)


def test_many_small_messages_cost_more_than_one_big_one():
    # the same 4 chunks on one link: one message of 4 chunks, or 4 messages of 1
    one = alltoall_builder(2, 4)
    one.transfer(0, 1, ("i", 4, 4), ("o", 0, 4))
    many = alltoall_builder(2, 4)
    for j in range(4):
        many.transfer(0, 1, ("i", 4 + j), ("o", j))
    t = _pair(alpha=1.0, bw=10.0, overhead=2.0)
    size = 8 * 1000  # 1 KB chunks: 0.1 us each
    t_one = simulate(one.build(), t, size).time_us
    t_many = simulate(many.build(), t, size).time_us
    assert t_one == pytest.approx(2.0 + 1.0 + 0.4 + 2.0)
    # four sends post at 2, 4, 6, 8; the last arrives at 8 + 1 + 0.1 and is received 2 us later
    assert t_many == pytest.approx(8.0 + 1.0 + 0.1 + 2.0)
    # without an overhead the split costs nothing more
    free = _pair(alpha=1.0, bw=10.0, overhead=0.0)
    assert simulate(many.build(), free, size).time_us == pytest.approx(simulate(one.build(), free, size).time_us)


def test_local_work_runs_on_the_rank_stream_after_the_receive_overhead():
    b = ScheduleBuilder(Collective("allreduce", 2), "ar")
    for r in range(2):
        b.copy(r, ("i", 0), ("o", 0))
    b.transfer(0, 1, ("i", 0), ("o", 0), reduce=True)
    s = b.build()
    t = Topology("pair", 2, links=(Link(0, 1, 1.0, 10.0, 0.5), Link(1, 0, 1.0, 10.0, 0.5)), local_bw=5.0,
                 overhead_scope="rank")
    # 10 KB at 5 GB/s: each copy takes 2 us of its rank's stream. Rank 0's send does not depend on its
    # copy, but the stream serves the copy first (op id order), so the send is posted at 2 + 0.5. The
    # receive reduces into o[0], after rank 1's copy. Data 2.5 + 1 (alpha) + 1 (10 KB at 10 GB/s) = 4.5;
    # then rank 1's stream: 0.5 of overhead and 2 us of reduction.
    assert simulate(s, t, 10_000).time_us == pytest.approx(7.0)
    # the topology's local_bw is the default; an explicit argument wins
    assert simulate(s, t, 10_000, local_bw=10.0).time_us == pytest.approx(1.0 + 0.5 + 1.0 + 1.0 + 0.5 + 1.0)
    # with an engine per connection the copy does not hold the send back (posted at 0.5), but the receive is
    # posted only after rank 1's 2 us copy: 2 + 1 (alpha) + 1 (data) + 0.5 (overhead) + 2 (reduction) = 6.5
    gpu = Topology("pair", 2, links=t.links, local_bw=5.0)
    assert simulate(s, gpu, 10_000).time_us == pytest.approx(6.5)


def test_the_chunk_count_has_an_optimum():
    from ccsynth.synth.baselines import make_baseline

    topo = catalog.ring(8)
    times = {}
    for c in (1, 2, 4, 8, 16, 32, 64, 128):
        s = make_baseline("ring", Collective("allreduce", 8, chunk_factor=c), topo)
        times[c] = simulate(s, topo, 1 << 20).time_us
    best = min(times, key=times.get)
    assert 1 < best < 128, times
    assert times[128] > 2 * times[best]


# ------------------------------------------- the two max-min fair sharings against plain water-filling
@st.composite
def sharing_case(draw):
    """Random classes over a few resources: (classes' resource tuples, capacities)."""
    n_res = draw(st.integers(1, 7))
    caps = [draw(st.sampled_from([1.0, 2.0, 3.0, 5.0, 12.5, 25.0])) for _ in range(n_res)]
    classes = draw(st.lists(st.lists(st.integers(0, n_res - 1), min_size=1, max_size=3, unique=True).map(tuple),
                            min_size=1, max_size=14))
    return classes, caps


def _sharing_rates(classes, caps):
    """The simulator's two sharings on the same case: the heap (per component) and the vectorised one."""
    import numpy as np

    from ccsynth.synth.simulator.sharing import component, maxmin, maxmin_all

    res_active = [set() for _ in caps]
    res_weight = [0] * len(caps)
    for c, rs in enumerate(classes):
        for r in rs:
            res_active[r].add(c)
            res_weight[r] += 1
    heap: dict[int, float] = {}
    for r in range(len(caps)):
        found = component([r], res_active, list(classes), len(classes))
        assert found is not None
        heap.update(maxmin(found[1], res_active, res_weight, [1] * len(classes), list(classes), caps))
    width = max(len(rs) for rs in classes)
    pad = np.full((len(classes), width), len(caps), dtype=np.int64)
    for c, rs in enumerate(classes):
        pad[c, : len(rs)] = rs
    vec = maxmin_all(pad, np.array([*caps, float("inf")]))
    return heap, vec


@settings()  # examples: the hypothesis profile (tests/conftest.py)
@given(sharing_case())
def test_both_sharings_equal_plain_water_filling(case):
    classes, caps = case
    want = _maxmin_naive(list(range(len(classes))), dict(enumerate(classes)), dict(enumerate(caps)))
    heap, vec = _sharing_rates(classes, caps)
    for c in range(len(classes)):
        assert heap[c] == pytest.approx(want[c], rel=1e-12)
        assert vec[c] == pytest.approx(want[c], rel=1e-12)
    # feasible: no resource carries more than its capacity
    for r, cap in enumerate(caps):
        assert sum(vec[c] for c, rs in enumerate(classes) if r in rs) <= cap * (1 + 1e-12)


def test_vectorised_sharing_freezes_several_levels_per_round():
    # two independent bottlenecks and a chain: 0 (cap 1, two classes) limits class 1, which leaves room on 1
    import numpy as np

    from ccsynth.synth.simulator.sharing import maxmin_all

    rates = maxmin_all(np.array([[0, 3], [0, 1], [1, 3], [2, 3]]), np.array([1.0, 3.0, 10.0, np.inf]))
    assert rates.tolist() == pytest.approx([0.5, 0.5, 2.5, 10.0])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_case())
def test_the_vectorised_sharing_matches_the_reference_model(case):
    """Every reshare through maxmin_all (as for a large component): the same times as the reference."""
    import ccsynth.synth.simulator.sharing as sim

    schedule, topo, size, local_bw = case
    old = sim.SMALL_COMPONENT
    sim.SMALL_COMPONENT = -1
    try:
        got = simulate(schedule, topo, size, local_bw=local_bw)
    finally:
        sim.SMALL_COMPONENT = old
    assert got.time_us == pytest.approx(reference_time(schedule, topo, size, local_bw), rel=1e-9, abs=1e-9)


def test_large_components_take_the_vectorised_sharing_with_the_same_times():
    # a 16-rank direct alltoall on one switch: every stream in one component, above SMALL_COMPONENT
    import ccsynth.synth.simulator.sharing as sim

    n = 16
    t = Topology("sw", n, switches=(Switch("sw", tuple(range(n)), 50.0, 1.0),),
                 shared_ports=(SharedPort("nic", (0, 1, 2, 3), (4, 5, 6, 7), 30.0),))
    b = alltoall_builder(n, 2)
    for k in range(1, n):
        for q in range(n):
            d = (q + k) % n
            for j in range(2):
                b.transfer(q, d, ("i", 2 * d + j), ("o", 2 * q + j), channel=j)
    s = b.build()
    assert len(s.ops) // 2 > sim.SMALL_COMPONENT
    fast = simulate(s, t, 1 << 26).time_us
    old = sim.SMALL_COMPONENT
    sim.SMALL_COMPONENT = 10 ** 9  # the heap alone
    try:
        slow = simulate(s, t, 1 << 26).time_us
    finally:
        sim.SMALL_COMPONENT = old
    assert fast == pytest.approx(slow, rel=1e-12)


def test_a_known_time_gives_the_result_simulate_gives():
    from ccsynth.synth.baselines import make_baseline
    from ccsynth.synth.simulate import known_result

    t = catalog.dgx1()
    s = make_baseline("ring", Collective("allgather", 8, 2), t)
    r = simulate(s, t, 1 << 24)
    k = known_result(s, t, 1 << 24, r.time_us)
    assert k.to_dict() == r.to_dict()


def test_without_async_progress_data_waits_for_both_engines():
    """MPI without a progress thread (async_progress=False): a message's bytes move only once the sender's and the
    receiver's engines are idle, so a local copy queued first delays them; with it (the default) they overlap."""
    b = ScheduleBuilder(Collective("allgather", 2), "send then copy")
    for r in range(2):
        b.transfer(r, 1 - r, ("i", 0), ("o", r))
    for r in range(2):
        b.copy(r, ("i", 0), ("o", r))
    s = b.build()
    links = (Link(0, 1, 1.0, 10.0), Link(1, 0, 1.0, 10.0))
    # 10 KB chunks: 1 us of data at 10 GB/s after 1 us of latency, a 10 us copy at 1 GB/s
    overlap = Topology("p", 2, links=links, local_bw=1.0, overhead_scope="rank")
    serial = Topology("p", 2, links=links, local_bw=1.0, overhead_scope="rank", async_progress=False)
    assert simulate(s, overlap, 20_000).time_us == pytest.approx(10.0)
    assert simulate(s, serial, 20_000).time_us == pytest.approx(11.0)
    # only a rank engine holds the data back: per-connection engines (GPUs) never do
    gpu = Topology("p", 2, links=links, local_bw=1.0, async_progress=False)
    assert simulate(s, gpu, 20_000).time_us == pytest.approx(10.0)
    d = topology_to_dict(serial)
    assert d["async_progress"] is False and "async_progress" not in topology_to_dict(overlap)
    assert topology_from_dict(d) == serial


def test_receiver_copies_make_the_copy_work_of_the_receivers_engine():
    """receiver_copies (with async_progress=False): a data phase keeps the receiver's engine busy for its bytes, and
    a data phase starts only when both engines are idle, so a 2-rank exchange moves one message after the other;
    asynchronous progress or per-connection engines (GPUs) ignore it; files keep it, and a bad value is an error."""
    b = ScheduleBuilder(Collective("allgather", 2), "exchange")
    for r in range(2):
        b.transfer(r, 1 - r, ("i", 0), ("o", r))
    s = b.build()
    links = (Link(0, 1, 1.0, 10.0), Link(1, 0, 1.0, 10.0))
    # 10 KB chunks: 1 us of latency, then 1 us of data at 10 GB/s
    held = Topology("p", 2, links=links, overhead_scope="rank", async_progress=False)
    copies = replace(held, receiver_copies=True)
    assert simulate(s, held, 20_000).time_us == pytest.approx(2.0)
    # 0 -> 1 moves its bytes in [1, 2] on rank 1's engine; 1 -> 0 then starts at 2 and ends at 3
    assert simulate(s, copies, 20_000).time_us == pytest.approx(3.0)
    r = simulate(s, copies, 20_000)
    assert r.to_dict() == simulate(s, copies, 20_000).to_dict()
    for other in (replace(copies, async_progress=True), replace(copies, overhead_scope="connection")):
        assert simulate(s, other, 20_000).time_us == pytest.approx(2.0)
    d = topology_to_dict(copies)
    assert d["receiver_copies"] is True and "receiver_copies" not in topology_to_dict(held)
    assert topology_from_dict(d) == copies
    with pytest.raises(TopologyError, match="receiver_copies must be true or false"):
        topology_from_dict({**d, "receiver_copies": "yes"})
    with pytest.raises(TopologyError, match="receiver_copies must be true or false"):
        replace(held, receiver_copies=1)


def test_events_one_rounding_apart_are_taken_in_op_id_order():
    """Found by hypothesis: send 30's data phase is due at 2.1 + 1.5 us, the eager send 35 is posted at 12 x 0.3 us,
    one ulp earlier; both are the same instant, so 30 joins the stream first (op id order), as in the reference."""
    c = Chunks
    ops = (
        Op(0, 0, "send", c("i", 0, 1), None, 1, False, (), 0),
        Op(1, 1, "recv", None, c("o", 0, 1), 0, False, (), 0),
        Op(2, 0, "copy", c("i", 0, 2), c("s", 0, 2), -1, False, (), 0),
        Op(3, 0, "copy", c("i", 0, 2), c("s", 0, 2), -1, False, (2,), 0),
        Op(4, 0, "send", c("i", 0, 1), None, 1, False, (), 0),
        Op(5, 1, "recv", None, c("o", 0, 1), 0, False, (1,), 0),
        Op(6, 0, "copy", c("i", 0, 2), c("s", 0, 2), -1, False, (3,), 0),
        Op(7, 0, "copy", c("i", 0, 2), c("s", 0, 2), -1, False, (6,), 0),
        Op(8, 0, "send", c("i", 0, 2), None, 1, False, (), 0),
        Op(9, 1, "recv", None, c("o", 0, 2), 0, True, (5,), 0),
        Op(10, 0, "copy", c("i", 0, 2), c("s", 0, 2), -1, False, (7,), 0),
    )
    schedule = Schedule("hand", Collective("alltoall", 3, 2, 0), ops, scratch_chunks=2)
    topo = Topology("rand", 3, switches=(Switch("sw", (0, 1, 2), 25.0, 0.0, 0.3),), eager_limit=2000.0,
                    rendezvous_alpha=1.5)
    graph = lower_for_executor(schedule, 63984, ExecutorSettings(slice_bytes=4096))
    got = simulate_graph(graph, topo)
    assert got.time_us == pytest.approx(reference_time_graph(graph, topo), rel=1e-9)
    # the receiver's engine is busy from send 30's arrival (3.6 + 4096 B at 25 GB/s) through nine 0.3 us receives
    assert got.time_us == pytest.approx(3.6 + 4096 / 25e3 + 9 * 0.3, rel=1e-9)
