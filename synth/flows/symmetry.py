"""Translation symmetries of a topology: a group of automorphisms acting freely on the ranks.

Large machines repeat themselves: DGX nodes on rails, NDv2 nodes behind
NICs, tori, fat-trees. If a permutation of the ranks maps every connection
onto a connection and every bandwidth constraint onto one of equal
bandwidth, it maps every flow, cut and tree packing onto another of the same
value. Two consequences the tree packing uses:

* the max flow into two ranks of one orbit is the same, so the throughput
  test needs one sink per orbit (:mod:`~ccsynth.synth.flows.throughput`);
* the packing LP is invariant, so it has an optimal solution invariant
  under the group (average any optimum over the group): trees need to be
  found for one root per orbit only, the others are their images
  (:mod:`~ccsynth.synth.trees.packing`).

The group is built from *translations* of a mixed-radix coordinate system
(rank ``r`` has coordinates ``(r mod s0, (r div s0) mod s1, ...)``): the
topology's network dimensions, else its equal nodes (GPU within node, node),
else one cycle of all ranks. Adding 1 to coordinate ``d`` (mod its size) is a
generator; the generators that are automorphisms (checked) generate the
group, which is the set of shift vectors over those coordinates: abelian,
and acting freely (a non-zero shift moves every rank).

Example:
    >>> from ccsynth.topologies.catalog import ring
    >>> g = translations(ring(6))
    >>> g.order, g.representatives
    (6, (0,))
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from ccsynth.synth.distances import classes_disjoint
from ccsynth.topologies.model import Topology

__all__ = ["Translations", "translations", "is_automorphism", "FULL_CHECK_MAX_CONNECTIONS"]

#: above this many connections a generator that is not a structural automorphism is not checked pair by pair
FULL_CHECK_MAX_CONNECTIONS = 200_000


@dataclass(frozen=True)
class Translations:
    """Shifts of coordinates ``active`` of the mixed-radix system ``sizes`` (dimension 0 fastest)."""

    n: int
    sizes: tuple[int, ...]
    active: tuple[int, ...]

    @property
    def order(self) -> int:
        return math.prod(self.sizes[d] for d in self.active)

    def coords(self, r: int) -> tuple[int, ...]:
        out = []
        for s in self.sizes:
            out.append(r % s)
            r //= s
        return tuple(out)

    def rank(self, coords) -> int:
        r, stride = 0, 1
        for c, s in zip(coords, self.sizes):
            r += c * stride
            stride *= s
        return r

    def shift_of(self, r: int) -> tuple[int, ...]:
        """The group element (shift vector over all coordinates) that maps ``r``'s representative onto ``r``."""
        c = self.coords(r)
        return tuple(c[d] if d in self.active else 0 for d in range(len(self.sizes)))

    def rep_of(self, r: int) -> int:
        c = self.coords(r)
        return self.rank(tuple(0 if d in self.active else x for d, x in enumerate(c)))

    @property
    def representatives(self) -> tuple[int, ...]:
        return tuple(r for r in range(self.n) if self.rep_of(r) == r)

    def apply(self, shift: tuple[int, ...], r: int) -> int:
        c = self.coords(r)
        return self.rank(tuple((x + dx) % s for x, dx, s in zip(c, shift, self.sizes)))

    def permutation(self, shift: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(self.apply(shift, r) for r in range(self.n))

    def elements(self) -> list[tuple[int, ...]]:
        """Every shift vector of the group (the identity first)."""
        out = [tuple(0 for _ in self.sizes)]
        for d in self.active:
            out = [tuple((e[i] + k) if i == d else e[i] for i in range(len(e))) for k in range(self.sizes[d]) for e in out]
        return out


def _constraint_index(topology: Topology) -> dict[tuple[frozenset, frozenset], list[float]]:
    index: dict[tuple[frozenset, frozenset], list[float]] = {}
    for bc in topology.bandwidth_constraints():
        index.setdefault((bc.srcs, bc.dsts), []).append(bc.bw)
    for v in index.values():
        v.sort()
    return index


def _structure(topology: Topology) -> dict:
    """The topology's parts as rank sets with their parameters (what a structural automorphism must keep)."""
    leaf_names = {name for sp in topology.spines for name in sp.leaves}
    by_name = {sw.name: sw for sw in topology.switches}
    switches: dict[frozenset, list] = {}
    for sw in topology.switches:
        switches.setdefault(frozenset(sw.ranks), []).append((sw.bw, sw.alpha, sw.overhead, sw.name in leaf_names))
    spines: dict[frozenset, list] = {}
    for sp in topology.spines:
        leaves = frozenset(frozenset(by_name[name].ranks) for name in sp.leaves)
        spines.setdefault(leaves, []).append((sp.alpha, sp.overhead, sp.uplink_bw))
    ports: dict[tuple[frozenset, frozenset], list] = {}
    for p in topology.shared_ports:
        ports.setdefault((frozenset(p.srcs), frozenset(p.dsts)), []).append(p.bw)
    node_sets: dict[int, set[int]] = {}
    for r, node in enumerate(topology.nodes):
        node_sets.setdefault(node, set()).add(r)
    out = {
        "links": sorted((l.src, l.dst, l.alpha, l.bw, l.overhead) for l in topology.links),
        "switches": {k: sorted(v) for k, v in switches.items()},
        "spines": {k: sorted(v, key=repr) for k, v in spines.items()},
        "ports": {k: sorted(v) for k, v in ports.items()},
        "nodes": {frozenset(v) for v in node_sets.values()},
    }
    return out


def _structural_automorphism(topology: Topology, perm: tuple[int, ...], structure: dict) -> bool:
    """Whether ``perm`` maps every link, switch, spine (leaf sets), shared port and node onto an equal one.

    Sufficient for an automorphism when every pair of ranks is joined by at
    most one link, switch or spine (:func:`~ccsynth.synth.distances.classes_disjoint`:
    then the connections and constraints are functions of these parts); it
    never lists the connections.
    """
    def img(ranks) -> frozenset:
        return frozenset(perm[r] for r in ranks)

    links = sorted((perm[a], perm[b], al, bw, o) for a, b, al, bw, o in structure["links"])
    if links != structure["links"]:
        return False
    for key, params in structure["switches"].items():
        if structure["switches"].get(img(key)) != params:
            return False
    for key, params in structure["spines"].items():
        if structure["spines"].get(frozenset(img(leaf) for leaf in key)) != params:
            return False
    for (srcs, dsts), bws in structure["ports"].items():
        if structure["ports"].get((img(srcs), img(dsts))) != bws:
            return False
    return {img(v) for v in structure["nodes"]} == structure["nodes"]


def is_automorphism(topology: Topology, perm: tuple[int, ...], index=None) -> bool:
    """Whether ``perm`` maps every connection onto one and every bandwidth constraint onto an equal one."""
    for c in topology.connections():
        if not topology.has_connection(perm[c.src], perm[c.dst]):
            return False
    index = index if index is not None else _constraint_index(topology)
    for (srcs, dsts), bws in index.items():
        img = index.get((frozenset(perm[x] for x in srcs), frozenset(perm[x] for x in dsts)))
        if img != bws:
            return False
    return True


def _systems(topology: Topology) -> list[tuple[int, ...]]:
    n = topology.n_ranks
    out = []
    if topology.dims and math.prod(d.size for d in topology.dims) == n:
        out.append(tuple(d.size for d in topology.dims))
    nodes = topology.nodes
    k = len(set(nodes))
    if 1 < k < n and n % k == 0:
        g = n // k
        if all(nodes[r] == nodes[(r // g) * g] for r in range(n)) and len({nodes[j * g] for j in range(k)}) == k:
            out.append((g, k))
    out.append((n,))
    return out


@lru_cache(maxsize=16)
def translations(topology: Topology) -> Translations:
    """The largest verified translation group among the candidate coordinate systems (see the module docstring)."""
    n = topology.n_ranks
    best = Translations(n, (n,), ())
    if n < 2:
        return best
    structure = _structure(topology) if classes_disjoint(topology) else None
    listable = topology.connection_count() <= FULL_CHECK_MAX_CONNECTIONS
    index = _constraint_index(topology) if listable else None
    for sizes in _systems(topology):
        active = []
        for d, s in enumerate(sizes):
            if s < 2:
                continue
            probe = Translations(n, sizes, (d,))
            shift = tuple(1 if i == d else 0 for i in range(len(sizes)))
            perm = probe.permutation(shift)
            structural = structure is not None and _structural_automorphism(topology, perm, structure)
            if structural or (listable and is_automorphism(topology, perm, index)):
                active.append(d)
        cand = Translations(n, sizes, tuple(active))
        if cand.order > best.order:
            best = cand
        if best.order == n:
            break
    return best
