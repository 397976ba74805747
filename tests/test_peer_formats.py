"""Peers' files as their users use them: TACCL profiles and sketches, MSCCL's published A100 schedules.

Data: ``taccl_topo_ndv2_{1KB,32KB,1MB}.json`` and ``taccl_sketch_sk{2,3}_ndv2_n2.json``
are microsoft/taccl's ``examples/topo/topo-ndv2-*.json`` and
``examples/sketch/sk{2,3}-ndv2-n2.json``; ``msccl_a100_*16.xml`` are written
by ``tests/data/msccl_a100_generate.py`` from msccl-tools' MSCCLang examples
(``allgather_ring.py 16 1 1``, ``alltoall_allpairs.py 16 1``).
"""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest

from ccsynth.cli import main
from ccsynth.collectives.spec import Collective
from ccsynth.errors import ScheduleError, TopologyError
from ccsynth.formats import files
from ccsynth.formats.taccl_topology import load_taccl_topology, time_scale_for
from ccsynth.synth.bounds import lower_bound
from ccsynth.synth.routing import route_allgather
from ccsynth.synth.simulate import simulate
from ccsynth.synth.sketch import InterNode, Sketch
from ccsynth.synth.synthesize import synthesize
from ccsynth.topologies import catalog

DATA = Path(__file__).parent / "data"


# ------------------------------------------------------------------ TACCL profiles: their scale
@pytest.mark.parametrize("size", ["1KB", "32KB", "1MB"])
def test_taccl_profiles_carry_their_scale(size):
    # TACCL's three NDv2 profiles describe one machine: read as published, they agree within their rounding
    t = files.get_topology(str(DATA / f"taccl_topo_ndv2_{size}.json"))
    assert t.connection(0, 1).alpha == pytest.approx(0.3)
    assert t.connection(0, 1).bw == pytest.approx((1 << 20) / 23 / 1e3, rel=0.003)  # doubled NVLink, 45.6 GB/s
    assert t.connection(0, 2).bw == pytest.approx((1 << 20) / 46 / 1e3, rel=0.003)
    two = files.get_topology(f"{DATA / f'taccl_topo_ndv2_{size}.json'}?nodes=2")
    assert two.connection(0, 9).alpha == pytest.approx(2.6)
    assert two.connection(0, 9).bw == pytest.approx((1 << 20) / 105 / 1e3, rel=0.003)  # 9.99 GB/s
    assert "TACCL's factor" in t.description


def test_taccl_scale_rule_and_its_errors(tmp_path):
    assert [time_scale_for(b) for b in (1 << 10, 32 << 10, 1 << 20, 1 << 30)] == [100.0, 10.0, 1.0, 1.0]
    assert time_scale_for(4 << 10) is None
    doc = {"name": "mine_4KB", "gpus_per_node": 8, "nics_per_node": 1, "alpha": 3, "node_betas_list": [1, 2],
           "remote_alpha": 26, "remote_beta": 4}
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(TopologyError, match=r"cannot tell the time unit .* 4 KiB .* \?scale=S"):
        files.get_topology(str(path))
    assert files.get_topology(f"{path}?scale=10").connection(0, 1).alpha == pytest.approx(0.3)
    # an explicit scale wins over the name's
    assert load_taccl_topology(DATA / "taccl_topo_ndv2_32KB.json", time_scale=1).connection(0, 1).alpha == 3.0
    # a name without a size: an error asking for the size (a guess is off by TACCL's factor), which ?chunk= gives
    path.write_text(json.dumps({**doc, "name": "mycluster"}))
    with pytest.raises(TopologyError, match=r"'mycluster' ends with no size.*\?chunk=SIZE"):
        files.get_topology(str(path))
    assert files.get_topology(f"{path}?chunk=1M").connection(0, 1).alpha == 3.0
    assert files.get_topology(f"{path}?chunk=1K").connection(0, 1).alpha == pytest.approx(0.03)


def test_taccl_node_count_comes_from_the_sketch():
    profile = str(DATA / "taccl_topo_ndv2_1MB.json")
    assert files.get_topology(profile, default_nodes=2).n_ranks == 16
    assert files.get_topology(f"{profile}?nodes=3", default_nodes=2).n_ranks == 24  # the spec's own count wins
    assert files.get_topology("dgx1", default_nodes=2).n_ranks == 8  # catalog names name their nodes


def test_cli_synth_takes_nodes_from_a_taccl_sketch(tmp_path, capsys):
    out = tmp_path / "ag.json"
    rc = main(["-q", "synth", "--sketch", str(DATA / "taccl_sketch_hub_n2_fully_connected.json"),
               "-t", str(DATA / "taccl_hub_1KB.json"), "-c", "allgather", "-s", "64K", "-o", str(out)])
    assert rc == 0
    sched = files.load_schedule(out)
    assert sched.collective.n_ranks == 8


# ------------------------------------------------------------------ TACCL sketches: relays as TACCL routes them
def _crossings(sched, topo):
    """Per allgather piece (its index in the output): how many times it is sent from one node to another."""
    c = sched.collective.chunk_factor
    count = {}
    for op in sched.ops:
        if op.kind == "send" and topo.nodes[op.rank] != topo.nodes[op.peer]:
            for i in op.src.indices():
                piece = op.rank * c + i if op.src.buf == "i" else i
                count[piece] = count.get(piece, 0) + 1
    return count


@pytest.mark.parametrize("sketch", ["taccl_sketch_sk2_ndv2_n2.json", "taccl_sketch_sk3_ndv2_n2.json"])
def test_taccl_relay_sketches_cross_once_and_spread(sketch):
    sk = files.load_sketch(DATA / sketch)
    topo = files.get_topology(str(DATA / "taccl_topo_ndv2_1MB.json"), default_nodes=sk.nnodes)
    size = 16 << 20
    coll = Collective("allgather", topo.n_ranks)
    s = synthesize(topo, coll, sk, size_bytes=size, compare_baselines=False)
    bound = lower_bound(coll, topo, size).time_us
    t = simulate(s, topo, size).time_us
    # sk2 routed each chunk across the one NIC once per remote GPU (6,734 us); TACCL crosses once and spreads
    assert bound <= t < 1.2 * bound
    crossings = _crossings(s, topo)
    assert len(crossings) == topo.n_ranks * s.collective.chunk_factor and set(crossings.values()) == {1}


def test_fully_connected_data_enters_each_node_at_one_gpu_taken_in_turn():
    sk = files.load_sketch(DATA / "taccl_sketch_sk2_ndv2_n2.json")
    lt = sk.bind(catalog.ndv2(2))
    assert lt.spreads and [lt.entry_local(r) for r in range(8)] == list(range(8))
    assert lt.relay_edge_ok(3, 0, 3, 11) and not lt.relay_edge_ok(3, 0, 3, 12)
    assert lt.edge_ok(3, 0, 3, 12)  # alltoall data (one destination) may still go straight there
    direct = files.load_sketch(DATA / "taccl_sketch_sk3_ndv2_n2.json").bind(catalog.ndv2(2))
    assert not direct.spreads and direct.entry_local(3) is None
    # senders with several receivers, pieces relayed by index: each piece enters where its relay reaches
    relays = Sketch(chunk_factor=2, internode=InterNode(connections=((0, (1, 2)), (4, (5, 6))),
                                                        chunk_relays=((0, (0,)), (1, (4,)))))
    lt = relays.bind(catalog.ndv2(2))
    assert [(lt.entry_local(r, 0), lt.entry_local(r, 1)) for r in (0, 1)] == [(1, 5), (2, 6)]
    routing = route_allgather(lt, 2, 1e6)
    assert routing.t_bw_us > 0


# ------------------------------------------------------------------ MSCCL's A100 schedules on the catalog's A100s
@pytest.mark.parametrize("name, kind", [("msccl_a100_allgather_ring16.xml", "allgather"),
                                        ("msccl_a100_alltoall_allpairs16.xml", "alltoall")])
def test_msccl_a100_schedules_verify_and_simulate_on_dgx_a100x2(name, kind):
    topo = catalog.dgx_a100(2)
    sched = files.load_schedule(DATA / name, topology=topo)
    assert sched.collective.kind == kind and sched.collective.n_ranks == 16
    size = 16 << 20
    t = simulate(sched, topo, size).time_us
    assert t >= lower_bound(sched.collective, topo, size).time_us
    # GPU 7 of node 0 -> GPU 0 of node 1: another rail, through the spine
    assert topo.connection(7, 8).via == "spine"
    # without the spine the catalog's rails could not carry them
    with pytest.raises(ScheduleError, match="7->8|connection"):
        files.load_schedule(DATA / name, topology=replace(topo, spines=()))


def test_cli_verifies_msccl_ring_on_dgx_a100x2(capsys):
    assert main(["verify", str(DATA / "msccl_a100_allgather_ring16.xml"), "-t", "dgx_a100x2"]) == 0
    assert "OK" in capsys.readouterr().out
    assert main(["simulate", str(DATA / "msccl_a100_alltoall_allpairs16.xml"), "-t", "dgx_a100x2", "-s", "1M"]) == 0


def test_spine_keeps_schedules_above_the_bound_on_an_oversubscribed_fat_tree():
    topo = catalog.fat_tree(4, 2, leaf_nodes=2, oversubscription=2)
    for kind in ("allgather", "alltoall"):
        coll = Collective(kind, topo.n_ranks)
        s = synthesize(topo, coll, size_bytes=1 << 20)
        t = simulate(s, topo, 1 << 20).time_us
        assert t >= lower_bound(coll, topo, 1 << 20).time_us * (1 - 1e-9)
        assert math.isfinite(t)
