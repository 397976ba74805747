"""Offline evaluation of model variants on the saved quiet runs (issue 10, h44-coldcall).

Run as a script (``python bench/data/issue10_h44/evaluate.py [VARIANT ...]``): per run and case, the median
|measured / predicted - 1| per size band from 64 KiB, for the "before" topologies (h38's stand-ins) and each
variant's. Nothing here runs on import.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE.parent

#: run -> (folder, {ranks: before topology file})
RUNS = {
    "E": ("issue10_runE/r2", {2: "issue10_runE/h38_machine2.json"}),
    "E4": ("issue10_runE/r4", {4: "issue10_runE/h38_machine4.json"}),
    "Et": ("issue10_runE/tuned", {2: "issue10_runE/h38_tuned_machine2.json", 4: "issue10_runE/h38_tuned_machine4.json"}),
    "D": ("issue10_runD/r2", {2: "issue10_runD/h38_machine2.json"}),
    "D4": ("issue10_runD/r4", {4: "issue10_runD/h38_machine4.json"}),
    "C": ("issue10_runC/r2", {2: "issue10_runC/h29_model2.json"}),
    "C4": ("issue10_runC/r4", {4: "issue10_runC/h29_model4.json"}),
}


def bands(folder: str, topos, lo: int = 64 << 10) -> dict[str, dict[str, float]]:
    from ccsynth.bench.bench_predict import _results, repredict_cases
    from ccsynth.bench.predict import error_table

    cases = json.loads((DATA / folder / "cases.json").read_text())
    cases = repredict_cases(cases, DATA / folder, topos)
    out: dict[str, dict[str, float]] = {}
    for case in cases:
        for kind, run in case["runs"].items():
            col = out.setdefault(("ar" if kind == "allreduce" else "ag") + str(case["n"]), {})
            for d in error_table(_results(run["json"])):
                if d.lo >= lo:
                    col[d.label] = d.median
    return out


def evaluate(transform=None, lo: int = 64 << 10) -> dict[str, dict[str, dict[str, float]]]:
    """Per run, per case, per band from 64 KiB: the median error on the before topologies passed through
    ``transform(topology, run, n)`` (None: as they are)."""
    from ccsynth.topologies.io import load_topology

    res = {}
    for run, (folder, files) in RUNS.items():
        topos = []
        for n, f in files.items():
            t = load_topology(DATA / f)
            topos.append(transform(t, run, n) if transform else t)
        res[run] = bands(folder, topos, lo)
    return res


def show(before, after=None) -> None:
    """Per run and case the bands before -> after; cells meeting 25% from 64 KiB (runs D and E, and C apart),
    per rank count, and the mean of the medians."""
    from collections import Counter

    from ccsynth.units import parse_size

    met: Counter = Counter()
    sums: Counter = Counter()
    for run, cols in before.items():
        for col, per in cols.items():
            line = []
            for band, v in per.items():
                w = after[run][col][band] if after is not None else v
                line.append(f"{band} {100 * v:.0f}->{100 * w:.0f}" if after is not None else f"{band} {100 * v:.0f}")
                if parse_size(band.split("-")[0].replace(" B", "")) >= 64 << 10:
                    key = ("C" if run.startswith("C") else "DE", col[-1])
                    met[key + ("cells",)] += 1
                    met[key + ("before",)] += v <= 0.25
                    met[key + ("after",)] += w <= 0.25
                    sums[key + ("before",)] += v
                    sums[key + ("after",)] += w
            print(f"{run:3s} {col}: " + ", ".join(line))
    for runs in ("DE", "C"):
        for n in "24":
            c = met[(runs, n, "cells")]
            if c:
                print(f"runs {runs}, {n} ranks, from 64K: met {met[(runs, n, 'before')]} -> {met[(runs, n, 'after')]} "
                      f"of {c}; mean {100 * sums[(runs, n, 'before')] / c:.1f}% -> {100 * sums[(runs, n, 'after')] / c:.1f}%")




def refit_same(topology):
    """Run C's stand-ins were made before h38's fit rules (a forward curve never rising): ``topology`` fitted again
    on its own probe times with the current rules and its own footprint curve, the "before" of run C (runs D and E:
    h38's stand-ins, which this reproduces exactly)."""
    import ccsynth.bench.profile as prof

    prof.llc_bytes = lambda: 32 << 20
    prof.eviction_bytes = lambda: 4 << 20
    return prof.refit_with_footprint(topology, topology.footprint_curve)


def standin(topology, phi: float):
    """``topology`` (a saved profile with a per-byte footprint curve ``h``) with a share ``phi`` of each footprint's
    extra moved into a per-call cold cost: at each point ``F`` of the curve the small footprint window (2 x 256
    KiB) costs ``(h - 1) * D`` more (``D``: its bytes' time, predicted with the profile's figures); the stand-in
    charges ``phi`` of that once per call (in full from the buffers of the 2 x 64 KiB window, the profile's second
    footprint probe) and ``1 + (1 - phi) (h - 1)`` per byte, then fits the message and forward curves again
    (``refit_with_footprint``). Probes as on the runs' machine (32 MiB L3, 1 MiB L2)."""
    from dataclasses import replace

    import ccsynth.bench.profile as prof
    from ccsynth.topologies.coldcall import ColdCallCost
    from ccsynth.topologies.curve import SizeCurve

    prof.llc_bytes = lambda: 32 << 20
    prof.eviction_bytes = lambda: 4 << 20
    h = topology.footprint_curve
    if h is None or phi == 0:
        return topology
    result = prof._fit_result_of(topology)
    pred = prof._Predictor(topology.n_ranks)
    f = result.fits[0]
    base = prof.Probe(f.pattern, "footprint", prof.BW_WINDOW, prof.FOOTPRINT_MESSAGE, prof.SLICES[0])
    us = []
    for F in h.sizes:
        probe = prof.Probe(f.pattern, "footprint", prof.BW_WINDOW, prof.FOOTPRINT_MESSAGE, prof.SLICES[0],
                           evict_bytes=max(0, int(F) - base.buffer_bytes))
        one, two = (pred.fitted(probe, f, result.call_overhead, result.protocol,
                                footprint=SizeCurve((F,), (x,))) for x in (1.0, 2.0))
        us.append(phi * (h.factor(F) - 1.0) * (two - one))
    new_h = SizeCurve(h.sizes, tuple(1.0 + (1.0 - phi) * (x - 1.0) for x in h.factors))
    return prof.refit_with_footprint(topology, new_h, cold=ColdCallCost(h.sizes, tuple(us), float(replace(base, nbytes=prof.FOOTPRINT_SMALL).buffer_bytes)))


if __name__ == "__main__":
    lo = 0 if "--all" in sys.argv else 64 << 10
    phis = [float(a) for a in sys.argv[1:] if a != "--all"]
    before = evaluate(lambda t, run, n: refit_same(t) if run.startswith("C") else t, lo=lo)
    if not phis:
        show(before)
    for phi in phis:
        print(f"--- phi {phi}")
        show(before, evaluate(lambda t, run, n, phi=phi: standin(t, phi), lo=lo))


def ratios(folder: str, topos, lo: int = 64 << 10) -> dict[str, dict[str, dict[str, float]]]:
    """Per case, per algorithm, per size from ``lo``: measured / predicted."""
    from ccsynth.bench.bench_predict import _results, repredict_cases

    cases = repredict_cases(json.loads((DATA / folder / "cases.json").read_text()), DATA / folder, topos)
    out: dict[str, dict[str, dict[str, float]]] = {}
    for case in cases:
        for kind, run in case["runs"].items():
            col = out.setdefault(("ar" if kind == "allreduce" else "ag") + str(case["n"]), {})
            for algo, rows in _results(run["json"]).items():
                for r in rows:
                    if r.size >= lo and getattr(r, "predicted_us", None):
                        col.setdefault(algo, {})[str(r.size >> 10) + "K"] = r.median_us / r.predicted_us
    return out
