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
        for r in topo.connection(*e).resources:
            res_load[r] = res_load.get(r, 0.0) + l
    out = {}
    for e, l in edge_load.items():
        c = topo.connection(*e)
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
    """
    lt = routing.lt
    topo = lt.topology
    group = lt.group
    n = lt.n
    kind = routing.kind
    c = routing.chunk_factor
    b = routing.chunk_bytes
    eff = fair_share_bandwidth(routing)
    enforce = bool(lt.inter is not None and lt.inter.enforce_ordering)

    # the representative chunks and their quotas per edge (in the representative's frame)
    if kind == "allgather":
        reps = [(rho, k) for rho in group.representatives for k in range(len(routing.classes))]
        comm_of = {key: key[0] for key in reps}
        pieces_of = {key: routing.classes[key[1]] for key in reps}
        origin_of = {key: key[0] for key in reps}
    else:
        reps = [key for key in routing.flows if group.rep_of[key[0]] == key[0]]
        comm_of = {key: key[0] * n + key[1] for key in reps}
        pieces_of = {key: tuple(range(c)) for key in reps}
        origin_of = {key: key[0] for key in reps}
    # edge orbit representative of every edge used, and the element mapping the representative onto it
    orbit_of: dict[Edge, tuple[Edge, int]] = {}

    def canonical(e: Edge) -> tuple[Edge, int]:
        """(orbit representative of e, index of the element mapping e onto it)."""
        got = orbit_of.get(e)
        if got is None:
            got = min((map_edge(g, e), gi) for gi, g in enumerate(group.elements))
            orbit_of[e] = got
        return got

    # streams: (key, edge) -> remaining quota; grouped by canonical link
    quota: dict[tuple, int] = {}
    streams_on: dict[Edge, list[tuple]] = {}
    out_streams: dict[tuple, list[Edge]] = {}  # (key, u) -> edges with quota out of u
    for key in reps:
        for e, q in sorted(routing.flows[key].items()):
            if q <= 0:
                continue
            quota[(key, e)] = q
            rep_e, hi = canonical(e)
            streams_on.setdefault(rep_e, []).append((key, e, hi))
            out_streams.setdefault((key, e[0]), []).append(e)

    # state, in each representative chunk's own frame
    arrival: dict[tuple, float] = {}   # (key, j, x) -> time the piece is at x
    holder_move: dict[tuple, int] = {}  # (key, j, x) -> move id that delivered it (-1 at origin)
    incoming: set[tuple] = set()        # (key, j, x) that have arrived or are on their way
    left: set[tuple] = set()            # alltoall: (key, j, x) already forwarded from x
    # per stream, the pieces present at its sender as a heap of (arrival, j); stale entries are skipped lazily
    avail: dict[tuple, list[tuple[float, int]]] = {(key, e): [] for (key, e) in quota}

    def arrive(key, j, x, t) -> None:
        arrival[(key, j, x)] = t
        for e in out_streams.get((key, x), ()):
            heapq.heappush(avail[(key, e)], (t, j))

    for key in reps:
        for j in pieces_of[key]:
            arrive(key, j, origin_of[key], 0.0)
            holder_move[(key, j, origin_of[key])] = -1
            incoming.add((key, j, origin_of[key]))
    free_at: dict[Edge, float] = dict.fromkeys(streams_on, 0.0)
    moves: list[Move] = []
    seq: dict[Edge, list[tuple[int, int]]] = {e: [] for e in streams_on}

    def dest_of(key) -> int | None:
        return key[1] if kind == "alltoall" else None

    def best_on(rep_e: Edge):
        """The next move on canonical link rep_e: (start, prio, key, e, hi, j) or None."""
        best = None
        found = []
        for key, e, hi in streams_on[rep_e]:
            if quota[(key, e)] <= 0:
                continue
            u, v = e
            if kind == "alltoall" and u == dest_of(key):
                continue
            h = avail[(key, e)]
            while h:
                t, j = h[0]
                stale = (key, j, v) in incoming if kind == "allgather" else (key, j, u) in left
                if not stale:
                    break
                heapq.heappop(h)
            if not h:
                continue
            t, j = h[0]
            own = 0 if (enforce and lt.is_cross(u, v) and origin_of[key] == u) else 1
            st = max(t, free_at[rep_e] - alpha[rep_e]) if overlap_alpha else max(t, free_at[rep_e])
            found.append(((st, own), key, e, hi, t, j))
        if not found:
            return None
        head = min(f[0] for f in found)
        # the urgency rule only breaks ties among the pieces that could start first (computed lazily)
        for first, key, e, hi, t, j in found:
            if first != head:
                continue
            cand = (first[0], first[1], -urgency(key, j, e[1]), t, j, comm_of[key], e)
            if best is None or cand < best[0]:
                best = (cand, key, e, hi, j)
        return best

    # how urgently rank v needs a piece: the busiest connection it still has to feed with that chunk
    busy = {e: topo.connection(*e).message_us + b / (eff[e] * BYTES_PER_US_PER_GBPS) for e in eff}
    load_time: dict[Edge, float] = {}
    for key in reps:
        for e, q in routing.flows[key].items():
            if q > 0:
                rep_e, _ = canonical(e)
                load_time[rep_e] = load_time.get(rep_e, 0.0) + q * busy[e]

    def urgency(key, j, v) -> float:
        if kind == "alltoall" and v == key[1]:
            return 0.0
        best = 0.0
        for e in out_streams.get((key, v), ()):
            if quota[(key, e)] > 0:
                rep_e, _ = canonical(e)
                best = max(best, load_time[rep_e] - free_at[rep_e] + 0.0)
        return round(best, 9)

    # a move's fixed cost: latency plus the per-message overhead on both ends (Connection.message_us)
    alpha = {e: topo.connection(*e).message_us for e in streams_on}
    heap: list = []
    current: dict[Edge, tuple] = {}  # the one live heap entry of each link; others are outdated copies

    def push(link: Edge, cand) -> None:
        current[link] = cand
        heapq.heappush(heap, (cand, link))

    for rep_e in sorted(streams_on):
        got = best_on(rep_e)
        if got is not None:
            push(rep_e, got[0])
    total = sum(quota.values())
    done = 0
    # links whose candidates may change when a piece arrives at / is claimed for rank x (per chunk key)
    links_from: dict[tuple, list[Edge]] = {}
    for rep_e, lst in streams_on.items():
        for key, e, _hi in lst:
            links_from.setdefault((key, e[0]), []).append(rep_e)
    while heap:
        cand, rep_e = heapq.heappop(heap)
        if current.get(rep_e) != cand:
            continue  # outdated copy
        got = best_on(rep_e)
        if got is None:
            del current[rep_e]
            continue
        if got[0] != cand:
            push(rep_e, got[0])
            continue
        del current[rep_e]
        cand, key, e, hi, j = got
        u, v = e
        start = cand[0]
        data = b / (eff[e] * BYTES_PER_US_PER_GBPS)
        if overlap_alpha:
            t_ready = arrival[(key, j, u)]
            data_start = max(t_ready + alpha[rep_e], free_at[rep_e])
            start = data_start - alpha[rep_e]
            end = data_start + data
        else:
            end = start + alpha[rep_e] + data
        mid = len(moves)
        moves.append(Move(mid, comm_of[key], j, u, v, holder_move[(key, j, u)], start, end, arrival[(key, j, u)]))
        seq[rep_e].append((mid, hi))
        quota[(key, e)] -= 1
        free_at[rep_e] = end
        incoming.add((key, j, v))
        if kind == "alltoall":
            left.add((key, j, u))
        arrive(key, j, v, end)
        holder_move[(key, j, v)] = mid
        done += 1
        # links that may now start earlier: this one, and those leaving v with this chunk (entries of
        # links that lost a candidate are stale-early and are re-checked when popped)
        touched = {rep_e}
        touched.update(links_from.get((key, v), ()))
        for t_e in sorted(touched):
            nxt = best_on(t_e)
            if nxt is not None and current.get(t_e) != nxt[0]:
                push(t_e, nxt[0])
    if done != total:
        raise InfeasibleError(f"ordering: {total - done} of {total} routed piece moves could not be scheduled "
                              f"(the routing is not a set of trees/paths)")
    makespan = max((m.end for m in moves), default=0.0)
    plan = TransferPlan(kind, routing, moves, seq, eff, makespan, {"overlap_alpha": overlap_alpha})
    log.info("ordering: %d representative moves on %d connection orbits, estimated %.3f us",
             len(moves), len(seq), makespan)
    return plan

