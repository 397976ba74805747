"""The cost of a round (topologies/rounds.py): the simulator's per-round term in hand-computed cases, the topology
file's keys, the communicator's per-call cost in ``--predict``, and the catalog unchanged."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ccsynth.bench.predict import repredict_document, via_communicator
from ccsynth.collectives.builder import ScheduleBuilder
from ccsynth.collectives.spec import Collective
from ccsynth.errors import TopologyError
from ccsynth.synth.baselines import make_baseline
from ccsynth.synth.executor_model import simulate_run
from ccsynth.synth.simulate import receive_rounds, simulate
from ccsynth.topologies import catalog
from ccsynth.topologies.io import topology_from_dict, topology_to_dict
from ccsynth.topologies.model import Link, Topology
from ccsynth.topologies.rounds import RoundCost

# a round with one peer 2 us more, with three 8 us more (two: 5 us, piecewise-linear)
COST = RoundCost((1, 3), (2.0, 8.0))


def _flat(n: int, alpha: float = 1.0, overhead: float = 0.0, **kw) -> Topology:
    links = tuple(Link(a, b, alpha, 100.0, overhead) for a in range(n) for b in range(n) if a != b)
    return Topology("flat", n, links=links, **kw)


def _baseline(name: str, kind: str, n: int = 4):
    return make_baseline(name, Collective(kind, n, n if kind == "allreduce" else 1), _flat(n))


# ------------------------------------------------------------------ the record
def test_round_cost_is_piecewise_linear_in_the_peers_and_constant_beyond():
    assert [COST.cost_us(k) for k in (0, 1, 2, 3, 5)] == [0.0, 2.0, 5.0, 8.0, 8.0]
    assert RoundCost((2,), (3.0,)).cost_us(1) == 3.0
    for peers, us in [((), ()), ((1, 1), (1.0, 2.0)), ((0,), (1.0,)), ((1,), (-1.0,)), ((1,), (float("nan"),)),
                      ((1, 2), (1.0,))]:
        with pytest.raises(TopologyError):
            RoundCost(peers, us)


# ------------------------------------------------------------------ rounds of a schedule
@pytest.mark.parametrize("name,kind,rounds,peers", [
    ("ring", "allgather", 3, 1), ("recursive_doubling", "allgather", 2, 1), ("direct", "allgather", 1, 3),
    ("ring", "allreduce", 6, 1), ("recursive_doubling", "allreduce", 2, 1), ("direct", "allreduce", 2, 3),
])
def test_rounds_are_the_receives_of_a_rank_by_hop_level(name, kind, rounds, peers):
    s = _baseline(name, kind)
    got = receive_rounds(s.ops, s.matches, COST)
    for r in range(4):
        mine = {got.of[op.id] for op in s.ops if op.rank == r and op.kind == "recv"}
        assert len(mine) == rounds and {got.peers[g] for g in mine} == {peers}
    assert all(got.of[op.id] == -1 for op in s.ops if op.kind != "recv")


# ------------------------------------------------------------------ the simulator, by hand
@pytest.mark.parametrize("name,kind,hops,expected", [
    # alpha 1 us per hop, nothing else costs: ring 3 hops of one peer, 3 x (1 + 2); recursive doubling 2 x (1 + 2);
    # direct: one hop waiting on 3 peers, 1 + 8; allreduce: ring 6 x (1 + 2), direct two rounds of 3 peers 2 x (1 + 8)
    ("ring", "allgather", 3, 9.0), ("recursive_doubling", "allgather", 2, 6.0), ("direct", "allgather", 1, 9.0),
    ("ring", "allreduce", 6, 18.0), ("recursive_doubling", "allreduce", 2, 6.0), ("direct", "allreduce", 2, 18.0),
])
def test_the_round_cost_is_paid_once_per_round_of_every_rank(name, kind, hops, expected):
    s = _baseline(name, kind)
    plain, rounds = _flat(4), _flat(4, round_cost=COST)
    assert simulate(s, plain, 0).time_us == pytest.approx(hops)
    assert simulate(s, rounds, 0).time_us == pytest.approx(expected)
    # the executor's lowering has the same rounds: the same extra
    extra = simulate_run(s, rounds, 64).time_us - simulate_run(s, plain, 64).time_us
    assert extra == pytest.approx(expected - hops)


@pytest.mark.parametrize("name,extra", [("ring", 3 * 2.0), ("recursive_doubling", 2 * 2.0), ("direct", 8.0)])
def test_a_rounds_delay_leaves_the_engine_free_on_a_cpu_without_async_progress(name, extra):
    # one engine per rank, bytes moving only while both engines are idle: a round's delay is a wait, not work,
    # so it holds up no other message and adds exactly its cost per round
    cpu = dict(overhead=0.5, overhead_scope="rank", async_progress=False, local_bw=5.0)
    s = _baseline(name, "allgather")
    extra_us = simulate(s, _flat(4, round_cost=COST, **cpu), 64).time_us - simulate(s, _flat(4, **cpu), 64).time_us
    assert extra_us == pytest.approx(extra)


def test_a_round_is_paid_when_its_last_receive_arrives_before_that_receives_overhead():
    # rank 0 waits on ranks 1 (alpha 1) and 2 (alpha 3) in one round (k = 2: 5 us), then sends on to rank 3
    links = (Link(1, 0, 1.0, 100.0, 0.5), Link(2, 0, 3.0, 100.0, 0.5), Link(0, 3, 1.0, 100.0, 0.5))
    b = ScheduleBuilder(Collective("allgather", 4, 2), "two peers")
    b.transfer(1, 0, ("i", 0), ("o", 0))
    b.transfer(2, 0, ("i", 0), ("o", 1))
    b.transfer(0, 3, ("o", 0, 2), ("o", 0, 2))
    s = b.build()
    plain = Topology("t", 4, links=links, overhead_scope="rank")
    # send overhead 0.5, alpha 3, receive overheads 0.5 + 0.5 (rank 0's engine), send 0.5, alpha 1, receive 0.5
    assert simulate(s, plain, 0).time_us == pytest.approx(0.5 + 3 + 0.5 + 0.5 + 1 + 0.5)
    # with rounds: rank 0's round (two peers) completes 5 us after the second receive arrives (t = 3.5), then
    # that receive's overhead; rank 3's round (one peer) 2 us before its receive's overhead
    timed = replace(plain, round_cost=COST)
    assert simulate(s, timed, 0).time_us == pytest.approx(0.5 + 3 + 5 + 0.5 + 0.5 + 1 + 2 + 0.5)


def test_without_a_round_cost_or_at_zero_catalog_predictions_are_unchanged():
    zero = RoundCost((1, 7), (0.0, 0.0))
    for topo, kind in [(catalog.dgx1(), "allreduce"), (catalog.ring(4), "allgather"),
                       (catalog.fully_connected(4), "allreduce")]:
        assert topo.round_cost is None and topo.communicator_overhead == 0.0
        d = topology_to_dict(topo)
        assert "round_cost" not in d and "communicator_overhead_us" not in d
        n = topo.n_ranks
        s = make_baseline("ring", Collective(kind, n, n if kind == "allreduce" else 1), topo)
        for size in (8, 1 << 20):
            base = simulate(s, topo, size).time_us
            assert simulate(s, replace(topo, round_cost=zero), size).time_us == base
            assert simulate(s, replace(topo, round_cost=COST), size).time_us > base


# ------------------------------------------------------------------ the file
def test_the_topology_file_round_trips_the_keys_and_names_bad_ones():
    topo = _flat(4, round_cost=RoundCost((1, 2, 3), (0.5, 6.0, 12.0)), communicator_overhead=2.5)
    d = topology_to_dict(topo)
    assert d["round_cost"] == {"version": 1, "peers": [1, 2, 3], "us": [0.5, 6.0, 12.0]}
    assert d["communicator_overhead_us"] == 2.5
    assert topology_from_dict(d) == topo
    for bad, words in [({"peers": [1, 2], "us": [1.0]}, "round_cost"), ({"peers": [1], "us": [-1.0]}, "round_cost.us"),
                       ({"peers": [0], "us": [1.0]}, "round_cost.peers"), ({"peers": [1], "us": [1.0], "x": 1}, "x"),
                       ({"version": 2, "peers": [1], "us": [1.0]}, "version")]:
        with pytest.raises(TopologyError, match=words.replace(".", r"\.")):
            topology_from_dict({**d, "round_cost": bad})
    with pytest.raises(TopologyError, match="communicator_overhead_us"):
        topology_from_dict({**d, "communicator_overhead_us": -1})


# ------------------------------------------------------------------ --predict
def test_predict_adds_the_communicators_cost_to_the_rows_that_run_through_it():
    assert via_communicator("default") and via_communicator("plan") and via_communicator("plan:x.json")
    assert not via_communicator("ring") and not via_communicator("mpi")
    rows = lambda algo: [{"size_bytes": 8, "nccl_size_bytes": 8, "median_us": 50.0, "algorithm": algo}]  # noqa: E731
    doc = {"collective": "allreduce", "n_ranks": 2, "dtype": "float32", "command": "ccsynth bench allreduce",
           "results": {"mpi": rows("mpi"), "default": rows("one_shot"), "ring": rows("ring")}}
    plain = _flat(2, overhead_scope="rank")
    before = repredict_document(doc, plain)["results"]
    after = repredict_document(doc, replace(plain, communicator_overhead=4.0))["results"]
    assert after["default"][0]["predicted_us"] == pytest.approx(before["default"][0]["predicted_us"] + 4.0)
    assert after["ring"][0]["predicted_us"] == before["ring"][0]["predicted_us"]
    assert "predicted_us" not in after["mpi"][0]
