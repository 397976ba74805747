"""The executor's compile stage and single-rank runs (multi-rank runs: test_communicator_mpi.py).

Compilation is checked on any rank of any size through a stand-in
communicator that only answers Get_size/Get_rank/Get_attr, so slice graphs,
fusion and the error checks are tested without launching MPI. Single-rank
programs (copies and reductions) run for real on MPI.COMM_SELF, including a
property test against a sequential interpretation.
"""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest
from mpi4py import MPI
from hypothesis import given, settings
from hypothesis import strategies as st

from ccsynth.collectives.builder import ScheduleBuilder
from ccsynth.collectives.executor import K_RRED, K_SEND, CompiledSchedule
from ccsynth.collectives.schedule import Chunks, Op, Schedule
from ccsynth.collectives.spec import Collective
from ccsynth.errors import BufferMismatchError, ScheduleError
from ccsynth.kernels import OpError
from toys import FakeComm


_spec = importlib.util.spec_from_file_location(
    "hand_schedules", os.path.join(os.path.dirname(__file__), "mpi_workers", "schedules.py")
)
hand = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(hand)


def compile_on(schedule, rank, **kw):
    return CompiledSchedule(schedule, FakeComm(schedule.n_ranks, rank), **kw)


# ---------------------------------------------------------------- errors
def test_rank_count_mismatch_raises_before_anything():
    s = hand.ring_allreduce(4)
    with pytest.raises(ScheduleError, match="for 4 ranks .* communicator has 3 ranks"):
        CompiledSchedule(s, FakeComm(3, 0))
    with pytest.raises(ScheduleError, match="communicator has 1 ranks"):
        CompiledSchedule(s, MPI.COMM_SELF)


def test_racy_schedule_is_rejected():
    # a send of o[0] and a receive into o[0] on rank 1 with no order between them
    c = Collective("allreduce", 2)
    ops = (
        Op(0, 0, "copy", Chunks("i", 0), Chunks("o", 0)),
        Op(1, 1, "copy", Chunks("i", 0), Chunks("o", 0)),
        Op(2, 0, "send", src=Chunks("o", 0), peer=1, deps=(0,)),
        Op(3, 1, "recv", dst=Chunks("o", 0), peer=0, reduce=True, deps=(1,)),
        Op(4, 1, "send", src=Chunks("o", 0), peer=0, deps=(1,)),
        Op(5, 0, "recv", dst=Chunks("o", 0), peer=1, reduce=True, deps=(2,)),
    )
    s = Schedule("racy", c, ops)
    compile_on(s, 0)  # rank 0 orders its send before its receive
    with pytest.raises(ScheduleError, match="neither depends on the other"):
        compile_on(s, 1)


def test_dependency_cycle_is_rejected():
    c = Collective("allgather", 2)
    ops = (
        Op(0, 0, "send", src=Chunks("i", 0), peer=1, deps=(1,)),
        Op(1, 0, "recv", dst=Chunks("o", 1), peer=1),
        Op(2, 1, "send", src=Chunks("i", 0), peer=0, deps=(3,)),
        Op(3, 1, "recv", dst=Chunks("o", 0), peer=0),
        Op(4, 0, "copy", Chunks("i", 0), Chunks("o", 0)),
        Op(5, 1, "copy", Chunks("i", 0), Chunks("o", 1)),
    )
    # each rank waits for the other's message before sending its own: a global deadlock
    with pytest.raises(ScheduleError, match="cycle"):
        compile_on(Schedule("deadlock", c, ops), 0)


def test_bad_parameters():
    s = hand.ring_allgather(2)
    with pytest.raises(ScheduleError, match="slice_bytes"):
        compile_on(s, 0, slice_bytes=0)
    with pytest.raises(ScheduleError, match="permutation"):
        compile_on(s, 0, roles=[0, 0])
    with pytest.raises(ScheduleError, match="wait mode"):
        compile_on(s, 0, wait="spin")
    with pytest.raises(ScheduleError, match="needs a Schedule"):
        CompiledSchedule("ring", FakeComm(2, 0))


# --------------------------------------------------------------- compile
def test_copy_and_receive_reduce_fuse_in_ring_allreduce():
    s = hand.ring_allreduce(4)
    cs = compile_on(s, 2)
    kinds = [op.kind for op in cs._lops]
    # the leading 4-chunk copy is split; three pieces fuse with the three receive-reduces
    assert kinds.count("rrc") == 3 and kinds.count("rrecv") == 0
    assert kinds.count("copy") == 1 and kinds.count("send") == 6 and kinds.count("recv") == 3
    # without fusion the schedule is kept as written
    plain = compile_on(s, 2, fuse=False)
    assert [op.kind for op in plain._lops].count("rrecv") == 3


def test_send_after_copy_reads_the_source_so_recursive_doubling_fuses():
    # copy i->o; send o; recv-reduce into o  ==>  send i; o = i + received (one kernel)
    cs = compile_on(hand.recursive_doubling_allreduce(4), 1)
    ops = [(op.kind, str(op.src or "")) for op in cs._lops]
    assert ops == [("send", "i[0]"), ("rrc", "i[0]"), ("send", "o[0]"), ("rrecv", "")]


def test_recv_into_scratch_then_reduce_becomes_a_receive_reduce():
    cs = compile_on(hand.ring_allreduce(3, via_scratch=True), 0)
    kinds = [op.kind for op in cs._lops]
    assert "reduce" not in kinds and kinds.count("rrc") == 2


def test_fusion_is_skipped_when_the_copy_is_read_in_between():
    b = ScheduleBuilder(Collective("allreduce", 2), "read_between", scratch_chunks=1)
    for r in range(2):
        b.copy(r, ("i", 0), ("o", 0))
        b.copy(r, ("o", 0), ("s", 0))  # a local reader of the copy's result
    for r in range(2):
        b.transfer(r, 1 - r, ("s", 0), ("o", 0), reduce=True)
    cs = compile_on(b.build(), 0)
    assert [op.kind for op in cs._lops].count("rrc") == 0


def test_forwarding_is_pipelined_slice_by_slice():
    """In a ring, slice j of a forwarded chunk waits only for slice j of its arrival."""
    s = hand.ring_allreduce(3)
    cs = compile_on(s, 1, slice_bytes=64)  # 16 float32 per slice
    lay = cs._layout(np.dtype(np.float32), 3 * 155)  # chunks of 155 elements: 10 slices each (9 full)
    rred = [v for v, k in enumerate(lay.kind) if k == K_RRED]
    sends = [v for v, k in enumerate(lay.kind) if k == K_SEND]
    assert len(rred) == 2 * 10 and len(sends) == 4 * 10
    # every reduced slice unlocks exactly one forwarded slice, not the whole chunk
    for v in rred:
        fwd = [w for w in lay.succ[v] if lay.kind[w] == K_SEND]
        assert len(fwd) <= 1
    # the first forwarding send slice becomes ready after one reduce slice (+ nothing else)
    first_reduce = rred[0]
    forward = [w for w in lay.succ[first_reduce] if lay.kind[w] == K_SEND]
    assert forward and lay.cnt0[forward[0]] == 1
    # all receive-reduce slices are posted at start, each with its own tag
    assert set(lay.pre) == set(rred)
    tags = [lay.mpi[v][1] for v in rred]
    assert len(set(tags)) == len(tags)


def test_tags_match_between_sender_and_receiver():
    s = hand.ring_allgather(3, chunk_factor=2)
    m = 1001  # uneven: chunks of 501 and 500 elements
    layouts = [compile_on(s, r, slice_bytes=256)._layout(np.dtype(np.float64), m) for r in range(3)]
    sent, recvd = {}, {}
    for r, lay in enumerate(layouts):
        for v, (peer, tag, region) in lay.mpi.items():
            size = region[2] - region[1]
            if lay.kind[v] == K_SEND:
                sent.setdefault((r, peer), []).append((tag, size))
            else:
                recvd.setdefault((peer, r), []).append((tag, size))
    assert sent.keys() == recvd.keys()
    for pair in sent:
        assert sorted(sent[pair]) == sorted(recvd[pair]), pair


@pytest.mark.parametrize("m,c", [(7, 3), (1, 4), (12, 4), (0, 2), (1001, 8)])
def test_uneven_chunk_sizes(m, c):
    s = hand.ring_allgather(2, chunk_factor=c)
    cs = compile_on(s, 0)
    sz, pre = cs._chunk_sizes(m)
    assert sum(sz) == m and pre[-1] == m
    assert max(sz) - min(sz) <= 1 and sz == sorted(sz, reverse=True)
    assert cs.supports_count(m)


def test_slot_of_another_size_needs_an_even_count():
    # rank 0 parks input chunk 1 in output slot 0 for a moment: sizes differ when c does not divide m
    b = ScheduleBuilder(Collective("allreduce", 1, chunk_factor=2), "park")
    b.copy(0, ("i", 1), ("o", 0))
    b.copy(0, ("o", 0), ("o", 1))
    b.copy(0, ("i", 0), ("o", 0))
    cs = CompiledSchedule(b.build(), MPI.COMM_SELF)
    assert cs.supports_count(8) and not cs.supports_count(7)
    x = np.arange(8.0)
    y = np.zeros(8)
    cs.run(x, y)
    np.testing.assert_array_equal(y, x)
    with pytest.raises(ScheduleError, match="divides"):
        cs.run(np.arange(7.0), np.zeros(7))


# ------------------------------------------------------------ single rank
def self_schedule(kind="allreduce", c=1):
    b = ScheduleBuilder(Collective(kind, 1, chunk_factor=c), "self")
    b.copy(0, ("i", 0, b.collective.in_chunks), ("o", 0, b.collective.out_chunks))
    return b.build()


def test_single_rank_run_and_buffer_checks():
    cs = CompiledSchedule(self_schedule(c=3), MPI.COMM_SELF)
    x = np.arange(10, dtype=np.float32)
    y = np.zeros(10, np.float32)
    assert cs.run(x, y) is y
    np.testing.assert_array_equal(y, x)
    # 2-D contiguous buffers are flat in memory order
    y2 = np.zeros((2, 5), np.float32)
    cs.run(x.reshape(2, 5), y2)
    np.testing.assert_array_equal(y2.ravel(), x)
    with pytest.raises(BufferMismatchError, match="recvbuf has 9 elements .* expects 10"):
        cs.run(x, np.zeros(9, np.float32))
    with pytest.raises(BufferMismatchError, match="dtype float32 .* float64"):
        cs.run(x, np.zeros(10))
    with pytest.raises(BufferMismatchError, match="not contiguous"):
        cs.run(np.zeros(20, np.float32)[::2], y)
    with pytest.raises(BufferMismatchError, match="overlap"):
        cs.run(x, x)
    with pytest.raises(BufferMismatchError, match="numpy backend"):
        cs.run([1.0] * 10, y)
    with pytest.raises(OpError, match="unknown reduction op"):
        cs.run(x, y, op="xor")
    with pytest.raises(OpError, match="avg"):
        cs.run(np.arange(4), np.zeros(4, np.int64), op="avg")
    with pytest.raises(BufferMismatchError, match="dtype int16"):
        cs.run(np.zeros(4, np.int16), np.zeros(4, np.int16))


def test_cached_bindings_follow_new_buffers():
    cs = CompiledSchedule(self_schedule(), MPI.COMM_SELF)
    outs = []
    for k in range(7):  # more buffer pairs than the binding cache holds
        x = np.full(5, float(k))
        y = np.zeros(5)
        cs.run(x, y)
        outs.append(y)
    for k, y in enumerate(outs):
        assert y.tolist() == [float(k)] * 5
    # the same arrays again, after their contents changed
    x = np.ones(5)
    y = np.zeros(5)
    cs.run(x, y)
    x[:] = 3
    cs.run(x, y)
    assert y.tolist() == [3.0] * 5
    cs.free()
    cs.run(x, y)  # freed requests are rebuilt on demand
    assert y.tolist() == [3.0] * 5


def test_many_distinct_counts_keep_a_bounded_layout_cache():
    from ccsynth.collectives.executor import MAX_LAYOUTS

    cs = CompiledSchedule(self_schedule(c=2), MPI.COMM_SELF)
    x0 = np.arange(3.0)
    y0 = np.zeros(3)
    cs.run(x0, y0)
    for m in range(1, MAX_LAYOUTS + 20):  # variable sizes, e.g. sequence lengths of an inference server
        x = np.arange(float(m))
        y = np.zeros(m)
        cs.run(x, y)
        np.testing.assert_array_equal(y, x)
    assert len(cs._layouts) == MAX_LAYOUTS
    x0[:] = 7.0  # the first layout was dropped (least recently used): it is rebuilt
    cs.run(x0, y0)
    assert y0.tolist() == [7.0] * 3


def test_non_reducing_collectives_move_any_dtype():
    cs = CompiledSchedule(self_schedule("allgather", c=2), MPI.COMM_SELF)
    x = (np.arange(5) + 1j * np.arange(5)).astype(np.complex64)
    y = np.zeros(5, np.complex64)
    cs.run(x, y)
    np.testing.assert_array_equal(y, x)


def test_profile_stats():
    cs = CompiledSchedule(self_schedule(), MPI.COMM_SELF, profile=True)
    x = np.ones(1000)
    y = np.zeros(1000)
    for _ in range(3):
        cs.run(x, y)
    st = cs.stats.per_run_us()
    assert cs.stats.runs == 3 and st["kernel_calls"] == 1 and st["total"] > 0
    assert set(st) == {"total", "wait", "kernels", "mpi_start", "python", "wait_calls", "kernel_calls", "starts"}


# A random single-rank program of copies and reductions, run sliced into
# tiny pieces, must compute what running its ops one after another computes.
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_random_local_programs_match_sequential_semantics(data):
    c = data.draw(st.integers(1, 4), label="chunk factor")
    scratch = data.draw(st.integers(0, 4), label="scratch chunks")
    b = ScheduleBuilder(Collective("allreduce", 1, chunk_factor=c), "random", scratch_chunks=scratch)
    written = {("i", k) for k in range(c)} | {("o", k) for k in range(c)}
    prog = []
    for _ in range(data.draw(st.integers(1, 10), label="ops")):
        buf_s = data.draw(st.sampled_from(["i", "o", "s"] if scratch else ["i", "o"]))
        buf_d = data.draw(st.sampled_from(["o", "s"] if scratch else ["o"]))
        size_s = c if buf_s != "s" else scratch
        size_d = c if buf_d != "s" else scratch
        cnt = data.draw(st.integers(1, min(size_s, size_d)))
        si = data.draw(st.integers(0, size_s - cnt))
        di = data.draw(st.integers(0, size_d - cnt))
        src = [(buf_s, si + k) for k in range(cnt)]
        dst = [(buf_d, di + k) for k in range(cnt)]
        if not all(x in written for x in src) or (buf_s == buf_d and abs(si - di) < cnt):
            continue
        kind = data.draw(st.sampled_from(["copy", "reduce"]))
        if kind == "reduce" and not all(x in written for x in dst):
            kind = "copy"
        getattr(b, kind)(0, (buf_s, si, cnt), (buf_d, di, cnt))
        written.update(dst)
        prog.append((kind, buf_s, si, buf_d, di, cnt))
    if not prog:
        return
    m = c * data.draw(st.integers(1, 6), label="elements per chunk")
    sched = b.build()
    x = np.arange(1, m + 1, dtype=np.int64) * 3
    y0 = np.arange(m, dtype=np.int64) * 7 + 1
    # sequential reference on whole chunks
    per = m // c
    bufs = {"i": x.copy(), "o": y0.copy(), "s": np.zeros(per * max(scratch, 1), np.int64)}
    for kind, bs, si, bd, di, cnt in prog:
        src = bufs[bs][si * per:(si + cnt) * per].copy()
        dst = bufs[bd][di * per:(di + cnt) * per]
        if kind == "copy":
            dst[:] = src
        else:
            dst += src
    slice_bytes = data.draw(st.sampled_from([8, 16, 24, 1 << 20]), label="slice bytes")
    cs = CompiledSchedule(sched, MPI.COMM_SELF, slice_bytes=slice_bytes)
    y = y0.copy()
    cs.run(x, y, "sum")
    np.testing.assert_array_equal(y, bufs["o"])
