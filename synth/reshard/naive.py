"""The naive resharding plan: the first replica of each source tile sends every piece point to point.

Every destination rank that needs a piece and does not hold it receives it
straight from the first rank (in mesh order) of the piece's source tile; a
rank that holds the piece copies it locally. No load balancing, no
broadcast: the baseline the other planners are measured against. Where the
topology lacks the direct connection (a DGX-1 cube mesh, a hierarchy), the
piece goes on from a destination that already has it, or through relay
slots (:func:`.delivery.spread`).
"""

from __future__ import annotations

from collections import defaultdict

from ccsynth.synth.reshard.delivery import spread
from ccsynth.synth.reshard.plan import Fabric, Hop, needs
from ccsynth.synth.reshard.task import ReshardTask

__all__ = ["naive_hops"]


def naive_hops(task: ReshardTask, fabric: Fabric) -> list[Hop]:
    hops: list[Hop] = []
    forwards: list[Hop] = []
    load: dict = defaultdict(float)
    for p in task.pieces:
        holders, needers = needs(task, p.id)
        held = set(holders)
        hops += [Hop(p.id, d, d) for d in needers if d in held]
        for h in spread(p.id, [(holders[0], True)], [d for d in needers if d not in held], fabric, load, 0.0):
            (forwards if h.forward else hops).append(h)
    return hops + forwards
