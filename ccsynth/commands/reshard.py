"""``ccsynth reshard``: plan a cross-mesh resharding, verify it, predict its time against the lower bound.

The tensor (``--shape``, ``--dtype``) moves from the source mesh and spec to
the destination mesh and spec (Alpa strings ``S0,R,R`` or JAX-like
``x,None,y``). ``--src-ranks``/``--dst-ranks`` place the meshes on the
topology's ranks (default: the source mesh on the first ranks, the
destination mesh right after it when the topology has enough ranks, else on
the same ranks). The plan is a verified schedule; ``-o`` writes it as
ccsynth JSON, which ``ccsynth verify`` and ``ccsynth simulate`` read.
"""

from __future__ import annotations

import time

from ccsynth.commands._common import human, print_json, topology_from
from ccsynth.errors import CCSynthError

__all__ = ["register", "add_reshard_args", "task_from_args", "run"]


def add_reshard_args(p, *, planner: bool = True) -> None:
    """The options that name a resharding (shared with ``ccsynth bench reshard``)."""
    p.add_argument("--shape", required=True, metavar="AxBxC", help="tensor shape, e.g. 1024x1024x512")
    p.add_argument("--dtype", default="float32", help="element type (default float32)")
    p.add_argument("--src-mesh", required=True, metavar="AxB", help="source device mesh, e.g. 2x4")
    p.add_argument("--src-spec", required=True, metavar="SPEC", help="source sharding: S0,R,R (Alpa) or x,None,None")
    p.add_argument("--dst-mesh", required=True, metavar="AxB", help="destination device mesh")
    p.add_argument("--dst-spec", required=True, metavar="SPEC", help="destination sharding")
    p.add_argument("--src-ranks", default=None, metavar="LIST", help="ranks of the source mesh, e.g. 0-7")
    p.add_argument("--dst-ranks", default=None, metavar="LIST", help="ranks of the destination mesh, e.g. 8-15")
    p.add_argument("--split", type=int, default=None, metavar="K",
                   help="cut every piece into up to K slabs so forwards pipeline (default: up to 8 slabs of at least 1 MiB for broadcast and milp, "
                        "1 for naive)")
    p.add_argument("--solver", default="highs", choices=("highs", "cbc", "auto"), help="MILP solver (default highs)")
    p.add_argument("--time-limit", type=float, default=10.0, metavar="SEC", help="MILP time limit (default 10 s)")
    if planner:
        p.add_argument("--planner", default="broadcast", choices=("naive", "broadcast", "milp"),
                       help="naive (point to point from the first replica), broadcast (Alpa's load-balanced "
                            "broadcasts, the default) or milp (optimal senders, greedy warm start)")


def register(sub) -> None:
    p = sub.add_parser("reshard", help="plan a cross-mesh resharding (Alpa-style) and predict its time",
                       description=__doc__)
    add_reshard_args(p)
    p.add_argument("-t", "--topology", required=True, metavar="T", help="topology (catalog name or file)")
    p.add_argument("-o", "--output", default=None, metavar="FILE", help="write the plan (ccsynth JSON)")
    p.add_argument("--json", action="store_true", help="print the figures as JSON (keys as ccsynth synth --json)")
    p.set_defaults(func=run)


def task_from_args(args, *, topology=None, n_ranks: int | None = None):
    """The :class:`~ccsynth.synth.reshard.task.ReshardTask` the options name (meshes placed)."""
    from ccsynth.synth.reshard.layout import parse_shape
    from ccsynth.synth.reshard.planner import place_meshes
    from ccsynth.synth.reshard.task import ReshardTask

    if args.split is not None and args.split < 1:
        raise CCSynthError(f"--split must be a positive integer, got {args.split}")
    shape = parse_shape(args.shape)
    sm, dm = place_meshes(args.src_mesh, args.dst_mesh, topology=topology, src_ranks=args.src_ranks,
                          dst_ranks=args.dst_ranks, n_ranks=n_ranks)
    return ReshardTask.of(shape, args.dtype, sm, args.src_spec, dm, args.dst_spec)


def solver_options(args):
    from ccsynth.synth.solver import SolverOptions

    return SolverOptions(solver=args.solver, time_limit=args.time_limit)


def run(args) -> int:
    from ccsynth.collectives.schedule import save_schedule
    from ccsynth.collectives.verify import verify
    from ccsynth.synth.reshard.planner import plan_reshard
    from ccsynth.synth.simulate import simulate

    topo = topology_from(args.topology)
    task = task_from_args(args, topology=topo)
    opts = solver_options(args)
    t0 = time.perf_counter()
    sched = plan_reshard(task, topo, planner=args.planner, options=opts, split=args.split)
    seconds = time.perf_counter() - t0
    verify(sched, topo)
    res = simulate(sched, topo, task.nbytes)
    if args.output is not None:
        save_schedule(sched, args.output)
    figures = {
        "topology": topo.name,
        "collective": {"kind": "reshard", "task": task.to_dict(), "pieces": len(sched.collective.pieces)},
        "planner": args.planner,
        "size_bytes": task.nbytes,
        "time_us": res.time_us,
        "algbw": res.algbw,
        "lower_bound_us": res.lower_bound_us,
        "gap": res.gap,
        "bound": res.bound_which,
        "planning_seconds": seconds,
        "ops": len(sched.ops),
        "verified": True,
        "output": args.output,
        "format": "json" if args.output else None,
    }
    if args.json:
        print_json(figures)
        return 0
    print(f"{args.planner} plan: {task.describe()} on {topo.name} ({human(task.nbytes)}): "
          f"{len(sched.collective.pieces)} pieces, {len(sched.ops)} ops, verified, planned in {seconds:.2f} s")
    print(f"  predicted time {res.time_us:.3f} us   algbw {res.algbw:.2f} GB/s")
    print(f"  lower bound    {res.lower_bound_us:.3f} us   gap {res.gap:.3f}x   ({res.bound_which})")
    if args.output:
        print(f"wrote {args.output} (ccsynth JSON)")
    return 0
