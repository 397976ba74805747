"""Single-process tests of the Python user path (issue 14): plan sources, array-likes, requests, devices, staging."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

import ccsynth
from ccsynth.collectives.arraylike import as_array
from ccsynth.collectives.plan import Plan, PlanEntry, save_plan
from ccsynth.collectives.plan_sources import LayeredPlan, as_plan, check_usable, plan_fingerprint
from ccsynth.collectives.requests import ProgressThread, completed, waitall
from ccsynth.collectives.schedule import save_schedule
from ccsynth.collectives.staging import Stager, decide
from ccsynth.collectives.vcounts import Padding, check_counts, pack
from ccsynth.errors import BufferMismatchError, CCSynthError, PlanError
from ccsynth.kernels.devices import Awareness, choose_device, cuda_awareness, local_rank
from ccsynth.synth.default_plan import LazyDefaultPlan
from ccsynth.synth.baselines import make_baseline
from ccsynth.topologies import fully_connected


def _ring(kind="allreduce", n=4):
    return make_baseline("ring", ccsynth.Collective(kind, n), fully_connected(n))


# ------------------------------------------------------------------ plans in
def test_synthesize_at_the_package_root_returns_a_schedule_or_a_plan():
    s = ccsynth.synthesize("fully_connected:4", "allgather", size="64K")
    assert isinstance(s, ccsynth.Schedule) and s.meta["verified"]
    p = ccsynth.synthesize("fully_connected:4", "allgather", sizes=[1024, 1 << 20])
    assert isinstance(p, ccsynth.Plan) and p.select("allgather", 4, 1 << 20) is not None
    with pytest.raises(PlanError, match="not both"):
        ccsynth.synthesize("ring:4", "allgather", size=1, sizes=[1])
    with pytest.raises(ccsynth.CollectiveError, match="synthesizes"):
        ccsynth.synthesize("ring:4", "gather")


def test_as_plan_takes_schedules_files_and_lists(tmp_path):
    ar, ag = _ring("allreduce"), _ring("allgather")
    sched_file, plan_file = tmp_path / "s.json", tmp_path / "p.json"
    save_schedule(ag, sched_file)
    save_plan(as_plan(ar), plan_file)
    merged = as_plan([str(plan_file), sched_file])
    assert merged.kinds() == [("allgather", 4), ("allreduce", 4)]
    assert merged.select("allgather", 4, 1 << 30).name == ag.name
    with pytest.raises(PlanError, match="cannot be merged"):
        as_plan([ar, ar])
    (tmp_path / "x.json").write_text('{"format": "other"}')
    with pytest.raises(PlanError, match="neither a ccsynth plan nor"):
        as_plan(tmp_path / "x.json")
    with pytest.raises(PlanError, match="got int"):
        as_plan(3)


def test_unusable_plans_and_fingerprints():
    plan = as_plan(_ring("allreduce"))
    check_usable(plan, 4)
    with pytest.raises(PlanError, match="none on the communicator's 8 ranks"):
        check_usable(plan, 8)
    gather = ccsynth.Collective("gather", 4)
    with pytest.raises(PlanError, match="gather schedules, which the communicator does not run"):
        check_usable(Plan((PlanEntry("gather", 4, 0, None, make_baseline("direct", gather, fully_connected(4))),)), 4)
    assert plan_fingerprint(plan) == plan_fingerprint(as_plan(_ring("allreduce")))
    assert plan_fingerprint(plan) != plan_fingerprint(as_plan(_ring("allgather")))
    assert plan_fingerprint(None) == plan_fingerprint(LazyDefaultPlan()) == "default"


def test_layered_plan_keeps_the_default_for_uncovered_collectives():
    small = Plan((PlanEntry("allreduce", 4, 0, 64, _ring("allreduce")),))
    lp = LayeredPlan(small, LazyDefaultPlan(), 4)
    assert lp.select("allreduce", 4, 32).name == _ring().name
    assert lp.select("allreduce", 4, 1 << 20) is None  # a covered collective: the user's plan decides every size
    assert lp.select("allgather", 4, 1 << 20).name == "ring"  # uncovered: the default plan


def test_one_rank_communicator_accepts_any_plan_and_names_what_ran(caplog):
    from mpi4py import MPI

    c = ccsynth.Communicator(MPI.COMM_SELF, plan=_ring("allreduce"))
    out = np.zeros(3)
    c.Allreduce(np.ones(3), out)
    assert out.tolist() == [1.0] * 3 and c.last_algorithm == "mpi"
    g = np.zeros(1)
    c.Gather(np.ones(1), g, root=0)
    assert c.last_algorithm == "mpi"
    assert isinstance(c.Dup(), ccsynth.Communicator)
    c.Free()


# ------------------------------------------------------------------ array-likes
class _Dl:
    def __init__(self, a):
        self.a = a

    def __dlpack__(self, **kw):
        return self.a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


class _Arr:
    def __init__(self, a, copy=False):
        self.a, self.copy = a, copy

    def __array__(self, dtype=None, copy=None):
        return self.a.copy() if self.copy else self.a


@pytest.mark.parametrize("make", [bytearray, lambda b: memoryview(bytearray(b)),
                                  lambda b: _Dl(np.frombuffer(bytearray(b), np.uint8)),
                                  lambda b: _Arr(np.frombuffer(bytearray(b), np.uint8))])
def test_array_likes_share_memory(make):
    obj = make(b"\x01\x02\x03")
    a = as_array(obj, writable=True)
    a[0] = 9
    assert np.asarray(memoryview(obj) if isinstance(obj, (bytearray, memoryview)) else
                      (obj.a if hasattr(obj, "a") else obj))[0] == 9


def test_array_likes_that_copy_are_refused_as_outputs():
    assert as_array(_Arr(np.ones(2), copy=True)) is not None
    with pytest.raises(BufferMismatchError, match="returns a copy"):
        as_array(_Arr(np.ones(2), copy=True), writable=True)
    assert as_array(object()) is None


# ------------------------------------------------------------------ requests
def test_requests_and_the_progress_thread():
    t = ProgressThread("t")
    order = []
    reqs = [t.submit(lambda i=i: order.append(i)) for i in range(5)]
    waitall(reqs)
    assert order == list(range(5)) and all(r.Test() for r in reqs)
    bad = t.submit(lambda: (_ for _ in ()).throw(CCSynthError("boom")))
    with pytest.raises(CCSynthError, match="boom"):
        bad.Wait()
    t.close()
    assert completed("x").Test()


# ------------------------------------------------------------------ variable counts
def test_padding_pack_places_blocks_and_zeroes_the_padding():
    counts = np.array([3, 0, 5, 1])
    c, d = check_counts("sendbuf", counts, None, 4, 9)
    pad = Padding.of(c, quantum=2)
    assert pad.block == 6 and pad.waste == 4 * 6 - 9
    src = np.arange(9.0)
    mid = np.empty(4 * pad.block)
    pack(mid, src, c, d, pad.block, zero=True)
    blocks = mid.reshape(4, pad.block)
    for q in range(4):
        assert blocks[q, :c[q]].tolist() == src[d[q]:d[q] + c[q]].tolist()
        assert not blocks[q, c[q]:].any()
    with pytest.raises(BufferMismatchError, match="run past"):
        check_counts("recvbuf", counts, None, 4, 8)
    with pytest.raises(BufferMismatchError, match="one per rank"):
        check_counts("recvbuf", [1, 2], None, 4, 8)


# ------------------------------------------------------------------ GPUs
@pytest.mark.parametrize("env,n,expected", [
    ({}, 4, 0),
    ({"OMPI_COMM_WORLD_LOCAL_RANK": "3"}, 4, 3),
    ({"MPI_LOCALRANKID": "5"}, 4, 1),
    ({"SLURM_LOCALID": "2", "LOCAL_RANK": "0"}, 8, 2),
    ({"CCSYNTH_DEVICE": "1", "OMPI_COMM_WORLD_LOCAL_RANK": "3"}, 4, 1),
    ({"OMPI_COMM_WORLD_LOCAL_RANK": "3"}, 1, 0),  # CUDA_VISIBLE_DEVICES set per rank by the launcher
])
def test_device_by_local_rank(env, n, expected):
    assert choose_device(n, env).index == expected


def test_device_choice_errors():
    assert local_rank({}) is None
    with pytest.raises(CCSynthError, match="only 2 device"):
        choose_device(2, {"CCSYNTH_DEVICE": "2"})
    with pytest.raises(CCSynthError, match="not a non-negative integer"):
        choose_device(2, {"LOCAL_RANK": "x"})
    with pytest.raises(CCSynthError, match="no GPU"):
        choose_device(0, {})


class _Lib:
    def __init__(self, **fns):
        self.__dict__.update(fns)


def test_cuda_awareness_detection():
    from mpi4py import MPI

    assert cuda_awareness(env={"CCSYNTH_CUDA_AWARE": "1"}).aware is True
    assert cuda_awareness(env={}, lib=_Lib(MPIX_Query_cuda_support=lambda: 1)).aware is True

    def gpu_query(kind, flag):
        ctypes.cast(flag, ctypes.POINTER(ctypes.c_int))[0] = 1
        return 0

    a = cuda_awareness(env={}, lib=_Lib(MPIX_GPU_query_support=gpu_query))
    assert a == Awareness(True, "MPIX_GPU_query_support(CUDA)")
    assert cuda_awareness(env={}, lib=_Lib()).aware is None
    real = cuda_awareness(MPI, env={})  # the MPICH wheel here: a query that says no
    assert real.aware is False and "MPIX" in real.source
    with pytest.raises(CCSynthError, match="use 1"):
        cuda_awareness(env={"CCSYNTH_CUDA_AWARE": "maybe"})


def test_staging_decisions_and_copies():
    aware, unaware, unknown = Awareness(True, "q"), Awareness(False, "q"), Awareness(None, "q")
    assert decide("auto", unaware, "x") and decide("auto", unknown, "x") and not decide("auto", aware, "x")
    assert decide("always", aware, "x") and not decide("never", aware, "x")
    with pytest.raises(CCSynthError, match="staging='never'"):
        decide("never", unknown, "allreduce")
    allocs = []

    def alloc(n, dt):
        allocs.append(n)
        return np.empty(n, dt)

    st = Stager(alloc, np.copyto, np.copyto)
    dev = np.arange(6.0).reshape(2, 3)
    h, back = st.stage(dev, "send", copy_in=True, copy_back=True)
    h *= 2
    back()
    assert dev.ravel().tolist() == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]
    st.stage(np.zeros(4), "send", copy_in=False, copy_back=False)  # smaller: the same host buffer
    assert allocs == [6] and st.nbytes == 48


def test_communicator_rejects_unknown_staging(caplog):
    from mpi4py import MPI

    with pytest.raises(CCSynthError, match="staging must be"):
        ccsynth.Communicator(MPI.COMM_SELF, staging="sometimes")
