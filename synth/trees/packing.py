"""The tree-packing LP, by column generation: spanning trees whose loads fit every resource.

ForestColl packs, for every root, out-trees that carry the root's data at
the optimal rate (Edmonds' branching theorem after splitting switch nodes
off). ccsynth's resources are not arcs (a switch port is shared by all its
connections; a NIC by a node's), so the packing is solved as an LP over
*rank-level* trees -- every tree arc a connection, every connection's
resources charged -- by column generation; a switch is then never a tree
node, which is what ForestColl's edge splitting achieves.

**Trees** (:func:`pack_trees`: allgather, broadcast; reduce-scatter and
reduce on the reversed topology). Each root ``q`` of ``roots`` sends one
unit of demand (its shard, or the whole broadcast buffer) split over
spanning out-trees ``T`` with weights ``x[q, T] >= 0``, ``sum_T x[q, T] =
1``; a tree loads each resource ``R`` by ``x`` times the number ``m_T(R)``
of its arcs that consume ``R``. Minimize ``tau`` subject to ``load(R) <=
bw(R) tau`` for every resource: the time is ``tau * demand_bytes / 1e3``
us. The dual prices ``u(R) >= 0`` of the resource rows turn the search for
an improving column into a minimum-cost arborescence per root, an arc
``a -> b`` costing the sum of ``u`` over its connection's resources
(:mod:`~ccsynth.synth.trees.arborescence`); a tree cheaper than the root's
convexity dual enters the LP. Stop when none is cheaper, or when ``tau``
meets the exact bound (:mod:`~ccsynth.synth.flows.throughput`) -- a
certificate of optimality -- or after :data:`MAX_ITERATIONS`.

**Symmetry.** With a translation group ``G`` (:mod:`~ccsynth.synth.flows.symmetry`)
the LP is invariant, so it has a ``G``-invariant optimum: trees are found
for one root per orbit (a representative), every other root uses their
images. The rows become orbits ``O`` of resources: a tree of a
representative loads each resource of ``O``, summed over the group, by
``(|G| / |O|) m_T(O)`` (``m_T(O)`` its arcs consuming a resource of ``O``;
the group maps resources of ``O`` onto each other ``|G| / |O|`` times
each). On dgx_a100x128 this is one root and four orbit rows instead of
1,024 roots and 4,096 rows.

**Allreduce as reduce-then-broadcast** (:func:`pack_allreduce`). Data is
split among roots: the part of root ``q`` (weight ``w_q``, free, ``sum w_q =
1`` over all roots) is reduced to ``q`` along in-trees and broadcast from
``q`` along out-trees, both pipelined at once. Columns: out-trees
``x^o[q, T]`` and in-trees ``x^i[q, T]`` (an in-tree to ``q`` is an
out-tree of the reversed connections: pricing uses the transposed cost
matrix); rows: resources, ``sum_T x^o[q, T] = sum_T x^i[q, T]`` per root,
``sum x^o = 1``. Its optimum covers reduce-scatter + allgather (``w``
uniform: every root reduces and broadcasts its own ``1/n``), a single
root's reduce + broadcast (the star's hub), and everything between -- and
uses, per resource, both phases' loads together, which is what the
pipelined schedule meets.

Example:
    >>> from ccsynth.topologies.catalog import ring
    >>> p = pack_trees(ring(4, bw=10.0), roots=(0, 1, 2, 3))
    >>> round(p.tau, 6), round(p.bound_tau, 6)     # 3 shards into every rank over 2 links of 10 GB/s
    (0.15, 0.15)
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from collections.abc import Sequence

import highspy
import numpy as np

from ccsynth.errors import InfeasibleError
from ccsynth.synth.solver import silence_highs_banner  # the CLI's --json output stays clean
from ccsynth.synth.trees.arborescence import min_arborescence, tree_cost
from ccsynth.synth.flows.network import flow_network
from ccsynth.synth.flows.symmetry import Translations, translations
from ccsynth.synth.flows.throughput import allgather_rate, rooted_rate
from ccsynth.topologies.model import Topology

__all__ = ["MAX_ITERATIONS", "OPTIMAL_REL", "PackedTree", "Packing", "pack_trees", "pack_allreduce"]

log = logging.getLogger(__name__)

#: column-generation rounds at most (the oversubscribed fat_tree:16x8:4:2 needs 78 to reach its bound, one new
#: tree per orbit and round; 60 stopped it at 1.16x)
MAX_ITERATIONS = 300
#: the LP stops once tau is within this factor of the exact bound
OPTIMAL_REL = 1e-6
#: a priced tree enters only if cheaper than the dual by this (relative) margin
PRICE_REL = 1e-9
#: weights below this are dropped from the solution (then renormalised)
MIN_WEIGHT = 1e-7


@dataclass(frozen=True)
class PackedTree:
    """A spanning tree of connections: ``parent[v]`` is ``v``'s parent (-1 at the root).

    ``inward``: the data flows toward the root (an in-tree: ``v`` sends to
    ``parent[v]``), else away from it. ``weight``: the fraction of the
    root's demand that travels along it.
    """

    root: int
    parent: tuple[int, ...]
    weight: float
    inward: bool = False

    def arcs(self) -> list[tuple[int, int]]:
        """``(parent, child)`` pairs, breadth first from the root (children in rank order)."""
        kids: dict[int, list[int]] = {}
        for v, p in enumerate(self.parent):
            if p >= 0:
                kids.setdefault(p, []).append(v)
        out, frontier = [], [self.root]
        while frontier:
            nxt = []
            for u in frontier:
                for v in kids.get(u, ()):
                    out.append((u, v))
                    nxt.append(v)
            frontier = nxt
        return out

    def depth(self) -> int:
        d = 0
        for v in range(len(self.parent)):
            k, u = 0, v
            while self.parent[u] >= 0:
                u = self.parent[u]
                k += 1
            d = max(d, k)
        return d


@dataclass(frozen=True)
class Packing:
    """A solved packing: every root's trees (symmetry images included), the LP value and the bound's.

    Times: ``tau * demand_bytes / 1e3`` us, demand being one root's share
    (a shard for allgather, the buffer for broadcast and allreduce).
    ``root_weight`` (allreduce): the fraction of the buffer each root
    reduces and broadcasts.
    """

    trees: tuple[PackedTree, ...]
    tau: float
    bound_tau: float
    iterations: int
    columns: int
    seconds: float
    root_weight: tuple[float, ...] = ()

    @property
    def gap(self) -> float:
        return self.tau / self.bound_tau if self.bound_tau > 0 else math.inf

    def trees_of(self, root: int, inward: bool = False) -> list[PackedTree]:
        return [t for t in self.trees if t.root == root and t.inward == inward]


# ============================================================================ the LP's rows
@dataclass(frozen=True)
class _Rows:
    """Resource rows (orbits under the group), and per connection the rows it loads."""

    caps: np.ndarray  # GB/s of each row's resources
    factor: np.ndarray  # |G| / |O|
    conn_src: np.ndarray
    conn_dst: np.ndarray
    conn_ptr: np.ndarray  # CSR: rows of connection i are conn_rows[conn_ptr[i]:conn_ptr[i+1]]
    conn_rows: np.ndarray
    conn_id: np.ndarray  # n x n: connection index or -1

    def cost_matrix(self, price: np.ndarray, transpose: bool = False) -> np.ndarray:
        """``W[a, b]`` = the priced cost of connection ``a -> b`` (inf if none)."""
        per_row = price * self.factor
        counts = np.diff(self.conn_ptr)
        owner = np.repeat(np.arange(len(counts)), counts)
        cost = np.bincount(owner, weights=per_row[self.conn_rows], minlength=len(counts))
        n = self.conn_id.shape[0]
        W = np.full((n, n), np.inf)
        W[self.conn_src, self.conn_dst] = cost
        return W.T.copy() if transpose else W

    def usage(self, parent: np.ndarray, inward: bool) -> np.ndarray:
        """Each row's load by one unit on a tree (arcs reversed for an in-tree)."""
        v = np.flatnonzero(parent >= 0)
        a, b = (v, parent[v]) if inward else (parent[v], v)
        conns = self.conn_id[a, b]
        if (conns < 0).any():  # pragma: no cover - trees come from the cost matrix's finite arcs
            raise InfeasibleError("a packed tree uses a pair of ranks without a connection")
        starts, ends = self.conn_ptr[conns], self.conn_ptr[conns + 1]
        rows = np.concatenate([self.conn_rows[s:e] for s, e in zip(starts, ends)]) if len(conns) else np.zeros(0, int)
        return np.bincount(rows, minlength=len(self.caps)).astype(float) * self.factor


def _rows(topology: Topology, group: Translations) -> _Rows:
    cons = list(topology.bandwidth_constraints())
    # a constraint's image under a symmetry: one of the same extent and bandwidth (two of one extent may differ,
    # such as a link and a slower NIC on it, and must not share a row)
    index: dict[tuple[frozenset, frozenset, float], list[int]] = {}
    for i, bc in enumerate(cons):
        index.setdefault((bc.srcs, bc.dsts, bc.bw), []).append(i)
    parent = list(range(len(cons)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for d in group.active:
        shift = tuple(1 if i == d else 0 for i in range(len(group.sizes)))
        perm = group.permutation(shift)
        for i, bc in enumerate(cons):
            for j in index[(frozenset(perm[x] for x in bc.srcs), frozenset(perm[x] for x in bc.dsts), bc.bw)]:
                ri, rj = find(i), find(j)
                if ri != rj:
                    parent[ri] = rj
    roots: dict[int, int] = {}
    row_of_name: dict[str, int] = {}
    for i, bc in enumerate(cons):
        r = roots.setdefault(find(i), len(roots))
        row_of_name[bc.name] = r
    k = len(roots)
    caps = np.zeros(k)
    size = np.zeros(k)
    for bc in cons:
        r = row_of_name[bc.name]
        caps[r] = bc.bw
        size[r] += 1
    conns = topology.connections()
    n = topology.n_ranks
    conn_id = np.full((n, n), -1, dtype=np.int64)
    src = np.array([c.src for c in conns], dtype=np.int64)
    dst = np.array([c.dst for c in conns], dtype=np.int64)
    conn_id[src, dst] = np.arange(len(conns))
    lists = [[row_of_name[r] for r in c.resources] for c in conns]
    ptr = np.concatenate(([0], np.cumsum([len(x) for x in lists]))).astype(np.int64)
    flat = np.array([r for x in lists for r in x], dtype=np.int64)
    return _Rows(caps, group.order / size, src, dst, ptr, flat, conn_id)


# ============================================================================ column generation
class _LP:
    """The master LP in HiGHS: resource rows, extra equality rows, tau, tree columns."""

    def __init__(self, rows: _Rows, extra_rhs: Sequence[float]):
        self.rows = rows
        self.n_res = len(rows.caps)
        self.n_extra = len(extra_rhs)
        silence_highs_banner()
        h = highspy.Highs()
        h.setOptionValue("output_flag", False)
        inf = highspy.kHighsInf
        h.addRows(self.n_res, np.full(self.n_res, -inf), np.zeros(self.n_res), 0,
                  np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int32), np.zeros(0))
        rhs = np.asarray(extra_rhs, dtype=float)
        h.addRows(self.n_extra, rhs, rhs, 0, np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int32), np.zeros(0))
        idx = np.arange(self.n_res, dtype=np.int32)
        h.addCol(1.0, 0.0, inf, self.n_res, idx, -rows.caps)
        self.h = h
        self.columns: list[tuple[int, bool, tuple[int, ...]]] = []  # (root, inward, parent)
        self.seen: set[tuple[int, bool, tuple[int, ...]]] = set()

    def add(self, root: int, inward: bool, parent: np.ndarray, extra: dict[int, float]) -> bool:
        key = (root, inward, tuple(int(p) for p in parent))
        if key in self.seen:
            return False
        self.seen.add(key)
        use = self.rows.usage(parent, inward)
        nz = np.flatnonzero(use)
        idx = list(nz) + [self.n_res + e for e in extra]
        val = list(use[nz]) + list(extra.values())
        self.h.addCol(0.0, 0.0, highspy.kHighsInf, len(idx), np.array(idx, dtype=np.int32), np.array(val, dtype=float))
        self.columns.append(key)
        return True

    def solve(self) -> tuple[float, np.ndarray, np.ndarray, np.ndarray]:
        """(tau, resource prices u >= 0, extra-row duals, column values)."""
        self.h.run()
        status = self.h.getModelStatus()
        if status != highspy.HighsModelStatus.kOptimal:  # pragma: no cover - the LP is always feasible and bounded
            raise InfeasibleError(f"the tree-packing LP ended with status {self.h.modelStatusToString(status)}")
        sol = self.h.getSolution()
        duals = np.array(sol.row_dual)
        values = np.array(sol.col_value)
        tau = float(values[0])
        return tau, np.maximum(-duals[: self.n_res], 0.0), duals[self.n_res:], values[1:]


def _start_prices(rows: _Rows) -> np.ndarray:
    """Prices for the first trees: a resource costs 1 / its bandwidth (slow arcs avoided)."""
    return 1.0 / rows.caps


def pack_trees(topology: Topology, roots: Sequence[int], *, inward: bool = False,
               group: Translations | None = None, bound_tau: float | None = None) -> Packing:
    """Spanning trees for every root of ``roots``, each root's unit demand split over its trees (module docstring).

    ``inward``: in-trees (data flows to the root: reduce-scatter, reduce),
    packed as out-trees of the reversed topology. ``group``: a translation
    group to exploit (default: the topology's, when ``roots`` is every
    rank; none otherwise). ``bound_tau``: the exact optimum if known (else
    computed): the LP stops when it gets there.
    """
    t0 = time.perf_counter()
    topo = topology.reversed() if inward else topology
    n = topo.n_ranks
    roots = tuple(roots)
    if group is None:
        group = translations(topo) if sorted(roots) == list(range(n)) else Translations(n, (n,), ())
    reps = tuple(r for r in roots if group.rep_of(r) == r)
    if bound_tau is None:
        net = flow_network(topo)
        if len(roots) == n:
            bound_tau = 1.0 / allgather_rate(net, group).rate
        elif len(roots) == 1:
            bound_tau = 1.0 / rooted_rate(net, roots[0]).rate
        else:
            bound_tau = 0.0
    rows = _rows(topo, group)
    lp = _LP(rows, [1.0] * len(reps))
    W = rows.cost_matrix(_start_prices(rows))
    for i, q in enumerate(reps):
        lp.add(q, False, min_arborescence(W, q), {i: 1.0})
    it = 0
    tau = math.inf
    for it in range(1, MAX_ITERATIONS + 1):
        tau, price, conv, _ = lp.solve()
        if tau <= bound_tau * (1 + OPTIMAL_REL):
            break
        W = rows.cost_matrix(price)
        added = 0
        for i, q in enumerate(reps):
            parent = min_arborescence(W, q)
            if tree_cost(W, parent) < conv[i] - PRICE_REL * max(abs(conv[i]), 1e-30):
                added += lp.add(q, False, parent, {i: 1.0})
        log.debug("packing round %d: tau %.6g (bound %.6g), %d new trees", it, tau, bound_tau, added)
        if not added:
            break
    tau, _, _, values = lp.solve()
    trees = _expand(lp, values, group, inward, dict.fromkeys(reps, 1.0))
    return Packing(tuple(trees), tau, bound_tau, it, len(lp.columns), time.perf_counter() - t0)


def pack_allreduce(topology: Topology, *, group: Translations | None = None, bound_tau: float = 0.0) -> Packing:
    """Reduce-then-broadcast trees for allreduce with free root weights (module docstring).

    ``tau * Z / 1e3`` us is the LP's time for the whole buffer ``Z``.
    """
    t0 = time.perf_counter()
    n = topology.n_ranks
    group = group if group is not None else translations(topology)
    reps = group.representatives
    rows = _rows(topology, group)
    # extra rows: one balance row per representative (out = in), then the total of the out-trees
    k = len(reps)
    lp = _LP(rows, [0.0] * k + [1.0])
    W = rows.cost_matrix(_start_prices(rows))
    for i, q in enumerate(reps):
        lp.add(q, False, min_arborescence(W, q), {i: 1.0, k: float(group.order)})
        lp.add(q, True, min_arborescence(W.T.copy(), q), {i: -1.0})
    it = 0
    for it in range(1, MAX_ITERATIONS + 1):
        tau, price, duals, _ = lp.solve()
        if tau <= bound_tau * (1 + OPTIMAL_REL):
            break
        W = rows.cost_matrix(price)
        WT = W.T.copy()
        added = 0
        for i, q in enumerate(reps):
            out_dual = duals[i] + group.order * duals[k]
            parent = min_arborescence(W, q)
            if tree_cost(W, parent) < out_dual - PRICE_REL * max(abs(out_dual), 1e-30):
                added += lp.add(q, False, parent, {i: 1.0, k: float(group.order)})
            parent = min_arborescence(WT, q)
            if tree_cost(WT, parent) < -duals[i] - PRICE_REL * max(abs(duals[i]), 1e-30):
                added += lp.add(q, True, parent, {i: -1.0})
        log.debug("allreduce packing round %d: tau %.6g (bound %.6g), %d new trees", it, tau, bound_tau, added)
        if not added:
            break
    tau, _, _, values = lp.solve()
    out_total = dict.fromkeys(reps, 0.0)
    for (q, inward, _), v in zip(lp.columns, values):
        if not inward:
            out_total[q] += v
    trees = _expand(lp, values, group, None, out_total)
    weight = [0.0] * n
    for q in reps:
        for shift in group.elements():
            weight[group.apply(shift, q)] = out_total[q]
    return Packing(tuple(trees), tau, bound_tau, it, len(lp.columns), time.perf_counter() - t0, tuple(weight))


def _expand(lp: _LP, values: np.ndarray, group: Translations, inward: bool | None,
            totals: dict[int, float]) -> list[PackedTree]:
    """The LP's trees with their weights (normalised per root and direction), with every group image.

    ``inward`` None: the columns say per tree (allreduce); else every tree has that direction.
    """
    chosen: dict[tuple[int, bool], list[tuple[tuple[int, ...], float]]] = {}
    for (q, col_in, parent), v in zip(lp.columns, values):
        if totals[q] <= 0 or v / totals[q] < MIN_WEIGHT:
            continue
        chosen.setdefault((q, col_in), []).append((parent, v))
    out = []
    for (q, col_in), trees in sorted(chosen.items()):
        total = sum(v for _, v in trees)
        for shift in group.elements():
            perm = group.permutation(shift) if any(shift) else None
            for parent, v in trees:
                if perm is None:
                    par = parent
                else:
                    moved = [-1] * len(parent)
                    for u, p in enumerate(parent):
                        moved[perm[u]] = perm[p] if p >= 0 else -1
                    par = tuple(moved)
                direction = col_in if inward is None else inward
                out.append(PackedTree(perm[q] if perm else q, tuple(par), v / total, direction))
    return out
