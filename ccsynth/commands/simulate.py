"""``ccsynth simulate FILE``: predicted time, algbw/busbw and gap to the lower bound.

On a topology of two or more network dimensions it also reports, per size, each
dimension's utilization: the bytes a rank sends in that dimension over
what the dimension could carry in the simulated time
(:mod:`ccsynth.synth.multidim.utilization`).

A multi-dimension phase plan file (``ccsynth.phase_plan``) is priced by the
dimension-level model its scheduler used, in the file's own task order, at
the size it records unless told otherwise (:mod:`ccsynth.commands.phase_plan_files`).
"""

from __future__ import annotations

import math
import os

from ccsynth.collectives.schedule import check_writes_cover_outputs
from ccsynth.commands._common import (add_json_arg, add_size_args, human, json_doc, print_json, print_table, renamed,
                                      sizes_from, file_topology)
from ccsynth.commands.phase_plan_files import simulate_plan_file
from ccsynth.errors import CCSynthError
from ccsynth.limits import check_min as check_limit_min

__all__ = ["register", "run"]


def register(sub) -> None:
    p = sub.add_parser(
        "simulate",
        help="simulate a schedule in the alpha-beta model with contention",
        description=__doc__ + " The schedule is verified first.",
    )
    p.add_argument("file", help="schedule file (ccsynth JSON or MSCCL XML) or phase plan (ccsynth.phase_plan)")
    p.add_argument("-t", "--topology", metavar="T", help="topology to simulate on (default: the one the schedule names)")
    add_size_args(p, default_help="the size the schedule file records, as a resharding plan does; else 1M")
    p.add_argument("--local-bw", type=float, default=None, metavar="GBPS", help="charge local copies/reductions at this bandwidth (default: free)")
    p.add_argument("--timeline", metavar="FILE", default=None,
                   help="draw every connection's transfers over time (a Gantt chart: .png, .svg, .pdf; needs "
                        "matplotlib) or write the trace as JSON (.json); one size only")
    add_json_arg(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from ccsynth.formats.files import file_kind, load_schedule
    from ccsynth.synth.multidim.utilization import dimension_utilization
    from ccsynth.synth.simulate import simulate

    if file_kind(args.file) == "phase_plan":
        return simulate_plan_file(args)
    if args.local_bw is not None:
        if not math.isfinite(args.local_bw) or args.local_bw <= 0:
            raise CCSynthError(f"--local-bw must be a positive number of GB/s, got {args.local_bw!r}")
        check_limit_min("--local-bw", args.local_bw, "MIN_BANDWIDTH_GBPS")
    sizes = sizes_from(args)
    timeline = args.timeline
    if timeline is not None:  # a bad suffix, a missing matplotlib or many sizes are said before any work
        from ccsynth.atomic import check_writable
        from ccsynth.bench.plot import require_matplotlib
        from ccsynth.bench.timeline import IMAGE_SUFFIXES

        suffix = os.path.splitext(timeline)[1].lower()
        if suffix not in IMAGE_SUFFIXES + (".json",):
            raise CCSynthError(f"--timeline {timeline!r}: name a .json file (the trace) or an image "
                               f"({', '.join(IMAGE_SUFFIXES)})")
        if suffix != ".json":
            require_matplotlib("--timeline with an image")
        if len(sizes) != 1:
            raise CCSynthError(f"--timeline draws one size; --sizes gave {len(sizes)}")
        check_writable(timeline, "timeline")
    sched = load_schedule(args.file, verify=False)
    topo = file_topology(args, sched, args.file)
    if args.size is None and args.sizes is None and isinstance(sched.meta.get("size_bytes"), int):
        sizes = [sched.meta["size_bytes"]]  # a resharding plan: the tensor's size unless told otherwise
    from ccsynth.collectives.verify import verify

    check_writes_cover_outputs(sched)
    verify(sched, topo)
    results = [simulate(sched, topo, s, local_bw=args.local_bw, trace=timeline is not None) for s in sizes]
    multi = sum(d.size > 1 for d in topo.dims) >= 2  # a network of several dimensions (dgx1's one NVLink: no)
    dims = [dimension_utilization(sched, topo, r.size_bytes, r.time_us) for r in results] if multi else None
    wrote = None
    if timeline is not None:
        from ccsynth.bench.timeline import write_timeline

        wrote = f"wrote timeline {timeline}: {write_timeline(results[0], sched, timeline)}"
    if args.json:
        out = [renamed(r.to_dict()) for r in results]
        if dims is not None:
            for o, d in zip(out, dims):
                o["dimensions"] = [u.to_dict() for u in d]
        print_json(json_doc("simulate", {"file": args.file, "schedule": sched.name, "topology": topo.name,
                                         "collective": sched.collective.to_dict(), "results": out,
                                         **({"timeline": timeline} if timeline else {})}))
        return 0
    print(f"# {sched.name}: {sched.collective.describe()} on {topo.name}")
    print_table(
        ["size", "time (us)", "algbw (GB/s)", "busbw (GB/s)", "bound (us)", "gap"],
        [(human(r.size_bytes), r.time_us, r.algbw, r.busbw, r.lower_bound_us, f"{r.gap:.2f}x") for r in results],
    )
    if dims is not None:
        names = [u.name for u in dims[0]]
        print("# per-dimension utilization (bytes a rank sends there / what the dimension carries in that time)")
        print_table(["size"] + names,
                    [(human(r.size_bytes), *(f"{u.utilization:.0%}" for u in d))
                     for r, d in zip(results, dims)])
    if wrote:
        print(wrote)
    return 0
