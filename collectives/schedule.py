"""The schedule IR: per-rank operations on chunked buffers, with dependencies.

A :class:`Schedule` is data, never code. Every rank has three buffers cut
into chunks: ``"i"`` (input, ``collective.in_chunks`` chunks), ``"o"``
(output, ``collective.out_chunks``) and ``"s"`` (scratch,
``scratch_chunks``). Operations (:class:`Op`) act on a contiguous range of
chunks (:class:`Chunks`):

``send``    read ``src`` on ``rank`` and send it to ``peer``;
``recv``    receive from ``peer`` into ``dst``; with ``reduce=True`` the data
            received is combined into ``dst`` instead of overwriting it;
``copy``    ``dst = src`` on the same rank;
``reduce``  ``dst = dst (op) src`` on the same rank.

Matching: the k-th send (in ``id`` order) from rank ``a`` to rank ``b``
matches the k-th receive on ``b`` from ``a``; both move the same number of
chunks. Dependencies (``deps``) name operations *on the same rank* that must
complete first; cross-rank order comes only from send/recv matching. An op
may start as soon as its dependencies are done (dataflow, no global steps).

In place. A schedule with ``in_place=True`` runs on one buffer per rank:
its input and output are aliased (``MPI_IN_PLACE``; MSCCL's ``inplace="1"``)
the way NCCL lays out in-place collectives -- the larger buffer is the real
one and the smaller lies inside it (rank ``r``, chunk factor ``c``):

=================================== =========================================
kind                                aliasing (:data:`IN_PLACE_ALIASING`)
=================================== =========================================
allreduce, alltoall, broadcast,     ``same``: input chunk ``j`` *is* output
reduce                              chunk ``j``
allgather, gather                   ``input_in_output``: input chunk ``j`` is
                                    output chunk ``r*c + j``
reduce_scatter, scatter             ``output_in_input``: output chunk ``j``
                                    is input chunk ``r*c + j``
=================================== =========================================

Ops still name ``i``/``o`` ranges; :meth:`Schedule.storage` says where a
range lives in the one buffer, and the structure check, the verifier (races,
symbolic execution, postcondition) and everything else that asks whether two
ranges are the same chunks compare storages. An in-place schedule may
therefore write its input (it is part of the writable buffer), which an
out-of-place one may not (MPI send buffers are read-only). Scratch is never
aliased. The simulator needs nothing: it charges messages and local ops, not
addresses. Out of place (``in_place=False``) is the default and what the
executor runs; :func:`ccsynth.collectives.transforms.alias_in_place` turns an
out-of-place schedule into its in-place form.

Chunk extents. The built-in collectives cut every buffer into equal chunks
(one *unit* each). An :class:`~ccsynth.collectives.explicit.ExplicitCollective`
(cross-mesh resharding) gives every chunk its own extent in units;
:meth:`Schedule.op_units` is what an op moves (its chunk count for the
built-in kinds), a send and its receive and a copy's two sides must move as
many units as chunks, and the simulator charges units, not chunks. Such
schedules are not in place, and their scratch chunks are the relay slots
the explicit collective declares (with their extents).

The JSON form (``format: ccsynth.schedule``, ``version: 1``) round-trips
exactly: ``Schedule.from_dict(s.to_dict()) == s``. ``"in_place": true`` is
written only for in-place schedules; a file without it is out of place, so
files written before the field existed read as they always did. Likewise
``"topology_inline"`` (the topology file the schedule was made for, where
its ``topology`` name does not rebuild it; :mod:`ccsynth.formats.recorded_topology`)
is written only when set.
"""

from __future__ import annotations

import copy
import json
import os
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, ClassVar, cast

from ccsynth.atomic import write_text
from ccsynth.collectives.explicit import EXPLICIT_KIND, ExplicitCollective
from ccsynth.collectives.gc_pause import gc_paused
from ccsynth.collectives.spec import Collective
from ccsynth.errors import CCSynthError, ScheduleError, ScheduleFormatError
from ccsynth.limits import LIMITS
from ccsynth.limits import check as check_limit
from ccsynth.reading import check_depth, parse_json, read_text

FORMAT = "ccsynth.schedule"
VERSION = 1
BUFFERS = ("i", "o", "s")
OP_KINDS = ("send", "recv", "copy", "reduce")

#: In-place aliasing of each collective kind (see the module docstring).
IN_PLACE_ALIASING = {
    "allreduce": "same",
    "alltoall": "same",
    "broadcast": "same",
    "reduce": "same",
    "allgather": "input_in_output",
    "gather": "input_in_output",
    "reduce_scatter": "output_in_input",
    "scatter": "output_in_input",
}

__all__ = [
    "FORMAT",
    "VERSION",
    "BUFFERS",
    "OP_KINDS",
    "IN_PLACE_ALIASING",
    "Chunks",
    "ChunkRanges",
    "Op",
    "new_op",
    "Schedule",
    "in_place_storage",
    "collective_from_dict",
    "check_writes_cover_outputs",
    "schedule_from_json",
    "read_schedule_text",
    "read_schedule",
    "save_schedule",
]


@dataclass(frozen=True, slots=True)
class Chunks:
    """``count`` consecutive chunks of buffer ``buf`` starting at ``index``.

    Immutable and without a ``__dict__`` (slots): a schedule holds millions of
    ops, and the builder shares one :class:`Chunks` between every op of a
    schedule that names the same range.
    """

    buf: str
    index: int
    count: int = 1

    def __post_init__(self) -> None:
        if self.buf not in BUFFERS:
            raise ScheduleError(f"unknown buffer {self.buf!r}; buffers are 'i' (input), 'o' (output), 's' (scratch)")
        for what, v, lo in (("index", self.index, 0), ("count", self.count, 1)):
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                raise ScheduleError(f"chunk {what} must be an integer >= {lo}, got {v!r}")

    def indices(self) -> range:
        return range(self.index, self.index + self.count)

    def to_list(self) -> list:
        return [self.buf, self.index, self.count]

    @classmethod
    def of(cls, value: Chunks | tuple | list) -> Chunks:
        """Accept a Chunks, or ``(buf, index)`` / ``(buf, index, count)``."""
        if isinstance(value, Chunks):
            return value
        if isinstance(value, (tuple, list)) and len(value) in (2, 3):
            return cls(*value)
        raise ScheduleError(f"a chunk range is [buffer, index, count], got {value!r}")

    def __str__(self) -> str:
        if self.count == 1:
            return f"{self.buf}[{self.index}]"
        return f"{self.buf}[{self.index}:{self.index + self.count}]"


def in_place_storage(collective: Collective, rank: int, chunks: Chunks) -> Chunks:
    """Where ``chunks`` of ``rank`` lie when its input and output are one buffer.

    >>> in_place_storage(Collective("allgather", 4, 2), 3, Chunks("i", 1))
    Chunks(buf='o', index=7, count=1)
    """
    mode = IN_PLACE_ALIASING[collective.kind]
    if chunks.buf == "i" and mode == "same":
        return Chunks("o", chunks.index, chunks.count)
    if chunks.buf == "i" and mode == "input_in_output":
        return Chunks("o", rank * collective.chunk_factor + chunks.index, chunks.count)
    if chunks.buf == "o" and mode == "output_in_input":
        return Chunks("i", rank * collective.chunk_factor + chunks.index, chunks.count)
    return chunks


def _plainly_valid(op: Op, i: int, n: int, sizes: dict[str, int], max_channels: float, n_ops: int,
                   ranks_of: list[int]) -> bool:
    """Every check of :meth:`Schedule.check_structure` passes for ``op`` at position ``i`` of a schedule of
    uniform chunks, out of place (False: some check may fail; the full checks then say which)."""
    r, k, src, dst, ch = op.rank, op.kind, op.src, op.dst, op.channel
    if not (op.id == i and 0 <= r < n and ch.__class__ is int and 0 <= ch <= max_channels):
        return False
    if k == "send":
        if not (dst is None and src is not None and not op.reduce and 0 <= op.peer < n and op.peer != r
                and src.index + src.count <= sizes[src.buf]):
            return False
    elif k == "recv":
        if not (src is None and dst is not None and 0 <= op.peer < n and op.peer != r and dst.buf != "i"
                and dst.index + dst.count <= sizes[dst.buf]):
            return False
    elif k in ("copy", "reduce"):
        if not (src is not None and dst is not None and op.peer == -1 and not op.reduce and src.count == dst.count
                and dst.buf != "i" and src.index + src.count <= sizes[src.buf]
                and dst.index + dst.count <= sizes[dst.buf] and not _overlap(src, dst)):
            return False
    else:
        return False
    return all(0 <= d < n_ops and ranks_of[d] == r and d != i for d in op.deps)


def _overlap(a: Chunks, b: Chunks) -> bool:
    return a.buf == b.buf and a.index < b.index + b.count and b.index < a.index + a.count


class ChunkRanges:
    """``src_chunks``/``dst_chunks`` of an op record with optional ``src``/``dst`` ranges.

    :class:`Op` and the op records built from it (the executor's local ops,
    the MSCCL reader's drafts) have the ranges their kind uses and None for
    the others. Code that needs a range reads it here: reading one the kind
    lacks is a bug or a malformed input, and raises ``missing_error``.
    """

    __slots__ = ()  # subclasses choose: Op has slots, other records may keep a __dict__
    src: Chunks | None
    dst: Chunks | None
    missing_error: ClassVar[type[ScheduleError]] = ScheduleError

    @property
    def src_chunks(self) -> Chunks:
        if self.src is None:
            raise self.missing_error(f"{self!r} has no src range")
        return self.src

    @property
    def dst_chunks(self) -> Chunks:
        if self.dst is None:
            raise self.missing_error(f"{self!r} has no dst range")
        return self.dst


@dataclass(frozen=True, slots=True)
class Op(ChunkRanges):
    """One operation of one rank. ``id`` is its index in ``Schedule.ops``.

    Slotted (no ``__dict__``): about 100 bytes an op plus its ``deps`` tuple,
    what lets a 3-million-op schedule (1,024 ranks) fit in memory.
    """

    id: int
    rank: int
    kind: str
    src: Chunks | None = None
    dst: Chunks | None = None
    peer: int = -1
    reduce: bool = False
    deps: tuple[int, ...] = ()
    channel: int = 0

    @property
    def count(self) -> int:
        c = self.src if self.src is not None else self.dst
        return c.count if c is not None else 0

    def reads(self) -> tuple[Chunks, ...]:
        """Chunk ranges this op reads on its own rank."""
        if self.kind == "send":
            return (self.src_chunks,)
        if self.kind == "copy":
            return (self.src_chunks,)
        if self.kind == "reduce":
            return (self.src_chunks, self.dst_chunks)
        if self.kind == "recv" and self.reduce:
            return (self.dst_chunks,)
        return ()

    def writes(self) -> tuple[Chunks, ...]:
        """Chunk ranges this op writes on its own rank."""
        return () if self.kind == "send" else (self.dst_chunks,)

    def describe(self) -> str:
        if self.kind == "send":
            return f"op {self.id} (rank {self.rank}: send {self.src} -> rank {self.peer})"
        if self.kind == "recv":
            verb = "recv-reduce" if self.reduce else "recv"
            return f"op {self.id} (rank {self.rank}: {verb} {self.dst} <- rank {self.peer})"
        return f"op {self.id} (rank {self.rank}: {self.kind} {self.src} -> {self.dst})"

    def to_dict(self) -> dict:
        d: dict[str, Any] = {"id": self.id, "rank": self.rank, "op": self.kind}
        if self.peer >= 0:
            d["peer"] = self.peer
        if self.src is not None:
            d["src"] = self.src.to_list()
        if self.dst is not None:
            d["dst"] = self.dst.to_list()
        if self.reduce:
            d["reduce"] = True
        if self.deps:
            d["deps"] = list(self.deps)
        if self.channel:
            d["channel"] = self.channel
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Op:
        if not isinstance(d, dict):
            raise ScheduleFormatError(f"an operation must be an object, got {d!r}")
        try:
            deps = d.get("deps", ())
            if not isinstance(deps, (list, tuple)):
                raise ScheduleFormatError(f"deps must be a list of op ids, got {deps!r}")
            reduce = d.get("reduce", False)
            if not isinstance(reduce, bool):
                raise ScheduleFormatError(f"reduce must be true or false, got {reduce!r}")
            if not isinstance(d["op"], str):
                raise ScheduleFormatError(f"op must be a string (send, recv, copy, reduce), got {d['op']!r}")
            return cls(
                id=_int(d["id"], "id"),
                rank=_int(d["rank"], "rank"),
                kind=d["op"],
                src=Chunks.of(d["src"]) if "src" in d else None,
                dst=Chunks.of(d["dst"]) if "dst" in d else None,
                peer=_int(d.get("peer", -1), "peer"),
                reduce=reduce,
                deps=tuple(_int(x, "dependency") for x in deps),
                channel=_int(d.get("channel", 0), "channel"),
            )
        except KeyError as e:
            raise ScheduleFormatError(f"operation {d.get('id', '?')} is missing field {e.args[0]!r}") from None
        except ScheduleError as e:
            raise ScheduleFormatError(f"operation {d.get('id', '?')}: {e}") from None


_OP_FIELDS = ("id", "rank", "kind", "src", "dst", "peer", "reduce", "deps", "channel")
_SET_ID, _SET_RANK, _SET_KIND, _SET_SRC, _SET_DST, _SET_PEER, _SET_REDUCE, _SET_DEPS, _SET_CHANNEL = (
    getattr(Op, name).__set__ for name in _OP_FIELDS)
_new_object = object.__new__


def new_op(id: int, rank: int, kind: str, src: Chunks | None, dst: Chunks | None, peer: int, reduce: bool,
           deps: tuple[int, ...], channel: int) -> Op:
    """``Op(id, rank, kind, src, dst, peer, reduce, deps, channel)``, equal to it, in half the time.

    A frozen dataclass's ``__init__`` sets every field through ``object.__setattr__``, which looks the
    field's slot up by name each time: for a builder making millions of ops that is half of each op's cost
    (:class:`~ccsynth.collectives.builder.ScheduleBuilder`). This sets the slots directly; the fields are not
    checked here either (the Schedule's structure check does that).
    """
    op = _new_object(Op)
    _SET_ID(op, id)
    _SET_RANK(op, rank)
    _SET_KIND(op, kind)
    _SET_SRC(op, src)
    _SET_DST(op, dst)
    _SET_PEER(op, peer)
    _SET_REDUCE(op, reduce)
    _SET_DEPS(op, deps)
    _SET_CHANNEL(op, channel)
    return op


def _op_json(op: Op) -> str:
    """``json.dumps(op.to_dict(), separators=(",", ":"))`` without the dict: the fields of a checked op are
    ints, a bool and the names of :data:`OP_KINDS` and :data:`BUFFERS`, which JSON writes as Python does."""
    text = f'{{"id":{op.id},"rank":{op.rank},"op":"{op.kind}"'
    if op.peer >= 0:
        text += f',"peer":{op.peer}'
    if op.src is not None:
        text += f',"src":["{op.src.buf}",{op.src.index},{op.src.count}]'
    if op.dst is not None:
        text += f',"dst":["{op.dst.buf}",{op.dst.index},{op.dst.count}]'
    if op.reduce:
        text += ',"reduce":true'
    if op.deps:
        text += f',"deps":[{",".join(map(str, op.deps))}]'
    if op.channel:
        text += f',"channel":{op.channel}'
    return text + "}"


def _int(v, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ScheduleFormatError(f"{what} must be an integer, got {v!r}")
    return v


@dataclass(frozen=True)
class Schedule:
    """A complete schedule for one collective.

    ``check_structure()`` (called on construction) enforces what can be
    checked without simulation: op ids are ``0..len-1`` in order, kinds and
    fields fit, chunk ranges are inside their buffers, dependencies name
    earlier-or-later ops *of the same rank*. Full proof that it implements
    the collective is :func:`ccsynth.collectives.verify.verify`.
    ``in_place``: input and output are aliased (see the module docstring).
    """

    name: str
    collective: Collective  # or an ExplicitCollective (the same interface; see the module docstring)
    ops: tuple[Op, ...]
    scratch_chunks: int = 0
    topology: str = ""
    meta: dict = field(default_factory=dict, compare=False, hash=False)
    in_place: bool = False
    #: the topology file (``format: ccsynth.topology``) the schedule was made for, where its name alone does not
    #: rebuild it (:mod:`ccsynth.formats.recorded_topology`); None: the name is the record
    topology_inline: dict | None = field(default=None, compare=False, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "ops", tuple(self.ops))
        self.check_structure()

    @property
    def n_ranks(self) -> int:
        return self.collective.n_ranks

    def storage(self, rank: int, chunks: Chunks) -> Chunks:
        """Where ``chunks`` of ``rank`` live: themselves, or their in-place alias."""
        return in_place_storage(self.collective, rank, chunks) if self.in_place else chunks

    def units(self, rank: int, chunks: Chunks) -> int:
        """Extent of ``chunks`` of ``rank`` in units (their count when chunks are uniform)."""
        c = self.collective
        if c.uniform:
            return chunks.count
        return sum(c.chunk_units(rank, chunks.buf, i) for i in chunks.indices())

    def op_units(self, op: Op) -> int:
        """Units ``op`` moves (see the module docstring)."""
        c = op.src if op.src is not None else op.dst
        return self.units(op.rank, c) if c is not None else 0

    def buffer_chunks(self, buf: str) -> int:
        return {"i": self.collective.in_chunks, "o": self.collective.out_chunks, "s": self.scratch_chunks}[buf]

    @cached_property
    def _by_rank(self) -> tuple[tuple[Op, ...], ...]:
        out: list[list[Op]] = [[] for _ in range(self.n_ranks)]
        for op in self.ops:
            out[op.rank].append(op)
        return tuple(tuple(x) for x in out)

    def ops_of(self, rank: int) -> tuple[Op, ...]:
        """The ops of ``rank`` in id order."""
        return self._by_rank[rank]

    @cached_property
    def matches(self) -> dict[int, int]:
        """send id -> recv id and recv id -> send id (see module doc).

        Raises :class:`ScheduleError` if some send or recv has no partner
        or partners move different chunk counts.
        """
        sends: dict[tuple[int, int], list[Op]] = {}
        recvs: dict[tuple[int, int], list[Op]] = {}
        for op in self.ops:
            if op.kind == "send":
                sends.setdefault((op.rank, op.peer), []).append(op)
            elif op.kind == "recv":
                recvs.setdefault((op.peer, op.rank), []).append(op)
        out: dict[int, int] = {}
        for pair in sorted(set(sends) | set(recvs)):
            s, r = sends.get(pair, []), recvs.get(pair, [])
            for a, b in zip(s, r):
                if a.count != b.count:
                    raise ScheduleError(f"{a.describe()} sends {a.count} chunk(s) but the matching {b.describe()} expects {b.count}")
                if not self.collective.uniform and self.op_units(a) != self.op_units(b):
                    raise ScheduleError(f"{a.describe()} sends {self.op_units(a)} unit(s) but the matching "
                                        f"{b.describe()} expects {self.op_units(b)}")
                out[a.id] = b.id
                out[b.id] = a.id
            if len(s) != len(r):
                extra = (s if len(s) > len(r) else r)[min(len(s), len(r))]
                kind = "send" if len(s) > len(r) else "receive"
                raise ScheduleError(
                    f"rank {pair[0]} sends {len(s)} message(s) to rank {pair[1]}, which posts {len(r)} receive(s): "
                    f"unmatched {kind} {extra.describe()}"
                )
        return out

    def check_structure(self) -> None:
        n = self.n_ranks
        if isinstance(self.scratch_chunks, bool) or not isinstance(self.scratch_chunks, int) or self.scratch_chunks < 0:
            raise ScheduleError(f"scratch_chunks must be a non-negative integer, got {self.scratch_chunks!r}")
        check_limit("scratch_chunks", self.scratch_chunks, "MAX_SCRATCH_CHUNKS", ScheduleError)
        check_limit("operations", len(self.ops), "MAX_SCHEDULE_OPS", ScheduleError)
        c = self.collective
        check_limit(f"{c.describe()} with {self.scratch_chunks} scratch chunks: chunks of all ranks' buffers",
                    n * (c.in_chunks + c.out_chunks + self.scratch_chunks), "MAX_SCHEDULE_CHUNKS", ScheduleError)
        if not isinstance(self.in_place, bool):
            raise ScheduleError(f"in_place must be true or false, got {self.in_place!r}")
        if isinstance(c, ExplicitCollective) and (self.in_place or self.scratch_chunks > c.relay_chunks):
            raise ScheduleError(f"a schedule of {c.describe()} (explicit chunks) is never in place, and its scratch "
                                f"is the {c.relay_chunks} relay slot(s) its collective declares")
        ranks_of = [op.rank for op in self.ops]
        max_channels = LIMITS["MAX_CHANNELS"]
        sizes = {"i": c.in_chunks, "o": c.out_chunks, "s": self.scratch_chunks}
        n_ops = len(self.ops)
        # the common case (uniform chunks, out of place) is accepted by one test per field below; an op it
        # does not accept goes through every check in order, which names what is wrong
        fast = c.uniform and not self.in_place
        for i, op in enumerate(self.ops):
            if fast and _plainly_valid(op, i, n, sizes, max_channels, n_ops, ranks_of):
                continue
            if op.id != i:
                raise ScheduleError(f"operation at position {i} has id {op.id}; ids must be 0..{len(self.ops) - 1} in order")
            if not 0 <= op.rank < n:
                raise ScheduleError(f"{op.describe()} names rank {op.rank}, but the collective has {n} ranks")
            if op.kind not in OP_KINDS:
                raise ScheduleError(f"operation {op.id} has unknown kind {op.kind!r}; kinds are {', '.join(OP_KINDS)}")
            if isinstance(op.channel, bool) or not isinstance(op.channel, int) or op.channel < 0:
                raise ScheduleError(f"{op.describe()} has channel {op.channel!r}; channels are integers from 0")
            if op.channel > max_channels:  # described only when it fails (the description costs per op)
                check_limit(f"{op.describe()}: channel", op.channel, "MAX_CHANNELS", ScheduleError)
            if op.kind in ("send", "recv"):
                if not 0 <= op.peer < n or op.peer == op.rank:
                    raise ScheduleError(f"{op.describe()} has bad peer {op.peer}")
            elif op.peer != -1:
                raise ScheduleError(f"local {op.describe()} must not name a peer")
            need_src = op.kind in ("send", "copy", "reduce")
            need_dst = op.kind in ("recv", "copy", "reduce")
            if need_src != (op.src is not None) or need_dst != (op.dst is not None):
                raise ScheduleError(f"operation {op.id} ({op.kind}) needs {'src' if need_src else ''}{' and ' if need_src and need_dst else ''}{'dst' if need_dst else ''}")
            if op.dst is not None and op.dst.buf == "i" and not self.in_place:
                # MPI send buffers are read-only; a schedule must leave the input intact.
                raise ScheduleError(f"{op.describe()} writes the input buffer; schedules may only write 'o' and 's'")
            if op.reduce and op.kind != "recv":
                raise ScheduleError(f"{op.describe()}: only a recv can carry reduce=true (use a 'reduce' op)")
            if op.src is not None and op.dst is not None and op.src.count != op.dst.count:
                raise ScheduleError(f"{op.describe()} moves {op.src.count} chunk(s) into {op.dst.count}")
            for ch in (op.src, op.dst):
                if ch is not None and ch.index + ch.count > sizes[ch.buf]:
                    raise ScheduleError(
                        f"{op.describe()} touches {ch}, past the end of buffer {ch.buf!r} ({self.buffer_chunks(ch.buf)} chunks)"
                    )
            if not self.collective.uniform and op.src is not None and op.dst is not None and \
                    self.units(op.rank, op.src) != self.units(op.rank, op.dst):
                raise ScheduleError(f"{op.describe()} moves {self.units(op.rank, op.src)} unit(s) into "
                                    f"{self.units(op.rank, op.dst)}")
            if op.kind in ("copy", "reduce"):
                src, dst = op.src_chunks, op.dst_chunks
                if self.in_place:
                    src, dst = self.storage(op.rank, src), self.storage(op.rank, dst)
                if _overlap(src, dst):
                    aliased = " (input and output are one buffer)" if self.in_place else ""
                    raise ScheduleError(f"{op.describe()} reads and writes overlapping chunks{aliased}")
            for d in op.deps:
                if not 0 <= d < len(self.ops):
                    raise ScheduleError(f"{op.describe()} depends on unknown operation {d}")
                if ranks_of[d] != op.rank:
                    raise ScheduleError(f"{op.describe()} depends on op {d} of rank {ranks_of[d]}; dependencies must stay on one rank")
                if d == op.id:
                    raise ScheduleError(f"{op.describe()} depends on itself")

    # ----------------------------------------------------------------- JSON
    def to_dict(self) -> dict:
        return {**self._head(), "ops": [op.to_dict() for op in self.ops]}

    def _head(self) -> dict:
        """:meth:`to_dict` up to its ``ops``, which come last."""
        return {
            "format": FORMAT,
            "version": VERSION,
            "name": self.name,
            "collective": self.collective.to_dict(),
            "topology": self.topology,
            **({"topology_inline": self.topology_inline} if self.topology_inline is not None else {}),
            "scratch_chunks": self.scratch_chunks,
            **({"in_place": True} if self.in_place else {}),
            "meta": self.meta,
        }

    @classmethod
    def from_dict(cls, d: Any) -> Schedule:
        if not isinstance(d, dict):
            raise ScheduleFormatError(f"a schedule file must hold a JSON object, got {type(d).__name__}")
        if d.get("format") != FORMAT:
            raise ScheduleFormatError(f"not a ccsynth schedule (format is {d.get('format')!r}, expected {FORMAT!r})")
        version = d.get("version")
        if version != VERSION or isinstance(version, bool):
            raise ScheduleFormatError(f"schedule format version {version!r} is not supported (this ccsynth reads version {VERSION})")
        ops = d.get("ops")
        if not isinstance(ops, list):
            raise ScheduleFormatError("schedule has no 'ops' list")
        check_limit("schedule: operations", len(ops), "MAX_SCHEDULE_OPS", ScheduleFormatError)
        in_place = d.get("in_place", False)
        if not isinstance(in_place, bool):
            raise ScheduleFormatError(f"in_place must be true or false, got {in_place!r}")
        for key in ("name", "topology"):
            if d.get(key) is not None and not isinstance(d[key], str):
                raise ScheduleFormatError(f"schedule {key} must be a string, got {_json_type(d[key])} {d[key]!r:.40}")
        meta = d.get("meta", {})
        if meta is None:
            meta = {}
        if not isinstance(meta, dict):
            raise ScheduleFormatError(f"schedule meta must be an object, got {_json_type(meta)} {meta!r:.40}")
        check_depth(meta, "schedule meta", ScheduleFormatError)
        inline = d.get("topology_inline")
        if inline is not None:
            if not isinstance(inline, dict):
                raise ScheduleFormatError(f"schedule topology_inline must be a topology object, got "
                                          f"{_json_type(inline)} {inline!r:.40}")
            check_depth(inline, "schedule topology_inline", ScheduleFormatError)
        try:
            with gc_paused():  # millions of ops (see ccsynth.collectives.gc_pause)
                return cls(
                    name=d.get("name") or "",
                    collective=collective_from_dict(d.get("collective")),
                    ops=tuple(Op.from_dict(o) for o in ops),
                    scratch_chunks=d.get("scratch_chunks", 0),
                    topology=d.get("topology") or "",
                    meta=dict(meta),
                    in_place=in_place,
                    topology_inline=inline,
                )
        except ScheduleFormatError:
            raise
        except CCSynthError as e:
            raise ScheduleFormatError(str(e)) from None

    def to_json(self, indent: int | None = None) -> str:
        """The JSON text of :meth:`to_dict` (compact unless ``indent``).

        The compact text is written op by op (:func:`_op_json`), byte for byte
        what ``json.dumps`` makes of :meth:`to_dict` (``tests/test_schedule.py``),
        without the dict and lists of every op in between.
        """
        with gc_paused():  # one string per op (see ccsynth.collectives.gc_pause)
            if indent is not None:
                return json.dumps(self.to_dict(), indent=indent)
            text = json.dumps(self._head(), separators=(",", ":"))
            return f"{text[:-1]},\"ops\":[{','.join(map(_op_json, self.ops))}]}}"

    def with_meta(self, **kv) -> Schedule:
        """This schedule with ``kv`` added to its ``meta``.

        The ops are this schedule's own, checked already: the copy is not checked again, and keeps what
        this one has computed of them (:attr:`matches`; a million-op check costs seconds).
        """
        out = copy.copy(self)
        object.__setattr__(out, "meta", {**self.meta, **kv})
        return out

    def with_topology(self, name: str, inline: dict | None) -> Schedule:
        """This schedule recording topology ``name`` (and ``inline``, its file, or None); the ops are not checked
        again (see :meth:`with_meta`)."""
        out = copy.copy(self)
        object.__setattr__(out, "topology", name)
        object.__setattr__(out, "topology_inline", inline)
        return out

    def __repr__(self) -> str:
        where = ", in place" if self.in_place else ""
        return f"Schedule({self.name!r}, {self.collective.describe()}, {len(self.ops)} ops{where})"


def collective_from_dict(d: Any) -> Collective:
    """A built-in collective, or an explicit one (``kind: explicit``), from its JSON object."""
    if isinstance(d, dict) and d.get("kind") == EXPLICIT_KIND:
        return cast(Collective, ExplicitCollective.from_dict(d))  # the same interface (see the module docstring)
    return Collective.from_dict(d)


def check_writes_cover_outputs(schedule: Schedule) -> None:
    """Refuse, before verification, a schedule whose ops cannot fill its outputs.

    Outputs start empty, so every output chunk the postcondition names must
    be written by some op (in place, the input already lies in some of
    them). A cheap necessary condition that readers of files check before
    :func:`~ccsynth.collectives.verify.verify`: a file of a hundred bytes
    that names a large collective would otherwise have the verifier build
    its whole postcondition first. Raises :class:`ScheduleError`.
    """
    c = schedule.collective
    written = sum(op.dst.count for op in schedule.ops if op.dst is not None and op.dst.buf != "s")
    needed = c.postcondition_size - (c.n_ranks * c.in_chunks if schedule.in_place else 0)
    if written < needed:
        raise ScheduleError(
            f"schedule {schedule.name!r} cannot implement {c.describe()}: its ops write at most {written} output "
            f"chunk(s) and the collective needs {needed}"
        )


def save_schedule(schedule: Schedule, path: str | os.PathLike) -> None:
    """Write ``schedule`` as ccsynth JSON, atomically (see :mod:`ccsynth.atomic`).

    An unwritable path raises :class:`~ccsynth.atomic.AtomicWriteError`
    (an ``OSError`` and a ``CCSynthError``) naming the path and the reason.
    """
    write_text(path, schedule.to_json() + "\n", what="schedule")


def _json_type(v: Any) -> str:
    return {dict: "object", list: "list", str: "string", bool: "boolean", type(None): "null"}.get(type(v), type(v).__name__)


def schedule_from_json(text: str, source: str = "<string>") -> Schedule:
    """Parse ccsynth schedule JSON (not yet verified); ``source`` names it in errors."""
    return Schedule.from_dict(parse_json(text, repr(source), ScheduleFormatError))


def read_schedule_text(path: str | os.PathLike) -> str:
    """The text of a schedule file; an unreadable (or too large) file raises :class:`ScheduleFormatError`."""
    return read_text(path, "schedule", ScheduleFormatError)


def read_schedule(path: str | os.PathLike) -> Schedule:
    """Read a ccsynth JSON schedule file (not verified).

    :func:`ccsynth.load_schedule` (:func:`ccsynth.formats.files.load_schedule`)
    reads MSCCL XML as well and verifies what it reads. Raises
    :class:`ScheduleFormatError` for unreadable or malformed files.
    """
    return schedule_from_json(read_schedule_text(path), os.fspath(path))
