"""Output of ``ccsynth bench``: OMB tables, nccl-tests columns, comparison, JSON.

The table follows the OSU Micro-Benchmarks layout (``# `` header lines, then
``Size`` and latency columns; ``-f`` adds min/max/iterations, ``-c`` a
Validation column of Pass/Fail) with nccl-tests' ``algbw`` and ``busbw`` in
GB/s appended. With several ``--algo`` each gets its own table, then
:func:`comparison_lines` prints every algorithm's average latency relative
to MPI's per size.

Example:
    >>> from ccsynth.bench.omb import BENCHMARKS, Options, Row
    >>> b, o = BENCHMARKS["allreduce"], Options(sizes=(8,), validate=True)
    >>> header_line(b, o)
    '# Size (B)    Avg Latency(us)     algbw(GB/s)     busbw(GB/s)  Validation'
    >>> format_row(b, Row(8, 8, 2, 200, 12.5, 11.0, 14.0, 0.00064, 0.00096, True), o)
    '8                       12.50          0.0006          0.0010        Pass'
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Mapping, Sequence

from ccsynth.atomic import write_text

__all__ = [
    "SCHEMA",
    "BW_W",
    "title_lines",
    "header_line",
    "format_row",
    "table_lines",
    "PROFILE_KEYS",
    "profile_lines",
    "ratios",
    "comparison_base",
    "comparison_lines",
    "to_json",
    "write_json",
    "emit",
]

SCHEMA = "ccsynth.bench/1"
SIZE_W, NUM_W = 10, 18  # OMB prints "%-10d" then "%*.2f" columns
BW_W = 16


def title_lines(bench, algo_name: str, meta: Mapping) -> list[str]:
    """The ``#`` lines above a table."""
    lines = [f"# OMB Python MPI {bench.title} Test", f"# ccsynth algorithm: {algo_name}"]
    lines.append(
        f"# ranks: {meta.get('n_ranks')}" + (f"  dtype: {meta['dtype']}" if meta.get("dtype") else "") + f"  buffer: {meta.get('buffer')}"
        + (f"  op: {meta.get('op') or 'sum'}" if bench.kind in ("allreduce", "reduce", "reduce_scatter") else "")
        + (f"  root: {meta['root']}" if bench.kind in ("broadcast", "reduce") and meta.get("root") is not None else "")
        + ("  in place" if meta.get("in_place") else "")
        + (f"  counts: {meta['counts']} (seed {meta.get('seed', 0)})" if meta.get("counts") else "")
        + (f"  window: {meta.get('window')}" if bench.metric == "bandwidth" else "")
    )
    if bench.sized:
        lines.append(f"# Size: {bench.size_doc}; algbw/busbw from the nccl-tests size, in GB/s")
    machine = meta.get("machine") or {}
    if machine.get("busy"):
        load = ", ".join(f"{x:.2f}" for x in machine.get("load_average") or ())
        lines.append(f"# BUSY machine: load average {load} on {machine.get('cores')} cores: the figures include "
                     f"other work")
    if meta.get("predict"):
        lines.append(f"# Predicted: the simulator on {meta['predict']} (the schedule as ccsynth's executor runs it); "
                     f"Meas/Pred: median latency of the slowest rank / predicted")
    return lines


def _show_algorithm(rows: Sequence, algo_name: str) -> bool:
    return any(r.algorithm and r.algorithm != algo_name for r in rows)


def _columns(bench, options, with_algorithm: bool = False) -> list[tuple[str, int]]:
    cols: list[tuple[str, int]] = []
    if bench.metric == "bandwidth":
        cols.append(("Bandwidth (MB/s)", NUM_W))
    cols.append(("Avg Latency(us)", NUM_W + (1 if bench.sized else 0)))
    if options.full:
        cols += [("Min Latency(us)", NUM_W), ("Max Latency(us)", NUM_W), ("Iterations", 12)]
    cols += [(f"P{p:g} Tail Lat(us)", NUM_W + 2) for p in getattr(options, "tail", ())]
    if bench.sized:
        cols += [("algbw(GB/s)", BW_W), ("busbw(GB/s)", BW_W)]
    if options.validate:
        cols.append(("Validation", 12))
    if getattr(options, "predict", None):
        cols += [("Predicted(us)", NUM_W), ("Meas/Pred", 11)]
    if with_algorithm:
        cols.append(("Algorithm", 0))
    return cols


def header_line(bench, options, with_algorithm: bool = False) -> str:
    """The column header, OMB style (``# Size (B)  Avg Latency(us) ...``)."""
    cols = _columns(bench, options, with_algorithm)
    if bench.sized:
        out = "# Size (B)".ljust(SIZE_W)
    else:
        out = "#"
        # the first column sits one character right of the '#'
        cols = [(cols[0][0], cols[0][1] - 1), *cols[1:]]
    for name, w in cols:
        out += ("  " + name) if w == 0 else name.rjust(w)
    return out


def _validation(v: bool | None) -> str:
    return "N/A" if v is None else ("Pass" if v else "Fail")


def format_row(bench, row, options, with_algorithm: bool = False) -> str:
    """One table row, aligned under :func:`header_line`."""
    out = f"{row.size:<{SIZE_W}d}" if bench.sized else ""
    lead = NUM_W + (1 if bench.sized else 0)
    if bench.metric == "bandwidth":
        out += f"{row.mbps:{NUM_W}.2f}"
        lead = NUM_W
    out += f"{row.avg_us:{lead}.2f}"
    if options.full:
        out += f"{row.min_us:{NUM_W}.2f}{row.max_us:{NUM_W}.2f}{row.iterations:12d}"
    tails = dict(getattr(row, "tail_us", ()))
    for p in getattr(options, "tail", ()):
        t = tails.get(float(p))
        out += f"{t:{NUM_W + 2}.2f}" if t is not None else f"{'-':>{NUM_W + 2}}"
    if bench.sized:
        out += f"{row.algbw:{BW_W}.4f}{row.busbw:{BW_W}.4f}"
    if options.validate:
        out += f"{_validation(row.valid):>12}"
    if getattr(options, "predict", None):
        ratio = getattr(row, "ratio", None)
        pred = getattr(row, "predicted_us", None)
        out += f"{pred:{NUM_W}.2f}" if pred is not None else f"{'-':>{NUM_W}}"
        out += f"{ratio:11.2f}" if ratio is not None else f"{'-':>11}"
    if with_algorithm:
        out += f"  {row.algorithm}"
    return out


def table_lines(bench, algo_name: str, rows: Iterable, options, meta: Mapping) -> list[str]:
    """A whole table at once (the command prints rows as they complete instead)."""
    rows = list(rows)
    show = _show_algorithm(rows, algo_name)
    return [*title_lines(bench, algo_name, meta), header_line(bench, options, show), *(format_row(bench, r, options, show) for r in rows)]


PROFILE_KEYS = ("total", "wait", "kernels", "mpi_start", "python", "wait_calls", "kernel_calls", "starts")


def profile_lines(rows: Sequence) -> list[str]:
    """``--profile``: where one run's time goes, per size (executor RunStats, mean over ranks)."""
    rows = [r for r in rows if getattr(r, "profile", None)]
    if not rows:
        return []
    keys = [k for k in PROFILE_KEYS if k in rows[0].profile]
    head = "# Size (B)".ljust(SIZE_W) + "".join(f"{k + ('(us)' if not k.endswith(('calls', 'starts')) else ''):>16}" for k in keys)
    lines = ["# Profile: executor time per run, mean over ranks (wait = blocked waiting for MPI; "
             "python = bookkeeping between MPI and kernels)", head]
    for r in rows:
        lines.append(f"{r.size:<{SIZE_W}d}" + "".join(f"{r.profile[k]:16.2f}" for k in keys))
    return lines


def ratios(results: Mapping[str, Sequence], base: str, key: str = "avg_us") -> list[tuple[int, float, dict[str, float | None]]]:
    """Per size of ``base``: (size, base time, {algo: time / base time}) for time field ``key``."""
    out = []
    by_size = {name: {r.size: r for r in rows} for name, rows in results.items()}
    for r in results[base]:
        b = getattr(r, key)
        rel: dict[str, float | None] = {}
        for name in results:
            if name == base:
                continue
            other = by_size[name].get(r.size)
            t = getattr(other, key) if other is not None else None
            rel[name] = (t / b) if t is not None and b else None
        out.append((r.size, b, rel))
    return out


def comparison_base(names: Sequence[str]) -> str:
    return "mpi" if "mpi" in names else names[0]


def comparison_lines(bench, results: Mapping[str, Sequence]) -> list[str]:
    """The final summary: each algorithm's average latency divided by MPI's, per size.

    A second block does the same for the median over iterations of the
    slowest rank (less sensitive to a rank descheduled now and then).
    """
    names = list(results)
    if len(names) < 2:
        return []
    base = comparison_base(names)
    others = [n for n in names if n != base]
    width = max(12, *(len(n) + 2 for n in others))
    lines: list[str] = []
    for key, what in (("avg_us", "average latency"), ("median_us", "median latency")):
        if any(getattr(r, key) is None for rows in results.values() for r in rows):
            continue
        if lines:
            lines.append("")
        lines += [
            f"# Comparison: {what} relative to {base} (algo / {base}; below 1.00 is faster)",
            ("# Size (B)".ljust(SIZE_W) if bench.sized else "#") + f"{base + ' (us)':>{NUM_W}}" + "".join(f"{n:>{width}}" for n in others),
        ]
        for size, base_us, rel in ratios(results, base, key):
            cells = "".join(f"{'-':>{width}}" if rel[n] is None else f"{rel[n]:{width}.2f}" for n in others)
            lines.append((f"{size:<{SIZE_W}d}" if bench.sized else " ") + f"{base_us:{NUM_W}.2f}" + cells)
    return lines


def to_json(bench, meta: Mapping, results: Mapping[str, Sequence]) -> dict:
    """Everything measured, as one JSON-ready dict (``"schema": "ccsynth.bench/1"``)."""
    names = list(results)
    doc = {
        "schema": SCHEMA,
        "benchmark": bench.name,
        "title": f"OMB Python MPI {bench.title} Test",
        "collective": bench.kind,
        "size_semantics": bench.size_doc,
        **dict(meta),
        "algorithms": names,
        "results": {name: [r.to_dict() for r in rows] for name, rows in results.items()},
    }
    if len(names) > 1:
        base = comparison_base(names)
        med = {s: rel for s, _, rel in ratios(results, base, "median_us")} if all(
            r.median_us is not None for rows in results.values() for r in rows) else {}
        doc["comparison"] = {
            "base": base,
            "rows": [{"size_bytes": s, "base_avg_us": b, "ratio": rel, "median_ratio": med.get(s)} for s, b, rel in ratios(results, base)],
        }
    return doc


def write_json(path: str | os.PathLike, doc: dict) -> None:
    """Write ``doc`` as JSON, atomically (see :mod:`ccsynth.atomic`)."""
    write_text(path, json.dumps(doc, indent=1) + "\n")


def emit(line: str, out=None) -> None:
    """Print one line now (rows are the progress display, so never buffer them)."""
    out = out or sys.stdout
    out.write(line + "\n")
    out.flush()
