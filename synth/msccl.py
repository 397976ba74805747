"""MSCCL XML: export a schedule for the MSCCL runtimes, and read one back.

MSCCL (the NCCL fork ``microsoft/msccl`` and its successor
``Azure/msccl-executor-nccl``) runs an algorithm described by one XML file::

    <algo name="ring" proto="Simple" nchannels="1" nchunksperloop="4" ngpus="4"
          coll="allgather" inplace="0" outofplace="1" minBytes="0" maxBytes="...">
      <gpu id="0" i_chunks="1" o_chunks="4" s_chunks="0">
        <tb id="0" send="1" recv="3" chan="0">
          <step s="0" type="s" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="1"
                depid="-1" deps="-1" hasdep="0"/>
          ...

Facts of the format this module relies on (from the runtimes' parsers and
interpreter, carried as facts):

* Buffers are ``i``, ``o``, ``s``; offsets and ``cnt`` are in chunks of
  ``message size / nchunksperloop`` (nccl-tests' size: the larger buffer).
  ``i_chunks``/``o_chunks``/``s_chunks`` bound the offsets of each gpu.
* A threadblock (``tb``) has at most one send peer and one receive peer and
  one channel, and runs its steps one after another. On one gpu and channel,
  each send peer and each receive peer belongs to at most one threadblock:
  the k-th send of gpu ``a`` to ``b`` on channel ``c`` meets the k-th
  receive of ``b`` from ``a`` on channel ``c``.
* Step types: ``s`` send src; ``r`` receive into dst; ``rcs`` receive into
  dst and forward it; ``rrs`` send (src + received) without storing it;
  ``rrc`` dst = src + received; ``rrcs`` the same, then forward dst;
  ``cpy`` dst = src; ``re`` dst = dst + src; ``nop`` only waits.
* A step waits for at most one step of another threadblock
  (``depid``/``deps``: threadblock id and step index, -1 for none); the
  runtime signals only steps marked ``hasdep="1"``. Extra dependencies are
  carried by ``nop`` steps placed just before the step, each with one
  dependency, and the step itself must carry one too.
* ``coll`` names: allgather, allreduce, alltoall, broadcast, reduce, gather,
  scatter, and ``reducescatter`` (the executor; the older ``microsoft/msccl``
  spells it ``reduce_scatter``: pass ``coll="reduce_scatter"`` for it; both
  are read back).
* The executor refuses files without ``minBytes``/``maxBytes``/``inplace``/
  ``outofplace``; it treats ``[minBytes, maxBytes]`` as inclusive and
  ``maxBytes="0"`` as unbounded, while the older runtime compares
  ``nbytes < maxBytes``. An unbounded range is therefore written as
  ``maxBytes = 2**63 - 1``, which both read as "no upper end".
* Limits: ``cnt`` below 72 (longer ranges are split into steps of at most
  :data:`MAX_COUNT` chunks), by default 64 steps per threadblock in the
  executor (256 in the older runtime), threadblock ids below 128 when
  something depends on them. Exceeding the step or threadblock limits is
  logged as a warning; the file is still written.

Export (:func:`schedule_to_msccl_xml`) maps each rank to a gpu. Transfers
of one (sender, receiver, channel) form a stream; each gpu has one
threadblock per send peer and one per receive peer on each channel, except
that a receive followed by a send of exactly the chunks it wrote is fused
into ``rcs`` (``rrcs`` after a receive-reduce) where most of a receive
stream is forwarded to one send peer: then those two streams share one
threadblock (as in msccl-tools' rings). Sharing serializes the two streams;
when a topology is known (given, or the one the schedule names) the fused
and the plain layout are both simulated as MSCCL runs them and the faster
one is written. Local copies and reductions go to a
local threadblock per channel. A gpu with more than
:data:`MAX_PEERS_PER_CHANNEL` peers on a channel gets more channels. Steps
of every threadblock follow a topological order of the ops (by dependency
level); both ends of a stream are then put in the same order, and the
layout is accepted only if threadblock order, dependencies and
send-before-receive together are acyclic, i.e. nothing deadlocks when sends
complete on their own, as MSCCL's buffered connections (and the verifier)
assume. Dependencies implied by others (vector clocks over the threadblocks
of a gpu) are dropped before ``nop`` steps carry the extra ones.

Import (:func:`schedule_from_msccl_xml`) turns each step back into ops
(``rcs`` = recv + send, ``rrc`` with distinct src and dst = copy +
recv-reduce, ``rrs`` goes through fresh scratch chunks) and checks the
threadblocks for deadlock. The file's order (threadblock order and
``depid``/``deps``) becomes dependencies the way MSCCL executes it: a step
waits for its ``deps`` step and the previous step of its threadblock, but a
receive takes its data whenever it arrives (the sender already pushed it into
the connection's buffer) and a send counts as done once its data is on the
way; on top, every op waits for the earlier ops of its gpu (in the file's
order) that touch the same chunks. In-place files become the out-of-place IR
(a copy from input to output first; if the file writes its input, the input
is first copied to scratch and the result copied out at the end).

Round trips: schedule -> XML -> schedule verifies; where the schedule moves
one stream's messages one after another anyway (rings, recursive doubling
and halving, trees, synthesized schedules with ordered links) the simulated
time is the same, while a schedule that sends several messages to one peer
at once is serialized by the threadblock (slower by up to about 1.3x on the
catalog's baselines: that is how MSCCL runs it). XML -> schedule -> XML
gives the same file for files this module wrote.

Example:
    >>> from ccsynth.collectives.spec import Collective
    >>> from ccsynth.collectives.builder import ScheduleBuilder
    >>> b = ScheduleBuilder(Collective("allgather", 2), "pairwise")
    >>> for r in range(2):
    ...     _ = b.copy(r, ("i", 0), ("o", r))
    >>> _ = b.transfer(0, 1, ("i", 0), ("o", 0)); _ = b.transfer(1, 0, ("i", 0), ("o", 1))
    >>> xml = schedule_to_msccl_xml(b.build(), max_bytes=1 << 20)
    >>> xml.splitlines()[0]
    '<algo name="pairwise" proto="Simple" nchannels="1" nchunksperloop="2" ngpus="2" coll="allgather" inplace="0" outofplace="1" minBytes="0" maxBytes="1048576">'
    >>> back = schedule_from_msccl_xml(xml)
    >>> back.collective == b.collective, schedule_to_msccl_xml(back, max_bytes=1 << 20) == xml
    (True, True)
"""

from __future__ import annotations

import heapq
import logging
import math
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ccsynth.collectives.schedule import Chunks, Op, Schedule
from ccsynth.collectives.spec import Collective
from ccsynth.errors import CCSynthError, ScheduleError, ScheduleFormatError

log = logging.getLogger(__name__)

#: Longest range (chunks) one step moves; runtimes reject ``cnt >= 72``.
MAX_COUNT = 64
#: Runtimes reject a step whose ``cnt`` is this or more.
RUNTIME_MAX_COUNT = 72
#: Steps per threadblock the executor accepts in its default build (the older runtime: 256).
MAX_STEPS_PER_TB = 64
#: Threadblocks per gpu that can be named by ``depid`` (an int8 in the executor).
MAX_TBS = 128
#: Channels per communicator in NCCL (MAXCHANNELS).
MAX_CHANNELS = 32
#: Send (and receive) peers one gpu may have on one channel in the executor.
MAX_PEERS_PER_CHANNEL = 32
#: ``maxBytes`` written for "no upper end" (int64 max: above every size in both runtimes).
UNBOUNDED = (1 << 63) - 1

PROTOCOLS = ("Simple", "LL", "LL128")
STEP_TYPES = ("s", "r", "rcs", "rrs", "rrc", "rrcs", "cpy", "re", "nop")
BUFFERS = ("i", "o", "s")

#: Our collective kind -> the executor's ``coll`` name.
COLL_NAMES = {
    "allgather": "allgather",
    "reduce_scatter": "reducescatter",
    "allreduce": "allreduce",
    "alltoall": "alltoall",
    "broadcast": "broadcast",
    "reduce": "reduce",
    "gather": "gather",
    "scatter": "scatter",
}
_COLL_READ = {**{v: k for k, v in COLL_NAMES.items()}, "reduce_scatter": "reduce_scatter"}
# Kinds whose nchunksperloop is ngpus * chunk factor (the others: chunk factor).
_PIECED = frozenset({"allgather", "reduce_scatter", "alltoall", "gather", "scatter"})
# In-place aliasing: "same" -> input and output are one buffer; "in_in_out" ->
# rank r's input is output[r*c:(r+1)*c]; "out_in_in" -> rank r's output is input[r*c:(r+1)*c].
_ALIASING = {
    "allreduce": "same",
    "broadcast": "same",
    "reduce": "same",
    "alltoall": "same",
    "allgather": "in_in_out",
    "gather": "in_in_out",
    "reduce_scatter": "out_in_in",
    "scatter": "out_in_in",
}

# Which step fields a step type reads as a local range (src, dst).
_USES = {
    "s": (True, False),
    "r": (False, True),
    "rcs": (False, True),
    "rrs": (True, False),
    "rrc": (True, True),
    "rrcs": (True, True),
    "cpy": (True, True),
    "re": (True, True),
    "nop": (False, False),
}
_SENDS = frozenset({"s", "rcs", "rrs", "rrcs"})
_RECVS = frozenset({"r", "rcs", "rrs", "rrc", "rrcs"})


# =====================================================================
# Export
# =====================================================================
def schedule_to_msccl_xml(
    schedule: Schedule,
    *,
    proto: str | None = None,
    nchannels: int | None = None,
    min_bytes: int | None = None,
    max_bytes: int | None = None,
    inplace: bool = False,
    name: str | None = None,
    coll: str | None = None,
    topology=None,
) -> str:
    """The MSCCL XML of a (verified) ``schedule``.

    ``proto``: ``Simple`` (default), ``LL`` or ``LL128``. ``min_bytes`` /
    ``max_bytes``: the message sizes this algorithm is for, written as
    ``minBytes``/``maxBytes`` (``None``: 0 and no upper end). For a schedule
    read from MSCCL XML, ``None`` keeps the file's protocol, sizes and name.
    ``nchannels``: run that many copies ("instances") of the schedule side by
    side, each on its own channels and on its own share of every chunk
    (the chunk factor grows by the same factor); it must be a multiple of the
    channels the schedule uses. ``inplace``: write the in-place form (input
    and output aliased, ``inplace="1" outofplace="0"``); raises
    :class:`ScheduleError` if the schedule is not correct in place.
    ``coll`` overrides the collective's name (``reduce_scatter`` for the
    older runtime). ``topology`` (a :class:`Topology` or a name; default:
    the one the schedule names, if it loads): where fusing steps would
    serialize streams, the fused and the plain layout are simulated on it
    (as MSCCL runs them) and the faster one is written.
    """
    info = schedule.meta.get("msccl") if isinstance(schedule.meta.get("msccl"), dict) else {}
    proto = proto if proto is not None else info.get("proto", "Simple")
    if proto not in PROTOCOLS:
        raise ScheduleError(f"unknown MSCCL protocol {proto!r}; choose one of {', '.join(PROTOCOLS)}")
    if min_bytes is None:
        min_bytes = int(info.get("minBytes") or 0)
    if max_bytes is None and info.get("maxBytes") is not None:
        max_bytes = int(info["maxBytes"])
    if isinstance(min_bytes, bool) or not isinstance(min_bytes, int) or min_bytes < 0:
        raise ScheduleError(f"minBytes must be a non-negative integer, got {min_bytes!r}")
    if max_bytes is not None and (isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < min_bytes):
        raise ScheduleError(f"maxBytes must be an integer >= minBytes ({min_bytes}), got {max_bytes!r}")
    kind = schedule.collective.kind
    if coll is None:  # the file's own spelling for a schedule read from MSCCL XML
        coll = info.get("coll") if _COLL_READ.get(info.get("coll")) == kind else COLL_NAMES[kind]
    coll_name = coll
    if _COLL_READ.get(coll_name) != kind:
        raise ScheduleError(f"coll={coll_name!r} does not name a {kind}")
    algo_name = name if name is not None else (info.get("name") or schedule.name or "ccsynth")

    sched = schedule
    used = _channels_used(sched)
    if nchannels is not None:
        if isinstance(nchannels, bool) or not isinstance(nchannels, int) or nchannels < 1:
            raise ScheduleError(f"nchannels must be a positive integer, got {nchannels!r}")
        if nchannels % used:
            raise ScheduleError(
                f"nchannels={nchannels} is not a multiple of the {used} channel(s) schedule {schedule.name!r} uses"
            )
        if nchannels > used:
            sched = replicate_instances(sched, nchannels // used)
    sched = split_long_ranges(sched, MAX_COUNT)
    sched = spread_channels(sched, MAX_PEERS_PER_CHANNEL)
    if inplace:
        sched = _alias_in_place(sched)

    texts = [
        _serialize(
            sched,
            layout,
            name=algo_name,
            proto=proto,
            coll=coll_name,
            inplace=inplace,
            min_bytes=min_bytes,
            max_bytes=UNBOUNDED if max_bytes is None else max_bytes,
        )
        for layout in _layouts(sched)
    ]
    xml = texts[0]
    if len(texts) > 1:
        topo = _topology_for(schedule, topology)
        if topo is not None:
            xml = _fastest(texts, topo, min_bytes, max_bytes)
    if inplace:
        _check_in_place(xml, schedule)
    return xml


def _topology_for(schedule: Schedule, topology):
    """The topology to compare layouts on: the one given, else the schedule's (if it loads)."""
    if topology is not None and not isinstance(topology, str):
        return topology
    spec = topology or schedule.topology
    if not spec:
        return None
    from ccsynth.topologies import get_topology

    try:
        topo = get_topology(spec)
    except CCSynthError as e:
        if topology is not None:
            raise
        log.debug("not comparing MSCCL layouts: topology %r does not load: %s", spec, e)
        return None
    return topo if topo.n_ranks == schedule.n_ranks else None


def _fastest(texts: list[str], topology, min_bytes: int, max_bytes: int | None) -> str:
    """The file whose schedule (as MSCCL runs it) simulates fastest on ``topology``.

    Sizes: 1 KiB, 1 MiB and 64 MiB where they fall in ``[min_bytes,
    max_bytes]``, else the middle of that range; times are compared as the
    sum over sizes of each one's time relative to the best.
    """
    from ccsynth.synth.simulate import simulate_sizes

    hi = max_bytes if max_bytes is not None else UNBOUNDED
    sizes = [z for z in (1 << 10, 1 << 20, 1 << 26) if min_bytes <= z <= hi]
    if not sizes:
        sizes = [max(1, int(math.sqrt(max(min_bytes, 1) * min(hi, 1 << 40))))]
    times = []
    for text in texts:
        sched = schedule_from_msccl_xml(text)
        try:
            times.append([r.time_us for r in simulate_sizes(sched, topology, sizes)])
        except ScheduleError as e:  # e.g. a link the topology lacks: nothing to compare
            log.debug("not comparing MSCCL layouts: %s", e)
            return texts[0]
    best = [min(t[j] for t in times) or 1.0 for j in range(len(sizes))]
    score = [sum(t[j] / best[j] for j in range(len(sizes))) for t in times]
    k = min(range(len(texts)), key=lambda i: (score[i] > min(score) * (1 + 1e-9), i))
    log.debug("MSCCL layouts (fused first) score %s on %s at %s: chose %d", score, topology.name, sizes, k)
    return texts[k]


def plan_to_msccl_xmls(plan, **kwargs) -> list[tuple[str, str]]:
    """One MSCCL XML per entry of a :class:`~ccsynth.collectives.plan.Plan`.

    Returns ``(file name, xml)`` pairs. A plan row covers
    ``[min_bytes, max_bytes)``; MSCCL's ``maxBytes`` is inclusive, so it is
    written as ``max_bytes - 1`` (no upper end stays unbounded).
    """
    out = []
    for e in plan.entries:
        mx = None if e.max_bytes is None else e.max_bytes - 1
        xml = schedule_to_msccl_xml(e.schedule, min_bytes=e.min_bytes, max_bytes=mx, **kwargs)
        hi = "inf" if e.max_bytes is None else str(e.max_bytes)
        fname = f"{e.kind}_{e.n_ranks}_{_safe(e.algorithm)}_{e.min_bytes}-{hi}.xml"
        out.append((fname, xml))
    return out


def _safe(s: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in s) or "algo"


def _channels_used(s: Schedule) -> int:
    return max((op.channel for op in s.ops), default=0) + 1


# ------------------------------------------------------- IR transforms
class _Rebuild:
    """Collects new ops with dependencies on *old* op ids, then renumbers."""

    def __init__(self, old: Schedule):
        self.old = old
        self.recs: list[dict] = []
        self.new_of: dict[int, list[int]] = {}  # old id -> new record indices (what "old op done" means)

    def add(self, old_id: int | None, **fields) -> int:
        i = len(self.recs)
        self.recs.append(fields)
        if old_id is not None:
            self.new_of.setdefault(old_id, []).append(i)
        return i

    def build(self, collective: Collective, scratch: int, dep_map, cls=None) -> Schedule:
        ops = []
        for i, f in enumerate(self.recs):
            deps = sorted(set(dep_map(i, f)))
            ops.append(
                Op(i, f["rank"], f["kind"], f.get("src"), f.get("dst"), f.get("peer", -1), f.get("reduce", False), tuple(deps), f.get("channel", 0))
            )
        s = self.old
        return (cls or Schedule)(s.name, collective, tuple(ops), scratch, s.topology, dict(s.meta))


class _Aliased(Schedule):
    """A schedule whose buffers are aliased in place: it may write its input
    (the output lies inside it), which a :class:`Schedule` forbids. Used only
    on the way to an in-place MSCCL file."""

    def check_structure(self) -> None:  # the schedule it came from was checked
        pass


def split_long_ranges(schedule: Schedule, max_count: int = MAX_COUNT) -> Schedule:
    """Cut every op moving more than ``max_count`` chunks into consecutive pieces.

    A send and its receive are cut at the same offsets, so the k-th piece of
    one meets the k-th piece of the other. Ops that depended on the long op
    depend on all of its pieces.
    """
    if all(op.count <= max_count for op in schedule.ops):
        return schedule
    rb = _Rebuild(schedule)
    for op in schedule.ops:
        n = op.count
        for lo in range(0, n, max_count):
            k = min(max_count, n - lo)
            src = Chunks(op.src.buf, op.src.index + lo, k) if op.src is not None else None
            dst = Chunks(op.dst.buf, op.dst.index + lo, k) if op.dst is not None else None
            rb.add(op.id, rank=op.rank, kind=op.kind, src=src, dst=dst, peer=op.peer, reduce=op.reduce, channel=op.channel, old=op.id)

    def deps(i, f):
        return [j for d in schedule.ops[f["old"]].deps for j in rb.new_of[d]]

    return rb.build(schedule.collective, schedule.scratch_chunks, deps)


def replicate_instances(schedule: Schedule, instances: int) -> Schedule:
    """``instances`` copies of ``schedule`` side by side (msccl-tools' "instances").

    Every chunk is cut into ``instances`` sub-chunks; copy ``i`` moves
    sub-chunk ``i`` of every chunk on channels shifted by ``i`` times the
    channels the schedule uses. The chunk factor grows by ``instances``. For
    input and output buffers, chunk ``x`` of a piece of ``c`` chunks becomes
    chunk ``(x // c) * c * k + i * c + x % c`` (contiguous inside a piece, so
    the collective's layout holds); ranges crossing pieces are split.
    Scratch chunk ``y`` of copy ``i`` becomes ``i * S + y``.
    """
    k = instances
    if k == 1:
        return schedule
    coll = schedule.collective
    c = coll.chunk_factor
    new_coll = Collective(coll.kind, coll.n_ranks, c * k, coll.root)
    S = schedule.scratch_chunks
    C = _channels_used(schedule)
    rb = _Rebuild(schedule)
    inst_of: dict[int, dict[int, list[int]]] = {}

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

    matches = schedule.matches
    for op in schedule.ops:
        for i in range(k):
            # cut src and dst -- and, for a transfer, the other end's range --
            # at common boundaries, so both ends move the same pieces
            if op.kind == "send":
                a, _ = _common_cuts(pieces(op.src, i), pieces(schedule.ops[matches[op.id]].dst, i))
                cuts = [(x, None) for x in a]
            elif op.kind == "recv":
                _, b = _common_cuts(pieces(schedule.ops[matches[op.id]].src, i), pieces(op.dst, i))
                cuts = [(None, x) for x in b]
            else:
                a, b = _common_cuts(pieces(op.src, i), pieces(op.dst, i))
                cuts = list(zip(a, b))
            for src, dst in cuts:
                idx = rb.add(None, rank=op.rank, kind=op.kind, src=src, dst=dst, peer=op.peer, reduce=op.reduce,
                             channel=op.channel + i * C, old=op.id, inst=i)
                inst_of.setdefault(op.id, {}).setdefault(i, []).append(idx)

    def deps(idx, f):
        return [j for d in schedule.ops[f["old"]].deps for j in inst_of[d][f["inst"]]]

    return rb.build(new_coll, S * k, deps)


def spread_channels(schedule: Schedule, limit: int = MAX_PEERS_PER_CHANNEL) -> Schedule:
    """Move transfers to more channels where a gpu would have more than
    ``limit`` send or receive peers on one channel (the executor's limit).

    Each stream (sender, receiver, channel) moves as a whole, to the first
    channel ``channel + k * C`` (``C``: channels in use) where both its sender
    and its receiver have room; the schedule is unchanged otherwise.
    """
    ops = schedule.ops
    matches = schedule.matches
    sends: dict[tuple[int, int], set[int]] = {}
    recvs: dict[tuple[int, int], set[int]] = {}
    for op in ops:
        if op.kind == "send":
            sends.setdefault((op.rank, op.channel), set()).add(op.peer)
            recvs.setdefault((op.peer, op.channel), set()).add(op.rank)
    if all(len(v) <= limit for v in sends.values()) and all(len(v) <= limit for v in recvs.values()):
        return schedule
    C = _channels_used(schedule)
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
    s = schedule
    return type(s)(s.name, s.collective, tuple(new_ops), s.scratch_chunks, s.topology, dict(s.meta))


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


def _alias_map(coll: Collective):
    """(rank, buf, index) -> (buf, index) under in-place aliasing, and the aliasing mode."""
    mode = _ALIASING[coll.kind]
    c = coll.chunk_factor

    def f(rank: int, buf: str, index: int) -> tuple[str, int]:
        if mode == "same" and buf == "i":
            return "o", index
        if mode == "in_in_out" and buf == "i":
            return "o", rank * c + index
        if mode == "out_in_in" and buf == "o":
            return "i", rank * c + index
        return buf, index

    return f, mode


def _alias_in_place(schedule: Schedule) -> Schedule:
    """Rewrite buffer references as if input and output were aliased; drop self-copies."""
    coll = schedule.collective
    amap, _ = _alias_map(coll)
    info = schedule.meta.get("msccl") if isinstance(schedule.meta.get("msccl"), dict) else {}
    # a schedule read from an in-place file keeps its input in scratch (the
    # "shadow", see schedule_from_msccl_xml): that scratch is the input again
    shadow = info.get("input_shadow")

    def m(rank, ch: Chunks | None) -> Chunks | None:
        if ch is None:
            return None
        buf, idx = ch.buf, ch.index
        if shadow is not None and buf == "s" and shadow <= idx < shadow + coll.in_chunks:
            buf, idx = "i", idx - shadow
        b, i = amap(rank, buf, idx)
        return Chunks(b, i, ch.count)

    rb = _Rebuild(schedule)
    dropped: dict[int, tuple[int, ...]] = {}
    for op in schedule.ops:
        src, dst = m(op.rank, op.src), m(op.rank, op.dst)
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
        rb.add(op.id, rank=op.rank, kind=op.kind, src=src, dst=dst, peer=op.peer, reduce=op.reduce, channel=op.channel, old=op.id)

    def resolve(d: int) -> list[int]:
        if d in dropped:
            return [j for e in dropped[d] for j in resolve(e)]
        return rb.new_of[d]

    def deps(i, f):
        return [j for d in schedule.ops[f["old"]].deps for j in resolve(d)]

    return rb.build(coll, schedule.scratch_chunks, deps, cls=_Aliased)


def _check_in_place(xml: str, original: Schedule) -> None:
    from ccsynth.collectives.verify import verify

    try:
        verify(schedule_from_msccl_xml(xml))
    except ScheduleError as e:
        raise ScheduleError(f"schedule {original.name!r} is not correct in place (input and output aliased): {e}") from None


# ------------------------------------------------- threadblock layout
@dataclass
class _Step:
    rank: int
    type: str
    ops: tuple[int, ...]  # IR op ids, in execution order
    src: Chunks | None
    dst: Chunks | None
    cnt: int
    tb: tuple[int, int, int] = (-1, -1, 0)  # (send, recv, chan)
    pos: tuple = ()
    deps: list = field(default_factory=list)  # kept (tb index, logical index)
    hasdep: bool = False


@dataclass
class _Layout:
    tbs: list[list[tuple[int, int, int]]]  # per rank: tb keys in id order
    steps: list[list[list[_Step]]]  # per rank, per tb: steps in order
    scratch: list[int]  # s_chunks per rank
    fused: int = 0
    buffered: bool = False


def _layouts(s: Schedule) -> list[_Layout]:
    """The threadblock layouts worth comparing (see module doc), best guess first.

    Steps of a threadblock are ordered by a global topological order of the
    ops in which a receive follows its send ("buffered"), else one in which
    a matched send and receive are one event ("rendezvous"). A layout is
    kept only if its threadblock order cannot deadlock (with sends that
    complete on their own, as the verifier and the runtimes' buffered
    connections assume). Returns the fused layout and the plain one (when
    they differ); a schedule read from MSCCL XML gets back its own layout
    (same fusions, same step order), so that XML -> schedule -> XML gives
    the same file.
    """
    info = s.meta.get("msccl") if isinstance(s.meta.get("msccl"), dict) else {}
    if info.get("ops_in_tb_order"):
        for fuse, order in (("given", "given"), ("none", "given"), ("auto", "buffered"), ("none", "buffered")):
            layout = _try_assign(s, fuse=fuse, order=order)
            if layout is not None:
                return [layout]
    out = []
    for fuse in ("auto", "none"):
        for order in ("buffered", "rendezvous"):
            layout = _try_assign(s, fuse=fuse, order=order)
            if layout is not None:
                out.append(layout)
                break
        if out and out[0].fused == 0:
            break  # nothing to fuse: the plain layout is the same
    if not out:
        raise ScheduleError(f"schedule {s.name!r} cannot be laid out as MSCCL threadblocks without a deadlock")
    return out


def _kahn(n: int, succ, key=None) -> list[int] | None:
    """A topological order (smallest ``key`` first among ready nodes), or None on a cycle."""
    indeg = [0] * n
    for x in range(n):
        for y in succ[x]:
            indeg[y] += 1
    k = key if key is not None else (lambda x: x)
    heap = [(k(x), x) for x in range(n) if indeg[x] == 0]
    heapq.heapify(heap)
    out = []
    while heap:
        _, x = heapq.heappop(heap)
        out.append(x)
        for y in succ[x]:
            indeg[y] -= 1
            if indeg[y] == 0:
                heapq.heappush(heap, (k(y), y))
    return out if len(out) == n else None


def _try_assign(s: Schedule, *, fuse: str, order: str) -> _Layout | None:
    ops = s.ops
    matches = s.matches
    n = s.n_ranks

    def chan(op: Op) -> int:
        return op.channel if op.kind != "recv" else ops[matches[op.id]].channel

    # ---- fusion candidates: recv R then send S of exactly the chunks R wrote
    fused_send: dict[int, int] = {}  # recv id -> send id
    pair_of: dict[tuple[int, int, int], int] = {}  # (rank, chan, recv peer) -> send peer
    if fuse == "given":
        # a schedule read from MSCCL XML: a fused step became a receive and
        # the send of the same chunks right after it (consecutive ids)
        for op in ops[1:]:
            r = ops[op.id - 1]
            if (
                op.kind == "send" and r.kind == "recv" and r.rank == op.rank and r.dst == op.src
                and chan(r) == chan(op) and set(op.deps) <= {r.id}
            ):
                key = (op.rank, chan(op), r.peer)
                if key in pair_of:
                    if pair_of[key] != op.peer:
                        continue
                elif any(q == op.peer and k[:2] == key[:2] for k, q in pair_of.items()):
                    continue
                pair_of[key] = op.peer
                fused_send[r.id] = op.id
    elif fuse == "auto":
        cands: dict[tuple[int, int], list[tuple[int, int, int, int]]] = {}
        for op in ops:
            if op.kind != "send":
                continue
            rdeps = set(op.deps)
            for d in op.deps:
                r = ops[d]
                if r.kind != "recv" or r.dst != op.src or chan(r) != chan(op):
                    continue
                # the send must be ready as soon as the receive is done: its
                # other dependencies are the receive's, or earlier messages of
                # the two streams, which the shared threadblock runs first anyway
                rest = rdeps - {d} - set(r.deps)
                if all(
                    ops[x].kind in ("send", "recv") and chan(ops[x]) == chan(op)
                    and ops[x].peer == (op.peer if ops[x].kind == "send" else r.peer)
                    for x in rest
                ):
                    cands.setdefault((op.rank, chan(op)), []).append((r.peer, op.peer, r.id, op.id))
                    break
        n_in: dict[tuple[int, int, int], int] = {}  # (rank, chan, recv peer) -> receives
        n_out: dict[tuple[int, int, int], int] = {}  # (rank, chan, send peer) -> sends
        for op in ops:
            if op.kind == "recv":
                n_in[(op.rank, chan(op), op.peer)] = n_in.get((op.rank, chan(op), op.peer), 0) + 1
            elif op.kind == "send":
                n_out[(op.rank, chan(op), op.peer)] = n_out.get((op.rank, chan(op), op.peer), 0) + 1
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
                if pair_of.get((rank, c, p)) == q and rid not in fused_send and sid not in taken:
                    fused_send[rid] = sid
                    taken.add(sid)
    send_pair = {(rank, c, q): p for (rank, c, p), q in pair_of.items()}

    # ---- steps
    steps: list[_Step] = []
    step_of: dict[int, int] = {}
    fused_sends = set(fused_send.values())
    for op in ops:
        if op.id in fused_sends:
            continue
        c = chan(op)
        if op.kind == "send":
            rem = ops[matches[op.id]].dst
            st = _Step(op.rank, "s", (op.id,), op.src, rem, op.count, (op.peer, send_pair.get((op.rank, c, op.peer), -1), c))
        elif op.kind == "recv":
            sid = fused_send.get(op.id)
            if sid is not None:
                t = "rrcs" if op.reduce else "rcs"
                st = _Step(op.rank, t, (op.id, sid), op.dst, op.dst, op.count, (ops[sid].peer, op.peer, c))
            elif op.reduce:
                st = _Step(op.rank, "rrc", (op.id,), op.dst, op.dst, op.count, (pair_of.get((op.rank, c, op.peer), -1), op.peer, c))
            else:
                rem = ops[matches[op.id]].src
                st = _Step(op.rank, "r", (op.id,), rem, op.dst, op.count, (pair_of.get((op.rank, c, op.peer), -1), op.peer, c))
        else:
            t = "cpy" if op.kind == "copy" else "re"
            st = _Step(op.rank, t, (op.id,), op.src, op.dst, op.count, (-1, -1, op.channel))
        for x in st.ops:
            step_of[x] = len(steps)
        steps.append(st)
    N = len(steps)

    # ---- where each step goes in its threadblock: by a global order of the
    # ops in which (``rendezvous``) a send and its recv are one node, or
    # (``buffered``) the recv follows the send; or (``given``) by op id.
    if order == "given":
        for st in steps:
            st.pos = (st.ops[0],)
    else:
        merge = order == "rendezvous"
        node_of = list(range(len(ops)))
        if merge:
            for op in ops:
                if op.kind == "send":
                    node_of[op.id] = node_of[matches[op.id]] = min(op.id, matches[op.id])
        node_succ: list[set[int]] = [set() for _ in ops]
        for op in ops:
            b = node_of[op.id]
            pre = list(op.deps)
            if op.kind == "recv" and not merge:
                pre.append(matches[op.id])
            for d in pre:
                a = node_of[d]
                if a != b:
                    node_succ[a].add(b)
        topo = _kahn(len(ops), node_succ)
        if topo is None:
            return None
        level = [0] * len(ops)
        for x in topo:
            for y in node_succ[x]:
                if level[y] < level[x] + 1:
                    level[y] = level[x] + 1
        topo = _kahn(len(ops), node_succ, key=lambda x: (level[x], x))
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
    if not _align_streams(s, steps, step_of, chan):
        return None

    # ---- threadblocks per rank, steps sorted by the global order
    tbs: list[list[tuple[int, int, int]]] = []
    tb_steps: list[list[list[_Step]]] = []
    scratch = [0] * n
    by_rank: list[list[int]] = [[] for _ in range(n)]
    for i, st in enumerate(steps):
        by_rank[st.rank].append(i)
    for op in ops:
        for ch in (op.src, op.dst):
            if ch is not None and ch.buf == "s":
                scratch[op.rank] = max(scratch[op.rank], ch.index + ch.count)
    where: list[tuple[int, int]] = [(0, 0)] * N  # step -> (tb index, logical index)
    step_succ: list[set[int]] = [set() for _ in range(N)]
    for r in range(n):
        keys = sorted({steps[i].tb for i in by_rank[r]})
        tbs.append(keys)
        idx = {k: j for j, k in enumerate(keys)}
        lists: list[list[int]] = [[] for _ in keys]
        for i in sorted(by_rank[r], key=lambda i: steps[i].pos):
            b = idx[steps[i].tb]
            where[i] = (b, len(lists[b]))
            if lists[b]:
                step_succ[lists[b][-1]].add(i)
            lists[b].append(i)
        tb_steps.append([[steps[i] for i in lst] for lst in lists])
    # ---- deadlock check: threadblock order + dependencies + send -> recv must be acyclic
    for i, st in enumerate(steps):
        for x in st.ops:
            pre = list(ops[x].deps)
            if ops[x].kind == "recv":
                pre.append(matches[x])
            for d in pre:
                j = step_of[d]
                if j != i:
                    step_succ[j].add(i)
    step_order = _kahn(N, step_succ, key=lambda i: steps[i].pos)
    if step_order is None:
        return None
    _dependencies(s, steps, step_of, where, tbs, step_order)
    return _Layout(tbs, tb_steps, scratch, fused=len(fused_send), buffered=order == "buffered")


def _align_streams(s: Schedule, steps: list[_Step], step_of: dict[int, int], chan) -> bool:
    """Make both ends of every stream process its messages in the same order.

    A fused step sits in its threadblock at the place of its receive but
    sends later, so the sender's order of a stream can differ from the
    receiver's. The receiving steps of a stream keep the places they have
    and take them in the sender's order; this can move a fused step's send,
    so repeat until nothing changes (False if it does not settle).
    """
    ops = s.ops
    matches = s.matches
    streams: dict[tuple[int, int, int], list[tuple[int, int]]] = {}
    for op in ops:
        if op.kind == "send":
            streams.setdefault((op.rank, op.peer, chan(op)), []).append((step_of[op.id], step_of[matches[op.id]]))
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


# ----------------------------------------------------------- serialize
def _serialize(s: Schedule, layout: _Layout, *, name, proto, coll, inplace, min_bytes, max_bytes) -> str:
    coll_obj = s.collective
    n = s.n_ranks
    nchan = 0
    for keys in layout.tbs:
        for _, _, c in keys:
            nchan = max(nchan, c + 1)
    nchan = max(nchan, 1)
    algo = ET.Element("algo")
    attrs = {
        "name": name,
        "proto": proto,
        "nchannels": nchan,
        "nchunksperloop": coll_obj.size_chunks,
        "ngpus": n,
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
    too_many_steps = []
    too_many_tbs = []
    for r in range(n):
        g = ET.SubElement(algo, "gpu")
        for k, v in (("id", r), ("i_chunks", coll_obj.in_chunks), ("o_chunks", coll_obj.out_chunks), ("s_chunks", layout.scratch[r])):
            g.set(k, str(v))
        keys = layout.tbs[r]
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
        if len(keys) > MAX_TBS:
            too_many_tbs.append((r, len(keys)))
        for b, ((send, recv, chan), lst) in enumerate(zip(keys, lists)):
            tb = ET.SubElement(g, "tb")
            for k, v in (("id", b), ("send", send), ("recv", recv), ("chan", chan)):
                tb.set(k, str(v))
            p = 0
            for st in lst:
                deps = [(d_tb, phys[d_tb][d_k]) for d_tb, d_k in st.deps]
                for d_tb, d_s in deps[:-1]:
                    _step(tb, p, "nop", None, None, 0, d_tb, d_s, False)
                    p += 1
                d_tb, d_s = deps[-1] if deps else (-1, -1)
                _step(tb, p, st.type, st.src, st.dst, st.cnt, d_tb, d_s, st.hasdep)
                p += 1
            if p > MAX_STEPS_PER_TB:
                too_many_steps.append((r, b, p))
    if too_many_steps:
        r, b, p = max(too_many_steps, key=lambda t: t[2])
        log.warning(
            "%d threadblock(s) have more than %d steps (most: %d, gpu %d tb %d); the MSCCL executor's default build "
            "allows %d (set MSCCL_MAX_NUM_STEPS when building it)",
            len(too_many_steps), MAX_STEPS_PER_TB, p, r, b, MAX_STEPS_PER_TB,
        )
    if too_many_tbs:
        r, k = max(too_many_tbs, key=lambda t: t[1])
        log.warning(
            "%d gpu(s) use more than %d threadblocks (most: %d, gpu %d); the MSCCL executor names dependencies "
            "with 8-bit threadblock ids", len(too_many_tbs), MAX_TBS, k, r,
        )
    if nchan > MAX_CHANNELS:
        log.warning("the algorithm uses %d channels; NCCL has at most %d", nchan, MAX_CHANNELS)
    ET.indent(algo, space="  ")
    text = ET.tostring(algo, encoding="unicode")
    # ElementTree writes "<step ... />"; the runtimes' hand-written parsers
    # expect msccl-tools' "<step .../>" (the space would read as an empty attribute).
    return text.replace(" />", "/>") + "\n"


def _step(tb, s, type_, src, dst, cnt, depid, deps, hasdep) -> None:
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


# =====================================================================
# Import
# =====================================================================
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

    def int(self, key: str, default: Any = ..., lo: int | None = None, hi: int | None = None) -> int:
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


@dataclass
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


@dataclass
class _XTb:
    id: int
    send: int
    recv: int
    chan: int
    steps: list[_XStep]
    where: str


def schedule_from_msccl_xml(text: str) -> Schedule:
    """Read MSCCL XML into a :class:`Schedule` (not yet verified: see ``load_schedule``).

    Raises :class:`ScheduleFormatError` naming the element and attribute for
    XML that is not well formed, lacks a required attribute, uses an unknown
    step type or buffer, steps outside a buffer, breaks the threadblock rules
    or whose sends and receives do not pair up.
    """
    try:
        root = ET.fromstring(text)
    except ET.ParseError as e:
        raise ScheduleFormatError(f"not well-formed MSCCL XML: {e}") from None
    if root.tag != "algo":
        raise ScheduleFormatError(f"MSCCL XML must have an <algo> root element, found <{root.tag}>")
    A = _Attrs(root, "<algo>")
    ngpus = A.int("ngpus", lo=1)
    coll_name = A.str("coll")
    kind = _COLL_READ.get(coll_name)
    if kind is None:
        raise ScheduleFormatError(
            f"<algo>: coll={coll_name!r} is not supported; use one of {', '.join(sorted(_COLL_READ))}"
        )
    proto = A.str("proto")
    if proto not in PROTOCOLS:
        raise ScheduleFormatError(f"<algo>: proto={proto!r} is not one of {', '.join(PROTOCOLS)}")
    nchannels = A.int("nchannels", lo=0)
    ncpl = A.int("nchunksperloop", lo=1)
    inplace = A.int("inplace", lo=0, hi=1)
    outofplace = A.int("outofplace", 1 - inplace, lo=0, hi=1)
    min_bytes = A.int("minBytes", None, lo=0)
    max_bytes = A.int("maxBytes", None, lo=0)
    if min_bytes is None or max_bytes is None:
        log.warning("MSCCL XML lacks minBytes/maxBytes: the MSCCL executor would refuse it")
    root_rank = A.int("root", 0, lo=0)
    name = A.str("name", "msccl")
    if kind in _PIECED:
        if ncpl % ngpus:
            raise ScheduleFormatError(f"<algo>: nchunksperloop={ncpl} is not a multiple of ngpus={ngpus}, as {coll_name} needs")
        factor = ncpl // ngpus
    else:
        factor = ncpl
    try:
        coll = Collective(kind, ngpus, factor, root_rank)
    except CCSynthError as e:
        raise ScheduleFormatError(f"<algo>: {e}") from None

    # ---------------------------------------------------------- parse
    gpus: dict[int, tuple[dict, list[_XTb]]] = {}
    for g in root:
        if g.tag != "gpu":
            log.warning("ignoring unknown element <%s> in <algo>", g.tag)
            continue
        G = _Attrs(g, "<gpu>")
        gid = G.int("id", lo=0, hi=ngpus - 1)
        where_g = f"<gpu id={gid}>"
        if gid in gpus:
            raise ScheduleFormatError(f"{where_g} appears twice")
        G.where = where_g
        sizes = {
            "i": G.int("i_chunks", lo=0),
            "o": G.int("o_chunks", lo=0),
            "s": G.int("s_chunks", lo=0),
        }
        for b, have in (("i", coll.in_chunks), ("o", coll.out_chunks)):
            if sizes[b] > have:
                raise ScheduleFormatError(
                    f"{where_g}: {b}_chunks={sizes[b]} but {coll.describe()} has {have} {b} chunk(s) per rank"
                )
        tbs: list[_XTb] = []
        for t in g:
            if t.tag != "tb":
                log.warning("ignoring unknown element <%s> in %s", t.tag, where_g)
                continue
            T = _Attrs(t, f"<tb> of {where_g}")
            tid = T.int("id", lo=0)
            where_t = f"<tb id={tid}> of {where_g}"
            T.where = where_t
            send = T.int("send", lo=-1, hi=ngpus - 1)
            recv = T.int("recv", lo=-1, hi=ngpus - 1)
            if gid in (send, recv):
                raise ScheduleFormatError(f"{where_t}: a threadblock cannot send to or receive from its own gpu")
            chan = T.int("chan", lo=0)
            steps: list[_XStep] = []
            for pos, st in enumerate(t):
                if st.tag != "step":
                    log.warning("ignoring unknown element <%s> in %s", st.tag, where_t)
                    continue
                where_s = f"step {len(steps)} of {where_t}"
                S = _Attrs(st, where_s)
                sidx = S.int("s")
                if sidx != len(steps):
                    raise ScheduleFormatError(f"{where_s}: s={sidx}, but steps must be numbered 0, 1, 2, ... in order")
                type_ = S.str("type")
                if type_ not in STEP_TYPES:
                    raise ScheduleFormatError(f"{where_s}: unknown step type {type_!r}; types are {', '.join(STEP_TYPES)}")
                bufs = []
                for key in ("srcbuf", "dstbuf"):
                    b = S.str(key)
                    if b not in BUFFERS:
                        raise ScheduleFormatError(f"{where_s}: {key}={b!r} is not a buffer (i, o or s)")
                    bufs.append(b)
                x = _XStep(
                    sidx, type_, bufs[0], S.int("srcoff"), bufs[1], S.int("dstoff"), S.int("cnt", lo=0),
                    S.int("depid", lo=-1), S.int("deps", lo=-1), S.int("hasdep", lo=0, hi=1), where_s,
                )
                if type_ != "nop":
                    if x.cnt < 1 or x.cnt >= RUNTIME_MAX_COUNT:
                        raise ScheduleFormatError(f"{where_s}: cnt={x.cnt} must be in 1..{RUNTIME_MAX_COUNT - 1}")
                    use_src, use_dst = _USES[type_]
                    for used, b, off, what in ((use_src, x.srcbuf, x.srcoff, "src"), (use_dst, x.dstbuf, x.dstoff, "dst")):
                        if used and (off < 0 or off + x.cnt > sizes[b]):
                            raise ScheduleFormatError(
                                f"{where_s}: {what} range {b}[{off}:{off + x.cnt}] is outside the gpu's "
                                f"{b} buffer ({sizes[b]} chunks, {b}_chunks of {where_g})"
                            )
                    if type_ in _SENDS and send < 0:
                        raise ScheduleFormatError(f"{where_s}: a {type_!r} step sends, but {where_t} has no send peer (send=-1)")
                    if type_ in _RECVS and recv < 0:
                        raise ScheduleFormatError(f"{where_s}: a {type_!r} step receives, but {where_t} has no receive peer (recv=-1)")
                steps.append(x)
            tbs.append(_XTb(tid, send, recv, chan, steps, where_t))
        ids = sorted(t.id for t in tbs)
        if ids != list(range(len(tbs))):
            dup = next((a for a, b in zip(ids, ids[1:]) if a == b), None)
            if dup is not None:
                raise ScheduleFormatError(f"{where_g}: threadblock id {dup} appears twice")
            missing = next(i for i in range(len(tbs) + 1) if i not in set(ids))
            raise ScheduleFormatError(f"{where_g}: threadblock ids must be 0..{len(tbs) - 1}; <tb id={missing}> is missing")
        tbs.sort(key=lambda t: t.id)
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
        _check_step_deps(tbs)
        gpus[gid] = (sizes, tbs)
    missing_gpus = [r for r in range(ngpus) if r not in gpus]
    if missing_gpus:
        raise ScheduleFormatError(f"<algo ngpus={ngpus}> has no <gpu id={missing_gpus[0]}> element")

    # ------------------------------------------------- pair the streams
    stream_send: dict[tuple[int, int, int], list[tuple[_XTb, _XStep]]] = {}
    stream_recv: dict[tuple[int, int, int], list[tuple[_XTb, _XStep]]] = {}
    for gid, (_, tbs) in gpus.items():
        for t in tbs:
            for x in t.steps:
                if x.type in _SENDS:
                    stream_send.setdefault((gid, t.send, t.chan), []).append((t, x))
                if x.type in _RECVS:
                    stream_recv.setdefault((t.recv, gid, t.chan), []).append((t, x))
    for key in sorted(set(stream_send) | set(stream_recv)):
        a, b, c = key
        ss, rr = stream_send.get(key, []), stream_recv.get(key, [])
        if len(ss) != len(rr):
            raise ScheduleFormatError(
                f"gpu {a} sends {len(ss)} message(s) to gpu {b} on channel {c}, but gpu {b} receives {len(rr)} "
                f"from gpu {a} on that channel"
            )
        for (_, xs), (_, xr) in zip(ss, rr):
            if xs.cnt != xr.cnt:
                raise ScheduleFormatError(f"{xs.where} sends {xs.cnt} chunk(s) but the matching {xr.where} receives {xr.cnt}")

    # ------------------------------------ deadlock: steps that never run
    # A step runs after the previous step of its threadblock, its depid/deps
    # step and (if it receives) the step that sends its message. Sends do not
    # wait for their receiver (MSCCL's connections are buffered).
    key_of: dict[int, tuple[int, int, int]] = {}
    all_steps: list[tuple[int, int, int]] = []
    for gid in range(ngpus):
        for t in gpus[gid][1]:
            for k, x in enumerate(t.steps):
                key_of[id(x)] = (gid, t.id, k)
                all_steps.append((gid, t.id, k))
    waits: dict[tuple[int, int, int], list[tuple[int, int, int]]] = {kk: _preds(gpus, kk) for kk in all_steps}
    for key, ss in stream_send.items():
        for (_, xs), (_, xr) in zip(ss, stream_recv[key]):
            waits[key_of[id(xr)]].append(key_of[id(xs)])
    if _kahn_keys(all_steps, waits) is None:
        stuck = _cycle(all_steps, waits)
        shown = " -> ".join(f"step {s_} of <tb id={tb}> of <gpu id={g}>" for g, tb, s_ in stuck[:6])
        raise ScheduleFormatError(
            f"the threadblocks deadlock: {shown}{' -> ...' if len(stuck) > 6 else ''} -> back to the first "
            "(each waits for the one before it: threadblock order, depid/deps, or a receive waiting for its send)"
        )

    # ------------------------------------------------------- build ops
    # Buffer references go through in-place aliasing (input and output are one
    # buffer) and, if the file writes its input buffer (which a ccsynth
    # schedule may not), a "shadow" of the input in scratch filled first.
    amap, mode = _alias_map(coll) if inplace else (None, None)

    def aliased(rank: int, buf: str, off: int) -> tuple[str, int]:
        return amap(rank, buf, off) if amap is not None else (buf, off)

    writes_input = any(
        aliased(gid, x.dstbuf, x.dstoff)[0] == "i"
        for gid, (_, tbs) in gpus.items() for t in tbs for x in t.steps
        if x.type in ("r", "rcs", "rrc", "rrcs", "cpy", "re")
    )
    shadow = max(sizes["s"] for sizes, _ in gpus.values()) if writes_input else None
    temp_base = (shadow + coll.in_chunks) if shadow is not None else max(sizes["s"] for sizes, _ in gpus.values())
    temp_next = [temp_base] * ngpus
    recs: list[dict] = []

    def rng(rank: int, buf: str, off: int, cnt: int, where: str) -> Chunks:
        buf, off = aliased(rank, buf, off)
        if shadow is not None and buf == "i":
            buf, off = "s", shadow + off
        size = {"i": coll.in_chunks, "o": coll.out_chunks}.get(buf)
        if size is not None and off + cnt > size:
            raise ScheduleFormatError(f"{where}: range {buf}[{off}:{off + cnt}] is outside the {buf} buffer ({size} chunks)")
        return Chunks(buf, off, cnt)

    def add(rank, chan, key, **f) -> int:
        recs.append(dict(rank=rank, channel=chan, key=key, deps=set(), **f))
        return len(recs) - 1

    def overlap(a: Chunks, b: Chunks) -> bool:
        return a.buf == b.buf and a.index < b.index + b.count and b.index < a.index + a.count

    step_ops: dict[tuple[int, int, int], list[int]] = {}  # per step: its ops in order
    prologue: dict[int, int] = {}
    for gid in range(ngpus):
        sizes, tbs = gpus[gid]
        if inplace and mode in ("same", "in_in_out") and coll.in_chunks:
            dst = Chunks("o", gid * coll.chunk_factor if mode == "in_in_out" else 0, coll.in_chunks)
            prologue[gid] = add(gid, 0, (gid, -1, -1, 0, 0), kind="copy", src=Chunks("i", 0, coll.in_chunks), dst=dst)
        elif shadow is not None and coll.in_chunks:
            prologue[gid] = add(gid, 0, (gid, -1, -1, 0, 0), kind="copy", src=Chunks("i", 0, coll.in_chunks),
                                dst=Chunks("s", shadow, coll.in_chunks))
        for t in tbs:
            for k, x in enumerate(t.steps):
                key = (gid, t.id, k)
                base = (gid, t.chan, t.id, k)
                ty = x.type
                ids: list[int] = []
                if ty != "nop":
                    src = rng(gid, x.srcbuf, x.srcoff, x.cnt, x.where) if _USES[ty][0] else None
                    dst = rng(gid, x.dstbuf, x.dstoff, x.cnt, x.where) if _USES[ty][1] else None
                    if ty == "s":
                        ids.append(add(gid, t.chan, base + (0,), kind="send", src=src, peer=t.send))
                    elif ty in ("r", "rcs"):
                        ids.append(add(gid, t.chan, base + (0,), kind="recv", dst=dst, peer=t.recv))
                        if ty == "rcs":
                            ids.append(add(gid, t.chan, base + (1,), kind="send", src=dst, peer=t.send))
                    elif ty in ("rrc", "rrcs"):
                        if src != dst:
                            if overlap(src, dst):
                                raise ScheduleFormatError(f"{x.where}: {ty} reads {src} and writes the overlapping {dst}")
                            ids.append(add(gid, t.chan, base + (0,), kind="copy", src=src, dst=dst))
                        ids.append(add(gid, t.chan, base + (1,), kind="recv", dst=dst, peer=t.recv, reduce=True))
                        if ty == "rrcs":
                            ids.append(add(gid, t.chan, base + (2,), kind="send", src=dst, peer=t.send))
                    elif ty == "rrs":
                        tmp = Chunks("s", temp_next[gid], x.cnt)
                        temp_next[gid] += x.cnt
                        ids.append(add(gid, t.chan, base + (0,), kind="copy", src=src, dst=tmp))
                        ids.append(add(gid, t.chan, base + (1,), kind="recv", dst=tmp, peer=t.recv, reduce=True))
                        ids.append(add(gid, t.chan, base + (2,), kind="send", src=tmp, peer=t.send))
                    elif ty == "cpy":
                        if src != dst:
                            if overlap(src, dst):
                                raise ScheduleFormatError(f"{x.where}: cpy reads {src} and writes the overlapping {dst}")
                            ids.append(add(gid, t.chan, base + (0,), kind="copy", src=src, dst=dst))
                    elif ty == "re":
                        if overlap(src, dst):
                            raise ScheduleFormatError(f"{x.where}: re reduces {src} into the overlapping {dst}")
                        ids.append(add(gid, t.chan, base + (0,), kind="reduce", src=src, dst=dst))
                for a, b in zip(ids, ids[1:]):
                    recs[b]["deps"].add(a)
                step_ops[key] = ids

    # ------------------------------------------------ dependencies
    # The file orders steps by threadblock order and depid/deps. The schedule
    # keeps what that order means for data and for the steps waiting on each
    # other, and no more, so that transfers overlap as on MSCCL's buffered
    # connections:
    # * a step waits for its depid/deps step and for the previous step of its
    #   threadblock -- except a receive, which takes its data whenever it
    #   arrives (the sender pushed it into the connection's buffer);
    # * "step k done" means every step up to k done: its own ops other than
    #   sends (a send is done once its data is on the way), plus the previous
    #   step's completion where the step did not wait for it;
    # * on top, every op waits for the earlier ops of its gpu (in the file's
    #   order) that touch the same chunks, one of them writing.
    order: dict[int, list[tuple[int, int, int]]] = {}
    for gid in range(ngpus):
        keys = [(gid, t.id, k) for t in gpus[gid][1] for k in range(len(t.steps))]
        order[gid] = _kahn_keys(keys, {kk: _preds(gpus, kk) for kk in keys})
    resolved: dict[tuple[int, int, int], frozenset[int]] = {}
    for gid in range(ngpus):
        for key in order[gid]:
            _, tb, k = key
            ids = step_ops[key]
            x = gpus[gid][1][tb].steps[k]
            prev = resolved[(gid, tb, k - 1)] if k > 0 else frozenset((prologue[gid],) if gid in prologue else ())
            dep = resolved[(gid, x.depid, x.deps)] if x.depid >= 0 else frozenset()
            chained = not ids or recs[ids[0]]["kind"] != "recv"
            if ids:
                recs[ids[0]]["deps"] |= (prev | dep) if chained else dep
            own = [i for i in ids if recs[i]["kind"] != "send"]  # chained in order: the last implies the rest
            if not own:
                resolved[key] = prev | dep
            elif chained:
                resolved[key] = frozenset(own[-1:])
            else:
                resolved[key] = frozenset(own[-1:]) | prev

    for gid in range(ngpus):
        tbs = gpus[gid][1]
        ntb = len(tbs)
        clock: dict[tuple[int, int, int], np.ndarray] = {}
        writer: dict[tuple[str, int], tuple[int, int, int]] = {}  # chunk -> (op, tb, step) of its last writer
        readers: dict[tuple[str, int], list[tuple[int, int, int]]] = {}
        if gid in prologue:
            f = recs[prologue[gid]]
            for i in f["dst"].indices():
                writer[(f["dst"].buf, i)] = (prologue[gid], -1, -1)
        for key in order[gid]:
            _, tb, k = key
            seen = np.full(ntb, -1, dtype=np.int64)  # highest step of each threadblock done before this one
            for p in _preds(gpus, key):
                np.maximum(seen, clock[p], out=seen)

            def before(acc: tuple[int, int, int]) -> bool:
                _, atb, ak = acc
                return atb < 0 or seen[atb] >= ak

            for i in step_ops[key]:
                f = recs[i]
                here = (i, tb, k)
                reads = [f["src"]] if f["kind"] in ("send", "copy", "reduce") else []
                if f["kind"] == "reduce" or f.get("reduce"):
                    reads.append(f["dst"])
                writes = [f["dst"]] if f["kind"] != "send" else []
                written = {(c.buf, j) for c in writes for j in c.indices()}
                for c in reads:
                    for j in c.indices():
                        if (c.buf, j) in written:
                            continue
                        w = writer.get((c.buf, j))
                        if w is not None and w[0] != i and (w[1:] == (tb, k) or before(w)):
                            f["deps"].add(w[0])
                        readers.setdefault((c.buf, j), []).append(here)
                for ch in written:
                    w = writer.get(ch)
                    if w is not None and w[0] != i and (w[1:] == (tb, k) or before(w)):
                        f["deps"].add(w[0])
                    for r in readers.pop(ch, ()):
                        if r[0] != i and (r[1:] == (tb, k) or before(r)):
                            f["deps"].add(r[0])
                    writer[ch] = here
            seen[tb] = k
            clock[key] = seen

    if inplace and mode == "out_in_in":
        c = coll.chunk_factor
        for gid in range(ngpus):
            need: set[int] = set()
            for t in gpus[gid][1]:
                if t.steps:
                    need |= resolved[(gid, t.id, len(t.steps) - 1)]
            e = add(gid, 0, (gid, 1 << 30, 0, 0, 0), kind="copy", src=rng(gid, "o", 0, c, "<algo>"), dst=Chunks("o", 0, c))
            recs[e]["deps"] |= need

    # ------------------------------------------------------- renumber
    order = sorted(range(len(recs)), key=lambda i: recs[i]["key"])
    new_id = {old: new for new, old in enumerate(order)}
    ops = []
    for old in order:
        f = recs[old]
        ops.append(
            Op(new_id[old], f["rank"], f["kind"], f.get("src"), f.get("dst"), f.get("peer", -1), f.get("reduce", False),
               tuple(sorted(new_id[d] for d in f["deps"])), f["channel"])
        )
    scratch = max(temp_next) if ops else temp_base
    meta = {
        "source": "msccl-xml",
        "msccl": {
            "ops_in_tb_order": True,
            "name": name,
            "proto": proto,
            "coll": coll_name,
            "nchannels": nchannels,
            "inplace": bool(inplace),
            "outofplace": bool(outofplace),
            "minBytes": min_bytes,
            "maxBytes": None if max_bytes in (None, 0, UNBOUNDED) else max_bytes,
            "input_shadow": shadow,
        },
    }
    try:
        return Schedule(name, coll, tuple(ops), scratch, "", meta)
    except ScheduleFormatError:
        raise
    except ScheduleError as e:
        raise ScheduleFormatError(f"MSCCL XML {name!r}: {e}") from None


def _kahn_keys(nodes: list, preds: dict) -> list | None:
    """A topological order of ``nodes`` (each after its ``preds``), or None on a cycle."""
    out = _kahn_partial(nodes, preds)
    return out if len(out) == len(nodes) else None


def _cycle(nodes: list, preds: dict) -> list:
    """One cycle among ``nodes`` that never become ready, in execution order."""
    done = set(_kahn_partial(nodes, preds))
    x = next(n for n in nodes if n not in done)
    walk, seen = [], {}
    while x not in seen:
        seen[x] = len(walk)
        walk.append(x)
        x = next(p for p in preds[x] if p not in done)
    return walk[seen[x]:][::-1]


def _kahn_partial(nodes: list, preds: dict) -> list:
    """The nodes that become ready, in Kahn's order (ties: the order of ``nodes``)."""
    succ: dict = {x: [] for x in nodes}
    indeg = {x: 0 for x in nodes}
    for x in nodes:
        for p in preds[x]:
            succ[p].append(x)
            indeg[x] += 1
    ready = [x for x in reversed(nodes) if indeg[x] == 0]
    out = []
    while ready:
        x = ready.pop()
        out.append(x)
        for y in succ[x]:
            indeg[y] -= 1
            if indeg[y] == 0:
                ready.append(y)
    return out


def _preds(gpus, key: tuple[int, int, int]) -> list[tuple[int, int, int]]:
    """Steps whose completion ``key`` waits for: the previous step of its
    threadblock and its ``depid``/``deps`` target."""
    gid, tb, k = key
    x = gpus[gid][1][tb].steps[k]
    out = []
    if k > 0:
        out.append((gid, tb, k - 1))
    if x.depid >= 0:
        out.append((gid, x.depid, x.deps))
    return out


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


__all__ = [
    "schedule_to_msccl_xml",
    "schedule_from_msccl_xml",
    "plan_to_msccl_xmls",
    "replicate_instances",
    "split_long_ranges",
    "describe_xml",
    "COLL_NAMES",
    "PROTOCOLS",
    "STEP_TYPES",
    "MAX_COUNT",
    "UNBOUNDED",
]
