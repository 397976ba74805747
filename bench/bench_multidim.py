"""The multi-dimension benchmark (issue 12): fixed order, Themis and the LP side by side, 16 to 4,096 ranks.

For every topology of the suite (2D to 4D, equal and unequal bandwidths, the
NDv2 and DGX A100 machines seen as two dimensions) and every size, each
scheduler of :mod:`ccsynth.synth.multidim` schedules an allreduce at its
own best chunk count; the dimension-level model times it (it matches the
event-driven simulator within 5% up to 128 ranks: ``tests/test_multidim.py``).
One row per case:

``topology, ranks, size, bandwidth bound, the fixed order's load imbalance, then per scheduler (fixed,
themis, themis-flex, lp): time (us) and utilization (bound / time), Themis's and the LP's speedup over the
fixed order, Themis's over the fixed order at Themis's own chunk count, the LP's time over its own bound,
over its pipelined bound and over its rounded bound, and each scheduler's scheduling time (s)``

Which topologies are *imbalanced* is Themis's criterion, not the
bandwidths': the paper calls a system imbalanced when the baseline's fixed
dimension order loads the dimensions unevenly against their bandwidths, so
that some dimensions idle while the busiest one works. Here that is the
*load imbalance* (:func:`~ccsynth.synth.multidim.lp.load_imbalance`): the
busiest dimension's bytes time under the fixed order over the bandwidth
bound (the same bytes split over dimension orders as evenly as possible).
A topology is imbalanced when it exceeds 1 (by more than
:data:`IMBALANCE_TOLERANCE`, rounding): where it is 1 the fixed order is
already balanced and no scheduler can gain anything in bandwidth terms.
Unequal bandwidths are neither necessary nor sufficient: ``4x4@100,100``
(equal) is imbalanced 1.6x, ``4x4@200,50`` and the NVLink x NIC machines
(unequal) not at all. The summary also gives the means over the topologies
with unequal bandwidths (the suite's former grouping), for comparison.

The *fixed order at Themis's chunk count* is the paper's baseline: in
Themis's artifact (ASTRA-sim, ``Sys.cc``: ``preferred-dataset-splits``,
inter-dimension scheduling ``baseline``) the baseline splits the collective
into the same number of chunks as Themis and pipelines them through the
dimensions in ascending order (all-gather reversed), like ours; ``fixed``
in the table is the stronger one, at its own best chunk count.

The *bandwidth bound* (:func:`~ccsynth.synth.multidim.lp.bandwidth_bound`)
is the least time the busiest dimension needs for its bytes, over every
split of the data among dimension orders (no latency): utilization 1.0
means every byte crossed its dimension at full rate with the dimensions
perfectly balanced. The LP's *own bound* is the optimum of its lattice LP
at the chunk count it chose (phases charged what they occupy their
dimension whatever overlaps them); its *pipelined bound*
(:func:`~ccsynth.synth.multidim.lp.pipelined_bound`) adds the pipeline's
fill and drain that every schedule of that many chunks pays (a dimension no
chunk starts on waits one first phase, and idles one last phase); its
*rounded bound* (:func:`~ccsynth.synth.multidim.lp.rounded_bound`) is the
own bound with a whole number of chunks on every lattice edge (a small
MILP): the best balance a schedule of that many equal chunks can have
(``n/a`` where the LP's winner has chunks of unequal size).

Run (prints Markdown tables and the targets' figures; ``--json FILE`` also saves the rows)::

    python -m ccsynth.bench.bench_multidim
    python -m ccsynth.bench.bench_multidim --topologies hierarchical:4x8x4@200,100,50 --sizes 1M,1G

The machine's load average is printed before and after (the 2-core
development machine is shared), since scheduling time depends on it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time

from ccsynth.atomic import write_text
from ccsynth.formats.files import get_topology
from ccsynth.synth.multidim import POLICIES, dim_net, schedule_multidim
from ccsynth.synth.multidim.cost import PhaseCosts
from ccsynth.synth.multidim.losses import dimension_losses, startup_optimum
from ccsynth.synth.multidim.lp import bandwidth_bound, fixed_order_load, pipelined_bound, rounded_bound
from ccsynth.tolerance import is_greater
from ccsynth.units import format_size, parse_sizes

__all__ = ["SUITE", "SIZES", "IMBALANCE_TOLERANCE", "bench_case", "summarize", "main"]

#: (topology, equal bandwidths?) -- 2D to 4D, 16 to 4,096 ranks. The last two are Themis's own kind of system: the
#: sample hierarchical network of its artifact (ASTRA-sim, ``astra-sim/astra-sim``:
#: ``inputs/network/analytical/sample_Hierarchical.json``, renamed ``sample_Ring_FullyConnected_Ring.json`` and
#: unchanged at tag ``tutorial-isca2022``: Ring(2) x FullyConnected(8) x Ring(2), 2, 7 and 1 links per NPU at 250,
#: 25 and 12.5 GB/s, i.e. 250, 175 and 12.5 GB/s per NPU) and its 4D Ring-FullyConnected-Ring-Switch extension (a
#: ring of 8 on two 25 GB/s links per NPU). The paper's own table of systems (ISCA'22) could not be retrieved, so
#: none of them is here (docs/results.md). The flag is the bandwidths', kept for comparison; which
#: topologies are *imbalanced* is computed (:func:`~ccsynth.synth.multidim.lp.load_imbalance`, module docstring).
SUITE: tuple[tuple[str, bool], ...] = (
    ("hierarchical:4x4@100,100", True),
    ("hierarchical:4x4@200,50", False),
    ("hierarchical:8x16@200,50", False),
    ("ndv2x16", False),
    ("dgx_a100x16", False),
    ("hierarchical:4x8x4@200,100,50", False),
    ("hierarchical:8x8x8@100,100,100", True),
    ("hierarchical:16x8x8@400,100,50", False),
    ("hierarchical:4x4x4x4@100,100,100,100", True),
    ("hierarchical:2x8x8x8@250,200,100,50", False),
    ("hierarchical:8x8x8x8@400,200,100,50", False),
    ("hierarchical:2x8x2@250,175,12.5", False),
    ("hierarchical:2x8x8x8@250,175,50,12.5", False),
)
SIZES = "1M,64M,1G"
#: a topology is imbalanced when the fixed order's load exceeds the bandwidth bound by more than this (rounding)
IMBALANCE_TOLERANCE = 1e-3


def bench_case(topology: str, size: int, kind: str = "allreduce") -> dict:
    """Every scheduler on one topology and size (see the module docstring)."""
    topo = get_topology(topology)
    net = dim_net(topo)
    costs = PhaseCosts(net)
    bound = bandwidth_bound(net, costs, kind, size)
    imbalance = fixed_order_load(net, costs, kind, size) / bound
    scheds: dict[str, dict] = {}
    mds = {}
    row: dict = {"topology": topology, "ranks": topo.n_ranks, "dims": len(net.dims), "size_bytes": size,
                 "kind": kind, "bound_us": bound, "load_imbalance": imbalance,
                 "imbalanced": is_greater(imbalance, 1.0, IMBALANCE_TOLERANCE), "schedulers": scheds}
    for policy in POLICIES:
        t0, c0 = time.perf_counter(), time.process_time()
        md = schedule_multidim(net, kind, size, policy)
        secs, cpu = time.perf_counter() - t0, time.process_time() - c0
        mds[policy] = md
        scheds[policy] = {"time_us": md.makespan_us, "utilization": bound / md.makespan_us,
                                     "chunks": md.n_chunks, "seconds": secs, "cpu_seconds": cpu, "lp_bound_us": md.lp_bound_us,
                                     "origin": md.origin,
                                     "busy": list(md.timing.busy_fraction())}
    s = scheds
    # the paper's baseline: the fixed order cut into as many chunks as Themis chose
    same = schedule_multidim(net, kind, size, "fixed", chunks=s["themis"]["chunks"])
    row["fixed_at_themis_chunks_us"] = same.makespan_us
    row["themis_vs_fixed_at_themis_chunks"] = same.makespan_us / s["themis"]["time_us"]
    row["themis_vs_fixed"] = s["fixed"]["time_us"] / s["themis"]["time_us"]
    row["lp_vs_fixed"] = s["fixed"]["time_us"] / s["lp"]["time_us"]
    row["lp_vs_themis"] = s["themis"]["time_us"] / s["lp"]["time_us"]
    lp_md = mds["lp"]
    lp_chunks = lp_md.chunks
    lp_bound = s["lp"]["lp_bound_us"]
    row["lp_over_own_bound"] = s["lp"]["time_us"] / lp_bound if lp_bound else float("nan")
    # the own bound plus the fill and drain every schedule of the LP's chunk count pays
    row["lp_pipelined_bound_us"] = pipelined_bound(net, costs, kind, size, lp_chunks)
    row["lp_over_pipelined_bound"] = s["lp"]["time_us"] / row["lp_pipelined_bound_us"]
    # the own bound with whole chunks per lattice edge (a MILP): for equal chunks only
    equal = len({c.units for c in lp_chunks}) == 1
    row["lp_rounded_bound_us"] = rounded_bound(net, costs, kind, size, len(lp_chunks)) if equal else None
    row["lp_over_rounded_bound"] = s["lp"]["time_us"] / row["lp_rounded_bound_us"] if equal else None
    # where the LP's time goes per dimension, and what a re-split could reach if each dimension kept its fill,
    # drain and exposed costs (ccsynth.synth.multidim.losses; as many equal chunks as the LP's winner has: a ring
    # phase's floor pays its latency once per chunk, a direct phase's is its bytes)
    losses = dimension_losses(costs, lp_md.timing)
    row["lp_losses"] = [x.to_dict() for x in losses]
    row["lp_startup_optimum_us"] = startup_optimum(costs, kind, size, len(lp_chunks), losses)
    return row


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def _group_means(rows: list[dict], tag: str) -> dict[str, float]:
    """Mean speedups over the fixed order (and the bound's ceiling) of ``rows``, keys suffixed ``_tag``."""
    if not rows:
        return {}

    def over_fixed(policy: str) -> float:
        return _mean([r["schedulers"]["fixed"]["time_us"] / r["schedulers"][policy]["time_us"] for r in rows])

    return {
        f"themis_vs_fixed_{tag}": over_fixed("themis"),
        f"themis_flex_vs_fixed_{tag}": over_fixed("themis-flex"),
        f"lp_vs_fixed_{tag}": over_fixed("lp"),
        f"themis_vs_fixed_at_themis_chunks_{tag}": _mean([r["themis_vs_fixed_at_themis_chunks"] for r in rows]),
        f"ceiling_vs_fixed_{tag}": _mean([r["schedulers"]["fixed"]["time_us"] / r["bound_us"] for r in rows]),
        f"n_{tag}": len(rows),
    }


def summarize(rows: list[dict], equal_bw: dict[str, bool]) -> dict[str, float | int | bool]:
    """The targets' figures (issue 12's Benchmark section).

    Means of Themis's (and flex's, and the LP's) speedup over the fixed
    order, over the *imbalanced* topologies (Themis's criterion, see the
    module docstring: ``imbalanced_*``), all sizes and per size; the same
    against the paper's baseline (the fixed order at Themis's chunk count:
    ``themis_vs_fixed_at_themis_chunks_*``); and, for comparison, over the
    topologies with unequal bandwidths (``unequal_bw_*``). ``ceiling_*`` is
    the mean of ``fixed time / bandwidth bound``: what no schedule of
    per-dimension phases can exceed over the fixed order (utilization 1.0).
    """
    imb = [r for r in rows if r["imbalanced"]]
    unequal = [r for r in rows if not equal_bw.get(r["topology"], False)]
    big = [r for r in rows if r["size_bytes"] >= 1 << 30]
    largest = max((r["ranks"] for r in rows), default=0)
    at_largest = [r for r in rows if r["ranks"] == largest]
    out: dict[str, float | int | bool] = {
        "imbalanced_topologies": len({r["topology"] for r in imb}),
        **_group_means(imb, "imbalanced"),
    }
    for size in sorted({r["size_bytes"] for r in rows}):
        out.update(_group_means([r for r in imb if r["size_bytes"] == size], f"imbalanced_{format_size(size)}"))
    out.update(_group_means(unequal, "unequal_bw"))
    for size in sorted({r["size_bytes"] for r in rows}):
        out.update(_group_means([r for r in unequal if r["size_bytes"] == size], f"unequal_bw_{format_size(size)}"))
    out.update({
        "lp_never_worse_than_themis": all(r["lp_vs_themis"] >= 1 - 1e-9 for r in rows),
        "lp_over_own_bound_1g_max": max((r["lp_over_own_bound"] for r in big), default=float("nan")),
        "lp_over_own_bound_1g_mean": _mean([r["lp_over_own_bound"] for r in big]),
        "lp_within_2pct_of_own_bound_1g": sum(1 for r in big if r["lp_over_own_bound"] <= 1.02),
        "lp_over_pipelined_bound_1g_max": max((r["lp_over_pipelined_bound"] for r in big), default=float("nan")),
        "lp_over_pipelined_bound_1g_mean": _mean([r["lp_over_pipelined_bound"] for r in big]),
        "lp_within_2pct_of_pipelined_bound_1g": sum(1 for r in big if r["lp_over_pipelined_bound"] <= 1.02),
        "lp_rounded_over_own_bound_1g_max": max((r["lp_rounded_bound_us"] / r["schedulers"]["lp"]["lp_bound_us"]
                                                 for r in big if r["lp_rounded_bound_us"]), default=float("nan")),
        "cases_1g": len(big),
        "largest_ranks": largest,
        "largest_scheduling_seconds_max": max((s["seconds"] for r in at_largest for s in r["schedulers"].values()),
                                              default=float("nan")),
        "largest_scheduling_cpu_seconds_max": max(
            (s["cpu_seconds"] for r in at_largest for s in r["schedulers"].values()), default=float("nan")),
    })
    return out


def _markdown(rows: list[dict]) -> str:
    head = ["topology", "ranks", "size", "load imbalance", "bound (us)"]
    for p in POLICIES:
        head += [f"{p} (us)", "util"]
    head += ["themis/fixed", "themis/fixed at its c", "lp/fixed", "lp/own bound", "lp/pipelined bound",
             "lp/rounded bound", "sched s wall (fixed/themis/flex/lp)", "lp sched s CPU"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        s = r["schedulers"]
        cells = [f"`{r['topology']}`", str(r["ranks"]), format_size(r["size_bytes"]),
                 f"{r['load_imbalance']:.2f}" + ("" if r["imbalanced"] else " (balanced)"), f"{r['bound_us']:.1f}"]
        for p in POLICIES:
            cells += [f"{s[p]['time_us']:.1f}", f"{s[p]['utilization']:.2f}"]
        cells += [f"{r['themis_vs_fixed']:.2f}x", f"{r['themis_vs_fixed_at_themis_chunks']:.2f}x",
                  f"{r['lp_vs_fixed']:.2f}x", f"{r['lp_over_own_bound']:.3f}", f"{r['lp_over_pipelined_bound']:.3f}",
                  "n/a" if r["lp_over_rounded_bound"] is None else f"{r['lp_over_rounded_bound']:.3f}",
                  "/".join(f"{s[p]['seconds']:.2f}" for p in POLICIES), f"{s['lp']['cpu_seconds']:.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _losses_markdown(rows: list[dict]) -> str:
    """Where the LP's time goes (see :mod:`ccsynth.synth.multidim.losses`): per dimension, floor + exposed /
    fill / idle / drain (us), and the start-up-aware optimum of a re-split."""
    head = ["topology", "size", "lp (us)", "chunks", "origin", "own bound T* (us)", "start-up-aware optimum (us)",
            "lp / it", "per dimension: floor + exposed / fill / idle / drain (us)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        lp = r["schedulers"]["lp"]
        dims = "; ".join(f"{x['dim']}: {x['floor_us']:.0f} + {x['exposed_us']:.0f} / {x['fill_us']:.0f} / "
                         f"{x['idle_us']:.0f} / {x['drain_us']:.0f}" for x in r["lp_losses"])
        cells = [f"`{r['topology']}`", format_size(r["size_bytes"]), f"{lp['time_us']:.1f}", str(lp["chunks"]),
                 lp["origin"], f"{lp['lp_bound_us']:.1f}", f"{r['lp_startup_optimum_us']:.1f}",
                 f"{lp['time_us'] / r['lp_startup_optimum_us']:.3f}", dims]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ccsynth.bench.bench_multidim", description=__doc__.split("\n")[0])
    ap.add_argument("--topologies", default=None,
                    help="comma-separated specs, e.g. hierarchical:4x4@100,100,dgx_a100x16 (default: the suite)")
    ap.add_argument("--sizes", default=SIZES, help=f"sizes (default {SIZES})")
    ap.add_argument("--json", default=None, metavar="FILE", help="also save the rows and the summary as JSON")
    args = ap.parse_args(argv)
    suite = dict(SUITE)
    # a spec's bandwidths are comma-separated too: split only before a name (or a path)
    names = re.split(r",(?=[A-Za-z_./])", args.topologies) if args.topologies else [t for t, _ in SUITE]
    sizes = parse_sizes(args.sizes)
    print(f"# load average before: {os.getloadavg()}", file=sys.stderr)
    rows = []
    t0 = time.perf_counter()
    for name in names:
        for size in sizes:
            rows.append(bench_case(name, size))
            print(f"# {name} {format_size(size)} done ({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
    summary = summarize(rows, suite)
    print(_markdown(rows))
    print()
    largest = max(sizes)
    print(_losses_markdown([r for r in rows if r["size_bytes"] == largest]))
    print()
    for k, v in summary.items():
        print(f"- {k}: {v:.4g}" if isinstance(v, float) else f"- {k}: {v}")
    print(f"# load average after: {os.getloadavg()}", file=sys.stderr)
    if args.json:
        write_text(args.json, json.dumps({"rows": rows, "summary": summary}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
