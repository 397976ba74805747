"""The flow network of a topology: ranks, switch hubs and shared-port nodes joined by capacitated arcs.

ccsynth's cost model (:mod:`ccsynth.topologies.model`) is not a graph: a
connection ``a -> b`` consumes a *set* of resources (its link, or its
switch's egress port of ``a`` and ingress port of ``b``, plus any shared
ports covering the pair), and a resource caps the sum of the rates of all
connections that consume it. Max-flow arguments (ForestColl's throughput
test, Edmonds' branching theorem) need a graph. This module builds one whose
flows are exactly the feasible connection rates -- or, where no graph can
say the same, a *relaxation* of them, and says which.

Construction
------------
Nodes: the ranks ``0..n-1`` first, then auxiliary nodes. Arcs carry a
capacity (GB/s) and name the resource they stand for; ``inf`` arcs stand for
none.

1. **Redundant resources are dropped.** A shared port ``P`` whose
   connections can never exceed its bandwidth under the resources still kept
   (:func:`~ccsynth.synth.capacity.rate_upper_bound` over them at most
   ``bw(P)``) is dropped, ports in topology order, each checked against the
   resources kept at that moment; then a link whose connection keeps a port
   of bandwidth at most the link's is dropped (the port already caps that
   one connection). Each dropped constraint is implied by constraints kept
   at the end (by induction along the order), so the feasible rates do not
   change.
2. **A plain link** (no port kept on it) is an arc ``a -> b``.
3. **A plain switch** (no pair of its members keeps a port) is a hub node
   ``H``: arcs ``a -> H`` (``a``'s egress port) and ``H -> b`` (``b``'s
   ingress port) for every member.
4. **Connections with kept ports**: every kept port ``P`` becomes two nodes
   joined by one arc ``P.in -> P.out`` of ``bw(P)``. A connection's kept
   ports, sorted by (number of sources, minus number of destinations,
   name) -- a NIC's egress side before its ingress side -- form a chain
   ``P1 -> ... -> Pm``; the connection's path is *entry* ``-> P1.in ->
   P1.out -> ... -> Pm.out ->`` *exit*, joined by ``inf`` arcs. The entry is
   the rank ``a`` itself (its link dropped), a node ``L(a,b)`` behind the
   arc ``a -> L`` of the kept link, or, on a switch, the node ``T(sw, a)``
   behind ``a``'s egress-port arc; the exit is ``b``, or ``R(sw, b)`` before
   ``b``'s ingress-port arc. The pairs of a switch that keep no port meet in
   a hub ``T(sw, a) -> H -> R(sw, b)``.
5. **A spine** attaches to the ``T``/``R`` nodes of its leaves (a leaf
   switch always gets them): non-blocking, through a node of the sender's
   node and a segment tree over the nodes that reaches every *other* node
   (so ranks of one node never meet through it, as in the model); with
   capped up-links, through one arc per leaf and direction (``up``/``down``),
   a relaxation where ranks of one node sit on different leaves (see
   :func:`_spine`).

Why it is valid (a relaxation)
------------------------------
Every connection has a path whose capacitated arcs are exactly its kept
resources, each once, and no other connection's path crosses the arc of a
resource it does not consume. So any feasible vector of connection rates
routes in the network without exceeding an arc: every max-flow or min-cut
value of the network is at least the true one, and every lower bound on
time computed from it is valid.

When it is exact
----------------
Call a path from a rank ``a`` to a rank ``b`` through auxiliary nodes only
a *segment*. If every segment with ``a != b`` is the path of a connection
``a -> b`` -- more precisely, crosses the arc of every kept resource of some
connection ``a -> b`` -- then every network flow is a feasible vector of
connection rates plus relays: decompose it into paths; split each path at
its ranks into segments; a segment ``a -> a`` is a cycle and can be
cancelled (loads only drop); a segment ``a -> b`` is rate on a connection
``a -> b``, whose resources it loads. So network flows and feasible
(multi-hop) connection flows are the same set, and in particular for every
set of ranks ``S`` the smallest network cut separating the ranks outside
``S`` from those inside (auxiliary nodes placed freely) equals the LP
capacity of the connections crossing into ``S`` (max-flow = min-cut on both
sides, and a max flow from outside ``S`` into ``S`` never gains by crossing
twice). :func:`flow_network` checks this condition by walking every
segment from every entry (plain links and plain switches satisfy it by
construction: a hub's segments are exactly its member pairs) and sets
:attr:`FlowNetwork.exact`. Catalog machines (switches, links, NICs shared
by a node's GPUs over links to every remote GPU, several NICs per node) are
exact. An arbitrary shared port (say a cap on traffic from ranks ``{0, 2}``
to ``{1, 3}`` over a switch whose other pairs are uncapped) cannot be: the
capacity of a cut is then an LP whose optimal cover may be fractional,
which no graph cut expresses; the network stays a relaxation and the bounds
built on it are labelled as such.

Example:
    >>> from ccsynth.topologies.model import Switch, Topology
    >>> net = flow_network(Topology("sw", 3, switches=(Switch("sw", (0, 1, 2), 10.0, 0.5),)))
    >>> net.n_nodes, len(net.caps), net.exact
    (4, 6, True)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

from ccsynth.synth.capacity import rate_upper_bound
from ccsynth.tolerance import EVENT_REL, is_greater
from ccsynth.topologies.model import Connection, Topology

__all__ = ["FlowNetwork", "flow_network", "SEGMENT_BUDGET"]

#: the exactness check walks at most this many segment steps (beyond: the network counts as a relaxation)
SEGMENT_BUDGET = 5_000_000


@dataclass(frozen=True)
class FlowNetwork:
    """A capacitated digraph: ranks are nodes ``0..n_ranks-1``, auxiliary nodes follow.

    Arc ``i`` runs ``tails[i] -> heads[i]`` with capacity ``caps[i]`` GB/s
    (``inf``: uncapacitated) and stands for resource ``resources[i]`` (None
    for ``inf`` arcs). ``exact`` says whether network flows are exactly the
    feasible connection flows (see the module docstring); ``note`` says why
    not, and which resources were dropped as redundant.
    """

    n_ranks: int
    node_names: tuple[str, ...]
    tails: tuple[int, ...]
    heads: tuple[int, ...]
    caps: tuple[float, ...]
    resources: tuple[str | None, ...]
    exact: bool
    note: str = ""

    @property
    def n_nodes(self) -> int:
        return len(self.node_names)

    @property
    def n_arcs(self) -> int:
        return len(self.caps)

    def reversed(self) -> FlowNetwork:
        """The same network with every arc turned around (the network of the reversed topology)."""
        return FlowNetwork(self.n_ranks, self.node_names, self.heads, self.tails, self.caps, self.resources,
                           self.exact, self.note)

    def total_capacity(self) -> float:
        return sum(c for c in self.caps if math.isfinite(c))


class _Builder:
    def __init__(self, n: int):
        self.names = [str(r) for r in range(n)]
        self.index: dict[str, int] = {}
        self.arcs: dict[tuple[int, int], tuple[float, str | None]] = {}

    def node(self, name: str) -> int:
        i = self.index.get(name)
        if i is None:
            i = self.index[name] = len(self.names)
            self.names.append(name)
        return i

    def arc(self, u: int, v: int, cap: float = math.inf, resource: str | None = None) -> None:
        old = self.arcs.get((u, v))
        if old is not None and (old[0] != cap or old[1] != resource):
            raise AssertionError(f"arc {self.names[u]}->{self.names[v]} built twice differently")  # pragma: no cover
        self.arcs[(u, v)] = (cap, resource)


def _covered(topology: Topology, sp) -> list[Connection]:
    """The connections that consume shared port ``sp`` (its source x destination pairs, no more)."""
    out = []
    for a in dict.fromkeys(sp.srcs):
        for d in dict.fromkeys(sp.dsts):
            c = topology.connection(a, d)
            if c is not None and sp.name in c.resources:
                out.append(c)
    return out


def _kept_ports(topology: Topology) -> tuple[set[str], list[str]]:
    """Shared ports that are not redundant (step 1 of the construction), and the dropped ones."""
    if not topology.shared_ports:
        return set(), []
    res_bw = dict(topology.resource_bw)
    kept = {sp.name for sp in topology.shared_ports}
    dropped = []
    for sp in topology.shared_ports:
        covered = _covered(topology, sp)
        others = {r: bw for r, bw in res_bw.items() if r != sp.name}
        items = []
        for c in covered:
            rs = tuple(r for r in c.resources if r in others)
            items.append((rs, min(others[r] for r in rs) if rs else math.inf))
        if not covered or not is_greater(rate_upper_bound(items, others), sp.bw, EVENT_REL):
            kept.discard(sp.name)
            dropped.append(sp.name)
            del res_bw[sp.name]
    return kept, dropped


def _chain_key(sp) -> tuple:
    return (len(sp.srcs), -len(sp.dsts), sp.name)


@lru_cache(maxsize=16)
def flow_network(topology: Topology) -> FlowNetwork:
    """The flow network of ``topology`` (see the module docstring); cached per topology."""
    n = topology.n_ranks
    b = _Builder(n)
    ports = {sp.name: sp for sp in topology.shared_ports}
    kept, dropped = _kept_ports(topology)
    chain_of: dict[tuple[int, int], tuple[str, ...]] = {}  # kept ports of the pairs some kept port covers
    for name in sorted(kept):
        for c in _covered(topology, ports[name]):
            if (c.src, c.dst) not in chain_of:
                chain = tuple(sorted((r for r in c.resources if r in kept), key=lambda r: _chain_key(ports[r])))
                chain_of[(c.src, c.dst)] = chain
    gone = set(dropped)  # resources the network leaves out (redundant)
    # entries of the port paths: node -> (origin rank, arc resource)
    entries: dict[int, tuple[int, str | None]] = {}
    links_dropped = 0

    def port_path(entry: int, chain: tuple[str, ...], exit_: int) -> None:
        prev = entry
        for name in chain:
            pin, pout = b.node(f"{name}.in"), b.node(f"{name}.out")
            b.arc(pin, pout, ports[name].bw, name)
            b.arc(prev, pin)
            prev = pout
        b.arc(prev, exit_)

    for link in topology.links:
        a, d = link.src, link.dst
        chain = chain_of.get((a, d), ())
        if not chain:
            b.arc(a, d, link.bw, link.name)
            continue
        if link.bw >= min(ports[p].bw for p in chain):
            links_dropped += 1
            gone.add(link.name)
            entries[a] = (a, None)
            port_path(a, chain, d)
        else:
            entry = b.node(f"{link.name}")
            b.arc(a, entry, link.bw, link.name)
            entries[entry] = (a, link.name)
            port_path(entry, chain, d)
    leaves = {name for sp in topology.spines for name in sp.leaves}
    leaf_tx: dict[int, int] = {}  # rank -> its tx node on its spine leaf
    leaf_rx: dict[int, int] = {}
    for sw in topology.switches:
        members = sw.ranks
        mixed = bool(chain_of) and any(chain_of.get((a, d)) for a in members for d in members if a != d)
        if not mixed and sw.name in leaves:
            # a spine leaf: tx and rx nodes of its own for every member (the spine attaches there), one hub
            hub = b.node(sw.name)
            for r in members:
                leaf_tx[r] = t = b.node(f"{sw.name}:T{r}")
                leaf_rx[r] = x = b.node(f"{sw.name}:R{r}")
                b.arc(r, t, sw.bw, f"{sw.name}:tx{r}")
                b.arc(x, r, sw.bw, f"{sw.name}:rx{r}")
                b.arc(t, hub)
                b.arc(hub, x)
            continue
        if not mixed:
            hub = b.node(sw.name)
            for r in members:
                b.arc(r, hub, sw.bw, f"{sw.name}:tx{r}")
                b.arc(hub, r, sw.bw, f"{sw.name}:rx{r}")
            continue
        tx = {r: b.node(f"{sw.name}:T{r}") for r in members}
        rx = {r: b.node(f"{sw.name}:R{r}") for r in members}
        for r in members:
            b.arc(r, tx[r], sw.bw, f"{sw.name}:tx{r}")
            b.arc(rx[r], r, sw.bw, f"{sw.name}:rx{r}")
            entries[tx[r]] = (r, f"{sw.name}:tx{r}")
            if sw.name in leaves:
                leaf_tx[r], leaf_rx[r] = tx[r], rx[r]
        plain: dict[int, list[int]] = {}  # the members each member reaches without a port
        for a in members:
            for d in members:
                if a == d:
                    continue
                chain = chain_of.get((a, d), ())
                if chain:
                    port_path(tx[a], chain, rx[d])
                else:
                    plain.setdefault(a, []).append(d)
        # one hub per set of plain destinations (self included): its segments are exactly its members' pairs
        hubs: dict[frozenset[int], int] = {}
        for a, ds in plain.items():
            key = frozenset(ds) | {a}
            found = hubs.get(key)
            if found is None:
                hub = hubs[key] = b.node(f"{sw.name}:hub{len(hubs)}")
                for d in ds:
                    b.arc(hub, rx[d])
                b.arc(hub, rx[a])
            else:
                hub = found
            b.arc(tx[a], hub)
    spine_notes = [_spine(b, topology, sp, leaf_tx, leaf_rx, chain_of) for sp in topology.spines]
    exact, why = _check_segments(b, n, entries, topology, gone)
    notes = []
    if not exact:
        notes.append(why)
    if any(spine_notes):
        exact = False
        notes += [x for x in spine_notes if x]
    if dropped:
        notes.append(f"redundant shared ports dropped: {', '.join(dropped[:6])}" + (" ..." if len(dropped) > 6 else ""))
    if links_dropped:
        notes.append(f"{links_dropped} link(s) capped by a slower shared port dropped")
    arcs = sorted(b.arcs.items())
    return FlowNetwork(
        n_ranks=n,
        node_names=tuple(b.names),
        tails=tuple(u for (u, _), _ in arcs),
        heads=tuple(v for (_, v), _ in arcs),
        caps=tuple(cap for _, (cap, _) in arcs),
        resources=tuple(res for _, (_, res) in arcs),
        exact=exact,
        note="; ".join(notes),
    )


def _spine(b: _Builder, topology: Topology, sp, leaf_tx: dict[int, int], leaf_rx: dict[int, int],
           chain_of: dict[tuple[int, int], tuple[str, ...]]) -> str:
    """Add spine ``sp`` to the network (see the module docstring); returns why it is a relaxation, or "".

    A member ``a`` of a leaf reaches, through its tx node, every member ``b``
    of another node on the spine's leaves, at ``b``'s rx node. Non-blocking:
    ``a``'s tx node feeds a node ``X(k)`` of its node ``k``, which feeds the
    entry ``Y(j)`` of every other node ``j`` through a segment tree over the
    nodes (``O(log)`` arcs per node: the subtrees covering every node but
    ``k``), and ``Y(j)`` feeds the rx nodes of ``j``'s members. Every segment
    ``a -> b`` so built joins two ranks of different nodes through exactly
    ``a``'s tx port and ``b``'s rx port -- the resources of their spine
    connection, or of their leaf connection when they share a leaf -- so the
    spine keeps the network exact. With capped up-links every leaf's
    traffic into the spine shares one arc (``up``) and every leaf's traffic
    out of it another (``down``): the origin's node is lost there, so ranks
    of one node on different leaves reach each other in the network though
    they have no spine connection -- a relaxation (bounds stay valid). Shared
    ports on spine pairs are left out (a relaxation too).
    """
    idx_switch = {sw.name: sw for sw in topology.switches}
    nodes = topology.nodes
    members = [r for leaf in sp.leaves for r in idx_switch[leaf].ranks]
    notes = []
    if chain_of and any(chain_of.get((a, d)) for a in members for d in topology.neighbors_out(a)
                        if (conn := topology.connection(a, d)) is not None and conn.via == sp.name):
        notes.append(f"shared ports on pairs through spine {sp.name} left out")
    if sp.uplink_bw is not None:
        hub = b.node(f"{sp.name}")
        for leaf in sp.leaves:
            up_in, up_out = b.node(f"{sp.up(leaf)}.in"), b.node(f"{sp.up(leaf)}.out")
            down_in, down_out = b.node(f"{sp.down(leaf)}.in"), b.node(f"{sp.down(leaf)}.out")
            b.arc(up_in, up_out, sp.uplink_bw, sp.up(leaf))
            b.arc(up_out, hub)
            b.arc(hub, down_in)
            b.arc(down_in, down_out, sp.uplink_bw, sp.down(leaf))
            for r in idx_switch[leaf].ranks:
                b.arc(leaf_tx[r], up_in)
                b.arc(down_out, leaf_rx[r])
        by_node: dict[int, set[str]] = {}
        for leaf in sp.leaves:
            for r in idx_switch[leaf].ranks:
                by_node.setdefault(nodes[r], set()).add(leaf)
        if any(len(v) > 1 for v in by_node.values()):
            notes.append(f"capped spine {sp.name}: ranks of one node on different leaves meet through its up-links")
        return "; ".join(notes)
    order = sorted({nodes[r] for r in members})
    m = len(order)
    pos = {k: i for i, k in enumerate(order)}
    y = [b.node(f"{sp.name}:Y{k}") for k in order]

    def tree(lo: int, hi: int) -> int:
        """The node that reaches every Y of positions lo..hi-1."""
        if hi - lo == 1:
            return y[lo]
        t = b.node(f"{sp.name}:Z{lo}-{hi}")
        mid = (lo + hi) // 2
        b.arc(t, tree(lo, mid))
        b.arc(t, tree(mid, hi))
        return t

    def cover(lo: int, hi: int, skip: int, out: list[int]) -> None:
        """The subtree roots that cover lo..hi-1 but ``skip``."""
        if not lo <= skip < hi:
            out.append(roots[(lo, hi)])
            return
        if hi - lo == 1:
            return
        mid = (lo + hi) // 2
        cover(lo, mid, skip, out)
        cover(mid, hi, skip, out)

    roots: dict[tuple[int, int], int] = {}

    def index(lo: int, hi: int) -> None:
        roots[(lo, hi)] = y[lo] if hi - lo == 1 else b.node(f"{sp.name}:Z{lo}-{hi}")
        if hi - lo > 1:
            mid = (lo + hi) // 2
            index(lo, mid)
            index(mid, hi)

    if m > 1:
        tree(0, m)
        index(0, m)
    x = {k: b.node(f"{sp.name}:X{k}") for k in order}
    for k in order:
        targets: list[int] = []
        if m > 1:
            cover(0, m, pos[k], targets)
        for t in targets:
            b.arc(x[k], t)
    for r in members:
        b.arc(leaf_tx[r], x[nodes[r]])
        b.arc(y[pos[nodes[r]]], leaf_rx[r])
    return "; ".join(notes)


def _check_segments(b: _Builder, n: int, entries: dict[int, tuple[int, str | None]], topology: Topology,
                    gone: set[str]) -> tuple[bool, str]:
    """Walk every segment from every port-path entry; (exact?, why not).

    ``gone``: the resources the network leaves out; a connection's other
    resources must all lie on a segment that joins its ranks.
    """
    if not entries:
        return True, ""
    out: dict[int, list[tuple[int, str | None]]] = {}
    for (u, v), (_, arc_res) in b.arcs.items():
        out.setdefault(u, []).append((v, arc_res))
    steps = 0
    for entry, (origin, first_res) in entries.items():
        # (node, resources so far); entries that are ranks start from their own out-arcs into port nodes
        start: tuple[str, ...] = (first_res,) if first_res is not None else ()
        stack: list[tuple[int, tuple[str, ...], frozenset[int]]] = [(entry, start, frozenset((entry,)))]
        while stack:
            node, res, seen = stack.pop()
            for v, r in out.get(node, ()):
                steps += 1
                if steps > SEGMENT_BUDGET:
                    return False, "too many port paths to check exactness"
                if node == entry and entry < n and v < n:
                    continue  # a plain link of the entry rank, not a port path
                if node == entry and entry < n and not b.names[v].endswith(".in"):
                    continue  # the entry rank's other arcs (switch ports, links) start other walks
                path_res = res + ((r,) if r is not None else ())
                if v < n:
                    if v == origin:
                        continue  # a cycle: cancels out
                    conn = topology.connection(origin, v)
                    if conn is None:
                        return False, f"a path through shared ports joins ranks {origin} and {v}, which have no connection"
                    want = {r for r in conn.resources if r not in gone}
                    if not want <= set(path_res):
                        return False, (f"a path {origin} -> {v} through shared ports skips resources "
                                       f"{sorted(want - set(path_res))[:3]} of that connection")
                    continue
                if v in seen:
                    continue
                stack.append((v, path_res, seen | {v}))
    return True, ""
