"""Import TACCL topology profiles (the ``--topology-file`` JSON of microsoft/taccl).

A profile is told apart from a ccsynth topology file by its fields
(:func:`is_taccl_topology`: ``gpus_per_node`` and no ``format``);
:mod:`ccsynth.formats.files` makes that choice for every topology file.

The format (TACCL's ``INPUT_GUIDE.md`` and ``taccl/examples/topo/*.json``)::

    {"name": "NDv2_1MB", "gpus_per_node": 8, "nics_per_node": 1,
     "alpha": 0.3,                      # intra-node latency
     "node_betas_list": [23, 46],       # intra-node beta per link kind
     "node_invbws_list": [23, 46],      # alpha + beta (TACCL's own examples disagree; ignored here)
     "remote_alpha": 2.6, "remote_beta": 105, "remote_invbw": 107}

TACCL picks the node wiring from its command line, not from the file:

* ``NDv2`` -- DGX-1 cube-mesh of 8 GPUs; ``node_betas_list`` is
  ``[beta of a doubled NVLink pair, beta of a single NVLink pair]``; TACCL
  forces one NIC per node;
* ``DGX2`` -- all GPUs on one switch, one beta; TACCL forces 8 NICs;
* ``HubAndSpoke`` -- all GPUs on one switch, one beta, NICs as in the file;
* ``custom`` -- matrices ``links`` (number of parallel links), ``betas``
  and ``invbws``, each ``gpus_per_node`` x ``gpus_per_node`` and indexed
  ``[dst][src]`` (TACCL's ``link(src, dst)`` reads ``links[dst][src]``).

Here ``kind`` chooses the wiring (``ndv2``, ``dgx2``, ``hub_and_spoke``,
``custom``); left out, it is ``custom`` when the file has ``links``, ``ndv2``
for two betas and ``hub_and_spoke`` for one. A switch-like node becomes one
:class:`Switch` (per-port bandwidth from the beta). A custom pair with ``k``
parallel links gets ``k`` times the bandwidth of one (TACCL gives every
parallel link the pair's beta).

Units. TACCL's costs are the time to move one chunk of the size the profile
was made for: INPUT_GUIDE says a beta is "a beta (in us/MB) multiplied by
the input size (MB)", and advises multiplying every cost by a small factor
("like 10") so that TACCL's integer rounding keeps them apart. Its examples
use binary sizes and powers of ten: ``topo-ndv2-1MB.json`` is in
microseconds (alpha 0.3, betas 23 / 46 / 105), ``topo-ndv2-32KB.json`` is
ten times that (alpha 3, beta 7.18 = 23 us/MiB x 32/1024 x 10, remote alpha
26) and ``topo-ndv2-1KB.json`` (and ``topo-dgx2-1KB.json``) a hundred times
(alpha 30, beta 2.24 = 23 x 1/1024 x 100, remote alpha 260). The factor is
not in the file, so ccsynth reads it from the size the profile is for:

* ``chunk_bytes``: the ``chunk`` option, else the size at the end of
  ``name`` (``NDv2_32KB`` -> 32 KiB, binary); a name without a size is an
  error asking for ``chunk`` (a guess would be off by TACCL's factor);
* ``time_scale``: the ``scale`` option, else TACCL's factor for that size
  (:data:`TACCL_SCALES`: 1 KiB x100, 32 KiB x10, 1 MiB x1, and x1 for any
  size of 1 MiB or more, whose costs need no factor); a smaller size TACCL
  published no profile for has no known factor: loading it without
  ``scale`` is an error that says so.

Then::

    alpha_us = alpha / time_scale
    bw_GBps  = chunk_bytes / (beta / time_scale) / 1e3     # bytes/us -> GB/s

TACCL's profiles have no separate per-message overhead (TACCL charges
``alpha + beta`` per send); ccsynth keeps ``alpha`` as the latency and gives
links inside a node the catalog's NVLink overhead
(:data:`~ccsynth.topologies.catalog.NVLINK_OVERHEAD_US`) and links between
nodes its InfiniBand one (:data:`~ccsynth.topologies.catalog.IB_OVERHEAD_US`).

TACCL's ``topo-ndv2-1MB.json`` (beta 23/46/105) thus gives 45.6 GB/s for a
doubled NVLink, 22.8 GB/s for a single one and 9.99 GB/s for InfiniBand,
alpha 0.3 us and 2.6 us; its ``topo-ndv2-32KB.json`` (read x10) and
``topo-ndv2-1KB.json`` (read x100) give the same latencies and bandwidths
within their rounding (45.6 / 22.8 / 9.99 GB/s and 45.7 / 22.8 / 9.99 GB/s).

Several nodes (TACCL takes the count from its sketch, and so does
``ccsynth synth --sketch`` when the spec has no ``nodes``): ``nodes`` copies of
the node; every GPU links to every GPU of every other node (``remote_alpha``,
``remote_beta``), and the GPUs of a node share its NICs in contiguous blocks
(GPU ``g`` uses NIC ``g * nics_per_node // gpus_per_node``), each NIC a pair
of shared ports ``nic{node}[.{j}].tx`` / ``.rx`` of the remote bandwidth.
"""

from __future__ import annotations

import logging
import os
import re
from typing import Any
from collections.abc import Mapping

from ccsynth.errors import SizeError, TopologyError
from ccsynth.limits import check as check_limit
from ccsynth.topologies import catalog
from ccsynth.topologies.io import json_type_name, read_json
from ccsynth.topologies.model import Link, SharedPort, Switch, Topology
from ccsynth.units import parse_size

log = logging.getLogger(__name__)

__all__ = [
    "KINDS",
    "DEFAULT_CHUNK_BYTES",
    "TACCL_SCALES",
    "time_scale_for",
    "is_taccl_topology",
    "load_taccl_topology",
    "taccl_topology_from_dict",
    "taccl_options",
    "chunk_bytes_from_name",
]

KINDS = ("ndv2", "dgx2", "hub_and_spoke", "custom")
DEFAULT_CHUNK_BYTES = 1 << 20
#: the factor TACCL's published profiles multiply their costs by, per chunk size (taccl/examples/topo)
TACCL_SCALES = {1 << 10: 100.0, 32 << 10: 10.0, 1 << 20: 1.0}
_SIZE_AT_END = re.compile(r"(\d+(?:\.\d+)?)\s*([KMG])i?B$", re.IGNORECASE)
_SOURCE = "TACCL topology profile format (microsoft/taccl INPUT_GUIDE.md, taccl/topologies/generic.py)"


def is_taccl_topology(d: Any) -> bool:
    """True for a TACCL topology profile (it has ``gpus_per_node`` and no ``format``)."""
    return isinstance(d, dict) and "format" not in d and "gpus_per_node" in d


def chunk_bytes_from_name(name: str) -> int | None:
    """Bytes of a size at the end of a TACCL profile name (``NDv2_32KB`` -> 32768), else None."""
    m = _SIZE_AT_END.search(name)
    if not m:
        return None
    value = float(m.group(1)) * {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m.group(2).upper()]
    return int(value) if value >= 1 else None


def time_scale_for(chunk_bytes: int) -> float | None:
    """TACCL's cost factor for a profile of ``chunk_bytes`` (module docstring), or None when it is not known.

    >>> time_scale_for(1 << 10), time_scale_for(32 << 10), time_scale_for(64 << 20), time_scale_for(4 << 10)
    (100.0, 10.0, 1.0, None)
    """
    if chunk_bytes >= DEFAULT_CHUNK_BYTES:
        return 1.0
    return TACCL_SCALES.get(chunk_bytes)


def _units(name: str, chunk_bytes: int | None, time_scale: float | None, src: str) -> tuple[int, float, str]:
    """``(chunk_bytes, time_scale, how they were found)`` of a profile (see the module docstring)."""
    how = []
    if chunk_bytes is None:
        chunk_bytes = chunk_bytes_from_name(name)
        if chunk_bytes is None:
            # a guess here is off by TACCL's factor: a 1 KB profile read as 1 MB has 100x the latency
            raise TopologyError(
                f"TACCL topology {src}: its name {name!r} ends with no size, so the chunk size its costs are for is "
                f"unknown (TACCL names profiles like NDv2_1MB); give it as ?chunk=SIZE, e.g. {src}?chunk=1M")
        else:
            how.append("size from its name")
    if isinstance(chunk_bytes, bool) or not isinstance(chunk_bytes, int) or chunk_bytes < 1:
        raise TopologyError(f"TACCL topology {src}: chunk_bytes must be a positive integer, got {chunk_bytes!r}")
    if time_scale is None:
        time_scale = time_scale_for(chunk_bytes)
        if time_scale is None:
            known = ", ".join(f"{_size_text(b)} x{catalog.fmt_number(f)}" for b, f in sorted(TACCL_SCALES.items()))
            raise TopologyError(
                f"TACCL topology {src}: cannot tell the time unit of a profile for {_size_text(chunk_bytes)} chunks: "
                f"TACCL multiplies a profile's costs by a factor its author picks, and its published profiles fix it "
                f"only for {known} (and x1 from 1 MiB up); give it as ?scale=S (costs in 1/S us)")
        how.append(f"TACCL's factor x{catalog.fmt_number(time_scale)} for that size")
    return chunk_bytes, time_scale, "; ".join(how)


def _size_text(nbytes: int) -> str:
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= size and nbytes % size == 0:
            return f"{nbytes // size} {unit}"
    return f"{nbytes} B"


def _field(d: Mapping, key: str, src: str):
    if key not in d:
        raise TopologyError(f"TACCL topology {src}: missing field {key!r}")
    return d[key]


def _num(v, where: str, src: str, *, positive: bool) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or v in (float("inf"), float("-inf")):
        raise TopologyError(f"TACCL topology {src}: {where} must be a finite number, got {json_type_name(v)} {v!r}")
    if v < 0 or (positive and v == 0):
        raise TopologyError(f"TACCL topology {src}: {where} must be {'positive' if positive else 'non-negative'}, got {v!r}")
    return float(v)


def _pos_int(v, where: str, src: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise TopologyError(f"TACCL topology {src}: {where} must be a positive integer, got {v!r}")
    return v


def _matrix(d: Mapping, key: str, g: int, src: str) -> list[list]:
    m = _field(d, key, src)
    if not isinstance(m, list) or len(m) != g or not all(isinstance(row, list) and len(row) == g for row in m):
        raise TopologyError(f"TACCL topology {src}: {key} must be a {g}x{g} matrix (gpus_per_node={g})")
    return m


def _node_links(d: Mapping, kind: str, g: int, alpha: float, bw_of, src: str):
    """Links and switches inside node 0 (ranks 0..g-1)."""
    if kind == "custom":
        links_m = _matrix(d, "links", g, src)
        betas_m = _matrix(d, "betas", g, src)
        out = []
        for dst in range(g):
            for s in range(g):
                count = links_m[dst][s]
                if isinstance(count, bool) or not isinstance(count, int) or count < 0:
                    raise TopologyError(f"TACCL topology {src}: links[{dst}][{s}] must be a link count, got {count!r}")
                if count == 0:
                    continue
                if s == dst:
                    raise TopologyError(f"TACCL topology {src}: links[{dst}][{dst}] is a self-loop")
                beta = _num(betas_m[dst][s], f"betas[{dst}][{s}]", src, positive=True)
                out.append(Link(s, dst, alpha, count * bw_of(beta), catalog.NVLINK_OVERHEAD_US))
        return out, []
    betas = _field(d, "node_betas_list", src)
    if not isinstance(betas, list):
        raise TopologyError(f"TACCL topology {src}: node_betas_list must be a list, got {json_type_name(betas)}")
    if kind == "ndv2":
        if g != 8 or len(betas) != 2:
            raise TopologyError(
                f"TACCL topology {src}: an NDv2 profile needs gpus_per_node 8 and two node betas "
                f"[doubled NVLink, single NVLink], got {g} GPUs and {len(betas)} betas"
            )
        bws = [bw_of(_num(b, f"node_betas_list[{i}]", src, positive=True)) for i, b in enumerate(betas)]
        out = []
        for i, row in enumerate(catalog.DGX1_NVLINKS):
            for j, count in enumerate(row):
                if count:
                    out.append(Link(i, j, alpha, bws[0] if count == 2 else bws[1], catalog.NVLINK_OVERHEAD_US))
        return out, []
    # dgx2 / hub_and_spoke: every GPU on one switch
    if len(betas) != 1:
        raise TopologyError(f"TACCL topology {src}: a {kind} profile needs one node beta, got {len(betas)}")
    if g < 2:
        raise TopologyError(f"TACCL topology {src}: a {kind} node needs at least 2 GPUs, got {g}")
    bw = bw_of(_num(betas[0], "node_betas_list[0]", src, positive=True))
    return [], [Switch("switch", tuple(range(g)), bw, alpha, catalog.NVLINK_OVERHEAD_US)]


def taccl_topology_from_dict(
    d: Any,
    *,
    nodes: int = 1,
    kind: str | None = None,
    chunk_bytes: int | None = None,
    time_scale: float | None = None,
    source: str = "<dict>",
) -> Topology:
    """Convert a parsed TACCL topology profile (see the module docstring; None: from the name)."""
    src = source
    if not isinstance(d, dict):
        raise TopologyError(f"TACCL topology {src}: must be a JSON object, got {json_type_name(d)}")
    name = _field(d, "name", src)
    if not isinstance(name, str) or not name:
        raise TopologyError(f"TACCL topology {src}: name must be a non-empty string, got {name!r}")
    g = _pos_int(_field(d, "gpus_per_node", src), "gpus_per_node", src)
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
        raise TopologyError(f"TACCL topology {src}: nodes must be a positive integer, got {nodes!r}")
    # Before anything is built per GPU (a node's switch lists all of its GPUs).
    check_limit(f"TACCL topology {src}: gpus_per_node x nodes", g * nodes, "MAX_RANKS", TopologyError)
    if kind is None:
        if "links" in d:
            kind = "custom"
        elif isinstance(d.get("node_betas_list"), list) and len(d["node_betas_list"]) == 2:
            kind = "ndv2"
        else:
            kind = "hub_and_spoke"
    kind = str(kind).lower().replace("-", "_")
    if kind not in KINDS:
        raise TopologyError(f"TACCL topology {src}: kind must be one of {', '.join(KINDS)}, got {kind!r}")
    if time_scale is not None:
        time_scale = _num(time_scale, "time_scale", src, positive=True)
    chunk_bytes, scale, how = _units(name, chunk_bytes, time_scale, src)

    def bw_of(beta: float) -> float:
        return chunk_bytes / (beta / scale) / 1e3

    alpha = _num(_field(d, "alpha", src), "alpha", src, positive=False) / scale
    node_links, node_switches = _node_links(d, kind, g, alpha, bw_of, src)

    nics = {"ndv2": 1, "dgx2": 8}.get(kind, d.get("nics_per_node"))
    n = g * nodes
    catalog.check_size(n, n * n, f"TACCL topology {src}")
    links: list[Link] = []
    switches: list[Switch] = []
    for k in range(nodes):
        base = k * g
        links += [Link(l.src + base, l.dst + base, l.alpha, l.bw, l.overhead) for l in node_links]
        switches += [
            Switch(f"{s.name}{k}", tuple(r + base for r in s.ranks), s.bw, s.alpha, s.overhead) for s in node_switches
        ]
    ports: list[SharedPort] = []
    if nodes > 1:
        if nics is None or nics == -1 or "remote_beta" not in d or "remote_alpha" not in d:
            raise TopologyError(
                f"TACCL topology {src}: has no inter-node profile (nics_per_node, remote_alpha, remote_beta), "
                f"so it describes one node, not {nodes}"
            )
        nics = _pos_int(nics, "nics_per_node", src)
        if nics > g:
            raise TopologyError(f"TACCL topology {src}: nics_per_node {nics} is more than gpus_per_node {g}")
        r_alpha = _num(d["remote_alpha"], "remote_alpha", src, positive=False) / scale
        r_bw = bw_of(_num(d["remote_beta"], "remote_beta", src, positive=True))
        for s in range(n):
            links += [Link(s, t, r_alpha, r_bw, catalog.IB_OVERHEAD_US) for t in range(n) if t // g != s // g]
        for k in range(nodes):
            others = tuple(r for r in range(n) if r // g != k)
            for j in range(nics):
                mine = tuple(k * g + i for i in range(g) if i * nics // g == j)
                label = f"nic{k}" if nics == 1 else f"nic{k}.{j}"
                ports.append(SharedPort(f"{label}.tx", mine, others, r_bw))
                ports.append(SharedPort(f"{label}.rx", others, mine, r_bw))

    shown_scale = catalog.fmt_number(scale)
    return Topology(
        name=name if nodes == 1 else f"{name}x{nodes}",
        n_ranks=n,
        links=tuple(links),
        switches=tuple(switches),
        shared_ports=tuple(ports),
        nodes=tuple(r // g for r in range(n)),
        description=f"TACCL profile {name!r} ({kind}, {g} GPUs per node, {nodes} node(s)); costs taken as "
        f"time per {chunk_bytes} bytes in units of 1/{shown_scale} us" + (f" ({how})" if how else ""),
        sources=(f"TACCL topology file {src}", _SOURCE),
    )


def load_taccl_topology(
    path: str | os.PathLike,
    *,
    nodes: int = 1,
    kind: str | None = None,
    chunk_bytes: int | None = None,
    time_scale: float | None = None,
) -> Topology:
    """Read a TACCL topology profile and convert it to a :class:`Topology`.

    See the module docstring for the wiring (``kind``) and the unit
    conversion (``chunk_bytes``, ``time_scale``: None reads them from the
    size in the profile's name, by TACCL's convention).

    >>> import json, tempfile, os
    >>> f = tempfile.NamedTemporaryFile("w", suffix=".json", delete=False)
    >>> json.dump({"name": "NDv2_1MB", "gpus_per_node": 8, "nics_per_node": 1, "alpha": 0.3,
    ...            "node_betas_list": [23, 46], "node_invbws_list": [23, 46],
    ...            "remote_alpha": 2.6, "remote_beta": 105, "remote_invbw": 107}, f); f.close()
    >>> t = load_taccl_topology(f.name, nodes=2)
    >>> round(t.connection(0, 1).bw, 2), round(t.connection(0, 2).bw, 2), round(t.connection(0, 8).bw, 2)
    (45.59, 22.8, 9.99)
    >>> os.unlink(f.name)
    """
    p = os.fspath(path)
    return taccl_topology_from_dict(
        read_json(p, "TACCL topology"),
        nodes=nodes,
        kind=kind,
        chunk_bytes=chunk_bytes,
        time_scale=time_scale,
        source=p,
    )


def taccl_options(options: Mapping[str, str], src: str) -> dict:
    """Keyword arguments of :func:`taccl_topology_from_dict` from spec options (``nodes=2&scale=10``)."""
    out: dict = {}
    for key, value in options.items():
        try:
            if key == "nodes":
                out["nodes"] = int(value)
            elif key == "kind":
                out["kind"] = value
            elif key in ("chunk", "chunk_bytes"):
                out["chunk_bytes"] = parse_size(value)
            elif key in ("scale", "time_scale"):
                out["time_scale"] = float(value)
            else:
                raise TopologyError(f"{src!r}: unknown option {key!r} for a TACCL topology (use nodes, kind, chunk, scale)")
        except (ValueError, SizeError) as e:
            if isinstance(e, TopologyError):
                raise
            raise TopologyError(f"{src!r}: bad value {value!r} for option {key!r}") from None
    return out

