"""One-shot allreduce: every rank sends its whole buffer to every other and adds up all ``n`` itself.

One hop, where direct and recursive doubling need two (``log2 n``) dependent
steps, at the price of ``n - 1`` times the input sent per rank: the
latency-bound choice for small messages on a few well-connected ranks (the
"one-shot" allreduce of NCCL-based inference runtimes). Each rank adds the
``n`` buffers in rank order, ``((x_0 + x_1) + x_2) + ...``, so every rank
computes the bit-identical result. Peers are visited in the order
``(r + k) % n`` as in :mod:`~ccsynth.synth.baselines.direct`, and pieces are
relayed along shortest paths where two ranks have no connection.

Example:
    >>> from ccsynth.collectives.spec import Collective
    >>> from ccsynth.topologies.model import Switch, Topology
    >>> t = Topology("sw4", 4, switches=(Switch("sw", (0, 1, 2, 3), 10.0, 1.0),))
    >>> s = build(Collective("allreduce", 4), t)
    >>> sum(op.kind == "send" for op in s.ops), s.meta["relayed"]
    (12, 0)
"""

from __future__ import annotations

from ccsynth.collectives.builder import ScheduleBuilder
from ccsynth.collectives.schedule import Schedule
from ccsynth.collectives.spec import Collective
from ccsynth.errors import CollectiveError
from ccsynth.synth.baselines import direct
from ccsynth.synth.baselines._util import check_sizes
from ccsynth.topologies.model import Topology

__all__ = ["NAME", "KINDS", "DESCRIPTION", "check", "build"]

NAME = "one_shot"
KINDS = ("allreduce",)
DESCRIPTION = "allreduce in one hop: every rank sends its buffer to every other and sums all n in rank order (small messages)"


def check(collective: Collective, topology: Topology) -> None:
    check_sizes(NAME, collective, topology)
    if collective.kind not in KINDS:
        raise CollectiveError(f"{NAME} does not implement {collective.kind}; it implements {', '.join(KINDS)}")
    # the same pairs as a direct allgather must reach each other
    direct.check(Collective("allgather", collective.n_ranks, collective.chunk_factor), topology)


def build(collective: Collective, topology: Topology) -> Schedule:
    """The one-shot schedule (unverified)."""
    check(collective, topology)
    n, c = collective.n_ranks, collective.chunk_factor
    b = ScheduleBuilder(collective, NAME, topology=topology.name)
    # scratch slot q*c .. q*c+c-1 of a rank holds rank q's buffer; relays use what follows
    net = direct.Router(b, topology, n * c)
    for _, r, d in direct.rounds(n):
        net.deliver(r, d, ("i", 0, c), ("s", r * c, c))
    for d in range(n):
        def part(q: int, d: int = d) -> tuple[str, int, int]:
            return ("i", 0, c) if q == d else ("s", q * c, c)

        b.copy(d, part(0), ("o", 0, c))
        for q in range(1, n):
            b.reduce(d, part(q), ("o", 0, c))
    return b.build(algorithm=NAME, relayed=net.relayed)
