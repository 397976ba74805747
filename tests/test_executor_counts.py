"""Ranks that disagree on the count: the message slicing makes every disagreement visible.

The run loop compares the byte count of every received slice with what the
slice expects (multi-rank runs: test_communicator_mpi.py). That only helps if
a disagreement always puts a slice of the wrong length on some tag that both
sides use, rather than shifting whole slices onto other tags. These tests
check that property on compiled layouts, for any two counts, without MPI.
"""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ccsynth.collectives.executor import K_RECV, K_RRED, K_SEND, CompiledSchedule
from toys import FakeComm as _FakeComm

_spec = importlib.util.spec_from_file_location(
    "hand_schedules_counts", os.path.join(os.path.dirname(__file__), "mpi_workers", "schedules.py")
)
hand = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(hand)


def FakeComm(size: int, rank: int):
    return _FakeComm(size, rank, tag_ub=1 << 30)  # large: no tag wraps around in these tests


def messages(schedule, rank: int, m: int, slice_bytes: int, dtype=np.float64):
    """{(src, dst): {tag: bytes}} of the sends and of the receives of ``rank`` for ``m`` per block."""
    cs = CompiledSchedule(schedule, FakeComm(schedule.n_ranks, rank), slice_bytes=slice_bytes)
    lay = cs._layout(np.dtype(dtype), m)
    sent: dict = {}
    received: dict = {}
    for v, (peer, tag, (_, a, b)) in lay.mpi.items():
        nbytes = (b - a) * lay.dtype.itemsize
        if lay.kind[v] == K_SEND:
            sent.setdefault((rank, peer), {})[tag] = nbytes
        else:
            assert lay.kind[v] in (K_RECV, K_RRED)
            assert lay.expect[v] == nbytes  # what the run loop checks against
            received.setdefault((peer, rank), {})[tag] = nbytes
    return sent, received


SCHEDULES = {
    "ring_allreduce_3": lambda: hand.ring_allreduce(3),
    "ring_allreduce_2_pipelined": lambda: hand.ring_allreduce(2, pipeline=2),
    "ring_allgather_3_c2": lambda: hand.ring_allgather(3, chunk_factor=2),
    "recursive_doubling_4": lambda: hand.recursive_doubling_allreduce(4),
}


@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from(sorted(SCHEDULES)),
    a=st.integers(0, 80),
    b=st.integers(0, 80),
    slice_elems=st.sampled_from([1, 2, 3, 4, 8]),
)
def test_a_count_disagreement_always_gives_a_slice_of_the_wrong_length(name, a, b, slice_elems):
    """Sender with count a, receiver with count b: on every rank pair, either the two sides agree on
    every slice, or some tag that both use carries a slice of another length than the receiver
    expects (no shifted, same-sized slices that would be accepted silently)."""
    sched = SCHEDULES[name]()
    n = sched.n_ranks
    slice_bytes = 8 * slice_elems
    layouts_a = [messages(sched, r, a, slice_bytes) for r in range(n)]
    layouts_b = [messages(sched, r, b, slice_bytes) for r in range(n)]
    seen_any_difference = False
    for r in range(n):
        sent_by_r = layouts_a[r][0]
        for (src, dst), tags_sent in sent_by_r.items():
            tags_expected = layouts_b[dst][1][(src, dst)]
            if tags_sent == tags_expected:
                continue
            seen_any_difference = True
            assert a != b
            common = tags_sent.keys() & tags_expected.keys()
            assert any(tags_sent[t] != tags_expected[t] for t in common), (
                f"{name}: {src}->{dst} with counts {a} vs {b}: sent {tags_sent}, expected {tags_expected}"
            )
    if a != b:
        assert seen_any_difference  # every count difference changes some message


@pytest.mark.parametrize("elements,slices", [(0, [0]), (3, [3]), (8, [8, 0]), (19, [8, 8, 3]), (24, [8, 8, 8, 0])])
def test_a_message_ends_with_a_slice_shorter_than_a_full_one(elements, slices):
    """8 elements per slice: full slices, then a shorter (possibly empty) last slice."""
    sched = hand.ring_allgather(2)  # one message each way, of the whole per-rank block
    sent, received = messages(sched, 0, elements, 8, dtype=np.uint8)
    assert [sent[(0, 1)][t] for t in sorted(sent[(0, 1)])] == slices
    assert [received[(1, 0)][t] for t in sorted(received[(1, 0)])] == slices


def test_local_ops_on_empty_chunks_send_nothing():
    """Only messages get the empty slice; a schedule on one rank still has no MPI nodes."""
    from ccsynth.collectives.builder import ScheduleBuilder
    from ccsynth.collectives.spec import Collective

    b = ScheduleBuilder(Collective("allreduce", 1, chunk_factor=4), "self")
    b.copy(0, ("i", 0, 4), ("o", 0, 4))
    cs = CompiledSchedule(b.build(), FakeComm(1, 0))
    lay = cs._layout(np.dtype(np.float32), 1)  # three empty chunks
    assert lay.mpi == {}
