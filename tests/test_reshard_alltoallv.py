"""The alltoallv resharding plan, the auto planner, and the executor model's prediction of a resharding run.

The Alltoallv exchange itself is emulated in one process here (every rank's
send buffer sliced by its counts and displacements into every other rank's
receive buffer); the MPI runs are in tests/test_reshard_mpi.py.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from ccsynth.collectives.reshard_alltoallv import AlltoallvProgram
from ccsynth.collectives.reshard_program import contiguous_box
from ccsynth.collectives.verify import verify
from ccsynth.kernels import backend_for
from ccsynth.synth.reshard import DeviceMesh, ReshardTask, TensorLayout, plan_reshard, planner as planner_mod
from ccsynth.synth.reshard.predict import AGREE_BYTES, lower_reshard, predict_reshard
from ccsynth.synth.reshard.program import rank_program
from ccsynth.synth.simulate import simulate_graph
from ccsynth.topologies.catalog import fully_connected, ring
from ccsynth.topologies.curve import SizeCurve

SPECS = ("S0,R", "R,S0", "S1,R", "R,S1", "S0,S1", "S1,S0", "R,R", "S01,R", "R,S01")


def emulate(sched, full: np.ndarray) -> dict[int, np.ndarray]:
    """Every rank's AlltoallvProgram run in one process, the exchange done by slicing (rank -> destination shard)."""
    task = ReshardTask.from_dict(sched.meta["reshard"])
    n = sched.collective.n_ranks
    progs = [rank_program(sched, r) for r in range(n)]
    assert all(isinstance(p, AlltoallvProgram) for p in progs)
    be = backend_for(full)
    local, out, sbuf, rbuf = {}, {}, {}, {}
    for r, p in enumerate(progs):
        t = task.src.tile_of_rank(r)
        local[r] = None if t is None else full[tuple(slice(a, b) for a, b in task.src.box(t))].copy()
        out[r] = None if p.dst_shape is None else np.full(p.dst_shape, -1, full.dtype)
        sbuf[r] = p.send_buffer(be, local[r])
        rbuf[r] = p.recv_buffer(be, out[r])
    for a, pa in enumerate(progs):
        for b, pb in enumerate(progs):
            k = pa.send.counts[b]
            assert k == pb.recv.counts[a]
            rbuf[b][pb.recv.displs[a]:pb.recv.displs[a] + k] = sbuf[a][pa.send.displs[b]:pa.send.displs[b] + k]
    for r, p in enumerate(progs):
        p.finish(be, local[r], out[r], rbuf[r])
    return {r: o for r, o in out.items() if o is not None}


def layout(shape, mesh, spec, ranks):
    return TensorLayout.of(shape, DeviceMesh(mesh, ranks), spec)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rows=st.integers(1, 9), cols=st.integers(1, 9), src_spec=st.sampled_from(SPECS),
       dst_spec=st.sampled_from(SPECS), n=st.sampled_from((2, 4)), shift=st.integers(0, 3))
def test_alltoallv_plans_verify_and_reassemble_the_tensor_exactly(rows, cols, src_spec, dst_spec, n, shift):
    shape = (rows, cols)
    ranks = list(range(n))
    src = layout(shape, (2, n // 2), src_spec, ranks)
    dst = layout(shape, (2, n // 2), dst_spec, ranks[shift % n:] + ranks[:shift % n])  # the same ranks, reordered
    task = ReshardTask(shape, "float32", src, dst)
    s = plan_reshard(task, planner="alltoallv", n_ranks=n)
    verify(s)
    assert s.meta["executor"] == "alltoallv" and all(op.kind != "send" or op.src.buf == "i" for op in s.ops)
    full = np.arange(math.prod(shape), dtype=np.float32).reshape(shape)
    got = emulate(s, full)
    for r, t in zip(dst.mesh.ranks, dst.tiles):
        assert np.array_equal(got[r], full[tuple(slice(a, b) for a, b in dst.box(t))]), r


def test_alltoallv_sends_in_place_where_boxes_are_contiguous_and_balances_replicas():
    # S0 rows -> R,S0-like rows: every box is whole rows (contiguous on both sides); the replicated source's
    # two holders of each piece share the sends instead of the first replica sending all of them
    shape = (8, 6)
    src = layout(shape, (2, 2), "S0,R", [0, 1, 2, 3])
    dst = layout(shape, (4,), "S0,R", [3, 2, 1, 0])  # every rank needs rows that two others hold
    s = plan_reshard(ReshardTask(shape, "float32", src, dst), planner="alltoallv")
    progs = [rank_program(s, r) for r in range(4)]
    assert all(p.send.direct and p.recv.direct for p in progs)
    assert [sum(p.send.counts) for p in progs] == [12] * 4  # first replica only: [24, 0, 24, 0]
    # a column box of a row-major shard is not contiguous: packed
    dst2 = layout(shape, (2, 2), "R,S0", [0, 1, 2, 3])
    p0 = rank_program(plan_reshard(ReshardTask(shape, "float32", src, dst2), planner="alltoallv"), 0)
    assert not p0.recv.direct or not p0.send.direct


def test_contiguous_box():
    assert contiguous_box((4, 6), (slice(1, 3), slice(0, 6)))
    assert not contiguous_box((4, 6), (slice(1, 3), slice(0, 3)))
    assert contiguous_box((4, 6), (slice(1, 2), slice(2, 5)))
    assert contiguous_box((4, 6, 2), (slice(1, 2), slice(2, 5), slice(0, 2)))
    assert not contiguous_box((4, 6, 2), (slice(1, 2), slice(2, 5), slice(0, 1)))
    assert contiguous_box((4, 6), (slice(2, 2), slice(0, 3)))


# ---------------------------------------------------------------- auto, and the prediction
TASK = ReshardTask.of((64, 64, 4), "float32", (2, 2), "S0,R,R", (2, 2), "R,S1,R")


def test_auto_picks_the_candidate_predicted_fastest_alltoallv_where_it_is():
    topo = fully_connected(4)
    s = plan_reshard(TASK, topo, planner="auto")
    cand = s.meta["candidates_us"]
    assert set(cand) == set(planner_mod.AUTO_CANDIDATES)
    chosen = cand[s.meta["planner"]]
    assert s.meta["predicted_us"] == chosen
    # the fastest, or alltoallv within the margin of it
    assert chosen == min(cand.values()) or (s.meta["planner"] == "alltoallv"
                                             and min(cand.values()) >= chosen * (1 - planner_mod.AUTO_MARGIN))
    # every candidate's prediction is its plan's, lowered as the runtime runs it
    for p, us in cand.items():
        assert predict_reshard(plan_reshard(TASK, topo, planner=p), topo).time_us == pytest.approx(us)
    # one Alltoallv beats point-to-point messages where messages are dear: many pieces per pair of ranks
    dear = fully_connected(4, bw=50.0, alpha=2.0, overhead=40.0)
    many = ReshardTask.of((16, 16), "float32", (4,), "S0,R", (4,), "R,S0").with_split(4)
    s = plan_reshard(many, dear, planner="auto", split=4)
    assert s.meta["planner"] == "alltoallv" and s.meta["executor"] == "alltoallv", s.meta["candidates_us"]
    assert s.meta["candidates_us"]["alltoallv"] < s.meta["candidates_us"]["naive"]


def test_auto_follows_the_predictions_and_without_a_topology_runs_alltoallv(monkeypatch):
    assert plan_reshard(TASK, planner="auto", n_ranks=4).meta["planner"] == "alltoallv"
    real = planner_mod._priced

    def naive_cheapest(sched, topology, seconds):
        s = real(sched, topology, seconds)
        return s.with_meta(predicted_us=1.0 if s.meta["planner"] == "naive" else 2.0)

    monkeypatch.setattr(planner_mod, "_priced", naive_cheapest)
    s = plan_reshard(TASK, fully_connected(4), planner="auto")
    assert s.meta["planner"] == "naive" and s.meta["candidates_us"] == {"alltoallv": 2.0, "naive": 1.0,
                                                                        "broadcast": 2.0}
    # ... but a plan predicted faster than alltoallv by less than the margin leaves MPI's own exchange in place
    monkeypatch.setattr(planner_mod, "_priced", lambda sched, topology, seconds: real(sched, topology, seconds)
                        .with_meta(predicted_us=1.99 if sched.meta["planner"] == "naive" else 2.0))
    assert plan_reshard(TASK, fully_connected(4), planner="auto").meta["planner"] == "alltoallv"


def test_lowered_alltoallv_run_has_the_agreement_one_message_per_peer_and_the_copies_it_makes():
    s = plan_reshard(TASK, planner="alltoallv")
    g = lower_reshard(s)
    sends = [t for t in g.ops if t.kind == "send"]
    agree = [t for t in sends if t.nbytes == AGREE_BYTES]
    assert len(agree) == 4 * 2  # dissemination: 2 rounds on 4 ranks
    for r in range(4):
        p = rank_program(s, r)
        mine = [t for t in sends if t.rank == r and t not in agree]
        assert sorted(t.nbytes for t in mine) == sorted(4 * c for q, c in enumerate(p.send.counts) if c and q != r)
        copies = sum(t.nbytes for t in g.ops if t.rank == r and t.kind == "copy")
        local = sum(math.prod(b.stop - b.start for b in d) for _, d in p.local)
        assert copies == 4 * (p.send.packed_elements + p.recv.packed_elements + local)
    # where the topology lacks a connection the agreement needs, it is left out (a ring of 4 lacks 0->2)
    assert not [t for t in lower_reshard(s, ring(4)).ops if t.nbytes == AGREE_BYTES and t.kind == "send"][4:]


def test_prediction_carries_the_profiles_run_curve():
    topo = fully_connected(4)
    s = plan_reshard(TASK, topo, planner="alltoallv")
    base = predict_reshard(s, topo).time_us
    assert s.meta["predicted_us"] == pytest.approx(base)
    curved = dataclasses.replace(topo, run_curve=SizeCurve((1.0, 1e12), (2.0, 2.0)))
    assert predict_reshard(s, curved).time_us == pytest.approx(2 * base)
    assert simulate_graph(lower_reshard(s), topo).time_us == pytest.approx(base)


def test_bench_table_names_the_path_its_ratio_to_alltoallv_and_the_prediction_error():
    from ccsynth.bench.reshard import ReshardRow, format_table

    rows = [ReshardRow("auto", TASK.nbytes, 90.0, 80.0, 100.0, 5, True, median_us=100.0, path="alltoallv",
                       executor="alltoallv", predicted_us=80.0),
            ReshardRow("mpi", TASK.nbytes, 100.0, 90.0, 110.0, 5, True, median_us=110.0, path="mpi",
                       executor="Alltoallv (bench)")]
    text = "\n".join(format_table(TASK, rows, validate=True, n_ranks=4))
    assert "auto->alltoallv (alltoallv)" in text and "1.10x the speed of MPI Alltoallv" in text
    assert "1.25" in text  # Meas/Pred of the auto row
    assert "median 25%, worst 25% over 1 rows" in text

