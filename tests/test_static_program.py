"""The executor's straight-line path for small messages: when it is taken, and that it cannot deadlock.

The multi-rank tests (test_communicator_mpi.py) check its results against MPI;
here every rank's program is compiled on a fake communicator and the programs
of all ranks are run against each other in a model of MPI in which a send
completes only once its receive is posted (rendezvous, the strictest case).
"""

from __future__ import annotations

import numpy as np
import pytest

from ccsynth.collectives.executor import K_RECV, K_RRED, K_SEND, CompiledSchedule
from ccsynth.collectives.spec import KINDS, Collective
from ccsynth.collectives.static_program import StaticPlan, plan_static
from ccsynth.synth.baselines import applicable_baselines, make_baseline
from ccsynth.topologies import fully_connected
from toys import FakeComm

from mpi_workers import schedules as hand


def layouts(schedule, m: int, dtype=np.float32, roles=None, **kw):
    n = schedule.n_ranks
    out = []
    for r in range(n):
        cs = CompiledSchedule(schedule, FakeComm(n, r), roles=roles, **kw)
        out.append(cs._layout(np.dtype(dtype), m))
    return out


def run_together(lays) -> None:
    """Run every rank's straight-line program; fail if they get stuck (a deadlock)."""
    n = len(lays)
    sent: set[tuple[int, int, int]] = set()  # (src, dst, tag) of started sends
    posted: set[tuple[int, int, int]] = set()  # (src, dst, tag) of started receives
    for r, lay in enumerate(lays):
        assert lay.static is not None
        for v in lay.static.pre:
            peer, tag, _ = lay.mpi[v]
            posted.add((peer, r, tag))
    pos = [0] * n
    done = [False] * n
    received = 0
    progress = True
    while progress:
        progress = False
        for r, lay in enumerate(lays):
            steps = lay.static.steps
            while pos[r] < len(steps):
                what, v = steps[pos[r]]
                if what == "start":
                    peer, tag, _ = lay.mpi[v]
                    if lay.kind[v] == K_SEND:
                        sent.add((r, peer, tag))
                    else:
                        posted.add((peer, r, tag))
                elif what == "wait":
                    peer, tag, _ = lay.mpi[v]
                    assert (peer, r, tag) in posted, "waits for a receive it never posted"
                    if (peer, r, tag) not in sent:
                        break  # blocked until the peer starts the matching send
                    received += 1
                pos[r] += 1
                progress = True
            if pos[r] == len(steps) and not done[r]:
                # the end: wait for every send, each complete only once its receive is posted
                if all((r, lay.mpi[v][0], lay.mpi[v][1]) in posted for v in lay.static.sends):
                    done[r] = True
                    progress = True
    stuck = [(r, lay.static.steps[pos[r]] if pos[r] < len(lay.static.steps) else "end") for r, lay in enumerate(lays) if not done[r]]
    assert not stuck, f"deadlock: ranks stuck at {stuck}"
    assert sent == posted and received == len(sent)


def schedules_on(n: int):
    topo = fully_connected(n)
    out = list(hand.all_hand_schedules(n))
    for kind in KINDS:
        for name in applicable_baselines(Collective(kind, n), topo):
            for cf in sorted({1, 2, n}):
                coll = Collective(kind, n, cf)
                if name in applicable_baselines(coll, topo):
                    out.append(make_baseline(name, coll, topo))
    return out


@pytest.mark.parametrize("n", [2, 3, 4, 5, 8])
def test_every_baseline_and_hand_schedule_takes_the_straight_line_path_without_deadlock(n):
    count = 0
    for s in schedules_on(n):
        for m in (1, 7 * s.collective.chunk_factor):
            run_together(layouts(s, m))
            count += 1
    assert count > 40


def test_synthesized_schedules_take_it_without_deadlock():
    from ccsynth.synth.synthesize import synthesize
    from ccsynth.topologies import get_topology

    topo = get_topology("dgx1")
    for kind in ("allgather", "allreduce", "alltoall"):
        s = synthesize(topo, Collective(kind, 8), size_bytes=4096)
        run_together(layouts(s, 3 * s.collective.chunk_factor, np.float64))


def test_rotated_roles_keep_the_levels():
    s = hand.chain_broadcast(4, root=0)
    run_together(layouts(s, 12, roles=[(q + 1) % 4 for q in range(4)]))


def test_big_or_sliced_messages_keep_the_dataflow_loop():
    s = hand.ring_allreduce(4)
    assert all(lay.static is not None for lay in layouts(s, 4 * 100))
    # a message of 64 KiB + 4 bytes: above the straight-line limit
    assert all(lay.static is None for lay in layouts(s, 4 * (16 * 1024 + 1)))
    assert all(lay.static is None for lay in layouts(s, 4 * 100, static_max_bytes=0))
    # several slices per message
    assert all(lay.static is None for lay in layouts(s, 4 * 100, slice_bytes=64))


def test_sends_whose_chunk_is_overwritten_later_send_a_snapshot():
    # ring allreduce: a rank sends its partial sum of chunk p, and later receives the final chunk p there
    lays = layouts(hand.ring_allreduce(4), 4 * 8)
    for lay in lays:
        plan = lay.static
        assert plan.snap and set(plan.snap) <= set(plan.sends)
        for v in plan.snap:
            assert lay.succ[v], "a snapshot only where a later node waits for the send"
            assert plan.steps.index(("snap", v)) < plan.steps.index(("start", v))
        # every receive is waited for exactly once
        recvs = [v for v, k in enumerate(lay.kind) if k in (K_RECV, K_RRED)]
        assert sorted(v for what, v in plan.steps if what == "wait") == sorted(recvs)


def test_a_local_edge_down_in_level_refuses_the_plan():
    # node 0 (level 3) -> node 1 (level 1): the fixed order could not honour both
    kind, succ = [4, 4], [(1,), ()]
    assert plan_static(kind, succ, {}, {}, [3, 1], ()) is None
    plan = plan_static(kind, succ, {}, {0: (), 1: ()}, [1, 3], ())
    assert isinstance(plan, StaticPlan) and plan.steps == (("work", 0), ("work", 1))


def test_the_model_catches_a_program_that_waits_before_it_sends():
    import dataclasses

    lays = layouts(hand.recursive_doubling_allreduce(2), 6)
    for lay in lays:  # both ranks wait for their receive before starting their send: a deadlock
        steps = list(lay.static.steps)
        starts = [st for st in steps if st[0] == "start"]
        rest = [st for st in steps if st[0] != "start"]
        first_wait = next(i for i, (what, _) in enumerate(rest) if what == "wait")
        lay.static = dataclasses.replace(lay.static, steps=tuple(rest[:first_wait + 1] + starts + rest[first_wait + 1:]))
    with pytest.raises(AssertionError, match="deadlock"):
        run_together(lays)
