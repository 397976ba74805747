"""What a raw profile file (:mod:`ccsynth.bench.profile_raw`) may hold, checked before anything is built from it.

``ccsynth topo refit`` fits a topology from a file that may have been cut,
edited or damaged. Three stages, each refusing with one line that names the
file and the field (a probe by its index and what it measured):

1. :data:`SCHEMA`, a JSON Schema (draft 7, checked by ``fastjsonschema``):
   every field's type, every list's items, every number's range -- a probe's
   time more than 0 and at most :data:`~ccsynth.limits.MAX_LATENCY_US` us, a
   message of 1 byte to :data:`~ccsynth.limits.MAX_MESSAGE_BYTES`, a kernel
   rate of at least :data:`~ccsynth.limits.MIN_BANDWIDTH_GBPS`;
2. numbers that JSON Schema cannot refuse: NaN and Infinity (Python's JSON
   reader takes them; every comparison with NaN is false);
3. what spans fields: one host and one core count per rank, a pattern's
   destinations ranks of the profile, and the probes' transfers within
   :data:`~ccsynth.limits.MAX_PROFILE_TRANSFERS` (the fit simulates every
   probe a few hundred times).

>>> check_raw_document({"format": "ccsynth.profile-raw", "version": 1}, "raw profile 'x.json'")
Traceback (most recent call last):
    ...
ccsynth.errors.CCSynthError: raw profile 'x.json': the file must contain ['cores', 'hosts', 'kernels', 'n_ranks', 'options', 'probes'] properties
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable, Mapping
from typing import Any

from ccsynth.errors import CCSynthError
from ccsynth.limits import (
    MAX_BENCH_ITERATIONS, MAX_LATENCY_US, MAX_MESSAGE_BYTES, MAX_PROFILE_PASSES, MAX_RANKS, MAX_SIZE_BYTES,
    MIN_BANDWIDTH_GBPS, check,
)

__all__ = ["SCHEMA", "check_raw_document"]

#: the largest rate a kernel or link may claim, GB/s (a petabyte per second is a typo or a zero time)
_MAX_GBPS = 1e6

_TIME = {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_LATENCY_US}
_TIMES = {"type": "array", "minItems": 1, "items": _TIME}
_BYTES = {"type": "integer", "minimum": 1, "maximum": MAX_MESSAGE_BYTES}
_RATE = {"type": "number", "minimum": MIN_BANDWIDTH_GBPS, "maximum": _MAX_GBPS}
_TEXT = {"type": "string"}


def _nullable(schema: dict) -> dict:
    return {"oneOf": [{"type": "null"}, schema]}


def _object(required: list[str], **properties: Any) -> dict:
    return {"type": "object", "required": required, "properties": properties}


_PROBE = _object(
    ["pattern", "dest", "kind", "shape", "messages", "nbytes", "us"],
    pattern=_TEXT,
    dest={"type": "array", "minItems": 2, "maxItems": MAX_RANKS, "items": {"type": "integer", "minimum": -1}},
    kind={"enum": ["intra", "inter"]},
    shape={"enum": ["chain", "window", "forward", "footprint", "rounds"]},
    messages={"type": "integer", "minimum": 1, "maximum": 4096},
    nbytes=_BYTES,
    slice_bytes=_nullable(_BYTES),
    peers={"type": "integer", "minimum": 1, "maximum": MAX_RANKS},
    evict_bytes={"type": "integer", "minimum": 0, "maximum": MAX_SIZE_BYTES},
    us=_TIMES,
)

#: the raw profile file, version 1 (fields the reader does not know are allowed: a newer writer may add some)
SCHEMA: dict = _object(
    ["format", "version", "n_ranks", "options", "hosts", "cores", "kernels", "probes"],
    format={"const": "ccsynth.profile-raw"},
    version={"const": 1},
    n_ranks={"type": "integer", "minimum": 2, "maximum": MAX_RANKS},
    options=_object(
        [],
        sizes=_nullable({"type": "array", "items": _BYTES}),
        iters=_nullable({"type": "integer", "minimum": 1, "maximum": MAX_BENCH_ITERATIONS}),
        quick={"type": "boolean"},
        passes=_nullable({"type": "integer", "minimum": 1, "maximum": MAX_PROFILE_PASSES}),
        cold={"type": "boolean"},
        calibrate={"type": "boolean"},
        footprints=_nullable({"type": "array", "items": _BYTES}),
    ),
    hosts={"type": "array", "items": _TEXT},
    cores={"type": "array", "items": {"type": "integer", "minimum": 1, "maximum": 1 << 20}},
    mpi_library=_TEXT,
    when=_TEXT,
    load=_TEXT,
    seconds={"type": "number", "minimum": 0, "maximum": MAX_LATENCY_US},
    kernels=_object(
        ["copy", "reduce", "fused", "nbytes"],
        copy=_RATE, reduce=_RATE, fused=_RATE, nbytes=_BYTES,
        call_us={"type": "number", "minimum": 0, "maximum": MAX_LATENCY_US},
        ladder={"type": "array", "items": {"type": "array", "minItems": 2, "maxItems": 2,
                                           "items": [_BYTES, _TIME]}},
    ),
    probes={"type": "array", "minItems": 1, "items": _PROBE},
    rounds={"type": "array", "items": _PROBE},
    communicator={"type": "array", "items": _object(["collective", "communicator_us", "executor_us"],
                                                    collective=_TEXT, communicator_us=_TIMES,
                                                    executor_us=_TIMES)},
    calibration={"type": "array", "items": _object(["collective", "algorithm", "input_bytes", "nbytes", "us"],
                                                   collective=_TEXT, algorithm=_TEXT, input_bytes=_BYTES,
                                                   nbytes=_BYTES, us=_TIMES)},
)


@functools.cache
def _validator() -> Callable[[Any], Any]:
    import fastjsonschema  # compiled once, on the first file read

    return fastjsonschema.compile(SCHEMA)


def check_raw_document(doc: Any, source: str) -> None:
    """Refuse ``doc`` (parsed JSON) with a :class:`CCSynthError` naming ``source`` and the field, unless it is a
    raw profile every field of which is in range (the three stages of the module docstring)."""
    import fastjsonschema

    try:
        _validator()(doc)
    except fastjsonschema.JsonSchemaValueException as e:
        path = list((e.path or [])[1:])
        what = _where(doc, path)
        text = e.message.split(" ", 1)[1] if e.message.startswith(e.name or "\0") else e.message
        got = "" if e.rule in ("required", "type") and isinstance(e.value, (dict, list)) else f", got {_short(e.value)}"
        for schema_word, word in (("must be object", "must be a JSON object"), ("must be array", "must be a list")):
            text = text.replace(schema_word, word)
        raise CCSynthError(f"{source}: {what or 'the file'} {text}{got}") from None
    bad = _first_not_finite(doc)
    if bad is not None:
        path, value = bad
        raise CCSynthError(f"{source}: {_where(doc, path)} must be a finite number, got {value!r}")
    _check_across(doc, source)


def _check_across(d: Mapping, source: str) -> None:
    n = d["n_ranks"]
    for key in ("hosts", "cores"):
        if len(d[key]) != n:
            raise CCSynthError(f"{source}: {key} lists {len(d[key])} ranks, the profile has n_ranks = {n}")
    transfers = 0
    for key in ("probes", "rounds"):
        for i, p in enumerate(d.get(key, ())):
            if len(p["dest"]) != n or any(r >= n or r == k for k, r in enumerate(p["dest"])):
                raise CCSynthError(f"{source}: {_where(d, [key, str(i), 'dest'])} must send each rank to another "
                                   f"of ranks 0..{n - 1} or -1 (idle), one entry per rank, got {_short(p['dest'])}")
            if p.get("peers", 1) > n - 1:  # a round probe's peers are other ranks
                raise CCSynthError(f"{source}: {_where(d, [key, str(i), 'peers'])} must be at most {n - 1} (the "
                                   f"other ranks), got {p['peers']}")
            active = sum(1 for r in p["dest"] if r >= 0)
            if active == 0:
                raise CCSynthError(f"{source}: {_where(d, [key, str(i)])} has no rank that sends")
            transfers += active * p["messages"] * p.get("peers", 1)
    check(f"{source}: transfers of all probes", transfers, "MAX_PROFILE_TRANSFERS")


def _where(doc: Any, path: list[str]) -> str:
    """``probes[3].us[1]``, with the probe described (``probes[3] (shift 1: chain of 1 x 8 B)``) where the path
    runs through one."""
    out = ""
    node = doc
    if len(path) >= 2 and path[-2] in ("us", "communicator_us", "executor_us") and path[-1].isdigit():
        return f"{_where(doc, path[:-2])} time{'' if path[-2] == 'us' else ' ' + path[-2][:-3]} of pass " \
               f"{int(path[-1]) + 1} (us)"
    for k in path:
        if isinstance(node, list) and k.isdigit() and int(k) < len(node):
            out += f"[{k}]"
            node = node[int(k)]
            if out.startswith(("probes[", "rounds[")) and out.count("[") == 1 and isinstance(node, Mapping):
                out += f" ({_probe_words(node)})"
        else:
            out += ("." if out else "") + str(k)
            node = node.get(k) if isinstance(node, Mapping) else None
    return out


def _probe_words(p: Mapping) -> str:
    name, shape, m, b = p.get("pattern"), p.get("shape"), p.get("messages"), p.get("nbytes")
    return f"{name}: {shape} of {m} x {b} B" if isinstance(name, str) else f"{shape} of {m} x {b} B"


def _first_not_finite(doc: Any) -> tuple[list[str], float] | None:
    """The path and value of the first NaN or infinite number in ``doc`` (iterative: no recursion)."""
    stack: list[tuple[Any, list[str]]] = [(doc, [])]
    while stack:
        v, path = stack.pop()
        if isinstance(v, float) and not math.isfinite(v):
            return path, v
        if isinstance(v, Mapping):
            stack.extend((c, [*path, str(k)]) for k, c in reversed(list(v.items())))
        elif isinstance(v, list):
            stack.extend((c, [*path, str(i)]) for i, c in reversed(list(enumerate(v))))
    return None


def _short(v: Any, width: int = 60) -> str:
    """``v`` as JSON writes it (``null``, ``"x"``), cut to ``width`` characters."""
    try:
        text = json.dumps(v)
    except (TypeError, ValueError):
        text = repr(v)
    return text if len(text) <= width else text[:width - 3] + "..."
