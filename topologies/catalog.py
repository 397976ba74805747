"""The topology catalog: generic shapes and the machines collectives run on.

Every function returns an immutable :class:`~ccsynth.topologies.model.Topology`
whose ``name`` is the canonical spec string that
:func:`ccsynth.topologies.names.parse_topology_spec` turns back into the same
topology (``ndv2(2).name == "ndv2x2"``).

Units: ``alpha`` in microseconds, bandwidth in GB/s, *per direction*.

The figures and their sources (datasheets, reference architectures, NCCL's
tuning model, TACCL's profile) are :mod:`ccsynth.topologies.figures`; the
catalog's names, as spec strings and in ``ccsynth topo list``, are the one
table :data:`MACHINES` and :data:`SHAPES` at the end of this module, which
:mod:`ccsynth.topologies.names` reads.

Example:
    >>> t = dgx1()
    >>> t.n_ranks, t.connection(0, 1).bw, t.connection(0, 2).bw
    (8, 50.0, 25.0)
    >>> ndv2(2).name
    'ndv2x2'
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from collections.abc import Callable, Sequence
from typing import cast

from ccsynth import limits
from ccsynth.errors import TopologyError
from ccsynth.topologies.checks import checked_number
from ccsynth.topologies.figures import (
    DEFAULT_ALPHA, DEFAULT_BW, DEFAULT_OVERHEAD, DGX1_NVLINKS, DGX_A100_SU_NODES, DGX_H100_SU_NODES, IB_ALPHA_US,
    IB_OVERHEAD_US, IB_SWITCH_HOP_US, NVLINK2_GBPS, NVLINK_ALPHA_US, NVLINK_OVERHEAD_US,
    SRC_A100, SRC_ALPHA, SRC_DGX1, SRC_DGX2, SRC_H100, SRC_NDV2, SRC_OVERHEAD, SRC_RAIL, SRC_SUPERPOD_A100,
    SRC_SUPERPOD_H100, SRC_SWITCH_HOP, SRC_TACCL, SRC_V100,
)
from ccsynth.topologies.model import Dimension, Link, SharedPort, Spine, Switch, Topology


#: Guards against typos such as ``ring:80000``: building links is O(links). Switches and spines
#: imply their connections without building them (see :mod:`ccsynth.topologies.model`), so
#: ``MAX_CONNECTIONS`` bounds the links a builder writes out, ``MAX_RANKS`` everything.
#: The values live in :mod:`ccsynth.limits` (with the reasons); named here too for the catalog's readers.
MAX_RANKS = limits.MAX_RANKS
MAX_CONNECTIONS = limits.MAX_CONNECTIONS


# ----------------------------------------------------------------- helpers
def _int_param(value, what: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TopologyError(f"{what} must be an integer, got {value!r}")
    if value < minimum:
        raise TopologyError(f"{what} must be at least {minimum}, got {value}")
    return value


def _per_dim(value, k: int, what: str, *, positive: bool) -> tuple[float, ...]:
    """A number for every one of ``k`` dimensions, from a scalar or a sequence."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (checked_number(value, what, positive=positive),) * k
    values = tuple(value)
    if len(values) != k:
        raise TopologyError(f"{what} needs one value or one per dimension ({k}), got {len(values)}")
    return tuple(checked_number(v, f"{what}[{i}]", positive=positive) for i, v in enumerate(values))


def check_size(n_ranks: int, n_connections: int, what: str) -> None:
    """Refuse a topology larger than ccsynth builds (``what`` names it in the error)."""
    if n_ranks > MAX_RANKS:
        raise TopologyError(f"{what}: {n_ranks} ranks is more than ccsynth builds (MAX_RANKS = {MAX_RANKS})")
    if n_connections > MAX_CONNECTIONS:
        raise TopologyError(f"{what}: would create {n_connections} directed connections, more than ccsynth builds "
                            f"(MAX_CONNECTIONS = {MAX_CONNECTIONS})")


def fmt_number(x: float) -> str:
    """The shortest exact decimal form of ``x`` for spec strings: 200.0 -> '200'."""
    s = repr(float(x))
    return s[:-2] if s.endswith(".0") else s


def _fmt_list(values: Sequence[float], default: float | None = None) -> str | None:
    """'25' when all values agree, '25,50' otherwise; None when all equal ``default``."""
    if default is not None and all(v == default for v in values):
        return None
    if len(set(values)) == 1:
        return fmt_number(values[0])
    return ",".join(fmt_number(v) for v in values)


def _spec_suffix(bws: Sequence[float], alphas: Sequence[float], bw_default, alpha_default,
                 overheads: Sequence[float] = (), overhead_default=None) -> str:
    """``@bw[/alpha[/overhead]]``, leaving out trailing parts that have their defaults."""
    parts = [_fmt_list(bws, bw_default), _fmt_list(alphas, alpha_default)]
    parts.append(_fmt_list(overheads, overhead_default) if overheads else None)
    while parts and parts[-1] is None:
        parts.pop()
    if not parts:
        return ""
    defaults = [bw_default, alpha_default, overhead_default]
    # _fmt_list without a default never returns None
    filled = [p if p is not None else cast(str, _fmt_list([defaults[i]])) for i, p in enumerate(parts)]
    return "@" + "/".join(filled)


def _pairs_suffix(values: Sequence[Sequence[float]], defaults: Sequence[Sequence[float]]) -> str:
    """``@a,b[/c,d[/e,f]]`` for per-position values, leaving out trailing groups equal to their defaults."""
    parts = [None if tuple(v) == tuple(d) else ",".join(fmt_number(x) for x in v) for v, d in zip(values, defaults)]
    while parts and parts[-1] is None:
        parts.pop()
    if not parts:
        return ""
    return "@" + "/".join(p if p is not None else ",".join(fmt_number(x) for x in defaults[i])
                          for i, p in enumerate(parts))


def _ring_links(ranks: Sequence[int], bw: float, alpha: float, overhead: float = 0.0) -> list[Link]:
    """Bidirectional ring through ``ranks`` (one link each way for two ranks)."""
    s = len(ranks)
    if s < 2:
        return []
    if s == 2:
        a, b = ranks
        return [Link(a, b, alpha, bw, overhead), Link(b, a, alpha, bw, overhead)]
    out = []
    for i in range(s):
        a, b = ranks[i], ranks[(i + 1) % s]
        out += [Link(a, b, alpha, bw, overhead), Link(b, a, alpha, bw, overhead)]
    return out


def _cube_mesh_links(base: int, alpha: float, overhead: float) -> list[Link]:
    """DGX-1 hybrid cube-mesh of GPUs ``base..base+7``; a doubled NVLink is one 50 GB/s link."""
    out = []
    for i, row in enumerate(DGX1_NVLINKS):
        for j, count in enumerate(row):
            if count:
                out.append(Link(base + i, base + j, alpha, count * NVLINK2_GBPS, overhead))
    return out


def _mixed_radix_groups(sizes: Sequence[int], d: int) -> list[list[int]]:
    """Groups of ranks that differ only in coordinate ``d`` (dimension 0 fastest).

    Group ``k`` is numbered by the rank's other coordinates, read as a mixed
    radix number in the same order.
    """
    stride = math.prod(sizes[:d])
    size = sizes[d]
    n = math.prod(sizes)
    groups = []
    for k in range(n // size):
        low, high = k % stride, k // stride
        start = high * stride * size + low
        groups.append([start + c * stride for c in range(size)])
    return groups


# ----------------------------------------------------------- generic shapes
def ring(n: int, bw: float = DEFAULT_BW, alpha: float = DEFAULT_ALPHA, overhead: float = DEFAULT_OVERHEAD) -> Topology:
    """A bidirectional ring of ``n`` ranks: ``i <-> i+1 (mod n)``.

    Each direction of each link carries ``bw`` GB/s with ``alpha`` us latency
    and ``overhead`` us per message end (defaults: one NVLink2, 25 GB/s,
    0.7 us, 1.35 us). Two ranks get one link each way.

    >>> [ (l.src, l.dst) for l in ring(3).links ][:2]
    [(0, 1), (1, 0)]
    """
    n = _int_param(n, "ring: number of ranks", 2)
    bw = checked_number(bw, "ring: bandwidth", positive=True)
    alpha = checked_number(alpha, "ring: latency", positive=False)
    overhead = checked_number(overhead, "ring: per-message overhead", positive=False)
    check_size(n, 2 * n, f"ring:{n}")
    egress = bw if n == 2 else 2 * bw
    return Topology(
        name=f"ring:{n}" + _spec_suffix([bw], [alpha], DEFAULT_BW, DEFAULT_ALPHA, [overhead], DEFAULT_OVERHEAD),
        n_ranks=n,
        links=tuple(_ring_links(list(range(n)), bw, alpha, overhead)),
        dims=(Dimension("ring", n, egress, alpha, overhead),),
        description=f"bidirectional ring of {n} ranks, {fmt_number(bw)} GB/s per direction, {fmt_number(alpha)} us, "
        f"{fmt_number(overhead)} us per message",
        sources=(SRC_V100, SRC_ALPHA, SRC_OVERHEAD),
    )


def fully_connected(
    n: int, bw: float = DEFAULT_BW, alpha: float = DEFAULT_ALPHA, overhead: float = DEFAULT_OVERHEAD
) -> Topology:
    """Direct links between every ordered pair of ``n`` ranks.

    The generic model of an MPI world (every process can reach every other at
    the same cost). Each link has ``bw`` GB/s, ``alpha`` us and ``overhead``
    us per message end.

    >>> len(fully_connected(4).links)
    12
    """
    n = _int_param(n, "fully_connected: number of ranks", 2)
    bw = checked_number(bw, "fully_connected: bandwidth", positive=True)
    alpha = checked_number(alpha, "fully_connected: latency", positive=False)
    overhead = checked_number(overhead, "fully_connected: per-message overhead", positive=False)
    check_size(n, n * (n - 1), f"fully_connected:{n}")
    links = tuple(Link(a, b, alpha, bw, overhead) for a in range(n) for b in range(n) if a != b)
    return Topology(
        name=f"fully_connected:{n}" + _spec_suffix([bw], [alpha], DEFAULT_BW, DEFAULT_ALPHA, [overhead], DEFAULT_OVERHEAD),
        n_ranks=n,
        links=links,
        dims=(Dimension("full", n, bw * (n - 1), alpha, overhead),),
        description=f"{n} ranks with direct links between all pairs, {fmt_number(bw)} GB/s per direction, "
        f"{fmt_number(alpha)} us, {fmt_number(overhead)} us per message",
        sources=("ccsynth generic model", SRC_OVERHEAD),
    )


def torus(
    dims: Sequence[int],
    bw: float | Sequence[float] = DEFAULT_BW,
    alpha: float | Sequence[float] = DEFAULT_ALPHA,
    overhead: float | Sequence[float] = DEFAULT_OVERHEAD,
) -> Topology:
    """A multi-dimensional torus, e.g. ``torus((4, 4))``.

    Ranks have mixed-radix coordinates (dimension 0 varies fastest). In every
    dimension each rank links to its +1 and -1 neighbours with wrap-around; a
    dimension of size 2 gets one link each way, a dimension of size 1 none.
    ``bw``, ``alpha`` and ``overhead`` are one value or one per dimension. ``dims`` of the
    result carries a :class:`Dimension` per axis whose ``bw`` is a rank's
    total egress in that axis (two links, or one for size 2).

    >>> t = torus((4, 4))
    >>> t.n_ranks, len(t.links), t.coords(5)
    (16, 64, (1, 1))
    """
    sizes = tuple(dims) if not isinstance(dims, int) else (dims,)
    if not sizes:
        raise TopologyError("torus needs at least one dimension, e.g. torus((4, 4))")
    sizes = tuple(_int_param(s, f"torus: size of dimension {i}", 1) for i, s in enumerate(sizes))
    bws = _per_dim(bw, len(sizes), "torus: bandwidth", positive=True)
    alphas = _per_dim(alpha, len(sizes), "torus: latency", positive=False)
    overheads = _per_dim(overhead, len(sizes), "torus: per-message overhead", positive=False)
    n = math.prod(sizes)
    if n < 2:
        raise TopologyError(f"torus {'x'.join(map(str, sizes))} has {n} rank; it needs at least 2")
    check_size(n, 4 * n * len(sizes), f"torus:{'x'.join(map(str, sizes))}")
    links: list[Link] = []
    dimensions = []
    for d, size in enumerate(sizes):
        for group in _mixed_radix_groups(sizes, d):
            links += _ring_links(group, bws[d], alphas[d], overheads[d])
        egress = 0.0 if size == 1 else (bws[d] if size == 2 else 2 * bws[d])
        dimensions.append(Dimension(f"dim{d}", size, egress or bws[d], alphas[d], overheads[d]))
    shape = "x".join(map(str, sizes))
    return Topology(
        name=f"torus:{shape}" + _spec_suffix(bws, alphas, DEFAULT_BW, DEFAULT_ALPHA, overheads, DEFAULT_OVERHEAD),
        n_ranks=n,
        links=tuple(links),
        dims=tuple(dimensions),
        description=f"{len(sizes)}-D torus {shape} ({n} ranks), GB/s per direction per dimension "
        f"{[fmt_number(b) for b in bws]}",
        sources=("ccsynth generic model", SRC_OVERHEAD),
    )


def default_hierarchy_alpha(d: int) -> float:
    """Default latency of hierarchy dimension ``d``: NVLink-class for 0, InfiniBand-class above."""
    return NVLINK_ALPHA_US if d == 0 else IB_ALPHA_US


def default_hierarchy_overhead(d: int) -> float:
    """Default per-message overhead of hierarchy dimension ``d``: NVLink-class for 0, InfiniBand-class above."""
    return NVLINK_OVERHEAD_US if d == 0 else IB_OVERHEAD_US


def hierarchical(dims: Sequence[Sequence[float]]) -> Topology:
    """A multi-dimension switched hierarchy (Themis-style), ``dims = [(size, GB/s[, alpha_us[, overhead_us]]), ...]``.

    Ranks have mixed-radix coordinates, dimension 0 varying fastest. For each
    dimension ``d`` the ranks that differ only in coordinate ``d`` form one
    group, joined by a :class:`Switch` named ``d{d}.g{k}`` whose every port
    carries that dimension's GB/s (``k`` numbers the group by the ranks' other
    coordinates). An omitted alpha defaults to 0.7 us for dimension 0 and
    2.6 us for the others (:func:`default_hierarchy_alpha`), an omitted
    overhead to 1.35 us and 5.7 us (:func:`default_hierarchy_overhead`). Dimensions of
    size 1 get no switch. ``nodes`` is ``rank // size of dimension 0``: the
    first dimension is taken as the inside of a node.

    >>> t = hierarchical([(4, 200), (2, 50)])
    >>> t.n_ranks, t.n_nodes, [s.name for s in t.switches][:3]
    (8, 2, ['d0.g0', 'd0.g1', 'd1.g0'])
    >>> t.connection(0, 4).bw
    50.0
    """
    entries = list(dims)
    if not entries:
        raise TopologyError("hierarchical needs at least one dimension, e.g. hierarchical([(8, 300), (4, 25)])")
    sizes, bws, alphas, overheads = [], [], [], []
    for d, entry in enumerate(entries):
        entry = tuple(entry)
        if len(entry) not in (2, 3, 4):
            raise TopologyError(
                f"hierarchical: dimension {d} must be (size, GB/s[, alpha_us[, overhead_us]]), got {entry!r}"
            )
        sizes.append(_int_param(entry[0], f"hierarchical: size of dimension {d}", 1))
        bws.append(checked_number(entry[1], f"hierarchical: bandwidth of dimension {d}", positive=True))
        a = entry[2] if len(entry) >= 3 else default_hierarchy_alpha(d)
        alphas.append(checked_number(a, f"hierarchical: latency of dimension {d}", positive=False))
        o = entry[3] if len(entry) == 4 else default_hierarchy_overhead(d)
        overheads.append(checked_number(o, f"hierarchical: per-message overhead of dimension {d}", positive=False))
    n = math.prod(sizes)
    shape = "x".join(map(str, sizes))
    if n < 2:
        raise TopologyError(f"hierarchical {shape} has {n} rank; it needs at least 2")
    check_size(n, n * sum(s - 1 for s in sizes), f"hierarchical:{shape}")
    switches = []
    for d, size in enumerate(sizes):
        if size < 2:
            continue
        for k, group in enumerate(_mixed_radix_groups(sizes, d)):
            switches.append(Switch(f"d{d}.g{k}", tuple(group), bws[d], alphas[d], overheads[d]))
    name = f"hierarchical:{shape}@" + ",".join(fmt_number(b) for b in bws)
    custom_overheads = any(o != default_hierarchy_overhead(d) for d, o in enumerate(overheads))
    if custom_overheads or any(a != default_hierarchy_alpha(d) for d, a in enumerate(alphas)):
        name += "/" + ",".join(fmt_number(a) for a in alphas)
    if custom_overheads:
        name += "/" + ",".join(fmt_number(o) for o in overheads)
    return Topology(
        name=name,
        n_ranks=n,
        switches=tuple(switches),
        nodes=tuple(r // sizes[0] for r in range(n)),
        dims=tuple(
            Dimension(f"dim{d}", s, b, a, o) for d, (s, b, a, o) in enumerate(zip(sizes, bws, alphas, overheads))
        ),
        description=f"{len(sizes)}-dimension switched hierarchy {shape} ({n} ranks), GB/s per port per dimension "
        f"{[fmt_number(b) for b in bws]}",
        sources=("ccsynth generic model (Themis-style multi-dimension network, ISCA'22)", SRC_OVERHEAD),
    )


# ----------------------------------------------------------------- machines
def _nodes_param(nodes, what: str, limit: int) -> int:
    nodes = _int_param(nodes, f"{what}: number of nodes", 1)
    if nodes > limit:
        raise TopologyError(f"{what}: {nodes} nodes is more than ccsynth builds ({limit})")
    return nodes


def _family_name(base: str, nodes: int) -> str:
    return base if nodes == 1 else f"{base}x{nodes}"


def dgx1() -> Topology:
    """NVIDIA DGX-1 (V100): 8 GPUs in a hybrid cube-mesh of NVLink2.

    Each GPU has 6 NVLinks of 25 GB/s per direction; 8 GPU pairs have two
    links, modelled as one :class:`Link` of 50 GB/s (:data:`DGX1_NVLINKS`).
    Latency 0.7 us per hop.

    >>> t = dgx1()
    >>> len(t.links), t.connection(0, 4).bw, t.has_connection(0, 5)
    (32, 50.0, False)
    """
    return Topology(
        name="dgx1",
        n_ranks=8,
        links=tuple(_cube_mesh_links(0, NVLINK_ALPHA_US, NVLINK_OVERHEAD_US)),
        dims=(Dimension("nvlink", 8, 6 * NVLINK2_GBPS, NVLINK_ALPHA_US, NVLINK_OVERHEAD_US),),
        description="NVIDIA DGX-1: 8 V100, hybrid cube-mesh NVLink2 (25 GB/s per link per direction, "
        "doubled pairs 50 GB/s)",
        sources=(SRC_DGX1, SRC_V100, SRC_TACCL, SRC_ALPHA, SRC_OVERHEAD),
    )


def dgx2() -> Topology:
    """NVIDIA DGX-2: 16 V100 on NVSwitch, 150 GB/s per GPU port and direction.

    >>> t = dgx2()
    >>> t.n_ranks, t.connection(3, 12).bw, t.connection(3, 12).via
    (16, 150.0, 'nvswitch')
    """
    return Topology(
        name="dgx2",
        n_ranks=16,
        switches=(Switch("nvswitch", tuple(range(16)), 6 * NVLINK2_GBPS, NVLINK_ALPHA_US, NVLINK_OVERHEAD_US),),
        dims=(Dimension("nvswitch", 16, 6 * NVLINK2_GBPS, NVLINK_ALPHA_US, NVLINK_OVERHEAD_US),),
        description="NVIDIA DGX-2: 16 V100 on NVSwitch, 150 GB/s per GPU per direction",
        sources=(SRC_DGX2, SRC_V100, SRC_ALPHA, SRC_OVERHEAD),
    )


NDV2_NIC_GBPS = 12.5


def ndv2(nodes: int = 1) -> Topology:
    """Azure NDv2 x ``nodes``: DGX-1-like cube-mesh nodes joined by one 100 Gb/s NIC each.

    Rank ``r`` is GPU ``r % 8`` of node ``r // 8``. Between nodes every GPU
    has a link to every GPU of every other node (alpha 2.6 us, 12.5 GB/s),
    and all of them share the node's NIC: shared ports ``nic{k}.tx`` (node
    ``k``'s ranks to everyone else) and ``nic{k}.rx`` (everyone else to node
    ``k``), 12.5 GB/s each. ``ndv2(1)`` is :func:`dgx1` named ``ndv2``.

    >>> t = ndv2(2)
    >>> t.n_ranks, t.nodes[8], t.connection(0, 9).resources
    (16, 1, ('link:0->9', 'nic0.tx', 'nic1.rx'))
    """
    nodes = _nodes_param(nodes, "ndv2", 32)
    n = 8 * nodes
    check_size(n, 32 * nodes + n * (n - 8), f"ndv2x{nodes}")
    links: list[Link] = []
    for k in range(nodes):
        links += _cube_mesh_links(8 * k, NVLINK_ALPHA_US, NVLINK_OVERHEAD_US)
    ports = []
    for a in range(nodes):
        mine = tuple(range(8 * a, 8 * a + 8))
        others = tuple(r for r in range(n) if r // 8 != a)
        for s in mine:
            links += [Link(s, d, IB_ALPHA_US, NDV2_NIC_GBPS, IB_OVERHEAD_US) for d in others]
        if others:
            ports.append(SharedPort(f"nic{a}.tx", mine, others, NDV2_NIC_GBPS))
            ports.append(SharedPort(f"nic{a}.rx", others, mine, NDV2_NIC_GBPS))
    dims = [Dimension("nvlink", 8, 6 * NVLINK2_GBPS, NVLINK_ALPHA_US, NVLINK_OVERHEAD_US)]
    if nodes > 1:
        # a rank's fair share of its node's single NIC
        dims.append(Dimension("ib", nodes, NDV2_NIC_GBPS / 8, IB_ALPHA_US, IB_OVERHEAD_US))
    return Topology(
        name=_family_name("ndv2", nodes),
        n_ranks=n,
        links=tuple(links),
        shared_ports=tuple(ports),
        nodes=tuple(r // 8 for r in range(n)),
        dims=tuple(dims),
        description="Azure NDv2 (one node): 8 V100 in a DGX-1 cube-mesh NVLink2"
        if nodes == 1
        else f"Azure NDv2 x{nodes}: per node 8 V100 in a DGX-1 cube-mesh; one 100 Gb/s InfiniBand NIC "
        f"(12.5 GB/s) per node shared by its 8 GPUs",
        sources=(SRC_NDV2, SRC_DGX1, SRC_V100, SRC_TACCL, SRC_ALPHA, SRC_OVERHEAD),
    )


@dataclass(frozen=True)
class _RailFabric:
    """The parts of a rail-optimized two-tier fat tree, as :func:`_rail_fat_tree` builds them."""

    switches: tuple[Switch, ...]
    spines: tuple[Spine, ...]
    dims: tuple[Dimension, ...]
    groups: int  # scalable units (leaf groups)


def _rail_fat_tree(nodes: int, gpus: int, intra_bw: float, nic_bw: float, leaf_nodes: int, oversubscription: float,
                   intra_alpha: float, nic_alpha: float, intra_overhead: float, nic_overhead: float) -> _RailFabric:
    """Nodes of ``gpus`` GPUs on a switch each; NIC ``i`` of the nodes of a group on leaf ``i``; a spine above.

    Rank ``r`` is GPU ``r % gpus`` of node ``r // gpus``. Leaves are named
    ``rail{i}`` when one group holds every node, else ``su{g}.rail{i}``. The
    spine joins the leaves (when there are two or more); its up-links carry
    ``leaf_nodes * nic_bw / oversubscription`` GB/s per leaf and direction,
    or are left uncapped for a ratio of 1 (non-blocking).
    """
    switches = []
    if gpus > 1:
        switches += [Switch(f"nvswitch{k}", tuple(range(gpus * k, gpus * (k + 1))), intra_bw, intra_alpha, intra_overhead)
                     for k in range(nodes)]
    dims = [Dimension("nvswitch", gpus, intra_bw, intra_alpha, intra_overhead)] if gpus > 1 else []
    groups = -(-nodes // leaf_nodes)
    spines: list[Spine] = []
    if nodes > 1:
        leaves = []
        for g in range(groups):
            members = range(g * leaf_nodes, min((g + 1) * leaf_nodes, nodes))
            for i in range(gpus):
                name = f"rail{i}" if groups == 1 else f"su{g}.rail{i}"
                leaves.append(Switch(name, tuple(k * gpus + i for k in members), nic_bw, nic_alpha, nic_overhead))
        switches += leaves
        if len(leaves) > 1:
            uplink = None if oversubscription == 1 else leaf_nodes * nic_bw / oversubscription
            spines.append(Spine("spine", tuple(l.name for l in leaves), nic_alpha + 2 * IB_SWITCH_HOP_US, nic_overhead,
                                uplink))
        dims.append(Dimension("rail", nodes, nic_bw, nic_alpha, nic_overhead))
    return _RailFabric(tuple(switches), tuple(spines), tuple(dims), groups)


def _dgx_switched(base: str, nodes: int, nvswitch_gbps: float, nic_gbps: float, gpu: str, su_nodes: int,
                  sources) -> Topology:
    nodes = _nodes_param(nodes, base, MAX_RANKS // 8)
    n = 8 * nodes
    check_size(n, 0, f"{base}x{nodes}")
    fabric = _rail_fat_tree(nodes, 8, nvswitch_gbps, nic_gbps, su_nodes, 1.0, NVLINK_ALPHA_US, IB_ALPHA_US,
                            NVLINK_OVERHEAD_US, IB_OVERHEAD_US)
    count = "(one node):" if nodes == 1 else f"x{nodes}:"
    nic = ""
    if nodes > 1:
        units = "one SU" if fabric.groups == 1 else f"{fabric.groups} SUs of {su_nodes} nodes"
        nic = (f"; 8 x {fmt_number(nic_gbps * 8)} Gb/s NICs ({fmt_number(nic_gbps)} GB/s) per node, one leaf per rail "
               f"({units}), other rails through a non-blocking spine (+{fmt_number(2 * IB_SWITCH_HOP_US)} us)")
    return Topology(
        name=_family_name(base, nodes),
        n_ranks=n,
        switches=fabric.switches,
        spines=fabric.spines,
        nodes=tuple(r // 8 for r in range(n)),
        dims=fabric.dims,
        description=f"NVIDIA {base.upper().replace('_', ' ')} {count} 8 {gpu} per node on NVSwitch "
        f"({fmt_number(nvswitch_gbps)} GB/s per GPU per direction){nic}",
        sources=tuple(sources) + (SRC_RAIL, SRC_SWITCH_HOP, SRC_TACCL, SRC_ALPHA, SRC_OVERHEAD),
    )


def dgx_a100(nodes: int = 1) -> Topology:
    """NVIDIA DGX A100 x ``nodes``: NVSwitch (300 GB/s per GPU), 8 HDR NICs per node on rails, a spine above.

    Rank ``r`` is GPU ``r % 8`` of node ``r // 8``. Inside a node one switch
    ``nvswitch{k}``; GPU ``i`` of every node of a scalable unit of 20 nodes
    sits on rail switch ``rail{i}`` (``su{s}.rail{i}`` beyond 20 nodes;
    25 GB/s per port = its own 200 Gb/s HDR NIC, alpha 2.6 us); a
    non-blocking ``spine`` joins the rails, so GPU ``i`` reaches GPU ``j != i``
    of another node directly (alpha 3.2 us), through both NICs.

    >>> t = dgx_a100(2)
    >>> t.connection(1, 9).via, t.connection(1, 9).bw, t.connection(1, 10).via, t.connection(1, 10).alpha
    ('rail1', 25.0, 'spine', 3.2)
    >>> t.connection(1, 10).resources
    ('rail1:tx1', 'rail2:rx10')
    """
    return _dgx_switched("dgx_a100", nodes, 300.0, 25.0, "A100", DGX_A100_SU_NODES, (SRC_A100, SRC_SUPERPOD_A100))


def dgx_h100(nodes: int = 1) -> Topology:
    """NVIDIA DGX H100 x ``nodes``: NVSwitch (450 GB/s per GPU), 8 NDR NICs (50 GB/s) per node on rails, a spine above.

    Same shape as :func:`dgx_a100`, with scalable units of 32 nodes.

    >>> dgx_h100(2).connection(0, 8).bw, dgx_h100(2).connection(0, 9).bw
    (50.0, 50.0)
    """
    return _dgx_switched("dgx_h100", nodes, 450.0, 50.0, "H100", DGX_H100_SU_NODES, (SRC_H100, SRC_SUPERPOD_H100))


#: defaults of :func:`fat_tree`: DGX A100-like nodes (NVSwitch 300 GB/s per GPU, 200 Gb/s HDR NICs)
FAT_TREE_INTRA_BW = 300.0
FAT_TREE_NIC_BW = 25.0


def fat_tree(
    nodes: int,
    gpus: int = 8,
    *,
    bw: Sequence[float] = (FAT_TREE_INTRA_BW, FAT_TREE_NIC_BW),
    alpha: Sequence[float] = (NVLINK_ALPHA_US, IB_ALPHA_US),
    overhead: Sequence[float] = (NVLINK_OVERHEAD_US, IB_OVERHEAD_US),
    leaf_nodes: int | None = None,
    oversubscription: float = 1.0,
) -> Topology:
    """A rail-optimized two-tier fat tree: ``nodes`` nodes of ``gpus`` GPUs, leaves per group, a spine.

    Inside a node the GPUs share a switch of ``bw[0]`` GB/s per port
    (``alpha[0]``, ``overhead[0]``); every GPU has a NIC of ``bw[1]`` GB/s.
    The nodes come in groups of ``leaf_nodes`` (default: all of them); in a
    group NIC ``i`` of every node sits on leaf switch ``i`` (``alpha[1]``,
    ``overhead[1]``); a spine joins the leaves at two switch hops more
    (``alpha[1] + 0.6`` us). ``oversubscription`` ``r`` (at least 1) gives
    each leaf ``leaf_nodes * bw[1] / r`` GB/s of up-links (and as much
    down), so ``2`` halves what a full group can send to other leaves; 1 is
    non-blocking. Named ``fat_tree:NODESxGPUS[@..][/..][/..][:LEAF_NODES[:OVERSUB]]``
    (see :mod:`ccsynth.topologies.names`).

    >>> t = fat_tree(4, 2, leaf_nodes=2, oversubscription=2)
    >>> t.name, [s.name for s in t.switches][4:], t.spines[0].uplink_bw
    ('fat_tree:4x2:2:2', ['su0.rail0', 'su0.rail1', 'su1.rail0', 'su1.rail1'], 25.0)
    >>> t.connection(0, 4).resources
    ('su0.rail0:tx0', 'su1.rail0:rx4', 'spine:up.su0.rail0', 'spine:down.su1.rail0')
    """
    nodes = _int_param(nodes, "fat_tree: number of nodes", 1)
    gpus = _int_param(gpus, "fat_tree: GPUs per node", 1)
    bws = _per_dim(bw, 2, "fat_tree: bandwidth (inside a node, NIC)", positive=True)
    alphas = _per_dim(alpha, 2, "fat_tree: latency (inside a node, NIC)", positive=False)
    overheads = _per_dim(overhead, 2, "fat_tree: per-message overhead (inside a node, NIC)", positive=False)
    leaf = nodes if leaf_nodes is None else _int_param(leaf_nodes, "fat_tree: nodes per leaf", 1)
    ratio = checked_number(oversubscription, "fat_tree: oversubscription", positive=True)
    if ratio < 1:
        raise TopologyError(f"fat_tree: oversubscription is a ratio r:1 with r >= 1 (1 = non-blocking), got {ratio:g}")
    n = nodes * gpus
    if n < 2:
        raise TopologyError(f"fat_tree {nodes}x{gpus} has {n} rank; it needs at least 2")
    shape = f"{nodes}x{gpus}"
    check_size(n, 0, f"fat_tree:{shape}")
    leaf = min(leaf, nodes)
    fabric = _rail_fat_tree(nodes, gpus, bws[0], bws[1], leaf, ratio, alphas[0], alphas[1], overheads[0], overheads[1])
    name = f"fat_tree:{shape}" + _pairs_suffix((bws, alphas, overheads), _FAT_TREE_DEFAULTS)
    if leaf != nodes or ratio != 1:
        name += f":{leaf}"
    if ratio != 1:
        name += f":{fmt_number(ratio)}"
    units = "one group" if fabric.groups == 1 else f"{fabric.groups} groups of {leaf} nodes"
    return Topology(
        name=name,
        n_ranks=n,
        switches=fabric.switches,
        spines=fabric.spines,
        nodes=tuple(r // gpus for r in range(n)),
        dims=fabric.dims,
        description=f"two-tier fat tree of {nodes} nodes x {gpus} GPUs ({fmt_number(bws[0])} GB/s per GPU inside a "
        f"node, {fmt_number(bws[1])} GB/s NIC per GPU); one leaf per rail in {units}; spine "
        + ("non-blocking" if ratio == 1 else f"oversubscribed {fmt_number(ratio)}:1"),
        sources=("ccsynth generic model of a rail-optimized fat tree", SRC_RAIL, SRC_SUPERPOD_H100, SRC_SWITCH_HOP,
                 SRC_OVERHEAD),
    )


_FAT_TREE_DEFAULTS = ((FAT_TREE_INTRA_BW, FAT_TREE_NIC_BW), (NVLINK_ALPHA_US, IB_ALPHA_US),
                      (NVLINK_OVERHEAD_US, IB_OVERHEAD_US))

#: defaults of :func:`shared_nic`: a V100's NVSwitch port (DGX-2) inside a host, one EDR NIC (NDv2) per host
SHARED_NIC_INTRA_BW = 6 * NVLINK2_GBPS
SHARED_NIC_NIC_BW = NDV2_NIC_GBPS
_SHARED_NIC_DEFAULTS = ((SHARED_NIC_INTRA_BW, SHARED_NIC_NIC_BW), (NVLINK_ALPHA_US, IB_ALPHA_US),
                        (NVLINK_OVERHEAD_US, IB_OVERHEAD_US))


def shared_nic(
    nodes: int,
    gpus: int = 4,
    *,
    bw: Sequence[float] = (SHARED_NIC_INTRA_BW, SHARED_NIC_NIC_BW),
    alpha: Sequence[float] = (NVLINK_ALPHA_US, IB_ALPHA_US),
    overhead: Sequence[float] = (NVLINK_OVERHEAD_US, IB_OVERHEAD_US),
) -> Topology:
    """``nodes`` hosts of ``gpus`` GPUs on a switch each, joined by one NIC per host that its GPUs share.

    Inside a host the GPUs share a switch of ``bw[0]`` GB/s per port
    (``alpha[0]``, ``overhead[0]``). Between hosts every GPU has a link to
    every GPU of every other host (``alpha[1]``, ``overhead[1]``, ``bw[1]``
    GB/s), and all of a host's links go through its NIC: shared ports
    ``nic{k}.tx`` and ``nic{k}.rx`` of ``bw[1]`` GB/s each, as in
    :func:`ndv2`. So one GPU alone can drive the whole NIC, and ``gpus``
    GPUs sending at once share it. Named
    ``shared_nic:NODESxGPUS[@GBps,GBps][/us,us][/us,us]`` (pairs: inside a
    host, the NIC; see :mod:`ccsynth.topologies.names`).

    >>> t = shared_nic(2, 4)
    >>> t.name, t.n_ranks, t.connection(0, 1).bw, t.connection(0, 5).resources
    ('shared_nic:2x4', 8, 150.0, ('link:0->5', 'nic0.tx', 'nic1.rx'))
    >>> shared_nic(3, 4, bw=(300, 25)).name
    'shared_nic:3x4@300,25'
    """
    nodes = _int_param(nodes, "shared_nic: number of hosts", 1)
    gpus = _int_param(gpus, "shared_nic: GPUs per host", 1)
    bws = _per_dim(bw, 2, "shared_nic: bandwidth (inside a host, NIC)", positive=True)
    alphas = _per_dim(alpha, 2, "shared_nic: latency (inside a host, NIC)", positive=False)
    overheads = _per_dim(overhead, 2, "shared_nic: per-message overhead (inside a host, NIC)", positive=False)
    n = nodes * gpus
    if n < 2:
        raise TopologyError(f"shared_nic {nodes}x{gpus} has {n} rank; it needs at least 2")
    shape = f"{nodes}x{gpus}"
    check_size(n, n * (n - gpus), f"shared_nic:{shape}")
    switches = tuple(Switch(f"host{h}", tuple(range(h * gpus, (h + 1) * gpus)), bws[0], alphas[0], overheads[0])
                     for h in range(nodes)) if gpus > 1 else ()
    links: list[Link] = []
    ports: list[SharedPort] = []
    for h in range(nodes):
        mine = tuple(range(h * gpus, (h + 1) * gpus))
        others = tuple(r for r in range(n) if r // gpus != h)
        links += [Link(a, d, alphas[1], bws[1], overheads[1]) for a in mine for d in others]
        if others:
            ports += [SharedPort(f"nic{h}.tx", mine, others, bws[1]), SharedPort(f"nic{h}.rx", others, mine, bws[1])]
    dims = []
    if gpus > 1:
        dims.append(Dimension("switch", gpus, bws[0], alphas[0], overheads[0]))
    if nodes > 1:
        dims.append(Dimension("nic", nodes, bws[1] / gpus, alphas[1], overheads[1]))  # a rank's fair share
    return Topology(
        name=f"shared_nic:{shape}" + _pairs_suffix((bws, alphas, overheads), _SHARED_NIC_DEFAULTS),
        n_ranks=n,
        links=tuple(links),
        switches=switches,
        shared_ports=tuple(ports),
        nodes=tuple(r // gpus for r in range(n)),
        dims=tuple(dims),
        description=f"{nodes} hosts x {gpus} GPUs ({fmt_number(bws[0])} GB/s per GPU on a switch inside a host), "
        f"one {fmt_number(bws[1])} GB/s NIC per host shared by its GPUs",
        sources=("ccsynth generic model of hosts with one shared NIC (Alpa, MLSys'23: one NIC per host)", SRC_DGX2,
                 SRC_V100, SRC_NDV2, SRC_TACCL, SRC_ALPHA, SRC_OVERHEAD),
    )


# ----------------------------------------------------------------- the catalog's names
@dataclass(frozen=True)
class Machine:
    """A machine of the catalog: spec ``name``, or ``{name}xN`` for ``N`` nodes where ``multi_node``;
    ``listed``: the specs ``ccsynth topo list`` shows (with the description of the topology each builds)."""

    name: str
    build: Callable[..., Topology]
    multi_node: bool
    listed: tuple[str, ...]


@dataclass(frozen=True)
class Shape:
    """A generic shape of the catalog: spec ``name:SIZES...`` (or an alias); ``example``: a spec of it for error
    messages, ``listed`` and ``usage``: its row in ``ccsynth topo list``. Its grammar is parsed by
    :mod:`ccsynth.topologies.names`."""

    name: str
    example: str
    listed: str
    usage: str
    aliases: tuple[str, ...] = ()


#: every machine of the catalog, in the order ``ccsynth topo list`` shows them
MACHINES: tuple[Machine, ...] = (
    Machine("dgx1", dgx1, False, ("dgx1",)),
    Machine("dgx2", dgx2, False, ("dgx2",)),
    Machine("ndv2", ndv2, True, ("ndv2", "ndv2x2")),
    Machine("dgx_a100", dgx_a100, True, ("dgx_a100", "dgx_a100x4", "dgx_a100x128")),
    Machine("dgx_h100", dgx_h100, True, ("dgx_h100", "dgx_h100x2", "dgx_h100x32")),
)

#: every generic shape of the catalog, in the order ``ccsynth topo list`` shows them
SHAPES: tuple[Shape, ...] = (
    Shape("ring", "ring:8", "ring:8",
          "bidirectional ring of N ranks: ring:N[@GBps][/us][/overhead us], default 25 GB/s, 0.7 us, 1.35 us"),
    Shape("fully_connected", "fully_connected:4", "fully_connected:4",
          "direct links between all N ranks (alias full:N): fully_connected:N[@GBps][/us][/us]", aliases=("full",)),
    Shape("torus", "torus:4x4", "torus:4x4",
          "torus, ring links per dimension: torus:AxB[xC][@GBps[,...]][/us[,...]][/us[,...]]"),
    Shape("hierarchical", "hierarchical:4x8@200,50", "hierarchical:4x8x4@200,100,50",
          "one switch per group in each dimension: hierarchical:AxBxC@GBps,...[/us,...][/us,...] "
          "(alpha default 0.7 us for dim 0, 2.6 us above; overhead 1.35 us, 5.7 us)"),
    Shape("fat_tree", "fat_tree:16x8", "fat_tree:16x8:4:2",
          "rail-optimized two-tier fat tree: fat_tree:NODESxGPUS[@GBps,GBps][/us,us][/us,us][:LEAF_NODES[:OVERSUB]] "
          "(pairs: inside a node, per NIC; default 300,25 GB/s; one leaf per rail per LEAF_NODES nodes, "
          "spine up-links 1/OVERSUB of the down-links)", aliases=("fattree",)),
    Shape("shared_nic", "shared_nic:4x4", "shared_nic:4x4",
          "hosts of G GPUs on a switch, one NIC per host shared by its GPUs (Alpa's setting): "
          "shared_nic:HOSTSxGPUS[@GBps,GBps][/us,us][/us,us] (pairs: inside a host, the NIC; default 150,12.5 GB/s)"),
)


__all__ = [
    "ring",
    "fully_connected",
    "torus",
    "hierarchical",
    "dgx1",
    "dgx2",
    "ndv2",
    "dgx_a100",
    "dgx_h100",
    "fat_tree",
    "shared_nic",
    "SHARED_NIC_INTRA_BW",
    "SHARED_NIC_NIC_BW",
    "DGX1_NVLINKS",
    "IB_SWITCH_HOP_US",
    "DGX_A100_SU_NODES",
    "DGX_H100_SU_NODES",
    "FAT_TREE_INTRA_BW",
    "FAT_TREE_NIC_BW",
    "NVLINK_ALPHA_US",
    "IB_ALPHA_US",
    "NVLINK_OVERHEAD_US",
    "IB_OVERHEAD_US",
    "default_hierarchy_alpha",
    "default_hierarchy_overhead",
    "fmt_number",
    "check_size",
    "Machine",
    "Shape",
    "MACHINES",
    "SHAPES",
]
