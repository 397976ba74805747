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
from dataclasses import dataclass

import numpy as np

from ccsynth.collectives.mpi_util import mpi_comm
from ccsynth.errors import CCSynthError
from ccsynth.synth.reshard.api import reshard
from ccsynth.synth.reshard.layout import TensorLayout
from ccsynth.synth.reshard.plan import needs
from ccsynth.synth.reshard.task import ReshardTask

__all__ = ["ALGOS", "ReshardRow", "shard_values", "run_reshard_bench", "format_table"]

log = logging.getLogger(__name__)

ALGOS = ("naive", "broadcast", "milp", "mpi")
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


def run_reshard_bench(comm, task: ReshardTask, algos, *, iters: int = 20, warmup: int = 2, validate: bool = False,
                      buffer: str = "numpy", topology=None, options=None):
    """Yield one :class:`ReshardRow` per algorithm (on every rank; rows agree across ranks)."""
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
    for algo in algos:
        if algo == "mpi":
            if buffer != "numpy":
                raise CCSynthError("the mpi (Alltoallv) algorithm runs on numpy buffers only")
            plan = _AlltoallvPlan(task, comm)

            def call(plan=plan):
                return plan(comm, local)
        else:
            def call(algo=algo):
                return reshard(local, src=task.src, dst=task.dst, comm=comm, dtype=task.dtype, planner=algo,
                               topology=topology, options=options)
        out = call()  # plans (and caches) before timing
        for _ in range(warmup):
            out = call()
        total = 0.0
        for _ in range(iters):
            comm.Barrier()
            t0 = MPI.Wtime()
            out = call()
            total += MPI.Wtime() - t0
        avg = total / iters * 1e6
        valid = None
        if validate:
            valid = bool(comm.allreduce(int(_check(task.dst, rank, out, task.dtype)), op=MPI.MIN))
        s = comm.allreduce(avg, op=MPI.SUM)
        lo = comm.allreduce(avg, op=MPI.MIN)
        hi = comm.allreduce(avg, op=MPI.MAX)
        yield ReshardRow(algo, task.nbytes, s / comm.Get_size(), lo, hi, iters, valid)


def format_table(task: ReshardTask, rows, *, validate: bool, n_ranks: int) -> list[str]:
    """OMB-style lines for ``rows`` (only rank 0 prints them)."""
    lines = [
        "# ccsynth OMB-style Resharding Test",
        f"# {task.describe()} ({task.nbytes} B) on {n_ranks} ranks; source ranks {list(task.src.mesh.ranks)}, "
        f"destination ranks {list(task.dst.mesh.ranks)}",
        f"# {'Algorithm':<12}{'Avg Latency(us)':>18}{'Min Latency(us)':>18}{'Max Latency(us)':>18}{'algbw(GB/s)':>14}"
        f"{'Iterations':>12}" + (f"{'Validation':>12}" if validate else ""),
    ]
    rows = list(rows)
    for r in rows:
        v = "" if not validate else f"{'Pass' if r.valid else 'Fail':>12}"
        lines.append(f"{r.algo:<14}{r.avg_us:>18.2f}{r.min_us:>18.2f}{r.max_us:>18.2f}{r.algbw:>14.3f}{r.iters:>12}{v}")
    ref = next((r for r in rows if r.algo == "mpi"), None)
    if ref is not None:
        for r in rows:
            if r is not ref and r.avg_us > 0:
                lines.append(f"# {r.algo}: {ref.avg_us / r.avg_us:.2f}x the speed of MPI Alltoallv")
    return lines
