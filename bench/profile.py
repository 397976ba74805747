"""Profiling the machine that is there: the cost model's figures, measured with the runtime that will use them.

``mpiexec -n N ccsynth topo profile -o machine.json`` calls
:func:`profile_machine` on every rank; rank 0 writes the topology it
returns (:func:`build_topology`), which ``ccsynth synth -t machine.json``
synthesizes for and ``ccsynth bench --predict machine.json`` predicts with.

What is measured, and how
-------------------------
The figures are those of :mod:`ccsynth.topologies.model`: per connection a
latency ``alpha``, a bandwidth and a per-message ``overhead``, paid on one
engine per rank (``overhead_scope="rank"``: ccsynth's executor is one
Python thread per rank); per rank the rate of local reductions
(``local_bw``); per call a fixed cost (``call_overhead``); the MPI
library's switch from eager to rendezvous messages (``eager_limit``,
``rendezvous_alpha``); and, where several pairs streaming at once get less
than one pair alone, a shared port per node. Four choices make them fit
what collectives will see:

* **The runtime that will run the schedules.** Every probe is a small
  :class:`~ccsynth.collectives.schedule.Schedule` run through
  :class:`~ccsynth.collectives.executor.CompiledSchedule`, timed like
  ``ccsynth bench`` times a collective (:func:`ccsynth.bench.omb.measure`:
  a barrier, then one call; the figure is the median over iterations of
  the slowest rank, :func:`~ccsynth.bench.omb.slowest_rank_median`). So
  the executor's Python per message, its straight-line path below 64 KiB
  and its dataflow loop with pipeline slices above, are in the figures.
* **The fastest of several passes.** Every probe is measured in
  :data:`PASSES` passes over all probes (a third of the iterations each),
  and keeps its fastest pass: on a shared machine, load from other
  processes comes and goes and can only make a probe slower.
* **All ranks active at once.** A probe runs a *pattern*: every rank sends
  to one peer and receives from another at the same time (a permutation,
  :func:`patterns`), as in a step of a collective. On a machine whose
  ranks outnumber its cores a pair timed while the others wait in a
  barrier measures the scheduler (MPICH busy-polls; ~1 ms per message on
  2 cores with 4 ranks), not what a collective meets. The ``n - 1``
  patterns together cover every ordered pair of ranks once; ranks are
  grouped into nodes by ``MPI.Get_processor_name()``, and a pattern moves
  either only inside nodes or only across them (rank ``j`` of node ``a``
  to rank ``j + t`` of node ``a + s``), so each pattern's figures belong
  to one kind of pair.
* **Fitted with the simulator that predicts.** A probe's time is not a
  formula of alpha, overhead and bandwidth: the executor cuts large
  messages into slices that pipeline, and overheads queue on the rank's
  engine. So the figures are the ones for which
  :func:`ccsynth.synth.executor_model.simulate_run` -- the very prediction
  ``ccsynth bench --predict`` makes -- reproduces the measured probes
  best (least squares on ``log(predicted / measured)``):

  1. *chains* of ``R`` rounds of 8 B messages (each round forwards what the
     last one received, a ping-pong around the pattern): a straight line in
     ``R`` whose slope is ``alpha + 2 * overhead`` (one hop) and whose
     intercept is the per-call cost, shared by all patterns (weighted
     linear least squares);
  2. *windows* of ``W`` independent 8 B messages in flight (OMB's streaming
     window): how the time grows with ``W`` splits the hop into ``alpha``,
     which overlaps, and ``overhead``, which queues on the engine
     (a one-dimensional search for ``overhead``, ``alpha`` being the rest);
  3. windows of large messages (``--sizes``, 64 KiB to 16 MiB by default,
     with the executor's 1 MiB and 4 MiB slices) and *forwards* of them
     (chains of :data:`FORWARD_ROUNDS` rounds: each round sends on what the
     last one received, as every step of a ring, a tree or a synthesized
     schedule after the first does): the bandwidth (a one-dimensional
     search). Both shapes, because they differ: on the project's 2-core
     machine a 256 KiB message that forwards what was just received took
     4-5x as long as an independent one (175 against 60 us for two rounds),
     and windows alone made every multi-step algorithm 1.5-3.5x slower than
     predicted from 128 KiB up (bench/RESULTS.md, issue 10, session 4);
  4. chains of two rounds of growing messages (1 KiB to 32 KiB): where a hop
     costs more than its bytes explain is the MPI library's switch from
     eager sends to a rendezvous (MPICH's shared memory: near 8 KiB), and
     the step is its extra latency (``Topology.eager_limit``,
     ``rendezvous_alpha``; the largest size still fast, and a search for
     the step); then the bandwidth is fitted once more with it;
  5. the size-dependent cost (after PLogP's ``g(m)``, :mod:`ccsynth.topologies.curve`):
     one bandwidth does not describe both the data that stays in the
     caches and the data that streams from memory, so every probe size
     (the schedule's size, its working set) whose messages carry
     :data:`CURVE_MIN_BYTES` or more (the ladder's chains, the bandwidth
     windows) and whose bytes make at least :data:`CURVE_MIN_SHARE` of its
     predicted time (:func:`byte_share`) gets a factor of its own -- the cost
     of its bytes relative to the fitted bandwidth -- searched with the
     figures above fixed (:func:`fit_curve`): ``Topology.message_curve``;
  6. the forward probes against that: per size, the factor by which a
     forwarded message costs more (:func:`fit_forward_curve`):
     ``Topology.forward_curve``, never rising with the size (each size
     takes the smallest factor measured at it or any smaller size,
     :func:`non_increasing`). Why: the forward probes have two modes from
     run to run (forwarded 1-16 MiB messages 1.0x or 2.5-5x an independent
     one on the project's 2-core machine), and no collective measured in
     the quiet runs C, D, E and E's tuned run showed the second one from 2
     MiB up: there the 2-rank ring and Rabenseifner allreduces (they
     forward) ran 0.5-0.94x recursive doubling (which does not), where the
     probes' 2.5-5x predicted them 2-4x too slow; below 1 MiB they ran
     0.9-2.9x it (bench/RESULTS.md, issue 10, h38-model);
  7. *footprint probes*, fitted before the message curve: windows of
     :data:`FOOTPRINT_MESSAGE` messages (first pattern only), timed on their
     own buffers alone and, each call after an untimed pass over an eviction
     buffer, at the footprints :data:`FOOTPRINTS` (2 to 256 MiB per rank, a
     factor of 2 apart; ``--footprints``), so that a rank touches ``F`` bytes
     -- the probe's buffers and the eviction pass -- between two calls (the
     call's *footprint*), and windows of :data:`FOOTPRINT_SMALL` messages at the
     same footprints; per ``F``, what a call costs more than at the smallest
     ``F``, split between a factor on its bytes (``Topology.footprint_curve``)
     and a cost once per call (``Topology.cold_call``, in full for calls of
     at least the small windows' buffers; :func:`fit_footprint`: the two
     window sizes, four times the bytes apart, tell them apart).
     Every probe is then predicted at its own footprint (its buffers, plus
     the cold probes' eviction pass), so the message and forward curves hold
     what the footprint does not explain. Why: the profile's probes touch
     a few MiB per call, while a collective in an application, or in
     ``ccsynth bench --interleave`` beside other algorithms, meets data the
     last-level cache no longer holds; on the project's 2-core machine a
     window of 2 x 256 KiB took 60 us at footprints up to 5.5 MiB, 126 us at
     17.5 MiB and 185 us at 65 MiB (32 MiB L3), and run D's rows measured
     2.1-3x their prediction from 1 MiB up (bench/RESULTS.md, h29-cache).
     Why two sizes: the extra is not all per byte. At the same footprints
     2 x 1 MiB windows paid 2.3-2.7x the extra of 2 x 256 KiB ones, not 4x
     (h29-cache), and on a later machine 2 x 256 KiB windows 1.5-2.4x the
     extra of 2 x 64 KiB ones; a factor fitted on one size charged the
     4-rank benchmark rows of 4-16 MiB 1.3-2x too much (h38-model), and the
     per-call part matters most to calls of 64 KiB-2 MiB (h44-coldcall).
     Why a fixed ladder and not multiples of the last-level cache (as
     before): a VM's sysfs may report a cache no core has (480 MiB on one of
     the project's), and two points (1.5 and 62 MiB there) left the curve
     between them to the interpolation, which put 3.7x on the 28 MiB
     footprint of the 4 MiB bandwidth windows; the message curve gave that
     back (0.22), and the benchmark's 4-16 MiB allreduces, at 98-392 MiB,
     were predicted 1.8-2.5x too fast (bench/RESULTS.md, h49-probes).

**Rounds and the communicator** (:func:`round_probes`, :func:`fit_round_cost`,
:func:`measure_communicator`). Two figures the probes above cannot see,
both measured on 8 B messages after everything else is fitted:

* *rounds of k peers*: ``R`` rounds in which every rank sends to ``k``
  peers and waits for ``k`` (``k = 1 .. n - 1``, :func:`round_peer_counts`;
  each round's sends wait for all of the last round's receives). With more
  ranks than cores a round of ``k`` peers completes only once all of them
  have been scheduled: on the project's 2-core machine with 4 ranks a round
  with three peers measured 2-2.5x one with one peer, beyond what its
  messages' overheads explain (bench/RESULTS.md, issue 10, h30-peers). Per
  ``k``, the slope of the measured time over ``R`` against the slope the
  simulator predicts with the fitted topology gives the extra per round:
  ``Topology.round_cost`` (:mod:`ccsynth.topologies.rounds`). The slope, not
  the times themselves: the per-call cost (the intercept) is the chains'.
* *the communicator's per call cost*: one 8 B allgather and one 8 B
  allreduce (ring schedules) run through
  :class:`~ccsynth.collectives.communicator.Communicator` and, interleaved,
  through :class:`~ccsynth.collectives.executor.CompiledSchedule` directly:
  the mean difference is ``Topology.communicator_overhead``, which
  ``ccsynth bench --predict`` adds to the rows that run through it.

Both are measured twice in every pass (at its start and at its end) and
kept as the median of the fastest half of those measurements
(:func:`robust_us`): on a loaded machine one fastest pass of a probe this
cheap can be a lucky one.

**Reference collectives** (:mod:`ccsynth.bench.calibration`). Last in
every pass, an allreduce and an allgather by ccsynth's ring and recursive
doubling and by the MPI library, interleaved, at input sizes from 64 B to
16 MiB per rank (quick: 1 KiB, 64 KiB, 1 MiB); after every other figure is
fitted, per size the geometric mean of their measured / predicted times is
``Topology.run_curve``, which the prediction of every whole run carries.
What the probes miss is common to every schedule at a size: on the
project's 2-core machine with 4 ranks every algorithm's rows from 8 B to
256 KiB ran 1.2-1.8x their prediction alike, and one run's factors from
these two algorithms, applied to another run's predictions, brought 30 of
30 size bands from 64 KiB within 25% (bench/RESULTS.md, issue 10, session
11). ``--no-reference`` leaves them out (no run curve).

**Cold caches.** The bandwidth and forward probes start every timed call
with the core's own caches holding other data: an untimed pass over an
eviction buffer (:func:`eviction_bytes`: four times the largest cache
private to a core; the shared last level is left alone) runs before each
call, interleaved as :func:`~ccsynth.bench.omb.measure` interleaves cases.
A collective meets its buffers so: in an application that computed on
other data since its last call, and in ``ccsynth bench --interleave``,
which runs every algorithm in turn. Timed warm, over and over on the same
buffers, 64 KiB-1 MiB messages moved 2-3x faster than they do inside the
benchmark (the message curve of run C came out at 0.1-0.3 there).
Evicting the last level too made the probes slower than the benchmark's
calls from 8 KiB to 256 KiB (whose data stays there): the median error
of run C's rows doubled there (bench/RESULTS.md).

The topology says ``async_progress: false``: MPICH (without a progress
thread) moves a large message's bytes only while the ranks are inside MPI,
and the executor enters MPI to wait only when nothing else is ready, so a
message cannot overlap a local copy or reduction of either rank
(:mod:`ccsynth.synth.simulate`). Measured in run C: a 2-rank allgather
copies its own block and exchanges the other; the executor's order of the
two (recursive doubling copies first, ring sends first) made no
difference (203 and 200 us at 1 MiB), while a model that let the ring's
transfer overlap its copy predicted it 1.7x too fast.

Where every rank has a core of its own (:func:`own_cores`), the topology
also says ``receiver_copies: true``: a message's bytes keep the receiving
rank's engine busy, so its reductions wait for them (MPICH over shared
memory copies a large message with the receiver's core, the core that runs
the executor's reductions), and the probes are fitted with it. Without it
the 2-rank allreduces of 4-16 MiB on session 10's VM were measured 1.7-2.3x
their prediction while the allgathers of the same bytes met theirs: the
model let each slice's reduction run beside the next slice's bytes. Refitted
on the raw probes of runs G, H and I with it, the 2-rank cells from 64 KiB
went from 21 to 24 of 36 and that band from 82% and 59% to 11% and 8%
(bench/RESULTS.md, issue 10, session 10). With more ranks than cores it is
left out: the 4-rank cells fell from 17 to 9 of 36 with it (ranks that
share a core are not one engine each).

Local reductions and copies are timed directly on the backend's kernels
(:func:`measure_kernels`), on all ranks at once, on buffers larger than
the caches: ``local_bw`` is the rate of the fused receive-reduce-copy
(``dst = a + b``), which reducing collectives run most; copies and plain
reductions run within about 25% of it. The same kernel called over and
over on two floats gives the fixed cost of a kernel call
(``local_overhead``; 1-5 us here, as much as a message's overhead), and on
buffers of :data:`LOCAL_LADDER` sizes the size-dependent cost of local
work (``Topology.local_curve``, :func:`local_curve`: a 256 KiB reduction
in the caches runs several times faster than a 16 MiB one).
Where a node runs at least three ranks, one pair streaming alone is timed
too (:func:`_pair_pattern`); if every pattern's ranks together get less
than ``1 - PORT_MARGIN`` of what that pair alone gets per link, the node
gets a :class:`~ccsynth.topologies.model.SharedPort` (its memory, seen as
one port) with the aggregate the patterns reach, and its links that pair's
bandwidth. A node that runs more ranks than it has cores gets that port
whatever the pair alone measured: its ranks' copies share the cores, so
all of its pairs together can never move more than the patterns reached,
and the pair is not alone there (the other ranks poll in MPI on the same
cores), so the margin test passes or fails by chance (run E's 4-rank
profile on 2 cores had no port, runs D and E's tuned run had one of 11-12
GB/s; without it the algorithms that send to three peers at once, direct
and one-shot, measured 1.8-2.6x their prediction from 64 KiB up). How many ranks share how many cores (``os.sched_getaffinity``)
goes into the description: oversubscription shows in every figure, since
every figure is measured with all ranks running.

**Measured, then fitted.** :func:`profile_machine` is :func:`fit_profile` of
:func:`measure_machine`: the measurement gives a :class:`RawProfile` (every
probe's time in every pass, the kernels' rates, what the ranks run on), the
fit needs no MPI. ``ccsynth topo profile --raw FILE`` saves the raw profile
(:mod:`ccsynth.bench.profile_raw`) and ``ccsynth topo refit FILE`` fits it
again: the same topology under the same fit rules, a new one under new
rules, without measuring again.

Only rank 0's results matter; every rank takes part in every probe. All
functions that communicate must be called on every rank.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import time
from dataclasses import dataclass, field, replace
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from ccsynth.bench import calibration as cal
from ccsynth.bench.omb import Case, measure, slowest_rank_median
from ccsynth.bench.omb import Options as BenchOptions
from ccsynth.collectives.builder import ScheduleBuilder
from ccsynth.collectives.communicator import Communicator
from ccsynth.collectives.plan import Plan, PlanEntry
from ccsynth.collectives.executor import CompiledSchedule
from ccsynth.collectives.schedule import Schedule
from ccsynth.collectives.spec import Collective
from ccsynth.errors import CCSynthError
from ccsynth.kernels.base import get_backend
from ccsynth.synth.baselines import make_baseline
from ccsynth.synth.executor_model import ExecutorSettings, lower_for_executor
from ccsynth.synth.simulate import TaskGraph, simulate_graph
from ccsynth.topologies.coldcall import ColdCallCost
from ccsynth.topologies.curve import SizeCurve
from ccsynth.topologies.catalog import fully_connected
from ccsynth.topologies.model import BYTES_PER_US_PER_GBPS, Link, SharedPort, Topology
from ccsynth.topologies.rounds import RoundCost
from ccsynth.units import format_size

__all__ = [
    "DEFAULT_SIZES", "QUICK_SIZES", "PORT_MARGIN", "ProfileOptions", "Pattern", "Probe", "Sample", "LinkFit",
    "ProtocolFit", "FitResult", "KernelRates", "MachineProfile", "patterns", "plan_probes", "probe_schedule",
    "measure_probe", "measure_kernels", "local_curve", "fit_hops", "fit_overhead", "fit_bandwidth", "fit_protocol",
    "fit_patterns", "fit_curve", "CURVE_MIN_BYTES", "CURVE_MIN_SHARE", "byte_share", "prune_message_curve", "LOCAL_LADDER", "CURVE_RANGE", "build_topology", "profile_machine",
    "FORWARD_ROUNDS", "FORWARD_SMALLEST", "eviction_bytes", "fit_forward_curve", "non_increasing", "own_cores",
    "ROUND_COUNTS", "ROUND_MAX_PEERS", "ROUND_MAX_MESSAGES", "round_peer_counts", "round_partners", "round_probes", "robust_us", "fit_round_cost",
    "CommunicatorFit", "measure_communicator", "FOOTPRINT_MESSAGE", "FOOTPRINT_SMALL", "footprint_probes",
    "FOOTPRINTS", "QUICK_FOOTPRINTS", "probe_footprint", "fit_footprint", "refit_with_footprint",
    "measure_footprint", "main", "RawProfile", "measure_machine", "fit_profile", "EvictionBuffer",
]

log = logging.getLogger(__name__)

SMALL = 8  # bytes per message of the latency and overhead probes
DEFAULT_SIZES = (64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20)
QUICK_SIZES = (64 << 10, 1 << 20)
SLICES = (1 << 20, 4 << 20)  # the executor's slice sizes: reducing collectives, the others
ROUNDS = (1, 2, 4, 8)
WINDOWS = (1, 2, 4, 8, 16)
#: rounds of a forward probe (a chain of large messages, see the module docstring)
FORWARD_ROUNDS = 2
#: the forward probes' messages: this size (below the bandwidth probes) and the bandwidth probes' sizes
FORWARD_SMALLEST = 16 << 10
#: message sizes of the protocol probes (chains of LADDER_ROUNDS rounds): where does a hop get dearer?
LADDER = (1 << 10, 2 << 10, 4 << 10, 6 << 10, 8 << 10, 12 << 10, 16 << 10, 32 << 10)
QUICK_LADDER = (2 << 10, 4 << 10, 8 << 10, 16 << 10)
LADDER_ROUNDS = 2
BW_WINDOW = 2  # messages per window of a bandwidth probe
PORT_MARGIN = 0.15  # all pairs at once below (1 - this) x one pair alone: a shared port
KERNEL_BYTES = 16 << 20  # local kernels are timed on buffers this large (beyond the caches)
KERNEL_SECONDS = 0.25  # ... for this long each (quick: a fifth)
ITERS_SMALL, WARMUP_SMALL = 120, 10
ITERS_LARGE, WARMUP_LARGE = 12, 2
#: probes whose messages carry at least this many bytes give a point of the message curve, at the probe's size
#: (below, a message's bytes are a small part of its time, and a factor fitted there would be noise)
CURVE_MIN_BYTES = 4 << 10
#: ... and only where the bytes are at least this share of the probes' predicted time (the median over the probes
#: of one size of ``d log(time) / d log(factor)``): a factor fitted on a share ``s`` moves by ``e / s`` for a timing
#: error ``e``, so the protocol ladder's chains of 4-16 KiB messages on 4 ranks (shares 0.07-0.17) put 0.13 or 1.2 on
#: call sizes of 64-128 KiB from 5-10% of noise, and the 4-rank allreduces of 64 KiB, whose own messages are
#: mostly bytes, were predicted 2.5x too fast (bench/RESULTS.md, h51-mid); below the first point the curve is flat
CURVE_MIN_SHARE = 0.25
#: buffer sizes of the local-kernel ladder (the local curve); KERNEL_BYTES is its last point
LOCAL_LADDER = (4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20)
PASSES = 3  # every probe is measured in this many passes over all of them; the fastest pass counts
#: rounds of the round probes (quick: the first and the last); the per-round cost is the slope over these
ROUND_COUNTS = (1, 2, 4, 8)
#: the most peers a round probe waits on, and the most messages per rank of one (fewer rounds beyond; at least two
#: round counts): a probe of every rank on many ranks would cost more to build and fit than to run
ROUND_MAX_PEERS, ROUND_MAX_MESSAGES = 64, 128
#: message size of the footprint probes (windows of BW_WINDOW messages: one slice each)
FOOTPRINT_MESSAGE = 256 << 10
#: message size of the second footprint probes (a quarter of the bytes: what a cold call pays once, and per byte)
FOOTPRINT_SMALL = 64 << 10
#: the footprints per rank the footprint probes are timed at, beside their own buffers alone (an eviction pass makes
#: up the rest): a factor of 2 apart, from about the L2 to most of what ``ccsynth bench --interleave`` touches up to
#: 16 MiB (0.6-392 MiB per rank in run F), whatever the last-level cache the system reports (bench/RESULTS.md,
#: h49-probes); not 512 MiB: its passes alone would double the eviction passes' bytes (``--footprints 2M:512M``)
FOOTPRINTS = tuple(m << 20 for m in (2, 4, 8, 16, 32, 64, 128, 256))
QUICK_FOOTPRINTS = (8 << 20, 64 << 20)
#: a footprint curve whose factors all lie within this of 1 says nothing: left out
FOOTPRINT_FLAT = 0.05
#: timed iterations of a footprint probe over all passes (a ratio of two probes is fitted: more than a window's;
#: 48 with six footprints, 18 with the ladder's nine: at 48 its eviction passes made the 2-rank profile 2.2x as long,
#: bench/RESULTS.md, h49-probes)
FOOTPRINT_ITERS = 18
QUICK_ITERS_SMALL, QUICK_ITERS_LARGE = 15, 3


# ------------------------------------------------------------------ records
@dataclass(frozen=True)
class ProfileOptions:
    """What ``ccsynth topo profile`` was asked for."""

    sizes: tuple[int, ...] | None = None  # message sizes of the bandwidth probes (None: DEFAULT_SIZES, QUICK_SIZES)
    iters: int | None = None  # timed iterations per probe, over all passes (None: by size)
    quick: bool = False  # fewer probes and iterations: seconds instead of a minute
    passes: int | None = None  # passes over all probes (None: PASSES, quick 1); a probe keeps its fastest pass
    cold: bool = True  # large-message probes start with the caches holding other data (see the module docstring)
    footprints: tuple[int, ...] | None = None  # footprints of the footprint probes (None: FOOTPRINTS, QUICK_FOOTPRINTS)
    calibrate: bool = True  # run the reference collectives that give the run curve (ccsynth.bench.calibration)

    @property
    def bw_sizes(self) -> tuple[int, ...]:
        if self.sizes:
            return tuple(self.sizes)
        return QUICK_SIZES if self.quick else DEFAULT_SIZES

    @property
    def n_passes(self) -> int:
        return self.passes or (1 if self.quick else PASSES)

    def iterations(self, nbytes: int) -> tuple[int, int]:
        """(timed iterations, warm-up iterations) of one pass of a probe moving ``nbytes`` per message."""
        large = nbytes > 64 << 10
        if self.iters is not None:
            iters, warmup = self.iters, max(1, self.iters // 10)
        elif self.quick:
            iters, warmup = (QUICK_ITERS_LARGE, 1) if large else (QUICK_ITERS_SMALL, 2)
        else:
            iters, warmup = (ITERS_LARGE, WARMUP_LARGE) if large else (ITERS_SMALL, WARMUP_SMALL)
        return max(1, -(-iters // self.n_passes)), warmup

    @property
    def calibration_sizes(self) -> tuple[int, ...]:
        """Input bytes per rank of the reference collectives (none when ``calibrate`` is off)."""
        if not self.calibrate:
            return ()
        return cal.QUICK_SIZES if self.quick else cal.SIZES

    def calibration_iterations(self, size: int) -> tuple[int, int]:
        """(timed, warm-up) iterations of one pass of the reference collectives at ``size`` input bytes per rank:
        ``ccsynth bench``'s counts shared among the passes (a quarter of them, quick)."""
        iters, warmup = BenchOptions(sizes=()).iterations(size)
        if self.quick:
            iters, warmup = max(2, iters // 4), max(1, warmup // 4)
        return max(2, -(-iters // self.n_passes)), warmup

    @property
    def rounds(self) -> tuple[int, ...]:
        return (1, 2, 4) if self.quick else ROUNDS

    @property
    def windows(self) -> tuple[int, ...]:
        return (1, 4) if self.quick else WINDOWS

    @property
    def slices(self) -> tuple[int, ...]:
        return SLICES[:1] if self.quick else SLICES

    @property
    def ladder(self) -> tuple[int, ...]:
        return QUICK_LADDER if self.quick else LADDER

    @property
    def footprint_targets(self) -> tuple[int, ...]:
        """Footprints per rank (bytes) the footprint probes are timed at besides their own buffers alone."""
        if self.footprints:
            return tuple(sorted(set(self.footprints)))
        return QUICK_FOOTPRINTS if self.quick else FOOTPRINTS


@dataclass(frozen=True)
class Pattern:
    """A permutation of the ranks: rank ``r`` sends to ``dest[r]`` (-1: ``r`` stays idle).

    ``kind`` is ``intra`` (pairs inside nodes) or ``inter`` (across nodes).
    """

    name: str
    dest: tuple[int, ...]
    kind: str = "intra"

    @property
    def pairs(self) -> tuple[tuple[int, int], ...]:
        return tuple((r, d) for r, d in enumerate(self.dest) if d >= 0)


@dataclass(frozen=True)
class Probe:
    """One measurement schedule: ``messages`` messages of ``nbytes`` per active rank, on ``pattern``.

    ``shape`` is ``chain`` (each round forwards the last one's message; of
    small messages and of the protocol ladder), ``rounds`` (``messages``
    rounds of exchanges with ``peers`` peers, :func:`round_probes`; the
    pattern only names it), ``forward`` (the same of
    large messages: the bandwidth probes of forwarded data), ``window``
    (all messages independent, in flight together) or ``footprint`` (a
    window, each call after an eviction pass over ``evict_bytes``);
    ``slice_bytes`` is the executor's pipeline slice (None: its default).
    """

    pattern: Pattern
    shape: str
    messages: int
    nbytes: int
    slice_bytes: int | None = None
    peers: int = 1  # shape "rounds": the peers every rank exchanges with in each of its ``messages`` rounds
    evict_bytes: int = 0  # footprint probes: the eviction pass before each call

    @property
    def buffer_bytes(self) -> int:
        """Bytes of one rank's send and receive buffers (the probe's own working set)."""
        return self.messages * self.peers * self.nbytes * (1 + len(self.pattern.dest))

    @property
    def size_bytes(self) -> int:
        """The schedule's message size (nccl-tests convention of its allgather spec)."""
        return len(self.pattern.dest) * self.messages * self.peers * self.nbytes

    def describe(self) -> str:
        if self.shape == "rounds":
            return f"{self.messages} rounds with {self.peers} peer{'s' if self.peers > 1 else ''} of {format_size(self.nbytes)}"
        sl = f", {self.slice_bytes >> 20} MiB slices" if self.slice_bytes and self.nbytes > SMALL else ""
        ev = f", after {format_size(self.evict_bytes)} of other data" if self.shape == "footprint" else ""
        return f"{self.pattern.name}: {self.shape} of {self.messages} x {format_size(self.nbytes)}{sl}{ev}"


@dataclass(frozen=True)
class Sample:
    """A probe and its measured time (us: median over iterations of the slowest rank)."""

    probe: Probe
    measured_us: float


@dataclass(frozen=True)
class LinkFit:
    """The fitted figures of one pattern (all its pairs): us, us, GB/s; ``error``: median |pred/meas - 1|."""

    pattern: Pattern
    alpha: float
    overhead: float
    bw: float
    error: float = 0.0

    @property
    def hop_us(self) -> float:
        """One small message alone: ``alpha + 2 * overhead`` (what a ping-pong's half round trip shows)."""
        return self.alpha + 2.0 * self.overhead


@dataclass(frozen=True)
class ProtocolFit:
    """The protocol switch: messages of more than ``eager_limit`` bytes pay ``rendezvous_alpha`` us more latency.

    ``eager_limit`` None: no switch was found (one protocol for every size).
    """

    eager_limit: float | None = None
    rendezvous_alpha: float = 0.0


NO_SWITCH = ProtocolFit()


@dataclass(frozen=True)
class FitResult:
    """What :func:`fit_patterns` found: the per-call cost, the figures per pattern, the protocol switch."""

    call_overhead: float
    fits: tuple[LinkFit, ...]
    protocol: ProtocolFit = NO_SWITCH


@dataclass(frozen=True)
class KernelRates:
    """GB/s of the backend's kernels on float32, every rank running at once.

    ``copy`` (``dst = src``), ``reduce`` (``dst += src``) and ``fused``
    (``dst = a + b``, the receive-reduce-copy that reducing collectives run
    most); ``local_bw`` is the fused kernel's rate.
    """

    copy: float
    reduce: float
    fused: float
    nbytes: int
    call_us: float = 0.0  # one call of the fused kernel on 8 bytes: the fixed cost of a kernel call
    ladder: tuple[tuple[int, float], ...] = ()  # (buffer bytes, us per call of the fused kernel) at LOCAL_LADDER

    @property
    def local_bw(self) -> float:
        return self.fused


@dataclass(frozen=True)
class RawProfile:
    """What :func:`measure_machine` timed, before any fit: :func:`fit_profile` makes the profile of it, the same
    one whether it was just measured or read back from a file (:mod:`ccsynth.bench.profile_raw`).

    ``probe_us``: every probe of :func:`plan_probes` and the pair-alone windows, with its time in every pass (us,
    the slowest rank's median; the fit keeps the fastest); ``round_us``: the round probes, measured twice a pass
    (the fit keeps :func:`robust_us`); ``communicator_us``: per collective, the times through ccsynth's
    communicator and through the executor directly (:func:`measure_communicator`, twice a pass).
    """

    n: int
    options: ProfileOptions
    hosts: tuple[str, ...]
    cores: tuple[int, ...]
    mpi_library: str
    when: str  # "YYYY-mm-dd HH:MM UTC" when the measurement ended
    load: str  # the load average then
    probe_us: tuple[tuple[Probe, tuple[float, ...]], ...]
    round_us: tuple[tuple[Probe, tuple[float, ...]], ...]
    communicator_us: tuple[tuple[str, tuple[float, ...], tuple[float, ...]], ...]
    kernels: KernelRates
    seconds: float = 0.0  # the measurement's wall time
    calibration: tuple[cal.CalibrationRow, ...] = ()  # the reference collectives, every pass's time (run curve)

    @property
    def nodes(self) -> tuple[int, ...]:
        return _node_ids(self.hosts)


@dataclass(frozen=True)
class MachineProfile:
    """Everything :func:`profile_machine` found (rank 0's copy is the one to use)."""

    topology: Topology
    fits: tuple[LinkFit, ...]
    call_overhead: float
    kernels: KernelRates
    samples: tuple[Sample, ...]
    nodes: tuple[int, ...]
    hosts: tuple[str, ...]
    cores: tuple[int, ...]  # cores each rank may use
    ports: tuple[SharedPort, ...] = ()
    pair_bw: dict = field(default_factory=dict)  # node -> one pair's bandwidth alone (GB/s), where measured
    protocol: ProtocolFit = NO_SWITCH
    seconds: float = 0.0
    round_samples: tuple[Sample, ...] = ()  # the round probes (robust_us of their measurements)
    communicator: CommunicatorFit | None = None
    raw: RawProfile | None = None  # what was measured (the profile is fit_profile(raw))

    def to_dict(self) -> dict:
        return {
            "call_overhead_us": self.call_overhead,
            "local_bw_GBps": self.kernels.local_bw,
            "kernels_GBps": {"copy": self.kernels.copy, "reduce": self.kernels.reduce, "fused": self.kernels.fused},
            "local_overhead_us": self.kernels.call_us,
            "patterns": [
                {"pattern": f.pattern.name, "kind": f.pattern.kind, "pairs": [list(p) for p in f.pattern.pairs],
                 "alpha_us": f.alpha, "overhead_us": f.overhead, "bw_GBps": f.bw, "error": f.error}
                for f in self.fits
            ],
            "shared_ports": [{"name": p.name, "bw_GBps": p.bw} for p in self.ports],
            "eager_limit_bytes": self.protocol.eager_limit,
            "rendezvous_alpha_us": self.protocol.rendezvous_alpha,
            "message_curve": None if self.topology.message_curve is None else self.topology.message_curve.to_dict(),
            "local_curve": None if self.topology.local_curve is None else self.topology.local_curve.to_dict(),
            "forward_curve": None if self.topology.forward_curve is None else self.topology.forward_curve.to_dict(),
            "footprint_curve": None if self.topology.footprint_curve is None else self.topology.footprint_curve.to_dict(),
            "cold_call": None if self.topology.cold_call is None else self.topology.cold_call.to_dict(),
            "run_curve": None if self.topology.run_curve is None else self.topology.run_curve.to_dict(),
            "mpi_reference": [r.to_dict() for r in self.topology.mpi_reference],
            "local_ladder_us": [[m, t] for m, t in self.kernels.ladder],
            "pair_bw_GBps": {str(k): v for k, v in self.pair_bw.items()},
            "samples": [{"probe": s.probe.describe(), "measured_us": s.measured_us} for s in self.samples],
            "round_cost": None if self.topology.round_cost is None else self.topology.round_cost.to_dict(),
            "round_samples": [{"peers": s.probe.peers, "rounds": s.probe.messages, "measured_us": s.measured_us}
                              for s in self.round_samples],
            "communicator_overhead_us": self.topology.communicator_overhead,
            "communicator_us": None if self.communicator is None else {
                k: {"communicator": self.communicator.via_us[k], "executor": self.communicator.direct_us[k]}
                for k in self.communicator.via_us},
            "hosts": list(self.hosts),
            "cores": list(self.cores),
            "seconds": self.seconds,
        }


# ------------------------------------------------------------------ patterns
def _node_ids(hosts: Sequence[str]) -> tuple[int, ...]:
    """Node id of every rank, numbered in order of first appearance."""
    ids: dict[str, int] = {}
    return tuple(ids.setdefault(h, len(ids)) for h in hosts)


def patterns(nodes: Sequence[int]) -> tuple[Pattern, ...]:
    """``n - 1`` permutations, all ranks active, that together send once over every ordered pair.

    With ``N`` nodes of ``p`` ranks each, pattern ``(s, t)`` sends from rank
    ``j`` of node ``a`` to rank ``j + t`` of node ``a + s`` (mod ``p`` and
    ``N``): ``s = 0`` keeps to nodes (``t = 1 .. p-1``), ``s > 0`` crosses
    them (``t = 0 .. p-1``). Nodes of unequal sizes fall back to the shifts
    ``r -> r + k`` of the whole world (a pattern may then mix pair kinds).
    """
    n = len(nodes)
    members = _node_members(nodes)
    groups = [members[k] for k in sorted(members)]
    p = len(groups[0])
    if any(len(g) != p for g in groups):
        out = []
        for k in range(1, n):
            dest = tuple((r + k) % n for r in range(n))
            kinds = {"intra" if nodes[r] == nodes[d] else "inter" for r, d in enumerate(dest)}
            out.append(Pattern(f"shift {k}", dest, kinds.pop() if len(kinds) == 1 else "mixed"))
        return tuple(out)
    where = {r: (a, j) for a, g in enumerate(groups) for j, r in enumerate(g)}
    N = len(groups)
    out = []
    for s in range(N):
        for t in range(1 if s == 0 else 0, p):
            dest = tuple(groups[(where[r][0] + s) % N][(where[r][1] + t) % p] for r in range(n))
            name = f"shift {t}" if N == 1 else (f"node shift 0, rank shift {t}" if s == 0 else f"node shift {s}, rank shift {t}")
            out.append(Pattern(name, dest, "intra" if s == 0 else "inter"))
    return tuple(out)


def _pair_pattern(nodes: Sequence[int], node: int) -> Pattern | None:
    """The first two ranks of ``node`` exchanging, every other rank idle (None if the node has < 3 ranks)."""
    ranks = [r for r, x in enumerate(nodes) if x == node]
    if len(ranks) < 3:
        return None
    a, b = ranks[0], ranks[1]
    dest = [-1] * len(nodes)
    dest[a], dest[b] = b, a
    return Pattern(f"pair {a}<->{b} alone", tuple(dest))


# ------------------------------------------------------------------ probes
def probe_schedule(n: int, probe: Probe) -> Schedule:
    """The schedule of ``probe`` on ``n`` ranks (an allgather spec: chunk ``j`` of ``o`` takes message ``j``).

    Not a complete allgather (it is never verified as one): the executor
    needs only a race-free schedule whose messages match.
    """
    if probe.shape == "rounds":
        return _rounds_schedule(n, probe)
    m = probe.messages
    b = ScheduleBuilder(Collective("allgather", n, m), f"{probe.shape}{m}", topology="profile")
    for j in range(m):
        for r, d in probe.pattern.pairs:
            if probe.shape in ("chain", "forward"):  # a window or footprint probe: independent messages
                b.transfer(r, d, ("i", 0) if j == 0 else ("o", j - 1), ("o", j))
            else:
                b.transfer(r, d, ("i", j), ("o", j))
    return b.build()


def _rounds_schedule(n: int, probe: Probe) -> Schedule:
    """The schedule of a round probe: round ``j`` sends, on every rank, what round ``j - 1`` received from each
    peer to that peer's counterpart (the first round: the input), after all of round ``j - 1``'s receives."""
    k, rounds = probe.peers, probe.messages
    perms = round_partners(n, k)
    b = ScheduleBuilder(Collective("allgather", n, rounds * k), f"rounds{rounds}x{k}", topology="profile")
    last: list[list[int]] = [[] for _ in range(n)]  # per rank: the receives of the last round
    for j in range(rounds):
        now: list[list[int]] = [[] for _ in range(n)]
        for i, dest in enumerate(perms):
            for r in range(n):
                src = ("i", i) if j == 0 else ("o", (j - 1) * k + i)
                _, rid = b.transfer(r, dest[r], src, ("o", j * k + i), send_deps=last[r])
                now[dest[r]].append(rid)
        last = now
    return b.build()


def round_peer_counts(n: int) -> tuple[int, ...]:
    """The peer counts ``k`` of the round probes on ``n`` ranks: 1 to 8, then about doubling, and ``n - 1``, up to
    :data:`ROUND_MAX_PEERS` (the round cost stays at its last point beyond)."""
    ks = {k for k in (*range(1, 9), 12, 16, 24, 32, 48, ROUND_MAX_PEERS) if k < n}
    return tuple(sorted(ks | ({n - 1} if n - 1 <= ROUND_MAX_PEERS else set())))


def round_partners(n: int, k: int) -> tuple[tuple[int, ...], ...]:
    """``k`` permutations of the ranks, the peers of a round: with ``n`` a power of two ``r -> r xor m``
    (``m = 1 .. k``: a rank sends to and receives from the same ``k`` peers, as recursive doubling and the
    direct algorithms do), otherwise ``r -> r + s`` (``s = 1 .. k``: it receives from ``k`` others)."""
    if n & (n - 1) == 0:
        return tuple(tuple(r ^ m for r in range(n)) for m in range(1, k + 1))
    return tuple(tuple((r + s) % n for r in range(n)) for s in range(1, k + 1))


def round_probes(n: int, options: ProfileOptions) -> list[Probe]:
    """The round probes (see the module docstring): per peer count, every round count of :data:`ROUND_COUNTS`."""
    counts = (ROUND_COUNTS[0], ROUND_COUNTS[-1]) if options.quick else ROUND_COUNTS
    out = []
    for k in round_peer_counts(n):
        pat = Pattern(f"{k} peer{'s' if k > 1 else ''}", round_partners(n, k)[0])
        mine = [r for i, r in enumerate(counts) if i < 2 or r * k <= ROUND_MAX_MESSAGES]
        out += [Probe(pat, "rounds", r, SMALL, peers=k) for r in mine]
    return out


def plan_probes(pats: Sequence[Pattern], options: ProfileOptions) -> list[Probe]:
    """Every probe of a profile, in the order they run."""
    out: list[Probe] = []
    forward_sizes = sorted({FORWARD_SMALLEST, *options.bw_sizes})
    for pat in pats:
        out += [Probe(pat, "chain", r, SMALL) for r in options.rounds]
        out += [Probe(pat, "window", w, SMALL) for w in options.windows if w > 1]
        out += [Probe(pat, "chain", LADDER_ROUNDS, s) for s in options.ladder]
        for sl in options.slices:
            # below 1 MiB every slice size cuts a message alike: one probe is enough
            out += [Probe(pat, "window", BW_WINDOW, s, sl) for s in options.bw_sizes if sl == SLICES[0] or s >= SLICES[0]]
        out += [Probe(pat, "forward", FORWARD_ROUNDS, s, SLICES[0]) for s in forward_sizes]
    return out + footprint_probes(pats[0], options)


def footprint_probes(pat: Pattern, options: ProfileOptions) -> list[Probe]:
    """The footprint probes (see the module docstring): windows of :data:`FOOTPRINT_MESSAGE` messages on their own
    buffers alone and after an eviction pass that makes their footprint each of ``options.footprint_targets``
    above those buffers, and windows of :data:`FOOTPRINT_SMALL` messages at the same footprints (their buffers are
    smaller: their eviction passes longer by the difference)."""
    own = Probe(pat, "footprint", BW_WINDOW, FOOTPRINT_MESSAGE, SLICES[0]).buffer_bytes
    large = [Probe(pat, "footprint", BW_WINDOW, FOOTPRINT_MESSAGE, SLICES[0], evict_bytes=e)
             for e in (0, *(t - own for t in options.footprint_targets if t > own))]
    less = large[0].buffer_bytes - Probe(pat, "footprint", BW_WINDOW, FOOTPRINT_SMALL, SLICES[0]).buffer_bytes
    return large + [replace(p, nbytes=FOOTPRINT_SMALL, evict_bytes=p.evict_bytes + less) for p in large]


def _caches() -> list[tuple[int, str]]:
    """(bytes, shared_cpu_list) of every cache of cpu0 that sysfs lists."""
    base = "/sys/devices/system/cpu/cpu0/cache"
    try:
        entries = os.listdir(base)
    except OSError:
        return []
    out = []
    for e in entries:
        try:
            with open(os.path.join(base, e, "size")) as f:
                text = f.read().strip()
            with open(os.path.join(base, e, "shared_cpu_list")) as f:
                shared = f.read().strip()
        except OSError:
            continue
        mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:].upper(), 1)
        try:
            out.append((int(text.rstrip("KMGkmg")) * mult, shared))
        except ValueError:
            continue
    return out


def _evicts(probe: Probe, cold: bool) -> int:
    """Bytes of the untimed eviction pass before each timed call of ``probe``."""
    if probe.shape == "footprint":
        return probe.evict_bytes
    if cold and probe.shape in ("window", "forward") and probe.nbytes > SMALL:
        return eviction_bytes()
    return 0


def probe_footprint(probe: Probe, cold: bool = True) -> int:
    """The bytes a rank touches between two timed calls of ``probe``: its buffers and the eviction pass."""
    return probe.buffer_bytes + _evicts(probe, cold)


def eviction_bytes() -> int:
    """Bytes that push a rank's data out of its core's own caches: four times the largest cache private to
    a core (read from Linux's sysfs; a cache shared by several cores, the last level, is left alone); 8 MiB
    where the system does not say."""
    largest = 0
    for size, shared in _caches():
        if "," not in shared and "-" not in shared:  # private to a core
            largest = max(largest, size)
    return 4 * largest if largest else 8 << 20


class EvictionBuffer:
    """One buffer for every eviction pass of a profile, grown to the largest pass asked for and written once: a
    fresh 512 MiB buffer per probe cost more than its passes (the first touch of 512 MiB took 0.1-3 s on the
    project's VM, against 50 ms for a pass over it; bench/RESULTS.md, h49-probes)."""

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
    nevict = _evicts(probe, options.cold)
    if nevict:
        evict = (evictions or EvictionBuffer()).view(nevict)
        cases.append(Case(lambda: np.add(evict, 1, out=evict), 1, 1))  # untimed: caches hold other data
    local = measure(comm, cases, iters, warmup)[0]
    cs.free()
    return Sample(probe, slowest_rank_median(comm.allgather(local)))


class _CommunicatorProbe:
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


def measure_communicator(comm, probe: _CommunicatorProbe, options: ProfileOptions) -> dict[str, tuple[float, float]]:
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


def local_curve(kernels: KernelRates) -> SizeCurve | None:
    """The local curve of the kernel ladder: per size, the us of its bytes (a call's time less the fixed
    cost of a call) relative to ``local_bw`` (the rate on the largest buffers); None without a ladder."""
    if not kernels.ladder:
        return None
    rate = kernels.local_bw * BYTES_PER_US_PER_GBPS  # bytes per us
    sizes, factors = [], []
    for m, us in [*kernels.ladder, (kernels.nbytes, kernels.nbytes / rate + kernels.call_us)]:
        f = max(us - kernels.call_us, 0.0) * rate / m
        sizes.append(float(m))
        factors.append(min(max(f, CURVE_RANGE[0]), CURVE_RANGE[1]))
    return SizeCurve(tuple(sizes), tuple(factors))


# ------------------------------------------------------------------ fitting
class _Predictor:
    """Predicted probe times for candidate figures: each probe lowered once, simulated per candidate.

    ``cold``: whether the window and forward probes ran after an eviction pass (their footprint).
    """

    def __init__(self, n: int, cold: bool = True, receiver_copies: bool = False):
        self.n = n
        self.cold = cold
        self.receiver_copies = receiver_copies
        self._graphs: dict[Probe, TaskGraph] = {}

    def graph(self, probe: Probe) -> TaskGraph:
        g = self._graphs.get(probe)
        if g is None:
            g = lower_for_executor(probe_schedule(self.n, probe), probe.size_bytes,
                                   ExecutorSettings(slice_bytes=probe.slice_bytes))
            self._graphs[probe] = g
        return g

    def time(self, probe: Probe, alpha: float, overhead: float, bw: float, call: float,
             protocol: ProtocolFit = NO_SWITCH, curve: SizeCurve | None = None,
             forward: SizeCurve | None = None, footprint: SizeCurve | None = None,
             cold: ColdCallCost | None = None) -> float:
        links = tuple(Link(r, d, max(alpha, 0.0), bw, overhead) for r, d in probe.pattern.pairs)
        topo = Topology("candidate", self.n, links=links, overhead_scope="rank", call_overhead=call,
                        eager_limit=protocol.eager_limit, rendezvous_alpha=protocol.rendezvous_alpha,
                        message_curve=curve, forward_curve=forward, async_progress=False, footprint_curve=footprint,
                        cold_call=cold, receiver_copies=self.receiver_copies)
        return simulate_graph(self.graph(probe), topo, footprint_bytes=probe_footprint(probe, self.cold)).time_us

    def fitted(self, probe: Probe, f: LinkFit, call: float, protocol: ProtocolFit,
               curve: SizeCurve | None = None, forward: SizeCurve | None = None,
               footprint: SizeCurve | None = None, cold: ColdCallCost | None = None) -> float:
        """The predicted time of ``probe`` with the figures ``f`` of its pattern."""
        return self.time(probe, f.alpha, f.overhead, f.bw, call, protocol, curve, forward, footprint, cold)


def _log_error(pred: Callable[[Probe], float], samples: Sequence[Sample]) -> float:
    return sum(math.log(pred(s.probe) / s.measured_us) ** 2 for s in samples)


def _minimize(f: Callable[[float], float], lo: float, hi: float, steps: int = 24, rounds: int = 30) -> float:
    """The x in [lo, hi] minimizing f: a grid, then golden-section search around the best point."""
    xs = [lo + (hi - lo) * i / steps for i in range(steps + 1)]
    vals = [f(x) for x in xs]
    i = min(range(len(xs)), key=lambda k: vals[k])
    a, b = xs[max(i - 1, 0)], xs[min(i + 1, steps)]
    g = (math.sqrt(5) - 1) / 2
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(rounds):
        if fc <= fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = f(d)
    best = min(((vals[i], xs[i]), (fc, c), (fd, d)))
    return best[1]


def fit_hops(chains: Sequence[Sample]) -> tuple[float, dict[Pattern, float]]:
    """Per-call cost and per-pattern hop time ``alpha + 2 * overhead`` from chain probes of small messages.

    Weighted linear least squares (weights ``1 / measured``, i.e. relative
    errors) of ``time = call + rounds * hop[pattern]``, one ``call`` for all
    patterns; both clipped at 0.
    """
    pats = list(dict.fromkeys(s.probe.pattern for s in chains))
    if not pats:
        raise CCSynthError("no chain probes to fit latencies from")
    A = np.zeros((len(chains), 1 + len(pats)))
    y = np.zeros(len(chains))
    for i, s in enumerate(chains):
        w = 1.0 / s.measured_us
        A[i, 0] = w
        A[i, 1 + pats.index(s.probe.pattern)] = s.probe.messages * w
        y[i] = s.measured_us * w
    x, *_ = np.linalg.lstsq(A, y, rcond=None)
    call = max(0.0, float(x[0]))
    return call, {p: max(1e-3, float(x[1 + k])) for k, p in enumerate(pats)}


def fit_overhead(predictor: _Predictor, windows: Sequence[Sample], hop: float, call: float, bw: float = 1e3) -> float:
    """The overhead (us) in ``[0, hop / 2]`` whose windows of small messages fit best (``alpha = hop - 2 o``)."""
    if not windows:
        return hop / 4

    def err(o: float) -> float:
        return _log_error(lambda p: predictor.time(p, hop - 2 * o, o, bw, call), windows)

    return _minimize(err, 0.0, hop / 2)


def fit_bandwidth(predictor: _Predictor, large: Sequence[Sample], alpha: float, overhead: float, call: float,
                  protocol: ProtocolFit = NO_SWITCH) -> float:
    """The bandwidth (GB/s) whose windows of large messages fit best (a search on its logarithm)."""
    if not large:
        raise CCSynthError("no bandwidth probes to fit from")

    def err(log_bw: float) -> float:
        return _log_error(lambda p: predictor.time(p, alpha, overhead, math.exp(log_bw), call, protocol), large)

    return math.exp(_minimize(err, math.log(0.01), math.log(1000.0)))


def fit_protocol(predictor: _Predictor, ladder: Sequence[Sample], fits: dict[Pattern, LinkFit], call: float) -> ProtocolFit:
    """The protocol switch that explains the chains of growing messages best (one for all patterns).

    For every candidate limit (each size of the ladder: the largest one
    still sent eagerly) the extra latency is searched; the best pair wins
    if it explains the ladder clearly better (a third less squared error)
    than no switch at all.
    """
    if not ladder:
        return NO_SWITCH

    def err(protocol: ProtocolFit) -> float:
        return _log_error(lambda p: predictor.fitted(p, fits[p.pattern], call, protocol), ladder)

    hop = float(np.median([f.hop_us for f in fits.values()]))
    best, best_err = NO_SWITCH, err(NO_SWITCH)
    none_err = best_err
    for limit in sorted({s.probe.nbytes for s in ladder})[:-1]:
        extra = _minimize(lambda a: err(ProtocolFit(float(limit), a)), 0.0, 20.0 * hop)  # noqa: B023 (called now)
        e = err(ProtocolFit(float(limit), extra))
        if e < best_err:
            best, best_err = ProtocolFit(float(limit), extra), e
    if best.eager_limit is None or best_err > (2 / 3) * none_err or best.rendezvous_alpha < 0.05 * hop:
        return NO_SWITCH
    return best


#: the range a curve factor is searched in (and a local factor clamped to): caches against memory make 3-4x
#: (bench/RESULTS.md); a fit beyond 10x either way is a load spike, not the machine
CURVE_RANGE = (0.1, 10.0)


def fit_curve(predictor: _Predictor, samples: Sequence[Sample], result: FitResult,
              footprint: SizeCurve | None = None, cold: ColdCallCost | None = None) -> SizeCurve | None:
    """The message curve (PLogP's ``g(m)``) that explains the probes of every size best, the figures of ``result``
    and the footprint's costs (curve ``footprint``, cold call ``cold``) fixed; None where no probe moves
    :data:`CURVE_MIN_BYTES` or more per message, or none has its bytes :data:`CURVE_MIN_SHARE` of its time.

    A probe counts at its schedule's size (``Probe.size_bytes``, the
    working set the simulator indexes the curve by). Each size is fitted by
    a one-dimensional search (on the factor's logarithm, within
    :data:`CURVE_RANGE`) over the probes of that size; the simulator applies
    one factor per call, so the sizes are independent. A size whose probes'
    bytes are less than :data:`CURVE_MIN_SHARE` of their predicted time
    (:func:`byte_share`) gets no point: its factor would be the probes' noise
    divided by that share, and the simulator applies it to every call of that
    size, whose messages may be mostly bytes.
    """
    fits = {f.pattern: f for f in result.fits}
    predict = _curve_predict(predictor, fits, result, footprint, cold)
    mine = [s for s in samples if _curve_probe(s.probe) and s.probe.pattern in fits]
    shares = _byte_shares([s.probe for s in mine], predict)
    mine = [s for s in mine if shares[s.probe.size_bytes] >= CURVE_MIN_SHARE]
    fitted = _factor_per_size(mine, math.log(CURVE_RANGE[0]), predict)
    return None if fitted is None else SizeCurve(*fitted)


def byte_share(probes: Sequence[Probe], predict: Callable[[Probe, SizeCurve | None], float]) -> float:
    """The median over ``probes`` (all of one size) of the share of a probe's predicted time that its message bytes
    make, ``d log(time) / d log(factor)`` of the message curve's factor at the probe's size, taken between the
    factors 1 and 2 (``predict(probe, curve)``: the probe's time with that curve)."""
    shares = []
    for p in probes:
        one = predict(p, SizeCurve((float(p.size_bytes),), (1.0,)))
        two = predict(p, SizeCurve((float(p.size_bytes),), (2.0,)))
        shares.append((two - one) / one if one > 0 else 0.0)
    return float(np.median(shares)) if shares else 0.0


def _curve_probe(p: Probe) -> bool:
    """Whether probe ``p`` may give the message curve a point (its messages carry :data:`CURVE_MIN_BYTES`)."""
    return p.nbytes >= CURVE_MIN_BYTES and p.shape in ("chain", "window")


def _curve_predict(predictor: _Predictor, fits: dict, result: FitResult, footprint: SizeCurve | None,
                   cold: ColdCallCost | None) -> Callable[[Probe, SizeCurve | None], float]:
    """A probe's predicted time under a message curve, the other figures of ``result`` fixed."""
    def predict(p: Probe, c: SizeCurve | None) -> float:
        return predictor.fitted(p, fits[p.pattern], result.call_overhead, result.protocol, c,
                                footprint=footprint, cold=cold)

    return predict


def _byte_shares(probes: Iterable[Probe], predict: Callable[[Probe, SizeCurve | None], float]) -> dict[int, float]:
    """Per probe size (``Probe.size_bytes``) of ``probes``, :func:`byte_share` of its probes."""
    by_size: dict[int, list[Probe]] = {}
    for p in probes:
        by_size.setdefault(p.size_bytes, []).append(p)
    return {m: byte_share(group, predict) for m, group in by_size.items()}


def prune_message_curve(topology: Topology, options: ProfileOptions | None = None) -> Topology:
    """``topology`` (a profile written before :data:`CURVE_MIN_SHARE`) without the message curve's points that
    the probes of ``options`` (default: ``ccsynth topo profile``'s) would not fit now, their bytes less than that
    share of their time with the topology's own figures and footprint costs; the other points keep their factors
    (each size is fitted alone, :func:`fit_curve`). No curve left: None. What a profile's refit would say of its
    message curve, for files saved without their probe times (the forward curve is kept as it is)."""
    curve = topology.message_curve
    if curve is None:
        return topology
    options = options or ProfileOptions()
    result = _fit_result_of(topology)
    predictor = _Predictor(topology.n_ranks, options.cold, topology.receiver_copies)
    fits = {f.pattern: f for f in result.fits}
    predict = _curve_predict(predictor, fits, result, topology.footprint_curve, topology.cold_call)
    shares = _byte_shares([p for p in plan_probes(tuple(fits), options) if _curve_probe(p)], predict)
    keep = [(m, f) for m, f in zip(curve.sizes, curve.factors) if shares.get(int(m), 1.0) >= CURVE_MIN_SHARE]
    return replace(topology, message_curve=SizeCurve(*zip(*keep)) if keep else None)


def _factor_per_size(samples: Sequence[Sample], log_lo: float,
                     predict: Callable[[Probe, SizeCurve], float]) -> tuple[tuple[float, ...], tuple[float, ...]] | None:
    """Per probe size (``Probe.size_bytes``) of ``samples``, the factor in ``[exp(log_lo), CURVE_RANGE[1]]``
    whose one-point curve makes ``predict`` fit that size's probes best (a search on the factor's logarithm);
    (sizes, factors) in increasing size, or None without samples."""
    by_size: dict[int, list[Sample]] = {}
    for s in samples:
        by_size.setdefault(s.probe.size_bytes, []).append(s)
    if not by_size:
        return None
    sizes: list[float] = []
    factors: list[float] = []
    for m in sorted(by_size):
        group = by_size[m]

        def err(log_f: float, m: int = m, group: list[Sample] = group) -> float:
            curve = SizeCurve((float(m),), (math.exp(log_f),))
            return _log_error(lambda p: predict(p, curve), group)

        sizes.append(float(m))
        factors.append(math.exp(_minimize(err, log_lo, math.log(CURVE_RANGE[1]), steps=16, rounds=20)))
    return tuple(sizes), tuple(factors)


def fit_forward_curve(predictor: _Predictor, samples: Sequence[Sample], result: FitResult,
                      curve: SizeCurve | None, footprint: SizeCurve | None = None,
                      cold: ColdCallCost | None = None) -> SizeCurve | None:
    """The forward curve (``Topology.forward_curve``): per size of the forward probes, the factor in
    ``[1, CURVE_RANGE[1]]`` by which their forwarded messages' bytes cost more than the message curve says,
    the figures of ``result`` and ``curve`` fixed; None without forward probes, or where every factor is 1.

    The smallest forward probe (:data:`FORWARD_SMALLEST` per message) sets
    the factor below it: forwarding costs bytes, so small messages hardly
    feel it. The factors are then made :func:`non_increasing` in the size
    (see the module docstring: the probes' second mode at large sizes is
    one no collective showed).
    """
    fits = {f.pattern: f for f in result.fits}
    mine = [s for s in samples if s.probe.pattern in fits and s.probe.shape == "forward"]
    fitted = _factor_per_size(mine, 0.0, lambda p, fwd: predictor.fitted(
        p, fits[p.pattern], result.call_overhead, result.protocol, curve, fwd, footprint, cold))
    if fitted is None:
        return None
    factors = non_increasing(tuple(max(1.0, f) for f in fitted[1]))
    if all(f <= 1.0 + 1e-3 for f in factors):
        return None
    return SizeCurve(fitted[0], factors)


def non_increasing(factors: Sequence[float]) -> tuple[float, ...]:
    """Each factor replaced by the smallest one at or before it (factors in increasing size): the largest
    non-increasing sequence below ``factors``, as :func:`fit_forward_curve` keeps a forward curve."""
    out: list[float] = []
    for f in factors:
        out.append(min(f, out[-1]) if out else f)
    return tuple(out)


def robust_us(values: Sequence[float]) -> float:
    """The median of the fastest half of ``values`` (of a probe measured several times on a loaded machine)."""
    v = sorted(values)
    if not v:
        raise CCSynthError("no measurements to take a median of")
    return float(np.median(v[:max(1, (len(v) + 1) // 2)]))


def _slope(samples: Sequence[tuple[int, float]]) -> float:
    """Slope of ``time = a + rounds * b`` over (rounds, us) points, weights ``1 / us`` (relative errors)."""
    A = np.array([[1.0 / t, r / t] for r, t in samples])
    y = np.ones(len(samples))
    if len({r for r, _ in samples}) < 2:
        raise CCSynthError("a per-round cost needs probes of at least two round counts")
    x, *_ = np.linalg.lstsq(A, y, rcond=None)
    return float(x[1])


def fit_round_cost(topology: Topology, samples: Sequence[Sample]) -> RoundCost | None:
    """The round cost (``Topology.round_cost``) of the round probes in ``samples`` on the fitted ``topology``
    (without one); None without round probes.

    Per peer count ``k``: the measured slope over the rounds less the slope
    the simulator predicts, corrected twice with the cost in place (a
    round's delay need not add exactly as much to the makespan where ranks
    wait on one another); at least 0.
    """
    n = topology.n_ranks
    by_k: dict[int, list[Sample]] = {}
    for smp in samples:
        if smp.probe.shape == "rounds":
            by_k.setdefault(smp.probe.peers, []).append(smp)
    if not by_k:
        return None
    graphs = {smp.probe: lower_for_executor(probe_schedule(n, smp.probe), smp.probe.size_bytes)
              for group in by_k.values() for smp in group}
    peers, costs = [], []
    for k in sorted(by_k):
        group = by_k[k]
        measured = _slope([(smp.probe.messages, smp.measured_us) for smp in group])
        c = 0.0
        for _ in range(3):
            topo = replace(topology, round_cost=RoundCost((k,), (c,)) if c > 0 else None)
            predicted = _slope([(smp.probe.messages, simulate_graph(graphs[smp.probe], topo).time_us)
                                for smp in group])
            c = max(0.0, c + measured - predicted)
        peers.append(k)
        costs.append(c)
    return RoundCost(tuple(peers), tuple(costs))


@dataclass(frozen=True)
class CommunicatorFit:
    """The communicator's per-call cost: per collective (``allgather``, ``allreduce``: one 8 B call of a ring
    schedule) the us through ccsynth's communicator and through the executor directly (:func:`robust_us` of the
    slowest rank's medians); ``overhead_us`` is the mean difference, at least 0."""

    via_us: dict
    direct_us: dict

    @property
    def overhead_us(self) -> float:
        diffs = [self.via_us[k] - self.direct_us[k] for k in self.via_us]
        return max(0.0, float(np.mean(diffs))) if diffs else 0.0
def fit_footprint(predictor: _Predictor, samples: Sequence[Sample],
                  result: FitResult) -> tuple[SizeCurve | None, ColdCallCost | None]:
    """The footprint's costs: ``Topology.footprint_curve`` (per footprint ``F`` of the footprint probes,
    :func:`probe_footprint`, the factor by which a byte costs more than at the smallest one) and
    ``Topology.cold_call`` (what a call pays once more at ``F``), the figures of ``result`` fixed. (None, None)
    without footprint probes; the curve None where every factor lies within :data:`FOOTPRINT_FLAT` of 1; the cold
    cost None without the windows of smaller messages (a profile of the older plan: every extra per byte, as
    before), 0 where they measured none.

    At the smallest footprint each window size gets a factor of its own (a one-dimensional search within
    :data:`CURVE_RANGE`: what the two sizes differ by anyway, caches warm). At every larger footprint the extra
    over that is split between a factor ``r`` on both windows' bytes and a cost ``c`` once per call: the ``c``
    that fits the small window (:data:`FOOTPRINT_SMALL`) exactly, at the ``r`` (at least 1) that then fits the
    large one (:data:`FOOTPRINT_MESSAGE`, four times the bytes) best; ``c`` at least 0. Without the small
    windows a footprint's factor is the large window's alone. Load only ever slows a probe down, and touching
    more data between two calls never makes it faster, so each footprint then takes the smallest factor (and
    cost) measured at it or at any larger footprint, and the factors are divided by the smallest footprint's.
    """
    fits = {f.pattern: f for f in result.fits}
    mine = [s for s in samples if s.probe.shape == "footprint" and s.probe.pattern in fits]
    if not mine:
        return None, None
    nbytes = max(s.probe.nbytes for s in mine)
    at = lambda s: float(probe_footprint(s.probe, predictor.cold))  # noqa: E731
    large = {at(s): s for s in sorted(mine, key=at, reverse=True) if s.probe.nbytes == nbytes}
    small = {at(s): s for s in sorted(mine, key=at, reverse=True) if s.probe.nbytes < nbytes}

    def pred(s: Sample, h: float) -> float:
        return predictor.fitted(s.probe, fits[s.probe.pattern], result.call_overhead, result.protocol,
                                footprint=SizeCurve((at(s),), (h,)))

    def alone(s: Sample) -> float:
        return math.exp(_minimize(lambda log_h: _log_error(lambda p: pred(s, math.exp(log_h)), [s]),
                                  math.log(CURVE_RANGE[0]), math.log(CURVE_RANGE[1]), steps=16, rounds=20))

    sizes = sorted(large)
    raw = {f: alone(large[f]) for f in sizes}
    cost = dict.fromkeys(sizes, 0.0)
    ref = sizes[0]
    split = ref in small
    if split:
        hl, hs = raw[ref], alone(small[ref])
        for f in sizes[1:]:
            if f not in small:
                continue
            a, b = small[f], large[f]

            def err(log_r: float, a: Sample = a, b: Sample = b) -> float:
                r = math.exp(log_r)
                pa, pb = pred(a, hs * r), pred(b, hl * r)
                c = max(0.0, a.measured_us - pa)
                return math.log((pa + c) / a.measured_us) ** 2 + math.log((pb + c) / b.measured_us) ** 2

            # r >= 1: more data between two calls never makes a byte cheaper (a load spike of the small window
            # alone then goes to c, which the envelope below drops)
            r = math.exp(_minimize(err, 0.0, max(0.0, math.log(CURVE_RANGE[1] / max(hl, hs))), steps=16, rounds=20))
            raw[f] = hl * r
            cost[f] = max(0.0, a.measured_us - pred(a, hs * r))
    low = [min(raw[f] for f in sizes[i:]) for i in range(len(sizes))]
    factors = [min(h / low[0], CURVE_RANGE[1]) for h in low]
    cold = [min(cost[f] for f in sizes[i:]) for i in range(len(sizes))]
    curve = None if max(factors) <= 1.0 + FOOTPRINT_FLAT else SizeCurve(tuple(sizes), tuple(factors))
    if not split:
        return curve, None
    # the small windows' own buffers: a call of at least as many pays the cold cost in full, one of fewer in part
    return curve, ColdCallCost(tuple(sizes), tuple(cold), float(small[ref].probe.buffer_bytes))


def _split(samples: Sequence[Sample]):
    chains = [s for s in samples if s.probe.shape == "chain" and s.probe.nbytes <= SMALL]
    windows = [s for s in samples if s.probe.shape == "window" and s.probe.nbytes <= SMALL]
    ladder = [s for s in samples if s.probe.shape == "chain" and s.probe.nbytes > SMALL]
    large = [s for s in samples if s.probe.shape == "window" and s.probe.nbytes > SMALL]
    return chains, windows, ladder, large


def fit_patterns(n: int, samples: Sequence[Sample], predictor: _Predictor | None = None) -> FitResult:
    """Per-call cost, the figures of every pattern and the protocol switch, from the samples of :func:`plan_probes`.

    The stages of the module docstring: hops and the per-call cost (linear),
    then per pattern the overhead (small windows) and the bandwidth (large
    windows); the protocol switch (the ladder of chains); the bandwidth and
    the overhead once more with it.
    """
    predictor = predictor or _Predictor(n)
    chains, windows, ladder, large = _split(samples)
    call, hops = fit_hops(chains)

    def figures(pat: Pattern, protocol: ProtocolFit, o: float | None = None) -> LinkFit:
        hop = hops[pat]
        w = [s for s in windows if s.probe.pattern == pat]
        big = [s for s in large if s.probe.pattern == pat]
        if o is None:
            o = fit_overhead(predictor, w, hop, call)
        bw = fit_bandwidth(predictor, big, max(hop - 2 * o, 0.0), o, call, protocol)
        o = fit_overhead(predictor, w, hop, call, bw)
        return LinkFit(pat, max(hop - 2 * o, 0.0), o, bw)

    fits = {pat: figures(pat, NO_SWITCH) for pat in hops}
    protocol = fit_protocol(predictor, ladder, fits, call)
    if protocol != NO_SWITCH:
        fits = {pat: figures(pat, protocol, f.overhead) for pat, f in fits.items()}
        protocol = fit_protocol(predictor, ladder, fits, call)
    out = []
    for pat, f in fits.items():
        mine = [s for s in samples if s.probe.pattern == pat]
        errs = [abs(predictor.fitted(s.probe, f, call, protocol) / s.measured_us - 1) for s in mine]
        out.append(LinkFit(pat, f.alpha, f.overhead, f.bw, float(np.median(errs)) if errs else 0.0))
    return FitResult(call, tuple(out), protocol)


# ------------------------------------------------------------------ topology
def build_topology(
    n: int, fits: Sequence[LinkFit], call: float, kernels: KernelRates, nodes: Sequence[int], *,
    ports: dict[int, SharedPort] | None = None, pair_bw: dict[int, float] | None = None, name: str = "profiled",
    description: str = "", sources: Sequence[str] = (), protocol: ProtocolFit = NO_SWITCH,
    message_curve: SizeCurve | None = None, local_curve: SizeCurve | None = None,
    forward_curve: SizeCurve | None = None, footprint_curve: SizeCurve | None = None,
    cold_call: ColdCallCost | None = None, receiver_copies: bool = False,
) -> Topology:
    """The ccsynth topology of the fitted figures: a link per ordered pair, with its pattern's figures.

    ``ports`` maps a node to its shared port; the links inside such a node
    get the bandwidth of one pair alone (``pair_bw[node]``) where that is
    higher, and the port caps them all together.
    """
    ports = ports or {}
    pair_bw = pair_bw or {}
    links = []
    for f in fits:
        for r, d in f.pattern.pairs:
            bw = f.bw
            if nodes[r] == nodes[d] and nodes[r] in ports:
                bw = max(bw, pair_bw[nodes[r]])
            links.append(Link(r, d, f.alpha, bw, f.overhead))
    links.sort(key=lambda l: (l.src, l.dst))
    return Topology(name, n, links=tuple(links), shared_ports=tuple(ports.values()), nodes=tuple(nodes),
                    description=description, sources=tuple(sources), local_bw=kernels.local_bw,
                    local_overhead=kernels.call_us, overhead_scope="rank",
                    call_overhead=call, eager_limit=protocol.eager_limit, rendezvous_alpha=protocol.rendezvous_alpha,
                    message_curve=message_curve, local_curve=local_curve, forward_curve=forward_curve,
                    async_progress=False, footprint_curve=footprint_curve, cold_call=cold_call,
                    receiver_copies=receiver_copies)


def _node_ports(fits: Sequence[LinkFit], nodes: Sequence[int], pair_bw: dict[int, float],
                cores: Sequence[int] | None = None) -> dict[int, SharedPort]:
    """A port per node where all its pairs at once get less than one pair alone, or whose ranks outnumber its
    cores (``cores[r]``: the cores rank ``r`` may use; see the module docstring)."""
    ports = {}
    for node, alone in sorted(pair_bw.items()):
        ranks = tuple(r for r, x in enumerate(nodes) if x == node)
        oversubscribed = cores is not None and len(ranks) > cores[ranks[0]]
        aggs, per_link = [], []
        for f in fits:
            inside = [(r, d) for r, d in f.pattern.pairs if nodes[r] == node and nodes[d] == node]
            if f.pattern.kind == "intra" and inside:
                aggs.append(f.bw * len(inside))
                per_link.append(f.bw)
        if per_link and (oversubscribed or max(per_link) < (1 - PORT_MARGIN) * alone):
            ports[node] = SharedPort(f"node{node}.memory", ranks, ranks, float(np.median(aggs)))
    return ports


def _node_members(nodes: Sequence[int]) -> dict[int, list[int]]:
    """The ranks of every node (``nodes[r]``: rank ``r``'s node), in rank order."""
    members: dict[int, list[int]] = {}
    for r, node in enumerate(nodes):
        members.setdefault(node, []).append(r)
    return members


def own_cores(nodes: Sequence[int], cores: Sequence[int]) -> bool:
    """Whether every rank has a core of its own (no node runs more ranks than it has cores): where it has, the
    profile says ``receiver_copies`` (see the module docstring)."""
    return all(len(ranks) <= cores[ranks[0]] for ranks in _node_members(nodes).values())


def _describe(n: int, hosts: Sequence[str], nodes: Sequence[int], cores: Sequence[int], mpi_library: str) -> str:
    per_node = _node_members(nodes)
    parts = []
    for _node, ranks in sorted(per_node.items()):
        c = cores[ranks[0]]
        over = f", oversubscribed {len(ranks) / c:.1f}x" if len(ranks) > c else ""
        parts.append(f"{hosts[ranks[0]]}: {len(ranks)} ranks on {c} cores{over}")
    return (f"profiled by ccsynth topo profile: {n} ranks on {len(per_node)} node(s) ({'; '.join(parts)}); "
            f"{mpi_library}; figures measured with all ranks active, through ccsynth's executor")


# ------------------------------------------------------------------ driver
def profile_machine(
    comm, options: ProfileOptions | None = None, progress: Callable[[int, int, str], None] | None = None,
) -> MachineProfile:
    """Measure every probe, fit, and return the profile (on every rank; call it on every rank):
    :func:`fit_profile` of :func:`measure_machine`.

    ``progress(k, total, what)`` is called on every rank before step ``k``
    (of ``total``) and once more with ``k == total`` at the end.
    """
    raw = measure_machine(comm, options, progress)
    return fit_profile(raw)


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
    nodes = _node_ids(hosts)
    try:
        my_cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        my_cores = os.cpu_count() or 1
    cores = tuple(comm.allgather(my_cores))
    pats = patterns(nodes)
    probes = plan_probes(pats, options)
    every = probes + [q for ps in _pair_probes(nodes, options).values() for q in ps]
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
    comm_probe = _CommunicatorProbe(comm)
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


def _pair_probes(nodes: Sequence[int], options: ProfileOptions) -> dict[Pattern, list[Probe]]:
    """Per node of at least three ranks, the window of one pair streaming alone (see the module docstring)."""
    pairs = [p for p in (_pair_pattern(nodes, node) for node in sorted(set(nodes))) if p is not None]
    return {p: [Probe(p, "window", BW_WINDOW, s, SLICES[0]) for s in options.bw_sizes if s >= SLICES[0]][-1:]
            for p in pairs}


def fit_profile(raw: RawProfile, footprints: Sequence[int] | None = None) -> MachineProfile:
    """The profile of what ``raw`` measured: every figure fitted as the module docstring says (no MPI: it runs on
    a saved file as on a fresh measurement, and gives the same topology from the same times).

    ``footprints``: fit the footprint costs on the footprint probes at these footprints only (bytes per rank;
    those at the smallest footprint, the probes' own buffers, always count): what a profile of fewer probes
    would have said, from the same times.
    """
    options, n, nodes, cores = raw.options, raw.n, raw.nodes, raw.cores
    best = {p: min(ts) for p, ts in raw.probe_us}
    # the probes as measured (not as this code's defaults would plan them): those of one pair alone have idle ranks
    alone = [p for p, _ in raw.probe_us if any(d < 0 for d in p.pattern.dest)]
    probes = [p for p, _ in raw.probe_us if p not in alone]
    if footprints is not None:
        keep = {int(f) for f in footprints}
        fp = [probe_footprint(p) for p in probes if p.shape == "footprint"]
        low = min(fp) if fp else 0
        probes = [p for p in probes if p.shape != "footprint" or probe_footprint(p) in keep or probe_footprint(p) == low]
    samples = [Sample(p, best[p]) for p in probes]
    pair_samples: dict[Pattern, list[Sample]] = {}
    for p in alone:
        pair_samples.setdefault(p.pattern, []).append(Sample(p, best[p]))
    round_samples = tuple(Sample(p, robust_us(ts)) for p, ts in raw.round_us)
    communicator = CommunicatorFit({kd: robust_us(v) for kd, v, _ in raw.communicator_us},
                                   {kd: robust_us(d) for kd, _, d in raw.communicator_us})
    kernels = raw.kernels

    copies = own_cores(nodes, cores)
    predictor = _Predictor(n, options.cold, copies)
    result = fit_patterns(n, samples, predictor)
    call, fits, protocol = result.call_overhead, result.fits, result.protocol
    pair_bw = {}
    for pat, ps in pair_samples.items():
        node = nodes[pat.pairs[0][0]]
        same = [f for f in fits if f.pattern.kind == "intra"]
        ref = same[0] if same else fits[0]
        pair_bw[node] = fit_bandwidth(predictor, ps, ref.alpha, ref.overhead, call, protocol)
    ports = _node_ports(fits, nodes, pair_bw, cores)
    footprint, cold = fit_footprint(predictor, samples, result)
    curve = fit_curve(predictor, samples, result, footprint, cold)
    forward = fit_forward_curve(predictor, samples, result, curve, footprint, cold)
    topo = build_topology(
        n, fits, call, kernels, nodes, ports=ports, pair_bw=pair_bw, name=f"profiled:{n}", protocol=protocol,
        message_curve=curve, local_curve=local_curve(kernels), forward_curve=forward, footprint_curve=footprint,
        cold_call=cold, receiver_copies=copies, description=_describe(n, raw.hosts, nodes, cores, raw.mpi_library),
        sources=(f"ccsynth topo profile on {raw.hosts[0]} at {raw.when}, load average {raw.load}, "
                 f"{len(samples) + sum(len(v) for v in pair_samples.values()) + len(round_samples)} probes",),
    )
    topo = replace(topo, round_cost=fit_round_cost(topo, round_samples),
                   communicator_overhead=communicator.overhead_us)
    # last: the reference runs are predicted with every other figure in place
    topo = replace(topo, run_curve=cal.fit_run_curve(topo, raw.calibration),
                   mpi_reference=cal.mpi_reference(raw.calibration))
    return MachineProfile(topo, fits, call, kernels, tuple(samples) + tuple(s for v in pair_samples.values() for s in v),
                          nodes, raw.hosts, cores, tuple(ports.values()), pair_bw, protocol, raw.seconds,
                          round_samples, communicator, raw)


# ------------------------------------------------------------------ a footprint for an older profile
def _fit_result_of(topology: Topology) -> FitResult:
    """The figures of a profiled ``topology`` as the fit had them: per pattern its first pair's link."""
    fits = []
    for pat in patterns(topology.nodes):
        r, d = pat.pairs[0]
        c = topology.connection(r, d)
        if c is None:
            raise CCSynthError(f"topology {topology.name!r} has no connection {r}->{d}: not a profiled machine")
        fits.append(LinkFit(pat, c.alpha, c.overhead, c.bw))
    protocol = ProtocolFit(topology.eager_limit, topology.rendezvous_alpha) \
        if topology.eager_limit is not None and topology.rendezvous_alpha else NO_SWITCH
    return FitResult(topology.call_overhead, tuple(fits), protocol)


def refit_with_footprint(topology: Topology, footprint: SizeCurve | None, options: ProfileOptions | None = None,
                         cold: ColdCallCost | None = None) -> Topology:
    """``topology`` (a profile) with ``footprint`` as its footprint curve and ``cold`` as its cold call cost, and
    its message and forward curves fitted again with them in place, on the probe times the topology itself
    predicts (what its own fit reproduced of its probes, at their footprints with its own footprint costs): the
    same figures for the probes it was fitted on, the new footprint costs for calls that touch more data.
    ``options``: the probes the profile ran (default: ``ccsynth topo profile``'s)."""
    options = options or ProfileOptions()
    result = _fit_result_of(topology)
    predictor = _Predictor(topology.n_ranks, options.cold, topology.receiver_copies)
    fits = {f.pattern: f for f in result.fits}
    # as the profile's own fit saw them: the message curve from chains and windows alone, then the forward probes
    samples = [Sample(p, predictor.fitted(p, fits[p.pattern], result.call_overhead, result.protocol,
                                          topology.message_curve, topology.forward_curve if p.shape == "forward" else None,
                                          topology.footprint_curve, topology.cold_call))
               for p in plan_probes(tuple(fits), options) if p.shape != "footprint"]
    curve = fit_curve(predictor, samples, result, footprint, cold) if topology.message_curve is not None else None
    forward = fit_forward_curve(predictor, samples, result, curve, footprint, cold) \
        if topology.forward_curve is not None else None
    return replace(topology, message_curve=curve, forward_curve=forward, footprint_curve=footprint, cold_call=cold)


def measure_footprint(comm, topology: Topology,
                      options: ProfileOptions | None = None) -> tuple[SizeCurve | None, ColdCallCost | None]:
    """The footprint probes alone, measured here (on every rank) and fitted against the figures of ``topology``
    (:func:`fit_footprint`); for :func:`refit_with_footprint`."""
    options = options or ProfileOptions()
    result = _fit_result_of(topology)
    probes = footprint_probes(result.fits[0].pattern, options)
    best: dict[Probe, float] = {}
    evictions = EvictionBuffer()
    for _ in range(options.n_passes):
        for probe in probes:
            best[probe] = min(measure_probe(comm, probe, options, evictions).measured_us, best.get(probe, math.inf))
    return fit_footprint(_Predictor(topology.n_ranks, options.cold, topology.receiver_copies), [Sample(p, t) for p, t in best.items()], result)


def main(argv=None) -> int:
    """``mpiexec -n N python -m ccsynth.bench.profile --add-footprint IN -o OUT``: a profile written before the
    footprint probes, with a footprint measured here added (:func:`measure_footprint`, :func:`refit_with_footprint`)."""
    import argparse

    from mpi4py import MPI

    from ccsynth.topologies.io import load_topology, topology_to_json

    p = argparse.ArgumentParser(prog="python -m ccsynth.bench.profile", description=main.__doc__)
    p.add_argument("--add-footprint", required=True, metavar="IN", help="a profiled topology file")
    p.add_argument("-o", "--output", required=True, help="the topology file to write")
    p.add_argument("--passes", type=int, default=PASSES, help=f"passes over the footprint probes (default {PASSES})")
    args = p.parse_args(argv)
    comm = MPI.COMM_WORLD
    topo = load_topology(args.add_footprint)
    if topo.n_ranks != comm.Get_size():
        raise CCSynthError(f"{args.add_footprint} describes {topo.n_ranks} ranks; start as many")
    footprint, cold = measure_footprint(comm, topo, ProfileOptions(passes=args.passes))
    if comm.Get_rank() == 0:
        out = refit_with_footprint(topo, footprint, cold=cold)
        load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
        out = replace(out, sources=(*out.sources, f"footprint curve measured by python -m ccsynth.bench.profile at "
                                                  f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load "
                                                  f"average {load}; message and forward curves fitted again with it"))
        with open(args.output, "w") as f:
            f.write(topology_to_json(out))
        log.warning("wrote %s: footprint %s, cold call %s", args.output,
                    None if footprint is None else list(zip(footprint.sizes, footprint.factors)),
                    None if cold is None else list(zip(cold.footprints, cold.us)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
