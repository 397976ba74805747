"""Sketch JSON: ccsynth's own format read and written, and the field readers TACCL's reader shares.

ccsynth's format (``format: ccsynth.sketch``, ``version: 1``; an example in
:mod:`ccsynth.synth.sketch`) is read by :func:`sketch_from_dict` /
:func:`load_sketch` and written by :func:`save_sketch`. The field readers
(``int_field``, ``symmetry_field``, ``internode_from_fields``, ...) check
one field each and raise :class:`~ccsynth.errors.SketchError` naming the
file and field; :mod:`ccsynth.formats.taccl_sketch` reads TACCL's foreign
format with the same ones.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from typing import Any

from ccsynth.atomic import write_text
from ccsynth.errors import SizeError, SketchError
from ccsynth.reading import parse_json, read_text
from ccsynth.synth.sketch_model import FORMAT, INTERNODE_PATTERNS, VERSION, InterNode, Sketch, SwitchRule
from ccsynth.units import parse_size

__all__ = [
    "sketch_from_dict", "read_sketch_json", "load_sketch", "save_sketch",
    "sketch_where", "int_field", "int_list_field", "int_map_field", "size_field", "check_fields", "symmetry_field",
    "internode_from_fields",
]


def sketch_where(src: str) -> str:
    """How errors name a sketch: ``sketch PATH``, or just ``sketch``."""
    return f"sketch {src}" if src else "sketch"


def int_field(v, what: str, minimum: int = 0) -> int:
    """An integer (or its decimal string) of at least ``minimum``."""
    if isinstance(v, bool):
        raise SketchError(f"{what} must be an integer, got {v!r}")
    if isinstance(v, str) and v.strip().lstrip("-").isdigit():
        try:
            v = int(v)
        except ValueError:  # more digits than Python converts
            raise SketchError(f"{what} must be an integer >= {minimum}, got a {len(v)}-character number") from None
    if not isinstance(v, int) or v < minimum:
        raise SketchError(f"{what} must be an integer >= {minimum}, got {v!r}")
    return v


def int_list_field(v, what: str) -> tuple[int, ...]:
    """A list of non-negative integers."""
    if not isinstance(v, (list, tuple)):
        raise SketchError(f"{what} must be a list of integers, got {v!r}")
    return tuple(int_field(x, f"{what}[{i}]") for i, x in enumerate(v))


def int_map_field(v, what: str) -> tuple[tuple[int, tuple[int, ...]], ...]:
    """An object GPU index -> list of GPU indices, as sorted pairs."""
    if not isinstance(v, Mapping):
        raise SketchError(f"{what} must be an object mapping a GPU index to a list of GPU indices, got {v!r}")
    out = []
    for k, vals in v.items():
        key = int_field(k, f"{what} key {k!r}")
        out.append((key, int_list_field(vals, f"{what}[{k!r}]")))
    return tuple(sorted(out))


def size_field(v, what: str) -> int | None:
    """A size in bytes (``64M``, 1024, ...) or None."""
    if v is None:
        return None
    try:
        return parse_size(v)
    except SizeError as e:
        raise SketchError(f"{what}: {e}") from None


def check_fields(d: Mapping, allowed: Iterable[str], what: str) -> None:
    """Refuse fields outside ``allowed`` (a typo would silently drop a rule)."""
    extra = sorted(set(d) - set(allowed))
    if extra:
        raise SketchError(f"{what} has unknown field(s) {', '.join(map(repr, extra))}; known: {', '.join(sorted(allowed))}")


def symmetry_field(v, what: str) -> tuple[tuple[int, int], ...]:
    """Symmetry offsets ``[[offset, size], ...]`` (None: none)."""
    if v is None:
        return ()
    if not isinstance(v, (list, tuple)):
        raise SketchError(f"{what} must be a list of [offset, size] pairs, got {v!r}")
    out = []
    for i, pair in enumerate(v):
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise SketchError(f"{what}[{i}] must be [offset, size], got {pair!r}")
        out.append((int_field(pair[0], f"{what}[{i}] offset"), int_field(pair[1], f"{what}[{i}] size", 1)))
    return tuple(out)


def internode_from_fields(conn, senders, relays, enforce_ordering, ring, what: str) -> InterNode:
    """The relay rules from their fields, however the file names them (``what`` names the file in errors).

    ``conn``: a pattern name (:data:`INTERNODE_PATTERNS`), a map sender ->
    receivers, or None; ``senders`` / ``relays``: maps or None.
    """
    pattern = ""
    connections = None
    if isinstance(conn, str):
        if conn not in INTERNODE_PATTERNS:
            raise SketchError(f"{what}: unknown internode connection pattern {conn!r}; choose one of: "
                              f"{', '.join(INTERNODE_PATTERNS)} or give a map sender -> receivers")
        pattern = conn
    elif conn is not None:
        connections = int_map_field(conn, f"{what} connections")
    if not isinstance(enforce_ordering, bool):
        raise SketchError(f"{what}: enforce_ordering must be true or false, got {enforce_ordering!r}")
    if not isinstance(ring, bool):
        raise SketchError(f"{what}: ring must be true or false, got {ring!r}")
    return InterNode(
        connections=connections,
        senders=None if senders is None else int_map_field(senders, f"{what} senders"),
        chunk_relays=None if relays is None else int_map_field(relays, f"{what} chunk_relays"),
        enforce_ordering=enforce_ordering,
        pattern=pattern,
        ring=ring,
    )


def _internode(d: Mapping, what: str) -> InterNode:
    check_fields(d, ("connections", "senders", "chunk_relays", "enforce_ordering", "ring"), what)
    return internode_from_fields(d.get("connections"), d.get("senders"), d.get("chunk_relays"),
                                 d.get("enforce_ordering", False), d.get("ring", False), what)


def sketch_from_dict(d: Any, source: str = "") -> Sketch:
    """Read ccsynth's sketch JSON (``source``: the file, for error messages)."""
    if not isinstance(d, Mapping):
        raise SketchError(f"{sketch_where(source)}: a sketch must be a JSON object, got {type(d).__name__}")
    what = sketch_where(source)
    if "format" not in d and "intranode_sketch" in d:
        raise SketchError(f"{what}: a TACCL sketch (it has 'intranode_sketch'); read it with "
                          "ccsynth.formats.files.load_sketch")
    if d.get("format") != FORMAT:
        raise SketchError(f"{what}: not a sketch (format is {d.get('format')!r}, expected {FORMAT!r}, "
                          f"or a TACCL sketch with 'intranode_sketch')")
    if d.get("version") != VERSION:
        raise SketchError(f"{what}: sketch version {d.get('version')!r} is not supported (this ccsynth reads {VERSION})")
    check_fields(d, ("format", "version", "name", "chunk_factor", "input_size", "symmetry", "switches", "intranode",
                    "internode", "exclude", "detours", "nnodes"), what)
    for key in ("switches", "exclude"):
        if d.get(key) is not None and not isinstance(d[key], list):
            raise SketchError(f"{what}: {key} must be a list, got {d[key]!r}")
    switches = []
    for i, s in enumerate(d.get("switches") or []):
        if not isinstance(s, Mapping):
            raise SketchError(f"{what}: switches[{i}] must be an object with 'ranks' and 'policy'")
        check_fields(s, ("ranks", "policy"), f"{what} switches[{i}]")
        switches.append(SwitchRule(int_list_field(s.get("ranks", []), f"{what} switches[{i}].ranks"), str(s.get("policy", "none"))))
    exclude = []
    for i, e in enumerate(d.get("exclude") or []):
        if not isinstance(e, (list, tuple)) or len(e) != 2:
            raise SketchError(f"{what}: exclude[{i}] must be a [src, dst] pair, got {e!r}")
        exclude.append((int_field(e[0], f"{what} exclude[{i}]"), int_field(e[1], f"{what} exclude[{i}]")))
    inter = d.get("internode")
    if inter is not None and not isinstance(inter, Mapping):
        raise SketchError(f"{what}: internode must be an object")
    return Sketch(
        name=str(d.get("name", "sketch")),
        chunk_factor=int_field(d.get("chunk_factor", 1), f"{what}: chunk_factor", 1),
        input_size=size_field(d.get("input_size"), f"{what}: input_size"),
        symmetry=symmetry_field(d.get("symmetry"), f"{what}: symmetry"),
        switches=tuple(switches),
        intranode=str(d.get("intranode", "none")),
        internode=None if inter is None else _internode(inter, f"{what}: internode"),
        exclude=tuple(exclude),
        detours=int_field(d.get("detours", 0), f"{what}: detours"),
        nnodes=None if d.get("nnodes") is None else int_field(d["nnodes"], f"{what}: nnodes", 1),
        source=source,
    )


def read_sketch_json(path: str | os.PathLike) -> Any:
    """The parsed JSON of a sketch file; unreadable or malformed files raise :class:`SketchError`."""
    p = os.fspath(path)
    return parse_json(read_text(p, "sketch", SketchError), f"sketch {p!r}", SketchError)


def load_sketch(path: str | os.PathLike) -> Sketch:
    """Read a ccsynth sketch file (:func:`ccsynth.formats.files.load_sketch` reads TACCL's too)."""
    p = os.fspath(path)
    return sketch_from_dict(read_sketch_json(p), source=p)


def save_sketch(sketch: Sketch, path: str | os.PathLike) -> None:
    """Write ``sketch`` as ccsynth sketch JSON, atomically (see :mod:`ccsynth.atomic`)."""
    write_text(path, json.dumps(sketch.to_dict(), indent=2) + "\n", what="sketch")
