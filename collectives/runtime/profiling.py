"""Where a run's time goes: the same run loop, with timed calls.

``CompiledSchedule(profile=True)`` runs the same loop as an ordinary run
(:mod:`.dataflow` or :mod:`.straight_line`), but hands it timed versions of
its calls (:func:`timed_mpi`, :func:`timed_kernels`): each adds its
duration and a count to a :class:`RunStats`, and :func:`run_profiled` times
the whole run. Nothing of this is on the path of an ordinary run: the
plain calls are the library's own functions.

What the figures mean: ``wait`` is time blocked waiting for MPI (every
``wait_some``/``wait_any``/``test_all``, polling included), ``mpi_start``
the ``Isend``/``Irecv`` calls that post messages, ``kernels`` copies and reductions (on a
device each kernel is followed by a synchronisation, so that its time is
its own) and ``python`` everything else: the loop's own bookkeeping.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from collections.abc import Callable

from ccsynth.collectives.runtime.primitives import Kernels, MpiCalls

__all__ = ["RunStats", "timed_mpi", "timed_kernels", "run_profiled"]


@dataclass
class RunStats:
    """Where the time of the last runs went (``CompiledSchedule(profile=True)``)."""

    runs: int = 0
    total_s: float = 0.0
    wait_s: float = 0.0  # blocked waiting for MPI (Waitsome, Wait, Test polling)
    kernel_s: float = 0.0  # copies and reductions
    start_s: float = 0.0  # posting messages (Isend/Irecv)
    waits: int = 0
    kernels: int = 0
    starts: int = 0

    @property
    def overhead_s(self) -> float:
        """Python bookkeeping: everything that is neither waiting nor kernels nor starts."""
        return self.total_s - self.wait_s - self.kernel_s - self.start_s

    def per_run_us(self) -> dict[str, float]:
        r = max(self.runs, 1)
        return {
            "total": 1e6 * self.total_s / r,
            "wait": 1e6 * self.wait_s / r,
            "kernels": 1e6 * self.kernel_s / r,
            "mpi_start": 1e6 * self.start_s / r,
            "python": 1e6 * self.overhead_s / r,
            "wait_calls": self.waits / r,
            "kernel_calls": self.kernels / r,
            "starts": self.starts / r,
        }


def timed_mpi(calls: MpiCalls, stats: RunStats) -> MpiCalls:
    """``calls`` with every post (``Isend``/``Irecv``) and wait timed into ``stats``."""
    clock = time.perf_counter

    def timed(call: Callable, seconds: str, count: str) -> Callable:
        def timed_call(*args):
            t = clock()
            out = call(*args)
            setattr(stats, seconds, getattr(stats, seconds) + clock() - t)
            setattr(stats, count, getattr(stats, count) + 1)
            return out

        return timed_call

    return replace(
        calls,
        isend=timed(calls.isend, "start_s", "starts"),
        irecv=timed(calls.irecv, "start_s", "starts"),
        wait_some=timed(calls.wait_some, "wait_s", "waits"),
        wait_any=timed(calls.wait_any, "wait_s", "waits"),
        test_all=timed(calls.test_all, "wait_s", "waits"),
    )


def timed_kernels(k: Kernels, stats: RunStats) -> Kernels:
    """``k`` with every kernel call timed into ``stats`` (synchronised on a device)."""
    clock = time.perf_counter
    sync, device = k.sync, k.device

    def kernel(f: Callable) -> Callable:
        def timed_kernel(*views):
            t = clock()
            f(*views)
            if device:
                sync()
            stats.kernel_s += clock() - t
            stats.kernels += 1

        return timed_kernel

    def timed_sync():
        t = clock()
        sync()
        stats.kernel_s += clock() - t

    return replace(k, copy=kernel(k.copy), reduce=kernel(k.reduce), fused=kernel(k.fused), sync=timed_sync)


def run_profiled(loop: Callable, stats: RunStats, lay, bnd, k: Kernels, calls: MpiCalls, failures, ch) -> None:
    """Run ``loop`` with timed calls; one more run in ``stats`` if it returns."""
    k, calls = timed_kernels(k, stats), timed_mpi(calls, stats)
    t = time.perf_counter()
    loop(lay, bnd, k, calls, failures, ch)
    stats.runs += 1
    stats.total_s += time.perf_counter() - t
