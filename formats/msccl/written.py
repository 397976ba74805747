"""The MSCCL XML a schedule is written as, judged the way it will run: one call per candidate.

A GPU user receives the file, not the IR schedule, so a synthesizer that
compares candidates should compare their files. :func:`write_msccl` writes
one candidate for one message size and returns a :class:`WrittenXml`:

* the XML (:func:`~.export.lower_schedule`: threadblocks in the order the
  schedule runs, fitted to the runtime's limits -- merging consecutive
  transfers, spreading long streams over channels, pairing streams into
  threadblocks -- where it does not fit as it is);
* the file read back (:func:`~.reader.schedule_from_msccl_xml`) and
  verified: what the runtime will run;
* its simulated time at the size, priced with the file's protocol
  (:mod:`ccsynth.topologies.protocols`), exactly what
  ``ccsynth simulate FILE`` reports for it;
* the protocol: ``proto="auto"`` lays the file out once, prices that one
  program with each of Simple, LL128 and LL and writes the fastest in the
  model (a tie goes to the first of that order; a small schedule is laid
  out again in the winner's order where that is faster);
* ``notes``: one line for every fallback taken to fit the runtime (empty
  when the schedule fit as it is); the same lines are logged at INFO.

When no fitted form of the schedule keeps the runtime's limits (a
multi-dimension pipeline of many interleaved chunks: nothing merges, and
its ``nop`` steps exceed the XML elements a GPU may have), the same
algorithm is made again with fewer chunks
(:func:`~ccsynth.synth.coarser.coarser_forms`, from the schedule's
``meta``: a baseline or a multi-dimension schedule) and the fastest as
written of the forms that fit is kept (from the finest that fits, on while
coarser ones run faster), with one note saying so. It refuses
(:class:`~ccsynth.errors.ExportLimitError`, one message naming the limit)
only when nothing fits.

Example:
    >>> from ccsynth.synth.baselines import make_baseline
    >>> from ccsynth.collectives.spec import Collective
    >>> from ccsynth.topologies import get_topology
    >>> t = get_topology("ring:4")
    >>> s = make_baseline("ring", Collective("allgather", 4), t)
    >>> w = write_msccl(s, topology=t, size_bytes=1 << 10)
    >>> w.proto, w.notes, w.time_us < write_msccl(s, topology=t, size_bytes=1 << 10, proto="Simple").time_us
    ('LL', (), True)
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from ccsynth.collectives.schedule import Schedule
from ccsynth.collectives.verify import verify
from ccsynth.errors import ExportLimitError, ScheduleError
from ccsynth.formats.msccl.export import lower_schedule
from ccsynth.formats.msccl.limits import EXECUTOR_LIMITS, MscclLimits
from ccsynth.formats.msccl.reader import schedule_from_msccl_xml
from ccsynth.synth.coarser import coarser_forms
from ccsynth.synth.simulate import simulate
from ccsynth.tolerance import is_greater
from ccsynth.topologies import get_topology
from ccsynth.topologies.model import Topology
from ccsynth.topologies.protocols import PROTOCOL_PRICES

log = logging.getLogger(__name__)

__all__ = ["WrittenXml", "write_msccl", "fit_or_coarser", "limit_clause", "AUTO"]

T = TypeVar("T")

#: ``proto`` that writes every protocol and keeps the fastest.
AUTO = "auto"
#: ``proto="auto"``: schedules of at most this many ops are laid out again in the order of the protocol
#: that priced fastest on the Simple layout (large ones keep the one layout: write once).
RELAYOUT_MAX_OPS = 4096


@dataclass(frozen=True)
class WrittenXml:
    """One schedule as MSCCL XML, read back, verified and simulated at ``size_bytes``."""

    xml: str
    schedule: Schedule  # the file read back (verified): what the runtime runs
    time_us: float  # ``schedule`` simulated at ``size_bytes`` with ``proto``'s pricing
    proto: str
    notes: tuple[str, ...]  # one line per fallback taken to fit ``limits``; () if it fit as it was
    limits: MscclLimits
    size_bytes: float
    topology: str  # the topology's name


def write_msccl(
    schedule: Schedule,
    *,
    topology: Topology | str,
    size_bytes: float,
    limits: MscclLimits = EXECUTOR_LIMITS,
    proto: str = AUTO,
    min_bytes: int | None = None,
    max_bytes: int | None = None,
    nchannels: int | None = None,
    inplace: bool = False,
    name: str | None = None,
    coll: str | None = None,
    coarsen: bool = True,
) -> WrittenXml:
    """``schedule`` written as MSCCL XML for ``size_bytes`` on ``topology`` (see the module doc).

    ``proto``: ``"auto"`` (the fastest at ``size_bytes`` in the model),
    ``"Simple"``, ``"LL"`` or ``"LL128"``. ``coarsen``: where nothing fits,
    write the same algorithm with fewer chunks (module doc); False refuses
    at once. The other keywords are those of
    :func:`~.export.schedule_to_msccl_xml`. Raises
    :class:`~ccsynth.errors.ExportLimitError` when nothing fits ``limits``,
    :class:`~ccsynth.errors.ScheduleError` for a schedule that cannot be
    written (or whose file does not verify).
    """
    topo = topology if isinstance(topology, Topology) else get_topology(topology)
    if topo.n_ranks != schedule.n_ranks:
        raise ScheduleError(f"schedule {schedule.name!r} has {schedule.n_ranks} ranks; topology {topo.name} "
                            f"has {topo.n_ranks}")
    if proto != AUTO and proto not in PROTOCOL_PRICES:
        raise ScheduleError(f"unknown MSCCL protocol {proto!r}; choose auto or one of {', '.join(PROTOCOL_PRICES)}")
    opts = dict(nchannels=nchannels, min_bytes=min_bytes, max_bytes=max_bytes, inplace=inplace, name=name, coll=coll,
                limits=limits)
    w, note = fit_or_coarser(schedule, topo, size_bytes, lambda s: _write_one(s, topo, size_bytes, proto, opts),
                             coarsen=coarsen, time_of=lambda w: w.time_us)
    if note is None:
        return w
    note += f", {w.time_us:.3f} us"
    return dataclasses.replace(w, notes=(note, *w.notes))


def fit_or_coarser(schedule: Schedule, topology: Topology, size_bytes: float, write: Callable[[Schedule], T], *,
                   coarsen: bool = True, time_of: Callable[[T], float | None] | None = None) -> tuple[T, str | None]:
    """``write(schedule)``; where it raises :class:`~ccsynth.errors.ExportLimitError`, ``write`` of a coarser
    form that fits (:func:`~ccsynth.synth.coarser.coarser_forms`) and one line saying so.

    Without ``time_of`` the finest form that fits is written. With it (the
    written time of what ``write`` returned, None if unknown), the forms
    are tried on from the first that fits while each is faster than the
    one before (a fitted fine form may run slower than a coarser one: its
    streams spread over many channels). Returns ``(what write returned,
    None)`` or ``(..., the line)``; re-raises the first refusal (naming the
    limit) when no form fits or ``coarsen`` is False.
    """
    try:
        return write(schedule), None
    except ExportLimitError as refused:
        if not coarsen:
            raise
        best: tuple[T, str, float | None] | None = None
        for label, coarse in coarser_forms(schedule, topology, size_bytes):
            try:
                got = write(coarse)
            except ExportLimitError as e:
                log.info("%s of %r does not fit either: %s", label, schedule.name, e)
                continue
            t = time_of(got) if time_of is not None else None
            if best is not None and (t is None or best[2] is None or not is_greater(best[2], t)):
                break
            best = (got, label, t)
            if t is None:
                break
        if best is None:
            raise
        note = (f"{schedule.name!r} does not fit the MSCCL runtime ({limit_clause(refused)}); wrote the same "
                f"algorithm with fewer chunks: {best[1]}")
        log.info("%s", note)
        return best[0], note


def limit_clause(e: ExportLimitError | str) -> str:
    """The clause of a refusal that names the limit (``gpu 0 needs 10213 XML elements, at most 4095 allowed``)."""
    text = str(e)
    clause = text.split(": ", 1)[-1]
    return clause.split(" (", 1)[0].rstrip(".")


def _write_one(schedule: Schedule, topo: Topology, size_bytes: float, proto: str, opts: dict) -> WrittenXml:
    """:func:`write_msccl` of one schedule, without coarser fallbacks.

    ``proto="auto"`` lays the file out once (in the order it runs with
    Simple's pricing), prices that one program with every protocol and
    writes the fastest: the protocol is one attribute of the file, so the
    other files differ from it only there. A small schedule whose best
    protocol is not Simple is laid out again in that protocol's order, and
    the faster of the two is kept.
    """
    base = "Simple" if proto == AUTO else proto
    low = lower_schedule(schedule, proto=base, topology=topo, size_bytes=size_bytes, **opts)
    back = low.back if low.back is not None else schedule_from_msccl_xml(low.xml)
    time_us = low.time_us if low.time_us is not None else simulate(back, topo, size_bytes).time_us
    xml, p_best = low.xml, base
    if proto == AUTO:
        for p in PROTOCOL_PRICES:
            if p == base:
                continue
            t = simulate(back.with_meta(msccl={**back.meta.get("msccl", {}), "proto": p}), topo, size_bytes).time_us
            log.debug("%r as MSCCL XML with %s at %d bytes on %s: %.3f us", schedule.name, p, size_bytes, topo.name, t)
            if is_greater(time_us, t):
                time_us, p_best = t, p
        if p_best != base:
            xml = _with_proto(low.xml, p_best)
            back = schedule_from_msccl_xml(xml)
            time_us = simulate(back, topo, size_bytes).time_us
            if len(schedule.ops) <= RELAYOUT_MAX_OPS:
                again = lower_schedule(schedule, proto=p_best, topology=topo, size_bytes=size_bytes, **opts)
                if again.time_us is not None and again.back is not None and is_greater(time_us, again.time_us):
                    low, xml, back, time_us = again, again.xml, again.back, again.time_us
    try:
        verify(back, topo)
    except ScheduleError as e:
        raise ScheduleError(f"schedule {schedule.name!r} written as MSCCL XML does not verify: {e}") from None
    notes = tuple(n for n in (low.note,) if n)
    for n in notes:
        log.info("%s: %s", schedule.name, n)
    return WrittenXml(xml, back, time_us, p_best, notes, low.limits, size_bytes, topo.name)


def _with_proto(xml: str, proto: str) -> str:
    """The file with ``proto`` on its ``<algo>`` element (the only place the protocol is written)."""
    head_end = xml.index(">")
    head, n = re.subn(r'\bproto="[^"]*"', f'proto="{proto}"', xml[:head_end], count=1)
    if n != 1:  # not reached: layout_xml always writes the protocol on <algo>
        raise ScheduleError("MSCCL XML without a proto attribute on <algo>")
    return head + xml[head_end:]
