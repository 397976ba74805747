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
     predicted from 128 KiB up (docs/results.md, issue 10, session 4);
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
     0.9-2.9x it (docs/results.md, issue 10, h38-model);
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
     2.1-3x their prediction from 1 MiB up (docs/results.md, h29-cache).
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
     were predicted 1.8-2.5x too fast (docs/results.md, h49-probes).

**Rounds and the communicator** (:func:`round_probes`, :func:`fit_round_cost`,
:func:`measure_communicator`). Two figures the probes above cannot see,
both measured on 8 B messages after everything else is fitted:

* *rounds of k peers*: ``R`` rounds in which every rank sends to ``k``
  peers and waits for ``k`` (``k = 1 .. n - 1``, :func:`round_peer_counts`;
  each round's sends wait for all of the last round's receives). With more
  ranks than cores a round of ``k`` peers completes only once all of them
  have been scheduled: on the project's 2-core machine with 4 ranks a round
  with three peers measured 2-2.5x one with one peer, beyond what its
  messages' overheads explain (docs/results.md, issue 10, h30-peers). Per
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
30 size bands from 64 KiB within 25% (docs/results.md, issue 10, session
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
of run C's rows doubled there (docs/results.md).

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
(docs/results.md, issue 10, session 10). With more ranks than cores it is
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

Where the code lives
--------------------
This module is the public face (:func:`profile_machine`, and ``python -m
ccsynth.bench.profile --add-footprint``); its names are re-exported from
the rooms of :mod:`ccsynth.bench.profiling`:

* :mod:`~ccsynth.bench.profiling.probes`: the options, patterns, probes and
  the records of what was measured (no MPI);
* :mod:`~ccsynth.bench.profiling.measure`: timing the probes under MPI
  (:func:`measure_machine`);
* :mod:`~ccsynth.bench.profiling.fit`: the link figures, per-call, per-round
  and communicator costs, fitted with the simulator (no MPI);
* :mod:`~ccsynth.bench.profiling.curves`: the message, forward and
  footprint curves (no MPI);
* :mod:`~ccsynth.bench.profiling.topology`: the profiled topology and its
  summary (:func:`fit_profile`, :func:`build_topology`);
* :mod:`~ccsynth.bench.profiling.upgrade`: older profile files brought up
  to date from their own figures.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import replace

from ccsynth.bench.profiling.curves import byte_share, fit_curve, fit_footprint, fit_forward_curve, non_increasing
from ccsynth.bench.profiling.fit import (
    CURVE_RANGE, NO_SWITCH, CommunicatorFit, FitResult, LinkFit, ProtocolFit, fit_bandwidth, fit_hops,
    fit_overhead, fit_patterns, fit_protocol, fit_round_cost, local_curve, robust_us,
)
from ccsynth.bench.profiling.measure import (
    EvictionBuffer, measure_communicator, measure_kernels, measure_machine, measure_probe,
)
from ccsynth.bench.profiling.probes import (
    CURVE_MIN_BYTES, CURVE_MIN_SHARE, DEFAULT_SIZES, FOOTPRINT_MESSAGE, FOOTPRINT_SMALL, FOOTPRINTS, FORWARD_ROUNDS,
    FORWARD_SMALLEST, LOCAL_LADDER, PASSES, PORT_MARGIN, QUICK_FOOTPRINTS, QUICK_SIZES, ROUND_COUNTS,
    ROUND_MAX_MESSAGES, ROUND_MAX_PEERS, KernelRates, Pattern, Probe, ProfileOptions, RawProfile, Sample,
    eviction_bytes, footprint_probes, own_cores, patterns, plan_probes, probe_footprint, probe_schedule,
    round_partners, round_peer_counts, round_probes,
)
from ccsynth.bench.profiling.topology import MachineProfile, build_topology, fit_profile
from ccsynth.bench.profiling.upgrade import measure_footprint, prune_message_curve, refit_with_footprint
from ccsynth.errors import CCSynthError

__all__ = [
    "DEFAULT_SIZES", "QUICK_SIZES", "PORT_MARGIN", "ProfileOptions", "Pattern", "Probe", "Sample", "LinkFit",
    "ProtocolFit", "NO_SWITCH", "FitResult", "KernelRates", "MachineProfile", "patterns", "plan_probes",
    "probe_schedule", "measure_probe", "measure_kernels", "local_curve", "fit_hops", "fit_overhead", "fit_bandwidth",
    "fit_protocol", "fit_patterns", "fit_curve", "CURVE_MIN_BYTES", "CURVE_MIN_SHARE", "byte_share",
    "prune_message_curve", "LOCAL_LADDER", "CURVE_RANGE", "build_topology", "profile_machine",
    "FORWARD_ROUNDS", "FORWARD_SMALLEST", "eviction_bytes", "fit_forward_curve", "non_increasing", "own_cores",
    "ROUND_COUNTS", "ROUND_MAX_PEERS", "ROUND_MAX_MESSAGES", "round_peer_counts", "round_partners", "round_probes",
    "robust_us", "fit_round_cost", "CommunicatorFit", "measure_communicator", "FOOTPRINT_MESSAGE", "FOOTPRINT_SMALL",
    "footprint_probes", "FOOTPRINTS", "QUICK_FOOTPRINTS", "probe_footprint", "fit_footprint", "refit_with_footprint",
    "measure_footprint", "main", "RawProfile", "measure_machine", "fit_profile", "EvictionBuffer",
]

log = logging.getLogger(__name__)


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
