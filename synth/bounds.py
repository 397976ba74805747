"""Lower bounds on the time of a collective on a topology.

Every bound here is a *true* lower bound under the model of
:mod:`ccsynth.synth.simulate`: data moves only in transfers over
connections; at every moment the rates of the transfers crossing a set of
resources respect each resource's bandwidth; a transfer of ``k`` chunks
carries ``k`` chunk values and costs at least the connection's ``alpha``.
No correct (verified) schedule simulates faster (a property test checks it),
so ``time / bound`` is an honest optimality gap. Where a tighter bound would
need an assumption this model does not make, the weaker one is used.

Notation: ``n`` ranks, message size ``Z`` bytes (nccl-tests size, see
:class:`~ccsynth.collectives.spec.Collective`), ``k = |S|`` for a set of
ranks ``S`` with ``0 < k < n``; ``in(S)`` / ``out(S)`` an upper bound on
the total rate (GB/s) at which bytes can cross *into* / *out of* ``S``.

1. **Cut bounds** (ForestColl's cut argument, generalised). Some bytes must
   cross every cut: ``T >= max(need_in(S) / in(S), need_out(S) / out(S))``.
   A chunk value never loses contributions (there is no "un-reduce"), and a
   value mixing two chunk indices can never become part of a correct output,
   so each *distinct* needed piece crosses at least once:

   ============== ======================== ========================
   kind           need_in(S)               need_out(S)
   ============== ======================== ========================
   allgather      (n-k)/n Z  (shards of    k/n Z
                  the ranks outside S)
   reduce_scatter k/n Z  (S's outputs need (n-k)/n Z
                  outside contributions)
   allreduce      Z  (one value per index  Z
                  must enter and leave)
   alltoall       k(n-k)/n Z               k(n-k)/n Z
   broadcast      Z if root not in S       Z if root in S
   reduce         Z if root in S           Z if root not in S
   gather         (n-k)/n Z if root in S   k/n Z if root not in S
   scatter        k/n Z if root not in S   (n-k)/n Z if root in S
   ============== ======================== ========================

   The single-rank cuts ``S = {r}`` are the per-rank ingress/egress bounds.

   **Exact, by max flow** (every kind but alltoall). The best cut is not
   searched for: it is computed. The topology becomes a flow network
   (:mod:`ccsynth.synth.flows.network`: ranks, a hub per switch whose arcs
   are the members' ports, a node per shared port) in which, for every
   ``S``, the least cut into ``S`` equals the LP capacity ``in(S)`` of the
   connections crossing into ``S`` (the network's docstring proves when; it
   says so in :attr:`FlowNetwork.exact`, true for links, switches and NICs
   shared by a node's GPUs). Then (:mod:`ccsynth.synth.flows.throughput`):

   * allgather: ``max over S of ((n-k)/n) Z / in(S)`` is ForestColl's
     ``T* = (Z/n) / lam*`` with ``lam* = min over S of in(S) / (n-k)``, the
     largest ``lam`` for which a source feeding ``lam`` into every rank
     sends ``n lam`` to every rank (one max flow per sink, Dinkelbach on the
     ratio, one sink per orbit of the topology's translation symmetries);
     the ``out of`` side is the same family (the complement's ``into``);
   * reduce_scatter: the allgather bound of the reversed network;
   * broadcast: ``Z / min over t of maxflow(root, t)``; reduce: reversed;
   * gather: the allgather test with the root as the only sink; scatter:
     reversed;
   * allreduce: ``Z / min over S of in(S)``, the minimum pairwise cut
     (max flows from and to one rank).

   The result names the cut that attains it. Where the network is only a
   relaxation (a shared port over an arbitrary set of connections: the cut
   capacity is then an LP whose optimal cover may be fractional), the
   max-flow value is still a valid bound (every feasible flow routes in the
   relaxation), and the best of it and of the searched family below is
   used, labelled ``relaxed`` / ``searched cuts`` in ``which`` and
   ``details["cut_exact"] = False``. Reference:
   :mod:`ccsynth.synth.cut_enumeration` enumerates every cut with its exact
   LP capacity (tests compare both up to 14 ranks).

   **Searched** (alltoall, and the fallback above): every subset when
   ``n <= 8``; every subset with a cheaper capacity estimate when
   ``n <= 16`` (the best few re-checked with the greedy cover, keeping the
   smaller capacity); for any ``n`` single ranks, nodes, unions of nodes,
   blocks of the network dimensions, halves and prefixes. Any cut gives a
   valid bound, so a heuristic family only costs tightness, never
   correctness.

2. **Aggregate bound.** Count the chunk transfers every schedule needs and
   divide their bytes by the total capacity of the whole network (an upper
   bound on the sum of all transfer rates):

   * allgather ``(n-1) Z``: each of the ``n c`` chunks reaches ``n-1`` other
     ranks, one transfer per new holder (a spanning arborescence);
   * reduce_scatter, reduce ``(n-1) Z``: each output index merges ``n``
     contributions that start on ``n`` ranks, ``n-1`` transfers;
   * broadcast ``(n-1) Z``;
   * allreduce ``2 (n-1) Z``: per chunk index the transfers form a one-way
     gossip scheme, which needs ``2n-2`` calls (Harary & Schwenk 1974; proof:
     let call ``k`` be the first after which a rank knows everything; each of
     the other ``n-1`` ranks sent its own contribution at or before ``k``,
     and receives the call that completes it after ``k``). On a
     unidirectional ring of bandwidth ``B`` this is the classic
     ``2 (n-1)/n Z/B``;
   * alltoall ``sum over pairs q != d of hops(q, d) Z/n``; gather / scatter
     the same over the pairs with the root (a chunk crosses at least the
     fewest connections between its source and its destination).

   We deliberately do **not** add the reduce-scatter and allgather bounds of
   allreduce cut by cut: a cut needs only one value per index in each
   direction, which the cut bound above already counts.

   **Allreduce across groups.** The gossip argument holds for any partition
   of the ranks into ``p >= 2`` groups (e.g. nodes), counting only the
   transfers *between* groups: treat a group as one party that knows what
   any of its ranks holds (transfers inside a group are free and a transfer
   out of a group carries part of what the group knows). Every rank ends
   holding the full sum, so per chunk index the inter-group transfers form a
   one-way gossip scheme among ``p`` parties: at least ``2p-2`` of them,
   ``2(p-1) Z`` bytes in all (a value relayed through a third group counts
   twice, which only helps). Those bytes cross the connections between
   groups, so ``T >= 2(p-1) Z / cap`` with ``cap`` the total capacity of the
   inter-group connections (also at most the sum over groups of ``out(g)``,
   and of ``in(g)``). With equal groups this is ``2(p-1)/p Z`` through each
   group's boundary -- Patarasuk and Yuan's bound with a node as a process,
   which the ring of nodes attains; the cut bound (``Z`` per node) is the
   ``p = 2`` case. Partitions tried: the nodes, and the blocks of each
   network dimension prefix (the singletons are the aggregate bound).

3. **Latency bound.** Data from ``q`` reaches ``b`` only along a chain of
   transfers. Each costs at least its connection's ``alpha + 2 * overhead``:
   the sender's per-message overhead comes before the message is posted,
   alpha in flight, the receiver's overhead before the receive completes,
   and a relay can forward only after its receive completed. So ``T`` is at
   least the largest such shortest-path distance over the pairs that must
   communicate (all pairs; root to all for broadcast/scatter; all to root for
   reduce/gather). For very large topologies only a deterministic sample of
   sources is used (still a valid bound).

The result is ``max(latency, bandwidth)``: both hold, their sum need not
(a pipelined schedule overlaps latency with transfer).

Capacities: ``in(S)`` is the maximum total rate of the connections crossing
into ``S`` subject to every resource (links, switch ports, shared NIC
ports): exactly a network cut for the max-flow bounds above. For the
searched cuts: by LP duality any set of resources that covers every crossing
connection bounds it from above by the sum of their bandwidths; we use a
greedy cover (:func:`~ccsynth.synth.capacity.cover_capacity`: a resource
is taken when it is cheaper than paying for the connections it covers one
by one), and, for the exhaustive search, also
``sum over b in S of min(sum of link bandwidths into b from outside S,
ingress(b))`` (and the same from the sender side). An over-estimate of a
capacity only weakens a bound, so approximation never breaks validity.
The capacities and distances every family reads live in
:mod:`ccsynth.synth.bound_network`; the max-flow rates in
:mod:`ccsynth.synth.flows`.

Example:
    >>> from ccsynth.collectives.spec import Collective
    >>> from ccsynth.topologies.model import Link, Topology
    >>> ring4 = Topology("uring4", 4, links=tuple(Link(i, (i + 1) % 4, 1.0, 10.0) for i in range(4)))
    >>> b = lower_bound(Collective("allreduce", 4), ring4, 40_000)
    >>> round(b.time_us, 6), b.which   # 2 (n-1)/n Z / B = 1.5 * 40000 / 1e4
    (6.0, 'aggregate: 6*Z over the total network capacity 40 GB/s')
"""

from __future__ import annotations

import itertools
import logging
import math
from dataclasses import dataclass, field
from functools import lru_cache
from collections.abc import Iterable, Sequence

import numpy as np

from ccsynth.collectives.spec import Collective, canonical_kind
from ccsynth.errors import SizeError, TopologyError
from ccsynth.synth.capacity import cover_capacity
from ccsynth.synth.bound_network import BoundNetwork
from ccsynth.synth.flows.network import flow_network
from ccsynth.synth.flows.symmetry import translations
from ccsynth.synth.flows.throughput import RateCut, allgather_rate, gather_rate, min_pair_cut, rooted_rate
from ccsynth.tolerance import is_close
from ccsynth.topologies.model import BYTES_PER_US_PER_GBPS, Topology

log = logging.getLogger(__name__)

#: exhaustive cut search with the precise (greedy-cover) capacity up to this many ranks
EXHAUSTIVE_PRECISE_MAX_RANKS = 8
#: exhaustive cut search with the vectorised capacity estimate up to this many ranks
EXHAUSTIVE_MAX_RANKS = 16
#: candidates of the vectorised search re-evaluated with the precise capacity
EXHAUSTIVE_RECHECK = 32

#: Human-readable formulas, per collective kind (for ``ccsynth simulate`` / docs).
FORMULAS: dict[str, tuple[str, ...]] = {
    "allgather": (
        "cut: T >= (n-|S|)/n * Z / in(S) and |S|/n * Z / out(S) for every set S of ranks",
        "aggregate: T >= (n-1) * Z / total network capacity",
        "latency: T >= max over pairs of the shortest path, alpha + 2 overhead per hop",
    ),
    "reduce_scatter": (
        "cut: T >= (n-|S|)/n * Z / out(S) and |S|/n * Z / in(S)",
        "aggregate: T >= (n-1) * Z / total network capacity",
        "latency: T >= max over pairs of the shortest path, alpha + 2 overhead per hop",
    ),
    "allreduce": (
        "cut: T >= Z / in(S) and Z / out(S)",
        "aggregate (one-way gossip, 2n-2 transfers per chunk): T >= 2(n-1) * Z / total network capacity,"
        " and 2(p-1) * Z / capacity between the p groups of any partition (nodes, dimension blocks)",
        "latency: T >= max over pairs of the shortest path, alpha + 2 overhead per hop",
    ),
    "alltoall": (
        "cut: T >= |S|(n-|S|)/n * Z / in(S) and / out(S)",
        "aggregate: T >= sum over pairs of hops(q,d) * Z/n / total network capacity",
        "latency: T >= max over pairs of the shortest path, alpha + 2 overhead per hop",
    ),
    "broadcast": (
        "cut: T >= Z / in(S) for S without the root, Z / out(S) for S with it",
        "aggregate: T >= (n-1) * Z / total network capacity",
        "latency: T >= max over ranks of the shortest path from the root, alpha + 2 overhead per hop",
    ),
    "reduce": (
        "cut: T >= Z / in(S) for S with the root, Z / out(S) for S without it",
        "aggregate: T >= (n-1) * Z / total network capacity",
        "latency: T >= max over ranks of the shortest path to the root, alpha + 2 overhead per hop",
    ),
    "gather": (
        "cut: T >= (n-|S|)/n * Z / in(S) for S with the root, |S|/n * Z / out(S) without it",
        "aggregate: T >= sum over ranks of hops(q,root) * Z/n / total network capacity",
        "latency: T >= max over ranks of the shortest path to the root, alpha + 2 overhead per hop",
    ),
    "scatter": (
        "cut: T >= |S|/n * Z / in(S) for S without the root, (n-|S|)/n * Z / out(S) with it",
        "aggregate: T >= sum over ranks of hops(root,d) * Z/n / total network capacity",
        "latency: T >= max over ranks of the shortest path from the root, alpha + 2 overhead per hop",
    ),
}


def per_collective_bound(kind: str) -> tuple[str, ...]:
    """The bound formulas that apply to collective ``kind`` (one line each).

    >>> per_collective_bound("allreduce")[0]
    'cut: T >= Z / in(S) and Z / out(S)'
    """
    return FORMULAS[canonical_kind(kind)]


@dataclass(frozen=True)
class Bound:
    """A lower bound on a collective's time (us) and which argument gave it.

    ``details`` maps each bound family (``cut``, ``aggregate``, ``latency``)
    to its value in us and a description of the winning cut/pair.
    """

    time_us: float
    bandwidth_us: float
    latency_us: float
    which: str
    details: dict = field(default_factory=dict, compare=False, hash=False)

    def to_dict(self) -> dict:
        return {
            "time_us": _json_float(self.time_us),
            "bandwidth_us": _json_float(self.bandwidth_us),
            "latency_us": _json_float(self.latency_us),
            "which": self.which,
            "details": {k: (_json_float(v) if isinstance(v, float) else v) for k, v in self.details.items()},
        }


def _json_float(x: float):
    return x if math.isfinite(x) else None


# ------------------------------------------------------------ capacities
# ------------------------------------------------------------ needs per cut
def cut_needs(kind: str, n: int, k, root_in):
    """Fractions of ``Z`` that must cross into / out of a set of ``k`` ranks.

    ``k`` and ``root_in`` may be scalars or numpy arrays (vectorised search).
    See the table in the module docstring.
    """
    k = np.asarray(k, dtype=float)
    root_in = np.asarray(root_in, dtype=bool)
    one = np.ones_like(k)
    if kind == "allgather":
        return (n - k) / n, k / n
    if kind == "reduce_scatter":
        return k / n, (n - k) / n
    if kind == "allreduce":
        return one, one
    if kind == "alltoall":
        x = k * (n - k) / n
        return x, x
    if kind == "broadcast":
        return np.where(root_in, 0.0, one), np.where(root_in, one, 0.0)
    if kind == "reduce":
        return np.where(root_in, one, 0.0), np.where(root_in, 0.0, one)
    if kind == "gather":
        return np.where(root_in, (n - k) / n, 0.0), np.where(root_in, 0.0, k / n)
    if kind == "scatter":
        return np.where(root_in, 0.0, k / n), np.where(root_in, (n - k) / n, 0.0)
    raise ValueError(f"no cut bound for collective kind {kind!r}")


def _structured_cuts(topology: Topology) -> list[int]:
    """Bitmasks of the heuristic cut family (see the module docstring)."""
    n = topology.n_ranks
    full = (1 << n) - 1
    masks: set[int] = set()

    def add(ranks: Iterable[int]) -> None:
        m = 0
        for r in ranks:
            m |= 1 << r
        if 0 < m < full:
            masks.add(m)
            masks.add(full ^ m)

    if n <= EXHAUSTIVE_PRECISE_MAX_RANKS:
        return list(range(1, full))
    for r in range(n):
        add((r,))
    node_ids = sorted(set(topology.nodes))
    by_node = {v: [r for r in range(n) if topology.nodes[r] == v] for v in node_ids}
    if len(node_ids) > 1:
        if len(node_ids) <= 8:
            for size in range(1, len(node_ids)):
                for combo in itertools.combinations(node_ids, size):
                    add(r for v in combo for r in by_node[v])
        else:
            for v in node_ids:
                add(by_node[v])
            p = 1
            while p < len(node_ids):
                add(r for v in node_ids[:p] for r in by_node[v])
                p *= 2
            add(r for v in node_ids[: len(node_ids) // 2] for r in by_node[v])
    if topology.dims:
        sizes = [d.size for d in topology.dims]
        coords = [topology.coords(r) for r in range(n)]
        for d in range(len(sizes)):
            # blocks of the dimensions below and including d (e.g. a node)
            block = math.prod(sizes[: d + 1])
            if block < n:
                for start in range(0, n, block) if n // block <= 64 else (0,):
                    add(range(start, start + block))
            # slices and halves along dimension d
            if sizes[d] > 1:
                add(r for r in range(n) if coords[r][d] < sizes[d] // 2)
                for v in range(min(sizes[d], 16)):
                    add(r for r in range(n) if coords[r][d] == v)
    p = 1
    while p < n:
        add(range(p))
        p *= 2
    add(range(n // 2))
    add(range(0, n, 2))
    return sorted(masks)


@dataclass(frozen=True)
class _Coefficients:
    """Size-independent parts of the bound: us per byte, and fixed latency."""

    cut_us_per_byte: float
    cut_desc: str
    cut_exact: bool
    agg_us_per_byte: float
    agg_desc: str
    latency_us: float
    latency_desc: str


def _mask_desc(mask: int, n: int) -> str:
    ranks = [r for r in range(n) if (mask >> r) & 1]
    if len(ranks) <= 8:
        return "{" + ",".join(map(str, ranks)) + "}"
    return f"{{{ranks[0]},{ranks[1]},...,{ranks[-1]}}} ({len(ranks)} ranks)"


def _cut_coefficient(kind: str, n: int, root: int, net: BoundNetwork) -> tuple[float, str, bool]:
    """The cut bound (us per byte), its description, and whether it is exact (see the module docstring)."""
    exact = _exact_cut(kind, n, root, net.topology)
    if exact is not None and exact[2]:
        return exact
    coef, desc = _searched_cut_coefficient(kind, n, root, net)
    if exact is not None and exact[0] >= coef:
        return exact
    if exact is not None:
        desc += " [best of searched cuts: the flow network only relaxes this topology]"
    return coef, desc, False


def _exact_cut(kind: str, n: int, root: int, topology: Topology) -> tuple[float, str, bool] | None:
    """The cut bound by max flow on the flow network (None for alltoall, which has no max-flow form).

    Exact when the network is (:attr:`FlowNetwork.exact`); otherwise a valid
    bound from a relaxation, labelled so.
    """
    if kind == "alltoall":
        return None
    net = flow_network(topology)
    reverse = kind in ("reduce_scatter", "reduce", "scatter")
    fnet = net.reversed() if reverse else net
    if kind in ("allgather", "reduce_scatter"):
        rc = allgather_rate(fnet, translations(topology))
        demand = 1.0 / n
    elif kind in ("broadcast", "reduce"):
        rc = rooted_rate(fnet, root)
        demand = 1.0
    elif kind in ("gather", "scatter"):
        rc = gather_rate(fnet, root)
        demand = 1.0 / n
    elif kind == "allreduce":
        rc = min_pair_cut(net, translations(topology))
        demand = 1.0
    else:  # pragma: no cover
        raise ValueError(f"no cut bound for collective kind {kind!r}")
    coef = demand / (rc.rate * BYTES_PER_US_PER_GBPS) if rc.rate > 0 else math.inf
    desc = _rate_cut_desc(rc, demand, n, "out of" if reverse else "into", net.exact)
    if not net.exact:
        desc += f" [max flow on a relaxed network: {net.note}]"
    return coef, desc, net.exact


def _rate_cut_desc(rc: RateCut, demand: float, n: int, direction: str, exact: bool) -> str:
    if not math.isfinite(rc.rate) or not rc.inside:
        return "cut: nothing must cross"
    frac = demand * rc.outside
    mask = sum(1 << r for r in rc.inside)
    word = "cut" if exact else "cut (relaxed)"
    return f"{word}: {_fmt_frac(frac)}*Z {direction} ranks {_mask_desc(mask, n)} at <= {rc.capacity:g} GB/s"


def _searched_cut_coefficient(kind: str, n: int, root: int, net: BoundNetwork) -> tuple[float, str]:
    """The cut bound over a searched family of cuts with cover capacities (valid, not always exact)."""
    best, best_desc = 0.0, "no cut"
    candidates = _structured_cuts(net.topology)
    hints: dict[int, tuple[float, float]] = {}

    def evaluate(mask: int) -> None:
        nonlocal best, best_desc
        k = bin(mask).count("1")
        fin, fout = cut_needs(kind, n, k, bool((mask >> root) & 1))
        hint = hints.get(mask, (math.inf, math.inf))
        for frac, cap_fn, direction, h in (
            (float(fin), net.cap_into, "into", hint[0]),
            (float(fout), net.cap_out_of, "out of", hint[1]),
        ):
            if frac <= 0:
                continue
            cap = min(cap_fn(mask), h)  # both are valid upper bounds
            coef = math.inf if cap <= 0 else frac / (cap * BYTES_PER_US_PER_GBPS)
            if coef > best:
                best = coef
                best_desc = f"cut: {_fmt_frac(frac)}*Z {direction} ranks {_mask_desc(mask, n)} at <= {cap:g} GB/s"

    if EXHAUSTIVE_PRECISE_MAX_RANKS < n <= EXHAUSTIVE_MAX_RANKS:
        hints = _vectorised_top_cuts(kind, n, root, net)
        candidates = sorted(set(candidates) | set(hints))
    for mask in candidates:
        evaluate(mask)
    return best, best_desc


def _vectorised_top_cuts(kind: str, n: int, root: int, net: BoundNetwork) -> dict[int, tuple[float, float]]:
    """Every subset, with a cheap capacity estimate; returns the most binding masks.

    The result maps each such mask to its estimated capacities (into, out of).

    Capacity into ``S`` is bounded by ``sum_{b in S} min(W_in(b, not S), ingress(b))``
    and by the same from the sender side, with ``W`` the matrix of connection
    bandwidths (each term bounds the flow into ``b`` from outside ``S``).
    """
    size = 1 << n
    W = np.zeros((n, n))
    for c in net.topology.connections():
        W[c.src, c.dst] = c.bw
    # subset sums by doubling (no BLAS): A[S, b] = sum_{a in S} W[a, b], B[S, a] = sum_{b in S} W[a, b]
    A = np.zeros((size, n))
    B = np.zeros((size, n))
    X = np.zeros((size, n), dtype=bool)
    for i in range(n):
        lo, hi = 1 << i, 1 << (i + 1)
        A[lo:hi] = A[:lo] + W[i]
        B[lo:hi] = B[:lo] + W[:, i]
        X[lo:hi] = X[:lo]
        X[lo:hi, i] = True
    into_dst = np.where(X, np.minimum(W.sum(0)[None, :] - A, net.ingress[None, :]), 0.0).sum(1)
    into_src = np.where(X, 0.0, np.minimum(B, net.egress[None, :])).sum(1)
    cap_in_all = np.minimum(into_dst, into_src)
    full = size - 1
    masks = np.arange(1, full, dtype=np.int64)
    cap_in = cap_in_all[1:full]
    cap_out = cap_in_all[full ^ masks]
    X = X[1:full]
    Xf = X.astype(float)
    k = Xf.sum(1)
    fin, fout = cut_needs(kind, n, k, X[:, root])
    with np.errstate(divide="ignore", invalid="ignore"):
        t_in = np.where(fin > 0, fin / cap_in, 0.0)
        t_out = np.where(fout > 0, fout / cap_out, 0.0)
    t = np.maximum(t_in, t_out)
    t = np.where(np.isnan(t), math.inf, t)
    top = np.argsort(-t, kind="stable")[:EXHAUSTIVE_RECHECK]
    return {int(masks[i]): (float(cap_in[i]), float(cap_out[i])) for i in top}


def _fmt_frac(x: float) -> str:
    if not math.isfinite(x):
        return str(x)
    for den in (1, 2, 3, 4, 6, 8, 16, 32, 64, 128, 256, 512, 1024):
        num = x * den
        if is_close(num, round(num)):
            num = int(round(num))
            return str(num) if den == 1 else f"{num}/{den}"
    return f"{x:.4g}"


def _aggregate_coefficient(kind: str, n: int, root: int, net: BoundNetwork) -> tuple[float, str]:
    if kind in ("allgather", "reduce_scatter", "broadcast", "reduce"):
        total = float(n - 1)
    elif kind == "allreduce":
        total = 2.0 * (n - 1)
    elif kind == "alltoall":
        sources = net._sources()
        hops = net.distances("hops", sources)
        counted = sum(float(np.sum(hops[s])) - hops[s][s] for s in sources)
        # pairs whose distance was not computed count one hop each
        total = (counted + (n - len(sources)) * (n - 1)) / n
    elif kind == "gather":
        d = net.distances("hops", [root], reverse=True)[root]
        total = float(np.sum(d)) / n
    elif kind == "scatter":
        d = net.distances("hops", [root])[root]
        total = float(np.sum(d)) / n
    else:
        raise ValueError(f"no aggregate bound for collective kind {kind!r}")
    cap = net.total_capacity()
    if kind == "allreduce":
        coef = total / (cap * BYTES_PER_US_PER_GBPS) if cap > 0 else math.inf
        desc = f"aggregate: {_fmt_frac(total)}*Z over the total network capacity {cap:g} GB/s"
        for label, groups in _partitions(net.topology):
            p_coef, p_desc = _partition_coefficient(net, label, groups)
            if p_coef > coef:
                coef, desc = p_coef, p_desc
        return coef, desc
    if total <= 0:
        return 0.0, "aggregate: nothing to move"
    if not math.isfinite(total):
        return math.inf, "aggregate: some rank cannot reach a rank it must send to"
    coef = math.inf if cap <= 0 or not math.isfinite(total) else total / (cap * BYTES_PER_US_PER_GBPS)
    return coef, f"aggregate: {_fmt_frac(total)}*Z over the total network capacity {cap:g} GB/s"


def _partitions(topology: Topology) -> list[tuple[str, list[list[int]]]]:
    """Partitions of the ranks into 2..n-1 groups for the allreduce group bound."""
    n = topology.n_ranks
    out: list[tuple[str, list[list[int]]]] = []
    seen: set[tuple[tuple[int, ...], ...]] = set()

    def add(label: str, key: Sequence[int]) -> None:
        groups: dict[int, list[int]] = {}
        for r in range(n):
            groups.setdefault(key[r], []).append(r)
        parts = sorted(tuple(g) for g in groups.values())
        if 2 <= len(parts) < n and tuple(parts) not in seen:
            seen.add(tuple(parts))
            out.append((label, [list(g) for g in parts]))

    add("nodes", topology.nodes)
    if topology.dims:
        sizes = [d.size for d in topology.dims]
        for d in range(len(sizes) - 1):
            block = math.prod(sizes[: d + 1])
            add(f"blocks of dimensions 0..{d}", [r // block for r in range(n)])
    return out


def _partition_coefficient(net: BoundNetwork, label: str, groups: list[list[int]]) -> tuple[float, str]:
    """The allreduce bound across ``groups``: 2(p-1) Z over the inter-group capacity."""
    group_of = {r: g for g, members in enumerate(groups) for r in members}
    between = [c for c in net.topology.connections() if group_of[c.src] != group_of[c.dst]]
    masks = [sum(1 << r for r in members) for members in groups]
    cap = min(
        cover_capacity(between, net.res_bw),
        sum(net.cap_out_of(m) for m in masks),
        sum(net.cap_into(m) for m in masks),
    )
    p = len(groups)
    total = 2.0 * (p - 1)
    coef = math.inf if cap <= 0 else total / (cap * BYTES_PER_US_PER_GBPS)
    return coef, f"aggregate: {_fmt_frac(total)}*Z between {p} groups ({label}) over their capacity {cap:g} GB/s"


def _latency(kind: str, n: int, root: int, net: BoundNetwork) -> tuple[float, str]:
    if kind in ("broadcast", "scatter"):
        dist = {root: net.distances("message", [root])[root]}
    elif kind in ("reduce", "gather"):
        d = net.distances("message", [root], reverse=True)[root]
        far = int(np.argmax(d))
        return float(d[far]), f"latency: message path {far}->{root}"
    else:
        dist = net.distances("message")
    best, desc = 0.0, "latency: none"
    for s, arr in dist.items():
        b = int(np.argmax(arr))
        if arr[b] > best:
            best, desc = float(arr[b]), f"latency: message path {s}->{b}"
    return best, desc


@lru_cache(maxsize=8)
def _net(topology: Topology) -> BoundNetwork:
    return BoundNetwork(topology)


@lru_cache(maxsize=64)
def _coefficients(kind: str, n: int, root: int, topology: Topology) -> _Coefficients:
    net = _net(topology)
    cut, cut_desc, cut_exact = _cut_coefficient(kind, n, root, net)
    agg, agg_desc = _aggregate_coefficient(kind, n, root, net)
    lat, lat_desc = _latency(kind, n, root, net)
    log.debug("bounds for %s on %s: %s; %s; %s", kind, topology.name, cut_desc, agg_desc, lat_desc)
    return _Coefficients(cut, cut_desc, cut_exact, agg, agg_desc, lat, lat_desc)


def lower_bound(collective: Collective, topology: Topology, size_bytes: float) -> Bound:
    """A lower bound on the time (us) of ``collective`` on ``topology`` for ``size_bytes``.

    ``time_us = max(latency_us, bandwidth_us)``; ``bandwidth_us`` is the best
    of the cut and aggregate bounds; ``which`` names the winner. The bound
    does not depend on the chunk factor. Results are cached per topology.
    A topology with size-dependent costs is bounded at their fastest point
    (:meth:`~ccsynth.topologies.model.Topology.fastest`).

    Raises :class:`~ccsynth.errors.TopologyError` if the rank counts differ.
    """
    topology = topology.fastest  # size-dependent costs at their fastest point: a bound never exceeds a time
    n = collective.n_ranks
    if topology.n_ranks != n:
        raise TopologyError(
            f"topology {topology.name!r} has {topology.n_ranks} ranks but the collective has {n}"
        )
    size = float(size_bytes)
    if not math.isfinite(size) or size < 0:
        raise SizeError(f"message size must be a non-negative number of bytes, got {size_bytes!r}")
    if n == 1:
        return Bound(0.0, 0.0, 0.0, "trivial: one rank", {"cut": 0.0, "aggregate": 0.0, "latency": 0.0})
    co = _coefficients(collective.kind, n, collective.root, topology)
    cut_us = co.cut_us_per_byte * size if size > 0 else 0.0
    agg_us = co.agg_us_per_byte * size if size > 0 else 0.0
    bw_us = max(cut_us, agg_us)
    bw_desc = co.cut_desc if cut_us >= agg_us else co.agg_desc
    if co.latency_us > bw_us:
        time_us, which = co.latency_us, co.latency_desc
    else:
        time_us, which = bw_us, bw_desc
    details = {
        "cut": cut_us,
        "cut_which": co.cut_desc,
        "cut_exact": co.cut_exact,
        "aggregate": agg_us,
        "aggregate_which": co.agg_desc,
        "latency": co.latency_us,
        "latency_which": co.latency_desc,
    }
    return Bound(time_us, bw_us, co.latency_us, which, details)


def clear_cache() -> None:
    """Forget cached per-topology bound coefficients."""
    _coefficients.cache_clear()
    _net.cache_clear()
    flow_network.cache_clear()
    translations.cache_clear()


__all__ = ["Bound", "lower_bound", "per_collective_bound", "FORMULAS", "cover_capacity", "cut_needs", "clear_cache"]
# cover_capacity moved to ccsynth.synth.capacity (the flow network needs it below the bounds); re-exported here
