"""Recursive doubling and recursive halving (Thakur, Rabenseifner and Gropp).

* ``recursive_doubling``: allgather (each step exchanges everything gathered
  so far with the partner ``r XOR 2^k``, ``k = 0, 1, ...``) and allreduce
  (each step exchanges the whole buffer and reduces; latency-optimal, for
  small messages).
* ``recursive_halving``: reduce-scatter (each step sends the half of the
  remaining blocks that the partner ``r XOR 2^k``, ``k`` falling, keeps) and
  allreduce as Rabenseifner's algorithm: halving reduce-scatter then
  doubling allgather over ``2^k`` blocks of the buffer (bandwidth-optimal).

Rank counts that are not a power of two fold into the largest power of two
``P <= n`` (MPICH's approach): each extra rank ``P + i`` first hands its data
to rank ``i`` (reduce-scatter and allreduce add it in, allgather stores it),
the ``P`` ranks run the power-of-two algorithm with rank ``i`` also speaking
for ``P + i``, and rank ``i`` finally passes the result on to ``P + i``.
Partners must be directly connected in the topology; where a needed link is
missing the algorithm is not applicable.

Example:
    >>> from ccsynth.collectives.spec import Collective
    >>> len(pairs(Collective("allgather", 6)))  # fold pairs 0<->4, 1<->5 and the 4-rank exchanges
    12
"""

from __future__ import annotations

from ccsynth.collectives.builder import ScheduleBuilder
from ccsynth.collectives.schedule import Schedule
from ccsynth.collectives.spec import Collective
from ccsynth.errors import CollectiveError
from ccsynth.synth.baselines._util import (
    Places,
    check_sizes,
    own_block_home,
    piece,
    pow2_floor,
    put_own_pieces,
    require_links,
    split,
)
from ccsynth.topologies.model import Topology

__all__ = [
    "DOUBLING",
    "HALVING",
    "DOUBLING_KINDS",
    "HALVING_KINDS",
    "DOUBLING_DESCRIPTION",
    "HALVING_DESCRIPTION",
    "pairs",
    "check_doubling",
    "check_halving",
    "build_doubling",
    "build_halving",
]

DOUBLING = "recursive_doubling"
HALVING = "recursive_halving"
DOUBLING_KINDS = ("allgather", "allreduce")
HALVING_KINDS = ("reduce_scatter", "allreduce")
DOUBLING_DESCRIPTION = "exchange with partner r XOR 2^k, k rising: allgather, allreduce (latency-optimal); folds non-powers of two"
HALVING_DESCRIPTION = "recursive halving reduce-scatter; allreduce as Rabenseifner (halving RS + doubling AG); folds non-powers of two"


def pairs(collective: Collective) -> set[tuple[int, int]]:
    """Every directed ``(src, dst)`` the algorithm sends on (both directions)."""
    n = collective.n_ranks
    P = pow2_floor(n)
    out = set()
    for i in range(n - P):
        out |= {(i, P + i), (P + i, i)}
    d = 1
    while d < P:
        for v in range(P):
            out.add((v, v ^ d))
        d <<= 1
    return out


def _check(name: str, kinds: tuple[str, ...], collective: Collective, topology: Topology) -> None:
    check_sizes(name, collective, topology)
    if collective.kind not in kinds:
        raise CollectiveError(f"{name} does not implement {collective.kind}; it implements {', '.join(kinds)}")
    require_links(name, "(partners r XOR 2^k, extra ranks P+i paired with i)", topology, pairs(collective))


def check_doubling(collective: Collective, topology: Topology) -> None:
    _check(DOUBLING, DOUBLING_KINDS, collective, topology)


def check_halving(collective: Collective, topology: Topology) -> None:
    _check(HALVING, HALVING_KINDS, collective, topology)


def _members(v: int, P: int, n: int) -> list[int]:
    """Real ranks virtual rank ``v`` speaks for: itself and its extra ``P + v``."""
    return [v, P + v] if P + v < n else [v]


def _doubling_allgather(p: Places, n: int, c: int, P: int) -> None:
    rem = n - P
    for i in range(rem):
        p.send(P + i, i, piece(P + i, c))
    d = 1
    while d < P:
        for lo in range(0, P, 2 * d):
            for v, w in ((u, u + d) for u in range(lo, lo + d)):
                for a, b in ((v, w), (w, v)):
                    grp = a & ~(d - 1)
                    keys = [k for u in range(grp, grp + d) for q in _members(u, P, n) for k in piece(q, c)]
                    p.send(a, b, sorted(keys))
        d <<= 1
    for i in range(rem):
        p.send(i, P + i, range(n * c))


def _halving(p: Places, blocks_of, P: int, last_home=None) -> None:
    """Recursive halving over virtual ranks ``0..P-1``; ``blocks_of(v)`` = keys v ends with.

    ``last_home``, if given, replaces ``p.home`` for the last step (so the
    final sums land in the output while earlier partial sums stay in one
    contiguous scratch layout and each step is a single send).
    """
    d = P // 2
    while d >= 1:
        if d == 1 and last_home is not None:
            p.home = last_home
        for v in range(P):
            w = v ^ d
            if v > w:
                continue
            # after this step v keeps the half of its current range holding v
            size = 2 * d
            lo = v & ~(size - 1)
            half_v = range(lo, lo + d)
            half_w = range(lo + d, lo + size)
            p.send(v, w, [k for u in half_w for k in blocks_of(u)], reduce=True)
            p.send(w, v, [k for u in half_v for k in blocks_of(u)], reduce=True)
        d //= 2


def _doubling_gather_blocks(p: Places, blocks_of, P: int) -> None:
    d = 1
    while d < P:
        for v in range(P):
            w = v ^ d
            if v > w:
                continue
            for a, b in ((v, w), (w, v)):
                grp = a & ~(d - 1)
                p.send(a, b, [k for u in range(grp, grp + d) for k in blocks_of(u)])
        d <<= 1


def build_doubling(collective: Collective, topology: Topology) -> Schedule:
    """Recursive doubling allgather / allreduce (unverified)."""
    check_doubling(collective, topology)
    n, c = collective.n_ranks, collective.chunk_factor
    P = pow2_floor(n)
    rem = n - P
    b = ScheduleBuilder(collective, DOUBLING, topology=topology.name)
    if collective.kind == "allgather":
        p = Places(b, lambda r, k: ("o", k))
        put_own_pieces(p, n, c)
        for r in range(n):  # own piece into place first, so each exchange is one contiguous send
            p.settle(r, piece(r, c))
        _doubling_allgather(p, n, c, P)
    else:  # allreduce: whole-buffer exchanges, received into scratch and reduced
        for r in range(n):
            b.copy(r, ("i", 0, c), ("o", 0, c))
        for i in range(rem):
            b.transfer(P + i, i, ("i", 0, c), ("o", 0, c), reduce=True)
        d = 1
        while d < P:
            for v in range(P):
                w = v ^ d
                if v < w:
                    b.transfer(v, w, ("o", 0, c), ("s", 0, c))
                    b.transfer(w, v, ("o", 0, c), ("s", 0, c))
                    b.reduce(v, ("s", 0, c), ("o", 0, c))
                    b.reduce(w, ("s", 0, c), ("o", 0, c))
            d <<= 1
        for i in range(rem):
            b.transfer(i, P + i, ("o", 0, c), ("o", 0, c))
    return b.build(algorithm=DOUBLING, power_of_two=P)


def build_halving(collective: Collective, topology: Topology) -> Schedule:
    """Recursive halving reduce-scatter / Rabenseifner allreduce (unverified)."""
    check_halving(collective, topology)
    n, c = collective.n_ranks, collective.chunk_factor
    P = pow2_floor(n)
    rem = n - P
    b = ScheduleBuilder(collective, HALVING, topology=topology.name)
    if collective.kind == "reduce_scatter":
        home = own_block_home(c)
        p = Places(b, lambda r, k: ("s", k))
        for r in range(n):
            for k in range(n * c):
                p.put(r, k, ("i", k))
        for i in range(rem):
            p.send(P + i, i, range(n * c), reduce=True)
        _halving(p, lambda v: [k for q in _members(v, P, n) for k in piece(q, c)], P, last_home=home)
        p.home = home
        for i in range(rem):
            p.send(i, P + i, piece(P + i, c))
        for r in range(n):
            p.settle(r, piece(r, c))
    else:  # allreduce (Rabenseifner)
        p = Places(b, lambda r, k: ("o", k))
        for r in range(n):
            for k in range(c):
                p.put(r, k, ("i", k))
        for i in range(rem):
            p.send(P + i, i, range(c), reduce=True)
        blocks = split(range(c), P)
        _halving(p, lambda v: blocks[v], P)
        _doubling_gather_blocks(p, lambda v: blocks[v], P)
        for i in range(rem):
            p.send(i, P + i, range(c))
        for r in range(n):
            p.settle(r, range(c))
    return b.build(algorithm=HALVING, power_of_two=P)
