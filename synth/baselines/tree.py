"""Binomial trees rooted at the collective's root: broadcast, reduce, gather, scatter.

In *relative* ranks (the root is 0) the parent of ``v`` is ``v`` minus its
lowest set bit and its subtree is ``[v, v + lowbit(v))``; the root's subtree
is everything. Broadcast and scatter run the rounds from the largest
distance down (the root serves its biggest subtree first), reduce and gather
from distance 1 up (a parent first hears from its smallest subtree, which is
ready first). Broadcast and reduce are pipelined: every chunk is its own
message, so chunk ``j`` moves down (up) the tree while ``j + 1`` follows.

Relative ranks map to real ranks by ``(v + root) % n`` (as MPICH does) or,
for power-of-two ``n``, by ``v XOR root`` -- which keeps every tree edge a
hypercube edge, so the tree fits cube-like fabrics (DGX-1) for any root. The
first mapping whose tree edges all exist in the topology is used.

Example:
    >>> from ccsynth.collectives.spec import Collective
    >>> from ccsynth.topologies.model import Switch, Topology
    >>> t = Topology("sw4", 4, switches=(Switch("sw", (0, 1, 2, 3), 10.0, 1.0),))
    >>> build(Collective("broadcast", 4, root=1), t).meta["mapping"]
    'shift'
"""

from __future__ import annotations

from collections.abc import Callable

from ccsynth.collectives.builder import ScheduleBuilder
from ccsynth.collectives.schedule import Schedule
from ccsynth.collectives.spec import Collective
from ccsynth.errors import CollectiveError
from ccsynth.synth.baselines._util import (
    Places,
    check_sizes,
    is_pow2,
    lowbit,
    missing_links,
    own_block_home,
    piece,
    put_own_pieces,
)
from ccsynth.topologies.model import Topology

__all__ = ["NAME", "KINDS", "DESCRIPTION", "check", "build"]

NAME = "binomial_tree"
KINDS = ("broadcast", "reduce", "gather", "scatter")
DESCRIPTION = "binomial tree from/to the root (log n rounds): broadcast and reduce pipelined by chunk, gather, scatter"

Mapping = Callable[[int], int]


def _edges(n: int) -> list[tuple[int, int, int]]:
    """``(distance, parent, child)`` of the binomial tree on relative ranks."""
    out = []
    for v in range(1, n):
        m = lowbit(v)
        out.append((m, v - m, v))
    return out


def _mappings(n: int, root: int) -> list[tuple[str, Mapping]]:
    maps: list[tuple[str, Mapping]] = [("shift", lambda v: (v + root) % n)]
    if is_pow2(n) and root != 0:
        maps.append(("xor", lambda v: v ^ root))
    return maps


def check(collective: Collective, topology: Topology) -> tuple[str, Mapping]:
    """The rank mapping to use; raises :class:`CollectiveError` if not applicable."""
    check_sizes(NAME, collective, topology)
    if collective.kind not in KINDS:
        raise CollectiveError(f"{NAME} does not implement {collective.kind}; it implements {', '.join(KINDS)}")
    n, root = collective.n_ranks, collective.root
    down = collective.kind in ("broadcast", "scatter")
    first_missing: list[tuple[int, int]] = []
    for name, f in _mappings(n, root):
        pairs = [(f(p), f(c)) if down else (f(c), f(p)) for _, p, c in _edges(n)]
        miss = missing_links(topology, pairs)
        if not miss:
            return name, f
        first_missing = first_missing or miss
    shown = ", ".join(f"{a}->{b}" for a, b in first_missing[:4])
    raise CollectiveError(
        f"{NAME}: the binomial tree rooted at rank {root} needs connections that topology {topology.name!r} lacks: {shown}"
    )


def _subtree(v: int, n: int) -> range:
    return range(n) if v == 0 else range(v, min(v + lowbit(v), n))


def build(collective: Collective, topology: Topology) -> Schedule:
    """The binomial-tree schedule (unverified)."""
    mapping, f = check(collective, topology)
    n, c, root, kind = collective.n_ranks, collective.chunk_factor, collective.root, collective.kind
    b = ScheduleBuilder(collective, NAME, topology=topology.name)
    edges = _edges(n)
    down = sorted(edges, key=lambda e: (-e[0], e[1]))  # largest distance first
    up = sorted(edges, key=lambda e: (e[0], e[1]))  # distance 1 first
    if kind == "broadcast":
        p = Places(b, lambda r, k: ("o", k))
        for k in range(c):
            p.put(root, k, ("i", k))
        for k in range(c):
            for _, par, ch in down:
                p.send(f(par), f(ch), [k])
        p.settle(root, range(c))
    elif kind == "reduce":
        p = Places(b, lambda r, k: ("o", k) if r == root else ("s", k))
        for r in range(n):
            for k in range(c):
                p.put(r, k, ("i", k))
        for k in range(c):
            for _, par, ch in up:
                p.send(f(ch), f(par), [k], reduce=True)
        p.settle(root, range(c))
    elif kind == "gather":
        p = Places(b, lambda r, k: ("o", k) if r == root else ("s", k))
        put_own_pieces(p, n, c)
        for _, par, ch in up:
            keys = sorted(k for v in _subtree(ch, n) for k in piece(f(v), c))
            if len(_subtree(ch, n)) > 1:
                p.settle(f(ch), piece(f(ch), c))  # own piece next to the received ones: fewer sends
            p.send(f(ch), f(par), keys)
        p.settle(root, piece(root, c))
    else:  # scatter
        p = Places(b, own_block_home(c))
        for k in range(n * c):
            p.put(root, k, ("i", k))
        for _, par, ch in down:
            keys = sorted(k for v in _subtree(ch, n) for k in piece(f(v), c))
            p.send(f(par), f(ch), keys)
        p.settle(root, piece(root, c))
    return b.build(algorithm=NAME, mapping=mapping)
