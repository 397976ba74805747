"""The buffer layout and slice graph of one rank, for one dtype and element count.

:func:`build_layout` turns a :class:`~.local_program.LocalProgram` into a
:class:`Layout` (once per dtype and element count; the executor caches the
last :data:`~.constants.MAX_LAYOUTS`), in these stages:

1. *Chunk geometry* (:class:`ChunkGeometry`). A buffer of ``B`` blocks of
   ``m`` elements (``B`` = 1 or the rank count; per-peer pieces) cuts each
   block into ``c`` chunks, the first ``m % c`` of them one element larger.
   Chunk ``q*c + j`` is therefore exactly as large as input chunk ``j`` of
   any rank (allgather, alltoall and reduce-scatter need this). Scratch
   slots are as large as the largest value they ever hold (their columns,
   from the trace). An op's chunks become *segments*: the
   :class:`Region` s of memory it reads or writes, adjacent ones merged.
2. *Messages* (:class:`OpExtent`). Every op is cut into slices of
   ``slice_bytes``; a message always ends with a slice shorter than that
   (possibly empty: a message of exactly k full slices gets an empty
   (k+1)-th, a message of no elements is one empty slice). No message's
   sequence of slice lengths is then a prefix of another's, so when ranks
   disagree on a count some receive slice gets another byte count than it
   expects (caught by the run loop, or truncated by MPI) instead of slices
   shifting silently onto other tags. Slice ``j`` of the ``k``-th message
   on a pair of ranks uses the slice tag ``(slices of messages 0..k-1 on
   the pair) + j``, so slices can start in any order; the run loops add the
   call's tag base (:mod:`.channel`), so these are tags within one call, and
   a layout that needs more than ``tag_limit`` of them on one pair is
   refused (:class:`~ccsynth.errors.ScheduleError`) rather than letting two
   slices of a call share a tag. Receives that reduce, and messages of
   scattered chunks, go through a private *staging* area.
3. *Slice nodes*. One node per slice, with its kind (``K_*`` of
   :mod:`.constants`), its :class:`Message` (peer, tag, region) if it is
   one, and its :class:`WorkItem` s (copies, reductions, the fused
   receive-reduce-copy, packing and unpacking of staged messages).
4. *Edges*. A slice waits only for the slices of earlier conflicting ops
   (the program's hazards) that overlap it in memory, so a chunk being
   received can be forwarded or reduced slice by slice while the rest of
   it is still arriving (what makes rings fast). Ordering hints wait for
   the whole op (through a join node when it has several slices).
5. *Counters*: per node the number of predecessors (a receive-reduce
   counts its own arrival too), the nodes ready at the start, the
   receive-reduces posted at the start, and the byte count each receive
   slice must get.

The records are named tuples: the run loops never touch them (bindings hold
views), but tests and the planner unpack them as ``(peer, tag, region)``
and ``(buf, start, stop)``.
"""

from __future__ import annotations

import bisect
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, NamedTuple
from collections.abc import Sequence

import numpy as np

from ccsynth.collectives.runtime.constants import (
    K_JOIN, K_LOCAL, K_RECV, K_RRED, K_SEND, MESSAGE_KINDS, W_COPY, W_FUSED, W_REDUCE,
)
from ccsynth.collectives.runtime.local_program import LocalOp, LocalProgram
from ccsynth.collectives.schedule import Chunks
from ccsynth.errors import ScheduleError

__all__ = [
    "Region", "Message", "WorkItem", "ChunkGeometry", "OpExtent", "Layout", "build_layout", "chunk_sizes", "EMPTY",
]


class Region(NamedTuple):
    """Elements ``[start, stop)`` of buffer ``buf``: ``i``, ``o``, ``s`` (scratch) or ``t`` (staging)."""

    buf: str
    start: int
    stop: int

    @property
    def size(self) -> int:
        return self.stop - self.start


#: the region of an empty message slice (a zero-length view of the staging area)
EMPTY = Region("t", 0, 0)


class Message(NamedTuple):
    """The MPI side of a send or receive slice: peer (a rank of the communicator), tag, memory."""

    peer: int
    tag: int
    region: Region


class WorkItem(NamedTuple):
    """One kernel call of a slice: ``mode`` is ``W_COPY`` (dst = src), ``W_REDUCE`` (dst = dst op src)
    or ``W_FUSED`` (dst = src2 op src, where src is the received data)."""

    mode: int
    dst: Region
    src: Region
    src2: Region | None = None


class _Aligned(NamedTuple):
    """A piece of message range ``[lo, hi)`` that lies in one segment of each of two sides."""

    lo: int
    hi: int
    a: Region
    b: Region


def chunk_sizes(m: int, c: int) -> tuple[list[int], list[int]]:
    """Sizes of the ``c`` chunks of a block of ``m`` elements, and their starts (with ``m`` at the end)."""
    q, rem = divmod(m, c)
    sizes = [q + (1 if j < rem else 0) for j in range(c)]
    starts = [0] * (c + 1)
    for j in range(c):
        starts[j + 1] = starts[j] + sizes[j]
    return sizes, starts


@dataclass(frozen=True)
class ChunkGeometry:
    """Where every chunk of every buffer lies, in elements, for blocks of ``m`` elements (stage 1)."""

    m: int
    chunk_factor: int
    sizes: tuple[int, ...]  # per column
    starts: tuple[int, ...]  # per column, and m
    slot_start: tuple[int, ...]  # per scratch slot
    slot_size: tuple[int, ...]

    @classmethod
    def build(cls, m: int, c: int, scratch_chunks: int, slot_cols: dict[int, frozenset]) -> ChunkGeometry:
        sizes, starts = chunk_sizes(m, c)
        uniform = m % c == 0
        csize = sizes[0]
        slot_size = []
        for k in range(scratch_chunks):
            cols = slot_cols.get(k, ())
            slot_size.append(
                csize if (uniform or not cols) else max(sizes[j] if j is not None else csize for j in cols)
            )
        slot_start = []
        off = 0
        for size in slot_size:
            slot_start.append(off)
            off += size
        return cls(m, c, tuple(sizes), tuple(starts), tuple(slot_start), tuple(slot_size))

    @property
    def scratch_len(self) -> int:
        return sum(self.slot_size)

    def chunk(self, buf: str, k: int, col: int | None) -> tuple[int, int]:
        """Elements of chunk ``k`` of ``buf`` holding a value of column ``col``."""
        if buf == "s":
            uniform = self.m % self.chunk_factor == 0
            size = self.sizes[0] if (uniform or col is None) else self.sizes[col]
            return self.slot_start[k], self.slot_start[k] + size
        b, j = divmod(k, self.chunk_factor)
        a = b * self.m + self.starts[j]
        return a, a + self.sizes[j]

    def conflict_range(self, buf: str, k: int) -> tuple[int, int]:
        """Elements that a conflict on chunk ``k`` of ``buf`` covers (a whole scratch slot)."""
        if buf == "s":
            return self.slot_start[k], self.slot_start[k] + self.slot_size[k]
        return self.chunk(buf, k, None)

    def segments(self, ch: Chunks, cols: tuple) -> tuple[Region, ...]:
        """The memory of chunk range ``ch`` (columns ``cols``), adjacent pieces merged, empty ones left out."""
        segs: list[list] = []
        for i, k in enumerate(ch.indices()):
            a, b = self.chunk(ch.buf, k, cols[i] if i < len(cols) else None)
            if a == b:
                continue
            if segs and segs[-1][2] == a:
                segs[-1][2] = b
            else:
                segs.append([ch.buf, a, b])
        return tuple(Region(*x) for x in segs)


def _cut(segs: Sequence[Region], a: int, b: int) -> list[Region]:
    """Pieces of the message range ``[a, b)`` of an op whose message is ``segs``."""
    out, pos = [], 0
    for buf, s, e in segs:
        ln = e - s
        lo, hi = max(a, pos), min(b, pos + ln)
        if lo < hi:
            out.append(Region(buf, s + lo - pos, s + hi - pos))
        pos += ln
        if pos >= b:
            break
    return out


def _aligned(a_segs: Sequence[Region], b_segs: Sequence[Region], lo: int, hi: int) -> list[_Aligned]:
    """Split message range ``[lo, hi)`` where either side's segments break (one walk over both)."""
    out: list[_Aligned] = []
    pa, pb = _cut(a_segs, lo, hi), _cut(b_segs, lo, hi)
    i = j = 0
    used_a = used_b = 0  # elements of pa[i] and pb[j] already handed out
    pos = lo
    while i < len(pa) and j < len(pb):
        A, B = pa[i], pb[j]
        n = min(A.stop - A.start - used_a, B.stop - B.start - used_b)
        a0, b0 = A.start + used_a, B.start + used_b
        out.append(_Aligned(pos, pos + n, Region(A.buf, a0, a0 + n), Region(B.buf, b0, b0 + n)))
        pos += n
        used_a += n
        used_b += n
        if A.start + used_a == A.stop:
            i, used_a = i + 1, 0
        if B.start + used_b == B.stop:
            j, used_b = j + 1, 0
    return out


@dataclass(frozen=True)
class OpExtent:
    """How one op is cut (stage 2): its segments, element count, slices, first tag, staging offset."""

    src: tuple[Region, ...] | None
    dst: tuple[Region, ...] | None
    total: int
    slices: int
    tag_base: int = 0
    staging: int | None = None  # where its staged copy starts in the staging area
    staged_segs: tuple[Region, ...] = ()  # its whole staged copy, as segments

    @property
    def src_segs(self) -> tuple[Region, ...]:
        """``src`` of an op that reads one; ScheduleError if it has none."""
        if self.src is None:
            raise ScheduleError("an op that reads nothing has no source segments")
        return self.src

    @property
    def dst_segs(self) -> tuple[Region, ...]:
        """``dst`` of an op that writes one; ScheduleError if it has none."""
        if self.dst is None:
            raise ScheduleError("an op that writes nothing has no destination segments")
        return self.dst

    def staged(self, lo: int, hi: int) -> Region:
        if self.staging is None:
            raise ScheduleError("an op that is not staged has no staging region")
        return Region("t", self.staging + lo, self.staging + hi)


@dataclass(eq=False)
class Layout:
    """The slice graph of one rank for one (dtype, element count), and its buffers.

    Per node ``v``: ``kind[v]``, successors ``succ[v]``, the predecessor
    count ``cnt0[v]`` a run starts from, ``mpi[v]`` (a :class:`Message`,
    for send and receive slices), ``work[v]`` (its :class:`WorkItem` s),
    ``expect[v]`` (bytes a receive slice must get; -1 for others) and
    ``node_level[v]`` (the level of its op). ``static`` is the
    straight-line plan when the executor chose that path (else None);
    ``bindings`` caches a :class:`~.binding.Binding` per pair of caller
    buffers; ``entry`` counts its buffers in the memory budget (:mod:`.memory`).
    """

    dtype: np.dtype
    m: int
    n_nodes: int
    cnt0: list[int]
    succ: list[tuple[int, ...]]
    kind: list[int]
    ready0: tuple[int, ...]
    pre: tuple[int, ...]  # K_RRED nodes, whose receive is posted at start
    mpi: dict[int, Message]
    expect: list[int]
    work: dict[int, tuple[WorkItem, ...]]
    node_level: list[int]
    in_len: int
    out_len: int
    scratch_len: int
    staging_len: int
    n_slices: int = 0
    one_slice_each: bool = False  # every op is one slice
    largest_message: int = 0  # bytes
    scratch: Any = None
    staging: Any = None
    bindings: OrderedDict = field(default_factory=OrderedDict)
    static: Any = None  # StaticPlan of the straight-line path, or None (dataflow loop)
    entry: Any = None  # its memory.Entry: the bytes it keeps and the call that last used it


def build_layout(
    program: LocalProgram,
    dtype: np.dtype,
    m: int,
    *,
    chunk_factor: int,
    scratch_chunks: int,
    in_blocks: int,
    out_blocks: int,
    slice_bytes: int,
    peers: Sequence[int],
    tag_limit: int,
    rank: int,
) -> Layout:
    """Cut ``program`` into slices for blocks of ``m`` elements of ``dtype`` (no buffers allocated yet).

    ``peers[q]`` is the communicator rank that plays schedule rank ``q``;
    slice tags must stay below ``tag_limit``; ``rank`` names this process in errors.
    """
    geo = ChunkGeometry.build(m, chunk_factor, scratch_chunks, program.slot_cols)
    ops = program.ops
    per_slice = max(1, slice_bytes // dtype.itemsize)
    extents = _extents(ops, geo, per_slice, rank)
    for op, ext in zip(ops, extents):
        if op.kind in MESSAGE_KINDS and ext.tag_base + ext.slices > tag_limit:
            raise ScheduleError(
                f"rank {rank}: {op.describe()} for {m} x {dtype.name} per block needs message slices up to "
                f"{ext.tag_base + ext.slices} with rank {peers[op.peer]} in one call, more than the {tag_limit} "
                f"tags a call may use per rank pair; use a larger slice_bytes (now {slice_bytes})"
            )
    nodes = _SliceNodes()
    for op, ext in zip(ops, extents):
        nodes.add_op(op, ext, per_slice, peers)
    preds = _edges(program, geo, nodes)
    n = len(nodes.kind)
    succ: list[list[int]] = [[] for _ in range(n)]
    cnt0 = [0] * n
    for v in range(n):
        for u in preds[v]:
            succ[u].append(v)
        cnt0[v] = len(preds[v]) + (1 if nodes.kind[v] == K_RRED else 0)  # a receive-reduce also waits for its data
    expect = [-1] * n
    for v, (_, _, region) in nodes.mpi.items():
        if nodes.kind[v] != K_SEND:
            expect[v] = region.size * dtype.itemsize
    node_level = [0] * n
    for i, slices in enumerate(nodes.slices_of):
        for v in slices:
            node_level[v] = program.level[i]
    messages = [ext.total for op, ext in zip(ops, extents) if op.kind in MESSAGE_KINDS]
    return Layout(
        dtype=dtype,
        m=m,
        n_nodes=n,
        cnt0=cnt0,
        succ=[tuple(x) for x in succ],
        kind=nodes.kind,
        ready0=tuple(v for v in range(n) if cnt0[v] == 0),
        pre=tuple(v for v in range(n) if nodes.kind[v] == K_RRED),
        mpi=nodes.mpi,
        expect=expect,
        work=nodes.work,
        node_level=node_level,
        in_len=in_blocks * m,
        out_len=out_blocks * m,
        scratch_len=geo.scratch_len,
        staging_len=sum(ext.total for ext in extents if ext.staging is not None),
        n_slices=sum(len(x) for x in nodes.slices_of),
        one_slice_each=all(ext.slices <= 1 for ext in extents),
        largest_message=max(messages, default=0) * dtype.itemsize,
    )


# ------------------------------------------------------------ 2. messages
def _extents(ops: Sequence[LocalOp], geo: ChunkGeometry, per_slice: int, rank: int) -> list[OpExtent]:
    """Segments, slices, tags and staging of every op."""
    out = []
    for op in ops:
        src = geo.segments(op.src, op.src_cols) if op.src is not None else None
        dst = geo.segments(op.dst, op.dst_cols) if op.dst is not None else None
        t_src = sum(r.size for r in src) if src is not None else None
        t_dst = sum(r.size for r in dst) if dst is not None else None
        if t_src is not None and t_dst is not None and t_src != t_dst:  # pragma: no cover - guarded by the trace
            raise ScheduleError(f"rank {rank}: {op.describe()} moves {t_src} elements into {t_dst}")
        total = t_src if t_src is not None else t_dst
        if total is None:  # every kind reads or writes a range (LocalOp.reads/writes)
            raise ScheduleError(f"rank {rank}: {op.describe()} moves no chunks")
        if op.kind in MESSAGE_KINDS:
            slices = total // per_slice + 1  # full slices, then a shorter (possibly empty) last one
        else:
            slices = -(-total // per_slice) if total else 0
        out.append(OpExtent(src, dst, total, slices))
    # tags: cumulative slice count per (direction, peer) in message order
    tag_base = [0] * len(ops)
    for sending in (True, False):
        by_peer: dict[int, list[int]] = {}
        for i, op in enumerate(ops):
            if op.kind in MESSAGE_KINDS and (op.kind == "send") == sending:
                by_peer.setdefault(op.peer, []).append(i)
        for ids in by_peer.values():
            ids.sort(key=lambda i: ops[i].seq)
            acc = 0
            for i in ids:
                tag_base[i] = acc
                acc += out[i].slices
    # staging: receives that reduce, and messages of scattered chunks
    staged = 0
    for i, (op, ext) in enumerate(zip(ops, out)):
        need = op.kind in ("rrecv", "rrc") or (op.kind == "send" and len(ext.src_segs) > 1) or (
            op.kind == "recv" and len(ext.dst_segs) > 1
        )
        staging: int | None = None
        segs: tuple[Region, ...] = ()
        if need and ext.total:
            staging, segs = staged, (Region("t", staged, staged + ext.total),)
            staged += ext.total
        out[i] = OpExtent(ext.src, ext.dst, ext.total, ext.slices, tag_base[i], staging, segs)
    return out


# ----------------------------------------------------------- 3. slice nodes
class _SliceNodes:
    """The nodes of the slice graph as they are made (stage 3)."""

    def __init__(self) -> None:
        self.kind: list[int] = []
        self.mpi: dict[int, Message] = {}
        self.work: dict[int, tuple[WorkItem, ...]] = {}
        self.slices_of: list[list[int]] = []  # per op: its nodes
        self.pieces_of: list[list[list[Region]]] = []  # per op, per node: the memory the slice touches

    def add_op(self, op: LocalOp, ext: OpExtent, per_slice: int, peers: Sequence[int]) -> None:
        slices: list[int] = []
        pieces: list[list[Region]] = []
        self.slices_of.append(slices)
        self.pieces_of.append(pieces)
        if ext.slices == 0:  # a local op on empty chunks
            slices.append(len(self.kind))
            pieces.append([])
            self.kind.append(K_JOIN)
            return
        peer = peers[op.peer] if op.peer >= 0 else -1
        for j in range(ext.slices):
            lo, hi = j * per_slice, min(ext.total, (j + 1) * per_slice)
            v = len(self.kind)
            slices.append(v)
            k = op.kind
            if k == "send" or k == "recv":
                kind, region, items, touched = _message_slice(ext, lo, hi, sending=k == "send")
            elif k in ("rrecv", "rrc"):
                kind, region, items, touched = _receive_reduce_slice(ext, lo, hi, fused=k == "rrc")
            else:
                kind, region, items, touched = _local_slice(ext, lo, hi, W_COPY if k == "copy" else W_REDUCE)
            self.kind.append(kind)
            if region is not None:
                self.mpi[v] = Message(peer, ext.tag_base + j, region)
            if items:
                self.work[v] = items
            pieces.append(touched)


def _message_slice(ext: OpExtent, lo: int, hi: int, *, sending: bool):
    """A send slice (of ``ext.src``) or a receive slice (into ``ext.dst``).

    Scattered chunks go through staging: packed into it before the send,
    unpacked from it after the arrival.
    """
    segs = ext.src_segs if sending else ext.dst_segs
    kind = K_SEND if sending else K_RECV
    touched = _cut(segs, lo, hi)
    if ext.staging is None:
        return kind, (touched[0] if touched else EMPTY), (), touched
    dst, src = (ext.staged_segs, segs) if sending else (segs, ext.staged_segs)
    items = tuple(WorkItem(W_COPY, p.a, p.b) for p in _aligned(dst, src, lo, hi))
    return kind, ext.staged(lo, hi), items, touched


def _receive_reduce_slice(ext: OpExtent, lo: int, hi: int, *, fused: bool):
    region = ext.staged(lo, hi) if ext.staging is not None else EMPTY
    touched = _cut(ext.dst_segs, lo, hi)
    if not ext.total:  # an empty message: nothing to reduce
        return K_RRED, region, (), touched
    if not fused:
        items = tuple(WorkItem(W_REDUCE, p.a, p.b) for p in _aligned(ext.dst_segs, ext.staged_segs, lo, hi))
        return K_RRED, region, items, touched
    touched += _cut(ext.src_segs, lo, hi)
    items = tuple(
        WorkItem(W_FUSED, p.b, ext.staged(p.lo, p.hi), p.a) for p in _aligned(ext.src_segs, ext.dst_segs, lo, hi)
    )
    return K_RRED, region, items, touched


def _local_slice(ext: OpExtent, lo: int, hi: int, mode: int):
    items = []
    touched = []
    for p in _aligned(ext.src_segs, ext.dst_segs, lo, hi):
        items.append(WorkItem(mode, p.b, p.a))
        touched += [p.a, p.b]
    return K_LOCAL, None, tuple(items), touched


# ----------------------------------------------------------------- 4. edges
def _edges(program: LocalProgram, geo: ChunkGeometry, nodes: _SliceNodes) -> list[set[int]]:
    """Predecessors of every node: overlapping slices of conflicting ops, and ordering hints.

    Adds a join node for each hint on an op of several slices.
    """
    preds: list[set[int]] = [set() for _ in nodes.kind]
    # per op and buffer: its slice pieces sorted (start, stop, node); the pieces of one op in one
    # buffer are disjoint, so their stops are sorted too
    piece_index: list[dict[str, tuple[list[int], list[tuple[int, int, int]]]]] = []
    for slices, pieces in zip(nodes.slices_of, nodes.pieces_of):
        per: dict[str, list[tuple[int, int, int]]] = {}
        for v, pcs in zip(slices, pieces):
            for buf, start, stop in pcs:
                per.setdefault(buf, []).append((start, stop, v))
        index = {}
        for buf, lst in per.items():
            lst.sort()
            index[buf] = ([x[1] for x in lst], lst)
        piece_index.append(index)

    for b_op, conflicts in enumerate(program.hazards):
        for a_op, keys in conflicts.items():
            regions: dict[str, list[tuple[int, int]]] = {}
            for buf, k in keys:
                regions.setdefault(buf, []).append(geo.conflict_range(buf, k))
            a_index = piece_index[a_op]
            for v, pcs in zip(nodes.slices_of[b_op], nodes.pieces_of[b_op]):
                for buf, start, stop in pcs:
                    if buf not in a_index or buf not in regions:
                        continue
                    stops, lst = a_index[buf]
                    for rs, re_ in regions[buf]:
                        lo, hi = max(start, rs), min(stop, re_)
                        if lo >= hi:
                            continue
                        p = bisect.bisect_right(stops, lo)  # first piece of A ending after lo
                        while p < len(lst) and lst[p][0] < hi:
                            preds[v].add(lst[p][2])
                            p += 1
        for a_op in program.hints[b_op]:
            a_slices = nodes.slices_of[a_op]
            if len(a_slices) == 1:
                for v in nodes.slices_of[b_op]:
                    preds[v].add(a_slices[0])
            else:
                j = len(nodes.kind)  # a join node: "all slices of A are done"
                nodes.kind.append(K_JOIN)
                preds.append(set(a_slices))
                for v in nodes.slices_of[b_op]:
                    preds[v].add(j)
    return preds
