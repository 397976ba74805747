"""``ccsynth verify FILE``: prove that a schedule implements its collective.

A multi-dimension phase plan file (``ccsynth.phase_plan``) is proven by its own verifier
(:mod:`ccsynth.commands.phase_plan_files`)."""

from __future__ import annotations

from ccsynth.collectives.schedule import check_writes_cover_outputs
from ccsynth.commands._common import add_json_arg, json_doc, print_json, renamed, file_topology
from ccsynth.commands.phase_plan_files import verify_plan_file

__all__ = ["register", "run"]


def register(sub) -> None:
    p = sub.add_parser("verify", help="verify a schedule file (ccsynth JSON or MSCCL XML) or a phase plan", description=__doc__)
    p.add_argument("file", help="schedule file")
    p.add_argument("-t", "--topology", metavar="T", help="check that every transfer uses a link of this topology (default: the one the file records, where it "
                        "records one that loads)")
    add_json_arg(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from ccsynth.formats.files import file_kind, load_schedule
    from ccsynth.collectives.verify import verify

    if file_kind(args.file) == "phase_plan":
        return verify_plan_file(args)
    sched = load_schedule(args.file, verify=False)
    topo = file_topology(args, sched, args.file, required=False)
    check_writes_cover_outputs(sched)
    report = verify(sched, topo)
    if args.json:
        d = {"file": args.file, "name": sched.name, "collective": sched.collective.to_dict(), "ok": report.ok}
        # "error" is always null here: a schedule that fails raises before (exit 2, the fault on stderr)
        d.update({k: v for k, v in renamed(report.to_dict()).items() if k not in d and k != "error"})
        if topo is not None:
            d["topology"] = topo.name
        print_json(json_doc("verify", d))
    else:
        where = f" on {topo.name}" if topo is not None else ""
        print(
            f"OK: {args.file} ({sched.name!r}) implements {sched.collective.describe()}{where}: "
            f"{report.n_ops} ops, {report.n_transfers} transfers, depth {report.max_depth}"
        )
    return 0
