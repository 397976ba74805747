"""Per-size algorithm tables ("plans"): which schedule to run for which size.

A :class:`Plan` is a list of :class:`PlanEntry` rows. Each row covers one
collective kind on one rank count over a half-open byte range
``[min_bytes, max_bytes)`` (``max_bytes=None`` means no upper end) and carries
a complete, verified :class:`~ccsynth.collectives.schedule.Schedule` -- or names the MPI library's own
collective (algorithm :data:`MPI_ALGORITHM`, ``"mpi"``, and no schedule): MPI's collective is an
algorithm like any other, chosen where it is the fastest (the default plan at small sizes, a
synthesized plan priced on a profile's reference runs of MPI, ``ccsynth tune`` measuring it). Sizes
are nccl-tests message sizes (the larger per-rank buffer, see
:class:`~ccsynth.collectives.spec.Collective`).

The drop-in communicator asks ``plan.select(kind, n_ranks, nbytes)`` on every
call and falls back to the MPI library's own collective when it gets None.
A plan is data that the runtime consumes, so it lives here beside the
schedule IR; the synthesizer produces plans (:mod:`ccsynth.synth.tables`
picks the fastest schedule per size range, :mod:`ccsynth.synth.default_plan`
is the built-in table of baselines) and the communicator only reads them.

JSON (``format: ccsynth.plan``, ``version: 1``)::

    {"format": "ccsynth.plan", "version": 1, "topology": "ndv2x2",
     "entries": [{"kind": "allreduce", "n_ranks": 16, "min_bytes": 0,
                  "max_bytes": 65536, "algorithm": "ring",
                  "predicted_us": 12.5, "schedule": {...}},
                 {"kind": "allreduce", "n_ranks": 16, "min_bytes": 65536,
                  "max_bytes": null, "algorithm": "mpi"}]}

Example:
    >>> from ccsynth.collectives.spec import Collective
    >>> from ccsynth.collectives.builder import ScheduleBuilder
    >>> b = ScheduleBuilder(Collective("allgather", 2), "pairwise")
    >>> for r in range(2):
    ...     _ = b.copy(r, ("i", 0), ("o", r))
    >>> _ = b.transfer(0, 1, ("i", 0), ("o", 0)); _ = b.transfer(1, 0, ("i", 0), ("o", 1))
    >>> plan = Plan((PlanEntry("allgather", 2, 0, None, b.build()),))
    >>> plan.select("allgather", 2, 4096).name
    'pairwise'
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from typing import Any

from ccsynth.atomic import write_text
from ccsynth.collectives.schedule import Schedule, check_writes_cover_outputs
from ccsynth.collectives.spec import canonical_kind
from ccsynth.collectives.verify import verify as verify_schedule  # load_plan has a keyword named verify
from ccsynth.errors import CCSynthError, PlanError
from ccsynth.reading import check_depth, parse_json, read_text

__all__ = ["FORMAT", "VERSION", "MPI_ALGORITHM", "PlanEntry", "Plan", "save_plan", "load_plan", "plan_from_file_dict"]

FORMAT = "ccsynth.plan"
VERSION = 1
#: the algorithm of a plan entry that runs the MPI library's own collective (it has no schedule)
MPI_ALGORITHM = "mpi"


@dataclass(frozen=True)
class PlanEntry:
    """One row: use ``schedule`` for ``kind`` on ``n_ranks`` when min_bytes <= size < max_bytes.

    ``schedule=None`` with algorithm :data:`MPI_ALGORITHM`: the MPI library's own collective runs there.
    """

    kind: str
    n_ranks: int
    min_bytes: int
    max_bytes: int | None
    schedule: Schedule | None
    algorithm: str = ""
    predicted_us: float | None = None

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "kind", canonical_kind(self.kind))
        except CCSynthError as e:
            raise PlanError(str(e)) from None
        if self.min_bytes < 0 or (self.max_bytes is not None and self.max_bytes <= self.min_bytes):
            raise PlanError(f"plan entry for {self.kind} has an empty byte range [{self.min_bytes}, {self.max_bytes})")
        if self.schedule is None or self.algorithm == MPI_ALGORITHM:
            if self.schedule is not None or self.algorithm not in ("", MPI_ALGORITHM):
                raise PlanError(f"plan entry for {self.kind} on {self.n_ranks} ranks: algorithm "
                                f"{self.algorithm or MPI_ALGORITHM!r} needs {'no' if self.schedule else 'a'} schedule "
                                f"(only {MPI_ALGORITHM!r}, the MPI library's own collective, has none)")
            object.__setattr__(self, "algorithm", MPI_ALGORITHM)
            return
        c = self.schedule.collective
        if c.kind != self.kind or c.n_ranks != self.n_ranks:
            raise PlanError(
                f"plan entry says {self.kind} on {self.n_ranks} ranks but its schedule {self.schedule.name!r} is "
                f"{c.kind} on {c.n_ranks} ranks"
            )
        if not self.algorithm:
            object.__setattr__(self, "algorithm", self.schedule.name)

    @property
    def is_mpi(self) -> bool:
        """Whether this row runs the MPI library's own collective."""
        return self.schedule is None

    def covers(self, nbytes: int) -> bool:
        return self.min_bytes <= nbytes and (self.max_bytes is None or nbytes < self.max_bytes)

    def to_dict(self) -> dict:
        d: dict[str, Any] = {
            "kind": self.kind,
            "n_ranks": self.n_ranks,
            "min_bytes": self.min_bytes,
            "max_bytes": self.max_bytes,
            "algorithm": self.algorithm,
        }
        if self.predicted_us is not None:
            d["predicted_us"] = self.predicted_us
        if self.schedule is not None:
            d["schedule"] = self.schedule.to_dict()
        return d

    @classmethod
    def from_dict(cls, d: Any, where: str = "entry") -> PlanEntry:
        if not isinstance(d, dict):
            raise PlanError(f"plan {where} must be an object")
        try:
            mx = d["max_bytes"]
            if not isinstance(d["kind"], str):
                raise PlanError(f"plan {where}: kind must be a string, got {d['kind']!r}")
            algorithm = d.get("algorithm", "")
            if not isinstance(algorithm, str):
                raise PlanError(f"plan {where}: algorithm must be a string, got {algorithm!r}")
            predicted = d.get("predicted_us")
            if predicted is not None and (isinstance(predicted, bool) or not isinstance(predicted, (int, float))
                                          or not math.isfinite(predicted) or predicted < 0):
                raise PlanError(f"plan {where}: predicted_us must be a non-negative number or null, got {predicted!r}")
            return cls(
                kind=d["kind"],
                n_ranks=_int(d["n_ranks"], f"plan {where}: n_ranks"),
                min_bytes=_int(d["min_bytes"], f"plan {where}: min_bytes"),
                max_bytes=None if mx is None else _int(mx, f"plan {where}: max_bytes"),
                schedule=None if algorithm == MPI_ALGORITHM else Schedule.from_dict(d["schedule"]),
                algorithm=algorithm,
                predicted_us=predicted,
            )
        except KeyError as e:
            raise PlanError(f"plan {where} is missing field {e.args[0]!r}") from None
        except (TypeError, ValueError) as e:
            if isinstance(e, CCSynthError):
                raise PlanError(f"plan {where}: {e}") from None
            raise PlanError(f"plan {where} has a bad field: {e}") from None


def _int(v: Any, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise PlanError(f"{what} must be an integer, got {v!r}")
    return v


@dataclass(frozen=True)
class Plan:
    """A per-size algorithm table; entries of one (kind, n_ranks) never overlap."""

    entries: tuple[PlanEntry, ...]
    topology: str = ""
    meta: dict = field(default_factory=dict, compare=False, hash=False)
    #: the topology file the plan was made for where its name does not rebuild it (as a schedule's); the entries'
    #: schedules record the name only
    topology_inline: dict | None = field(default=None, compare=False, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "entries", tuple(sorted(self.entries, key=lambda e: (e.kind, e.n_ranks, e.min_bytes))))
        prev: PlanEntry | None = None
        for e in self.entries:
            if prev is not None and (prev.kind, prev.n_ranks) == (e.kind, e.n_ranks):
                if prev.max_bytes is None or prev.max_bytes > e.min_bytes:
                    raise PlanError(
                        f"plan entries for {e.kind} on {e.n_ranks} ranks overlap: "
                        f"[{prev.min_bytes}, {prev.max_bytes}) and [{e.min_bytes}, {e.max_bytes})"
                    )
            prev = e

    def select(self, kind: str, n_ranks: int, nbytes: int) -> Schedule | None:
        """The schedule for this call, or None if no entry covers it or the entry is MPI's (``entry_for`` tells)."""
        entry = self.entry_for(kind, n_ranks, nbytes)
        return entry.schedule if entry is not None else None

    def entry_for(self, kind: str, n_ranks: int, nbytes: int) -> PlanEntry | None:
        kind = canonical_kind(kind)
        for e in self.entries:
            if e.kind == kind and e.n_ranks == n_ranks and e.covers(nbytes):
                return e
        return None

    def kinds(self) -> list[tuple[str, int]]:
        return sorted({(e.kind, e.n_ranks) for e in self.entries})

    def to_dict(self) -> dict:
        return {
            "format": FORMAT,
            "version": VERSION,
            "topology": self.topology,
            **({"topology_inline": self.topology_inline} if self.topology_inline is not None else {}),
            "meta": self.meta,
            "entries": [e.to_dict() for e in self.entries],
        }

    @classmethod
    def from_dict(cls, d: Any) -> Plan:
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            raise PlanError(f"not a ccsynth plan (format must be {FORMAT!r})")
        version = d.get("version")
        if version != VERSION or isinstance(version, bool):
            raise PlanError(f"plan format version {version!r} is not supported (this ccsynth reads version {VERSION})")
        entries = d.get("entries")
        if not isinstance(entries, list):
            raise PlanError("plan has no 'entries' list")
        topology = d.get("topology") or ""
        if not isinstance(topology, str):
            raise PlanError(f"plan topology must be a string, got {topology!r}")
        meta = d.get("meta") or {}
        if not isinstance(meta, dict):
            raise PlanError(f"plan meta must be an object, got {meta!r:.40}")
        check_depth(meta, "plan meta", PlanError)
        inline = d.get("topology_inline")
        if inline is not None:
            if not isinstance(inline, dict):
                raise PlanError(f"plan topology_inline must be a topology object, got {inline!r:.40}")
            check_depth(inline, "plan topology_inline", PlanError)
        return cls(
            tuple(PlanEntry.from_dict(e, f"entries[{i}]") for i, e in enumerate(entries)),
            topology,
            dict(meta),
            inline,
        )


def save_plan(plan: Plan, path: str | os.PathLike) -> None:
    """Write ``plan`` as ccsynth JSON, atomically (see :mod:`ccsynth.atomic`)."""
    write_text(path, json.dumps(plan.to_dict(), separators=(",", ":")) + "\n", what="plan")


def load_plan(path: str | os.PathLike, *, verify: bool = True) -> Plan:
    """Read a plan file; every schedule in it is verified unless ``verify=False``."""
    p = os.fspath(path)
    return plan_from_file_dict(parse_json(read_text(p, "plan", PlanError), repr(p), PlanError), p, verify=verify)


def plan_from_file_dict(d: Any, path: str, *, verify: bool = True) -> Plan:
    """The plan of ``d``, read from file ``path``: every error names the file, and an entry's its index and
    collective (``plan 'p.json' entries[1] (allreduce on 4 ranks): rank 2 sends 6 message(s) ...``)."""
    try:
        plan = Plan.from_dict(d)
    except PlanError as e:
        text = str(e)
        raise PlanError(f"plan {path!r}{text[4:] if text.startswith('plan ') else ': ' + text}") from None
    if verify:
        for i, entry in enumerate(plan.entries):
            if entry.schedule is None:  # the MPI library's own collective
                continue
            try:
                check_writes_cover_outputs(entry.schedule)
                verify_schedule(entry.schedule)
            except CCSynthError as err:
                raise PlanError(f"plan {path!r} entries[{i}] ({entry.kind} on {entry.n_ranks} ranks): {err}") from None
    return plan
