"""The synthesis benchmark (issue 3): synthesis time and simulated quality on the catalog machines.

For every topology, collective and message size: synthesize with the
default settings (default sketches, HiGHS, no time limit given), then
simulate the schedule and every applicable baseline (each at chunk factors
1, the synthesized schedule's, and for allreduce ``n``) at that size, and
compute the lower bound. One row per case:

``topology, collective, size, synthesis seconds, simulated us, best baseline (us, name), speedup over it,
lower bound (us), gap (time / bound), ops, sketch``

Run (prints a Markdown table; ``--json FILE`` also saves the rows)::

    python -m ccsynth.bench.bench_synth
    python -m ccsynth.bench.bench_synth --topologies dgx1,ndv2x2 --collectives allgather --sizes 1K,64M

The machine's load average is printed before and after (the 2-core
development machine is shared), since synthesis time depends on it.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time

from ccsynth.atomic import write_text
from ccsynth.collectives.spec import Collective
from ccsynth.formats.files import get_topology
from ccsynth.units import format_size, parse_sizes

__all__ = ["TOPOLOGIES", "COLLECTIVES", "SIZES", "bench_case", "markdown", "main"]

TOPOLOGIES = ("dgx1", "dgx2", "ndv2x2", "dgx_a100x4", "ndv2x10")
COLLECTIVES = ("allgather", "reduce_scatter", "allreduce", "alltoall")
SIZES = "1K,1M,64M"


def bench_case(topology, kind: str, size: int, options=None) -> dict:
    """Synthesize one case and measure it; returns a row (dict)."""
    from ccsynth.synth.simulate import simulate
    from ccsynth.synth.synthesize import SynthReport, synthesize

    t0 = time.perf_counter()
    report = SynthReport()
    sched = synthesize(topology, Collective(kind, topology.n_ranks), options=options, size_bytes=size, report=report)
    seconds = time.perf_counter() - t0
    r = simulate(sched, topology, size)
    base = report.baselines[0] if report.baselines else None
    sk = sched.meta.get("sketch") or {}
    return {
        "topology": topology.name,
        "n_ranks": topology.n_ranks,
        "collective": kind,
        "size_bytes": size,
        "synthesis_s": seconds,
        "time_us": r.time_us,
        "busbw": r.busbw,
        "lower_bound_us": r.lower_bound_us,
        "gap": r.gap,
        "baseline": None if base is None else base["name"],
        "baseline_chunk_factor": None if base is None else base["chunk_factor"],
        "baseline_us": None if base is None else base["time_us"],
        "speedup": None if base is None else base["time_us"] / r.time_us,
        "chosen": report.chosen,
        "ops": len(sched.ops),
        "chunk_factor": sched.collective.chunk_factor,
        "sketch": f"{sk.get('name', '?')} c={sk.get('chunk_factor')} detours={sk.get('detours')}"
                  + (" ring" if (sk.get("internode") or {}).get("ring") else ""),
        "strategy": sched.name,
    }


def markdown(rows: list[dict]) -> str:
    head = ("| topology | collective | size | synth (s) | simulated (us) | best baseline (us) | speedup | "
            "lower bound (us) | gap | ops |")
    lines = [head, "|" + "---|" * 10]
    for r in rows:
        base = "-" if r["baseline_us"] is None else f"{r['baseline_us']:.2f} ({r['baseline']}, c={r['baseline_chunk_factor']})"
        sp = "-" if r["speedup"] is None else f"{r['speedup']:.2f}x"
        lines.append(f"| {r['topology']} | {r['collective']} | {format_size(r['size_bytes'])} | {r['synthesis_s']:.1f} | "
                     f"{r['time_us']:.2f} | {base} | {sp} | {r['lower_bound_us']:.2f} | {r['gap']:.3f} | {r['ops']} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m ccsynth.bench.bench_synth", description=__doc__.split("\n\n")[0])
    p.add_argument("--topologies", default=",".join(TOPOLOGIES), help=f"comma-separated (default {','.join(TOPOLOGIES)})")
    p.add_argument("--collectives", default=",".join(COLLECTIVES), help="comma-separated")
    p.add_argument("--sizes", default=SIZES, help=f"sizes (default {SIZES})")
    p.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    p.add_argument("-v", "--verbose", action="store_true", help="log synthesis progress to stderr")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, stream=sys.stderr,
                        format="%(levelname)s %(name)s: %(message)s")
    sizes = parse_sizes(args.sizes)
    load0 = os.getloadavg()
    print(f"# load average before: {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f} on {os.cpu_count()} cores", flush=True)
    rows = []
    for tname in args.topologies.split(","):
        topo = get_topology(tname.strip())
        for kind in args.collectives.split(","):
            for size in sizes:
                row = bench_case(topo, kind.strip(), size)
                row["load_1min"] = os.getloadavg()[0]
                rows.append(row)
                print(f"{row['topology']:11s} {row['collective']:14s} {format_size(size):>4s} synth {row['synthesis_s']:7.1f}s "
                      f"sim {row['time_us']:11.2f}us base {row['baseline_us'] or float('nan'):11.2f}us "
                      f"speedup {row['speedup'] or float('nan'):5.2f}x gap {row['gap']:6.3f} load {row['load_1min']:.1f}",
                      file=sys.stderr, flush=True)
                if args.json:
                    write_text(args.json, json.dumps(rows, indent=1))
    load1 = os.getloadavg()
    print(markdown(rows))
    print(f"# load average after: {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
