"""Several rings at once, NCCL-style channels: each ring carries a share of the data.

A single ring uses one outgoing connection per rank; fabrics with more
(a bidirectional ring, DGX-1's six NVLinks per GPU, one NIC per GPU on
rail-optimised DGX A100 clusters) leave bandwidth idle. This algorithm finds
a set of rings greedily and splits every piece's chunks among them:

* ring ``k+1`` may only use connections on which it does not become the
  bottleneck: with ``m`` rings carrying equal shares, the aggregate rate is
  ``m / max_res(uses_res / bw_res)`` over the bandwidth resources (links,
  switch ports, shared NIC ports, see
  :meth:`~ccsynth.topologies.model.Topology.bandwidth_constraints`); a new
  ring is accepted only if that rate grows. On a bidirectional ring this
  finds the reverse ring; on a single switch it finds nothing more (every
  ring uses every port once), and the algorithm is then not applicable --
  :mod:`~ccsynth.synth.baselines.ring` is the same thing.
* with ``R`` rings and chunk factor ``c``, ring ``k`` (its transfers on
  channel ``k``) carries the ``k``-th
  of ``min(R, c)`` near-equal groups of every piece's chunks (allreduce:
  of the buffer's chunks), running the single-ring algorithm on them. A
  chunk factor that is a multiple of the ring count (times ``n`` for
  allreduce) balances the rings.

Example:
    >>> from ccsynth.collectives.spec import Collective
    >>> from ccsynth.topologies.model import Link, Topology
    >>> t = Topology("bi4", 4, links=tuple(l for a in range(4) for l in (Link(a, (a + 1) % 4, 1.0, 10.0),
    ...     Link((a + 1) % 4, a, 1.0, 10.0))))
    >>> build(Collective("allgather", 4, 2), t).meta["rings"]
    [[0, 1, 2, 3], [3, 2, 1, 0]]
"""

from __future__ import annotations

import logging
from collections import Counter
from functools import lru_cache
from itertools import islice

from ccsynth.collectives.builder import ScheduleBuilder
from ccsynth.collectives.schedule import Schedule
from ccsynth.collectives.spec import Collective
from ccsynth.errors import CollectiveError
from ccsynth.synth.baselines._util import (
    _Budget,
    _ham_paths,
    check_sizes,
    find_ring,
    ring_collective,
    search_ring,
    successors,
)
from ccsynth.synth.baselines.ring import KINDS
from ccsynth.tolerance import is_greater, is_less
from ccsynth.topologies.model import Topology

__all__ = ["NAME", "DESCRIPTION", "MAX_RINGS", "find_rings", "check", "build"]

log = logging.getLogger(__name__)

NAME = "multi_ring"
DESCRIPTION = "several rings at once (NCCL-style channels), each carrying a share of every piece; where the fabric has room for more than one ring"

#: Most rings searched for (NCCL uses up to 16-32 channels; 8 covers DGX-1's 6 NVLinks and 8 rails).
MAX_RINGS = 8
#: Search steps for all rings of one topology together.
_SEARCH_STEPS = 300_000
#: Fabrics up to this size also try other first rings (at most _STARTS of them).
_MULTI_START_MAX_RANKS = 32
_STARTS = 64


def _rate(topology: Topology, uses: Counter) -> float:
    """Aggregate rate (GB/s up to a constant) of rings with equal shares."""
    bw = topology.resource_bw
    worst = max(u / bw[res] for res, u in uses.items())
    return 1.0 / worst


def _uses(topology: Topology, order) -> Counter:
    out: Counter = Counter()
    m = len(order)
    for i in range(m):
        a, b = order[i], order[(i + 1) % m]
        c = topology.connection(a, b)
        if c is None:
            raise CollectiveError(f"multi_ring: ranks {a} and {b}, neighbours on a ring, are not adjacent")
        out.update(c.resources)
    return out


def _greedy(topology: Topology, first, max_rings: int, budget: _Budget) -> tuple[float, list]:
    """Add rings to ``[first]`` while the aggregate rate grows; returns (rate, rings)."""
    bw = topology.resource_bw
    rings = [tuple(first)]
    uses = _uses(topology, first)
    rate = _rate(topology, uses)
    conns = topology.connections()
    while len(rings) < max_rings and budget.left > 0:
        m = len(rings)
        # the new max(uses/bw) must stay below (m+1)/rate for the total to grow
        limit = (m + 1) / rate
        succ: dict[int, list[int]] = {r: [] for r in range(topology.n_ranks)}
        # a resource's test is the same for every connection through it: once per resource (65,280 connections
        # share 1,024 resources at 256 ranks)
        room = {res: is_less((uses[res] + 1) / b, limit) for res, b in bw.items()}
        for conn in conns:
            if all(room[res] for res in conn.resources):
                succ[conn.src].append(conn.dst)
        order = search_ring(succ, topology.nodes, budget)
        if order is None:
            break
        new_uses = uses + _uses(topology, order)
        new_rate = (m + 1) * _rate(topology, new_uses)
        if not is_greater(new_rate, rate):
            break
        rings.append(order)
        uses, rate = new_uses, new_rate
    return rate, rings


@lru_cache(maxsize=64)
def find_rings(topology: Topology, max_rings: int = MAX_RINGS) -> tuple[tuple[int, ...], ...]:
    """Rings through all ranks, chosen greedily while the aggregate rate grows.

    The greedy starts from :func:`find_ring`'s ring; on small fabrics that
    do not reach ``max_rings`` that way it also starts from other
    Hamiltonian cycles (DGX-1: 4 rings from the first start, 6 -- one per
    NVLink -- from the best) and keeps the best set. Deterministic: the
    search is bounded by step counts, not time. Returns ``()`` if the
    topology has no ring at all.
    """
    first = find_ring(topology)
    if first is None:
        return ()
    if topology.n_ranks < 2:
        return (first,)
    budget = _Budget(_SEARCH_STEPS)
    best_rate, best = _greedy(topology, first, max_rings, budget)
    if len(best) < max_rings and topology.n_ranks <= _MULTI_START_MAX_RANKS:
        n = topology.n_ranks
        succ = successors(topology)
        starts = _ham_paths(succ, 0, None, frozenset(range(n)), _Budget(_SEARCH_STEPS), close_to=0)
        single = _rate(topology, _uses(topology, first))
        for cycle in islice(starts, _STARTS):
            if is_less(_rate(topology, _uses(topology, cycle)), single):
                continue  # a worse bottleneck than the first ring (e.g. crossing a NIC twice)
            rate, rings = _greedy(topology, cycle, max_rings, budget)
            if is_greater(rate, best_rate):
                best_rate, best = rate, rings
            if len(best) >= max_rings or budget.left <= 0:
                break
    log.debug("topology %s: %d ring(s), aggregate %.1f GB/s", topology.name, len(best), best_rate)
    return tuple(best)


def check(collective: Collective, topology: Topology) -> tuple[tuple[int, ...], ...]:
    """The rings to use; raises :class:`CollectiveError` if not applicable."""
    check_sizes(NAME, collective, topology)
    if collective.kind not in KINDS:
        raise CollectiveError(f"{NAME} does not implement {collective.kind}; it implements {', '.join(KINDS)}")
    rings = find_rings(topology)
    if not rings:
        raise CollectiveError(f"{NAME}: topology {topology.name!r} has no ring through all {topology.n_ranks} ranks")
    if len(rings) < 2:
        raise CollectiveError(
            f"{NAME}: topology {topology.name!r} has bandwidth for only one ring (a second would share its bottleneck); use 'ring'"
        )
    if collective.chunk_factor < 2:
        raise CollectiveError(
            f"{NAME}: chunk factor {collective.chunk_factor} gives every ring nothing to carry but the first; "
            f"use a chunk factor of at least 2 (ideally a multiple of {len(rings)}) or 'ring'"
        )
    return rings[: collective.chunk_factor]


def build(collective: Collective, topology: Topology) -> Schedule:
    """The multi-ring schedule (unverified)."""
    rings = [list(r) for r in check(collective, topology)]
    b = ScheduleBuilder(collective, NAME, topology=topology.name)
    ring_collective(b, collective, rings)
    return b.build(algorithm=NAME, rings=rings)
