"""The event loop: one run of a prepared schedule at one unit size, as named steps.

Each instant of the run (the earliest of the next stream completion and the
next timed event; events within :data:`~ccsynth.tolerance.EVENT_REL` are
simultaneous) goes through the same steps:

1. **complete streams** -- every stream whose transfer's bytes have all
   moved completes it (:meth:`EventLoop.complete_stream`): the send is
   done, the receive has its bytes, and the stream hands over to the next
   transfer of its queue at the same rate or goes idle;
2. **handle timed events** -- a transfer's latency ends (its bytes join its
   stream: :meth:`EventLoop.start_data`), a sender's overhead ends (the
   send is posted: :meth:`EventLoop.posted`), a round's delay ends, an
   engine's work ends (the op is done). Several at one instant run in op id
   order, events they raise joining in; after each, the ops that became
   ready are released (:meth:`EventLoop.release_ready`);
3. **serve engines** -- work that arrived during the instant is queued on
   its engine (:mod:`~ccsynth.synth.simulator.engines`);
4. **share bandwidth** -- if a stream started or stopped, the rates of its
   component are recomputed, max-min fair
   (:meth:`~ccsynth.synth.simulator.streams.Streams.reshare`).

The run ends when nothing is left to happen; ops still not done then mean a
deadlock (:func:`deadlock_message` names the op that waits). The model each
step implements is :mod:`ccsynth.synth.simulate`'s docstring.
"""

from __future__ import annotations

import heapq
import math

from ccsynth.errors import ScheduleError
from ccsynth.synth.simulator.engines import Engines
from ccsynth.synth.simulator.rounds import round_due
from ccsynth.synth.simulator.streams import Streams
from ccsynth.synth.simulator.tables import LOCAL, SEND, Prepared
from ccsynth.synth.trace import Recorder
from ccsynth.tolerance import EVENT_REL
from ccsynth.topologies.model import BYTES_PER_US_PER_GBPS

__all__ = ["EventLoop", "run", "deadlock_message"]

# timed events other than the end of a transfer's data phase
EV_DONE, EV_DATA, EV_POSTED, EV_SYNCED = 0, 1, 2, 3


class EventLoop:
    """One run of ``p`` (see the module docstring).

    ``chunk_bytes``: the bytes of one unit (a chunk; 1.0 for a task graph);
    ``local_bw``: GB/s of local copies and reductions (None: free);
    ``message_factor``, ``local_factor`` and ``forward_factor``: the call's
    size-dependent costs (:class:`~ccsynth.synth.simulator.costs.ByteFactors`);
    ``rec`` (optional) is told when every phase of every transfer, every
    engine's work and every op ends (:mod:`ccsynth.synth.trace`).
    """

    def __init__(self, p: Prepared, chunk_bytes: float, local_bw: float | None, rec: Recorder | None = None,
                 message_factor: float = 1.0, local_factor: float = 1.0, forward_factor: float = 1.0):
        self.p = p
        self.rec = rec
        self.chunk_bytes = chunk_bytes
        # the call's size-dependent factors (1.0: the constants) scale what a unit costs, not what it is
        self.local_cost = chunk_bytes * local_factor / (local_bw * BYTES_PER_US_PER_GBPS) if local_bw else 0.0
        self.data_unit = chunk_bytes * message_factor  # bytes a unit's data phase moves through its resources
        self.hold = not p.async_progress  # a data phase waits for both engines (see ccsynth.synth.simulate)
        self.copies = p.receiver_copies  # ... and keeps the receiver's engine busy
        self.slowest = [min((p.res_cap[r] for r in rs), default=math.inf) for rs in p.class_res] \
            if self.copies else []
        # units each op's data phase moves: forwarded sends move forward_factor times theirs
        fwd = p.forwards
        self.dcount = p.count if fwd is None or forward_factor == 1.0 else \
            [c * forward_factor if f else c for c, f in zip(p.count, fwd)]
        self.local_call = p.local_overhead if chunk_bytes > 0 else 0.0  # fixed cost of a kernel call moving bytes
        # rounds: receives still to arrive per round; the last one pays the round's cost
        self.round_left = list(p.rounds.size) if p.rounds is not None else None
        self.ndeps = list(p.ndeps)
        self.ready = bytearray(p.n_ops)
        self.done = bytearray(p.n_ops)
        self.heap: list[tuple[float, int, int]] = []  # timed events: (time, op id, EV_*)
        self.engines = Engines(len(p.engine_rank), p.engine)
        self.streams = Streams(p.class_res, p.res_cap)
        self.now = 0.0
        self.makespan = 0.0
        self.n_done = 0
        self.stack = [i for i in range(p.n_ops) if self.ndeps[i] == 0]
        self.stack.reverse()  # pop in id order

    # ---------------------------------------------------------------- the run
    def run(self) -> tuple[float, dict[str, float]]:
        """Run to the end; returns (makespan in us, busy time per resource name and per rank's engines)."""
        self.release_ready()
        self.end_instant()
        while True:
            tc = self.streams.next_completion()
            th = self.heap[0][0] if self.heap else math.inf
            t0 = tc if tc < th else th
            if not math.isfinite(t0):
                break
            self.now = t0
            horizon = t0 + EVENT_REL * max(1.0, abs(t0))  # events this close are simultaneous
            if tc <= horizon:
                self.complete_streams(horizon)
            self.handle_timed_events(horizon)
            self.end_instant()
        p = self.p
        if self.n_done < p.n_ops:
            raise ScheduleError(deadlock_message(p, self.done, self.ready))
        return self.makespan, self.engines.busy_us(p.engine_rank, self.streams.busy_us(p.res_names))

    def end_instant(self) -> None:
        """Serve the engine work that arrived at this instant, then share bandwidth anew if a stream started or
        stopped."""
        if self.engines.arrivals:
            self.engines.serve(self.now, self.heap, self.rec)
        if self.streams.dirty:
            self.streams.reshare(self.now)

    def complete_streams(self, horizon: float) -> None:
        """Step 1: the streams whose transfer completes by ``horizon``."""
        for c in self.streams.due(horizon):
            self.complete_stream(c)
        self.release_ready()

    def handle_timed_events(self, horizon: float) -> None:
        """Step 2: the timed events due by ``horizon``; several at one instant in op id order."""
        heap, pop, push = self.heap, heapq.heappop, heapq.heappush
        while heap and heap[0][0] <= horizon:
            _, i, event = pop(heap)
            if not heap or heap[0][0] > horizon:
                self.handle(i, event)
                continue
            # several events at this instant: in op id order, not by times that differ by rounding alone
            # (an event one ulp later would otherwise overtake a lower id), events they raise joining in
            instant = [(i, event)]
            while instant:
                while heap and heap[0][0] <= horizon:
                    _, j, ev = pop(heap)
                    push(instant, (j, ev))
                i, event = pop(instant)
                self.handle(i, event)

    def handle(self, i: int, event: int) -> None:
        """A timed event of op ``i``, then whatever became ready."""
        if event == EV_DATA:
            self.start_data(i)
        elif event == EV_POSTED:
            self.posted(i)
        elif event == EV_SYNCED:
            self.arrived(i)
        else:
            self.finish(i)
        self.release_ready()

    # ---------------------------------------------------------------- ops
    def release_ready(self) -> None:
        """Start every op whose dependencies are done: local work and send overheads go to their engine; a
        send without overhead, or a receive, is posted."""
        p, stack, engines = self.p, self.stack, self.engines
        kind, count, overhead = p.kind, p.count, p.overhead
        while stack:
            i = stack.pop()
            k = kind[i]
            if k == LOCAL:
                cost = self.local_call + count[i] * self.local_cost if count[i] else 0.0
                if cost > 0:
                    engines.queue(i, cost, EV_DONE)
                else:
                    self.finish(i)
            elif k == SEND and overhead[i] > 0:
                engines.queue(i, overhead[i], EV_POSTED)
            else:
                self.posted(i)

    def finish(self, i: int) -> None:
        """Op ``i`` is done: its dependents with nothing else to wait for become ready."""
        now = self.now
        self.done[i] = 1
        self.n_done += 1
        self.makespan = now
        if self.rec is not None:
            self.rec.done[i] = now
        ndeps, stack = self.ndeps, self.stack
        for d in self.p.dependents[i]:
            ndeps[d] -= 1
            if ndeps[d] == 0:
                stack.append(d)

    # ---------------------------------------------------------------- transfers
    def posted(self, s: int) -> None:
        """Send ``s`` (or its partner receive) just became ready: once both are, the transfer's latency starts
        (through the heap even without latency: transfers whose data phase starts at the same instant join
        their stream in op id order)."""
        p = self.p
        self.ready[s] = 1
        j = p.partner[s]
        if self.ready[j]:
            snd = s if p.kind[s] == SEND else j
            alpha = p.class_alpha[p.cls[snd]]
            if p.eager_limit is not None and p.count[snd] * self.chunk_bytes > p.eager_limit:
                alpha += p.rendezvous_alpha
            heapq.heappush(self.heap, (self.now + alpha, snd, EV_DATA))
            if self.rec is not None:
                self.rec.posted[snd] = self.now

    def start_data(self, s: int) -> None:
        """Send ``s``'s latency has passed: its bytes join its stream (an empty message is done at once)."""
        p, now, rec = self.p, self.now, self.rec
        partner = p.partner[s]
        if self.hold:
            # no asynchronous progress: the bytes move once both ranks' engines are idle
            t_free = self.engines.idle_after(s, partner)
            if t_free > now + EVENT_REL * max(1.0, now):
                heapq.heappush(self.heap, (t_free, s, EV_DATA))
                return
        c = p.cls[s]
        nbytes = p.count[s] * self.chunk_bytes
        if rec is not None:
            rec.data_ready[s] = now
            if nbytes <= 0 or not self.streams.busy[c]:
                rec.data_start[s] = now
            if nbytes <= 0:
                rec.data_end[s] = now
        if nbytes <= 0:
            self.finish(s)
            self.received(partner)
            return
        nbytes = self.dcount[s] * self.data_unit
        if self.copies:
            # the receiver's core copies the bytes: its engine is busy at least this long
            self.engines.occupy(partner, now + nbytes / self.slowest[c], now)
        self.streams.admit(c, s, nbytes, now)

    def complete_stream(self, c: int) -> None:
        """Stream ``c``'s transfer has moved all its bytes: the send is done, the receive has its bytes, and the
        next transfer of the queue takes over at the same rate (else the stream goes idle)."""
        streams, now, rec = self.streams, self.now, self.rec
        s = streams.cur[c]
        if rec is not None:
            rec.data_end[s] = now
        self.finish(s)
        self.received(self.p.partner[s])
        s = streams.next_queued(c)
        if s >= 0:
            if rec is not None:
                rec.data_start[s] = now
            streams.hand_over(c, s, self.dcount[s] * self.data_unit, now)
        else:
            streams.stop(c, now)

    def received(self, r: int) -> None:
        """The bytes of receive ``r`` have arrived; the last of its round waits for the round's cost first."""
        rounds = self.p.rounds
        if rounds is not None and self.round_left is not None:
            due = round_due(rounds, self.round_left, r)
            if due > 0:
                heapq.heappush(self.heap, (self.now + due, r, EV_SYNCED))
                return
        self.arrived(r)

    def arrived(self, r: int) -> None:
        """Receive ``r`` may go on: its overhead (and fused reduction) on the receiver's engine."""
        p = self.p
        cost = p.overhead[r]
        if p.reduces[r] and p.count[r]:
            cost += self.local_call + p.count[r] * self.local_cost
        if cost > 0:
            self.engines.queue(r, cost, EV_DONE)
        else:
            self.finish(r)


def run(p: Prepared, chunk_bytes: float, local_bw: float | None, rec: Recorder | None = None,
        message_factor: float = 1.0, local_factor: float = 1.0,
        forward_factor: float = 1.0) -> tuple[float, dict[str, float]]:
    """Simulate ``p`` once (:class:`EventLoop`); returns (makespan in us, busy time per resource name)."""
    return EventLoop(p, chunk_bytes, local_bw, rec, message_factor, local_factor, forward_factor).run()


def deadlock_message(p: Prepared, done: bytearray, ready: bytearray) -> str:
    """Why a run ended with ops not done: preferably an op that is ready but whose partner never is."""
    ops = p.schedule.ops
    stuck = [i for i in range(p.n_ops) if not done[i]]
    # prefer an op that is ready but waits for its partner: it names the cross-rank cycle
    for i in stuck:
        if p.kind[i] != LOCAL and ready[i] and not ready[p.partner[i]]:
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
    return (f"schedule {p.schedule.name!r} deadlocks: {ops[i].describe()} never completes{on} "
            f"({len(stuck)} ops never complete)")
