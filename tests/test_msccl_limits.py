"""MSCCL XML export keeps the runtimes' limits (ccsynth.formats.msccl.fit) or refuses with a clear error.

Files are checked with tests/msccl_runtime.py, which parses the XML and counts as the runtimes'
parsers do, independently of the exporter's own bookkeeping.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest
from msccl_runtime import runtime_problems
from test_msccl import direct_alltoall, ring_allgather, ring_topology

from ccsynth.cli import main
from ccsynth.collectives.builder import ScheduleBuilder
from ccsynth.collectives.schedule import Schedule, save_schedule
from ccsynth.collectives.spec import Collective
from ccsynth.collectives.transforms import channels_used, merge_transfers, split_streams
from ccsynth.collectives.verify import verify
from ccsynth.errors import ExportLimitError, ScheduleError
from ccsynth.formats.msccl import EXECUTOR_LIMITS, MSCCL_LIMITS, MscclLimits, schedule_from_msccl_xml, schedule_to_msccl_xml
from ccsynth.synth.simulate import simulate
from ccsynth.topologies import get_topology


def strided_pair(m: int) -> Schedule:
    """``m`` messages from rank 0 to 1 whose ranges do not follow each other (nothing merges)."""
    b = ScheduleBuilder(Collective("allgather", 2, 2 * m), f"strided{m}")
    for r in range(2):
        b.copy(r, ("i", 0, 2 * m), ("o", r * 2 * m, 2 * m))
    for j in list(range(0, 2 * m, 2)) + list(range(1, 2 * m, 2)):
        b.transfer(0, 1, ("i", j), ("o", j))
        b.transfer(1, 0, ("i", j), ("o", 2 * m + j))
    return b.build()


def max_steps(text: str) -> int:
    return max(len(tb.findall("step")) for tb in ET.fromstring(text).iter("tb"))


# ------------------------------------------------------------ transforms
def test_merge_transfers_joins_consecutive_pieces_of_one_level():
    s = ring_allgather(4, 8)
    m = merge_transfers(s, 4, 64)
    verify(m)
    sends = [op for op in m.ops if op.kind == "send"]
    assert len(sends) == 4 * 3 * 2 and {op.count for op in sends} == {4}
    assert merge_transfers(s, 1, 64) is s
    # a run never crosses a dependency: a chain of forwards stays one message per hop
    b = ScheduleBuilder(Collective("broadcast", 3, 2), "chain")
    b.copy(0, ("i", 0, 2), ("o", 0, 2))
    b.transfer(0, 1, ("i", 0), ("o", 0))
    b.transfer(1, 2, ("o", 0), ("o", 0))
    b.transfer(0, 1, ("i", 1), ("o", 1))
    b.transfer(1, 2, ("o", 1), ("o", 1))
    chain = b.build()
    merged = merge_transfers(chain, 8, 64)
    verify(merged)
    assert sorted(op.count for op in merged.ops if op.kind == "send") == [2, 2]
    # the merged schedule never deadlocks and moves fewer, larger messages
    t = ring_topology(4)
    assert simulate(m, t, 1 << 20).time_us > 0


def test_split_streams_moves_consecutive_blocks_to_new_channels():
    s = strided_pair(10)
    sp = split_streams(s, {(0, 1, 0): 3})
    verify(sp)
    chans = [op.channel for op in sp.ops if op.kind == "send" and op.rank == 0]
    assert chans == sorted(chans) and set(chans) == {0, 1, 2}
    assert all(op.channel == 0 for op in sp.ops if op.kind == "send" and op.rank == 1)
    m = sp.matches
    assert all(sp.ops[m[op.id]].channel == op.channel for op in sp.ops if op.kind == "send")
    assert channels_used(sp) == 3 and split_streams(s, {}) is s
    with pytest.raises(ScheduleError, match="positive"):
        split_streams(s, {(0, 1, 0): 0})


# ------------------------------------------------------------------ fit
def test_long_pipeline_fits_by_merging_or_spreading():
    s = ring_allgather(4, 100)  # 300 messages per stream
    t = ring_topology(4)
    for topology in (None, t):
        text = schedule_to_msccl_xml(s, topology=topology)
        assert runtime_problems(text) == []
        back = schedule_from_msccl_xml(text)
        verify(back)
        assert simulate(back, t, 1 << 26).time_us <= 1.25 * simulate(s, t, 1 << 26).time_us
    # a runtime built with more steps takes the schedule as it is
    text = schedule_to_msccl_xml(s, limits=EXECUTOR_LIMITS.with_max_steps(1000))
    assert ET.fromstring(text).get("nchannels") == "1" and max_steps(text) > 256
    assert runtime_problems(text, max_steps=1000) == [] and runtime_problems(text) != []


def test_unmergeable_stream_spreads_over_channels():
    s = strided_pair(150)  # 300 messages each way, no two ranges adjacent
    text = schedule_to_msccl_xml(s)
    assert runtime_problems(text) == []
    assert int(ET.fromstring(text).get("nchannels")) >= 5 and max_steps(text) <= 64
    verify(schedule_from_msccl_xml(text))
    # microsoft/msccl takes 256 steps: fewer channels
    text = schedule_to_msccl_xml(s, limits=MSCCL_LIMITS)
    assert int(ET.fromstring(text).get("nchannels")) == 2 and runtime_problems(text, max_steps=256) == []


def test_a_schedule_that_cannot_fit_is_refused():
    s = strided_pair(40)
    tight = MscclLimits(name="a tiny runtime", max_steps=4, max_channels=2)
    with pytest.raises(ExportLimitError) as e:
        schedule_to_msccl_xml(s, limits=tight)
    assert isinstance(e.value, ScheduleError)
    assert re.search(r"does not fit a tiny runtime: threadblock \d+ of gpu \d+ needs \d+ steps, at most 4 allowed "
                     r"\(MSCCL_MAX_NUM_STEPS", str(e.value)), str(e.value)
    # offsets are 16-bit in the runtimes: no transform shortens a buffer
    n, c = 9, 4096
    b = ScheduleBuilder(Collective("allgather", n, c), "huge")
    for r in range(n):
        b.copy(r, ("i", 0, c), ("o", r * c, c))
        for k in range(1, n):
            b.transfer(r, (r + k) % n, ("i", 0, c), ("o", r * c, c))
    with pytest.raises(ExportLimitError, match=r"buffer 'o' of gpu 0 needs 36864 chunks; .* at most 32768"):
        schedule_to_msccl_xml(b.build())
    with pytest.raises(ScheduleError, match="steps per threadblock"):
        EXECUTOR_LIMITS.with_max_steps(0)


def test_many_peers_share_threadblocks():
    s = direct_alltoall(10)  # 9 send and 9 receive peers per gpu, plus the local threadblock
    few = MscclLimits(name="few", max_tbs=12)
    text = schedule_to_msccl_xml(s, limits=few)
    for g in ET.fromstring(text).iter("gpu"):
        tbs = g.findall("tb")
        assert len(tbs) <= 12
        assert any(int(t.get("send")) == int(t.get("recv")) >= 0 for t in tbs)  # a peer's two directions share one
    verify(schedule_from_msccl_xml(text))
    assert len(ET.fromstring(schedule_to_msccl_xml(s)).find("gpu").findall("tb")) == 19


# -------------------------------------------------------- synthesized cases
def _check_synthesized(topology: str, kind: str, size: int) -> None:
    from ccsynth.synth.synthesize import synthesize

    topo = get_topology(topology)
    sched = synthesize(topo, Collective(kind, topo.n_ranks), size_bytes=size)
    text = schedule_to_msccl_xml(sched, topology=topo)
    assert runtime_problems(text) == [], (topology, kind, size)
    back = schedule_from_msccl_xml(text)
    verify(back, topo)


# by default a few cases of bench/bench_synth.py whose schedules are long (64 MiB) and quick to
# synthesize (dgx1 alltoall at 64 MiB, whose streams need spreading, is the CLI test below); all of them
# in the slow test
@pytest.mark.parametrize("kind", ["allgather", "allreduce"])
def test_synthesized_dgx1_64m_fits(kind):
    _check_synthesized("dgx1", kind, 1 << 26)


# slow, not run by CI (docs/testing.md): the benchmark's quick machines; `python -m ccsynth.bench.bench_synth`
# exports every case of every machine (its "MSCCL XML" column: ok, or refused with the limit named)
BENCH_TOPOLOGIES = ("dgx1",)
BENCH_COLLECTIVES = ("allgather", "reduce_scatter", "allreduce", "alltoall")
BENCH_SIZES = (1 << 10, 1 << 20, 1 << 26)


@pytest.mark.slow
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("size", BENCH_SIZES, ids=("1K", "1M", "64M"))
@pytest.mark.parametrize("kind", BENCH_COLLECTIVES)
@pytest.mark.parametrize("topology", BENCH_TOPOLOGIES)
def test_every_synthesis_benchmark_case_fits(topology, kind, size):
    _check_synthesized(topology, kind, size)


# packed trees on 16 ranks at 64 MiB once needed 4,255 XML elements per gpu (the runtime loads 4,095): the
# tree search now keeps every schedule within synth.trees.search.MAX_OPS_PER_RANK
@pytest.mark.slow
@pytest.mark.parametrize("kind", ["reduce_scatter", "allreduce"])
def test_packed_trees_on_sixteen_ranks_fit(kind):
    _check_synthesized("ndv2x2", kind, 1 << 26)


# ------------------------------------------------------------------ CLI
def test_cli_export_keeps_the_limits_or_refuses(tmp_path, capsys):
    src = tmp_path / "ring.json"
    save_schedule(ring_allgather(4, 100), src)
    out = tmp_path / "ring.xml"
    assert main(["export", str(src), "-o", str(out)]) == 0
    assert runtime_problems(out.read_text()) == []
    capsys.readouterr()
    big = tmp_path / "big.xml"
    assert main(["export", str(src), "-o", str(big), "--msccl-max-steps", "512"]) == 0
    assert runtime_problems(big.read_text(), max_steps=512) == [] and max_steps(big.read_text()) > 64
    capsys.readouterr()
    # refused: exit 2, one line naming the limit, and no file
    src = tmp_path / "strided.json"
    save_schedule(strided_pair(40), src)
    bad = tmp_path / "bad.xml"
    assert main(["export", str(src), "-o", str(bad), "--msccl-max-steps", "1"]) == 2
    err = capsys.readouterr().err
    assert "MSCCL_MAX_NUM_STEPS" in err and "steps" in err and not bad.exists()
    assert main(["export", str(src), "-o", str(bad), "--msccl-max-steps", "0"]) == 2
    assert "from 1 to" in capsys.readouterr().err
    assert main(["export", str(src), "-f", "json", "--msccl-max-steps", "256"]) == 2


def test_cli_synth_msccl_xml_keeps_the_limits(tmp_path, capsys):
    out = tmp_path / "a2a.xml"
    assert main(["synth", "-t", "dgx1", "-c", "alltoall", "-s", "64M", "-o", str(out)]) == 0
    text = out.read_text()
    assert runtime_problems(text) == [] and max_steps(text) <= 64
    capsys.readouterr()
    assert main(["synth", "-t", "dgx1", "-c", "alltoall", "-s", "1M", "-o", str(tmp_path / "a.json"),
                 "--msccl-max-steps", "256"]) == 2
    assert "MSCCL XML" in capsys.readouterr().err
