"""Tests of the schedule verifier (ccsynth.collectives.verify).

Correct schedules are built by hand with ScheduleBuilder for every collective;
each mutation must be rejected with a message that names what went wrong.
"""

from __future__ import annotations

import dataclasses
import functools
import time

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from ccsynth.collectives.builder import ScheduleBuilder
from ccsynth.collectives.schedule import Chunks, Op, Schedule
from ccsynth.collectives.spec import Collective
from ccsynth.collectives.verify import VerifyReport, is_valid, verify
from ccsynth.errors import ScheduleError
from ccsynth.topologies.model import Link, Switch, Topology
from toys import assert_verified


# ------------------------------------------------------------ hand-built schedules
# Every op in these schedules is needed: each output chunk is produced by one
# chain of ops, so deleting any op, or sending a received chunk elsewhere,
# must leave some output chunk wrong (see test_mutations_are_caught).


def allgather_ring(n: int, c: int) -> Schedule:
    b = ScheduleBuilder(Collective("allgather", n, c), "allgather-ring")
    for r in range(n):
        b.copy(r, ("i", 0, c), ("o", r * c, c))
    for s in range(n - 1):
        for r in range(n):
            block = (r - s) % n
            b.transfer(r, (r + 1) % n, ("o", block * c, c), ("o", block * c, c))
    return b.build()


def allgather_direct(n: int, c: int) -> Schedule:
    b = ScheduleBuilder(Collective("allgather", n, c), "allgather-direct")
    for r in range(n):
        b.copy(r, ("i", 0, c), ("o", r * c, c))
        for d in range(n):
            if d != r:
                for j in range(c):  # one message per chunk
                    b.transfer(r, d, ("i", j), ("o", r * c + j))
    return b.build()


def reduce_scatter_ring(n: int, c: int) -> Schedule:
    """Ring reduce-scatter accumulating in scratch; rank r ends with block r."""
    b = ScheduleBuilder(Collective("reduce_scatter", n, c), "reduce_scatter-ring")
    for r in range(n):
        b.copy(r, ("i", 0, n * c), ("s", 0, n * c))
    for s in range(n - 1):
        for r in range(n):
            block = (r - s - 1) % n
            b.transfer(r, (r + 1) % n, ("s", block * c, c), ("s", block * c, c), reduce=True)
    for r in range(n):
        b.copy(r, ("s", r * c, c), ("o", 0, c))
    return b.build()


def allreduce_ring(n: int, c: int) -> Schedule:
    """Per chunk j: reduce along the ring starting at rank j % n, then pass the sum on."""
    b = ScheduleBuilder(Collective("allreduce", n, c), "allreduce-ring")
    for r in range(n):
        b.copy(r, ("i", 0, c), ("o", 0, c))
    for j in range(c):
        a = j % n
        for s in range(n - 1):
            b.transfer((a + s) % n, (a + s + 1) % n, ("o", j), ("o", j), reduce=True)
        for s in range(n - 1):
            b.transfer((a + n - 1 + s) % n, (a + n + s) % n, ("o", j), ("o", j))
    return b.build()


def alltoall_direct(n: int, c: int, per_chunk: bool = False) -> Schedule:
    b = ScheduleBuilder(Collective("alltoall", n, c), "alltoall-direct")
    for r in range(n):
        b.copy(r, ("i", r * c, c), ("o", r * c, c))
    for r in range(n):
        for k in range(1, n):
            d = (r + k) % n
            if per_chunk:
                for j in range(c):
                    b.transfer(r, d, ("i", d * c + j), ("o", r * c + j))
            else:
                b.transfer(r, d, ("i", d * c, c), ("o", r * c, c))
    return b.build()


def broadcast_chain(n: int, c: int, root: int) -> Schedule:
    b = ScheduleBuilder(Collective("broadcast", n, c, root), "broadcast-chain")
    b.copy(root, ("i", 0, c), ("o", 0, c))
    for s in range(n - 1):
        for j in range(c):  # pipelined: chunk j moves on as soon as it arrives
            b.transfer((root + s) % n, (root + s + 1) % n, ("o", j), ("o", j))
    return b.build()


def reduce_chain(n: int, c: int, root: int) -> Schedule:
    b = ScheduleBuilder(Collective("reduce", n, c, root), "reduce-chain")
    for r in range(n):
        b.copy(r, ("i", 0, c), ("o", 0, c))  # non-roots use their output as accumulator
    for s in range(1, n):
        src, dst = (root + s) % n, (root + s + 1) % n
        b.transfer(src, dst, ("o", 0, c), ("o", 0, c), reduce=True)
    return b.build()


def gather_direct(n: int, c: int, root: int) -> Schedule:
    b = ScheduleBuilder(Collective("gather", n, c, root), "gather-direct")
    b.copy(root, ("i", 0, c), ("o", root * c, c))
    for q in range(n):
        if q != root:
            b.transfer(q, root, ("i", 0, c), ("o", q * c, c))
    return b.build()


def scatter_direct(n: int, c: int, root: int) -> Schedule:
    b = ScheduleBuilder(Collective("scatter", n, c, root), "scatter-direct")
    b.copy(root, ("i", root * c, c), ("o", 0, c))
    for r in range(n):
        if r != root:
            b.transfer(root, r, ("i", r * c, c), ("o", 0, c))
    return b.build()


def scatter_via_scratch(n: int, root: int = 0) -> Schedule:
    """Scatter whose root stages every piece through one scratch chunk (reused)."""
    b = ScheduleBuilder(Collective("scatter", n, 1, root), "scatter-scratch")
    b.copy(root, ("i", root), ("o", 0))
    for r in range(n):
        if r != root:
            b.copy(root, ("i", r), ("s", 0))
            b.transfer(root, r, ("s", 0), ("o", 0))
    return b.build()


FAMILIES = {
    "allgather_ring": lambda n, c: allgather_ring(n, c),
    "allgather_direct": lambda n, c: allgather_direct(n, c),
    "reduce_scatter_ring": lambda n, c: reduce_scatter_ring(n, c),
    "allreduce_ring": lambda n, c: allreduce_ring(n, c),
    "alltoall_direct": lambda n, c: alltoall_direct(n, c),
    "broadcast_chain": lambda n, c: broadcast_chain(n, c, n - 1),
    "reduce_chain": lambda n, c: reduce_chain(n, c, 1 % n),
    "gather_direct": lambda n, c: gather_direct(n, c, 0),
    "scatter_direct": lambda n, c: scatter_direct(n, c, n // 2),
}


@functools.cache
def family(name: str, n: int, c: int) -> Schedule:
    return FAMILIES[name](n, c)


# ------------------------------------------------------------ mutation helpers
def remove_ops(sched: Schedule, drop: set[int]) -> Schedule:
    """``sched`` without ``drop``; deps on a dropped op move to that op's deps.

    Keeping the dropped op's own ordering avoids inventing races, so that
    what the verifier reports is the missing data itself.
    """
    ops = sched.ops

    @functools.cache
    def resolved(i: int) -> frozenset[int]:
        if i not in drop:
            return frozenset((i,))
        return frozenset().union(*(resolved(d) for d in ops[i].deps)) if ops[i].deps else frozenset()

    new_id = {}
    for op in ops:
        if op.id not in drop:
            new_id[op.id] = len(new_id)
    out = []
    for op in ops:
        if op.id in drop:
            continue
        deps = sorted({new_id[x] for d in op.deps for x in resolved(d)})
        out.append(dataclasses.replace(op, id=new_id[op.id], deps=tuple(deps)))
    return Schedule(sched.name + "-mutated", sched.collective, tuple(out), sched.scratch_chunks)


def replay(sched: Schedule, drop: frozenset[int] = frozenset(), changes: dict[int, dict] | None = None) -> Schedule:
    """Rebuild ``sched`` op by op through ScheduleBuilder, so deps are derived afresh.

    The ops of a builder-made schedule are in program order, so replaying
    them unchanged gives the same schedule; with ops dropped or changed,
    the new schedule is race-free by construction and only its data flow
    is wrong.
    """
    b = ScheduleBuilder(sched.collective, sched.name + "-replayed", scratch_chunks=sched.scratch_chunks)
    for op in sched.ops:
        if op.id in drop:
            continue
        if changes and op.id in changes:
            op = dataclasses.replace(op, **changes[op.id])
        if op.kind == "send":
            b.send(op.rank, op.peer, op.src)
        elif op.kind == "recv":
            b.recv(op.rank, op.peer, op.dst, reduce=op.reduce)
        else:
            getattr(b, op.kind)(op.rank, op.src, op.dst)
    return b.build()


def replace_op(sched: Schedule, op_id: int, **changes) -> Schedule:
    ops = list(sched.ops)
    ops[op_id] = dataclasses.replace(ops[op_id], **changes)
    return Schedule(sched.name + "-mutated", sched.collective, tuple(ops), sched.scratch_chunks)


def one_way_ring(n: int) -> Topology:
    return Topology(f"ring{n}", n, links=tuple(Link(r, (r + 1) % n, 1.0, 10.0) for r in range(n)))


def full(n: int) -> Topology:
    return Topology(f"switch{n}", n, switches=(Switch("sw", tuple(range(n)), 10.0, 1.0),))


# ------------------------------------------------------------ correct schedules verify
@pytest.mark.parametrize("name", sorted(FAMILIES))
@pytest.mark.parametrize("n", [2, 3, 4, 5])
@pytest.mark.parametrize("c", [1, 2, 3])
def test_hand_built_schedules_verify(name, n, c):
    sched = family(name, n, c)
    report = assert_verified(sched)
    assert report.ranks == n and report.n_ops == len(sched.ops)
    sends = [op for op in sched.ops if op.kind == "send"]
    assert report.n_transfers == len(sends)
    assert report.n_bytes_moved_chunks == sum(op.count for op in sends)
    assert is_valid(sched, full(n))


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_replay_rebuilds_the_same_schedule(name):
    # the mutation helper below relies on this
    sched = family(name, 3, 2)
    assert replay(sched).ops == sched.ops


@pytest.mark.parametrize("root", [0, 1, 2])
def test_rooted_collectives_verify_for_every_root(root):
    n, c = 3, 2
    for sched in (broadcast_chain(n, c, root), reduce_chain(n, c, root), gather_direct(n, c, root),
                  scatter_direct(n, c, root), scatter_via_scratch(n, root)):
        assert_verified(sched)


def test_single_rank_needs_its_local_copy():
    b = ScheduleBuilder(Collective("allreduce", 1, 2), "one")
    b.copy(0, ("i", 0, 2), ("o", 0, 2))
    assert verify(b.build()) == VerifyReport(n_ops=1, n_transfers=0, n_bytes_moved_chunks=0, max_depth=1, ranks=1)
    empty = Schedule("empty", Collective("allreduce", 1, 2), ())
    with pytest.raises(ScheduleError, match=r"rank 0 output o\[0\] is uninitialised \(no op writes it\) but allreduce needs \(0,0\)"):
        verify(empty)


def test_report_figures_for_a_pairwise_allgather():
    b = ScheduleBuilder(Collective("allgather", 2, 2), "pairwise")
    for r in range(2):
        b.copy(r, ("i", 0, 2), ("o", 2 * r, 2))
    b.transfer(0, 1, ("i", 0, 2), ("o", 0, 2))
    b.transfer(1, 0, ("i", 0, 2), ("o", 2, 2))
    report = verify(b.build())
    assert report == VerifyReport(n_ops=6, n_transfers=2, n_bytes_moved_chunks=4, max_depth=2, ranks=2)
    assert report.ok and report.error is None and report.to_dict()["ok"] is True
    assert report.to_dict()["max_depth"] == 2


def test_max_depth_counts_the_longest_chain_across_ranks():
    # chain broadcast on 4 ranks, one chunk: copy, then send->recv three times;
    # each send depends on the recv before it (or the copy): 1 + 3 * 2 = 7 steps
    assert verify(broadcast_chain(4, 1, 0)).max_depth == 7
    assert verify(allreduce_ring(4, 1)).max_depth == 1 + 6 * 2


def test_ring_schedules_fit_a_one_way_ring_topology():
    assert_verified(allgather_ring(5, 2), one_way_ring(5))
    assert_verified(allreduce_ring(4, 3), one_way_ring(4))


def test_a_broken_schedule_fails_the_assertions_a_correct_one_passes():
    """What the tests' ``assert_verified`` and ``verify(...).ok`` rest on: a wrong schedule is not ok."""
    good = allreduce_ring(4, 1)
    assert verify(good).ok and assert_verified(good, one_way_ring(4)).ok
    recv = next(op for op in good.ops if op.kind == "recv" and op.reduce)
    broken = replace_op(good, recv.id, reduce=False)  # overwrites instead of reducing: a contribution is lost
    with pytest.raises(ScheduleError) as raised:
        verify(broken)
    report = verify(broken, raise_on_error=False)
    assert not report.ok and report.error == str(raised.value) and "allreduce needs" in report.error
    assert (report.n_ops, report.ranks, report.max_depth) == (len(broken.ops), 4, 0)
    assert report.to_dict()["ok"] is False and not is_valid(broken)
    with pytest.raises(AssertionError, match="allreduce needs"):
        assert_verified(broken)
    # checked on a topology of another size, a correct schedule is not ok either
    assert not verify(good, full(3), raise_on_error=False).ok
    with pytest.raises(AssertionError, match="has 3 ranks"):
        assert_verified(good, full(3))


def test_order_through_another_rank_is_not_a_race():
    """Rank 0 re-writes o[0] after sending it, ordered only through rank 1.

    The write (recv from rank 1) has no dependency on the earlier send of
    o[0] on rank 0, but the send -> recv -> send -> recv path orders them.
    """
    ops = (
        Op(0, 0, "copy", Chunks("i", 0), Chunks("o", 0)),
        Op(1, 1, "copy", Chunks("i", 0), Chunks("o", 0)),
        Op(2, 0, "send", Chunks("o", 0), peer=1, deps=(0,)),
        Op(3, 1, "recv", dst=Chunks("o", 0), peer=0, reduce=True, deps=(1,)),
        Op(4, 1, "send", Chunks("o", 0), peer=0, deps=(3,)),
        Op(5, 0, "recv", dst=Chunks("o", 0), peer=1),  # no dep on op 2, nor op 0
    )
    sched = Schedule("cross-rank-order", Collective("allreduce", 2), ops)
    assert_verified(sched)


# ------------------------------------------------------------ mutations, with the right words
def test_dropped_send_alone_is_an_unmatched_recv():
    sched = allgather_direct(3, 1)
    send = next(op for op in sched.ops if op.kind == "send")
    with pytest.raises(ScheduleError, match=r"unmatched receive op \d+ \(rank 1: recv o\[0\] <- rank 0\)"):
        verify(remove_ops(sched, {send.id}))


def test_dropped_transfer_leaves_an_output_uninitialised():
    sched = allgather_direct(3, 1)
    send = next(op for op in sched.ops if op.kind == "send" and op.rank == 2 and op.peer == 0)
    mutated = remove_ops(sched, {send.id, sched.matches[send.id]})
    with pytest.raises(ScheduleError, match=r"rank 0 output o\[2\] is uninitialised .* allgather needs \(2,0\)"):
        verify(mutated)
    assert not is_valid(mutated)


def test_dropped_middle_hop_makes_a_later_send_read_garbage():
    sched = allgather_ring(4, 1)
    # rank 1 forwards block 0 at step 1; drop the step-0 hop 0 -> 1 of block 0
    send = next(op for op in sched.ops if op.kind == "send" and op.rank == 0 and op.src == Chunks("o", 0))
    mutated = remove_ops(sched, {send.id, sched.matches[send.id]})
    with pytest.raises(ScheduleError, match=r"rank 1: send o\[0\] -> rank 2\) reads o\[0\] of rank 1, which is uninitialised"):
        verify(mutated)


def test_duplicated_reduction():
    b = ScheduleBuilder(Collective("allreduce", 2), "twice")
    for r in range(2):
        b.copy(r, ("i", 0), ("o", 0))
    b.transfer(0, 1, ("o", 0), ("o", 0), reduce=True)
    b.transfer(0, 1, ("o", 0), ("o", 0), reduce=True)
    b.transfer(1, 0, ("o", 0), ("o", 0))
    with pytest.raises(ScheduleError, match=r"op 5 \(rank 1: recv-reduce o\[0\] <- rank 0\) reduces contribution "
                                            r"\(rank 0, chunk 0\) into o\[0\] of rank 1 twice"):
        verify(b.build())


def test_local_reduce_of_the_same_contribution_twice():
    b = ScheduleBuilder(Collective("reduce", 2, root=0), "local-twice", scratch_chunks=1)
    b.copy(0, ("i", 0), ("o", 0))
    b.copy(0, ("i", 0), ("s", 0))
    b.reduce(0, ("s", 0), ("o", 0))
    with pytest.raises(ScheduleError, match=r"rank 0: reduce s\[0\] -> o\[0\]\) reduces contribution \(rank 0, chunk 0\)"):
        verify(b.build())


def test_send_over_a_missing_link():
    sched = allgather_direct(4, 1)
    with pytest.raises(ScheduleError, match=r"op \d+ \(rank 0: send i\[0\] -> rank 2\) uses no link: "
                                            r"topology 'ring4' has no connection 0->2"):
        verify(sched, one_way_ring(4))
    # the reverse direction of a one-way ring is missing too
    with pytest.raises(ScheduleError, match=r"has no connection 1->0"):
        verify(allgather_ring(2, 1), Topology("oneway", 2, links=(Link(0, 1, 1.0, 1.0),)))


def test_wrong_world_size_topology():
    with pytest.raises(ScheduleError, match=r"topology 'switch8' has 8 ranks but schedule 'allgather-ring' "
                                            r"needs 4 \(allgather on 4 ranks"):
        verify(allgather_ring(4, 1), full(8))


def test_deadlock_cycle_across_ranks_names_its_ops():
    # each rank receives before it sends, waiting for the other: classic deadlock
    ops = (
        Op(0, 0, "recv", dst=Chunks("o", 1), peer=1),
        Op(1, 0, "send", Chunks("i", 0), peer=1, deps=(0,)),
        Op(2, 1, "recv", dst=Chunks("o", 0), peer=0),
        Op(3, 1, "send", Chunks("i", 0), peer=0, deps=(2,)),
        Op(4, 0, "copy", Chunks("i", 0), Chunks("o", 0)),
        Op(5, 1, "copy", Chunks("i", 0), Chunks("o", 1)),
    )
    sched = Schedule("deadlock", Collective("allgather", 2), ops)
    with pytest.raises(ScheduleError, match=r"deadlocks: dependency cycle of 4 op\(s\) on rank\(s\) 0, 1") as e:
        verify(sched)
    msg = str(e.value)
    for op in ops[:4]:
        assert op.describe() in msg
    assert "op 4" not in msg and "op 5" not in msg


def test_deadlock_cycle_within_one_rank():
    ops = (
        Op(0, 0, "copy", Chunks("i", 0), Chunks("o", 0), deps=(1,)),
        Op(1, 0, "copy", Chunks("i", 0), Chunks("s", 0), deps=(0,)),
    )
    sched = Schedule("self-cycle", Collective("broadcast", 1), ops, scratch_chunks=1)
    with pytest.raises(ScheduleError, match=r"cycle of 2 op\(s\) on rank\(s\) 0: op \d .* -> op \d .* -> back to op"):
        verify(sched)


def test_cycle_check_comes_before_the_race_and_data_checks():
    # the cycle plus a send of an uninitialised chunk: the cycle is reported
    ops = (
        Op(0, 0, "send", Chunks("o", 0), peer=1, deps=(1,)),
        Op(1, 0, "copy", Chunks("i", 0), Chunks("s", 0), deps=(0,)),
        Op(2, 1, "recv", dst=Chunks("o", 0), peer=0),
    )
    sched = Schedule("both", Collective("broadcast", 2), ops, scratch_chunks=1)
    with pytest.raises(ScheduleError, match="deadlocks"):
        verify(sched)


def test_race_write_may_overtake_read():
    sched = scatter_via_scratch(3, root=0)
    # the second staging copy into s[0] must wait for the first send of s[0]
    copies = [op for op in sched.ops if op.kind == "copy" and op.dst == Chunks("s", 0)]
    first_send = next(op for op in sched.ops if op.kind == "send")
    second = copies[1]
    assert first_send.id in second.deps
    mutated = replace_op(sched, second.id, deps=tuple(d for d in second.deps if d != first_send.id))
    with pytest.raises(ScheduleError, match=r"race on rank 0, chunk s\[0\]: "
                                            rf"{_re(first_send.describe())} reads it and {_re(second.describe())} writes it"
                                            r".*the write may overtake the read"):
        verify(mutated)


def test_race_read_before_write():
    b = ScheduleBuilder(Collective("broadcast", 2, root=0), "staged", scratch_chunks=1)
    b.copy(0, ("i", 0), ("o", 0))
    b.transfer(0, 1, ("o", 0), ("s", 0))
    cp = b.copy(1, ("s", 0), ("o", 0))
    sched = b.build()
    recv = sched.matches[sched.ops[1].id]
    mutated = replace_op(sched, cp, deps=())
    with pytest.raises(ScheduleError, match=rf"race on rank 1, chunk s\[0\]: op {recv} .* writes it and op {cp} .* reads it"
                                            r".*the read may see the chunk before or after the write"):
        verify(mutated)


def test_race_two_writes():
    b = ScheduleBuilder(Collective("allgather", 2), "ww")
    b.copy(0, ("i", 0), ("o", 0))
    b.copy(1, ("i", 0), ("o", 1))
    b.copy(1, ("i", 0), ("o", 0))  # junk, overwritten by the recv below
    b.transfer(0, 1, ("o", 0), ("o", 0))
    b.transfer(1, 0, ("o", 1), ("o", 1))
    sched = b.build()
    assert_verified(sched)
    recv = next(op for op in sched.ops if op.kind == "recv" and op.rank == 1)
    mutated = replace_op(sched, recv.id, deps=())
    with pytest.raises(ScheduleError, match=r"race on rank 1, chunk o\[0\]: op 2 .* writes it and op \d+ .* writes it.*either order"):
        verify(mutated)


def _transitive_allgather(send_deps: tuple[int, ...]) -> Schedule:
    """Rank 0 writes o[0] (op 0) and sends it (op 2) after op 1, which itself waits for op 0: the write and the
    read are ordered through op 1 only, not by a dependency of their own."""
    ops = (
        Op(0, 0, "copy", src=Chunks("i", 0), dst=Chunks("o", 0)),
        Op(1, 0, "copy", src=Chunks("i", 0), dst=Chunks("s", 0), deps=(0,)),
        Op(2, 0, "send", src=Chunks("o", 0), peer=1, deps=send_deps),
        Op(3, 1, "copy", src=Chunks("i", 0), dst=Chunks("o", 1)),
        Op(4, 1, "recv", dst=Chunks("o", 0), peer=0),
        Op(5, 1, "send", src=Chunks("i", 0), peer=0),
        Op(6, 0, "recv", dst=Chunks("o", 1), peer=1),
    )
    return Schedule("transitive", Collective("allgather", 2), ops, scratch_chunks=1)


def test_accesses_ordered_only_through_another_op_are_no_race():
    assert_verified(_transitive_allgather(send_deps=(1,)))


def test_accesses_that_no_path_orders_are_a_race_among_many_that_one_does():
    with pytest.raises(ScheduleError, match=r"race on rank 0, chunk o\[0\]: op 0 .* writes it and op 2 .* reads it"
                                            r".*the read may see the chunk before or after the write"):
        verify(_transitive_allgather(send_deps=()))
    # a write and its read ordered only through a chain of 40 unrelated copies: broken anywhere, a race
    n = 40
    b = ScheduleBuilder(Collective("broadcast", 2, root=0), "chain", scratch_chunks=n)
    first = b.copy(0, ("i", 0), ("o", 0))
    chained = [b.copy(0, ("i", 0), ("s", k)) for k in range(n)]  # no conflicts among them or with o[0]
    send, _ = b.transfer(0, 1, ("o", 0), ("o", 0))
    ok = b.build()
    for k, op_id in enumerate(chained):
        ok = replace_op(ok, op_id, deps=(chained[k - 1] if k else first,))
    ok = replace_op(ok, send, deps=(chained[-1],))
    assert_verified(ok)
    broken = replace_op(ok, chained[n // 2], deps=())
    with pytest.raises(ScheduleError, match=rf"race on rank 0, chunk o\[0\]: op {first} .* writes it and op "
                                            rf"{send} .* reads it"):
        verify(broken)


def test_reading_an_uninitialised_chunk():
    b = ScheduleBuilder(Collective("broadcast", 2, root=0), "early")
    b.copy(0, ("i", 0), ("o", 0))
    b.transfer(1, 0, ("o", 0), ("o", 0))  # rank 1 sends its output before it has one
    with pytest.raises(ScheduleError, match=r"op 1 \(rank 1: send o\[0\] -> rank 0\) reads o\[0\] of rank 1, which is uninitialised"):
        verify(b.build())


def test_reduce_into_an_uninitialised_chunk():
    b = ScheduleBuilder(Collective("reduce", 2, root=0), "no-init")
    b.transfer(1, 0, ("i", 0), ("o", 0), reduce=True)
    with pytest.raises(ScheduleError, match=r"recv-reduce o\[0\] <- rank 1\) reads o\[0\] of rank 0, which is uninitialised"):
        verify(b.build())


def test_wrong_final_chunk():
    b = ScheduleBuilder(Collective("allgather", 2), "swapped")
    b.copy(0, ("i", 0), ("o", 0))
    b.copy(1, ("i", 0), ("o", 0))  # should be o[1]
    b.transfer(0, 1, ("i", 0), ("o", 1))  # should be o[0]
    b.transfer(1, 0, ("i", 0), ("o", 1))
    with pytest.raises(ScheduleError, match=r"rank 1 output o\[0\] holds \(1,0\) but allgather needs \(0,0\): "
                                            r"missing contribution from rank 0 \(input chunk 0\), "
                                            r"unexpected contribution from rank 1 \(input chunk 0\); "
                                            r"last written by op 1 \(rank 1: copy i\[0\] -> o\[0\]\)"):
        verify(b.build())


def test_missing_contributions_are_listed_briefly():
    n = 8
    b = ScheduleBuilder(Collective("allreduce", n), "lazy")
    for r in range(n):
        b.copy(r, ("i", 0), ("o", 0))  # nobody reduces anything
    with pytest.raises(ScheduleError) as e:
        verify(b.build())
    msg = str(e.value)
    assert msg.startswith("rank 0 output o[0] holds (0,0) but allreduce needs (0,0)+(1,0)+(2,0)+...+(7,0) [8 contributions]")
    assert "missing contributions from rank 1 (input chunk 0), from rank 2 (input chunk 0), from rank 3 (input chunk 0) and 4 more" in msg
    assert len(msg) < 400


def test_count_mismatch_is_reported_by_matching():
    sched = allgather_ring(3, 2)
    recv = next(op for op in sched.ops if op.kind == "recv")
    mutated = replace_op(sched, recv.id, dst=Chunks(recv.dst.buf, recv.dst.index, 1))
    with pytest.raises(ScheduleError, match=r"sends 2 chunk\(s\) but the matching op \d+ .* expects 1"):
        verify(mutated)


def _re(text: str) -> str:
    import re

    return re.escape(text)


# ------------------------------------------------------------ property: random mutations
MUTABLE = sorted(FAMILIES)


@st.composite
def mutated_schedules(draw):
    """A correct schedule with one op (and its partner) deleted, or one recv redirected.

    Both mutations must always be caught: in these schedules every op is
    needed and every (rank, output chunk) is written by one chain of ops, so
    deleting an op leaves some chunk uninitialised or short of a contribution
    (or a later op reads garbage), and redirecting a recv to another chunk of
    the same buffer leaves its intended chunk without the value it needed
    (the redirect may also surface as a race or a duplicated contribution).
    """
    name = draw(st.sampled_from(MUTABLE))
    n = draw(st.integers(2, 5))
    c = draw(st.integers(1, 3))
    sched = family(name, n, c)
    kind = draw(st.sampled_from(["delete", "redirect"]))
    # "keep": the other ops keep their deps (a redirect may then surface as a race);
    # "replay": deps are derived afresh, so only the data flow is wrong.
    deps = draw(st.sampled_from(["keep", "replay"]))
    if kind == "delete":
        op = sched.ops[draw(st.integers(0, len(sched.ops) - 1))]
        drop = {op.id}
        if op.id in sched.matches:
            drop.add(sched.matches[op.id])
        mutated = remove_ops(sched, drop) if deps == "keep" else replay(sched, drop=frozenset(drop))
        return kind, deps, mutated
    recvs = [op for op in sched.ops if op.kind == "recv"
             and sched.buffer_chunks(op.dst.buf) > op.dst.count]
    assume(recvs)
    op = draw(st.sampled_from(recvs))
    size = sched.buffer_chunks(op.dst.buf)
    new_index = draw(st.integers(0, size - op.dst.count).filter(lambda i: i != op.dst.index))
    dst = Chunks(op.dst.buf, new_index, op.dst.count)
    mutated = replace_op(sched, op.id, dst=dst) if deps == "keep" else replay(sched, changes={op.id: {"dst": dst}})
    return kind, deps, mutated


@settings(suppress_health_check=[HealthCheck.filter_too_much])  # examples: the profile (tests/conftest.py)
@given(mutated_schedules())
def test_mutations_are_caught(case):
    _kind, _deps, sched = case
    with pytest.raises(ScheduleError):
        verify(sched)
    assert not is_valid(sched)


# ------------------------------------------------------------ size
def test_large_alltoall_verifies():
    """~20k ops on 32 ranks (one message per chunk); not timed, but must be quick."""
    sched = alltoall_direct(32, 10, per_chunk=True)
    assert 19_000 < len(sched.ops) < 21_000
    t0 = time.perf_counter()
    report = verify(sched, full(32))
    elapsed = time.perf_counter() - t0
    assert report.n_ops == len(sched.ops) and report.n_transfers == 32 * 31 * 10
    assert report.max_depth == 2
    assert elapsed < 30  # generous: a sanity bound, not a benchmark


def test_long_dependency_chains_verify():
    # deep schedule: ring allreduce on 16 ranks, 16 chunks (every op has many ancestors)
    sched = allreduce_ring(16, 16)
    report = verify(sched, one_way_ring(16))
    assert report.max_depth == 1 + 2 * 2 * 15
