"""What the command line shows of long work, on standard error.

The library only logs (every synthesis stage at INFO) and calls progress
callbacks; this module, the one place that prints progress, decides what
the user sees at each verbosity:

* ``-q`` (:data:`QUIET`): nothing;
* default (:data:`SUMMARY`): summaries (:meth:`Progress.say`), and
  for work of N known items a ``[k/N]`` counter (:meth:`Progress.counter`)
  whose lines are *throttled*, as are the stages of a synthesis
  (:class:`SynthStages`): a line appears when :attr:`Progress.interval`
  seconds have passed since the last one, and the last item's line appears
  when the whole count took that long. A 0.3 s synthesis thus prints no
  progress at all (its result says what came of it), and an 8 s stretch of
  solver work shows where it is every couple of seconds;
* ``-v`` (:data:`DETAIL`): every line, details (:meth:`Progress.detail`)
  included. Where the same details are already logged at INFO (synthesis
  stages) the callers leave them to the log, so that nothing prints twice;
  and a line the same as the one before is not printed again.

The times the commands print are the command's wall time, from
:func:`start_clock` (``ccsynth.cli.main``) to now, with the CPU time beside
it where the two differ (:func:`elapsed_text`): on a loaded machine a run
of 109 s wall may have used 13 s of CPU, and the user waited the 109.

Only rank 0 of an MPI job shows progress (``Progress.for_args(args,
rank)``). No progress library is a dependency of ccsynth, hence this small
module instead of one.

Example:
    >>> import io
    >>> out = io.StringIO()
    >>> p = Progress(SUMMARY, out, interval=0.0)
    >>> c = p.counter("size", 2)
    >>> c.step("1K: 3.1 us"); c.step("2K: 3.5 us")
    >>> print(out.getvalue(), end="")
    [1/2] size 1K: 3.1 us
    [2/2] size 2K: 3.5 us
"""

from __future__ import annotations

import os
import re
import sys
import time
from typing import TextIO
from collections.abc import Callable

__all__ = ["QUIET", "SUMMARY", "DETAIL", "INTERVAL_S", "Progress", "Counter", "SynthStages", "level_from",
           "start_clock", "elapsed_text", "seconds_text"]

QUIET, SUMMARY, DETAIL = 0, 1, 2
#: default seconds between two throttled lines
INTERVAL_S = 2.0


#: (wall, CPU) when the command started (:func:`start_clock`; ccsynth.cli.main calls it first)
_START = (time.perf_counter(), time.process_time())


def now() -> float:
    """The clock of progress lines (``time.monotonic``; a test may replace this function to stop time)."""
    return time.monotonic()


def start_clock() -> None:
    """Count the command's time from now (``ccsynth.cli.main`` calls it before parsing its arguments)."""
    global _START
    _START = (time.perf_counter(), time.process_time())


def _cpu_s() -> float:
    """CPU seconds of this process and of its finished children (a solver run as a program)."""
    t = os.times()
    return time.process_time() + t.children_user + t.children_system


def seconds_text(wall_s: float, cpu_s: float | None = None) -> str:
    """``"12.3 s"``, or ``"109.2 s (13.0 s CPU)"`` where the CPU time differs from the wall time by more than a
    fifth (a loaded machine, or waiting)."""
    text = f"{wall_s:.1f} s"
    if cpu_s is not None and abs(wall_s - cpu_s) > 0.2 * max(wall_s, 0.5):
        text += f" ({cpu_s:.1f} s CPU)"
    return text


def elapsed_text() -> str:
    """The wall time since the command started, with its CPU time beside it where they differ
    (:func:`seconds_text`)."""
    return seconds_text(time.perf_counter() - _START[0], _cpu_s() - _START[1])


def level_from(verbose: int, quiet: bool) -> int:
    """The display level of ``-v`` count and ``-q`` (``-q`` wins)."""
    if quiet:
        return QUIET
    return DETAIL if verbose else SUMMARY


class Progress:
    """Progress lines on ``stream`` (standard error) at a verbosity ``level``."""

    def __init__(self, level: int = SUMMARY, stream: TextIO | None = None, *, interval: float = INTERVAL_S,
                 clock: Callable[[], float] | None = None):
        self.level = level
        self.stream = stream
        self.interval = interval
        self.clock = clock or now
        self._last = self.clock()
        self._last_text: str | None = None

    @classmethod
    def for_args(cls, args, rank: int = 0) -> Progress:
        """The display the command line asked for (``args.verbose``/``args.quiet``); silent on ranks other than 0."""
        level = level_from(getattr(args, "verbose", 0), getattr(args, "quiet", False)) if rank == 0 else QUIET
        return cls(level)

    @property
    def verbose(self) -> bool:
        return self.level >= DETAIL

    def _print(self, text: str) -> None:
        if text == self._last_text:  # a line says a thing once
            return
        out = self.stream if self.stream is not None else sys.stderr
        out.write(text + "\n")
        out.flush()
        self._last = self.clock()
        self._last_text = text

    def due(self) -> bool:
        """Whether a throttled line may be printed now (the interval has passed since the last line)."""
        return self.clock() - self._last >= self.interval

    def say(self, text: str) -> None:
        """A stage summary: shown unless ``-q``."""
        if self.level >= SUMMARY:
            self._print(text)

    def detail(self, text: str) -> None:
        """A detail: shown with ``-v``; by default only when the interval has passed (a heartbeat)."""
        if self.level >= DETAIL or (self.level >= SUMMARY and self.due()):
            self._print(text)

    def counter(self, label: str, total: int) -> Counter:
        """A ``[k/N]`` counter over ``total`` items called ``label``."""
        return Counter(self, label, total)


class Counter:
    """``[k/N] label detail`` lines: every one with ``-v``, throttled by default (see the module docstring)."""

    def __init__(self, progress: Progress, label: str, total: int):
        self.progress = progress
        self.label = label
        self.total = max(int(total), 0)
        self.k = 0
        self._start = progress.clock()

    def prefix(self) -> str:
        return f"[{self.k}/{self.total}]" if self.total else f"[{self.k}]"

    def step(self, detail: str = "") -> None:
        """Item k+1 is done: say so if due."""
        self.k += 1
        p = self.progress
        last = self.total and self.k >= self.total and p.clock() - self._start >= p.interval
        if p.level >= DETAIL or (p.level >= SUMMARY and (p.due() or last)):
            p._print(" ".join(x for x in (self.prefix(), self.label, detail) if x))


_CANDIDATES = re.compile(r"^(\d+) candidate")


class SynthStages:
    """The progress callback of :func:`ccsynth.synth.synthesize.synthesize` (``progress(stage, seconds, detail)``).

    By default every stage is a throttled heartbeat, and the candidate
    sketches a ``[k/N]`` counter (N from the ``sketches`` stage): a synthesis
    shorter than :attr:`Progress.interval` prints no stage line at all (its
    summary on standard output says what came of it), a long one shows where
    it is every couple of seconds. With ``-v`` it prints nothing: the library
    logs every stage at INFO, which ``-v`` shows. ``prefix`` starts every line
    (e.g. the size of a ``--sizes`` sweep).
    """

    def __init__(self, progress: Progress, *, prefix: str = ""):
        self.progress = progress
        self.prefix = prefix
        self._candidates: Counter | None = None

    def __call__(self, stage: str, seconds: float, detail: str) -> None:
        p = self.progress
        if p.level != SUMMARY:
            return
        head = f"{self.prefix}[{seconds:7.2f}s]"
        if stage == "sketches":
            m = _CANDIDATES.match(detail)
            self._candidates = p.counter("candidate", int(m.group(1)) if m else 0)
            p.detail(f"{head} {m.group(0) + 's' if m else 'candidates'} to route and order")
            return
        if stage == "candidate" and self._candidates is not None:
            self._candidates.label = f"{head} candidate:"
            self._candidates.step(detail)
            return
        p.detail(f"{head} {stage}: {detail}")
