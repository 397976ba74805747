"""Fit a schedule within the limits of the MSCCL runtime that will load it.

A threadblock runs the messages of one or two streams (a send peer and a
receive peer on one channel) and its gpu's local ops one step at a time;
the runtimes accept at most ``max_steps`` steps per threadblock, and a few
more limits per gpu (:mod:`.limits` lists them with their sources). A
pipelined schedule at a large message size easily sends hundreds of
messages down one stream. :func:`fit_layouts` makes it fit, in stages:

1. *static limits* -- chunk offsets that a 16-bit field cannot hold are
   refused at once (no transform shortens a buffer);
2. *merge* (:func:`~ccsynth.collectives.transforms.merge_transfers`) --
   only when spreading alone would need more channels than a budget
   allows: runs of ``f`` consecutive transfers of a stream whose ranges
   follow each other become one message (``f`` = 1, 2, 4, ...: the
   smallest that lets the rest fit the budget), which is what a smaller
   chunk factor would have sent;
3. *spread* (:func:`~ccsynth.collectives.transforms.split_streams`) -- a
   stream with ``m`` messages is cut into ``ceil(m / max_steps)``
   consecutive blocks, each on a channel of its own (so a threadblock of
   its own), as are the local ops of a gpu and channel;
4. *check and refine* -- the threadblock layouts
   (:func:`.threadblocks.layouts`) are built and counted as the runtime
   counts them (``nop`` steps included); a threadblock still too long
   (fused streams, ``nop`` steps) gets its streams cut into more blocks,
   and the layouts are built again, a few rounds at most. A gpu with more
   threadblocks than allowed (a gpu talking to many peers) gets its
   streams packed two by two into shared threadblocks
   (``layouts(pack=True)``), from then on.

The layouts that fit come back with the schedule they lay out (a
:class:`Fit`); when none does, :class:`~ccsynth.errors.ExportLimitError`
names the limit, the gpu, the threadblock and the count, as the unfitted
schedule would have needed them, and what the stages reached.

:func:`fit_candidates` gives the two fits worth comparing: with the budget
of the channels the schedule already uses (merge first: few channels) and
with :data:`CHANNEL_BUDGET` (spread first: a finer pipeline). Neither is
always faster in simulation (a 64 MiB allgather on ndv2x2: merging costs
10%, spreading 1%; on dgx_a100x4 the reverse, 5% against 38%, as spreading
breaks receive-and-forward fusions), so the exporter simulates both.
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ccsynth.collectives.schedule import Schedule
from ccsynth.collectives.transforms import channels_used, merge_transfers, split_streams
from ccsynth.errors import ExportLimitError
from ccsynth.formats.msccl.limits import MAX_COUNT, MscclLimits
from ccsynth.formats.msccl.threadblocks import Layout, layouts

log = logging.getLogger(__name__)

__all__ = ["LimitViolation", "Fit", "violations", "steps_per_threadblock", "fit_layouts", "fit_candidates"]

#: Rounds of "build the layouts, cut the streams of the threadblocks still too long" per merge factor.
REFINE_ROUNDS = 4
#: Each op's simulated start in a schedule, or None (:func:`.timed.start_times` at a topology and size).
Timer = Callable[[Schedule], Sequence[float] | None]
#: Channels a schedule is spread over before transfers are merged instead. Every channel costs the
#: runtime a connection (with its buffers) per peer and more threadblocks (SMs), while merging
#: consecutive pieces costs little: the runtime pipelines a step's chunks in slices anyway.
CHANNEL_BUDGET = 8

_SOURCES = {
    "steps": "MSCCL_MAX_NUM_STEPS in msccl-executor-nccl makefiles/common.mk, 256 in microsoft/msccl src/include/msccl.h",
    "threadblocks": "depid is an int8_t (dependentBid in src/include/msccl/msccl_struct.h)",
    "channels": "MAXCHANNELS in NCCL src/include/device.h",
    "send threadblocks": "MSCCL_MAX_NUM_THREAD_BLOCKS_PER_CHANNEL in src/include/msccl/msccl_struct.h",
    "receive threadblocks": "MSCCL_MAX_NUM_THREAD_BLOCKS_PER_CHANNEL in src/include/msccl/msccl_struct.h",
    "XML elements": "MAX_NODES in msccl-executor-nccl src/include/msccl/msccl_parser.h",
    "chunks": "int16_t srcOffset/dstOffset in src/include/msccl/msccl_struct.h",
}


@dataclass(frozen=True)
class LimitViolation:
    """One limit a layout breaks: what, where (gpu, threadblock or channel), how many, how many allowed."""

    limit: str  # a key of _SOURCES
    gpu: int
    where: str  # "threadblock 3", "channel 2", "buffer 'o'", or ""
    count: int
    allowed: int
    runtime: str
    tb: int = -1  # the threadblock, for "steps"

    @property
    def message(self) -> str:
        at = f"{self.where} of gpu {self.gpu}" if self.where else f"gpu {self.gpu}"
        return (
            f"{at} needs {self.count} {self.limit}; {self.runtime} accepts at most {self.allowed} "
            f"({_SOURCES[self.limit]})"
        )


@dataclass(frozen=True)
class Fit:
    """A schedule transformed to fit a runtime, and its layouts that fit (best guess first)."""

    schedule: Schedule
    layouts: tuple[Layout, ...]
    merge_factor: int  # 1: nothing merged
    channels: int
    packed: bool = False  # streams paired two by two into shared threadblocks
    original_ops: int = 0  # ops of the schedule before it was fitted
    original_channels: int = 1

    def note(self, limits: MscclLimits) -> str | None:
        """One line saying what was changed to fit ``limits`` (None: nothing)."""
        what = []
        if self.merge_factor > 1 and len(self.schedule.ops) < self.original_ops:
            what.append(f"merged runs of up to {self.merge_factor} consecutive transfers "
                        f"({self.original_ops} -> {len(self.schedule.ops)} ops)")
        if self.channels > self.original_channels:
            what.append(f"spread long streams over {self.channels} channels (from {self.original_channels})")
        if self.packed:
            what.append("paired streams two by two into shared threadblocks")
        if not what:
            return None
        return (f"fitted to {limits.name} (at most {limits.max_steps} steps per threadblock, {limits.max_tbs} "
                f"threadblocks per gpu, {limits.max_channels} channels, {limits.max_elements} XML elements per gpu): "
                + "; ".join(what))


def steps_per_threadblock(layout: Layout) -> list[list[int]]:
    """Steps the runtime counts in every threadblock of every gpu: a step waiting
    for ``m`` other threadblocks is preceded by ``m - 1`` nop steps."""
    return [[sum(1 + max(len(st.deps) - 1, 0) for st in lst) for lst in gpu] for gpu in layout.steps]


def violations(schedule: Schedule, layout: Layout, limits: MscclLimits) -> list[LimitViolation]:
    """Every limit ``layout`` (of ``schedule``) breaks, worst first within each kind."""
    out: list[LimitViolation] = []
    rt = limits.name
    n = schedule.n_ranks
    counts = steps_per_threadblock(layout)
    for r, keys in enumerate(layout.tbs):
        for b, p in enumerate(counts[r]):
            if p > limits.max_steps:
                out.append(LimitViolation("steps", r, f"threadblock {b}", p, limits.max_steps, rt, tb=b))
        if len(keys) > limits.max_tbs:
            out.append(LimitViolation("threadblocks", r, "", len(keys), limits.max_tbs, rt))
        nchan = max((k.chan + 1 for k in keys), default=0)
        if nchan > limits.max_channels:
            out.append(LimitViolation("channels", r, "", nchan, limits.max_channels, rt))
        senders: dict[int, int] = defaultdict(int)
        receivers: dict[int, int] = defaultdict(int)
        for k in keys:
            senders[k.chan] += k.send >= 0
            receivers[k.chan] += k.recv >= 0
        for what, per in (("send threadblocks", senders), ("receive threadblocks", receivers)):
            for c, m in sorted(per.items()):
                if m > limits.max_peers_per_channel:
                    out.append(LimitViolation(what, r, f"channel {c}", m, limits.max_peers_per_channel, rt))
        elements = 1 + n + len(keys) + sum(counts[r])
        if elements > limits.max_elements:
            out.append(LimitViolation("XML elements", r, "", elements, limits.max_elements, rt))
    out.sort(key=lambda v: (v.limit, -v.count, v.gpu))
    return out


def _buffer_violations(schedule: Schedule, limits: MscclLimits) -> list[LimitViolation]:
    """Buffers with more chunks than a 16-bit offset can name (no transform helps)."""
    coll = schedule.collective
    out = []
    for buf, chunks in (("i", coll.in_chunks), ("o", coll.out_chunks), ("s", schedule.scratch_chunks)):
        if chunks - 1 > limits.max_offset:
            out.append(LimitViolation("chunks", 0, f"buffer {buf!r}", chunks, limits.max_offset + 1, limits.name))
    return out


def fit_candidates(schedule: Schedule, limits: MscclLimits, *, timer: Timer | None = None) -> list[Fit]:
    """The ways worth comparing to fit ``schedule`` within ``limits``, fewest channels first.

    One :class:`Fit` when the schedule fits as it is; else the fit that
    merges before it adds channels (few channels: every channel costs the
    runtime buffers per peer and threadblocks), and, when it differs, the
    one that spreads over up to :data:`CHANNEL_BUDGET` channels before it
    merges (a finer pipeline). The exporter writes the faster in
    simulation. ``timer``: each op's simulated start in a schedule (as
    :func:`.timed.start_times`), for the timed layout of every schedule
    tried. Raises as :func:`fit_layouts` does.
    """
    ladder = _MergeLadder(schedule)
    few = _fit(schedule, limits, channels_used(schedule), ladder, timer)
    if few.schedule is schedule:
        return [few]
    out = [few]
    wide = _fit(schedule, limits, CHANNEL_BUDGET, ladder, timer)
    if (wide.merge_factor, wide.channels, len(wide.schedule.ops)) != (few.merge_factor, few.channels, len(few.schedule.ops)):
        out.append(wide)
    return out


def fit_layouts(schedule: Schedule, limits: MscclLimits, *, channel_budget: int = CHANNEL_BUDGET,
                timer: Timer | None = None) -> Fit:
    """``schedule`` transformed to fit ``limits``, with its layouts that fit (best guess first).

    See the module doc for the stages. Streams are spread over at most
    ``channel_budget`` channels (or the channels the schedule already uses)
    before transfers are merged; past that, merging comes first, and only
    where merging cannot shorten the streams enough do they spread up to
    ``limits.max_channels``. Raises :class:`~ccsynth.errors.ExportLimitError`
    when nothing fits, or :class:`~ccsynth.errors.ScheduleError` when no
    layout is free of deadlock.
    """
    return _fit(schedule, limits, channel_budget, _MergeLadder(schedule), timer)


def _fit(schedule: Schedule, limits: MscclLimits, channel_budget: int, ladder: _MergeLadder,
         timer: Timer | None = None) -> Fit:
    """:func:`fit_layouts`, taking its merged schedules from ``ladder`` (shared by the candidates)."""
    static = _buffer_violations(schedule, limits)
    if static:
        raise ExportLimitError(f"schedule {schedule.name!r} cannot be written as MSCCL XML: {static[0].message}")
    last: list[LimitViolation] = []
    pack = False
    for f, merged in _candidates(ladder, limits, max(channel_budget, channels_used(schedule))):
        parts, local_parts = _initial_parts(merged, limits.max_steps)
        for _ in range(REFINE_ROUNDS):
            spread = split_streams(merged, parts, local_parts, keep_order=True)
            nchan = channels_used(spread)
            if nchan > limits.max_channels:
                last = [LimitViolation("channels", -1, "", nchan, limits.max_channels, limits.name)]
                break  # merge more
            times = timer(spread) if timer is not None else None
            # the timed layout runs as the schedule does: the layouts by level only where it does not fit
            found = layouts(spread, pack=pack, times=times, by_level=times is None)
            checked = [(lay, violations(spread, lay, limits)) for lay in found]
            fitting = tuple(lay for lay, v in checked if not v)
            if not fitting and times is not None:
                found = layouts(spread, pack=pack)
                checked = [(lay, violations(spread, lay, limits)) for lay in found]
                fitting = tuple(lay for lay, v in checked if not v)
            if fitting:
                if spread is not schedule or pack:
                    log.info(
                        "schedule %r fits %s after merging runs of up to %d transfers and spreading over %d "
                        "channel(s) (%d -> %d ops)%s", schedule.name, limits.name, f, nchan, len(schedule.ops),
                        len(spread.ops), ", streams packed two by two into threadblocks" if pack else "",
                    )
                return Fit(spread, fitting, f, nchan, pack, len(schedule.ops), channels_used(schedule))
            last = checked[-1][1]
            if not pack and any(v.limit == "threadblocks" for v in last):
                pack = True  # pair streams into shared threadblocks (kept for every later attempt)
                continue
            if any(v.limit != "steps" for v in last) or not _refine(last, found[-1], merged, parts, local_parts, limits):
                break
    raise ExportLimitError(_refusal(schedule, limits, last))


def _refusal(schedule: Schedule, limits: MscclLimits, last: list[LimitViolation]) -> str:
    """One sentence: the limit the schedule breaks as it is, and the one the last (most merged) attempt still broke."""
    own = violations(schedule, layouts(schedule)[-1], limits)
    first = own[0] if own else (last[0] if last else None)
    if first is None:  # not reached: a schedule that fits as it is has a layout that fits
        return f"schedule {schedule.name!r} cannot be laid out within {limits.name}'s limits."
    text = f"schedule {schedule.name!r} does not fit {limits.name}: {_need(first)}"
    if last and (last[0].limit, last[0].gpu, last[0].where) != (first.limit, first.gpu, first.where):
        text += (f", and with consecutive transfers merged and streams spread over up to {limits.max_channels} "
                 f"channels {_need(last[0])}")
    return text + "."


def _need(v: LimitViolation) -> str:
    """``"threadblock 3 of gpu 0 needs 80 steps, at most 64 allowed (source)"``."""
    at = f"{v.where} of gpu {v.gpu}" if v.where and v.gpu >= 0 else (f"gpu {v.gpu}" if v.gpu >= 0 else "the file")
    return f"{at} needs {v.count} {v.limit}, at most {v.allowed} allowed ({_SOURCES[v.limit]})"


class _MergeLadder:
    """The schedule merged by factors 1, 2, 4, ... (each from the one before), built as needed, once.

    Merging pairs of merged transfers gives runs of up to twice as many
    (same-level runs stay legal at every rung); the ladder ends where a
    rung merges nothing more, or at :data:`MAX_COUNT`.
    """

    def __init__(self, schedule: Schedule):
        self.rungs: list[tuple[int, Schedule]] = [(1, schedule)]
        self.done = False

    def __iter__(self):
        i = 0
        while True:
            if i == len(self.rungs):
                if self.done or self.rungs[-1][0] >= MAX_COUNT:
                    return
                f, prev = self.rungs[-1]
                merged = merge_transfers(prev, 2, MAX_COUNT)
                if len(merged.ops) == len(prev.ops):
                    self.done = True
                    return
                self.rungs.append((2 * f, merged))
            yield self.rungs[i]
            i += 1


def _candidates(ladder: _MergeLadder, limits: MscclLimits, budget: int):
    """``(merge factor, merged schedule)`` to try, in order: the smallest factor whose
    streams spread over at most ``budget`` channels (else the one needing the
    fewest channels), then every larger factor."""
    options = []
    for f, merged in ladder:
        parts, local_parts = _initial_parts(merged, limits.max_steps)
        k = max([*parts.values(), *local_parts.values(), 1])
        options.append((f, merged, channels_used(merged) * k))
        if options[-1][2] <= budget:
            break
    within = [o for o in options if o[2] <= min(budget, limits.max_channels)]
    start = within[0] if within else min(options, key=lambda o: (o[2], o[0]))
    yield start[0], start[1]
    for f, merged in ladder:
        if f > start[0]:
            yield f, merged


def _initial_parts(s: Schedule, max_steps: int) -> tuple[dict, dict]:
    """Blocks per stream and per (rank, channel) of local ops: ``ceil(messages / max_steps)``."""
    sends: dict[tuple[int, int, int], int] = defaultdict(int)
    local: dict[tuple[int, int], int] = defaultdict(int)
    for op in s.ops:
        if op.kind == "send":
            sends[(op.rank, op.peer, op.channel)] += 1
        elif op.kind != "recv":
            local[(op.rank, op.channel)] += 1
    parts = {k: math.ceil(m / max_steps) for k, m in sends.items() if m > max_steps}
    local_parts = {k: math.ceil(m / max_steps) for k, m in local.items() if m > max_steps}
    return parts, local_parts


def _refine(
    found: list[LimitViolation], layout: Layout, merged: Schedule, parts: dict, local_parts: dict, limits: MscclLimits
) -> bool:
    """Cut the streams of every threadblock of ``layout`` that is still too long into more blocks.

    False if no stream can be cut further (within the channels allowed).
    """
    C = channels_used(merged)
    grew = False
    for v in found:
        key = layout.tbs[v.gpu][v.tb]
        c = key.chan % C
        targets: list[tuple[dict, tuple[int, ...]]] = []
        if key.send >= 0:
            targets.append((parts, (v.gpu, key.send, c)))
        if key.recv >= 0:
            targets.append((parts, (key.recv, v.gpu, c)))
        if not targets:
            targets.append((local_parts, (v.gpu, c)))
        for table, k in targets:
            old = table.get(k, 1)
            new = max(old + 1, math.ceil(old * v.count / limits.max_steps))
            if new * C > limits.max_channels:
                new = max(old, limits.max_channels // C)
            if new > old:
                table[k] = new
                grew = True
    return grew
