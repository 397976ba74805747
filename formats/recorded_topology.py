"""The topology a schedule, plan or phase plan file records, so that the file is used on its own.

Every file ccsynth writes names its topology (``"topology": "dgx1"``). A
name rebuilds the topology only when it is a catalog spec (the catalog names
its topologies by their canonical spec, parameters included:
``hierarchical:4x8@200,50``); a topology read from a file (``star6.json``, a
profiled machine, a TACCL profile with ``?options``) is named by its file's
``name``, which nothing else can resolve. Such a file therefore also carries
the topology itself, the JSON a topology file holds (``format:
ccsynth.topology``), under the optional key ``topology_inline``
(:func:`record`); a catalog topology keeps the name alone, so files stay
compact. The key is optional, as the file formats' versioning rules allow
(docs/formats.md): files without it read as before, and a reader that does
not know it ignores it.

Readers (:func:`resolve`) take, in order: the topology given (``-t``), else
the one recorded inline, else the catalog topology the name gives. When a
given topology differs from the recorded one (other ranks, links or costs),
the file is still used on the given one -- simulating a schedule on another
machine is a use, not a mistake -- with a warning naming both; a file whose
recorded name resolves to nothing (written before ``topology_inline``, by a
file topology) needs ``-t``, and the error says so.

Example:
    >>> from ccsynth.topologies.catalog import ring
    >>> record(ring(4)) is None          # a catalog spec: the name is the record
    True
    >>> from dataclasses import replace
    >>> custom = replace(ring(4), name="myring")
    >>> record(custom)["name"], resolve(None, "myring", record(custom), "f.json").n_ranks
    ('myring', 4)
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace

from ccsynth.errors import TopologyError
from ccsynth.topologies import names
from ccsynth.topologies.io import topology_from_dict, topology_to_dict
from ccsynth.topologies.model import Topology

log = logging.getLogger(__name__)

__all__ = ["INLINE_KEY", "record", "catalog_topology", "recorded", "resolve", "differences", "with_topology"]

#: the optional key of schedule, plan and phase plan files that holds the topology file
INLINE_KEY = "topology_inline"


def _no_file(path: str, options: Mapping[str, str]) -> Topology:
    raise TopologyError(f"{path!r} names a file, not a catalog topology")


def catalog_topology(name: str) -> Topology | None:
    """The catalog topology ``name`` gives (never a file), or None."""
    if not name:
        return None
    try:
        return names.parse_topology_spec(name, load_file=_no_file)
    except TopologyError:
        return None


def _shape(topology: Topology) -> dict:
    """The topology's file without its name, description and sources (two files of one machine compare equal)."""
    d = topology_to_dict(topology)
    for key in ("name", "description", "sources"):
        d.pop(key, None)
    return d


def record(topology: Topology) -> dict | None:
    """What a file records beside ``topology.name``: None where the name rebuilds the topology from the catalog,
    else the topology file (its JSON object)."""
    built = catalog_topology(topology.name)
    if built is not None and _shape(built) == _shape(topology):
        return None
    return topology_to_dict(topology)


def recorded(name: str, inline: dict | None, source: str) -> Topology | None:
    """The topology a file records (inline, else a catalog name), or None where it records none that loads.

    A damaged inline topology raises :class:`TopologyError` naming ``source``."""
    if inline is not None:
        try:
            return topology_from_dict(inline, source=f"{source} ({INLINE_KEY})")
        except TopologyError as e:
            raise TopologyError(f"{source}: the topology it records is damaged: {e}") from None
    return catalog_topology(name)


def differences(a: Topology, b: Topology) -> str:
    """How ``b`` differs from ``a`` in a few words, or "" where they are the same machine."""
    if a.n_ranks != b.n_ranks:
        return f"{a.n_ranks} ranks against {b.n_ranks}"
    da, db = _shape(a), _shape(b)
    if da == db:
        return ""
    keys = sorted(k for k in set(da) | set(db) if da.get(k) != db.get(k))
    return "its " + ", ".join(keys[:4]) + (" and more" if len(keys) > 4 else "") + " differ"


def resolve(given, name: str, inline: dict | None, source: str, *, required: bool = True,
            load=None) -> Topology | None:
    """The topology to use for a file that records ``name`` (and ``inline``): ``given`` (a spec or a Topology;
    with a warning where it differs from the recorded one), else the recorded one.

    ``load``: how a spec is read (default :func:`ccsynth.topologies.names.parse_topology_spec`; the CLI passes
    :func:`ccsynth.formats.files.get_topology`, which reads TACCL profiles too). Without ``given``, a file that
    records no topology that loads raises :class:`TopologyError` (``required``) or gives None.
    """
    load = load or names.parse_topology_spec
    if given is not None:
        topo = load(given)
        mine = recorded(name, inline, source)
        if mine is not None:
            why = differences(mine, topo)
            if why:
                log.warning("%s was made for topology %r (recorded in the file); using %r as given, which differs "
                            "(%s)", source, mine.name, topo.name, why)
        return topo
    mine = recorded(name, inline, source)
    if mine is not None:
        return mine
    if not required:
        return None
    if not name:
        raise TopologyError(f"{source} names no topology; pass --topology")
    try:
        return load(name)  # an old file may name a topology file by its path
    except TopologyError:
        raise TopologyError(f"{source} records topology {name!r} by name only, and no catalog topology has that name "
                            f"(a file written before ccsynth recorded topologies inline): pass --topology") from None


def with_topology(obj, topology: Topology):
    """A schedule (:class:`~ccsynth.collectives.schedule.Schedule`), plan or phase plan file recording
    ``topology``: its name, and the topology itself where the name does not rebuild it (:func:`record`)."""
    inline = record(topology)
    if hasattr(obj, "with_topology"):
        return obj.with_topology(topology.name, inline)
    return replace(obj, topology=topology.name, topology_inline=inline)
