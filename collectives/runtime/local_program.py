"""The program of one rank: its ops of the schedule, checked, rewritten and annotated.

Compiling happens once per schedule and rank (in the constructor of
:class:`~ccsynth.collectives.executor.CompiledSchedule`), in these stages,
one function each (:func:`build_local_program` runs them):

1. *Columns* (:func:`trace_columns`, all ranks). A pass over every rank's
   ops in dataflow order (dependencies plus send -> receive matches)
   follows each chunk's *column* (input index modulo the chunk factor).
   The column fixes a chunk's size when the element count is not a
   multiple of the chunk count; a schedule that parks a value of one
   column in an input/output slot of another, or mixes columns in one
   reduction, runs only on counts the chunk factor divides
   (``uneven_ok``). The same pass gives every op its *level* (the longest
   chain of dependencies and matches ending at it): every rank computes
   the same levels, which the straight-line path needs
   (:mod:`ccsynth.collectives.static_program`). A dependency cycle raises
   :class:`~ccsynth.errors.ScheduleError` naming the ops on it.
2. *Local ops* (:func:`local_ops`): this rank's ops as :class:`LocalOp`,
   sends and receives numbered per peer (the k-th send ``a -> b`` matches
   the k-th receive on ``b`` from ``a``).
3. *Race check* (:func:`check_races`), once, on the program as the
   schedule states it: two ops of this rank that touch the same chunk, one
   of them writing, must be ordered by this rank's dependencies, or the
   result would depend on timing. The verifier
   (:mod:`ccsynth.collectives.verify`, stage 4) proves the same of every
   schedule it accepts, over all ranks at once; this check is the
   executor's own for schedules built by hand and never verified, and it
   runs before the rewrites because fusion could hide a race.
4. *Rewrites* (with ``fuse=True``): :func:`forward` points a send of
   chunks that a copy just wrote at the copy's source, and turns ``recv
   into scratch S`` + ``reduce S -> D`` into one receive-reduce into D;
   :func:`fuse` merges ``copy X -> D`` + ``recv-reduce into D`` into one
   receive-reduce-copy (``D = X (op) received``, one pass over memory
   instead of two). Each rewrite only merges ops with nothing between them
   and keeps every other order, so the program stays race free.
5. *Conflicts and hints* (:func:`memory_conflicts`,
   :func:`ordering_hints`). For every op, the earlier ops it conflicts with
   in memory (read/write, write/read, write/write) and on which chunks:
   the layout turns these into slice-level edges, so a slice waits only
   for the slices it overlaps. A stated dependency without a memory
   conflict is an ordering hint, kept at operation level.
6. *Levels*. The straight-line path is safe only if no local edge goes
   down in level (see :mod:`ccsynth.collectives.static_program`); the
   rewrites could in principle create one, so :attr:`LocalProgram.levels_ok`
   records whether this rank's program keeps to them.

Dependency graphs are ordered with :func:`ccsynth.graphs.topological_order`,
except when the ops already come in dataflow order (every dependency on an
earlier op): schedules are almost always written so, and the rewrites keep
it, so one pass that checks it saves building a graph (most of the compile
time otherwise). Ancestor sets are Python-int bitsets over local op indices.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from collections.abc import Callable, Sequence

from ccsynth.collectives.schedule import ChunkRanges, Chunks, Schedule
from ccsynth.errors import ScheduleError
from ccsynth.graphs import dependency_cycle, topological_order

__all__ = [
    "LocalOp", "LocalProgram", "ColumnTrace", "build_local_program", "trace_columns", "local_ops",
    "check_races", "memory_conflicts", "ordering_hints", "forward", "fuse", "ordered",
]

# How many ops a dependency-cycle message names before "...".
_MAX_CYCLE_OPS = 6

Cols = tuple  # per chunk of a range: its column, or None for a value nothing wrote


@dataclass(frozen=True)
class LocalOp(ChunkRanges):
    """One op of this rank after the rewrites (compile-time form).

    ``kind`` is ``send``, ``recv``, ``rrecv`` (a receive that reduces),
    ``copy``, ``reduce`` or ``rrc`` (a copy fused with a receive-reduce).
    ``deps`` are local indices; ``seq`` numbers the messages per peer;
    ``sched_ids`` name the schedule's ops this one stands for;
    ``src_cols``/``dst_cols`` give the column of every chunk moved.
    """

    idx: int
    kind: str
    src: Chunks | None
    dst: Chunks | None
    peer: int
    deps: frozenset[int]
    seq: int = -1
    sched_ids: tuple[int, ...] = ()
    src_cols: Cols = ()
    dst_cols: Cols = ()

    def reads(self) -> list[Chunks]:
        k = self.kind
        if k in ("send", "copy", "rrc"):
            return [self.src_chunks]
        if k == "reduce":
            return [self.src_chunks, self.dst_chunks]
        if k == "rrecv":
            return [self.dst_chunks]
        return []

    def writes(self) -> list[Chunks]:
        return [] if self.kind == "send" else [self.dst_chunks]

    def touches(self) -> list[Chunks]:
        return self.reads() + self.writes()

    def renumbered(self, idx: int, deps: frozenset[int]) -> LocalOp:
        """This op at index ``idx`` with dependencies ``deps`` (what the rewrites make most)."""
        return LocalOp(idx, self.kind, self.src, self.dst, self.peer, deps, self.seq, self.sched_ids,
                       self.src_cols, self.dst_cols)

    def describe(self) -> str:
        ids = "+".join(str(i) for i in self.sched_ids)
        arrow = "->" if self.src and self.dst else ""
        return f"op {ids} ({self.kind} {self.src or ''}{arrow}{self.dst or ''})"


@dataclass(frozen=True)
class ColumnTrace:
    """What the global pass over the schedule found (stage 1).

    ``level[op id]`` for every op of the schedule; ``op_cols[op id]`` =
    (columns read, columns written) for this rank's ops; ``slot_cols[k]``
    the columns scratch slot k ever holds on this rank; ``uneven_ok``
    whether every count works (else only those the chunk factor divides).
    """

    level: tuple[int, ...]
    op_cols: dict[int, tuple[Cols, Cols]]
    slot_cols: dict[int, frozenset]
    uneven_ok: bool


@dataclass(frozen=True)
class LocalProgram:
    """One rank's compiled program: what the layout needs to cut it into slices.

    ``hazards[b]`` maps each earlier op ``a`` that op ``b`` conflicts with
    in memory to the chunks ``(buf, index)`` of the conflict; ``hints[b]``
    lists the ops ``b`` depends on without a conflict; ``level[i]`` is the
    level of local op ``i`` (the highest of the schedule ops it stands for).
    """

    ops: tuple[LocalOp, ...]
    hazards: tuple[dict[int, dict[tuple[str, int], None]], ...]
    hints: tuple[tuple[int, ...], ...]
    level: tuple[int, ...]
    levels_ok: bool
    slot_cols: dict[int, frozenset]
    uneven_ok: bool


def build_local_program(schedule: Schedule, role: int, rank: int, *, fuse_ops: bool = True) -> LocalProgram:
    """Compile the ops of schedule rank ``role`` for the process of rank ``rank``.

    Raises :class:`ScheduleError` for unmatched messages, a dependency cycle
    or a race on this rank.
    """
    trace = trace_columns(schedule, role)
    what = f"rank {rank}'s part of schedule {schedule.name!r}"
    ops = local_ops(schedule, role, trace)
    check_races(ops, rank, what)
    if fuse_ops:
        ops = fuse(forward(ops, what), what)
    order = ordered(ops, what)
    hazards = memory_conflicts(ops, order)
    hints = ordering_hints(ops)
    level = tuple(max(trace.level[i] for i in op.sched_ids) for op in ops)
    levels_ok = all(
        level[a] <= level[b] for b in range(len(ops)) for a in list(hazards[b]) + list(hints[b])
    )
    return LocalProgram(tuple(ops), tuple(hazards), hints, level, levels_ok, trace.slot_cols, trace.uneven_ok)


# --------------------------------------------------------------- graphs
def ordered(ops: Sequence[LocalOp], what: str) -> list[int]:
    """A topological order of the local ops; :class:`ScheduleError` naming the cycle if there is none."""
    preds = [op.deps for op in ops]
    return _order_or_raise(preds, what, lambda i: ops[i].describe())


def _order(preds: Sequence) -> list[int] | None:
    """A topological order of nodes ``0..n-1``, or None if there is a cycle."""
    if all(p < v for v, ps in enumerate(preds) for p in ps):
        return list(range(len(preds)))  # already in dataflow order: nothing to sort
    return topological_order(preds)


def _order_or_raise(preds: Sequence, what: str, describe: Callable[[int], str]) -> list[int]:
    order = _order(preds)
    if order is None:
        cycle = dependency_cycle(preds)
        shown = " -> ".join(describe(i) for i in cycle[:_MAX_CYCLE_OPS])
        more = f" -> ... ({len(cycle) - _MAX_CYCLE_OPS} more)" if len(cycle) > _MAX_CYCLE_OPS else ""
        raise ScheduleError(
            f"{what} has a dependency cycle (deadlock) involving {len(cycle)} op(s): {shown}{more} -> back to the "
            f"first (each op waits for the one before it; a receive waits for its matching send)"
        )
    return order


def _ancestors(preds: Sequence, order: list[int]) -> list[int]:
    """Bitset (Python int) of all ancestors of each op."""
    anc = [0] * len(preds)
    for v in order:
        a = 0
        for u in preds[v]:
            a |= anc[u] | (1 << u)
        anc[v] = a
    return anc


def _ancestors_and_descendants(ops: Sequence[LocalOp], order: list[int]) -> tuple[list[int], list[int]]:
    """(ancestor bitsets, descendant bitsets) of the local ops, given a topological order."""
    anc = _ancestors([op.deps for op in ops], order)
    desc = [0] * len(ops)
    for v, a in enumerate(anc):
        bit = 1 << v
        while a:
            low = a & -a
            desc[low.bit_length() - 1] |= bit
            a ^= low
    return anc, desc


def _overlap(a: Chunks, b: Chunks) -> bool:
    return a.buf == b.buf and max(a.index, b.index) < min(a.index + a.count, b.index + b.count)


def _keys(chunks: list[Chunks]) -> list[tuple[str, int]]:
    """``(buffer, chunk index)`` of every chunk of the ranges."""
    return [(ch.buf, k) for ch in chunks for k in ch.indices()]


def _writers(ops: Sequence[LocalOp]) -> dict[tuple[str, int], list[int]]:
    """Every op that writes each chunk."""
    writers: dict[tuple[str, int], list[int]] = {}
    for x, X in enumerate(ops):
        for key in _keys(X.writes()):
            writers.setdefault(key, []).append(x)
    return writers


# ------------------------------------------------------------ 1. columns
def trace_columns(schedule: Schedule, role: int) -> ColumnTrace:
    """Follow every chunk's column through the whole schedule (all ranks)."""
    ops = schedule.ops
    matches = schedule.matches  # raises ScheduleError for unmatched sends/receives
    preds: list[list[int]] = [list(op.deps) for op in ops]
    for op in ops:
        if op.kind == "recv":
            preds[op.id].append(matches[op.id])
    order = _order_or_raise(preds, f"schedule {schedule.name!r}", lambda i: ops[i].describe())
    level = [0] * len(ops)
    for oid in order:
        for p in preds[oid]:
            if level[p] >= level[oid]:
                level[oid] = level[p] + 1
    c = schedule.collective.chunk_factor
    col: dict[tuple[int, str, int], int | None] = {}
    msg: dict[int, Cols] = {}
    op_cols: dict[int, tuple[Cols, Cols]] = {}
    slot_cols: dict[int, set] = {}
    uneven_ok = True

    def get(rank: int, ch: Chunks) -> Cols:
        out = []
        for k in ch.indices():
            key = (rank, ch.buf, k)
            if key in col:
                out.append(col[key])
            elif ch.buf == "i":
                out.append(k % c)
            else:
                out.append(None)  # never written: a dead value
        return tuple(out)

    def put(rank: int, ch: Chunks, cols: Cols, reduce: bool) -> None:
        nonlocal uneven_ok
        for k, v in zip(ch.indices(), cols):
            key = (rank, ch.buf, k)
            if reduce:
                old = col.get(key, (k % c) if ch.buf == "i" else None)
                if old != v:
                    uneven_ok = False  # mixes columns: sizes are ambiguous
            col[key] = v
            if v is None:
                uneven_ok = False
            elif ch.buf != "s" and v != k % c:
                uneven_ok = False  # a value parked in a slot of another size
            if rank == role and ch.buf == "s":
                slot_cols.setdefault(k, set()).add(v)

    for oid in order:
        op = ops[oid]
        r = op.rank
        if op.kind == "send":
            cols = get(r, op.src_chunks)
            msg[oid] = cols
            if r == role:
                op_cols[oid] = (cols, ())
        elif op.kind == "recv":
            cols = msg[matches[oid]]
            put(r, op.dst_chunks, cols, op.reduce)
            if r == role:
                op_cols[oid] = ((), cols)
        else:
            cols = get(r, op.src_chunks)
            put(r, op.dst_chunks, cols, op.kind == "reduce")
            if r == role:
                op_cols[oid] = (cols, cols)
    return ColumnTrace(tuple(level), op_cols, {k: frozenset(v) for k, v in slot_cols.items()}, uneven_ok)


# ----------------------------------------------------------- 2. local ops
def local_ops(schedule: Schedule, role: int, trace: ColumnTrace) -> list[LocalOp]:
    """The ops of schedule rank ``role`` as written, messages numbered per peer."""
    mine = schedule.ops_of(role)
    pos = {op.id: i for i, op in enumerate(mine)}
    out: list[LocalOp] = []
    send_seq: dict[int, int] = {}
    recv_seq: dict[int, int] = {}
    for i, op in enumerate(mine):
        sc, dc = trace.op_cols[op.id]
        if op.kind == "send":
            kind, seq = "send", send_seq.get(op.peer, 0)
            send_seq[op.peer] = seq + 1
        elif op.kind == "recv":
            kind, seq = ("rrecv" if op.reduce else "recv"), recv_seq.get(op.peer, 0)
            recv_seq[op.peer] = seq + 1
        else:
            kind, seq = op.kind, -1
        deps = frozenset(pos[d] for d in op.deps)
        out.append(LocalOp(i, kind, op.src, op.dst, op.peer, deps, seq, (op.id,), sc, dc))
    return out


# ------------------------------------------------------------ 3. races
def check_races(ops: Sequence[LocalOp], rank: int, what: str) -> None:
    """Raise :class:`ScheduleError` if two conflicting ops are not ordered by this rank's dependencies."""
    order = ordered(ops, what)
    anc = _ancestors([op.deps for op in ops], order)
    for b, conflicts in enumerate(memory_conflicts(ops, order)):
        for a, keys in conflicts.items():
            if not (anc[b] >> a) & 1:
                A, B = ops[a], ops[b]
                buf, k = next(iter(keys))
                raise ScheduleError(
                    f"rank {rank}: {A.describe()} and {B.describe()} both touch chunk {buf}[{k}] "
                    f"(at least one writes it) but neither depends on the other: the result would depend on timing"
                )


# ------------------------------------------------------------ 4. rewrites
def _renumber(ops: Sequence[LocalOp], replace_by: dict[int, list[LocalOp]]) -> list[LocalOp]:
    """Rebuild the op list with ops replaced by lists of ops (an empty list drops the op).

    A new op's deps name old indices; a dependency on an op replaced by
    several pieces becomes dependencies on the pieces it conflicts with in
    memory (on all of them if none).
    """
    new_ids: dict[int, list[int]] = {}
    flat: list[LocalOp] = []
    for old, op in enumerate(ops):
        new_ids[old] = []
        for rep in replace_by.get(old, [op]):
            new_ids[old].append(len(flat))
            flat.append(rep)
    out = []
    for new, op in enumerate(flat):
        deps: set[int] = set()
        for d in op.deps:
            targets = new_ids[d]
            if len(targets) > 1:
                touched = op.touches()
                hit = [t for t in targets if any(_overlap(x, y) for x in flat[t].touches() for y in touched)]
                targets = hit or targets
            deps.update(targets)
        deps.discard(new)
        out.append(op.renumbered(new, frozenset(deps)))
    return out


def _redirected(ops: Sequence[LocalOp], redirect: dict[int, int]) -> list[LocalOp]:
    """Every dependency on ``x`` becomes one on ``redirect[x]`` (an op never depends on itself)."""
    return [op.renumbered(op.idx, frozenset(redirect.get(d, d) for d in op.deps) - {i}) for i, op in enumerate(ops)]


def _raw_readers(ops: Sequence[LocalOp], order: list[int]):
    """Who wrote what each op reads, following a topological order: (raw, readers).

    ``raw[b][(buf, k)]`` is the op whose value of chunk k op b reads;
    ``readers[(w, buf, k)]`` lists the ops that read the value w wrote there.
    """
    writer: dict[tuple[str, int], int] = {}
    raw: list[dict[tuple[str, int], int]] = [dict() for _ in ops]
    readers: dict[tuple[int, str, int], list[int]] = {}
    for b in order:
        op = ops[b]
        for key in _keys(op.reads()):
            w = writer.get(key)
            if w is not None:
                raw[b][key] = w
                readers.setdefault((w, *key), []).append(b)
        for key in _keys(op.writes()):
            writer[key] = b
    return raw, readers


def forward(ops: list[LocalOp], what: str) -> list[LocalOp]:
    """Two rewrites that shorten chains of local ops (fewer slices, earlier receives), until none applies.

    * A send of chunks that a copy just wrote reads the copy's source
      instead, if nothing overwrites that source before the send (the copy
      then often fuses with a following receive-reduce).
    * ``recv into scratch S`` followed by ``reduce S -> D``, with nobody else
      reading what arrived in S, becomes one receive-reduce into D (its
      receive is posted at start into private staging).
    """
    while True:
        order = ordered(ops, what)
        anc, desc = _ancestors_and_descendants(ops, order)
        raw, readers = _raw_readers(ops, order)
        rewritten = _send_from_copy_source(ops, anc, raw)
        if rewritten is None:
            rewritten = _receive_into_reduce(ops, anc, desc, readers)
        if rewritten is None:
            return ops
        ops = rewritten


def _send_from_copy_source(ops: list[LocalOp], anc: list[int], raw) -> list[LocalOp] | None:
    writers = _writers(ops)
    for x, X in enumerate(ops):
        if X.kind != "send":
            continue
        X_src = X.src_chunks
        srcs = {raw[x].get((X_src.buf, k)) for k in X_src.indices()}
        if len(srcs) != 1 or None in srcs:
            continue
        c = srcs.pop()
        C = ops[c]
        if C.kind != "copy" or C.dst_chunks.buf != X_src.buf:
            continue
        off = X_src.index - C.dst_chunks.index
        if off < 0 or off + X_src.count > C.dst_chunks.count:
            continue
        new_src = Chunks(C.src_chunks.buf, C.src_chunks.index + off, X_src.count)
        unwritten = all(
            w == c or (anc[c] >> w) & 1 or (anc[w] >> x) & 1
            for k in new_src.indices()
            for w in writers.get((new_src.buf, k), ())
        )
        if not unwritten:
            continue
        out = []
        for i, op in enumerate(ops):
            if i == x:
                op = replace(X, src=new_src, deps=(X.deps - {c}) | C.deps,
                             src_cols=C.src_cols[off:off + X_src.count], dst_cols=())
            elif x in op.deps:
                # whatever came after the send stays after the copy, as it was through the send
                op = op.renumbered(op.idx, op.deps | {c})
            out.append(op)
        return out
    return None


def _receive_into_reduce(ops: list[LocalOp], anc: list[int], desc: list[int], readers) -> list[LocalOp] | None:
    for r, R in enumerate(ops):
        if R.kind != "recv" or R.dst_chunks.buf != "s":
            continue
        users = {u for k in R.dst_chunks.indices() for u in readers.get((r, "s", k), ())}
        if len(users) != 1:
            continue
        x = users.pop()
        X = ops[x]
        if X.kind != "reduce" or X.src != R.dst or anc[x] & desc[r]:
            continue
        deps = frozenset(x if d == r else d for d in (R.deps | X.deps) - {r, x}) - {x}
        merged = LocalOp(0, "rrecv", None, X.dst, R.peer, deps, R.seq, R.sched_ids + X.sched_ids, (), X.dst_cols)
        return _renumber(_redirected(ops, {r: x}), {r: [], x: [merged]})
    return None


def fuse(ops: list[LocalOp], what: str) -> list[LocalOp]:
    """Merge ``copy X->D`` + ``recv-reduce into D`` into one receive-reduce-copy.

    First copies that cover more than a receive-reduce's range are split at
    its boundaries; then every pair that can be merged without reordering
    anything else is merged (D untouched and X unwritten between them).
    """
    ops = _split_copies(ops)
    order = ordered(ops, what)
    one_at_a_time = False
    while True:
        pairs = _fusable_pairs(ops, order, one_at_a_time)
        if not pairs:
            return ops
        redirect = dict(pairs)  # dependents of a dropped copy now wait for its fused op
        replace_by: dict[int, list[LocalOp]] = {}
        for c, r in pairs:
            C, R = ops[c], ops[r]
            deps = frozenset(redirect.get(d, d) for d in C.deps | R.deps) - {c, r}
            replace_by[c] = []
            replace_by[r] = [LocalOp(0, "rrc", C.src, R.dst, R.peer, deps, R.seq, C.sched_ids + R.sched_ids,
                                     C.src_cols, R.dst_cols)]
        candidate = _renumber(_redirected(ops, redirect), replace_by)
        candidate_order = _order([op.deps for op in candidate])
        if candidate_order is None:
            # merging a batch of pairs made a cycle: merge pair by pair instead
            if one_at_a_time:  # pragma: no cover - a single contraction without a path between cannot cycle
                return ops
            one_at_a_time = True
            continue
        ops, order = candidate, candidate_order


def _split_copies(ops: list[LocalOp]) -> list[LocalOp]:
    """Cut copies at the boundaries of the receive-reduces that follow them."""
    while True:
        replace_by: dict[int, list[LocalOp]] = {}
        for R in ops:
            if R.kind != "rrecv":
                continue
            for c in sorted(R.deps):
                C = ops[c]
                if c in replace_by or C.kind != "copy" or C.dst == R.dst:
                    continue
                C_src, C_dst, R_dst = C.src_chunks, C.dst_chunks, R.dst_chunks
                if C_dst.buf != R_dst.buf:
                    continue
                a, b = C_dst.index, C_dst.index + C_dst.count
                ra, rb = R_dst.index, R_dst.index + R_dst.count
                if not (a <= ra and rb <= b):
                    continue
                pieces = []
                for lo, hi in ((a, ra), (ra, rb), (rb, b)):
                    if lo < hi:
                        off = lo - a
                        pieces.append(LocalOp(
                            0, "copy", Chunks(C_src.buf, C_src.index + off, hi - lo), Chunks(C_dst.buf, lo, hi - lo),
                            -1, C.deps, -1, C.sched_ids, C.src_cols[off:off + hi - lo], C.dst_cols[off:off + hi - lo],
                        ))
                replace_by[c] = pieces
        if not replace_by:
            return ops
        ops = _renumber(ops, replace_by)


def _fusable_pairs(ops: list[LocalOp], order: list[int], one_at_a_time: bool) -> list[tuple[int, int]]:
    """(copy, receive-reduce) pairs to merge: the same D, nothing between them, X unwritten meanwhile."""
    anc, desc = _ancestors_and_descendants(ops, order)
    writers = _writers(ops)
    pairs: list[tuple[int, int]] = []
    used: set[int] = set()
    for r, R in enumerate(ops):
        if R.kind != "rrecv" or r in used:
            continue
        for c in sorted(R.deps):
            C = ops[c]
            if c in used or C.kind != "copy" or C.dst != R.dst:
                continue
            if anc[r] & desc[c]:
                continue  # something runs between C and R
            # the fused op reads C's source when R runs: nobody may write it in between
            if all(
                x in (c, r) or (anc[c] >> x) & 1 or (anc[x] >> r) & 1
                for k in C.src_chunks.indices()
                for x in writers.get((C.src_chunks.buf, k), ())
            ):
                pairs.append((c, r))
                used.update((c, r))
                break
        if one_at_a_time and pairs:
            break
    return pairs


# ------------------------------------------------- 5. conflicts and hints
def memory_conflicts(ops: Sequence[LocalOp], order: list[int]) -> list[dict[int, dict[tuple[str, int], None]]]:
    """Per op ``b``: {earlier op ``a`` it conflicts with: the chunks (an ordered set)}.

    A sweep in ``order`` keeps, per chunk, its last writer and the readers
    since: a read conflicts with the last writer, a write with the last
    writer and with every reader since.
    """
    writer: dict[tuple[str, int], int] = {}
    readers: dict[tuple[str, int], list[int]] = {}
    conflicts: list[dict[int, dict[tuple[str, int], None]]] = [dict() for _ in ops]

    def edge(a: int, b: int, key: tuple[str, int]) -> None:
        if a != b:
            conflicts[b].setdefault(a, {})[key] = None

    for b in order:
        op = ops[b]
        reads, writes = _keys(op.reads()), _keys(op.writes())
        for key in reads:
            w = writer.get(key)
            if w is not None:
                edge(w, b, key)
        for key in writes:
            w = writer.get(key)
            if w is not None:
                edge(w, b, key)
            for rd in readers.get(key, ()):
                edge(rd, b, key)
        for key in reads:
            readers.setdefault(key, []).append(b)
        for key in writes:
            writer[key] = b
            readers[key] = []
    return conflicts


def ordering_hints(ops: Sequence[LocalOp]) -> tuple[tuple[int, ...], ...]:
    """Per op: the ops it depends on without touching the same memory (kept whole by the layout)."""
    hints = []
    for op in ops:
        touched = op.touches()
        hints.append(tuple(
            a for a in sorted(op.deps)
            if not any(_overlap(x, y) for x in ops[a].touches() for y in touched)
        ))
    return tuple(hints)
