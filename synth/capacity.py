"""Upper bounds on the total rate of a set of connections running at once.

The exact value is the packing LP ``max sum x_c`` subject to every
resource's bandwidth (links, switch ports, shared ports: see
:meth:`ccsynth.topologies.model.Topology.bandwidth_constraints`). By weak
LP duality any set of resources that covers every connection bounds it from
above by the sum of their bandwidths; :func:`cover_capacity` finds a good
cover greedily. An over-estimate of a capacity only weakens a lower bound
built on it, and a resource whose connections can never exceed its
bandwidth (:func:`rate_upper_bound` at most its bandwidth) is redundant.

Example:
    >>> from ccsynth.topologies.model import Switch, Topology
    >>> t = Topology("sw", 4, switches=(Switch("sw", (0, 1, 2, 3), 10.0, 0.5),))
    >>> cover_capacity([t.connection(a, 3) for a in range(3)], t.resource_bw)
    10.0
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence

from ccsynth.tolerance import EVENT_REL, is_greater
from ccsynth.topologies.model import Connection

__all__ = ["cover_capacity", "rate_upper_bound"]


def rate_upper_bound(items: Sequence[tuple[tuple[str, ...], float]], resource_bw: Mapping[str, float]) -> float:
    """An upper bound (GB/s) on ``sum x_i`` with ``x_i <= bw_i`` and every resource's cap.

    ``items`` holds, per connection, its resources and its own bandwidth
    (an upper bound on its rate, usually the smallest of its resources').
    Resources missing from ``resource_bw`` are ignored. Greedy (lazy, since
    savings only shrink): take the resource that saves most over paying each
    connection it covers at its own bandwidth; stop when nothing saves.
    Exact for links, switch cuts and shared NICs.
    """
    if not items:
        return 0.0
    bw = [b for _, b in items]
    groups: dict[str, list[int]] = {}
    for i, (res, _) in enumerate(items):
        for r in res:
            if r in resource_bw:
                groups.setdefault(r, []).append(i)
    heap = []
    for r, idx in groups.items():
        if len(idx) >= 2:
            saving = sum(bw[i] for i in idx) - resource_bw[r]
            if saving > 0:
                heap.append((-saving, r))
    heapq.heapify(heap)
    covered = bytearray(len(items))
    total = 0.0
    while heap:
        _, r = heapq.heappop(heap)
        idx = groups[r]
        uncovered = sum(bw[i] for i in idx if not covered[i])
        if not is_greater(uncovered, resource_bw[r], EVENT_REL):
            continue
        saving = uncovered - resource_bw[r]
        if heap and saving < -heap[0][0]:
            heapq.heappush(heap, (-saving, r))
            continue
        total += resource_bw[r]
        for i in idx:
            covered[i] = 1
    total += sum(b for b, cov in zip(bw, covered) if not cov)
    return total


def cover_capacity(conns: Sequence[Connection], resource_bw: Mapping[str, float]) -> float:
    """An upper bound (GB/s) on the total rate of ``conns`` running at once (see the module docstring).

    >>> from ccsynth.topologies.model import Link, Topology
    >>> t = Topology("r", 3, links=(Link(0, 1, 1.0, 5.0), Link(2, 1, 1.0, 7.0)))
    >>> cover_capacity(t.connections(), t.resource_bw)
    12.0
    """
    return rate_upper_bound([(c.resources, c.bw) for c in conns], resource_bw)
