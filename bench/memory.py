"""Will the benchmark's buffers fit? Checked before anything is allocated.

``ccsynth bench allreduce -m 2G`` on a machine with 8 GiB would otherwise
die of a ``MemoryError`` (or the kernel's OOM killer) in the middle of the
run, after every smaller size was timed. :func:`check_memory` estimates what
the largest size needs on this machine and refuses a run that cannot fit,
with the numbers:

    bench allreduce -m 2G needs about 72.0 GiB of memory on this machine (4
    rank(s) here x 18.0 GiB: buffers of the largest algorithm at 2G), more
    than the 7.5 GiB available; use a smaller -m

The estimate, per rank and algorithm, in multiples of OMB's size ``S``
(:data:`BUFFERS`): the send and receive buffers, the host patterns the
validation compares against (always built: the send pattern; with ``-c`` the
expected result), for ccsynth's own algorithms (not ``mpi``) one more buffer
of the nccl-tests size for the executor's staging, and the int64
temporaries that build a pattern (:func:`ccsynth.bench.validate.pattern`:
three arrays of 8 bytes per element while one pattern is made, so 6 S for
float32 and 24 S for the uint8 of ``latency`` and ``bw``). Measured peaks
(allreduce, float32, one rank) are 8.5 S, and 9.5 S with ``-c``; the
estimate says 9 S and 10 S. A plain run prepares one algorithm at a time,
``--interleave`` all of them at once. Ranks on one machine share its memory:
the estimate is multiplied by the ranks of the communicator that share this
machine (``MPI.COMM_TYPE_SHARED``).

Available memory is Linux's ``MemAvailable`` (``/proc/meminfo``), else free
physical pages (``os.sysconf``); where neither is known the check passes.
CuPy buffers live on the GPU: only the host patterns are counted then.
"""

from __future__ import annotations

import os

from ccsynth.errors import CCSynthError
from ccsynth.units import format_size

__all__ = ["BUFFERS", "PATTERN_TEMP_BYTES", "buffer_bytes", "available_bytes", "check_memory"]

#: Buffers per rank in multiples of OMB's size S, by benchmark kind:
#: (send + receive on the backend, host patterns always, host patterns with -c), each as (a, b) = a + b*n.
BUFFERS: dict[str | None, tuple[tuple[int, int], tuple[int, int], tuple[int, int]]] = {
    "allreduce": ((2, 0), (1, 0), (1, 0)),
    "reduce": ((2, 0), (1, 0), (1, 0)),
    "broadcast": ((1, 0), (1, 0), (0, 0)),
    "allgather": ((1, 1), (1, 0), (0, 1)),
    "alltoall": ((0, 2), (0, 1), (0, 1)),
    "reduce_scatter": ((2, 0), (1, 0), (1, 0)),
    None: ((2, 0), (1, 0), (0, 0)),  # latency, bw: a send and a receive buffer, one pattern
}


def _times(ab: tuple[int, int], n: int) -> int:
    return ab[0] + ab[1] * n


#: int64 temporaries alive while one pattern is built, per element.
PATTERN_TEMP_BYTES = 3 * 8


def buffer_bytes(kind: str | None, size: int, n_ranks: int, itemsize: int, *, validate: bool, on_host: bool,
                 staging: bool) -> int:
    """Bytes one rank needs at its peak for one algorithm at OMB size ``size`` (see the module docstring)."""
    device, patterns, checks = BUFFERS.get(kind, BUFFERS[None])
    multiple = _times(patterns, n_ranks) + (_times(checks, n_ranks) if validate else 0)
    if on_host:
        multiple += _times(device, n_ranks)
    total = multiple * size
    if staging and on_host:
        total += size * (n_ranks if kind in ("allgather", "alltoall") else 1)
    largest_pattern = size * (n_ranks if kind == "alltoall" else 1)
    return total + largest_pattern // max(itemsize, 1) * PATTERN_TEMP_BYTES


def available_bytes() -> int | None:
    """Memory this machine can give without swapping (``MemAvailable``), or None if unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        return None


def check_memory(
    bench_name: str,
    kind: str | None,
    size: int,
    n_ranks: int,
    ranks_here: int,
    algorithms: list[str],
    *,
    itemsize: int,
    validate: bool,
    on_host: bool,
    together: bool,
    size_text: str = "",
    available: int | None = None,
) -> None:
    """Raise :class:`CCSynthError` if the buffers of the largest ``size`` cannot fit in this machine's memory.

    ``algorithms``: the names in the run (``mpi`` needs no staging);
    ``together``: their buffers live at once (``--interleave``).
    """
    if available is None:
        available = available_bytes()
    if available is None or size <= 0:
        return
    per_algo = [buffer_bytes(kind, size, n_ranks, itemsize, validate=validate, on_host=on_host, staging=a != "mpi")
                for a in algorithms] or [0]
    per_rank = sum(per_algo) if together else max(per_algo)
    need = per_rank * max(ranks_here, 1)
    if need > available:
        what = f"{len(algorithms)} algorithm(s) at once" if together else "the largest algorithm"
        raise CCSynthError(
            f"bench {bench_name} -m {size_text or format_size(size)} needs about {_gib(need)} of memory on this machine "
            f"({ranks_here} rank(s) here x {_gib(per_rank)}: buffers of {what} at {format_size(size)}), more than the "
            f"{_gib(available)} available; use a smaller -m"
        )


def _gib(n: int) -> str:
    return f"{n / (1 << 30):.1f} GiB" if n >= 1 << 30 else f"{n / (1 << 20):.1f} MiB"
