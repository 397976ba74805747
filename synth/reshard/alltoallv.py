"""The ``alltoallv`` resharding plan: every piece straight from a holder to every rank that needs it, run as one
``MPI_Alltoallv``.

The hops are direct, from source shards only (no forwards, no relays): what
one ``Alltoallv`` can move. A rank that holds a piece it needs copies it;
every other needer gets it from one of the piece's holders, chosen greedily
so that the holders' send volumes stay balanced (the least loaded holder
first, ties to the lower rank) -- a plain MPI implementation sends every
piece from the first replica, which leaves the other replicas idle. The
runtime runs the plan with one collective
(:class:`~ccsynth.collectives.reshard_alltoallv.AlltoallvProgram`, built
from the plan by :func:`~ccsynth.synth.reshard.program.rank_program`,
which reads ``meta["executor"] == "alltoallv"``).
"""

from __future__ import annotations

from ccsynth.synth.reshard.plan import Hop, needs
from ccsynth.synth.reshard.task import ReshardTask

__all__ = ["alltoallv_hops", "EXECUTOR"]

#: the plan's ``meta["executor"]``: what the runtime runs it with
EXECUTOR = "alltoallv"


def alltoallv_hops(task: ReshardTask) -> list[Hop]:
    """Direct hops of every piece (local copies first), senders balanced over each piece's holders."""
    copies: list[Hop] = []
    hops: list[Hop] = []
    load: dict[int, int] = {}
    for p in task.pieces:
        holders, needers = needs(task, p.id)
        held = set(holders)
        for d in needers:
            if d in held:
                copies.append(Hop(p.id, d, d))
                continue
            s = min(holders, key=lambda h: (load.get(h, 0), h))
            load[s] = load.get(s, 0) + p.size
            hops.append(Hop(p.id, s, d))
    return copies + hops
