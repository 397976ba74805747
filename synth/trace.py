"""What a simulation records when asked: every transfer and every engine's work over time.

:func:`ccsynth.synth.simulate.simulate` with ``trace=True`` runs its one
event loop with a :class:`Recorder` attached (the default run carries none
and pays only a ``None`` check per event) and returns the :class:`Trace` in
``SimResult.trace``. Times are in microseconds from the start.

A transfer (:class:`TransferSpan`) goes through the phases of the model
(see :mod:`ccsynth.synth.simulate`):

* ``posted`` -- both its send and its receive are ready (the sender's
  overhead paid): its latency phase starts;
* ``data_ready`` -- ``posted + alpha``: it joins its stream (connection and
  channel), where it may wait behind earlier transfers;
* ``data_start`` / ``data_end`` -- its bytes flow (at the rate max-min
  fairness gives it, which may change on the way);
* ``done`` -- the receive completes (its overhead, and a fused reduction,
  paid on the receiver's engine).

Engine work (:class:`EngineSpan`) is what the per-message overheads and
local ops cost on the engine that serves them: the sender's overhead
before a message is posted, the receiver's overhead (and fused reduction)
after its bytes arrive, copies and reductions. With ``overhead_scope``
"rank" a rank has one engine; with "connection" each (rank, peer, channel,
direction) has its own, and local work does not queue.

Example:
    >>> from ccsynth.collectives.builder import ScheduleBuilder
    >>> from ccsynth.collectives.spec import Collective
    >>> from ccsynth.synth.simulate import simulate
    >>> from ccsynth.topologies.model import Link, Topology
    >>> t = Topology("pair", 2, links=(Link(0, 1, 1.0, 10.0, 0.5),))
    >>> b = ScheduleBuilder(Collective("broadcast", 2), "b")
    >>> _ = b.copy(0, ("i", 0), ("o", 0)); _ = b.transfer(0, 1, ("i", 0), ("o", 0))
    >>> x = simulate(b.build(), t, 10_000, trace=True).trace.transfers[0]
    >>> x.posted, x.data_ready, x.data_start, x.data_end, x.done
    (0.5, 1.5, 1.5, 2.5, 3.0)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ccsynth.collectives.schedule import Chunks, Schedule

__all__ = ["TransferSpan", "EngineSpan", "Trace", "Recorder"]


@dataclass(frozen=True)
class TransferSpan:
    """One transfer (a matched send and receive) and when each of its phases began."""

    send: int  # op id of the send
    recv: int  # op id of the receive
    src: int  # sending rank
    dst: int  # receiving rank
    channel: int
    chunks: Chunks  # what the receive writes (buffer, first chunk, count)
    nbytes: float
    posted: float
    data_ready: float
    data_start: float
    data_end: float
    done: float

    @property
    def connection(self) -> str:
        """``"src->dst"``, with ``" ch<k>"`` on a channel other than 0."""
        return f"{self.src}->{self.dst}" + (f" ch{self.channel}" if self.channel else "")

    def to_dict(self) -> dict:
        return {
            "send": self.send, "recv": self.recv, "src": self.src, "dst": self.dst, "channel": self.channel,
            "chunks": {"buf": self.chunks.buf, "index": self.chunks.index, "count": self.chunks.count},
            "nbytes": self.nbytes, "posted_us": self.posted, "data_ready_us": self.data_ready,
            "data_start_us": self.data_start, "data_end_us": self.data_end, "done_us": self.done,
        }


@dataclass(frozen=True)
class EngineSpan:
    """Work one engine did for one op: a message's overhead, or a local copy or reduction."""

    rank: int
    engine: str  # "rank 3", or for per-connection engines "3->5 ch0 send" / "5->3 ch0 recv"
    op: int
    kind: str  # "send overhead", "recv overhead", "recv overhead + reduce", "copy", "reduce"
    start: float
    end: float

    def to_dict(self) -> dict:
        return {"rank": self.rank, "engine": self.engine, "op": self.op, "kind": self.kind,
                "start_us": self.start, "end_us": self.end}


@dataclass(frozen=True)
class Trace:
    """Everything one simulation did: transfers (by send op id), engine work, and when each op completed."""

    transfers: tuple[TransferSpan, ...]
    work: tuple[EngineSpan, ...]
    op_done: tuple[float, ...]  # completion time of every op, by op id

    def to_dict(self) -> dict:
        return {
            "transfers": [x.to_dict() for x in self.transfers],
            "work": [w.to_dict() for w in self.work],
            "op_done_us": list(self.op_done),
        }


class Recorder:
    """Times the simulator's event loop writes while it runs (one slot per op).

    The loop fills ``posted``, ``data_ready``, ``data_start`` and
    ``data_end`` (at the send's id), ``done`` (every op) and ``work``
    (``(op id, start, end)`` per item an engine served);
    :meth:`trace` turns them into records.
    """

    __slots__ = ("data_end", "data_ready", "data_start", "done", "posted", "work")

    def __init__(self, n_ops: int):
        nan = math.nan
        self.posted = [nan] * n_ops
        self.data_ready = [nan] * n_ops
        self.data_start = [nan] * n_ops
        self.data_end = [nan] * n_ops
        self.done = [nan] * n_ops
        self.work: list[tuple[int, float, float]] = []

    def trace(self, schedule: Schedule, chunk_bytes: float, overhead_scope: str) -> Trace:
        """The records of a finished run of ``schedule`` (chunks of ``chunk_bytes``)."""
        ops = schedule.ops
        matches = schedule.matches
        transfers = tuple(
            TransferSpan(
                send=op.id, recv=matches[op.id], src=op.rank, dst=op.peer, channel=op.channel,
                chunks=ops[matches[op.id]].dst_chunks, nbytes=schedule.op_units(op) * chunk_bytes,
                posted=self.posted[op.id], data_ready=self.data_ready[op.id], data_start=self.data_start[op.id],
                data_end=self.data_end[op.id], done=self.done[matches[op.id]],
            )
            for op in ops
            if op.kind == "send"
        )
        work = tuple(
            EngineSpan(ops[i].rank, _engine_name(ops[i], matches, ops, overhead_scope), i, _work_kind(ops[i]), start, end)
            for i, start, end in self.work
        )
        return Trace(transfers, work, tuple(self.done))


def _engine_name(op, matches, ops, scope: str) -> str:
    if scope == "rank":
        return f"rank {op.rank}"
    if op.kind == "send":
        return f"{op.rank}->{op.peer} ch{op.channel} send"
    if op.kind == "recv":
        return f"{op.peer}->{op.rank} ch{ops[matches[op.id]].channel} recv"
    return f"rank {op.rank} local"


def _work_kind(op) -> str:
    if op.kind == "send":
        return "send overhead"
    if op.kind == "recv":
        return "recv overhead + reduce" if op.reduce else "recv overhead"
    return op.kind
