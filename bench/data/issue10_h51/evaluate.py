"""h51-mid: median |measured / predicted - 1| per size band of runs G, F and E, before and after the share rule.

*before*: each run's saved profile (``machineN.json``), as ``--repredict`` predicts with it today;
*after*: run G's profiles fitted again from their probe times (``raw{N}.json``, :func:`fit_profile`: what
``ccsynth topo refit`` writes), runs F's and E's (no probe times saved) with :func:`prune_message_curve`.
Usage (from the repository root): ``python bench/data/issue10_h51/evaluate.py [--save DIR] [NAME=VALUE ...]``
(``NAME=VALUE``: set a constant of ``ccsynth.bench.profile`` first, e.g. ``CURVE_MIN_SHARE=0.33``).
"""

import argparse
import json
from pathlib import Path

import ccsynth.bench.profile as P
from ccsynth.bench.bench_predict import _results, repredict_cases
from ccsynth.bench.predict import error_table
from ccsynth.bench.profile_raw import load_raw
from ccsynth.topologies.io import load_topology, topology_to_dict

BIG = ("64K-256K", "512K-2M", "4M-16M")


def bands(after: bool, save: Path | None) -> dict:
    out = {}
    for run in "GFE":
        for sub in ("r2", "r4", "tuned"):
            folder = Path(f"bench/data/issue10_run{run}/{sub}")
            cases = json.loads((folder / "cases.json").read_text())
            topos = []
            for c in cases:
                n = c["n"]
                t = load_topology(folder / f"machine{n}.json")
                if after:
                    raw = folder / f"raw{n}.json"
                    t = P.fit_profile(load_raw(raw)).topology if raw.exists() else P.prune_message_curve(t)
                    if save:
                        (save / f"run{run}_{sub}").mkdir(parents=True, exist_ok=True)
                        (save / f"run{run}_{sub}" / f"machine{n}.json").write_text(json.dumps(topology_to_dict(t), indent=1))
                topos.append(t)
            for c in repredict_cases(cases, folder, topos):
                for kind, r in c["runs"].items():
                    out[f"{run} {sub} {kind}{c['n']}"] = [(e.label, e.median) for e in error_table(_results(r["json"]))]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--save", type=Path, help="write the 'after' profiles here")
    ap.add_argument("--json", type=Path, help="write both band tables here")
    ap.add_argument("set", nargs="*")
    args = ap.parse_args()
    before = bands(False, None)
    for kv in args.set:
        k, v = kv.split("=")
        setattr(P, k, float(v))
    after = bands(True, args.save)
    met = [0, 0]
    total = 0
    for k in before:
        cells = []
        for (label, b), (_, a) in zip(before[k], after[k]):
            target = 0.25 if label in BIG else 0.5
            if label in BIG:
                total += 1
                met[0] += b <= target
                met[1] += a <= target
            flag = " LOST" if b <= target < a else (" gained" if a <= target < b else "")
            if abs(a - b) >= 0.005:
                cells.append(f"{label} {100 * b:.0f}->{100 * a:.0f}%{flag}")
        print(f"{k:22s} " + "; ".join(cells))
    print(f"band cells from 64 KiB meeting 25%: {met[0]} -> {met[1]} of {total}")
    if args.json:
        args.json.write_text(json.dumps({"before": before, "after": after}, indent=0))


if __name__ == "__main__":
    main()
