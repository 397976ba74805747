"""The executor's view of a schedule (synth/executor_model.py): slices, fusion, pre-posted receives, hand-checked times."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ccsynth.collectives.builder import ScheduleBuilder
from ccsynth.collectives.spec import Collective
from ccsynth.errors import ScheduleError
from ccsynth.synth.baselines import make_baseline
from ccsynth.synth.executor_model import ExecutorSettings, lower_for_executor, simulate_run
from ccsynth.synth.simulate import simulate
from ccsynth.topologies import fully_connected
from ccsynth.topologies.model import Link, Topology

MiB = 1 << 20


def _pair(alpha=1.0, bw=1.0, overhead=0.5, **kw) -> Topology:
    links = (Link(0, 1, alpha, bw, overhead), Link(1, 0, alpha, bw, overhead))
    return Topology("pair", 2, links=links, overhead_scope="rank", **kw)


def _one_message(nbytes_chunks: int = 1):
    b = ScheduleBuilder(Collective("allgather", 2), "one")
    b.transfer(0, 1, ("i", 0), ("o", 0))
    return b.build()


def test_a_message_becomes_full_slices_and_a_shorter_last_one():
    # 3 MiB from rank 0 to rank 1 (allgather: the message size is both ranks' output, 6 MiB)
    g = lower_for_executor(_one_message(), 6 * MiB, ExecutorSettings(slice_bytes=MiB))
    assert [t.nbytes for t in g.ops if t.kind == "send"] == [MiB, MiB, MiB, 0]
    assert [t.nbytes for t in g.ops if t.kind == "recv"] == [MiB, MiB, MiB, 0]
    for s, r in g.matches.items():
        assert g.ops[s].nbytes == g.ops[r].nbytes and g.ops[s].rank != g.ops[r].rank
    assert "dataflow" in g.name


def test_slices_stream_back_to_back_and_the_empty_one_costs_only_overheads():
    # Rank 0's engine posts the 4 slices 0.5 us apart; they stream at 1 GB/s after 1 us of latency;
    # rank 1 pays 0.5 us per slice once it has arrived (the empty slice arrives at 3 us, early).
    t = simulate_run(_one_message(), _pair(), 6 * MiB, ExecutorSettings(slice_bytes=MiB)).time_us
    assert t == pytest.approx(0.5 + 1.0 + 3 * MiB / 1e3 + 0.5)


def test_small_calls_take_the_straight_line_path_and_match_the_plain_simulator():
    ring = make_baseline("ring", Collective("allreduce", 4, 4), fully_connected(4))
    topo = fully_connected(4, bw=5, alpha=2, overhead=1.5)
    g = lower_for_executor(ring, 4096)
    assert "straight-line" in g.name
    # one slice per op; fusion only removes the copies that the plain simulator does not charge without local_bw
    assert simulate_run(ring, topo, 4096).time_us == pytest.approx(simulate(ring, topo, 4096).time_us)


def test_fused_copies_cost_nothing_and_receive_reduces_are_posted_at_the_start():
    ring = make_baseline("ring", Collective("allreduce", 2, 2), fully_connected(2))
    g = lower_for_executor(ring, 8 * MiB)  # 4 MiB per chunk: 4 slices of 1 MiB and an empty one
    reduces = [t for t in g.ops if t.kind == "reduce"]
    recvs_into_staging = [t for t in g.ops if t.kind == "recv" and "posted at the start" in t.label]
    assert recvs_into_staging and all(not t.deps for t in recvs_into_staging)
    assert all(any(g.ops[d].kind == "recv" for d in t.deps) for t in reduces)
    # each rank reduces one chunk of 4 MiB (fused with the copy of its own input): 4 MiB of reduce tasks per rank
    for rank in range(2):
        assert sum(t.nbytes for t in reduces if t.rank == rank) == 4 * MiB
    # the ring's copies of its input: fused into the receive-reduces, or sends moved to read the input itself
    assert not [t for t in g.ops if t.kind == "copy" and t.nbytes]
    # the plain simulator charges them
    topo = _pair(bw=10.0, local_bw=2.0)
    assert simulate_run(ring, topo, 8 * MiB).time_us < simulate(ring, topo, 8 * MiB).time_us


def test_copies_cost_their_bytes_at_the_local_rate_slice_by_slice():
    b = ScheduleBuilder(Collective("allgather", 2), "copies")
    for r in range(2):
        b.copy(r, ("i", 0), ("o", r))
    g = lower_for_executor(b.build(), 6 * MiB, ExecutorSettings(slice_bytes=2 * MiB))
    # 3 MiB per rank in slices of 2 MiB: a full slice and the rest (local work has no empty last slice)
    assert sorted((t.rank, t.kind, t.nbytes) for t in g.ops) == [(0, "copy", MiB), (0, "copy", 2 * MiB),
                                                               (1, "copy", MiB), (1, "copy", 2 * MiB)]
    assert simulate_run(b.build(), _pair(local_bw=1.0), 6 * MiB).time_us == pytest.approx(3 * MiB / 1e3, rel=1e-6)


def test_pipelined_slices_make_a_large_ring_faster_than_one_message_per_op():
    ring = make_baseline("ring", Collective("allreduce", 4, 4), fully_connected(4))
    topo = replace(fully_connected(4, bw=5, alpha=2, overhead=1.5), overhead_scope="rank", local_bw=3.0)
    plain = simulate(ring, topo, 64 * MiB).time_us
    run = simulate_run(ring, topo, 64 * MiB).time_us
    # slices of 1 MiB: a chunk is reduced while the rest of it still arrives (the plain model reduces it after)
    assert run < 0.6 * plain


def test_a_count_the_chunks_cannot_split_is_refused_like_the_executor_does():
    # a schedule keeping a chunk of one column in a slot of another needs counts its chunk factor divides
    b = ScheduleBuilder(Collective("allgather", 2, 2), "parked")
    for r in range(2):
        b.copy(r, ("i", 0), ("o", 2 * r + 1))
        b.copy(r, ("i", 1), ("o", 2 * r))
    b.transfer(0, 1, ("i", 0), ("o", 1))
    b.transfer(0, 1, ("i", 1), ("o", 0))
    b.transfer(1, 0, ("i", 0), ("o", 3))
    b.transfer(1, 0, ("i", 1), ("o", 2))
    s = b.build()
    lower_for_executor(s, 8)  # 4 bytes per block: 2 per chunk
    with pytest.raises(ScheduleError, match="chunk factor 2 divides"):
        lower_for_executor(s, 6)


def test_bad_size():
    with pytest.raises(Exception, match="non-negative"):
        lower_for_executor(_one_message(), -1)
