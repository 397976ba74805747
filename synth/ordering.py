"""Ordering heuristic (TACCL stage 2): a list scheduler that orders pieces on every link.

Input: a :class:`~ccsynth.synth.routing.Routing` (how many pieces of each
chunk cross each connection). Output: a :class:`TransferPlan` -- every
single-piece move ``u -> v`` with estimated start and end times, and for
every connection the order in which its moves go.

The scheduler runs a greedy event simulation in the alpha-beta model:

* each connection is a server that sends one piece at a time; its speed is
  its *fair share* of every resource it uses, from the routing's loads
  (a NIC shared by 8 equally loaded connections gives each an eighth), so
  the estimate respects the bandwidth constraints without modelling
  contention explicitly;
* a piece may leave ``u`` once it has arrived there; which pieces cross an
  edge is decided on the fly (the routing fixes only how many), so a rank
  forwards the pieces it receives first -- this is what pipelines a chunk
  split into several pieces along its tree;
* among the pieces that could go next on a connection, those that can
  start earliest compete; the winner is the one whose receiver must feed the
  busiest connection next (most remaining work: a critical-path rule that
  keeps the bottleneck connections supplied), then the one available
  earliest, then the lower piece index; with TACCL's ``enforce_ordering`` a
  relay's own pieces go before relayed ones on connections between nodes.

**Symmetry.** With a symmetry group ``G`` the schedule is made symmetric:
only representative moves are simulated (those of the representative
sources, see :class:`~ccsynth.synth.sketch_symmetry.SymmetryGroup`); every
connection belongs to one orbit of connections, and the order on
``g(e)`` is the image under ``g`` of the order on the orbit's
representative ``e``. The work and the later contiguity MILP shrink by
``|G|``.

Example:
    >>> from ccsynth.topologies.model import Link, Topology
    >>> from ccsynth.synth.sketch import Sketch
    >>> from ccsynth.synth.routing import route_allgather
    >>> ring4 = Topology("r4", 4, links=tuple(Link(a, b, 1.0, 10.0) for a in range(4) for b in range(4)
    ...                                      if (a - b) % 4 in (1, 3)))
    >>> lt = Sketch(symmetry=((1, 4),)).bind(ring4)
    >>> plan = order_moves(route_allgather(lt, 1, 1000.0))
    >>> len(plan.moves), plan.n_moves_full(), round(plan.makespan_us, 3)  # 4 sources x 3 receivers; 2 hops of 1.1 us
    (3, 12, 2.2)
"""

from __future__ import annotations

import heapq
import logging
from dataclasses import dataclass, field

from ccsynth.errors import InfeasibleError
from ccsynth.synth.paths import edge_connection
from ccsynth.synth.routing import Edge, Routing, map_edge
from ccsynth.topologies.model import BYTES_PER_US_PER_GBPS

__all__ = ["Move", "TransferPlan", "fair_share_bandwidth", "order_moves"]

log = logging.getLogger(__name__)


@dataclass
class Move:
    """One piece crossing one connection.

    ``comm`` is the chunk the piece belongs to: the source rank (allgather)
    or the pair ``(source, destination)`` encoded as ``s * n + d``
    (alltoall); ``j`` is the piece index (``0..c-1``). ``parent`` is the id
    of the move that brought the piece to ``u`` (-1 when ``u`` is where it
    starts).
    """

    id: int
    comm: int
    j: int
    u: int
    v: int
    parent: int
    start: float = 0.0
    end: float = 0.0
    parent_end: float = 0.0  # when the piece reached u (list schedule)


@dataclass
class TransferPlan:
    """Moves of the *representative* chunks plus the per-connection order.

    ``links[e]`` (for every representative connection ``e`` of an orbit)
    lists ``(move_id, g_index)``: the move ``moves[move_id]`` mapped by
    group element ``lt.group.elements[g_index]`` lies on ``e``; the list is
    in sending order. :meth:`expand` yields every actual move.
    """

    kind: str
    routing: Routing
    moves: list[Move]
    links: dict[Edge, list[tuple[int, int]]]
    eff_bw: dict[Edge, float]
    makespan_us: float
    meta: dict = field(default_factory=dict)

    @property
    def lt(self):
        return self.routing.lt

    @property
    def n(self) -> int:
        return self.routing.lt.n

    def map_comm(self, g, comm: int) -> int:
        if self.kind == "alltoall":
            n = self.n
            return g[comm // n] * n + g[comm % n]
        return g[comm]

    def n_moves_full(self) -> int:
        return len(self.moves) * self.lt.group.order


# --------------------------------------------------------------------------- effective bandwidth
def fair_share_bandwidth(routing: Routing) -> dict[Edge, float]:
    """Each used connection's share of its resources, proportional to the bytes it carries."""
    topo = routing.lt.topology
    res_bw = topo.resource_bw
    edge_load: dict[Edge, float] = {}
    for flow in routing.flows.values():
        for e, k in flow.items():
            if k:
                edge_load[e] = edge_load.get(e, 0.0) + k
    res_load: dict[str, float] = {}
    for e, l in edge_load.items():
        for r in edge_connection(topo, e).resources:
            res_load[r] = res_load.get(r, 0.0) + l
    out = {}
    for e, l in edge_load.items():
        c = edge_connection(topo, e)
        bw = c.bw
        for r in c.resources:
            bw = min(bw, res_bw[r] * l / res_load[r])
        out[e] = bw
    return out


# --------------------------------------------------------------------------- the scheduler
def order_moves(routing: Routing, *, overlap_alpha: bool = False) -> TransferPlan:
    """Run the list scheduler on ``routing`` (allgather or alltoall).

    With ``overlap_alpha`` a connection is busy only while data flows: the
    latency of the next piece overlaps the data of the previous one (as
    when two sends per connection are in flight, see the lowering's wave
    window); otherwise each piece occupies its connection for
    ``alpha + bytes / bandwidth``.

    Stages (one method of :class:`_ListScheduler` each): 1. the
    representative chunks and their streams (:meth:`~_ListScheduler.streams`);
    2. every piece at its origin (:meth:`~_ListScheduler.place_origins`);
    3. each link's load, what urgency reads (:meth:`~_ListScheduler.loads`);
    4. the list schedule: the earliest next move of every link from a heap
    (:meth:`~_ListScheduler.run`, :meth:`~_ListScheduler.best_on`,
    :meth:`~_ListScheduler.commit`); 5. the plan, once every routed move is
    placed (:meth:`~_ListScheduler.plan`).
    """
    sched = _ListScheduler(routing, overlap_alpha)
    sched.streams()
    sched.place_origins()
    sched.loads()
    sched.run()
    return sched.plan()


@dataclass(frozen=True)
class _Representatives:
    """The representative chunks (keys) of a routing: each one's chunk id, pieces and origin rank."""

    keys: list[tuple]
    comm_of: dict[tuple, int]
    pieces_of: dict[tuple, tuple[int, ...]]
    origin_of: dict[tuple, int]


def _representatives(routing: Routing) -> _Representatives:
    """Stage 1a: the chunks whose moves are simulated (in the representative's frame, see the module docstring)."""
    group, n = routing.lt.group, routing.lt.n
    if routing.kind == "allgather":
        reps = [(rho, k) for rho in group.representatives for k in range(len(routing.classes))]
        return _Representatives(reps, {key: key[0] for key in reps}, {key: routing.classes[key[1]] for key in reps},
                                {key: key[0] for key in reps})
    reps = [key for key in routing.flows if group.rep_of[key[0]] == key[0]]
    return _Representatives(reps, {key: key[0] * n + key[1] for key in reps},
                            {key: tuple(range(routing.chunk_factor)) for key in reps}, {key: key[0] for key in reps})


class _ListScheduler:
    """The state of one run of :func:`order_moves` (its stages are the methods, in order).

    A *stream* is (chunk key, edge) with a quota of pieces left to cross; the
    streams on the edges of one orbit share that orbit's representative
    *link*, which sends one piece at a time.
    """

    def __init__(self, routing: Routing, overlap_alpha: bool):
        lt = routing.lt
        self.routing = routing
        self.lt = lt
        self.topo = lt.topology
        self.group = lt.group
        self.kind = routing.kind
        self.b = routing.chunk_bytes
        self.overlap_alpha = overlap_alpha
        self.eff = fair_share_bandwidth(routing)
        self.enforce = bool(lt.inter is not None and lt.inter.enforce_ordering)
        self.reps = _representatives(routing)
        # edge orbit representative of every edge used, and the element mapping the representative onto it
        self.orbit_of: dict[Edge, tuple[Edge, int]] = {}
        # streams: (key, edge) -> remaining quota; grouped by canonical link
        self.quota: dict[tuple, int] = {}
        self.streams_on: dict[Edge, list[tuple]] = {}
        self.out_streams: dict[tuple, list[Edge]] = {}  # (key, u) -> edges with quota out of u
        # state, in each representative chunk's own frame
        self.arrival: dict[tuple, float] = {}   # (key, j, x) -> time the piece is at x
        self.holder_move: dict[tuple, int] = {}  # (key, j, x) -> move id that delivered it (-1 at origin)
        self.incoming: set[tuple] = set()        # (key, j, x) that have arrived or are on their way
        self.left: set[tuple] = set()            # alltoall: (key, j, x) already forwarded from x
        # per stream, the pieces present at its sender as a heap of (arrival, j); stale entries are skipped lazily
        self.avail: dict[tuple, list[tuple[float, int]]] = {}
        self.free_at: dict[Edge, float] = {}
        self.moves: list[Move] = []
        self.seq: dict[Edge, list[tuple[int, int]]] = {}
        self.load_time: dict[Edge, float] = {}
        self.alpha: dict[Edge, float] = {}
        self.heap: list = []
        self.current: dict[Edge, tuple] = {}  # the one live heap entry of each link; others are outdated copies
        self.done = 0

    def canonical(self, e: Edge) -> tuple[Edge, int]:
        """(orbit representative of e, index of the element mapping e onto it)."""
        got = self.orbit_of.get(e)
        if got is None:
            got = min((map_edge(g, e), gi) for gi, g in enumerate(self.group.elements))
            self.orbit_of[e] = got
        return got

    # ------------------------------------------------------------------ stages 1-3: the setting
    def streams(self) -> None:
        """Stage 1b: every stream with quota, on its link."""
        for key in self.reps.keys:
            for e, q in sorted(self.routing.flows[key].items()):
                if q <= 0:
                    continue
                self.quota[(key, e)] = q
                rep_e, hi = self.canonical(e)
                self.streams_on.setdefault(rep_e, []).append((key, e, hi))
                self.out_streams.setdefault((key, e[0]), []).append(e)
        self.avail = {(key, e): [] for (key, e) in self.quota}

    def arrive(self, key, j: int, x: int, t: float) -> None:
        """Piece ``j`` of chunk ``key`` is at ``x`` from time ``t``: it may leave on every stream out of ``x``."""
        self.arrival[(key, j, x)] = t
        for e in self.out_streams.get((key, x), ()):
            heapq.heappush(self.avail[(key, e)], (t, j))

    def place_origins(self) -> None:
        """Stage 2: every piece at its origin at time 0; every link free."""
        origin_of = self.reps.origin_of
        for key in self.reps.keys:
            for j in self.reps.pieces_of[key]:
                self.arrive(key, j, origin_of[key], 0.0)
                self.holder_move[(key, j, origin_of[key])] = -1
                self.incoming.add((key, j, origin_of[key]))
        self.free_at = dict.fromkeys(self.streams_on, 0.0)
        self.seq = {e: [] for e in self.streams_on}

    def loads(self) -> None:
        """Stage 3: each link's total busy time (how urgently its sender needs pieces), and its fixed cost per
        move: latency plus the per-message overhead on both ends (``Connection.message_us``)."""
        topo, eff, b = self.topo, self.eff, self.b
        busy = {e: edge_connection(topo, e).message_us + b / (eff[e] * BYTES_PER_US_PER_GBPS) for e in eff}
        for key in self.reps.keys:
            for e, q in self.routing.flows[key].items():
                if q > 0:
                    rep_e, _ = self.canonical(e)
                    self.load_time[rep_e] = self.load_time.get(rep_e, 0.0) + q * busy[e]
        self.alpha = {e: edge_connection(topo, e).message_us for e in self.streams_on}

    # ------------------------------------------------------------------ stage 4: the list schedule
    def urgency(self, key, j: int, v: int) -> float:
        """How urgently rank ``v`` needs a piece: the busiest connection it still has to feed with that chunk."""
        if self.kind == "alltoall" and v == key[1]:
            return 0.0
        best = 0.0
        for e in self.out_streams.get((key, v), ()):
            if self.quota[(key, e)] > 0:
                rep_e, _ = self.canonical(e)
                best = max(best, self.load_time[rep_e] - self.free_at[rep_e] + 0.0)
        return round(best, 9)

    def best_on(self, rep_e: Edge):
        """The next move on canonical link rep_e: (candidate, key, e, hi, j) or None."""
        kind, quota, avail = self.kind, self.quota, self.avail
        best = None
        found = []
        for key, e, hi in self.streams_on[rep_e]:
            if quota[(key, e)] <= 0:
                continue
            u, v = e
            if kind == "alltoall" and u == key[1]:
                continue
            h = avail[(key, e)]
            while h:
                t, j = h[0]
                stale = (key, j, v) in self.incoming if kind == "allgather" else (key, j, u) in self.left
                if not stale:
                    break
                heapq.heappop(h)
            if not h:
                continue
            t, j = h[0]
            own = 0 if (self.enforce and self.lt.is_cross(u, v) and self.reps.origin_of[key] == u) else 1
            free = self.free_at[rep_e]
            st = max(t, free - self.alpha[rep_e]) if self.overlap_alpha else max(t, free)
            found.append(((st, own), key, e, hi, t, j))
        if not found:
            return None
        head = min(f[0] for f in found)
        # the urgency rule only breaks ties among the pieces that could start first (computed lazily)
        for first, key, e, hi, t, j in found:
            if first != head:
                continue
            cand = (first[0], first[1], -self.urgency(key, j, e[1]), t, j, self.reps.comm_of[key], e)
            if best is None or cand < best[0]:
                best = (cand, key, e, hi, j)
        return best

    def push(self, link: Edge, cand) -> None:
        self.current[link] = cand
        heapq.heappush(self.heap, (cand, link))

    def run(self) -> None:
        """Stage 4: place moves, earliest candidate first, until no link has one."""
        for rep_e in sorted(self.streams_on):
            got = self.best_on(rep_e)
            if got is not None:
                self.push(rep_e, got[0])
        # links whose candidates may change when a piece arrives at / is claimed for rank x (per chunk key)
        links_from: dict[tuple, list[Edge]] = {}
        for rep_e, lst in self.streams_on.items():
            for key, e, _hi in lst:
                links_from.setdefault((key, e[0]), []).append(rep_e)
        heap, current = self.heap, self.current
        while heap:
            cand, rep_e = heapq.heappop(heap)
            if current.get(rep_e) != cand:
                continue  # outdated copy
            got = self.best_on(rep_e)
            if got is None:
                del current[rep_e]
                continue
            if got[0] != cand:
                self.push(rep_e, got[0])
                continue
            del current[rep_e]
            key, v = got[1], got[2][1]
            self.commit(rep_e, got)
            # links that may now start earlier: this one, and those leaving v with this chunk (entries of
            # links that lost a candidate are stale-early and are re-checked when popped)
            touched = {rep_e}
            touched.update(links_from.get((key, v), ()))
            for t_e in sorted(touched):
                nxt = self.best_on(t_e)
                if nxt is not None and current.get(t_e) != nxt[0]:
                    self.push(t_e, nxt[0])

    def commit(self, rep_e: Edge, got) -> None:
        """Place the move ``got`` (from :meth:`best_on`) on link ``rep_e``: its times, and the piece at ``v``."""
        cand, key, e, hi, j = got
        u, v = e
        start = cand[0]
        alpha = self.alpha[rep_e]
        data = self.b / (self.eff[e] * BYTES_PER_US_PER_GBPS)
        if self.overlap_alpha:
            t_ready = self.arrival[(key, j, u)]
            data_start = max(t_ready + alpha, self.free_at[rep_e])
            start = data_start - alpha
            end = data_start + data
        else:
            end = start + alpha + data
        mid = len(self.moves)
        self.moves.append(Move(mid, self.reps.comm_of[key], j, u, v, self.holder_move[(key, j, u)], start, end,
                               self.arrival[(key, j, u)]))
        self.seq[rep_e].append((mid, hi))
        self.quota[(key, e)] -= 1
        self.free_at[rep_e] = end
        self.incoming.add((key, j, v))
        if self.kind == "alltoall":
            self.left.add((key, j, u))
        self.arrive(key, j, v, end)
        self.holder_move[(key, j, v)] = mid
        self.done += 1

    # ------------------------------------------------------------------ stage 5
    def plan(self) -> TransferPlan:
        """Stage 5: the plan, once every routed piece move has been placed."""
        total = self.done + sum(self.quota.values())
        if self.done != total:
            raise InfeasibleError(f"ordering: {total - self.done} of {total} routed piece moves could not be "
                                  f"scheduled (the routing is not a set of trees/paths)")
        makespan = max((m.end for m in self.moves), default=0.0)
        plan = TransferPlan(self.kind, self.routing, self.moves, self.seq, self.eff, makespan,
                            {"overlap_alpha": self.overlap_alpha})
        log.info("ordering%s: %d representative moves on %d connection orbits, estimated %.3f us",
                 " (latencies overlapped)" if self.overlap_alpha else "", len(self.moves), len(self.seq), makespan)
        return plan
