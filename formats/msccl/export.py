"""Export a schedule (or a plan of schedules) as MSCCL XML.

:func:`schedule_to_msccl_xml` maps each rank to a gpu and goes through
these steps:

1. *options* -- protocol, ``minBytes``/``maxBytes``, ``coll`` name and
   algorithm name, by default those of the file a schedule was read from;
2. *IR transforms* (:mod:`ccsynth.collectives.transforms`) -- ``nchannels``
   copies side by side, ranges cut to :data:`~.limits.MAX_COUNT` chunks,
   peers spread to at most :data:`~.limits.MAX_PEERS_PER_CHANNEL` per
   channel, and for ``inplace`` the in-place form of the schedule
   (``Schedule.in_place``: input and output one buffer);
3. *limits and layouts* (:mod:`.fit`, :mod:`.threadblocks`) -- the fused
   and the plain threadblock layout, of the schedule transformed (long
   streams spread over more channels, consecutive transfers merged) until
   they keep the runtime's limits (:mod:`.limits`: steps per threadblock,
   threadblocks per gpu, channels, ...); a schedule that cannot be made to
   fit raises :class:`~ccsynth.errors.ExportLimitError`, so no file a
   runtime would refuse is ever written. When a topology is known (given,
   or the one the schedule names) the layouts that fit -- of each way of
   fitting, :func:`.fit.fit_candidates` -- are simulated as MSCCL runs
   them (read back from their XML) and the fastest is written (else the
   first: fewest channels, fused). A transformed schedule is verified
   again;
4. *in-place check* -- an in-place file is read back and verified, so a
   schedule that is not correct once its buffers are aliased is refused.

The runtimes read ``[minBytes, maxBytes]`` inclusively and treat
``maxBytes="0"`` (the executor) or compare ``nbytes < maxBytes`` (the older
runtime) differently, so "no upper end" is written as
:data:`~.limits.UNBOUNDED`, which both read as unbounded.

Round trips: schedule -> XML -> schedule verifies; where the schedule moves
one stream's messages one after another anyway (rings, recursive doubling
and halving, trees, synthesized schedules with ordered links) the simulated
time is the same, while a schedule that sends several messages to one peer
at once is serialized by the threadblock (slower by up to about 1.3x on the
catalog's baselines: that is how MSCCL runs it). XML -> schedule -> XML
gives the same file for files this package wrote.
"""

from __future__ import annotations

import functools
import logging
import math
from dataclasses import dataclass

from ccsynth.collectives.schedule import Schedule
from ccsynth.collectives.transforms import (
    alias_in_place,
    channels_used,
    replicate_instances,
    split_long_ranges,
    spread_channels,
)
from ccsynth.collectives.verify import verify
from ccsynth.errors import CCSynthError, ScheduleError
from ccsynth.formats.msccl.fit import Fit, fit_candidates
from ccsynth.formats.msccl.limits import EXECUTOR_LIMITS, MAX_COUNT, MAX_PEERS_PER_CHANNEL, UNBOUNDED, MscclLimits
from ccsynth.limits import check as check_limit
from ccsynth.formats.msccl.reader import schedule_from_msccl_xml
from ccsynth.formats.msccl.schema import COLL_NAMES, COLL_READ, PROTOCOLS
from ccsynth.formats.msccl.threadblocks import layout_xml
from ccsynth.formats.msccl.timed import start_times
from ccsynth.synth.simulate import simulate_sizes
from ccsynth.tolerance import is_greater
from ccsynth.topologies import get_topology
from ccsynth.topologies.protocols import with_protocol

log = logging.getLogger(__name__)

__all__ = ["schedule_to_msccl_xml", "lower_schedule", "Lowering", "plan_to_msccl_xmls", "row_size"]


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
    limits: MscclLimits | None = None,
    size_bytes: float | None = None,
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
    older runtime). ``topology`` (a :class:`Topology`, or a catalog name or
    ccsynth topology file; default: the one the schedule names, if it
    loads): the schedule is simulated on it to lay every threadblock's steps
    out in the order they ran (:mod:`.timed`), and the layouts that fit are
    simulated (as MSCCL runs them, read back from their XML) and the fastest
    is written. ``size_bytes``: the message size to lay out and compare at
    (default: 1 KiB, 1 MiB and 64 MiB where they fall in ``[min_bytes,
    max_bytes]``, the middle one for the order). ``limits``: the runtime the file is for (default
    :data:`~.limits.EXECUTOR_LIMITS`, msccl-executor-nccl's default build;
    ``EXECUTOR_LIMITS.with_max_steps(256)`` for a build with more steps);
    raises :class:`~ccsynth.errors.ExportLimitError` if the schedule cannot
    be made to fit them.

    Round trip (see the example of :mod:`ccsynth.formats.msccl`):
    ``schedule_to_msccl_xml(schedule_from_msccl_xml(xml)) == xml`` for a
    file written here.
    """
    return lower_schedule(
        schedule, proto=proto, nchannels=nchannels, min_bytes=min_bytes, max_bytes=max_bytes, inplace=inplace,
        name=name, coll=coll, topology=topology, limits=limits, size_bytes=size_bytes,
    ).xml


@dataclass(frozen=True)
class Lowering:
    """What :func:`lower_schedule` wrote: the file, the fit it lays out, and the read-back time if simulated."""

    xml: str
    fit: Fit
    limits: MscclLimits
    proto: str
    back: Schedule | None = None  # the file read back, where it was read back (compared on a topology)
    time_us: float | None = None  # ``back`` simulated at the size it was laid out for

    @property
    def note(self) -> str | None:
        """One line on what was changed to fit the runtime (None: nothing)."""
        return self.fit.note(self.limits)


def lower_schedule(
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
    limits: MscclLimits | None = None,
    size_bytes: float | None = None,
) -> Lowering:
    """:func:`schedule_to_msccl_xml` with what it decided (see there for the arguments)."""
    if not schedule.collective.uniform:
        raise ScheduleError(f"{schedule.name!r} is of {schedule.collective.describe()}, whose chunks differ in size; "
                            "MSCCL XML has equal chunks only (keep resharding plans as ccsynth JSON)")
    info = _file_info(schedule)
    proto, min_bytes, max_bytes, coll_name, algo_name = _options(schedule, info, proto, min_bytes, max_bytes, coll, name)
    sched = _transform(schedule, nchannels, inplace, info)
    limits = limits if limits is not None else EXECUTOR_LIMITS
    if not isinstance(limits, MscclLimits):
        raise ScheduleError(f"limits must be MscclLimits, got {limits!r}")
    topo = _topology_for(schedule, topology)
    sizes = _sizes(min_bytes, max_bytes, size_bytes)
    timer = None
    if topo is not None:
        timer = functools.partial(start_times, topology=with_protocol(topo, proto), size_bytes=sizes[len(sizes) // 2])
    fits = fit_candidates(sched, limits, timer=timer)
    entries = [(fit, layout) for fit in fits for layout in fit.layouts]
    texts = [
        layout_xml(
            fit.schedule,
            layout,
            name=algo_name,
            proto=proto,
            coll=coll_name,
            inplace=inplace,
            min_bytes=min_bytes,
            max_bytes=UNBOUNDED if max_bytes is None else max_bytes,
        )
        for fit, layout in entries
    ]
    k, back, time_us = 0, None, None
    if topo is not None and (len(texts) > 1 or size_bytes is not None):
        k, back, time_us = _fastest(texts, topo, sizes)
    xml = texts[k]
    fitted = entries[k][0].schedule
    if fitted is not sched and not inplace:  # in place: the file is read back and verified below
        try:
            verify(fitted)
        except ScheduleError as e:
            raise ScheduleError(f"schedule {schedule.name!r} is no longer correct once fitted to the MSCCL limits: {e}") from None
    if inplace:
        _check_in_place(xml, schedule)
    return Lowering(xml, entries[k][0], limits, proto, back, time_us)


#: The fields of ``meta["msccl"]`` the exporter reads, and the types they must have (a schedule
#: file's meta is the user's: a wrong type is an error naming the field, not a crash).
_INFO_TYPES = {
    "proto": (str,),
    "coll": (str,),
    "name": (str,),
    "minBytes": (int,),
    "maxBytes": (int,),
    "input_shadow": (int,),
}


def _file_info(schedule: Schedule) -> dict:
    """What a schedule read from MSCCL XML remembers of its file (``meta["msccl"]``), type-checked."""
    info = schedule.meta.get("msccl")
    if not isinstance(info, dict):
        return {}
    for key, types in _INFO_TYPES.items():
        v = info.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, types) or (isinstance(v, int) and v < 0)):
            raise ScheduleError(f"schedule {schedule.name!r}: meta.msccl.{key} must be a "
                                f"{'non-negative integer' if types == (int,) else 'string'} or null, got {v!r:.40}")
    return info


# -------------------------------------------------------------- 1. options
def _options(schedule: Schedule, info: dict, proto, min_bytes, max_bytes, coll, name):
    """Checked ``(proto, min_bytes, max_bytes, coll, name)``; ``None`` takes the file's, else the default."""
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
        coll = info.get("coll") if COLL_READ.get(info.get("coll", "")) == kind else COLL_NAMES[kind]
    if COLL_READ.get(coll) != kind:
        raise ScheduleError(f"coll={coll!r} does not name a {kind}")
    algo_name = name if name is not None else (info.get("name") or schedule.name or "ccsynth")
    return proto, min_bytes, max_bytes, coll, algo_name


# ------------------------------------------------------- 2. IR transforms
def _transform(schedule: Schedule, nchannels: int | None, inplace: bool, info: dict) -> Schedule:
    """The schedule as the file will hold it: instances, short ranges, peers per channel, in place."""
    sched = schedule
    used = channels_used(sched)
    if nchannels is not None:
        if isinstance(nchannels, bool) or not isinstance(nchannels, int) or nchannels < 1:
            raise ScheduleError(f"nchannels must be a positive integer, got {nchannels!r}")
        if nchannels % used:
            raise ScheduleError(
                f"nchannels={nchannels} is not a multiple of the {used} channel(s) schedule {schedule.name!r} uses"
            )
        check_limit("nchannels", nchannels, "MAX_CHANNELS", ScheduleError)
        if nchannels > used:
            copies = nchannels // used
            check_limit(f"{len(sched.ops)} ops x {copies} instances (nchannels={nchannels}): operations",
                        len(sched.ops) * copies, "MAX_SCHEDULE_OPS", ScheduleError)
            sched = replicate_instances(sched, copies)
    # Ranges longer than MAX_COUNT become several steps: bound what that makes before making it.
    check_limit(f"schedule {schedule.name!r} in steps of at most {MAX_COUNT} chunks: operations",
                sum(-(-op.count // MAX_COUNT) for op in sched.ops), "MAX_SCHEDULE_OPS", ScheduleError)
    sched = split_long_ranges(sched, MAX_COUNT)
    sched = spread_channels(sched, MAX_PEERS_PER_CHANNEL)
    if inplace:
        # a schedule read from an in-place file keeps its input in scratch
        # (the reader's "input_shadow"): that scratch is the input again
        sched = alias_in_place(sched, input_copy=info.get("input_shadow"))
    return sched


# --------------------------------------------------------------- 3. layouts
def _topology_for(schedule: Schedule, topology):
    """The topology to compare layouts on: the one given, else the schedule's (if it loads)."""
    if topology is not None and not isinstance(topology, str):
        return topology
    spec = topology or schedule.topology
    if not spec:
        return None
    try:
        topo = get_topology(spec)
    except CCSynthError as e:
        if topology is not None:
            raise
        log.debug("not comparing MSCCL layouts: topology %r does not load: %s", spec, e)
        return None
    return topo if topo.n_ranks == schedule.n_ranks else None


def _sizes(min_bytes: int, max_bytes: int | None, size_bytes: float | None) -> list[float]:
    """The sizes to compare layouts at: ``size_bytes``, else 1 KiB, 1 MiB and 64 MiB where they
    fall in ``[min_bytes, max_bytes]``, else the middle of that range."""
    if size_bytes is not None:
        return [size_bytes]
    hi = max_bytes if max_bytes is not None else UNBOUNDED
    sizes: list[float] = [z for z in (1 << 10, 1 << 20, 1 << 26) if min_bytes <= z <= hi]
    return sizes or [max(1, int(math.sqrt(max(min_bytes, 1) * min(hi, 1 << 40))))]


def _fastest(texts: list[str], topology, sizes: list[float]) -> tuple[int, Schedule | None, float | None]:
    """The file whose schedule (as MSCCL runs it, read back) simulates fastest on ``topology``.

    Returns its index, its schedule read back and its time at ``sizes[0]``
    (index 0 and None where nothing can be compared). Over several sizes,
    times are compared as the sum over sizes of each one's time relative to
    the best.
    """
    times, backs = [], []
    for text in texts:
        try:
            sched = schedule_from_msccl_xml(text)  # beyond ccsynth's reading limits (ccsynth.limits): no comparison
            times.append([r.time_us for r in simulate_sizes(sched, topology, sizes)])
            backs.append(sched)
        except ScheduleError as e:  # e.g. a link the topology lacks: nothing to compare
            log.debug("not comparing MSCCL layouts: %s", e)
            return 0, None, None
    best = [min(t[j] for t in times) or 1.0 for j in range(len(sizes))]
    score = [sum(t[j] / best[j] for j in range(len(sizes))) for t in times]
    k = min(range(len(texts)), key=lambda i: (is_greater(score[i], min(score)), i))
    log.debug("MSCCL layouts (timed, fused, plain) score %s on %s at %s: chose %d", score, topology.name, sizes, k)
    return k, backs[k], times[k][0]


# ---------------------------------------------------------- 4. in place
def _check_in_place(xml: str, original: Schedule) -> None:
    """The in-place file, read back, implements the collective (else :class:`ScheduleError`)."""
    try:
        verify(schedule_from_msccl_xml(xml))
    except ScheduleError as e:
        raise ScheduleError(f"schedule {original.name!r} is not correct in place (input and output aliased): {e}") from None


# ------------------------------------------------------------------ plans
def plan_to_msccl_xmls(plan, *, proto: str | None = None, **kwargs) -> list[tuple[str, str]]:
    """One MSCCL XML per entry of a plan (per-size algorithm table).

    ``plan`` needs only ``entries``, each with ``kind``, ``n_ranks``,
    ``algorithm``, ``min_bytes``, ``max_bytes`` (None: no upper end) and
    ``schedule``. Returns ``(file name, xml)`` pairs. A plan row covers
    ``[min_bytes, max_bytes)``; MSCCL's ``maxBytes`` is inclusive, so it is
    written as ``max_bytes - 1`` (no upper end stays unbounded), and the
    runtime picks the file by size. ``proto``: None or ``"auto"`` chooses
    each row's protocol -- the fastest in the model at the row's
    representative size (:func:`row_size`) -- where a topology is known
    (the ``topology`` keyword, else the schedule's), else Simple; a
    protocol name writes every row with it. A row whose schedule does not
    fit the runtime is written as the same algorithm with fewer chunks
    where a topology is known and one fits
    (:func:`~.written.fit_or_coarser`; logged). ``kwargs`` go to
    :func:`schedule_to_msccl_xml`.
    """
    from ccsynth.formats.msccl.written import fit_or_coarser  # written.py builds on this module

    out = []
    for e in plan.entries:
        if e.schedule is None:  # the MPI library's own collective ("mpi" rows): no file, the runtime's own runs there
            continue
        mx = None if e.max_bytes is None else e.max_bytes - 1
        topo = _topology_for(e.schedule, kwargs.get("topology"))
        auto = proto in (None, "auto") and topo is not None

        def write(s, mn=e.min_bytes, mx=mx, auto=auto):
            if auto:
                return _fastest_protocol(s, mn, mx, kwargs).xml
            return schedule_to_msccl_xml(s, proto=proto, min_bytes=mn, max_bytes=mx, **kwargs)

        if topo is None:
            xml = write(e.schedule)
        else:  # a row that does not fit: the same algorithm with fewer chunks, where one fits
            xml, note = fit_or_coarser(e.schedule, topo, row_size(e.min_bytes, e.max_bytes), write)
            if note is not None:
                log.warning("plan row [%d, %s]: %s", e.min_bytes, e.max_bytes, note)
        hi = "inf" if e.max_bytes is None else str(e.max_bytes)
        fname = f"{e.kind}_{e.n_ranks}_{_safe(e.algorithm)}_{e.min_bytes}-{hi}.xml"
        out.append((fname, xml))
    return out


def row_size(min_bytes: int, max_bytes: int | None) -> float:
    """The size a plan row ``[min_bytes, max_bytes)`` is judged at: the geometric middle of the row
    (an open row: of ``[min_bytes, 16 * min_bytes]``; sizes below 1 byte count as 1)."""
    lo = max(min_bytes, 1)
    hi = max(max_bytes - 1, lo) if max_bytes is not None else 16 * lo
    return math.sqrt(lo * hi)


def _fastest_protocol(schedule: Schedule, min_bytes: int, max_bytes: int | None, kwargs: dict) -> Lowering:
    """The plan row's schedule written with each protocol at the row's size; the fastest in the model."""
    size = row_size(min_bytes, None if max_bytes is None else max_bytes + 1)
    best: Lowering | None = None
    for p in PROTOCOLS:
        low = lower_schedule(schedule, proto=p, min_bytes=min_bytes, max_bytes=max_bytes, size_bytes=size, **kwargs)
        if best is None or (low.time_us is not None and best.time_us is not None and is_greater(best.time_us, low.time_us)):
            best = low
    if best is None:  # not reached: PROTOCOLS is not empty
        raise ScheduleError(f"no MSCCL protocol to write {schedule.name!r} with")
    log.debug("plan row [%d, %s] of %r: %s (%s us at %d bytes)", min_bytes, max_bytes, schedule.name, best.proto,
              best.time_us, size)
    return best


def _safe(s: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in s) or "algo"
