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

Local copies (the allreduce's initial copy, reduce-scatter's and allgather's
packing) are not charged: the catalog's fabrics have no ``local_bw`` and
their copies are free in the simulator too.

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
from ccsynth.synth.multidim.network import DimNet, DimSpec

__all__ = ["DirectTiming", "PhaseChoice", "PhaseCosts", "ring_time", "direct_time"]


@dataclass(frozen=True)
class DirectTiming:
    """When a direct phase's bytes are in, when it is done, and how long its bytes occupy the streams (us)."""

    data_end: float
    done: float
    data_us: float


@dataclass(frozen=True)
class PhaseChoice:
    """The faster algorithm for one phase, and its time (us)."""

    algorithm: str
    time_us: float


def ring_time(spec: DimSpec, b: float, *, reduce: bool, local_us_per_byte: float, scope: str) -> float:
    """Time of a ring phase with ``b`` bytes per message (see the module docstring)."""
    p = spec.size
    hops = spec.ring
    red = b * local_us_per_byte if reduce else 0.0
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
                start = max(post + h.alpha, stream[i])
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
            start = max(post + h.alpha, stream[i])
            stream[i] = end = start + b * h.us_per_byte
            j = (i + 1) % p
            new[j] = max(end, recv_free[j]) + h.overhead + red
            recv_free[j] = new[j]
        got = new
    return max(got)


def direct_time(spec: DimSpec, b: float, *, reduce: bool, local_us_per_byte: float, scope: str,
                start: float = 0.0, data_free: float = -math.inf, recv_free: float = -math.inf) -> DirectTiming:
    """Timing of a direct phase with ``b`` bytes per message that may post its sends at ``start``.

    ``data_free`` is when the previous phase's bytes on the same connections
    are in (the streams are first come first served: this phase's bytes
    queue behind them) and ``recv_free`` when the previous phase's receive
    overheads are done (the receive engines are shared too); both -inf for
    a phase on idle connections.
    """
    c = spec.direct
    k = spec.size - 1
    red = k * b * local_us_per_byte if reduce else 0.0
    sends = k * c.overhead if scope == "rank" else c.overhead  # rank scope: the k send overheads queue
    recvs = k * c.overhead if scope == "rank" else c.overhead
    first = start + c.overhead
    data_start = max(first + c.alpha_min, data_free)
    data = k * b * c.us_per_byte
    data_end = max(data_start + data, start + sends + c.alpha_max + b * c.conn_us_per_byte)
    done = max(data_end, recv_free) + recvs + red
    return DirectTiming(data_end, done, data)


class PhaseCosts:
    """Phase times on one :class:`DimNet`, remembered per (dimension, algorithm, bytes, reduce).

    ``m`` is the phase's range per rank: the bytes a rank holds before a
    reduce-scatter phase, after an allgather phase.
    """

    def __init__(self, net: DimNet):
        self.net = net
        self._memo: dict[tuple[int, str, float, bool], float] = {}

    def time(self, d: int, algorithm: str, m: float, *, reduce: bool) -> float:
        key = (d, algorithm, m, reduce)
        t = self._memo.get(key)
        if t is None:
            spec = self.net.dims[d]
            if algorithm not in spec.algorithms:
                raise CollectiveError(f"dimension {spec.name!r} of {self.net.topology!r} cannot run {algorithm!r}; "
                                      f"it runs {', '.join(spec.algorithms)}")
            b = m / spec.size
            kw = {"reduce": reduce, "local_us_per_byte": self.net.local_us_per_byte, "scope": self.net.scope}
            t = ring_time(spec, b, **kw) if algorithm == "ring" else direct_time(spec, b, **kw).done
            self._memo[key] = t
        return t

    def direct(self, d: int, m: float, *, reduce: bool, start: float, data_free: float,
               recv_free: float) -> DirectTiming:
        """A direct phase over ``m`` bytes queued behind the dimension's previous one (see :func:`direct_time`)."""
        spec = self.net.dims[d]
        return direct_time(spec, m / spec.size, reduce=reduce, local_us_per_byte=self.net.local_us_per_byte,
                           scope=self.net.scope, start=start, data_free=data_free, recv_free=recv_free)

    def floor(self, d: int, algorithm: str, m: float, *, reduce: bool) -> float:
        """What a phase occupies its dimension at least, whatever overlaps it: a ring phase all of its
        time (nothing runs beside it), a direct phase the time its bytes take on the streams."""
        if algorithm == "ring":
            return self.time(d, algorithm, m, reduce=reduce)
        spec = self.net.dims[d]
        return (spec.size - 1) * (m / spec.size) * spec.direct.us_per_byte

    def best(self, d: int, m: float, *, reduce: bool) -> PhaseChoice:
        """The faster of the dimension's algorithms for a range of ``m`` bytes (ties: ring)."""
        best: PhaseChoice | None = None
        for alg in self.net.dims[d].algorithms:
            t = self.time(d, alg, m, reduce=reduce)
            if best is None or t < best.time_us:
                best = PhaseChoice(alg, t)
        return best  # type: ignore[return-value]

    def us_per_byte(self, d: int, algorithm: str) -> float:
        """The algorithm's bandwidth term per byte a rank sends (ring: its slowest hop)."""
        spec = self.net.dims[d]
        if algorithm == "ring":
            return max(h.us_per_byte for h in spec.ring)
        return spec.direct.us_per_byte

    def sent_bytes(self, d: int, m: float) -> float:
        """Bytes one rank sends in a phase over a range of ``m`` bytes (either algorithm): ``m (p - 1) / p``."""
        p = self.net.dims[d].size
        return m * (p - 1) / p
