"""The ``ccsynth`` command line.

Each sub-command lives in its own module under ``ccsynth/commands/`` and
exposes ``register(subparsers)``, which adds its parser and sets
``func=run`` (``run(args) -> int``). This module wires them together, sets up
logging, and turns every :class:`~ccsynth.errors.CCSynthError` into one line
on stderr and exit status 2 -- users never see a traceback for their own
mistakes. SIGTERM unwinds like Ctrl-C (:class:`Terminated`, exit status
143), so that files being written are left as they were (see
:mod:`ccsynth.atomic`); commands run under mpiexec (:data:`MPI_COMMANDS`)
keep SIGTERM's default action. A name in :data:`COMMANDS` without its module is a bug, so it fails
loudly (``ModuleNotFoundError``) instead of vanishing from ``--help``.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import signal
import sys
import threading

from ccsynth import __version__
from ccsynth.errors import CCSynthError

__all__ = ["COMMANDS", "MPI_COMMANDS", "PROGRESS_LOGGERS", "Terminated", "build_parser", "setup_logging", "main"]

# Order here is the order in ``ccsynth --help``.
COMMANDS = ("topo", "baseline", "synth", "reshard", "verify", "simulate", "export", "bench")
#: Commands that run under mpiexec: SIGTERM keeps its default action there.
MPI_COMMANDS = ("bench",)

log = logging.getLogger("ccsynth")


class _Parser(argparse.ArgumentParser):
    """argparse with exit status 2 and the program name on every error."""

    def error(self, message: str):  # noqa: D401 - argparse API
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="ccsynth",
        description="Synthesize, verify, simulate and run collective-communication schedules.",
    )
    parser.add_argument("--version", action="version", version=f"ccsynth {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output (-vv for debug)")
    parser.add_argument("-q", "--quiet", action="store_true", help="only errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for name in COMMANDS:
        importlib.import_module(f"ccsynth.commands.{name}").register(sub)
    return parser


class _Formatter(logging.Formatter):
    """Progress (INFO) as plain lines; warnings and errors with their level; logger names with -vv."""

    def __init__(self, debug: bool):
        super().__init__()
        self.debug = debug

    def format(self, record: logging.LogRecord) -> str:
        msg = record.getMessage()
        if self.debug:
            return f"{record.levelname} {record.name}: {msg}"
        return msg if record.levelno == logging.INFO else f"{record.levelname.lower()}: {msg}"


# Loggers whose INFO records are progress of long work (solver stages), shown by default.
PROGRESS_LOGGERS = ("ccsynth.synth.synthesize", "ccsynth.synth.tables")


def setup_logging(verbose: int, quiet: bool) -> None:
    """Warnings by default, plus progress of long work; ``-v`` INFO, ``-vv`` DEBUG, ``-q`` errors only."""
    level = logging.ERROR if quiet else (logging.WARNING, logging.INFO, logging.DEBUG)[min(verbose, 2)]
    for name in PROGRESS_LOGGERS:
        logging.getLogger(name).setLevel(logging.NOTSET if (quiet or verbose) else logging.INFO)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Formatter(verbose >= 2))
    root = logging.getLogger("ccsynth")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False


class Terminated(BaseException):
    """SIGTERM arrived: unwinds like KeyboardInterrupt, so that half-written files are removed."""


def _on_sigterm(signum, frame):  # noqa: ARG001 - signal handler signature
    raise Terminated()


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    setup_logging(args.verbose, args.quiet)
    # SIGTERM (kill, a batch system's time limit) unwinds the stack like Ctrl-C does, so that an
    # interrupted write removes its temporary file and leaves the previous output in place.
    # Not for MPI runs (bench): one rank unwinding while the others wait in a collective would hang
    # the job, where the default action lets mpiexec tear it down.
    previous = _install_sigterm() if args.command not in MPI_COMMANDS else None
    try:
        return int(args.func(args) or 0)
    except CCSynthError as e:
        print(f"ccsynth {args.command}: error: {_one_line(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("ccsynth: interrupted", file=sys.stderr)
        return 130
    except Terminated:
        print("ccsynth: terminated", file=sys.stderr)
        return 128 + signal.SIGTERM
    except BrokenPipeError:
        return 0
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _install_sigterm():
    """Install the SIGTERM handler (main thread only); returns the previous handler, or None."""
    if threading.current_thread() is not threading.main_thread():
        return None
    previous = signal.getsignal(signal.SIGTERM)
    if previous is not signal.SIG_DFL:
        return None  # someone (a test harness, an embedding program) handles it already
    signal.signal(signal.SIGTERM, _on_sigterm)
    return previous


def _one_line(e: BaseException) -> str:
    """The message on one line: a newline in a user-supplied name must not split the error."""
    return " ".join(str(e).split("\n"))


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
