"""Files of every format ccsynth reads, each handed to its reader by its type.

The one place that picks a reader; the CLI and the public API
(``ccsynth.load_schedule``, ``ccsynth.get_topology``) read files through it:

* schedules -- ccsynth JSON or MSCCL XML, told apart by the first
  character (``<`` is XML);
* phase plans -- multi-dimension schedules at any chunk and rank count
  (``format: ccsynth.phase_plan``, :mod:`.phase_plan_file`), verified by
  :func:`~ccsynth.collectives.verify_phase_plan.verify_phase_plan`;
  :func:`file_kind` tells them from schedules and plans, and the commands
  that take a schedule file (``verify``, ``simulate``, ``export``) ask it;
* topologies -- catalog names with parameters, ccsynth JSON files, TACCL
  profiles (``PATH.json?nodes=2&scale=10``): the spec grammar of
  :mod:`ccsynth.topologies.names`, and in a file ``gpus_per_node`` without
  ``format`` for TACCL;
* sketches -- ccsynth JSON or TACCL sketch JSON (``intranode_sketch``).

Each lower layer reads its own format only (``collectives.schedule``,
``topologies.io`` / ``topologies.names``, ``synth.sketch``); the foreign
readers live beside this module (:mod:`.msccl`, :mod:`.taccl_topology`,
:mod:`.taccl_sketch`). Options after ``?`` in a topology spec apply to TACCL
profiles only: ``nodes=N``, ``kind=ndv2|dgx2|hub_and_spoke|custom``,
``chunk=SIZE`` (bytes the betas are for, e.g. 32K; default: the size in the
profile's name), ``scale=S`` (time unit is 1/S us; default: TACCL's factor
for that size). A TACCL profile without ``nodes`` gets its node count from
the sketch it is used with, as in TACCL (``get_topology(spec,
default_nodes=sketch.nnodes)``; ``ccsynth synth --sketch`` does this).

Example:
    >>> get_topology("ring:4").n_ranks
    4
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

from ccsynth.collectives.schedule import Schedule, check_writes_cover_outputs, read_schedule_text, schedule_from_json
from ccsynth.collectives.plan import FORMAT as PLAN_FORMAT
from ccsynth.collectives.verify import verify as _verify
from ccsynth.collectives.verify_phase_plan import PhasePlanReport, verify_phase_plan
from ccsynth.errors import ScheduleFormatError, TopologyError
from ccsynth.formats.msccl import schedule_from_msccl_xml
from ccsynth.formats.phase_plan_file import FORMAT as PHASE_PLAN_FORMAT
from ccsynth.formats.phase_plan_file import PhasePlanFile, is_phase_plan_text, read_phase_plan_text
from ccsynth.formats.taccl_sketch import is_taccl_sketch, sketch_from_taccl_dict
from ccsynth.formats.taccl_topology import is_taccl_topology, taccl_options, taccl_topology_from_dict
from ccsynth.synth.sketch import Sketch, read_sketch_json, sketch_from_dict
from ccsynth.topologies import names
from ccsynth.topologies.io import read_json, topology_from_dict
from ccsynth.topologies.model import Topology

log = logging.getLogger(__name__)

__all__ = ["FILE_KINDS", "file_kind", "load_schedule", "load_phase_plan", "verify_phase_plan_file", "get_topology",
           "load_topology", "list_topologies", "load_sketch"]

#: what :func:`file_kind` tells apart
FILE_KINDS = ("schedule", "plan", "phase_plan")


def file_kind(path: str | os.PathLike) -> str:
    """``"phase_plan"`` (``ccsynth.phase_plan``), ``"plan"`` (``ccsynth.plan``) or ``"schedule"`` (anything else:
    the schedule readers say what is wrong with it); an unreadable file raises ScheduleFormatError."""
    text = read_schedule_text(path)
    if is_phase_plan_text(text):
        return "phase_plan"
    if f'"{PLAN_FORMAT}"' in text[:4096] and not text.lstrip().startswith("<"):
        return "plan"
    return "schedule"



# ----------------------------------------------------------------- schedules
def load_schedule(path: str | os.PathLike, *, topology=None, verify: bool = True) -> Schedule:
    """Read a ccsynth JSON or MSCCL XML schedule and verify it.

    Raises :class:`~ccsynth.errors.ScheduleFormatError` for unreadable files
    and :class:`~ccsynth.errors.ScheduleError` if the schedule does not
    implement its collective (or, with ``topology``, uses a missing link).
    """
    text = read_schedule_text(path)
    if text.lstrip().startswith("<"):
        sched = schedule_from_msccl_xml(text)
    elif os.fspath(path).lower().endswith(".xml") and not text.lstrip().startswith("{"):
        # named as MSCCL XML but not XML at all: say that, not that it is bad JSON
        raise ScheduleFormatError(f"{os.fspath(path)}: not an MSCCL XML schedule (an .xml file must start with an "
                                  f"XML element such as <algo ...>; it starts with {text.lstrip()[:20]!r})")
    elif is_phase_plan_text(text):
        raise ScheduleFormatError(f"{os.fspath(path)} is a multi-dimension phase plan ({PHASE_PLAN_FORMAT}), not a "
                                  f"schedule; ccsynth verify/simulate take it, and ccsynth export -o FILE.json "
                                  f"expands it to a schedule")
    else:
        sched = schedule_from_json(text, os.fspath(path))
    if verify:
        check_writes_cover_outputs(sched)  # cheap; spares the verifier a file that names a huge collective
        _verify(sched, topology)
    return sched


# --------------------------------------------------------------- phase plans
def load_phase_plan(path: str | os.PathLike, *, topology: Topology | None = None,
                    verify: bool = True) -> PhasePlanFile:
    """Read a phase plan file (``ccsynth.phase_plan``) and verify it (with ``topology``: against its ranks and
    dimensions too). Raises :class:`~ccsynth.errors.ScheduleFormatError` for unreadable files and
    :class:`~ccsynth.errors.ScheduleError` for a plan that does not implement its collective."""
    pf = read_phase_plan_text(read_schedule_text(path), os.fspath(path))
    if verify:
        verify_phase_plan_file(pf, topology)
    return pf


def verify_phase_plan_file(pf: PhasePlanFile, topology: Topology | None = None) -> PhasePlanReport:
    """:func:`~ccsynth.collectives.verify_phase_plan.verify_phase_plan` of a file's plan, with what it declares."""
    return verify_phase_plan(pf.plan, topology, n_ranks=pf.n_ranks, total_units=pf.total_units)


# ---------------------------------------------------------------- topologies
def get_topology(spec, *, default_nodes: int | None = None) -> Topology:
    """The topology a spec names: a catalog name with parameters, a ccsynth
    topology file, or a TACCL profile with ``?options`` (a :class:`Topology`
    is returned as it is).

    ``default_nodes``: the node count of a TACCL profile whose spec has no
    ``nodes`` option (TACCL takes it from the sketch's ``nnodes``); other
    specs name their nodes themselves.

    Raises :class:`~ccsynth.errors.TopologyError` naming the bad name,
    parameter, option or file field.
    """
    def load(path: str, options: Mapping[str, str]) -> Topology:
        return load_topology(path, options, default_nodes=default_nodes)

    return names.parse_topology_spec(spec, load_file=load)


def load_topology(path: str | os.PathLike, options: Mapping[str, str] | None = None, *,
                  default_nodes: int | None = None) -> Topology:
    """Read a topology file: ccsynth's format, or a TACCL profile (imported with ``options``).

    ``options`` (from a spec such as ``file.json?nodes=2&scale=10``, as
    strings) apply to TACCL profiles only: ``nodes``, ``kind``, ``chunk``,
    ``scale``; ``default_nodes`` is a TACCL profile's node count when
    ``options`` give none.
    """
    p = os.fspath(path)
    d = read_json(p)
    if is_taccl_topology(d):
        log.info("%s is a TACCL topology profile; importing it", p)
        kwargs = taccl_options(options or {}, p)
        if "nodes" not in kwargs and default_nodes is not None:
            log.info("%s: %d node(s), as the sketch says (nnodes)", p, default_nodes)
            kwargs["nodes"] = default_nodes
        return taccl_topology_from_dict(d, source=p, **kwargs)
    if options:
        raise TopologyError(f"{p!r}: options {sorted(options)} apply to TACCL topology files only")
    return topology_from_dict(d, source=p)


def list_topologies() -> list[tuple[str, str]]:
    """Rows ``(spec example, description)`` for ``ccsynth topo list``: the catalog, then files."""
    return names.list_topologies() + [
        (
            "PATH.json?nodes=2&scale=10",
            "a TACCL topology profile; options nodes (default: the sketch's nnodes), kind, chunk (bytes the betas "
            "are for; default: the size in its name), scale (default: TACCL's factor for that size: 1KB x100, "
            "32KB x10, 1MB x1)",
        ),
    ]


# ------------------------------------------------------------------ sketches
def load_sketch(path: str | os.PathLike) -> Sketch:
    """Read a sketch file, ccsynth's format or TACCL's."""
    p = os.fspath(path)
    d = read_sketch_json(p)
    if is_taccl_sketch(d):
        return sketch_from_taccl_dict(d, source=p)
    return sketch_from_dict(d, source=p)
