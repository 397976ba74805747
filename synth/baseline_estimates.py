"""What a baseline costs at least, from its structure alone: estimates that save building its schedule.

The chunk-factor search (:mod:`ccsynth.synth.baseline_search`) prunes a
baseline's factors by lower bounds. For the ring family (:data:`RING_FAMILY`)
and the direct baseline those bounds follow from the rings or the pairs
alone, without building the schedule (at 1,024 ranks a build costs tens of
seconds): the busiest resource's bytes (:func:`ring_volume_us`,
:func:`direct_volume_us`, equal to the static bound's ``volume_us`` of the
built schedule), the busiest ring stream and engine (:func:`ring_stream`,
never above the pipeline bound), and the message count (:func:`ring_sends`,
what caps a factor's op budget). ``tests/test_baseline_search.py`` checks
each against the built schedules.
"""

from __future__ import annotations

from typing import NamedTuple

from ccsynth.collectives.spec import Collective
from ccsynth.errors import CCSynthError
from ccsynth.synth.baselines import direct, multi_ring, ring
from ccsynth.synth.baselines._util import split
from ccsynth.topologies.model import BYTES_PER_US_PER_GBPS, Topology

__all__ = [
    "RING_FAMILY", "MESSAGES_PER_CHUNK", "ring_volume_us", "direct_volume_us", "RingStream", "ring_stream",
    "ring_sends",
]


#: the baselines whose bytes per resource :func:`ring_volume_us` computes without building them
RING_FAMILY = ("ring", "multi_ring")
#: the baselines that send every chunk as a message of its own: at twice the chunk factor every engine sends and
#: receives twice the messages (``tests/test_baseline_search.py``), so its per-message overheads double
MESSAGES_PER_CHUNK = ("ring", "multi_ring", "hierarchical")


def _rings(name: str, collective: Collective, topology: Topology) -> list[list[int]] | None:
    """The rings of ring-family baseline ``name`` for an allgather or reduce-scatter, in ring order; None for
    other baselines and kinds, or when the baseline does not apply."""
    if name not in RING_FAMILY or collective.kind not in ("allgather", "reduce_scatter"):
        return None
    try:
        return [list(ring.check(collective, topology))] if name == "ring" else \
            [list(r) for r in multi_ring.check(collective, topology)]
    except CCSynthError:
        return None


def ring_volume_us(name: str, collective: Collective, topology: Topology, size_bytes: float) -> float | None:
    """The busiest resource's bytes at full bandwidth (us) of ring-family baseline ``name``, without building it.

    For allgather and reduce-scatter ring ``k`` of the baseline's rings carries the ``k``-th group of every
    piece's chunks (:func:`~ccsynth.synth.baselines._util.ring_collective`), ``n - 1`` pieces' groups over
    each of its edges; a resource carries what the ring edges through it carry. Equal to the ``volume_us`` of
    :func:`~ccsynth.synth.simulate.static_bound` on the built schedule (``tests/test_baseline_search.py``);
    None for other baselines and kinds, or when the baseline does not apply.
    """
    n, c = collective.n_ranks, collective.chunk_factor
    rings = _rings(name, collective, topology)
    if rings is None:
        return None
    groups = split(range(c), len(rings))
    mcurve = topology.message_curve
    chunk = collective.chunk_bytes(size_bytes) * (mcurve.factor(size_bytes) if mcurve is not None else 1.0)
    res_bytes: dict[str, float] = {}
    for order, grp in zip(rings, groups):
        edge_bytes = (n - 1) * len(grp) * chunk
        for i, a in enumerate(order):
            conn = topology.connection(a, order[(i + 1) % n])
            if conn is None:
                return None
            for r in conn.resources:
                res_bytes[r] = res_bytes.get(r, 0.0) + edge_bytes
    bw = topology.resource_bw
    return max((v / (bw[r] * BYTES_PER_US_PER_GBPS) for r, v in res_bytes.items()), default=0.0)


def direct_volume_us(name: str, collective: Collective, topology: Topology, size_bytes: float) -> float | None:
    """The busiest resource's bytes at full bandwidth (us) of the direct baseline, without building it.

    For allgather (every rank's piece to every other rank) and reduce-scatter (block ``d`` of every rank to
    rank ``d``) each pair of :func:`~ccsynth.synth.baselines.direct.pairs` moves ``c`` chunks over its
    connection, whatever the chunk factor ``c``; a resource carries what its connections carry. Equal to the
    ``volume_us`` of :func:`~ccsynth.synth.simulate.static_bound` on the built schedule
    (``tests/test_baseline_search.py``); None for other baselines and kinds, and where a pair has no
    connection (the baseline relays it along a path it balances as it builds). At 1,024 ranks the build
    this saves takes 50 s.
    """
    if name != direct.NAME or collective.kind not in ("allgather", "reduce_scatter"):
        return None
    try:
        direct.check(collective, topology)
    except CCSynthError:
        return None
    mcurve = topology.message_curve
    piece = collective.chunk_factor * collective.chunk_bytes(size_bytes) * \
        (mcurve.factor(size_bytes) if mcurve is not None else 1.0)
    per_route: dict[tuple[str, ...], int] = {}
    for a, b in direct.pairs(collective):
        conn = topology.connection(a, b)
        if conn is None:
            return None
        per_route[conn.resources] = per_route.get(conn.resources, 0) + 1
    res_bytes: dict[str, float] = {}
    for resources, count in per_route.items():
        for r in resources:
            res_bytes[r] = res_bytes.get(r, 0.0) + count * piece
    bw = topology.resource_bw
    return max((v / (bw[r] * BYTES_PER_US_PER_GBPS) for r, v in res_bytes.items()), default=0.0)


class RingStream(NamedTuple):
    """What :func:`ring_stream` bounds without building a ring-family schedule (us)."""

    #: the busiest ring stream: its first message's overhead and latency, every message's bytes at the
    #: connection's slowest resource, its last message's receive overhead (the same at every chunk factor)
    stream_us: float
    #: the busiest engine's per-message overheads (a ring connection's sends or receives one after another)
    engine_us: float


def ring_stream(name: str, collective: Collective, topology: Topology, size_bytes: float) -> RingStream | None:
    """A lower bound on ring-family baseline ``name``'s simulated time from its rings alone, without building it.

    Ring ``k`` of the baseline runs on channel ``k`` and sends each of its group's chunks of the other ``n - 1``
    pieces over every one of its edges as a message of its own (:func:`ring_volume_us`), one stream per edge.
    A stream moves its messages' data one after another: its first cannot start before its send's overhead and
    latency, and the schedule cannot end before its last message's receive overhead -- the head-body-tail
    bound of :func:`~ccsynth.synth.pipeline_bound.pipeline_bound` for the stream's whole work, which is never
    above it (``tests/test_baseline_search.py``). Bytes per message as there (the message curve; not the
    footprint or forward curves, factors of at least 1). None for other baselines and kinds, or when the
    baseline does not apply.
    """
    n, c = collective.n_ranks, collective.chunk_factor
    rings = _rings(name, collective, topology)
    if rings is None:
        return None
    raw = collective.chunk_bytes(size_bytes)
    mcurve = topology.message_curve
    chunk = raw * (mcurve.factor(size_bytes) if mcurve is not None else 1.0)
    bw = topology.resource_bw
    stream = engine = 0.0
    for order, grp in zip(rings, split(range(c), len(rings))):
        messages = (n - 1) * len(grp)
        if not messages:
            continue
        for i, a in enumerate(order):
            conn = topology.connection(a, order[(i + 1) % n])
            if conn is None:
                return None
            cap = min(bw[r] for r in conn.resources) * BYTES_PER_US_PER_GBPS
            o = conn.overhead
            stream = max(stream, 2 * o + topology.message_alpha(conn.alpha, raw) + messages * chunk / cap)
            engine = max(engine, messages * o)
    return RingStream(stream, engine)


def ring_sends(name: str, collective: Collective) -> int | None:
    """How many messages ring-family baseline ``name`` sends for ``collective``, without building it.

    :func:`~ccsynth.synth.baselines._util.ring_collective` sends every chunk on its own around its ring:
    ``(n - 1) * n * c`` messages for allgather and reduce-scatter, ``2 * (n - 1) * c`` for allreduce (each ring
    reduce-scatters and allgathers its share of the buffer in ``n`` blocks), ``(n - 1) * c`` for the chains of
    broadcast and reduce; as many receives again. None for other baselines and kinds.
    (``tests/test_baseline_search.py`` checks it against the built schedules.)
    """
    n, c = collective.n_ranks, collective.chunk_factor
    if name not in RING_FAMILY:
        return None
    per_kind = {"allgather": (n - 1) * n * c, "reduce_scatter": (n - 1) * n * c, "allreduce": 2 * (n - 1) * c,
                "broadcast": (n - 1) * c, "reduce": (n - 1) * c}
    return per_kind.get(collective.kind)
