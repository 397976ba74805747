"""Ring algorithms: allgather, reduce-scatter, allreduce, broadcast, reduce.

One ring through every rank, following connections of the topology (a
Hamiltonian cycle of its directed connection graph, see
:func:`~ccsynth.synth.baselines._util.find_ring`).

* allgather / reduce-scatter: ``n - 1`` steps; in each, every rank forwards
  one rank's piece to its successor (reduce-scatter adds its own value on the
  way, fused receive-reduce).
* allreduce: reduce-scatter then allgather over ``n`` blocks of the buffer
  (Patarasuk and Yuan, bandwidth-optimal on a ring). The ``c`` chunks are
  split into ``n`` near-equal blocks, so a chunk factor that is a multiple of
  ``n`` uses the ring fully; smaller ones leave some blocks empty.
* broadcast / reduce: a pipelined chain along the ring starting (ending) at
  the root.

Every piece travels chunk by chunk, so with chunk factor ``c`` a rank
forwards chunk ``j`` while ``j + 1`` is still arriving.

Example:
    >>> from ccsynth.collectives.spec import Collective
    >>> from ccsynth.topologies.model import Link, Topology
    >>> t = Topology("r3", 3, links=tuple(Link(a, (a + 1) % 3, 1.0, 10.0) for a in range(3)))
    >>> s = build(Collective("allgather", 3), t)
    >>> s.meta["ring"]
    [0, 1, 2]
"""

from __future__ import annotations

from ccsynth.collectives.builder import ScheduleBuilder
from ccsynth.collectives.schedule import Schedule
from ccsynth.collectives.spec import Collective
from ccsynth.errors import CollectiveError
from ccsynth.synth.baselines._util import check_sizes, require_ring, ring_collective
from ccsynth.topologies.model import Topology

__all__ = ["NAME", "KINDS", "DESCRIPTION", "check", "build"]

NAME = "ring"
KINDS = ("allgather", "reduce_scatter", "allreduce", "broadcast", "reduce")
DESCRIPTION = "one ring along the topology's links: allgather, reduce-scatter, allreduce (RS+AG), pipelined chain broadcast/reduce"


def check(collective: Collective, topology: Topology) -> tuple[int, ...]:
    """The ring order to use; raises :class:`CollectiveError` if not applicable."""
    check_sizes(NAME, collective, topology)
    if collective.kind not in KINDS:
        raise CollectiveError(f"{NAME} does not implement {collective.kind}; it implements {', '.join(KINDS)}")
    return require_ring(NAME, topology)


def build(collective: Collective, topology: Topology) -> Schedule:
    """The ring schedule (not yet verified; :func:`make_baseline` verifies)."""
    order = list(check(collective, topology))
    b = ScheduleBuilder(collective, NAME, topology=topology.name)
    ring_collective(b, collective, [order])
    return b.build(algorithm=NAME, ring=order)
