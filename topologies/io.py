"""ccsynth's own topology file: versioned JSON that round-trips exactly.

Schema (``format`` ``ccsynth.topology``, ``version`` 1)::

    {
      "format": "ccsynth.topology", "version": 1,
      "name": "ndv2x2", "n_ranks": 16,
      "description": "...", "sources": ["datasheet ..."],
      "nodes": [0, 0, ..., 1],                      # node of each rank (optional: all 0)
      "local_bw_GBps": 8.0,                         # local copy/reduce rate (optional: free)
      "local_overhead_us": 1.5,                     # fixed cost per local copy/reduce (optional: 0)
      "overhead_scope": "rank",                     # "connection" (default, GPUs) or "rank" (CPUs)
      "call_overhead_us": 3.0,                      # fixed cost per collective call (optional: 0)
      "eager_limit_bytes": 8000, "rendezvous_alpha_us": 4.0,  # larger messages: more latency (optional)
      "message_curve": {"version": 1, "sizes_bytes": [4096, 65536, 16777216],   # size-dependent costs
                        "factors": [0.6, 0.5, 1.0]},                           # (optional, PLogP's g(m))
      "local_curve":   {"version": 1, "sizes_bytes": [...], "factors": [...]},  # the same for local work
      "forward_curve": {"version": 1, "sizes_bytes": [...], "factors": [...]},  # forwarded messages (>= 1)
      "footprint_curve": {"version": 1, "sizes_bytes": [...], "factors": [...]},  # by bytes touched per rank
      "run_curve": {"version": 1, "sizes_bytes": [...], "factors": [...]},  # a whole run, by input bytes per rank
      "mpi_reference": {"version": 1, "collectives": [{"collective": "allreduce", "sizes_bytes": [...],
                                                       "us": [...]}]},        # MPI's own, when profiled
      "cold_call": {"version": 1, "footprints_bytes": [...], "us": [...], "working_set_bytes": 1572864},
      "async_progress": false,                      # bytes move only while both ranks wait (optional: true)
      "receiver_copies": true,                      # ... and keep the receiver's engine busy (optional: false)
      "round_cost": {"version": 1, "peers": [1, 2, 3], "us": [0.5, 6.0, 12.0]},  # a round of k peers (optional)
      "communicator_overhead_us": 2.0,              # per call through ccsynth's communicator (optional: 0)
      "links":        [{"src": 0, "dst": 1, "alpha_us": 0.7, "bw_GBps": 50.0, "overhead_us": 1.35}, ...],
      "switches":     [{"name": "nvswitch", "ranks": [0, 1, ...], "bw_GBps": 150.0, "alpha_us": 0.7,
                        "overhead_us": 1.35}],
      "shared_ports": [{"name": "nic0.tx", "srcs": [0, ...], "dsts": [8, ...], "bw_GBps": 12.5}],
      "dims":         [{"name": "nvlink", "size": 8, "bw_GBps": 150.0, "alpha_us": 0.7, "overhead_us": 1.35}],
      "spines":       [{"name": "spine", "leaves": ["rail0", "rail1", ...], "alpha_us": 3.2,
                        "overhead_us": 5.7, "uplink_GBps": 250.0}]
    }

``spines`` (the upper tier of a fat tree joining leaf switches, see
:class:`~ccsynth.topologies.model.Spine`; ``uplink_GBps`` left out for a
non-blocking spine) is written only when there is one, so files of
topologies without a spine read the same as before it existed.
``format``, ``version``, ``name`` and ``n_ranks`` are required; the lists,
``description``, ``sources``, ``local_bw_GBps`` and ``local_overhead_us`` may be left out, and so
may every ``overhead_us`` (the per-message overhead on each end of a
message, see :mod:`ccsynth.topologies.model`; a file without it describes a
network with no per-message cost, as files written before it existed did)
and ``overhead_scope`` (which work shares a serial engine: ``connection``,
the default, or ``rank``), ``call_overhead_us`` (the fixed cost of one
call of a collective; 0 when left out, as in every catalog topology) and
``eager_limit_bytes`` with ``rendezvous_alpha_us`` (messages of more than
that many bytes pay that much more latency; left out: one protocol), and
``message_curve`` / ``local_curve`` (size-dependent costs, see
:mod:`ccsynth.topologies.curve`: a message, or a local copy or reduction,
of ``m`` bytes costs ``f(m) * m`` bytes of the constant model, ``f``
piecewise-linear between the sizes given; each curve object has its own
``version``, 1; left out: the constants alone, exactly as before), and
``forward_curve`` (factors of at least 1: what a message that passes on
data received in the same call costs more, see
:mod:`ccsynth.topologies.model`; left out: nothing) and ``async_progress``
(false: a message's bytes move only while both ranks' engines are idle;
left out: true, as before), ``round_cost`` (the extra us of a round in
which a rank waits on ``k`` peers, piecewise-linear in ``k``:
:mod:`ccsynth.topologies.rounds`; left out: none, every prediction as
before) and ``communicator_overhead_us`` (the extra fixed cost of a call
through ccsynth's communicator, which only ``ccsynth bench --predict``
adds, to the rows that run through it; left out: 0) and ``footprint_curve`` (what every byte of
a call costs more by its footprint: the bytes a rank touches between two
calls on the same buffers, see :mod:`ccsynth.topologies.model`; left out:
nothing) and ``cold_call`` (the us a call pays once more by its footprint,
piecewise-linear in it, in proportion for calls of fewer buffers per rank
than ``working_set_bytes``: :mod:`ccsynth.topologies.coldcall`; left out:
nothing) and ``run_curve`` (what a whole run of a collective executed by
ccsynth's executor or MPI costs more, by its input bytes per rank, measured
with reference collectives: :mod:`ccsynth.bench.calibration`; left out:
nothing) and ``mpi_reference`` (what MPI's own collectives took when the
machine was profiled, by input bytes per rank: the yardstick of ``ccsynth
bench --predict``'s drift lines, :mod:`ccsynth.topologies.reference`; no
prediction uses it; left out: none).
Keys starting with ``_`` are comments and ignored; any other unknown key is
an error (a typo such as ``"lnks"`` would otherwise silently drop every
link). Bandwidths are GB/s per direction, latencies microseconds.

Every problem is one :class:`~ccsynth.errors.TopologyError` naming the JSON
path, e.g. ``links[3].bw_GBps must be positive, got -1``.

Only ccsynth's own format is read here; TACCL topology profiles are a
foreign format, read by :mod:`ccsynth.formats.taccl_topology`, and
:func:`ccsynth.formats.files.load_topology` picks the reader of a file.

>>> from ccsynth.topologies.catalog import ring
>>> d = topology_to_dict(ring(3))
>>> d["format"], d["n_ranks"], d["links"][0]
('ccsynth.topology', 3, {'src': 0, 'dst': 1, 'alpha_us': 0.7, 'bw_GBps': 25.0, 'overhead_us': 1.35})
>>> topology_from_dict(d) == ring(3)
True
"""

from __future__ import annotations

import json
import math
import os
from typing import Any
from collections.abc import Callable, Mapping

from ccsynth.atomic import write_text
from ccsynth.errors import TopologyError
from ccsynth.limits import check as check_limit, check_min as check_limit_min
from ccsynth.reading import parse_json, read_text
from ccsynth.topologies.coldcall import COLD_CALL_VERSION, ColdCallCost
from ccsynth.topologies.curve import CURVE_VERSION, SizeCurve
from ccsynth.topologies.reference import REFERENCE_VERSION, ReferenceTimes
from ccsynth.topologies.rounds import ROUND_COST_VERSION, RoundCost
from ccsynth.topologies.model import OVERHEAD_SCOPES, Dimension, Link, SharedPort, Spine, Switch, Topology

FORMAT = "ccsynth.topology"
VERSION = 1

_TOP_KEYS = ("format", "version", "name", "n_ranks", "description", "sources", "local_bw_GBps", "overhead_scope",
             "call_overhead_us", "eager_limit_bytes", "rendezvous_alpha_us", "local_overhead_us",
             "message_curve", "local_curve", "forward_curve", "async_progress", "receiver_copies", "round_cost",
             "communicator_overhead_us", "footprint_curve", "cold_call", "run_curve", "mpi_reference",
             "nodes", "links", "switches", "shared_ports", "dims", "spines")
_ENTRY_KEYS = {
    "links": ("src", "dst", "alpha_us", "bw_GBps", "overhead_us"),
    "switches": ("name", "ranks", "bw_GBps", "alpha_us", "overhead_us"),
    "shared_ports": ("name", "srcs", "dsts", "bw_GBps"),
    "dims": ("name", "size", "bw_GBps", "alpha_us", "overhead_us"),
    "spines": ("name", "leaves", "alpha_us", "overhead_us", "uplink_GBps"),
}


# ------------------------------------------------------------------- writing
def topology_to_dict(topology: Topology) -> dict:
    """The JSON-ready dict of ``topology`` (every field written out)."""
    t = topology
    d: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "name": t.name,
        "n_ranks": t.n_ranks,
        "description": t.description,
        "sources": list(t.sources),
    }
    if t.local_bw is not None:
        d["local_bw_GBps"] = float(t.local_bw)
    if t.local_overhead:
        d["local_overhead_us"] = float(t.local_overhead)
    if t.overhead_scope != "connection":
        d["overhead_scope"] = t.overhead_scope
    if t.call_overhead:
        d["call_overhead_us"] = float(t.call_overhead)
    if t.eager_limit is not None:
        d["eager_limit_bytes"] = float(t.eager_limit)
    if t.rendezvous_alpha:
        d["rendezvous_alpha_us"] = float(t.rendezvous_alpha)
    if t.message_curve is not None:
        d["message_curve"] = t.message_curve.to_dict()
    if t.local_curve is not None:
        d["local_curve"] = t.local_curve.to_dict()
    if t.forward_curve is not None:
        d["forward_curve"] = t.forward_curve.to_dict()
    if not t.async_progress:
        d["async_progress"] = False
    if t.receiver_copies:
        d["receiver_copies"] = True
    if t.round_cost is not None:
        d["round_cost"] = t.round_cost.to_dict()
    if t.communicator_overhead:
        d["communicator_overhead_us"] = float(t.communicator_overhead)
    if t.footprint_curve is not None:
        d["footprint_curve"] = t.footprint_curve.to_dict()
    if t.cold_call is not None:
        d["cold_call"] = t.cold_call.to_dict()
    if t.run_curve is not None:
        d["run_curve"] = t.run_curve.to_dict()
    if t.mpi_reference:
        d["mpi_reference"] = {"version": REFERENCE_VERSION, "collectives": [r.to_dict() for r in t.mpi_reference]}
    d.update({
        "nodes": list(t.nodes),
        "links": [
            {"src": l.src, "dst": l.dst, "alpha_us": float(l.alpha), "bw_GBps": float(l.bw), **_overhead_field(l)}
            for l in t.links
        ],
        "switches": [
            {"name": s.name, "ranks": list(s.ranks), "bw_GBps": float(s.bw), "alpha_us": float(s.alpha),
             **_overhead_field(s)}
            for s in t.switches
        ],
        "shared_ports": [
            {"name": p.name, "srcs": list(p.srcs), "dsts": list(p.dsts), "bw_GBps": float(p.bw)}
            for p in t.shared_ports
        ],
        "dims": [
            {"name": d.name, "size": d.size, "bw_GBps": float(d.bw), "alpha_us": float(d.alpha), **_overhead_field(d)}
            for d in t.dims
        ],
    })
    if t.spines:
        d["spines"] = [
            {"name": sp.name, "leaves": list(sp.leaves), "alpha_us": float(sp.alpha), **_overhead_field(sp),
             **({"uplink_GBps": float(sp.uplink_bw)} if sp.uplink_bw is not None else {})}
            for sp in t.spines
        ]
    return d


def _overhead_field(entry: Link | Switch | Dimension | Spine) -> dict[str, float]:
    # written only when there is one, so that files without overheads round-trip unchanged
    return {"overhead_us": float(entry.overhead)} if entry.overhead else {}


def topology_to_json(topology: Topology) -> str:
    """JSON text with one line per link, switch, port and dimension (diff-friendly)."""
    d = topology_to_dict(topology)
    lines = ["{"]
    items = list(d.items())
    for i, (key, value) in enumerate(items):
        comma = "," if i < len(items) - 1 else ""
        if isinstance(value, list) and value and isinstance(value[0], dict):
            body = ",\n".join(f"    {json.dumps(v)}" for v in value)
            lines.append(f"  {json.dumps(key)}: [\n{body}\n  ]{comma}")
        else:
            lines.append(f"  {json.dumps(key)}: {json.dumps(value)}{comma}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def save_topology(topology: Topology, path: str | os.PathLike) -> None:
    """Write ``topology`` to ``path`` in the ccsynth JSON format (atomically: see :mod:`ccsynth.atomic`)."""
    write_text(path, topology_to_json(topology), what="topology", error=TopologyError)


# ------------------------------------------------------------------- reading
def json_type_name(v: Any) -> str:
    """The JSON name of ``v``'s type, for error messages (``object``, ``list``, ``string``, ...)."""
    return {dict: "object", list: "list", str: "string", bool: "boolean", type(None): "null"}.get(
        type(v), type(v).__name__
    )


def _get(obj: Mapping, key: str, where: str):
    if key not in obj:
        raise TopologyError(f"{where} is missing field {key!r}")
    return obj[key]


def _int(v, where: str, minimum: int = 0) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise TopologyError(f"{where} must be an integer, got {json_type_name(v)} {v!r}")
    if v < minimum:
        raise TopologyError(f"{where} must be at least {minimum}, got {v}")
    return v


def _number(v, where: str, *, positive: bool) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise TopologyError(f"{where} must be a number, got {json_type_name(v)} {v!r}")
    x = float(v)
    if not math.isfinite(x):
        raise TopologyError(f"{where} must be a finite number, got {v!r}")
    if positive and x <= 0:
        raise TopologyError(f"{where} must be positive, got {v!r}")
    if x < 0:
        raise TopologyError(f"{where} must not be negative, got {v!r}")
    if positive:  # a bandwidth
        check_limit_min(where, x, "MIN_BANDWIDTH_GBPS", TopologyError)
    else:  # a latency
        check_limit(where, x, "MAX_LATENCY_US", TopologyError)
    return x


def _str(v, where: str, *, empty_ok: bool = False) -> str:
    if not isinstance(v, str):
        raise TopologyError(f"{where} must be a string, got {json_type_name(v)} {v!r}")
    if not empty_ok and not v:
        raise TopologyError(f"{where} must not be empty")
    return v


def _list(v, where: str) -> list:
    if not isinstance(v, list):
        raise TopologyError(f"{where} must be a list, got {json_type_name(v)}")
    return v


def _rank(v, where: str, n: int) -> int:
    r = _int(v, where)
    if r >= n:
        raise TopologyError(f"{where} names unknown rank {r} (ranks are 0..{n - 1})")
    return r


def _ranks(v, where: str, n: int) -> tuple[int, ...]:
    return tuple(_rank(r, f"{where}[{i}]", n) for i, r in enumerate(_list(v, where)))


def _check_keys(obj: Mapping, allowed, where: str) -> None:
    for key in obj:
        if key not in allowed and not (isinstance(key, str) and key.startswith("_")):
            raise TopologyError(f"{where} has unknown field {key!r} (expected {', '.join(allowed)})")


def _entries(d: Mapping, key: str):
    """(path, object) for each entry of list ``key``, each checked to be an object with known fields."""
    for i, entry in enumerate(_list(d.get(key, []), key)):
        where = f"{key}[{i}]"
        if not isinstance(entry, dict):
            raise TopologyError(f"{where} must be an object, got {json_type_name(entry)}")
        _check_keys(entry, _ENTRY_KEYS[key], where)
        yield where, entry


def topology_from_dict(d: Any, *, source: str | None = None) -> Topology:
    """Build a :class:`Topology` from its JSON dict, validating every field.

    Raises :class:`TopologyError` naming the JSON path of the first problem
    (after ``source``, the file it came from, when given).
    """
    if source is None:
        return _topology_from_dict(d)
    try:
        return _topology_from_dict(d)
    except TopologyError as e:
        raise TopologyError(f"{source}: {e}") from None


def _flag(d: Mapping, key: str, default: bool) -> bool:
    """``d[key]`` (``default`` where absent), which must be a JSON boolean."""
    value = d.get(key, default)
    if not isinstance(value, bool):
        raise TopologyError(f"{key} must be true or false, got {json_type_name(value)}")
    return value


def _topology_from_dict(d: Any) -> Topology:
    """The stages of reading a topology: the header, the name and size, then every field of :data:`_FIELDS`
    in its order (the first problem met is the one reported); the model checks what spans entries
    (duplicate connections, names, the dimensions' product)."""
    _check_header(d)
    name = _str(_get(d, "name", "topology"), "name")
    n = _int(_get(d, "n_ranks", "topology"), "n_ranks", 1)
    check_limit("n_ranks", n, "MAX_RANKS", TopologyError)
    return Topology(name=name, n_ranks=n, **{field: read(d, n) for field, read in _FIELDS})


def _check_header(d: Any) -> None:
    """A JSON object of this format and version, with no unknown top-level field."""
    if not isinstance(d, dict):
        raise TopologyError(f"a topology must be a JSON object, got {json_type_name(d)}")
    if "format" not in d:
        raise TopologyError(f"not a ccsynth topology: missing field 'format' (expected {FORMAT!r})")
    if d["format"] != FORMAT:
        raise TopologyError(f"not a ccsynth topology (format is {d['format']!r}, expected {FORMAT!r})")
    version = _get(d, "version", "topology")
    if version != VERSION or isinstance(version, bool):
        raise TopologyError(f"topology format version {version!r} is not supported (this ccsynth reads version {VERSION})")
    _check_keys(d, _TOP_KEYS, "topology")


# ------------------------------------------------------------------- readers of one field each
#: a reader of one Topology field: (the file's dict, n_ranks) -> the field's value
_Reader = Callable[[Mapping, int], Any]


def _sources(d: Mapping, n: int) -> tuple[str, ...]:
    return tuple(_str(s, f"sources[{i}]", empty_ok=True) for i, s in enumerate(_list(d.get("sources", []), "sources")))


def _nodes(d: Mapping, n: int) -> tuple[int, ...]:
    if "nodes" not in d:
        return ()
    raw = _list(d["nodes"], "nodes")
    if len(raw) != n:
        raise TopologyError(f"nodes has {len(raw)} entries for {n} ranks")
    return tuple(_int(v, f"nodes[{i}]") for i, v in enumerate(raw))


def _link(e: Mapping, where: str, n: int) -> Link:
    src = _rank(_get(e, "src", where), f"{where}.src", n)
    dst = _rank(_get(e, "dst", where), f"{where}.dst", n)
    if src == dst:
        raise TopologyError(f"{where} is a self-loop {src}->{dst}")
    alpha = _number(_get(e, "alpha_us", where), f"{where}.alpha_us", positive=False)
    bw = _number(_get(e, "bw_GBps", where), f"{where}.bw_GBps", positive=True)
    return Link(src, dst, alpha, bw, _overhead(e, where))


def _switch(e: Mapping, where: str, n: int) -> Switch:
    return Switch(
        _str(_get(e, "name", where), f"{where}.name"),
        _ranks(_get(e, "ranks", where), f"{where}.ranks", n),
        _number(_get(e, "bw_GBps", where), f"{where}.bw_GBps", positive=True),
        _number(_get(e, "alpha_us", where), f"{where}.alpha_us", positive=False),
        _overhead(e, where),
    )


def _shared_port(e: Mapping, where: str, n: int) -> SharedPort:
    return SharedPort(
        _str(_get(e, "name", where), f"{where}.name"),
        _ranks(_get(e, "srcs", where), f"{where}.srcs", n),
        _ranks(_get(e, "dsts", where), f"{where}.dsts", n),
        _number(_get(e, "bw_GBps", where), f"{where}.bw_GBps", positive=True),
    )


def _dimension(e: Mapping, where: str, n: int) -> Dimension:
    return Dimension(
        _str(_get(e, "name", where), f"{where}.name"),
        _int(_get(e, "size", where), f"{where}.size", 1),
        _number(_get(e, "bw_GBps", where), f"{where}.bw_GBps", positive=True),
        _number(_get(e, "alpha_us", where), f"{where}.alpha_us", positive=False),
        _overhead(e, where),
    )


def _spine(e: Mapping, where: str, n: int) -> Spine:
    leaves = tuple(_str(x, f"{where}.leaves[{i}]") for i, x in enumerate(_list(_get(e, "leaves", where), f"{where}.leaves")))
    uplink = None
    if "uplink_GBps" in e:
        uplink = _number(e["uplink_GBps"], f"{where}.uplink_GBps", positive=True)
    return Spine(_str(_get(e, "name", where), f"{where}.name"), leaves,
                 _number(_get(e, "alpha_us", where), f"{where}.alpha_us", positive=False),
                 _overhead(e, where), uplink)


def _entry_list(key: str, parse: Callable[[Mapping, str, int], Any]) -> _Reader:
    """The reader of list ``key``: every entry (:func:`_entries`) parsed by ``parse(entry, path, n_ranks)``."""
    return lambda d, n: tuple(parse(e, where, n) for where, e in _entries(d, key))


def _optional(key: str, *, positive: bool) -> _Reader:
    """The reader of number ``key`` (None where absent)."""
    return lambda d, n: _number(d[key], key, positive=positive) if key in d else None


def _latency(key: str) -> _Reader:
    """The reader of a non-negative number ``key`` (us; 0 where absent)."""
    return lambda d, n: _number(d.get(key, 0.0), key, positive=False)


def _scope(d: Mapping, n: int) -> str:
    scope = d.get("overhead_scope", "connection")
    if scope not in OVERHEAD_SCOPES:
        raise TopologyError(f"overhead_scope must be one of {', '.join(OVERHEAD_SCOPES)}, got {scope!r}")
    return scope


#: every Topology field read from a file (beside name and n_ranks), by its reader, in the order they are checked
_FIELDS: tuple[tuple[str, _Reader], ...] = (
    ("description", lambda d, n: _str(d.get("description", ""), "description", empty_ok=True)),
    ("sources", _sources),
    ("nodes", _nodes),
    ("links", _entry_list("links", _link)),
    ("switches", _entry_list("switches", _switch)),
    ("shared_ports", _entry_list("shared_ports", _shared_port)),
    ("dims", _entry_list("dims", _dimension)),
    ("spines", _entry_list("spines", _spine)),
    ("local_bw", _optional("local_bw_GBps", positive=True)),
    ("call_overhead", _latency("call_overhead_us")),
    ("local_overhead", _latency("local_overhead_us")),
    ("eager_limit", _optional("eager_limit_bytes", positive=False)),
    ("rendezvous_alpha", _latency("rendezvous_alpha_us")),
    ("message_curve", lambda d, n: _curve(d, "message_curve")),
    ("local_curve", lambda d, n: _curve(d, "local_curve")),
    ("forward_curve", lambda d, n: _curve(d, "forward_curve")),
    ("footprint_curve", lambda d, n: _curve(d, "footprint_curve")),
    ("run_curve", lambda d, n: _curve(d, "run_curve")),
    ("mpi_reference", lambda d, n: _mpi_reference(d)),
    ("cold_call", lambda d, n: _cold_call(d)),
    ("async_progress", lambda d, n: _flag(d, "async_progress", True)),
    ("receiver_copies", lambda d, n: _flag(d, "receiver_copies", False)),
    ("round_cost", lambda d, n: _round_cost(d)),
    ("communicator_overhead", _latency("communicator_overhead_us")),
    ("overhead_scope", _scope),
)


_CURVE_KEYS = ("version", "sizes_bytes", "factors")


def _versioned(d: Mapping, key: str, keys: tuple[str, ...], version: int, what: str) -> Mapping | None:
    """The versioned object under ``key`` (None when left out), its keys and version checked (``what``: the keys it
    must have, for the message)."""
    if key not in d:
        return None
    e = d[key]
    if not isinstance(e, Mapping):
        raise TopologyError(f"{key} must be an object with {what}, got {type(e).__name__}")
    for k in e:
        if k not in keys and not str(k).startswith("_"):
            raise TopologyError(f"{key}: unknown key {k!r} (known: {', '.join(keys)})")
    got = e.get("version", version)
    if got != version:
        raise TopologyError(f"{key}: version {got!r} is not supported (this ccsynth reads version {version})")
    return e


def _curve(d: Mapping, key: str) -> SizeCurve | None:
    """The size curve under ``key`` (None when left out); every problem names the key."""
    e = _versioned(d, key, _CURVE_KEYS, CURVE_VERSION, "sizes_bytes and factors")
    if e is None:
        return None
    sizes = [_number(x, f"{key}.sizes_bytes[{i}]", positive=True)
             for i, x in enumerate(_list(_get(e, "sizes_bytes", key), f"{key}.sizes_bytes"))]
    factors = [_number(x, f"{key}.factors[{i}]", positive=True)
               for i, x in enumerate(_list(_get(e, "factors", key), f"{key}.factors"))]
    try:
        return SizeCurve(tuple(sizes), tuple(factors))
    except TopologyError as err:
        raise TopologyError(f"{key}: {err}") from None


_ROUND_KEYS = ("version", "peers", "us")


def _round_cost(d: Mapping) -> RoundCost | None:
    """The round cost (None when left out); every problem names the key."""
    key = "round_cost"
    e = _versioned(d, key, _ROUND_KEYS, ROUND_COST_VERSION, "peers and us")
    if e is None:
        return None
    peers = [_int(x, f"{key}.peers[{i}]", 1) for i, x in enumerate(_list(_get(e, "peers", key), f"{key}.peers"))]
    us = [_number(x, f"{key}.us[{i}]", positive=False) for i, x in enumerate(_list(_get(e, "us", key), f"{key}.us"))]
    try:
        return RoundCost(tuple(peers), tuple(us))
    except TopologyError as err:
        raise TopologyError(f"{key}: {err}") from None


_REFERENCE_KEYS = ("version", "collectives")
_REFERENCE_ENTRY_KEYS = ("collective", "sizes_bytes", "us")


def _mpi_reference(d: Mapping) -> tuple[ReferenceTimes, ...]:
    """MPI's reference times (empty when left out); every problem names the key."""
    key = "mpi_reference"
    e = _versioned(d, key, _REFERENCE_KEYS, REFERENCE_VERSION, "collectives")
    if e is None:
        return ()
    out = []
    for i, c in enumerate(_list(_get(e, "collectives", key), f"{key}.collectives")):
        where = f"{key}.collectives[{i}]"
        if not isinstance(c, Mapping):
            raise TopologyError(f"{where} must be an object, got {json_type_name(c)}")
        extra = sorted(str(k) for k in c if k not in _REFERENCE_ENTRY_KEYS and not str(k).startswith("_"))
        if extra:
            raise TopologyError(f"{where}: unknown key {extra[0]!r} (expected {', '.join(_REFERENCE_ENTRY_KEYS)})")
        sizes = [_number(x, f"{where}.sizes_bytes[{j}]", positive=True)
                 for j, x in enumerate(_list(_get(c, "sizes_bytes", where), f"{where}.sizes_bytes"))]
        us = [_number(x, f"{where}.us[{j}]", positive=True) for j, x in enumerate(_list(_get(c, "us", where), f"{where}.us"))]
        try:
            out.append(ReferenceTimes(_str(_get(c, "collective", where), f"{where}.collective"), tuple(sizes), tuple(us)))
        except TopologyError as err:
            raise TopologyError(f"{where}: {err}") from None
    return tuple(out)


_COLD_KEYS = ("version", "footprints_bytes", "us", "working_set_bytes")


def _cold_call(d: Mapping) -> ColdCallCost | None:
    """The cold call cost (None when left out); every problem names the key."""
    key = "cold_call"
    e = _versioned(d, key, _COLD_KEYS, COLD_CALL_VERSION, "footprints_bytes and us")
    if e is None:
        return None
    fps = [_number(x, f"{key}.footprints_bytes[{i}]", positive=True)
           for i, x in enumerate(_list(_get(e, "footprints_bytes", key), f"{key}.footprints_bytes"))]
    us = [_number(x, f"{key}.us[{i}]", positive=False) for i, x in enumerate(_list(_get(e, "us", key), f"{key}.us"))]
    ws = _number(_get(e, "working_set_bytes", key), f"{key}.working_set_bytes", positive=True)
    try:
        return ColdCallCost(tuple(fps), tuple(us), ws)
    except TopologyError as err:
        raise TopologyError(f"{key}: {err}") from None


def _overhead(entry: Mapping, where: str) -> float:
    return _number(entry.get("overhead_us", 0.0), f"{where}.overhead_us", positive=False)


def read_json(path: str | os.PathLike, what: str = "topology") -> Any:
    """Parsed JSON of ``path``; unreadable or malformed files raise :class:`TopologyError`."""
    p = os.fspath(path)
    return parse_json(read_text(p, what, TopologyError), f"{what} file {p!r}", TopologyError)


def load_topology(path: str | os.PathLike) -> Topology:
    """Read a ccsynth topology file.

    Raises :class:`TopologyError` naming the file and the problem (not found,
    not JSON, wrong version, a bad field with its JSON path).
    """
    p = os.fspath(path)
    return topology_from_dict(read_json(p), source=p)


__all__ = [
    "FORMAT",
    "VERSION",
    "topology_to_dict",
    "topology_from_dict",
    "topology_to_json",
    "save_topology",
    "load_topology",
    "read_json",
    "json_type_name",
]
