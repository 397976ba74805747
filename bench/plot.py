"""``--plot FILE.png``: latency and busbw against message size, one line per algorithm.

With ``--predict`` each algorithm's predicted latency and busbw follow as a
dashed line in its colour.

Needs matplotlib (the ``plot`` extra); :func:`require_matplotlib` says so
before a long run rather than after it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from ccsynth.atomic import open_atomic
from ccsynth.errors import CCSynthError

__all__ = ["require_matplotlib", "plot_format", "plot_results", "save_figure"]


def require_matplotlib(what: str = "--plot") -> None:
    """Raise :class:`CCSynthError` (naming ``what`` needs it) if matplotlib is missing."""
    try:
        import matplotlib  # noqa: F401, PLC0415
    except ImportError:
        raise CCSynthError(f"{what} needs matplotlib: pip install 'ccsynth[plot]'") from None


def plot_format(path: str | os.PathLike, what: str = "plot") -> str:
    """The image format ``path``'s suffix names (png without one); CCSynthError if matplotlib cannot write it."""
    require_matplotlib()
    from matplotlib.backend_bases import FigureCanvasBase

    fmt = os.path.splitext(os.fspath(path))[1].lstrip(".").lower() or "png"
    known = FigureCanvasBase.get_supported_filetypes()
    if fmt not in known:
        raise CCSynthError(f"cannot write {what} {os.fspath(path)!r}: matplotlib writes {', '.join(sorted(known))}, "
                           f"not {fmt!r}")
    return fmt


def plot_results(bench, results: Mapping[str, Sequence], path: str | os.PathLike, subtitle: str = "") -> None:
    """Write a PNG: average latency (left) and busbw (right) against Size, log-log."""
    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")  # files only; no display on a cluster node
    import matplotlib.pyplot as plt

    sized = bench.sized
    fig, axes = plt.subplots(1, 2 if sized else 1, figsize=(11 if sized else 6, 4.2), squeeze=False)
    ax_lat = axes[0][0]
    for name, rows in results.items():
        rows = [r for r in rows if r.avg_us > 0]
        if not rows:
            continue
        if sized:
            xs = [r.size for r in rows]
            (line,) = ax_lat.plot(xs, [r.avg_us for r in rows], marker="o", ms=3, label=name)
            axes[0][1].plot(xs, [r.busbw for r in rows], marker="o", ms=3, label=name)
            pred = [r for r in rows if getattr(r, "predicted_us", None)]
            if pred:  # --predict: the prediction, dashed, in the measured line's colour
                px = [r.size for r in pred]
                color = line.get_color()
                ax_lat.plot(px, [r.predicted_us for r in pred], ls="--", lw=1, color=color, label=f"{name} predicted")
                axes[0][1].plot(px, [r.nbytes / (r.predicted_us * 1e3) * (r.busbw / r.algbw if r.algbw else 1.0)
                                     for r in pred], ls="--", lw=1, color=color)
        else:
            ax_lat.bar([name], [rows[0].avg_us])
    if sized:
        from matplotlib.ticker import FuncFormatter, LogLocator

        from ccsynth.units import format_size

        human = FuncFormatter(lambda x, _pos: format_size(x) if x >= 1 and float(x).is_integer() else "")
        for ax in axes[0]:
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.xaxis.set_major_locator(LogLocator(base=4))  # a label every other power of two
            ax.xaxis.set_major_formatter(human)
            ax.set_xlabel("Size (B)")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend()
        ax_bw = axes[0][1]
        ax_bw.set_ylabel("busbw (GB/s)")
        ax_bw.set_title("bus bandwidth")
    ax_lat.set_ylabel("avg latency (us)")
    ax_lat.set_title("latency")
    ax_lat.grid(True, which="both", alpha=0.3)
    fig.suptitle(f"ccsynth bench {bench.name}" + (f" ({subtitle})" if subtitle else ""))
    fig.tight_layout()
    save_figure(fig, path, "plot")


def save_figure(fig, path: str | os.PathLike, what: str) -> None:
    """Write ``fig`` to ``path`` and close it: the format from the name's suffix (as savefig would),
    the bytes through an atomic file; :class:`CCSynthError` (naming ``what``) if it cannot be written."""
    import matplotlib.pyplot as plt

    try:
        fmt = plot_format(path, what)
        with open_atomic(path, "wb", encoding=None, what=what) as f:
            fig.savefig(f, dpi=110, format=fmt)
    finally:
        plt.close(fig)
