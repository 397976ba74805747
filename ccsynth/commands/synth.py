"""``ccsynth synth``: synthesize a schedule (TACCL-style sketch + MILPs), verify, simulate, write it.

Prints the predicted time, algbw/busbw, the gap to the lower bound and the
speedup over the best baseline (every applicable baseline simulated at the
same size). Progress goes to standard error: by default a few stage
summaries and a ``[k/N]`` counter over the candidate sketches (every stage,
with elapsed seconds, objective and bound, with ``-v``; nothing with
``-q``). With ``--sizes`` it synthesizes for every size (a ``[k/N]``
counter over the sizes), simulates the results together with every baseline
and writes a plan (per-size algorithm table) that picks the fastest schedule
per size range.
"""

from __future__ import annotations

import os
import time

from ccsynth.atomic import check_writable, write_text
from ccsynth.commands._common import human, json_doc, print_json, print_table, topology_from
from ccsynth.commands._progress import Progress, SynthStages, elapsed_text
from ccsynth.commands.synth_multidim import run_multidim
from ccsynth.errors import CCSynthError, CollectiveError
from ccsynth.limits import check as check_limit

__all__ = ["FORMATS", "register", "run"]

FORMATS = ("json", "msccl-xml", "phase-plan")


def register(sub) -> None:
    p = sub.add_parser(
        "synth",
        help="synthesize a verified schedule for a topology (sketch + routing/contiguity MILPs)",
        description=__doc__,
    )
    p.add_argument("-t", "--topology", required=True, metavar="T",
                   help="catalog name (dgx1, ndv2x2, dgx_a100x4, ring:8, ...) or a topology JSON file")
    p.add_argument("-c", "--collective", required=True, metavar="C",
                   help="allgather, reduce_scatter, allreduce, alltoall, broadcast or reduce")
    p.add_argument("--sketch", metavar="FILE",
                   help="communication sketch (ccsynth or TACCL JSON); default: try ccsynth's default sketches")
    g = p.add_mutually_exclusive_group()
    g.add_argument("-s", "--size", default=None, metavar="S",
                   help="message size to tune for, e.g. 1M (default: the sketch's input_size, else 1M)")
    g.add_argument("--sizes", default=None, metavar="MIN:MAX",
                   help="synthesize for every size of a range (powers of two, e.g. 1K:1G) or list (1K,1M) "
                        "and write a plan picking the fastest schedule per size range")
    p.add_argument("--margin", type=float, default=None, metavar="M",
                   help="with --sizes: another algorithm replaces the default plan's at a size only when predicted "
                        "faster by more than this fraction (default: 0.7 on a profiled machine run by ccsynth's "
                        "executor, the model's measured error there; 0.25 elsewhere; 0: the fastest in simulation "
                        "always wins)")
    p.add_argument("--scheduler", default=None, metavar="S",
                   help="on a topology with dimensions: the multi-dimension schedulers (fixed, themis, themis-flex, "
                        "lp or auto) side by side, no MILPs; the chosen one is written with -o, at its own chunk "
                        "count (a phase plan file where the Schedule IR would be too large, any rank count)")
    p.add_argument("--chunks", type=int, default=None, metavar="K",
                   help="pieces per chunk (TACCL's input_chunkup; default: chosen by size)")
    s = p.add_argument_group("solver")
    s.add_argument("--solver", default="highs", choices=("highs", "cbc", "auto"),
                   help="MILP solver: HiGHS (default) or PuLP's bundled CBC")
    s.add_argument("--time-limit", type=float, default=None, metavar="SEC",
                   help="time limit of every MILP solve (on time-out the best solution found is used, with a warning)")
    s.add_argument("--gap", type=float, default=None, metavar="G", help="relative MIP gap to stop at, e.g. 0.01")
    s.add_argument("--threads", type=int, default=None, metavar="N", help="solver threads")
    s.add_argument("--no-contiguity", action="store_true", help="skip the contiguity MILP (keep the heuristic waves)")
    p.add_argument("-f", "--format", choices=FORMATS, default=None,
                   help="output format: ccsynth JSON (default) or MSCCL XML (from the -o suffix .xml too); "
                        "with --sizes, MSCCL XML writes one file per size range into the -o directory; "
                        "with --scheduler, phase-plan writes the multi-dimension phase plan file")
    p.add_argument("-o", "--output", metavar="OUT", default=None, help="write the schedule (or plan) here")
    p.add_argument("--msccl-max-steps", type=int, default=None, metavar="N",
                   help="with MSCCL XML: steps per threadblock the runtime accepts (default 64, msccl-executor-nccl's "
                        "default build; 256 for microsoft/msccl); a schedule that cannot fit is refused, no file written")
    p.add_argument("--json", action="store_true", help="print the figures as JSON (for scripts)")
    p.set_defaults(func=run)


# --------------------------------------------------------------------------- helpers
def _options(args):
    from ccsynth.synth.solver import SolverOptions, resolve_solver

    opts = SolverOptions(solver=args.solver, time_limit=args.time_limit, gap=args.gap, threads=args.threads)
    resolve_solver(opts.solver)  # a missing solver is reported before any work
    return opts


def _output_format(args) -> str:
    if args.format:
        return args.format
    if args.output and os.path.splitext(args.output)[1].lower() == ".xml":
        return "msccl-xml"
    return "json"


def _msccl_limits(args):
    """The runtime limits an MSCCL XML output must keep (``--msccl-max-steps`` overrides the steps)."""
    from ccsynth.formats.msccl import EXECUTOR_LIMITS

    steps = getattr(args, "msccl_max_steps", None)
    return EXECUTOR_LIMITS if steps is None else EXECUTOR_LIMITS.with_max_steps(steps)


def _check_output(args, fmt: str) -> None:
    """Fail before the solver runs, not after it, if ``-o`` cannot be written."""
    if getattr(args, "msccl_max_steps", None) is not None:
        if fmt != "msccl-xml":
            raise CCSynthError("--msccl-max-steps needs MSCCL XML output (-f msccl-xml or -o FILE.xml)")
        _msccl_limits(args)  # a bad value is reported before any work
    if args.output is None:
        return
    if args.sizes is not None and fmt == "msccl-xml":  # a directory of files
        if args.output == "":
            raise CCSynthError("cannot write '': the output path is empty")
        if os.path.exists(args.output) and not os.path.isdir(args.output):
            raise CCSynthError(f"cannot write MSCCL XML files into {args.output!r}: it is a file, not a directory")
        return
    check_writable(args.output, "MSCCL XML" if fmt == "msccl-xml" else ("plan" if args.sizes is not None else "schedule"))


# --------------------------------------------------------------------------- run
def run(args) -> int:
    from ccsynth.collectives.spec import Collective
    from ccsynth.formats.files import load_sketch
    from ccsynth.units import parse_size, parse_sizes

    if args.chunks is not None:
        if args.chunks < 1:
            raise CCSynthError(f"--chunks must be a positive integer, got {args.chunks}")
        check_limit("--chunks", args.chunks, "MAX_SYNTH_CHUNK_FACTOR")
    sizes = parse_sizes(args.sizes) if args.sizes is not None else None
    if sizes is not None and min(sizes) <= 0:
        raise CCSynthError(f"--sizes needs positive sizes, got {args.sizes!r}")
    size = parse_size(args.size) if args.size is not None else None
    if size is not None and size <= 0:
        raise CCSynthError(f"--size must be positive, got {args.size!r}")
    fmt = _output_format(args)
    _check_output(args, fmt)
    sketch = load_sketch(args.sketch) if args.sketch else None
    # a TACCL profile without ?nodes= has as many nodes as the sketch says (TACCL's nnodes)
    topo = topology_from(args.topology, sketch.nnodes if sketch is not None else None)
    coll = Collective(args.collective, topo.n_ranks, args.chunks or 1)
    from ccsynth.synth.synthesize import SUPPORTED

    if coll.kind not in SUPPORTED:
        raise CollectiveError(f"ccsynth synth supports {', '.join(SUPPORTED)}; got {coll.kind}")
    if sketch is not None:
        if args.chunks is None:  # the sketch's factor is what the MILPs will use
            check_limit(f"sketch {args.sketch!r}: chunk factor", sketch.chunk_factor, "MAX_SYNTH_CHUNK_FACTOR")
        sketch.bind(topo)  # sketch errors (with the failed rule) before any solver runs
    opts = _options(args)
    scheduler = _multidim_scheduler(args, topo, sketch, sizes)
    if scheduler is not None:
        return run_multidim(args, topo, coll.kind, size if size is not None else 1 << 20, opts, scheduler, fmt)
    progress = Progress.for_args(args)
    if sizes is not None:
        return _run_sizes(args, topo, coll, sketch, opts, sizes, fmt, progress)
    if size is None:
        size = sketch.input_size if sketch is not None and sketch.input_size else 1 << 20
    return _run_one(args, topo, coll, sketch, opts, size, fmt, progress)


def _multidim_scheduler(args, topo, sketch, sizes) -> str | None:
    """The multi-dimension scheduler to run instead of the synthesizer (``--scheduler``; see
    :mod:`ccsynth.commands.synth_multidim`), or None."""
    from ccsynth.synth.multidim import check_scheduler

    if args.scheduler is None:
        if args.format == "phase-plan":
            raise CCSynthError("-f phase-plan is the file of the multi-dimension schedulers: it needs --scheduler")
        return None
    name = check_scheduler(args.scheduler)
    if sketch is not None or sizes is not None or args.chunks is not None:
        raise CCSynthError("--scheduler takes one --size and no --sketch, --sizes or --chunks "
                           "(the schedulers choose their own chunks)")
    return name


def _run_one(args, topo, coll, sketch, opts, size: int, fmt: str, progress: Progress) -> int:
    """One size: every strategy's candidates, judged as written (:func:`ccsynth.formats.written.best_written`);
    the figures printed are the written file's."""
    from ccsynth.formats.written import best_written
    from ccsynth.synth.simulate import known_result
    from ccsynth.synth.synthesize import SynthReport, synthesize_candidates

    t0 = time.perf_counter()
    report = SynthReport()
    ranked = synthesize_candidates(topo, coll, sketch, opts, size, progress=SynthStages(progress), report=report,
                                   contiguity=not args.no_contiguity)
    choice = best_written(ranked, fmt=fmt, limits=_msccl_limits(args) if fmt == "msccl-xml" else None)
    seconds = time.perf_counter() - t0
    sched = choice.schedule
    res = known_result(choice.written.schedule, topo, size, choice.time_us)  # simulated as written already
    written_us = {p.candidate.label: p.time_us for p in choice.priced if p.written is not None}
    timed = [dict(b, written_us=written_us.get(_baseline_label(b))) for b in report.baselines
             if b.get("time_us") is not None]
    base = timed[0] if timed else None
    # baselines proven slower by a bound, not simulated (ccsynth.synth.baseline_search.baselines_against)
    outrun = [b for b in report.baselines if b.get("time_us") is None]
    # the speedup of what is written over the best baseline (as written where it was priced so)
    base_us = None if base is None else (base["written_us"] or base["time_us"])
    speedup = None if base_us is None else base_us / res.time_us
    at_least = min((b["at_least_us"] for b in outrun), default=None)
    speedup_at_least = None if base is not None or at_least is None else at_least / res.time_us
    wrote = None
    if args.output is not None:
        write_text(args.output, _recorded_text(choice, topo, fmt))
        wrote = args.output
    figures = {
        "topology": topo.name,
        "collective": sched.collective.to_dict(),
        "size_bytes": size,
        "time_us": res.time_us,
        "ir_time_us": choice.ir_time_us,
        "written_format": fmt,
        "proto": choice.proto,
        "algbw_GBps": res.algbw,
        "busbw_GBps": res.busbw,
        "lower_bound_us": res.lower_bound_us,
        "gap": res.gap,
        "bound": res.bound_which,
        "baseline": base,
        "baselines": report.baselines,
        "chosen": report.chosen,
        "candidate": choice.candidate.label,
        "synthesized_us": report.synthesized_us,
        "multidim": report.multidim or None,
        "speedup": speedup,
        "speedup_at_least": speedup_at_least,
        "fallbacks": list(choice.notes),
        "priced": [p.to_dict() for p in choice.priced],
        "synthesis_s": seconds,
        "solver": opts.to_dict(),
        "sketch": sched.meta.get("sketch"),
        "n_ops": len(choice.written.schedule.ops),
        "verified": choice.verified,
        "output": wrote,
        "output_format": fmt if wrote else None,
    }
    if args.json:
        print_json(json_doc("synth", figures))
        return 0
    _print_one(topo, size, fmt, choice, report, res, seconds, base, speedup, outrun, speedup_at_least, wrote)
    return 0


def _recorded_text(choice, topo, fmt: str) -> str:
    """The written file's text; JSON records its topology too (:mod:`ccsynth.formats.recorded_topology`)."""
    if fmt != "json":
        return choice.text
    from ccsynth.formats.recorded_topology import with_topology

    return with_topology(choice.written.schedule, topo).to_json() + "\n"


def _baseline_label(b: dict) -> str:
    """The candidate label of a baseline row of the report (:mod:`ccsynth.synth.strategies.baselines`)."""
    return f"baseline {b['name']} (chunk factor {b['chunk_factor']})"


def _print_one(topo, size, fmt, choice, report, res, seconds, base, speedup, outrun, speedup_at_least, wrote) -> None:
    sched = choice.schedule
    form = "MSCCL XML" if fmt == "msccl-xml" else "ccsynth JSON"
    what = {"synthesized": "synthesized", "multidim": f"chose multi-dimension {report.multidim.get('scheduler')} for"
            }.get(report.chosen, f"chose baseline {sched.name} for")
    print(f"{what} {sched.collective.kind} on {topo.name} ({topo.n_ranks} ranks), {human(size)}: "
          f"{len(choice.written.schedule.ops)} ops, {'verified' if choice.verified else 'NOT verified'}, "
          f"in {elapsed_text()}")
    print(f"  predicted time {res.time_us:.3f} us   algbw {res.algbw:.2f} GB/s   busbw {res.busbw:.2f} GB/s   "
          f"(the {form} file" + (f", protocol {choice.proto})" if choice.proto else ")"))
    if choice.ir_time_us != res.time_us:
        print(f"  before writing {choice.ir_time_us:.3f} us   (the schedule as synthesized; written {form}: "
              f"{res.time_us / choice.ir_time_us:.3f}x)")
    print(f"  lower bound    {res.lower_bound_us:.3f} us   gap {res.gap:.3f}x   ({res.bound_which})")
    for note in choice.notes:
        print(f"  fallback: {note}")
    if base is not None:
        as_written = "" if base["written_us"] is None else f" ({base['written_us']:.3f} us as {form})"
        lead = (f"  best baseline  {base['name']} (chunk factor {base['chunk_factor']}) {base['time_us']:.3f} us"
                + as_written)
        if report.chosen == "baseline":
            print(f"{lead}: it is what was written (the best synthesized schedule: {report.synthesized_us:.3f} us)")
        else:
            print(f"{lead}   speedup {speedup:.2f}x   (every baseline at its best chunk factor; -v lists them)")
    if outrun:
        print(f"  {'other baselines' if base is not None else 'every baseline'} proven slower by a bound, not "
              "simulated: " + ", ".join(f"{b['name']} >= {b['at_least_us']:.1f} us" for b in outrun)
              + (f"   speedup >= {speedup_at_least:.2f}x" if speedup_at_least is not None else ""))
    if report.multidim:
        md = report.multidim
        print(f"  multi-dimension best {md['scheduler']} ({md['chunks']} chunks) {md['time_us']:.3f} us in the "
              f"simulator (--scheduler compares the schedulers side by side)")
    if wrote:
        print(f"wrote {wrote} ({form})")


def _run_sizes(args, topo, coll, sketch, opts, sizes: list[int], fmt: str, progress: Progress) -> int:
    """``--sizes``: :func:`ccsynth.synth.sized_plan.synthesize_sized` (what ``ccsynth.synthesize(sizes=...)``
    runs too), a ``[k/N]`` counter over the sizes, a table of every size against its best baseline."""
    from ccsynth.collectives.plan import save_plan
    from ccsynth.synth.simulate import simulate
    from ccsynth.synth.sized_plan import SizedSchedule, synthesize_sized
    from ccsynth.synth.tables import margin_for

    from ccsynth.formats.written import written_judge

    margin = margin_for(topo) if args.margin is None else args.margin
    notes: dict[int, tuple[str, ...]] = {}  # each size's fallbacks
    judge = written_judge(fmt, _msccl_limits(args) if fmt == "msccl-xml" else None, notes)

    counter = progress.counter("size", len(set(sizes)))  # the library synthesizes each size once, smallest first

    def size_done(done: SizedSchedule) -> None:
        counter.step(f"{human(done.size_bytes)}: {done.schedule.meta.get('predicted_us', float('nan')):.3f} us, "
                     f"synthesized in {done.seconds:.1f} s")

    sized = synthesize_sized(topo, coll, sizes, sketch, opts, contiguity=not args.no_contiguity,
                             stage_progress=lambda size: SynthStages(progress, prefix=f"{human(size)} "),
                             on_size=size_done, default_margin=margin, judge=judge)
    plan, seconds = sized.plan, sized.synthesis_s
    rows = []
    out_rows = []
    for done in sized.synthesized:
        size, s = done.size_bytes, done.schedule
        r = simulate(s, topo, size)
        bt = sized.baselines[size][0].result if sized.baselines[size] else None
        entry = plan.entry_for(coll.kind, topo.n_ranks, size)
        rows.append((human(size), r.time_us, r.busbw, f"{r.gap:.2f}x", None if bt is None else bt.time_us,
                     "-" if bt is None else f"{bt.time_us / r.time_us:.2f}x", entry.algorithm if entry else "-"))
        out_rows.append({"size_bytes": size, "time_us": r.time_us, "algbw_GBps": r.algbw, "busbw_GBps": r.busbw,
                         "lower_bound_us": r.lower_bound_us, "gap": r.gap,
                         "best_baseline_us": None if bt is None else bt.time_us,
                         "speedup": None if bt is None else bt.time_us / r.time_us,
                         "plan_algorithm": entry.algorithm if entry else None})
    wrote = None
    if args.output is not None:
        if fmt == "msccl-xml":
            from ccsynth.formats.msccl import plan_to_msccl_xmls

            files = plan_to_msccl_xmls(plan, topology=topo, limits=_msccl_limits(args))
            try:
                os.makedirs(args.output, exist_ok=True)
            except OSError as e:
                raise CCSynthError(f"cannot create directory {args.output!r}: {e.strerror}") from None
            for fname, text in files:
                write_text(os.path.join(args.output, fname), text)
        else:
            from ccsynth.formats.recorded_topology import with_topology

            save_plan(with_topology(plan, topo), args.output)
        wrote = args.output
    if args.json:
        print_json(json_doc("synth.sizes", {
            "topology": topo.name, "collective": coll.kind, "sizes": out_rows, "synthesis_s": seconds,
            "plan": [{"min_bytes": e.min_bytes, "max_bytes": e.max_bytes, "algorithm": e.algorithm} for e in plan.entries],
            "default_margin": margin, "output": wrote, "output_format": fmt if wrote else None,
            "fallbacks": {str(k): list(v) for k, v in sorted(notes.items())}}))
        return 0
    print(f"# {coll.kind} on {topo.name} ({topo.n_ranks} ranks): synthesized for {len(sized.synthesized)} sizes in "
          f"{elapsed_text()}")
    print_table(["size", "synth (us)", "busbw (GB/s)", "gap", "best baseline (us)", "speedup", "plan picks"], rows)
    for size, lines in sorted(notes.items()):
        for note in lines:
            print(f"# {human(size)} fallback: {note}")
    print(f"# the plan keeps the default plan's algorithm at a size unless another is predicted faster by more "
          f"than {100 * margin:g}% (--margin)")
    if wrote:
        what = "MSCCL XML files" if fmt == "msccl-xml" else "plan"
        print(f"wrote {wrote} ({what}, {len(plan.entries)} size range(s))")
    return 0
