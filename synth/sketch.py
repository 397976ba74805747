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

Where things live: the value objects and :class:`LogicalTopology` in
:mod:`ccsynth.synth.sketch_model`, the symmetry group in
:mod:`ccsynth.synth.sketch_symmetry`, JSON in :mod:`ccsynth.synth.sketch_json`;
this module holds the defaults (:func:`default_sketch`,
:func:`find_symmetries`, :func:`default_chunk_factor`) and re-exports the rest,
the names every caller imports from here.
"""

from __future__ import annotations

from dataclasses import replace

from ccsynth.errors import SketchError
from ccsynth.synth.sketch_json import (
    check_fields, int_field, int_list_field, int_map_field, internode_from_fields, load_sketch, read_sketch_json,
    save_sketch, size_field, sketch_from_dict, sketch_where, symmetry_field,
)
from ccsynth.synth.sketch_model import (
    FORMAT, INTERNODE_PATTERNS, INTRANODE_STRATEGIES, SWITCH_POLICIES, VERSION, InterNode, LogicalTopology, Sketch,
    SwitchRule,
)
from ccsynth.synth.sketch_symmetry import MAX_GROUP_ORDER, SymmetryGroup, offset_permutation
from ccsynth.topologies.model import Topology

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


def find_symmetries(topology: Topology, sketch: Sketch | None = None, max_generators: int = 3) -> tuple[tuple[int, int], ...]:
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


def default_sketch(topology: Topology, collective=None, size_bytes: int | None = None, *, chunk_factor: int | None = None) -> Sketch:
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


def default_chunk_factor(topology: Topology, collective=None, size_bytes: int | None = None, *, max_factor: int = 16) -> int:
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
