"""Communication sketches (TACCL-style): what the synthesizer may use, and how.

A :class:`Sketch` narrows the synthesis problem the way a TACCL user does:

* **logical topology** -- which connections may carry data: connections can be
  excluded, and between nodes only the *relay* connections of
  :class:`InterNode` are used (``connections``: sender GPU -> receiver GPUs,
  by index inside a node, TACCL's ``internode_conn``; ``senders``: which
  GPUs' chunks a sender may forward out of their node, TACCL's
  ``gpus_to_sender_rev_map``; ``chunk_relays``: which senders chunk index
  ``j`` of every rank may leave through; ``enforce_ordering``: a sender puts
  its own chunks on the wire before relayed ones; ``ring`` (ccsynth): a node
  sends only to the next node, ``k -> k+1 mod N``, as rings along rails do);
* **relays as TACCL means them** -- TACCL (``taccl/cli/common.py``,
  ``taccl/routing.py``) expands ``fully-connected`` to every sender -> every
  receiver and ``direct-map`` to GPU ``i`` -> GPU ``i``, lets a chunk use
  any GPU on its shortest paths (its candidate sets are sets of GPUs, not
  paths) and requires it to cross from its own node into every other node
  (at least once, never back): a chunk *enters a node and spreads inside
  it*. Routing over latency-shortest paths alone would instead send data
  that every rank needs across the network to every GPU of a node it can
  reach directly (``fully-connected`` on NDv2: once per remote GPU through
  the node's one NIC). So where the relay rules let a sender reach several
  GPUs of a node (no ``connections``, ``fully-connected``, or a sender with
  several receivers), data of rank ``s`` enters every other node at one GPU
  (:meth:`LogicalTopology.entry_local`: the receivers its senders may reach,
  taken in turn by ``s``'s index inside its node, so the ranks of a node
  enter through different GPUs) and spreads from there
  (:meth:`LogicalTopology.relay_edge_ok`, which the allgather routing -- and
  reduce-scatter, its reverse -- uses; alltoall data has one destination and
  keeps :meth:`LogicalTopology.edge_ok`). The routing stays a shortest-path
  DAG, one of the routings TACCL's model admits;
* **switch hyperedge policy** per switch (:data:`SWITCH_POLICIES`): ``uc-max``
  uses as many distinct connections of the switch as possible (spreads the
  sends), ``uc-min`` as few as possible (relays through a few partners);
* **symmetry** ``[[offset, size], ...]``: rank ``r`` maps to
  ``(r % size + offset) % size + (r // size) * size``; the routing of a chunk
  then fixes the routing of its images, which divides the model size by the
  order of the symmetry group (see :class:`SymmetryGroup`);
* **chunk partitioning** ``chunk_factor`` (TACCL's ``input_chunkup``) and the
  **input size** the sketch was written for (``input_size``);
* ``detours`` (ccsynth): 0 routes every chunk along minimum-hop paths only; 1
  also allows one step sideways (between ranks at the same hop distance), so
  load can be spread over more links at the price of longer paths.

Formats. ccsynth's own JSON (``format: ccsynth.sketch``, ``version: 1``)::

    {"format": "ccsynth.sketch", "version": 1, "name": "ndv2-relay",
     "chunk_factor": 2, "input_size": "64M", "detours": 0,
     "symmetry": [[8, 16]],
     "switches": [{"ranks": [0, 1, 2, 3, 4, 5, 6, 7], "policy": "uc-min"}],
     "intranode": "none",
     "internode": {"connections": {"0": [1]}, "senders": {"0": [0, 1, 2]},
                   "chunk_relays": {"0": [0]}, "enforce_ordering": false, "ring": false},
     "exclude": [[0, 3]]}

read by :func:`sketch_from_dict` / :func:`load_sketch`. TACCL's sketch JSON
is a foreign format, read by :mod:`ccsynth.formats.taccl_sketch` with the
field readers below (``int_field``, ``internode_from_fields``, ...), and
:func:`ccsynth.formats.files.load_sketch` picks the reader of a file.

:meth:`Sketch.bind` checks a sketch against a topology *before* any solver
runs and returns the :class:`LogicalTopology` the MILPs use; a relay that
cannot reach every node, a symmetry that does not map the topology onto
itself or a switch list that matches no switch raises
:class:`~ccsynth.errors.SketchError` naming the failed constraint.

Example:
    >>> from ccsynth.topologies.model import Link, Topology
    >>> ring4 = Topology("r4", 4, links=tuple(Link(a, b, 1.0, 10.0) for a in range(4) for b in range(4)
    ...                                      if (a - b) % 4 in (1, 3)))
    >>> lt = Sketch(symmetry=((1, 4),)).bind(ring4)
    >>> lt.group.order, lt.group.representatives
    (4, (0,))
"""

from __future__ import annotations

import json
import os
from collections import deque
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any
from collections.abc import Iterable, Mapping

from ccsynth.atomic import write_text
from ccsynth.errors import SizeError, SketchError
from ccsynth.limits import check as check_limit
from ccsynth.reading import parse_json, read_text
from ccsynth.tolerance import is_close
from ccsynth.units import parse_size

FORMAT = "ccsynth.sketch"
VERSION = 1

#: switch hyperedge policies (TACCL's ``switch_hyperedge_strategy``)
SWITCH_POLICIES = ("none", "uc-max", "uc-min")
#: TACCL's intranode strategies: "switch" uses the switch policies, "minmax"
#: / "maxmin" add a load-balancing term to the routing objective
INTRANODE_STRATEGIES = ("none", "switch", "minmax", "maxmin")
#: TACCL's named inter-node connection patterns
INTERNODE_PATTERNS = ("fully-connected", "direct-map")
#: the largest symmetry group ccsynth enumerates
MAX_GROUP_ORDER = 4096

Perm = tuple[int, ...]

__all__ = [
    "FORMAT",
    "VERSION",
    "SWITCH_POLICIES",
    "INTRANODE_STRATEGIES",
    "INTERNODE_PATTERNS",
    "MAX_GROUP_ORDER",
    "SwitchRule",
    "InterNode",
    "Sketch",
    "SymmetryGroup",
    "LogicalTopology",
    "sketch_from_dict",
    "read_sketch_json",
    "load_sketch",
    "save_sketch",
    "offset_permutation",
    "find_symmetries",
    "default_sketch",
    "default_chunk_factor",
    # JSON field readers, shared with ccsynth.formats.taccl_sketch
    "sketch_where",
    "int_field",
    "int_list_field",
    "int_map_field",
    "size_field",
    "check_fields",
    "symmetry_field",
    "internode_from_fields",
]


# --------------------------------------------------------------------------- value objects
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

    def bind(self, topology) -> LogicalTopology:
        """Check this sketch against ``topology`` and build the logical topology.

        Raises :class:`SketchError` naming the rule that fails.
        """
        return LogicalTopology(topology, self)


# --------------------------------------------------------------------------- JSON field readers
def sketch_where(src: str) -> str:
    """How errors name a sketch: ``sketch PATH``, or just ``sketch``."""
    return f"sketch {src}" if src else "sketch"


def int_field(v, what: str, minimum: int = 0) -> int:
    """An integer (or its decimal string) of at least ``minimum``."""
    if isinstance(v, bool):
        raise SketchError(f"{what} must be an integer, got {v!r}")
    if isinstance(v, str) and v.strip().lstrip("-").isdigit():
        try:
            v = int(v)
        except ValueError:  # more digits than Python converts
            raise SketchError(f"{what} must be an integer >= {minimum}, got a {len(v)}-character number") from None
    if not isinstance(v, int) or v < minimum:
        raise SketchError(f"{what} must be an integer >= {minimum}, got {v!r}")
    return v


def int_list_field(v, what: str) -> tuple[int, ...]:
    """A list of non-negative integers."""
    if not isinstance(v, (list, tuple)):
        raise SketchError(f"{what} must be a list of integers, got {v!r}")
    return tuple(int_field(x, f"{what}[{i}]") for i, x in enumerate(v))


def int_map_field(v, what: str) -> tuple[tuple[int, tuple[int, ...]], ...]:
    """An object GPU index -> list of GPU indices, as sorted pairs."""
    if not isinstance(v, Mapping):
        raise SketchError(f"{what} must be an object mapping a GPU index to a list of GPU indices, got {v!r}")
    out = []
    for k, vals in v.items():
        key = int_field(k, f"{what} key {k!r}")
        out.append((key, int_list_field(vals, f"{what}[{k!r}]")))
    return tuple(sorted(out))


def size_field(v, what: str) -> int | None:
    """A size in bytes (``64M``, 1024, ...) or None."""
    if v is None:
        return None
    try:
        return parse_size(v)
    except SizeError as e:
        raise SketchError(f"{what}: {e}") from None


def check_fields(d: Mapping, allowed: Iterable[str], what: str) -> None:
    """Refuse fields outside ``allowed`` (a typo would silently drop a rule)."""
    extra = sorted(set(d) - set(allowed))
    if extra:
        raise SketchError(f"{what} has unknown field(s) {', '.join(map(repr, extra))}; known: {', '.join(sorted(allowed))}")


def symmetry_field(v, what: str) -> tuple[tuple[int, int], ...]:
    """Symmetry offsets ``[[offset, size], ...]`` (None: none)."""
    if v is None:
        return ()
    if not isinstance(v, (list, tuple)):
        raise SketchError(f"{what} must be a list of [offset, size] pairs, got {v!r}")
    out = []
    for i, pair in enumerate(v):
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise SketchError(f"{what}[{i}] must be [offset, size], got {pair!r}")
        out.append((int_field(pair[0], f"{what}[{i}] offset"), int_field(pair[1], f"{what}[{i}] size", 1)))
    return tuple(out)


def internode_from_fields(conn, senders, relays, enforce_ordering, ring, what: str) -> InterNode:
    """The relay rules from their fields, however the file names them (``what`` names the file in errors).

    ``conn``: a pattern name (:data:`INTERNODE_PATTERNS`), a map sender ->
    receivers, or None; ``senders`` / ``relays``: maps or None.
    """
    pattern = ""
    connections = None
    if isinstance(conn, str):
        if conn not in INTERNODE_PATTERNS:
            raise SketchError(f"{what}: unknown internode connection pattern {conn!r}; choose one of: "
                              f"{', '.join(INTERNODE_PATTERNS)} or give a map sender -> receivers")
        pattern = conn
    elif conn is not None:
        connections = int_map_field(conn, f"{what} connections")
    if not isinstance(enforce_ordering, bool):
        raise SketchError(f"{what}: enforce_ordering must be true or false, got {enforce_ordering!r}")
    if not isinstance(ring, bool):
        raise SketchError(f"{what}: ring must be true or false, got {ring!r}")
    return InterNode(
        connections=connections,
        senders=None if senders is None else int_map_field(senders, f"{what} senders"),
        chunk_relays=None if relays is None else int_map_field(relays, f"{what} chunk_relays"),
        enforce_ordering=enforce_ordering,
        pattern=pattern,
        ring=ring,
    )


def _internode(d: Mapping, what: str) -> InterNode:
    check_fields(d, ("connections", "senders", "chunk_relays", "enforce_ordering", "ring"), what)
    return internode_from_fields(d.get("connections"), d.get("senders"), d.get("chunk_relays"),
                                 d.get("enforce_ordering", False), d.get("ring", False), what)


def sketch_from_dict(d: Any, source: str = "") -> Sketch:
    """Read ccsynth's sketch JSON (``source``: the file, for error messages)."""
    if not isinstance(d, Mapping):
        raise SketchError(f"{sketch_where(source)}: a sketch must be a JSON object, got {type(d).__name__}")
    what = sketch_where(source)
    if "format" not in d and "intranode_sketch" in d:
        raise SketchError(f"{what}: a TACCL sketch (it has 'intranode_sketch'); read it with "
                          "ccsynth.formats.files.load_sketch")
    if d.get("format") != FORMAT:
        raise SketchError(f"{what}: not a sketch (format is {d.get('format')!r}, expected {FORMAT!r}, "
                          f"or a TACCL sketch with 'intranode_sketch')")
    if d.get("version") != VERSION:
        raise SketchError(f"{what}: sketch version {d.get('version')!r} is not supported (this ccsynth reads {VERSION})")
    check_fields(d, ("format", "version", "name", "chunk_factor", "input_size", "symmetry", "switches", "intranode",
                    "internode", "exclude", "detours", "nnodes"), what)
    for key in ("switches", "exclude"):
        if d.get(key) is not None and not isinstance(d[key], list):
            raise SketchError(f"{what}: {key} must be a list, got {d[key]!r}")
    switches = []
    for i, s in enumerate(d.get("switches") or []):
        if not isinstance(s, Mapping):
            raise SketchError(f"{what}: switches[{i}] must be an object with 'ranks' and 'policy'")
        check_fields(s, ("ranks", "policy"), f"{what} switches[{i}]")
        switches.append(SwitchRule(int_list_field(s.get("ranks", []), f"{what} switches[{i}].ranks"), str(s.get("policy", "none"))))
    exclude = []
    for i, e in enumerate(d.get("exclude") or []):
        if not isinstance(e, (list, tuple)) or len(e) != 2:
            raise SketchError(f"{what}: exclude[{i}] must be a [src, dst] pair, got {e!r}")
        exclude.append((int_field(e[0], f"{what} exclude[{i}]"), int_field(e[1], f"{what} exclude[{i}]")))
    inter = d.get("internode")
    if inter is not None and not isinstance(inter, Mapping):
        raise SketchError(f"{what}: internode must be an object")
    return Sketch(
        name=str(d.get("name", "sketch")),
        chunk_factor=int_field(d.get("chunk_factor", 1), f"{what}: chunk_factor", 1),
        input_size=size_field(d.get("input_size"), f"{what}: input_size"),
        symmetry=symmetry_field(d.get("symmetry"), f"{what}: symmetry"),
        switches=tuple(switches),
        intranode=str(d.get("intranode", "none")),
        internode=None if inter is None else _internode(inter, f"{what}: internode"),
        exclude=tuple(exclude),
        detours=int_field(d.get("detours", 0), f"{what}: detours"),
        nnodes=None if d.get("nnodes") is None else int_field(d["nnodes"], f"{what}: nnodes", 1),
        source=source,
    )


def read_sketch_json(path: str | os.PathLike) -> Any:
    """The parsed JSON of a sketch file; unreadable or malformed files raise :class:`SketchError`."""
    p = os.fspath(path)
    return parse_json(read_text(p, "sketch", SketchError), f"sketch {p!r}", SketchError)


def load_sketch(path: str | os.PathLike) -> Sketch:
    """Read a ccsynth sketch file (:func:`ccsynth.formats.files.load_sketch` reads TACCL's too)."""
    p = os.fspath(path)
    return sketch_from_dict(read_sketch_json(p), source=p)


def save_sketch(sketch: Sketch, path: str | os.PathLike) -> None:
    """Write ``sketch`` as ccsynth sketch JSON, atomically (see :mod:`ccsynth.atomic`)."""
    write_text(path, json.dumps(sketch.to_dict(), indent=2) + "\n", what="sketch")


# --------------------------------------------------------------------------- symmetry
def offset_permutation(n: int, offset: int, size: int) -> Perm:
    """TACCL's symmetry map: ``r -> (r % size + offset) % size + (r // size) * size``."""
    return tuple((r % size + offset) % size + (r // size) * size for r in range(n))


def _compose(a: Perm, b: Perm) -> Perm:
    """a after b."""
    return tuple(a[x] for x in b)


@dataclass(frozen=True)
class SymmetryGroup:
    """The group generated by the sketch's symmetry maps, acting freely on ranks.

    ``representatives`` holds the smallest rank of every orbit;
    ``element_to[r]`` is the unique group element mapping the representative
    of ``r``'s orbit onto ``r`` (unique because the action is free: no
    element but the identity fixes a rank). The routing of a chunk of rank
    ``r`` is the image under ``element_to[r]`` of the routing of the
    representative's chunk, so a model needs variables for representatives
    only: its size shrinks by :attr:`order`.
    """

    n: int
    elements: tuple[Perm, ...]
    representatives: tuple[int, ...]
    rep_of: tuple[int, ...]
    element_to: tuple[Perm, ...]

    @property
    def order(self) -> int:
        return len(self.elements)

    @classmethod
    def trivial(cls, n: int) -> SymmetryGroup:
        ident = tuple(range(n))
        return cls(n, (ident,), tuple(range(n)), tuple(range(n)), (ident,) * n)

    @classmethod
    def generate(cls, n: int, generators: Iterable[Perm], what: str = "symmetry") -> SymmetryGroup:
        ident = tuple(range(n))
        gens = [g for g in generators if g != ident]
        elements = {ident: None}
        order = [ident]
        queue = deque([ident])
        while queue:
            g = queue.popleft()
            for h in gens:
                k = _compose(h, g)
                if k not in elements:
                    if len(elements) >= MAX_GROUP_ORDER or len(elements) >= n:
                        raise SketchError(f"{what}: the maps generate a group larger than the {n} ranks; "
                                          f"some map must fix a rank, which ccsynth does not support")
                    elements[k] = None
                    order.append(k)
                    queue.append(k)
        for g in order[1:]:
            fixed = [r for r in range(n) if g[r] == r]
            if fixed:
                raise SketchError(f"{what}: a combination of the symmetry maps fixes rank {fixed[0]} "
                                  f"(rank {fixed[0]} would have to be its own image); use offsets that move every rank")
        rep_of = [-1] * n
        element_to: list[Perm | None] = [None] * n
        reps = []
        for r in range(n):
            if rep_of[r] >= 0:
                continue
            reps.append(r)
            for g in order:
                rep_of[g[r]] = r
                element_to[g[r]] = g
        return cls(n, tuple(order), tuple(reps), tuple(rep_of), tuple(element_to))  # type: ignore[arg-type]


# --------------------------------------------------------------------------- logical topology
class LogicalTopology:
    """A topology seen through a sketch: allowed connections per chunk, symmetry group.

    Construction checks everything that can be checked before solving and
    raises :class:`SketchError` naming the failed rule.
    """

    def __init__(self, topology, sketch: Sketch):
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
                    e, img = self.entry_local(src, j), self.entry_local(perm[src], j)
                    for node, ranks in self.node_ranks.items():
                        if e is not None and node != self.node_of[src] and self.local[perm[ranks[e]]] != img:
                            return (f"piece {j} of rank {src} enters node {node} at rank {ranks[e]}, but that of its "
                                    f"image {perm[src]} enters elsewhere than {perm[ranks[e]]}")
        for sw in topo.switches:
            members = sorted(perm[r] for r in sw.ranks)
            img = [s for s in topo.switches if sorted(s.ranks) == members]
            if img and self.switch_policy.get(img[0].name) != self.switch_policy.get(sw.name):
                return f"switch {sw.name} maps to {img[0].name}, which has another policy"
        return ""


# --------------------------------------------------------------------------- defaults
def find_symmetries(topology, sketch: Sketch | None = None, max_generators: int = 3) -> tuple[tuple[int, int], ...]:
    """Symmetry offsets ``[[offset, size], ...]`` that map ``topology`` (and ``sketch``'s rules) onto itself.

    Tries the node rotation first (``[gpus_per_node, n]``), then rotations
    inside blocks of every size dividing ``n``, smallest offset first, and
    keeps a map when it enlarges the group generated so far while the group
    still acts freely on the ranks.
    """
    n = topology.n_ranks
    if n < 2:
        return ()
    base = replace(sketch, symmetry=()) if sketch is not None else Sketch(name="probe")
    try:
        lt = LogicalTopology(topology, base)
    except SketchError:
        return ()
    candidates: list[tuple[int, int]] = []
    sizes = sorted({len(r) for r in lt.node_ranks.values()})
    if topology.n_nodes > 1 and len(sizes) == 1 and all(
        lt.node_ranks[k] == tuple(range(k * sizes[0], (k + 1) * sizes[0])) for k in lt.node_ranks
    ):
        g = sizes[0]
        candidates.append((g, n))
        inner_sizes = [s for s in range(2, g + 1) if g % s == 0]
    else:
        inner_sizes = [s for s in range(2, n + 1) if n % s == 0]
    for size in sorted(inner_sizes, reverse=True):
        for off in range(1, size):
            if size % off == 0 or off == 1:
                candidates.append((off, size))
    chosen: list[tuple[int, int]] = []
    group = SymmetryGroup.trivial(n)
    for off, size in candidates:
        if len(chosen) >= max_generators:
            break
        perm = offset_permutation(n, off, size)
        if perm in group.elements:
            continue
        if lt.automorphism_problem(perm):
            continue
        try:
            new_group = SymmetryGroup.generate(n, [offset_permutation(n, o, s) for o, s in chosen] + [perm])
        except SketchError:
            continue
        if new_group.order > group.order:
            chosen.append((off, size))
            group = new_group
    return tuple(chosen)


def default_sketch(topology, collective=None, size_bytes: int | None = None, *, chunk_factor: int | None = None) -> Sketch:
    """A sensible sketch for ``topology``, so that ``--sketch`` is optional.

    * symmetry: every rotation found by :func:`find_symmetries`;
    * between nodes (several nodes of equal size): when GPU ``i`` of every
      node can reach GPU ``i`` of every other node, only those connections
      are used and every GPU sends only its own chunks across (TACCL's
      ``direct-map``, one rail per GPU); each chunk crosses into a node once
      and is spread inside it;
    * chunk factor: 1 for small messages, more for large ones so that relays
      pipeline (see :func:`default_chunk_factor`).

    >>> from ccsynth.topologies.model import Link, Topology
    >>> t = Topology("pair", 2, links=(Link(0, 1, 1.0, 10.0), Link(1, 0, 1.0, 10.0)))
    >>> default_sketch(t).symmetry
    ((1, 2),)
    """
    internode = None
    nn = topology.n_nodes
    if nn > 1:
        lt0 = LogicalTopology(topology, Sketch(name="probe"))
        sizes = {len(r) for r in lt0.node_ranks.values()}
        if len(sizes) == 1:
            g = sizes.pop()
            direct = all(
                topology.has_connection(ra[i], rb[i])
                for na, ra in lt0.node_ranks.items() for nb, rb in lt0.node_ranks.items() if na != nb for i in range(g)
            )
            if direct:
                internode = InterNode(pattern="direct-map", senders=tuple((i, (i,)) for i in range(g)))
    c = chunk_factor if chunk_factor is not None else default_chunk_factor(topology, collective, size_bytes)
    sk = Sketch(name=f"default:{topology.name}", chunk_factor=c, internode=internode, input_size=size_bytes,
                nnodes=nn if nn > 1 else None)
    try:
        sym = find_symmetries(topology, sk)
    except SketchError:
        sym = ()
    return replace(sk, symmetry=sym, source="default")


def default_chunk_factor(topology, collective=None, size_bytes: int | None = None, *, max_factor: int = 16) -> int:
    """How many pieces each rank's data is cut into by default (a power of two).

    Pipelining along relays pays off once a piece takes several latencies
    to send: ``c`` is the largest power of two (at most ``max_factor``) for
    which one piece of a rank's share still takes at least four times the
    latency of the slowest connection on that connection. Small messages get
    one piece.

    >>> from ccsynth.topologies.model import Link, Topology
    >>> from ccsynth.collectives.spec import Collective
    >>> t = Topology("pair", 2, links=(Link(0, 1, 1.0, 10.0), Link(1, 0, 1.0, 10.0)))
    >>> default_chunk_factor(t, Collective("allgather", 2), 1 << 10), default_chunk_factor(t, Collective("allgather", 2), 1 << 20)
    (1, 8)
    """
    if size_bytes is None or collective is None:
        return 1
    conns = topology.connections()
    if not conns:
        return 1
    bw = min(c.bw for c in conns)
    alpha = max(max(c.message_us for c in conns if c.bw == bw), 1e-3)
    per_rank = size_bytes / max(1, collective.n_ranks)
    piece_time = per_rank / (bw * 1e3)
    c = 1
    while c < max_factor and piece_time / (2 * c) >= 4 * alpha:
        c *= 2
    return c
