"""A lower bound on a schedule's simulated time that sees its pipeline's fill and drain, without simulating it.

:func:`~ccsynth.synth.simulate.static_bound` charges the busiest resource's
bytes and the busiest engine's per-message overheads as if they could start
at time 0 and the schedule could end the instant they are done. A pipeline
cannot: its last bytes through the bottleneck still have to travel the rest
of the pipeline (a hierarchical allgather's last rail chunk crosses every
hop of its node ring after the rail is done), and its first bytes reach the
bottleneck only after the stages before it. :func:`pipeline_bound` adds
those, from the schedule's own dependencies, in the simulator's model
(:mod:`ccsynth.synth.simulate`; the numbers below are its lower bounds, so
the result is never above the simulated time --
``tests/test_pipeline_bound.py`` checks that on random schedules and every
baseline):

* every op gets its *least duration*: a send its connection's overhead, its
  latency (with the rendezvous share where the topology has one) and its
  bytes at the slowest of its resources' full bandwidth; a receive the
  same transfer and its own overhead (and fused reduction); local work its
  cost at ``local_bw``;
* a forward pass gives every transfer its *head* (the earliest its data can
  start: both ends ready, the send's overhead paid, the latency elapsed);
  a backward pass its *tail* (the least time from its data's end to the
  end of the schedule: the receive's overhead and whatever depends on it);
  the longest path is the *critical path* (``path_us``);
* every *server* that does one thing at a time or has a fixed capacity --
  a stream (connection and channel: data phases one after another), a
  resource (its bytes at its bandwidth), an engine (its overheads one after
  another) -- is charged, for a set ``S`` of its work, ``min head(S) +
  work(S) + min tail(S)``: all of ``S`` runs between its earliest start and
  its last end, and the schedule runs on for at least the smallest tail
  after that. ``S`` ranges over the work released from a threshold on
  (each head a threshold) and the work with a tail of at least a threshold
  (each tail one); the largest is ``load_us`` (one-machine scheduling's
  head-body-tail bound, Carlier's preemptive bound restricted to those
  sets).

* the simulator's *work of time 0* (:class:`_FirstWork`) is known exactly: every engine serves the work
  ready at the start first, so nothing else it serves starts before that work is done, and a stream's
  transfers posted at time 0 move their data before any of its transfers whose latency ends later (first
  come, first served) -- what delays a hierarchical reduce-scatter's rail rings behind the first step of its
  node rings, which the sets above do not see.

What is left out makes the bound smaller, never wrong: the time transfers
wait for each other beyond those sets, bandwidth shared below a resource's
capacity, the forward curve's extra bytes (a factor of at least 1), and
asynchronous progress (``async_progress=False`` only delays data).

The passes run over the ops in id order when that is a topological order
of the transfers (every schedule the builder makes), otherwise over a
depth-first order (:func:`ccsynth.graphs.topological_order`); a schedule
whose transfers wait for each other in a cycle deadlocks in the simulator
and raises :class:`~ccsynth.errors.ScheduleError` here too.

Example:
    >>> from ccsynth.collectives.spec import Collective
    >>> from ccsynth.synth.baselines import make_baseline
    >>> from ccsynth.synth.simulate import simulate
    >>> from ccsynth.topologies.catalog import ring
    >>> t = ring(4)
    >>> s = make_baseline("ring", Collective("allgather", 4, 2), t)
    >>> b = pipeline_bound(s, t, 1 << 20)
    >>> b.time_us <= simulate(s, t, 1 << 20).time_us * (1 + 1e-12)  # here equal, to rounding
    True
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from ccsynth.collectives.gc_pause import gc_paused
from ccsynth.collectives.schedule import Schedule
from ccsynth.errors import ScheduleError
from ccsynth.graphs import topological_order
from ccsynth.topologies.model import BYTES_PER_US_PER_GBPS, Topology

__all__ = ["PipelineBound", "pipeline_bound"]

log = logging.getLogger(__name__)

_SEND, _RECV, _LOCAL = 0, 1, 2


@dataclass(frozen=True)
class PipelineBound:
    """A lower bound on a schedule's simulated time (see the module docstring).

    ``path_us``: the critical path; ``load_us``: the busiest server with the
    head before its work and the tail after it (``which`` names the server);
    ``call_us``: the per-call cost. Two parts of ``load_us`` are kept for
    searches over chunk factors: ``volume_us``, the busiest resource's bytes
    at its bandwidth (the same at every chunk factor of a baseline), and
    ``engine_us``, the busiest engine's per-message overheads (which grow
    with the chunk factor); each plus ``call_us`` is a bound of its own.
    """

    path_us: float
    load_us: float
    volume_us: float
    engine_us: float
    call_us: float
    which: str

    @property
    def time_us(self) -> float:
        return max(self.path_us, self.load_us) + self.call_us


class _Tables:
    """The schedule's ops as flat lists, with the transfer classes' costs at one size."""

    def __init__(self, schedule: Schedule, topology: Topology, size: float):
        if topology.n_ranks != schedule.n_ranks:
            raise ScheduleError(f"schedule {schedule.name!r} is for {schedule.n_ranks} ranks but topology "
                                f"{topology.name!r} has {topology.n_ranks}")
        ops = schedule.ops
        n = len(ops)
        matches = schedule.matches
        coll = schedule.collective
        chunk = coll.chunk_bytes(size)
        mcurve, lcurve = topology.message_curve, topology.local_curve
        data_unit = chunk * (mcurve.factor(size) if mcurve is not None else 1.0)
        local_bw = topology.local_bw
        local_unit = chunk * (lcurve.factor(size) if lcurve is not None else 1.0) / \
            (local_bw * BYTES_PER_US_PER_GBPS) if local_bw else 0.0
        local_call = topology.local_overhead if chunk > 0 else 0.0
        eager = topology.eager_limit if topology.rendezvous_alpha else None
        rbw = topology.resource_bw
        uniform = coll.uniform
        self.kind = kind = [_LOCAL] * n
        self.partner = partner = [-1] * n
        self.cost = cost = [0.0] * n  # local: its work; send: its overhead; recv: overhead + fused reduction
        self.over = over_of = [0.0] * n  # send, recv: the message's overhead alone
        self.lat = lat = [0.0] * n  # send: latency before its data
        self.data = data = [0.0] * n  # send: its bytes at its slowest resource's bandwidth
        self.nbytes = nbytes = [0.0] * n  # send: bytes through each of its resources
        self.cls = cls = [-1] * n
        self.deps: list[tuple[int, ...]] = [op.deps for op in ops]
        self.engine = engine = [-1] * n  # -1: work that does not queue
        self.class_res: list[tuple[int, ...]] = []
        self.res_cap: list[float] = []
        self.res_names: list[str] = []
        class_of: dict[tuple[int, int, int], int] = {}
        class_cost: list[tuple[float, float, float]] = []  # alpha, overhead, slowest bandwidth (bytes/us)
        res_index: dict[str, int] = {}
        engine_of: dict[tuple, int] = {}
        rank_scope = topology.overhead_scope == "rank"
        for op in ops:
            i = op.id
            units = op.count if uniform else schedule.op_units(op)
            k = op.kind
            if k == "send":
                key = (op.rank, op.peer, op.channel)
                c = class_of.get(key)
                if c is None:
                    conn = topology.connection(op.rank, op.peer)
                    if conn is None:
                        raise ScheduleError(f"{op.describe()} needs a connection {op.rank}->{op.peer}, which "
                                            f"topology {topology.name!r} lacks")
                    idx = []
                    for name in conn.resources:
                        j = res_index.get(name)
                        if j is None:
                            j = res_index[name] = len(self.res_cap)
                            self.res_cap.append(rbw[name] * BYTES_PER_US_PER_GBPS)
                            self.res_names.append(name)
                        idx.append(j)
                    c = class_of[key] = len(self.class_res)
                    self.class_res.append(tuple(idx))
                    class_cost.append((conn.alpha, conn.overhead, min(self.res_cap[j] for j in idx)))
                alpha, over, cap = class_cost[c]
                kind[i], cls[i] = _SEND, c
                r = matches[i]
                partner[i], partner[r] = r, i
                b = units * data_unit
                nbytes[i] = b
                data[i] = b / cap if b > 0 else 0.0
                lat[i] = alpha + topology.rendezvous_alpha if eager is not None and units * chunk > eager else alpha
                cost[i] = over_of[i] = over_of[r] = over
                cost[r] = over + (local_call + units * local_unit if ops[r].reduce and units else 0.0)
                engine[i] = _engine(engine_of, (op.rank,) if rank_scope else (op.rank, "send", op.peer, op.channel))
                engine[r] = _engine(engine_of, (op.peer,) if rank_scope else (op.peer, "recv", op.rank, op.channel))
            elif k == "recv":
                kind[i] = _RECV
            else:
                cost[i] = local_call + units * local_unit if units else 0.0
                if rank_scope:
                    engine[i] = _engine(engine_of, (op.rank,))
        self.n_engines = len(engine_of)
        self.order = self._order()

    def _order(self) -> list[int] | range:
        """Every send after what its receive waits for, every receive after its send (see the module docstring)."""
        deps, kind, partner = self.deps, self.kind, self.partner
        n = len(deps)
        in_id_order = True
        for i in range(n):
            ds = deps[i]
            if ds and max(ds) >= i:
                in_id_order = False
                break
            if kind[i] == _SEND:
                r = partner[i]
                rd = deps[r]
                if r < i or (rd and max(rd) >= i):
                    in_id_order = False
                    break
        if in_id_order:
            return range(n)
        preds: list[tuple[int, ...]] = []
        for i in range(n):
            if kind[i] == _SEND:
                preds.append(deps[i] + deps[partner[i]])
            elif kind[i] == _RECV:
                preds.append(deps[i] + (partner[i],))
            else:
                preds.append(deps[i])
        order = topological_order(preds, depth_first=True)
        if order is None:
            raise ScheduleError("the schedule deadlocks: its transfers wait for each other in a cycle")
        return order


class _FirstWork:
    """What the simulator does at time 0, exactly, and what it says about everything after.

    The ops *ready at the start* are those whose dependencies all complete at time 0 (none, or local work that
    costs nothing and is itself ready at the start): the simulator's first pass over the ready ops. Every engine
    queues that work first (its first come, first served order), so it is busy until ``busy[e]``, the sum of
    its work of time 0, and whatever else it serves starts no earlier -- an op ready at the start is on the
    engine in that first pass, every other op joins later (work that costs nothing does not queue at all). A stream's transfers whose send and receive are both
    ready at the start have their latency ended by ``busy`` of the send's engine plus the latency; every other
    transfer of the stream whose data could not start before the last of those (its head above
    ``late_from[c]``) is served after all of them, so its data starts no earlier than ``streams[c]``: their
    least head plus all of their data phases one after another. Without asynchronous progress a data phase
    may wait for the engines and join its stream out of that order, so ``streams`` is None there.
    """

    def __init__(self, tb: _Tables, topology: Topology):
        kind, cost, deps, engine, partner = tb.kind, tb.cost, tb.deps, tb.engine, tb.partner
        n = len(kind)
        self.at_start = at_start = bytearray(n)
        zero = bytearray(n)  # completes at time 0: local work that costs nothing, ready at the start
        for x in tb.order:
            for d in deps[x]:
                if not zero[d]:
                    break
            else:
                at_start[x] = 1
                if kind[x] == _LOCAL and cost[x] == 0.0:
                    zero[x] = 1
        self.busy = busy = [0.0] * max(tb.n_engines, 1)
        for x in range(n):
            if at_start[x] and kind[x] != _RECV:
                e = engine[x]
                if e >= 0 and cost[x] > 0:
                    busy[e] += cost[x]
        n_cls = len(tb.class_res)
        self.late_from = late = [float("inf")] * n_cls
        self.streams: list[float] | None = None
        if not (topology.async_progress or topology.overhead_scope != "rank"):
            return
        first = [float("inf")] * n_cls
        last = [-1.0] * n_cls
        body = [0.0] * n_cls
        cls, lat, data = tb.cls, tb.lat, tb.data
        for x in range(n):
            if kind[x] == _SEND and at_start[x] and at_start[partner[x]]:
                c = cls[x]
                e = engine[x]
                ends = (busy[e] if e >= 0 else 0.0) + lat[x]  # its latency ends by then, exactly
                if ends > last[c]:
                    last[c] = ends
                h = cost[x] + lat[x]
                if h < first[c]:
                    first[c] = h
                body[c] += data[x]
        streams = [0.0] * n_cls
        for c in range(n_cls):
            if last[c] >= 0.0:
                late[c] = last[c] + _SEPARATE * max(1.0, last[c])
                streams[c] = first[c] + body[c]
        self.streams = streams


#: how far apart (relative) two event times must be for the simulator to take them in time order for certain
#: (it takes events within :data:`~ccsynth.tolerance.EVENT_REL` of each other together, in op id order)
_SEPARATE = 1e-9


def _engine(index: dict[tuple, int], key: tuple) -> int:
    e = index.get(key)
    if e is None:
        e = index[key] = len(index)
    return e


def pipeline_bound(schedule: Schedule, topology: Topology, size_bytes: float) -> PipelineBound:
    """:class:`PipelineBound` of ``schedule`` on ``topology`` at ``size_bytes`` (never above :func:`simulate`'s time).

    Raises :class:`~ccsynth.errors.ScheduleError` where the simulator would (rank counts, a missing connection,
    unmatched messages, a dependency cycle).
    """
    if not schedule.ops:
        return PipelineBound(0.0, 0.0, 0.0, 0.0, 0.0, "no ops")
    with gc_paused():  # tables of millions of entries (see ccsynth.collectives.gc_pause)
        return _bound(schedule, topology, float(size_bytes))


def _bound(schedule: Schedule, topology: Topology, size: float) -> PipelineBound:
    tb = _Tables(schedule, topology, size)
    kind, partner, cost, lat, data, deps = tb.kind, tb.partner, tb.cost, tb.lat, tb.data, tb.deps
    n = len(kind)
    order = tb.order
    first = _FirstWork(tb, topology)
    at_start, busy0, late, streams = first.at_start, first.busy, first.late_from, first.streams
    engine = tb.engine
    # forward: earliest completion of every op, earliest data start (head) of every transfer
    done = [0.0] * n
    ready = [0.0] * n
    head = [0.0] * n
    for x in order:
        t = 0.0
        for d in deps[x]:
            if done[d] > t:
                t = done[d]
        ready[x] = t
        k = kind[x]
        if k == _LOCAL:
            e = engine[x]
            if e >= 0 and not at_start[x] and cost[x] > 0 and busy0[e] > t:
                t = busy0[e]  # after the engine's work of time 0 (work that costs nothing does not queue)
            done[x] = t + cost[x]
        elif k == _SEND:
            r = partner[x]
            rr = 0.0
            for d in deps[r]:
                if done[d] > rr:
                    rr = done[d]
            if not at_start[x] and cost[x] > 0:
                w = busy0[engine[x]]
                if w > t:
                    t = w  # after the engine's work of time 0
            posted = t + cost[x]
            h = (posted if posted > rr else rr) + lat[x]
            if streams is not None:
                c = tb.cls[x]
                if h > late[c]:
                    w = streams[c]
                    if w > h:
                        h = w  # after the stream's transfers posted at time 0
            head[x] = h
            done[x] = h + data[x]
            e = engine[r]
            w = busy0[e] if e >= 0 and cost[r] > 0 else 0.0
            done[r] = (done[x] if done[x] > w else w) + cost[r]
    path = max(done)
    # backward: the least time from every op's completion to the end; from every transfer's data end (tail)
    after = [0.0] * n
    tail = [0.0] * n
    for x in reversed(order):
        k = kind[x]
        if k == _RECV:
            continue  # with its send
        if k == _LOCAL:
            need = cost[x] + after[x]
        else:
            r = partner[x]
            q = after[r] + cost[r]
            if after[x] > q:
                q = after[x]
            tail[x] = q
            need = cost[x] + lat[x] + data[x] + q  # from the send ready
            from_recv = lat[x] + data[x] + q  # from the receive ready
            for d in deps[r]:
                if after[d] < from_recv:
                    after[d] = from_recv
        for d in deps[x]:
            if after[d] < need:
                after[d] = need
    load, which, volume_us, engine_us = _servers(tb, ready, head, tail, after)
    call = topology.call_overhead
    bound = PipelineBound(path, load, volume_us, engine_us, call, which)
    log.debug("pipeline bound of %r on %s at %g bytes: %.3f us (path %.3f, %s %.3f)", schedule.name,
              topology.name, size, bound.time_us, path, which, load)
    return bound


def _servers(tb: _Tables, ready: list[float], head: list[float], tail: list[float],
             after: list[float]) -> tuple[float, str, float, float]:
    """The largest head + work + tail over every stream, resource and engine (and which server); the busiest
    resource's bytes and the busiest engine's message overheads alone."""
    kind = np.asarray(tb.kind, dtype=np.int8)
    sends = np.flatnonzero(kind == _SEND)
    cls = np.asarray(tb.cls, dtype=np.int64)[sends]
    h = np.asarray(head)[sends]
    q = np.asarray(tail)[sends]
    d = np.asarray(tb.data)[sends]
    nb = np.asarray(tb.nbytes)[sends]
    best, which = 0.0, "none"
    # streams: one data phase at a time
    v, g = _head_body_tail(cls, h, d, q)
    if v > best:
        best, which = v, f"stream {g}"
    # resources: their bytes at their bandwidth
    lens = np.asarray([len(rs) for rs in tb.class_res], dtype=np.int64)
    rep = lens[cls]
    volume_us = 0.0
    if len(rep):
        res = _expand(tb.class_res, cls, lens)
        cap = np.asarray(tb.res_cap)[res]
        body = np.repeat(nb, rep) / cap
        volume_us = float(np.bincount(res, weights=body).max())
        v, g = _head_body_tail(res, np.repeat(h, rep), body, np.repeat(q, rep))
        if v > best:
            best, which = v, f"resource {tb.res_names[g]}"
    # engines: sends' overheads (released when the send is ready), receives' (when the data is in), local work
    eng = np.asarray(tb.engine, dtype=np.int64)
    cost = np.asarray(tb.cost)
    part = np.asarray(tb.partner, dtype=np.int64)
    work = np.flatnonzero((eng >= 0) & (cost > 0))
    engine_us = 0.0
    if len(work):
        rel = np.empty(len(work))
        aft = np.empty(len(work))
        k = kind[work]
        rdy, hd, tl, af, lt, dt = (np.asarray(a) for a in (ready, head, tail, after, tb.lat, tb.data))
        s_mask, r_mask, l_mask = k == _SEND, k == _RECV, k == _LOCAL
        ws, wr, wl = work[s_mask], work[r_mask], work[l_mask]
        rel[s_mask], aft[s_mask] = rdy[ws], lt[ws] + dt[ws] + tl[ws]
        snd = part[wr]
        rel[r_mask], aft[r_mask] = hd[snd] + dt[snd], af[wr]
        rel[l_mask], aft[l_mask] = rdy[wl], af[wl]
        e = eng[work]
        v, g = _head_body_tail(e, rel, cost[work], aft)
        if v > best:
            best, which = v, f"engine {g}"
        over = np.where(k == _LOCAL, 0.0, np.asarray(tb.over)[work])
        engine_us = float(np.bincount(e, weights=over).max())
    return best, which, volume_us, engine_us


def _expand(class_res: list[tuple[int, ...]], cls: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """The resources of every send, one after another (each send's class's resources)."""
    width = int(lens.max())
    table = np.full((len(class_res), width), -1, dtype=np.int64)
    for c, rs in enumerate(class_res):
        table[c, : len(rs)] = rs
    flat = table[cls].ravel()
    return flat[flat >= 0]


def _head_body_tail(group: np.ndarray, head: np.ndarray, body: np.ndarray, tail: np.ndarray) -> tuple[float, int]:
    """max over groups and over the sets {head >= h} and {tail >= t} of min head + sum body + min tail.

    Returns the value and the group that attains it.
    """
    if not len(group):
        return 0.0, -1
    best, arg = -np.inf, -1
    for first, second in ((head, tail), (tail, head)):
        # within each group, by ``first`` descending: the suffix {first >= x} grows one item at a time
        order = np.lexsort((-first, group))
        g, f, s, b = group[order], first[order], second[order], body[order]
        starts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
        csum = np.cumsum(b)
        base = np.repeat(np.r_[0.0, csum[starts[1:] - 1]], np.diff(np.r_[starts, len(g)]))
        body_sum = csum - base
        # running minimum of ``second`` within each group
        run = _segment_cummin(s, starts)
        val = f + body_sum + run
        i = int(np.argmax(val))
        if val[i] > best:
            best, arg = float(val[i]), int(g[i])
    return best, arg


def _segment_cummin(x: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Running minimum of ``x`` restarting at every index of ``starts``."""
    out = np.empty_like(x)
    bounds = np.r_[starts, len(x)]
    for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        out[a:b] = np.minimum.accumulate(x[a:b])
    return out
