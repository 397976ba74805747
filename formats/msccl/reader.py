"""Read MSCCL XML into a schedule, checking what the MSCCL runtimes require.

:func:`schedule_from_msccl_xml` reads a file in these stages and raises
:class:`~ccsynth.errors.ScheduleFormatError` at the first problem, naming
the element (``step k of <tb id=t> of <gpu id=g>``) and attribute:

1. *algo* -- ``<algo>`` is well formed and its attributes fit: a known
   ``coll`` and ``proto``, ``nchunksperloop`` a multiple of ``ngpus`` where
   the collective is cut in pieces, ``inplace`` 0 or 1 (missing
   ``minBytes``/``maxBytes``, which the executor refuses, is a warning);
2. *gpus* -- every ``<gpu>``, ``<tb>`` and ``<step>``: attribute types,
   step types and buffers, ranges inside the gpu's buffers, counts below
   :data:`~.limits.RUNTIME_MAX_COUNT`, a peer for every sending or
   receiving step; threadblock ids ``0..n-1``, one threadblock per peer and
   channel and direction; ``depid``/``deps`` naming signalled steps, ``nop``
   steps as the runtime needs them;
3. *streams* -- the k-th send of gpu ``a`` to ``b`` on channel ``c`` meets
   the k-th receive of ``b`` from ``a`` on ``c``, with the same count;
4. *deadlock* -- every step can run: a step runs after the previous step of
   its threadblock, its ``depid``/``deps`` step and (if it receives) the
   step that sends its message; sends do not wait for their receiver
   (MSCCL's connections are buffered). A cycle is named step by step;
5. *ops* -- each step becomes ops (``rcs`` = recv + send, ``rrc`` with
   distinct src and dst = copy + recv-reduce, ``rrs`` goes through fresh
   scratch chunks); buffer references go through the in-place aliasing;
6. *file order* -- the file's order (threadblock order and ``depid``/
   ``deps``) becomes dependencies the way MSCCL executes it: a step waits
   for its ``deps`` step and the previous step of its threadblock, but a
   receive takes its data whenever it arrives (the sender already pushed it
   into the connection's buffer) and a send counts as done once its data is
   on the way;
7. *chunk order* -- on top, every op waits for the earlier ops of its gpu
   (in the file's order) that touch the same chunks, one of them writing;
8. *schedule* -- ops numbered in file order (gpu, channel, threadblock,
   step), the file's attributes kept in ``meta["msccl"]`` so that the
   exporter writes the same file back (with ``proto``, which the simulator
   prices, and ``fused_recvs``: the receive of every ``rcs``/``rrcs``
   step, fused again on export).

In-place files (``inplace="1"``) become the out-of-place schedule that runs
on separate buffers (``Schedule.in_place`` stays False): the input is first
copied to where the in-place file expects it (the aliasing of
:data:`~ccsynth.collectives.schedule.IN_PLACE_ALIASING`); if the file writes
its input buffer (which an out-of-place schedule may not), the input is
first copied to scratch (the "input shadow", remembered in
``meta["msccl"]["input_shadow"]``) and, for reduce-scatter and scatter, the
result is copied out at the end. The exporter turns such a schedule back
into its in-place form with :func:`ccsynth.collectives.transforms.alias_in_place`.

The schedule is not verified here (``ccsynth.load_schedule`` does that).
"""

from __future__ import annotations

import builtins
import logging
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ccsynth.collectives.schedule import IN_PLACE_ALIASING, ChunkRanges, Chunks, Op, Schedule, in_place_storage
from ccsynth.collectives.spec import Collective
from ccsynth.errors import CCSynthError, ScheduleError, ScheduleFormatError
from ccsynth.formats.msccl.limits import RUNTIME_MAX_COUNT, UNBOUNDED
from ccsynth.formats.msccl.schema import BUFFERS, COLL_READ, PIECED, PROTOCOLS, RECVS, SENDS, STEP_TYPES, USES, WRITES
from ccsynth.graphs import dependency_cycle, topological_order
from ccsynth.limits import check as check_limit
import itertools

log = logging.getLogger(__name__)

__all__ = ["schedule_from_msccl_xml", "describe_xml"]

#: A step of the file: (gpu, threadblock id, step index).
StepKey = tuple[int, int, int]


# ----------------------------------------------------------------- records
class _Attrs:
    """Typed access to an element's attributes with errors that name it."""

    def __init__(self, elem: ET.Element, where: str):
        self.e = elem
        self.where = where

    def str(self, key: str, default: Any = ...) -> str:
        v = self.e.get(key)
        if v is None:
            if default is ...:
                raise ScheduleFormatError(f"{self.where} is missing attribute {key!r}")
            return default
        return v

    # builtins.str: in the class body, plain ``str`` names the method above
    def int(self, key: builtins.str, default: Any = ..., lo: int | None = None, hi: int | None = None) -> int:
        raw = self.str(key, None)
        if raw is None:
            if default is ...:
                raise ScheduleFormatError(f"{self.where} is missing attribute {key!r}")
            return default
        try:
            v = int(raw.strip())
        except ValueError:
            raise ScheduleFormatError(f"{self.where}: attribute {key}={raw!r} is not an integer") from None
        if (lo is not None and v < lo) or (hi is not None and v > hi):
            rng = f">= {lo}" if hi is None else f"in {lo}..{hi}"
            raise ScheduleFormatError(f"{self.where}: attribute {key}={v} must be {rng}")
        return v


@dataclass(frozen=True)
class _Algo:
    """The ``<algo>`` element's attributes."""

    name: str
    proto: str
    coll_name: str
    nchannels: int
    inplace: int
    outofplace: int
    min_bytes: int | None
    max_bytes: int | None
    collective: Collective


@dataclass(frozen=True)
class _XStep:
    s: int
    type: str
    srcbuf: str
    srcoff: int
    dstbuf: str
    dstoff: int
    cnt: int
    depid: int
    deps: int
    hasdep: int
    where: str


@dataclass(frozen=True)
class _XTb:
    id: int
    send: int
    recv: int
    chan: int
    steps: tuple[_XStep, ...]
    where: str


@dataclass(frozen=True)
class _XGpu:
    id: int
    sizes: dict[str, int]  # i/o/s chunks
    tbs: tuple[_XTb, ...]  # by id
    where: str

    def step(self, key: StepKey) -> _XStep:
        return self.tbs[key[1]].steps[key[2]]

    def keys(self) -> list[StepKey]:
        """Every step, by threadblock and index."""
        return [(self.id, t.id, k) for t in self.tbs for k in range(len(t.steps))]


@dataclass
class _Stream:
    """The sending and the receiving steps of one (sender, receiver, channel), in order."""

    sends: list[tuple[_XTb, _XStep, StepKey]] = field(default_factory=list)
    recvs: list[tuple[_XTb, _XStep, StepKey]] = field(default_factory=list)


@dataclass
class _Draft(ChunkRanges):
    """An op under construction; ``key`` orders ops as the file does."""

    rank: int
    channel: int
    key: tuple
    kind: str
    src: Chunks | None = None
    dst: Chunks | None = None
    peer: int = -1
    reduce: bool = False
    deps: set[int] = field(default_factory=set)
    missing_error = ScheduleFormatError


# ------------------------------------------------------------------ reader
def schedule_from_msccl_xml(text: str) -> Schedule:
    """Read MSCCL XML into a :class:`Schedule` (not yet verified: see ``load_schedule``).

    Raises :class:`ScheduleFormatError` naming the element and attribute for
    XML that is not well formed, lacks a required attribute, uses an unknown
    step type or buffer, steps outside a buffer, breaks the threadblock rules
    or whose sends and receives do not pair up.
    """
    root = _parse(text)
    algo = _read_algo(root)  # 1
    gpus = _read_gpus(root, algo.collective)  # 2
    streams = _pair_streams(gpus)  # 3
    _check_deadlock(gpus, streams)  # 4
    build = _OpBuilder(algo, gpus)  # 5
    build.add_steps()
    resolved = build.wait_for_file_order()  # 6
    build.wait_for_chunk_order()  # 7
    build.copy_result_out(resolved)
    return build.schedule()  # 8


def _parse(text: str) -> ET.Element:
    try:
        root = ET.fromstring(text)
    except ET.ParseError as e:
        raise ScheduleFormatError(f"not well-formed MSCCL XML: {e}") from None
    if root.tag != "algo":
        raise ScheduleFormatError(f"MSCCL XML must have an <algo> root element, found <{root.tag}>")
    return root


# ------------------------------------------------------------------- 1. algo
def _read_algo(root: ET.Element) -> _Algo:
    A = _Attrs(root, "<algo>")
    ngpus = A.int("ngpus", lo=1)
    coll_name = A.str("coll")
    kind = COLL_READ.get(coll_name)
    if kind is None:
        raise ScheduleFormatError(f"<algo>: coll={coll_name!r} is not supported; use one of {', '.join(sorted(COLL_READ))}")
    proto = A.str("proto")
    if proto not in PROTOCOLS:
        raise ScheduleFormatError(f"<algo>: proto={proto!r} is not one of {', '.join(PROTOCOLS)}")
    check_limit("<algo>: ngpus", ngpus, "MAX_RANKS", ScheduleFormatError)
    nchannels = A.int("nchannels", lo=0)
    check_limit("<algo>: nchannels", nchannels, "MAX_CHANNELS", ScheduleFormatError)
    ncpl = A.int("nchunksperloop", lo=1)
    check_limit("<algo>: nchunksperloop", ncpl, "MAX_BUFFER_CHUNKS", ScheduleFormatError)
    inplace = A.int("inplace", lo=0, hi=1)
    outofplace = A.int("outofplace", 1 - inplace, lo=0, hi=1)
    min_bytes = A.int("minBytes", None, lo=0)
    max_bytes = A.int("maxBytes", None, lo=0)
    if min_bytes is None or max_bytes is None:
        log.warning("MSCCL XML lacks minBytes/maxBytes: the MSCCL executor would refuse it")
    root_rank = A.int("root", 0, lo=0)
    name = A.str("name", "msccl")
    if kind in PIECED:
        if ncpl % ngpus:
            raise ScheduleFormatError(f"<algo>: nchunksperloop={ncpl} is not a multiple of ngpus={ngpus}, as {coll_name} needs")
        factor = ncpl // ngpus
    else:
        factor = ncpl
    try:
        coll = Collective(kind, ngpus, factor, root_rank)
    except CCSynthError as e:
        raise ScheduleFormatError(f"<algo>: {e}") from None
    return _Algo(name, proto, coll_name, nchannels, inplace, outofplace, min_bytes, max_bytes, coll)


# ------------------------------------------------------------------- 2. gpus
def _read_gpus(root: ET.Element, coll: Collective) -> dict[int, _XGpu]:
    ngpus = coll.n_ranks
    gpus: dict[int, _XGpu] = {}
    steps = 0
    for g in root:
        if g.tag != "gpu":
            log.warning("ignoring unknown element <%s> in <algo>", g.tag)
            continue
        gid = _Attrs(g, "<gpu>").int("id", lo=0, hi=ngpus - 1)
        if gid in gpus:
            raise ScheduleFormatError(f"<gpu id={gid}> appears twice")
        gpus[gid] = _read_gpu(g, gid, coll)
        steps += sum(len(t.steps) for t in gpus[gid].tbs)
        check_limit("MSCCL XML: steps", steps, "MAX_SCHEDULE_OPS", ScheduleFormatError)
    missing = [r for r in range(ngpus) if r not in gpus]
    if missing:
        raise ScheduleFormatError(f"<algo ngpus={ngpus}> has no <gpu id={missing[0]}> element")
    return gpus


def _read_gpu(g: ET.Element, gid: int, coll: Collective) -> _XGpu:
    where = f"<gpu id={gid}>"
    G = _Attrs(g, where)
    sizes = {"i": G.int("i_chunks", lo=0), "o": G.int("o_chunks", lo=0), "s": G.int("s_chunks", lo=0)}
    check_limit(f"{where}: s_chunks", sizes["s"], "MAX_SCRATCH_CHUNKS", ScheduleFormatError)
    for b, have in (("i", coll.in_chunks), ("o", coll.out_chunks)):
        if sizes[b] > have:
            raise ScheduleFormatError(f"{where}: {b}_chunks={sizes[b]} but {coll.describe()} has {have} {b} chunk(s) per rank")
    tbs: list[_XTb] = []
    for t in g:
        if t.tag != "tb":
            log.warning("ignoring unknown element <%s> in %s", t.tag, where)
            continue
        check_limit(f"{where}: threadblocks", len(tbs) + 1, "MAX_XML_THREADBLOCKS", ScheduleFormatError)
        tbs.append(_read_tb(t, gid, where, sizes, coll.n_ranks))
    # The chunk-order stage keeps one clock (a value per threadblock) per step.
    check_limit(f"{where}: steps x threadblocks", sum(len(t.steps) for t in tbs) * len(tbs), "MAX_XML_STEP_CLOCKS",
                ScheduleFormatError)
    tbs = _check_tb_ids(tbs, where)
    _check_connections(tbs, where)
    _check_step_deps(tbs)
    return _XGpu(gid, sizes, tuple(tbs), where)


def _read_tb(t: ET.Element, gid: int, where_g: str, sizes: dict[str, int], ngpus: int) -> _XTb:
    tid = _Attrs(t, f"<tb> of {where_g}").int("id", lo=0)
    where = f"<tb id={tid}> of {where_g}"
    T = _Attrs(t, where)
    send = T.int("send", lo=-1, hi=ngpus - 1)
    recv = T.int("recv", lo=-1, hi=ngpus - 1)
    if gid in (send, recv):
        raise ScheduleFormatError(f"{where}: a threadblock cannot send to or receive from its own gpu")
    chan = T.int("chan", lo=0)
    check_limit(f"{where}: chan", chan, "MAX_CHANNELS", ScheduleFormatError)
    steps: list[_XStep] = []
    for st in t:
        if st.tag != "step":
            log.warning("ignoring unknown element <%s> in %s", st.tag, where)
            continue
        steps.append(_read_step(st, len(steps), where, where_g, sizes, send, recv))
    return _XTb(tid, send, recv, chan, tuple(steps), where)


def _read_step(st: ET.Element, index: int, where_t: str, where_g: str, sizes: dict[str, int], send: int, recv: int) -> _XStep:
    where = f"step {index} of {where_t}"
    S = _Attrs(st, where)
    sidx = S.int("s")
    if sidx != index:
        raise ScheduleFormatError(f"{where}: s={sidx}, but steps must be numbered 0, 1, 2, ... in order")
    type_ = S.str("type")
    if type_ not in STEP_TYPES:
        raise ScheduleFormatError(f"{where}: unknown step type {type_!r}; types are {', '.join(STEP_TYPES)}")
    bufs = []
    for key in ("srcbuf", "dstbuf"):
        b = S.str(key)
        if b not in BUFFERS:
            raise ScheduleFormatError(f"{where}: {key}={b!r} is not a buffer (i, o or s)")
        bufs.append(b)
    x = _XStep(
        sidx, type_, bufs[0], S.int("srcoff"), bufs[1], S.int("dstoff"), S.int("cnt", lo=0),
        S.int("depid", lo=-1), S.int("deps", lo=-1), S.int("hasdep", lo=0, hi=1), where,
    )
    if type_ == "nop":
        return x
    if x.cnt < 1 or x.cnt >= RUNTIME_MAX_COUNT:
        raise ScheduleFormatError(f"{where}: cnt={x.cnt} must be in 1..{RUNTIME_MAX_COUNT - 1}")
    use_src, use_dst = USES[type_]
    for used, b, off, what in ((use_src, x.srcbuf, x.srcoff, "src"), (use_dst, x.dstbuf, x.dstoff, "dst")):
        if used and (off < 0 or off + x.cnt > sizes[b]):
            raise ScheduleFormatError(
                f"{where}: {what} range {b}[{off}:{off + x.cnt}] is outside the gpu's "
                f"{b} buffer ({sizes[b]} chunks, {b}_chunks of {where_g})"
            )
    if type_ in SENDS and send < 0:
        raise ScheduleFormatError(f"{where}: a {type_!r} step sends, but {where_t} has no send peer (send=-1)")
    if type_ in RECVS and recv < 0:
        raise ScheduleFormatError(f"{where}: a {type_!r} step receives, but {where_t} has no receive peer (recv=-1)")
    return x


def _check_tb_ids(tbs: list[_XTb], where_g: str) -> list[_XTb]:
    """Threadblock ids are 0..n-1; returns the threadblocks sorted by id."""
    ids = sorted(t.id for t in tbs)
    if ids != list(range(len(tbs))):
        dup = next((a for a, b in itertools.pairwise(ids) if a == b), None)
        if dup is not None:
            raise ScheduleFormatError(f"{where_g}: threadblock id {dup} appears twice")
        missing = next(i for i in range(len(tbs) + 1) if i not in set(ids))
        raise ScheduleFormatError(f"{where_g}: threadblock ids must be 0..{len(tbs) - 1}; <tb id={missing}> is missing")
    return sorted(tbs, key=lambda t: t.id)


def _check_connections(tbs: list[_XTb], where_g: str) -> None:
    """One connection per peer, channel and direction belongs to one threadblock."""
    for role in ("send", "recv"):
        seen: dict[tuple[int, int], int] = {}
        for t in tbs:
            peer = getattr(t, role)
            if peer < 0:
                continue
            if (peer, t.chan) in seen:
                raise ScheduleFormatError(
                    f"{where_g}: threadblocks {seen[(peer, t.chan)]} and {t.id} both have {role}={peer} on channel "
                    f"{t.chan}; one connection per peer and channel belongs to one threadblock"
                )
            seen[(peer, t.chan)] = t.id


def _check_step_deps(tbs: list[_XTb]) -> None:
    """Dependencies name existing, signalled steps, as the runtime needs."""
    for t in tbs:
        pending_nops = 0
        for k, x in enumerate(t.steps):
            if x.depid >= 0:
                if x.depid >= len(tbs):
                    raise ScheduleFormatError(f"{x.where}: depid={x.depid} names no threadblock of this gpu")
                target = tbs[x.depid]
                if not 0 <= x.deps < len(target.steps):
                    raise ScheduleFormatError(
                        f"{x.where}: deps={x.deps} names no step of {target.where} ({len(target.steps)} steps)"
                    )
                if x.depid == t.id and x.deps >= k:
                    raise ScheduleFormatError(f"{x.where}: waits for step {x.deps} of its own threadblock, which comes later")
                y = target.steps[x.deps]
                if y.type == "nop":
                    raise ScheduleFormatError(f"{x.where}: depends on {y.where}, a nop, which the runtime never signals")
                if not y.hasdep:
                    raise ScheduleFormatError(
                        f"{x.where}: depends on {y.where}, which is not marked hasdep=\"1\" (the runtime signals only those)"
                    )
            elif x.deps != -1:
                raise ScheduleFormatError(f"{x.where}: deps={x.deps} without a depid")
            if x.type == "nop":
                if x.depid < 0:
                    raise ScheduleFormatError(f"{x.where}: a nop step without a dependency (depid=-1) does nothing and breaks the runtime's step count")
                pending_nops += 1
            else:
                if pending_nops and x.depid < 0:
                    raise ScheduleFormatError(
                        f"{x.where}: follows nop step(s) but has no dependency itself; the runtime requires the step after "
                        "nops to carry the last dependency"
                    )
                pending_nops = 0


# ----------------------------------------------------------------- 3. streams
def _pair_streams(gpus: dict[int, _XGpu]) -> dict[tuple[int, int, int], _Stream]:
    """Streams by (sender, receiver, channel); raises where sends and receives do not pair up."""
    streams: dict[tuple[int, int, int], _Stream] = {}
    for gid, gpu in gpus.items():
        for t in gpu.tbs:
            for k, x in enumerate(t.steps):
                if x.type in SENDS:
                    streams.setdefault((gid, t.send, t.chan), _Stream()).sends.append((t, x, (gid, t.id, k)))
                if x.type in RECVS:
                    streams.setdefault((t.recv, gid, t.chan), _Stream()).recvs.append((t, x, (gid, t.id, k)))
    for (a, b, c), stream in sorted(streams.items()):
        ss, rr = stream.sends, stream.recvs
        if len(ss) != len(rr):
            raise ScheduleFormatError(
                f"gpu {a} sends {len(ss)} message(s) to gpu {b} on channel {c}, but gpu {b} receives {len(rr)} "
                f"from gpu {a} on that channel"
            )
        for (_, xs, _), (_, xr, _) in zip(ss, rr):
            if xs.cnt != xr.cnt:
                raise ScheduleFormatError(f"{xs.where} sends {xs.cnt} chunk(s) but the matching {xr.where} receives {xr.cnt}")
    return streams


# ---------------------------------------------------------------- 4. deadlock
def _waits_in_gpu(gpus: dict[int, _XGpu], key: StepKey) -> list[StepKey]:
    """Steps of its own gpu whose completion step ``key`` waits for: the
    previous step of its threadblock and its ``depid``/``deps`` target."""
    gid, tb, k = key
    x = gpus[gid].step(key)
    out = []
    if k > 0:
        out.append((gid, tb, k - 1))
    if x.depid >= 0:
        out.append((gid, x.depid, x.deps))
    return out


def _check_deadlock(gpus: dict[int, _XGpu], streams: dict[tuple[int, int, int], _Stream]) -> None:
    """Every step runs: no cycle of threadblock order, ``depid``/``deps`` and receive-after-send."""
    # _XGpu.keys() lists a GPU's steps (it is not a mapping, so it has no __iter__)
    waits = {key: _waits_in_gpu(gpus, key) for gid in sorted(gpus) for key in gpus[gid].keys()}  # noqa: SIM118
    for stream in streams.values():
        for (_, _, ks), (_, _, kr) in zip(stream.sends, stream.recvs):
            waits[kr].append(ks)
    if topological_order(waits) is not None:
        return
    stuck = dependency_cycle(waits)
    shown = " -> ".join(f"step {s} of <tb id={tb}> of <gpu id={g}>" for g, tb, s in stuck[:6])
    raise ScheduleFormatError(
        f"the threadblocks deadlock: {shown}{' -> ...' if len(stuck) > 6 else ''} -> back to the first "
        "(each waits for the one before it: threadblock order, depid/deps, or a receive waiting for its send)"
    )


# -------------------------------------------------------------------- 5. ops
class _Buffers:
    """Where a step's buffer references land in the schedule's buffers.

    In place, references go through the aliasing (input and output are one
    buffer); if the file writes its input buffer, input references go to its
    "shadow" in scratch (``shadow``: its first chunk), filled first.
    """

    def __init__(self, coll: Collective, inplace: bool, gpus: dict[int, _XGpu]):
        self.coll = coll
        self.inplace = inplace
        writes_input = any(
            self.aliased(gid, x.dstbuf, x.dstoff)[0] == "i"
            for gid, gpu in gpus.items() for t in gpu.tbs for x in t.steps if x.type in WRITES
        )
        file_scratch = max(gpu.sizes["s"] for gpu in gpus.values())
        self.shadow: int | None = file_scratch if writes_input else None
        #: first scratch chunk free for the temporaries of ``rrs`` steps
        self.temp_base = (self.shadow + coll.in_chunks) if self.shadow is not None else file_scratch

    def aliased(self, rank: int, buf: str, off: int) -> tuple[str, int]:
        if not self.inplace:
            return buf, off
        c = in_place_storage(self.coll, rank, Chunks(buf, off))
        return c.buf, c.index

    def range(self, rank: int, buf: str, off: int, cnt: int, where: str) -> Chunks:
        buf, off = self.aliased(rank, buf, off)
        if self.shadow is not None and buf == "i":
            buf, off = "s", self.shadow + off
        size = {"i": self.coll.in_chunks, "o": self.coll.out_chunks}.get(buf)
        if size is not None and off + cnt > size:
            raise ScheduleFormatError(f"{where}: range {buf}[{off}:{off + cnt}] is outside the {buf} buffer ({size} chunks)")
        return Chunks(buf, off, cnt)


def _overlap(a: Chunks | None, b: Chunks | None) -> bool:
    """Whether two ranges share a chunk (a step type's unused range, None, shares none)."""
    if a is None or b is None:
        return False
    return a.buf == b.buf and a.index < b.index + b.count and b.index < a.index + a.count


class _OpBuilder:
    """Stages 5 to 8: the ops of the steps, their dependencies, the schedule."""

    def __init__(self, algo: _Algo, gpus: dict[int, _XGpu]):
        self.algo = algo
        self.coll = algo.collective
        self.gpus = gpus
        self.buffers = _Buffers(self.coll, bool(algo.inplace), gpus)
        self.temp_next = [self.buffers.temp_base] * self.coll.n_ranks
        self.drafts: list[_Draft] = []
        self.step_ops: dict[StepKey, list[int]] = {}  # per step: its ops in order
        self.prologue: dict[int, int] = {}  # gpu -> the op that fills what the file expects of the input
        self._orders: dict[int, list[StepKey]] = {}
        self.fused: list[int] = []  # the receive of every rcs/rrcs step (fused with the send after it)

    def add(self, rank: int, chan: int, key: tuple, **fields) -> int:
        self.drafts.append(_Draft(rank, chan, key, **fields))
        return len(self.drafts) - 1

    # ---------------------------------------------------------- 5. ops
    def add_steps(self) -> None:
        coll, buffers = self.coll, self.buffers
        for gid in range(coll.n_ranks):
            if coll.in_chunks and (self.algo.inplace and IN_PLACE_ALIASING[coll.kind] != "output_in_input"):
                dst = in_place_storage(coll, gid, Chunks("i", 0, coll.in_chunks))
                self.prologue[gid] = self.add(gid, 0, (gid, -1, -1, 0, 0), kind="copy", src=Chunks("i", 0, coll.in_chunks), dst=dst)
            elif buffers.shadow is not None and coll.in_chunks:
                self.prologue[gid] = self.add(gid, 0, (gid, -1, -1, 0, 0), kind="copy", src=Chunks("i", 0, coll.in_chunks),
                                              dst=Chunks("s", buffers.shadow, coll.in_chunks))
            for t in self.gpus[gid].tbs:
                for k, x in enumerate(t.steps):
                    ids = self._step_ops(gid, t, x, (gid, t.chan, t.id, k))
                    for a, b in itertools.pairwise(ids):
                        self.drafts[b].deps.add(a)
                    self.step_ops[(gid, t.id, k)] = ids

    def _step_ops(self, gid: int, t: _XTb, x: _XStep, base: tuple) -> list[int]:
        """The ops of one step, in execution order."""
        ty = x.type
        if ty == "nop":
            return []
        src = self.buffers.range(gid, x.srcbuf, x.srcoff, x.cnt, x.where) if USES[ty][0] else None
        dst = self.buffers.range(gid, x.dstbuf, x.dstoff, x.cnt, x.where) if USES[ty][1] else None
        add = self.add
        ids: list[int] = []
        if ty == "s":
            ids.append(add(gid, t.chan, base + (0,), kind="send", src=src, peer=t.send))
        elif ty in ("r", "rcs"):
            ids.append(add(gid, t.chan, base + (0,), kind="recv", dst=dst, peer=t.recv))
            if ty == "rcs":
                self.fused.append(ids[-1])
                ids.append(add(gid, t.chan, base + (1,), kind="send", src=dst, peer=t.send))
        elif ty in ("rrc", "rrcs"):
            if src != dst:
                if _overlap(src, dst):
                    raise ScheduleFormatError(f"{x.where}: {ty} reads {src} and writes the overlapping {dst}")
                ids.append(add(gid, t.chan, base + (0,), kind="copy", src=src, dst=dst))
            ids.append(add(gid, t.chan, base + (1,), kind="recv", dst=dst, peer=t.recv, reduce=True))
            if ty == "rrcs":
                self.fused.append(ids[-1])
                ids.append(add(gid, t.chan, base + (2,), kind="send", src=dst, peer=t.send))
        elif ty == "rrs":
            tmp = Chunks("s", self.temp_next[gid], x.cnt)
            self.temp_next[gid] += x.cnt
            ids.append(add(gid, t.chan, base + (0,), kind="copy", src=src, dst=tmp))
            ids.append(add(gid, t.chan, base + (1,), kind="recv", dst=tmp, peer=t.recv, reduce=True))
            ids.append(add(gid, t.chan, base + (2,), kind="send", src=tmp, peer=t.send))
        elif ty == "cpy":
            if src != dst:
                if _overlap(src, dst):
                    raise ScheduleFormatError(f"{x.where}: cpy reads {src} and writes the overlapping {dst}")
                ids.append(add(gid, t.chan, base + (0,), kind="copy", src=src, dst=dst))
        elif ty == "re":
            if _overlap(src, dst):
                raise ScheduleFormatError(f"{x.where}: re reduces {src} into the overlapping {dst}")
            ids.append(add(gid, t.chan, base + (0,), kind="reduce", src=src, dst=dst))
        return ids

    # --------------------------------------------------- 6. file order
    def order(self, gid: int) -> list[StepKey]:
        """The steps of gpu ``gid`` in an order the file allows (threadblock order and depid/deps)."""
        if gid not in self._orders:
            order = topological_order({key: _waits_in_gpu(self.gpus, key) for key in self.gpus[gid].keys()})  # noqa: SIM118
            if order is None:  # a subgraph of what stage 4 (_check_deadlock) found acyclic
                raise ScheduleFormatError(f"the steps of <gpu id={gid}> wait for each other in a cycle")
            self._orders[gid] = order
        return self._orders[gid]

    def wait_for_file_order(self) -> dict[StepKey, frozenset[int]]:
        """Dependencies from the file's order; returns, per step, the ops whose
        completion means "this step and every step before it are done".

        A step waits for its depid/deps step and for the previous step of
        its threadblock -- except a receive, which takes its data whenever it
        arrives. A send is done once its data is on the way, so "step k
        done" is its own ops other than sends, plus the previous step's
        completion where the step did not wait for it.
        """
        drafts = self.drafts
        resolved: dict[StepKey, frozenset[int]] = {}
        for gid in range(self.coll.n_ranks):
            start = frozenset((self.prologue[gid],) if gid in self.prologue else ())
            for key in self.order(gid):
                _, tb, k = key
                ids = self.step_ops[key]
                x = self.gpus[gid].step(key)
                prev = resolved[(gid, tb, k - 1)] if k > 0 else start
                dep = resolved[(gid, x.depid, x.deps)] if x.depid >= 0 else frozenset()
                chained = not ids or drafts[ids[0]].kind != "recv"
                if ids:
                    drafts[ids[0]].deps |= (prev | dep) if chained else dep
                own = [i for i in ids if drafts[i].kind != "send"]  # chained in order: the last implies the rest
                if not own:
                    resolved[key] = prev | dep
                elif chained:
                    resolved[key] = frozenset(own[-1:])
                else:
                    resolved[key] = frozenset(own[-1:]) | prev
        return resolved

    # -------------------------------------------------- 7. chunk order
    def wait_for_chunk_order(self) -> None:
        """Every op waits for the earlier ops of its gpu (in the file's order,
        known by vector clocks over its threadblocks) that touch the same
        chunks, one of them writing."""
        for gid in range(self.coll.n_ranks):
            self._chunk_order(gid)

    def _chunk_order(self, gid: int) -> None:
        drafts = self.drafts
        ntb = len(self.gpus[gid].tbs)
        clock: dict[StepKey, np.ndarray] = {}
        writer: dict[tuple[str, int], tuple[int, int, int]] = {}  # chunk -> (op, tb, step) of its last writer
        readers: dict[tuple[str, int], list[tuple[int, int, int]]] = {}
        if gid in self.prologue:
            prologue_dst = drafts[self.prologue[gid]].dst_chunks
            for i in prologue_dst.indices():
                writer[(prologue_dst.buf, i)] = (self.prologue[gid], -1, -1)
        for key in self.order(gid):
            _, tb, k = key
            seen = np.full(ntb, -1, dtype=np.int64)  # highest step of each threadblock done before this one
            for p in _waits_in_gpu(self.gpus, key):
                np.maximum(seen, clock[p], out=seen)

            def before(acc: tuple[int, int, int]) -> bool:
                _, atb, ak = acc
                return atb < 0 or seen[atb] >= ak  # noqa: B023 (called only within this iteration)

            for i in self.step_ops[key]:
                f = drafts[i]
                here = (i, tb, k)
                reads = [f.src_chunks] if f.kind in ("send", "copy", "reduce") else []
                if f.kind == "reduce" or f.reduce:
                    reads.append(f.dst_chunks)
                writes = [f.dst_chunks] if f.kind != "send" else []
                written = {(c.buf, j) for c in writes for j in c.indices()}
                for c in reads:
                    for j in c.indices():
                        if (c.buf, j) in written:
                            continue
                        w = writer.get((c.buf, j))
                        if w is not None and w[0] != i and (w[1:] == (tb, k) or before(w)):
                            f.deps.add(w[0])
                        readers.setdefault((c.buf, j), []).append(here)
                for ch in written:
                    w = writer.get(ch)
                    if w is not None and w[0] != i and (w[1:] == (tb, k) or before(w)):
                        f.deps.add(w[0])
                    for r in readers.pop(ch, ()):
                        if r[0] != i and (r[1:] == (tb, k) or before(r)):
                            f.deps.add(r[0])
                    writer[ch] = here
            seen[tb] = k
            clock[key] = seen

    def copy_result_out(self, resolved: dict[StepKey, frozenset[int]]) -> None:
        """In-place reduce-scatter and scatter: the output lies inside the
        input buffer; copy it to the output buffer once every step is done."""
        if not (self.algo.inplace and IN_PLACE_ALIASING[self.coll.kind] == "output_in_input"):
            return
        c = self.coll.chunk_factor
        for gid in range(self.coll.n_ranks):
            need: set[int] = set()
            for t in self.gpus[gid].tbs:
                if t.steps:
                    need |= resolved[(gid, t.id, len(t.steps) - 1)]
            src = self.buffers.range(gid, "o", 0, c, "<algo>")
            e = self.add(gid, 0, (gid, 1 << 30, 0, 0, 0), kind="copy", src=src, dst=Chunks("o", 0, c))
            self.drafts[e].deps |= need

    # ------------------------------------------------------ 8. schedule
    def schedule(self) -> Schedule:
        """The ops in file order (gpu, channel, threadblock, step), and the file's attributes in ``meta``."""
        algo, drafts = self.algo, self.drafts
        order = sorted(range(len(drafts)), key=lambda i: drafts[i].key)
        new_id = {old: new for new, old in enumerate(order)}
        ops = []
        for old in order:
            f = drafts[old]
            ops.append(Op(new_id[old], f.rank, f.kind, f.src, f.dst, f.peer, f.reduce,
                          tuple(sorted(new_id[d] for d in f.deps)), f.channel))
        scratch = max(self.temp_next) if ops else self.buffers.temp_base
        meta = {
            "source": "msccl-xml",
            "msccl": {
                "ops_in_tb_order": True,
                "name": algo.name,
                "proto": algo.proto,
                "coll": algo.coll_name,
                "nchannels": algo.nchannels,
                "inplace": bool(algo.inplace),
                "outofplace": bool(algo.outofplace),
                "minBytes": algo.min_bytes,
                "maxBytes": None if algo.max_bytes in (None, 0, UNBOUNDED) else algo.max_bytes,
                "input_shadow": self.buffers.shadow,
                "fused_recvs": sorted(new_id[i] for i in self.fused),
                "n_ops": len(ops),  # the ops fused_recvs numbers (a transform that renumbers changes it)
            },
        }
        try:
            return Schedule(algo.name, self.coll, tuple(ops), scratch, "", meta)
        except ScheduleFormatError:
            raise
        except ScheduleError as e:
            raise ScheduleFormatError(f"MSCCL XML {algo.name!r}: {e}") from None


# ----------------------------------------------------------------- figures
def describe_xml(text: str) -> dict:
    """A few figures of an MSCCL XML: gpus, threadblocks, steps, nops, fused steps."""
    try:
        root = ET.fromstring(text)
    except ET.ParseError as e:
        raise ScheduleFormatError(f"not well-formed MSCCL XML: {e}") from None
    tbs = root.findall("./gpu/tb")
    steps = root.findall("./gpu/tb/step")
    types: dict[str, int] = {}
    for st in steps:
        types[st.get("type", "?")] = types.get(st.get("type", "?"), 0) + 1
    per_tb = [len(tb.findall("step")) for tb in tbs]
    return {
        "ngpus": int(root.get("ngpus", "0")),
        "nchannels": int(root.get("nchannels", "0")),
        "threadblocks": len(tbs),
        "max_threadblocks_per_gpu": max((len(g.findall("tb")) for g in root.findall("gpu")), default=0),
        "steps": len(steps),
        "max_steps_per_threadblock": max(per_tb, default=0),
        "step_types": dict(sorted(types.items())),
    }
