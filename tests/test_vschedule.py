"""Explicit schedules of v-collectives (collectives/vschedule.py): verified, every block at its own size."""

from __future__ import annotations

import numpy as np
import pytest

from ccsynth.collectives.explicit_program import ExplicitProgram
from ccsynth.collectives.spec import Collective
from ccsynth.collectives.verify import verify
from ccsynth.collectives.vschedule import VScheduleCache, allgatherv_schedule, alltoallv_schedule, build
from ccsynth.errors import CollectiveError, ScheduleError
from ccsynth.synth.baselines import make_baseline
from ccsynth.topologies import fully_connected


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_alltoallv_schedules_verify_and_move_only_the_real_elements(n):
    rng = np.random.default_rng(n)
    rows = rng.integers(0, 50, size=(n, n))
    rows[0, -1] = 100_000  # one huge block among small ones
    s = alltoallv_schedule(rows)
    verify(s)
    moved = sum(s.op_units(op) for op in s.ops if op.kind in ("send", "copy"))
    assert moved == rows.sum()  # padding every block to the largest would move n * n * 100_000
    for r in range(n):
        assert ExplicitProgram(s, r, "alltoall").extents("i") == rows[r].tolist()
        assert ExplicitProgram(s, r, "alltoall").extents("o") == rows[:, r].tolist()


@pytest.mark.parametrize("n", [1, 2, 4])
def test_allgatherv_schedules_verify(n):
    counts = list(range(n))  # rank 0 contributes nothing
    s = allgatherv_schedule(counts)
    verify(s)
    sends = [op for op in s.ops if op.kind == "send"]
    assert sum(s.op_units(op) for op in sends) == (n - 1) * sum(counts)


def test_bad_counts_and_kinds_are_refused():
    with pytest.raises(CollectiveError, match="n x n"):
        alltoallv_schedule([[1, 2, 3]])
    with pytest.raises(CollectiveError, match="negative"):
        alltoallv_schedule([[1, -1], [0, 0]])
    with pytest.raises(CollectiveError, match="non-negative"):
        allgatherv_schedule([1, -2])
    with pytest.raises(CollectiveError, match="no explicit schedule"):
        build("reduce_scatterv", [1, 2])


def test_the_cache_keeps_one_schedule_per_counts_signature_and_drops_the_oldest():
    cache = VScheduleCache(size=2)
    made = []

    def make(s):
        made.append(s.collective.pieces)
        return s

    a = cache.get("allgatherv", np.array([1, 2]), make)
    assert cache.get("allgatherv", np.array([1, 2]), make) is a and len(made) == 1
    cache.get("allgatherv", np.array([2, 2]), make)
    cache.get("allgatherv", np.array([3, 2]), make)  # drops [1, 2]
    assert len(cache) == 2
    cache.get("allgatherv", np.array([1, 2]), make)
    assert len(made) == 4


def test_the_runner_refuses_equal_chunk_schedules():
    s = make_baseline("ring", Collective("allgather", 2), fully_connected(2))
    with pytest.raises(ScheduleError, match="equal chunks"):
        ExplicitProgram(s, 0, "allgather")
