"""h49-probes, run F what-if (run from the repository root with PYTHONPATH=$PWD): run F's 2-rank profile with footprint curves that agree with its measured points (1.5 MiB x1.0,
62 MiB x3.80, 124 MiB x4.73, ...) but differ between 1.5 and 62 MiB; message/forward curves refitted
(refit_with_footprint), then python -m ccsynth.bench.bench_predict --repredict run F --topology each."""
import subprocess, sys, tempfile
from ccsynth.topologies.io import load_topology, topology_to_json
from ccsynth.topologies.curve import SizeCurve
from ccsynth.bench.profile import refit_with_footprint
M = float(1 << 20)
OUT = tempfile.mkdtemp()
t = load_topology("bench/data/issue10_runF/r2/machine2.json")
fp = t.footprint_curve
assert refit_with_footprint(t, fp, cold=t.cold_call).message_curve is not None
variants = {"as profiled (2 points)": fp}
for knee in (8, 16, 32):
    sizes = (fp.sizes[0], knee * M) + fp.sizes[1:]
    variants[f"flat to {knee} MiB"] = SizeCurve(sizes, (1.0, 1.0) + fp.factors[1:])
for name, curve in variants.items():
    path = f"{OUT}/v_{name.split()[0]}_{name.split()[-2]}.json"
    out = refit_with_footprint(t, curve, cold=t.cold_call)
    open(path, "w").write(topology_to_json(out))
    rep = subprocess.run([sys.executable, "-m", "ccsynth.bench.bench_predict", "--repredict", "bench/data/issue10_runF/r2",
                          "--topology", path], capture_output=True, text=True).stdout
    lines = [l for l in rep.splitlines() if l.startswith("| ") and ("K" in l or "M" in l)][:3]
    print(name, "| msg 1M/4M/16M:", [round(out.message_curve.factor(m * M), 2) for m in (1, 4, 16)],
          "| h(28M)", round(curve.factor(28 * M), 2))
    for l in rep.splitlines()[:16]:
        if l.startswith("| 64K") or l.startswith("| 512K") or l.startswith("| 4M"):
            print("   ", l)
