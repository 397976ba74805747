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
* the protocol: ``proto="auto"`` writes the file with each of Simple,
  LL128 and LL and keeps the fastest in the model (a tie goes to the first
  of that order);
* ``notes``: one line for every fallback taken to fit the runtime (empty
  when the schedule fit as it is); the same lines are logged at INFO.

It refuses (:class:`~ccsynth.errors.ExportLimitError`, one message naming
the limit) only when no fitted form keeps the runtime's limits.

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

import logging
from dataclasses import dataclass

from ccsynth.collectives.schedule import Schedule
from ccsynth.collectives.verify import verify
from ccsynth.errors import ExportLimitError, ScheduleError
from ccsynth.formats.msccl.export import Lowering, lower_schedule
from ccsynth.formats.msccl.limits import EXECUTOR_LIMITS, MscclLimits
from ccsynth.formats.msccl.reader import schedule_from_msccl_xml
from ccsynth.synth.simulate import simulate
from ccsynth.tolerance import is_greater
from ccsynth.topologies import get_topology
from ccsynth.topologies.model import Topology
from ccsynth.topologies.protocols import PROTOCOL_PRICES

log = logging.getLogger(__name__)

__all__ = ["WrittenXml", "write_msccl", "AUTO"]

#: ``proto`` that writes every protocol and keeps the fastest.
AUTO = "auto"


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
) -> WrittenXml:
    """``schedule`` written as MSCCL XML for ``size_bytes`` on ``topology`` (see the module doc).

    ``proto``: ``"auto"`` (the fastest at ``size_bytes`` in the model),
    ``"Simple"``, ``"LL"`` or ``"LL128"``. The other keywords are those of
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
    protos = tuple(PROTOCOL_PRICES) if proto == AUTO else (proto,)
    best: tuple[Lowering, Schedule, float] | None = None
    for p in protos:
        low = lower_schedule(schedule, proto=p, nchannels=nchannels, min_bytes=min_bytes, max_bytes=max_bytes,
                             inplace=inplace, name=name, coll=coll, topology=topo, limits=limits,
                             size_bytes=size_bytes)
        back = low.back if low.back is not None else schedule_from_msccl_xml(low.xml)
        time_us = low.time_us if low.time_us is not None else simulate(back, topo, size_bytes).time_us
        log.debug("%r as MSCCL XML with %s at %d bytes on %s: %.3f us", schedule.name, p, size_bytes, topo.name, time_us)
        if best is None or is_greater(best[2], time_us):
            best = (low, back, time_us)
    if best is None:  # not reached: protos is never empty
        raise ExportLimitError(f"schedule {schedule.name!r}: no MSCCL protocol to write")
    low, back, time_us = best
    try:
        verify(back, topo)
    except ScheduleError as e:
        raise ScheduleError(f"schedule {schedule.name!r} written as MSCCL XML does not verify: {e}") from None
    notes = tuple(n for n in (low.note,) if n)
    for n in notes:
        log.info("%s: %s", schedule.name, n)
    return WrittenXml(low.xml, back, time_us, low.proto, notes, limits, size_bytes, topo.name)
