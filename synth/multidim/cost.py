"""What one phase costs: a per-dimension algorithm run on one range of bytes.

A *phase* is one step of a chunk's dimension order: reduce-scatter (or
allgather) of a range of ``m`` bytes per rank among the ``p`` ranks of every
group of one dimension, all groups at once. Its time is charged the way the
event-driven simulator (:mod:`ccsynth.synth.simulate`) charges the ops the
phase lowers to (:mod:`ccsynth.synth.multidim.lowering`), message by
message, with ``b = m / p`` bytes per message:

* ``ring``: ``p - 1`` steps. The recurrence below is the simulator's, hop by
  hop: the send of step ``s`` waits for the receive of step ``s - 1`` (the
  block it forwards) and its engine, pays the sender's ``overhead``, then
  ``alpha`` in flight; its bytes follow the previous step's on the same
  connection (one stream per connection); the receive pays the receiver's
  ``overhead`` (plus the fused reduction at ``local_bw``) once the bytes are
  in. A uniform ring takes ``(p - 1)(alpha + 2 overhead + b / bw)``; hops of
  different speeds are charged as the simulator runs them (a fast hop after
  a slow one waits, a slow hop throttles the stream behind it).
* ``direct``: every rank posts its ``p - 1`` messages at once; on
  ``"connection"`` engines (GPUs) their overheads overlap, so the phase
  takes ``2 overhead + max(alpha_min + (p - 1) b / bw_rank, alpha_max + b /
  bw_conn)``; on ``"rank"`` engines (CPUs) the ``p - 1`` send overheads and
  the ``p - 1`` receive overheads queue on the rank's one engine.
  Reduce-scatter then reduces the ``p - 1`` received blocks one after
  another at ``local_bw`` (free without it).

A profiled topology's costs are charged as the simulator charges them: a
message above the ``eager_limit`` pays ``rendezvous_alpha`` more latency,
a fused receive-reduce pays ``local_overhead`` plus its bytes at
``local_bw`` (:meth:`~ccsynth.synth.multidim.network.DimNet.reduction_us`),
the local copies of the lowering (the allreduce's initial copy,
reduce-scatter's and allgather's packing) are charged before a chunk's
first phase and after its last (:meth:`PhaseCosts.copies_before`), and
the model adds ``call_overhead`` once to the makespan
(:mod:`~ccsynth.synth.multidim.pipeline`).

Example:
    >>> from ccsynth.topologies.catalog import hierarchical
    >>> from ccsynth.synth.multidim.network import dim_net
    >>> costs = PhaseCosts(dim_net(hierarchical([(4, 100, 1.0, 0.5), (2, 10, 2.0, 1.0)])))
    >>> costs.time(0, "ring", 4e6, reduce=True)    # 3 steps of (1 + 2 x 0.5 + 1e6 B / 100 GB/s)
    36.0
    >>> costs.time(0, "direct", 4e6, reduce=True)  # 2 x 0.5 + 1 + 3e6 B / 100 GB/s
    32.0
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ccsynth.errors import CollectiveError
from ccsynth.synth.multidim.network import DimNet, DimSpec, DirectCost
from ccsynth.tolerance import is_less

__all__ = ["DirectTiming", "PhaseChoice", "PhaseCosts", "ring_time", "direct_time"]


@dataclass(frozen=True)
class DirectTiming:
    """When a direct phase's sends are posted, its bytes are in, it is done; how long its bytes occupy the streams (us)."""

    data_end: float
    done: float
    data_us: float
    posted: float = 0.0  # when its send overheads are done (the send engines are free again)
    received: float = 0.0  # when its receive overheads (and, on a rank engine, its reductions) are done


@dataclass(frozen=True)
class PhaseChoice:
    """The faster algorithm for one phase, and its time (us)."""

    algorithm: str
    time_us: float


def ring_time(net: DimNet, spec: DimSpec, b: float, *, reduce: bool) -> float:
    """Time of a ring phase with ``b`` bytes per message (see the module docstring)."""
    p = spec.size
    hops = spec.ring
    scope = net.scope
    red = net.reduction_us(b) if reduce else 0.0
    got = [0.0] * p  # when position i's receive of the previous step completed (0: the phase's start)
    if scope == "rank":
        engine = [0.0] * p
        stream = [0.0] * p
        for _ in range(p - 1):
            ends = [0.0] * p
            for i in range(p):
                h = hops[i]
                post = max(got[i], engine[i]) + h.overhead
                engine[i] = post
                start = max(post + net.message_alpha(h.alpha, b), stream[i])
                stream[i] = ends[i] = start + b * h.us_per_byte
            new = [0.0] * p
            for i in range(p):
                j = (i + 1) % p
                new[j] = max(ends[i], engine[j]) + hops[i].overhead + red
                engine[j] = new[j]
            got = new
        return max(got)
    send_free = [0.0] * p  # the send engine of position i (towards i + 1)
    recv_free = [0.0] * p  # the receive engine of position i (from i - 1)
    stream = [0.0] * p  # when the bytes of hop i's last message were in
    for _ in range(p - 1):
        new = [0.0] * p
        for i in range(p):
            h = hops[i]
            post = max(got[i], send_free[i]) + h.overhead
            send_free[i] = post
            start = max(post + net.message_alpha(h.alpha, b), stream[i])
            stream[i] = end = start + b * h.us_per_byte
            j = (i + 1) % p
            new[j] = max(end, recv_free[j]) + h.overhead + red
            recv_free[j] = new[j]
        got = new
    return max(got)


def direct_time(net: DimNet, spec: DimSpec, b: float, *, reduce: bool, start: float = 0.0,
                data_free: float = -math.inf, recv_free: float = -math.inf,
                send_free: float = -math.inf) -> DirectTiming:
    """Timing of a direct phase with ``b`` bytes per message that may post its sends at ``start``.

    ``data_free`` is when the previous phase's bytes on the same connections
    are in (the streams are first come first served: this phase's bytes
    queue behind them), ``recv_free`` and ``send_free`` when the previous
    phase's receive and send overheads are done (the engines are shared
    too: a phase posted while the one before is still posting waits for
    it); all -inf for a phase on idle connections.
    """
    c = spec.direct
    if c is None:
        raise CollectiveError(f"dimension {spec.name!r} of {net.topology!r} cannot run 'direct'")
    k = spec.size - 1
    rank_scope = net.scope == "rank"
    red = k * net.reduction_us(b) if reduce else 0.0
    sends = k * c.overhead if rank_scope else c.overhead  # rank scope: the k send overheads queue
    recvs = k * c.overhead if rank_scope else c.overhead
    post = max(start, send_free)
    first = post + c.overhead
    data_start = max(first + net.message_alpha(c.alpha_min, b), data_free)
    data = k * b * c.us_per_byte
    data_end = max(data_start + data, post + sends + net.message_alpha(c.alpha_max, b) + b * c.conn_us_per_byte)
    received = max(data_end, recv_free) + recvs
    done = received + red
    # local reductions queue on a "rank" engine; on "connection" engines they do not hold the receives up
    return DirectTiming(data_end, done, data, post + sends, done if rank_scope else received)


class PhaseCosts:
    """Phase times on one :class:`DimNet`, remembered per (dimension, algorithm, bytes, reduce).

    ``m`` is the phase's range per rank: the bytes a rank holds before a
    reduce-scatter phase, after an allgather phase.
    """

    def __init__(self, net: DimNet):
        self.net = net
        self._memo: dict[tuple[int, str, float, bool], float] = {}
        self._best_memo: dict[tuple[int, float, bool], PhaseChoice] = {}  # every chunk plan asks for every phase

    def time(self, d: int, algorithm: str, m: float, *, reduce: bool) -> float:
        key = (d, algorithm, m, reduce)
        t = self._memo.get(key)
        if t is None:
            spec = self.net.dims[d]
            if algorithm not in spec.algorithms:
                raise CollectiveError(f"dimension {spec.name!r} of {self.net.topology!r} cannot run {algorithm!r}; "
                                      f"it runs {', '.join(spec.algorithms)}")
            b = m / spec.size
            t = (ring_time(self.net, spec, b, reduce=reduce) if algorithm == "ring"
                 else direct_time(self.net, spec, b, reduce=reduce).done)
            self._memo[key] = t
        return t

    def direct(self, d: int, m: float, *, reduce: bool, start: float, data_free: float,
               recv_free: float, send_free: float = -math.inf) -> DirectTiming:
        """A direct phase over ``m`` bytes queued behind the dimension's previous one (see :func:`direct_time`)."""
        spec = self.net.dims[d]
        return direct_time(self.net, spec, m / spec.size, reduce=reduce, start=start, data_free=data_free,
                           recv_free=recv_free, send_free=send_free)

    def floor(self, d: int, algorithm: str, m: float, *, reduce: bool) -> float:
        """What a phase occupies its dimension at least, whatever overlaps it: a ring phase all of its
        time (nothing runs beside it), a direct phase the time its bytes take on the streams."""
        if algorithm == "ring":
            return self.time(d, algorithm, m, reduce=reduce)
        spec = self.net.dims[d]
        return (spec.size - 1) * (m / spec.size) * self._direct(d).us_per_byte

    def _direct(self, d: int) -> DirectCost:
        c = self.net.dims[d].direct
        if c is None:
            raise CollectiveError(f"dimension {self.net.dims[d].name!r} of {self.net.topology!r} cannot run 'direct'")
        return c

    def best(self, d: int, m: float, *, reduce: bool) -> PhaseChoice:
        """The faster of the dimension's algorithms for a range of ``m`` bytes.

        Ties (within :data:`~ccsynth.tolerance.REL`) go to ring, but on a dimension of 2 ranks to direct:
        there both send one message per rank and take the same time alone, but a ring phase holds its
        dimension for all of that time while direct phases overlap (:func:`~.pipeline.window_of`: the
        next phase's overheads and latency hide behind this one's bytes), so in a pipeline of chunks the
        direct phases cost their bytes only (on ``hierarchical:2x8x2@250,175,12.5`` at 1 GiB the 12.5 GB/s
        dimension's 2 x 14 us per chunk of latency and overheads: ``docs/results.md``).
        """
        key = (d, m, reduce)
        best = self._best_memo.get(key)
        if best is not None:
            return best
        choices = [PhaseChoice(alg, self.time(d, alg, m, reduce=reduce)) for alg in self.net.dims[d].algorithms]
        if self.net.dims[d].size == 2:
            choices.reverse()  # direct first: it wins ties
        best = choices[0]
        for c in choices[1:]:
            if is_less(c.time_us, best.time_us):
                best = c
        self._best_memo[key] = best
        return best

    def us_per_byte(self, d: int, algorithm: str) -> float:
        """The algorithm's bandwidth term per byte a rank sends (ring: its slowest hop)."""
        spec = self.net.dims[d]
        if algorithm == "ring":
            return max(h.us_per_byte for h in spec.ring)
        return self._direct(d).us_per_byte

    def _copies(self, count: int, each: float) -> float:
        """``count`` local copies of ``each`` bytes on one rank: in parallel on ``"connection"`` engines (local
        work does not queue there), one after another on a ``"rank"`` engine; free without local costs."""
        one = self.net.reduction_us(each)
        return one * count if self.net.scope == "rank" else one

    def copies_before(self, kind: str, size_bytes: float, chunk: float) -> float:
        """When a chunk of ``chunk`` bytes may start its first phase: allreduce copies the whole input into
        the output first (:mod:`~ccsynth.synth.multidim.lowering`), reduce-scatter packs the chunk's ``n``
        blocks, allgather puts the rank's own block in place."""
        n = self.net.n_ranks
        if kind == "allreduce":
            return self._copies(1, size_bytes)
        if kind == "reduce_scatter":
            return self._copies(n, chunk / n)
        return self._copies(1, chunk / n)

    def copies_after(self, kind: str, chunk: float) -> float:
        """The local copies after a chunk's last phase: reduce-scatter copies the rank's block out,
        allgather unpacks the chunk's ``n`` blocks, allreduce none."""
        n = self.net.n_ranks
        if kind == "reduce_scatter":
            return self._copies(1, chunk / n)
        if kind == "allgather":
            return self._copies(n, chunk / n)
        return 0.0

    def sent_bytes(self, d: int, m: float) -> float:
        """Bytes one rank sends in a phase over a range of ``m`` bytes (either algorithm): ``m (p - 1) / p``."""
        p = self.net.dims[d].size
        return m * (p - 1) / p
