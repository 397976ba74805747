"""What one OMB-style benchmark run works with: the options, the context, the Case it times and the Row it yields.

:mod:`ccsynth.bench.omb` holds the registry and the one timing loop; this
module holds the values they pass around, so that a benchmark module (the
nccl-tests view, the non-blocking and reference runs, ``ccsynth topo
profile``) reads them without the registry:

* :class:`Options`: the command's flags, and OMB's iteration counts by
  size (fewer above :data:`LARGE_MESSAGE`; warm-ups are not timed);
* :class:`Context`: the communicator, the options and the buffers on the
  chosen backend (NumPy or CuPy, :func:`backend`: each rank on the GPU of
  its local rank), with the exact input patterns and sentinels
  :mod:`ccsynth.bench.validate` checks against;
* :class:`Case`: one prepared size of one benchmark (the step to time, how
  to reset and check its outputs);
* :class:`Row`: one measured size (OMB's columns, nccl-tests' algbw/busbw,
  the slowest rank's median, ``--predict``'s prediction).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ccsynth.bench import validate as V
from ccsynth.errors import CCSynthError
from ccsynth.kernels.devices import select_device

__all__ = ["LARGE_MESSAGE", "ITERS_SMALL", "ITERS_LARGE", "WARMUP_SMALL", "WARMUP_LARGE", "WINDOW", "Options", "Row",
           "Case", "Context", "backend"]

LARGE_MESSAGE = 8192  # OMB's LARGE_MESSAGE_SIZE: sizes above it get the "large" iteration counts
# OMB uses 1000/100 iterations and 200/10 warm-ups; these suit a small (2-core) machine.
ITERS_SMALL, ITERS_LARGE = 200, 20
WARMUP_SMALL, WARMUP_LARGE = 20, 2
WINDOW = 64  # osu_bw's window of messages in flight


@dataclass(frozen=True)
class Options:
    """What the user asked for (the command's flags), shared by every benchmark."""

    sizes: tuple[int, ...]
    iters: int | None = None  # None: ITERS_SMALL / ITERS_LARGE by size
    warmup: int | None = None
    validate: bool = False
    full: bool = False
    buffer: str = "numpy"
    dtype: str = "float32"
    window: int = WINDOW
    root: int = 0
    rotate_root: bool = False  # OMB's -k rotate: the root of broadcast/reduce moves to the next rank every iteration
    op: str = "sum"  # reduction op (nccl-tests' -o): sum, prod, min, max, avg (see validate.OPS)
    in_place: bool = False  # OMB's -l: MPI.IN_PLACE (nccl-tests' in-place layout, see prepare_in_place)
    tail: tuple[float, ...] = ()  # OMB's -z: percentiles of the per-iteration latency (slowest rank) to print
    counts: str = "equal"  # v-benchmarks: how the counts spread (COUNT_DISTRIBUTIONS)
    seed: int = 0  # v-benchmarks: the seed of the random counts (the same on every rank)
    chunks: int | None = None  # chunk factor of baseline schedules (None: see algos._chunk_factor)
    profile: bool = False  # ask ccsynth's executor where the time goes (RunStats)
    predict: str | None = None  # topology of --predict: predicted time beside every row (bench/predict.py)

    def iterations(self, size: int) -> tuple[int, int]:
        """(timed iterations, warm-up iterations) for a message of ``size`` bytes."""
        large = size > LARGE_MESSAGE
        iters = self.iters if self.iters is not None else (ITERS_LARGE if large else ITERS_SMALL)
        warmup = self.warmup if self.warmup is not None else (WARMUP_LARGE if large else WARMUP_SMALL)
        return iters, warmup


@dataclass(frozen=True)
class Row:
    """One measured size. Times in microseconds, bandwidths in GB/s."""

    size: int  # OMB's message size (the Size column)
    nbytes: int  # nccl-tests message size: algbw = nbytes / avg
    count: int  # elements per rank in MPI's terms (see validate.expected)
    iterations: int
    avg_us: float
    min_us: float
    max_us: float
    algbw: float
    busbw: float
    valid: bool | None = None  # None: not checked
    algorithm: str = ""  # what ran at this size (for plans: the entry picked)
    median_us: float | None = None  # median over iterations of the slowest rank's time
    profile: dict | None = None  # executor RunStats per run, averaged over ranks (--profile)
    predicted_us: float | None = None  # --predict: the simulator's time for the schedule that ran
    tail_us: tuple[tuple[float, float], ...] = ()  # -z: (percentile, latency) of the slowest rank's iterations

    @property
    def ratio(self) -> float | None:
        """``--predict``: measured (``median_us``) / predicted; None without a prediction."""
        if not self.predicted_us or self.median_us is None:
            return None
        return self.median_us / self.predicted_us

    @property
    def mbps(self) -> float:
        """OMB's bandwidth figure: MB/s (10**6 bytes per second) from the OMB size."""
        return self.size / self.avg_us if self.avg_us > 0 else 0.0

    def to_dict(self) -> dict:
        """JSON-ready, with the units in the keys (the ``ccsynth.bench`` table of docs/formats.md)."""
        return {
            "size_bytes": self.size,
            "nccl_size_bytes": self.nbytes,
            "count_elements": self.count,
            "n_iterations": self.iterations,
            "avg_us": self.avg_us,
            "min_us": self.min_us,
            "max_us": self.max_us,
            "algbw_GBps": self.algbw,
            "busbw_GBps": self.busbw,
            "valid": self.valid,
            "algorithm": self.algorithm,
            "median_us": self.median_us,
            **({"profile": self.profile} if self.profile else {}),
            **({"predicted_us": self.predicted_us, "measured_over_predicted": self.ratio}
               if self.predicted_us is not None else {}),
            **({"tail_us": {f"p{p:g}": t for p, t in self.tail_us}} if self.tail_us else {}),
        }


@dataclass(frozen=True)
class Case:
    """One prepared size of one benchmark.

    ``step`` is one timed iteration. ``reset`` puts sentinels into the
    outputs and ``check`` tells whether this rank's outputs (and unchanged
    inputs) are right after one more ``step``. ``per_step`` divides the time
    of a step into the unit reported (2 for a ping-pong: one-way latency; the
    window for ``bw``: time per message).
    """

    step: Callable[[], Any]
    nbytes: int
    count: int
    reset: Callable[[], None] | None = None
    check: Callable[[], bool] | None = None
    per_step: int = 1
    algorithm: str | Callable[[], str] = ""  # a callable is asked after the timed runs
    stats: Callable[[], dict | None] | None = None  # executor breakdown per run since stats_reset (--profile)
    stats_reset: Callable[[], None] | None = None  # called when the warm-up is over
    wrong: Callable[[], int] | None = None  # how many elements ``check`` finds wrong (nccl-tests' #wrong)




class Context:
    """The communicator, the options and buffer allocation for one run."""

    def __init__(self, comm, options: Options):
        self.comm = comm
        self.options = options
        self.rank = comm.Get_rank()
        self.n = comm.Get_size()
        self.dtype = V.check_dtype(options.dtype)
        self.itemsize = self.dtype.itemsize
        self.backend = backend(options.buffer)
        self.xp = self.backend.xp

    # Buffers live on the chosen backend; patterns and references on the host.
    def input(self, count: int, rank: int | None = None, dtype=None):
        """This rank's (or ``rank``'s) exact input pattern on the backend."""
        dt = self.dtype if dtype is None else dtype
        return self.to_device(V.pattern(self.rank if rank is None else rank, count, dt, n_ranks=self.n))

    def output(self, count: int, dtype=None):
        dt = self.dtype if dtype is None else dtype
        buf = self.xp.empty(count, dtype=dt)
        buf[...] = V.sentinel(dt)
        return buf

    def to_device(self, host: np.ndarray):
        if self.xp is np:
            return np.array(host)
        return self.xp.asarray(host)

    def to_host(self, buf) -> np.ndarray:
        return buf if self.xp is np else self.xp.asnumpy(buf)

    def sync(self) -> None:
        """Finish pending device work before a buffer reaches MPI or the host."""
        self.backend.synchronize()

    def equal(self, buf, ref: np.ndarray | None) -> bool:
        if ref is None:
            return True
        self.sync()
        return bool(np.array_equal(self.to_host(buf), ref))

    def wrong(self, buf, ref: np.ndarray | None) -> int:
        """How many elements of ``buf`` differ from ``ref`` (0 without a reference)."""
        if ref is None:
            return 0
        self.sync()
        host = self.to_host(buf)
        if host.shape != ref.shape:
            return int(max(host.size, ref.size))
        return int(np.count_nonzero(host != ref))


def backend(name: str):
    """The kernels backend called ``name`` (numpy or cupy); CCSynthError if unavailable."""
    try:
        from ccsynth.kernels import get_backend
    except ImportError:
        from ccsynth.kernels.base import get_backend
    try:
        be = get_backend(name)
        if be.is_device:
            select_device()  # each rank on the GPU of its local rank, not all on GPU 0
        return be
    except CCSynthError:
        raise
    except Exception as e:  # ImportError of cupy, or CUDA without a device
        if name == "cupy":
            raise CCSynthError(f"device buffers (-d cuda, --buffer cupy) need CuPy and a CUDA GPU, not available here: "
                               f"{e}") from None
        raise CCSynthError(f"--buffer {name} is not available here: {e}") from None


