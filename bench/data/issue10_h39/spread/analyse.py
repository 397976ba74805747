"""Run-to-run spread of the plan/default comparison, two runs each way in one session (spread.sh).

Old: one interleaved ``ccsynth bench`` pass of every algorithm (plan / default from the median rows);
new: ``python -m ccsynth.bench.compare`` rounds (median over rounds, verdict against the noise).
Run from the repository root: ``python bench/data/issue10_h39/spread/analyse.py [FOLDER]``.
"""

import json
import sys
from pathlib import Path

import numpy as np

from ccsynth.bench import compare

FOLDER = "bench/data/issue10_h39/spread"


def old(kind: str, rep: int) -> dict[int, float]:
    results = json.loads(Path(f"{FOLDER}/old_{kind}_{rep}.json").read_text())["results"]
    default = {r["size_bytes"]: r["median_us"] for r in results["default"]}
    plan = next(v for k, v in results.items() if k.startswith("plan:"))
    return {r["size_bytes"]: r["median_us"] / default[r["size_bytes"]] for r in plan}


def new(kind: str, rep: int) -> dict[int, compare.Comparison]:
    return {c.size: c for c in compare.from_dict(json.loads(Path(f"{FOLDER}/new_{kind}_{rep}.json").read_text()))}


def pct(xs) -> str:
    return f"{100 * float(np.mean(xs)):.0f}%"


def main() -> None:
    for kind in ("allreduce", "allgather"):
        o1, o2, n1, n2 = old(kind, 1), old(kind, 2), new(kind, 1), new(kind, 2)
        sizes = sorted(o1)
        d_old = [abs(np.log(o1[s] / o2[s])) for s in sizes]
        d_new = [abs(np.log(n1[s].ratio / n2[s].ratio)) for s in sizes]
        flips = sum((o1[s] <= 1) != (o2[s] <= 1) for s in sizes)
        print(f"{kind}: old one pass: plan <= default {pct([o1[s] <= 1 for s in sizes])} / {pct([o2[s] <= 1 for s in sizes])}, "
              f"within 5% {pct([o1[s] <= 1.05 for s in sizes])} / {pct([o2[s] <= 1.05 for s in sizes])}; strict calls "
              f"flipping {flips}; |log r1/r2| median {np.median(d_old):.3f}, 90th {np.quantile(d_old, 0.9):.3f}, "
              f"max {max(d_old):.3f}")
        s1, s2 = compare.share(list(n1.values())), compare.share(list(n2.values()))
        differ = sum(n1[s].verdict != n2[s].verdict for s in sizes)
        print(f"{kind}: new rounds: at least as fast {100 * s1['at_least_as_fast']:.0f}% / {100 * s2['at_least_as_fast']:.0f}%; "
              f"verdicts differing {differ}; |log r1/r2| median {np.median(d_new):.3f}, 90th {np.quantile(d_new, 0.9):.3f}, "
              f"max {max(d_new):.3f}")
        for s in sizes:
            a, b = n1[s], n2[s]
            print(f"  {s:>9}  old {o1[s]:.2f} {o2[s]:.2f}  new {a.ratio:.2f} {b.ratio:.2f}  {a.verdict:>10} {b.verdict:>10}  "
                  f"noise {100 * a.noise:.0f}/{100 * b.noise:.0f}%  same schedule {a.same_schedule}  {a.plan_algorithm}")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        FOLDER = sys.argv[1]
    main()
