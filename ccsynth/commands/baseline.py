"""``ccsynth baseline ALGO``: build a classic algorithm as a verified schedule."""

from __future__ import annotations

from ccsynth.atomic import check_writable
from ccsynth.collectives.schedule import save_schedule
from ccsynth.commands._common import add_collective_args, add_json_arg, add_topology_arg, collective_from, json_doc, print_json, print_table, topology_from

__all__ = ["register", "run"]


def register(sub) -> None:
    p = sub.add_parser(
        "baseline",
        help="build a baseline algorithm (ring, recursive doubling, ...) as a schedule",
        description=__doc__ + " Use 'list' as ALGO to see the algorithms.",
    )
    p.add_argument("algo", metavar="ALGO", help="ring, recursive_doubling, recursive_halving, direct, binomial_tree, hierarchical, or 'list'")
    add_topology_arg(p, required=False)
    add_collective_args(p, required=False)
    p.add_argument("-o", "--output", help="write the schedule here (ccsynth JSON)")
    add_json_arg(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from ccsynth.synth.baselines import BASELINES, applicable_baselines, make_baseline

    if args.algo == "list":
        rows = [(b.name, ", ".join(b.kinds), b.description) for b in BASELINES.values()]
        if args.topology and args.collective:
            topo = topology_from(args.topology)
            ok = set(applicable_baselines(collective_from(args, topo.n_ranks), topo))
            rows = [r for r in rows if r[0] in ok]
        if args.json:
            print_json(json_doc("baseline.list", {"algorithms": [
                {"name": n, "collectives": k.split(", "), "description": d} for n, k, d in rows]}))
        else:
            print_table(["algorithm", "collectives", "description"], rows)
        return 0
    if not args.topology or not args.collective:
        from ccsynth.errors import CCSynthError

        raise CCSynthError("baseline needs --topology and --collective (or ALGO 'list')")
    from ccsynth.collectives.spec import canonical_kind
    from ccsynth.synth.baselines import get_baseline, min_chunk_factor

    if args.output is not None:
        check_writable(args.output, "schedule")  # before the work, not after it
    topo = topology_from(args.topology)
    get_baseline(args.algo)  # unknown names fail here, before anything else
    default = min_chunk_factor(args.algo, canonical_kind(args.collective), topo)
    sched = make_baseline(args.algo, collective_from(args, topo.n_ranks, default), topo)
    if args.output is not None:
        from ccsynth.formats.recorded_topology import with_topology

        save_schedule(with_topology(sched, topo), args.output)
    info = {
        "algorithm": args.algo,
        "topology": topo.name,
        "collective": sched.collective.to_dict(),
        "n_ops": len(sched.ops),
        "n_transfers": sum(1 for o in sched.ops if o.kind == "send"),
        "scratch_chunks": sched.scratch_chunks,
        "verified": True,
        "output": args.output,
    }
    if args.json:
        print_json(json_doc("baseline", info))
    else:
        print(f"{args.algo} {sched.collective.describe()} on {topo.name}: {info['n_ops']} ops, {info['n_transfers']} transfers, verified")
        if args.output is not None:
            print(f"wrote {args.output}")
    return 0
