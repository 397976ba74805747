"""``ccsynth export FILE``: convert a schedule between ccsynth JSON and MSCCL XML.

JSON -> MSCCL XML writes a file the MSCCL runtimes load (``minBytes`` /
``maxBytes``, threadblocks, step types and dependencies); MSCCL XML -> JSON
reads one back into a ccsynth schedule. A plan (``ccsynth.plan`` JSON)
exports to one MSCCL XML per size range, into the directory ``-o`` names.
Every schedule is verified on the way in. A multi-dimension phase plan
(``ccsynth.phase_plan``) is expanded to its Schedule IR, where the IR takes
it, and written as JSON or MSCCL XML (:mod:`ccsynth.commands.phase_plan_files`).
"""

from __future__ import annotations

import os
import sys

from ccsynth.atomic import check_writable, write_text
from ccsynth.collectives.schedule import check_writes_cover_outputs
from ccsynth.commands._common import file_topology
from ccsynth.commands.phase_plan_files import export_plan_file
from ccsynth.errors import CCSynthError, ScheduleFormatError
from ccsynth.limits import check as check_limit
from ccsynth.reading import parse_json, read_text
from ccsynth.units import format_size, parse_size

__all__ = ["FORMATS", "register", "run", "check_json_options"]

FORMATS = ("msccl-xml", "json")


def register(sub) -> None:
    p = sub.add_parser(
        "export",
        help="convert a schedule (or plan) to MSCCL XML, or MSCCL XML to ccsynth JSON",
        description=__doc__,
    )
    p.add_argument("file", help="schedule (ccsynth JSON or MSCCL XML), plan (ccsynth JSON) or phase plan (expanded) "
                                "to convert")
    p.add_argument("-f", "--format", choices=FORMATS, default=None,
                   help="output format (default: from the -o suffix, else the other format than the input's)")
    p.add_argument("-o", "--output", metavar="OUT", default=None,
                   help="output file (a directory for a plan exported to MSCCL XML); default: standard output")
    p.add_argument("-t", "--topology", metavar="T",
                   help="check that every transfer uses a link of this topology, and simulate MSCCL layouts on it "
                        "(default: the topology the file records; MSCCL XML to JSON: recorded in the JSON)")
    g = p.add_argument_group("MSCCL XML options")
    g.add_argument("--min-bytes", metavar="S", default=None, help="smallest message size the algorithm is for (default 0)")
    g.add_argument("--max-bytes", metavar="S", default=None,
                   help="largest message size, inclusive as in MSCCL (default: no upper end; 'inf' for none)")
    g.add_argument("--proto", choices=("Simple", "LL", "LL128"), default=None, help="NCCL protocol (default Simple)")
    g.add_argument("--channels", type=int, default=None, metavar="K",
                   help="run K/C copies side by side on K channels, C being the channels the schedule uses")
    g.add_argument("--inplace", action="store_true", help="write the in-place form (input and output buffers aliased)")
    g.add_argument("--name", default=None, help="algorithm name in the file (default: the schedule's)")
    g.add_argument("--coll", default=None, metavar="NAME",
                   help="collective name to write (default: the executor's, e.g. 'reducescatter'; "
                        "'reduce_scatter' for the older microsoft/msccl)")
    g.add_argument("--msccl-max-steps", type=int, default=None, metavar="N",
                   help="steps per threadblock the runtime accepts (default 64: msccl-executor-nccl's default "
                        "MSCCL_MAX_NUM_STEPS; 256 for microsoft/msccl or a build with more); longer threadblocks "
                        "are spread over more channels or merged, and a schedule that cannot fit is refused")
    p.set_defaults(func=run)


def _size(text: str | None, what: str) -> int | None:
    if text is None or str(text).strip().lower() in ("inf", "none", ""):
        return None
    try:
        return parse_size(text)
    except CCSynthError as e:
        raise CCSynthError(f"--{what}: {e}") from None


def _read(path: str):
    """('plan', Plan), ('phase_plan', PhasePlanFile) or ('schedule', Schedule), not yet verified; and whether the
    input was XML.

    The file is read and parsed once; a plan is told from a schedule by its ``format``.
    """
    from ccsynth.collectives.plan import Plan
    from ccsynth.collectives.schedule import Schedule
    from ccsynth.formats.msccl import schedule_from_msccl_xml
    from ccsynth.formats.phase_plan_file import is_phase_plan_text, read_phase_plan_text

    text = read_text(path, "schedule", ScheduleFormatError)
    if text.lstrip().startswith("<"):
        return "schedule", schedule_from_msccl_xml(text), True
    if is_phase_plan_text(text):
        return "phase_plan", read_phase_plan_text(text, path), False
    data = parse_json(text, repr(path), ScheduleFormatError)
    if isinstance(data, dict) and data.get("format") == "ccsynth.plan":
        return "plan", Plan.from_dict(data), False
    return "schedule", Schedule.from_dict(data), False


def check_json_options(args) -> None:
    """MSCCL XML options given for JSON output: one error naming them."""
    if any(v is not None for v in (args.min_bytes, args.max_bytes, args.proto, args.channels, args.name, args.coll,
                                   args.msccl_max_steps)) or args.inplace:
        raise CCSynthError("MSCCL XML options (--min-bytes, --max-bytes, --proto, --channels, --inplace, --name, --coll, "
                           "--msccl-max-steps) need --format msccl-xml")


def _write(path: str | None, text: str) -> None:
    if path is None or path == "-":
        sys.stdout.write(text)
        return
    write_text(path, text)


def _xml_or_coarser(sched, topo, min_b, max_b, name, xml_opts):
    """``(xml, schedule written)``: the schedule's MSCCL XML, laid out for the size it was made for (its
    ``meta["size_bytes"]``, where that is in the file's size range); where it does not fit the runtime and its
    topology is known, the same algorithm with fewer chunks (one ``fallback:`` line on standard error), else the
    refusal naming the limit."""
    from ccsynth.formats.msccl import fit_or_coarser
    from ccsynth.formats.msccl.export import lower_schedule
    from ccsynth.topologies import get_topology

    made_for = sched.meta.get("size_bytes")
    if isinstance(made_for, bool) or not isinstance(made_for, int) or not (
            (min_b or 0) <= made_for <= (max_b if max_b is not None else made_for)) or made_for <= 0:
        made_for = None

    def write(s):
        low = lower_schedule(s, min_bytes=min_b, max_bytes=max_b, name=name, size_bytes=made_for, **xml_opts)
        return low.xml, s, low.time_us

    on = topo
    if on is None and sched.topology:
        try:
            on = get_topology(sched.topology)
        except CCSynthError:
            on = None
    if on is None or on.n_ranks != sched.n_ranks:
        return write(sched)[:2]
    (text, written, _), note = fit_or_coarser(sched, on, made_for or 1 << 20, write,
                                           time_of=(lambda r: r[2]) if made_for is not None else None)
    if note is not None:
        print(f"ccsynth export: fallback: {note}", file=sys.stderr)
    return text, written


def run(args) -> int:
    from ccsynth.collectives.verify import verify
    from ccsynth.formats.msccl import describe_xml, plan_to_msccl_xmls

    if args.channels is not None:
        if args.channels < 1:
            raise CCSynthError(f"--channels must be a positive integer, got {args.channels}")
        check_limit("--channels", args.channels, "MAX_CHANNELS")
    what, obj, was_xml = _read(args.file)
    topo = file_topology(args, obj, args.file, required=False)
    fmt = args.format
    if fmt is None and args.output not in (None, "-"):
        ext = os.path.splitext(args.output)[1].lower()
        fmt = {".xml": "msccl-xml", ".json": "json"}.get(ext)
    if fmt is None:
        fmt = "json" if was_xml else "msccl-xml"
    from ccsynth.formats.msccl import EXECUTOR_LIMITS

    xml_opts = dict(
        proto=args.proto,
        nchannels=args.channels,
        inplace=args.inplace,
        coll=args.coll,
        topology=topo,
        limits=EXECUTOR_LIMITS if args.msccl_max_steps is None else EXECUTOR_LIMITS.with_max_steps(args.msccl_max_steps),
    )
    min_b, max_b = _size(args.min_bytes, "min-bytes"), _size(args.max_bytes, "max-bytes")
    to_file = args.output not in (None, "-")

    if what == "phase_plan":
        if fmt == "json":
            check_json_options(args)
        return export_plan_file(args, obj, topo, fmt, xml_opts, min_b, max_b)
    if what == "plan":
        if fmt != "msccl-xml":
            raise CCSynthError(f"{args.file} is a plan (ccsynth JSON already); export it with --format msccl-xml -o DIR")
        if not to_file:
            raise CCSynthError("a plan exports to one MSCCL XML per size range: name a directory with -o")
        if args.min_bytes is not None or args.max_bytes is not None or args.name is not None:
            raise CCSynthError("--min-bytes/--max-bytes/--name come from the plan's rows; drop them for a plan")
        if os.path.exists(args.output) and not os.path.isdir(args.output):
            raise CCSynthError(f"cannot write MSCCL XML files into {args.output!r}: it is a file, not a directory")
        rows = [e for e in obj.entries if e.schedule is not None]  # "mpi" rows (MPI's own collective) have no file
        for e in rows:
            if e.schedule is not None:
                check_writes_cover_outputs(e.schedule)
                verify(e.schedule, topo)
        files = plan_to_msccl_xmls(obj, **xml_opts)
        try:
            os.makedirs(args.output, exist_ok=True)
        except OSError as e:
            raise CCSynthError(f"cannot create directory {args.output!r}: {e.strerror}") from None
        for fname, text in files:
            _write(os.path.join(args.output, fname), text)
        print(f"wrote {len(files)} MSCCL XML file(s) to {args.output}:")
        for (fname, _), entry in zip(files, rows):
            hi = "inf" if entry.max_bytes is None else format_size(entry.max_bytes)
            print(f"  {fname}  ({entry.kind} on {entry.n_ranks} ranks, {format_size(entry.min_bytes)}..{hi},"
                  f" {entry.algorithm})")
        return 0

    sched = obj
    if to_file:
        check_writable(args.output)
    check_writes_cover_outputs(sched)
    verify(sched, topo)
    if fmt == "json":
        check_json_options(args)
        if topo is not None and not sched.topology:  # MSCCL XML names no topology: record the one given
            from ccsynth.formats.recorded_topology import with_topology

            sched = with_topology(sched, topo)
        _write(args.output, sched.to_json() + "\n")
        if to_file:
            print(f"wrote {args.output}: {sched.name!r}, {sched.collective.describe()}, {len(sched.ops)} ops (verified)")
        return 0
    text, sched = _xml_or_coarser(sched, topo, min_b, max_b, args.name, xml_opts)
    _write(args.output, text)
    if to_file:
        d = describe_xml(text)
        types = ", ".join(f"{k} {v}" for k, v in d["step_types"].items())
        print(
            f"wrote {args.output}: MSCCL XML of {sched.name!r} ({sched.collective.describe()}): {d['ngpus']} gpus, "
            f"{d['nchannels']} channel(s), {d['threadblocks']} threadblocks (at most {d['max_threadblocks_per_gpu']} "
            f"per gpu), {d['steps']} steps ({types})"
        )
    return 0
