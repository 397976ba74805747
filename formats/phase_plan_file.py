"""The phase plan file (``format: ccsynth.phase_plan``): a multi-dimension schedule at any chunk and rank count.

A multi-dimension schedule (:mod:`ccsynth.synth.multidim`) is a few
numbers per chunk -- its share of the buffer, its reduce-scatter order of
the network's dimensions, the per-dimension algorithm of each phase -- and
the order its phases run in; its size does not grow with the ranks. This
file kind writes exactly that, the :class:`~ccsynth.collectives.phase_plan.PhasePlan`
the MPI runtime executes, where the Schedule IR would name every rank's
every message (millions of ops for 93 chunks on 128 ranks, impossible
beyond :data:`~ccsynth.synth.multidim.lowering.MAX_IR_RANKS`)::

    {"format": "ccsynth.phase_plan", "version": 1,
     "collective": "allreduce", "topology": "hierarchical:4x8x4@200,100,50",
     "n_ranks": 128, "sizes": [4, 8, 4], "dims": [0, 1, 2],
     "scheduler": "lp", "size_bytes": 1073741824, "total_units": 93,
     "chunks": [{"units": 1, "order": [2, 0, 1], "algorithms": ["direct", "ring", "direct"]}, ...],
     "tasks": [[0, 0], [1, 0], [0, 1], ...],
     "predicted_us": 6099.15, "priced_by": "dimension-level model", "meta": {...}}

* ``sizes``: every dimension's size (ranks take mixed-radix coordinates in
  rank order, dimension 0 fastest); ``dims``: the active ones (size 2 or
  more); chunk orders name them by position in ``dims``;
* ``chunks``: chunk ``k`` is ``units`` of the ``total_units`` equal units
  of the buffer;
* ``tasks``: ``[chunk, phase]`` pairs in schedule order (a chunk's phases:
  reduce-scatter in its order, then for allreduce allgather in the reverse);
* ``predicted_us`` at ``size_bytes`` and ``priced_by`` say what ``ccsynth
  synth`` printed and how; ``meta`` is free-form (the scheduler's origin,
  its LP bound).

The phase schedules a plan carries for the runtime (ring or direct on each
dimension's ``p`` ranks) are not written: the reader rebuilds them from the
algorithm names (:func:`~ccsynth.synth.multidim.phases.phase_schedules`),
and :func:`~ccsynth.collectives.verify_phase_plan.verify_phase_plan` proves
them with the rest. :func:`ccsynth.formats.files.load_phase_plan` reads and
verifies a file; ``ccsynth verify``, ``simulate`` and ``export`` take one.

Example:
    >>> from ccsynth.topologies.catalog import hierarchical
    >>> from ccsynth.synth.multidim.search import schedule_multidim
    >>> md = schedule_multidim(hierarchical([(2, 100), (4, 50)]), "allreduce", 1 << 20, "themis", chunks=2)
    >>> f = phase_plan_file(md, md.makespan_us)
    >>> g = phase_plan_file_from_dict(f.to_dict())
    >>> g.plan.signature() == f.plan.signature(), g.n_ranks, len(g.plan.tasks)
    (True, 8, 8)
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field, replace
from typing import Any

from ccsynth.atomic import write_text
from ccsynth.collectives.phase_plan import PHASE_KINDS, ChunkPhases, PhasePlan, PhaseTask
from ccsynth.errors import ScheduleFormatError
from ccsynth.limits import check as check_limit
from ccsynth.reading import check_depth, parse_json
from ccsynth.synth.multidim.phases import phase_schedules, to_phase_plan
from ccsynth.synth.multidim.plan_price import PRICED_BY
from ccsynth.synth.multidim.search import MultiDimSchedule

__all__ = ["FORMAT", "VERSION", "PhasePlanFile", "phase_plan_file", "phase_plan_file_from_dict",
           "is_phase_plan_text", "read_phase_plan_text", "save_phase_plan_file"]

FORMAT = "ccsynth.phase_plan"
VERSION = 1


@dataclass(frozen=True)
class PhasePlanFile:
    """A phase plan with what its file declares: topology, ranks, units, the size and time it was made for."""

    plan: PhasePlan
    topology: str
    n_ranks: int
    total_units: int
    size_bytes: int
    predicted_us: float | None = None
    priced_by: str = PRICED_BY
    meta: dict = field(default_factory=dict, compare=False, hash=False)
    #: the topology file the plan was made for where its name does not rebuild it (as a schedule's)
    topology_inline: dict | None = field(default=None, compare=False, hash=False)

    def to_dict(self) -> dict:
        p = self.plan
        return {
            "format": FORMAT,
            "version": VERSION,
            "collective": p.kind,
            "topology": self.topology,
            **({"topology_inline": self.topology_inline} if self.topology_inline is not None else {}),
            "n_ranks": self.n_ranks,
            "sizes": list(p.sizes),
            "dims": list(p.dims),
            "scheduler": p.scheduler,
            "size_bytes": self.size_bytes,
            "total_units": self.total_units,
            "chunks": [{"units": c.units, "order": list(c.order), "algorithms": list(c.algorithms)} for c in p.chunks],
            "tasks": [[t.chunk, t.step] for t in p.tasks],
            "predicted_us": self.predicted_us,
            "priced_by": self.priced_by,
            "meta": self.meta,
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"))

    def with_price(self, predicted_us: float) -> PhasePlanFile:
        return replace(self, predicted_us=predicted_us)


def phase_plan_file(md: MultiDimSchedule, predicted_us: float | None = None, **meta: Any) -> PhasePlanFile:
    """The file of schedule ``md`` (``predicted_us``: its price at ``md.size_bytes``; ``meta`` kept as given)."""
    plan = to_phase_plan(md)
    info = {"origin": md.origin, "lp_bound_us": md.lp_bound_us, **meta}
    plan = replace(plan, meta={**plan.meta, **info})
    return PhasePlanFile(plan, md.net.topology, md.net.n_ranks, plan.total_units, int(md.size_bytes), predicted_us,
                         meta=info)


def is_phase_plan_text(text: str) -> bool:
    """Whether file text is a phase plan (a JSON object whose ``format`` is :data:`FORMAT`), parsing only
    texts that name the format."""
    if f'"{FORMAT}"' not in text:
        return False
    try:
        d = json.loads(text)
    except ValueError:
        return False
    return isinstance(d, dict) and d.get("format") == FORMAT


def save_phase_plan_file(pf: PhasePlanFile, path: str | os.PathLike) -> None:
    """Write ``pf`` as JSON, atomically (see :mod:`ccsynth.atomic`)."""
    write_text(path, pf.to_json() + "\n", what="phase plan")


# ------------------------------------------------------------------ reading (typed field by field)
def _field(d: dict, key: str, kind: type | tuple[type, ...], where: str) -> Any:
    if key not in d:
        raise ScheduleFormatError(f"{where}: phase plan has no {key!r}")
    v = d[key]
    if isinstance(v, bool) or not isinstance(v, kind):
        names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
        raise ScheduleFormatError(f"{where}: phase plan {key!r} must be {names}, got {v!r:.60}")
    return v


def _ints(v: Any, what: str, where: str) -> tuple[int, ...]:
    if not isinstance(v, list) or any(isinstance(x, bool) or not isinstance(x, int) for x in v):
        raise ScheduleFormatError(f"{where}: phase plan {what} must be a list of integers, got {v!r:.60}")
    return tuple(v)


def _chunk(c: Any, k: int, where: str) -> ChunkPhases:
    if not isinstance(c, dict):
        raise ScheduleFormatError(f"{where}: phase plan chunk {k} must be an object, got {c!r:.60}")
    units = _field(c, "units", int, f"{where}: chunk {k}")
    order = _ints(c.get("order"), f"chunk {k} 'order'", where)
    algs = c.get("algorithms")
    if not isinstance(algs, list) or not all(isinstance(a, str) for a in algs):
        raise ScheduleFormatError(f"{where}: phase plan chunk {k} 'algorithms' must be a list of names, got {algs!r:.60}")
    return ChunkPhases(order, tuple(algs), units)


def _task(t: Any, i: int, where: str) -> PhaseTask:
    if (not isinstance(t, list) or len(t) != 2 or any(isinstance(x, bool) or not isinstance(x, int) for x in t)):
        raise ScheduleFormatError(f"{where}: phase plan task {i} must be [chunk, phase], got {t!r:.60}")
    return PhaseTask(t[0], t[1])


def phase_plan_file_from_dict(d: Any, source: str = "<dict>") -> PhasePlanFile:
    """Parse a phase plan file's JSON object (not yet verified: :func:`ccsynth.formats.files.load_phase_plan`
    verifies); :class:`~ccsynth.errors.ScheduleFormatError` names a missing or mistyped field."""
    if not isinstance(d, dict) or d.get("format") != FORMAT:
        raise ScheduleFormatError(f"{source}: not a ccsynth phase plan (format must be {FORMAT!r})")
    version = d.get("version")
    if version != VERSION or isinstance(version, bool):
        raise ScheduleFormatError(f"{source}: phase plan version {version!r} is not supported (this ccsynth reads "
                                  f"version {VERSION})")
    kind = _field(d, "collective", str, source)
    if kind not in PHASE_KINDS:
        raise ScheduleFormatError(f"{source}: a phase plan runs {', '.join(PHASE_KINDS)}; got {kind!r}")
    sizes = _ints(d.get("sizes"), "'sizes'", source)
    dims = _ints(d.get("dims"), "'dims'", source)
    chunks_in = _field(d, "chunks", list, source)
    tasks_in = _field(d, "tasks", list, source)
    check_limit(f"{source}: phase plan tasks", len(tasks_in), "MAX_SCHEDULE_OPS", ScheduleFormatError)
    chunks = tuple(_chunk(c, k, source) for k, c in enumerate(chunks_in))
    tasks = tuple(_task(t, i, source) for i, t in enumerate(tasks_in))
    meta = d.get("meta") or {}
    if not isinstance(meta, dict):
        raise ScheduleFormatError(f"{source}: phase plan 'meta' must be an object, got {meta!r:.40}")
    check_depth(meta, "phase plan meta", ScheduleFormatError)
    inline = d.get("topology_inline")
    if inline is not None:
        if not isinstance(inline, dict):
            raise ScheduleFormatError(f"{source}: phase plan 'topology_inline' must be a topology object, got "
                                      f"{inline!r:.40}")
        check_depth(inline, "phase plan topology_inline", ScheduleFormatError)
    scheduler = d.get("scheduler") or ""
    if not isinstance(scheduler, str):
        raise ScheduleFormatError(f"{source}: phase plan 'scheduler' must be a name, got {scheduler!r:.40}")
    predicted = d.get("predicted_us")
    if predicted is not None and (isinstance(predicted, bool) or not isinstance(predicted, (int, float))
                                  or not math.isfinite(predicted)):
        raise ScheduleFormatError(f"{source}: phase plan 'predicted_us' must be a number, got {predicted!r:.40}")
    size = _field(d, "size_bytes", int, source)
    if size < 1:
        raise ScheduleFormatError(f"{source}: phase plan 'size_bytes' must be positive, got {size}")
    check_limit(f"{source}: phase plan ranks (the product of its sizes)", math.prod(max(x, 1) for x in sizes),
                "MAX_RANKS", ScheduleFormatError)
    check_limit(f"{source}: phase plan chunks", len(chunks), "MAX_BUFFER_CHUNKS", ScheduleFormatError)
    active = [sizes[i] if 0 <= i < len(sizes) else 0 for i in dims]
    plan = PhasePlan(kind, sizes, dims, chunks, tasks, phase_schedules(kind, chunks, active), scheduler,
                     {**meta, "size_bytes": size, "topology": d.get("topology")})
    return PhasePlanFile(plan, str(_field(d, "topology", str, source)), _field(d, "n_ranks", int, source),
                         _field(d, "total_units", int, source), size, predicted,
                         str(d.get("priced_by") or PRICED_BY), dict(meta), inline)


def read_phase_plan_text(text: str, source: str) -> PhasePlanFile:
    """Parse the text of a phase plan file (not yet verified)."""
    return phase_plan_file_from_dict(parse_json(text, repr(source), ScheduleFormatError), source)
