"""The cold call cost (topologies/coldcall.py): a call's once-per-call extra by its footprint, in the simulator and
in topology files (issue 10, h44-coldcall)."""

import json

import pytest

from ccsynth.collectives.builder import ScheduleBuilder
from ccsynth.collectives.spec import Collective
from ccsynth.errors import TopologyError
from ccsynth.synth.executor_model import simulate_run
from ccsynth.synth.simulate import simulate, static_bound
from ccsynth.topologies.coldcall import ColdCallCost
from ccsynth.topologies.io import load_topology, topology_from_dict, topology_to_dict
from ccsynth.topologies.model import Link, Topology


def _pair(cold=None) -> Topology:
    return Topology("pair", 2, links=(Link(0, 1, 1.0, 10.0), Link(1, 0, 1.0, 10.0)), cold_call=cold)


def _allgather():
    b = ScheduleBuilder(Collective("allgather", 2), "pairwise")
    for r in range(2):
        b.copy(r, ("i", 0), ("o", r))
    b.transfer(0, 1, ("i", 0), ("o", 0))
    b.transfer(1, 0, ("i", 0), ("o", 1))
    return b.build()


def test_cost_is_piecewise_linear_in_the_footprint_and_in_proportion_below_the_probes_buffers():
    c = ColdCallCost((1e6, 3e6), (0.0, 10.0), working_set_bytes=60_000)
    assert c.cost_us(0, 60_000) == 0.0 and c.cost_us(1e6, 60_000) == 0.0
    assert c.cost_us(2e6, 60_000) == pytest.approx(5.0) and c.cost_us(9e9, 1e9) == 10.0
    assert c.cost_us(2e6, 30_000) == pytest.approx(2.5) and c.cost_us(2e6, 0) == 0.0
    for bad in (((), ()), ((1e6,), (1.0, 2.0)), ((2e6, 1e6), (0.0, 1.0)), ((1e6,), (-1.0,)), ((0.0,), (1.0,))):
        with pytest.raises(TopologyError):
            ColdCallCost(*bad, working_set_bytes=1.0)
    with pytest.raises(TopologyError, match="working_set_bytes"):
        ColdCallCost((1e6,), (1.0,), working_set_bytes=0.0)


def test_simulator_adds_the_cold_cost_once_per_call_at_the_footprint():
    """Hand-computed: 10 KB per chunk over 1 us and 10 GB/s is 2 us alone; the call's working set is 30 KB per rank
    (input, two output chunks)."""
    s = _allgather()
    plain = simulate(s, _pair(), 20_000).time_us
    assert plain == 2.0
    cold = _pair(ColdCallCost((1e6, 3e6), (0.0, 10.0), working_set_bytes=30_000))
    # its own working set (30 KB, below the first point): nothing; after 2 MB of other data: 5 us more, once
    assert simulate(s, cold, 20_000).time_us == 2.0
    assert simulate(s, cold, 20_000, footprint_bytes=2e6).time_us == pytest.approx(7.0)
    assert simulate(s, cold, 20_000, footprint_bytes=5e6).time_us == pytest.approx(12.0)
    # a call with half the probe's buffers pays half
    half = _pair(ColdCallCost((1e6, 3e6), (0.0, 10.0), working_set_bytes=60_000))
    assert simulate(s, half, 20_000, footprint_bytes=2e6).time_us == pytest.approx(4.5)
    # the static bound carries it as a per-call cost (a bound never above the time)
    assert static_bound(s, cold, 20_000).call_us == 0.0
    # through the executor model, the same extra on top of its own prediction
    base = simulate_run(s, _pair(), 20_000, footprint_bytes=2e6).time_us
    assert simulate_run(s, cold, 20_000, footprint_bytes=2e6).time_us == pytest.approx(base + 5.0)


def test_topology_files_with_and_without_the_key(tmp_path):
    plain = _pair()
    d = topology_to_dict(plain)
    assert "cold_call" not in d and topology_from_dict(d) == plain
    cold = _pair(ColdCallCost((1e6, 3e6), (0.0, 10.0), working_set_bytes=30_000))
    d = topology_to_dict(cold)
    assert d["cold_call"] == {"version": 1, "footprints_bytes": [1e6, 3e6], "us": [0.0, 10.0],
                              "working_set_bytes": 30_000.0}
    path = tmp_path / "t.json"
    path.write_text(json.dumps(d))
    assert load_topology(path).cold_call == cold.cold_call
    bad = dict(d, cold_call={"version": 1, "footprints_bytes": [1e6], "us": [-2.0], "working_set_bytes": 1})
    with pytest.raises(TopologyError, match="cold_call"):
        topology_from_dict(bad)
    with pytest.raises(TopologyError, match="cold_call"):
        topology_from_dict(dict(d, cold_call={"version": 1, "footprints_bytes": [1e6], "us": [1.0]}))
    with pytest.raises(TopologyError, match="unknown key"):
        topology_from_dict(dict(d, cold_call={**d["cold_call"], "uss": 1}))
