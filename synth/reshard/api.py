"""``ccsynth.reshard``: move a sharded tensor from one device mesh and spec to another, over MPI.

Every rank of ``comm`` calls :func:`reshard` with its local shard of the
source layout (``None`` where it is not on the source mesh) and gets back its
local shard of the destination layout (``None`` where it is not on the
destination mesh). The meshes name ranks of ``comm``; they may be the same
ranks, overlap, or be disjoint (pipeline stages).

The plan is computed once per layout pair (and dtype, planner, topology,
communicator size) and cached: rank 0 plans and verifies it and broadcasts
it, so every rank runs the same plan, and a planning error is raised on
every rank alike. Each call first agrees, in one small allreduce, that every
rank's arguments are good (layouts, dtype and, with the plan cached, the
shard's shape), so one rank's mistake is every rank's error (:class:`~ccsynth.errors.PeerError` naming the rank elsewhere)
and no rank is left waiting. The plan then runs as dataflow on the shards
themselves (:mod:`~ccsynth.collectives.reshard_program`), on a duplicate of
``comm`` kept per communicator. Everything that talks to MPI -- the
agreement, the plan's broadcast, the run -- is the collectives layer's
(:mod:`~ccsynth.collectives.reshard_calls`); this module plans.

Example (under ``mpiexec -n 4``)::

    import numpy as np, ccsynth
    from mpi4py import MPI
    from ccsynth.synth.reshard import DeviceMesh, TensorLayout
    src = TensorLayout.of((8, 8), DeviceMesh((2, 2)), "S0,R")
    dst = TensorLayout.of((8, 8), DeviceMesh((2, 2)), ("x", "y"))
    mine = np.ones(src.local_shape(MPI.COMM_WORLD.rank), np.float32)
    out = ccsynth.reshard(mine, src=src, dst=dst, comm=MPI.COMM_WORLD)
"""

from __future__ import annotations

import logging
from collections import OrderedDict

from ccsynth.collectives import reshard_calls
from ccsynth.collectives.arraylike import as_array
from ccsynth.collectives.mpi_util import mpi_comm
from ccsynth.collectives.reshard_program import ShardProgram
from ccsynth.collectives.schedule import schedule_from_json
from ccsynth.collectives.verify import verify
from ccsynth.errors import BufferMismatchError, CCSynthError, LayoutError
from ccsynth.synth.reshard.layout import TensorLayout
from ccsynth.synth.reshard.mesh import DeviceMesh
from ccsynth.synth.reshard.planner import plan_reshard
from ccsynth.synth.reshard.program import rank_program
from ccsynth.synth.reshard.task import ReshardTask, parse_dtype
from ccsynth.topologies.model import Topology
from ccsynth.synth.solver import SolverOptions

__all__ = ["reshard", "layout_of", "clear_cache", "last_plan", "MAX_CACHED_PLANS"]

log = logging.getLogger(__name__)

#: plans kept per process (least recently used dropped first)
MAX_CACHED_PLANS = 32

_plans: OrderedDict = OrderedDict()
_last: list[dict] = [{}]
_made = [0]  # plans made by this process: their numbers agree across ranks that made the same calls


def layout_of(value, shape=None) -> TensorLayout:
    """A :class:`TensorLayout`, or one from ``(mesh, spec)`` (a mesh or a mesh shape) and ``shape``."""
    if isinstance(value, TensorLayout):
        if shape is not None and tuple(shape) != value.shape:
            raise LayoutError(f"layout is for shape {value.shape}, not {tuple(shape)}")
        return value
    if isinstance(value, (tuple, list)) and len(value) == 2:
        if shape is None:
            raise LayoutError("a layout given as (mesh, spec) needs shape=")
        mesh, spec = value
        return TensorLayout.of(shape, mesh if isinstance(mesh, DeviceMesh) else DeviceMesh(mesh), spec)
    raise LayoutError(f"a layout is a TensorLayout or a (mesh, spec) pair, got {value!r:.80}")


def clear_cache() -> None:
    """Forget cached plans (and the duplicated communicators, and the staging buffers)."""
    _plans.clear()
    _tasks.clear()
    reshard_calls.release()


_tasks: OrderedDict = OrderedDict()  # (layouts, dtype, communicator size) -> task: no rebuilding per call


def _task(s: TensorLayout, d: TensorLayout, dtype, comm) -> ReshardTask:
    """The task of moving ``s`` to ``d`` (checked against the communicator's size), cached: building one
    (the dtype's name, the ranks) cost a few hundred us per call on a loaded machine."""
    k = (s, d, dtype if isinstance(dtype, str) else str(dtype), comm.Get_size())
    task = _tasks.get(k)
    if task is None:
        task = ReshardTask(s.shape, parse_dtype(dtype).name, s, d)
        for r in task.ranks:
            if r >= comm.Get_size():
                raise LayoutError(f"the meshes use rank {r}, but the communicator has {comm.Get_size()} ranks")
        _tasks[k] = task
        while len(_tasks) > MAX_CACHED_PLANS:
            _tasks.popitem(last=False)
    return task


def _key(task: ReshardTask, comm, planner: str, topology: Topology | None) -> tuple:
    return task, planner, getattr(topology, "name", None), comm.Get_size(), comm.Get_rank()


def last_plan() -> dict:
    """What this process's last :func:`reshard` call ran: ``planner`` (the plan kind; ``auto`` names the one it
    chose), ``executor`` (``alltoallv`` or ``dataflow``), ``requested``, ``schedule`` (the plan), and on a
    topology ``predicted_us`` (the
    executor model's prediction of one call) and, for ``auto``, ``candidates_us``; empty before any call."""
    return dict(_last[0])


def _plan(task: ReshardTask, comm, planner: str, topology: Topology | None, options) -> tuple[ShardProgram, int, dict]:
    key = _key(task, comm, planner, topology)

    def make() -> tuple[str | None, str | None]:
        try:
            sched = plan_reshard(task, topology, planner=planner, n_ranks=comm.Get_size(), options=options)
            verify(sched)
            return sched.to_json(), None
        except CCSynthError as e:
            return None, f"{type(e).__name__}: {e}"

    sched = schedule_from_json(reshard_calls.plan_on_root(comm, make), "plan from rank 0")
    prog = rank_program(sched, comm.Get_rank())
    pairs: dict = {}
    for op in sched.ops:
        if op.kind == "send":
            pairs[(op.rank, op.peer)] = pairs.get((op.rank, op.peer), 0) + 1
    stride = max(pairs.values(), default=0) + 1
    _made[0] += 1
    info = {"number": _made[0], "requested": planner, "planner": sched.meta.get("planner", planner), "executor": prog.executor,
            "schedule": sched, **{k: sched.meta[k] for k in ("predicted_us", "candidates_us") if k in sched.meta}}
    _plans[key] = (prog, stride, info)
    while len(_plans) > MAX_CACHED_PLANS:
        _plans.popitem(last=False)
    return prog, stride, info


def _join(comm, number: int) -> None:
    """Take part, with blank buffers, in the cached ``alltoallv`` plan ``number`` that the other ranks run (this
    rank failed before finding it); the agreement's verdict raises next on every rank."""
    for prog, stride, info in _plans.values():
        if info["number"] == number:
            if prog.executor == "alltoallv":
                reshard_calls.run(comm, prog, stride, None, None, stage=False, blank=True)
            return
    log.warning("the other ranks run resharding plan %d, which this rank never made (a skipped call?)", number)


def _array(obj, what: str, *, writable: bool = False):
    """``obj`` as a NumPy or CuPy array sharing its memory (:func:`~ccsynth.collectives.arraylike.as_array`)."""
    if obj is None:
        return None
    arr = as_array(obj, writable=writable)
    if arr is None:
        raise BufferMismatchError(f"{what} must be an array (NumPy, CuPy, or an object exposing its memory), "
                                  f"got {type(obj).__name__}")
    return arr


def reshard(local_shard, *, src, dst, comm, shape=None, dtype=None, planner: str = "auto",
            topology: Topology | None = None,
            options: SolverOptions | None = None, out=None, staging: str = "auto"):
    """Reshard a tensor over ``comm``: returns this rank's shard of ``dst`` (None off the destination mesh).

    ``src``/``dst``: :class:`~.layout.TensorLayout` s, or ``(mesh, spec)``
    pairs with ``shape=`` (a mesh is a :class:`~.mesh.DeviceMesh` or a mesh
    shape, on ranks ``0..`` of ``comm``; specs in Alpa's or JAX's notation).
    ``comm``: an mpi4py intracommunicator or a :class:`ccsynth.Communicator`
    (the resharding runs on the communicator it wraps). ``dtype`` defaults to the local shard's. ``planner``:
    ``auto`` (default: the plan predicted fastest on ``topology``, run as the runtime runs it; without a
    topology one ``MPI_Alltoallv``), ``alltoallv``, ``naive``, ``broadcast`` or ``milp``
    (:mod:`~ccsynth.synth.reshard.planner`); ``topology`` (optional, e.g. a profile of the machine) gives the
    hosts, links and costs the planner balances and predicts over; :func:`last_plan` says what ran. ``out``: an array of the
    destination shard's shape to fill instead of a new one (returned).

    Shards are what the communicator takes
    (:mod:`~ccsynth.collectives.arraylike`): NumPy and CuPy arrays, and
    objects exposing their memory (``__cuda_array_interface__``,
    ``__dlpack__``, the buffer protocol, ``__array_interface__``), used
    without a copy. Device (CuPy) shards go to MPI directly where the
    library is CUDA-aware, else through pinned host memory; ``staging``
    (``"auto"``, ``"always"``, ``"never"``) decides as for the communicator
    (:mod:`~ccsynth.collectives.staging`). A rank off the source mesh that
    wants its destination shard on the device passes ``out=``.
    """
    comm = mpi_comm(comm)  # a ccsynth.Communicator: the agreement, the plan's broadcast and the run use what it wraps
    error = None
    hit = None
    given_out = out
    stage = False
    try:
        local_shard = _array(local_shard, "local_shard")
        out = _array(out, "out", writable=True)
        stage = reshard_calls.must_stage(staging, (local_shard, out))
        if shape is None and isinstance(src, TensorLayout):
            shape = src.shape
        s, d = layout_of(src, shape), layout_of(dst, shape)
        if dtype is None:
            if local_shard is None:
                raise LayoutError("pass dtype= on ranks that hold no source shard")
            dtype = local_shard.dtype
        task = _task(s, d, dtype, comm)
        key = _key(task, comm, planner, topology)
        hit = _plans.get(key)
        if hit is not None:
            hit[0].check_input(local_shard, out)
    except CCSynthError as e:
        error = e
    # One allreduce per call: every rank's arguments are good (with a cached plan, its buffers too). A cached
    # alltoallv plan runs while it completes (one synchronisation per call, not two: on 4 ranks sharing 2 loaded
    # cores the second one halved the speed at 1 MiB); every other waits for its verdict first.
    agreement = reshard_calls.Agreement(comm, error, hit[2]["number"] if hit is not None else None)
    if hit is not None and hit[0].executor == "alltoallv":
        prog, stride, info = hit
        _plans.move_to_end(key)
        result = reshard_calls.run(comm, prog, stride, local_shard, out, stage=stage, blank=error is not None)
        agreement.verdict()
        _last[0] = info
        return given_out if given_out is not None else result
    if hit is None and agreement.join is not None:
        _join(comm, agreement.join)  # the others run a cached plan: take part, then raise with them
    agreement.verdict()
    if hit is None:
        prog, stride, info = _plan(task, comm, planner, topology, options)
        try:
            prog.check_input(local_shard, out)
        except CCSynthError as e:
            error = e
        reshard_calls.agree(comm, error, True)
    else:
        prog, stride, info = hit
        _plans.move_to_end(key)
    _last[0] = info
    result = reshard_calls.run(comm, prog, stride, local_shard, out, stage=stage)
    return given_out if given_out is not None else result
