"""Straight-line programs for small messages: the executor's fast path.

For a small message the dataflow loop of
:class:`~ccsynth.collectives.executor.CompiledSchedule` costs more in Python
bookkeeping (ready queues, dependency counters, ``Testsome`` over every
request in flight) than the messages cost in MPI. When every operation of a
rank is a single slice, the rank's part of the schedule is instead turned,
once per layout, into a fixed list of instructions -- start these requests,
wait for that receive, reduce, copy -- that a short loop runs with one
``Isend``/``Irecv`` and one wait per message.

Why a fixed order cannot deadlock
---------------------------------
Every operation of the schedule gets a *level*: the length of the longest
chain of dependencies and send->receive matches that ends at it, computed on
the whole schedule, so every rank agrees on it (a receive's level exceeds
its matching send's). A rank runs its slice nodes in order of level (ties:
in dependency order), which needs each local edge ``u -> v`` to have
``level(u) <= level(v)``. The compile step's rewrites (forwarding, fusion)
keep that for the usual schedules; the ranks agree (one small ``Allreduce``
before their first call) that every rank's program does, and otherwise all
keep the dataflow loop. Then:

* a receive is waited for only when the first node that needs it comes up
  (or at the end), at a level above that of its matching send;
* if rank A waits for a receive at level ``l`` whose matching send rank B has
  not started, B is stopped at an earlier instruction: a wait at a level no
  higher than the send's, so below ``l``. Following such waits gives an
  endless strictly decreasing sequence of levels, which is impossible;
* the same holds when B runs the dataflow loop instead (a call whose
  messages exceed the limit on B only): B has not started the send because
  a receive that precedes it, at a lower level, has not arrived;
* sends are waited for only at the end (after every receive), so a send that
  MPI completes only once it is matched never blocks the program. A send
  whose buffer a later node overwrites (the ring's allgather phase receives
  into the chunk it sent earlier) first copies its data into a private
  snapshot, so that the later node need not wait for the send to complete.

Every wait also watches the control line (a notice from a rank whose call
failed: :mod:`ccsynth.collectives.runtime.channel`), which only adds a way
out of a wait, never a wait, so the argument above is unchanged.

This module plans (:func:`plan_static`, per layout) and binds
(:func:`bind_static`, per pair of caller buffers: a :class:`BoundProgram`);
the loop that runs a bound program is
:func:`ccsynth.collectives.runtime.straight_line.run_straight_line`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ccsynth.collectives.runtime.constants import (
    I_COPY, I_FUSED, I_RECV, I_REDUCE, I_SEND, I_SYNC, I_WAIT, K_LOCAL, K_RECV, K_RRED, K_SEND,
    STATIC_MAX_BYTES, W_FUSED, W_REDUCE,
)
from ccsynth.errors import ScheduleError
from ccsynth.graphs import topological_order

__all__ = ["StaticPlan", "BoundProgram", "plan_static", "bind_static", "STATIC_MAX_BYTES"]


@dataclass(frozen=True)
class StaticPlan:
    """The order of one rank's slice nodes for one layout (no buffers yet).

    ``steps`` holds ``("start", node)``, ``("snap", node)``, ``("wait",
    node)`` and ``("work", node)`` in the order to run them; ``pre`` are the receive-reduce nodes
    posted first; ``sends`` the send nodes waited for at the end; ``snap``
    the send nodes that send from a private snapshot.
    """

    steps: tuple
    pre: tuple[int, ...]
    sends: tuple[int, ...]
    snap: tuple[int, ...]


def plan_static(kind: list[int], succ: list[tuple[int, ...]], mpi: dict, work: dict,
                node_level: list[int], pre: tuple[int, ...]) -> StaticPlan | None:
    """Order the slice graph by level; None if a local edge goes down in level.

    ``kind``, ``succ``, ``mpi``, ``work`` and ``pre`` are the
    layout's (see :class:`~ccsynth.collectives.runtime.layout.Layout`);
    ``node_level[v]`` is the level of the operation node ``v`` belongs to.
    """
    n = len(kind)
    for u in range(n):
        lu = node_level[u]
        for v in succ[u]:
            if node_level[v] < lu:
                return None
    preds: list[list[int]] = [[] for _ in range(n)]
    for u in range(n):
        for v in succ[u]:
            preds[v].append(u)
    for p in preds:
        p.sort()
    # a topological order that takes the lowest level first among the nodes ready at each point
    order = topological_order(preds, key=lambda v: (node_level[v], v))
    if order is None:  # the layout's slices follow the rank's race-checked, ordered program
        raise ScheduleError("the slice graph of a rank's program has a dependency cycle")

    steps: list[tuple] = []
    pending: set[int] = set()  # receives started but not yet waited for
    snap = []
    sends = []

    def settle(v: int) -> None:
        """Wait for the receive v (and run what follows its arrival)."""
        pending.discard(v)
        steps.append(("wait", v))
        if v in work:
            steps.append(("work", v))

    for v in order:
        for u in preds[v]:
            if u in pending:
                settle(u)
        k = kind[v]
        if k == K_SEND:
            if v in work:
                steps.append(("work", v))
            region = mpi[v].region
            if succ[v] and region.buf in ("o", "s") and region.stop > region.start:
                snap.append(v)
                steps.append(("snap", v))
            steps.append(("start", v))
            sends.append(v)
        elif k == K_RECV:
            steps.append(("start", v))
            pending.add(v)
        elif k == K_RRED:
            pending.add(v)  # posted at the start
        elif k == K_LOCAL:
            steps.append(("work", v))
        # K_JOIN: nothing to run (its pending predecessors were settled above)
    for v in order:
        if v in pending:
            settle(v)
    return StaticPlan(tuple(steps), tuple(pre), tuple(sends), tuple(snap))


@dataclass(frozen=True)
class BoundProgram:
    """A straight-line program bound to buffers.

    ``instructions`` are ``(code, a, b, c)`` tuples (codes ``I_*`` of
    :mod:`~ccsynth.collectives.runtime.constants`): ``I_SEND``/``I_RECV``
    view, peer, slice tag (the loop adds the call's tag base and keeps the
    request: receives in a list, in start order); ``I_WAIT`` receive
    number (its index in that list), expected bytes, node;
    ``I_FUSED``/``I_REDUCE``/``I_COPY`` views; ``I_SYNC``. Plain tuples,
    since the run loop unpacks one per step. Every send is waited for at
    the end. ``recv_nodes[i]`` is the node of the ``i``-th receive;
    ``own_bytes`` the bytes of the send snapshots.
    """

    instructions: list
    recv_nodes: tuple
    own_bytes: int = 0


def bind_static(plan: StaticPlan, lay, msgs: list, work: list, backend, view, wrap=None) -> BoundProgram:
    """Instructions for one binding.

    ``msgs``/``work`` are the binding's per-node ``(view, peer, tag)`` and
    work views; ``view(region)`` makes a view of a layout region; the
    snapshot buffers (sends whose memory a later node overwrites) are
    allocated here; ``wrap`` is the binding's (what a message's view becomes).
    """
    snap_view: dict[int, object] = {}
    snap_copy: dict[int, tuple] = {}
    own_bytes = 0
    if plan.snap:
        sizes = {v: lay.mpi[v].region.size for v in plan.snap}
        buf = backend.empty(sum(sizes.values()), lay.dtype)
        own_bytes = int(buf.nbytes)
        off = 0
        for v in plan.snap:
            sv = buf[off:off + sizes[v]]
            off += sizes[v]
            snap_view[v] = wrap(sv) if wrap is not None else sv
            snap_copy[v] = (sv, view(lay.mpi[v].region))
    device = backend.is_device
    prog: list[tuple] = []
    recv_nodes: list[int] = []
    slot: dict[int, int] = {}

    def post(v: int) -> None:
        d, peer, tag = msgs[v]
        slot[v] = len(recv_nodes)
        recv_nodes.append(v)
        prog.append((I_RECV, d, peer, tag))

    for v in plan.pre:
        post(v)
    dirty = False  # device kernels queued since the last synchronisation
    for what, v in plan.steps:
        if what == "start":
            if dirty and device:
                prog.append((I_SYNC, None, None, None))
                dirty = False
            if lay.kind[v] == K_SEND:
                d, peer, tag = msgs[v]
                prog.append((I_SEND, snap_view.get(v, d), peer, tag))
            else:
                post(v)
        elif what == "wait":
            prog.append((I_WAIT, slot[v], lay.expect[v], v))
        elif what == "snap":
            d, s = snap_copy[v]
            prog.append((I_COPY, d, s, None))
            dirty = device
        else:  # work
            for mode, d, s, s2 in work[v]:
                code = I_FUSED if mode == W_FUSED else I_REDUCE if mode == W_REDUCE else I_COPY
                prog.append((code, d, s, s2))
            dirty = device
    if dirty:
        prog.append((I_SYNC, None, None, None))
    return BoundProgram(prog, tuple(recv_nodes), own_bytes)
