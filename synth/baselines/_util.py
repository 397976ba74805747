"""Shared pieces of the baseline algorithms.

* :class:`Places` -- where the current value of each *logical* chunk lives on
  each rank, so that one algorithm body serves several collectives (a ring
  reduce-scatter accumulates into scratch for ``reduce_scatter`` and into the
  output for ``allreduce``). Moves through a :class:`Places` are emitted on a
  :class:`~ccsynth.collectives.builder.ScheduleBuilder`, merging neighbouring
  chunks into one operation where asked.
* ring primitives (:func:`ring_allgather`, :func:`ring_reduce_scatter`) over
  an arbitrary ring order and arbitrary pieces;
* ring discovery (:func:`find_ring`): a Hamiltonian cycle of the topology's
  directed connection graph through a set of ranks;
* small helpers (:func:`split`, :func:`pow2_floor`, ...).

A *key* is a chunk index in the algorithm's logical space (for allgather the
output index, for reduce-scatter the input index, for allreduce the buffer
index). ``home(rank, key)`` says where the rank keeps ``key`` when it
receives or accumulates it: ``("o", j)`` or ``("s", j)``.
"""

from __future__ import annotations

import logging
from collections import deque
from contextlib import contextmanager
from functools import lru_cache
from collections.abc import Callable, Iterable, Iterator, Sequence

from ccsynth.collectives.builder import ScheduleBuilder
from ccsynth.collectives.spec import Collective
from ccsynth.errors import CollectiveError
from ccsynth.topologies.model import Topology
import itertools

__all__ = [
    "RING_SEARCH_BUDGET",
    "split",
    "pow2_floor",
    "is_pow2",
    "lowbit",
    "piece",
    "check_sizes",
    "missing_links",
    "require_links",
    "Places",
    "runs",
    "ring_allgather",
    "ring_reduce_scatter",
    "chain_broadcast",
    "chain_reduce",
    "own_block_home",
    "put_own_pieces",
    "ring_collective",
    "is_ring",
    "successors",
    "gray_order",
    "odd_torus_order",
    "search_ring",
    "find_ring",
    "require_ring",
    "rotate",
]

log = logging.getLogger(__name__)

Loc = tuple[str, int]  # (buffer, chunk index) on one rank
Home = Callable[[int, int], Loc]

# Budget (search steps) of the bounded Hamiltonian-cycle search: large enough
# for the catalog's fabrics (a few hundred ranks with a natural order, tens
# of ranks searched), small enough to answer "no ring" in well under a second.
RING_SEARCH_BUDGET = 200_000


# ---------------------------------------------------------------- arithmetic
def split(keys: Sequence[int], parts: int) -> list[list[int]]:
    """Cut ``keys`` into ``parts`` consecutive, near-equal lists (some may be empty).

    >>> split(list(range(5)), 3)
    [[0, 1], [2, 3], [4]]
    >>> split([7], 3)
    [[7], [], []]
    """
    keys = list(keys)
    q, r = divmod(len(keys), parts)
    out, pos = [], 0
    for p in range(parts):
        size = q + (1 if p < r else 0)
        out.append(keys[pos : pos + size])
        pos += size
    return out


def pow2_floor(n: int) -> int:
    """The largest power of two not above ``n`` (n >= 1)."""
    return 1 << (n.bit_length() - 1)


def is_pow2(n: int) -> bool:
    return n >= 1 and n & (n - 1) == 0


def lowbit(x: int) -> int:
    return x & -x


def piece(rank: int, c: int) -> list[int]:
    """Keys of rank ``rank``'s piece of ``c`` chunks: ``rank*c .. rank*c+c-1``."""
    return list(range(rank * c, rank * c + c))


def check_sizes(name: str, collective: Collective, topology: Topology) -> None:
    if collective.n_ranks != topology.n_ranks:
        raise CollectiveError(
            f"{name}: the collective has {collective.n_ranks} ranks but topology {topology.name!r} has {topology.n_ranks}"
        )


def missing_links(topology: Topology, pairs: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """The ``(src, dst)`` pairs among ``pairs`` that have no connection."""
    return sorted({(a, b) for a, b in pairs if a != b and not topology.has_connection(a, b)})


def require_links(name: str, what: str, topology: Topology, pairs: Iterable[tuple[int, int]]) -> None:
    """Raise :class:`CollectiveError` naming the first missing connections."""
    miss = missing_links(topology, pairs)
    if miss:
        shown = ", ".join(f"{a}->{b}" for a, b in miss[:4]) + (" ..." if len(miss) > 4 else "")
        raise CollectiveError(f"{name} {what} needs connections that topology {topology.name!r} lacks: {shown}")


# -------------------------------------------------------------------- places
class Places:
    """Current location of every (rank, key) value, and moves that update it."""

    def __init__(self, builder: ScheduleBuilder, home: Home, channel: int = 0):
        self.b = builder
        self.home = home
        self.channel = channel  # channel of the transfers emitted (one per ring in multi-ring)
        self._at: dict[tuple[int, int], Loc] = {}
        #: the pacing window (0: unpaced): each send waits for the send that many before it on its (src, dst)
        #: pair, the last ``window`` send ids of every pair kept (see :meth:`paced`)
        self._paced = 0
        self._last: dict[tuple[int, int], deque[int]] = {}

    @contextmanager
    def paced(self, window: int = 1) -> Iterator[None]:
        """Within the block, each pair's sends go in about the order they are written: each waits for the
        send ``window`` before it on its (src, dst) pair.

        The simulator and the executor start whichever transfer of a pair is
        ready; pacing keeps later rounds of an algorithm from sharing a
        link with the round that the next stage is waiting for, while a
        window above 1 keeps a few sends in flight (their latencies overlap).
        """
        if window < 1:
            raise ValueError(f"pacing window must be at least 1, got {window}")
        self._paced, self._last = window, {}
        try:
            yield
        finally:
            self._paced, self._last = 0, {}

    def _transfer(self, src: int, dst: int, s, d, reduce: bool) -> None:
        if not self._paced:
            self.b.transfer(src, dst, s, d, reduce=reduce, channel=self.channel)
            return
        sent = self._last.get((src, dst))
        if sent is None:
            sent = self._last[(src, dst)] = deque(maxlen=self._paced)
        before = sent[0] if len(sent) == self._paced else None
        sid, _ = self.b.transfer(src, dst, s, d, reduce=reduce, channel=self.channel,
                                 send_deps=() if before is None else (before,))
        sent.append(sid)

    def put(self, rank: int, key: int, loc: Loc) -> None:
        self._at[(rank, key)] = loc

    def at(self, rank: int, key: int) -> Loc:
        try:
            return self._at[(rank, key)]
        except KeyError:
            raise CollectiveError(f"internal: rank {rank} holds no value for chunk {key}") from None

    def has(self, rank: int, key: int) -> bool:
        return (rank, key) in self._at

    def settle(self, rank: int, keys: Iterable[int]) -> None:
        """Copy ``keys`` to their home on ``rank`` where they are elsewhere."""
        pairs = []
        for k in keys:
            h = self.home(rank, k)
            cur = self.at(rank, k)
            if cur != h:
                pairs.append((cur, h))
                self._at[(rank, k)] = h
        for src, dst in runs(pairs):
            self.b.copy(rank, src, dst)

    def send(self, src: int, dst: int, keys: Iterable[int], *, reduce: bool = False, merge: bool = True) -> None:
        """Move ``keys`` from ``src`` (wherever they are) to their home on ``dst``.

        With ``reduce`` the values are combined into what ``dst`` holds (its
        own value is first settled at home). ``merge`` sends runs of
        neighbouring chunks as one operation; without it every chunk is its
        own send, so that a forwarding rank can pass chunk ``j`` on while
        ``j+1`` is still arriving (pipelining).
        """
        keys = list(keys)
        if not keys:
            return
        if len(keys) == 1:  # the same ops as below without their lists (millions of single-chunk sends)
            self._send_one(src, dst, keys[0], reduce)
            return
        if reduce:
            self.settle(dst, keys)
        where, home = self._at, self.home
        pairs = []
        for k in keys:
            cur = where.get((src, k))
            h = home(dst, k)
            pairs.append((cur if cur is not None else self.at(src, k), h))  # at() names a missing value
            where[(dst, k)] = h  # src != dst: no pair still to come reads it
        for s, d in (runs(pairs) if merge else [((a, b, 1), (c, e, 1)) for (a, b), (c, e) in pairs]):
            self._transfer(src, dst, s, d, reduce)


    def _send_one(self, src: int, dst: int, k: int, reduce: bool) -> None:
        """:meth:`send` of the one chunk ``k`` (merged or not: one run)."""
        where, home, b = self._at, self.home, self.b
        h = home(dst, k)
        if reduce:  # settle(dst, [k])
            cur = where.get((dst, k))
            if cur is None:
                cur = self.at(dst, k)  # names the missing value
            if cur != h:
                where[(dst, k)] = h
                b.copy(dst, (cur[0], cur[1], 1), (h[0], h[1], 1))
        cur = where.get((src, k))
        if cur is None:
            cur = self.at(src, k)
        where[(dst, k)] = h
        if self._paced:
            self._transfer(src, dst, (cur[0], cur[1], 1), (h[0], h[1], 1), reduce)
        else:
            b.transfer(src, dst, (cur[0], cur[1], 1), (h[0], h[1], 1), reduce=reduce, channel=self.channel)


def runs(pairs: Sequence[tuple[Loc, Loc]]) -> list[tuple[tuple[str, int, int], tuple[str, int, int]]]:
    """Merge ``(src, dst)`` location pairs into ranges contiguous on both sides.

    >>> runs([(("i", 0), ("o", 4)), (("i", 1), ("o", 5)), (("o", 9), ("o", 2))])
    [(('i', 0, 2), ('o', 4, 2)), (('o', 9, 1), ('o', 2, 1))]
    """
    out: list[list] = []
    for (sb, si), (db, di) in pairs:
        if out:
            last = out[-1]
            if last[0] == sb and last[1] + last[4] == si and last[2] == db and last[3] + last[4] == di:
                last[4] += 1
                continue
        out.append([sb, si, db, di, 1])
    return [((sb, si, n), (db, di, n)) for sb, si, db, di, n in out]


# --------------------------------------------------------------------- rings
def ring_allgather(places: Places, order: Sequence[int], pieces: Sequence[Sequence[int]], *, merge: bool = False) -> None:
    """Ring allgather: position ``p`` starts with ``pieces[p]``; all end with all.

    Step ``s`` has position ``i`` forward the piece of position ``i - s`` to
    ``i + 1``; pieces travel chunk by chunk (``merge=False``) so that they
    pipeline around the ring.
    """
    m = len(order)
    for s in range(m - 1):
        for i in range(m):
            places.send(order[i], order[(i + 1) % m], pieces[(i - s) % m], merge=merge)


def ring_reduce_scatter(places: Places, order: Sequence[int], pieces: Sequence[Sequence[int]], *, merge: bool = False) -> None:
    """Ring reduce-scatter: position ``p`` ends with the full reduction of ``pieces[p]``.

    The partial sum of the piece owned by position ``p`` starts at ``p + 1``
    and travels the ring once, each rank adding its own value with a fused
    receive-reduce into its home location.
    """
    m = len(order)
    for s in range(m - 1):
        for i in range(m):
            places.send(order[i], order[(i + 1) % m], pieces[(i - s - 1) % m], reduce=True, merge=merge)


def chain_broadcast(places: Places, chain: Sequence[int], keys: Sequence[int]) -> None:
    """Pipelined broadcast down ``chain`` (``chain[0]`` holds ``keys``), chunk by chunk."""
    for k in keys:
        for a, b in itertools.pairwise(chain):
            places.send(a, b, [k])


def chain_reduce(places: Places, chain: Sequence[int], keys: Sequence[int]) -> None:
    """Pipelined reduction along ``chain``: ``chain[-1]`` ends with the sum."""
    for k in keys:
        for a, b in itertools.pairwise(chain):
            places.send(a, b, [k], reduce=True)


# ------------------------------------------------------------ ring discovery
def own_block_home(c: int) -> Home:
    """Where a reduce-scatter (or scatter) keeps chunk ``k`` on rank ``r``: its own block in ``o``, the rest in scratch."""
    def home(r: int, k: int) -> Loc:
        return ("o", k - r * c) if r * c <= k < (r + 1) * c else ("s", k)

    return home


def put_own_pieces(p: Places, n: int, c: int) -> None:
    """Allgather's start: rank ``r`` holds piece ``r`` (chunks ``r*c ..``) in its input."""
    for r in range(n):
        for j in range(c):
            p.put(r, r * c + j, ("i", j))


def ring_collective(b: ScheduleBuilder, collective: Collective, rings: Sequence[Sequence[int]]) -> None:
    """Write ``collective`` run over ``rings`` at once into ``b`` (allgather, reduce-scatter, allreduce,
    broadcast, reduce).

    Ring ``k`` runs on channel ``k`` and carries the ``k``-th of ``len(rings)``
    near-equal groups of every piece's chunks (allreduce: of the buffer's
    chunks); with one ring this is the classic ring algorithm. Each ring is a
    list of ranks in ring order.
    """
    n, c, kind, root = collective.n_ranks, collective.chunk_factor, collective.kind, collective.root
    groups = split(range(c), len(rings))  # chunk offsets within a piece, per ring

    if kind in ("allgather", "reduce_scatter"):
        if kind == "allgather":
            p, step = Places(b, lambda r, k: ("o", k)), ring_allgather
            put_own_pieces(p, n, c)
        else:
            p, step = Places(b, own_block_home(c)), ring_reduce_scatter
            for r in range(n):
                for k in range(n * c):
                    p.put(r, k, ("i", k))
        for ch, (order, grp) in enumerate(zip(rings, groups)):
            p.channel = ch
            step(p, order, [[q * c + j for j in grp] for q in order])
        for r in range(n):
            p.settle(r, piece(r, c))
    elif kind == "allreduce":
        p = Places(b, lambda r, k: ("o", k))
        for r in range(n):
            for k in range(c):
                p.put(r, k, ("i", k))
        for ch, (order, grp) in enumerate(zip(rings, groups)):
            p.channel = ch
            blocks = split(grp, n)
            ring_reduce_scatter(p, order, blocks)
            ring_allgather(p, order, blocks)
        for r in range(n):
            p.settle(r, range(c))
    elif kind == "broadcast":
        p = Places(b, lambda r, k: ("o", k))
        for k in range(c):
            p.put(root, k, ("i", k))
        for ch, (order, grp) in enumerate(zip(rings, groups)):
            p.channel = ch
            chain_broadcast(p, rotate(order, root), grp)
        p.settle(root, range(c))
    else:  # reduce
        p = Places(b, lambda r, k: ("o", k) if r == root else ("s", k))
        for r in range(n):
            for k in range(c):
                p.put(r, k, ("i", k))
        for ch, (order, grp) in enumerate(zip(rings, groups)):
            p.channel = ch
            chain_reduce(p, rotate(order, root)[1:] + [root], grp)
        p.settle(root, range(c))


def is_ring(topology: Topology, order: Sequence[int]) -> bool:
    """True if ``order`` is a cycle of connections of ``topology``."""
    m = len(order)
    if m <= 1:
        return True
    return all(topology.has_connection(order[i], order[(i + 1) % m]) for i in range(m))


def successors(topology: Topology, members: Iterable[int] | None = None) -> dict[int, list[int]]:
    """rank -> sorted ranks it has a connection to (within ``members`` if given)."""
    keep = frozenset(range(topology.n_ranks) if members is None else members)
    # the members' own neighbours (ascending), not every connection: a ring through 8 of 256 ranks asks 8 ranks
    return {r: [d for d in topology.neighbors_out(r) if d in keep] for r in sorted(keep)}


def _strides(sizes: Sequence[int]) -> list[int]:
    strides = [1] * len(sizes)
    for d in range(1, len(sizes)):
        strides[d] = strides[d - 1] * sizes[d - 1]
    return strides


def _snake(sizes: Sequence[int], strides: Sequence[int], dims: Sequence[int]) -> list[int]:
    """Reflected (boustrophedon) walk over the grid of ``dims``, the first fastest: a Hamiltonian path."""
    order: list[int] = [0]
    for d in dims:
        prev = order
        order = []
        for v in range(sizes[d]):
            part = prev if v % 2 == 0 else prev[::-1]
            order += [r + v * strides[d] for r in part]
    return order


def gray_order(sizes: Sequence[int]) -> tuple[int, ...] | None:
    """Ranks of a mixed-radix grid (dimension 0 fastest) in reflected Gray-code order.

    Consecutive ranks differ in one coordinate by one; an even-sized
    dimension is moved outermost so that the last rank differs from rank 0
    in that coordinate only (adjacent on a torus with wrap-around, or on a
    switched dimension). None if every dimension has an odd size.

    >>> gray_order([2, 4])
    (0, 1, 3, 2, 4, 5, 7, 6)
    """
    sizes = list(sizes)
    even = [d for d in range(len(sizes)) if sizes[d] % 2 == 0]
    if not even:
        return None
    dims = [d for d in range(len(sizes)) if d != even[-1]] + [even[-1]]
    return tuple(_snake(sizes, _strides(sizes), dims))


def odd_torus_order(sizes: Sequence[int]) -> tuple[int, ...] | None:
    """A cycle through a grid whose every dimension is odd, using dimension 0's wrap-around once.

    Column 0 of dimension 0 is kept for the way back: the walk snakes through
    columns ``1..C-1`` row by row (rows = the other dimensions in reflected
    order), steps from the last row's column ``C-1`` over the wrap-around to
    its column 0, and climbs column 0 back to the first row, next to where it
    started. Every step changes one coordinate by one (or wraps dimension 0),
    so on a torus consecutive ranks are neighbours. None for fewer than two
    dimensions or a dimension 0 of size below 3.

    >>> odd_torus_order([3, 3])
    (1, 2, 5, 4, 7, 8, 6, 3, 0)
    """
    sizes = list(sizes)
    if len(sizes) < 2 or sizes[0] < 3:
        return None
    strides = _strides(sizes)
    rows = _snake(sizes, strides, range(1, len(sizes)))
    c = sizes[0]
    order: list[int] = []
    for i, row in enumerate(rows):
        cols = range(1, c) if i % 2 == 0 else range(c - 1, 0, -1)
        order += [row + k for k in cols]
    order += list(reversed(rows))
    return tuple(order)


class _Budget:
    def __init__(self, steps: int):
        self.left = steps

    def spend(self) -> bool:
        self.left -= 1
        return self.left >= 0


def _ham_paths(succ: dict[int, list[int]], start: int, end: int | None, members: frozenset[int], budget: _Budget,
               close_to: int | None = None) -> Iterator[list[int]]:
    """Hamiltonian paths over ``members`` from ``start`` (to ``end`` if given).

    With ``close_to`` the last vertex must have an edge to ``close_to``
    (a cycle when ``close_to == start``). Depth-first, trying successors with
    the fewest onward choices first (Warnsdorff's rule), then the lowest id;
    stops when ``budget`` runs out.
    """
    total = len(members)
    path = [start]
    seen = {start}

    def done(v: int) -> bool:
        if end is not None and v != end:
            return False
        return close_to is None or total == 1 or close_to in succ[v]

    def cands(v: int) -> Iterator[int]:
        out = [w for w in succ[v] if w in members and w not in seen and (w != end or len(path) == total - 1)]
        out.sort(key=lambda w: (sum(1 for x in succ[w] if x in members and x not in seen), w))
        return iter(out)

    if total == 1:
        if done(start):
            yield [start]
        return
    if not budget.spend():
        return
    # iterative depth-first search: stack[i] walks the candidates after path[i]
    # (no recursion, so thousands of ranks do not hit Python's recursion limit)
    stack = [cands(start)]
    while stack:
        w = next(stack[-1], None)
        if w is None:
            stack.pop()
            if stack:
                seen.discard(path.pop())
            continue
        path.append(w)
        seen.add(w)
        if len(path) == total:
            if done(w):
                yield list(path)
            seen.discard(path.pop())
        elif budget.spend():
            stack.append(cands(w))
        else:
            return


def _ham_path(succ, start, end, members, budget, close_to=None) -> list[int] | None:
    return next(_ham_paths(succ, start, end, members, budget, close_to), None)


@lru_cache(maxsize=256)
def _find_ring_cached(topology: Topology, ranks: tuple[int, ...]) -> tuple[int, ...] | None:
    if len(ranks) == topology.n_ranks and topology.dims:
        sizes = [d.size for d in topology.dims]
        for grid in (gray_order(sizes), odd_torus_order(sizes)):
            if grid is not None and is_ring(topology, grid) and not is_ring(topology, tuple(range(topology.n_ranks))):
                return grid
    members = frozenset(ranks)
    succ = successors(topology, members)
    found = search_ring(succ, topology.nodes, RING_SEARCH_BUDGET)
    if found is None:
        log.debug("topology %s: no ring through %d ranks found", topology.name, len(ranks))
    return found


def _strongly_connected(succ: dict[int, list[int]]) -> bool:
    start = next(iter(succ))
    pred: dict[int, list[int]] = {v: [] for v in succ}
    for v, ws in succ.items():
        for w in ws:
            pred[w].append(v)
    for adj in (succ, pred):
        seen, stack = {start}, [start]
        while stack:
            for w in adj[stack.pop()]:
                if w not in seen:
                    seen.add(w)
                    stack.append(w)
        if len(seen) != len(succ):
            return False
    return True


def search_ring(succ: dict[int, list[int]], node_of: Sequence[int], budget_steps: int | _Budget) -> tuple[int, ...] | None:
    """A Hamiltonian cycle of the directed graph ``succ`` (vertex -> sorted successors).

    ``node_of[v]`` is the node (host) of vertex ``v``. Tries the natural
    order, its reverse, node-by-node paths joined across nodes, then a
    depth-first search, all within ``budget_steps`` search steps (a number,
    or a budget shared between searches).
    """
    ranks = tuple(sorted(succ))
    members = frozenset(ranks)
    if len(ranks) <= 1:
        return ranks
    succ = {r: [w for w in succ[r] if w in members and w != r] for r in ranks}
    sets = {r: set(v) for r, v in succ.items()}
    for order in (ranks, tuple(reversed(ranks))):
        if all(order[(i + 1) % len(order)] in sets[order[i]] for i in range(len(order))):
            return order
    if any(not v for v in succ.values()) or not _strongly_connected(succ):
        return None
    budget = budget_steps if isinstance(budget_steps, _Budget) else _Budget(budget_steps)
    nodes = sorted({node_of[r] for r in ranks})
    if len(nodes) > 1:
        found = _per_node_ring(node_of, ranks, nodes, succ, budget)
        if found is not None:
            return found
    start = ranks[0]
    path = _ham_path(succ, start, None, members, budget, close_to=start)
    if path is not None:
        return tuple(path)
    if budget.left < 0:
        log.debug("ring search ran out of search steps")
    return None


# How many orders of the nodes the multi-node ring search tries.
_NODE_ORDERS = 50


def _per_node_ring(node_of: Sequence[int], ranks, nodes, succ, budget: _Budget) -> tuple[int, ...] | None:
    """A ring that visits the nodes one after another, entering and leaving each once.

    First a cycle through the nodes (the natural order if the fabric allows
    it, else Hamiltonian cycles of the node graph), then, along that cycle,
    a dynamic programme over entry ranks: node ``k`` is crossed by a
    Hamiltonian path inside the node from its entry to an exit that has a
    connection to the next node's entry. This keeps the search polynomial
    where a plain depth-first search over ranks can get lost (e.g. a 3-level
    switched hierarchy of 128 ranks).
    """
    groups = {nd: [r for r in sorted(ranks) if node_of[r] == nd] for nd in nodes}
    inner = {nd: {r: [w for w in succ[r] if node_of[w] == nd] for r in groups[nd]} for nd in nodes}
    cache: dict[tuple[int, int, int], list[int] | None] = {}

    def path_in(nd: int, a: int, b: int) -> list[int] | None:
        key = (nd, a, b)
        if key not in cache:
            g = groups[nd]
            if len(g) == 1:
                cache[key] = [a] if a == b else None
            elif a == b:
                cache[key] = None
            else:
                cache[key] = _ham_path(inner[nd], a, b, frozenset(g), budget)
        return cache[key]

    def join(order: Sequence[int]) -> list[int] | None:
        first = order[0]
        for e0 in groups[first]:
            # reach[k]: entry rank of node order[k] -> (previous entry, path through node k-1); reach[0]
            # holds only e0, with a value the walk back below never reads
            reach: list[dict[int, tuple[int, list[int]]]] = [{e0: (e0, [])}]
            for k in range(1, len(order) + 1):
                nxt: dict[int, tuple[int, list[int]]] = {}
                nd = order[k - 1]
                target = order[k] if k < len(order) else first
                for e in reach[k - 1]:
                    for x in sorted(groups[nd], reverse=True):
                        if budget.left < 0:
                            return None
                        p = path_in(nd, e, x)
                        if p is None:
                            continue
                        for y in succ[x]:
                            if node_of[y] != target or y in nxt:
                                continue
                            if k == len(order) and y != e0:
                                continue
                            nxt[y] = (e, p)
                reach.append(nxt)
                if not nxt:
                    break
            if reach[-1] and len(reach) == len(order) + 1:
                out: list[list[int]] = []
                e = e0
                for k in range(len(order), 0, -1):
                    prev, p = reach[k][e]
                    out.append(p)
                    e = prev
                return [r for p in reversed(out) for r in p]
        return None

    node_succ = {nd: sorted({node_of[w] for r in groups[nd] for w in succ[r]} - {nd}) for nd in nodes}
    orders: list[Sequence[int]] = [nodes]
    if not all(nodes[(i + 1) % len(nodes)] in node_succ[nodes[i]] for i in range(len(nodes))):
        orders = []
    if len(nodes) > 2:
        cycles = _ham_paths(node_succ, nodes[0], None, frozenset(nodes), budget, close_to=nodes[0])
        orders = orders + [c for _, c in zip(range(_NODE_ORDERS), cycles)]
    for order in orders:
        got = join(order)
        if got is not None:
            return tuple(got)
        if budget.left < 0:
            break
    return None


def find_ring(topology: Topology, ranks: Sequence[int] | None = None) -> tuple[int, ...] | None:
    """A ring (Hamiltonian cycle of directed connections) through ``ranks``, or None.

    Tries the natural order, its reverse, node-by-node paths joined across
    nodes, then a bounded depth-first search. ``ranks`` defaults to all.

    >>> from ccsynth.topologies.model import Link, Topology
    >>> links = [Link(a, b, 1.0, 10.0) for a, b in [(0, 2), (2, 1), (1, 3), (3, 0)]]
    >>> find_ring(Topology("t", 4, links=tuple(links)))
    (0, 2, 1, 3)
    """
    ranks = tuple(range(topology.n_ranks)) if ranks is None else tuple(ranks)
    return _find_ring_cached(topology, ranks)


def require_ring(name: str, topology: Topology, ranks: Sequence[int] | None = None) -> tuple[int, ...]:
    order = find_ring(topology, ranks)
    if order is None:
        if ranks is None:
            raise CollectiveError(f"{name}: topology {topology.name!r} has no ring through all {topology.n_ranks} ranks")
        raise CollectiveError(f"{name}: topology {topology.name!r} has no ring through ranks {sorted(ranks)}")
    return order


def rotate(order: Sequence[int], first: int) -> list[int]:
    """``order`` as a cycle starting at ``first``."""
    i = list(order).index(first)
    return list(order[i:]) + list(order[:i])
