"""``ccsynth.synthesize``: the one call from a topology to what the communicator runs.

::

    import ccsynth
    sched = ccsynth.synthesize("ndv2x2", "allreduce", size="64M")       # a Schedule, tuned for 64 MiB
    plan = ccsynth.synthesize("ndv2x2", "allreduce", sizes="1K:1G")     # a Plan: the fastest per size range
    comm = ccsynth.Communicator(MPI.COMM_WORLD, plan=plan)             # or plan=sched, or plan="plan.json"

``topology`` is a :class:`~ccsynth.topologies.model.Topology` or anything
``ccsynth.get_topology`` reads (a catalog name such as ``"ring:8"`` or
``"ndv2x2"``, a topology file, a TACCL profile); ``collective`` a
:class:`~ccsynth.collectives.spec.Collective` or a name (``"allreduce"``,
``"reduce-scatter"``, ...) on the topology's rank count. ``size`` gives one
message size (bytes or a string such as ``"64M"``) and returns the fastest
schedule there (a synthesized one, or a baseline when that simulates faster:
``schedule.meta["chosen"]``); ``sizes`` gives several (a list, or a range
``"1K:1G"`` of powers of two, or ``"1K,1M"``) and returns a
:class:`~ccsynth.collectives.plan.Plan` that picks per size range. Neither:
one schedule for 1 MiB. ``sketch``, ``options`` (a
:class:`~ccsynth.synth.solver.SolverOptions`), ``time_limit`` (seconds per
solver call) and ``contiguity`` are the synthesizer's.

This is the same computation as ``ccsynth synth`` (``--size`` /
``--sizes``) with a ccsynth JSON output: the candidates are judged in the
form they take (:mod:`ccsynth.formats.written`; for the schedule the
communicator runs, the schedule itself); the command line writes the result
to a file, this returns it. The result records its topology
(:mod:`ccsynth.formats.recorded_topology`): saved, it simulates and verifies
without naming the topology again.
"""

from __future__ import annotations

from collections.abc import Sequence

from ccsynth.collectives.plan import Plan
from ccsynth.collectives.schedule import Schedule
from ccsynth.collectives.spec import Collective
from ccsynth.errors import CollectiveError, PlanError
from ccsynth.formats.files import get_topology, load_sketch
from ccsynth.formats.recorded_topology import with_topology
from ccsynth.formats.written import best_written, written_judge
from ccsynth.synth.sized_plan import synthesize_plan
from ccsynth.synth.tables import DEFAULT_MARGIN
from ccsynth.synth.solver import SolverOptions
from ccsynth.synth.synthesize import SUPPORTED, synthesize_candidates
from ccsynth.topologies.model import Topology
from ccsynth.units import parse_size, parse_sizes

__all__ = ["synthesize"]


def synthesize(
    topology,
    collective,
    *,
    size: int | str | None = None,
    sizes: Sequence[int | str] | str | None = None,
    sketch=None,
    options: SolverOptions | None = None,
    time_limit: float | None = None,
    contiguity: bool = True,
    margin: float | str | None = DEFAULT_MARGIN,
) -> Schedule | Plan:
    """A verified Schedule (``size=``, or neither) or a Plan (``sizes=``); see the module doc.

    ``margin`` (plans only): a candidate replaces the default plan's algorithm
    at a size only when predicted faster by more than this fraction
    (default ``"auto"``: :func:`~ccsynth.synth.tables.margin_for` the topology, 70% on a profiled
    machine run by ccsynth's executor, 25% elsewhere; None: the fastest wins).

    Example:
        >>> import ccsynth
        >>> s = ccsynth.synthesize("fully_connected:4", "allgather", size="64K")
        >>> s.collective.kind, s.n_ranks, s.meta["verified"]
        ('allgather', 4, True)
    """
    if size is not None and sizes is not None:
        raise PlanError("give size= (one schedule) or sizes= (a plan), not both")
    topo = topology if isinstance(topology, Topology) else get_topology(topology)
    if isinstance(collective, Collective):
        coll = collective
        if coll.n_ranks != topo.n_ranks:
            raise CollectiveError(f"{coll.describe()} does not fit topology {topo.name} ({topo.n_ranks} ranks)")
    else:
        coll = Collective(collective, topo.n_ranks)
    if coll.kind not in SUPPORTED:
        raise CollectiveError(f"ccsynth synthesizes {', '.join(SUPPORTED)}; got {coll.kind}")
    if isinstance(sketch, str):
        sketch = load_sketch(sketch)
    if time_limit is not None:
        if options is not None:
            raise PlanError("give time_limit= or options=, not both")
        options = SolverOptions(time_limit=time_limit)
    if sizes is not None:
        values = parse_sizes(sizes) if isinstance(sizes, str) else [parse_size(s) for s in sizes]
        return with_topology(synthesize_plan(topo, coll, values, sketch, options, contiguity=contiguity,
                                             default_margin=margin, judge=written_judge("json")), topo)
    nbytes = parse_size(size) if size is not None else None
    if nbytes is not None and nbytes <= 0:
        raise PlanError(f"size must be positive, got {size!r}")
    ranked = synthesize_candidates(topo, coll, sketch, options, nbytes, contiguity=contiguity)
    # what the communicator runs is the schedule itself; it records its topology, so that a saved file is used alone
    return with_topology(best_written(ranked, fmt="json").schedule, topo)
