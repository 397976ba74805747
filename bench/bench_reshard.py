"""The resharding benchmark (issue 13): Alpa's microbenchmark cases, simulated, against the lower bound.

Alpa (MLSys'23) measures cross-mesh resharding of a 1024x1024x512 float32
tensor (2 GiB) between meshes (2,4)->(2,4) and (2,4)->(3,4), one-to-many and
many-to-many, with and without replication, on hosts with one NIC each. Here
every case is planned by ``naive``, ``broadcast`` and ``milp``, verified,
and simulated on two machine models with one NIC per host:

* ``shared_nic:NxG`` (the catalog's :func:`~ccsynth.topologies.catalog.shared_nic`):
  ``N`` hosts of ``G`` GPUs on a switch of 150 GB/s per GPU (NVLink-class),
  one 100 Gb/s (12.5 GB/s) NIC per host shared by its GPUs, InfiniBand
  latency and per-message overhead as in the catalog; ``G`` = 4 is Alpa's
  own setting (4 GPUs and one NIC per host);
* ``ndv2xN``: the catalog's Azure NDv2, 8 V100 per host on a cube mesh, one
  12.5 GB/s NIC per host.

The source mesh sits on the first hosts and the destination mesh on the
next ones (pipeline stages). One row per (machine, case, planner):
simulated time, lower bound (the bytes through the busiest host NIC or
rank), gap, speedup over naive, planning seconds.

Run (prints a Markdown table; ``--json FILE`` also saves the rows)::

    python -m ccsynth.bench.bench_reshard
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time

from ccsynth.atomic import write_text
from ccsynth.collectives.verify import verify
from ccsynth.formats.files import get_topology
from ccsynth.synth.reshard.planner import PLANNERS, place_meshes, plan_reshard
from ccsynth.synth.reshard.task import ReshardTask
from ccsynth.synth.simulate import simulate
from ccsynth.topologies.model import Topology

__all__ = ["CASES", "SHAPE", "machine", "bench_case", "main"]

SHAPE = (1024, 1024, 512)
#: (source mesh, source spec, destination mesh, destination spec, what Alpa calls it)
CASES = (
    ((2, 4), "S0,R,R", (2, 4), "R,S1,R", "many-to-many, replicated"),
    ((2, 4), "R,R,R", (2, 4), "S0,R,R", "one-to-many (source replicated)"),
    ((2, 4), "S01,R,R", (2, 4), "R,S01,R", "many-to-many, no replication"),
    ((2, 4), "S0,R,R", (2, 4), "R,R,R", "to a replicated tensor"),
    ((2, 4), "S0,R,R", (3, 4), "R,S1,R", "many-to-many, replicated"),
    ((2, 4), "R,R,R", (3, 4), "S0,R,R", "one-to-many (source replicated)"),
    ((2, 4), "S01,R,R", (3, 4), "R,S01,R", "many-to-many, no replication"),
    ((2, 4), "S0,R,R", (3, 4), "R,R,R", "to a replicated tensor"),
)
def machine(gpus: int, ranks: int) -> Topology:
    """The benchmark's machine for ``ranks`` ranks: ``ndv2xN`` for 8 GPUs per host, else ``shared_nic:NxG``."""
    hosts = math.ceil(ranks / gpus)
    return get_topology(f"ndv2x{hosts}" if gpus == 8 else f"shared_nic:{hosts}x{gpus}")


def bench_case(topo: Topology, case, planner: str) -> dict:
    sm, sspec, dm, dspec, what = case
    src, dst = place_meshes(sm, dm, topology=topo)
    task = ReshardTask.of(SHAPE, "float32", src, sspec, dst, dspec)
    t0 = time.perf_counter()
    sched = plan_reshard(task, topo, planner=planner)
    seconds = time.perf_counter() - t0
    verify(sched, topo)
    r = simulate(sched, topo, task.nbytes)
    return {"topology": topo.name, "src": f"{'x'.join(map(str, sm))} {sspec}", "dst": f"{'x'.join(map(str, dm))} {dspec}",
            "case": what, "planner": planner, "time_us": r.time_us, "lower_bound_us": r.lower_bound_us,
            "gap": r.gap, "plan_seconds": seconds, "ops": len(sched.ops), "bound": r.bound_which}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ccsynth.bench.bench_reshard", description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", default="4,8", help="GPUs per host, comma separated (default 4,8)")
    ap.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    args = ap.parse_args(argv)
    print(f"load average before: {os.getloadavg()[0]:.2f}", file=sys.stderr)
    rows = []
    print("| machine | source | destination | case | planner | simulated (ms) | bound (ms) | gap | vs naive | "
          "planning (s) |")
    print("|---|---|---|---|---|---:|---:|---:|---:|---:|")
    for gpus in (int(g) for g in args.gpus.split(",")):
        for case in CASES:
            topo = machine(gpus, math.prod(case[0]) + math.prod(case[2]))
            naive = None
            for planner in PLANNERS:
                row = bench_case(topo, case, planner)
                naive = naive or row["time_us"]
                row["speedup"] = naive / row["time_us"]
                rows.append(row)
                print(f"| {row['topology']} | {row['src']} | {row['dst']} | {row['case']} | {planner} | "
                      f"{row['time_us'] / 1e3:.2f} | {row['lower_bound_us'] / 1e3:.2f} | {row['gap']:.3f} | "
                      f"{row['speedup']:.2f}x | {row['plan_seconds']:.2f} |", flush=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}", file=sys.stderr)
    if args.json:
        write_text(args.json, json.dumps(rows, indent=1) + "\n", what="results")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
