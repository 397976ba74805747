"""The cost of a round: what waiting on ``k`` peers at once costs a rank, beyond the messages themselves.

The per-message model (``alpha``, ``overhead``, ``bw``) prices every message
by itself. Measured on the project's 2-core machine with 4 ranks (2x
oversubscribed, docs/results.md), a *round* -- a rank
waiting for the messages of ``k`` peers before it can go on -- costs more
than its messages: ~10 us with one peer and ~21-25 us with three, against
4-5.6 us per hop in the profile's chains, and a round of two independent
rings (two peers) costs what a ring round does, although it moves twice the
messages. The cost is per round and grows with the peers waited on: a round
completes only when every rank it waits on has been scheduled (with more
ranks than cores, two at a time).

:class:`RoundCost` holds that extra cost as points ``(k_i, c_i)``: a round
in which a rank waits on ``k`` distinct peers costs ``c(k)`` us more than
its messages, ``c`` piecewise-linear in ``k`` between the points and
constant beyond the first and the last. The simulator
(:mod:`ccsynth.synth.simulate`) defines the rounds of a rank on the
schedule itself: a receive's *round* is its hop level (the most messages on
any chain of dependencies and matched messages that ends at it, counted in
messages), and the receives of one rank at one level form one round; ``k``
is the number of distinct ranks they come from. The cost is a delay, once
per round: the round's last receive completes ``c(k)`` later than its
bytes arrive (then pays its own overhead), so whatever waits for the round
waits that much longer, while the rank's engine stays free for its other
messages.

``ccsynth topo profile`` measures it (:mod:`ccsynth.bench.profile`: rounds
of small exchanges with ``k = 1 .. n - 1`` peers); the catalog has none
(``Topology.round_cost`` None: every prediction as before).

Example:
    >>> c = RoundCost((1, 3), (0.0, 10.0))
    >>> c.cost_us(1), c.cost_us(2), c.cost_us(3), c.cost_us(7)
    (0.0, 5.0, 10.0, 10.0)
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from itertools import pairwise

from ccsynth.errors import TopologyError
from ccsynth.topologies.checks import checked_number

__all__ = ["ROUND_COST_VERSION", "RoundCost"]

#: version of the JSON object (``{"version": 1, "peers": [...], "us": [...]}``)
ROUND_COST_VERSION = 1


@dataclass(frozen=True)
class RoundCost:
    """Points ``(peers[i], us[i])`` of the extra cost of a round (see the module docstring).

    ``peers`` strictly increasing positive integers; ``us`` finite and
    non-negative. Raises :class:`TopologyError` otherwise.
    """

    peers: tuple[int, ...]
    us: tuple[float, ...]

    def __post_init__(self) -> None:
        peers = tuple(self.peers)
        us = tuple(self.us)
        if not peers or len(peers) != len(us):
            raise TopologyError(f"a round cost needs as many costs as peer counts, at least one; got {len(peers)} "
                                f"peer counts and {len(us)} costs")
        for k in peers:
            if isinstance(k, bool) or not isinstance(k, int) or k < 1:
                raise TopologyError(f"round cost: peer counts must be positive integers, got {k!r}")
        if any(b <= a for a, b in pairwise(peers)):
            raise TopologyError(f"round cost: peer counts must increase strictly, got {list(peers)}")
        clean = [checked_number(c, "round cost: costs (us)") for c in us]
        object.__setattr__(self, "peers", peers)
        object.__setattr__(self, "us", tuple(clean))

    def cost_us(self, k: int) -> float:
        """``c(k)``: the extra us of a round in which a rank waits on ``k`` peers (0 for ``k < 1``)."""
        if k < 1:
            return 0.0
        peers, us = self.peers, self.us
        if k <= peers[0]:
            return us[0]
        if k >= peers[-1]:
            return us[-1]
        j = bisect.bisect_right(peers, k)
        k0, k1 = peers[j - 1], peers[j]
        return us[j - 1] + (us[j] - us[j - 1]) * (k - k0) / (k1 - k0)

    def to_dict(self) -> dict:
        return {"version": ROUND_COST_VERSION, "peers": list(self.peers), "us": list(self.us)}
