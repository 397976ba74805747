"""``ccsynth simulate FILE``: predicted time, algbw/busbw and gap to the lower bound."""

from __future__ import annotations

import math

from ccsynth.collectives.schedule import check_writes_cover_outputs
from ccsynth.commands._common import (add_json_arg, add_size_args, human, json_doc, print_json, print_table, renamed,
                                      sizes_from, topology_from)
from ccsynth.errors import CCSynthError
from ccsynth.limits import check_min as check_limit_min


def register(sub) -> None:
    p = sub.add_parser(
        "simulate",
        help="simulate a schedule in the alpha-beta model with contention",
        description=__doc__ + " The schedule is verified first.",
    )
    p.add_argument("file", help="schedule file (ccsynth JSON or MSCCL XML)")
    p.add_argument("-t", "--topology", metavar="T", help="topology to simulate on (default: the one the schedule names)")
    add_size_args(p)
    p.add_argument("--local-bw", type=float, default=None, metavar="GBPS", help="charge local copies/reductions at this bandwidth (default: free)")
    add_json_arg(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from ccsynth.formats.files import load_schedule
    from ccsynth.synth.simulate import simulate

    if args.local_bw is not None:
        if not math.isfinite(args.local_bw) or args.local_bw <= 0:
            raise CCSynthError(f"--local-bw must be a positive number of GB/s, got {args.local_bw!r}")
        check_limit_min("--local-bw", args.local_bw, "MIN_BANDWIDTH_GBPS")
    sizes = sizes_from(args)
    spec = args.topology or None
    sched = load_schedule(args.file, verify=False)
    if spec is None:
        if not sched.topology:
            raise CCSynthError(f"{args.file} names no topology; pass --topology")
        spec = sched.topology
    topo = topology_from(spec)
    from ccsynth.collectives.verify import verify

    check_writes_cover_outputs(sched)
    verify(sched, topo)
    results = [simulate(sched, topo, s, local_bw=args.local_bw) for s in sizes]
    if args.json:
        print_json(json_doc("simulate", {"file": args.file, "schedule": sched.name, "topology": topo.name,
                                         "collective": sched.collective.to_dict(),
                                         "results": [renamed(r.to_dict()) for r in results]}))
        return 0
    print(f"# {sched.name}: {sched.collective.describe()} on {topo.name}")
    print_table(
        ["size", "time (us)", "algbw (GB/s)", "busbw (GB/s)", "bound (us)", "gap"],
        [(human(r.size_bytes), r.time_us, r.algbw, r.busbw, r.lower_bound_us, f"{r.gap:.2f}x") for r in results],
    )
    return 0
