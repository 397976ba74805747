"""Minimum-cost spanning arborescences (out-trees from a root), on a dense cost matrix.

The pricing step of the packing LP (:mod:`~ccsynth.synth.trees.packing`)
asks, for each root, for the cheapest spanning out-tree when every
connection ``u -> v`` costs ``W[u, v]`` (``inf``: no connection).

* Symmetric costs (``W == W.T``, as on symmetric machines whose duals are
  equal per orbit): the cheapest arborescence is a minimum spanning tree
  oriented away from the root (every tree orients that way, at the same
  cost), found by Prim's algorithm in ``O(n^2)`` with numpy.
* Otherwise: Chu-Liu/Edmonds -- every node takes its cheapest incoming arc;
  each cycle of those is contracted into one node whose incoming arcs cost
  ``W[u, v] - W[pre(v), v]``; recurse; expand, breaking each cycle where the
  chosen incoming arc enters it. ``O(n^2)`` numpy work per contraction level.

Ties are frequent (costs are equal per orbit of a symmetric machine) and
decide the tree's *shape*, hence its latency and pipelining: among equally
cheap trees, shallow ones are preferred -- Prim takes, among equal costs,
the arc from the shallowest tree node; Edmonds' costs get ``eps`` times the
hop distance of the arc's tail from the root added (``eps`` far below any
cost difference, so the result is optimal for the true costs up to a
negligible ``eps * n * depth``).

Example:
    >>> import numpy as np
    >>> inf = np.inf
    >>> W = np.array([[inf, 1.0, 5.0], [inf, inf, 1.0], [1.0, inf, inf]])
    >>> min_arborescence(W, 0).tolist()     # 0 -> 1 -> 2 (cost 2), not 0 -> 2 (cost 5)
    [-1, 0, 1]
"""

from __future__ import annotations

import numpy as np

from ccsynth.errors import InfeasibleError

__all__ = ["min_arborescence", "tree_cost", "TIE_EPS"]

#: tie-breaking perturbation, relative to the mean finite cost per node
TIE_EPS = 1e-9


def tree_cost(W: np.ndarray, parent: np.ndarray) -> float:
    """The cost of the tree ``parent`` (``parent[root] == -1``) under ``W``."""
    v = np.flatnonzero(parent >= 0)
    return float(W[parent[v], v].sum())


def min_arborescence(W: np.ndarray, root: int) -> np.ndarray:
    """Parent of every node in a cheapest spanning out-tree from ``root`` (the root's parent is -1).

    Raises :class:`~ccsynth.errors.InfeasibleError` if some node cannot be reached.
    """
    W = np.asarray(W, dtype=float)
    m = W.shape[0]
    if m == 1:
        return np.array([-1])
    finite = W[np.isfinite(W)]
    scale = float(np.abs(finite).mean()) if finite.size else 1.0
    eps = TIE_EPS * (scale if scale > 0 else 1.0) / m
    sym = np.array_equal(W, W.T)
    if sym:
        return _prim(W, root, eps)
    hops = _hops(W, root)
    Wp = W + eps * hops[:, None]
    parent = _chu_liu(Wp, root)
    parent[root] = -1
    return parent


def _hops(W: np.ndarray, root: int) -> np.ndarray:
    """Breadth-first hop distance of every node from ``root`` over finite arcs (unreachable: n)."""
    m = W.shape[0]
    adj = np.isfinite(W)
    dist = np.full(m, m, dtype=float)
    dist[root] = 0
    frontier = np.zeros(m, dtype=bool)
    frontier[root] = True
    seen = frontier.copy()
    d = 0
    while frontier.any():
        d += 1
        nxt = adj[frontier].any(axis=0) & ~seen
        dist[nxt] = d
        seen |= nxt
        frontier = nxt
    if not seen.all():
        bad = int(np.flatnonzero(~seen)[0])
        raise InfeasibleError(f"no spanning tree from rank {root}: rank {bad} cannot be reached")
    return dist


def _prim(W: np.ndarray, root: int, eps: float) -> np.ndarray:
    m = W.shape[0]
    in_tree = np.zeros(m, dtype=bool)
    in_tree[root] = True
    depth = np.zeros(m)
    key = W[root].copy()
    par = np.full(m, root)
    key[root] = np.inf
    for _ in range(m - 1):
        masked = np.where(in_tree, np.inf, key)
        v = int(masked.argmin())
        if not np.isfinite(masked[v]):
            bad = int(np.flatnonzero(~in_tree)[0])
            raise InfeasibleError(f"no spanning tree from rank {root}: rank {bad} cannot be reached")
        in_tree[v] = True
        depth[v] = depth[par[v]] + 1
        cand = W[v] + eps * depth[v]
        better = (cand < key) & ~in_tree
        key[better] = cand[better]
        par[better] = v
    par[root] = -1
    return par


def _chu_liu(W: np.ndarray, root: int) -> np.ndarray:
    m = W.shape[0]
    W = W.copy()
    W[:, root] = np.inf
    np.fill_diagonal(W, np.inf)
    cols = np.arange(m)
    pre = W.argmin(axis=0)
    inc = W[pre, cols]
    pre[root] = root
    inc[root] = 0.0
    if not np.all(np.isfinite(inc)):
        bad = int(np.flatnonzero(~np.isfinite(inc))[0])
        raise InfeasibleError(f"no spanning tree from rank {root}: rank {bad} cannot be reached")
    comp = _cycles(pre, root)
    if comp is None:
        return pre
    k = int(comp.max()) + 1
    adj = W - inc[None, :]
    order = np.argsort(comp, kind="stable")
    counts = np.bincount(comp, minlength=k)
    starts = np.concatenate(([0], np.cumsum(counts)[:-1]))
    A = np.minimum.reduceat(adj[order], starts, axis=0)
    A = np.minimum.reduceat(A[:, order], starts, axis=1)
    np.fill_diagonal(A, np.inf)
    pc = _chu_liu(A, int(comp[root]))
    members = np.split(order, np.cumsum(counts)[:-1])
    parent = pre.copy()
    for b in range(k):
        if b == comp[root]:
            continue
        ma, mb = members[pc[b]], members[b]
        sub = adj[np.ix_(ma, mb)]
        i, j = np.unravel_index(int(sub.argmin()), sub.shape)
        parent[mb[j]] = ma[i]
    return parent


def _cycles(pre: np.ndarray, root: int) -> np.ndarray | None:
    """Component ids with every cycle of ``pre`` contracted (cycles first), or None if there is none."""
    m = len(pre)
    mark = np.full(m, -1)
    cycles: list[list[int]] = []
    for s in range(m):
        if mark[s] != -1:
            continue
        walk = []
        v = s
        while mark[v] == -1 and v != root:
            mark[v] = s
            walk.append(v)
            v = pre[v]
        if v != root and mark[v] == s:
            cyc = [v]
            u = pre[v]
            while u != v:
                cyc.append(u)
                u = pre[u]
            cycles.append(cyc)
        for u in walk:
            mark[u] = -2
    if not cycles:
        return None
    comp = np.full(m, -1)
    for i, cyc in enumerate(cycles):
        comp[cyc] = i
    rest = np.flatnonzero(comp < 0)
    comp[rest] = np.arange(len(cycles), len(cycles) + len(rest))
    return comp
