"""Timing the probes under MPI: every function here communicates and must be called on every rank.

Every probe runs through the executor that will run the schedules
(:class:`~ccsynth.collectives.executor.CompiledSchedule`), timed the way
``ccsynth bench`` times a collective (:func:`ccsynth.bench.omb.measure`: a
barrier, then one call; the slowest rank's median). :func:`measure_machine`
makes the passes over all probes (each probe keeps every pass's time: the
fit takes the fastest) and returns a :class:`~ccsynth.bench.profiling.probes.RawProfile`;
nothing here fits (that is :mod:`ccsynth.bench.profiling.fit`, which needs
no MPI). The cold probes share one :class:`EvictionBuffer`, grown once to
the largest eviction pass. Why each probe exists: :mod:`ccsynth.bench.profile`.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable

import numpy as np

from ccsynth.bench import calibration as cal
from ccsynth.bench.omb import Case, measure, slowest_rank_median
from ccsynth.bench.profiling.probes import (
    KERNEL_BYTES, KERNEL_SECONDS, LOCAL_LADDER, FOOTPRINT_ITERS, SMALL, KernelRates, Probe, ProfileOptions,
    RawProfile, Sample, eviction_pass_bytes, node_ids, pair_probes, patterns, plan_probes, probe_schedule,
    round_probes,
)
from ccsynth.collectives.communicator import Communicator
from ccsynth.collectives.executor import CompiledSchedule
from ccsynth.collectives.plan import Plan, PlanEntry
from ccsynth.collectives.spec import Collective
from ccsynth.errors import CCSynthError
from ccsynth.kernels.base import get_backend
from ccsynth.synth.baselines import make_baseline
from ccsynth.topologies.catalog import fully_connected
from ccsynth.units import format_size

__all__ = [
    "EvictionBuffer", "measure_probe", "CommunicatorProbe", "measure_communicator", "measure_kernels",
    "measure_machine",
]


class EvictionBuffer:
    """One buffer for every eviction pass of a profile, grown to the largest pass asked for and written once: a
    fresh 512 MiB buffer per probe cost more than its passes (the first touch of 512 MiB took 0.1-3 s on the
    project's VM, against 50 ms for a pass over it; docs/results.md, h49-probes)."""

    def __init__(self) -> None:
        self._buf = np.zeros(0, np.uint8)

    def view(self, nbytes: int) -> np.ndarray:
        """The first ``nbytes`` bytes of the buffer (grown and written where it is shorter)."""
        if self._buf.size < nbytes:
            self._buf = np.ones(nbytes, np.uint8)
        return self._buf[:nbytes]


def measure_probe(comm, probe: Probe, options: ProfileOptions, evictions: EvictionBuffer | None = None) -> Sample:
    """Time ``probe`` through the executor on every rank; the result is the same on all ranks. ``evictions``: the
    buffer of the eviction passes (None: one of the pass's size, for this probe alone)."""
    n = comm.Get_size()
    schedule = probe_schedule(n, probe)
    cs = CompiledSchedule(schedule, comm, slice_bytes=probe.slice_bytes)
    # written, not zeros: a fresh zeroed buffer reads the kernel's one zero page, which sits in the caches
    # (windows of 4 MiB from np.zeros ran 2.3x faster than from written buffers)
    send = np.ones(probe.size_bytes // n, np.uint8)
    recv = np.ones(probe.size_bytes, np.uint8)
    iters, warmup = options.iterations(probe.nbytes)
    if probe.shape == "footprint" and options.iters is None:
        # one warm-up call: every call starts after its eviction pass, which is most of the probe's time
        iters, warmup = max(iters, -(-(FOOTPRINT_ITERS // (4 if options.quick else 1)) // options.n_passes)), 1
    cases = [Case(lambda: cs.run(send, recv), probe.size_bytes, probe.nbytes)]
    nevict = eviction_pass_bytes(probe, options.cold)
    if nevict:
        evict = (evictions or EvictionBuffer()).view(nevict)
        cases.append(Case(lambda: np.add(evict, 1, out=evict), 1, 1))  # untimed: caches hold other data
    local = measure(comm, cases, iters, warmup)[0]
    cs.free()
    return Sample(probe, slowest_rank_median(comm.allgather(local)))


class CommunicatorProbe:
    """One 8 B allgather and allreduce (ring schedules), ready to run through ccsynth's communicator and through
    the executor directly (see :func:`measure_communicator`); collective to build and to free."""

    KINDS = ("allgather", "allreduce")

    def __init__(self, comm):
        n = comm.Get_size()
        self.schedules = {kind: make_baseline("ring", Collective(kind, n, n if kind == "allreduce" else 1),
                                              fully_connected(n)) for kind in self.KINDS}
        plan = Plan(tuple(PlanEntry(kind, n, 0, None, s, algorithm="ring") for kind, s in self.schedules.items()))
        self.via = Communicator(comm, plan=plan, backend="numpy", fallback=True)
        self.direct = {kind: CompiledSchedule(s, comm) for kind, s in self.schedules.items()}
        # 8 B per rank: an allgather of 2 floats each, an allreduce of 2 floats per rank (the ring cuts n blocks)
        self.send = {"allgather": np.ones(2, np.float32), "allreduce": np.ones(2 * n, np.float32)}
        self.recv = {"allgather": np.ones(2 * n, np.float32), "allreduce": np.ones(2 * n, np.float32)}

    def cases(self, kind: str) -> list[Case]:
        send, recv, cs = self.send[kind], self.recv[kind], self.direct[kind]
        call = getattr(self.via, "Allgather" if kind == "allgather" else "Allreduce")
        return [Case(lambda: call(send, recv), send.nbytes, send.size), Case(lambda: cs.run(send, recv), send.nbytes,
                                                                               send.size)]

    def free(self) -> None:
        for cs in self.direct.values():
            cs.free()
        self.via.Free()


def measure_communicator(comm, probe: CommunicatorProbe, options: ProfileOptions) -> dict[str, tuple[float, float]]:
    """Per collective of ``probe``: (through the communicator, through the executor) in us, interleaved call by
    call (the slowest rank's median over iterations; the same on every rank)."""
    iters, warmup = options.iterations(SMALL)
    out = {}
    for kind in probe.KINDS:
        via, direct = measure(comm, probe.cases(kind), iters, warmup)
        out[kind] = (slowest_rank_median(comm.allgather(via)), slowest_rank_median(comm.allgather(direct)))
    return out


def measure_kernels(comm, nbytes: int = KERNEL_BYTES, seconds: float = KERNEL_SECONDS) -> KernelRates:
    """The backend's copy and float32 sum rates (GB/s), all ranks at once; the median over ranks.

    Each rank runs the kernel over and over for ``seconds`` of wall time
    (long against the scheduler's time slices, so that ranks sharing a core
    see their share of it, as they do inside a collective) and counts the
    bytes it produced.
    """
    be = get_backend("numpy")
    count = max(1, nbytes // 4)
    a, b, c = (be.zeros(count, np.float32) for _ in range(3))
    for buf in (a, b, c):
        buf.fill(1.0)  # written: zeroed pages would all read the kernel's one zero page
    red, fused = be.reducer("sum"), be.fused_reducer("sum")
    rates = []
    for kernel in (lambda: be.copy(a, b), lambda: red(a, b), lambda: fused(a, b, c)):
        kernel()  # touch the pages once
        comm.Barrier()
        done = 0
        t0 = time.perf_counter()
        while True:
            kernel()
            done += 1
            elapsed = time.perf_counter() - t0
            if elapsed >= seconds:
                break
        rates.append(count * 4 * done / (elapsed * 1e9))
    # the fixed cost of a call: the fused kernel on two floats, over and over
    x, y, z = (be.zeros(2, np.float32) for _ in range(3))
    comm.Barrier()
    calls = 0
    t0 = time.perf_counter()
    while True:
        for _ in range(100):
            fused(x, y, z)
        calls += 100
        elapsed = time.perf_counter() - t0
        if elapsed >= seconds / 2:
            break
    rates.append(elapsed / calls * 1e6)
    # the size-dependent cost: the fused kernel on buffers of every LOCAL_LADDER size
    ladder = [m for m in LOCAL_LADDER if m < count * 4]
    for m in ladder:
        k = max(1, m // 4)
        x, y, z = (be.zeros(k, np.float32) for _ in range(3))
        for buf in (x, y, z):
            buf.fill(1.0)
        batch = max(1, (256 << 10) // m)
        fused(x, y, z)
        comm.Barrier()
        calls = 0
        t0 = time.perf_counter()
        while True:
            for _ in range(batch):
                fused(x, y, z)
            calls += batch
            elapsed = time.perf_counter() - t0
            if elapsed >= seconds / 4:
                break
        rates.append(elapsed / calls * 1e6)
    all_rates = np.array(comm.allgather(rates))
    med = np.median(all_rates, axis=0)
    return KernelRates(float(med[0]), float(med[1]), float(med[2]), count * 4, float(med[3]),
                       tuple((m, float(t)) for m, t in zip(ladder, med[4:])))


def measure_machine(
    comm, options: ProfileOptions | None = None, progress: Callable[[int, int, str], None] | None = None,
) -> RawProfile:
    """Every probe's times, the kernels' rates and what the ranks run on (on every rank; call it on every rank);
    ``progress`` as :func:`profile_machine`'s."""
    from mpi4py import MPI

    options = options or ProfileOptions()
    t_start = time.perf_counter()
    n = comm.Get_size()
    if n < 2:
        raise CCSynthError("profiling needs at least 2 ranks (start it with mpiexec -n N, N >= 2)")
    hosts = tuple(comm.allgather(MPI.Get_processor_name() or socket.gethostname()))
    nodes = node_ids(hosts)
    try:
        my_cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        my_cores = os.cpu_count() or 1
    cores = tuple(comm.allgather(my_cores))
    pats = patterns(nodes)
    probes = plan_probes(pats, options)
    every = probes + [q for ps in pair_probes(nodes, options).values() for q in ps]
    rounds = round_probes(n, options)
    small = rounds + [None]  # None: the communicator probe
    passes = options.n_passes
    ref_sizes = options.calibration_sizes
    total = passes * (len(every) + 2 * len(small) + len(ref_sizes)) + 1
    say = progress or (lambda k, t, what: None)
    # Passes over all probes (the fit keeps each one's fastest pass: load from other processes comes and
    # goes, and can only make a probe slower). The small probes of rounds and the communicator run at
    # the start and at the end of every pass (the fit keeps the median of their fastest half, robust_us).
    times: dict[Probe, list[float]] = {}
    seen: dict[Probe, list[float]] = {}
    via_seen: dict[str, list[float]] = {}
    direct_seen: dict[str, list[float]] = {}
    comm_probe = CommunicatorProbe(comm)
    evictions = EvictionBuffer()
    references: list[list[cal.CalibrationRow]] = []
    k = 0

    def small_pass(pas: int) -> None:
        nonlocal k
        for probe in small:
            what = probe.describe() if probe is not None else "one call through ccsynth's communicator"
            say(k, total, what + (f" (pass {pas + 1} of {passes})" if passes > 1 else ""))
            if probe is None:
                for kind, (via, direct) in measure_communicator(comm, comm_probe, options).items():
                    via_seen.setdefault(kind, []).append(via)
                    direct_seen.setdefault(kind, []).append(direct)
            else:
                seen.setdefault(probe, []).append(measure_probe(comm, probe, options).measured_us)
            k += 1

    for pas in range(passes):
        small_pass(pas)
        for probe in every:
            say(k, total, probe.describe() + (f" (pass {pas + 1} of {passes})" if passes > 1 else ""))
            times.setdefault(probe, []).append(measure_probe(comm, probe, options, evictions).measured_us)
            k += 1
        if ref_sizes:
            def reference(size: int, pas: int = pas) -> None:
                nonlocal k
                say(k, total, f"reference collectives: {' and '.join(cal.REFERENCE_KINDS)} by "
                              f"{', '.join(cal.REFERENCE_ALGORITHMS)} and {cal.MPI} at {format_size(size)} per rank"
                              + (f" (pass {pas + 1} of {passes})" if passes > 1 else ""))
                k += 1

            references.append(cal.measure_calibration(comm, ref_sizes, options.calibration_iterations, reference))
        small_pass(pas)
    comm_probe.free()
    del evictions
    say(k, total, "local copy and reduction kernels")
    kernels = measure_kernels(comm, KERNEL_BYTES, KERNEL_SECONDS / 5 if options.quick else KERNEL_SECONDS)
    say(total, total, "fitting")
    lib = MPI.Get_library_version().strip().splitlines()[0].strip()
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"
    return RawProfile(
        n, options, hosts, cores, lib, when, load,
        probe_us=tuple((p, tuple(times[p])) for p in every),
        round_us=tuple((p, tuple(seen[p])) for p in rounds),
        communicator_us=tuple((kd, tuple(via_seen[kd]), tuple(direct_seen[kd])) for kd in via_seen),
        kernels=kernels, seconds=time.perf_counter() - t_start, calibration=cal.merge_passes(references))
