"""h51-mid: run G's 4-rank rows at 32-512 KiB predicted on the refitted profile with one term taken out at a time
(the shared port, the forward curve, the cold call cost, the round cost, the rendezvous step).
Usage (from the repository root): ``python bench/data/issue10_h51/decompose.py``."""

import json
from dataclasses import replace
from pathlib import Path

from ccsynth.bench.bench_predict import _results, repredict_cases
from ccsynth.bench.profile import fit_profile
from ccsynth.bench.profile_raw import load_raw

FOLDER = Path("bench/data/issue10_runG/r4")
K = 1024
SIZES = (32 * K, 64 * K, 128 * K, 256 * K, 512 * K)


def main() -> None:
    base = fit_profile(load_raw(FOLDER / "raw4.json")).topology
    variants = {"all terms": base, "no port": replace(base, shared_ports=()),
                "no forward curve": replace(base, forward_curve=None), "no cold call": replace(base, cold_call=None),
                "no round cost": replace(base, round_cost=None), "no rendezvous step": replace(base, rendezvous_alpha=0.0)}
    cases = json.loads((FOLDER / "cases.json").read_text())
    results = {name: repredict_cases(cases, FOLDER, [t]) for name, t in variants.items()}
    print("measured / predicted")
    for ci, case in enumerate(cases):
        for kind in case["runs"]:
            print(f"== {kind} {case['n']}r: " + " | ".join(variants))
            per = {name: _results(res[ci]["runs"][kind]["json"]) for name, res in results.items()}
            first = per["all terms"]
            for algo, rows in first.items():
                for j, r in enumerate(rows):
                    if r.size not in SIZES or not getattr(r, "predicted_us", None):
                        continue
                    ratios = [r.median_us / per[name][algo][j].predicted_us for name in variants]
                    print(f"  {algo:20s} {r.size // K:4d}K  " + "  ".join(f"{x:4.2f}" for x in ratios))


if __name__ == "__main__":
    main()
