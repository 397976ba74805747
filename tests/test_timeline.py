"""The simulator's trace (ccsynth.synth.trace) and the timeline picture (ccsynth simulate --timeline)."""

from __future__ import annotations

import json
import math
import sys

import pytest

from ccsynth.bench.timeline import write_timeline
from ccsynth.cli import main
from ccsynth.collectives.builder import ScheduleBuilder
from ccsynth.collectives.schedule import Chunks
from ccsynth.collectives.spec import Collective
from ccsynth.synth.baselines import make_baseline
from ccsynth.synth.simulate import simulate
from ccsynth.topologies import get_topology
from ccsynth.topologies.model import Link, Topology
import itertools


def pair(alpha=1.0, bw=10.0, overhead=0.0, scope="connection", local_bw=None):
    return Topology("pair", 2, links=(Link(0, 1, alpha, bw, overhead), Link(1, 0, alpha, bw, overhead)),
                    overhead_scope=scope, local_bw=local_bw)


def line3(alpha=1.0, bw=10.0):
    return Topology("line", 3, links=(Link(0, 1, alpha, bw), Link(1, 2, alpha, bw)))


def phases(x):
    return (x.posted, x.data_ready, x.data_start, x.data_end, x.done)


# --------------------------------------------------------- hand-computed traces
def test_one_message_phases_and_overheads():
    b = ScheduleBuilder(Collective("broadcast", 2), "one")
    b.transfer(0, 1, ("i", 0), ("o", 0))
    r = simulate(b.build(), pair(overhead=0.5), 10_000, trace=True)  # 10 KB at 10 GB/s: 1 us
    (x,) = r.trace.transfers
    assert (x.src, x.dst, x.channel, x.nbytes) == (0, 1, 0, 10_000)
    assert x.chunks == Chunks("o", 0, 1)
    assert phases(x) == pytest.approx((0.5, 1.5, 1.5, 2.5, 3.0))
    assert [(w.kind, w.start, w.end) for w in r.trace.work] == [("send overhead", 0.0, 0.5), ("recv overhead", 2.5, 3.0)]
    assert r.trace.work[0].engine == "0->1 ch0 send" and r.trace.work[1].engine == "0->1 ch0 recv"
    assert r.trace.op_done == pytest.approx((2.5, 3.0))  # the send is done with the transfer, the receive after its overhead
    assert max(r.trace.op_done) == pytest.approx(r.time_us)


def test_a_stream_serves_its_transfers_one_after_another():
    # two messages on one connection and channel, both ready at 0: alpha overlaps, data queues
    b = ScheduleBuilder(Collective("allgather", 2, 2), "two")
    for j in range(2):
        b.transfer(0, 1, ("i", j), ("o", j))
    r = simulate(b.build(), pair(), 40_000, trace=True)  # chunks of 10 KB
    first, second = sorted(r.trace.transfers, key=lambda x: x.send)
    assert phases(first) == pytest.approx((0.0, 1.0, 1.0, 2.0, 2.0))
    assert phases(second) == pytest.approx((0.0, 1.0, 2.0, 3.0, 3.0))
    assert r.time_us == pytest.approx(3.0)


def test_two_channels_share_the_link():
    b = ScheduleBuilder(Collective("allgather", 2, 2), "two")
    b.transfer(0, 1, ("i", 0), ("o", 0), channel=0)
    b.transfer(0, 1, ("i", 1), ("o", 1), channel=1)
    r = simulate(b.build(), pair(), 40_000, trace=True)
    a, c = sorted(r.trace.transfers, key=lambda x: x.channel)
    # side by side at half the bandwidth each
    assert phases(a) == pytest.approx((0.0, 1.0, 1.0, 3.0, 3.0))
    assert phases(c) == pytest.approx((0.0, 1.0, 1.0, 3.0, 3.0))
    assert c.connection == "0->1 ch1" and a.connection == "0->1"


def test_a_forward_starts_when_its_receive_is_done():
    b = ScheduleBuilder(Collective("broadcast", 3), "chain")
    b.transfer(0, 1, ("i", 0), ("o", 0))
    b.transfer(1, 2, ("o", 0), ("o", 0))
    r = simulate(b.build(), line3(), 10_000, trace=True)
    hop1, hop2 = sorted(r.trace.transfers, key=lambda x: x.src)
    assert phases(hop1) == pytest.approx((0.0, 1.0, 1.0, 2.0, 2.0))
    assert phases(hop2) == pytest.approx((2.0, 3.0, 3.0, 4.0, 4.0))


def test_rank_engine_serves_overheads_and_local_work_in_turn():
    # one engine per rank: the receive's overhead, then the reduction of its bytes, then a copy
    b = ScheduleBuilder(Collective("allreduce", 2), "cpu")
    b.transfer(0, 1, ("i", 0), ("s", 0))
    b.reduce(1, ("s", 0), ("o", 0))
    s = b.build()
    t = pair(overhead=0.5, scope="rank", local_bw=10.0)
    r = simulate(s, t, 10_000, trace=True)
    (x,) = r.trace.transfers
    assert phases(x) == pytest.approx((0.5, 1.5, 1.5, 2.5, 3.0))
    work = sorted((w.rank, w.start, w.end, w.kind, w.engine) for w in r.trace.work)
    assert work == [
        (0, 0.0, 0.5, "send overhead", "rank 0"),
        (1, 2.5, 3.0, "recv overhead", "rank 1"),
        (1, 3.0, 4.0, "reduce", "rank 1"),  # 10 KB at 10 GB/s
    ]
    assert r.time_us == pytest.approx(4.0)


def test_zero_bytes_have_an_empty_data_phase():
    b = ScheduleBuilder(Collective("broadcast", 2), "one")
    b.transfer(0, 1, ("i", 0), ("o", 0))
    (x,) = simulate(b.build(), pair(), 0, trace=True).trace.transfers
    assert phases(x) == pytest.approx((0.0, 1.0, 1.0, 1.0, 1.0))


def test_trace_changes_nothing_and_is_complete():
    topo = get_topology("dgx1")
    s = make_baseline("ring", Collective("allreduce", 8, 8), topo)
    plain = simulate(s, topo, 1 << 20)
    traced = simulate(s, topo, 1 << 20, trace=True)
    assert plain.trace is None
    assert traced == plain and traced.busy_us == plain.busy_us
    tr = traced.trace
    assert len(tr.transfers) == sum(op.kind == "send" for op in s.ops)
    for x in tr.transfers:
        assert x.posted <= x.data_ready <= x.data_start <= x.data_end <= x.done <= traced.time_us * (1 + 1e-9)
        assert not any(math.isnan(v) for v in phases(x))
    assert max(tr.op_done) == pytest.approx(traced.time_us)
    # one stream's data phases never overlap
    by_stream = {}
    for x in tr.transfers:
        by_stream.setdefault((x.src, x.dst, x.channel), []).append((x.data_start, x.data_end))
    for spans in by_stream.values():
        spans.sort()
        assert all(a[1] <= b[0] * (1 + 1e-12) for a, b in itertools.pairwise(spans))
    d = json.loads(json.dumps(tr.to_dict()))
    assert len(d["transfers"]) == len(tr.transfers) and "data_start_us" in d["transfers"][0]


# --------------------------------------------------------------- pictures
def test_timeline_png_and_json(tmp_path):
    pytest.importorskip("matplotlib")
    topo = get_topology("dgx1")
    s = make_baseline("ring", Collective("allreduce", 8, 8), topo)
    r = simulate(s, topo, 1 << 20, trace=True)
    png = tmp_path / "t.png"
    summary = write_timeline(r, s, png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and "transfers" in summary
    js = tmp_path / "t.json"
    write_timeline(r, s, js)
    d = json.loads(js.read_text())
    assert d["schedule"] == s.name and d["time_us"] == pytest.approx(r.time_us) and d["transfers"]
    # many connections: the busiest are drawn and the rest counted
    a2a = make_baseline("direct", Collective("alltoall", 8), get_topology("fully_connected:8"))
    ra = simulate(a2a, get_topology("fully_connected:8"), 1 << 20, trace=True)
    assert "drawn" in write_timeline(ra, a2a, tmp_path / "a.png", max_rows=10)


def test_cli_timeline(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    sched = tmp_path / "ring.json"
    assert main(["baseline", "ring", "-t", "dgx1", "-c", "allgather", "-o", str(sched)]) == 0
    capsys.readouterr()
    png = tmp_path / "t.png"
    assert main(["simulate", str(sched), "-s", "1M", "--timeline", str(png)]) == 0
    assert "wrote timeline" in capsys.readouterr().out and png.stat().st_size > 1000
    js = tmp_path / "t.json"
    assert main(["simulate", str(sched), "-s", "64K", "--timeline", str(js)]) == 0
    assert json.loads(js.read_text())["size_bytes"] == 65536
    capsys.readouterr()
    assert main(["simulate", str(sched), "--sizes", "1K:4K", "--timeline", str(png)]) == 2
    assert "one size" in capsys.readouterr().err
    assert main(["simulate", str(sched), "-s", "1K", "--timeline", str(tmp_path / "t.txt")]) == 2
    assert ".json" in capsys.readouterr().err


def test_cli_timeline_without_matplotlib(tmp_path, capsys, monkeypatch):
    sched = tmp_path / "ring.json"
    assert main(["baseline", "ring", "-t", "dgx1", "-c", "allgather", "-o", str(sched)]) == 0
    capsys.readouterr()
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    png = tmp_path / "t.png"
    assert main(["simulate", str(sched), "-s", "1M", "--timeline", str(png)]) == 2
    err = capsys.readouterr().err
    assert "matplotlib" in err and "pip install" in err and "Traceback" not in err
    assert not png.exists()
    # the JSON trace needs no matplotlib
    assert main(["simulate", str(sched), "-s", "1M", "--timeline", str(tmp_path / "t.json")]) == 0


def test_trace_doctest():
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module("ccsynth.synth.trace"))
    assert result.failed == 0 and result.attempted > 0
