"""The runtime's reliability parts on one process: tags, notices, the memory budget, a channel on COMM_SELF.

Multi-rank behaviour (a failure on one rank raised on every rank, no
silent wrong answer, bounded resident memory, clean exit) is tested with the
fault-injection scenarios of ``ccsynth.bench.faults`` in test_faults_mpi.py.
"""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest
from mpi4py import MPI

from ccsynth.collectives.builder import ScheduleBuilder
from ccsynth.collectives.executor import CompiledSchedule
from ccsynth.collectives.runtime.channel import RESERVED_TAGS, Channel, TagSpace, is_shared
from ccsynth.collectives.runtime.control import NOTICE_BYTES, Notice
from ccsynth.collectives.runtime.memory import Entry, MemoryBudget, cache_bytes_from_env
from ccsynth.collectives.spec import Collective
from ccsynth.errors import BufferMismatchError, CCSynthError, PeerError, ScheduleError
from toys import FakeComm

from mpi_workers import schedules as hand


# ------------------------------------------------------------------- tags
@pytest.mark.parametrize("tag_ub,slice_bits,sig_bits,seq_bits",
                         [(2**29 - 1, 12, 9, 8), (32767, 8, 3, 4), (2**31 - 1, 12, 9, 10)])
def test_the_tag_splits_into_call_number_signature_and_slice(tag_ub, slice_bits, sig_bits, seq_bits):
    t = TagSpace.for_tag_ub(tag_ub)
    assert (t.slice_bits, t.sig_bits, t.seq_bits) == (slice_bits, sig_bits, seq_bits)
    top = max(t.base(s) + t.signature("reduce", 7) + (1 << t.slice_bits) - 1 for s in range(2 * t.window))
    assert top <= tag_ub  # every tag is valid
    assert t.slice_limit == (1 << slice_bits) - RESERVED_TAGS


def test_calls_and_collectives_never_share_a_tag():
    """Call s of collective c uses tags base(s) + signature(c) + [0, 2**B): disjoint for the W calls of a
    generation and for different collectives (or roots, modulo 8) under one call number."""
    t = TagSpace(slice_bits=4, seq_bits=3, sig_bits=6)
    sigs = [t.signature(k, r) for k in ("allreduce", "allgather", "reduce_scatter", "alltoall") for r in (0,)]
    sigs += [t.signature(k, r) for k in ("broadcast", "reduce") for r in range(8)]
    ranges = {}
    for s in range(t.window):
        for c in sigs:
            tags = set(range(t.base(s) + c, t.base(s) + c + (1 << t.slice_bits)))
            for other in ranges.values():
                assert not tags & other
            ranges[(s, c)] = tags
    assert t.base(t.window) == t.base(0)  # the next generation starts over, on a new communicator
    assert t.signature("broadcast", 1) == t.signature("broadcast", 9)  # roots modulo 8


def test_a_layout_never_needs_more_tags_than_a_call_has():
    s = hand.ring_allreduce(2)
    cs = CompiledSchedule(s, FakeComm(2, 0, tag_ub=32767), slice_bytes=8)  # 256 - 16 slice tags per pair
    cs._layout(np.dtype(np.float64), 2 * 100)  # two messages of 101 one-element slices on the pair: fits
    with pytest.raises(ScheduleError, match="more than the 240 tags a call may use per rank pair"):
        cs._layout(np.dtype(np.float64), 2 * 130)


# ---------------------------------------------------------------- notices
def test_a_notice_survives_the_wire():
    n = Notice(12, 3, "BufferMismatchError", "allreduce", "recvbuf is read-only \x1f with a separator")
    back = Notice.decode(n.encode())
    assert (back.seq, back.rank, back.error, back.what) == (12, 3, "BufferMismatchError", "allreduce")
    assert back.message.startswith("recvbuf is read-only")
    long = Notice(1, 0, "PeerError", "x", "é" * 5000)
    assert len(long.encode()) <= NOTICE_BYTES
    assert Notice.decode(long.encode()).seq == 1


def test_a_peer_error_is_the_same_class_and_names_the_rank():
    e = Channel.peer_error(Notice(4, 2, "BufferMismatchError", "allreduce", "sendbuf is not contiguous"))
    assert type(e) is BufferMismatchError and e.failed_rank == 2 and is_shared(e)
    assert "rank 2 failed in allreduce (call 4" in str(e) and "sendbuf is not contiguous" in str(e)
    e = Channel.peer_error(Notice(4, 2, "KeyboardInterrupt", "allreduce", ""))
    assert type(e) is PeerError and isinstance(e, CCSynthError)


# ------------------------------------------------------------------ budget
def _entry(nbytes, log, name):
    return Entry(nbytes, lambda: log.append(name), what=name)


def test_the_budget_drops_the_least_recently_used_first_never_the_current_call():
    b = MemoryBudget(limit=100)
    log: list = []
    a, c = _entry(40, log, "a"), _entry(40, log, "c")
    b.admit(a, now=1)
    b.admit(c, now=2)
    a.last = 3  # a used again by call 3
    b.admit(_entry(40, log, "d"), now=4)  # 120 > 100: the least recently used (c) goes
    assert log == ["c"] and b.total == 80
    b.admit(_entry(90, log, "big"), now=5)  # everything older goes
    assert log == ["c", "a", "d"] and b.total == 90
    big2 = _entry(200, log, "big2")
    b.admit(big2, now=5)  # the same call needs more than the budget: kept while it runs
    assert b.total == 290 and log == ["c", "a", "d"]
    b.trim()  # when it ends, the budget holds again
    assert b.total <= 100


def test_buffers_unused_for_a_generation_are_dropped():
    ch = Channel.build(MPI.COMM_SELF, MPI, tags=TagSpace(slice_bits=8, seq_bits=2, sig_bits=3))
    log: list = []
    ch.open_call()
    ch.memory.admit(_entry(10, log, "once"), ch.seq)  # call 1
    hot = ch.memory.admit(_entry(10, log, "hot"), ch.seq)
    for _ in range(6):
        ch.open_call()
        hot.last = ch.seq
    ch.open_call()  # call 8 starts generation 2: "once" was not used in calls 4..7
    assert log == ["once"] and ch.memory.total == 10
    ch.close()


def test_the_automatic_budget_follows_the_largest_message():
    b = MemoryBudget()
    assert b.budget == 32 << 20
    b.note_message(100 << 20)
    assert b.budget == 200 << 20


def test_cache_bytes_from_the_environment(monkeypatch):
    monkeypatch.setenv("CCSYNTH_CACHE_BYTES", "1048576")
    assert cache_bytes_from_env(None) == 1 << 20
    assert cache_bytes_from_env(5) == 5
    monkeypatch.setenv("CCSYNTH_CACHE_BYTES", "auto")
    assert cache_bytes_from_env(None) is None
    with pytest.raises(CCSynthError):
        cache_bytes_from_env(-1)


# ------------------------------------------------------- a channel on one rank
def test_every_window_of_calls_gets_a_new_communicator():
    ch = Channel.build(MPI.COMM_SELF, MPI, tags=TagSpace(slice_bits=8, seq_bits=2, sig_bits=3))
    comms = []
    for _ in range(9):
        ch.open_call()
        comms.append(ch.comm)
    assert ch.generation == 2  # calls 4 and 8 started generations 1 and 2
    assert comms[0] is comms[2] and comms[3] is not comms[2] and comms[7] is not comms[6]
    ch.close()


def test_a_notice_about_a_later_call_fails_that_call_before_it_communicates():
    ch = Channel.build(MPI.COMM_SELF, MPI)
    ch.open_call()
    ch.pending[3] = Notice(3, 0, "OpError", "allreduce", "unknown reduction op 'xor'")
    ch._slow = True
    ch.open_call()  # call 2: nothing to say
    with pytest.raises(CCSynthError, match="rank 0 failed in allreduce .call 3") as info:
        ch.open_call()
    assert type(info.value).__name__ == "OpError"
    ch.close()


def test_after_a_failed_call_no_receive_is_left_to_catch_a_later_message():
    ch = Channel.build(MPI.COMM_SELF, MPI)
    ch.open_call()
    stale = np.zeros(4)
    r = ch.comm.Irecv(stale, 0, ch.base + 5)
    big = np.ones(1 << 20)  # 8 MiB: a rendezvous send nobody receives
    s = ch.comm.Isend(big, 0, ch.base + 6)
    keep = weakref.ref(big)
    ch.abandon([r], [s], (big,))
    del big
    gc.collect()
    assert keep() is not None  # the unfinished send still reads it
    ch.open_call()
    late = ch.comm.Isend(np.full(4, 7.0), 0, ch.tags.base(1) + 5)  # the old call's tag, as if a late message came
    got = np.zeros(4)
    ch.comm.Recv(got, 0, ch.tags.base(1) + 5)
    late.Wait()
    assert stale.tolist() == [0.0] * 4 and got.tolist() == [7.0] * 4
    ch.comm.Recv(np.zeros(1 << 20), 0, ch.tags.base(1) + 6)  # someone receives the stranded send at last
    for _ in range(8):  # later calls look at stranded sends now and then
        ch.open_call()
    assert ch.stranded == []
    ch.close()


# ------------------------------------------------------- caches on one rank
def self_schedule(c: int = 1):
    b = ScheduleBuilder(Collective("allreduce", 1, chunk_factor=c), "self")
    b.copy(0, ("i", 0, c), ("o", 0, c))
    return b.build()


def test_cached_bindings_never_keep_the_callers_arrays_alive():
    cs = CompiledSchedule(self_schedule(), MPI.COMM_SELF)
    x, y = np.arange(5.0), np.zeros(5)
    cs.run(x, y)
    cs.run(x, y)  # the fast path
    refs = weakref.ref(x), weakref.ref(y)
    assert any(lay.bindings for lay in cs._layouts.values())
    del x, y
    gc.collect()
    assert refs[0]() is None and refs[1]() is None
    x2, y2 = np.full(5, 3.0), np.zeros(5)
    cs.run(x2, y2)
    assert y2.tolist() == [3.0] * 5


def test_many_distinct_counts_stay_within_the_byte_budget():
    s = hand.ring_allreduce(1) if hasattr(hand, "ring_allreduce") else self_schedule()
    cs = CompiledSchedule(s, MPI.COMM_SELF, cache_bytes=1 << 16)
    for m in range(1000, 1200):
        x = np.arange(float(m))
        y = np.zeros(m)
        cs.run(x, y)
        np.testing.assert_array_equal(y, x)
        assert cs.channel.memory.total <= max(1 << 16, 16 * m)
    assert cs.cached_bytes <= 1 << 16


def test_in_place_calls_keep_one_growing_copy_within_the_budget():
    from ccsynth.collectives.communicator import Communicator
    from ccsynth.collectives.plan import Plan, PlanEntry

    plan = Plan((PlanEntry("allreduce", 1, 0, None, self_schedule()),))
    c = Communicator(MPI.COMM_SELF, plan)
    for m in (10, 1000, 100, 5000, 7):
        x = np.arange(float(m))
        c.Allreduce(MPI.IN_PLACE, x)
        assert x[-1] == m - 1 and c.last_algorithm == "self"
    assert c._calls.scratch.sizes() == [5000]  # one in-place copy, grown to the largest call
    c.Free()
    c = Communicator(MPI.COMM_SELF, plan, cache_bytes=0)
    for m in (10, 1000, 100):
        x = np.arange(float(m))
        c.Allreduce(MPI.IN_PLACE, x)
        assert x[-1] == m - 1
        assert c.cached_bytes == 0  # cache_bytes=0: nothing kept once a call is over
    c.Free()
