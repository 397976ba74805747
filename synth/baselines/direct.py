"""Direct algorithms: every piece goes from its source to its destination on its own.

No combining on the way; for switches and fully connected fabrics, and for
small messages where latency rules. Peers are visited in the order
``(r + k) % n``, ``k = 1 .. n-1``, so that in each round every rank sends to
a different peer and receives from a different one (no hot spot).

* alltoall: rank ``r`` sends its input block ``d`` to rank ``d``;
* allgather: every rank sends its input to every other;
* reduce-scatter: every rank sends block ``d`` of its input to rank ``d``,
  which receives each peer's contribution into its own scratch slot (so the
  receptions overlap) and reduces them into its output;
* allreduce: direct reduce-scatter of ``n`` blocks of the buffer, then
  direct allgather of the reduced blocks;
* gather / scatter / broadcast / reduce: to or from the root.

Where the topology has no connection between a source and a destination,
the piece is *relayed* along a shortest path (fewest hops; among those, the
one whose busiest link, counting the pieces already routed, is least loaded
relative to its bandwidth), resting in a fresh scratch slot on every
intermediate rank and forwarded chunk by chunk so that the hops pipeline.
``meta["relayed"]`` counts such pieces; on fully connected and switched
fabrics it is 0 and the algorithm is the textbook one.

Example:
    >>> from ccsynth.collectives.spec import Collective
    >>> from ccsynth.topologies.model import Switch, Topology
    >>> t = Topology("sw3", 3, switches=(Switch("sw", (0, 1, 2), 10.0, 1.0),))
    >>> s = build(Collective("alltoall", 3), t)
    >>> sum(op.kind == "send" for op in s.ops), s.meta["relayed"]
    (6, 0)
"""

from __future__ import annotations

from itertools import islice, pairwise
from collections.abc import Iterator

import networkx as nx

from ccsynth.collectives.builder import ScheduleBuilder
from ccsynth.collectives.schedule import Schedule
from ccsynth.collectives.spec import Collective
from ccsynth.errors import CollectiveError
from ccsynth.synth.baselines._util import check_sizes, split
from ccsynth.topologies.model import Topology

__all__ = ["NAME", "KINDS", "DESCRIPTION", "pairs", "check", "rounds", "Router", "build"]

NAME = "direct"
KINDS = ("alltoall", "allgather", "reduce_scatter", "allreduce", "gather", "scatter", "broadcast", "reduce")
DESCRIPTION = ("every piece sent straight to its destination (relayed along shortest paths where no link exists): "
               "alltoall and all other kinds")

# Shortest paths considered per relayed pair when balancing link load.
_PATHS_PER_PAIR = 16


def pairs(collective: Collective) -> list[tuple[int, int]]:
    """Every ``(src, dst)`` that exchanges data, in the order they are routed."""
    n, root, kind = collective.n_ranks, collective.root, collective.kind
    if kind in ("gather", "reduce"):
        return [((root + k) % n, root) for k in range(1, n)]
    if kind in ("scatter", "broadcast"):
        return [(root, (root + k) % n) for k in range(1, n)]
    return [(r, d) for _, r, d in rounds(n)]


def check(collective: Collective, topology: Topology) -> None:
    check_sizes(NAME, collective, topology)
    if collective.kind not in KINDS:
        raise CollectiveError(f"{NAME} does not implement {collective.kind}; it implements {', '.join(KINDS)}")
    reach: dict[int, set[int]] = {}
    for a, b in pairs(collective):
        if topology.has_connection(a, b):
            continue
        if a not in reach:
            reach[a] = nx.descendants(topology.graph, a)
        if b not in reach[a]:
            raise CollectiveError(f"{NAME}: rank {a} cannot reach rank {b} in topology {topology.name!r}")


def rounds(n: int):
    """``(k, r, (r + k) % n)`` for every round ``k`` and rank ``r``."""
    for k in range(1, n):
        for r in range(n):
            yield k, r, (r + k) % n


class Router:
    """Shortest-path routes with greedy link-load balancing, and relayed transfers."""

    def __init__(self, b: ScheduleBuilder, topology: Topology, scratch_base: int):
        self.b = b
        self.topology = topology
        self.g = topology.graph
        self.scratch_next: dict[int, int] = {}
        self.scratch_base = scratch_base
        self.load: dict[tuple[int, int], float] = {}  # chunks routed over each connection
        self._preds: dict[int, dict[int, list[int]]] = {}
        self.relayed = 0

    def _paths(self, a: int, d: int) -> Iterator[list[int]]:
        if a not in self._preds:
            self._preds[a] = nx.predecessor(self.g, a)
        preds = self._preds[a]

        def back(v: int) -> Iterator[list[int]]:
            if v == a:
                yield [a]
                return
            for u in sorted(preds[v]):
                for p in back(u):
                    yield p + [v]

        return back(d)

    def route(self, a: int, d: int, count: int) -> list[int]:
        if self.topology.has_connection(a, d):
            path = [a, d]
        else:
            def cost(p: list[int]):
                hops = list(pairwise(p))
                worst = max((self.load.get(h, 0.0) + count) / self.g.edges[h]["bw"] for h in hops)
                return worst, sum(self.load.get(h, 0.0) for h in hops)

            path = min(islice(self._paths(a, d), _PATHS_PER_PAIR), key=cost)
        for h in pairwise(path):
            self.load[h] = self.load.get(h, 0.0) + count
        return path

    def deliver(self, a: int, d: int, src: tuple[str, int, int], dst: tuple[str, int, int]) -> None:
        """Move ``src`` of rank ``a`` into ``dst`` of rank ``d`` (relayed if needed)."""
        buf, idx, count = src
        path = self.route(a, d, count)
        if len(path) == 2:
            self.b.transfer(a, d, src, dst)
            return
        self.relayed += 1
        locs = [[(buf, idx + j) for j in range(count)]]
        for v in path[1:-1]:
            base = self.scratch_base + self.scratch_next.get(v, 0)
            self.scratch_next[v] = self.scratch_next.get(v, 0) + count
            locs.append([("s", base + j) for j in range(count)])
        locs.append([(dst[0], dst[1] + j) for j in range(count)])
        for j in range(count):  # chunk by chunk, so the hops pipeline
            for h, (u, v) in enumerate(pairwise(path)):
                s_buf, s_idx = locs[h][j]
                d_buf, d_idx = locs[h + 1][j]
                self.b.transfer(u, v, (s_buf, s_idx, 1), (d_buf, d_idx, 1))


def build(collective: Collective, topology: Topology) -> Schedule:
    """The direct schedule (unverified)."""
    check(collective, topology)
    n, c, root, kind = collective.n_ranks, collective.chunk_factor, collective.root, collective.kind
    b = ScheduleBuilder(collective, NAME, topology=topology.name)
    # scratch slots 0 .. (n-1)*c hold received contributions; relays use what follows
    net = Router(b, topology, (n - 1) * c if collective.is_reducing else 0)
    if kind == "alltoall":
        for r in range(n):
            b.copy(r, ("i", r * c, c), ("o", r * c, c))
        for _, r, d in rounds(n):
            net.deliver(r, d, ("i", d * c, c), ("o", r * c, c))
    elif kind == "allgather":
        for r in range(n):
            b.copy(r, ("i", 0, c), ("o", r * c, c))
        for _, r, d in rounds(n):
            net.deliver(r, d, ("i", 0, c), ("o", r * c, c))
    elif kind == "reduce_scatter":
        # peer (d - k) % n lands in scratch slot k - 1 of rank d
        for k, r, d in rounds(n):
            net.deliver(r, d, ("i", d * c, c), ("s", (k - 1) * c, c))
        for d in range(n):
            b.copy(d, ("i", d * c, c), ("o", 0, c))
            for k in range(1, n):
                b.reduce(d, ("s", (k - 1) * c, c), ("o", 0, c))
    elif kind == "allreduce":
        blocks = [(blk[0], len(blk)) if blk else None for blk in split(range(c), n)]
        for r in range(n):
            b.copy(r, ("i", 0, c), ("o", 0, c))
        for k, r, d in rounds(n):
            if blk := blocks[d]:
                start, cnt = blk
                net.deliver(r, d, ("i", start, cnt), ("s", (k - 1) * c + start, cnt))
        for d in range(n):
            if blk := blocks[d]:
                start, cnt = blk
                for k in range(1, n):
                    b.reduce(d, ("s", (k - 1) * c + start, cnt), ("o", start, cnt))
        for _, r, d in rounds(n):
            if blk := blocks[r]:
                start, cnt = blk
                net.deliver(r, d, ("o", start, cnt), ("o", start, cnt))
    elif kind == "gather":
        b.copy(root, ("i", 0, c), ("o", root * c, c))
        for q, _ in pairs(collective):
            net.deliver(q, root, ("i", 0, c), ("o", q * c, c))
    elif kind == "scatter":
        b.copy(root, ("i", root * c, c), ("o", 0, c))
        for _, q in pairs(collective):
            net.deliver(root, q, ("i", q * c, c), ("o", 0, c))
    elif kind == "broadcast":
        b.copy(root, ("i", 0, c), ("o", 0, c))
        for _, q in pairs(collective):
            net.deliver(root, q, ("i", 0, c), ("o", 0, c))
    else:  # reduce
        b.copy(root, ("i", 0, c), ("o", 0, c))
        for k, (q, _) in enumerate(pairs(collective), start=1):
            net.deliver(q, root, ("i", 0, c), ("s", (k - 1) * c, c))
        for k in range(1, n):
            b.reduce(root, ("s", (k - 1) * c, c), ("o", 0, c))
    return b.build(algorithm=NAME, relayed=net.relayed)
