"""h49-probes, run F what-if (from the repository root, PYTHONPATH=$PWD): run F's 2-rank profile with footprint curves
that agree with its measured points (1.5 MiB x1.0, 62 MiB x3.80, 124 MiB x4.73, ...) but differ between 1.5 and 62
MiB; its message and forward curves fitted again with each (refit_with_footprint), then
``python -m ccsynth.bench.bench_predict --repredict bench/data/issue10_runF/r2 --topology`` each."""

import subprocess
import sys
import tempfile
from pathlib import Path

from ccsynth.bench.profile import refit_with_footprint
from ccsynth.topologies.curve import SizeCurve
from ccsynth.topologies.io import load_topology, topology_to_json

M = float(1 << 20)
OUT = Path(tempfile.mkdtemp())
t = load_topology("bench/data/issue10_runF/r2/machine2.json")
fp = t.footprint_curve
variants = {"as profiled (2 points)": fp}
for knee in (8, 16, 32):
    variants[f"flat to {knee} MiB"] = SizeCurve((fp.sizes[0], knee * M) + fp.sizes[1:], (1.0, 1.0) + fp.factors[1:])
for name, curve in variants.items():
    path = OUT / f"v_{name.split()[0]}_{name.split()[-2]}.json"
    out = refit_with_footprint(t, curve, cold=t.cold_call)
    path.write_text(topology_to_json(out))
    rep = subprocess.run([sys.executable, "-m", "ccsynth.bench.bench_predict", "--repredict",
                          "bench/data/issue10_runF/r2", "--topology", str(path)], capture_output=True, text=True).stdout
    print(name, "| message curve at 1M/4M/16M:", [round(out.message_curve.factor(m * M), 2) for m in (1, 4, 16)],
          "| footprint factor at 28 MiB", round(curve.factor(28 * M), 2))
    for line in rep.splitlines()[:16]:
        if line.startswith(("| 64K", "| 512K", "| 4M")):
            print("   ", line)
