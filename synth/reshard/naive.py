"""The naive resharding plan: the first replica of each source tile sends every piece point to point.

Every destination rank that needs a piece and does not hold it receives it
straight from the first rank (in mesh order) of the piece's source tile;
a rank that holds the piece copies it locally. No load balancing, no
broadcast: the baseline the other planners are measured against.
"""

from __future__ import annotations

from ccsynth.synth.reshard.plan import Hop, needs
from ccsynth.synth.reshard.task import ReshardTask

__all__ = ["naive_hops"]


def naive_hops(task: ReshardTask) -> list[Hop]:
    hops = []
    for p in task.pieces:
        holders, needers = needs(task, p.id)
        held = set(holders)
        for d in needers:
            hops.append(Hop(p.id, d if d in held else holders[0], d))
    return hops
