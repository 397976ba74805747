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
from ccsynth.topologies.model import Topology

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

    def reversed(self) -> "FlowNetwork":
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


def _kept_ports(topology: Topology) -> tuple[set[str], list[str]]:
    """Shared ports that are not redundant (step 1 of the construction), and the dropped ones."""
    conns = topology.connections()
    res_bw = dict(topology.resource_bw)
    kept = {sp.name for sp in topology.shared_ports}
    dropped = []
    for sp in topology.shared_ports:
        covered = [c for c in conns if sp.name in c.resources]
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
    res_bw = topology.resource_bw
    ports = {sp.name: sp for sp in topology.shared_ports}
    kept, dropped = _kept_ports(topology)
    conns = topology.connections()
    chain_of: dict[tuple[int, int], tuple[str, ...]] = {}
    for c in conns:
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
        chain = chain_of[(a, d)]
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
    for sw in topology.switches:
        members = sw.ranks
        mixed = any(chain_of[(a, d)] for a in members for d in members if a != d)
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
        plain: dict[int, list[int]] = {}  # the members each member reaches without a port
        for a in members:
            for d in members:
                if a == d:
                    continue
                chain = chain_of[(a, d)]
                if chain:
                    port_path(tx[a], chain, rx[d])
                else:
                    plain.setdefault(a, []).append(d)
        # one hub per set of plain destinations (self included): its segments are exactly its members' pairs
        hubs: dict[frozenset[int], int] = {}
        for a, ds in plain.items():
            key = frozenset(ds) | {a}
            hub = hubs.get(key)
            if hub is None:
                hub = hubs[key] = b.node(f"{sw.name}:hub{len(hubs)}")
                for d in ds:
                    b.arc(hub, rx[d])
                b.arc(hub, rx[a])
            b.arc(tx[a], hub)
    exact, why = _check_segments(b, n, entries, topology, gone)
    notes = []
    if not exact:
        notes.append(why)
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


def _check_segments(b: _Builder, n: int, entries: dict[int, tuple[int, str | None]], topology: Topology,
                    gone: set[str]) -> tuple[bool, str]:
    """Walk every segment from every port-path entry; (exact?, why not).

    ``gone``: the resources the network leaves out; a connection's other
    resources must all lie on a segment that joins its ranks.
    """
    if not entries:
        return True, ""
    out: dict[int, list[tuple[int, str | None]]] = {}
    for (u, v), (_, res) in b.arcs.items():
        out.setdefault(u, []).append((v, res))
    steps = 0
    for entry, (origin, first_res) in entries.items():
        # (node, resources so far); entries that are ranks start from their own out-arcs into port nodes
        start = [first_res] if first_res is not None else []
        stack = [(entry, tuple(start), frozenset((entry,)))]
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
