"""Schedule -> schedule transforms that keep what a schedule computes.

Each transform returns a new :class:`~ccsynth.collectives.schedule.Schedule`
(the input is never changed) that implements the same collective, so a
verified schedule stays verifiable. They know nothing of file formats; an
exporter applies the ones its runtime needs (MSCCL XML:
:mod:`ccsynth.formats.msccl.export` cuts long ranges, runs instances side
by side, spreads peers over channels, aliases buffers in place, and
merges and splits streams until every threadblock fits the runtime).

* :func:`split_long_ranges` -- no op moves more than ``max_count`` chunks;
* :func:`replicate_instances` -- ``k`` copies side by side, each on its own
  channels and its own share of every chunk (msccl-tools' "instances");
* :func:`spread_channels` -- at most ``limit`` send (and receive) peers per
  rank and channel;
* :func:`merge_transfers` -- runs of consecutive transfers of one stream
  whose ranges follow each other become one transfer (fewer, larger
  messages: what a smaller chunk factor would have sent);
* :func:`split_streams` -- the messages of a stream (and the local ops of a
  rank and channel) spread, in consecutive blocks, over more channels;
* :func:`alias_in_place` -- the in-place form (``Schedule.in_place``): every
  range where it is stored once input and output are one buffer.

Dependencies carry over: a new op inherits the dependencies of the op it
comes from, each pointing at every new op that replaces the old target (so
"the old op is done" still means what it meant). Ops are renumbered in
order; send/receive matching is preserved because both ends of a transfer
are cut the same way and keep their relative order.

Example:
    >>> from ccsynth.collectives.spec import Collective
    >>> from ccsynth.collectives.builder import ScheduleBuilder
    >>> b = ScheduleBuilder(Collective("allgather", 2, 4), "pairwise")
    >>> for r in range(2):
    ...     _ = b.copy(r, ("i", 0, 4), ("o", 4 * r, 4))
    >>> _ = b.transfer(0, 1, ("i", 0, 4), ("o", 0, 4)); _ = b.transfer(1, 0, ("i", 0, 4), ("o", 4, 4))
    >>> s = b.build()
    >>> len(split_long_ranges(s, 2).ops), replicate_instances(s, 2).collective.chunk_factor
    (12, 8)
    >>> alias_in_place(s).in_place, [op.kind for op in alias_in_place(s).ops]
    (True, ['send', 'recv', 'send', 'recv'])
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import pairwise
from collections.abc import Callable, Iterable

from ccsynth.collectives.schedule import Chunks, Op, Schedule, in_place_storage
from ccsynth.collectives.spec import Collective
from ccsynth.errors import ScheduleError
from ccsynth.graphs import topological_order

__all__ = [
    "channels_used",
    "split_long_ranges",
    "replicate_instances",
    "spread_channels",
    "merge_transfers",
    "split_streams",
    "alias_in_place",
]


def channels_used(schedule: Schedule) -> int:
    """How many channels ``schedule`` uses (its highest channel + 1; 1 for none)."""
    return max((op.channel for op in schedule.ops), default=0) + 1


# ------------------------------------------------------------- rebuilding
@dataclass(frozen=True)
class _Draft:
    """A new op: the fields it gets, and the old op (and instance) it replaces."""

    old: int
    rank: int
    kind: str
    src: Chunks | None
    dst: Chunks | None
    peer: int
    reduce: bool
    channel: int
    instance: int = 0


def _draft(op: Op, src: Chunks | None, dst: Chunks | None, *, channel: int | None = None, instance: int = 0) -> _Draft:
    return _Draft(op.id, op.rank, op.kind, src, dst, op.peer, op.reduce,
                  op.channel if channel is None else channel, instance)


def _rebuild(
    schedule: Schedule,
    drafts: list[_Draft],
    deps_of: Callable[[_Draft], Iterable[int]],
    **changes,
) -> Schedule:
    """The schedule of ``drafts`` (new op ``i`` is ``drafts[i]``; ``deps_of`` gives its new deps)."""
    ops = tuple(
        Op(i, d.rank, d.kind, d.src, d.dst, d.peer, d.reduce, tuple(sorted(set(deps_of(d)))), d.channel)
        for i, d in enumerate(drafts)
    )
    return replace(schedule, ops=ops, meta=dict(schedule.meta), **changes)


def _replacements(drafts: list[_Draft]) -> dict[int, list[int]]:
    """Old op id -> the new ops that replace it (what "the old op is done" means now)."""
    out: dict[int, list[int]] = {}
    for i, d in enumerate(drafts):
        out.setdefault(d.old, []).append(i)
    return out


# ---------------------------------------------------------- long ranges
def split_long_ranges(schedule: Schedule, max_count: int) -> Schedule:
    """Cut every op moving more than ``max_count`` chunks into consecutive pieces.

    A send and its receive are cut at the same offsets, so the k-th piece of
    one meets the k-th piece of the other. Ops that depended on the long op
    depend on all of its pieces.
    """
    if all(op.count <= max_count for op in schedule.ops):
        return schedule
    drafts = []
    for op in schedule.ops:
        for lo in range(0, op.count, max_count):
            k = min(max_count, op.count - lo)
            src = Chunks(op.src.buf, op.src.index + lo, k) if op.src is not None else None
            dst = Chunks(op.dst.buf, op.dst.index + lo, k) if op.dst is not None else None
            drafts.append(_draft(op, src, dst))
    new_of = _replacements(drafts)
    ops = schedule.ops
    return _rebuild(schedule, drafts, lambda d: (j for dep in ops[d.old].deps for j in new_of[dep]))


# ------------------------------------------------------------ instances
def replicate_instances(schedule: Schedule, instances: int) -> Schedule:
    """``instances`` copies of ``schedule`` side by side (msccl-tools' "instances").

    Every chunk is cut into ``instances`` sub-chunks; copy ``i`` moves
    sub-chunk ``i`` of every chunk on channels shifted by ``i`` times the
    channels the schedule uses. The chunk factor grows by ``instances``. For
    input and output buffers, chunk ``x`` of a piece of ``c`` chunks becomes
    chunk ``(x // c) * c * k + i * c + x % c`` (contiguous inside a piece, so
    the collective's layout -- and an in-place aliasing -- holds); ranges
    crossing pieces are split. Scratch chunk ``y`` of copy ``i`` becomes
    ``i * S + y``.
    """
    k = instances
    if k == 1:
        return schedule
    coll = schedule.collective
    c = coll.chunk_factor
    S = schedule.scratch_chunks
    C = channels_used(schedule)

    def pieces(ch: Chunks, i: int) -> list[Chunks]:
        if ch.buf == "s":
            return [Chunks("s", i * S + ch.index, ch.count)]
        out = []
        x, end = ch.index, ch.index + ch.count
        while x < end:
            stop = min(end, (x // c + 1) * c)
            out.append(Chunks(ch.buf, (x // c) * c * k + i * c + x % c, stop - x))
            x = stop
        return out

    ops = schedule.ops
    matches = schedule.matches
    drafts = []
    for op in ops:
        for i in range(k):
            # cut src and dst -- and, for a transfer, the other end's range --
            # at common boundaries, so both ends move the same pieces
            if op.kind == "send":
                a, _ = _common_cuts(pieces(op.src_chunks, i), pieces(ops[matches[op.id]].dst_chunks, i))
                cuts: list[tuple[Chunks | None, Chunks | None]] = [(x, None) for x in a]
            elif op.kind == "recv":
                _, b = _common_cuts(pieces(ops[matches[op.id]].src_chunks, i), pieces(op.dst_chunks, i))
                cuts = [(None, x) for x in b]
            else:
                a, b = _common_cuts(pieces(op.src_chunks, i), pieces(op.dst_chunks, i))
                cuts = list(zip(a, b))
            drafts += [_draft(op, src, dst, channel=op.channel + i * C, instance=i) for src, dst in cuts]
    of_instance: dict[tuple[int, int], list[int]] = {}
    for j, d in enumerate(drafts):
        of_instance.setdefault((d.old, d.instance), []).append(j)
    return _rebuild(
        schedule,
        drafts,
        lambda d: (j for dep in ops[d.old].deps for j in of_instance[(dep, d.instance)]),
        collective=Collective(coll.kind, coll.n_ranks, c * k, coll.root),
        scratch_chunks=S * k,
    )


def _common_cuts(a: list[Chunks], b: list[Chunks]) -> tuple[list[Chunks], list[Chunks]]:
    """Refine two cuts of equal total length to common piece boundaries."""
    bounds = set()
    for cut in (a, b):
        pos = 0
        for p in cut:
            pos += p.count
            bounds.add(pos)
    edges = sorted(bounds)

    def refine(cut: list[Chunks]) -> list[Chunks]:
        out = []
        pos = 0
        for p in cut:
            start = pos
            for e in edges:
                if start < e <= pos + p.count:
                    out.append(Chunks(p.buf, p.index + (start - pos), e - start))
                    start = e
            pos += p.count
        return out

    return refine(a), refine(b)


# -------------------------------------------------------------- channels
def spread_channels(schedule: Schedule, limit: int) -> Schedule:
    """Move transfers to more channels where a rank would have more than
    ``limit`` send or receive peers on one channel.

    Each stream (sender, receiver, channel) moves as a whole, to the first
    channel ``channel + k * C`` (``C``: channels in use) where both its sender
    and its receiver have room; the schedule is unchanged otherwise.
    """
    ops = schedule.ops
    sends: dict[tuple[int, int], set[int]] = {}
    recvs: dict[tuple[int, int], set[int]] = {}
    for op in ops:
        if op.kind == "send":
            sends.setdefault((op.rank, op.channel), set()).add(op.peer)
            recvs.setdefault((op.peer, op.channel), set()).add(op.rank)
    if all(len(v) <= limit for v in sends.values()) and all(len(v) <= limit for v in recvs.values()):
        return schedule
    C = channels_used(schedule)
    n_send: dict[tuple[int, int], int] = {}
    n_recv: dict[tuple[int, int], int] = {}
    moved: dict[tuple[int, int, int], int] = {}
    for op in ops:
        if op.kind != "send" or (op.rank, op.peer, op.channel) in moved:
            continue
        k = 0
        while True:
            c = op.channel + k * C
            if n_send.get((op.rank, c), 0) < limit and n_recv.get((op.peer, c), 0) < limit:
                break
            k += 1
        n_send[(op.rank, c)] = n_send.get((op.rank, c), 0) + 1
        n_recv[(op.peer, c)] = n_recv.get((op.peer, c), 0) + 1
        moved[(op.rank, op.peer, op.channel)] = c
    matches = schedule.matches
    new_ops = []
    for op in ops:
        if op.kind == "send":
            c = moved[(op.rank, op.peer, op.channel)]
        elif op.kind == "recv":
            snd = ops[matches[op.id]]
            c = moved[(snd.rank, snd.peer, snd.channel)]
        else:
            c = op.channel
        new_ops.append(replace(op, channel=c) if c != op.channel else op)
    return replace(schedule, ops=tuple(new_ops), meta=dict(schedule.meta))


# ------------------------------------------------------------- merging
def merge_transfers(schedule: Schedule, factor: int, max_count: int) -> Schedule:
    """Merge runs of up to ``factor`` consecutive transfers of one stream into one.

    A stream is the transfers from one rank to another on one channel, in
    order. Transfers ``k`` and ``k + 1`` of a stream join a run when the
    send ranges follow each other in one buffer, so do the receive ranges,
    the receives agree on ``reduce``, and the run stays within
    ``max_count`` chunks. The merged send waits for what every send of the
    run waited for, and so does the merged receive; whatever waited for
    one op of the run waits for the merged one.

    Only transfers at the same *level* merge: the length of the longest
    dependency chain before them, a matched send and receive counting as
    one node. No chain leads from one transfer of a level to another, and
    every remaining dependency still goes from a lower level to a higher,
    so merging never creates a dependency cycle (a deadlock). In a
    pipelined schedule the pieces of one chunk travel each hop at one
    level: a run is what a smaller chunk factor would have sent at once.
    """
    if isinstance(factor, bool) or not isinstance(factor, int) or factor < 1:
        raise ScheduleError(f"merge factor must be a positive integer, got {factor!r}")
    if factor == 1:
        return schedule
    ops = schedule.ops
    matches = schedule.matches
    level = _transfer_levels(schedule, matches)
    streams: dict[tuple[int, int, int], list[Op]] = {}
    for op in ops:
        if op.kind == "send":
            streams.setdefault((op.rank, op.peer, op.channel), []).append(op)
    group: dict[int, int] = {}  # op id -> first op id of its run (sends and receives)
    for sends in streams.values():
        head, last, length, chunks = sends[0], sends[0], 0, 0
        for s in sends:
            if length and length < factor and chunks + s.count <= max_count and _extends(last, s, head, ops, matches, level):
                length, chunks = length + 1, chunks + s.count
            else:
                head, length, chunks = s, 1, s.count
            last = s
            if head is not s:
                group[s.id] = head.id
                group[matches[s.id]] = matches[head.id]
    if not group:
        return schedule
    members: dict[int, list[Op]] = {}
    for op in ops:
        members.setdefault(group.get(op.id, op.id), []).append(op)
    drafts = []
    for op in ops:
        if group.get(op.id, op.id) != op.id:
            continue  # merged into the first op of its run
        run = members[op.id]
        if len(run) == 1:
            drafts.append(_draft(op, op.src, op.dst))
            continue
        n = sum(m.count for m in run)
        src = Chunks(op.src.buf, op.src.index, n) if op.src is not None else None
        dst = Chunks(op.dst.buf, op.dst.index, n) if op.dst is not None else None
        drafts.append(_draft(op, src, dst))
    new_of = {d.old: i for i, d in enumerate(drafts)}
    target = {op.id: new_of[group.get(op.id, op.id)] for op in ops}

    def deps_of(d: _Draft) -> list[int]:
        me = new_of[d.old]
        return [target[x] for m in members[d.old] for x in m.deps if target[x] != me]

    return _rebuild(schedule, drafts, deps_of)


def _extends(last: Op, s: Op, head: Op, ops, matches, level) -> bool:
    """Whether send ``s`` may join the run of ``head`` that ``last`` (the send before it) ends."""
    if level[s.id] != level[head.id]:
        return False
    r_last, r = ops[matches[last.id]], ops[matches[s.id]]
    return (
        r.reduce == r_last.reduce
        and _follows(last.src_chunks, s.src_chunks)
        and _follows(r_last.dst_chunks, r.dst_chunks)
    )


def _follows(a: Chunks, b: Chunks) -> bool:
    return a.buf == b.buf and b.index == a.index + a.count


def _transfer_levels(schedule: Schedule, matches: dict[int, int]) -> list[int]:
    """Longest dependency chain before every op; a send and its receive are one node."""
    ops = schedule.ops
    node = [min(op.id, matches[op.id]) if op.kind in ("send", "recv") else op.id for op in ops]
    preds: list[set[int]] = [set() for _ in ops]
    for op in ops:
        preds[node[op.id]].update(node[d] for d in op.deps)
    order = topological_order(preds, depth_first=True)
    if order is None:
        raise ScheduleError(f"schedule {schedule.name!r} has a dependency cycle; its transfers cannot be merged")
    level = [0] * len(ops)
    for v in order:
        for p in preds[v]:
            if level[v] < level[p] + 1:
                level[v] = level[p] + 1
    return [level[node[i]] for i in range(len(ops))]


# ------------------------------------------------------------- splitting
def split_streams(
    schedule: Schedule,
    parts: dict[tuple[int, int, int], int],
    local_parts: dict[tuple[int, int], int] | None = None,
    *,
    keep_order: bool = False,
) -> Schedule:
    """Spread the messages of streams (and local ops) over more channels.

    ``parts[(sender, receiver, channel)] = k`` cuts that stream's messages,
    in order, into ``k`` consecutive blocks of (nearly) equal length; block
    ``j`` moves to channel ``channel + j * C`` (``C``: channels in use), its
    receives with it. ``local_parts[(rank, channel)] = k`` does the same for
    the copies and reductions of a rank on a channel. Streams and ranks not
    named keep their channel. Dependencies do not change: blocks on
    different channels may now run side by side where nothing orders them.
    Consecutive blocks (rather than every k-th message) keep a pipeline's
    order: a later block mostly carries what arrives later anyway, instead
    of taking bandwidth from the messages the next hop waits for.
    ``keep_order``: the first send of every block after the first also
    waits for the last send of the block before it, so the blocks of a
    stream still take the link one after another, as the one stream did
    (without it, a later block that is ready early shares the link with the
    earlier one and slows the messages the next hop waits for).
    """
    local_parts = local_parts or {}
    for key, k in (*parts.items(), *local_parts.items()):
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ScheduleError(f"stream {key} must be cut into a positive number of parts, got {k!r}")
    if not any(k > 1 for k in parts.values()) and not any(k > 1 for k in local_parts.values()):
        return schedule
    ops = schedule.ops
    matches = schedule.matches
    C = channels_used(schedule)
    members: dict[tuple, list[int]] = {}
    for op in ops:
        if op.kind == "send":
            members.setdefault(("s", op.rank, op.peer, op.channel), []).append(op.id)
        elif op.kind != "recv":
            members.setdefault(("l", op.rank, op.channel), []).append(op.id)
    channel = [op.channel for op in ops]
    # one lookup for both: a stream's key has three ints, a rank's two, so they never collide
    parts_of: dict[tuple[int, ...], int] = dict((*parts.items(), *local_parts.items()))
    for key, ids in members.items():
        k = parts_of.get(key[1:], 1)
        m = len(ids)
        for i, x in enumerate(ids):
            c = ops[x].channel + (i * k // m) * C
            channel[x] = c
            if key[0] == "s":
                channel[matches[x]] = c
    # first send of a block -> last send of the block before it
    extra: dict[int, int] = {
        b: a
        for key, ids in members.items() if keep_order and key[0] == "s"
        for a, b in pairwise(ids) if channel[a] != channel[b]
    }
    new_ops = tuple(
        replace(op, channel=channel[op.id], deps=tuple(sorted({*op.deps, extra[op.id]})) if op.id in extra else op.deps)
        if channel[op.id] != op.channel or op.id in extra else op
        for op in ops
    )
    return replace(schedule, ops=new_ops, meta=dict(schedule.meta))


# -------------------------------------------------------------- in place
def alias_in_place(schedule: Schedule, *, input_copy: int | None = None) -> Schedule:
    """The in-place form of ``schedule`` (``in_place=True``, see :mod:`ccsynth.collectives.schedule`).

    Every range is replaced by where it is stored once input and output are
    one buffer; a copy that then reads and writes the same chunks does
    nothing and is dropped (what waited for it waits for what it waited
    for). ``input_copy``: scratch chunks ``[input_copy, input_copy +
    in_chunks)`` hold a copy of the input taken first (how an out-of-place
    schedule keeps the input of an in-place file that overwrites it): they
    are the input again. Raises :class:`~ccsynth.errors.ScheduleError` if an
    op would read and write overlapping chunks of the one buffer.
    """
    if schedule.in_place:
        return schedule
    coll = schedule.collective

    def stored(rank: int, ch: Chunks | None) -> Chunks | None:
        if ch is None:
            return None
        if input_copy is not None and ch.buf == "s" and input_copy <= ch.index < input_copy + coll.in_chunks:
            ch = Chunks("i", ch.index - input_copy, ch.count)
        return in_place_storage(coll, rank, ch)

    drafts = []
    dropped: dict[int, tuple[int, ...]] = {}
    for op in schedule.ops:
        src, dst = stored(op.rank, op.src), stored(op.rank, op.dst)
        if op.kind == "copy" and src == dst:
            dropped[op.id] = op.deps
            continue
        if src is not None and dst is not None and src.buf == dst.buf:
            a, b = src.indices(), dst.indices()
            if a.start < b.stop and b.start < a.stop:
                raise ScheduleError(
                    f"schedule {schedule.name!r} cannot run in place: {op.describe()} would read and write "
                    f"overlapping chunks once input and output are one buffer"
                )
        drafts.append(_draft(op, src, dst))
    new_of = _replacements(drafts)

    def resolve(d: int) -> list[int]:
        if d in dropped:
            return [j for e in dropped[d] for j in resolve(e)]
        return new_of[d]

    ops = schedule.ops
    return _rebuild(schedule, drafts, lambda d: (j for dep in ops[d.old].deps for j in resolve(dep)), in_place=True)
