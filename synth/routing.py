"""Routing MILP (TACCL stage 1): which connections carry which chunk, for allgather.

Every rank ``s`` starts with its ``c`` pieces (chunk factor ``c``); each piece
must reach every rank. Per source the candidate connections form a DAG
(:func:`candidate_edges`): the *latency-shortest-path DAG* of the logical
topology (edge ``u -> v`` is on it when the alpha-distance from ``s`` to
``v`` equals that to ``u`` plus the edge's alpha; weights and distances
come from :mod:`~ccsynth.synth.paths`), or, with ``detours=1``,
every edge that moves forward in the order (distance, rank offset) -- one
step sideways is then allowed where load needs spreading.

The model uses **aggregate integer flows**: ``y[s, e]`` in ``0..c`` is the
number of pieces of ``s`` that cross edge ``e``. Constraints:

* ``in_{s}_{v}``: every rank ``v != s`` receives exactly ``c`` pieces of
  ``s``. On a DAG in which every rank eventually holds all ``c`` pieces, any
  such integer flow splits into ``c`` arborescences (assign disjoint piece
  sets to the in-edges of each rank in topological order), so this is exact
  and the model size does not grow with ``c``;
* ``bw_{R}``: the *bandwidth relaxation*: for every bandwidth constraint
  ``R`` of :meth:`Topology.bandwidth_constraints` (links, switch ports,
  shared NIC ports alike -- nothing is special-cased), the bytes routed
  through ``R`` divided by its bandwidth are at most ``T``.

Objective: ``T`` plus a small tie-breaking term (bytes moved over their link
bandwidth plus the latency detour of every sideways edge, scaled to about 1%
of ``T``) so that among equally fast routings the one that moves less data
on shorter paths wins; the switch policies add ``-/+ mu * (distinct switch
connections used)`` (``uc-max`` / ``uc-min``) and the TACCL ``minmax`` /
``maxmin`` strategies a load-balancing term.

**Symmetry.** With a sketch's symmetry group ``G`` (acting freely on the
ranks) variables exist only for the orbit representatives of the sources:
the routing of rank ``g(rho)`` is ``g`` applied to that of ``rho``. Since
loads of constraints in one orbit are then equal expressions, one bandwidth
row per orbit suffices. Variables and rows both shrink by ``|G|``
(:attr:`Routing.n_vars_full` / :attr:`Routing.n_vars`).

Example:
    >>> from ccsynth.topologies.model import Link, Topology
    >>> from ccsynth.synth.sketch import Sketch
    >>> ring4 = Topology("r4", 4, links=tuple(Link(a, b, 1.0, 10.0) for a in range(4) for b in range(4)
    ...                                      if (a - b) % 4 in (1, 3)))
    >>> r = route_allgather(Sketch(symmetry=((1, 4),)).bind(ring4), 1, 1000.0)
    >>> (r.n_vars_full - 1) // (r.n_vars - 1)   # the one variable T is not multiplied
    4
    >>> sorted(r.flows[(0, 0)].items())   # rank 0's chunk: both neighbours, then one of them forwards
    [((0, 1), 1), ((0, 3), 1), ((1, 2), 1)]
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import pulp

from ccsynth.errors import InfeasibleError
from ccsynth.synth.paths import Edge, LatencyPaths, edge_connection
from ccsynth.synth.sketch_model import LogicalTopology
from ccsynth.synth.solver import SolveResult, SolverOptions, solve, value
from ccsynth.tolerance import EVENT_REL, REL, is_close, is_greater
from ccsynth.topologies.model import BYTES_PER_US_PER_GBPS

__all__ = ["Edge", "Routing", "TIE_BREAK_SHARE", "POLICY_SHARE", "CandidateDag", "candidate_edges", "resource_orbits",
           "map_edge", "route_allgather"]

log = logging.getLogger(__name__)


#: weight of the tie-breaking terms relative to the bandwidth time T
TIE_BREAK_SHARE = 0.01
#: weight of the switch-policy / load-balancing terms relative to T
POLICY_SHARE = 0.02


@dataclass
class Routing:
    """The result of a routing stage.

    ``flows[(s, k)]`` maps each edge to the number of pieces of class ``k``
    of rank ``s`` that cross it (allgather), or ``flows[(s, d)]`` the pieces
    of the ``s -> d`` chunk (alltoall). ``classes[k]`` lists the chunk
    indices of class ``k`` (one class unless the sketch has
    ``chunk_relays``). ``edges[(s, k)]`` is the candidate DAG in a
    topological order.
    """

    kind: str
    lt: LogicalTopology
    chunk_factor: int
    chunk_bytes: float
    classes: list[tuple[int, ...]]
    flows: dict[tuple[int, int], dict[Edge, int]]
    edges: dict[tuple[int, int], list[Edge]]
    order: dict[tuple[int, int], list[int]]
    t_bw_us: float
    n_vars: int
    n_vars_full: int
    n_constraints: int
    solve: SolveResult | None = None
    method: str = "milp"
    meta: dict = field(default_factory=dict)


# ----------------------------------------------------------------------------- candidate DAGs
@dataclass(frozen=True)
class CandidateDag:
    """The connections one chunk may use, from :func:`candidate_edges`.

    ``edges`` in a topological order (by receiver, then sender, in
    ``order``); ``order`` every reachable rank by latency distance from the
    source (ties by rank offset from it); ``slack[e]`` how much longer than
    the shortest path to its receiver a path through ``e`` is (0 on the
    shortest-path DAG); ``layer[x]`` the index of ``x``'s distance among the
    distinct distances (ranks at equal distance share a layer).
    """

    edges: list[Edge]
    order: list[int]
    slack: dict[Edge, float]
    layer: dict[int, int]


def candidate_edges(lt: LogicalTopology, src: int, j: int, detours: int,
                    paths: LatencyPaths | None = None) -> CandidateDag:
    """The candidate edges of chunk ``(src, j)``, the ranks by distance, and each edge's latency slack.

    ``detours=0``: the edges on latency-shortest paths from ``src`` (a DAG).
    The sketch's relay rules admit the edges
    (:meth:`~ccsynth.synth.sketch_model.LogicalTopology.relay_edge_ok`: data every
    rank needs enters another node once and spreads there).
    ``detours=1``: every edge that does not lead back towards ``src``
    (``dist(u) <= dist(v)``), including edges between ranks at the same
    distance in both directions; those could form cycles, which the routing
    MILP excludes by orienting every such pair acyclically (see
    :func:`route_allgather`). ``paths`` (built from ``lt`` when None)
    shares the search graph between calls.
    """
    paths = paths if paths is not None else LatencyPaths(lt)
    w = paths.weights
    dist = paths.distances_from(src, lambda u, v: lt.relay_edge_ok(src, j, u, v))
    n = lt.n
    order = sorted(dist, key=lambda x: (dist[x], (x - src) % n))
    pos = {r: i for i, r in enumerate(order)}
    edges = []
    slack = {}
    for u in order:
        for v in lt.out_edges[u]:
            if v == src or v not in dist or not lt.relay_edge_ok(src, j, u, v):
                continue
            s = dist[u] + w[(u, v)] - dist[v]
            tight = is_close(dist[u] + w[(u, v)], dist[v])
            if tight or (detours >= 1 and not is_greater(dist[u], dist[v])):
                edges.append((u, v))
                slack[(u, v)] = max(0.0, s)
    edges.sort(key=lambda e: (pos[e[1]], pos[e[0]]))
    layer: dict[int, int] = {}
    current, last = -1, None
    for x in order:
        if last is None or is_greater(dist[x], last):
            current += 1
            last = dist[x]
        layer[x] = current
    return CandidateDag(edges, order, slack, layer)


# ----------------------------------------------------------------------------- symmetry helpers
def resource_orbits(lt: LogicalTopology) -> dict[str, str]:
    """Map every bandwidth-constraint name to the representative name of its orbit under the group."""
    topo = lt.topology
    cons = list(topo.bandwidth_constraints())
    by_key = {(c.srcs, c.dsts): c.name for c in cons}
    parent = {c.name: c.name for c in cons}

    def find(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    if lt.group.order > 1:
        gens = lt.group.elements[1:]
        for c in cons:
            for g in gens:
                key = (frozenset(g[x] for x in c.srcs), frozenset(g[x] for x in c.dsts))
                other = by_key.get(key)
                if other is not None:
                    a, b = find(c.name), find(other)
                    if a != b:
                        parent[max(a, b)] = min(a, b)
    return {c.name: find(c.name) for c in cons}


def map_edge(g, e: Edge) -> Edge:
    return (g[e[0]], g[e[1]])


# ----------------------------------------------------------------------------- the MILP
def route_allgather(
    lt: LogicalTopology,
    chunk_factor: int,
    chunk_bytes: float,
    options: SolverOptions | None = None,
    *,
    detours: int | None = None,
    time_limit: float | None = None,
) -> Routing:
    """Solve the allgather routing MILP on logical topology ``lt``.

    ``chunk_bytes`` is the size of one piece (message size / (n * c)).
    Returns a :class:`Routing` with flows for every source (images of the
    representatives' flows under the symmetry group).

    Stages, one function each: 1. a candidate DAG and integer flow variables
    per representative chunk class (:func:`_candidates`); 2. every rank
    receives each class in full (:func:`_receive_in_full`); 3. edges inside
    a layer oriented acyclically (:func:`_orient_layers`); 4. the bandwidth
    relaxation, one row per orbit of resources (:func:`_bandwidth_rows`);
    5. the objective: ``T``, tie-breakers and policies
    (:func:`_objective`); 6. solve, expand to every source by symmetry and
    check (:func:`_routing_of`).
    """
    detours = lt.sketch.detours if detours is None else detours
    m = _candidates(lt, lt.chunk_classes(chunk_factor), detours)
    _receive_in_full(m)
    _orient_layers(m)
    load_terms = _bandwidth_rows(m, chunk_bytes)
    m.prob += _objective(m, load_terms, chunk_bytes)
    result = solve(m.prob, options or SolverOptions(), "routing", time_limit=time_limit)
    return _routing_of(m, chunk_factor, chunk_bytes, result, detours)


@dataclass
class _AllgatherModel:
    """The allgather routing MILP as the stages of :func:`route_allgather` build it, per representative
    chunk class ``(rho, k)``: its candidate edges, their order, slack and layers, and the flow variables."""

    lt: LogicalTopology
    classes: list[tuple[int, ...]]
    prob: pulp.LpProblem
    T: pulp.LpVariable
    y: dict[tuple[int, int, Edge], pulp.LpVariable] = field(default_factory=dict)
    rep_edges: dict[tuple[int, int], list[Edge]] = field(default_factory=dict)
    rep_order: dict[tuple[int, int], list[int]] = field(default_factory=dict)
    rep_slack: dict[tuple[int, int], dict[Edge, float]] = field(default_factory=dict)
    rep_layer: dict[tuple[int, int], dict[int, int]] = field(default_factory=dict)
    n_extra: int = 0  # variables other than y and T (orientations, potentials)


def _candidates(lt: LogicalTopology, classes: list[tuple[int, ...]], detours: int) -> _AllgatherModel:
    """Stage 1: the candidate DAG of every representative chunk class and a flow variable per edge."""
    n = lt.n
    paths = LatencyPaths(lt)
    prob = pulp.LpProblem("routing_allgather", pulp.LpMinimize)
    m = _AllgatherModel(lt, classes, prob, prob.add_variable("T", lowBound=0))
    for rho in lt.group.representatives:
        for k, cls in enumerate(classes):
            dag = candidate_edges(lt, rho, cls[0], detours, paths)
            if len(dag.order) < n:
                missing = min(set(range(n)) - set(dag.order))
                raise InfeasibleError(f"routing: chunk {cls[0]} of rank {rho} cannot reach rank {missing}")
            m.rep_edges[(rho, k)] = dag.edges
            m.rep_order[(rho, k)] = dag.order
            m.rep_slack[(rho, k)] = dag.slack
            m.rep_layer[(rho, k)] = dag.layer
            for e in dag.edges:
                m.y[(rho, k, e)] = prob.add_variable(f"y_{rho}_{k}_{e[0]}_{e[1]}", lowBound=0, upBound=len(cls),
                                                     cat="Integer")
    return m


def _receive_in_full(m: _AllgatherModel) -> None:
    """Stage 2: every rank receives each class in full, once."""
    for (rho, k), edges in m.rep_edges.items():
        size = len(m.classes[k])
        into: dict[int, list[Edge]] = {}
        for e in edges:
            into.setdefault(e[1], []).append(e)
        for v in range(m.lt.n):
            if v == rho:
                continue
            m.prob += (pulp.lpSum(m.y[(rho, k, e)] for e in into.get(v, ())) == size, f"in_{rho}_{k}_{v}")


def _orient_layers(m: _AllgatherModel) -> None:
    """Stage 3: edges inside a layer: orient each pair one way, acyclically (potentials)."""
    prob, y = m.prob, m.y
    for (rho, k), edges in m.rep_edges.items():
        layer = m.rep_layer[(rho, k)]
        eset = set(edges)
        pairs = sorted({(min(u, v), max(u, v)) for (u, v) in edges if layer[u] == layer[v]})
        if not pairs:
            continue
        size = len(m.classes[k])
        members: dict[int, list[int]] = {}
        for x, l in layer.items():
            members.setdefault(l, []).append(x)
        pot = {}
        for a, b in pairs:
            for x in (a, b):
                if x not in pot:
                    pot[x] = prob.add_variable(f"p_{rho}_{k}_{x}", lowBound=0, upBound=len(members[layer[x]]) - 1)
            o = prob.add_variable(f"o_{rho}_{k}_{a}_{b}", cat="Binary")
            L = len(members[layer[a]])
            m.n_extra += 1
            if (a, b) in eset:
                prob += (y[(rho, k, (a, b))] <= size * o, f"orient_{rho}_{k}_{a}_{b}")
            if (b, a) in eset:
                prob += (y[(rho, k, (b, a))] <= size * (1 - o), f"orient_{rho}_{k}_{b}_{a}")
            prob += (pot[b] >= pot[a] + 1 - L * (1 - o), f"order_{rho}_{k}_{a}_{b}")
            prob += (pot[a] >= pot[b] + 1 - L * o, f"order_{rho}_{k}_{b}_{a}")
        m.n_extra += len(pot)


def _bandwidth_rows(m: _AllgatherModel, chunk_bytes: float) -> dict[str, dict[tuple, float]]:
    """Stage 4: the bandwidth relaxation, one row per orbit of bandwidth constraints (``load <= T``); returns
    each orbit representative resource's terms (us per piece of each flow variable)."""
    lt = m.lt
    topo = lt.topology
    conn = {(c.src, c.dst): c for c in topo.connections()}
    res_bw = topo.resource_bw
    orbit_rep = resource_orbits(lt)
    rep_res = sorted(set(orbit_rep.values()))
    load_terms: dict[str, dict[tuple, float]] = {r: {} for r in rep_res}
    for (rho, k), edges in m.rep_edges.items():
        for e in edges:
            for g in lt.group.elements:
                ge = map_edge(g, e)
                for r in conn[ge].resources:
                    if orbit_rep[r] == r:
                        d = load_terms[r]
                        d[(rho, k, e)] = d.get((rho, k, e), 0.0) + chunk_bytes / (res_bw[r] * BYTES_PER_US_PER_GBPS)
    for r in rep_res:
        terms = load_terms[r]
        if not terms:
            continue
        m.prob += (pulp.lpSum(coef * m.y[key] for key, coef in sorted(terms.items())) <= m.T, f"bw_{_safe(r)}")
    return load_terms


def _objective(m: _AllgatherModel, load_terms: dict[str, dict[tuple, float]], chunk_bytes: float):
    """Stage 5: ``T``, plus tie-breakers (each piece's time on its link and its path's slack) and the sketch's
    policies, each a small share of ``T``'s estimate."""
    topo = m.lt.topology
    lb = _load_lower_bound(load_terms, m.classes)
    sec_terms = []
    sec_ub = 0.0
    for (rho, k), edges in m.rep_edges.items():
        for e in edges:
            c = edge_connection(topo, e)
            cost = chunk_bytes / (c.bw * BYTES_PER_US_PER_GBPS) + m.rep_slack[(rho, k)][e]
            sec_terms.append((cost, m.y[(rho, k, e)]))
            sec_ub += cost * len(m.classes[k])
    objective = m.T
    if sec_terms and sec_ub > 0:
        eps = TIE_BREAK_SHARE * max(lb, REL) / sec_ub  # T's estimate, at least a time told from zero
        objective = objective + pulp.lpSum(eps * c * v for c, v in sec_terms)
    return objective + _policy_terms(m.prob, m.lt, m.y, m.rep_edges, m.classes, lb)


def _routing_of(m: _AllgatherModel, chunk_factor: int, chunk_bytes: float, result: SolveResult,
                detours: int) -> Routing:
    """Stage 6: the solved flows for every source (by symmetry), checked."""
    lt = m.lt
    yval = {key: int(round(value(v))) for key, v in m.y.items()}
    flows, edges_all, order_all = _expand(lt, m.classes, m.rep_edges, m.rep_order, yval)
    routing = Routing(
        kind="allgather",
        lt=lt,
        chunk_factor=chunk_factor,
        chunk_bytes=chunk_bytes,
        classes=m.classes,
        flows=flows,
        edges=edges_all,
        order=order_all,
        t_bw_us=value(m.T),
        n_vars=len(m.y) + m.n_extra + 1,
        n_vars_full=(len(m.y) + m.n_extra) * lt.group.order + 1,
        n_constraints=m.prob.numConstraints(),
        solve=result,
        meta={"detours": detours},
    )
    _check_flows(routing)
    return routing


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() else "_" for ch in name)


def _load_lower_bound(load_terms, classes) -> float:
    """A cheap positive estimate of T (the largest single-piece load), to scale tie-breakers."""
    best = 0.0
    for terms in load_terms.values():
        for coef in terms.values():
            best = max(best, coef)
    return best * max(len(c) for c in classes)


def _policy_terms(prob, lt: LogicalTopology, y, rep_edges, classes, scale: float):
    """Switch hyperedge policies (uc-max / uc-min) and TACCL's minmax / maxmin strategies."""
    topo = lt.topology
    terms = []
    sw_policy = {sw.name: lt.switch_policy.get(sw.name, "none") for sw in topo.switches}
    if any(p != "none" for p in sw_policy.values()):
        # one binary per orbit of switch connections: is it used by any chunk?
        group = lt.group
        used: dict[Edge, list] = {}
        for (rho, k), edges in rep_edges.items():
            for e in edges:
                c = edge_connection(topo, e)
                if c.via in sw_policy and sw_policy[c.via] != "none":
                    for g in group.elements:
                        ge = map_edge(g, e)
                        rep = min(map_edge(h, ge) for h in group.elements)
                        used.setdefault(rep, []).append((rho, k, e))
        n_conn = max(1, len(used))
        for rep, keys in sorted(used.items()):
            via = edge_connection(topo, rep).via
            z = prob.add_variable(f"z_{rep[0]}_{rep[1]}", cat="Binary")
            for key in sorted(set(keys)):
                size = len(classes[key[1]])
                prob += (size * z >= y[key], f"use_{rep[0]}_{rep[1]}_{key[0]}_{key[1]}_{key[2][0]}_{key[2][1]}")
            sign = 1.0 if sw_policy[via] == "uc-min" else -1.0
            terms.append(sign * POLICY_SHARE * scale / n_conn * z)
    if lt.sketch.intranode in ("minmax", "maxmin"):
        conn_loads: dict[Edge, list] = {}
        for (rho, k), edges in rep_edges.items():
            for e in edges:
                if not lt.is_cross(*e):
                    for g in lt.group.elements:
                        conn_loads.setdefault(map_edge(g, e), []).append(y[(rho, k, e)])
        if conn_loads:
            U = prob.add_variable("U_links", lowBound=0)
            for e, ys in sorted(conn_loads.items()):
                bw = edge_connection(topo, e).bw
                expr = pulp.lpSum(ys) * (1.0 / bw)
                if lt.sketch.intranode == "minmax":
                    prob += (expr <= U, f"umax_{e[0]}_{e[1]}")
                else:
                    prob += (expr >= U, f"umin_{e[0]}_{e[1]}")
            slowest = max(EVENT_REL, max(1.0 / edge_connection(topo, e).bw for e in conn_loads))  # us per byte, never 0
            unit = scale / slowest / max(1, len(classes[0]))
            sign = 1.0 if lt.sketch.intranode == "minmax" else -1.0
            terms.append(sign * POLICY_SHARE * unit * U / max(1, lt.n))
    return pulp.lpSum(terms) if terms else 0


def _expand(lt, classes, rep_edges, rep_order, yval):
    """Flows, candidate edges and orders for every source, from the representatives'."""
    group = lt.group
    flows: dict[tuple[int, int], dict[Edge, int]] = {}
    edges_all: dict[tuple[int, int], list[Edge]] = {}
    order_all: dict[tuple[int, int], list[int]] = {}
    for s in range(lt.n):
        rho = group.rep_of[s]
        g = group.element_to[s]
        for k in range(len(classes)):
            f = {}
            for e in rep_edges[(rho, k)]:
                v = yval[(rho, k, e)]
                if v:
                    f[map_edge(g, e)] = v
            flows[(s, k)] = f
            edges_all[(s, k)] = [map_edge(g, e) for e in rep_edges[(rho, k)]]
            order_all[(s, k)] = [g[x] for x in rep_order[(rho, k)]]
    return flows, edges_all, order_all


def _check_flows(r: Routing) -> None:
    """Every rank receives every class in full (guards against solver tolerance surprises)."""
    for (s, k), flow in r.flows.items():
        got: dict[int, int] = {}
        for (_u, v), cnt in flow.items():
            got[v] = got.get(v, 0) + cnt
        for v in range(r.lt.n):
            if v != s and got.get(v, 0) != len(r.classes[k]):
                raise InfeasibleError(f"routing: rank {v} receives {got.get(v, 0)} of the {len(r.classes[k])} pieces "
                                      f"of class {k} of rank {s}")
