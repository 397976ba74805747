"""Packed trees -> a pipelined :class:`~ccsynth.collectives.schedule.Schedule`.

Every root's demand is cut into chunks (the collective's chunk factor);
each chunk follows one of the root's trees, chosen so that the chunk counts
follow the trees' weights (largest remainders: :func:`apportion`). A chunk
is its own message on every tree arc, so a relay forwards chunk ``j`` as
soon as it has it while chunk ``j + 1`` is still on its way: the trees are
pipelined, and the chunk factor trades that pipelining against the
per-message cost (:mod:`~ccsynth.synth.trees.search` picks it by simulation).
A rank's sends of one chunk through one port leave a window at a time,
and with one chunk per root (nothing else in flight) the window's sends
are staggered by half a chunk, the last one goes in halves, and relays
forward each piece as it arrives (:func:`_broadcast`, :func:`_staggered`).

* **Out-trees** (allgather: chunk ``j`` of root ``q`` lands in output chunk
  ``q c + j`` everywhere; broadcast: output chunk ``j``): the root sends
  straight from its input (and copies it to its own output); a relay
  forwards from the output slot its receive wrote, depending on that
  receive only.
* **In-trees** (reduce-scatter: every rank's input chunk ``q c + j`` summed
  into output chunk ``j`` of rank ``q``; reduce: input ``j`` into the root's
  output ``j``): leaves send their input chunk; a rank with children
  receives each child's partial sum into a scratch slot of its own (so the
  children's transfers need not wait for each other), adds its own input
  and the other children's slots into the first child's slot, and sends
  that up; the root sums into its output.
* **Allreduce, reduce then broadcast** (:func:`lower_allreduce`): chunk
  ``j`` of the buffer belongs to one root (chunks apportioned to the roots
  by their weights, then to their in- and out-trees): reduced up an in-tree
  into the root's output chunk ``j``, then broadcast down an out-tree from
  there. Each chunk's broadcast waits only for its own reduction: the two
  phases overlap across chunks.

**Phased** (:func:`lower_out_trees` ``phased``; chunk factor above one):
the sends that cross a node boundary (a rail's NIC pairs) are ordered in
phases, matchings of the senders and receivers (:func:`_phase_order`):
every rank sends them in phase order, ``phased`` at a time, each after its
own receive of two phases before (:func:`_chain`), and the chunks' trees
are rounded to integers together (:func:`_rounded`). Where a packing mixes
direct and relay trees the NIC pairs carry very different loads, and one
first-come-first-served stream per pair under max-min sharing ends the
light pairs early and leaves the heavy ones below rate (fat_tree:8x8:4:2,
1 GiB, chunk factor 8: 1.104x of the bound); in phases each NIC is busy
with one partner at a time at its full rate (1.019x).

Ops are emitted chunk by chunk (all roots' chunk 0 first), so that ties in
the simulator's first-come-first-served queues favour earlier chunks.
Dependencies are given explicitly (what each op reads), which keeps
lowering linear in the schedule's size: ~2 million ops for an allgather on
1,024 ranks.

Example:
    >>> from ccsynth.collectives.spec import Collective
    >>> from ccsynth.collectives.verify import verify
    >>> from ccsynth.synth.trees.packing import pack_trees
    >>> from ccsynth.topologies.catalog import ring
    >>> t = ring(4)
    >>> s = lower_out_trees(pack_trees(t, range(4)).trees, Collective("allgather", 4, 2), t)
    >>> verify(s, t).n_transfers
    24
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import bisect
import logging

import highspy
import networkx as nx
import numpy as np

from ccsynth.collectives.schedule import Chunks, Op, Schedule
from ccsynth.collectives.spec import Collective
from ccsynth.errors import CollectiveError
from ccsynth.synth.solver import silence_highs_banner
from ccsynth.synth.trees.packing import PackedTree
from ccsynth.synth.flows.symmetry import translations
from ccsynth.topologies.model import Topology

__all__ = ["NAME", "WINDOW", "STAGGER", "TAIL_SPLIT", "apportion", "lower_out_trees", "lower_in_trees", "lower_allreduce"]

log = logging.getLogger(__name__)

NAME = "packed_trees"
#: in-trees' leaf sends that share a port leave this many at a time (see _Emitter): one would leave the port
#: idle for every message's overhead and latency, all at once would share it fairly and all finish last
WINDOW = 2
#: with one chunk per root, a port that carries at least this many of a rank's sends of the chunk staggers
#: them (lower_out_trees; 1 MiB shards: dgx_a100x8 1.248x -> 1.147x, dgx_a100x16 1.169x -> 1.068x, dgx_a100x32
#: 1.169x -> 1.058x). Each costs a send and a receive: where the op budget is tight the caller passes a larger
#: threshold (search.stagger_for: dgx_a100x128 staggers its NICs' 127 sends, not its NVSwitch ports' 7)
STAGGER = 3
#: with one chunk per root, a port that carries at least this many of a rank's sends of the chunk sends the last
#: one in halves, the second half last (:func:`_staggered`): the receivers then fan out half a chunk after the
#: last byte instead of a whole one (a rail NIC's 15 or more sends, not an NVSwitch port's 7; 1 MiB shards:
#: dgx_a100x16 1.068x -> 1.047x, dgx_a100x32 1.058x -> 1.041x, dgx_a100x64 1.051x -> 1.046x)
TAIL_SPLIT = 9
#: phased lowering (:func:`_phase_order`): a relay's forward across a node boundary is placed at least this many
#: phases after the send that brought it the chunk
PHASE_LAG = 2
#: ... and a rank's send of phase ``k`` waits for its receive of the latest phase up to ``k - GATE`` (:func:`_chain`):
#: the ranks keep in lock-step (fat_tree:8x8:4:2 at chunk factor 8: 1.053x of the bound without, 1.019x with)
GATE = 2
#: ... a pair through a resource that several phases' pairs share (a spine) weighs ``1 + SHARED_URGENCY * u`` times
#: more, ``u`` the fraction of the phases left that the resource's sends still need (1.022x -> 1.019x there)
SHARED_URGENCY = 1.0
#: ... gives up where its phases would exceed the busiest port's sends by more than this fraction (plus the
#: pipeline's fill) ...
PHASE_SLACK = 0.05
#: ... or where its senders with sends left would sit out more than this fraction of all the sends' phases
IDLE_SLACK = 0.02
#: ... or where a resource shared by several pairs of a phase (a spine's up-link) needs more than this fraction of
#: its room in as many phases as the busiest port has sends (fat_tree:8x8:4:2: 82%, phased in that many;
#: fat_tree:16x8:4:2: 94%, 148-154 phases for 125 sends)
SHARED_FILL = 0.9
#: branch-and-bound nodes the phased lowering's rounding of chunks to trees may explore (:func:`_rounded`): a
#: work limit, not a time limit, so that a slow or loaded machine rounds exactly as a fast one (fat_tree:16x8:4:2
#: needs 281 nodes to prove its rounding optimal, fat_tree:8x8:4:2 none)
ROUND_NODES = 5000
#: seconds after which the rounding stops regardless (a guard against a pathological case, far above what
#: :data:`ROUND_NODES` takes: 0.5 s for 281 nodes on the 2-core development machine)
ROUND_SECONDS = 120.0


def apportion(weights: Sequence[float], total: int) -> list[int]:
    """Integer counts summing to ``total``, proportional to ``weights`` (largest remainders, ties to the first).

    >>> apportion([0.5, 0.3, 0.2], 4)
    [2, 1, 1]
    """
    s = sum(weights)
    if total <= 0 or s <= 0:
        return [0] * len(weights)
    exact = [w / s * total for w in weights]
    counts = [int(x) for x in exact]
    rest = total - sum(counts)
    order = sorted(range(len(weights)), key=lambda i: (-(exact[i] - counts[i]), i))
    for i in order[:rest]:
        counts[i] += 1
    return counts


class _Emitter:
    """Appends ops with explicit dependencies; chunk ranges are shared objects.

    Sends straight from the input (ready at once) can be *prioritised*: at
    :meth:`build` each rank's prioritised sends are sorted by their keys and
    every one waits for the previous one that shares a resource with it (its
    switch egress port, its NIC), so they leave one after another in key
    order instead of sharing the port fairly and all arriving last
    (:data:`WINDOW` at a time, so that a message's overhead and latency
    overlap the previous one's data).
    """

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        self.group = translations(topology)
        self._res: dict[tuple[int, int], frozenset[str]] = {}
        self.ops: list[list] = []  # [rank, kind, src, dst, peer, reduce, deps]
        self._chunks: dict[tuple[str, int, int], Chunks] = {}
        self.scratch: dict[int, int] = {}
        self._first: dict[int, list[tuple[tuple, int]]] = {}
        self._rev_coords: list[tuple[int, ...]] | None = None  # per rank, most significant coordinate first
        self._rev_sizes = tuple(reversed(self.group.sizes))

    def prioritise(self, rank: int, key: tuple, send: int) -> None:
        """Send op ``send`` of ``rank`` (from the input) leaves in ``key`` order among the rank's (see above)."""
        self._first.setdefault(rank, []).append((key, send))

    def at(self, buf: str, index: int, count: int = 1) -> Chunks:
        c = self._chunks.get((buf, index, count))
        if c is None:
            c = self._chunks[(buf, index, count)] = Chunks(buf, index, count)
        return c

    def fresh(self, rank: int) -> Chunks:
        k = self.scratch.get(rank, 0)
        self.scratch[rank] = k + 1
        return self.at("s", k)

    def _op(self, rank: int, kind: str, src=None, dst=None, peer=-1, reduce=False, deps: Iterable[int] = ()) -> int:
        self.ops.append([rank, kind, src, dst, peer, reduce, list(deps)])
        return len(self.ops) - 1

    def transfer(self, a: int, b: int, src: Chunks, dst: Chunks, send_deps=(), recv_deps=()) -> tuple[int, int]:
        """Send ``src`` of ``a`` into ``dst`` of ``b``; returns the ids of the send and the recv."""
        return (self._op(a, "send", src=src, peer=b, deps=send_deps),
                self._op(b, "recv", dst=dst, peer=a, deps=recv_deps))

    def offset(self, a: int, b: int) -> tuple[int, ...]:
        """``b``'s coordinates minus ``a``'s (mod each size, most significant first): translation-invariant."""
        rc = self._rev_coords
        if rc is None:
            g = self.group
            rc = self._rev_coords = [tuple(reversed(g.coords(r))) for r in range(g.n)]
        return tuple((y - x) % s for x, y, s in zip(rc[a], rc[b], self._rev_sizes))

    def resources(self, a: int, b: int) -> frozenset[str]:
        """The resources of connection ``a -> b``."""
        key = (a, b)
        r = self._res.get(key)
        if r is None:
            conn = self.topology.connection(a, b)
            if conn is None:
                raise CollectiveError(f"a packed tree uses {a}->{b}, which topology {self.topology.name!r} lacks")
            r = self._res[key] = frozenset(conn.resources)
        return r

    def copy(self, rank: int, src: Chunks, dst: Chunks, deps=()) -> int:
        return self._op(rank, "copy", src=src, dst=dst, deps=deps)

    def reduce(self, rank: int, src: Chunks, dst: Chunks, deps=()) -> int:
        return self._op(rank, "reduce", src=src, dst=dst, deps=deps)

    def build(self, collective: Collective, **meta) -> Schedule:
        for rank, sends in self._first.items():
            behind: dict[str, list[int]] = {}  # per resource, the prioritised sends so far
            for _, i in sorted(sends):
                res = self.resources(rank, self.ops[i][4])
                for r in res:
                    prev = behind.setdefault(r, [])
                    if len(prev) >= WINDOW:
                        self.ops[i][6].append(prev[-WINDOW])
                    prev.append(i)
        ops = tuple(Op(i, rank, kind, src, dst, peer, red, tuple(sorted(set(deps))))
                    for i, (rank, kind, src, dst, peer, red, deps) in enumerate(self.ops))
        scratch = max(self.scratch.values(), default=0)
        return Schedule(NAME, collective, ops, scratch, self.topology.name, dict(meta))


def _assign(trees: Sequence[PackedTree], chunks: int) -> list[PackedTree]:
    """The tree of each of ``chunks`` chunks: counts following the weights, the trees interleaved.

    Interleaved (each chunk goes to the tree furthest behind its quota) so
    that every stretch of chunks loads the resources like the whole
    packing: with a tree's chunks in one block, the busiest resource would
    change from block to block and the time would be the sum of the
    blocks' bottlenecks, not the bottleneck of the sum.
    """
    return _interleave(trees, apportion([t.weight for t in trees], chunks), chunks)


def _interleave(trees: Sequence[PackedTree], quota: Sequence[int], chunks: int) -> list[PackedTree]:
    """``quota[i]`` chunks on ``trees[i]``, interleaved (see :func:`_assign`)."""
    done = [0] * len(trees)
    out: list[PackedTree] = []
    for j in range(chunks):
        i = max(range(len(trees)), key=lambda k: (quota[k] * (j + 1) / chunks - done[k], -k))
        done[i] += 1
        out.append(trees[i])
    return out


def _rounded(em: _Emitter, roots: dict[int, list[PackedTree]], chunks: int, seconds: float = ROUND_SECONDS,
             nodes: int = ROUND_NODES) -> dict[int, list[PackedTree]]:
    """Per root, the tree of each of ``chunks`` chunks, the counts rounded together: the busiest resource's
    chunks (over its bandwidth) as few as a small integer program finds within ``nodes`` branch-and-bound
    nodes (and ``seconds``), rather than
    each root's largest remainders alone (fat_tree:16x8:4:2 at chunk factor 8: a NIC with 128 chunk sends where
    the bound is 120; what a phased lowering, whose phases are the busiest port's sends, pays in full)."""
    cols = [(q, t) for q, ts in roots.items() for t in ts]
    bw = em.topology.resource_bw
    res: dict[str, int] = {}
    entries: dict[int, list[tuple[int, float]]] = {}
    for i, (_, t) in enumerate(cols):
        use: dict[str, int] = {}
        for a, b in t.arcs():
            for r in em.resources(a, b):
                use[r] = use.get(r, 0) + 1
        for name, m in use.items():
            entries.setdefault(res.setdefault(name, len(res)), []).append((i, m / bw[name]))
    silence_highs_banner()
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    h.setOptionValue("time_limit", float(seconds))
    h.setOptionValue("mip_max_nodes", int(nodes))
    m = len(cols)
    inf = highspy.kHighsInf
    h.addCols(m + 1, np.r_[np.zeros(m), 1.0], np.zeros(m + 1), np.r_[np.full(m, float(chunks)), inf], 0,
              np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int32), np.zeros(0))
    h.changeColsIntegrality(m, np.arange(m, dtype=np.int32), np.full(m, highspy.HighsVarType.kInteger))
    for row in sorted(entries):
        idx = [i for i, _ in entries[row]] + [m]
        val = [v for _, v in entries[row]] + [-1.0]
        h.addRow(-inf, 0.0, len(idx), np.array(idx, dtype=np.int32), np.array(val))
    at = 0
    for ts in roots.values():
        h.addRow(float(chunks), float(chunks), len(ts), np.arange(at, at + len(ts), dtype=np.int32), np.ones(len(ts)))
        at += len(ts)
    h.run()
    if h.getInfo().primal_solution_status != 2:  # no feasible point within the time limit: largest remainders
        return {q: _assign(ts, chunks) for q, ts in roots.items()}
    x = np.rint(np.array(h.getSolution().col_value[:m])).astype(int)
    out: dict[int, list[PackedTree]] = {}
    at = 0
    for q, ts in roots.items():
        out[q] = _interleave(ts, [int(v) for v in x[at:at + len(ts)]], chunks)
        at += len(ts)
    return out


def _by_root(trees: Iterable[PackedTree], inward: bool) -> dict[int, list[PackedTree]]:
    out: dict[int, list[PackedTree]] = {}
    for t in trees:
        if t.inward == inward:
            out.setdefault(t.root, []).append(t)
    return out


def _broadcast(em: _Emitter, tree: PackedTree, src: Chunks, slot: Chunks, root_dep: tuple[int, ...],
               window: int = 1, stagger: int = 0, phased: list[_Phased] | None = None, chunk: int = 0) -> None:
    """Chunk ``slot`` down ``tree``: the root sends ``src`` (after ``root_dep``), relays forward ``slot``.

    A rank's sends of the chunk that share a resource (its switch egress
    port, its NIC) go ``window`` at a time, children with the larger subtree
    first: shared fairly they would all finish last, and no child could
    forward before the end. One at a time leaves the port idle for every
    message's overhead and latency (the next send is posted only when the
    previous one is done), which the other chunks in flight hide when
    there are several; :func:`lower_out_trees` passes ``WINDOW`` when the
    collective has one chunk per root (dgx_a100x128's allgather: 127 sends
    of 1 MiB through each NIC, each idle for 8.3 us of its 42 us, a 1.22x
    schedule). Two at a time also keep a port busy while another resource
    slows the send in flight (an oversubscribed spine), at the cost of the
    first child's data arriving later; the search
    (:mod:`~ccsynth.synth.trees.search`) tries two at its best chunk factor.

    ``stagger`` (``slot`` two half chunks, a window of two or more): the
    sends of a window that start together share the port, end together,
    and leave it idle together for the next window's overhead and latency
    (8.3 us per pair of 42 us messages on a rail NIC: still 1.15x at
    1,024 ranks). A port that carries at least ``stagger`` of the sends
    therefore sends its second child (and fourth, sixth, ... within the
    first window) the first half of the chunk only, and the other half
    after its last full send (:func:`_staggered`): every later window's
    sends are half a message apart in pairs, and one runs at the full
    rate while its partner is between messages.

    The end of a staggered chunk (one chunk per root, the tree's whole
    pipeline): a relay that receives the chunk in pieces forwards each
    piece as soon as it is in (a cut costs a send and a receive per arc of
    the child's subtree), a port that carries at least :data:`TAIL_SPLIT`
    of the sends sends its last child the chunk in halves, the second half
    last, and sends to leaves go all at once. Before, the receivers' last
    message was a whole chunk (or the second half of one) that they fanned
    out after their NIC's last byte: 29 of the 43 us between dgx_a100x16's
    allgather and its bound at 1 MiB shards, 40 of 75 on dgx_a100x32. With
    a window of two the last half is posted right after the previous send
    (it queues behind its first half on the connection's stream): posted
    after its first half's completion it left the NIC idle for an
    overhead and a latency before the last message; with four, three
    other sends keep the NIC busy and the window's order is kept
    (measured: 1.041x against 1.044x on dgx_a100x32, 1.046x against
    1.058x on dgx_a100x64).
    """
    kids: dict[int, list[int]] = {}
    for p, v in tree.arcs():
        kids.setdefault(p, []).append(v)
    size = _subtree_sizes(tree, kids)
    got: dict[int, list[tuple[Chunks, int]]] = {}  # per rank, the pieces of the chunk it received, with their recvs
    via: dict[int, int] = {}  # phased: per rank, the last node-crossing send on the chunk's path to it
    nodes = em.topology.nodes
    frontier = [tree.root]
    while frontier:
        nxt = []
        for p in frontier:
            behind: dict[str, list[int]] = {}  # per resource, the sends of this chunk from p through it
            order = sorted(kids.get(p, ()), key=lambda v: (-size[v], em.offset(p, v)))
            if p == tree.root:
                inputs = [(src, slot, tuple(root_dep))]
            elif stagger > 0:  # each piece forwarded as it arrives (a chunk comes in pieces only where staggered)
                inputs = [(c, c, (rid,)) for c, rid in got[p]]
            else:
                inputs = [(slot, slot, tuple(rid for _, rid in got[p]))]
            sends = [_Send(v, a, b, d) for a, b, d in inputs for v in order]
            if stagger > 0 and len(inputs) == 1:
                sends = _staggered(em, p, sends, stagger, window)
            for x in sends:
                v = x.child
                deps = list(x.deps)
                if phased is not None and nodes[p] != nodes[v]:
                    # its place in p's sends across the node boundary is the phase order's (_phase_order)
                    sid, rid = em.transfer(p, v, x.src, x.dst, send_deps=deps)
                    phased.append(_Phased(sid, p, v, via.get(p, -1), chunk))
                    via[v] = sid
                    got.setdefault(v, []).append((x.dst, rid))
                    continue
                if p in via:
                    via[v] = via[p]
                res = em.resources(p, v)
                w = window
                if stagger > 0 and size[v] == 1:
                    w = len(sends)  # leaves: nothing waits for them, all at once
                if x.follows and window <= 2:
                    w = 1
                for r in res:
                    prev = behind.setdefault(r, [])
                    if len(prev) >= w and not (x.follows and em.ops[prev[-w]][4] == v):
                        deps.append(prev[-w])
                sid, rid = em.transfer(p, v, x.src, x.dst, send_deps=deps)
                for r in res:
                    behind[r].append(sid)
                got.setdefault(v, []).append((x.dst, rid))
            nxt.extend(order)
        frontier = nxt


@dataclass(frozen=True)
class _Send:
    """One send of :func:`_broadcast`: to ``child``, ``src`` into ``dst``, after ``deps``; ``follows``: the second
    half of a chunk whose first half went to the same child before (it queues behind it on their stream)."""

    child: int
    src: Chunks
    dst: Chunks
    deps: tuple[int, ...]
    follows: bool = False


@dataclass(frozen=True)
class _Phased:
    """A send of :func:`_broadcast` across a node boundary, placed by :func:`_phase_order`: op ``send`` from
    ``src`` to ``dst``; ``after``: the node-crossing send that brought its data to ``src`` (-1: the root's own)."""

    send: int
    src: int
    dst: int
    after: int
    chunk: int = 0


def _phase_order(sends: Sequence[_Phased], lag: int | None = None, fits=None) -> dict[int, int] | None:
    """Each send's phase: in every phase a sender sends to one receiver and a receiver hears one sender.

    The sends' sender-receiver pairs form a bipartite multigraph; phase
    after phase a maximum matching of the pairs whose next send is ready
    (a forward ``lag`` phases after the send that brought its data) is
    taken off it, heaviest first: a pair weighs its sender's and its
    receiver's sends still to place plus the sends that wait for this one
    (so that the busiest ports are served in every phase, all end
    together, and relays get their data early: a greedy edge colouring;
    on a regular multigraph with every send ready each phase is a perfect
    matching, as in a Birkhoff-von Neumann decomposition of the pairs'
    load matrix). ``fits`` (:func:`_overloads`) keeps a phase's pairs
    within every shared resource at full rate (an oversubscribed spine:
    the lightest pair through it leaves the phase and the matching is
    taken again). Independent parts of the graph (a rail-optimized
    machine's rails) are matched separately, phase by phase. Returns send
    op id -> phase, or None where the phases would exceed the busiest
    port's sends by more than :data:`PHASE_SLACK` (a port idle that often
    loses what phasing gains).
    """
    lag = PHASE_LAG if lag is None else lag
    graph = nx.Graph()
    graph.add_edges_from((2 * x.src, 2 * x.dst + 1) for x in sends)
    part = {v: i for i, comp in enumerate(nx.connected_components(graph)) for v in comp}
    groups: dict[int, list[_Phased]] = {}
    for x in sends:
        groups.setdefault(part[2 * x.src], []).append(x)
    below: dict[int, int] = {}  # per send, the sends that forward what it brings (they wait for it)
    for x in reversed(sends):  # emitted parents first
        if x.after >= 0:
            below[x.after] = below.get(x.after, 0) + 1 + below.get(x.send, 0)
    parts = [_Part(mine, fits) for mine in groups.values()]
    most = max((p.most for p in parts), default=0)
    if any(v > SHARED_FILL * most for p in parts for v in p.left_s.values()):
        return None  # a shared resource (a spine) busy nearly every phase: the greedy matchings miss its slots
    phase: dict[int, int] = {}
    k = 0
    hops: dict[int, int] = {}
    for x in sends:  # emitted parents first
        hops[x.send] = hops[x.after] + 1 if x.after >= 0 else 1
    # the pipeline's fill and drain: a chain of node crossings takes lag phases a hop
    fill = lag * max(hops.values(), default=0)
    ports = len({x.src for x in sends})
    while any(p.left for p in parts):
        if k + max(p.busiest() for p in parts) > most * (1 + PHASE_SLACK) + fill or \
                sum(p.idle for p in parts) > IDLE_SLACK * len(sends) + fill * ports:
            return None  # the busiest port, or many ports, left idle too often
        for p in parts:
            p.match(k, phase, lag, below, fits)
        k += 1
    return phase


class _Part:
    """The sends of one part of :func:`_phase_order`'s graph still to place: per pair in order, per port a count."""

    def __init__(self, mine: Sequence[_Phased], fits=None) -> None:
        self.shared = getattr(fits, "shared", None)
        self.left_s: dict[str, float] = {}  # per shared resource, the phases' worth of its sends still to place
        for x in mine:
            for r, share in self.shared(x.src, x.dst) if self.shared else ():
                self.left_s[r] = self.left_s.get(r, 0.0) + share
        self.queue: dict[tuple[int, int], list[_Phased]] = {}
        self.left_t: dict[int, int] = {}
        self.left_r: dict[int, int] = {}
        for x in mine:
            self.queue.setdefault((x.src, x.dst), []).append(x)
            self.left_t[x.src] = self.left_t.get(x.src, 0) + 1
            self.left_r[x.dst] = self.left_r.get(x.dst, 0) + 1
        self.left = len(mine)
        self.idle = 0  # phases x senders with sends left that sent nothing
        self.most = max(max(self.left_t.values(), default=0), max(self.left_r.values(), default=0))

    def busiest(self) -> int:
        """The most sends a port has still to place (as many phases at least)."""
        return max(max(self.left_t.values(), default=0), max(self.left_r.values(), default=0))

    def match(self, k: int, phase: dict[int, int], lag: int, below: dict[int, int], fits) -> None:
        """Phase ``k``: a matching of the pairs whose first ready send is placed there."""
        ready: dict[tuple[int, int], _Phased] = {}
        for pair, xs in self.queue.items():
            for x in xs:
                if x.after < 0 or (x.after in phase and phase[x.after] + lag <= k):
                    ready[pair] = x
                    break
        idle = sum(1 for v in self.left_t.values() if v > 0)
        if not ready:
            self.idle += idle
            return
        g = nx.Graph()
        togo = max(1, self.most - k)
        for (a, b), x in ready.items():
            w = float(self.left_t[a] + self.left_r[b])
            if self.shared:
                # a resource shared by several ports (a spine) that needs most of the phases left: its sends first
                w *= 1 + SHARED_URGENCY * max((self.left_s[r] / togo for r, _ in self.shared(a, b)), default=0.0)
            g.add_edge(2 * a, 2 * b + 1, weight=w + below.get(x.send, 0))
        chosen = _fitting_matching(g, fits)
        self.idle += idle - len(chosen)
        for a, b in chosen:
            x = ready[(a, b)]
            for r, share in self.shared(a, b) if self.shared else ():
                self.left_s[r] -= share
            phase[x.send] = k
            self.queue[(a, b)].remove(x)
            if not self.queue[(a, b)]:
                del self.queue[(a, b)]
            self.left_t[a] -= 1
            self.left_r[b] -= 1
            self.left -= 1


def _fitting_matching(g: nx.Graph, fits) -> list[tuple[int, int]]:
    """A maximum-weight matching of ``g`` (edges ``2 a``-``2 b + 1``: sender ``a``, receiver ``b``) whose pairs
    ``fits`` accepts together (None: any): while it names pairs that overload a resource, the lightest of them
    leaves the graph and the matching is taken again."""
    g = g.copy()
    while True:
        pairs = []
        for u, v in sorted(nx.max_weight_matching(g, maxcardinality=True)):
            u, v = min(u, v), max(u, v)
            pairs.append((u // 2, v // 2) if u % 2 == 0 else (v // 2, u // 2))
        over = fits(pairs, lambda ab: g.edges[2 * ab[0], 2 * ab[1] + 1]["weight"]) if fits is not None else []
        if not over:
            return pairs
        a, b = min(over, key=lambda ab: (g.edges[2 * ab[0], 2 * ab[1] + 1]["weight"], ab))
        g.remove_edge(2 * a, 2 * b + 1)  # the lightest, then the matching again: another pair may take its place


def _halves(c: Chunks) -> tuple[Chunks, Chunks]:
    """A two-chunk range as its two one-chunk halves."""
    return Chunks(c.buf, c.index, 1), Chunks(c.buf, c.index + 1, 1)


def _staggered(em: _Emitter, p: int, sends: list[_Send], least: int, window: int = 2) -> list[_Send]:
    """``p``'s sends in order, the odd ones of the first ``window`` through every port that carries at least
    ``least`` of them cut in halves: the first half in its place, the second after all; and the last one through
    every port that carries at least :data:`TAIL_SPLIT` in halves, the first in its place, the second at the
    very end (see :func:`_broadcast`).

    Costs a send of ``p`` and a receive of the child per cut, and the child's forwarding of the second piece
    (a send and a receive per arc of its subtree: dgx_a100x128's allgather has 2,095 ops per rank with four sends
    per port, 2,127 with eight, 2,051 before the forwarding of pieces and the last cut).
    """
    through: dict[str, list[int]] = {}
    for k, x in enumerate(sends):
        for r in em.resources(p, x.child):
            through.setdefault(r, []).append(k)
    split = {ks[i] for ks in through.values() if len(ks) >= least for i in range(1, min(window, len(ks)), 2)}
    last = {ks[-1] for ks in through.values() if len(ks) >= max(least, TAIL_SPLIT)} - split
    if not split and not last:
        return sends
    out = list(sends)
    tail = []
    for k in sorted(split):
        x = sends[k]
        (a0, a1), (b0, b1) = _halves(x.src), _halves(x.dst)
        out[k] = _Send(x.child, a0, b0, x.deps)
        tail.append(_Send(x.child, a1, b1, x.deps))
    for k in sorted(last):
        x = sends[k]
        (a0, a1), (b0, b1) = _halves(x.src), _halves(x.dst)
        out[k] = _Send(x.child, a0, b0, x.deps)
        tail.append(_Send(x.child, a1, b1, x.deps, follows=True))
    return out + tail


def _overloads(em: _Emitter):
    """``fits(pairs, weight)``: the pairs to drop from a phase so that no resource carries more than its
    bandwidth with every pair at its connection's full rate (through each overloaded resource, its lightest
    pairs beyond what it carries; none: they fit). ``fits.shared(a, b)``: the resources of ``a -> b`` that
    carry several such pairs at once (a spine's up-link), each with the share of it one pair takes."""
    bw = em.topology.resource_bw

    def fits(pairs: Sequence[tuple[int, int]], weight) -> list[tuple[int, int]]:
        load: dict[str, float] = {}
        through: dict[str, list[tuple[int, int]]] = {}
        for a, b in pairs:
            res = em.resources(a, b)
            rate = min(bw[r] for r in res)
            for r in res:
                load[r] = load.get(r, 0.0) + rate
                through.setdefault(r, []).append((a, b))
        return [ab for r, x in load.items() if x > bw[r] * (1 + 1e-9) for ab in through[r]]

    def shared(a: int, b: int) -> list[tuple[str, float]]:
        res = em.resources(a, b)
        rate = min(bw[r] for r in res)
        return [(r, rate / bw[r]) for r in res if bw[r] > rate * (1 + 1e-9)]

    fits.shared = shared  # type: ignore[attr-defined]
    return fits


def _chain(em: _Emitter, sends: Sequence[_Phased], phase: dict[int, int], window: int) -> None:
    """Every rank's ``sends`` leave in phase order, ``window`` at a time (each waits for the one ``window``
    places before it)."""
    mine: dict[int, list[tuple[int, int]]] = {}
    heard: dict[int, list[tuple[int, int]]] = {}
    for x in sends:
        mine.setdefault(x.src, []).append((phase[x.send], x.send))
        heard.setdefault(x.dst, []).append((phase[x.send], x.send + 1))  # the recv follows its send
    for rank, order in mine.items():
        order.sort()
        for i in range(window, len(order)):
            em.ops[order[i][1]][6].append(order[i - window][1])
        if GATE > 0:
            got = sorted(heard.get(rank, ()))
            keys = [k for k, _ in got]
            for k, sid in order:
                j = bisect.bisect_right(keys, k - GATE) - 1
                if j >= 0:
                    em.ops[sid][6].append(got[j][1])


def _subtree_sizes(tree: PackedTree, kids: dict[int, list[int]]) -> dict[int, int]:
    order = [tree.root]
    for u in order:
        order.extend(kids.get(u, ()))
    size: dict[int, int] = {}
    for u in reversed(order):
        size[u] = 1 + sum(size[v] for v in kids.get(u, ()))
    return size


def _reduce_up(em: _Emitter, tree: PackedTree, own: Chunks, out: Chunks, order_key: int) -> int:
    """Every rank's ``own`` chunk summed up ``tree`` into the root's ``out``; returns the root's last op.

    Leaves' sends are prioritised by (``order_key``, the root's offset from the
    leaf): every leaf serves the trees in the same relative order, so each
    relay completes its trees one after another, staggered across relays.
    """
    kids: dict[int, list[int]] = {}
    order = [tree.root] + [v for _, v in tree.arcs()]
    for v in order[1:]:
        kids.setdefault(tree.parent[v], []).append(v)
    sent: dict[int, tuple[tuple[int, ...], Chunks]] = {}  # child -> (the ops its send waits for, the chunk it sends)
    for v in reversed(order):
        mine = kids.get(v, [])
        if v != tree.root and not mine:
            sent[v] = ((), own)
            continue
        slots = []
        for u in mine:
            deps, chunk = sent[u]
            slot = em.fresh(v)
            sid = em._op(u, "send", src=chunk, peer=v, deps=deps)
            if chunk.buf == "i":
                em.prioritise(u, (order_key, em.offset(u, tree.root)), sid)
            slots.append((em._op(v, "recv", dst=slot, peer=u), slot))
        if v == tree.root:
            last = em.copy(v, own, out)
            acc = out
        else:
            last, acc = slots[0]
            slots = slots[1:]
            last = em.reduce(v, own, acc, deps=(last,))
        for rid, slot in slots:
            last = em.reduce(v, slot, acc, deps=(last, rid))
        if v == tree.root:
            return last
        sent[v] = ((last,), acc)
    raise CollectiveError("a tree without its root")  # pragma: no cover


def _plan(trees: Sequence[PackedTree], collective: Collective, kinds: tuple[str, str], inward: bool
          ) -> dict[int, list[PackedTree]]:
    """Per root (every rank for ``kinds[0]``, the collective's root for ``kinds[1]``), the tree of each chunk."""
    if collective.kind not in kinds:
        raise CollectiveError(f"{'in' if inward else 'out'}-trees lower {' or '.join(kinds)}, not {collective.kind}")
    roots = _by_root(trees, inward=inward)
    if collective.kind == kinds[1]:
        roots = {collective.root: roots[collective.root]}
    return {q: _assign(ts, collective.chunk_factor) for q, ts in roots.items()}


def lower_out_trees(trees: Sequence[PackedTree], collective: Collective, topology: Topology,
                    window: int | None = None, stagger: int = STAGGER, phased: int = 0) -> Schedule:
    """Allgather (every rank a root) or broadcast (the collective's root) along out-trees (module docstring).

    ``window``: how many of a rank's sends of one chunk share a port at once (:func:`_broadcast`; default
    :data:`WINDOW` with one chunk per root, else 1). ``stagger``: with one chunk per root and a window of two,
    the ports that carry at least this many of a rank's sends of the chunk send their second child half the
    chunk first and half last (:func:`_broadcast`; 0: none). Staggered, the schedule's collective has twice
    the chunk factor (every chunk as two halves, sent together wherever it is not cut).
    """
    kind, c = collective.kind, collective.chunk_factor
    plan = _plan(trees, collective, ("allgather", "broadcast"), inward=False)
    em = _Emitter(topology)
    if phased:
        plan = _rounded(em, {q: _by_root(trees, False)[q] for q in plan}, c)
    if window is None:
        # one chunk per root: nothing else in flight hides a message's overhead and latency (see _broadcast)
        window = WINDOW if c == 1 else 1
    if window < 1:
        raise CollectiveError(f"a send window holds at least one send, not {window}")
    if c > 1 or window < 2 or phased:
        stagger = 0  # the other chunks in flight keep the ports busy; halves are a window of two's
    h = 2 if stagger > 0 else 1
    out_coll = Collective(kind, collective.n_ranks, c * h, collective.root) if h > 1 else collective
    crossing: list[_Phased] = []
    for j in range(c):
        for q in sorted(plan):
            slot = em.at("o", h * (q * c + j if kind == "allgather" else j), h)
            src = em.at("i", h * j, h)
            em.copy(q, src, slot)
            _broadcast(em, plan[q][j], src, slot, (), window, stagger, crossing if phased else None, j)
    phases = 0
    if not crossing:
        phased = 0  # nothing crosses a node boundary: nothing to phase
    if phased:
        order = _phase_order(crossing, fits=_overloads(em))
        if order is None:  # too many phases (_phase_order): the lowering as without
            log.info("packed trees: phasing the node-crossing sends would idle their ports; not phased")
            return lower_out_trees(trees, collective, topology, window, stagger)
        _chain(em, crossing, order, phased)
        phases = 1 + max(order.values(), default=-1)
    return em.build(out_coll, algorithm=NAME, trees=sum(len(set(t)) for t in plan.values()), send_window=window,
                    stagger=stagger, phased=phased, phases=phases)


def lower_in_trees(trees: Sequence[PackedTree], collective: Collective, topology: Topology) -> Schedule:
    """Reduce-scatter (every rank a root) or reduce (the collective's root) along in-trees (module docstring)."""
    kind, c = collective.kind, collective.chunk_factor
    plan = _plan(trees, collective, ("reduce_scatter", "reduce"), inward=True)
    em = _Emitter(topology)
    for j in range(c):
        for q in sorted(plan):
            own = em.at("i", q * c + j if kind == "reduce_scatter" else j)
            _reduce_up(em, plan[q][j], own, em.at("o", j), j)
    return em.build(collective, algorithm=NAME, trees=sum(len(set(t)) for t in plan.values()))


def lower_allreduce(trees: Sequence[PackedTree], root_weight: Sequence[float], collective: Collective,
                    topology: Topology) -> Schedule:
    """Allreduce: each chunk reduced up an in-tree to its root, then broadcast down an out-tree (module docstring)."""
    if collective.kind != "allreduce":
        raise CollectiveError(f"lower_allreduce lowers allreduce, not {collective.kind}")
    C = collective.chunk_factor
    ins, outs = _by_root(trees, inward=True), _by_root(trees, inward=False)
    owners = [q for q in range(collective.n_ranks) if root_weight[q] > 0 and q in ins and q in outs]
    counts = apportion([root_weight[q] for q in owners], C)
    jobs: list[tuple[int, PackedTree, PackedTree]] = []
    for q, k in zip(owners, counts):
        jobs += [(q, a, b) for a, b in zip(_assign(ins[q], k), _assign(outs[q], k))]
    # interleave the roots' chunks so that every root starts at once
    pos, k = [], 0
    for i, job in enumerate(jobs):
        k = k + 1 if i and jobs[i - 1][0] == job[0] else 0
        pos.append(k)
    order = sorted(range(len(jobs)), key=lambda i: (pos[i], jobs[i][0]))
    em = _Emitter(topology)
    for j, i in enumerate(order):
        q, up, down = jobs[i]
        slot = em.at("o", j)
        done = _reduce_up(em, up, em.at("i", j), slot, j)
        _broadcast(em, down, slot, slot, (done,))
    return em.build(collective, algorithm=NAME, trees=len(trees),
                    roots=sum(1 for k in counts if k))

