"""The synthesis benchmark (issues 3 and 11): synthesis time and simulated quality on the catalog machines.

For every topology, collective and message size: synthesize with the
default settings (default sketches and packed trees, HiGHS, no time limit
given), then simulate the schedule and every applicable baseline at its
own best chunk factor at that size, and compute the lower bound. One row
per case:

``topology, collective, size, synthesis seconds, simulated us, best baseline (us, name, chunk factor),
speedup over it, lower bound (us), gap (time / bound), ops, sketch``

``--suite trees`` (issue 11) runs the tree-packing machines instead:
dgx_a100x16, dgx_a100x32, dgx_a100x128, dgx_h100x32, a rail-optimized
two-tier fat tree with 2:1 oversubscription (the catalog's
``fat_tree:16x8:4:2``: 16 nodes of 8 GPUs, leaves per 4 nodes), the 5-rank
star and the two clusters joined by one slow link pair (:func:`star`,
:func:`two_clusters`), at 64 MiB and 1 GiB. Each case runs the synthesis
as ``ccsynth synth`` does: packed trees beside the MILPs, then every
applicable baseline at its own best chunk factor (the baseline search), and
the faster of the two is what is returned (*written*). A row gives the
synthesized schedule's time (trees or MILP), the written schedule's time
and its gap to the exact bound, the best baseline, the wall and CPU
seconds of the whole synthesis (baseline comparison included; the CPU time
is what it costs on an otherwise idle core of a shared machine), the
bound's ``exact`` flag, and on up to 14 ranks whether the cut bound equals
brute force (:mod:`ccsynth.synth.cut_enumeration`). ``--no-baselines``
skips the baseline comparison (the synthesized schedule is then what is
written).

Run (prints a Markdown table; ``--json FILE`` also saves the rows)::

    python -m ccsynth.bench.bench_synth
    python -m ccsynth.bench.bench_synth --topologies dgx1,ndv2x2 --collectives allgather --sizes 1K,64M
    python -m ccsynth.bench.bench_synth --suite trees
    python -m ccsynth.bench.bench_synth --suite trees --topologies dgx_a100x128 --collectives allgather

``--suite export`` (issue 27) judges what ``ccsynth synth`` writes: the
MSCCL XML and JSON files against the IR schedule and the exact bound
(:mod:`ccsynth.bench.bench_export`); ``--out DIR`` keeps the files and rows::

    python -m ccsynth.bench.bench_synth --suite export --out /tmp/export

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
from ccsynth.bench.bench_export import EXPORT_COLLECTIVES, EXPORT_SIZES, EXPORT_TOPOLOGIES, export_case, export_markdown
from ccsynth.collectives.spec import Collective
from ccsynth.errors import ExportLimitError
from ccsynth.formats.msccl.export import schedule_to_msccl_xml
from ccsynth.formats.files import get_topology
from ccsynth.synth.bounds import lower_bound
from ccsynth.synth.cut_enumeration import MAX_RANKS as BRUTE_FORCE_MAX_RANKS
from ccsynth.synth.cut_enumeration import brute_force_cut
from ccsynth.synth.simulate import simulate
from ccsynth.synth.synthesize import SynthReport, synthesize
from ccsynth.tolerance import is_close
from ccsynth.topologies.model import Link, Topology
from ccsynth.units import format_size, parse_sizes

__all__ = ["TOPOLOGIES", "COLLECTIVES", "SIZES", "TREE_TOPOLOGIES", "star", "two_clusters", "bench_case", "tree_case",
           "markdown", "tree_markdown", "main"]

TOPOLOGIES = ("dgx1", "dgx2", "ndv2x2", "dgx_a100x4", "ndv2x10")
COLLECTIVES = ("allgather", "reduce_scatter", "allreduce", "alltoall")
SIZES = "1K,1M,64M"
#: issue 11's machines (the star and the two clusters are built here: the catalog has no such shapes)
TREE_TOPOLOGIES = ("star5", "two_clusters18", "fat_tree:16x8:4:2", "dgx_a100x16", "dgx_a100x32", "dgx_h100x32",
                   "dgx_a100x128")
TREE_COLLECTIVES = ("allgather", "reduce_scatter", "allreduce")
TREE_SIZES = "64M,1G"


def star(leaves: int = 4, bw: float = 25.0, alpha: float = 0.7) -> Topology:
    """A hub (rank 0) with ``leaves`` leaves, a link each way per leaf (issue 11's allreduce example)."""
    links = [Link(0, v, alpha, bw) for v in range(1, leaves + 1)] + [Link(v, 0, alpha, bw) for v in range(1, leaves + 1)]
    return Topology(f"star{leaves + 1}", leaves + 1, links=tuple(links))


def two_clusters(k: int = 9, fast: float = 25.0, slow: float = 3.75) -> Topology:
    """Two fully connected clusters of ``k`` ranks joined by one slow link pair (issue 11's bound example)."""
    links = [Link(a, b, 0.7, fast) for base in (0, k) for a in range(base, base + k) for b in range(base, base + k)
             if a != b]
    links += [Link(0, k, 2.6, slow), Link(k, 0, 2.6, slow)]
    return Topology(f"two_clusters{2 * k}", 2 * k, links=tuple(links))


_BUILT = {"star5": star, "two_clusters18": two_clusters}


def _topology(name: str) -> Topology:
    return _BUILT[name]() if name in _BUILT else get_topology(name)


def bench_case(topology, kind: str, size: int, options=None) -> dict:
    """Synthesize one case and measure it; returns a row (dict)."""
    t0 = time.perf_counter()
    report = SynthReport()
    sched = synthesize(topology, Collective(kind, topology.n_ranks), options=options, size_bytes=size, report=report)
    seconds = time.perf_counter() - t0
    r = simulate(sched, topology, size)
    timed = [b for b in report.baselines if b.get("time_us") is not None]  # the others: proven slower, unsimulated
    base = timed[0] if timed else None
    sk = sched.meta.get("sketch") or {}
    try:  # export keeps the MSCCL runtimes' limits or refuses (tests/test_msccl_limits.py checks the files)
        schedule_to_msccl_xml(sched, topology=topology)
        msccl = "ok"
    except ExportLimitError as e:
        msccl = f"refused: {e}"
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
        "msccl_xml": msccl,
    }


def markdown(rows: list[dict]) -> str:
    head = ("| topology | collective | size | synth (s) | simulated (us) | best baseline (us) | speedup | "
            "lower bound (us) | gap | ops | MSCCL XML |")
    lines = [head, "|" + "---|" * 11]
    for r in rows:
        base = "-" if r["baseline_us"] is None else f"{r['baseline_us']:.2f} ({r['baseline']}, c={r['baseline_chunk_factor']})"
        sp = "-" if r["speedup"] is None else f"{r['speedup']:.2f}x"
        lines.append(f"| {r['topology']} | {r['collective']} | {format_size(r['size_bytes'])} | {r['synthesis_s']:.1f} | "
                     f"{r['time_us']:.2f} | {base} | {sp} | {r['lower_bound_us']:.2f} | {r['gap']:.3f} | {r['ops']} | "
                     f"{r.get('msccl_xml', '-')} |")
    return "\n".join(lines)


def tree_case(topology: Topology, kind: str, size: int, baselines: bool = True) -> dict:
    """One row of the trees suite (see the module docstring); ``baselines=False`` skips the comparison."""
    n = topology.n_ranks
    coll = Collective(kind, n)
    t0, c0 = time.perf_counter(), time.process_time()
    report = SynthReport()
    sched = synthesize(topology, coll, size_bytes=size, report=report, compare_baselines=baselines)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    time_us = sched.meta["predicted_us"]  # simulated at this size by synthesize
    synthesized_us = time_us if report.synthesized_us is None else report.synthesized_us
    bound = lower_bound(coll, topology, size)
    brute = None
    if n <= BRUTE_FORCE_MAX_RANKS and kind in ("allgather", "reduce_scatter", "allreduce"):
        ref = brute_force_cut(kind, topology).us_per_byte * size
        brute = is_close(ref, bound.details["cut"])
    timed = [b for b in report.baselines if b.get("time_us") is not None]  # the others: proven slower, unsimulated
    base = timed[0] if timed else None
    return {
        "topology": topology.name, "n_ranks": n, "collective": kind, "size_bytes": size,
        "synthesis_s": seconds, "synthesis_cpu_s": cpu, "path": report.synthesized_path,
        "synthesized_us": synthesized_us, "chosen": report.chosen, "time_us": time_us,
        "lower_bound_us": bound.time_us, "gap": time_us / bound.time_us, "synthesized_gap": synthesized_us / bound.time_us,
        "bound_exact": bool(bound.details.get("cut_exact")), "bound_which": bound.which, "brute_force_equal": brute,
        "lp_time_us": sched.meta.get("lp_time_us"), "chunk_factor": sched.collective.chunk_factor,
        "ops": len(sched.ops), "baseline": None if base is None else base["name"],
        "baseline_chunk_factor": None if base is None else base["chunk_factor"],
        "baseline_us": None if base is None else base["time_us"],
        "baselines_proven_slower": {b["name"]: b.get("at_least_us") for b in report.baselines if b.get("time_us") is None},
        "speedup": None if base is None else base["time_us"] / synthesized_us,
    }


def tree_markdown(rows: list[dict]) -> str:
    head = ("| topology | ranks | collective | size | synth (s, wall / CPU) | synthesized (us) | written | "
            "written (us) | exact bound (us) | gap | bound = brute force | best baseline (us) | "
            "synthesized / baseline speedup | chunk factor | ops |")
    lines = [head, "|" + "---|" * 15]
    for r in rows:
        base = "-" if r["baseline_us"] is None else f"{r['baseline_us']:.1f} ({r['baseline']}, c={r['baseline_chunk_factor']})"
        proven = r.get("baselines_proven_slower") or {}
        if r["baseline_us"] is None and proven:  # every baseline proven slower by a bound: the nearest bound
            name, at_least = min(proven.items(), key=lambda kv: kv[1] or float("inf"))
            base = f">= {at_least:.1f} ({name}, bound; not simulated)"
        sp = "-" if r["speedup"] is None else f"{r['speedup']:.2f}x"
        bf = "-" if r["brute_force_equal"] is None else ("yes" if r["brute_force_equal"] else "NO")
        exact = "" if r["bound_exact"] else " (not exact)"
        written = r["path"] if r["chosen"] == "synthesized" else r["baseline"] if r["chosen"] == "baseline" else r["chosen"]
        lines.append(f"| {r['topology']} | {r['n_ranks']} | {r['collective']} | {format_size(r['size_bytes'])} | "
                     f"{r['synthesis_s']:.1f} / {r['synthesis_cpu_s']:.1f} | {r['synthesized_us']:.1f} ({r['path']}) | "
                     f"{written} | {r['time_us']:.1f} | {r['lower_bound_us']:.1f}{exact} | "
                     f"{r['gap']:.3f} | {bf} | {base} | {sp} | {r['chunk_factor']} | {r['ops']} |")
    return "\n".join(lines)


_SUITES = {  # name: (topologies, collectives, sizes)
    "milp": (TOPOLOGIES, COLLECTIVES, SIZES),
    "trees": (TREE_TOPOLOGIES, TREE_COLLECTIVES, TREE_SIZES),
    "export": (EXPORT_TOPOLOGIES, EXPORT_COLLECTIVES, EXPORT_SIZES),
}


def _parse(argv) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m ccsynth.bench.bench_synth", description=__doc__.split("\n\n")[0])
    p.add_argument("--suite", choices=tuple(_SUITES), default="milp",
                   help="milp: the issue-3 machines (default); trees: issue 11's large machines; export: what "
                        "ccsynth synth writes (issue 27)")
    p.add_argument("--topologies", default=None, help="comma-separated (default: the suite's)")
    p.add_argument("--collectives", default=None, help="comma-separated (default: the suite's)")
    p.add_argument("--sizes", default=None, help=f"sizes (default {SIZES}; trees suite {TREE_SIZES}; "
                                                 f"export suite {EXPORT_SIZES})")
    p.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    p.add_argument("--out", metavar="DIR", help="export suite: keep the written files and the rows (rows.json) here")
    p.add_argument("--no-baselines", action="store_true", help="trees suite: skip the baseline comparison")
    p.add_argument("-v", "--verbose", action="store_true", help="log synthesis progress to stderr")
    return p.parse_args(argv)


def _row(args, topo: Topology, kind: str, size: int) -> dict:
    if args.suite == "trees":
        return tree_case(topo, kind, size, not args.no_baselines)
    if args.suite == "export":
        return export_case(topo, kind, size, out_dir=args.out)
    return bench_case(topo, kind, size)


def _say(args, row: dict) -> None:
    """One progress line per case on standard error."""
    head = f"{row['topology']:11s} {row['collective']:14s} {format_size(row['size_bytes']):>4s}"
    if args.suite == "export":
        tail = (f"IR {row['ir_us']:11.2f}us XML {row['xml_us'] or float('nan'):11.2f}us "
                f"gap {row['xml_gap'] or float('nan'):6.3f}" + (" REFUSED" if row["refused"] else ""))
    else:
        tail = (f"sim {row['time_us']:11.2f}us base {row['baseline_us'] or float('nan'):11.2f}us "
                f"speedup {row['speedup'] or float('nan'):5.2f}x gap {row['gap']:6.3f}")
    print(f"{head} synth {row['synthesis_s']:7.1f}s {tail} load {row['load_1min']:.1f}", file=sys.stderr, flush=True)


def main(argv=None) -> int:
    args = _parse(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, stream=sys.stderr,
                        format="%(levelname)s %(name)s: %(message)s")
    tops, colls, default_sizes = _SUITES[args.suite]
    topologies = args.topologies or ",".join(tops)
    collectives = args.collectives or ",".join(colls)
    sizes = parse_sizes(args.sizes or default_sizes)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
    load0 = os.getloadavg()
    print(f"# load average before: {load0[0]:.2f} {load0[1]:.2f} {load0[2]:.2f} on {os.cpu_count()} cores", flush=True)
    rows = []
    for tname in topologies.split(","):
        topo = _topology(tname.strip())
        for kind in collectives.split(","):
            for size in sizes:
                row = _row(args, topo, kind.strip(), size)
                row["load_1min"] = os.getloadavg()[0]
                rows.append(row)
                _say(args, row)
                for path in filter(None, (args.json, args.out and os.path.join(args.out, "rows.json"))):
                    write_text(path, json.dumps(rows, indent=1))
    load1 = os.getloadavg()
    table = {"trees": tree_markdown, "export": export_markdown}.get(args.suite, markdown)(rows)
    print(table)
    if args.out:
        write_text(os.path.join(args.out, "table.md"), table + "\n")
    print(f"# load average after: {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
