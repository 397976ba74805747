"""A sketch as values, and the topology seen through it (:class:`LogicalTopology`).

:class:`Sketch` (with :class:`SwitchRule` and :class:`InterNode`) is a
frozen value that checks its own fields; :meth:`Sketch.bind` checks it
against a topology and returns the :class:`LogicalTopology` the routing and
ordering MILPs read: which connection may carry which chunk, the relay rules
between nodes, the switch policies, and the symmetry group. The two live
together because binding is what a sketch is for. What each field means:
:mod:`ccsynth.synth.sketch`; reading and writing JSON:
:mod:`ccsynth.synth.sketch_json`; the symmetry group:
:mod:`ccsynth.synth.sketch_symmetry`.
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

from ccsynth.errors import SketchError
from ccsynth.limits import check as check_limit
from ccsynth.synth.sketch_symmetry import Perm, SymmetryGroup, offset_permutation
from ccsynth.tolerance import is_close
from ccsynth.topologies.model import Topology

__all__ = [
    "FORMAT", "VERSION", "SWITCH_POLICIES", "INTRANODE_STRATEGIES", "INTERNODE_PATTERNS",
    "SwitchRule", "InterNode", "Sketch", "LogicalTopology",
]

FORMAT = "ccsynth.sketch"
VERSION = 1

#: switch hyperedge policies (TACCL's ``switch_hyperedge_strategy``)
SWITCH_POLICIES = ("none", "uc-max", "uc-min")
#: TACCL's intranode strategies: "switch" uses the switch policies, "minmax"
#: / "maxmin" add a load-balancing term to the routing objective
INTRANODE_STRATEGIES = ("none", "switch", "minmax", "maxmin")
#: TACCL's named inter-node connection patterns
INTERNODE_PATTERNS = ("fully-connected", "direct-map")


@dataclass(frozen=True)
class SwitchRule:
    """A switch policy. ``ranks`` are GPU indices inside a node (every node), () = all switches."""

    ranks: tuple[int, ...]
    policy: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "ranks", tuple(self.ranks))
        if self.policy not in SWITCH_POLICIES:
            raise SketchError(f"unknown switch hyperedge policy {self.policy!r}; choose one of: {', '.join(SWITCH_POLICIES)}")


@dataclass(frozen=True)
class InterNode:
    """Relay rules between nodes; all GPU numbers are indices inside a node.

    ``connections`` None means every cross-node connection of the topology
    may be used; ``senders`` None means any sender may forward any chunk;
    ``chunk_relays`` None puts no rule on chunk indices.
    """

    connections: tuple[tuple[int, tuple[int, ...]], ...] | None = None
    senders: tuple[tuple[int, tuple[int, ...]], ...] | None = None
    chunk_relays: tuple[tuple[int, tuple[int, ...]], ...] | None = None
    enforce_ordering: bool = False
    pattern: str = ""  # "fully-connected" / "direct-map" when given by name
    ring: bool = False  # ccsynth: nodes connect only to the next node (k -> k+1 mod N)

    @cached_property
    def conn_map(self) -> dict[int, frozenset[int]] | None:
        return None if self.connections is None else {s: frozenset(d) for s, d in self.connections}

    @cached_property
    def sender_map(self) -> dict[int, frozenset[int]] | None:
        """local sender -> local GPUs whose chunks it may forward."""
        return None if self.senders is None else {s: frozenset(g) for s, g in self.senders}

    @cached_property
    def relay_map(self) -> dict[int, frozenset[int]] | None:
        return None if self.chunk_relays is None else {j: frozenset(s) for j, s in self.chunk_relays}

    def to_dict(self) -> dict:
        d: dict[str, Any] = {}
        if self.pattern:
            d["connections"] = self.pattern
        elif self.connections is not None:
            d["connections"] = {str(s): list(t) for s, t in self.connections}
        if self.senders is not None:
            d["senders"] = {str(s): list(t) for s, t in self.senders}
        if self.chunk_relays is not None:
            d["chunk_relays"] = {str(s): list(t) for s, t in self.chunk_relays}
        if self.enforce_ordering:
            d["enforce_ordering"] = True
        if self.ring:
            d["ring"] = True
        return d


@dataclass(frozen=True)
class Sketch:
    """A communication sketch; see the module docstring for every field.

    >>> Sketch(chunk_factor=2, symmetry=((8, 16),)).to_dict()["symmetry"]
    [[8, 16]]
    """

    name: str = "sketch"
    chunk_factor: int = 1
    input_size: int | None = None
    symmetry: tuple[tuple[int, int], ...] = ()
    switches: tuple[SwitchRule, ...] = ()
    intranode: str = "none"
    internode: InterNode | None = None
    exclude: tuple[tuple[int, int], ...] = ()
    detours: int = 0
    nnodes: int | None = None
    source: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "symmetry", tuple((int(o), int(s)) for o, s in self.symmetry))
        object.__setattr__(self, "switches", tuple(self.switches))
        object.__setattr__(self, "exclude", tuple((int(a), int(b)) for a, b in self.exclude))
        if isinstance(self.chunk_factor, bool) or not isinstance(self.chunk_factor, int) or self.chunk_factor < 1:
            raise SketchError(f"sketch {self.name!r}: chunk factor (input_chunkup) must be a positive integer, got {self.chunk_factor!r}")
        check_limit(f"sketch {self.name!r}: chunk factor (input_chunkup)", self.chunk_factor, "MAX_CHUNK_FACTOR", SketchError)
        if self.nnodes is not None:
            if isinstance(self.nnodes, bool) or not isinstance(self.nnodes, int) or self.nnodes < 1:
                raise SketchError(f"sketch {self.name!r}: nnodes must be a positive integer, got {self.nnodes!r}")
            check_limit(f"sketch {self.name!r}: nnodes", self.nnodes, "MAX_RANKS", SketchError)
        if self.input_size is not None and (not isinstance(self.input_size, int) or self.input_size <= 0):
            raise SketchError(f"sketch {self.name!r}: input size must be a positive number of bytes, got {self.input_size!r}")
        if self.intranode not in INTRANODE_STRATEGIES:
            raise SketchError(f"sketch {self.name!r}: unknown intranode strategy {self.intranode!r}; choose one of: "
                              f"{', '.join(INTRANODE_STRATEGIES)}")
        if self.detours not in (0, 1):
            raise SketchError(f"sketch {self.name!r}: detours must be 0 or 1, got {self.detours!r}")
        for off, size in self.symmetry:
            if size < 1 or off < 0:
                raise SketchError(f"sketch {self.name!r}: symmetry offset [{off}, {size}] needs offset >= 0 and size >= 1")
            check_limit(f"sketch {self.name!r}: symmetry size", size, "MAX_RANKS", SketchError)

    # ------------------------------------------------------------------ helpers
    def with_chunk_factor(self, c: int) -> Sketch:
        return replace(self, chunk_factor=c)

    # ------------------------------------------------------------------ JSON
    def to_dict(self) -> dict:
        d: dict[str, Any] = {"format": FORMAT, "version": VERSION, "name": self.name, "chunk_factor": self.chunk_factor}
        if self.input_size is not None:
            d["input_size"] = self.input_size
        if self.nnodes is not None:
            d["nnodes"] = self.nnodes
        d["detours"] = self.detours
        d["symmetry"] = [list(x) for x in self.symmetry]
        if self.switches:
            d["switches"] = [{"ranks": list(r.ranks), "policy": r.policy} for r in self.switches]
        if self.intranode != "none":
            d["intranode"] = self.intranode
        if self.internode is not None:
            d["internode"] = self.internode.to_dict()
        if self.exclude:
            d["exclude"] = [list(e) for e in self.exclude]
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def bind(self, topology: Topology) -> LogicalTopology:
        """Check this sketch against ``topology`` and build the logical topology.

        Raises :class:`SketchError` naming the rule that fails.
        """
        return LogicalTopology(topology, self)


class LogicalTopology:
    """A topology seen through a sketch: allowed connections per chunk, symmetry group.

    Construction checks everything that can be checked before solving and
    raises :class:`SketchError` naming the failed rule.
    """

    def __init__(self, topology: Topology, sketch: Sketch):
        self.topology = topology
        self.sketch = sketch
        n = topology.n_ranks
        self.n = n
        where = f"sketch {sketch.name!r} on topology {topology.name!r}"
        self.where = where
        if sketch.nnodes is not None and sketch.nnodes != topology.n_nodes:
            raise SketchError(f"{where}: the sketch is for {sketch.nnodes} node(s) but the topology has {topology.n_nodes}")
        # node-local indices
        self.node_of = tuple(topology.nodes)
        self.node_ranks: dict[int, tuple[int, ...]] = {}
        for node in sorted(set(self.node_of)):
            self.node_ranks[node] = topology.node_ranks(node)
        self.local = [0] * n
        for ranks in self.node_ranks.values():
            for i, r in enumerate(ranks):
                self.local[r] = i
        for a, b in sketch.exclude:
            if not (0 <= a < n and 0 <= b < n) or not topology.has_connection(a, b):
                raise SketchError(f"{where}: excluded connection {a}->{b} is not a connection of the topology")
        self.excluded = frozenset(sketch.exclude)
        self._check_switch_rules()
        self._setup_internode()
        # allowed connections (ignoring per-chunk sender rules)
        self.connections = tuple(c for c in topology.connections() if self._conn_allowed(c.src, c.dst))
        self.out_edges: dict[int, list[int]] = {r: [] for r in range(n)}
        for c in self.connections:
            self.out_edges[c.src].append(c.dst)
        self.group = self._symmetry_group()
        self._check_reachability()

    # -------------------------------------------------------------- rules
    def is_cross(self, u: int, v: int) -> bool:
        return self.node_of[u] != self.node_of[v]

    def _check_switch_rules(self) -> None:
        topo, sk = self.topology, self.sketch
        self.switch_policy: dict[str, str] = {}
        for sw in topo.switches:
            self.switch_policy[sw.name] = "none"
        for rule in sk.switches:
            if not rule.ranks:
                for sw in topo.switches:
                    self.switch_policy[sw.name] = rule.policy
                continue
            matched = False
            for sw in topo.switches:
                nodes = {self.node_of[r] for r in sw.ranks}
                if len(nodes) != 1:
                    continue
                if sorted(self.local[r] for r in sw.ranks) == sorted(rule.ranks):
                    self.switch_policy[sw.name] = rule.policy
                    matched = True
            if not matched:
                raise SketchError(f"{self.where}: sketch switch {list(rule.ranks)} (GPU indices inside a node) "
                                  f"matches no switch of the topology")

    def _setup_internode(self) -> None:
        inter = self.sketch.internode
        self.inter = inter
        self.spreads = False
        self._entries: dict[tuple[int, frozenset | None], int | None] = {}
        if inter is None:
            return
        sizes = {len(r) for r in self.node_ranks.values()}
        if len(sizes) != 1:
            raise SketchError(f"{self.where}: relay rules need nodes of equal size, got sizes {sorted(sizes)}")
        g = sizes.pop()
        self.gpus_per_node = g
        ids = sorted(self.node_ranks)
        self.next_node = {k: ids[(i + 1) % len(ids)] for i, k in enumerate(ids)}
        conn = inter.conn_map
        if inter.pattern == "direct-map":
            conn = {i: frozenset((i,)) for i in range(g)}
        elif inter.pattern == "fully-connected":
            conn = None
        self.conn = conn
        # a sender reaching several GPUs of a node: data enters each node once and spreads (module docstring)
        self.spreads = self.topology.n_nodes > 1 and (conn is None or any(len(d) > 1 for d in conn.values()))
        for what, m in (("internode connection", inter.conn_map), ("gpus_to_sender_rev_map", inter.sender_map)):
            for s, vals in (m or {}).items():
                for x in (s, *vals):
                    if not 0 <= x < g:
                        raise SketchError(f"{self.where}: {what} names GPU {x}, but nodes have GPUs 0..{g - 1}")
        for senders in (inter.relay_map or {}).values():
            for x in senders:
                if not 0 <= x < g:
                    raise SketchError(f"{self.where}: chunk_to_relay_map names GPU {x}, but nodes have GPUs 0..{g - 1}")
        if self.topology.n_nodes > 1 and conn is not None:
            for s, dsts in sorted(conn.items()):
                for d in sorted(dsts):
                    if not any(self.topology.has_connection(ra[s], rb[d]) for na, ra in self.node_ranks.items()
                               for nb, rb in self.node_ranks.items() if na != nb):
                        a = self.node_ranks[0][s]
                        b = next(rb[d] for nb, rb in self.node_ranks.items() if nb != self.node_of[a])
                        raise SketchError(f"{self.where}: relay connection {s}->{d} (GPU indices inside a node) is no "
                                          f"connection of the topology, e.g. rank {a} (node {self.node_of[a]}) has no "
                                          f"link to rank {b} (node {self.node_of[b]})")

    def _conn_allowed(self, u: int, v: int) -> bool:
        if (u, v) in self.excluded:
            return False
        if self.inter is None or not self.is_cross(u, v):
            return True
        if self.inter.ring and self.node_of[v] != self.next_node[self.node_of[u]]:
            return False
        if self.conn is None:
            return True
        return self.local[v] in self.conn.get(self.local[u], ())

    def entry_local(self, src: int, j: int = 0) -> int | None:
        """The GPU (index inside a node) at which piece ``j`` of ``src`` enters every other node; None: anywhere.

        Only when the relay rules spread (see the module docstring): the
        receivers of the senders that may forward the piece (``senders``,
        ``chunk_relays``), the ``k``-th of them for ``src``'s index ``k``
        inside its node (modulo their number). Pieces of one chunk class
        (:meth:`chunk_classes`) enter at the same GPU.
        """
        if not self.spreads or self.inter is None:  # spreads only with relay rules (self.inter)
            return None
        k = self.local[src]
        rm = self.inter.relay_map
        relays = rm.get(j) if rm is not None else None
        key = (k, relays)
        if key not in self._entries:
            g = self.gpus_per_node
            senders = [s for s in (range(g) if self.conn is None else sorted(self.conn))
                       if relays is None or s in relays]
            sm = self.inter.sender_map
            if sm is not None:
                senders = [s for s in senders if k in sm.get(s, ())]
            receivers = sorted(set(range(g)) if self.conn is None and senders else
                               {r for s in senders for r in (self.conn or {}).get(s, ())})
            self._entries[key] = receivers[k % len(receivers)] if receivers else None
        return self._entries[key]

    def relay_edge_ok(self, src: int, j: int, u: int, v: int) -> bool:
        """:meth:`edge_ok`, and data every rank needs enters another node only at :meth:`entry_local`."""
        if not self.edge_ok(src, j, u, v):
            return False
        if self.spreads and self.is_cross(u, v):
            entry = self.entry_local(src, j)
            return entry is None or self.local[v] == entry
        return True

    def sender_ok(self, src: int, j: int, u: int) -> bool:
        """May chunk ``j`` of rank ``src`` leave ``src``'s node from rank ``u``?"""
        inter = self.inter
        if inter is None:
            return True
        if self.node_of[u] != self.node_of[src]:
            return True  # the rules govern leaving the source's own node
        sm = inter.sender_map
        if sm is not None and self.local[src] not in sm.get(self.local[u], ()):
            return False
        rm = inter.relay_map
        return not (rm is not None and j in rm and self.local[u] not in rm[j])

    def edge_ok(self, src: int, j: int, u: int, v: int) -> bool:
        """May chunk ``(src, j)`` travel over connection ``u -> v``?"""
        if not self._conn_allowed(u, v):
            return False
        if self.is_cross(u, v):
            return self.sender_ok(src, j, u)
        return True

    def chunk_classes(self, chunk_factor: int) -> list[tuple[int, ...]]:
        """Chunk indices ``j`` that have the same allowed edges (one class unless chunk_relays is used)."""
        rm = self.inter.relay_map if self.inter is not None else None
        if not rm:
            return [tuple(range(chunk_factor))]
        groups: dict[frozenset | None, list[int]] = {}
        for j in range(chunk_factor):
            groups.setdefault(rm.get(j), []).append(j)
        return [tuple(v) for _, v in sorted(groups.items(), key=lambda kv: kv[1][0])]

    # -------------------------------------------------------------- checks
    def _check_reachability(self) -> None:
        """Every chunk must be able to reach every rank over allowed edges."""
        if self.n == 1:
            return
        js = [cls[0] for cls in self.chunk_classes(self.sketch.chunk_factor)]
        for src in range(self.n):
            for j in js:
                seen = {src}
                queue = deque([src])
                while queue:
                    u = queue.popleft()
                    for v in self.out_edges[u]:
                        if v not in seen and self.edge_ok(src, j, u, v):
                            seen.add(v)
                            queue.append(v)
                if len(seen) < self.n:
                    missing = min(set(range(self.n)) - seen)
                    rule = "the excluded connections"
                    if self.inter is not None and self.node_of[missing] != self.node_of[src]:
                        rule = ("the relay rules (internode connections"
                                + (", gpus_to_sender_rev_map" if self.inter.sender_map is not None else "")
                                + (", chunk_to_relay_map" if self.inter.relay_map is not None else "") + ")")
                    elif self.topology.is_strongly_connected() is False:
                        rule = "the topology itself (it is not connected)"
                    chunk = f"chunk {j} of rank {src}" if len(js) > 1 else f"data of rank {src}"
                    raise SketchError(f"{self.where}: {chunk} cannot reach rank {missing} (node {self.node_of[missing]}) "
                                      f"under {rule}")

    def _symmetry_group(self) -> SymmetryGroup:
        n = self.n
        sk = self.sketch
        if not sk.symmetry:
            return SymmetryGroup.trivial(n)
        gens = []
        for off, size in sk.symmetry:
            if n % size != 0:
                raise SketchError(f"{self.where}: symmetry [{off}, {size}]: size {size} does not divide the {n} ranks")
            perm = offset_permutation(n, off, size)
            problem = self.automorphism_problem(perm)
            if problem:
                raise SketchError(f"{self.where}: symmetry [{off}, {size}] does not map the topology onto itself: {problem}")
            gens.append(perm)
        return SymmetryGroup.generate(n, gens, f"{self.where}: symmetry {[list(x) for x in sk.symmetry]}")

    @cached_property
    def _constraint_index(self) -> dict[tuple[frozenset, frozenset], float]:
        return {(b.srcs, b.dsts): b.bw for b in self.topology.bandwidth_constraints()}

    def automorphism_problem(self, perm: Perm) -> str:
        """'' if ``perm`` maps the logical topology onto itself, else what breaks."""
        topo = self.topology
        for c in topo.connections():
            a, b = perm[c.src], perm[c.dst]
            img = topo.connection(a, b)
            if img is None:
                return f"connection {c.src}->{c.dst} maps to {a}->{b}, which does not exist"
            if not (is_close(img.alpha, c.alpha) and is_close(img.bw, c.bw)):
                return (f"connection {c.src}->{c.dst} ({c.alpha:g} us, {c.bw:g} GB/s) maps to {a}->{b} "
                        f"({img.alpha:g} us, {img.bw:g} GB/s)")
            if self._conn_allowed(c.src, c.dst) != self._conn_allowed(a, b):
                return f"the sketch allows only one of the connections {c.src}->{c.dst} and {a}->{b}"
        index = self._constraint_index
        for (srcs, dsts), bw in index.items():
            key = (frozenset(perm[x] for x in srcs), frozenset(perm[x] for x in dsts))
            if key not in index or not is_close(index[key], bw):
                return (f"the bandwidth constraint on traffic {sorted(srcs)[:4]}... -> {sorted(dsts)[:4]}... "
                        f"has no image of equal bandwidth")
        for u in range(self.n):
            for v in range(self.n):
                if (self.node_of[u] == self.node_of[v]) != (self.node_of[perm[u]] == self.node_of[perm[v]]):
                    return f"ranks {u} and {v} map to {perm[u]} and {perm[v]}, which breaks the node structure"
        if self.inter is not None and (self.inter.sender_map is not None or self.inter.relay_map is not None):
            js = [cls[0] for cls in self.chunk_classes(self.sketch.chunk_factor)]
            for src in range(self.n):
                for u in self.node_ranks[self.node_of[src]]:
                    for j in js:
                        if self.sender_ok(src, j, u) != self.sender_ok(perm[src], j, perm[u]):
                            return (f"the relay rules let rank {u} forward chunk {j} of rank {src} but not rank "
                                    f"{perm[u]} forward that of rank {perm[src]} (or the reverse)")
        if self.spreads:
            for j in [cls[0] for cls in self.chunk_classes(self.sketch.chunk_factor)]:
                for src in range(self.n):
                    entry, entry_img = self.entry_local(src, j), self.entry_local(perm[src], j)
                    for node, ranks in self.node_ranks.items():
                        if entry is not None and node != self.node_of[src] and self.local[perm[ranks[entry]]] != entry_img:
                            return (f"piece {j} of rank {src} enters node {node} at rank {ranks[entry]}, but that of "
                                    f"its image {perm[src]} enters elsewhere than {perm[ranks[entry]]}")
        for sw in topo.switches:
            members = sorted(perm[r] for r in sw.ranks)
            images = [s for s in topo.switches if sorted(s.ranks) == members]
            if images and self.switch_policy.get(images[0].name) != self.switch_policy.get(sw.name):
                return f"switch {sw.name} maps to {images[0].name}, which has another policy"
        return ""
