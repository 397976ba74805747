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
  measured runs worse: bench/RESULTS.md, issue 10, session 10.)
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

Implementation: one *class* per (connection, channel) holds the stream's
current transfer, its queue, and its rate; a transfer handing over to the next
one of its queue keeps the rate, so only streams starting or stopping trigger
a reshare, whose cost is linear in the size of the affected component.
Measured on two shared cores (CPU time, bound included): a 32-rank direct
alltoall of 1e5 ops on one switch in about 1 s; a pipelined ring allreduce of
1.2e5 ops in about 1 s; a 1e5-op alltoall of random-sized transfers on one
switch in 0.8 s when all are posted at once, 2.6 s when each rank sends one
at a time (every transfer then starts or stops a stream: 5e4 reshares).
``simulate(..., trace=True)`` hands the same loop a
:class:`~ccsynth.synth.trace.Recorder`, told when every phase of every
transfer and every engine's work begins and ends; without one the loop pays
a ``None`` check per event (no measurable cost: 1e5-op alltoall and ring
allreduce 0.56 and 0.58 s CPU with the hooks, 0.57 and 0.62 s without),
and recording with building the trace about doubles the time.

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

import heapq
import logging
import math
from collections import deque
from dataclasses import dataclass, field, replace
from collections.abc import Iterable, Mapping

import numpy as np

from ccsynth.collectives.explicit import ExplicitCollective
from ccsynth.collectives.schedule import Op, Schedule
from ccsynth.collectives.spec import Collective
from ccsynth.errors import ScheduleError, SizeError, TopologyError
from ccsynth.graphs import topological_order
from ccsynth.synth.bounds import Bound, lower_bound
from ccsynth.synth.explicit_bound import explicit_lower_bound
from ccsynth.synth.trace import Recorder, Trace
from ccsynth.tolerance import EVENT_REL, is_greater
from ccsynth.topologies.model import BYTES_PER_US_PER_GBPS, Topology
from ccsynth.topologies.protocols import meta_protocol, with_protocol
from ccsynth.topologies.rounds import RoundCost

log = logging.getLogger(__name__)

# op kinds, as small ints for the hot loop
_SEND, _RECV, _LOCAL = 0, 1, 2
# timed events other than the end of a transfer's data phase
_EV_DONE, _EV_DATA, _EV_POSTED, _EV_SYNCED = 0, 1, 2, 3


@dataclass(frozen=True)
class SimResult:
    """Predicted cost of one schedule at one message size.

    ``algbw``/``busbw`` in GB/s (nccl-tests definitions); ``gap`` is
    ``time_us / lower_bound_us`` (1.0 is optimal; inf if the bound is 0 and
    the time is not). ``busy_us`` maps each resource that carried data to
    the time it would need at full bandwidth for the bytes it carried;
    ``utilisation`` divides that by ``time_us``. ``trace``: what happened
    when (:class:`~ccsynth.synth.trace.Trace`), for ``simulate(...,
    trace=True)``; else None.
    """

    size_bytes: float
    time_us: float
    algbw: float
    busbw: float
    lower_bound_us: float
    gap: float
    n_ops: int
    bound_which: str = ""
    schedule: str = ""
    topology: str = ""
    busy_us: dict = field(default_factory=dict, compare=False, hash=False)
    trace: Trace | None = field(default=None, compare=False, hash=False, repr=False)

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


# ------------------------------------------------------------ task graphs
@dataclass(frozen=True)
class Task:
    """One unit of work of a :class:`TaskGraph`: an op whose size is ``nbytes`` bytes.

    ``kind`` is ``send``, ``recv`` (with ``reduce``: a receive that reduces
    into its destination), ``copy`` or ``reduce``; ``deps`` are ids of
    tasks of the same rank; ``label`` names what the task stands for in
    error messages.
    """

    id: int
    rank: int
    kind: str
    nbytes: int
    peer: int = -1
    deps: tuple[int, ...] = ()
    reduce: bool = False
    channel: int = 0
    label: str = ""

    @property
    def count(self) -> int:
        """The size in the graph's unit (bytes): what the simulator multiplies by the unit size."""
        return self.nbytes

    def describe(self) -> str:
        what = f"{self.kind} of {self.nbytes} B" + (f" with rank {self.peer}" if self.peer >= 0 else "")
        return f"task {self.id} (rank {self.rank}: {what}{', ' + self.label if self.label else ''})"


@dataclass(frozen=True)
class TaskGraph:
    """A program lowered to tasks for one message size (see the module docstring).

    ``matches`` maps every send task id to its receive task id and back;
    ``size_bytes`` is the collective's message size (nccl-tests
    convention), which the result reports and the lower bound uses;
    ``working_set_bytes`` the bytes of buffers the busiest rank touches
    in one call (input, output, scratch, staging; 0: unknown), the
    default footprint (see the module docstring).
    """

    name: str
    collective: Collective
    size_bytes: float
    ops: tuple[Task, ...]
    matches: Mapping[int, int]
    working_set_bytes: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "ops", tuple(self.ops))
        for i, t in enumerate(self.ops):
            if t.id != i:
                raise ScheduleError(f"task graph {self.name!r}: task at position {i} has id {t.id}")
            if t.kind not in ("send", "recv", "copy", "reduce"):
                raise ScheduleError(f"task graph {self.name!r}: {t.describe()} has unknown kind {t.kind!r}")
            if t.kind in ("send", "recv") and self.matches.get(i) is None:
                raise ScheduleError(f"task graph {self.name!r}: {t.describe()} has no matching partner")


# ------------------------------------------------------------ preparation
class _Prepared:
    """Size-independent tables of a schedule on a topology (reused across sizes).

    Sends are grouped into *classes*, one per (connection, channel) used: a
    class is one stream (see the module docstring) and the unit the
    bandwidth is shared between.
    """

    def __init__(self, schedule: Schedule | TaskGraph, topology: Topology):
        # a Schedule counts sizes in chunks, a TaskGraph in bytes; the rest reads alike
        self.unit_is_chunk = isinstance(schedule, Schedule)
        coll = schedule.collective
        if topology.n_ranks != coll.n_ranks:
            raise ScheduleError(
                f"schedule {schedule.name!r} is for {coll.n_ranks} ranks but topology {topology.name!r} has "
                f"{topology.n_ranks}"
            )
        ops = schedule.ops
        n = len(ops)
        matches = schedule.matches  # raises ScheduleError on unmatched sends/recvs
        self.schedule = schedule
        self.n_ops = n
        self.kind = [0] * n
        self.count = [0] * n
        self.partner = [-1] * n
        self.ndeps = [0] * n
        self.dependents: list[list[int]] = [[] for _ in range(n)]
        self.cls = [-1] * n  # class (connection) of each send
        self.overhead = [0.0] * n  # per-message overhead of each send and recv (its connection's)
        self.reduces = [op.kind == "recv" and op.reduce for op in ops]
        # the round of every receive and the extra cost of each round (only where the topology charges them)
        self.rounds = receive_rounds(ops, matches, topology.round_cost) if topology.round_cost is not None else None
        # sends that pass on what a receive of the same call brought (only where the topology charges them)
        self.forwards = _forwarded_sends(ops) if topology.forward_curve is not None else None
        self.async_progress = topology.async_progress or topology.overhead_scope != "rank"
        self.receiver_copies = topology.receiver_copies and not self.async_progress
        # the engine of each op (see the module docstring); its rank, for the busy-time report
        self.engine, self.engine_rank = _engines(ops, topology.overhead_scope)
        self.class_alpha: list[float] = []
        self.class_overhead: list[float] = []
        self.class_res: list[tuple[int, ...]] = []
        # the protocol switch (see the module docstring): messages of more than eager_limit bytes
        self.eager_limit = topology.eager_limit if topology.rendezvous_alpha else None
        self.rendezvous_alpha = topology.rendezvous_alpha
        self.local_overhead = topology.local_overhead
        self.res_names: list[str] = []
        self.res_cap: list[float] = []  # bytes per us
        class_of: dict[tuple[int, int, int], int] = {}
        res_index: dict[str, int] = {}
        rbw = topology.resource_bw
        # uniform chunks (every built-in collective): an op's units are its chunk count, read without a call
        units_of = schedule.op_units if isinstance(schedule, Schedule) and not coll.uniform else None
        count, ndeps, dependents = self.count, self.ndeps, self.dependents
        for op in ops:
            i = op.id
            if not self.unit_is_chunk or not isinstance(op, Op):
                count[i] = op.count
            elif units_of is not None:
                count[i] = units_of(op)
            else:
                rng = op.src if op.src is not None else op.dst
                count[i] = rng.count if rng is not None else 0
            deps = set(op.deps)  # its iteration order is the order dependents are released in: kept as it was
            ndeps[i] = len(deps)
            for d in deps:
                dependents[d].append(i)
            if op.kind == "send":
                self.kind[i] = _SEND
                self.partner[i] = matches[i]
                key = (op.rank, op.peer, op.channel)
                c = class_of.get(key)
                if c is None:
                    conn = topology.connection(op.rank, op.peer)
                    if conn is None:
                        raise ScheduleError(
                            f"{op.describe()} needs a connection {op.rank}->{op.peer}, "
                            f"which topology {topology.name!r} lacks"
                        )
                    idx = []
                    for name in conn.resources:
                        j = res_index.get(name)
                        if j is None:
                            j = res_index[name] = len(self.res_names)
                            self.res_names.append(name)
                            self.res_cap.append(rbw[name] * BYTES_PER_US_PER_GBPS)
                        idx.append(j)
                    c = class_of[key] = len(self.class_res)
                    self.class_res.append(tuple(idx))
                    self.class_alpha.append(conn.alpha)
                    self.class_overhead.append(conn.overhead)
                self.cls[i] = c
                self.overhead[i] = self.overhead[matches[i]] = self.class_overhead[c]
            elif op.kind == "recv":
                self.kind[i] = _RECV
                self.partner[i] = matches[i]
            else:
                self.kind[i] = _LOCAL


@dataclass(frozen=True)
class ReceiveRounds:
    """The rounds of every rank (see the module docstring): ``of[i]`` is the round of op ``i`` (-1: not a
    receive), ``size[g]`` the receives of round ``g``, ``peers[g]`` the distinct ranks they come from and
    ``cost[g]`` its extra us."""

    of: tuple[int, ...]
    size: tuple[int, ...]
    peers: tuple[int, ...]
    cost: tuple[float, ...]


def receive_rounds(ops, matches: Mapping[int, int], cost: RoundCost) -> ReceiveRounds | None:
    """The rounds of the receives of ``ops`` (a schedule's or a task graph's; ``matches``: send <-> recv)
    with their costs under ``cost``; None where the dependencies and matches have a cycle (the run then
    reports the deadlock)."""
    n = len(ops)
    preds = [tuple(op.deps) + ((matches[i],) if op.kind == "recv" else ()) for i, op in enumerate(ops)]
    order = topological_order(preds)
    if order is None:
        return None
    level = [0] * n
    for i in order:
        lv = max((level[d] for d in ops[i].deps), default=0)
        if ops[i].kind == "recv":
            lv = max(lv, level[matches[i]] + 1)
        level[i] = lv
    index: dict[tuple[int, int], int] = {}
    of = [-1] * n
    size: list[int] = []
    senders: list[set[int]] = []
    for op in ops:
        if op.kind != "recv":
            continue
        key = (op.rank, level[op.id])
        g = index.get(key)
        if g is None:
            g = index[key] = len(size)
            size.append(0)
            senders.append(set())
        of[op.id] = g
        size[g] += 1
        senders[g].add(op.peer)
    peers = tuple(len(s) for s in senders)
    return ReceiveRounds(tuple(of), tuple(size), peers, tuple(cost.cost_us(k) for k in peers))


def _forwarded_sends(ops) -> bytearray:
    """Per op, 1 for a send that waits (directly or through local work) for a receive of the same call."""
    n = len(ops)
    preds = [tuple(op.deps) for op in ops]
    order = range(n) if all(d < i for i, ds in enumerate(preds) for d in ds) else topological_order(preds)
    if order is None:
        raise ScheduleError("the schedule's dependencies have a cycle")
    after_recv = bytearray(n)
    out = bytearray(n)
    for i in order:
        if any(after_recv[d] or ops[d].kind == "recv" for d in preds[i]):
            after_recv[i] = 1
            out[i] = ops[i].kind == "send"
    return out


def _engines(ops, scope: str) -> tuple[list[int], list[int]]:
    """Engine index of every op, and the rank of every engine (see the module docstring)."""
    index: dict[tuple, int] = {}
    engine_rank: list[int] = []
    out = []
    for op in ops:
        if scope == "rank":
            key: tuple = (op.rank,)
        elif op.kind in ("send", "recv"):
            key = (op.rank, op.kind, op.peer, op.channel)
        else:
            key = ("local", op.id)  # local work does not queue
        e = index.get(key)
        if e is None:
            e = index[key] = len(engine_rank)
            engine_rank.append(op.rank)
        out.append(e)
    return out, engine_rank


#: above this many busy classes in the changed component, the rates are recomputed by :func:`_maxmin_all`
#: (numpy, every busy class at once) instead of the heap of :func:`_maxmin` (pure Python, the component only)
SMALL_COMPONENT = 48


def _component(
    seeds: Iterable[int], res_active: list[set[int]], class_res: list[tuple[int, ...]], limit: int,
) -> tuple[set[int], set[int]] | None:
    """The busy classes and resources connected to resources ``seeds``, or None past ``limit`` classes.

    ``res_active[r]`` holds the busy classes on resource ``r``. Max-min allocations decompose over
    connected components (classes linked through shared resources), so the rates elsewhere do not
    change.
    """
    seen = set(seeds)
    todo = list(seen)
    comp: set[int] = set()
    while todo:
        r = todo.pop()
        for c in res_active[r]:
            if c not in comp:
                comp.add(c)
                if len(comp) > limit:
                    return None
                for r2 in class_res[c]:
                    if r2 not in seen:
                        seen.add(r2)
                        todo.append(r2)
    return comp, seen


def _maxmin(
    seen: set[int],
    res_active: list[set[int]],
    res_weight: list[int],
    weight: list[int],
    class_res: list[tuple[int, ...]],
    caps: list[float],
) -> dict[int, float]:
    """Max-min fair per-transfer rates of the classes on resources ``seen`` (a whole component).

    Class ``c`` stands for ``weight[c]`` transfers crossing resources
    ``class_res[c]``; ``res_active[r]`` holds the classes with transfers on
    resource ``r`` and ``res_weight[r]`` their total weight. Progressive
    filling with a lazy heap over resources keyed by their fair share
    ``(cap - used) / unfrozen weight``: shares only grow as classes freeze
    elsewhere, so a popped entry whose share is still current is the next
    bottleneck. O((C + R) log R) for C classes and R resources in the component.
    """
    cnt = {r: res_weight[r] for r in seen if res_weight[r] > 0}
    used = dict.fromkeys(cnt, 0.0)
    heap = [(caps[r] / w, r) for r, w in cnt.items()]
    heapq.heapify(heap)
    rate: dict[int, float] = {}
    while heap:
        key, r = heapq.heappop(heap)
        w = cnt[r]
        if w == 0:
            continue
        share = (caps[r] - used[r]) / w
        if is_greater(share, key, EVENT_REL):
            heapq.heappush(heap, (share, r))
            continue
        if share < 0.0:
            share = 0.0
        for c in sorted(res_active[r]):
            if c in rate:
                continue
            rate[c] = share
            wc = weight[c]
            for r2 in class_res[c]:
                cnt[r2] -= wc
                used[r2] += share * wc
    return rate


def _maxmin_all(class_res: np.ndarray, caps: np.ndarray) -> np.ndarray:
    """Max-min fair rates of classes ``class_res`` (one row of resource indices per class), vectorised.

    Every class stands for one transfer; rows are padded with the index of a
    last resource of infinite capacity (``caps[-1]``), which is never a
    bottleneck. Progressive filling, all components at once and many levels
    per round: a resource whose fair share ``(cap - used) / unfrozen
    classes`` is the smallest among the resources of every class crossing
    it (within :data:`~ccsynth.tolerance.EVENT_REL`) saturates at that
    share, whatever happens elsewhere -- only its classes change its share,
    and they freeze only where a share is smaller, which can only grow --
    so every such resource freezes its classes in the same round. The
    resource of least share is always one, so each round freezes some
    classes; the rounds are as many as the longest chain of rising
    bottleneck levels. The rates equal :func:`_maxmin`'s up to rounding
    (``tests/test_simulate.py`` checks both against a plain water-filling).
    A component's rates depend on its own classes only, bit for bit: the
    rounds never compare shares across components.
    """
    k, width = class_res.shape
    n_res = len(caps)
    pad = n_res - 1
    rate = np.empty(k)
    if k == 0:
        return rate
    cnt = np.bincount(class_res.ravel(), minlength=n_res).astype(float)
    used = np.zeros(n_res)
    live = np.arange(k)
    # one array per column: numpy reduces along a short last axis slowly, elementwise over columns fast
    cols = [np.ascontiguousarray(class_res[:, j]) for j in range(width)]
    while live.size:
        with np.errstate(divide="ignore", invalid="ignore"):
            share = (caps - used) / cnt
        share[cnt <= 0] = math.inf
        share[pad] = math.inf
        shares = [share[col] for col in cols]
        cs = shares[0]
        for sj in shares[1:]:
            cs = np.minimum(cs, sj)
        # an incidence whose resource offers more than its class gets elsewhere: that resource is no bottleneck
        limit = cs + EVENT_REL * np.maximum(1.0, cs)
        blocked = np.zeros(n_res, dtype=bool)
        blocked[pad] = True
        for col, sj in zip(cols, shares):
            blocked[col[sj > limit]] = True
        frozen = ~blocked[cols[0]]
        for col in cols[1:]:
            frozen |= ~blocked[col]
        if not frozen.any():  # only infinite shares left: nothing limits these classes
            frozen[:] = True
        got = np.maximum(cs[frozen], 0.0)
        rate[live[frozen]] = got
        weights = np.where(np.isfinite(got), got, 0.0)
        for col in cols:
            fc = col[frozen]
            used += np.bincount(fc, weights=weights, minlength=n_res)
            cnt -= np.bincount(fc, minlength=n_res)
        keep = ~frozen
        live = live[keep]
        cols = [col[keep] for col in cols]
    return rate


def _run(
    p: _Prepared, chunk_bytes: float, local_bw: float | None, rec: Recorder | None = None,
    message_factor: float = 1.0, local_factor: float = 1.0, forward_factor: float = 1.0,
) -> tuple[float, dict[str, float]]:
    """Simulate once; returns (makespan in us, busy time per resource name).

    ``message_factor``, ``local_factor`` and ``forward_factor``: the call's
    size-dependent costs (see the module docstring), 1.0 without curves.

    ``rec`` (optional) is told when every phase of every transfer, every
    engine's work and every op ends (see :mod:`ccsynth.synth.trace`).
    """
    n = p.n_ops
    kind, count, partner, dependents, cls = p.kind, p.count, p.partner, p.dependents, p.cls
    class_res, class_alpha, caps = p.class_res, p.class_alpha, p.res_cap
    eager_limit, rendezvous_alpha = p.eager_limit, p.rendezvous_alpha
    engine_of, overhead, reduces = p.engine, p.overhead, p.reduces
    n_cls = len(class_res)
    ndeps = list(p.ndeps)
    ready = bytearray(n)
    done = bytearray(n)
    # the call's size-dependent factors (1.0: the constants) scale what a unit costs, not what it is
    local_cost = chunk_bytes * local_factor / (local_bw * BYTES_PER_US_PER_GBPS) if local_bw else 0.0
    data_unit = chunk_bytes * message_factor  # bytes a unit's data phase moves through its resources
    hold = not p.async_progress  # a transfer's data phase waits for both engines (see the module docstring)
    copies = p.receiver_copies  # ... and keeps the receiver's engine busy (see the module docstring)
    slowest = [min((caps[r] for r in rs), default=math.inf) for rs in class_res] if copies else []
    # units each op's data phase moves: forwarded sends move forward_factor times theirs
    fwd = p.forwards
    dcount = count if fwd is None or forward_factor == 1.0 else \
        [c * forward_factor if f else c for c, f in zip(count, fwd)]
    local_call = p.local_overhead if chunk_bytes > 0 else 0.0  # the fixed cost of a kernel call that moves bytes
    # rounds (see the module docstring): receives still to arrive per round; the last one pays the round's cost
    rounds = p.rounds
    round_left = list(rounds.size) if rounds is not None else None
    # timed events other than transfer ends: (time, op id, _EV_DONE / _EV_DATA / _EV_POSTED)
    heap: list[tuple[float, int, int]] = []
    push, pop = heapq.heappush, heapq.heappop
    # Per engine: when it is next free, and its busy time.
    free_at = [0.0] * len(p.engine_rank)
    stream_busy = [0.0] * len(p.engine_rank)
    arrivals: list[tuple[int, float, int]] = []  # stream work that arrived at the current instant
    # Per class (connection and channel): the transfer moving data now (-1 if
    # none), its bytes left as of time tupd, its rate, the transfers queued
    # behind it, and when it completes (t_next, numpy for a fast minimum).
    # (rem, rate, tupd are numpy arrays too, for the vectorised reshare of a large component)
    busy = [0] * n_cls
    cur = [-1] * n_cls
    rem = np.zeros(n_cls)
    rate = np.zeros(n_cls)
    tupd = np.zeros(n_cls)
    t_next = np.full(n_cls, math.inf)
    # the same tables for _maxmin_all: busy classes as a mask, resources padded with one of infinite capacity
    busy_mask = np.zeros(n_cls, dtype=bool)
    caps_pad = np.array([*caps, math.inf])
    width = max((len(rs) for rs in class_res), default=1) or 1
    res_pad = np.full((n_cls, width), len(caps), dtype=np.int64)
    for c, rs in enumerate(class_res):
        res_pad[c, : len(rs)] = rs
    queue: list[deque[int]] = [deque() for _ in range(n_cls)]
    res_active: list[set[int]] = [set() for _ in caps]
    res_weight = [0] * len(caps)  # busy classes on each resource
    n_busy = 0
    res_bytes = [0.0] * len(caps)
    dirty: set[int] = set()
    touched: set[int] = set()
    now = 0.0
    makespan = 0.0
    n_done = 0
    stack = [i for i in range(n) if ndeps[i] == 0]
    stack.reverse()  # pop in id order

    def finish(i: int) -> None:
        nonlocal n_done, makespan
        done[i] = 1
        n_done += 1
        makespan = now
        if rec is not None:
            rec.done[i] = now
        for d in dependents[i]:
            ndeps[d] -= 1
            if ndeps[d] == 0:
                stack.append(d)

    def on_stream(i: int, cost: float, event: int) -> None:
        # op i needs ``cost`` us of its engine; served by flush_stream()
        arrivals.append((i, cost, event))

    def flush_stream() -> None:
        # first come first served; work arriving at the same instant in op id order
        arrivals.sort()
        for i, cost, event in arrivals:
            e = engine_of[i]
            start = free_at[e] if free_at[e] > now else now
            free_at[e] = start + cost
            stream_busy[e] += cost
            push(heap, (start + cost, i, event))
            if rec is not None:
                rec.work.append((i, start, start + cost))
        arrivals.clear()

    def received(r: int) -> None:
        # the bytes of recv r have arrived; the last of its round waits for the round's cost first
        if rounds is not None and round_left is not None:
            due = _round_due(rounds, round_left, r)
            if due > 0:
                push(heap, (now + due, r, _EV_SYNCED))
                return
        arrived(r)

    def arrived(r: int) -> None:
        # recv r may go on: its overhead (and fused reduction) on the receiver's engine
        cost = overhead[r]
        if reduces[r] and count[r]:
            cost += local_call + count[r] * local_cost
        if cost > 0:
            on_stream(r, cost, _EV_DONE)
        else:
            finish(r)

    def posted(s: int) -> None:
        # send s (or its partner recv) just became ready: start the transfer once both are
        ready[s] = 1
        j = partner[s]
        if ready[j]:
            # through the heap even without latency: transfers whose data phase
            # starts at the same instant join their stream in op id order
            snd = s if kind[s] == _SEND else j
            alpha = class_alpha[cls[snd]]
            if eager_limit is not None and count[snd] * chunk_bytes > eager_limit:
                alpha += rendezvous_alpha
            push(heap, (now + alpha, snd, _EV_DATA))
            if rec is not None:
                rec.posted[snd] = now

    def handle(i: int, event: int) -> None:
        # a timed event of op i, then whatever became ready
        if event == _EV_DATA:
            start_data(i)
        elif event == _EV_POSTED:
            posted(i)
        elif event == _EV_SYNCED:
            arrived(i)
        else:
            finish(i)
        drain()

    def start_data(s: int) -> None:
        nonlocal n_busy
        if hold:
            # no asynchronous progress: the bytes move once both ranks' engines are idle
            t_free = max(free_at[engine_of[s]], free_at[engine_of[partner[s]]])
            if t_free > now + EVENT_REL * max(1.0, now):
                push(heap, (t_free, s, _EV_DATA))
                return
        nbytes = count[s] * chunk_bytes
        if rec is not None:
            rec.data_ready[s] = now
            if nbytes <= 0 or not busy[cls[s]]:
                rec.data_start[s] = now
            if nbytes <= 0:
                rec.data_end[s] = now
        if nbytes <= 0:
            finish(s)
            received(partner[s])
            return
        nbytes = dcount[s] * data_unit
        c = cls[s]
        if copies:
            # the receiver's core copies the bytes: its engine is busy at least this long (see the module docstring)
            e = engine_of[partner[s]]
            t_copy = now + nbytes / slowest[c]
            if free_at[e] < t_copy:
                stream_busy[e] += t_copy - max(free_at[e], now)
                free_at[e] = t_copy
        for r in class_res[c]:
            res_bytes[r] += nbytes
        if busy[c]:
            queue[c].append(s)
            return
        busy[c] = 1
        busy_mask[c] = True
        n_busy += 1
        cur[c], rem[c], tupd[c] = s, nbytes, now
        for r in class_res[c]:
            res_weight[r] += 1
            res_active[r].add(c)
            dirty.add(r)
        touched.add(c)

    def drain() -> None:
        while stack:
            i = stack.pop()
            k = kind[i]
            if k == _LOCAL:
                cost = local_call + count[i] * local_cost if count[i] else 0.0
                if cost > 0:
                    on_stream(i, cost, _EV_DONE)
                else:
                    finish(i)
            elif k == _SEND and overhead[i] > 0:
                on_stream(i, overhead[i], _EV_POSTED)
            else:
                posted(i)

    def class_done(c: int) -> None:
        nonlocal n_busy
        s = cur[c]
        if rec is not None:
            rec.data_end[s] = now
        finish(s)
        received(partner[s])
        q = queue[c]
        if q:
            # the next transfer of the queue takes over at the same rate
            s = q.popleft()
            if rec is not None:
                rec.data_start[s] = now
            cur[c], rem[c], tupd[c] = s, dcount[s] * data_unit, now
            t_next[c] = now + rem[c] / rate[c]
            return
        busy[c] = 0
        busy_mask[c] = False
        n_busy -= 1
        cur[c], rem[c], rate[c], tupd[c] = -1, 0.0, 0.0, now
        t_next[c] = math.inf
        for r in class_res[c]:
            res_weight[r] -= 1
            res_active[r].discard(c)
            dirty.add(r)

    def reshare() -> None:
        found = _component(dirty, res_active, class_res, SMALL_COMPONENT)
        dirty.clear()
        if found is None:
            reshare_all()
        else:
            new_rates = _maxmin(found[1], res_active, res_weight, busy, class_res, caps)
            idx, val = [], []
            for c, new in new_rates.items():
                if new == rate[c] and c not in touched:
                    continue  # same rate: its completion time stands
                rem[c] -= rate[c] * (now - tupd[c])
                tupd[c] = now
                rate[c] = new
                idx.append(c)
                val.append(now + rem[c] / new if new > 0 else math.inf)
            if idx:
                t_next[idx] = val
        touched.clear()

    def reshare_all() -> None:
        # a large component: every busy class at once, in numpy (the other components' rates come out the same)
        act = np.flatnonzero(busy_mask)
        new = _maxmin_all(res_pad[act], caps_pad)
        old = rate[act]
        changed = new != old
        if touched:
            mark = np.zeros(n_cls, dtype=bool)
            mark[list(touched)] = True
            changed |= mark[act]
        idx, new, old = act[changed], new[changed], old[changed]
        rem[idx] -= old * (now - tupd[idx])
        tupd[idx] = now
        rate[idx] = new
        with np.errstate(divide="ignore", invalid="ignore"):
            t_next[idx] = np.where(new > 0, now + rem[idx] / new, math.inf)

    drain()
    flush_stream()
    if dirty:
        reshare()
    while True:
        tc = float(t_next.min()) if n_busy else math.inf
        th = heap[0][0] if heap else math.inf
        t0 = tc if tc < th else th
        if not math.isfinite(t0):
            break
        now = t0
        horizon = t0 + EVENT_REL * max(1.0, abs(t0))  # events this close are simultaneous
        if tc <= horizon:
            for c in np.flatnonzero(t_next <= horizon).tolist():
                class_done(c)
            drain()
        while heap and heap[0][0] <= horizon:
            _, i, event = pop(heap)
            if not heap or heap[0][0] > horizon:
                handle(i, event)
                continue
            # several events at this instant: in op id order, not by times that differ by rounding alone
            # (an event one ulp later would otherwise overtake a lower id), events they raise joining in
            instant = [(i, event)]
            while instant:
                while heap and heap[0][0] <= horizon:
                    _, j, ev = pop(heap)
                    push(instant, (j, ev))
                i, event = pop(instant)
                handle(i, event)
        if arrivals:
            flush_stream()
        if dirty:
            reshare()

    if n_done < n:
        raise ScheduleError(_deadlock_message(p, done, ready, ndeps))
    busy_us = {p.res_names[r]: res_bytes[r] / caps[r] for r in range(len(caps)) if res_bytes[r] > 0}
    for e, t in enumerate(stream_busy):
        if t > 0:
            name = f"rank{p.engine_rank[e]}"
            busy_us[name] = busy_us.get(name, 0.0) + t
    return makespan, busy_us


def _round_due(rounds: ReceiveRounds, left: list[int], r: int) -> float:
    """Receive ``r`` has its bytes: the cost of its round if it is the round's last (0 otherwise)."""
    g = rounds.of[r]
    left[g] -= 1
    return rounds.cost[g] if left[g] == 0 else 0.0


def _deadlock_message(p: _Prepared, done: bytearray, ready: bytearray, ndeps: list[int]) -> str:
    ops = p.schedule.ops
    stuck = [i for i in range(p.n_ops) if not done[i]]
    # prefer an op that is ready but waits for its partner: it names the cross-rank cycle
    for i in stuck:
        if p.kind[i] != _LOCAL and ready[i] and not ready[p.partner[i]]:
            j = p.partner[i]
            waits = [d for d in ops[j].deps if not done[d]]
            on = f"; it waits for {ops[waits[0]].describe()}" if waits else ""
            return (
                f"schedule {p.schedule.name!r} deadlocks: {ops[i].describe()} is ready but its matching "
                f"{ops[j].describe()} never becomes ready{on} ({len(stuck)} ops never complete)"
            )
    i = stuck[0]
    waits = [d for d in ops[i].deps if not done[d]]
    on = f"; it waits for {ops[waits[0]].describe()}" if waits else ""
    return f"schedule {p.schedule.name!r} deadlocks: {ops[i].describe()} never completes{on} ({len(stuck)} ops never complete)"


# ------------------------------------------------------------ public API
def _check_args(size_bytes, local_bw) -> float:
    if isinstance(size_bytes, bool) or not isinstance(size_bytes, (int, float)):
        raise SizeError(f"message size must be a number of bytes, got {size_bytes!r}")
    size = float(size_bytes)
    if not math.isfinite(size) or size < 0:
        raise SizeError(f"message size must be a non-negative number of bytes, got {size_bytes!r}")
    if local_bw is not None:
        if isinstance(local_bw, bool) or not isinstance(local_bw, (int, float)) or not (
            math.isfinite(local_bw) and local_bw > 0
        ):
            raise TopologyError(f"local copy bandwidth must be a positive number of GB/s, got {local_bw!r}")
    return size


def working_set_bytes(schedule: Schedule | TaskGraph, size_bytes: float) -> float:
    """Bytes of buffers one rank touches in a call of ``schedule`` at ``size_bytes``: the default footprint.

    A schedule's input, output and scratch chunks (every rank holds as many);
    a :class:`TaskGraph`'s own figure (the executor's layout, staging included).
    """
    if isinstance(schedule, TaskGraph):
        return float(schedule.working_set_bytes)
    coll = schedule.collective
    return coll.chunk_bytes(float(size_bytes)) * (coll.in_chunks + coll.out_chunks + schedule.scratch_chunks)


@dataclass(frozen=True)
class ByteFactors:
    """What one byte of a call costs, relative to the constant model (see the module docstring).

    ``message``: every message (``message_curve`` at the call's size, times
    ``footprint_curve`` at its footprint); ``local``: every local copy or
    reduction (``local_curve`` at the call's size: its ladder of kernel
    calls is measured on buffers of that size, its own footprint);
    ``forward``: a forwarded message's extra (``forward_curve``). All 1.0
    on a topology without curves.
    """

    message: float = 1.0
    local: float = 1.0
    forward: float = 1.0
    footprint: float = 0.0  # the call's footprint per rank (bytes), what ``cold_call`` is read at


def call_cost(topology: Topology, footprint_bytes: float, working_set_bytes: float) -> float:
    """What a call of footprint ``footprint_bytes`` and ``working_set_bytes`` of own buffers per rank pays once,
    whatever its schedule (us): the per-call cost, plus the cold call cost where the topology has one (see the
    module docstring)."""
    cold = topology.cold_call
    return topology.call_overhead + (cold.cost_us(footprint_bytes, working_set_bytes) if cold is not None else 0.0)


def byte_factors(topology: Topology, size_bytes: float, footprint_bytes: float) -> ByteFactors:
    """The :class:`ByteFactors` of a call of ``size_bytes`` whose footprint is ``footprint_bytes`` per rank."""
    mcurve, lcurve, fcurve = topology.message_curve, topology.local_curve, topology.forward_curve
    hcurve = topology.footprint_curve
    h = hcurve.factor(footprint_bytes) if hcurve is not None else 1.0
    return ByteFactors((mcurve.factor(size_bytes) if mcurve is not None else 1.0) * h,
                       lcurve.factor(size_bytes) if lcurve is not None else 1.0,
                       fcurve.factor(size_bytes) if fcurve is not None else 1.0, float(footprint_bytes))


def _footprint(p: _Prepared, size: float, footprint_bytes: float | None) -> float:
    if footprint_bytes is None:
        return working_set_bytes(p.schedule, size)
    if isinstance(footprint_bytes, bool) or not isinstance(footprint_bytes, (int, float)) or not (
            math.isfinite(footprint_bytes) and footprint_bytes >= 0):
        raise SizeError(f"footprint must be a non-negative number of bytes, got {footprint_bytes!r}")
    return float(footprint_bytes)


def _result(p: _Prepared, topology: Topology, size_bytes, local_bw, trace: bool = False,
            footprint_bytes: float | None = None) -> SimResult:
    size = _check_args(size_bytes, local_bw)
    if local_bw is None:
        local_bw = topology.local_bw
    coll = p.schedule.collective
    chunk_bytes = coll.chunk_bytes(size) if p.unit_is_chunk else 1.0
    rec = Recorder(p.n_ops) if trace else None
    f = byte_factors(topology, size, _footprint(p, size, footprint_bytes))
    time_us, busy = _run(p, chunk_bytes, local_bw, rec, f.message, f.local, f.forward)
    if p.n_ops:
        time_us += call_cost(topology, f.footprint, working_set_bytes(p.schedule, size))
    log.debug("simulated %r on %s at %g bytes: %.6g us", p.schedule.name, topology.name, size, time_us)
    bound: Bound = explicit_lower_bound(coll, topology, size) if isinstance(coll, ExplicitCollective) else \
        lower_bound(coll, topology, size)
    algbw = size / (time_us * BYTES_PER_US_PER_GBPS) if time_us > 0 else (math.inf if size > 0 else 0.0)
    if bound.time_us > 0:
        gap = time_us / bound.time_us
    else:
        gap = 1.0 if time_us <= 0 else math.inf
    traced = None
    if rec is not None:
        if not isinstance(p.schedule, Schedule):  # pragma: no cover - simulate_graph asks for no trace
            raise ScheduleError("only the run of a Schedule is traced")
        traced = rec.trace(p.schedule, chunk_bytes, topology.overhead_scope)
    return SimResult(
        size_bytes=size_bytes,
        time_us=time_us,
        algbw=algbw,
        busbw=algbw * coll.busbw_factor(),
        lower_bound_us=bound.time_us,
        gap=gap,
        n_ops=p.n_ops,
        bound_which=bound.which,
        schedule=p.schedule.name,
        topology=topology.name,
        busy_us=busy,
        trace=traced,
    )


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

    Raises :class:`ScheduleError` if the rank counts differ, a send has no
    connection (the message names the op), a send/recv is unmatched, or the
    schedule deadlocks; :class:`~ccsynth.errors.SizeError` for a bad size.
    """
    topology = with_protocol(topology, meta_protocol(schedule.meta))  # a file's LL/LL128 (Simple: as it is)
    return _result(_Prepared(schedule, topology), topology, size_bytes, local_bw, trace, footprint_bytes)


def known_result(schedule: Schedule, topology: Topology, size_bytes: float, time_us: float) -> SimResult:
    """The :class:`SimResult` of a schedule whose simulated time at ``size_bytes`` is known already.

    For a caller that simulated the schedule itself (the synthesizer records it as ``meta["predicted_us"]``):
    the bound, bandwidths and gap as :func:`simulate` gives them, without running the schedule again (at
    1,024 ranks a simulation costs tens of CPU seconds). ``busy_us`` is left empty.
    """
    size = _check_args(size_bytes, None)
    coll = schedule.collective
    bound: Bound = explicit_lower_bound(coll, topology, size) if isinstance(coll, ExplicitCollective) else \
        lower_bound(coll, topology, size)
    algbw = size / (time_us * BYTES_PER_US_PER_GBPS) if time_us > 0 else (math.inf if size > 0 else 0.0)
    gap = time_us / bound.time_us if bound.time_us > 0 else (1.0 if time_us <= 0 else math.inf)
    return SimResult(size_bytes=size_bytes, time_us=time_us, algbw=algbw, busbw=algbw * coll.busbw_factor(),
                     lower_bound_us=bound.time_us, gap=gap, n_ops=len(schedule.ops), bound_which=bound.which,
                     schedule=schedule.name, topology=topology.name)


def simulate_sizes(
    schedule: Schedule, topology: Topology, sizes: Iterable[float], *, local_bw: float | None = None
) -> list[SimResult]:
    """:func:`simulate` at each of ``sizes`` (the schedule is prepared once)."""
    topology = with_protocol(topology, meta_protocol(schedule.meta))
    p = _Prepared(schedule, topology)
    return [_result(p, topology, s, local_bw) for s in sizes]


@dataclass(frozen=True)
class StaticBound:
    """A lower bound on a schedule's simulated time, from its op counts alone (no simulation).

    ``volume_us``: the busiest resource's bytes at its full bandwidth (the
    rates on a resource never add up to more than its capacity);
    ``engine_us``: the busiest engine's per-message overheads, which it pays
    one after another (see the module docstring). ``time_us`` is the larger
    plus the per-call cost. Latencies and local work are left out, so the
    bound is valid, not tight.
    """

    volume_us: float
    engine_us: float
    call_us: float

    @property
    def time_us(self) -> float:
        return max(self.volume_us, self.engine_us) + self.call_us


def static_bound(schedule: Schedule, topology: Topology, size_bytes: float) -> StaticBound:
    """:class:`StaticBound` of ``schedule`` on ``topology`` at ``size_bytes`` (same errors as :func:`simulate`)."""
    return _static(_Prepared(schedule, topology), topology, size_bytes)


def simulate_below(schedule: Schedule, topology: Topology, size_bytes: float,
                   beat: float) -> tuple[StaticBound, SimResult | None]:
    """The schedule's :class:`StaticBound`, and its :func:`simulate` result unless the bound exceeds ``beat`` us.

    The schedule is prepared once for both (a search that prunes by the bound pays no second preparation).
    """
    p = _Prepared(schedule, topology)
    bound = _static(p, topology, size_bytes)
    if is_greater(bound.time_us, beat):
        return bound, None
    return bound, _result(p, topology, size_bytes, None)


def _static(p: _Prepared, topology: Topology, size_bytes: float) -> StaticBound:
    size = _check_args(size_bytes, None)
    schedule = p.schedule
    if not p.n_ops:
        return StaticBound(0.0, 0.0, 0.0)
    f = byte_factors(topology, size, _footprint(p, size, None))
    unit = schedule.collective.chunk_bytes(size) * f.message
    cls = np.asarray(p.cls)
    sends = np.flatnonzero(cls >= 0)
    units = np.asarray(p.count, dtype=float)
    if p.forwards is not None:  # forwarded sends move the forward curve's factor of theirs
        units = np.where(np.asarray(p.forwards, dtype=bool), units * f.forward, units)
    class_bytes = np.bincount(cls[sends], weights=units[sends] * unit, minlength=len(p.class_res))
    res_bytes = np.zeros(len(p.res_cap))
    for c, rs in enumerate(p.class_res):
        for r in rs:
            res_bytes[r] += class_bytes[c]
    volume = float((res_bytes / np.asarray(p.res_cap)).max()) if len(p.res_cap) else 0.0
    engine = float(np.bincount(np.asarray(p.engine), weights=np.asarray(p.overhead)).max())
    return StaticBound(volume, engine, call_cost(topology, f.footprint, working_set_bytes(schedule, size)))


def input_bytes_per_rank(collective: Collective, size_bytes: float) -> float:
    """The bytes of input one rank holds in a call of ``collective`` at ``size_bytes`` (nccl-tests size).

    An allreduce's whole buffer, an allgather's one shard, ...: a collective's
    ``in_chunks`` chunks; an explicit collective (resharding) has no common
    figure per rank and is indexed by ``size_bytes`` itself.
    """
    if isinstance(collective, ExplicitCollective):
        return float(size_bytes)
    return collective.chunk_bytes(float(size_bytes)) * collective.in_chunks


def run_factor(topology: Topology, collective: Collective, size_bytes: float) -> float:
    """``Topology.run_curve`` at a call's input bytes per rank (1.0 without a run curve)."""
    curve = topology.run_curve
    if curve is None:
        return 1.0
    return curve.factor(input_bytes_per_rank(collective, size_bytes))


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
    result = _result(_Prepared(graph, topology), topology, graph.size_bytes, local_bw,
                     footprint_bytes=footprint_bytes)
    factor = run_factor(topology, graph.collective, graph.size_bytes)
    if factor == 1.0:
        return result
    time_us = result.time_us * factor
    return replace(result, time_us=time_us, algbw=result.algbw / factor, busbw=result.busbw / factor,
                   gap=result.gap * factor)


__all__ = [
    "ByteFactors", "ReceiveRounds", "SimResult", "StaticBound", "Task", "TaskGraph", "byte_factors", "call_cost",
    "input_bytes_per_rank", "known_result", "run_factor",
    "receive_rounds", "simulate", "simulate_below", "simulate_sizes", "simulate_graph", "static_bound",
    "working_set_bytes",
]
