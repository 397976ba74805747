"""The written artifact is the candidate: judge synthesized schedules in the form they are written.

What a GPU user receives from ``ccsynth synth -o`` is a file, and the file is
not always the schedule the synthesizer simulated: an MSCCL XML runs each
threadblock's steps in order, within the runtime's limits (steps per
threadblock, threadblocks per channel, channels, XML elements per GPU), so
the exporter may spread streams over channels or merge transfers, and two
transfers the IR runs at once may run one after the other. So the
candidates of :func:`~ccsynth.synth.synthesize.synthesize_candidates` are
judged here, in the formats layer (the synthesis layer knows no file
format), as written:

1. *shortlist* -- only the few IR candidates that could win are priced
   (:meth:`~ccsynth.synth.synthesize.RankedCandidates.shortlist`: those
   within :data:`~ccsynth.synth.synthesize.SHORTLIST_WITHIN` of the best,
   and the best of every strategy);
2. *price* -- each is written (:func:`write_msccl_file`: the XML within the
   runtime's limits, read back, verified and simulated at the size; JSON
   holds the schedule itself, so its time is the IR's). A candidate whose
   export is refused loses, with the reason as a note; when every
   shortlisted one is refused the rest of the ranking is tried, in order,
   and only when nothing fits is the first refusal raised;
3. *choose* -- the fastest file wins (ties: the IR's ranking); the
   synthesizer verifies it and records the choice
   (:meth:`~ccsynth.synth.synthesize.RankedCandidates.choose`).

The time that ``ccsynth synth`` prints is :attr:`WrittenChoice.time_us`,
the simulated time of the file's own schedule, which is what ``ccsynth
simulate FILE -t T -s SIZE`` computes too. Every step says what it did
through the synthesizer's progress callback (stage ``priced`` per
candidate, ``written`` for the choice) and every fallback the export took
is one line of :attr:`WrittenChoice.notes`.

Example:
    >>> from ccsynth.collectives.spec import Collective
    >>> from ccsynth.synth.synthesize import synthesize_candidates
    >>> from ccsynth.topologies import get_topology
    >>> t = get_topology("ring:4")
    >>> ranked = synthesize_candidates(t, Collective("allgather", 4), size_bytes=1 << 16)
    >>> got = best_written(ranked, fmt="msccl-xml")
    >>> got.text.startswith("<algo"), got.ir_time_us > 0, got.verified
    (True, True, True)
    >>> got.proto, got.time_us < got.ir_time_us  # LL's latency beats the IR's Simple pricing at 64 KiB
    ('LL', True)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from ccsynth.collectives.schedule import Schedule
from ccsynth.errors import CCSynthError, ExportLimitError
from ccsynth.formats.msccl import EXECUTOR_LIMITS, MscclLimits, write_msccl
from ccsynth.formats.msccl.written import limit_clause
from ccsynth.synth.strategies.base import SynthCandidate
from ccsynth.synth.synthesize import RankedCandidates
from ccsynth.tolerance import is_less
from ccsynth.topologies.model import Topology

__all__ = ["FORMATS", "WrittenFile", "Priced", "WrittenChoice", "write_msccl_file", "written_json", "best_written",
           "written_judge"]

#: the file formats a schedule is written in
FORMATS = ("json", "msccl-xml")


@dataclass(frozen=True)
class WrittenFile:
    """One schedule as written: the file's text, its schedule (read back and verified), its simulated time.

    The fields follow ``WrittenXml`` of ``formats/msccl/written.py`` (``xml`` is :attr:`text` here), so that
    :func:`write_msccl_file` can become a call of ``write_msccl``; ``notes``: one line per fallback the export
    took (channels spread, transfers merged, ...).
    """

    text: str
    schedule: Schedule
    time_us: float
    proto: str | None = None
    notes: tuple[str, ...] = ()
    verified: bool = True


@dataclass(frozen=True)
class Priced:
    """A candidate priced as written: its file, or why the export refused it."""

    candidate: SynthCandidate
    written: WrittenFile | None
    refused: str | None = None

    @property
    def time_us(self) -> float:
        return self.written.time_us if self.written is not None else float("inf")

    def to_dict(self) -> dict:
        c = self.candidate
        return {"strategy": c.strategy, "candidate": c.label, "ir_time_us": c.time_us,
                "written_us": None if self.written is None else self.written.time_us, "refused": self.refused}


@dataclass(frozen=True)
class WrittenChoice:
    """What :func:`best_written` chose: the file to write and how it compares with the IR."""

    fmt: str
    candidate: SynthCandidate
    schedule: Schedule  # the chosen IR schedule, verified, its meta saying what was chosen
    written: WrittenFile
    priced: tuple[Priced, ...]
    notes: tuple[str, ...] = field(default=())

    @property
    def text(self) -> str:
        return self.written.text

    @property
    def time_us(self) -> float:
        """The written file's simulated time: what ``ccsynth synth`` prints."""
        return self.written.time_us

    @property
    def ir_time_us(self) -> float:
        return self.candidate.time_us

    @property
    def verified(self) -> bool:
        return bool(self.schedule.meta.get("verified")) and self.written.verified

    @property
    def proto(self) -> str | None:
        """The MSCCL protocol the file runs (None for ccsynth JSON)."""
        return self.written.proto


# ------------------------------------------------------------------ the adapter to the MSCCL lowering
def write_msccl_file(schedule: Schedule, *, topology: Topology, size_bytes: int,
                     limits: MscclLimits = EXECUTOR_LIMITS) -> WrittenFile:
    """``schedule`` as the MSCCL XML the runtime gets, read back, verified and simulated at ``size_bytes``
    (:func:`~ccsynth.formats.msccl.write_msccl`: the protocol chosen for the size, one note per fallback taken
    to fit ``limits``).

    Raises :class:`~ccsynth.errors.ExportLimitError` when nothing fits ``limits``.
    """
    w = write_msccl(schedule, topology=topology, size_bytes=size_bytes, limits=limits)
    return WrittenFile(w.xml, w.schedule, w.time_us, w.proto, tuple(w.notes), True)


def written_json(schedule: Schedule, time_us: float) -> WrittenFile:
    """``schedule`` as ccsynth JSON: the file holds the schedule itself, so its time is the schedule's."""
    return WrittenFile(schedule.to_json() + "\n", schedule, time_us)


# ------------------------------------------------------------------ judging
def best_written(ranked: RankedCandidates, *, fmt: str, limits: MscclLimits | None = None) -> WrittenChoice:
    """The candidate whose written form (``fmt``: ``json`` or ``msccl-xml``) simulates fastest; see the module doc.

    ``limits``: the MSCCL runtime the XML is for (default
    :data:`~ccsynth.formats.msccl.EXECUTOR_LIMITS`). Raises the first
    :class:`~ccsynth.errors.ExportLimitError` when no candidate fits.
    """
    if fmt not in FORMATS:
        raise CCSynthError(f"unknown output format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if fmt == "json":  # the file is the schedule: the IR's ranking is the written one
        best = ranked.best
        schedule = ranked.choose(best)
        written = written_json(schedule, best.time_us)
        return WrittenChoice(fmt, best, schedule, written, (Priced(best, written),))
    priced = _price_xml(ranked, limits if limits is not None else EXECUTOR_LIMITS)
    files = [(p, p.written) for p in priced if p.written is not None]  # _price_xml raises when there is none
    fastest = min(w.time_us for _, w in files)
    win, written = next((p, w) for p, w in files if not is_less(fastest, w.time_us))  # the IR's order among equals
    notes = list(written.notes)
    best = ranked.best
    reason = None
    if win.candidate is not best:
        reason = "is faster as written"
        lost = next(p for p in priced if p.candidate is best)
        why = (f"refused by the exporter ({limit_clause(lost.refused)})" if lost.refused
               else f"{lost.time_us:.3f} us as written")
        notes.insert(0, f"the fastest IR candidate, {best.label} ({best.time_us:.3f} us), is {why}; wrote "
                        f"{win.candidate.label} ({win.time_us:.3f} us as written)")
    schedule = ranked.choose(win.candidate, reason=reason)
    ranked.request.progress("written", f"{win.candidate.label}: {win.time_us:.3f} us as MSCCL XML "
                                       f"({win.candidate.time_us:.3f} us in the IR); {len(priced)} priced")
    return WrittenChoice(fmt, win.candidate, schedule, written, tuple(priced), tuple(notes))


def _price_xml(ranked: RankedCandidates, limits: MscclLimits) -> list[Priced]:
    """The shortlist priced as MSCCL XML; down the rest of the ranking while every one is refused."""
    req = ranked.request
    shortlist = ranked.shortlist()
    rest = [c for c in ranked.candidates if all(c is not s for s in shortlist)]
    priced: list[Priced] = []
    first_refusal: ExportLimitError | None = None
    for cand in list(shortlist) + rest:
        if cand not in shortlist and any(p.written is not None for p in priced):
            break
        try:
            w = write_msccl_file(cand.schedule, topology=req.topology, size_bytes=req.size_bytes, limits=limits)
        except ExportLimitError as e:
            first_refusal = first_refusal or e
            priced.append(Priced(cand, None, str(e)))
            req.progress("priced", f"{cand.label}: {cand.time_us:.3f} us in the IR; MSCCL XML refused: {e}")
            continue
        priced.append(Priced(cand, w))
        req.progress("priced", f"{cand.label}: {cand.time_us:.3f} us in the IR, {w.time_us:.3f} us as MSCCL XML"
                     + "".join(f"; {n}" for n in w.notes))
    if first_refusal is not None and not any(p.written is not None for p in priced):
        raise first_refusal
    return priced


def written_judge(fmt: str, limits: MscclLimits | None = None,
                  notes: dict[int, tuple[str, ...]] | None = None) -> Callable[[RankedCandidates], Schedule]:
    """A ``judge`` for :func:`~ccsynth.synth.sized_plan.synthesize_sized`: each size's candidates judged as
    written (:func:`best_written`); the plan keeps the schedule as the file holds it (for MSCCL XML: read
    back), with its written and IR times in ``meta``. ``notes`` (if given) collects each size's fallbacks."""

    def judge(ranked: RankedCandidates) -> Schedule:
        choice = best_written(ranked, fmt=fmt, limits=limits)
        size = ranked.request.size_bytes
        if notes is not None:
            notes[size] = choice.notes
        return choice.written.schedule.with_meta(predicted_us=choice.time_us, ir_time_us=choice.ir_time_us,
                                                 size_bytes=size)

    return judge
