"""``ccsynth bench reshard``: time real cross-mesh resharding, OMB-style, against plain MPI (Alltoallv).

Every algorithm moves the same tensor from the source layout to the
destination layout on ``MPI.COMM_WORLD``:

* ``naive``, ``broadcast``, ``milp``: :func:`ccsynth.reshard` with that
  planner (the plan is made and cached before timing);
* ``mpi``: a plain MPI implementation: every destination rank gets each
  piece it needs from the first replica that holds it, packed per peer into
  one buffer, in one ``MPI_Alltoallv``, and unpacked (what one writes
  without a planner).

Timing follows OMB's collectives: warm-up iterations, a barrier before each
timed iteration, ``MPI.Wtime``, the per-rank average reduced over ranks
(avg, min, max). ``-c`` checks every destination shard against the values
it must hold (each element is its flat index in the tensor, modulo a power
of two that the dtype holds exactly) and fills the Pass/Fail column. Only
rank 0 prints.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import numpy as np

from ccsynth.collectives.mpi_util import mpi_comm
from ccsynth.errors import CCSynthError
from ccsynth.synth.reshard.api import last_plan, reshard
from ccsynth.synth.reshard.layout import TensorLayout
from ccsynth.synth.reshard.plan import needs
from ccsynth.synth.reshard.task import ReshardTask

__all__ = ["ALGOS", "ReshardRow", "shard_values", "run_reshard_bench", "format_table"]

log = logging.getLogger(__name__)

ALGOS = ("naive", "broadcast", "milp", "alltoallv", "auto", "mpi")
_EXACT_BITS = {"float16": 11, "float32": 24, "float64": 53}


@dataclass(frozen=True)
class ReshardRow:
    """One algorithm's result: latency over ranks (us) and validation (None: not checked)."""

    algo: str
    nbytes: int
    avg_us: float
    min_us: float
    max_us: float
    iters: int
    valid: bool | None
    median_us: float = 0.0  # median over iterations of the slowest rank's time
    path: str = ""  # the plan kind that ran (auto: the one it chose)
    executor: str = ""  # what ran it: dataflow, alltoallv, or the bench's own Alltoallv
    predicted_us: float | None = None  # the executor model's prediction on the topology (-t), if any

    @property
    def meas_over_pred(self) -> float | None:
        return self.median_us / self.predicted_us if self.predicted_us else None

    @property
    def algbw(self) -> float:
        """Tensor bytes per second of the slowest rank, in GB/s."""
        return self.nbytes / (self.max_us * 1e3) if self.max_us > 0 else float("inf")


def shard_values(layout: TensorLayout, rank: int, dtype, xp=np):
    """The shard ``rank`` holds of the test tensor (element = flat index modulo an exact power of two)."""
    tile = layout.tile_of_rank(rank)
    if tile is None:
        return None
    box = layout.box(tile)
    shape = layout.shape
    strides = [int(np.prod(shape[d + 1:])) for d in range(len(shape))]
    acc = np.zeros([b - a for a, b in box], dtype=np.int64)
    for d, (a, b) in enumerate(box):
        idx = np.arange(a, b, dtype=np.int64) * strides[d]
        acc += idx.reshape([-1 if k == d else 1 for k in range(len(shape))])
    dt = np.dtype(dtype)
    bits = _EXACT_BITS.get(dt.name, 8 * dt.itemsize - 1)
    vals = (acc % (1 << min(bits, 62))).astype(dt)
    return xp.asarray(vals)


def _tile(layout: TensorLayout, rank: int) -> tuple[int, ...]:
    tile = layout.tile_of_rank(rank)
    if tile is None:
        raise CCSynthError(f"rank {rank} is not on mesh {layout.mesh.describe()}")
    return tile


class _AlltoallvPlan:
    """Plain MPI: each needed piece from its first holder, packed per peer, one Alltoallv."""

    def __init__(self, task: ReshardTask, comm):
        rank, n = comm.Get_rank(), comm.Get_size()
        self.task = task
        self.sends: list[list] = [[] for _ in range(n)]  # per peer: (slices in my source shard, size)
        self.recvs: list[list] = [[] for _ in range(n)]  # per peer: (slices in my destination shard, size)
        self.local: list[tuple] = []
        for p in task.pieces:
            holders, needers = needs(task, p.id)
            for d in needers:
                s = d if d in holders else holders[0]
                if s == rank or d == rank:
                    src = task.local_slices(p, task.src.box(_tile(task.src, s))) if s == rank else None
                    dst = task.local_slices(p, task.dst.box(_tile(task.dst, d))) if d == rank else None
                    if s == d:
                        self.local.append((src, dst))
                    elif s == rank:
                        self.sends[d].append((src, p.size))
                    else:
                        self.recvs[s].append((dst, p.size))
        self.scount = [sum(k for _, k in x) for x in self.sends]
        self.rcount = [sum(k for _, k in x) for x in self.recvs]
        self.sdispl = list(np.cumsum([0] + self.scount[:-1]))
        self.rdispl = list(np.cumsum([0] + self.rcount[:-1]))
        dt = np.dtype(task.dtype)
        self.sbuf = np.empty(max(sum(self.scount), 1), dt)
        self.rbuf = np.empty(max(sum(self.rcount), 1), dt)
        self.dst_shape = task.dst.local_shape(rank) if task.dst.tile_of_rank(rank) is not None else None

    def __call__(self, comm, local):
        from mpi4py import MPI

        out = np.empty(self.dst_shape, self.task.dtype) if self.dst_shape is not None else None
        pos = 0
        for peer in range(len(self.sends)):
            for sl, k in self.sends[peer]:
                self.sbuf[pos:pos + k].reshape(local[sl].shape)[...] = local[sl]
                pos += k
        mtype = MPI.BYTE
        size = self.sbuf.dtype.itemsize
        comm.Alltoallv([self.sbuf, ([c * size for c in self.scount], [int(d) * size for d in self.sdispl]), mtype],
                       [self.rbuf, ([c * size for c in self.rcount], [int(d) * size for d in self.rdispl]), mtype])
        if out is None:  # no destination tile on this rank: nothing came here (recvs and local are empty)
            return None
        pos = 0
        for peer in range(len(self.recvs)):
            for sl, k in self.recvs[peer]:
                out[sl] = self.rbuf[pos:pos + k].reshape(out[sl].shape)
                pos += k
        for src, dst in self.local:
            out[dst] = local[src]
        return out


def _check(layout: TensorLayout, rank: int, out, dtype) -> bool:
    want = shard_values(layout, rank, dtype)
    if want is None:
        return out is None
    if out is None:
        return False
    got = out.get() if hasattr(out, "get") else out
    return got.shape == want.shape and bool(np.array_equal(got, want))


def _caller(algo: str, comm, task: ReshardTask, local, topology, options, buffer: str):
    """The call that runs ``algo`` once, and the path it names (for ccsynth's rows: the plan that ran)."""
    if algo == "mpi":
        if buffer != "numpy":
            raise CCSynthError("the mpi (Alltoallv) algorithm runs on numpy buffers only")
        plan = _AlltoallvPlan(task, comm)
        return (lambda: plan(comm, local)), {"planner": "mpi", "executor": "Alltoallv (bench)"}
    info: dict = {}

    def call():
        out = reshard(local, src=task.src, dst=task.dst, comm=comm, dtype=task.dtype, planner=algo,
                      topology=topology, options=options)
        if not info:
            info.update(last_plan())
        return out
    return call, info


def _interleaved_predictions(task: ReshardTask, infos, topology) -> dict[int, float]:
    """Each ccsynth row's prediction where the algorithms run in turn: a call's footprint (the bytes a rank
    touches between two calls of the same algorithm) is every algorithm's working set together, the bench's own
    Alltoallv its shards and two buffers (:mod:`ccsynth.bench.predict`, ``--interleave``)."""
    from ccsynth.bench.predict import has_footprint_terms
    from ccsynth.synth.reshard.predict import lower_reshard, predict_reshard

    if not has_footprint_terms(topology):
        return {}
    graphs = {k: lower_reshard(info["schedule"], topology) for k, info in enumerate(infos) if "schedule" in info}
    shards = max((math.prod(lay.local_shape(r)) for lay in (task.src, task.dst) for r in lay.mesh.ranks), default=0)
    mpi = 4 * shards * task.itemsize * sum(1 for info in infos if "schedule" not in info)
    footprint = sum(g.working_set_bytes for g in graphs.values()) + mpi
    return {k: predict_reshard(infos[k]["schedule"], topology, footprint_bytes=footprint).time_us for k in graphs}


def run_reshard_bench(comm, task: ReshardTask, algos, *, iters: int = 20, warmup: int = 2, validate: bool = False,
                      buffer: str = "numpy", topology=None, options=None):
    """One :class:`ReshardRow` per algorithm (on every rank; rows agree across ranks), measured interleaved.

    Every algorithm is planned (and its plan cached) and warmed up first;
    then each timed iteration runs every algorithm once, in an order
    rotated from one iteration to the next, a barrier before each call,
    so that all of them meet the same machine load. ``median_us`` is the
    median over iterations of the slowest rank's time.
    """
    from mpi4py import MPI

    comm = mpi_comm(comm)  # a ccsynth.Communicator: the mpi baseline is the MPI library's own Alltoallv
    rank = comm.Get_rank()
    for a in algos:
        if a not in ALGOS:
            raise CCSynthError(f"unknown resharding algorithm {a!r}; choose from {', '.join(ALGOS)}")
    if buffer == "cupy":
        import cupy as xp  # optional: only with --buffer cupy
    else:
        xp = np
    local = shard_values(task.src, rank, task.dtype, xp)
    calls, infos, outs = [], [], []
    for algo in algos:
        call, info = _caller(algo, comm, task, local, topology, options, buffer)
        out = call()  # plans (and caches) before timing
        for _ in range(warmup):
            out = call()
        calls.append(call)
        infos.append(info)
        outs.append(out)
    times = np.zeros((len(algos), iters))
    for it in range(iters):
        for j in range(len(algos)):
            k = (j + it) % len(algos)
            comm.Barrier()
            t0 = MPI.Wtime()
            outs[k] = calls[k]()
            times[k, it] = MPI.Wtime() - t0
    slowest = np.empty_like(times)
    comm.Allreduce(times, slowest, op=MPI.MAX)
    predicted = _interleaved_predictions(task, infos, topology) if topology is not None else {}
    rows = []
    for k, algo in enumerate(algos):
        avg = float(times[k].mean()) * 1e6
        valid = None
        if validate:
            valid = bool(comm.allreduce(int(_check(task.dst, rank, outs[k], task.dtype)), op=MPI.MIN))
        s = comm.allreduce(avg, op=MPI.SUM)
        lo = comm.allreduce(avg, op=MPI.MIN)
        hi = comm.allreduce(avg, op=MPI.MAX)
        info = infos[k]
        rows.append(ReshardRow(algo, task.nbytes, s / comm.Get_size(), lo, hi, iters, valid,
                               median_us=float(np.median(slowest[k])) * 1e6, path=str(info.get("planner", algo)),
                               executor=str(info.get("executor", "")),
                               predicted_us=predicted.get(k, info.get("predicted_us"))))
    return rows


def format_table(task: ReshardTask, rows, *, validate: bool, n_ranks: int) -> list[str]:
    """OMB-style lines for ``rows`` (only rank 0 prints them): the header, a line per row, then per row the path
    it ran and its speed against the ``mpi`` row (medians of the same interleaved run), and the prediction error."""
    lines = [
        "# ccsynth OMB-style Resharding Test",
        f"# {task.describe()} ({task.nbytes} B) on {n_ranks} ranks; source ranks {list(task.src.mesh.ranks)}, "
        f"destination ranks {list(task.dst.mesh.ranks)}",
        f"# {'Algorithm':<12}{'Avg Latency(us)':>18}{'Min Latency(us)':>18}{'Max Latency(us)':>18}{'algbw(GB/s)':>14}"
        f"{'Iterations':>12}" + (f"{'Validation':>12}" if validate else "")
        + f"{'Median(us)':>14}{'Predicted(us)':>15}{'Meas/Pred':>11}  Path",
    ]
    rows = list(rows)
    for r in rows:
        v = "" if not validate else f"{'Pass' if r.valid else 'Fail':>12}"
        pred = f"{r.predicted_us:>15.2f}{r.meas_over_pred:>11.2f}" if r.predicted_us else f"{'-':>15}{'-':>11}"
        path = r.path if r.path == r.algo or r.algo == "mpi" else f"{r.algo}->{r.path}"
        lines.append(f"{r.algo:<14}{r.avg_us:>18.2f}{r.min_us:>18.2f}{r.max_us:>18.2f}{r.algbw:>14.3f}{r.iters:>12}{v}"
                     f"{r.median_us:>14.2f}{pred}  {path} ({r.executor})")
    ref = next((r for r in rows if r.algo == "mpi"), None)
    if ref is not None:
        for r in rows:
            if r is not ref and r.median_us > 0:
                lines.append(f"# {r.algo} (ran {r.path}, {r.executor}): {ref.median_us / r.median_us:.2f}x the speed "
                             "of MPI Alltoallv (medians, interleaved)")
    errs = [abs(r.meas_over_pred - 1) for r in rows if r.meas_over_pred is not None]
    if errs:
        lines.append(f"# prediction error |measured/predicted - 1|: median {float(np.median(errs)):.0%}, "
                     f"worst {max(errs):.0%} over {len(errs)} rows")
    return lines
