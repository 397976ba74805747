"""Alltoall routing: a multi-commodity flow over shortest paths (TE-CCL-style), MILP or LP.

In an alltoall every rank ``s`` sends a distinct chunk to every other rank
``d``; with chunk factor ``c`` each chunk is ``c`` pieces. Unlike allgather
nothing is shared between destinations, so the routing is a
multi-commodity flow: ``f[(s, d), e]`` pieces of the ``s -> d`` chunk
cross edge ``e``. Candidate edges of a commodity are those on its
latency-shortest paths (:mod:`~ccsynth.synth.paths`; ``detours=1``: every edge that gets strictly closer
to ``d`` while moving away from ``s``, still acyclic).

Constraints: ``flow_{s}_{d}_{x}`` conservation (``c`` pieces leave ``s``,
arrive at ``d``, none stay elsewhere) and the same bandwidth relaxation
``bw_{R}`` as :mod:`~ccsynth.synth.routing` (one row per orbit of bandwidth
constraints); objective ``T`` plus a small tie-breaking term on bytes moved.
Symmetry: commodities ``(g(s), g(d))`` share the variables of their orbit
representative ``(rho, d')`` -- under a free group action every orbit has
exactly one representative with a representative source.

TE-CCL observed that alltoall is well served by the LP relaxation. ccsynth
solves the integer model (``method="milp"``) when it is small, and
otherwise (``method="lp"``) the LP: each commodity's fractional flow is
decomposed into paths and the ``c`` pieces are assigned to paths by largest
remainder, which keeps every commodity's flow integral and conserved (the
bandwidth relaxation may then be exceeded by at most one piece per path).

Example:
    >>> from ccsynth.topologies.model import Link, Topology
    >>> from ccsynth.synth.sketch import Sketch
    >>> ring4 = Topology("r4", 4, links=tuple(Link(a, b, 1.0, 10.0) for a in range(4) for b in range(4)
    ...                                      if (a - b) % 4 in (1, 3)))
    >>> r = route_alltoall(Sketch(symmetry=((1, 4),)).bind(ring4), 2, 1000.0)
    >>> sum(r.flows[(0, 2)][e] for e in r.flows[(0, 2)] if e[0] == 0)   # both pieces leave rank 0
    2
"""

from __future__ import annotations

import logging
import math

import pulp

from ccsynth.errors import InfeasibleError
from ccsynth.synth.paths import Edge, LatencyPaths
from ccsynth.synth.routing import Routing, _safe, map_edge, resource_orbits
from ccsynth.synth.sketch_model import LogicalTopology
from ccsynth.synth.solver import SolverOptions, solve, value
from ccsynth.tolerance import REL, is_close, is_greater, is_less
from ccsynth.topologies.model import BYTES_PER_US_PER_GBPS

__all__ = ["MILP_MAX_VARS", "TIE_BREAK_SHARE", "commodity_edges", "route_alltoall"]

log = logging.getLogger(__name__)

#: the integer model is used up to this many (representative) flow variables; above, the LP
MILP_MAX_VARS = 3000
TIE_BREAK_SHARE = 0.01


def commodity_edges(lt: LogicalTopology, s: int, d: int, detours: int, paths: LatencyPaths, js) -> list[Edge]:
    """Candidate edges of the ``s -> d`` chunk (pieces ``js``): an acyclic set."""
    weights = paths.weights
    ds = paths.distances_from(s, lambda u, v: lt.edge_ok(s, js[0], u, v))
    dt = paths.distances_to(d, lambda u, v: all(lt.edge_ok(s, j, u, v) for j in js))
    if d not in ds or s not in dt:
        raise InfeasibleError(f"alltoall routing: rank {s} cannot reach rank {d} under the sketch")
    total = ds[d]
    out = []
    for c in lt.connections:
        u, v = c.src, c.dst
        if u not in ds or v not in dt or not all(lt.edge_ok(s, j, u, v) for j in js):
            continue
        on_shortest = is_close(ds[u] + weights[(u, v)] + dt[v], total)
        forward = (v not in ds or is_less(ds[u], ds[v])) and is_less(dt[v], dt[u])
        if on_shortest or (detours >= 1 and forward):
            out.append((u, v))
    return sorted(out, key=lambda e: (ds[e[0]], e))


def route_alltoall(
    lt: LogicalTopology,
    chunk_factor: int,
    chunk_bytes: float,
    options: SolverOptions | None = None,
    *,
    detours: int | None = None,
    method: str = "auto",
    time_limit: float | None = None,
) -> Routing:
    """Route every ``s -> d`` chunk; ``method`` is ``"milp"``, ``"lp"`` or ``"auto"`` (see the module doc)."""
    options = options or SolverOptions()
    detours = lt.sketch.detours if detours is None else detours
    if method not in ("auto", "milp", "lp"):
        raise ValueError(f"method must be auto, milp or lp, got {method!r}")
    topo = lt.topology
    n = lt.n
    c = chunk_factor
    group = lt.group
    js = list(range(c))
    paths = LatencyPaths(lt)
    conn = {(x.src, x.dst): x for x in topo.connections()}
    res_bw = topo.resource_bw
    orbit_rep = resource_orbits(lt)
    rep_res = sorted(set(orbit_rep.values()))
    reps = [(rho, d) for rho in group.representatives for d in range(n) if d != rho]
    cand = {key: commodity_edges(lt, key[0], key[1], detours, paths, js) for key in reps}
    n_int = sum(len(v) for v in cand.values())
    if method == "auto":
        method = "milp" if n_int <= MILP_MAX_VARS else "lp"
    cat = "Integer" if method == "milp" else "Continuous"
    prob = pulp.LpProblem("routing_alltoall", pulp.LpMinimize)
    T = prob.add_variable("T", lowBound=0)
    f = {}
    for (rho, d), edges in cand.items():
        for e in edges:
            f[(rho, d, e)] = prob.add_variable(f"f_{rho}_{d}_{e[0]}_{e[1]}", lowBound=0, upBound=c, cat=cat)
    for (rho, d), edges in cand.items():
        bal: dict[int, list] = {}
        for e in edges:
            bal.setdefault(e[0], []).append((1, f[(rho, d, e)]))
            bal.setdefault(e[1], []).append((-1, f[(rho, d, e)]))
        for x in sorted(set(bal) | {rho, d}):
            rhs = c if x == rho else (-c if x == d else 0)
            prob += (pulp.lpSum(s * v for s, v in bal.get(x, ())) == rhs, f"flow_{rho}_{d}_{x}")
    load_terms: dict[str, dict] = {r: {} for r in rep_res}
    for (rho, d), edges in cand.items():
        for e in edges:
            for g in group.elements:
                for r in conn[map_edge(g, e)].resources:
                    if orbit_rep[r] == r:
                        dd = load_terms[r]
                        dd[(rho, d, e)] = dd.get((rho, d, e), 0.0) + chunk_bytes / (res_bw[r] * BYTES_PER_US_PER_GBPS)
    lb = 0.0
    for r in rep_res:
        terms = load_terms[r]
        if terms:
            prob += (pulp.lpSum(coef * f[k] for k, coef in sorted(terms.items())) <= T, f"bw_{_safe(r)}")
            lb = max(lb, max(terms.values()))
    sec = []
    sec_ub = 0.0
    for (rho, d), edges in cand.items():
        for e in edges:
            cost = chunk_bytes / (conn[e].bw * BYTES_PER_US_PER_GBPS) + conn[e].message_us
            sec.append((cost, f[(rho, d, e)]))
            sec_ub += cost * c
    obj = T
    if sec and sec_ub > 0:
        eps = TIE_BREAK_SHARE * max(lb * c, REL) / sec_ub  # T's estimate, at least a time told from zero
        obj = obj + pulp.lpSum(eps * w * v for w, v in sec)
    prob += obj
    result = solve(prob, options, f"alltoall routing ({method})", time_limit=time_limit)
    vals = {k: value(v) for k, v in f.items()}
    rep_flows: dict[tuple[int, int], dict[Edge, int]] = {}
    for key, edges in cand.items():
        if method == "milp":
            rep_flows[key] = {e: int(round(vals[(key[0], key[1], e)])) for e in edges if round(vals[(key[0], key[1], e)]) > 0}
        else:
            rep_flows[key] = _round_flow(key, edges, {e: vals[(key[0], key[1], e)] for e in edges}, c)
    flows: dict[tuple[int, int], dict[Edge, int]] = {}
    edges_all: dict[tuple[int, int], list[Edge]] = {}
    for s in range(n):
        rho = group.rep_of[s]
        g = group.element_to[s]
        ginv = [0] * n
        for i, x in enumerate(g):
            ginv[x] = i
        for d in range(n):
            if d == s:
                continue
            key = (rho, ginv[d])
            flows[(s, d)] = {map_edge(g, e): k for e, k in rep_flows[key].items()}
            edges_all[(s, d)] = [map_edge(g, e) for e in cand[key]]
    loads: dict[str, float] = {}
    for fl in flows.values():
        for e, k in fl.items():
            for r in conn[e].resources:
                loads[r] = loads.get(r, 0.0) + k * chunk_bytes / (res_bw[r] * BYTES_PER_US_PER_GBPS)
    routing = Routing(
        kind="alltoall",
        lt=lt,
        chunk_factor=c,
        chunk_bytes=chunk_bytes,
        classes=[tuple(range(c))],
        flows=flows,
        edges=edges_all,
        order={},
        t_bw_us=max(loads.values(), default=0.0),
        n_vars=len(f) + 1,
        n_vars_full=len(f) * group.order + 1,
        n_constraints=prob.numConstraints(),
        solve=result,
        method=method,
        meta={"detours": detours, "lp_objective": value(T) if method == "lp" else None},
    )
    _check(routing)
    return routing


def _round_flow(key, edges: list[Edge], x: dict[Edge, float], c: int) -> dict[Edge, int]:
    """Split a fractional s->d flow of value c into paths and give the c pieces to paths by largest remainder."""
    s, d = key
    rem = {e: v for e, v in x.items() if is_greater(v, 0.0)}
    paths: list[tuple[list[Edge], float]] = []
    out_of: dict[int, list[Edge]] = {}
    for e in edges:
        out_of.setdefault(e[0], []).append(e)
    for _ in range(len(edges) + c + 5):
        # follow the largest remaining flow from s to d (the edge set is acyclic)
        path, node = [], s
        while node != d:
            nxt = [e for e in out_of.get(node, ()) if is_greater(rem.get(e, 0.0), 0.0)]
            if not nxt:
                break
            e = max(nxt, key=lambda e: (rem[e], -e[1]))
            path.append(e)
            node = e[1]
        if node != d or not path:
            break
        amount = min(rem[e] for e in path)
        for e in path:
            rem[e] -= amount
        paths.append((path, amount))
    if not paths:
        raise InfeasibleError(f"alltoall routing: no path carries the chunk {s}->{d}")
    total = sum(a for _, a in paths)
    shares = [a * c / total for _, a in paths]
    counts = [int(math.floor(x)) for x in shares]
    order = sorted(range(len(paths)), key=lambda i: (-(shares[i] - counts[i]), i))
    for i in order[: c - sum(counts)]:
        counts[i] += 1
    out: dict[Edge, int] = {}
    for (path, _), k in zip(paths, counts):
        if k:
            for e in path:
                out[e] = out.get(e, 0) + k
    return out


def _check(r: Routing) -> None:
    c = r.chunk_factor
    for (s, d), fl in r.flows.items():
        net: dict[int, int] = {}
        for (u, v), k in fl.items():
            net[u] = net.get(u, 0) + k
            net[v] = net.get(v, 0) - k
        for x, val in net.items():
            want = c if x == s else (-c if x == d else 0)
            if val != want:
                raise InfeasibleError(f"alltoall routing: the flow of chunk {s}->{d} is not conserved at rank {x}")
        if net.get(s, 0) != c:
            raise InfeasibleError(f"alltoall routing: chunk {s}->{d} does not leave rank {s}")
