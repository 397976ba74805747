"""TACCL communication sketches (``taccl/examples/sketch/*.json``), read and written.

TACCL's sketch JSON names the same rules as a ccsynth
:class:`~ccsynth.synth.sketch.Sketch` with other keys::

    {"nnodes": 2,
     "intranode_sketch": {"strategy": "switch", "switches": [[0, 1, 2, 3]],
                          "switch_hyperedge_strategy": ["uc-min"]},
     "internode_sketch": {"strategy": "relay", "internode_conn": {"0": [1]},
                          "gpus_to_sender_rev_map": {"0": [0, 1]},
                          "chunk_to_relay_map": {"0": [0]}, "enforce_ordering": false},
     "symmetry_offsets": [[8, 16]],
     "hyperparameters": {"input_chunkup": 2, "input_size": "64M"}}

(``internode_conn`` may also be ``fully-connected`` or ``direct-map``;
binding routes them as TACCL does -- a chunk crosses into every other node
and spreads inside it, see :mod:`ccsynth.synth.sketch` -- and ``nnodes`` is
the node count of a TACCL profile loaded for the sketch,
``ccsynth.formats.files.get_topology(spec, default_nodes=sketch.nnodes)``). A
TACCL sketch has ``intranode_sketch`` (:func:`is_taccl_sketch`), which is
how :func:`ccsynth.formats.files.load_sketch` tells it from ccsynth's
own. Writing one (:func:`sketch_to_taccl_dict`) drops what TACCL does not
know: ``exclude``, ``detours`` and the ``ring`` relay rule. Fields are read
with the sketch module's own field readers, so errors read the same in
both formats (with "(TACCL format)" after the file name).
"""

from __future__ import annotations

import json
import os
from typing import Any
from collections.abc import Mapping

from ccsynth.atomic import write_text
from ccsynth.errors import SketchError
from ccsynth.synth.sketch import (
    INTRANODE_STRATEGIES,
    InterNode,
    Sketch,
    SwitchRule,
    check_fields,
    int_field,
    int_list_field,
    internode_from_fields,
    sketch_where,
    size_field,
    symmetry_field,
)

__all__ = ["is_taccl_sketch", "sketch_from_taccl_dict", "sketch_to_taccl_dict", "save_taccl_sketch"]

_INTERNODE_KEYS = ("strategy", "internode_conn", "gpus_to_sender_rev_map", "enforce_ordering", "chunk_to_relay_map")


def is_taccl_sketch(d: Any) -> bool:
    """True for a TACCL sketch (it has ``intranode_sketch``)."""
    return isinstance(d, Mapping) and "intranode_sketch" in d


def sketch_from_taccl_dict(d: Mapping, source: str = "") -> Sketch:
    """Import a TACCL sketch (``taccl/examples/sketch/*.json`` format).

    ``nnodes``; ``intranode_sketch`` {``strategy``: none | switch | maxmin |
    minmax, ``switches``: lists of GPU indices, ``switch_hyperedge_strategy``:
    one policy per switch}; ``internode_sketch`` {``strategy``: relay,
    ``internode_conn``: map or ``fully-connected`` / ``direct-map``,
    ``gpus_to_sender_rev_map``, ``enforce_ordering``,
    ``chunk_to_relay_map``}; ``symmetry_offsets``; ``hyperparameters``
    {``input_chunkup``, ``input_size``}.
    """
    what = sketch_where(source) + " (TACCL format)"
    check_fields(d, ("nnodes", "intranode_sketch", "internode_sketch", "symmetry_offsets", "hyperparameters"), what)
    nnodes = int_field(d.get("nnodes", 1), f"{what}: nnodes", 1)
    intra = d.get("intranode_sketch")
    if not isinstance(intra, Mapping):
        raise SketchError(f"{what}: intranode_sketch must be an object")
    check_fields(intra, ("strategy", "switches", "switch_hyperedge_strategy"), f"{what} intranode_sketch")
    strategy = intra.get("strategy", "none")
    if strategy not in INTRANODE_STRATEGIES:
        raise SketchError(f"{what}: unknown intranode strategy {strategy!r}; choose one of: {', '.join(INTRANODE_STRATEGIES)}")
    switches: list[SwitchRule] = []
    if strategy == "switch":
        sw = intra.get("switches")
        pol = intra.get("switch_hyperedge_strategy")
        if not isinstance(sw, list) or not isinstance(pol, list):
            raise SketchError(f"{what}: a 'switch' intranode sketch needs lists 'switches' and 'switch_hyperedge_strategy'")
        if len(sw) != len(pol):
            raise SketchError(f"{what}: {len(sw)} switches but {len(pol)} switch_hyperedge_strategy entries")
        for i, (ranks, p) in enumerate(zip(sw, pol)):
            switches.append(SwitchRule(int_list_field(ranks, f"{what} switches[{i}]"), str(p)))
    inter = d.get("internode_sketch")
    internode = None
    if inter is not None:
        if not isinstance(inter, Mapping):
            raise SketchError(f"{what}: internode_sketch must be an object")
        internode = _internode(inter, f"{what} internode_sketch")
    elif nnodes > 1:
        raise SketchError(f"{what}: nnodes is {nnodes} but there is no internode_sketch")
    hyper = d.get("hyperparameters") or {}
    if not isinstance(hyper, Mapping):
        raise SketchError(f"{what}: hyperparameters must be an object")
    check_fields(hyper, ("input_chunkup", "input_size", "heuristic"), f"{what} hyperparameters")
    name = os.path.splitext(os.path.basename(source))[0] if source else "taccl-sketch"
    return Sketch(
        name=name,
        chunk_factor=int_field(hyper.get("input_chunkup", 1), f"{what}: input_chunkup", 1),
        input_size=size_field(hyper.get("input_size"), f"{what}: input_size"),
        symmetry=symmetry_field(d.get("symmetry_offsets"), f"{what}: symmetry_offsets"),
        switches=tuple(switches),
        intranode=strategy,
        internode=internode,
        nnodes=nnodes,
        source=source,
    )


def sketch_to_taccl_dict(sketch: Sketch) -> dict:
    """TACCL's JSON for ``sketch`` (ccsynth-only fields ``exclude``, ``detours`` and ``ring`` are dropped)."""
    intra: dict[str, Any] = {"strategy": sketch.intranode}
    if sketch.switches:
        intra = {"strategy": "switch", "switches": [list(r.ranks) for r in sketch.switches],
                 "switch_hyperedge_strategy": [r.policy for r in sketch.switches]}
    d: dict[str, Any] = {"nnodes": sketch.nnodes or 1, "intranode_sketch": intra}
    if sketch.internode is not None:
        i = sketch.internode
        inter: dict[str, Any] = {"strategy": "relay"}
        if i.pattern:
            inter["internode_conn"] = i.pattern
        elif i.connections is not None:
            inter["internode_conn"] = {str(s): list(t) for s, t in i.connections}
        else:
            inter["internode_conn"] = "fully-connected"
        if i.senders is not None:
            inter["gpus_to_sender_rev_map"] = {str(s): list(t) for s, t in i.senders}
        if i.chunk_relays is not None:
            inter["chunk_to_relay_map"] = {str(s): list(t) for s, t in i.chunk_relays}
        if i.enforce_ordering:
            inter["enforce_ordering"] = True
        d["internode_sketch"] = inter
    d["symmetry_offsets"] = [list(x) for x in sketch.symmetry]
    hyper: dict[str, Any] = {"input_chunkup": sketch.chunk_factor}
    if sketch.input_size is not None:
        hyper["input_size"] = sketch.input_size
    d["hyperparameters"] = hyper
    return d


def save_taccl_sketch(sketch: Sketch, path: str | os.PathLike) -> None:
    """Write ``sketch`` as TACCL sketch JSON, atomically (see :mod:`ccsynth.atomic`)."""
    write_text(path, json.dumps(sketch_to_taccl_dict(sketch), indent=2) + "\n", what="sketch")


def _internode(d: Mapping, what: str) -> InterNode:
    """TACCL's ``internode_sketch``: the ``relay`` strategy with its maps."""
    check_fields(d, _INTERNODE_KEYS, what)
    strategy = d.get("strategy", "relay")
    if strategy != "relay":
        raise SketchError(f"{what}: unknown internode strategy {strategy!r}; TACCL sketches use 'relay'")
    conn = d.get("internode_conn")
    if conn is None:
        raise SketchError(f"{what}: a relay sketch needs 'internode_conn'")
    return internode_from_fields(conn, d.get("gpus_to_sender_rev_map"), d.get("chunk_to_relay_map"),
                                 d.get("enforce_ordering", False), False, what)
