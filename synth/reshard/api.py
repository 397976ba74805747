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
themselves (:mod:`.runtime`), on a duplicate of ``comm`` kept per
communicator.

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

import numpy as np

from ccsynth.collectives.arraylike import as_array
from ccsynth.collectives.mpi_util import mpi_comm
from ccsynth.collectives.runtime.primitives import mpi_calls, resolve_wait_mode
from ccsynth.collectives.schedule import schedule_from_json
from ccsynth.collectives.staging import STAGING_MODES, Stager, decide
from ccsynth.collectives.verify import verify
from ccsynth.errors import BufferMismatchError, CCSynthError, LayoutError, PeerError
from ccsynth.kernels import is_device_array
from ccsynth.kernels.devices import Awareness, cuda_awareness
from ccsynth.synth.reshard.layout import TensorLayout
from ccsynth.synth.reshard.mesh import DeviceMesh
from ccsynth.synth.reshard.planner import plan_reshard
from ccsynth.synth.reshard.runtime import ReshardProgram
from ccsynth.synth.reshard.task import ReshardTask, parse_dtype
from ccsynth.topologies.model import Topology
from ccsynth.synth.solver import SolverOptions

__all__ = ["reshard", "layout_of", "clear_cache", "MAX_CACHED_PLANS"]

log = logging.getLogger(__name__)

#: plans kept per process (least recently used dropped first)
MAX_CACHED_PLANS = 32

_plans: OrderedDict = OrderedDict()
_channels: dict = {}  # communicator handle -> [duplicate, call counter]
_stager = Stager()  # pinned host stand-ins of device shards, kept across calls (as the communicator's)
_awareness: list[Awareness] = []  # the MPI library's CUDA-awareness, asked once


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
    _stager.clear()
    for dup, _ in _channels.values():
        try:
            dup.Free()
        except Exception:  # noqa: BLE001 - MPI may be finalised already
            pass
    _channels.clear()


def _channel(comm):
    key = comm.py2f()
    ch = _channels.get(key)
    if ch is None:
        ch = _channels[key] = [comm.Dup(), 0]
    return ch


def _agree(comm, error: Exception | None, cached: bool) -> None:
    """Every rank raises if any rank has an error (one allreduce; it also checks that all ranks agree on
    whether the plan is cached, so that no rank plans while another runs)."""
    from mpi4py import MPI  # initialises MPI: only when a resharding runs

    code = np.array([comm.rank + 1 if error is not None else 0, int(cached), -int(cached)], dtype=np.int64)
    calls = mpi_calls(MPI, resolve_wait_mode("auto"))
    calls.wait_any([comm.Iallreduce(MPI.IN_PLACE, code, op=MPI.MAX)], calls.status)
    first, some_cached, min_cached = int(code[0]), int(code[1]), -int(code[2])
    disagree = some_cached == 1 and min_cached == 0
    if first == 0 and not disagree:
        return
    if first == 0:
        raise PeerError("the ranks disagree on whether this resharding was planned before (a rank skipped a call?)")
    if error is not None:
        raise error
    raise PeerError(f"rank {first - 1} failed in ccsynth.reshard (see its error); no data moved")


def _key(task: ReshardTask, comm, planner: str, topology: Topology | None) -> tuple:
    return task, planner, getattr(topology, "name", None), comm.Get_size(), comm.Get_rank()


def _plan(task: ReshardTask, comm, planner: str, topology: Topology | None, options) -> tuple[ReshardProgram, int]:
    key = _key(task, comm, planner, topology)
    text, error = None, None
    if comm.rank == 0:
        try:
            sched = plan_reshard(task, topology, planner=planner, n_ranks=comm.Get_size(), options=options)
            verify(sched)
            text = sched.to_json()
        except CCSynthError as e:
            error = f"{type(e).__name__}: {e}"
    text, error = comm.bcast((text, error), root=0)
    if error is not None:
        raise LayoutError(f"planning the resharding failed: {error}")
    sched = schedule_from_json(text, "plan from rank 0")
    prog = ReshardProgram(sched, comm.Get_rank())
    pairs: dict = {}
    for op in sched.ops:
        if op.kind == "send":
            pairs[(op.rank, op.peer)] = pairs.get((op.rank, op.peer), 0) + 1
    stride = max(pairs.values(), default=0) + 1
    _plans[key] = (prog, stride)
    while len(_plans) > MAX_CACHED_PLANS:
        _plans.popitem(last=False)
    return prog, stride


def _array(obj, what: str, *, writable: bool = False):
    """``obj`` as a NumPy or CuPy array sharing its memory (:func:`~ccsynth.collectives.arraylike.as_array`)."""
    if obj is None:
        return None
    arr = as_array(obj, writable=writable)
    if arr is None:
        raise BufferMismatchError(f"{what} must be an array (NumPy, CuPy, or an object exposing its memory), "
                                  f"got {type(obj).__name__}")
    return arr


def _must_stage(staging: str, arrays) -> bool:
    """Whether this rank's device shards go through host stand-ins (the communicator's rule, :func:`decide`)."""
    if staging not in STAGING_MODES:
        raise LayoutError(f"staging must be one of {', '.join(STAGING_MODES)}, got {staging!r}")
    if not any(a is not None and is_device_array(a) for a in arrays):
        return False
    if not _awareness:
        from mpi4py import MPI

        _awareness.append(cuda_awareness(MPI))
    return decide(staging, _awareness[0], "ccsynth.reshard")


def reshard(local_shard, *, src, dst, comm, shape=None, dtype=None, planner: str = "broadcast", topology: Topology | None = None,
            options: SolverOptions | None = None, out=None, staging: str = "auto"):
    """Reshard a tensor over ``comm``: returns this rank's shard of ``dst`` (None off the destination mesh).

    ``src``/``dst``: :class:`~.layout.TensorLayout` s, or ``(mesh, spec)``
    pairs with ``shape=`` (a mesh is a :class:`~.mesh.DeviceMesh` or a mesh
    shape, on ranks ``0..`` of ``comm``; specs in Alpa's or JAX's notation).
    ``comm``: an mpi4py intracommunicator or a :class:`ccsynth.Communicator`
    (the resharding runs on the communicator it wraps). ``dtype`` defaults to the local shard's. ``planner``: ``naive``,
    ``broadcast`` (default) or ``milp``; ``topology`` (optional) gives the
    hosts and links the planner balances over. ``out``: an array of the
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
        stage = _must_stage(staging, (local_shard, out))
        if shape is None and isinstance(src, TensorLayout):
            shape = src.shape
        s, d = layout_of(src, shape), layout_of(dst, shape)
        if dtype is None:
            if local_shard is None:
                raise LayoutError("pass dtype= on ranks that hold no source shard")
            dtype = local_shard.dtype
        task = ReshardTask(s.shape, parse_dtype(dtype).name, s, d)
        for r in task.ranks:
            if r >= comm.Get_size():
                raise LayoutError(f"the meshes use rank {r}, but the communicator has {comm.Get_size()} ranks")
        hit = _plans.get(_key(task, comm, planner, topology))
        if hit is not None:
            hit[0].check_input(local_shard, out)
    except CCSynthError as e:
        error = e
    # One allreduce per call: every rank's arguments are good (with a cached plan, its buffers too).
    _agree(comm, error, hit is not None)
    if hit is None:
        prog, stride = _plan(task, comm, planner, topology, options)
        try:
            prog.check_input(local_shard, out)
        except CCSynthError as e:
            error = e
        _agree(comm, error, True)
    else:
        prog, stride = hit
        _plans.move_to_end(_key(task, comm, planner, topology))
    ch = _channel(comm)
    dup, call = ch
    ch[1] += 1
    from mpi4py import MPI

    ub = dup.Get_attr(MPI.TAG_UB) or 32767
    span = max(1, ub // stride)
    if stage:
        result = prog.run_staged(dup, local_shard, out, _stager, call=call % span, stride=stride)
    else:
        result = prog.run(dup, local_shard, out, call=call % span, stride=stride)
    return given_out if given_out is not None else result
