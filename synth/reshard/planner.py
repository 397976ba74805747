"""Plan a resharding: place the meshes, pick a planner, return a Schedule.

:func:`plan_reshard` runs one of :data:`PLANNERS` on a
:class:`~.task.ReshardTask` and returns the plan as a
:class:`~ccsynth.collectives.schedule.Schedule` of the task's explicit
collective (verify it with :func:`ccsynth.collectives.verify.verify`,
simulate it with :func:`ccsynth.synth.simulate.simulate` at the tensor's
byte size). With a topology, the broadcast and MILP planners build a few
variants of their plan (the MILP's solution and its greedy warm start; each
also *funnelled*, with one sender and one entry per NIC group; each with and
without sending to other hosts one piece at a time per rank) and keep the
one the simulator predicts fastest, so the MILP plan is never slower than
the broadcast plan. Funnelling is what a pipelined broadcast needs where
destination hosts relay to each other (a slice with many destination
hosts): with every rank behind a NIC sending its own slabs at once, the
first slabs all arrive after as many slab times as there are ranks, and
the relays start that late; with one stream per NIC the first slab arrives
after one slab time and is passed on while the rest flows, as a ring
broadcast pipelines its chunks hop by hop.

:func:`place_meshes` puts the meshes on a topology's ranks the
way the CLI does by default: the source mesh on the first ranks, the
destination mesh on the ranks right after it when the topology has enough,
else on the same ranks.

Example:
    >>> from ccsynth.collectives.verify import is_valid
    >>> t = ReshardTask.of((4, 4), "float32", (2,), "S0,R", (2,), "R,S0")
    >>> s = plan_reshard(t, planner="broadcast", split=1)
    >>> is_valid(s), len(s.ops)
    (True, 6)
"""

from __future__ import annotations

import logging
import math
import time

from ccsynth.collectives.schedule import Schedule
from ccsynth.errors import LayoutError
from ccsynth.errors import ScheduleError
from ccsynth.synth.reshard.alltoallv import EXECUTOR, alltoallv_hops
from ccsynth.synth.reshard.broadcast import broadcast_hops
from ccsynth.synth.reshard.mesh import DeviceMesh, parse_mesh_shape, parse_rank_list
from ccsynth.synth.reshard.milp import milp_hops
from ccsynth.synth.reshard.naive import naive_hops
from ccsynth.synth.reshard.plan import Fabric, schedule_of
from ccsynth.synth.reshard.task import ReshardTask
from ccsynth.synth.simulate import simulate
from ccsynth.synth.solver import SolverOptions
from ccsynth.tolerance import is_less
from ccsynth.topologies.model import Topology

__all__ = ["PLANNERS", "AUTO_CANDIDATES", "AUTO_MARGIN", "DEFAULT_SPLIT", "MIN_SLAB_BYTES", "default_split", "DEFAULT_MILP_OPTIONS", "plan_reshard", "place_meshes"]

log = logging.getLogger(__name__)

PLANNERS = ("naive", "broadcast", "milp", "alltoallv", "auto")
#: what ``auto`` chooses among, by the executor model's prediction (the MILP is left out: 10 s of planning)
AUTO_CANDIDATES = ("alltoallv", "naive", "broadcast")
#: ``auto`` leaves MPI's own exchange (``alltoallv``) only for a plan predicted faster by more than this share
#: (as a collective's plan keeps the default unless another is predicted faster by a margin): on 2 ranks at
#: 16 MiB a naive plan predicted 0.06% faster ran 1.6x slower
AUTO_MARGIN = 0.05
#: most slabs per piece for the plans that forward (broadcast, milp): enough to hide the last hop's tail
DEFAULT_SPLIT = 16
#: ... but no slab smaller than this (smaller messages pay their per-message costs for no gain)
MIN_SLAB_BYTES = 1 << 20


def default_split(task: ReshardTask) -> int:
    """Slabs per piece: up to :data:`DEFAULT_SPLIT`, none under :data:`MIN_SLAB_BYTES`."""
    largest = max((p.size for p in task.with_split(1).pieces), default=0) * task.itemsize
    return max(1, min(DEFAULT_SPLIT, largest // MIN_SLAB_BYTES))
#: the MILP's default: HiGHS with a 10 s limit (the greedy warm start keeps a cut-short solve good)
DEFAULT_MILP_OPTIONS = SolverOptions(solver="highs", time_limit=10.0)


def place_meshes(src_shape, dst_shape, *, topology: Topology | None = None, src_ranks=None, dst_ranks=None,
                 n_ranks: int | None = None) -> tuple[DeviceMesh, DeviceMesh]:
    """Both meshes on ranks (hosts from ``topology``); see the module docstring for the defaults."""
    ss, ds = parse_mesh_shape(src_shape), parse_mesh_shape(dst_shape)
    n = topology.n_ranks if topology is not None else n_ranks
    a, b = math.prod(ss), math.prod(ds)
    sr = parse_rank_list(src_ranks) if src_ranks is not None else tuple(range(a))
    if dst_ranks is not None:
        dr = parse_rank_list(dst_ranks)
    elif src_ranks is None and (n is None or a + b <= n):
        dr = tuple(range(a, a + b))
    else:
        dr = tuple(range(b))
    for what, ranks, size, shape in (("source", sr, a, ss), ("destination", dr, b, ds)):
        if len(ranks) != size:
            raise LayoutError(f"{what} mesh {'x'.join(map(str, shape))} has {size} devices but its rank list has "
                              f"{len(ranks)} ranks")
        if n is not None and max(ranks) >= n:
            where = f"topology {topology.name!r}" if topology is not None else "the communicator"
            raise LayoutError(f"{what} mesh uses rank {max(ranks)}, but {where} has {n} ranks")
    if topology is not None:
        return DeviceMesh.on_topology(ss, sr, topology), DeviceMesh.on_topology(ds, dr, topology)
    return DeviceMesh(ss, sr), DeviceMesh(ds, dr)


def plan_reshard(task: ReshardTask, topology: Topology | None = None, *, planner: str = "broadcast",
                 n_ranks: int | None = None, options: SolverOptions | None = None,
                 split: int | None = None) -> Schedule:
    """The plan of ``planner`` for ``task`` (on ``topology``'s ranks, else on ``n_ranks``).

    ``split`` cuts every piece into up to that many slabs first
    (:meth:`ReshardTask.with_split`), so that forwarded pieces pipeline;
    by default :func:`default_split` for the broadcast and MILP plans on a
    topology, none for the naive plan or without a topology (slabs pay off
    where forwards cross slow links; on one shared-memory host, measured
    with MPICH, 16 messages of 4 MiB took 10x the time of 2 of 32 MiB). ``meta`` of the result records the planner and its planning time in
    seconds (``plan_seconds``). Raises :class:`~ccsynth.errors.LayoutError`
    for an unknown planner or meshes that do not fit.
    """
    if planner not in PLANNERS:
        raise LayoutError(f"unknown resharding planner {planner!r}; choose one of: {', '.join(PLANNERS)}")
    n = topology.n_ranks if topology is not None else (n_ranks or max(task.ranks) + 1)
    if max(task.ranks) >= n:
        raise LayoutError(f"the meshes use rank {max(task.ranks)}, but there are only {n} ranks")
    if planner == "auto":
        return _auto(task, topology, n, options, split)
    if planner == "alltoallv":
        t0 = time.perf_counter()
        sched = schedule_of(task.with_split(1), alltoallv_hops(task.with_split(1)), n_ranks=n, name="reshard-alltoallv",
                            topology=topology.name if topology is not None else "", planner=planner, executor=EXECUTOR)
        return _priced(sched, topology, time.perf_counter() - t0)
    if split is None:
        split = 1 if planner == "naive" or topology is None else default_split(task)
    task = task.with_split(split)
    t0 = time.perf_counter()
    fabric = Fabric.of(topology, task, n)
    # funnelled variants differ only where ranks share a NIC (not with a NIC per GPU, nor without a topology)
    funnel = topology is not None and len(set(fabric.nic)) < n
    if planner == "naive":
        candidates = [naive_hops(task, fabric)]
    elif planner == "broadcast":
        candidates = [broadcast_hops(task, fabric)]
        if funnel:
            candidates.append(broadcast_hops(task, fabric, funnel=True))
    else:
        opts = options or DEFAULT_MILP_OPTIONS
        candidates = [milp_hops(task, fabric, opts), broadcast_hops(task, fabric)]
        if funnel:
            candidates += [milp_hops(task, fabric, opts, funnel=True), broadcast_hops(task, fabric, funnel=True)]
    name = f"reshard-{planner}"
    topo_name = topology.name if topology is not None else ""
    sched = schedule_of(task, candidates[0], n_ranks=n, name=name, topology=topo_name, planner=planner)
    if topology is not None and planner != "naive":
        # Variants: each candidate as it is, and with every rank's sends to other hosts one after another
        # (see schedule_of); the simulator picks the fastest.
        best: tuple[float, Schedule] | None = None
        for hops in candidates:
            for chained in (False, True):
                s = schedule_of(task, hops, n_ranks=n, name=name, topology=topo_name,
                                fabric=fabric if chained else None, planner=planner)
                t = simulate(s, topology, task.nbytes).time_us
                if best is None or is_less(t, best[0]):
                    best = (t, s)
        sched = best[1] if best is not None else sched
    return _priced(sched, topology, time.perf_counter() - t0)


def _priced(sched: Schedule, topology: Topology | None, seconds: float) -> Schedule:
    """``sched`` with its planning time, and on a topology the executor model's prediction of its run
    (``predicted_us``, :func:`~ccsynth.synth.reshard.predict.predict_reshard`)."""
    from ccsynth.synth.reshard.predict import predict_reshard  # the lowering imports the planner's modules

    log.info("%s plan: %d ops in %.3f s", sched.name, len(sched.ops), seconds)
    sched = sched.with_meta(plan_seconds=seconds)
    if topology is None:
        return sched
    return sched.with_meta(predicted_us=predict_reshard(sched, topology).time_us)


def _auto(task: ReshardTask, topology: Topology | None, n: int, options, split: int | None) -> Schedule:
    """The plan of :data:`AUTO_CANDIDATES` predicted fastest on ``topology`` (its run as the runtime runs it),
    ``alltoallv`` unless another is predicted faster by more than :data:`AUTO_MARGIN`; without a topology, the
    ``alltoallv`` plan (MPI's own exchange: nothing to price the others against)."""
    t0 = time.perf_counter()
    if topology is None:
        s = plan_reshard(task, None, planner="alltoallv", n_ranks=n)
        return s.with_meta(requested="auto", plan_seconds=time.perf_counter() - t0)
    best: Schedule | None = None
    predicted: dict[str, float] = {}
    for p in AUTO_CANDIDATES:
        try:
            s = plan_reshard(task, topology, planner=p, n_ranks=n, options=options, split=split)
        except ScheduleError as e:  # e.g. alltoallv where the topology lacks a direct connection
            log.info("auto: no %s plan on %s: %s", p, topology.name, e)
            continue
        predicted[p] = float(s.meta["predicted_us"])
        if best is None:
            best = s
            continue
        bar = float(best.meta["predicted_us"])
        if best.meta["planner"] == "alltoallv":
            bar *= 1 - AUTO_MARGIN
        if is_less(predicted[p], bar):
            best = s
    if best is None:
        raise LayoutError(f"no resharding plan of {', '.join(AUTO_CANDIDATES)} runs on topology {topology.name!r}")
    log.info("auto: %s predicted fastest (%s)", best.meta["planner"],
             ", ".join(f"{k} {v:.1f} us" for k, v in predicted.items()))
    return best.with_meta(requested="auto", candidates_us=predicted, plan_seconds=time.perf_counter() - t0)
