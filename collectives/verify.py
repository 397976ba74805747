"""Prove that a schedule implements its collective (SCCL / msccl-tools style).

:func:`verify` checks a :class:`~ccsynth.collectives.schedule.Schedule`
without running it, in this order, and raises
:class:`~ccsynth.errors.ScheduleError` at the first problem with a message
that names the rank, the chunk and the operation:

1. *matching* -- every send has its receive and both move the same number
   of chunks (:attr:`Schedule.matches`);
2. *links* (only with a topology) -- the topology has as many ranks as the
   collective and a connection for every send ``a -> b``;
3. *deadlock freedom* -- intra-rank dependencies plus ``send -> recv`` edges
   form an acyclic graph (a receive waits for its send; a send completes on
   its own, like ``MPI_Isend``, so there is no ``recv -> send`` edge);
4. *race freedom* -- two ops of one rank that touch the same chunk, at least
   one of them writing it, are ordered by happens-before (paths through
   other ranks count); otherwise the result would depend on timing;
5. *symbolic execution* -- chunk values (sorted tuples of contributions,
   see :mod:`ccsynth.collectives.spec`) flow through the ops in a
   topological order; reading a chunk nothing wrote, or reducing one
   contribution into a chunk twice, is an error. Race freedom makes every
   topological order give the same result;
6. *postcondition* -- every output chunk named by
   :meth:`Collective.postcondition` holds exactly the required value.

An in-place schedule (``Schedule.in_place``) is checked on its one buffer:
stages 4 to 6 address every chunk by its storage (:meth:`Schedule.storage`),
so an input chunk and the output chunk it aliases are the same chunk.

Each chunk keeps its last writer and the readers since; a new access is
tested only against those, and nearly always a direct dependency orders the
two (the builder adds one for every conflict). Only the pairs that none
does need reachability: per op, a Python-int bitset of the ops those pairs
ask about among its ancestors; a bitset is dropped as soon as the last
successor of its op has been visited, and the topological order is
depth-first (:func:`ccsynth.graphs.topological_order` with ``depth_first``)
so that few bitsets are alive at once.

Example:
    >>> from ccsynth.collectives.spec import Collective
    >>> from ccsynth.collectives.builder import ScheduleBuilder
    >>> b = ScheduleBuilder(Collective("allgather", 2), "pairwise")
    >>> for r in range(2):
    ...     _ = b.copy(r, ("i", 0), ("o", r))
    >>> _ = b.transfer(0, 1, ("i", 0), ("o", 0))
    >>> _ = b.transfer(1, 0, ("i", 0), ("o", 1))
    >>> verify(b.build())
    VerifyReport(n_ops=6, n_transfers=2, n_bytes_moved_chunks=2, max_depth=2, ranks=2, error=None)
    >>> bad = ScheduleBuilder(Collective("allgather", 2), "half")
    >>> _ = bad.copy(0, ("i", 0), ("o", 0))
    >>> is_valid(bad.build())
    False
    >>> report = verify(bad.build(), raise_on_error=False)
    >>> report.ok, report.error
    (False, 'rank 0 output o[1] is uninitialised (no op writes it) but allgather needs (1,0)')
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from ccsynth.collectives.gc_pause import gc_paused
from ccsynth.collectives.schedule import Chunks, Op, Schedule
from ccsynth.collectives.spec import Contribution, Value
from ccsynth.errors import ScheduleError
from ccsynth.graphs import dependency_cycle, topological_order
import itertools

if TYPE_CHECKING:  # pragma: no cover
    from ccsynth.topologies.model import Topology

__all__ = ["VerifyReport", "verify", "is_valid"]

log = logging.getLogger(__name__)

# How many items an error message lists before saying "and N more".
_MAX_LISTED = 3
_MAX_CYCLE_OPS = 6


@dataclass(frozen=True)
class VerifyReport:
    """What :func:`verify` found, with a few size figures of the schedule.

    ``ok`` is true when every stage passed; otherwise ``error`` holds the
    first problem (the message :func:`verify` raises as
    :class:`~ccsynth.errors.ScheduleError` by default) and ``max_depth`` is
    0 if the dependency order was not reached.
    ``n_bytes_moved_chunks`` is the sum of the chunk counts of all sends
    (multiply by the chunk size in bytes for bytes on the wire);
    ``max_depth`` is the number of ops on the longest dependency chain
    (a receive counts as one step after its send).
    """

    n_ops: int
    n_transfers: int
    n_bytes_moved_chunks: int
    max_depth: int
    ranks: int
    error: str | None = None

    @property
    def ok(self) -> bool:
        """True if the schedule implements its collective (and fits the topology it was checked on)."""
        return self.error is None

    def to_dict(self) -> dict:
        return {**asdict(self), "ok": self.ok}


def verify(schedule: Schedule, topology: Topology | None = None, *, raise_on_error: bool = True) -> VerifyReport:
    """Prove that ``schedule`` implements ``schedule.collective``.

    With ``topology``, also check that it has the collective's rank count and
    that every send uses one of its connections. Raises
    :class:`~ccsynth.errors.ScheduleError` naming the rank, chunk and op at
    fault (with ``raise_on_error=False``, returns a report whose ``ok`` is
    false and whose ``error`` is that message); returns a
    :class:`VerifyReport` with ``ok`` true otherwise.
    """
    try:
        with gc_paused():  # millions of acyclic table entries (see ccsynth.collectives.gc_pause)
            max_depth = _prove(schedule, topology)
    except ScheduleError as e:
        if raise_on_error:
            raise
        log.debug("schedule %r is invalid: %s", schedule.name, e)
        return _report(schedule, 0, str(e))
    report = _report(schedule, max_depth, None)
    log.debug("verified %r (%s): %s", schedule.name, schedule.collective.describe(), report)
    return report


def _prove(schedule: Schedule, topology: Topology | None) -> int:
    """Stages 1 to 6 (raising at the first problem); returns the longest dependency chain."""
    matches = schedule.matches  # raises on unmatched sends/recvs and count mismatches
    if topology is not None:
        _check_topology(schedule, topology)
    preds, n_succs = _graph(schedule, matches)
    order, max_depth = _topological_order(schedule, preds)
    ranges = _ranges(schedule)
    _check_races(schedule, order, preds, n_succs, ranges)
    final, last_writer = _execute(schedule, order, matches, ranges)
    _check_postcondition(schedule, final, last_writer)
    return max_depth


def _report(schedule: Schedule, max_depth: int, error: str | None) -> VerifyReport:
    sends = [op for op in schedule.ops if op.kind == "send"]
    return VerifyReport(n_ops=len(schedule.ops), n_transfers=len(sends), n_bytes_moved_chunks=sum(op.count for op in sends),
                        max_depth=max_depth, ranks=schedule.n_ranks, error=error)


def is_valid(schedule: Schedule, topology: Topology | None = None) -> bool:
    """True if :func:`verify` accepts ``schedule`` (on ``topology``)."""
    return verify(schedule, topology, raise_on_error=False).ok


# --------------------------------------------------------------- 2. links
def _check_topology(schedule: Schedule, topology: Topology) -> None:
    coll = schedule.collective
    if topology.n_ranks != coll.n_ranks:
        raise ScheduleError(
            f"topology {topology.name!r} has {topology.n_ranks} ranks but schedule {schedule.name!r} "
            f"needs {coll.n_ranks} ({coll.describe()})"
        )
    for op in schedule.ops:
        if op.kind == "send" and not topology.has_connection(op.rank, op.peer):
            raise ScheduleError(
                f"{op.describe()} uses no link: topology {topology.name!r} has no connection {op.rank}->{op.peer}"
            )


# ----------------------------------------------------------- 3. deadlock
def _graph(schedule: Schedule, matches: dict[int, int]) -> tuple[list[tuple[int, ...]], list[int]]:
    """Predecessors (deps, plus send -> matching recv) of every op, and how many successors each has."""
    n = len(schedule.ops)
    preds: list[tuple[int, ...]] = [()] * n
    n_succs = [0] * n
    for op in schedule.ops:
        p = op.deps
        if op.kind == "recv":
            p = (*p, matches[op.id])
        if len(p) > 1 and len(set(p)) != len(p):
            p = tuple(dict.fromkeys(p))
        preds[op.id] = p
        for d in p:
            n_succs[d] += 1
    return preds, n_succs


def _topological_order(schedule: Schedule, preds: list[tuple[int, ...]]) -> tuple[list[int], int]:
    """A depth-first topological order (few bitsets alive at once) and the longest chain in ops.

    Raises :class:`ScheduleError` naming the ops of a dependency cycle.
    """
    order = topological_order(preds, depth_first=True)
    if order is None:
        raise ScheduleError(_describe_cycle(schedule, dependency_cycle(preds)))
    depth = [0] * len(preds)
    for x in order:
        d = 0
        for p in preds[x]:
            if depth[p] > d:
                d = depth[p]
        depth[x] = d + 1
    return order, max(depth, default=0)


def _describe_cycle(schedule: Schedule, cycle: list[int]) -> str:
    """The ops of ``cycle`` (in execution order: each waits for the one before it) and their ranks."""
    ops = schedule.ops
    shown = " -> ".join(ops[i].describe() for i in cycle[:_MAX_CYCLE_OPS])
    more = f" -> ... ({len(cycle) - _MAX_CYCLE_OPS} more)" if len(cycle) > _MAX_CYCLE_OPS else ""
    ranks = sorted({ops[i].rank for i in cycle})
    return (
        f"schedule {schedule.name!r} deadlocks: dependency cycle of {len(cycle)} op(s) on rank(s) "
        f"{', '.join(map(str, ranks))}: {shown}{more} -> back to op {cycle[0]} "
        "(each op waits for the one before it; a recv waits for its matching send)"
    )


# -------------------------------------------------------------- 4. races
#: a chunk's key in the verifier's tables: (rank, buffer, index) packed in one int (no tuple per access)
_BUF_BITS = {"i": 0, "o": 1, "s": 2}
_BUF_OF = "ios"


def _key(rank: int, buf: str, idx: int) -> int:
    return (rank << 34) | (_BUF_BITS[buf] << 32) | idx


def _unkey(key: int) -> tuple[int, str, int]:
    return key >> 34, _BUF_OF[(key >> 32) & 3], key & 0xFFFFFFFF


def _ranges(schedule: Schedule) -> list[tuple[Chunks | None, Chunks | None]]:
    """Every op's source and destination, as stored (in place: input and output aliased)."""
    if not schedule.in_place:
        return [(op.src, op.dst) for op in schedule.ops]
    return [(None if op.src is None else schedule.storage(op.rank, op.src),
             None if op.dst is None else schedule.storage(op.rank, op.dst)) for op in schedule.ops]


def _check_races(schedule: Schedule, order: list[int], preds: list[tuple[int, ...]], n_succs: list[int],
                 ranges: list[tuple[Chunks | None, Chunks | None]]) -> None:
    """Every two accesses of one chunk on one rank, one a write, ordered by happens-before.

    Each chunk keeps its last writer and its readers since; a new access is
    tested against those. Nearly always the two are ordered by a direct
    dependency (the builder adds one for every conflict); the pairs that are
    not are collected and, only if there are any, answered by the ancestor
    bitsets of :func:`_ancestors_order`, in the same visit order, so that the
    race reported is the first one met either way.
    """
    ops = schedule.ops
    writer: dict[int, int] = {}
    readers: dict[int, list[int]] = {}
    # op -> the accesses it makes that no direct dependency orders: (chunk key, other op, other does, it does)
    pending: dict[int, list[tuple[int, int, str, str]]] = {}
    for x in order:
        op = ops[x]
        px = preds[x]
        kind = op.kind
        src, dst = ranges[x]
        base = op.rank << 34
        if src is not None:  # send, copy, reduce; a reduce's read of its dst is checked as its write
            k0 = base | (_BUF_BITS[src.buf] << 32)
            for k in range(k0 + src.index, k0 + src.index + src.count):
                w = writer.get(k)
                if w is not None and w not in px:
                    pending.setdefault(x, []).append((k, w, "writes", "reads"))
                rs = readers.get(k)
                if rs is None:
                    readers[k] = [x]
                else:
                    rs.append(x)
        if dst is not None and kind != "send":
            k0 = base | (_BUF_BITS[dst.buf] << 32)
            for k in range(k0 + dst.index, k0 + dst.index + dst.count):
                w = writer.get(k)
                if w is not None and w not in px:
                    pending.setdefault(x, []).append((k, w, "writes", "writes"))
                rs = readers.pop(k, None)
                if rs:
                    for q in rs:
                        if q not in px:
                            pending.setdefault(x, []).append((k, q, "reads", "writes"))
                writer[k] = x
    if pending:
        _check_transitively(schedule, order, preds, n_succs, pending)


def _check_transitively(schedule: Schedule, order: list[int], preds: list[tuple[int, ...]], n_succs: list[int],
                        pending: dict[int, list[tuple[int, int, str, str]]]) -> None:
    """Raise on the first of ``pending``'s pairs (in visit order) that no path of dependencies orders.

    Per op, a Python-int bitset of the *targets* among its ancestors: the ops that some pending pair asks
    about, one bit each (by topological position), so a schedule with few such pairs keeps tiny bitsets. A
    bitset is dropped as soon as the last successor of its op has been visited (the depth-first order keeps
    few alive at once).
    """
    ops = schedule.ops
    targets = {other for pairs in pending.values() for _, other, _, _ in pairs}
    pos = [0] * len(ops)
    for i, x in enumerate(order):
        pos[x] = i
    bit = {t: b for b, t in enumerate(sorted(targets, key=pos.__getitem__))}
    left = list(n_succs)  # successors not yet visited
    reach: dict[int, int] = {}  # op -> bitset of the targets among itself and its ancestors (absent: none)
    for x in order:
        anc = 0
        for p in preds[x]:
            left[p] -= 1
            anc |= reach.pop(p, 0) if left[p] == 0 else reach.get(p, 0)
        for key, other, other_does, does in pending.get(x, ()):
            if (anc >> bit[other]) & 1 == 0:
                raise ScheduleError(_race(schedule, _unkey(key), ops[other], other_does, ops[x], does))
        b = bit.get(x)
        if b is not None:
            anc |= 1 << b
        if left[x] and anc:
            reach[x] = anc


def _race(schedule: Schedule, key, a: Op, a_does: str, b: Op, b_does: str) -> str:
    rank, buf, idx = key
    if b.id < a.id:  # the pair is unordered: name it in program (id) order, whatever the visit order
        a, a_does, b, b_does = b, b_does, a, a_does
    if a_does == "reads":
        hint = "the write may overtake the read"
    elif b_does == "reads":
        hint = "the read may see the chunk before or after the write"
    else:
        hint = "the two writes may land in either order"
    return (
        f"race on rank {rank}, chunk {buf}[{idx}]: {a.describe()} {a_does} it and {b.describe()} {b_does} it, "
        f"but neither depends on the other (directly or through messages): {hint}; add a dependency"
    )


# ------------------------------------------------- 5. symbolic execution
def _execute(
    schedule: Schedule, order: list[int], matches: dict[int, int], ranges: list[tuple[Chunks | None, Chunks | None]]
) -> tuple[dict[int, Value], dict[int, int]]:
    """Every chunk's final value and last writer, by chunk key (:func:`_key`), as stored."""
    ops = schedule.ops
    state: dict[int, Value] = {_key(*_stored(schedule, key)): v for key, v in schedule.collective.precondition().items()}
    last_writer: dict[int, int] = {}
    in_flight: dict[int, list[Value]] = {}
    pieces = not schedule.collective.uniform

    for x in order:
        op = ops[x]
        base = op.rank << 34
        src, dst = ranges[x]
        if op.kind == "recv":
            values = in_flight.pop(matches[x])
        else:
            if src is None:
                src = op.src_chunks  # raises: the structure check lets no such op through
            k0 = base | (_BUF_BITS[src.buf] << 32)
            values = []
            for k in range(k0 + src.index, k0 + src.index + src.count):
                v = state.get(k)
                if v is None:
                    raise ScheduleError(_uninitialised(op, src, k - k0 - src.index))
                values.append(v)
            if op.kind == "send":
                in_flight[x] = values
                continue
        if dst is None:
            raise ScheduleError(f"{op!r} has no dst range")
        combine = op.kind == "reduce" or op.reduce
        k0 = base | (_BUF_BITS[dst.buf] << 32)
        for i, v in zip(range(dst.index, dst.index + dst.count), values):
            key = k0 + i
            if combine:
                old = state.get(key)
                if old is None:
                    raise ScheduleError(_uninitialised(op, dst, i - dst.index))
                v = _merge(op, dst.buf, i, old, v, pieces)
            state[key] = v
            last_writer[key] = x
    return state, last_writer


def _uninitialised(op: Op, chunks: Chunks, offset: int) -> str:
    return (f"{op.describe()} reads {chunks.buf}[{chunks.index + offset}] of rank {op.rank}, which is uninitialised "
            "(nothing wrote it before this op)")


def _stored(schedule: Schedule, key: tuple[int, str, int]) -> tuple[int, str, int]:
    """``(rank, buffer, index)`` of where chunk ``key`` is stored (itself unless in place)."""
    if not schedule.in_place:
        return key
    rank, buf, idx = key
    c = schedule.storage(rank, Chunks(buf, idx))
    return rank, c.buf, c.index


def _merge(op: Op, buf: str, idx: int, a: Value, b: Value, pieces: bool = False) -> Value:
    merged = tuple(sorted(a + b))
    for u, v in itertools.pairwise(merged):
        if u == v:
            what = f"piece {u[0]}" if pieces else f"contribution (rank {u[0]}, chunk {u[1]})"
            raise ScheduleError(f"{op.describe()} reduces {what} into {buf}[{idx}] of rank {op.rank} twice")
    return merged


# ------------------------------------------------------ 6. postcondition
def _check_postcondition(schedule: Schedule, final: dict[int, Value], last_writer: dict[int, int]) -> None:
    """Every output chunk the collective names holds its value; else the first wrong one (in key order) is named."""
    coll = schedule.collective
    pieces = not coll.uniform
    post = coll.postcondition()
    if schedule.in_place:
        wrong = [key for key, want in post.items() if final.get(_key(*_stored(schedule, key))) != want]
    else:
        wrong = [key for key, want in post.items() if final.get(_key(*key)) != want]
    if not wrong:
        return
    key = min(wrong)
    want = post[key]
    stored = _key(*_stored(schedule, key))
    got = final.get(stored)
    rank, buf, idx = key
    where = f"rank {rank} output {buf}[{idx}]"
    if got is None:
        raise ScheduleError(
            f"{where} is uninitialised (no op writes it) but {coll.kind} needs {_fmt_value(want, pieces)}"
        )
    missing = sorted(set(want) - set(got))
    extra = sorted(set(got) - set(want))
    parts = []
    if missing:
        parts.append(f"missing {_fmt_contribs(missing, pieces)}")
    if extra:
        parts.append(f"unexpected {_fmt_contribs(extra, pieces)}")
    writer = last_writer.get(stored)
    by = f"; last written by {schedule.ops[writer].describe()}" if writer is not None else ""
    raise ScheduleError(
        f"{where} holds {_fmt_value(got, pieces)} but {coll.kind} needs {_fmt_value(want, pieces)}: "
        f"{', '.join(parts)}{by}"
    )


def _fmt_value(v: Value, pieces: bool = False) -> str:
    """A chunk's value: ``(rank,chunk)+...`` contributions, or ``piece p`` for an explicit collective.

    An explicit collective's contribution ``(p, 0)`` is piece ``p`` of its
    table (:mod:`ccsynth.collectives.explicit`), not input chunk 0 of rank ``p``.
    """
    items = [f"piece {q}" if pieces else f"({q},{j})" for q, j in v]
    if len(items) > 2 * _MAX_LISTED:
        noun = "pieces" if pieces else "contributions"
        return f"{'+'.join(items[:_MAX_LISTED])}+...+{items[-1]} [{len(items)} {noun}]"
    return "+".join(items)


def _fmt_contribs(cs: list[Contribution], pieces: bool = False) -> str:
    if pieces:
        noun = "piece" if len(cs) == 1 else "pieces"
        shown = ", ".join(str(q) for q, _ in cs[:_MAX_LISTED])
        more = f" and {len(cs) - _MAX_LISTED} more" if len(cs) > _MAX_LISTED else ""
        return f"{noun} {shown}{more}"
    noun = "contribution" if len(cs) == 1 else "contributions"
    shown = ", ".join(f"from rank {q} (input chunk {j})" for q, j in cs[:_MAX_LISTED])
    more = f" and {len(cs) - _MAX_LISTED} more" if len(cs) > _MAX_LISTED else ""
    return f"{noun} {shown}{more}"
