"""Threadblock layout of a schedule for MSCCL, and its XML form.

MSCCL runs each gpu's part of an algorithm as threadblocks: a threadblock
has at most one send peer, one receive peer and one channel, and runs its
steps one after another. On one gpu and channel each send peer and each
receive peer belongs to at most one threadblock, so the k-th send of gpu
``a`` to ``b`` on channel ``c`` meets the k-th receive of ``b`` from ``a``
on channel ``c``. A layout (:class:`Layout`) decides which threadblock runs
each op and in which order; it is built in stages by :func:`layouts`:

1. *fusions* -- a receive followed by a send of exactly the chunks it wrote
   becomes one ``rcs`` step (``rrcs`` after a receive-reduce) where most of
   a receive stream is forwarded to one send peer; then those two streams
   share one threadblock (as in msccl-tools' rings). Sharing serializes the
   two streams, so :func:`layouts` returns the fused and the plain layout
   and the exporter keeps the faster. *Packing* (``layouts(s, pack=True)``,
   for a gpu that would need more threadblocks than the runtime allows)
   also pairs the remaining send and receive streams of a gpu and channel
   two by two into shared threadblocks, a peer's two directions together
   first;
2. *steps* -- every op (or fused pair) becomes a :class:`Step` of the
   threadblock keyed by ``(send peer, receive peer, channel)`` of its rank;
   local copies and reductions go to a local threadblock per channel;
3. *places* -- steps of every threadblock follow the order in which the
   ops started when the schedule was simulated ("timed",
   :mod:`.timed`: given the times, this layout comes first, without
   fusions, one stream per threadblock -- what MSCCLang does with a
   threadblock per send peer, receive peer and channel -- so that the file
   runs as the schedule did), or a topological order of the ops (by
   dependency level) in which a receive follows its send ("buffered"), else
   one in which a matched send and receive are one event ("rendezvous"); a
   schedule read from MSCCL XML keeps its file's order ("given");
4. *streams* -- both ends of a stream are put in the same order;
5. *deadlock* -- the layout is kept only if threadblock order, dependencies
   and send-before-receive together are acyclic, i.e. nothing deadlocks
   when sends complete on their own, as MSCCL's buffered connections (and
   the verifier) assume;
6. *dependencies* -- a step waits for the latest step of every other
   threadblock of its gpu it depends on; dependencies implied by others
   (vector clocks over the threadblocks of a gpu) are dropped, and
   :func:`layout_xml` carries the extra ones by ``nop`` steps.

A step waits for at most one step of another threadblock (``depid`` /
``deps``); the runtime signals only steps marked ``hasdep="1"``. Extra
dependencies are carried by ``nop`` steps placed just before the step, each
with one dependency, and the step itself carries the last one.
"""

from __future__ import annotations

import logging
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from ccsynth.collectives.schedule import Chunks, Schedule
from ccsynth.errors import ScheduleError
from ccsynth.graphs import topological_order

log = logging.getLogger(__name__)

__all__ = ["TbKey", "Step", "Layout", "layouts", "layout_xml"]


class TbKey(NamedTuple):
    """A threadblock of one rank: its send peer, receive peer (-1: none) and channel.

    Threadblock ids are given in the order of these keys.
    """

    send: int
    recv: int
    chan: int


@dataclass
class Step:
    """One step of a threadblock; ``pos``, ``deps`` and ``hasdep`` are filled while laying out."""

    rank: int
    type: str
    ops: tuple[int, ...]  # IR op ids, in execution order
    src: Chunks | None
    dst: Chunks | None
    cnt: int
    tb: TbKey
    pos: tuple = ()  # sort key of the step inside its threadblock
    deps: list[tuple[int, int]] = field(default_factory=list)  # kept (tb index, logical index)
    hasdep: bool = False


@dataclass
class Layout:
    """Threadblocks of every rank and their steps, in order."""

    tbs: list[list[TbKey]]  # per rank: tb keys in id order
    steps: list[list[list[Step]]]  # per rank, per tb: steps in order
    scratch: list[int]  # s_chunks per rank
    fused: int = 0  # receive/send pairs fused into one step
    buffered: bool = False  # steps placed by the "buffered" order


@dataclass(frozen=True)
class _Fusion:
    """Which receives are fused with a send, and which streams share a threadblock."""

    send_of: dict[int, int]  # recv op id -> send op id
    pair_of: dict[tuple[int, int, int], int]  # (rank, chan, recv peer) -> send peer

    @property
    def recv_of(self) -> dict[tuple[int, int, int], int]:
        """(rank, chan, send peer) -> recv peer."""
        return {(rank, c, q): p for (rank, c, p), q in self.pair_of.items()}


def layouts(s: Schedule, *, pack: bool = False, times: Sequence[float] | None = None,
            by_level: bool = True) -> list[Layout]:
    """The threadblock layouts worth comparing (see module doc), best guess first.

    Returns the timed layout (with ``times``, each op's simulated start:
    :func:`.timed.start_times`; one stream per threadblock, in the order
    the ops ran), then the fused layout and the plain one (when they
    differ); a schedule read from MSCCL XML gets back its own layout (same
    fusions, same step order), so that XML -> schedule -> XML gives the
    same file. ``pack``: pair the streams left alone into shared
    threadblocks (about half the threadblocks, each stream serialized with
    its partner). ``by_level=False``: the timed layout alone, where there
    is one (the layouts by level are built only when it is missing). Raises
    :class:`ScheduleError` if every layout would deadlock.
    """
    info = s.meta.get("msccl")
    if not isinstance(info, dict):
        info = {}
    if info.get("ops_in_tb_order"):
        for fuse, order in (("given", "given"), ("none", "given"), ("auto", "buffered"), ("none", "buffered")):
            layout = _try_assign(s, fuse=fuse, order=order, pack=pack)
            if layout is not None:
                return [layout]
    out = []
    if times is not None:
        timed = _try_assign(s, fuse="none", order="timed", pack=pack, times=times)
        if timed is not None:
            out.append(timed)
            if not by_level:
                return out
    levelled: list[Layout] = []
    for fuse in ("auto", "none"):
        for order in ("buffered", "rendezvous"):
            layout = _try_assign(s, fuse=fuse, order=order, pack=pack)
            if layout is not None:
                levelled.append(layout)
                break
        if levelled and levelled[0].fused == 0:
            break  # nothing to fuse: the plain layout is the same
    out += levelled
    if not out:
        raise ScheduleError(f"schedule {s.name!r} cannot be laid out as MSCCL threadblocks without a deadlock")
    return out


def _try_assign(s: Schedule, *, fuse: str, order: str, pack: bool = False,
                times: Sequence[float] | None = None) -> Layout | None:
    """The layout with fusions ``fuse`` (given/auto/none) and step order ``order``, or None if it deadlocks."""
    chan = _channels(s)
    fusion = _fusions(s, fuse, chan)  # 1
    if pack:
        fusion = _packed(s, fusion, chan)
    steps, step_of = _steps(s, fusion, chan)  # 2
    if not _place(s, steps, step_of, order, times):  # 3
        return None
    if not _align_streams(s, steps, step_of, chan):  # 4
        return None
    tbs, tb_steps, where, tb_preds = _threadblocks(s, steps)
    step_order = _step_order(s, steps, step_of, tb_preds)  # 5
    if step_order is None:
        return None
    _dependencies(s, steps, step_of, where, tbs, step_order)  # 6
    return Layout(tbs, tb_steps, _scratch(s), fused=len(fusion.send_of), buffered=order == "buffered")


def _channels(s: Schedule) -> list[int]:
    """Channel of every op; a receive is on its send's channel."""
    matches = s.matches
    return [op.channel if op.kind != "recv" else s.ops[matches[op.id]].channel for op in s.ops]


# -------------------------------------------------------------- 1. fusions
def _fusions(s: Schedule, fuse: str, chan: list[int]) -> _Fusion:
    """Receives R followed by a send S of exactly the chunks R wrote, to become one step."""
    if fuse == "given":
        return _given_fusions(s, chan)
    if fuse == "auto":
        return _auto_fusions(s, chan)
    return _Fusion({}, {})


def _given_fusions(s: Schedule, chan: list[int]) -> _Fusion:
    """A schedule read from MSCCL XML: a fused step became a receive and the
    send of the same chunks right after it (consecutive ids; the reader
    names those receives in ``meta["msccl"]["fused_recvs"]``, where given)."""
    ops = s.ops
    info = s.meta.get("msccl")
    if not isinstance(info, dict):
        info = {}
    named = info.get("fused_recvs")
    # ids of the ops as read: a transform that renumbered them (in place: fewer copies) leaves the guess
    fused = set(named) if isinstance(named, list) and info.get("n_ops") == len(ops) else None
    send_of: dict[int, int] = {}
    pair_of: dict[tuple[int, int, int], int] = {}
    for op in ops[1:]:
        r = ops[op.id - 1]
        if fused is not None and r.id not in fused:
            continue
        if (
            op.kind == "send" and r.kind == "recv" and r.rank == op.rank and r.dst == op.src
            and chan[r.id] == chan[op.id] and set(op.deps) <= {r.id}
        ):
            key = (op.rank, chan[op.id], r.peer)
            if key in pair_of:
                if pair_of[key] != op.peer:
                    continue
            elif any(q == op.peer and k[:2] == key[:2] for k, q in pair_of.items()):
                continue
            pair_of[key] = op.peer
            send_of[r.id] = op.id
    return _Fusion(send_of, pair_of)


def _auto_fusions(s: Schedule, chan: list[int]) -> _Fusion:
    """Fuse where most of a receive stream is forwarded to one send peer."""
    ops = s.ops
    cands: dict[tuple[int, int], list[tuple[int, int, int, int]]] = {}  # (rank, chan) -> (p, q, recv, send)
    for op in ops:
        if op.kind != "send":
            continue
        rdeps = set(op.deps)
        for d in op.deps:
            r = ops[d]
            if r.kind != "recv" or r.dst != op.src or chan[r.id] != chan[op.id]:
                continue
            # the send must be ready as soon as the receive is done: its
            # other dependencies are the receive's, or earlier messages of
            # the two streams, which the shared threadblock runs first anyway
            rest = rdeps - {d} - set(r.deps)
            if all(
                ops[x].kind in ("send", "recv") and chan[x] == chan[op.id]
                and ops[x].peer == (op.peer if ops[x].kind == "send" else r.peer)
                for x in rest
            ):
                cands.setdefault((op.rank, chan[op.id]), []).append((r.peer, op.peer, r.id, op.id))
                break
    n_in: dict[tuple[int, int, int], int] = {}  # (rank, chan, recv peer) -> receives
    n_out: dict[tuple[int, int, int], int] = {}  # (rank, chan, send peer) -> sends
    for op in ops:
        key = (op.rank, chan[op.id], op.peer)
        if op.kind == "recv":
            n_in[key] = n_in.get(key, 0) + 1
        elif op.kind == "send":
            n_out[key] = n_out.get(key, 0) + 1
    send_of: dict[int, int] = {}
    pair_of: dict[tuple[int, int, int], int] = {}
    for (rank, c), lst in sorted(cands.items()):
        count: dict[tuple[int, int], int] = {}
        for p, q, _, _ in lst:
            count[(p, q)] = count.get((p, q), 0) + 1
        used_p, used_q = set(), set()
        for (p, q), k in sorted(count.items(), key=lambda kv: (-kv[1], kv[0])):
            # sharing a threadblock serializes both streams: worth it only
            # when most of their messages are forwarded ones
            if 2 * k < max(n_in[(rank, c, p)], n_out[(rank, c, q)]):
                continue
            if p not in used_p and q not in used_q:
                used_p.add(p)
                used_q.add(q)
                pair_of[(rank, c, p)] = q
        taken = set()
        for p, q, rid, sid in sorted(lst, key=lambda t: t[2]):
            if pair_of.get((rank, c, p)) == q and rid not in send_of and sid not in taken:
                send_of[rid] = sid
                taken.add(sid)
    return _Fusion(send_of, pair_of)


def _packed(s: Schedule, fusion: _Fusion, chan: list[int]) -> _Fusion:
    """``fusion`` with the streams it leaves alone paired into shared threadblocks.

    Per rank and channel, a receive stream and a send stream not yet
    sharing a threadblock share one: the two directions of one peer first,
    then the rest in peer order.
    """
    recv_peers: dict[tuple[int, int], set[int]] = {}
    send_peers: dict[tuple[int, int], set[int]] = {}
    for op in s.ops:
        if op.kind == "recv":
            recv_peers.setdefault((op.rank, chan[op.id]), set()).add(op.peer)
        elif op.kind == "send":
            send_peers.setdefault((op.rank, chan[op.id]), set()).add(op.peer)
    pair_of = dict(fusion.pair_of)
    for (rank, c), ps in sorted(recv_peers.items()):
        free_p = sorted(p for p in ps if (rank, c, p) not in pair_of)
        taken = {q for (r, cc, _), q in pair_of.items() if (r, cc) == (rank, c)}
        free_q = sorted(q for q in send_peers.get((rank, c), ()) if q not in taken)
        both = set(free_p) & set(free_q)
        for p in sorted(both):
            pair_of[(rank, c, p)] = p
        for p, q in zip([p for p in free_p if p not in both], [q for q in free_q if q not in both]):
            pair_of[(rank, c, p)] = q
    return _Fusion(fusion.send_of, pair_of)


# ---------------------------------------------------------------- 2. steps
def _steps(s: Schedule, fusion: _Fusion, chan: list[int]) -> tuple[list[Step], dict[int, int]]:
    """The steps (op order) and the step of every op."""
    ops = s.ops
    matches = s.matches
    recv_of = fusion.recv_of
    fused_sends = set(fusion.send_of.values())
    steps: list[Step] = []
    step_of: dict[int, int] = {}
    for op in ops:
        if op.id in fused_sends:
            continue
        c = chan[op.id]
        if op.kind == "send":
            tb = TbKey(op.peer, recv_of.get((op.rank, c, op.peer), -1), c)
            st = Step(op.rank, "s", (op.id,), op.src, ops[matches[op.id]].dst, op.count, tb)
        elif op.kind == "recv":
            sid = fusion.send_of.get(op.id)
            if sid is not None:
                t = "rrcs" if op.reduce else "rcs"
                st = Step(op.rank, t, (op.id, sid), op.dst, op.dst, op.count, TbKey(ops[sid].peer, op.peer, c))
            else:
                tb = TbKey(fusion.pair_of.get((op.rank, c, op.peer), -1), op.peer, c)
                if op.reduce:
                    st = Step(op.rank, "rrc", (op.id,), op.dst, op.dst, op.count, tb)
                else:
                    st = Step(op.rank, "r", (op.id,), ops[matches[op.id]].src, op.dst, op.count, tb)
        else:
            t = "cpy" if op.kind == "copy" else "re"
            st = Step(op.rank, t, (op.id,), op.src, op.dst, op.count, TbKey(-1, -1, op.channel))
        for x in st.ops:
            step_of[x] = len(steps)
        steps.append(st)
    return steps, step_of


# --------------------------------------------------------------- 3. places
def _place(s: Schedule, steps: list[Step], step_of: dict[int, int], order: str,
           times: Sequence[float] | None = None) -> bool:
    """Set every step's ``pos``: by op id (``given``), or by a global order of
    the ops in which (``rendezvous``) a send and its recv are one node, or
    (``buffered``) the recv follows the send, or (``timed``) the order in
    which the ops started in a simulation of ``s`` (``times``, a send and
    its recv one node). False if that order has a cycle."""
    if order == "given":
        for st in steps:
            st.pos = (st.ops[0],)
        return True
    ops = s.ops
    matches = s.matches
    merge = order in ("rendezvous", "timed")
    node_of = list(range(len(ops)))
    if merge:
        for op in ops:
            if op.kind == "send":
                node_of[op.id] = node_of[matches[op.id]] = min(op.id, matches[op.id])
    node_preds: list[set[int]] = [set() for _ in ops]
    for op in ops:
        b = node_of[op.id]
        pre = list(op.deps)
        if op.kind == "recv" and not merge:
            pre.append(matches[op.id])
        for d in pre:
            a = node_of[d]
            if a != b:
                node_preds[b].add(a)
    if order == "timed":
        if times is None:
            raise ScheduleError("the timed threadblock order needs the ops' simulated start times")
        timed = _priority_order(node_preds, key=lambda x: (times[x], x))
        if timed is None:
            return False
        node_pos = [0] * len(ops)
        for i, x in enumerate(timed):
            node_pos[x] = i
        for st in steps:
            st.pos = (node_pos[node_of[st.ops[0]]],)
        return True
    first = topological_order(node_preds)
    if first is None:
        return False
    level = [0] * len(ops)
    for x in first:
        for p in node_preds[x]:
            if level[x] < level[p] + 1:
                level[x] = level[p] + 1
    topo = topological_order(node_preds, key=lambda x: (level[x], x))
    if topo is None:  # not reached: ``first`` ordered the same graph
        return False
    node_pos = [0] * len(ops)
    for i, x in enumerate(topo):
        node_pos[x] = i
    # by when the step can start, then by when it ends (a fused step ends
    # a level later than a plain send of the same level), then -- for a
    # step that sends -- the same for the step receiving its message (so
    # that a stream goes first to the receiving step that can take it
    # first), then the order
    base = [(level[node_of[st.ops[0]]], level[node_of[st.ops[-1]]]) for st in steps]
    for i, st in enumerate(steps):
        snd = next((x for x in st.ops if ops[x].kind == "send"), None)
        far = base[step_of[matches[snd]]] if snd is not None else base[i]
        st.pos = base[i] + far + (node_pos[node_of[st.ops[0]]], st.ops[0])
    return True


# -------------------------------------------------------------- 4. streams
def _align_streams(s: Schedule, steps: list[Step], step_of: dict[int, int], chan: list[int]) -> bool:
    """Make both ends of every stream process its messages in the same order.

    A fused step sits in its threadblock at the place of its receive but
    sends later, so the sender's order of a stream can differ from the
    receiver's. The receiving steps of a stream keep the places they have
    and take them in the sender's order; this can move a fused step's send,
    so repeat until nothing changes (False if it does not settle).
    """
    matches = s.matches
    streams: dict[tuple[int, int, int], list[tuple[int, int]]] = {}
    for op in s.ops:
        if op.kind == "send":
            streams.setdefault((op.rank, op.peer, chan[op.id]), []).append((step_of[op.id], step_of[matches[op.id]]))
    for _ in range(len(streams) + 2):
        changed = False
        for key in sorted(streams):
            pairs = streams[key]
            by_sender = sorted(pairs, key=lambda p: steps[p[0]].pos)
            places = sorted(steps[r].pos for _, r in pairs)
            for (_, r), place in zip(by_sender, places):
                if steps[r].pos != place:
                    steps[r].pos = place
                    changed = True
        if not changed:
            return True
    return False


def _threadblocks(s: Schedule, steps: list[Step]):
    """Threadblocks per rank (ids in key order) with their steps sorted by ``pos``.

    Returns the keys per rank, the steps per rank and threadblock, each
    step's ``(tb index, logical index)``, and each step's predecessor in its
    threadblock (as a list of predecessor sets).
    """
    n = s.n_ranks
    tbs: list[list[TbKey]] = []
    tb_steps: list[list[list[Step]]] = []
    by_rank: list[list[int]] = [[] for _ in range(n)]
    for i, st in enumerate(steps):
        by_rank[st.rank].append(i)
    where: list[tuple[int, int]] = [(0, 0)] * len(steps)
    tb_preds: list[set[int]] = [set() for _ in steps]
    for r in range(n):
        keys = sorted({steps[i].tb for i in by_rank[r]})
        tbs.append(keys)
        idx = {k: j for j, k in enumerate(keys)}
        lists: list[list[int]] = [[] for _ in keys]
        for i in sorted(by_rank[r], key=lambda i: steps[i].pos):
            b = idx[steps[i].tb]
            where[i] = (b, len(lists[b]))
            if lists[b]:
                tb_preds[i].add(lists[b][-1])
            lists[b].append(i)
        tb_steps.append([[steps[i] for i in lst] for lst in lists])
    return tbs, tb_steps, where, tb_preds


def _scratch(s: Schedule) -> list[int]:
    """``s_chunks`` of every rank: one past the highest scratch chunk it touches."""
    scratch = [0] * s.n_ranks
    for op in s.ops:
        for ch in (op.src, op.dst):
            if ch is not None and ch.buf == "s":
                scratch[op.rank] = max(scratch[op.rank], ch.index + ch.count)
    return scratch


# -------------------------------------------------------------- 5. deadlock
def _step_order(s: Schedule, steps: list[Step], step_of: dict[int, int], tb_preds: list[set[int]]) -> list[int] | None:
    """A topological order of the steps under threadblock order + dependencies
    + send -> recv (by ``pos`` among the ready ones), or None on a cycle."""
    ops = s.ops
    matches = s.matches
    preds = [set(p) for p in tb_preds]
    for i, st in enumerate(steps):
        for x in st.ops:
            pre = list(ops[x].deps)
            if ops[x].kind == "recv":
                pre.append(matches[x])
            for d in pre:
                j = step_of[d]
                if j != i:
                    preds[i].add(j)
    return _priority_order(preds, key=lambda i: steps[i].pos)


def _priority_order(preds: list[set[int]], key) -> list[int] | None:
    """``topological_order(preds, key=key)``: among the ready nodes, the smallest ``key`` first.

    Where the nodes sorted by ``key`` already follow every edge (the timed
    layout: the order they ran in) that sort is the answer, found in
    ``n log n`` without building a graph; else the priority order proper.
    """
    order = sorted(range(len(preds)), key=key)
    at = [0] * len(preds)
    for i, x in enumerate(order):
        at[x] = i
    if all(at[p] < at[x] for x in range(len(preds)) for p in preds[x]):
        return order
    return topological_order(preds, key=key)


# ---------------------------------------------------------- 6. dependencies
def _dependencies(s, steps, step_of, where, tbs, step_order) -> None:
    """Fill ``deps`` (kept cross-threadblock dependencies) and ``hasdep``.

    A dependency implied by another kept one (or by the threadblock's
    earlier steps) is dropped, using a vector clock per step: the highest
    step index of each threadblock of the gpu known to be complete.
    """
    ops = s.ops
    vc: dict[int, np.ndarray] = {}
    last_in_tb: dict[tuple[int, int], int] = {}  # (rank, tb) -> step processed last
    at = {(steps[i].rank,) + where[i]: i for i in range(len(steps))}
    topo_index = [0] * len(steps)
    for t, i in enumerate(step_order):
        topo_index[i] = t
    for i in step_order:
        st = steps[i]
        b, k = where[i]
        targets: dict[int, int] = {}
        own = set(st.ops)
        for x in st.ops:
            for d in ops[x].deps:
                if d in own:
                    continue
                tb_d, k_d = where[step_of[d]]
                if tb_d != b and targets.get(tb_d, -1) < k_d:
                    targets[tb_d] = k_d
        prev = last_in_tb.get((st.rank, b))
        clock = vc[prev].copy() if prev is not None else np.full(len(tbs[st.rank]), -1, dtype=np.int64)
        kept = []
        # later targets (in a topological order) first: they imply more
        for tb_d, k_d in sorted(targets.items(), key=lambda t: topo_index[at[(st.rank,) + t]], reverse=True):
            if clock[tb_d] >= k_d:
                continue
            kept.append((tb_d, k_d))
            np.maximum(clock, vc[at[(st.rank, tb_d, k_d)]], out=clock)
        clock[b] = k
        vc[i] = clock
        last_in_tb[(st.rank, b)] = i
        st.deps = sorted(kept)
        for tb_d, k_d in kept:
            steps[at[(st.rank, tb_d, k_d)]].hasdep = True
    # The runtime chains back-to-back reductions of one destination with the
    # first one's count; mark the first so that a different count is not chained.
    for i, st in enumerate(steps):
        nxt = at.get((st.rank, where[i][0], where[i][1] + 1))
        if nxt is None:
            continue
        t = steps[nxt]
        if (
            st.type == "re" and t.type == "re" and not t.deps and st.dst.buf == t.dst.buf
            and st.dst.index == t.dst.index and st.src.buf == t.src.buf and st.cnt != t.cnt
        ):
            st.hasdep = True


# -------------------------------------------------------------------- XML
def layout_xml(s: Schedule, layout: Layout, *, name, proto, coll, inplace, min_bytes, max_bytes) -> str:
    """The MSCCL XML text of ``layout`` (a layout of ``s``), with these ``<algo>`` attributes.

    It does not check the runtimes' limits: :mod:`.fit` chooses layouts that keep them.
    """
    coll_obj = s.collective
    nchan = max((key.chan + 1 for keys in layout.tbs for key in keys), default=1)
    algo = ET.Element("algo")
    attrs = {
        "name": name,
        "proto": proto,
        "nchannels": nchan,
        "nchunksperloop": coll_obj.size_chunks,
        "ngpus": s.n_ranks,
        "coll": coll,
        "inplace": int(bool(inplace)),
        "outofplace": int(not inplace),
        "minBytes": min_bytes,
        "maxBytes": max_bytes,
    }
    if coll_obj.rooted:
        attrs["root"] = coll_obj.root  # not read by the runtimes; kept so the reader knows the root
    for k, v in attrs.items():
        algo.set(k, str(v))
    for r in range(s.n_ranks):
        _gpu_xml(algo, s, layout, r)
    ET.indent(algo, space="  ")
    text = ET.tostring(algo, encoding="unicode")
    # ElementTree writes "<step ... />"; the runtimes' hand-written parsers
    # expect msccl-tools' "<step .../>" (the space would read as an empty attribute).
    return text.replace(" />", "/>") + "\n"


def _gpu_xml(algo: ET.Element, s: Schedule, layout: Layout, r: int) -> None:
    """Write ``<gpu id=r>`` into ``algo``."""
    coll = s.collective
    g = ET.SubElement(algo, "gpu")
    for k, v in (("id", r), ("i_chunks", coll.in_chunks), ("o_chunks", coll.out_chunks), ("s_chunks", layout.scratch[r])):
        g.set(k, str(v))
    lists = layout.steps[r]
    # physical indices: a step with m dependencies is preceded by m-1 nops
    phys: list[list[int]] = []
    for lst in lists:
        p, out = 0, []
        for st in lst:
            p += max(len(st.deps) - 1, 0)
            out.append(p)
            p += 1
        phys.append(out)
    for b, (key, lst) in enumerate(zip(layout.tbs[r], lists)):
        tb = ET.SubElement(g, "tb")
        for k, v in (("id", b), ("send", key.send), ("recv", key.recv), ("chan", key.chan)):
            tb.set(k, str(v))
        p = 0
        for st in lst:
            deps = [(d_tb, phys[d_tb][d_k]) for d_tb, d_k in st.deps]
            for d_tb, d_s in deps[:-1]:
                _step_xml(tb, p, "nop", None, None, 0, d_tb, d_s, False)
                p += 1
            d_tb, d_s = deps[-1] if deps else (-1, -1)
            _step_xml(tb, p, st.type, st.src, st.dst, st.cnt, d_tb, d_s, st.hasdep)
            p += 1


def _step_xml(tb, s, type_, src, dst, cnt, depid, deps, hasdep) -> None:
    e = ET.SubElement(tb, "step")
    e.set("s", str(s))
    e.set("type", type_)
    e.set("srcbuf", src.buf if src is not None else "i")
    e.set("srcoff", str(src.index) if src is not None else "-1")
    e.set("dstbuf", dst.buf if dst is not None else "o")
    e.set("dstoff", str(dst.index) if dst is not None else "-1")
    e.set("cnt", str(cnt))
    e.set("depid", str(depid))
    e.set("deps", str(deps))
    e.set("hasdep", "1" if hasdep else "0")
