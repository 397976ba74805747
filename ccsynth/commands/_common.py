"""Pieces shared by the CLI sub-commands: argument types, tables, JSON output.

Every ``--json`` document is a JSON object whose first key is ``schema``,
``"ccsynth.<command>/<version>"`` (:func:`json_doc`); a new version means a
key was renamed or removed (adding keys keeps the version). One quantity has
one key in every command, with its unit in the name (:data:`KEYS`, the
"JSON output" tables of docs/formats.md): ``size_bytes``, ``time_us``, ``algbw_GBps``,
``busbw_GBps``, ``n_ops``, ...
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any
from collections.abc import Iterable, Sequence

from ccsynth.collectives.spec import KINDS, Collective
from ccsynth.errors import CCSynthError
from ccsynth.limits import LIMITS
from ccsynth.units import format_size, parse_size, parse_sizes

__all__ = [
    "add_topology_arg",
    "add_collective_args",
    "add_json_arg",
    "add_size_args",
    "count_arg",
    "sizes_from",
    "topology_from",
    "file_topology",
    "collective_from",
    "KEYS",
    "json_doc",
    "renamed",
    "print_json",
    "print_table",
    "human",
    "fail",
]


def add_topology_arg(p, required: bool = True, help_extra: str = "") -> None:
    p.add_argument(
        "-t",
        "--topology",
        required=required,
        metavar="T",
        help="catalog name with parameters (dgx1, ndv2x2, dgx_a100x4, ring:8, torus:4x4, "
        "hierarchical:4x8x4@200,100,50) or a topology JSON file" + help_extra,
    )


def add_collective_args(p, required: bool = True) -> None:
    p.add_argument("-c", "--collective", required=required, metavar="C", help=f"one of: {', '.join(KINDS)}")
    p.add_argument("--chunks", type=int, default=None, metavar="K",
                   help="chunk factor: chunks per piece (default: what the algorithm needs to keep every link busy, else 1)")
    p.add_argument("--root", type=int, default=0, help="root rank of broadcast/reduce/gather/scatter (default 0)")


def add_json_arg(p) -> None:
    p.add_argument("--json", action="store_true", help="print the figures as JSON (for scripts)")


def add_size_args(p, default: str = "1M", default_help: str | None = None) -> None:
    """``-s/--size`` and ``--sizes``; ``default_help``: what the help says the default is (``default`` itself when
    not given, for commands whose default depends on their input)."""
    g = p.add_mutually_exclusive_group()
    g.add_argument("-s", "--size", default=None, metavar="S",
                   help=f"message size, e.g. 1M (default {default_help or default})")
    g.add_argument("--sizes", default=None, metavar="MIN:MAX", help="a range of sizes in powers of two, e.g. 1K:1G, or a list 1K,1M")
    p.set_defaults(_default_size=default)


def count_arg(minimum: int, limit: str | None = None):
    """argparse type for a count of at least ``minimum`` and at most the limit named ``limit`` (ccsynth.limits)."""

    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if v < minimum:
            raise argparse.ArgumentTypeError(f"{text!r} must be at least {minimum}")
        if limit is not None and v > LIMITS[limit]:
            raise argparse.ArgumentTypeError(f"{v} exceeds {limit} = {LIMITS[limit]}")
        return v

    parse.__name__ = "count"
    return parse


def sizes_from(args) -> list[int]:
    """The sizes of ``-s`` or ``--sizes`` (an empty ``--sizes ""`` is an error, not the default)."""
    if getattr(args, "sizes", None) is not None:
        return parse_sizes(args.sizes)
    return [parse_size(args.size if args.size is not None else args._default_size)]


def topology_from(spec: str, default_nodes: int | None = None):
    from ccsynth.formats.files import get_topology

    return get_topology(spec, default_nodes=default_nodes)


def file_topology(args, record, source: str, *, required: bool = True):
    """The topology for a schedule, plan or phase plan file ``record`` (anything with ``topology`` and
    ``topology_inline``): ``-t`` where given (a warning where it differs from the recorded one), else the one the
    file records (:func:`ccsynth.formats.recorded_topology.resolve`); None where none is recorded and none is
    ``required``."""
    from ccsynth.formats.recorded_topology import resolve

    return resolve(getattr(args, "topology", None) or None, record.topology or "",
                   getattr(record, "topology_inline", None), source, required=required, load=topology_from)


def collective_from(args, n_ranks: int, default_chunks: int = 1) -> Collective:
    chunks = args.chunks if args.chunks is not None else default_chunks
    return Collective(args.collective, n_ranks, chunks, args.root)


#: library field name -> the CLI's JSON key (units in the key), where the two differ
KEYS = {
    "algbw": "algbw_GBps",
    "busbw": "busbw_GBps",
    "ranks": "n_ranks",
}


def json_doc(command: str, body: dict, version: int = 1) -> dict:
    """``body`` with ``"schema": "ccsynth.<command>/<version>"`` first."""
    return {"schema": f"ccsynth.{command}/{version}", **body}


def renamed(d: dict) -> dict:
    """``d`` with library field names replaced by the CLI's JSON keys (:data:`KEYS`)."""
    return {KEYS.get(k, k): v for k, v in d.items()}


def print_json(obj: Any) -> None:
    json.dump(obj, sys.stdout, indent=2, default=_json_default)
    sys.stdout.write("\n")


def _json_default(o):
    if hasattr(o, "to_dict"):
        return o.to_dict()
    if isinstance(o, (set, frozenset, tuple)):
        return list(o)
    raise TypeError(f"cannot serialize {type(o).__name__}")


def print_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], out=None) -> None:
    """Aligned columns; numbers right-aligned, text left-aligned."""
    out = out or sys.stdout
    rows = [[_cell(v) for v in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in rows:
        for i, v in enumerate(row):
            widths[i] = max(widths[i], len(v))
    numeric = [all(_is_num(r[i]) for r in rows) if rows else False for i in range(len(headers))]

    def fmt(vals: Sequence[str]) -> str:
        return "  ".join(v.rjust(w) if numeric[i] else v.ljust(w) for i, (v, w) in enumerate(zip(vals, widths)))

    out.write(fmt(list(headers)).rstrip() + "\n")
    for row in rows:
        out.write(fmt(row).rstrip() + "\n")


def _cell(v) -> str:
    if isinstance(v, float):
        if v == 0:
            return "0"
        if abs(v) >= 100:
            return f"{v:.1f}"
        if abs(v) >= 1:
            return f"{v:.2f}"
        return f"{v:.3g}"
    return str(v)


def _is_num(s: str) -> bool:
    try:
        float(s.rstrip("x"))
        return True
    except ValueError:
        return False


def human(nbytes: float) -> str:
    return format_size(nbytes)


def fail(message: str) -> None:
    """Raise a user error (exit status 2 through ccsynth.cli.main)."""
    raise CCSynthError(message)
