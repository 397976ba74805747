"""A profile's raw probe times on file: fit again later without measuring again.

``mpiexec -n N ccsynth topo profile -o machine.json --raw raw.json`` writes,
beside the topology, everything :func:`ccsynth.bench.profile.measure_machine`
timed (:class:`~ccsynth.bench.profile.RawProfile`: every probe with its time
in every pass, the round and communicator probes' measurements, the local
kernels' rates, what the ranks ran on, the options, and the reference
collectives' times of every pass, :mod:`ccsynth.bench.calibration`). ``ccsynth topo refit
raw.json -o machine.json`` fits it again with the current rules
(:func:`~ccsynth.bench.profile.fit_profile`): the same topology as the
profile wrote when the rules are the same (JSON keeps every float exactly),
a new one when a fit rule changed -- no re-measuring. ``--footprints``
refits on a subset of the footprint probes (what a profile of fewer probes
would have said, from the same times).

The file (``"format": "ccsynth.profile-raw"``, ``"version": 1``) lists each
probe by its fields (pattern, shape, messages, bytes, slice, peers, eviction
pass) and its times in us; ``calibration`` lists the reference runs (kind,
algorithm, input bytes per rank, nccl-tests size, times in us). A file
written before the reference runs existed has none: its refit has no run
curve.

Example:
    >>> from ccsynth.bench.profile import KernelRates, ProfileOptions, Probe, RawProfile, patterns
    >>> pat = patterns([0, 0])[0]
    >>> raw = RawProfile(2, ProfileOptions(quick=True), ("h", "h"), (2, 2), "MPI", "2026-12-02 04:00 UTC", "0.1",
    ...                  ((Probe(pat, "chain", 1, 8), (3.0, 2.5)),), (), (), KernelRates(5.0, 6.0, 4.5, 1 << 24))
    >>> raw_from_dict(raw_to_dict(raw)) == raw
    True
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path

from ccsynth.atomic import write_text
from ccsynth.bench.profile_raw_schema import check_raw_document
from ccsynth.bench.calibration import CalibrationRow
from ccsynth.bench.profiling.probes import KernelRates, Pattern, Probe, ProfileOptions, RawProfile
from ccsynth.errors import CCSynthError
from ccsynth.reading import parse_json, read_text

__all__ = ["RAW_FORMAT", "RAW_VERSION", "raw_to_dict", "raw_from_dict", "save_raw", "load_raw"]

RAW_FORMAT = "ccsynth.profile-raw"
RAW_VERSION = 1


def _probe_to_dict(p: Probe, us) -> dict:
    return {"pattern": p.pattern.name, "dest": list(p.pattern.dest), "kind": p.pattern.kind, "shape": p.shape,
            "messages": p.messages, "nbytes": p.nbytes, "slice_bytes": p.slice_bytes, "peers": p.peers,
            "evict_bytes": p.evict_bytes, "us": list(us)}


def _probe_from_dict(d: Mapping) -> tuple[Probe, tuple[float, ...]]:
    pat = Pattern(str(d["pattern"]), tuple(int(x) for x in d["dest"]), str(d["kind"]))
    sl = d.get("slice_bytes")
    probe = Probe(pat, str(d["shape"]), int(d["messages"]), int(d["nbytes"]), None if sl is None else int(sl),
                  int(d.get("peers", 1)), int(d.get("evict_bytes", 0)))
    return probe, tuple(float(t) for t in d["us"])


def raw_to_dict(raw: RawProfile) -> dict:
    """The JSON object of ``raw`` (see the module docstring)."""
    o, k = raw.options, raw.kernels
    return {
        "format": RAW_FORMAT, "version": RAW_VERSION, "n_ranks": raw.n,
        "options": {"sizes": None if o.sizes is None else list(o.sizes), "iters": o.iters, "quick": o.quick,
                    "passes": o.passes, "cold": o.cold, "calibrate": o.calibrate,
                    "footprints": None if o.footprints is None else list(o.footprints)},
        "hosts": list(raw.hosts), "cores": list(raw.cores), "mpi_library": raw.mpi_library, "when": raw.when,
        "load": raw.load, "seconds": raw.seconds,
        "kernels": {"copy": k.copy, "reduce": k.reduce, "fused": k.fused, "nbytes": k.nbytes, "call_us": k.call_us,
                    "ladder": [[m, t] for m, t in k.ladder]},
        "probes": [_probe_to_dict(p, us) for p, us in raw.probe_us],
        "rounds": [_probe_to_dict(p, us) for p, us in raw.round_us],
        "communicator": [{"collective": kd, "communicator_us": list(v), "executor_us": list(d)}
                         for kd, v, d in raw.communicator_us],
        "calibration": [{"collective": r.kind, "algorithm": r.algorithm, "input_bytes": r.input_bytes,
                         "nbytes": r.nbytes, "us": list(r.us)} for r in raw.calibration],
    }


def raw_from_dict(d: Mapping) -> RawProfile:
    """The :class:`RawProfile` of a JSON object :func:`raw_to_dict` wrote; :class:`CCSynthError` if it is not one."""
    if d.get("format") != RAW_FORMAT:
        raise CCSynthError(f"not a raw profile (format {d.get('format')!r}, expected {RAW_FORMAT!r})")
    if d.get("version") != RAW_VERSION:
        raise CCSynthError(f"raw profile version {d.get('version')!r} not supported (this ccsynth reads {RAW_VERSION})")
    try:
        o = d["options"]
        options = ProfileOptions(sizes=None if o.get("sizes") is None else tuple(int(s) for s in o["sizes"]),
                                 iters=o.get("iters"), quick=bool(o.get("quick", False)), passes=o.get("passes"),
                                 cold=bool(o.get("cold", True)), calibrate=bool(o.get("calibrate", True)),
                                 footprints=None if o.get("footprints") is None else
                                 tuple(int(f) for f in o["footprints"]))
        k = d["kernels"]
        kernels = KernelRates(float(k["copy"]), float(k["reduce"]), float(k["fused"]), int(k["nbytes"]),
                              float(k.get("call_us", 0.0)), tuple((int(m), float(t)) for m, t in k.get("ladder", ())))
        return RawProfile(
            int(d["n_ranks"]), options, tuple(str(h) for h in d["hosts"]), tuple(int(c) for c in d["cores"]),
            str(d.get("mpi_library", "")), str(d.get("when", "")), str(d.get("load", "")),
            probe_us=tuple(_probe_from_dict(p) for p in d["probes"]),
            round_us=tuple(_probe_from_dict(p) for p in d.get("rounds", ())),
            communicator_us=tuple((str(c["collective"]), tuple(float(t) for t in c["communicator_us"]),
                                   tuple(float(t) for t in c["executor_us"])) for c in d.get("communicator", ())),
            kernels=kernels, seconds=float(d.get("seconds", 0.0)),
            calibration=tuple(CalibrationRow(str(c["collective"]), str(c["algorithm"]), int(c["input_bytes"]),
                                             int(c["nbytes"]), tuple(float(t) for t in c["us"]))
                              for c in d.get("calibration", ())))
    except (KeyError, TypeError, ValueError) as e:
        raise CCSynthError(f"raw profile: malformed ({type(e).__name__}: {e})") from e


def save_raw(raw: RawProfile, path: str | Path) -> None:
    """Write ``raw`` to ``path`` (JSON)."""
    write_text(path, json.dumps(raw_to_dict(raw), indent=1) + "\n", what="raw profile", error=CCSynthError)


def load_raw(path: str | Path) -> RawProfile:
    """Read a raw profile :func:`save_raw` wrote; every field is checked first (:mod:`ccsynth.bench.profile_raw_schema`),
    so that a damaged file is one :class:`CCSynthError` naming the file and the field."""
    p = os.fspath(path)
    source = f"raw profile {p!r}"
    doc = parse_json(read_text(p, "raw profile", CCSynthError), source, CCSynthError)
    if isinstance(doc, dict) and doc.get("format") != RAW_FORMAT:
        raise CCSynthError(f"{source} is not a raw profile (format {_short(doc.get('format'))}, expected {RAW_FORMAT!r})")
    if isinstance(doc, dict) and doc.get("version") != RAW_VERSION:
        raise CCSynthError(f"{source}: version {_short(doc.get('version'))} not supported (this ccsynth reads "
                           f"{RAW_VERSION})")
    check_raw_document(doc, source)
    return raw_from_dict(doc)


def _short(v) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."
