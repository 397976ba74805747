"""The executor's parts (ccsynth.collectives.runtime) on their own.

The executor's behaviour is tested through CompiledSchedule
(test_executor.py, test_executor_counts.py, test_static_program.py,
test_communicator_mpi.py); these tests pin what the split into parts
promises: one run loop per path, whose profiled runs are the same code with
timed calls; records instead of bare tuples; no layer importing the
executor back.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from mpi4py import MPI

from ccsynth.collectives.builder import ScheduleBuilder
from ccsynth.collectives.executor import CompiledSchedule
from ccsynth.collectives.runtime import dataflow, straight_line
from ccsynth.collectives.runtime.constants import K_RRED, K_SEND
from ccsynth.collectives.runtime.layout import Message, Region, WorkItem
from ccsynth.collectives.runtime.local_program import build_local_program
from ccsynth.collectives.runtime.primitives import Kernels, kernels
from ccsynth.collectives.runtime.profiling import RunStats, timed_kernels
from ccsynth.collectives.schedule import Chunks, Op, Schedule
from ccsynth.collectives.spec import Collective
from ccsynth.errors import ScheduleError
from ccsynth.kernels import get_backend
from toys import FakeComm

from mpi_workers import schedules as hand


def local_schedule(c: int = 4):
    """One rank: copy, reduce and copy back through scratch, chunk by chunk."""
    b = ScheduleBuilder(Collective("allreduce", 1, chunk_factor=c), "local", scratch_chunks=c)
    for k in range(c):
        b.copy(0, ("i", k), ("s", k))
        b.reduce(0, ("i", k), ("s", k))
        b.copy(0, ("s", k), ("o", k))
    return b.build()


@pytest.mark.parametrize("slice_bytes,loop", [(16, dataflow.run_dataflow), (1 << 20, straight_line.run_straight_line)])
def test_a_profiled_run_is_the_same_loop_with_timed_calls(monkeypatch, slice_bytes, loop):
    calls = []
    module = dataflow if loop is dataflow.run_dataflow else straight_line
    name = loop.__name__

    def spy(lay, bnd, k, mpi, failures, ch):
        calls.append(k)
        return loop(lay, bnd, k, mpi, failures, ch)

    monkeypatch.setattr(sys.modules["ccsynth.collectives.executor"], name, spy)
    x = np.arange(40.0)
    for profile in (False, True):
        cs = CompiledSchedule(local_schedule(), MPI.COMM_SELF, slice_bytes=slice_bytes, profile=profile)
        y = np.zeros(40)
        cs.run(x, y)
        np.testing.assert_array_equal(y, 2 * x)
        assert (next(iter(cs._layouts.values())).static is None) == (module is dataflow)
    plain, timed = calls
    assert plain.copy == get_backend("numpy").copy  # the ordinary run calls the kernels themselves
    assert timed.copy is not plain.copy
    st = cs.stats.per_run_us()
    assert cs.stats.runs == 1 and st["kernel_calls"] > 0 and st["total"] > 0


def test_timed_kernels_count_every_call_and_call_through():
    seen = []
    k = Kernels(copy=lambda d, s: seen.append(("copy", d, s)), reduce=lambda d, s: seen.append(("reduce", d, s)),
                fused=lambda d, r, s: seen.append(("fused", d, r, s)), sync=lambda: seen.append(("sync",)),
                device=False)
    stats = RunStats()
    t = timed_kernels(k, stats)
    t.copy(1, 2)
    t.reduce(3, 4)
    t.fused(5, 6, 7)
    t.sync()
    assert seen == [("copy", 1, 2), ("reduce", 3, 4), ("fused", 5, 6, 7), ("sync",)]
    assert stats.kernels == 3 and stats.kernel_s >= 0


def test_plain_kernels_are_the_backends_own():
    be = get_backend("numpy")
    k = kernels(be, "sum")
    assert k.copy == be.copy and k.reduce is be.reducer("sum") and k.fused is be.fused_reducer("sum")


def test_layout_records_are_named():
    cs = CompiledSchedule(hand.ring_allreduce(3), FakeComm(3, 1), slice_bytes=64)
    lay = cs._layout(np.dtype(np.float32), 3 * 40)
    for v, msg in lay.mpi.items():
        assert isinstance(msg, Message) and isinstance(msg.region, Region)
        peer, tag, (buf, start, stop) = msg  # and they still unpack like the tuples they replace
        assert (peer, tag, buf, start, stop) == (msg.peer, msg.tag, msg.region.buf, msg.region.start, msg.region.stop)
        assert lay.kind[v] != K_RRED or msg.region.buf == "t"  # receive-reduces land in staging
    for items in lay.work.values():
        assert all(isinstance(w, WorkItem) for w in items)
    assert any(lay.kind[v] == K_SEND for v in lay.mpi)


def reversed_ids(schedule: Schedule) -> Schedule:
    """The same schedule with its ops listed last to first (every dependency now on a later op)."""
    n = len(schedule.ops)
    ops = tuple(
        Op(n - 1 - op.id, op.rank, op.kind, op.src, op.dst, op.peer, op.reduce, tuple(n - 1 - d for d in op.deps),
           op.channel)
        for op in reversed(schedule.ops)
    )
    return Schedule(schedule.name + "_reversed", schedule.collective, ops, schedule.scratch_chunks)


@pytest.mark.parametrize("slice_bytes", [16, 1 << 20])
def test_ops_listed_out_of_dataflow_order_compile_and_run_alike(slice_bytes):
    s = local_schedule()
    r = reversed_ids(s)
    assert any(d > op.id for op in r.ops for d in op.deps)  # not in dataflow order: a graph orders it
    x = np.arange(40.0)
    for sched in (s, r):
        cs = CompiledSchedule(sched, MPI.COMM_SELF, slice_bytes=slice_bytes)
        y = np.zeros(40)
        cs.run(x, y)
        np.testing.assert_array_equal(y, 2 * x)
    rd = [build_local_program(reversed_ids(hand.ring_allreduce(3)), q, q) for q in range(3)]
    fw = [build_local_program(hand.ring_allreduce(3), q, q) for q in range(3)]
    for a, b in zip(rd, fw):
        assert sorted(op.kind for op in a.ops) == sorted(op.kind for op in b.ops) and a.levels_ok == b.levels_ok


def test_a_dependency_cycle_names_its_ops():
    # rank 0's two copies wait for each other; rank 1 is fine
    c = Collective("allgather", 2)
    ops = (
        Op(0, 0, "copy", Chunks("i", 0), Chunks("o", 0), deps=(1,)),
        Op(1, 0, "copy", Chunks("i", 0), Chunks("o", 1), deps=(0,)),
        Op(2, 1, "copy", Chunks("i", 0), Chunks("o", 1)),
    )
    with pytest.raises(ScheduleError, match=r"'loop' has a dependency cycle \(deadlock\) involving 2 op\(s\): ") as e:
        build_local_program(Schedule("loop", c, ops), 1, 1)
    assert "op 0 (rank 0: copy i[0] -> o[0])" in str(e.value) and "op 1 (rank 0: copy i[0] -> o[1])" in str(e.value)
    assert "op 2" not in str(e.value)


def test_a_race_names_both_ops():
    b = ScheduleBuilder(Collective("allreduce", 1, chunk_factor=2), "two_writers")
    b.copy(0, ("i", 0, 2), ("o", 0, 2))
    sched = b.build()
    racy = Schedule("two_writers", sched.collective, sched.ops + (Op(1, 0, "copy", Chunks("i", 1), Chunks("o", 1)),))
    with pytest.raises(ScheduleError, match="neither depends on the other") as e:
        build_local_program(racy, 0, 0)
    assert "op 0 (copy i[0:2]->o[0:2])" in str(e.value) and "op 1 (copy i[1]->o[1])" in str(e.value)
    assert "chunk o[1]" in str(e.value)


def test_the_planner_and_the_parts_never_import_the_executor():
    code = (
        "import sys\n"
        "import ccsynth.collectives.static_program, ccsynth.collectives.runtime.dataflow, "
        "ccsynth.collectives.runtime.straight_line, ccsynth.collectives.runtime.profiling\n"
        "assert 'ccsynth.collectives.executor' not in sys.modules, 'imported the executor'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
