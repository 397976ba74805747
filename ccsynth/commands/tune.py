"""``ccsynth tune PLAN``: confirm a plan's choices on the machine, run under ``mpiexec``.

A plan from ``ccsynth synth --sizes`` keeps the default plan's algorithm at a
size unless the model predicts another faster by more than the margin; the
model has an error, largest where ranks share cores. ``tune`` measures, at
exactly the sizes where the plan leaves the default plan's algorithm, both
of them side by side through ccsynth's communicator (results checked), and
keeps the candidate only when it is measured faster by more than 5% (the
spread of one schedule measured against itself); elsewhere the plan is
unchanged. Rank 0 prints what it measured and writes the tuned plan.

Example::

    ccsynth synth -t machine.json -c allreduce --sizes 8:16M -o plan.json
    mpiexec -n 4 ccsynth tune plan.json -t machine.json -o tuned.json
"""

from __future__ import annotations

from ccsynth.atomic import check_writable
from ccsynth.commands._common import count_arg, human, json_doc, print_json, print_table, topology_from
from ccsynth.errors import CCSynthError

__all__ = ["register", "run"]


def register(sub) -> None:
    p = sub.add_parser("tune", help="measure a plan's departures from the default plan and keep the faster (mpiexec)",
                       description=__doc__)
    p.add_argument("plan", metavar="PLAN", help="plan file written by ccsynth synth --sizes")
    p.add_argument("-t", "--topology", required=True, metavar="T",
                   help="the topology the plan was made for (the default plan's algorithms are built for it)")
    p.add_argument("-o", "--output", metavar="OUT", default=None, help="write the tuned plan here")
    p.add_argument("-i", "--iterations", type=count_arg(1, "MAX_BENCH_ITERATIONS"), default=None, metavar="I",
                   help="timed iterations of each schedule per size (default 50)")
    p.add_argument("--json", action="store_true", help="print the measurements as JSON")
    p.set_defaults(func=run)


def run(args) -> int:
    from mpi4py import MPI  # optional dependency ([mpi]); tune only runs under mpiexec

    from ccsynth.bench.omb import agree
    from ccsynth.bench.tune import TUNE_ITERS, mpi_timer
    from ccsynth.collectives.plan import load_plan, save_plan
    from ccsynth.synth.tables import TUNE_REL, tune_plan

    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()

    def setup():
        topo = topology_from(args.topology)
        if comm.Get_size() != topo.n_ranks:
            raise CCSynthError(f"ccsynth tune measures on the ranks that run the plan: run it under mpiexec -n "
                               f"{topo.n_ranks} (the topology's ranks), not {comm.Get_size()}")
        if args.output is not None and rank == 0:
            check_writable(args.output)
        plan = load_plan(args.plan)
        _check_plan(plan, args.plan, topo.n_ranks)
        iters = TUNE_ITERS if args.iterations is None else args.iterations
        if iters < 1:
            raise CCSynthError(f"--iterations must be at least 1, got {iters}")
        return topo, plan, iters

    try:
        # agreed on every rank: a file one rank cannot read stops them all, and rank 0 alone says why
        topo, plan, iters = agree(comm, setup)
    except CCSynthError:
        if rank != 0:
            return 2
        raise
    tuned, choices = tune_plan(plan, topo, mpi_timer(comm, iters=iters))
    if comm.Get_rank() != 0:
        return 0
    if args.output is not None:
        from ccsynth.formats.recorded_topology import with_topology

        save_plan(with_topology(tuned, topo), args.output)
    if args.json:
        print_json(json_doc("tune", {"plan": args.plan, "topology": topo.name, "rel": TUNE_REL, "n_iterations": iters,
                                     "choices": [c.to_dict() for c in choices], "output": args.output}))
        return 0
    if not choices:
        print("# the plan runs the default plan's algorithm at every size: nothing to tune")
    else:
        print_table(["collective", "size", "candidate", "us", "against", "us", "keeps"],
                    [(c.departure.kind, human(c.departure.size), c.departure.candidate, c.candidate_us,
                      c.departure.default, c.default_us, c.kept) for c in choices])
        dep = [c for c in choices if c.departure.candidate != "mpi"]
        kept = sum(c.kept == c.departure.candidate for c in dep)
        print(f"# {kept} of {len(dep)} departures from the default plan measured faster by more than "
              f"{100 * TUNE_REL:g}% and kept")
        mpi = [c for c in choices if c.departure.candidate == "mpi" and c.candidate_us == c.candidate_us]
        print(f"# MPI's own collective kept at {sum(c.kept == 'mpi' for c in mpi)} of {len(mpi)} sizes (a schedule "
              f"stays only where measured faster than MPI by more than {100 * TUNE_REL:g}%)")
    if args.output is not None:
        print(f"wrote {args.output} (plan, {len(tuned.entries)} size range(s))")
    return 0


def _check_plan(plan, path: str, n_ranks: int) -> None:
    """A plan ``tune`` can work on: one with schedules for ``n_ranks`` ranks and the decision tables of ``ccsynth
    synth --sizes`` (what tells a departure from the default plan); CCSynthError naming what is missing."""
    ranks = sorted({n for _, n in plan.kinds()})
    if n_ranks not in ranks:
        have = ", ".join(str(n) for n in ranks) or "no"
        raise CCSynthError(f"plan {path!r} has schedules for {have} ranks, the topology {n_ranks}: tune the plan "
                           f"made for this topology (ccsynth synth -t TOPOLOGY --sizes ...)")
    tables = [t for t in plan.meta.get("tables") or [] if t.get("n_ranks") == n_ranks]
    if not tables:
        raise CCSynthError(f"plan {path!r} has no decision tables for {n_ranks} ranks (the candidates' predicted "
                           f"times that ccsynth synth --sizes writes): nothing tells where it departs from the "
                           f"default plan")
