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

import argparse
import dataclasses
import json
import time

from ccsynth.atomic import write_text
from ccsynth.bench.omb import agree
from ccsynth.bench.reshard import ALGOS, format_table, run_reshard_bench
from ccsynth.commands._common import count_arg, human, json_doc, print_json, topology_from
from ccsynth.errors import CCSynthError

__all__ = ["register", "register_bench", "add_reshard_args", "task_from_args", "run", "run_bench"]


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
    p.add_argument("--split", type=count_arg(1, "MAX_CHUNK_FACTOR"), default=None, metavar="K",
                   help="cut every piece into up to K slabs so forwards pipeline (default: up to 8 slabs of at least 1 MiB for broadcast and milp on a topology, "
                        "1 for naive)")
    p.add_argument("--solver", default="highs", choices=("highs", "cbc", "auto"), help="MILP solver (default highs)")
    p.add_argument("--time-limit", type=_seconds, default=10.0, metavar="SEC", help="MILP time limit (default 10 s)")
    if planner:
        p.add_argument("--planner", default="auto", choices=("auto", "alltoallv", "naive", "broadcast", "milp"),
                       help="auto (the default: of alltoallv, naive and broadcast the one the executor model predicts "
                            "fastest), alltoallv (one MPI_Alltoallv, senders balanced over replicas), naive (point "
                            "to point from the first replica), broadcast (Alpa's load-balanced broadcasts) or milp "
                            "(optimal senders, greedy warm start)")


#: the longest MILP time limit taken (a day): beyond, a typo
_MAX_TIME_LIMIT_S = 86400.0


def _seconds(text: str) -> float:
    """argparse type of ``--time-limit``: seconds, more than 0 and at most a day."""
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < v <= _MAX_TIME_LIMIT_S:  # NaN too
        raise argparse.ArgumentTypeError(f"{text!r} is out of range: more than 0 and at most {_MAX_TIME_LIMIT_S:g} s")
    return v


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
    from ccsynth.synth.reshard.plan import task_of_schedule
    from ccsynth.synth.reshard.planner import plan_reshard
    from ccsynth.synth.simulate import simulate

    topo = topology_from(args.topology)
    task = task_from_args(args, topology=topo)
    opts = solver_options(args)
    t0 = time.perf_counter()
    sched = plan_reshard(task, topo, planner=args.planner, options=opts, split=args.split)
    seconds = time.perf_counter() - t0
    report = verify(sched, topo)  # raises (exit 2) naming the fault: a plan is never written unverified
    res = simulate(sched, topo, task.nbytes)
    if args.output is not None:
        from ccsynth.formats.recorded_topology import with_topology

        save_schedule(with_topology(sched, topo), args.output)
    figures = json_doc("reshard", {
        "topology": topo.name,
        "collective": {"kind": "reshard", "task": task.to_dict(), "pieces": len(task_of_schedule(sched).pieces)},
        "planner": sched.meta.get("planner", args.planner),
        "requested": args.planner,
        "executor": sched.meta.get("executor", "dataflow"),
        "run_predicted_us": sched.meta.get("predicted_us"),
        "candidates_us": sched.meta.get("candidates_us"),
        "size_bytes": task.nbytes,
        "time_us": res.time_us,
        "algbw_GBps": res.algbw,
        "lower_bound_us": res.lower_bound_us,
        "gap": res.gap,
        "bound": res.bound_which,
        "planning_s": seconds,
        "n_ops": len(sched.ops),
        "verified": report.ok,
        "output": args.output,
        "output_format": "json" if args.output else None,
    })
    if args.json:
        print_json(figures)
        return 0
    chosen = sched.meta.get("planner", args.planner)
    print(f"{chosen} plan{' (auto)' if args.planner == 'auto' else ''}: {task.describe()} on {topo.name} "
          f"({human(task.nbytes)}): "
          f"{sched.collective.describe()}, {len(sched.ops)} ops, verified, planned in {seconds:.2f} s")
    print(f"  predicted time {res.time_us:.3f} us   algbw {res.algbw:.2f} GB/s")
    print(f"  lower bound    {res.lower_bound_us:.3f} us   gap {res.gap:.3f}x   ({res.bound_which})")
    if "predicted_us" in sched.meta:
        print(f"  predicted run  {sched.meta['predicted_us']:.3f} us   (as the runtime runs it: "
              f"{sched.meta.get('executor', 'dataflow')}; ccsynth bench reshard -t measures it)")
    for name, us in (sched.meta.get("candidates_us") or {}).items():
        print(f"    candidate {name:<10} {us:.3f} us")
    if args.output:
        print(f"wrote {args.output} (ccsynth JSON)")
    return 0


# ------------------------------------------------------------- ccsynth bench reshard
def register_bench(names) -> None:
    """``ccsynth bench reshard`` (added to ``ccsynth bench``'s sub-commands)."""
    p = names.add_parser("reshard", help="time cross-mesh resharding (ccsynth planners and MPI Alltoallv)",
                         description="Time a real resharding under mpiexec, OMB-style; the options of ccsynth "
                                     "reshard name it. Example: mpiexec -n 8 ccsynth bench reshard --shape 64x64x16 "
                                     "--src-mesh 2x2 --src-spec S0,R,R --dst-mesh 2x2 --dst-spec R,S1,R -c "
                                     "--algo naive,broadcast,milp,mpi")
    add_reshard_args(p, planner=False)
    p.add_argument("-t", "--topology", default=None, metavar="T",
                   help="topology the planners balance over and predict on, e.g. a profile of this machine "
                        "(ccsynth topo profile): each row then shows its predicted time and Meas/Pred "
                        "(default: every rank its own host, no prediction)")
    p.add_argument("--algo", default="naive,broadcast,alltoallv,auto,mpi", metavar="A[,B...]",
                   help="naive, broadcast, milp, alltoallv, auto (ccsynth.reshard with that planner), mpi (the "
                        "bench's own Alltoallv); default all but milp; all run interleaved, iteration by iteration")
    p.add_argument("-i", "--iterations", type=count_arg(1, "MAX_BENCH_ITERATIONS"), default=20, metavar="N",
                   help="timed iterations (default 20)")
    p.add_argument("-x", "--warmup", type=count_arg(0, "MAX_BENCH_ITERATIONS"), default=2, metavar="N",
                   help="warm-up iterations (default 2)")
    p.add_argument("-c", "--validation", action="store_true", help="check every destination shard (Pass/Fail)")
    p.add_argument("--buffer", choices=("numpy", "cupy"), default="numpy", help="where shards live (default numpy)")
    p.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    p.set_defaults(func=run_bench)


def run_bench(args) -> int:
    from mpi4py import MPI  # bench only: the planning command never starts MPI

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()

    def setup():
        algos = [a.strip() for a in args.algo.split(",") if a.strip()]
        bad = [a for a in algos if a not in ALGOS]
        if bad or not algos:
            raise CCSynthError(f"--algo {args.algo!r}: choose from {', '.join(ALGOS)}")
        if args.iterations < 1 or args.warmup < 0:
            raise CCSynthError("-i must be at least 1 and -x at least 0")
        topo = topology_from(args.topology) if args.topology else None
        if topo is not None and topo.n_ranks != comm.Get_size():
            raise CCSynthError(f"topology {topo.name!r} has {topo.n_ranks} ranks; mpiexec started {comm.Get_size()}")
        return algos, topo, task_from_args(args, topology=topo, n_ranks=comm.Get_size())

    try:
        algos, topo, task = agree(comm, setup)
    except CCSynthError:
        if rank != 0:
            return 2
        raise
    if args.split is not None:
        task = dataclasses.replace(task, split=args.split)
    rows = []
    say = print if rank == 0 else (lambda *a, **k: None)
    header = format_table(task, [], validate=args.validation, n_ranks=comm.Get_size())
    for line in header:
        say(line, flush=True)
    for row in run_reshard_bench(comm, task, algos, iters=args.iterations, warmup=args.warmup,
                                 validate=args.validation, buffer=args.buffer, topology=topo,
                                 options=solver_options(args)):
        rows.append(row)
        say(format_table(task, [row], validate=args.validation, n_ranks=comm.Get_size())[3], flush=True)
    for line in format_table(task, rows, validate=args.validation, n_ranks=comm.Get_size())[3 + len(rows):]:
        say(line)
    if rank == 0 and args.json:
        write_text(args.json, print_json_text([dataclasses.asdict(r) for r in rows], task), what="results")
    return 1 if any(r.valid is False for r in rows) else 0


def print_json_text(rows, task) -> str:
    doc = json_doc("bench.reshard", {"benchmark": "reshard", "task": task.to_dict(), "rows": rows})
    return json.dumps(doc, indent=1) + "\n"
