"""Size-independent tables of a schedule on a topology: what every run at any size reads.

:class:`Prepared` turns a :class:`~ccsynth.collectives.schedule.Schedule`
(sizes in chunks) or a :class:`~ccsynth.synth.simulator.tasks.TaskGraph`
(sizes in bytes) into flat per-op lists the event loop indexes by op id
(kind, units, partner, dependencies, per-message overhead, engine) and
groups its sends into *classes*, one per (connection, channel) used: a class
is one stream (:mod:`~ccsynth.synth.simulator.streams`) and the unit the
bandwidth is shared between, over the resources its connection crosses.
Built once per schedule and topology, reused across message sizes
(:func:`ccsynth.synth.simulate.simulate_sizes`).
"""

from __future__ import annotations

from ccsynth.collectives.schedule import Op, Schedule
from ccsynth.errors import ScheduleError
from ccsynth.graphs import topological_order
from ccsynth.synth.simulator.rounds import receive_rounds
from ccsynth.synth.simulator.tasks import TaskGraph
from ccsynth.topologies.model import BYTES_PER_US_PER_GBPS, Topology

__all__ = ["SEND", "RECV", "LOCAL", "Prepared", "forwarded_sends", "engines"]

# op kinds, as small ints for the hot loop
SEND, RECV, LOCAL = 0, 1, 2


class Prepared:
    """Size-independent tables of a schedule on a topology (reused across sizes; see the module docstring)."""

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
        self.topology = topology
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
        self.forwards = forwarded_sends(ops) if topology.forward_curve is not None else None
        self.async_progress = topology.async_progress or topology.overhead_scope != "rank"
        self.receiver_copies = topology.receiver_copies and not self.async_progress
        # the engine of each op (see ccsynth.synth.simulate); its rank, for the busy-time report
        self.engine, self.engine_rank = engines(ops, topology.overhead_scope)
        self.class_alpha: list[float] = []
        self.class_overhead: list[float] = []
        self.class_res: list[tuple[int, ...]] = []
        # the protocol switch (see ccsynth.synth.simulate): messages of more than eager_limit bytes
        self.eager_limit = topology.eager_limit if topology.rendezvous_alpha else None
        self.rendezvous_alpha = topology.rendezvous_alpha
        self.local_overhead = topology.local_overhead
        self.res_names: list[str] = []
        self.res_cap: list[float] = []  # bytes per us
        self._class_of: dict[tuple[int, int, int], int] = {}
        self._res_index: dict[str, int] = {}
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
                self.kind[i] = SEND
                self.partner[i] = matches[i]
                c = self._stream_class(op)
                self.cls[i] = c
                self.overhead[i] = self.overhead[matches[i]] = self.class_overhead[c]
            elif op.kind == "recv":
                self.kind[i] = RECV
                self.partner[i] = matches[i]
            else:
                self.kind[i] = LOCAL

    def _stream_class(self, op) -> int:
        """The class (stream) of send ``op``: its (rank, peer, channel), registered with its resources on first use."""
        key = (op.rank, op.peer, op.channel)
        c = self._class_of.get(key)
        if c is not None:
            return c
        topology = self.topology
        conn = topology.connection(op.rank, op.peer)
        if conn is None:
            raise ScheduleError(
                f"{op.describe()} needs a connection {op.rank}->{op.peer}, which topology {topology.name!r} lacks"
            )
        rbw = topology.resource_bw
        idx = []
        for name in conn.resources:
            j = self._res_index.get(name)
            if j is None:
                j = self._res_index[name] = len(self.res_names)
                self.res_names.append(name)
                self.res_cap.append(rbw[name] * BYTES_PER_US_PER_GBPS)
            idx.append(j)
        c = self._class_of[key] = len(self.class_res)
        self.class_res.append(tuple(idx))
        self.class_alpha.append(conn.alpha)
        self.class_overhead.append(conn.overhead)
        return c


def forwarded_sends(ops) -> bytearray:
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


def engines(ops, scope: str) -> tuple[list[int], list[int]]:
    """Engine index of every op, and the rank of every engine (``overhead_scope``; see ccsynth.synth.simulate)."""
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
