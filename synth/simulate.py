"""Event-driven alpha-beta simulation of a schedule, with bandwidth contention.

Model
-----
* **Sizes.** A message of ``size_bytes`` (nccl-tests size) cuts into chunks
  of ``size_bytes / collective.size_chunks`` bytes; an op on ``count`` chunks
  moves ``count`` chunk sizes. Explicit collectives (resharding) give every
  chunk its own extent: an op moves ``Schedule.op_units(op)`` units of
  ``size_bytes / collective.total_units`` bytes.
* **Readiness.** An op is *ready* once all its dependencies (ops of the same
  rank) have completed.
* **Transfers (rendezvous).** Each matched send/recv pair is one transfer on
  the connection ``topology.connection(sender, receiver)``. It starts when
  *both* the send and the recv are ready -- the receiver must have posted its
  buffer, as with a rendezvous protocol or an NCCL/MSCCL kernel waiting for
  its peer's slot -- and both ops complete when the transfer completes. A
  consequence: two ranks that each wait for their own send to finish before
  posting the matching receive deadlock here, as they would for large
  messages over MPI; the simulator reports that as a :class:`ScheduleError`.
* **Cost of a transfer.** First the connection's latency ``alpha``, which
  uses no bandwidth and overlaps with other transfers, then a data phase in
  which the bytes flow at a rate limited by every resource of the connection
  (``Connection.resources``: the link, or the switch's egress and ingress
  ports, plus shared NIC ports; bandwidths from ``topology.resource_bw``).
  Alone on its resources a transfer takes ``alpha + bytes / bw``, i.e.
  ``Connection.time_us``. Where the topology has a ``message_curve``
  (size-dependent costs, :mod:`ccsynth.topologies.curve`), every message
  of a call of ``size_bytes`` moves ``f(size_bytes)`` times its bytes
  through its resources (``local_curve``: local work costs ``f`` times
  its bytes at ``local_bw``); the factor is the call's, by its working
  set, not each message's own (why: the curve's module docstring). Where
  the topology has an ``eager_limit``, a
  message of more bytes than that goes by a rendezvous protocol: its
  latency is ``alpha + rendezvous_alpha`` (the handshake;
  :meth:`~ccsynth.topologies.model.Topology.message_alpha`).
* **Forwarded messages.** Where the topology has a ``forward_curve``
  (factors >= 1; :mod:`ccsynth.topologies.model`), a send that waits,
  directly or through local work, for a receive of its own rank in the same
  call moves ``g(size_bytes)`` times its bytes more (on top of the message
  curve): passing on what was just received costs more than sending the
  call's own input (measured by the forward probes of ``ccsynth topo
  profile``). Without one every message is alike, as before.
* **Footprint.** Where the topology has a ``footprint_curve``
  (:mod:`ccsynth.topologies.model`), every message's bytes cost ``h(F)``
  times more, on top of the message curve, where
  ``F`` is the call's *footprint*: the bytes a rank touches between two
  calls on the same buffers. By default that is the call's own working
  set per rank (:func:`working_set_bytes`: input, output and scratch
  chunks of a schedule; a :class:`TaskGraph` says its own, staging
  included), i.e. a call repeated back to back; ``footprint_bytes=``
  gives another (``ccsynth bench --interleave`` runs several algorithms
  in turn, each with its own buffers: their working sets together).
  Without the curve nothing changes. Where the topology has a
  ``cold_call`` (:mod:`ccsynth.topologies.coldcall`), a call also pays
  ``c(F)`` us once, at the same footprint, added like the per-call cost
  below (the part of a cold call's extra that does not grow with its bytes;
  in proportion for a call whose own working set is smaller than the
  probe's it was measured with).
* **Progress.** Where the topology says ``async_progress=False`` (with
  ``overhead_scope="rank"``: MPI without a progress thread, as ccsynth's
  executor over MPICH's shared memory), a transfer's data phase starts
  only once the sender's and the receiver's engines are both idle: a rank
  moves a message's bytes only inside MPI, and the executor enters MPI to
  wait only when it has nothing else ready. A local copy or reduction
  queued on either rank therefore delays the data (it cannot overlap the
  transfer's start), as the executor's order of ready work decides.
  Where it also says ``receiver_copies=True``, a data phase keeps the
  receiver's engine busy for at least its bytes at the connection's
  bandwidth (the slowest of its resources'): the receiving rank's core
  copies them (MPI over shared memory). The copy is work of that engine
  like any other: while it lasts the rank runs nothing else, and no data
  phase of its own starts (one starts only when both engines are idle),
  so a rank's reductions and its messages' bytes take turns on its core.
  (Letting the copying rank start its own sends meanwhile fitted the
  measured runs worse: docs/results.md, issue 10, session 10.)
  Default True: data flows whatever the engines do, as before.
* **Streams: one transfer at a time per connection and channel.** The data
  phases of the transfers from ``a`` to ``b`` on one channel (``Op.channel``)
  run one after another, first come first served (by the time their latency
  phase ends, then op id), like the single in-order stream of an
  NCCL/MSCCL channel or a DMA queue. Two transfers on one link that are
  ready together therefore still take ``alpha + 2 * bytes / bw`` in all,
  but the first completes after ``alpha + bytes / bw`` and can be forwarded
  at once -- what lets a pipelined ring run at the speed of its slowest link.
  Use separate channels for transfers that should run side by side.
* **Contention: max-min fair bandwidth sharing.** At every moment the
  streams moving data share each resource by max-min fairness (progressive
  filling / water-filling: all rates grow together; when a resource
  saturates, the streams through it freeze at their current rate; the
  others keep growing). Rates are recomputed whenever a stream starts or
  stops moving data, only for the streams connected to the changed
  resources (max-min allocations decompose over connected components).
  Sends of one rank are not serialised otherwise: a rank may drive all its
  connections at once, as far as its ports allow.
* **Per-message overhead (LogGP's o).** A send pays its connection's
  ``overhead`` on the sender's *engine* before the message is posted (the
  rendezvous and alpha start only then); a receive pays the same
  connection's ``overhead`` on the receiver's engine after its bytes have
  arrived, and completes only then. An engine serves its work one item at a
  time, first come first served (work arriving at the same instant in op id
  order), so ``k`` messages on one engine pay ``k`` overheads one after
  another, whatever their size: cutting a message into ever smaller chunks
  is not free, and the chunk count has an optimum. Which work shares an
  engine is the topology's ``overhead_scope``: ``"connection"`` (GPUs) --
  each (rank, peer, channel, direction) is an engine of its own, like an
  MSCCL threadblock, so the sends of one connection and channel serialise
  (TACCL's per-send cost) while other connections proceed in parallel;
  ``"rank"`` (CPU processes, as ccsynth's MPI executor) -- one engine per
  rank, for its sends, receives and local work alike. A message alone on a
  connection between idle engines takes ``overhead + alpha + bytes / bw +
  overhead`` (``Connection.time_us``). Zero-byte messages pay their
  overheads and alpha too.
* **Local ops.** ``copy`` and ``reduce`` cost ``count * chunk_bytes /
  (local_bw * 1e3)`` us when ``local_bw`` (GB/s; the argument, else the
  topology's ``local_bw``) is given, else nothing, plus the topology's
  ``local_overhead`` (us: the fixed cost of one kernel call, 0 in the
  catalog) when they move any bytes. With ``overhead_scope``
  ``"rank"`` they run on the rank's engine; otherwise they do not queue.
  A ``recv`` with ``reduce=True`` also pays the reduction of its bytes
  (``local_overhead`` plus its bytes at ``local_bw``) on the receiver's
  engine, after the overhead (fused receive-reduce: one pass); with
  neither the reduction counts as fused into the receive (free).
* **Rounds.** Where the topology has a ``round_cost``
  (:class:`~ccsynth.topologies.rounds.RoundCost`), a rank waiting on the
  messages of ``k`` distinct peers at once pays ``c(k)`` us more, once per
  round (:func:`receive_rounds`): a receive's round is its *hop level* --
  the most messages on a chain of dependencies and matched messages ending
  at it -- and a rank's receives at one level form one round, ``k`` being
  the number of ranks they come from. The round's last receive completes
  ``c(k)`` later than its bytes arrive (then pays its overhead), so
  whatever waits for the round waits that much longer (a ring pays ``c(1)``
  per step, a direct allgather ``c(n - 1)`` once). A delay, not work: the
  rank's engine stays free meanwhile, so its other messages progress (with
  more ranks than cores the rank waits in MPI for its peers to run).
  Without one, nothing: every prediction as before.
* **Per-call cost.** ``Topology.call_overhead`` (us, 0 for every catalog
  topology) is the fixed cost of one call of the collective: entering and
  leaving the runtime, and ranks starting the call at slightly different
  times. It is added once to the makespan of a schedule that has any op
  (every rank starts that much later); it changes no comparison between
  schedules, only the absolute time (:func:`ccsynth.bench.profile` measures
  it; the catalog leaves it at 0).
* **Result.** The makespan: when the last op completes (plus the per-call
  cost). Events at the same
  instant (within :data:`~ccsynth.tolerance.EVENT_REL` relative) are processed together, ties broken by
  op id, so the result is a deterministic, pure function of the inputs.

Task graphs
-----------
:func:`simulate_graph` runs a :class:`TaskGraph` under the same model: a
program already lowered to the units a runtime executes (each op of the
schedule cut into the pipeline slices of ccsynth's executor, say:
:mod:`ccsynth.synth.executor_model` builds those). A :class:`Task` is an
op whose size is given in bytes instead of chunks, with its matching
partner given explicitly; ``copy`` and ``reduce`` tasks are local work, a
``recv`` with ``reduce`` pays the reduction of its bytes after its
overhead, exactly as for a schedule. Zero-byte tasks are allowed (an
empty message still pays its overheads and latency; an empty local task
is free), so the lowering can express what the runtime really does.

A task graph is a whole run, so :func:`simulate_graph` applies
``Topology.run_curve`` too (None in the catalog): the run's time, as every
other model term left it, times the curve's factor at the call's input bytes
per rank (:func:`run_factor`), a correction common to every schedule that
``ccsynth topo profile`` measures on reference collectives
(:mod:`ccsynth.bench.calibration`). :func:`simulate` (a schedule's own
cost, what synthesis and bounds compare) never applies it.

Implementation: the engine lives in :mod:`ccsynth.synth.simulator`, one
concept per module (tables built once per schedule, streams, engines,
max-min sharing, the event loop as named steps). One *class* per
(connection, channel) holds the stream's current transfer, its queue, and
its rate; a transfer handing over to the next one of its queue keeps the
rate, so only streams starting or stopping trigger a reshare, whose cost is
linear in the size of the affected component.
Measured on two shared cores (CPU time, before the bound was made lazy): a 32-rank direct
alltoall of 1e5 ops on one switch in about 1 s; a pipelined ring allreduce of
1.2e5 ops in about 1 s; a 1e5-op alltoall of random-sized transfers on one
switch in 0.8 s when all are posted at once, 2.6 s when each rank sends one
at a time (every transfer then starts or stops a stream: 5e4 reshares).
``simulate(..., trace=True)`` hands the same loop a
:class:`~ccsynth.synth.trace.Recorder`, told when every phase of every
transfer and every engine's work begins and ends; without one the loop pays
a ``None`` check per event, and recording with building the trace about
doubles the time.

Lower bounds
------------
A result's ``lower_bound_us``, ``gap`` and ``bound_which`` come from
:func:`ccsynth.synth.bounds.lower_bound` (or
:func:`~ccsynth.synth.explicit_bound.explicit_lower_bound` for an explicit
collective), computed the first time a caller reads one of them, never by
the run itself: a search that simulates thousands of candidates and reads
only ``time_us`` pays for no bound, and the engine
(:mod:`ccsynth.synth.simulator`) does not import the bound machinery.

The simulator does not check that the schedule implements its collective
(that is :func:`ccsynth.collectives.verify.verify`); it checks only what it
needs to run: rank counts agree, every send has a connection, every send has
its matching recv, and nothing deadlocks.

Example:
    >>> from ccsynth.collectives.builder import ScheduleBuilder
    >>> from ccsynth.collectives.spec import Collective
    >>> from ccsynth.topologies.model import Link, Topology
    >>> t = Topology("pair", 2, links=(Link(0, 1, 1.0, 10.0), Link(1, 0, 1.0, 10.0)))
    >>> b = ScheduleBuilder(Collective("allgather", 2), "pairwise")
    >>> for r in range(2):
    ...     _ = b.copy(r, ("i", 0), ("o", r))
    >>> _ = b.transfer(0, 1, ("i", 0), ("o", 0))
    >>> _ = b.transfer(1, 0, ("i", 0), ("o", 1))
    >>> r = simulate(b.build(), t, 20_000)   # 10 KB per chunk: 1 us + 1 us
    >>> r.time_us, r.algbw
    (2.0, 10.0)
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from functools import cached_property, partial

from ccsynth.collectives.explicit import ExplicitCollective
from ccsynth.collectives.schedule import Schedule
from ccsynth.collectives.spec import Collective
from ccsynth.errors import ScheduleError
from ccsynth.synth.bounds import Bound, lower_bound
from ccsynth.synth.explicit_bound import explicit_lower_bound
from ccsynth.synth.simulator.costs import (
    ByteFactors, byte_factors, call_cost, check_args, footprint, input_bytes_per_rank, run_factor, working_set_bytes,
)
from ccsynth.synth.simulator.loop import run
from ccsynth.synth.simulator.rounds import ReceiveRounds, receive_rounds
from ccsynth.synth.simulator.static import StaticBound, static_bound_of
from ccsynth.synth.simulator.tables import Prepared
from ccsynth.synth.simulator.tasks import Task, TaskGraph
from ccsynth.synth.trace import Recorder, Trace
from ccsynth.tolerance import is_greater
from ccsynth.topologies.model import BYTES_PER_US_PER_GBPS, Topology
from ccsynth.topologies.protocols import meta_protocol, with_protocol

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SimResult:
    """Predicted cost of one schedule at one message size.

    ``algbw``/``busbw`` in GB/s (nccl-tests definitions). ``busy_us`` maps
    each resource that carried data to the time it would need at full
    bandwidth for the bytes it carried; ``utilisation`` divides that by
    ``time_us``. ``trace``: what happened when
    (:class:`~ccsynth.synth.trace.Trace`), for ``simulate(...,
    trace=True)``; else None.

    The collective's lower bound is computed the first time ``bound``,
    ``lower_bound_us``, ``gap`` or ``bound_which`` is read (by
    ``bound_of``; see the module docstring): ``gap`` is ``time_us /
    lower_bound_us`` (1.0 is optimal; inf if the bound is 0 and the time is
    not).
    """

    size_bytes: float
    time_us: float
    algbw: float
    busbw: float
    n_ops: int
    schedule: str = ""
    topology: str = ""
    busy_us: dict = field(default_factory=dict, compare=False, hash=False)
    trace: Trace | None = field(default=None, compare=False, hash=False, repr=False)
    bound_of: Callable[[], Bound] | None = field(default=None, compare=False, hash=False, repr=False)

    @cached_property
    def bound(self) -> Bound:
        """The collective's lower bound at this size (computed on first read; a zero bound without ``bound_of``)."""
        return self.bound_of() if self.bound_of is not None else Bound(0.0, 0.0, 0.0, "")

    @property
    def lower_bound_us(self) -> float:
        return self.bound.time_us

    @property
    def bound_which(self) -> str:
        return self.bound.which

    @property
    def gap(self) -> float:
        bound_us = self.lower_bound_us
        if bound_us > 0:
            return self.time_us / bound_us
        return 1.0 if self.time_us <= 0 else math.inf

    @property
    def utilisation(self) -> dict[str, float]:
        """Fraction of the makespan each resource was busy (at full bandwidth)."""
        if self.time_us <= 0:
            return dict.fromkeys(self.busy_us, 0.0)
        return {k: v / self.time_us for k, v in self.busy_us.items()}

    def to_dict(self, *, resources: bool = False) -> dict:
        """JSON-ready dict (non-finite numbers become None)."""
        d = {
            "size_bytes": self.size_bytes,
            "time_us": _finite(self.time_us),
            "algbw": _finite(self.algbw),
            "busbw": _finite(self.busbw),
            "lower_bound_us": _finite(self.lower_bound_us),
            "gap": _finite(self.gap),
            "n_ops": self.n_ops,
            "bound": self.bound_which,
            "schedule": self.schedule,
            "topology": self.topology,
        }
        if resources:
            d["utilisation"] = {k: _finite(v) for k, v in sorted(self.utilisation.items())}
        return d


def _finite(x: float):
    return x if math.isfinite(x) else None


def collective_bound(collective: Collective, topology: Topology, size_bytes: float) -> Bound:
    """The lower bound a result reports: :func:`~ccsynth.synth.bounds.lower_bound`, or the explicit
    collective's own (:func:`~ccsynth.synth.explicit_bound.explicit_lower_bound`)."""
    if isinstance(collective, ExplicitCollective):
        return explicit_lower_bound(collective, topology, size_bytes)
    return lower_bound(collective, topology, size_bytes)


def machine_bound(collective: Collective, priced: Topology, machine: Topology, size_bytes: float) -> Bound:
    """The bound of a schedule priced with a protocol (``priced``: the machine under
    :func:`~ccsynth.topologies.protocols.with_protocol`): the smaller of the bound under that protocol and the
    machine's own (Simple's), so that a file's gap is measured against what any protocol could reach and
    matches the gap ``ccsynth synth`` prints for it."""
    if priced is machine:
        return collective_bound(collective, machine, size_bytes)
    return min(collective_bound(collective, priced, size_bytes), collective_bound(collective, machine, size_bytes),
               key=lambda b: b.time_us)


def _algbw(size: float, time_us: float) -> float:
    return size / (time_us * BYTES_PER_US_PER_GBPS) if time_us > 0 else (math.inf if size > 0 else 0.0)


def _result(p: Prepared, topology: Topology, size_bytes, local_bw, trace: bool = False,
            footprint_bytes: float | None = None, machine: Topology | None = None) -> SimResult:
    size = check_args(size_bytes, local_bw)
    if local_bw is None:
        local_bw = topology.local_bw
    coll = p.schedule.collective
    chunk_bytes = coll.chunk_bytes(size) if p.unit_is_chunk else 1.0
    rec = Recorder(p.n_ops) if trace else None
    f = byte_factors(topology, size, footprint(p.schedule, size, footprint_bytes))
    time_us, busy = run(p, chunk_bytes, local_bw, rec, f.message, f.local, f.forward)
    if p.n_ops:
        time_us += call_cost(topology, f.footprint, working_set_bytes(p.schedule, size))
    log.debug("simulated %r on %s at %g bytes: %.6g us", p.schedule.name, topology.name, size, time_us)
    traced = None
    if rec is not None:
        if not isinstance(p.schedule, Schedule):  # pragma: no cover - simulate_graph asks for no trace
            raise ScheduleError("only the run of a Schedule is traced")
        traced = rec.trace(p.schedule, chunk_bytes, topology.overhead_scope)
    algbw = _algbw(size, time_us)
    return SimResult(size_bytes=size_bytes, time_us=time_us, algbw=algbw, busbw=algbw * coll.busbw_factor(),
                     n_ops=p.n_ops, schedule=p.schedule.name, topology=topology.name, busy_us=busy, trace=traced,
                     bound_of=partial(machine_bound, coll, topology, machine or topology, size))


def simulate(
    schedule: Schedule, topology: Topology, size_bytes: float, *, local_bw: float | None = None, trace: bool = False,
    footprint_bytes: float | None = None,
) -> SimResult:
    """Predict the time of ``schedule`` on ``topology`` for a ``size_bytes`` message.

    See the module docstring for the model. ``local_bw`` (GB/s) charges local
    copies and reductions; by default the topology's ``local_bw`` does, and
    where that is None too they are free. ``trace=True`` also records when
    every transfer and every engine's work happened (``SimResult.trace``,
    see :mod:`ccsynth.synth.trace`); the time does not change.
    ``footprint_bytes``: the call's footprint per rank where the topology
    has a ``footprint_curve`` (None: its own working set, see the module
    docstring). A schedule read from MSCCL XML whose ``proto`` is LL or LL128
    (``meta["msccl"]["proto"]``) is priced with that protocol
    (:func:`~ccsynth.topologies.protocols.with_protocol`).
    The result's lower bound is computed only when read (for a protocol, the
    smaller of its bound and the machine's: :func:`machine_bound`).

    Raises :class:`ScheduleError` if the rank counts differ, a send has no
    connection (the message names the op), a send/recv is unmatched, or the
    schedule deadlocks; :class:`~ccsynth.errors.SizeError` for a bad size.
    """
    priced = with_protocol(topology, meta_protocol(schedule.meta))  # a file's LL/LL128 (Simple: as it is)
    return _result(Prepared(schedule, priced), priced, size_bytes, local_bw, trace, footprint_bytes, topology)


def known_result(schedule: Schedule, topology: Topology, size_bytes: float, time_us: float) -> SimResult:
    """The :class:`SimResult` of a schedule whose simulated time at ``size_bytes`` is known already.

    For a caller that simulated the schedule itself (the synthesizer records it as ``meta["predicted_us"]``):
    the bound, bandwidths and gap as :func:`simulate` gives them, without running the schedule again (at
    1,024 ranks a simulation costs tens of CPU seconds). ``busy_us`` is left empty.
    """
    size = check_args(size_bytes, None)
    coll = schedule.collective
    algbw = _algbw(size, time_us)
    priced = with_protocol(topology, meta_protocol(schedule.meta))
    return SimResult(size_bytes=size_bytes, time_us=time_us, algbw=algbw, busbw=algbw * coll.busbw_factor(),
                     n_ops=len(schedule.ops), schedule=schedule.name, topology=priced.name,
                     bound_of=partial(machine_bound, coll, priced, topology, size))


def simulate_sizes(
    schedule: Schedule, topology: Topology, sizes: Iterable[float], *, local_bw: float | None = None
) -> list[SimResult]:
    """:func:`simulate` at each of ``sizes`` (the schedule is prepared once)."""
    priced = with_protocol(topology, meta_protocol(schedule.meta))
    p = Prepared(schedule, priced)
    return [_result(p, priced, s, local_bw, machine=topology) for s in sizes]


def static_bound(schedule: Schedule, topology: Topology, size_bytes: float) -> StaticBound:
    """:class:`StaticBound` of ``schedule`` on ``topology`` at ``size_bytes`` (same errors as :func:`simulate`)."""
    return static_bound_of(Prepared(schedule, topology), topology, size_bytes)


def simulate_below(schedule: Schedule, topology: Topology, size_bytes: float,
                   beat: float) -> tuple[StaticBound, SimResult | None]:
    """The schedule's :class:`StaticBound`, and its :func:`simulate` result unless the bound exceeds ``beat`` us.

    The schedule is prepared once for both (a search that prunes by the bound pays no second preparation).
    """
    p = Prepared(schedule, topology)
    bound = static_bound_of(p, topology, size_bytes)
    if is_greater(bound.time_us, beat):
        return bound, None
    return bound, _result(p, topology, size_bytes, None)


def simulate_graph(graph: TaskGraph, topology: Topology, *, local_bw: float | None = None,
                   footprint_bytes: float | None = None) -> SimResult:
    """Predict the time of a lowered program (:class:`TaskGraph`) on ``topology``.

    The same model and errors as :func:`simulate`; sizes are the tasks' own
    byte counts, and the result reports ``graph.size_bytes``; the default
    footprint is ``graph.working_set_bytes``. A task graph is a whole run:
    its time (and the bandwidths and gap that follow from it) is scaled by
    :func:`run_factor`, the topology's run curve at the call's input bytes
    per rank (see the module docstring).
    """
    result = _result(Prepared(graph, topology), topology, graph.size_bytes, local_bw,
                     footprint_bytes=footprint_bytes)
    factor = run_factor(topology, graph.collective, graph.size_bytes)
    if factor == 1.0:
        return result
    return replace(result, time_us=result.time_us * factor, algbw=result.algbw / factor,
                   busbw=result.busbw / factor)


__all__ = [
    "ByteFactors", "ReceiveRounds", "SimResult", "StaticBound", "Task", "TaskGraph", "byte_factors", "call_cost",
    "collective_bound", "machine_bound", "input_bytes_per_rank", "known_result", "run_factor",
    "receive_rounds", "simulate", "simulate_below", "simulate_sizes", "simulate_graph", "static_bound",
    "working_set_bytes",
]
