"""Topology spec strings: ``dgx1``, ``ndv2x2``, ``ring:8``, ``torus:4x4``, a JSON path, ...

Grammar (names are case-insensitive; ``-`` may stand for ``_``)::

    dgx1 | dgx2                      single machines
    ndv2[xN] | dgx_a100[xN] | dgx_h100[xN]
                                     N nodes of that machine (default 1)
    ring:N[@BW][/ALPHA][/OVERHEAD]   generic shapes; BW in GB/s per direction,
    fully_connected:N[@BW][/ALPHA][/OVERHEAD]
                                     ALPHA and the per-message OVERHEAD in us
                                     (defaults 25 GB/s, 0.7 us, 1.35 us);
    full:N ...                       alias of fully_connected
    torus:AxB[xC...][@BW[,BW...]][/ALPHA[,ALPHA...]][/OVERHEAD[,...]]
                                     one value, or one per dimension
    hierarchical:AxB[xC...]@BW,BW,...[/ALPHA,ALPHA,...][/OVERHEAD,...]
                                     GB/s per port of each dimension (one
                                     value is used for every dimension);
                                     alphas default to 0.7 us for dimension 0
                                     and 2.6 us for the others, overheads to
                                     1.35 us and 5.7 us
    fat_tree:NxG[@BW,BW][/ALPHA,ALPHA][/OVERHEAD,OVERHEAD][:LEAF[:OVERSUB]]
                                     N nodes of G GPUs in a rail-optimized
                                     two-tier fat tree; each pair of values is
                                     (inside a node, per NIC), defaults
                                     300,25 GB/s, 0.7,2.6 us, 1.35,5.7 us;
                                     LEAF nodes per leaf group (default all),
                                     OVERSUB the leaves' up-link ratio r:1
                                     (default 1, non-blocking); alias fattree
    shared_nic:NxG[@BW,BW][/ALPHA,ALPHA][/OVERHEAD,OVERHEAD]
                                     N hosts of G GPUs on a switch, one NIC
                                     per host shared by its GPUs; pairs as
                                     for fat_tree (inside a host, the NIC),
                                     defaults 150,12.5 GB/s
    PATH.json[?KEY=VALUE&...]        a topology file; the file reader gets
                                     the options (a ccsynth topology file
                                     takes none)

Files are read by ``load_file(path, options)``: by default ccsynth's own
format (:func:`ccsynth.topologies.io.load_topology`).
:func:`ccsynth.formats.files.get_topology` passes a reader that also
imports TACCL topology profiles (options ``nodes``, ``kind``, ``chunk``,
``scale``), so the grammar lives here once.

The topology a catalog spec builds is named by the canonical form of the
spec, so ``parse_topology_spec(t.name) == t`` (``ndv2x1`` -> ``ndv2``,
``full:4`` -> ``fully_connected:4``).

>>> parse_topology_spec("ndv2x2").n_ranks
16
>>> parse_topology_spec("hierarchical:4x8@200,50").name
'hierarchical:4x8@200,50'
>>> parse_topology_spec("torus:4x4@25").name
'torus:4x4'
>>> parse_topology_spec("fattree:16x8:4:2").name
'fat_tree:16x8:4:2'
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Callable, Mapping

from ccsynth.errors import TopologyError
from ccsynth.topologies import catalog
from ccsynth.topologies.io import load_topology
from ccsynth.topologies.model import Topology

__all__ = ["FileLoader", "parse_topology_spec", "list_topologies"]

#: ``load_file(path, options)``: the topology in file ``path``, with the spec's ``?key=value`` options.
FileLoader = Callable[[str, Mapping[str, str]], Topology]

_SHAPE_RE = re.compile(r"^(?P<shape>[^@/]*)(?:@(?P<bw>[^/]*))?(?:/(?P<alpha>[^/]*))?(?:/(?P<overhead>.*))?$")

# the catalog's one table of names (catalog.MACHINES, catalog.SHAPES), indexed for parsing
_MACHINES: dict[str, catalog.Machine] = {m.name: m for m in catalog.MACHINES}
_FAMILY_RE = re.compile(r"^(?P<base>" + "|".join(map(re.escape, _MACHINES)) + r")(?:x(?P<nodes>\d+))?$")
_SHAPES = tuple(word for shape in catalog.SHAPES for word in (shape.name, *shape.aliases))
_ALIASES = {alias: shape.name for shape in catalog.SHAPES for alias in shape.aliases}
_EXAMPLES = {word: word + shape.example[len(shape.name):]
             for shape in catalog.SHAPES for word in (shape.name, *shape.aliases)}


def _valid_names() -> list[str]:
    return [*_MACHINES, *(s for s in _SHAPES if s not in _ALIASES)]


def _unknown(spec: str, word: str) -> TopologyError:
    guess = difflib.get_close_matches(word, [*_MACHINES, *_SHAPES], n=1, cutoff=0.6)
    hint = f" (did you mean {guess[0]!r}?)" if guess else ""
    return TopologyError(
        f"unknown topology {spec!r}{hint}. Valid names: {', '.join(_valid_names())}, "
        f"or a path to a .json topology file (see 'ccsynth topo list')"
    )


def _numbers(text: str | None, what: str, spec: str) -> list[float] | None:
    if text is None:
        return None
    out = []
    for part in text.split(","):
        try:
            out.append(float(part))
        except ValueError:
            raise TopologyError(f"topology {spec!r}: {what} must be numbers separated by commas, got {text!r}") from None
    return out


def _shape(text: str, kind: str, spec: str, example: str) -> list[int]:
    parts = text.lower().split("x")
    if not text or not all(p.isdigit() for p in parts):
        raise TopologyError(f"topology {spec!r}: {kind} needs sizes like {example!r}, got {text!r}")
    return [int(p) for p in parts]


def _two_tier(text: str, kind: str, spec: str, example: str, what: str, where: str) -> tuple[int, int, dict]:
    """``AxB`` and the ``@BW,BW``, ``/ALPHA,ALPHA``, ``/OVERHEAD,OVERHEAD`` pairs of a two-tier spec.

    ``what`` names the two sizes (``NODESxGPUS``), ``where`` the two parts each pair is for.
    """
    m = _SHAPE_RE.match(text)
    if not m:  # pragma: no cover - the pattern matches any string
        raise TopologyError(f"topology {spec!r}: cannot parse {text!r}")
    sizes = _shape(m.group("shape"), kind, spec, example)
    if len(sizes) != 2:
        raise TopologyError(f"topology {spec!r}: {kind} needs {what}, e.g. {example!r}")
    values = {}
    for group, label, key in (("bw", "bandwidths after '@'", "bw"), ("alpha", "latencies after '/'", "alpha"),
                              ("overhead", "per-message overheads after the second '/'", "overhead")):
        got = _numbers(m.group(group), label, spec)
        if got is not None:
            if len(got) != 2:
                raise TopologyError(f"topology {spec!r}: {kind} takes two {label.split(' after')[0]} "
                                    f"({where}), got {len(got)}")
            values[key] = tuple(got)
    return sizes[0], sizes[1], values


def _parse_shared_nic(rest: str, spec: str) -> Topology:
    hosts, gpus, values = _two_tier(rest, "shared_nic", spec, "shared_nic:4x4", "HOSTSxGPUS", "inside a host, the NIC")
    return catalog.shared_nic(hosts, gpus, **values)


def _parse_fat_tree(rest: str, spec: str) -> Topology:
    main, *tiers = rest.split(":")
    if len(tiers) > 2:
        raise TopologyError(f"topology {spec!r}: fat_tree takes at most ':LEAF_NODES:OVERSUB' after its shape, "
                            f"e.g. 'fat_tree:16x8:4:2'")
    nodes, gpus, values = _two_tier(main, "fat_tree", spec, "fat_tree:16x8", "NODESxGPUS", "inside a node, per NIC")
    leaf = None
    ratio = 1.0
    if tiers:
        if not tiers[0].isdigit():
            raise TopologyError(f"topology {spec!r}: nodes per leaf must be a whole number, got {tiers[0]!r}")
        leaf = int(tiers[0])
    if len(tiers) == 2:
        got = _numbers(tiers[1], "the oversubscription ratio after the second ':'", spec)
        if got is None or len(got) != 1:
            raise TopologyError(f"topology {spec!r}: one oversubscription ratio, e.g. ':2' for 2:1")
        ratio = got[0]
    return catalog.fat_tree(nodes, gpus, leaf_nodes=leaf, oversubscription=ratio, **values)


def _parse_shape(kind: str, rest: str, spec: str) -> Topology:
    if kind == "fat_tree":
        return _parse_fat_tree(rest, spec)
    if kind == "shared_nic":
        return _parse_shared_nic(rest, spec)
    m = _SHAPE_RE.match(rest)
    if not m:  # pragma: no cover - the pattern matches any string
        raise TopologyError(f"topology {spec!r}: cannot parse {rest!r}")
    bws = _numbers(m.group("bw"), "bandwidths after '@'", spec)
    alphas = _numbers(m.group("alpha"), "latencies after '/'", spec)
    overheads = _numbers(m.group("overhead"), "per-message overheads after the second '/'", spec)
    shape_text = m.group("shape")
    if kind in ("ring", "fully_connected"):
        sizes = _shape(shape_text, kind, spec, f"{kind}:8")
        if len(sizes) != 1:
            raise TopologyError(f"topology {spec!r}: {kind} takes one rank count, e.g. '{kind}:8'")
        for values, what in ((bws, "bandwidth"), (alphas, "latency"), (overheads, "overhead")):
            if values is not None and len(values) != 1:
                raise TopologyError(f"topology {spec!r}: {kind} takes one {what}, got {len(values)}")
        build = catalog.ring if kind == "ring" else catalog.fully_connected
        return build(
            sizes[0],
            bws[0] if bws else catalog.DEFAULT_BW,
            alphas[0] if alphas else catalog.DEFAULT_ALPHA,
            overheads[0] if overheads else catalog.DEFAULT_OVERHEAD,
        )
    sizes = _shape(shape_text, kind, spec, f"{kind}:4x4")
    if kind == "torus":
        def one_or_all(values, default):
            return values if values and len(values) > 1 else (values[0] if values else default)

        return catalog.torus(
            sizes,
            one_or_all(bws, catalog.DEFAULT_BW),
            one_or_all(alphas, catalog.DEFAULT_ALPHA),
            one_or_all(overheads, catalog.DEFAULT_OVERHEAD),
        )
    # hierarchical
    if not bws:
        raise TopologyError(
            f"topology {spec!r}: hierarchical needs the GB/s of each dimension, e.g. 'hierarchical:4x8@200,50'"
        )
    k = len(sizes)
    for values, what in ((bws, "bandwidths"), (alphas, "latencies"), (overheads, "overheads")):
        if values is not None and len(values) not in (1, k):
            raise TopologyError(f"topology {spec!r}: give 1 or {k} {what} for {k} dimensions, got {len(values)}")
    bws = bws * k if len(bws) == 1 else bws
    if alphas is None:
        alphas = [catalog.default_hierarchy_alpha(d) for d in range(k)]
    elif len(alphas) == 1:
        alphas = alphas * k
    if overheads is None:
        overheads = [catalog.default_hierarchy_overhead(d) for d in range(k)]
    elif len(overheads) == 1:
        overheads = overheads * k
    return catalog.hierarchical(list(zip(sizes, bws, alphas, overheads)))


def _looks_like_path(spec: str) -> bool:
    path = spec.split("?", 1)[0]
    return path.lower().endswith(".json") or os.sep in path or "/" in path or os.path.exists(path)


def _load_ccsynth_file(path: str, options: Mapping[str, str]) -> Topology:
    if options:
        raise TopologyError(
            f"{path!r}: options {sorted(options)} apply to TACCL topology files only (read them with ccsynth.get_topology)"
        )
    return load_topology(path)


def _load_file(spec: str, load_file: FileLoader) -> Topology:
    path, _, query = spec.partition("?")
    options: dict[str, str] = {}
    if query:
        for item in query.split("&"):
            key, eq, value = item.partition("=")
            if not eq or not key:
                raise TopologyError(f"topology {spec!r}: options after '?' must look like key=value, got {item!r}")
            options[key.strip().lower()] = value.strip()
    return load_file(path, options)


def parse_topology_spec(spec: str, *, load_file: FileLoader | None = None) -> Topology:
    """The topology a spec string names (see the module docstring for the grammar).

    A :class:`Topology` passed in is returned as it is, so callers may accept
    either. ``load_file`` reads a topology file (default: ccsynth's format
    only). Raises :class:`~ccsynth.errors.TopologyError` for an unknown name (with
    the valid names and a "did you mean"), bad parameters, or a bad file.

    >>> parse_topology_spec("full:4").name
    'fully_connected:4'
    """
    if isinstance(spec, Topology):
        return spec
    if not isinstance(spec, str) or not spec.strip():
        raise TopologyError(f"a topology spec must be a non-empty string, got {spec!r}")
    text = spec.strip()
    word, colon, rest = text.partition(":")
    kind = word.lower().replace("-", "_")
    if colon and kind in _SHAPES:
        return _parse_shape(_ALIASES.get(kind, kind), rest, text)
    if not colon:
        m = _FAMILY_RE.match(kind)
        if m:
            machine = _MACHINES[m.group("base")]
            if m.group("nodes") is None:
                return machine.build()
            if not machine.multi_node:
                several = "ndv2xN (DGX-1-like nodes)" if m.group("base") == "dgx1" else "dgx_a100xN or dgx_h100xN"
                raise TopologyError(f"topology {text!r}: {m.group('base')} is a single machine; for several use {several}")
            return machine.build(int(m.group("nodes")))
        if kind in _SHAPES:
            raise TopologyError(f"topology {text!r}: {kind} needs sizes, e.g. {_EXAMPLES[kind]!r}")
    if _looks_like_path(text):
        return _load_file(text, load_file or _load_ccsynth_file)
    raise _unknown(text, re.sub(r"x\d+$", "", kind))


def list_topologies() -> list[tuple[str, str]]:
    """Rows ``(spec example, description)`` for ``ccsynth topo list``."""
    rows = [(spec, parse_topology_spec(spec).description) for machine in catalog.MACHINES for spec in machine.listed]
    rows += [(shape.listed, shape.usage) for shape in catalog.SHAPES]
    rows += [
        ("PATH.json", "a ccsynth topology file ('ccsynth.topology' format version 1)"),
    ]
    return rows
