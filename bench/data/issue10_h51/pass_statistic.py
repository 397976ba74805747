"""h51-mid (tried, not kept): run G's profiles fitted from their raw probe times with another statistic of a probe's
passes than the fastest (the mean of the two fastest, the median), then its rows predicted: the bands from 1K up
(min / mean2 / median). Usage (from the repository root): ``python bench/data/issue10_h51/pass_statistic.py``."""

import json
from dataclasses import replace
from pathlib import Path

import numpy as np

from ccsynth.bench.bench_predict import _results, repredict_cases
from ccsynth.bench.predict import error_table
from ccsynth.bench.profile import fit_profile
from ccsynth.bench.profile_raw import load_raw

STATS = {"min": min, "mean2": lambda v: float(np.mean(sorted(v)[:2])), "median": lambda v: float(np.median(v))}


def main() -> None:
    res: dict[str, dict] = {}
    for sub in ("r2", "r4", "tuned"):
        folder = Path(f"bench/data/issue10_runG/{sub}")
        cases = json.loads((folder / "cases.json").read_text())
        for sname, st in STATS.items():
            topos = []
            for c in cases:
                raw = load_raw(folder / f"raw{c['n']}.json")
                raw = replace(raw, probe_us=tuple((p, (st(ts),)) for p, ts in raw.probe_us))
                topos.append(fit_profile(raw).topology)
            for c in repredict_cases(cases, folder, topos):
                for kind, r in c["runs"].items():
                    res.setdefault(f"{sub} {kind}{c['n']}", {})[sname] = [
                        (e.label, e.median) for e in error_table(_results(r["json"]))]
    for k, d in res.items():
        labels = [lab for lab, _ in d["min"]]
        print(k, " | ".join(f"{lab}: " + "/".join(f"{100 * d[s][i][1]:.0f}" for s in STATS)
                            for i, lab in enumerate(labels) if i >= 3))


if __name__ == "__main__":
    main()
