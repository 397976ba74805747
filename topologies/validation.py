"""Checking a Topology as it is built: every field in range, no pair of ranks connected twice.

:class:`~ccsynth.topologies.model.Topology` calls :func:`validate` from
``__post_init__``, so no topology that breaks a rule exists, whether built
in Python, read from a file or returned by a transformer. The checks run as
numbered stages, each a small function, in an order that matters: the
fields are normalized first (tuples, node ids), the sizes are checked
before any table is built from them (a small file must not make the tables
huge), then links, switches, spines (their names shared with the shared
ports), per-call and per-message costs, shared ports, dimensions and last
the cost tables. Every error is a :class:`~ccsynth.errors.TopologyError`
naming the topology and the field, rank or resource at fault.

Switches and spines imply their connections without building them, so the
"no pair twice" rules are counted over members (two switches give a pair
twice exactly when they share two ranks): linear in the description.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ccsynth.errors import TopologyError
from ccsynth.limits import check as check_limit
from ccsynth.topologies.checks import checked_alpha, checked_bw, checked_number
from ccsynth.topologies.coldcall import ColdCallCost
from ccsynth.topologies.curve import SizeCurve
from ccsynth.topologies.elements import OVERHEAD_SCOPES, Spine
from ccsynth.topologies.reference import ReferenceTimes
from ccsynth.topologies.rounds import RoundCost

if TYPE_CHECKING:  # annotations only: model.py imports this module
    from ccsynth.topologies.model import Topology

__all__ = ["validate"]


def validate(t: Topology) -> None:
    """Normalize and check every field of ``t`` (called by ``Topology.__post_init__``)."""
    _normalize(t)                       # 1. tuples, nodes
    _check_sizes(t)                     # 2. sizes before any table
    _check_links(t)                     # 3. links
    names = _check_switches(t)          # 4. switches (their names)
    _check_spines(t, names)             # 5. spines
    _check_costs(t)                     # 6. per-call and per-message costs
    _check_shared_ports(t, names)       # 7. shared ports
    _check_dims(t)                      # 8. dimensions
    _check_cost_tables(t)               # 9. curves, references, cost tables


def _normalize(t: Topology) -> None:
    """Stage 1: the sequence fields as tuples, ``nodes`` filled in (one node) and checked."""
    if isinstance(t.n_ranks, bool) or not isinstance(t.n_ranks, int) or t.n_ranks < 1:
        raise TopologyError(f"topology {t.name!r}: n_ranks must be a positive integer, got {t.n_ranks!r}")
    check_limit(f"topology {t.name!r}: n_ranks", t.n_ranks, "MAX_RANKS", TopologyError)
    object.__setattr__(t, "links", tuple(t.links))
    object.__setattr__(t, "switches", tuple(t.switches))
    object.__setattr__(t, "shared_ports", tuple(t.shared_ports))
    object.__setattr__(t, "dims", tuple(t.dims))
    object.__setattr__(t, "sources", tuple(t.sources))
    object.__setattr__(t, "spines", tuple(t.spines))
    nodes = tuple(t.nodes) if t.nodes else (0,) * t.n_ranks
    object.__setattr__(t, "nodes", nodes)
    n = t.n_ranks
    if len(nodes) != n:
        raise TopologyError(f"topology {t.name!r}: 'nodes' has {len(nodes)} entries for {n} ranks")
    for i, node in enumerate(nodes):
        if isinstance(node, bool) or not isinstance(node, int) or node < 0:
            raise TopologyError(f"topology {t.name!r}: node id of rank {i} must be a non-negative integer, got {node!r}")


def _check_sizes(t: Topology) -> None:
    """Stage 2: the limits on what the tables will hold."""
    # Sizes first: a small file must not make the tables below huge. Switches and spines imply their
    # connections without building them, so the connection limit counts the links written out.
    check_limit(f"topology {t.name!r}: links", len(t.links), "MAX_CONNECTIONS", TopologyError)
    n_pairs = sum(len(sp.srcs) * len(sp.dsts) for sp in t.shared_ports)
    check_limit(f"topology {t.name!r}: shared-port (source, destination) pairs", n_pairs, "MAX_PORT_PAIRS",
                TopologyError)


def _check_costs(t: Topology) -> None:
    """Stage 6: the overhead scope, per-call, local and protocol costs, the local bandwidth."""
    if t.overhead_scope not in OVERHEAD_SCOPES:
        raise TopologyError(
            f"topology {t.name!r}: overhead_scope must be one of {', '.join(OVERHEAD_SCOPES)}, "
            f"got {t.overhead_scope!r}"
        )
    object.__setattr__(
        t, "call_overhead", checked_alpha(t.call_overhead, f"topology {t.name!r}: per-call overhead")
    )
    object.__setattr__(
        t, "local_overhead",
        checked_alpha(t.local_overhead, f"topology {t.name!r}: local overhead"),
    )
    object.__setattr__(
        t, "rendezvous_alpha",
        checked_alpha(t.rendezvous_alpha, f"topology {t.name!r}: rendezvous latency"),
    )
    if t.eager_limit is not None:
        object.__setattr__(
            t, "eager_limit", checked_number(t.eager_limit, f"topology {t.name!r}: eager limit", positive=False)
        )

    if t.local_bw is not None:
        object.__setattr__(
            t, "local_bw", checked_bw(t.local_bw, f"topology {t.name!r}: local copy bandwidth")
        )


def _check_shared_ports(t: Topology, names: set[str]) -> None:
    """Stage 7: shared ports: names unique among all resources, ranks known, bandwidths valid."""
    for sp in t.shared_ports:
        object.__setattr__(sp, "srcs", tuple(sp.srcs))
        object.__setattr__(sp, "dsts", tuple(sp.dsts))
        if sp.name in names:
            raise TopologyError(f"topology {t.name!r}: duplicate resource name {sp.name!r}")
        names.add(sp.name)
        for r in sp.srcs + sp.dsts:
            _rank_ok(t, r, f"shared port {sp.name!r}")
        checked_bw(sp.bw, f"topology {t.name!r}: bandwidth of shared port {sp.name!r}")


def _check_cost_tables(t: Topology) -> None:
    """Stage 9: the size curves, MPI references, cold-call and round costs, and the engine flags."""
    for what, curve in (("message_curve", t.message_curve), ("local_curve", t.local_curve),
                        ("forward_curve", t.forward_curve), ("footprint_curve", t.footprint_curve),
                        ("run_curve", t.run_curve)):
        if curve is not None and not isinstance(curve, SizeCurve):
            raise TopologyError(f"topology {t.name!r}: {what} must be a SizeCurve, got {type(curve).__name__}")
    object.__setattr__(
        t, "communicator_overhead",
        checked_alpha(t.communicator_overhead, f"topology {t.name!r}: communicator overhead"),
    )
    object.__setattr__(t, "mpi_reference", tuple(t.mpi_reference))
    seen_refs: set[str] = set()
    for ref in t.mpi_reference:
        if not isinstance(ref, ReferenceTimes):
            raise TopologyError(f"topology {t.name!r}: mpi_reference entries must be ReferenceTimes, got "
                                f"{type(ref).__name__}")
        if ref.collective in seen_refs:
            raise TopologyError(f"topology {t.name!r}: two MPI references of {ref.collective!r}")
        seen_refs.add(ref.collective)
    if t.cold_call is not None and not isinstance(t.cold_call, ColdCallCost):
        raise TopologyError(f"topology {t.name!r}: cold_call must be a ColdCallCost, got "
                            f"{type(t.cold_call).__name__}")
    if t.round_cost is not None and not isinstance(t.round_cost, RoundCost):
        raise TopologyError(f"topology {t.name!r}: round_cost must be a RoundCost, got "
                            f"{type(t.round_cost).__name__}")
    if not isinstance(t.async_progress, bool):
        raise TopologyError(f"topology {t.name!r}: async_progress must be true or false, got {t.async_progress!r}")
    if not isinstance(t.receiver_copies, bool):
        raise TopologyError(f"topology {t.name!r}: receiver_copies must be true or false, got "
                            f"{t.receiver_copies!r}")
    if t.forward_curve is not None and t.forward_curve.fastest < 1.0:
        raise TopologyError(f"topology {t.name!r}: forward_curve factors must be at least 1 (a forwarded "
                            f"message costs more, never less), got {t.forward_curve.fastest:g}")



def _rank_ok(t: Topology, r, where: str) -> None:
    if isinstance(r, bool) or not isinstance(r, int) or not 0 <= r < t.n_ranks:
        raise TopologyError(f"topology {t.name!r}: {where} names unknown rank {r!r} (ranks are 0..{t.n_ranks - 1})")

def _check_links(t: Topology) -> None:
    seen: set[tuple[int, int]] = set()
    for link in t.links:
        _rank_ok(t, link.src, f"link {link.src}->{link.dst}")
        _rank_ok(t, link.dst, f"link {link.src}->{link.dst}")
        if link.src == link.dst:
            raise TopologyError(f"topology {t.name!r}: link {link.src}->{link.dst} is a self-loop")
        checked_bw(link.bw, f"topology {t.name!r}: bandwidth of link {link.src}->{link.dst}")
        checked_alpha(link.alpha, f"topology {t.name!r}: latency of link {link.src}->{link.dst}")
        checked_alpha(link.overhead, f"topology {t.name!r}: per-message overhead of link {link.src}->{link.dst}")
        key = (link.src, link.dst)
        if key in seen:
            raise TopologyError(f"topology {t.name!r}: two connections {link.src}->{link.dst} ({link.name} and {link.name})")
        seen.add(key)

def _check_switches(t: Topology) -> set[str]:
    """Switch fields, and no pair connected twice (two switches sharing two ranks, or a link inside a switch).

    Linear in the members: two switches give a pair twice exactly when they
    share two ranks, which counting the switch pairs met at each rank finds.
    """
    names: set[str] = set()
    leaves = {name for sp in t.spines for name in sp.leaves}
    for sw in t.switches:
        if sw.name in names:
            raise TopologyError(f"topology {t.name!r}: duplicate switch name {sw.name!r}")
        names.add(sw.name)
        object.__setattr__(sw, "ranks", tuple(sw.ranks))
        # a spine's leaf may hold one rank (a scalable unit of one node): its ports reach the spine
        fewest = 1 if sw.name in leaves else 2
        if len(set(sw.ranks)) != len(sw.ranks) or len(sw.ranks) < fewest:
            raise TopologyError(f"topology {t.name!r}: switch {sw.name!r} needs at least two distinct ranks"
                                f"{' (one on a spine leaf)' if fewest == 1 else ''}, got {list(sw.ranks)}")
        for r in sw.ranks:
            _rank_ok(t, r, f"switch {sw.name!r}")
        checked_bw(sw.bw, f"topology {t.name!r}: bandwidth of switch {sw.name!r}")
        checked_alpha(sw.alpha, f"topology {t.name!r}: latency of switch {sw.name!r}")
        checked_alpha(sw.overhead, f"topology {t.name!r}: per-message overhead of switch {sw.name!r}")
    switches_of: list[list[int]] = [[] for _ in range(t.n_ranks)]
    for i, sw in enumerate(t.switches):
        for r in sw.ranks:
            switches_of[r].append(i)
    shared: dict[tuple[int, int], int] = {}
    for r, mine in enumerate(switches_of):
        for x in range(len(mine)):
            for y in range(x + 1, len(mine)):
                pair = (mine[x], mine[y])
                if pair in shared:
                    a, b = shared[pair], r
                    raise TopologyError(f"topology {t.name!r}: two connections {a}->{b} (switch "
                                        f"{t.switches[pair[0]].name} and switch {t.switches[pair[1]].name})")
                shared[pair] = r
    for link in t.links:
        common = set(switches_of[link.src]).intersection(switches_of[link.dst])
        if common:
            raise TopologyError(f"topology {t.name!r}: two connections {link.src}->{link.dst} ({link.name} and "
                                f"switch {t.switches[min(common)].name})")
    return names

def _check_spines(t: Topology, names: set[str]) -> None:
    """Spine fields; its leaves are switches, every rank on at most one leaf, no pair connected twice."""
    switch_index = {sw.name: i for i, sw in enumerate(t.switches)}
    seated: dict[int, str] = {}
    seat: dict[int, tuple[int, str]] = {}  # rank -> (spine index, leaf name)
    for si, sp in enumerate(t.spines):
        where = f"topology {t.name!r}: spine {sp.name!r}"
        if sp.name in names:
            raise TopologyError(f"topology {t.name!r}: duplicate resource name {sp.name!r}")
        names.add(sp.name)
        object.__setattr__(sp, "leaves", tuple(sp.leaves))
        if len(set(sp.leaves)) != len(sp.leaves) or len(sp.leaves) < 2:
            raise TopologyError(f"{where} needs at least two distinct leaf switches, got {list(sp.leaves)}")
        checked_alpha(sp.alpha, f"{where}: latency")
        checked_alpha(sp.overhead, f"{where}: per-message overhead")
        if sp.uplink_bw is not None:
            checked_bw(sp.uplink_bw, f"{where}: up-link bandwidth")
        for leaf in sp.leaves:
            if leaf not in switch_index:
                raise TopologyError(f"{where}: leaf {leaf!r} is not a switch of the topology")
            for r in t.switches[switch_index[leaf]].ranks:
                if r in seated:
                    raise TopologyError(f"{where}: rank {r} sits on leaf {leaf!r} and on leaf {seated[r]!r}; "
                                        f"a rank has one port in a fat tree")
                seated[r] = leaf
                seat[r] = (si, leaf)
    if not t.spines:
        return
    nodes = t.nodes

    def through_spine(a: int, b: int) -> Spine | None:
        sa, sb = seat.get(a), seat.get(b)
        if sa is None or sb is None or sa[0] != sb[0] or sa[1] == sb[1] or nodes[a] == nodes[b]:
            return None
        return t.spines[sa[0]]

    for link in t.links:
        hit = through_spine(link.src, link.dst)
        if hit is not None:
            raise TopologyError(f"topology {t.name!r}: two connections {link.src}->{link.dst} ({link.name} and "
                                f"spine {hit.name})")
    leaves = {name for sp in t.spines for name in sp.leaves}
    for sw in t.switches:
        if sw.name in leaves:
            continue
        seated_members = [r for r in sw.ranks if r in seat]
        for a in seated_members:
            for b in seated_members:
                hit = through_spine(a, b)
                if hit is not None:
                    raise TopologyError(f"topology {t.name!r}: two connections {a}->{b} (switch {sw.name} and "
                                        f"spine {hit.name})")

def _check_dims(t: Topology) -> None:
    if not t.dims:
        return
    prod = 1
    for d in t.dims:
        if d.size < 1:
            raise TopologyError(f"topology {t.name!r}: dimension {d.name!r} has size {d.size}")
        checked_bw(d.bw, f"topology {t.name!r}: bandwidth of dimension {d.name!r}")
        checked_alpha(d.alpha, f"topology {t.name!r}: latency of dimension {d.name!r}")
        checked_alpha(d.overhead, f"topology {t.name!r}: per-message overhead of dimension {d.name!r}")
        prod *= d.size
    if prod != t.n_ranks:
        raise TopologyError(
            f"topology {t.name!r}: dimension sizes {[d.size for d in t.dims]} multiply to {prod}, "
            f"not {t.n_ranks} ranks"
        )

