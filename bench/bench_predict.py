"""The prediction benchmark (issue 10): the cost model against the machine that is there.

For every rank count (2 and 4 by default):

1. profile the machine: ``mpiexec -n N ccsynth topo profile -o machine{N}.json --raw raw{N}.json`` (the raw
   probe times: ``ccsynth topo refit raw{N}.json -o FILE`` fits them again, e.g. under a changed fit rule);
2. synthesize a plan for the profiled topology, per collective:
   ``ccsynth synth -t machine{N}.json -c C --sizes 8:16M -o plan_C{N}.json``;
3. measure every applicable baseline, the default plan, the synthesized plan
   and MPI's own collective side by side (``--interleave``), each row with
   the simulator's prediction: ``mpiexec -n N ccsynth bench C -m 8:16M -c
   --algo mpi,default,plan:plan_C{N}.json,<baselines> --predict machine{N}.json
   --interleave --json bench_C{N}.json``, with ``CCSYNTH_CACHE_BYTES`` at
   :data:`BENCH_CACHE_BYTES` so that the interleaved baselines keep their
   buffers as a program running one of them would (the issue names 8 B to 64 MiB;
   ``--sizes 8:64M`` runs that, several times longer on 2 shared cores);
4. the plan against the default plan in interleaved rounds with a same-schedule control
   (:mod:`ccsynth.bench.compare`: ``mpiexec -n N python -m ccsynth.bench.compare plan_C{N}.json -c C
   -m 8:16M --json compare_C{N}.json``; ``--rounds R``, 0 skips it): per size a verdict against the noise
   measured there, which the summary's share "at least as fast" counts.

Then it prints, as Markdown (the tables of ``docs/results.md``): the fitted figures
of every profile; the prediction error per size band -- median and worst
``|measured / predicted - 1|`` over every predicted row (measured: the
median over iterations of the slowest rank) -- per rank count and
collective and over all; and the synthesized plan against the default plan
and MPI's collective, ratios of the same run, with the share of sizes at
which the plan is at least as fast as the default plan, and whether it wins
where the model predicts it wins (the predicted and the measured winner of
plan against default agree).

Run (prints the commands it runs on stderr; every file goes to ``--out DIR``, by default a new
``bench-out/predict-TIME`` in the current folder, which git ignores;
``--report DIR`` prints the report of a run again, ``--tune`` tunes every
plan on the machine (``ccsynth tune``) before its bench, ``--repredict DIR``
recomputes every prediction of a saved run with the model as it is now --
on the run's own profiles or on ``--topology FILE[,FILE]`` -- and prints
the report of that, ``--rows`` adds every predicted row)::

    python -m ccsynth.bench.bench_predict --out bench-out/predict --max-load 3
    python -m ccsynth.bench.bench_predict --ranks 2 --collectives allreduce --sizes 8:1M --quick
    python -m ccsynth.bench.bench_predict --repredict bench-out/predict --rows

The machine's load average is printed before and after each step: the
2-core development machine is shared, and every figure depends on it.
``--max-load L`` waits (up to ``--max-wait`` seconds) before each step until
the one-minute load average is below ``L``; ``--interleave`` runs the
algorithms of one size in turn, so load that comes and goes hits them alike
and ratios of one run stay comparable; ``--repeats R`` runs every bench R
times and keeps, per algorithm and size, the fastest median (load only
slows a run down; the profile keeps its fastest pass the same way).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from ccsynth.bench import compare
from ccsynth.bench.compare import ROUNDS
from ccsynth.bench.predict import BAND_ANCHOR, band_of, drift_table, error_table, repredict_document
from ccsynth.collectives.spec import Collective
from ccsynth.synth.baselines import applicable_baselines
from ccsynth.synth.tables import TUNE_REL, keeps_candidate, pick_winner
from ccsynth.topologies import fully_connected
from ccsynth.topologies.io import load_topology, topology_to_dict
from ccsynth.topologies.reference import ReferenceTimes
from ccsynth.units import format_size

__all__ = ["RANKS", "COLLECTIVES", "SIZES", "DEFAULT_OUT", "default_out", "BENCH_CACHE_BYTES", "PlanSummary", "baselines_for", "run_case", "fastest_rows", "summary",
           "markdown", "repredict_cases", "row_lines", "POLICY_MARGINS", "loss_margin", "PolicyOutcome", "policy_outcome",
           "policy_lines", "main"]

RANKS = (2, 4)
COLLECTIVES = ("allreduce", "allgather")
SIZES = "8:16M"  # the issue names 64 MiB; 16 MiB keeps a 2- and 4-rank run within minutes on 2 cores
TARGET_LARGE, TARGET_SMALL = 0.25, 0.50  # median error from 64 KiB up, below
TARGET_PLAN_SHARE = 0.90  # the plan at least as fast as the default plan at this share of sizes
#: Raw output goes to a folder the user names (``--out``), by default under this one in the current folder:
#: recorded runs are not part of the source tree (``bench-out/`` is in the repository's .gitignore).
DEFAULT_OUT = "bench-out"


def default_out(now: float | None = None) -> Path:
    """A new folder for one run's files: ``bench-out/predict-YYYYMMDD-HHMMSS`` (UTC) in the current folder.

    >>> default_out(0.0).as_posix()
    'bench-out/predict-19700101-000000'
    """
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(time.time() if now is None else now))
    return Path(DEFAULT_OUT) / f"predict-{stamp}"


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _wait_for_quiet(max_load: float | None, max_wait: float) -> None:
    """Wait until the one-minute load average is below ``max_load`` (at most ``max_wait`` seconds)."""
    if not max_load:
        return
    t0 = time.monotonic()
    while os.getloadavg()[0] >= max_load and time.monotonic() - t0 < max_wait:
        time.sleep(2.0)
    waited = time.monotonic() - t0
    if waited >= 2.0:
        print(f"# waited {waited:.0f} s for load below {max_load:g} (now {_load()})", file=sys.stderr, flush=True)


def _bin(name: str) -> str:
    here = Path(sys.executable).parent / name
    return str(here) if here.exists() else name


#: the executor's byte budget for kept buffers during the benches (``CCSYNTH_CACHE_BYTES``): the baselines'
#: compiled schedules share one budget per communicator, and with ``--interleave`` the default (32 MiB, or twice
#: the largest message) made them drop and reallocate one another's buffers every call from 8 MiB up
#: (one measured run: ring, recursive doubling and halving 3-10x slower at 8-16 MiB than the same schedules in the plans)
BENCH_CACHE_BYTES = 1 << 30


def _run(cmd: list[str], log: list[str], max_load: float | None = None, max_wait: float = 0.0,
         env: dict[str, str] | None = None) -> None:
    _wait_for_quiet(max_load, max_wait)
    text = " ".join(shlex.quote(c) for c in cmd)
    if env:
        text = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()) + " " + text
    log.append(text)
    print(f"# [{time.strftime('%H:%M:%S')}, load {_load()}] {text}", file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **env} if env else None)
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
        raise SystemExit(f"command failed ({proc.returncode}): {text}")


def baselines_for(kind: str, n: int) -> list[str]:
    """The baselines ``ccsynth bench`` can run for ``kind`` on ``n`` ranks (at the chunk factor it uses)."""
    cf = n if kind == "allreduce" else 1
    return list(applicable_baselines(Collective(kind, n, cf), fully_connected(n)))


def run_case(n: int, kinds, out: Path, sizes: str, quick: bool, log: list[str], max_load: float | None = None,
             max_wait: float = 0.0, repeats: int = 1, tune: bool = False, rounds: int = ROUNDS) -> dict:
    """Profile, synthesize and measure for ``n`` ranks; returns what the report needs. ``tune``: the plan is
    tuned on the machine (``mpiexec -n N ccsynth tune``) before the bench, whose ``plan`` column runs the tuned
    plan (``tuned_C{N}.json``; the synthesized one stays beside it). ``rounds``: after the bench, the plan
    against the default plan in that many interleaved rounds (:mod:`ccsynth.bench.compare`,
    ``compare_C{N}.json``; 0: not measured)."""
    ccsynth = [_bin("ccsynth")]
    mpiexec = [_bin("mpiexec"), "-n", str(n)]
    machine = out / f"machine{n}.json"
    loads = {"before": _load()}
    _run(mpiexec + ccsynth + ["-q", "topo", "profile", "-o", str(machine), "--raw", str(out / f"raw{n}.json")]
         + (["--quick"] if quick else []), log, max_load, max_wait)
    loads["after profile"] = _load()
    result = {"n": n, "machine": str(machine), "topology": json.loads(machine.read_text()), "runs": {}, "loads": loads}
    for kind in kinds:
        plan = out / f"plan_{kind}{n}.json"
        t0 = time.perf_counter()
        _run(ccsynth + ["-q", "synth", "-t", str(machine), "-c", kind, "--sizes", sizes, "-o", str(plan)], log)
        synth_s = time.perf_counter() - t0
        if tune:
            tuned = out / f"tuned_{kind}{n}.json"
            _run(mpiexec + ccsynth + ["-q", "tune", str(plan), "-t", str(machine), "-o", str(tuned)], log, max_load,
                 max_wait)
            plan = tuned
        algos = ["mpi", "default", f"plan:{plan}"] + baselines_for(kind, n)
        docs = []
        for rep in range(repeats):
            js = out / (f"bench_{kind}{n}.json" if rep == 0 else f"bench_{kind}{n}.{rep}.json")
            cmd = mpiexec + ccsynth + ["bench", kind, "-m", sizes, "-c", "--algo", ",".join(algos), "--predict",
                                       str(machine), "--interleave", "--json", str(js)]
            if quick:
                cmd += ["-i", "5", "-x", "1"]
            _run(cmd, log, max_load, max_wait, env={"CCSYNTH_CACHE_BYTES": str(BENCH_CACHE_BYTES)})
            loads[f"after {kind}" + (f" #{rep + 1}" if repeats > 1 else "")] = _load()
            docs.append(json.loads(js.read_text()))
        result["runs"][kind] = {"json": fastest_rows(docs), "plan": f"plan:{plan}", "synth_s": synth_s,
                                "repeats": repeats}
        if rounds > 0:
            cj = out / f"compare_{kind}{n}.json"
            cmd = mpiexec + [sys.executable, "-m", "ccsynth.bench.compare", str(plan), "-c", kind, "-m", sizes,
                             "--rounds", str(rounds), "--json", str(cj)] + (["-i", "4"] if quick else [])
            _run(cmd, log, max_load, max_wait, env={"CCSYNTH_CACHE_BYTES": str(BENCH_CACHE_BYTES)})
            loads[f"after {kind} rounds"] = _load()
            result["runs"][kind]["compare"] = json.loads(cj.read_text())
    return result


def fastest_rows(docs: list[dict]) -> dict:
    """One bench document from several runs of the same command: per algorithm and size, the run with the
    smallest median (load from other processes only slows a run down, as the profile keeps its fastest pass)."""
    merged = dict(docs[0])
    results = {}
    for name, rows in docs[0]["results"].items():
        best = []
        for i in range(len(rows)):
            candidates = [d["results"][name][i] for d in docs if len(d["results"].get(name, ())) > i]
            best.append(min(candidates, key=lambda r: r["median_us"]))
        results[name] = best
    merged["results"] = results
    return merged


# ------------------------------------------------------------------ report
def _results(doc: dict, label: str = "") -> dict[str, list[SimpleNamespace]]:
    """The rows of a ``--json`` bench document by algorithm (``plan:FILE`` shortened to ``plan``), as records."""
    return {f"{label}{_short(name)}": [_row(r) for r in rows] for name, rows in doc["results"].items()}


def _row(r: dict) -> SimpleNamespace:
    """A bench JSON row as a record; ``size`` is its ``size_bytes`` (``ccsynth.bench/1`` rows name it so)."""
    row = SimpleNamespace(**r)
    if not hasattr(row, "size"):
        row.size = r["size_bytes"]
    return row


def _sz(n: int) -> str:
    t = format_size(n)
    return f"{t} B" if t.isdigit() else t


def _short(name: str) -> str:
    return "plan" if name.startswith("plan:") else name


def _error_table(results: dict[str, list], title: str) -> list[str]:
    """The error bands of :func:`ccsynth.bench.predict.error_table` as Markdown, with the issue's targets."""
    lines = [f"**{title}**", "", "| sizes | rows | median error | worst error | worst at | target (median) | met |",
             "|---|---:|---:|---:|---|---:|---|"]
    for d in error_table(results):
        target = TARGET_LARGE if d.lo >= BAND_ANCHOR else TARGET_SMALL
        lines.append(f"| {d.label} | {d.rows} | {100 * d.median:.0f}% | {100 * d.worst:.0f}% | {d.worst_at} | "
                     f"{100 * target:.0f}% | {'yes' if d.median <= target else '**no**'} |")
    return lines + [""]


def _per_algorithm(results: dict[str, list]) -> list[str]:
    """Median |meas/pred - 1| per algorithm, below and from 64 KiB, and its worst signed error."""
    lines = ["| algorithm | median error < 64 KiB | median error >= 64 KiB | worst (meas/pred - 1) | at |",
             "|---|---:|---:|---:|---|"]
    for name, rows in results.items():
        pts = [(r.size, r.median_us / r.predicted_us - 1) for r in rows if getattr(r, "predicted_us", None)]
        if not pts:
            continue
        small = [abs(e) for size, e in pts if size < BAND_ANCHOR]
        large = [abs(e) for size, e in pts if size >= BAND_ANCHOR]
        worst = max(pts, key=lambda p: abs(p[1]))
        lines.append(f"| {name} | {_pct(small)} | {_pct(large)} | {100 * worst[1]:+.0f}% | {_sz(worst[0])} |")
    return lines + [""]


def _pct(xs) -> str:
    return f"{100 * float(np.median(xs)):.0f}%" if xs else "-"


@dataclass(frozen=True)
class PlanSummary:
    """The synthesized plan against the default plan over the sizes of one run."""

    sizes: int
    at_least_as_fast: float  # share of sizes: plan <= default (measured medians)
    within_5pct: float  # share of sizes: plan <= 1.05 x default
    predicted_sizes: int  # sizes where the model predicts a clear winner (>5% apart)
    winner_agrees: float  # share of those where the measured winner is the predicted one
    same_algorithm: int = 0  # sizes where the plan runs the default plan's own algorithm (a tie by construction)
    same_or_faster: float = 0.0  # share of sizes: plan <= default, or the default's own algorithm


def _same_algorithm(plan_algo: str, default_algo: str) -> bool:
    """Whether the plan's row names the default plan's algorithm (``ring(c=2)`` against ``ring``).

    The chunk factor is not compared: the default plan's is the one the plan
    tables build it at (:func:`ccsynth.synth.default_plan.baseline_chunk_factor`).
    """
    return plan_algo.split("(")[0] == default_algo.split("(")[0] and "@" not in plan_algo


def _plan_table(results: dict[str, list]) -> tuple[list[str], PlanSummary]:
    """Per size: MPI, default, plan (measured medians), their ratios, what the plan ran, and both predictions."""
    by = {name: {r.size: r for r in rows} for name, rows in results.items()}
    lines = ["| size | mpi (us) | default (us) | plan (us) | plan / default | plan / mpi | default / mpi | "
             "predicted plan / default | plan runs |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    wins = ties = called = agreed = same = same_or_faster = 0
    for r in results["mpi"]:
        size = r.size
        d, p = by["default"][size], by["plan"][size]
        m = r.median_us
        wins += p.median_us <= d.median_us
        ties += p.median_us <= 1.05 * d.median_us
        is_same = _same_algorithm(str(p.algorithm), str(d.algorithm))
        same += is_same
        same_or_faster += is_same or p.median_us <= d.median_us
        pd, pp = getattr(d, "predicted_us", None), getattr(p, "predicted_us", None)
        pred = "-"
        if pd and pp:
            pred = f"{pp / pd:.2f}"
            if abs(pp / pd - 1) > 0.05:  # the model calls a winner
                called += 1
                agreed += (pp < pd) == (p.median_us < d.median_us)
        lines.append(f"| {_sz(size)} | {m:.1f} | {d.median_us:.1f} | {p.median_us:.1f} | {p.median_us / d.median_us:.2f} | "
                     f"{p.median_us / m:.2f} | {d.median_us / m:.2f} | {pred} | {p.algorithm} |")
    n = len(results["mpi"])
    return lines + [""], PlanSummary(n, wins / n, ties / n, called, agreed / called if called else float("nan"),
                                     same, same_or_faster / n)


def _ratio_to_mpi(results: dict[str, list]) -> list[str]:
    """Every algorithm's median latency / MPI's, per size band (the same run: load hits them alike)."""
    mpi = {r.size: r.median_us for r in results["mpi"]}
    bands = sorted({band_of(s) for s in mpi})
    label = {}
    for k in bands:
        sizes = sorted(s for s in mpi if band_of(s) == k)
        label[k] = _sz(sizes[0]) + (f"-{_sz(sizes[-1])}" if len(sizes) > 1 else "")
    lines = ["| algorithm | " + " | ".join(label[k] for k in bands) + " |", "|---|" + "---:|" * len(bands)]
    for name, rows in results.items():
        if name == "mpi":
            continue
        cells = []
        for k in bands:
            ratios = [r.median_us / mpi[r.size] for r in rows if band_of(r.size) == k and mpi.get(r.size)]
            cells.append(f"{float(np.median(ratios)):.2f}" if ratios else "-")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines + [""]


def _profile_lines(case: dict) -> list[str]:
    t = case["topology"]
    ports = ", ".join(f"{p['name']} {p['bw_GBps']:.2f} GB/s" for p in t.get("shared_ports", [])) or "none"
    extras = [f"per-call cost {t.get('call_overhead_us', 0):.2f} us",
              f"local copies/reductions {t.get('local_bw_GBps', 0):.2f} GB/s",
              f"{t.get('local_overhead_us', 0):.2f} us per local copy/reduction"]
    if t.get("eager_limit_bytes") is not None:
        extras.append(f"messages above {_sz(int(t['eager_limit_bytes']))} pay "
                      f"{t.get('rendezvous_alpha_us', 0):.2f} us more latency")
    rc = t.get("round_cost")
    if rc:
        extras.append("a round of k peers costs more: " + ", ".join(f"k={k} {c:.2f} us" for k, c in zip(rc["peers"], rc["us"])))
    if "communicator_overhead_us" in t:
        extras.append(f"{t['communicator_overhead_us']:.2f} us more per call through ccsynth's communicator")
    fp = t.get("footprint_curve")
    if fp:  # what messages cost more by the bytes a rank touches between two calls (footprint_curve)
        extras.append("messages by footprint " + ", ".join(f"x{f:.2f} at {_sz(int(m))}"
                                                             for m, f in zip(fp["sizes_bytes"], fp["factors"])))
    cold = t.get("cold_call")
    if cold:  # what a call pays once more by its footprint (cold_call)
        extras.append("a cold call once " + ", ".join(f"{c:.1f} us at {_sz(int(m))}"
                                                      for m, c in zip(cold["footprints_bytes"], cold["us"])))
    lines = [f"*{t['n_ranks']} ranks* ({t.get('description', '')}): " + "; ".join(extras) + f"; shared ports: {ports}.",
             "", "| pair | alpha (us) | overhead (us) | latency alpha+2o (us) | bw (GB/s) |", "|---|---:|---:|---:|---:|"]
    for link in t["links"]:
        o = link.get("overhead_us", 0.0)
        lines.append(f"| {link['src']}->{link['dst']} | {link['alpha_us']:.2f} | {o:.2f} | "
                     f"{link['alpha_us'] + 2 * o:.2f} | {link['bw_GBps']:.3f} |")
    return lines + [""]


def summary(cases: list[dict]) -> list[str]:
    """The two tables the issue's targets are read from: median error per size band per case, and the plan
    against the default plan per case."""
    cols: list[tuple[str, dict[str, list]]] = [(f"{kind} {case['n']}r", _results(run["json"]))
                                               for case in cases for kind, run in case["runs"].items()]
    if not cols:
        return []
    bands: dict[tuple[int, str], dict[str, float]] = {}
    for label, results in cols:
        for d in error_table(results):
            bands.setdefault((d.lo, d.label), {})[label] = d.median
    out = ["### Summary", "", "Median |measured / predicted - 1| per size band (target: "
           f"{100 * TARGET_SMALL:.0f}% below 64 KiB, {100 * TARGET_LARGE:.0f}% from 64 KiB; bold: met):", "",
           "| sizes | " + " | ".join(label for label, _ in cols) + " |", "|---|" + "---:|" * len(cols)]
    for (lo, text), per in sorted(bands.items()):
        target = TARGET_LARGE if lo >= BAND_ANCHOR else TARGET_SMALL
        cells = []
        for label, _ in cols:
            v = per.get(label)
            cells.append("-" if v is None else (f"**{100 * v:.0f}%**" if v <= target else f"{100 * v:.0f}%"))
        out.append(f"| {text} | " + " | ".join(cells) + " |")
    out += drift_summary(cases)
    out += ["", f"Synthesized plan against the default plan (share of sizes; target {100 * TARGET_PLAN_SHARE:.0f}% "
            "at least as fast):", "",
            "| case | plan <= default | plan <= 1.05 x default | plan runs the default's algorithm | "
            "<= default or its algorithm | model calls a winner (>5%) | measured winner = predicted |",
            "|---|---:|---:|---:|---:|---:|---:|"]
    for label, results in cols:
        _, ps = _plan_table(results)
        agree = f"{100 * ps.winner_agrees:.0f}%" if ps.predicted_sizes else "-"
        out.append(f"| {label} | {100 * ps.at_least_as_fast:.0f}% | {100 * ps.within_5pct:.0f}% | "
                   f"{ps.same_algorithm} of {ps.sizes} | {100 * ps.same_or_faster:.0f}% | "
                   f"{ps.predicted_sizes} of {ps.sizes} | {agree} |")
    out.append("")
    rounds = [(f"{kind} {case['n']}r", run["compare"]) for case in cases for kind, run in case["runs"].items()
              if run.get("compare")]
    if rounds:
        out += rounds_summary(rounds)
    return out


def drift_summary(cases: list[dict]) -> list[str]:
    """Per size band and case, MPI's own collective over its time when the case's machine was profiled
    (:func:`ccsynth.bench.predict.drift_table`): how far the machine moved between the profile and the bench;
    nothing for profiles without MPI reference times."""
    cols: list[str] = []
    bands: dict[tuple[int, str], dict[str, float]] = {}
    for case in cases:
        refs = {c["collective"]: ReferenceTimes(c["collective"], tuple(c["sizes_bytes"]), tuple(c["us"]))
                for c in (case["topology"].get("mpi_reference") or {}).get("collectives", ())}
        for kind, run in case["runs"].items():
            table = drift_table(_results(run["json"]), refs.get(kind))
            if table:
                label = f"{kind} {case['n']}r"
                cols.append(label)
                for d in table:
                    bands.setdefault((d.lo, d.label), {})[label] = d.median
    if not cols:
        return []
    out = ["", "The machine between the profile and the bench: MPI's own collective / its time in the profile's "
           "reference runs, median per band (no prediction uses it; where it is far from 1 the machine moved and "
           "every prediction there carries the move):", "",
           "| sizes | " + " | ".join(cols) + " |", "|---|" + "---:|" * len(cols)]
    for (_, text), per in sorted(bands.items()):
        out.append(f"| {text} | " + " | ".join("-" if per.get(c) is None else f"{per[c]:.2f}x" for c in cols) + " |")
    return out


def rounds_summary(docs: list[tuple[str, dict]]) -> list[str]:
    """The plan against the default plan measured in rounds (:mod:`ccsynth.bench.compare`), one row per case:
    the share the issue's target counts (faster, or a tie within the noise measured at that size)."""
    out = [f"Plan against the default plan in interleaved rounds (``python -m ccsynth.bench.compare``: plan, default "
           "and the default again as a control, rounds rotated; *at least as fast*: not slower beyond the noise "
           "measured at that size, and that noise at most 25%; target "
           f"{100 * TARGET_PLAN_SHARE:.0f}%):", "",
           "| case | rounds | at least as fast | faster | slower | unresolved | at least as fast, or unresolved on the "
           "same schedule | median ratio <= 1 | same schedule as the default | median noise | slower at |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for label, doc in docs:
        rows = compare.from_dict(doc)
        sh = compare.share(rows)
        slower = ", ".join(f"{_sz(c.size)} ({c.ratio:.2f})" for c in rows if c.verdict == "slower") or "-"
        noise = float(np.median([c.noise for c in rows])) if rows else float("nan")
        out.append(f"| {label} | {len(rows[0].ratios) if rows else 0} | {100 * sh['at_least_as_fast']:.0f}% | "
                   f"{100 * sh['faster']:.0f}% | {100 * sh['slower']:.0f}% | {100 * sh['unresolved']:.0f}% | "
                   f"{100 * sh['or_same_schedule']:.0f}% | "
                   f"{100 * sh['strict']:.0f}% | "
                   f"{sum(c.same_schedule for c in rows)} of {len(rows)} | {100 * noise:.1f}% | {slower} |")
    return out + [""]


def markdown(cases: list[dict], commands: list[str]) -> str:
    """The report: the summary, commands, profiles, prediction error per band, plan against default and MPI."""
    out = summary(cases)
    out += ["### Commands", "", "```"] + commands + ["```", ""]
    out += ["### Profiles", ""]
    for case in cases:
        out += _profile_lines(case)
        out.append("Load average (1, 5, 15 min): " + "; ".join(f"{k} {v}" for k, v in case["loads"].items()))
        out.append("")
    out += ["### Prediction error: |measured / predicted - 1| (measured: median over iterations of the slowest rank)",
            ""]
    together: dict[str, list] = {}
    for case in cases:
        for kind, run in case["runs"].items():
            results = _results(run["json"])
            together.update(_results(run["json"], f"{kind} {case['n']}r "))
            out += _error_table(results, f"{kind}, {case['n']} ranks")
            out += _per_algorithm(results)
    out += _error_table(together, "All runs together")
    out += ["### Synthesized plan against the default plan and MPI (medians of the same run)", ""]
    for case in cases:
        for kind, run in case["runs"].items():
            results = _results(run["json"])
            lines, ps = _plan_table(results)
            repeats = run.get("repeats", 1)
            runs_note = f"; every figure the fastest of {repeats} runs" if repeats > 1 else ""
            agree = (f"where the model predicts a winner by more than 5% ({ps.predicted_sizes} of {ps.sizes} sizes), "
                     f"the measured winner is the predicted one at {100 * ps.winner_agrees:.0f}%" if ps.predicted_sizes else
                     "the model predicts plan and default within 5% at every size")
            out += [f"**{kind}, {case['n']} ranks** (synthesis {run['synth_s']:.1f} s{runs_note}): plan at least as fast as the "
                    f"default plan at {100 * ps.at_least_as_fast:.0f}% of {ps.sizes} sizes "
                    f"({100 * ps.within_5pct:.0f}% within 5%; target {100 * TARGET_PLAN_SHARE:.0f}%; it runs the "
                    f"default plan's own algorithm at {ps.same_algorithm}); {agree}.", ""]
            out += lines
            if run.get("compare"):
                out += [f"The same plan against the default plan in interleaved rounds (``compare_{kind}{case['n']}"
                        ".json``):", ""] + compare.lines(compare.from_dict(run["compare"])) + [""]
            out += ["Median latency / MPI's per size band:", ""] + _ratio_to_mpi(results)
    return "\n".join(out)


def repredict_cases(cases: list[dict], folder: str | Path, topologies=()) -> list[dict]:
    """``cases`` (a run's ``cases.json``) with every prediction recomputed by the current model
    (:func:`ccsynth.bench.predict.repredict_document`), on the case's own profile or on the topology of
    ``topologies`` with its rank count."""
    by_n = {t.n_ranks: t for t in topologies}
    out = []
    for case in cases:
        topo = by_n.get(case["n"])
        if topo is None:
            path = Path(case["machine"])
            topo = load_topology(path if path.exists() else Path(folder) / path.name)
        runs = {kind: dict(run, json=repredict_document(run["json"], topo, folder)) for kind, run in case["runs"].items()}
        out.append(dict(case, topology=topology_to_dict(topo), runs=runs))
    return out


def row_lines(cases: list[dict]) -> list[str]:
    """Every predicted row: measured, predicted and their ratio, per case, column and size."""
    out = ["| case | algorithm | size | ran | measured (us) | predicted (us) | measured / predicted |",
           "|---|---|---:|---|---:|---:|---:|"]
    for case in cases:
        for kind, run in case["runs"].items():
            for name, rows in _results(run["json"]).items():
                for r in rows:
                    pred = getattr(r, "predicted_us", None)
                    if pred:
                        out.append(f"| {kind} {case['n']}r | {name} | {_sz(r.size)} | {r.algorithm} | "
                                   f"{r.median_us:.1f} | {pred:.1f} | {r.median_us / pred:.2f} |")
    return out + [""]



# ------------------------------------------------------------------ plan policies, offline
#: the margins :func:`policy_lines` tries besides the plan as run (the earlier runs' plans had a margin of 25%)
POLICY_MARGINS = (0.25, 0.5, 0.6, 0.7)


def loss_margin(cases: list[dict], rel: float = TUNE_REL) -> float:
    """The model's error where it predicts a gain, measured on a run: the largest predicted gain over the default
    plan, ``1 - predicted / predicted default``, among the run's predicted rows (every column but MPI's and the
    default's, every size) measured slower than the default by more than ``rel`` (one pass's noise,
    :data:`~ccsynth.synth.tables.TUNE_REL`). A margin above it keeps every such loss out of a plan; 0: no loss."""
    worst = 0.0
    for case in cases:
        for run in case["runs"].values():
            results = _results(run["json"])
            default = {r.size: r for r in results.get("default", [])}
            for name, rows in results.items():
                if name in ("mpi", "default"):
                    continue
                for r in rows:
                    d = default.get(r.size)
                    if d is None:
                        continue
                    pred, dpred = getattr(r, "predicted_us", None), getattr(d, "predicted_us", None)
                    if pred and dpred and r.median_us > (1.0 + rel) * d.median_us:
                        worst = max(worst, 1.0 - pred / dpred)
    return worst


def _column_cf(kind: str, n: int) -> int:
    """The chunk factor ``ccsynth bench`` builds its baseline columns at (``bench/algos.py``)."""
    return n if kind == "allreduce" else 1


def _column_of(label: str, kind: str, n: int, results: dict[str, list]) -> str | None:
    """The bench column that measured candidate ``label`` (``ring(c=4)`` -> ``ring`` when the bench ran ring at
    chunk factor 4); None for a synthesized schedule or another chunk factor."""
    base, _, rest = label.partition("(c=")
    if base not in results or not rest:
        return None
    return base if int(rest.rstrip(")")) == _column_cf(kind, n) else None


def _table_index(sizes: list[int], plan_bytes: int) -> int:
    """The plan table's size nearest (in ratio) to ``plan_bytes``."""
    return min(range(len(sizes)), key=lambda j: abs(np.log(sizes[j] / plan_bytes)))


@dataclass(frozen=True)
class PolicyOutcome:
    """A plan policy's choices over one run's sizes, judged by that run's measured rows."""

    sizes: int  # sizes judged (measured)
    unmeasured: int  # sizes whose pick no column of the run measured
    departures: int  # sizes where the policy leaves the default plan's algorithm
    strict: float  # share of judged sizes: pick <= default (measured; a size given back to the default: a tie)
    same_or_faster: float  # share of judged sizes: pick <= default, or the default's own algorithm
    within_5pct: float  # share of judged sizes: pick <= 1.05 x default
    departure_ratios: tuple[float, ...] = ()  # measured pick / default at the departures judged


def policy_outcome(kind: str, n: int, table: dict, results: dict[str, list], pick) -> PolicyOutcome:
    """Judge ``pick(j, size) -> label`` (a label of the plan's ``table`` at table index ``j``) on a run's rows.

    A size whose pick is the plan's own choice is measured by the run's plan row (the default's algorithm
    too, where the plan ran it); a size a policy gives back to the default's algorithm is a tie with the default
    (the same schedule); a baseline by its column where the bench ran it at the same chunk factor; any other
    pick is unmeasured and left out.
    """
    per_rank = kind in ("allgather", "alltoall")
    by = {name: {r.size: r.median_us for r in rows} for name, rows in results.items()}
    defaults = table.get("defaults") or [None] * len(table["sizes"])
    judged = unmeasured = departs = strict = same = near = 0
    ratios = []
    for r in results["default"]:
        j = _table_index(table["sizes"], r.size * n if per_rank else r.size)
        label, default = pick(j, r.size), defaults[j]
        departs += label != default
        if label == table["winners"][j]:
            t = by["plan"].get(r.size)
        elif label == default:
            t = r.median_us  # given back to the default's algorithm: the same schedule, a tie
        else:
            col = _column_of(label, kind, n, results)
            t = by[col].get(r.size) if col else None
        if t is None:
            unmeasured += 1
            continue
        judged += 1
        strict += t <= r.median_us
        same += label == default or t <= r.median_us
        near += t <= 1.05 * r.median_us
        if label != default:
            ratios.append(t / r.median_us)
    nan = float("nan")
    return PolicyOutcome(judged, unmeasured, departs, strict / judged if judged else nan,
                         same / judged if judged else nan, near / judged if judged else nan, tuple(ratios))


def _margin_pick(table: dict, margin: float):
    """The plan's table picked again with ``margin`` (the saved simulated times, :func:`pick_winner`)."""
    cands = table["candidates"]
    labels = [c["algorithm"] for c in cands]
    defaults = table.get("defaults") or [None] * len(table["sizes"])

    def pick(j: int, size: int) -> str:
        d = labels.index(defaults[j]) if defaults[j] in labels else None
        best = pick_winner([c["times_us"][j] for c in cands], [c["ops"] for c in cands], d, margin)
        return labels[best] if best is not None else table["winners"][j]

    return pick


def _tuned_pick(kind: str, n: int, table: dict, tuning: dict[str, list] | None, results: dict[str, list]):
    """The plan's choices, each departure kept only if measured faster than the default by more than
    ``TUNE_REL`` in the rows of ``tuning`` (another run; None: this run's own rows). A departure the tuning rows
    did not measure (a synthesized schedule in another run) gives the size back to the default."""
    rows = tuning if tuning is not None else results
    by = {name: {r.size: r.median_us for r in rs} for name, rs in rows.items()}
    defaults = table.get("defaults") or [None] * len(table["sizes"])

    def pick(j: int, size: int) -> str:
        label, default = table["winners"][j], defaults[j]
        if label == default or default is None:
            return label
        if tuning is None:
            t = by["plan"].get(size)
        else:
            col = _column_of(label, kind, n, rows)
            t = by[col].get(size) if col else None
        d = by["default"].get(size)
        return label if t is not None and d is not None and keeps_candidate(t, d) else default

    return pick


def policy_lines(cases: list[dict], folder: str | Path, other: list[dict] | None = None) -> list[str]:
    """The plan as run, the same candidates under larger margins, and the plan tuned by measurement, judged on the
    run's measured rows (``--policies``): per case, share of sizes at least as fast as the default plan. With
    ``other`` (another run's cases) also the margin of :func:`loss_margin` measured on that run (the model's error
    where it predicts a gain, fitted on one run and judged on this one)."""
    others = {(c["n"], kind): _results(run["json"]) for c in other or [] for kind, run in c["runs"].items()}
    fitted = loss_margin(other) if other else None
    out = ["| case | policy | departures | sizes judged | <= default | <= default or its algorithm | <= 1.05 x default "
           "| measured / default at the departures |", "|---|---|---:|---:|---:|---:|---:|---|"]
    for case in cases:
        n = case["n"]
        for kind, run in case["runs"].items():
            results = _results(run["json"])
            plan_doc = json.loads((Path(folder) / Path(run["plan"].split(":", 1)[1]).name).read_text())
            table = next(t for t in plan_doc["meta"]["tables"] if t["kind"] == kind)
            policies = [("as run", lambda j, size, t=table: t["winners"][j])]
            policies += [(f"margin {100 * m:.0f}%", _margin_pick(table, m)) for m in POLICY_MARGINS]
            if fitted is not None:
                margin = min(fitted + 0.01, 0.99)  # just above the largest predicted gain the other run saw lost
                policies.append((f"margin above the other run's losses ({100 * margin:.0f}%)", _margin_pick(table, margin)))
            policies.append(("tuned (this run's rows)", _tuned_pick(kind, n, table, None, results)))
            if (n, kind) in others:
                policies.append(("tuned (the other run's rows)", _tuned_pick(kind, n, table, others[(n, kind)], results)))
            for name, pick in policies:
                o = policy_outcome(kind, n, table, results, pick)
                miss = f" ({o.unmeasured} unmeasured)" if o.unmeasured else ""
                ratios = ", ".join(f"{x:.2f}" for x in o.departure_ratios) or "-"
                out.append(f"| {kind} {n}r | {name} | {o.departures} | {o.sizes}{miss} | {100 * o.strict:.0f}% | "
                           f"{100 * o.same_or_faster:.0f}% | {100 * o.within_5pct:.0f}% | {ratios} |")
    return out + [""]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m ccsynth.bench.bench_predict", description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", default=",".join(map(str, RANKS)), help="rank counts, comma separated (default 2,4)")
    p.add_argument("--collectives", default=",".join(COLLECTIVES), help="comma separated (default allreduce,allgather)")
    p.add_argument("--sizes", default=SIZES, help=f"message sizes (default {SIZES})")
    p.add_argument("--out", metavar="DIR",
                   help=f"folder for the profiles, plans and JSON results (default: a new {DEFAULT_OUT}/predict-TIME "
                        "in the current folder; bench-out/ is ignored by git)")
    p.add_argument("--quick", action="store_true", help="quick profiles and few iterations (a smoke test)")
    p.add_argument("--markdown", metavar="FILE", help="also write the report here")
    p.add_argument("--max-load", type=float, metavar="L",
                   help="before each profile and bench, wait until the 1-minute load average is below L")
    p.add_argument("--max-wait", type=float, default=120.0, metavar="S",
                   help="wait at most S seconds for --max-load (default 120), then run anyway")
    p.add_argument("--repeats", type=int, default=1, metavar="R",
                   help="run every bench R times and keep, per algorithm and size, the fastest median (default 1)")
    p.add_argument("--rounds", type=int, default=ROUNDS, metavar="R",
                   help=f"after each bench, the plan against the default plan in R interleaved rounds with a "
                        f"same-schedule control (python -m ccsynth.bench.compare; default {ROUNDS}, 0: skip)")
    p.add_argument("--tune", action="store_true",
                   help="tune every plan on the machine (mpiexec -n N ccsynth tune) before its bench; the plan column "
                        "runs the tuned plan")
    p.add_argument("--report", metavar="DIR",
                   help="run nothing: print the report of an earlier run from DIR/cases.json and DIR/commands.txt")
    p.add_argument("--repredict", metavar="DIR",
                   help="run nothing: recompute every prediction of an earlier run in DIR with the current model "
                        "and print its report")
    p.add_argument("--topology", metavar="FILE[,FILE]",
                   help="with --repredict: predict on these topology files (one per rank count) instead of the "
                        "run's own profiles")
    p.add_argument("--rows", action="store_true", help="with --repredict or --report: also print every predicted row")
    p.add_argument("--policies", nargs="?", const="", metavar="OTHER_DIR[,DIR]",
                   help="with --repredict or --report: judge plan policies (larger margins, tuning by measurement) "
                        "on the run's measured rows; tuning also on OTHER_DIR's rows (another run, same ranks), and "
                        "the margin above the largest predicted gain measured a loss in all of the other run's folders")
    args = p.parse_args(argv)
    if args.repredict or args.report:
        folder = Path(args.repredict or args.report)
        cases = json.loads((folder / "cases.json").read_text())
        if args.repredict:
            topos = [load_topology(f) for f in args.topology.split(",")] if args.topology else []
            cases = repredict_cases(cases, folder, topos)
        text = markdown(cases, (folder / "commands.txt").read_text().splitlines())
        if args.rows:
            text += "\n\n### Every predicted row\n\n" + "\n".join(row_lines(cases))
        if args.policies is not None:
            other = None
            for d in filter(None, args.policies.split(",")):  # another run, each of its rank counts' folders
                more = json.loads((Path(d) / "cases.json").read_text())
                if args.repredict:  # the other run's errors under the same (current) model
                    more = repredict_cases(more, d)
                other = (other or []) + more
            text += "\n\n### Plan policies judged on the measured rows\n\n" + "\n".join(policy_lines(cases, folder, other))
        print(text)
        if args.markdown:
            Path(args.markdown).write_text(text + "\n")
        return 0
    out = Path(args.out) if args.out else default_out()
    out.mkdir(parents=True, exist_ok=True)
    commands: list[str] = []
    cases = []
    print(f"# load average before: {_load()} on {os.cpu_count()} cores; files in {out}", file=sys.stderr, flush=True)
    for n in (int(x) for x in args.ranks.split(",")):
        cases.append(run_case(n, [k.strip() for k in args.collectives.split(",")], out, args.sizes, args.quick, commands,
                              args.max_load, args.max_wait, args.repeats, args.tune, args.rounds))
    (out / "cases.json").write_text(json.dumps(cases, indent=1))
    (out / "commands.txt").write_text("\n".join(commands) + "\n")
    text = markdown(cases, commands)
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text + "\n")
    print(f"# load average after: {_load()}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
