"""Input limits (ccsynth.limits) where they are enforced, reading within limits (ccsynth.reading), sizes, memory."""

from __future__ import annotations

import json

import pytest

from ccsynth import limits
from ccsynth.bench.memory import buffer_bytes, check_memory
from ccsynth.collectives.schedule import Chunks, Op, Schedule, check_writes_cover_outputs
from ccsynth.collectives.spec import KINDS, Collective
from ccsynth.collectives.transforms import alias_in_place
from ccsynth.errors import (
    CCSynthError,
    CollectiveError,
    ScheduleError,
    ScheduleFormatError,
    SizeError,
    SketchError,
    SolverError,
    TopologyError,
)
from ccsynth.reading import check_depth, parse_json, read_text
from ccsynth.synth.baselines import applicable_baselines, make_baseline
from ccsynth.synth.sketch import Sketch
from ccsynth.synth.solver import SolverOptions
from ccsynth.topologies import catalog, fully_connected, ring
from ccsynth.topologies.model import Link, SharedPort, Switch, Topology
from ccsynth.units import parse_size, parse_sizes


def test_limits_are_named_once_and_documented():
    assert set(limits.LIMITS) == {n for n in limits.__all__ if n.startswith(("MAX_", "MIN_"))}
    for name in limits.LIMITS:
        assert f"``{name}``" in limits.__doc__, name
    assert catalog.MAX_RANKS == limits.MAX_RANKS and catalog.MAX_CONNECTIONS == limits.MAX_CONNECTIONS
    assert limits.MAX_CHUNK_FACTOR >= limits.MAX_RANKS  # ring allreduce on MAX_RANKS ranks cuts one chunk per rank


def test_check_names_input_value_and_limit():
    with pytest.raises(TopologyError, match=r"^n_ranks 5000 exceeds MAX_RANKS = 4096$"):
        limits.check("n_ranks", 5000, "MAX_RANKS", TopologyError)
    with pytest.raises(CCSynthError, match=r"bw 1e-320 is below MIN_BANDWIDTH_GBPS = 1e-06"):
        limits.check_min("bw", 1e-320, "MIN_BANDWIDTH_GBPS")
    limits.check("n_ranks", 4096, "MAX_RANKS")


# ------------------------------------------------------------------ collectives
@pytest.mark.parametrize(
    "args, name",
    [
        (("allreduce", 10**18), "MAX_RANKS"),
        (("allreduce", 4, 10**9), "MAX_CHUNK_FACTOR"),
        (("allgather", 64, 4096), "MAX_BUFFER_CHUNKS"),
        (("allreduce", 4096 * 2, 1), "MAX_RANKS"),
    ],
)
def test_collective_limits(args, name):
    with pytest.raises(CollectiveError, match=name):
        Collective(*args)


def test_collective_at_the_largest_sizes_is_cheap():
    c = Collective("allreduce", limits.MAX_RANKS, limits.MAX_RANKS)  # ring allreduce on 4096 ranks
    assert c.n_ranks * c.size_chunks == limits.MAX_TOTAL_CHUNKS


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("n, c", [(1, 1), (3, 2), (4, 1)])
def test_postcondition_size(kind, n, c):
    coll = Collective(kind, n, c)
    assert coll.postcondition_size == len(coll.postcondition())


def test_collective_root_type():
    with pytest.raises(CollectiveError, match="root must be an integer"):
        Collective("broadcast", 4, 1, "0")
    with pytest.raises(CollectiveError, match="kind must be a string"):
        Collective.from_dict({"kind": 5, "n_ranks": 4})


# ------------------------------------------------------------------ topologies
def test_topology_limits():
    with pytest.raises(TopologyError, match="MAX_RANKS"):
        Topology("big", 10**9)
    with pytest.raises(TopologyError, match="MIN_BANDWIDTH_GBPS"):
        Topology("slow", 2, links=(Link(0, 1, 1.0, 1e-320),))
    with pytest.raises(TopologyError, match="MAX_LATENCY_US"):
        Topology("late", 2, links=(Link(0, 1, 1e300, 1.0),))
    # switches imply their connections without building them: a 4096-rank switch is cheap and allowed
    big = Topology("sw", 4096, switches=(Switch("sw", tuple(range(4096)), 10.0, 1.0),))
    assert big.connection_count() == 4096 * 4095
    many = tuple(range(4)) * 2000
    with pytest.raises(TopologyError, match="MAX_PORT_PAIRS"):
        Topology("ports", 4, links=(Link(0, 1, 1.0, 1.0),), shared_ports=(SharedPort("p", many, many, 1.0),))
    with pytest.raises(TopologyError, match="MIN_BANDWIDTH_GBPS"):
        ring(4, bw=1e-9)
    assert ring(4, bw=limits.MIN_BANDWIDTH_GBPS).n_ranks == 4


def test_largest_catalog_entries_still_build():
    for spec in ("ndv2x32", "dgx_a100x128", "ring:4096", "torus:64x64"):
        t = catalog_topology(spec)
        assert t.n_ranks <= limits.MAX_RANKS


def catalog_topology(spec):
    from ccsynth.topologies import get_topology

    return get_topology(spec)


# ------------------------------------------------------------------ schedules
def _pair():
    c = Collective("allgather", 2)
    ops = (Op(0, 0, "copy", Chunks("i", 0), Chunks("o", 0)), Op(1, 1, "copy", Chunks("i", 0), Chunks("o", 1)),
           Op(2, 0, "send", Chunks("i", 0), peer=1), Op(3, 1, "recv", dst=Chunks("o", 0), peer=0),
           Op(4, 1, "send", Chunks("i", 0), peer=0), Op(5, 0, "recv", dst=Chunks("o", 1), peer=1))
    return Schedule("pair", c, ops)


def test_schedule_limits():
    s = _pair()
    d = s.to_dict()
    with pytest.raises(ScheduleError, match="MAX_SCRATCH_CHUNKS"):
        Schedule("x", s.collective, s.ops, scratch_chunks=10**12)
    with pytest.raises(ScheduleError, match="channel -5"):
        Schedule("x", s.collective, (Op(0, 0, "copy", Chunks("i", 0), Chunks("o", 0), channel=-5),))
    with pytest.raises(ScheduleError, match="MAX_CHANNELS"):
        Schedule("x", s.collective, (Op(0, 0, "copy", Chunks("i", 0), Chunks("o", 0), channel=10**6),))
    with pytest.raises(ScheduleError, match="MAX_SCHEDULE_CHUNKS"):
        Schedule("x", Collective("allgather", 4096), ())
    with pytest.raises(ScheduleFormatError, match="MAX_SCHEDULE_OPS"):
        Schedule.from_dict({**d, "ops": [None] * (limits.MAX_SCHEDULE_OPS + 1)})
    with pytest.raises(ScheduleFormatError, match="meta must be an object"):
        Schedule.from_dict({**d, "meta": [1]})
    with pytest.raises(ScheduleFormatError, match="MAX_JSON_DEPTH"):
        Schedule.from_dict({**d, "meta": {"a": json.loads("[" * 50 + "]" * 50)}})
    with pytest.raises(ScheduleFormatError, match="version True"):
        Schedule.from_dict({**d, "version": True})
    assert Schedule.from_dict({**d, "meta": None}).meta == {}


def test_writes_cover_outputs_passes_every_valid_schedule():
    topo = fully_connected(4)
    n = 0
    for kind in KINDS:
        for c in (1, 4):
            coll = Collective(kind, 4, c)
            for name in applicable_baselines(coll, topo):
                s = make_baseline(name, coll, topo)
                check_writes_cover_outputs(s)
                try:
                    check_writes_cover_outputs(alias_in_place(s))
                except ScheduleError as e:  # not every schedule is correct in place
                    assert "cannot implement" not in str(e)
                n += 1
    assert n > 20


def test_writes_cover_outputs_refuses_a_tiny_schedule_of_a_huge_collective():
    s = Schedule("empty", Collective("alltoall", 64), ())
    with pytest.raises(ScheduleError, match=r"write at most 0 output chunk\(s\) and the collective needs 4096"):
        check_writes_cover_outputs(s)


# ------------------------------------------------------------------ sketches, solver
def test_sketch_and_solver_limits():
    with pytest.raises(SketchError, match="MAX_CHUNK_FACTOR"):
        Sketch(chunk_factor=10**6)
    with pytest.raises(SketchError, match="MAX_RANKS"):
        Sketch(nnodes=10**6)
    with pytest.raises(SketchError, match="MAX_RANKS"):
        Sketch(symmetry=((0, 10**9),))
    with pytest.raises(SolverError, match="MAX_SOLVER_THREADS"):
        SolverOptions(threads=100_000)


# ------------------------------------------------------------------ reading
def test_read_text_and_parse_json(tmp_path, monkeypatch):
    p = tmp_path / "a.json"
    p.write_text('{"a": 1}')
    assert parse_json(read_text(p, "thing", ValueError), "thing", ValueError) == {"a": 1}
    monkeypatch.setattr("ccsynth.reading.MAX_FILE_BYTES", 4)
    with pytest.raises(ValueError, match="MAX_FILE_BYTES = 4"):
        read_text(p, "thing", ValueError)
    with pytest.raises(ValueError, match="nested too deeply"):
        parse_json("[" * 100_000 + "]" * 100_000, "thing", ValueError)
    with pytest.raises(ValueError, match="not valid JSON"):
        parse_json("1" * 5000, "thing", ValueError)  # more digits than Python converts
    with pytest.raises(ValueError, match="cannot read thing '': the path is empty"):
        read_text("", "thing", ValueError)
    with pytest.raises(ValueError, match="Is a directory"):
        read_text(tmp_path, "thing", ValueError)
    (tmp_path / "b.json").write_bytes(b"\xff\xfe")
    monkeypatch.setattr("ccsynth.reading.MAX_FILE_BYTES", 1000)
    with pytest.raises(ValueError, match="not UTF-8"):
        read_text(tmp_path / "b.json", "thing", ValueError)


def test_check_depth_is_iterative():
    deep = []
    for _ in range(10_000):
        deep = [deep]
    with pytest.raises(ValueError, match="MAX_JSON_DEPTH = 32"):
        check_depth(deep, "meta", ValueError)
    check_depth({"a": [{"b": [1, 2]}]}, "meta", ValueError)


# ------------------------------------------------------------------ sizes
@pytest.mark.parametrize(
    "text, words",
    [("", "bad size ''"), (",", "no size"), (" , ", "no size"), ("0:4", "0:4"), ("0:0", "0:0"),
     ("9" * 400, "MAX_SIZE_BYTES"), ("2048P", "bad size"), ("2000000T", "MAX_SIZE_BYTES")],
)
def test_bad_size_lists(text, words):
    with pytest.raises(SizeError, match=None) as e:
        parse_sizes(text)
    assert words in str(e.value) and len(str(e.value)) < 200


def test_good_sizes_unchanged():
    assert parse_sizes("1K:4K") == [1024, 2048, 4096]
    assert parse_sizes(":4") == [1, 2, 4]
    assert parse_sizes("0,1K") == [0, 1024]
    assert parse_size("0") == 0
    assert parse_size(1 << 60) == 1 << 60
    with pytest.raises(SizeError, match="MAX_SIZE_BYTES"):
        parse_size((1 << 60) + 1)


# ------------------------------------------------------------------ bench memory
def test_bench_memory_estimate_and_check(monkeypatch):
    # allreduce float32 on one rank: send + recv + send pattern = 3 S, plus 6 S of int64 pattern temporaries
    assert buffer_bytes("allreduce", 1 << 20, 1, 4, validate=False, on_host=True, staging=False) == 9 << 20
    assert buffer_bytes("allreduce", 1 << 20, 1, 4, validate=True, on_host=True, staging=False) == 10 << 20
    gib = 1 << 30
    check_memory("allreduce", "allreduce", gib, 4, 4, ["mpi"], itemsize=4, validate=False, on_host=True,
                 together=False, available=64 * gib)
    with pytest.raises(CCSynthError, match=r"needs about 36.0 GiB .*4 rank\(s\) here x 9.0 GiB.* more than the 8.0 GiB"):
        check_memory("allreduce", "allreduce", gib, 4, 4, ["mpi"], itemsize=4, validate=False, on_host=True,
                     together=False, available=8 * gib)
    # nothing known about the machine: no check
    monkeypatch.setattr("ccsynth.bench.memory.available_bytes", lambda: None)
    check_memory("allreduce", "allreduce", 1 << 40, 4, 4, ["mpi"], itemsize=4, validate=False, on_host=True,
                 together=False)
