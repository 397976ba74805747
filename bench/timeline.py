"""A picture of a schedule: every connection's transfers over time (``ccsynth simulate --timeline``).

:func:`write_timeline` takes a simulation run with ``trace=True`` and writes

* a Gantt chart (``.png``, ``.svg``, ``.pdf``; needs matplotlib, the
  ``plot`` extra): one row per connection and channel (``src->dst``), a
  light bar for each transfer's latency phase and a solid bar for its data
  phase, colored by the chunk it carries (its first chunk's place in the
  receiving buffer), so idle links show as gaps; below them, one row per
  rank for its engines' work (per-message overheads in grey, local copies
  and reductions in dark grey). The title names the schedule, the
  collective, the topology, the size and the predicted time;
* or the trace itself as JSON (``.json``) for scripts.

Large schedules: at most ``max_rows`` connection rows (the busiest ones,
by time moving data) and ``max_engine_rows`` rank rows are drawn; the
caption says how many were left out. Bars are drawn as one polygon
collection per kind, so 1e5 transfers draw in seconds.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict

from ccsynth.atomic import write_text
from ccsynth.bench.plot import require_matplotlib, save_figure
from ccsynth.collectives.schedule import Schedule
from ccsynth.errors import CCSynthError
from ccsynth.synth.simulate import SimResult
from ccsynth.units import format_size

__all__ = ["write_timeline", "plot_timeline", "timeline_dict", "IMAGE_SUFFIXES"]

IMAGE_SUFFIXES = (".png", ".svg", ".pdf")
#: Connection rows drawn at most (the busiest); rank rows at most.
MAX_ROWS = 48
MAX_ENGINE_ROWS = 16


def write_timeline(result: SimResult, schedule: Schedule, path: str | os.PathLike, **kwargs) -> str:
    """Write the timeline of ``result`` (simulated with ``trace=True``) to ``path``.

    The suffix chooses the form: ``.json`` the trace, ``.png``/``.svg``/``.pdf``
    the chart (``kwargs`` go to :func:`plot_timeline`). Returns a one-line
    summary of what was written. Raises :class:`CCSynthError` for another
    suffix, a missing matplotlib or a file that cannot be written.
    """
    suffix = os.path.splitext(os.fspath(path))[1].lower()
    if suffix == ".json":
        write_text(path, json.dumps(timeline_dict(result, schedule), indent=1) + "\n", what="timeline")
        return f"{len(_trace(result).transfers)} transfers, {len(_trace(result).work)} engine work items"
    if suffix not in IMAGE_SUFFIXES:
        raise CCSynthError(
            f"--timeline {os.fspath(path)!r}: name a .json file (the trace) or an image ({', '.join(IMAGE_SUFFIXES)})"
        )
    return plot_timeline(result, schedule, path, **kwargs)


def timeline_dict(result: SimResult, schedule: Schedule) -> dict:
    """The trace of ``result`` with what it is of: schedule, topology, size, predicted time."""
    return {
        "schedule": schedule.name,
        "collective": schedule.collective.to_dict(),
        "topology": result.topology,
        "size_bytes": result.size_bytes,
        "time_us": result.time_us,
        **_trace(result).to_dict(),
    }


def _trace(result: SimResult):
    if result.trace is None:
        raise CCSynthError("the timeline needs a simulation run with trace=True")
    return result.trace


def plot_timeline(
    result: SimResult,
    schedule: Schedule,
    path: str | os.PathLike,
    *,
    max_rows: int = MAX_ROWS,
    max_engine_rows: int = MAX_ENGINE_ROWS,
    engines: bool = True,
) -> str:
    """Draw the Gantt chart of ``result`` (see the module doc); returns a one-line summary."""
    require_matplotlib("--timeline with an image")
    import matplotlib

    matplotlib.use("Agg")  # files only
    import matplotlib.pyplot as plt
    from matplotlib.collections import PolyCollection

    trace = _trace(result)
    rows, left_out = _connection_rows(trace.transfers, max_rows)
    engine_rows, engines_left_out = _engine_rows(trace.work, max_engine_rows) if engines else ([], 0)
    labels = [label for label, _ in rows] + [label for label, _ in engine_rows]
    n_rows = max(len(labels), 1)
    fig_h = min(2.0 + 0.24 * n_rows, 30.0)
    fig, ax = plt.subplots(figsize=(13, fig_h))
    cmap = matplotlib.colormaps["turbo"]
    end = result.time_us if result.time_us > 0 else 1.0

    lat, lat_c, data, data_c = [], [], [], []
    for y, (_, spans) in enumerate(rows):
        for x in spans:
            color = cmap(_chunk_position(x.chunks, schedule))
            if x.data_ready > x.posted:
                lat.append(_box(x.posted, x.data_ready, y, 0.5))
                lat_c.append(color)
            data.append(_box(x.data_start, max(x.data_end, x.data_start), y, 0.8))
            data_c.append(color)
    if lat:
        ax.add_collection(PolyCollection(lat, facecolors=lat_c, alpha=0.3, linewidths=0))
    if data:
        # outlines separate back-to-back transfers, while they are few enough to see
        edge = 0.15 if len(data) <= 40 * max(len(rows), 1) else 0
        ax.add_collection(PolyCollection(data, facecolors=data_c, edgecolors="black", linewidths=edge))
    over: list = []
    local: list = []
    for k, (_, spans) in enumerate(engine_rows):
        y = len(rows) + k
        for w in spans:
            (local if w.kind in ("copy", "reduce") else over).append(_box(w.start, w.end, y, 0.6))
    if over:
        ax.add_collection(PolyCollection(over, facecolors="0.65", alpha=0.6, linewidths=0))
    if local:
        ax.add_collection(PolyCollection(local, facecolors="0.25", alpha=0.8, linewidths=0))
    if engine_rows:
        ax.axhline(len(rows) - 0.5, color="0.5", linewidth=0.8)

    ax.set_xlim(0, end * 1.01)
    ax.set_ylim(n_rows - 0.5, -0.5)
    ax.set_yticks(range(len(labels)))
    ax.set_yticklabels(labels, fontsize=7 if n_rows > 24 else 8)
    ax.set_xlabel("time (us)")
    ax.grid(True, axis="x", alpha=0.3)
    ax.axvline(result.time_us, color="red", linewidth=0.8, linestyle="--")
    coll = schedule.collective
    ax.set_title(
        f"{schedule.name}: {coll.kind} on {result.topology} ({coll.n_ranks} ranks), "
        f"{format_size(int(result.size_bytes))}: {result.time_us:.3f} us predicted",
        fontsize=10,
    )
    sm = matplotlib.cm.ScalarMappable(cmap=cmap, norm=matplotlib.colors.Normalize(0, 1))
    bar = fig.colorbar(sm, ax=ax, pad=0.01, fraction=0.03)
    bar.set_label("chunk: place in the receiving buffer", fontsize=8)
    note = "light: latency; solid: data (by chunk); gaps: idle"
    if engine_rows:
        note += "; rank rows: overheads (grey), copies/reductions (dark)"
    if left_out:
        note += f"; {left_out} less busy connection(s) not shown"
    if engines_left_out:
        note += f"; {engines_left_out} rank(s) not shown"
    fig.text(0.01, 0.005, note, fontsize=7, color="0.3", ha="left", va="bottom")
    fig.tight_layout(rect=(0, 0.02, 1, 1))
    save_figure(fig, path, "timeline")
    shown = len(rows)
    return (f"{len(trace.transfers)} transfers on {shown + left_out} connection(s)"
            + (f", {shown} drawn" if left_out else ""))


def _box(t0: float, t1: float, y: float, h: float) -> list[tuple[float, float]]:
    return [(t0, y - h / 2), (t1, y - h / 2), (t1, y + h / 2), (t0, y + h / 2)]


def _chunk_position(chunks, schedule: Schedule) -> float:
    """Where a range starts in its buffer, in [0, 1)."""
    n = schedule.buffer_chunks(chunks.buf)
    return chunks.index / n if n > 0 else 0.0


def _connection_rows(transfers, max_rows: int):
    """``[(label, spans)]`` per (src, dst, channel), the busiest ``max_rows`` in (src, dst, channel)
    order, and how many rows were left out."""
    by_key = defaultdict(list)
    for x in transfers:
        by_key[(x.src, x.dst, x.channel)].append(x)
    keys, left_out = _busiest(by_key, max_rows, lambda x: x.data_end - x.data_start)
    multi = any(k[2] for k in by_key)
    rows = [(f"{s}->{d}" + (f" ch{c}" if multi else ""), by_key[(s, d, c)]) for s, d, c in keys]
    return rows, left_out


def _engine_rows(work, max_rows: int):
    """``[(label, spans)]`` per rank with engine work (the busiest ``max_rows``), and how many were left out."""
    by_rank = defaultdict(list)
    for w in work:
        if w.end > w.start:
            by_rank[w.rank].append(w)
    ranks, left_out = _busiest(by_rank, max_rows, lambda w: w.end - w.start)
    return [(f"rank {r} engine", by_rank[r]) for r in ranks], left_out


def _busiest(groups: dict, max_rows: int, busy) -> tuple[list, int]:
    """The keys of ``groups`` in order, only the ``max_rows`` busiest (by the sum of ``busy`` over
    a group's spans) when there are more; and how many were left out."""
    keys = sorted(groups)
    if len(keys) <= max_rows:
        return keys, 0
    total = {k: sum(busy(x) for x in groups[k]) for k in keys}
    keep = set(sorted(keys, key=lambda k: (-total[k], k))[:max_rows])
    return [k for k in keys if k in keep], len(keys) - len(keep)
