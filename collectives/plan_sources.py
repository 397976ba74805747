"""What a user may hand the communicator as a plan, made into one; the user's plan over the default one.

``Communicator(comm, plan=...)`` takes whatever the synthesizer produced:

* a :class:`~ccsynth.collectives.plan.Plan` (``ccsynth.synthesize(..., sizes=...)``, ``ccsynth synth --sizes``);
* a :class:`~ccsynth.collectives.schedule.Schedule` (``ccsynth.synthesize(..., size=...)``,
  ``ccsynth synth``): it covers its collective at every size;
* a path to a plan file or to a ccsynth JSON schedule file (told apart by
  their ``format`` field; MSCCL XML is read by ``ccsynth.load_schedule``,
  whose result can be passed);
* a list or tuple of any of these, merged into one plan (two sources that
  cover the same collective on the same rank count over overlapping sizes
  are an error, not a silent choice).

:func:`as_plan` does that conversion (schedules are verified, unless their
``meta`` says the synthesizer already did); :func:`check_usable` refuses a
plan the communicator could never use (no entry for its rank count,
collectives it does not run) with :class:`~ccsynth.errors.PlanError`.

Layering (:class:`LayeredPlan`): the user's plan decides for every
collective it covers on the communicator's rank count -- at every size, so
a size outside its ranges goes to the MPI library, visibly -- and the
default plan decides for the others. A plan for allreduce therefore leaves
allgather on the built-in schedules instead of sending it to MPI.

Fingerprint (:func:`plan_fingerprint`): a short hash of the plan's JSON
(the default plan: ``"default"``), which the ranks compare in the
communicator's constructor: a rank launched with another plan file is
found there, by name, instead of showing up later as "different counts".

Example:
    >>> from ccsynth.collectives.builder import ScheduleBuilder
    >>> from ccsynth.collectives.spec import Collective
    >>> b = ScheduleBuilder(Collective("allgather", 2), "pairwise")
    >>> for r in range(2):
    ...     _ = b.copy(r, ("i", 0), ("o", r))
    >>> _ = b.transfer(0, 1, ("i", 0), ("o", 0)); _ = b.transfer(1, 0, ("i", 0), ("o", 1))
    >>> plan = as_plan(b.build())
    >>> [(e.kind, e.n_ranks, e.min_bytes, e.max_bytes) for e in plan.entries]
    [('allgather', 2, 0, None)]
    >>> check_usable(plan, 4)
    Traceback (most recent call last):
    ...
    ccsynth.errors.PlanError: the plan covers allgather on 2 ranks, none on the communicator's 4 ranks; synthesize for a 4-rank topology (or run on 2 ranks)
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from typing import Any
from collections.abc import Iterable

from ccsynth.collectives.plan import FORMAT as PLAN_FORMAT, Plan, PlanEntry, plan_from_file_dict
from ccsynth.collectives.schedule import FORMAT as SCHEDULE_FORMAT, Schedule, check_writes_cover_outputs
from ccsynth.collectives.verify import verify
from ccsynth.errors import CCSynthError, PlanError
from ccsynth.reading import parse_json, read_text

__all__ = ["RUNNABLE_KINDS", "DEFAULT_FINGERPRINT", "as_plan", "check_usable", "plan_fingerprint", "LayeredPlan",
           "resolve_plan", "layered", "plan_for_split"]

log = logging.getLogger(__name__)

#: the collectives the communicator runs on schedules (gather and scatter schedules cannot be used)
RUNNABLE_KINDS = frozenset(("allreduce", "allgather", "reduce_scatter", "alltoall", "broadcast", "reduce"))
#: the fingerprint of a plan that is the built-in default (or no plan)
DEFAULT_FINGERPRINT = "default"


def as_plan(source: Any) -> Any:
    """A Plan from a Plan, Schedule, plan or schedule file path, or a list of them (merged).

    Objects that already answer the plan protocol (``select``/``entry_for``,
    e.g. the lazy default plan) are returned as they are.
    """
    if isinstance(source, (list, tuple)):
        if not source:
            raise PlanError("an empty list is not a plan; pass None for the default plan")
        plans = [as_plan(s) for s in source]
        entries: list[PlanEntry] = []
        for i, p in enumerate(plans):
            if not isinstance(p, Plan):
                raise PlanError(f"plan list item {i} ({type(p).__name__}) cannot be merged; pass Plans, Schedules or files")
            entries.extend(p.entries)
        topologies = sorted({p.topology for p in plans if p.topology})
        try:
            return Plan(tuple(entries), topology="+".join(topologies), meta={"merged": len(plans)})
        except PlanError as e:
            raise PlanError(f"the plans given cannot be merged: {e}") from None
    if isinstance(source, Plan):
        return source
    if isinstance(source, Schedule):
        return _schedule_plan(source)
    if isinstance(source, (str, os.PathLike)):
        return _read(os.fspath(source))
    if hasattr(source, "select"):
        return source
    raise PlanError(
        f"plan must be a Plan, a Schedule, a plan or schedule file path, a list of them, or None; "
        f"got {type(source).__name__}"
    )


def _schedule_plan(schedule: Schedule, source: str = "") -> Plan:
    """One schedule as a plan covering its collective at every size (verified unless already)."""
    if not schedule.meta.get("verified"):
        try:
            check_writes_cover_outputs(schedule)
            verify(schedule)
        except CCSynthError as e:
            raise PlanError(f"schedule {schedule.name!r}{f' ({source})' if source else ''} does not verify: {e}") from None
    c = schedule.collective
    return Plan((PlanEntry(c.kind, c.n_ranks, 0, None, schedule),), topology=schedule.topology or "",
                meta={"from_schedule": schedule.name})


def _read(path: str) -> Plan:
    d = parse_json(read_text(path, "plan", PlanError), repr(path), PlanError)
    fmt = d.get("format") if isinstance(d, dict) else None
    if fmt == PLAN_FORMAT:
        return plan_from_file_dict(d, path)
    if fmt == SCHEDULE_FORMAT:
        try:
            sched = Schedule.from_dict(d)
        except CCSynthError as e:
            raise PlanError(f"{path!r}: {e}") from None
        return _schedule_plan(sched.with_meta(verified=False), path)
    raise PlanError(
        f"{path!r} is neither a ccsynth plan nor a ccsynth JSON schedule (format {fmt!r}); "
        f"convert MSCCL XML with ccsynth.load_schedule and pass the schedule"
    )


def _describe(kinds: Iterable[tuple[str, int]]) -> str:
    return ", ".join(f"{k} on {n} ranks" for k, n in kinds)


def check_usable(plan: Any, n_ranks: int, kinds: frozenset[str] = RUNNABLE_KINDS) -> None:
    """Raise :class:`PlanError` unless ``plan`` has an entry for ``n_ranks`` and only collectives in ``kinds``."""
    entries = getattr(plan, "entries", None)
    if entries is None:
        return  # a plan object of another kind (the lazy default): built for whatever size asks
    if not entries:
        raise PlanError("the plan has no entries; pass None for the default plan")
    bad = sorted({e.kind for e in entries if e.kind not in kinds})
    if bad:
        raise PlanError(
            f"the plan holds {', '.join(bad)} schedules, which the communicator does not run "
            f"(it runs {', '.join(sorted(kinds))})"
        )
    if not any(e.n_ranks == n_ranks for e in entries):
        have = sorted({e.n_ranks for e in entries})
        raise PlanError(
            f"the plan covers {_describe(plan.kinds())}, none on the communicator's {n_ranks} ranks; "
            f"synthesize for a {n_ranks}-rank topology (or run on {' or '.join(map(str, have))} ranks)"
        )


def plan_fingerprint(plan: Any) -> str:
    """A short hash of ``plan`` (its JSON), the same on every rank that loaded the same plan."""
    if plan is None or (getattr(plan, "meta", None) or {}).get("default"):
        return DEFAULT_FINGERPRINT
    to_dict = getattr(plan, "to_dict", None)
    if to_dict is None:
        return f"object:{type(plan).__module__}.{type(plan).__qualname__}"
    d = dict(to_dict())
    d.pop("meta", None)  # provenance (timings, file names) may differ; the entries are what runs
    text = json.dumps(d, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


class LayeredPlan:
    """The user's plan for the collectives it covers (on ``n_ranks``), the default plan for the others.

    Answers the plan protocol (``entry_for``, ``select``, ``kinds``).
    """

    def __init__(self, user: Any, default: Any, n_ranks: int) -> None:
        self.user = user
        self.default = default
        self.n_ranks = n_ranks
        kinds = getattr(user, "kinds", None)
        self.covered = frozenset(k for k, n in kinds() if n == n_ranks) if kinds is not None else None

    def source_for(self, kind: str) -> Any:
        """The plan that decides for ``kind`` (canonical name)."""
        if self.covered is None or kind in self.covered:
            return self.user
        return self.default

    def entry_for(self, kind: str, n_ranks: int, nbytes: int) -> PlanEntry | None:
        plan = self.source_for(kind)
        entry_for = getattr(plan, "entry_for", None)
        if entry_for is None:
            sched = plan.select(kind, n_ranks, nbytes)
            return None if sched is None else PlanEntry(kind, n_ranks, 0, None, sched)
        return entry_for(kind, n_ranks, nbytes)

    def select(self, kind: str, n_ranks: int, nbytes: int) -> Schedule | None:
        e = self.entry_for(kind, n_ranks, nbytes)
        return e.schedule if e is not None else None

    def kinds(self) -> list[tuple[str, int]]:
        out = set(self.user.kinds()) if hasattr(self.user, "kinds") else set()
        if hasattr(self.default, "kinds"):
            out |= set(self.default.kinds())
        return sorted(out)


def resolve_plan(plan: Any, default: Any, n_ranks: int) -> Any:
    """A communicator's ``plan=``: ``default`` for None, else :func:`as_plan`, checked for ``n_ranks`` ranks.

    On one rank any plan is accepted (MPI copies locally; a plan for other rank counts is said at INFO).
    """
    if plan is None:
        return default
    plan = as_plan(plan)
    if n_ranks > 1:
        check_usable(plan, n_ranks)
    elif getattr(plan, "entries", None) and not any(e.n_ranks == 1 for e in plan.entries):
        log.info("a one-rank communicator: the plan (for %s ranks) is not used; MPI copies locally",
                 sorted({e.n_ranks for e in plan.entries}))
    return plan


def layered(plan: Any, default: Any, n_ranks: int) -> Any:
    """What selects a schedule per call: the user's ``plan`` over ``default`` (per collective), or ``default`` alone."""
    if plan is default:
        return plan
    return LayeredPlan(plan, default, n_ranks)


def plan_for_split(plan: Any, default: Any, n_ranks: int) -> Any:
    """The ``plan=`` of a communicator split or duplicated from one with ``plan`` over ``default``.

    The user's plan where it has entries for the new communicator's
    ``n_ranks``, else None (the default plan; said at INFO).
    """
    if plan is default:
        return None
    if not any(e.n_ranks == n_ranks for e in getattr(plan, "entries", ())):
        log.info("the plan has no entries for %d ranks: the new communicator uses the default plan", n_ranks)
        return None
    return plan
