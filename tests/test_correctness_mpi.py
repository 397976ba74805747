"""No wrong answer, no hang, no abort: argument errors on one rank, threads, read-only buffers (multi-rank).

mpiexec launches ``tests/mpi_workers/correctness_worker.py``, all cases of one
rank count in one launch (the ``Batches`` of ``test_communicator_mpi``).
"""

from __future__ import annotations

import os

import pytest

from test_communicator_mpi import Batches

pytestmark = pytest.mark.mpi

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mpi_workers", "correctness_worker.py")

# (case, rank named in every rank's error or -1, text every rank's error holds)
ERRORS = [
    ("err_alltoallv_negative", 1, "negative count"),
    ("err_alltoallv_overflow", 1, "run past its"),
    ("err_alltoallv_dtype", -1, "rank 1: Alltoallv of int32"),
    ("err_allgatherv_negative", 1, "negative count"),
    ("err_allgatherv_counts", -1, "counts [3, 2, 2]"),
    ("err_reduce_scatter_negative", 1, "negative count"),
    ("err_reduce_scatter_size", 1, "add up to 6"),
    ("err_gatherv_root_counts", 0, "negative count"),
    ("err_gatherv_sendcount", 1, "the root (0) counts 1"),
    ("err_scatterv_overflow", 0, "run past its"),
    ("err_readonly_after_first", 1, "read-only"),
    ("err_allreduce_dtype", -1, "another signature"),
    ("err_allreduce_op", -1, "another signature"),
    ("err_reduce_root", -1, "another call"),
]


@pytest.fixture(scope="module")
def batches(request, tmp_path_factory) -> Batches:
    return Batches(request.session, tmp_path_factory, worker=WORKER)


@pytest.mark.parametrize("k,case,rank,text", [(3, *e) for e in ERRORS], ids=[e[0] for e in ERRORS])
def test_one_ranks_bad_argument_raises_on_every_rank(k, case, rank, text, batches):
    """Bad counts, displacements, dtypes or a read-only buffer on one rank: every rank raises
    BufferMismatchError naming that rank and the reason, and the job ends on its own (no abort, no hang)."""
    v = batches.verdict("test_one_ranks_bad_argument_raises_on_every_rank", k, case, timeout=120)
    v.check(expected_status=3)
    for r in range(k):
        note = v.passed[r]
        assert "raised BufferMismatchError: " in note and text in note, f"case {case!r}: rank {r}: {note}"
        if rank >= 0 and r != rank:
            assert f"rank {rank}" in note, f"case {case!r}: rank {r} does not name rank {rank}: {note}"
    assert v.launch.elapsed < 60


@pytest.mark.parametrize("k,case", [(2, "threads_at_once"), (2, "threads_in_turn")])
def test_two_threads_never_give_a_wrong_answer_or_hang(k, case, batches):
    """Two threads at once: every call right or ConcurrentCallError (never wrong, never a hang); in turn: all right."""
    v = batches.verdict("test_two_threads_never_give_a_wrong_answer_or_hang", k, case, timeout=120)
    v.check()
