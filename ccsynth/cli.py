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

``-v``/``-q`` are accepted anywhere on the command line: every parser
(sub-commands and their actions included) gets them through
:class:`_Parser`, each under a destination of its own, since argparse parses
a sub-command into a fresh namespace and would otherwise let ``ccsynth -v
synth -v`` count one ``-v``; :func:`verbosity` adds them up. What the user
sees of long work is :mod:`ccsynth.commands._progress`'s business; logging
shows warnings by default, INFO with ``-v``, DEBUG with ``-vv``.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import itertools
import logging
import os
import re
import signal
import sys
import threading

from ccsynth.commands._progress import start_clock
from ccsynth.commands._versions import version_lines
from ccsynth.errors import CCSynthError

__all__ = ["COMMANDS", "MPI_COMMANDS", "LAUNCHER_RANK_VARS", "launcher_rank", "Terminated", "build_parser", "verbosity", "setup_logging", "main"]

# Order here is the order in ``ccsynth --help``.
COMMANDS = ("topo", "baseline", "synth", "tune", "reshard", "verify", "simulate", "export", "bench")
#: Commands that run under mpiexec: SIGTERM keeps its default action there.
MPI_COMMANDS = ("bench", "tune")

log = logging.getLogger("ccsynth")


_VERBOSE, _QUIET = "_verbose_", "_quiet_"
_parser_ids = itertools.count()


class _Parser(argparse.ArgumentParser):
    """argparse with exit status 2 and the program name on every error, and ``-v``/``-q`` on every parser."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # A value that starts with a minus and a digit is a value (``--shape -4x64x16``, ``--src-mesh -1x2``,
        # ``-i -5``), refused by its own check as out of range, not by argparse as "expected one argument" (no
        # option of ccsynth looks like a negative number; Python 3.13's argparse reads them the same way).
        self._negative_number_matcher = re.compile(r"^-\.?\d")
        n = next(_parser_ids)
        self.register("action", None, _StoreOnce)
        self.register("action", "store", _StoreOnce)
        g = self.add_argument_group("output")
        g.add_argument("-v", "--verbose", action="count", dest=f"{_VERBOSE}{n}", default=argparse.SUPPRESS,
                       help="more output: every stage of long work (-vv: debug log)")
        g.add_argument("-q", "--quiet", action="store_true", dest=f"{_QUIET}{n}", default=argparse.SUPPRESS,
                       help="no progress, only errors")

    def parse_known_args(self, args=None, namespace=None):
        namespace, extras = super().parse_known_args(args, namespace)
        # a sub-command's parser returns first: the deepest parser that took part is the one that stays
        namespace.__dict__.setdefault(_CHOSEN, self)
        return namespace, extras

    def parse_args(self, args=None, namespace=None):
        namespace, extras = self.parse_known_args(args, namespace)
        chosen = namespace.__dict__.pop(_CHOSEN, self)
        namespace.__dict__.pop(_GIVEN, None)
        if extras:
            chosen.error(_unknown_options(self, chosen, extras))
        return namespace

    def error(self, message: str):  # noqa: D401 - argparse API
        if launcher_rank() > 0:
            # Under mpiexec every rank parses the same command line: rank 0 says what is wrong, once.
            self.exit(2)
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {message}\n")


#: namespace keys of one parse (removed before the namespace is returned): the sub-command's parser that
#: parsed, and the option string and value each destination got
_CHOSEN, _GIVEN = "_ccsynth_parser_", "_ccsynth_given_"


class _StoreOnce(argparse._StoreAction):
    """argparse's ``store``, refusing two spellings of one option with different values (``-T float64 --dtype
    int32``: argparse would keep the last one silently)."""

    def __call__(self, parser, namespace, values, option_string=None):
        given = namespace.__dict__.setdefault(_GIVEN, {})
        before = given.get(self.dest)
        if before is not None and before[0] != option_string and before[1] != values:
            raise argparse.ArgumentError(self, f"{option_string} {_shown(values)} conflicts with {before[0]} "
                                               f"{_shown(before[1])} (the same option): give it once")
        given[self.dest] = (option_string, values)
        super().__call__(parser, namespace, values, option_string)


def _shown(value) -> str:
    return " ".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)


def _unknown_options(top: argparse.ArgumentParser, chosen: argparse.ArgumentParser, extras: list[str]) -> str:
    """What is wrong with arguments no parser took: an option ``chosen`` (the sub-command) lacks is named with the
    sub-commands beside it that have it, and the options it takes."""
    flags = [a.split("=", 1)[0] for a in extras if a.startswith("-") and len(a) > 1]
    if not flags:
        return f"unrecognized arguments: {' '.join(extras)}"
    flag = flags[0]
    siblings = _siblings(top, chosen)
    having = sorted({name for name, p in siblings.items() if flag in p._option_string_actions})
    takes = ["/".join(a.option_strings)
             for a in chosen._actions if a.option_strings and a.help != argparse.SUPPRESS
             and not set(a.option_strings) & {"-h", "-v", "-q"}]
    prefix = " ".join(chosen.prog.split()[1:]) or chosen.prog
    where = f" (an option of {', '.join(having)})" if having else ""
    return f"{prefix} has no option {flag}{where}; it takes: {', '.join(takes) or 'no options'}"


def _siblings(top: argparse.ArgumentParser, chosen: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """The parsers of the sub-command list ``chosen`` belongs to, by their full names (``bench allreduce``)."""
    stack = [top]
    while stack:
        p = stack.pop()
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                if chosen in a.choices.values():
                    return {" ".join(sub.prog.split()[1:]): sub for sub in a.choices.values()}
                stack.extend(a.choices.values())
    return {}


#: where MPI launchers put a process's rank before MPI starts (MPICH/Hydra, Open MPI, PMIx, MVAPICH, Slurm)
LAUNCHER_RANK_VARS = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK", "MV2_COMM_WORLD_RANK", "SLURM_PROCID")


def launcher_rank() -> int:
    """This process's rank as its MPI launcher set it in the environment (0 when not launched by one): known
    before MPI is initialised, so that a command-line error is printed by rank 0 alone."""
    for var in LAUNCHER_RANK_VARS:
        value = os.environ.get(var, "")
        if value.isdigit():
            return int(value)
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The parser of every command in :data:`COMMANDS` (a new one each call; :func:`main` keeps one)."""
    return _build_parser(COMMANDS)


@functools.lru_cache(maxsize=2)
def _cached_parser(commands: tuple[str, ...]) -> argparse.ArgumentParser:
    """One parser per process (per command list) for :func:`main`: building one costs 0.1-0.3 s (argparse makes
    a help formatter per argument), parsing a command line milliseconds, and a program (or a test) may call
    ``main`` thousands of times. Parsing leaves a parser as it was: every default is immutable."""
    return _build_parser(commands)


def _build_parser(commands: tuple[str, ...]) -> argparse.ArgumentParser:
    parser = _Parser(
        prog="ccsynth",
        description="Synthesize, verify, simulate and run collective-communication schedules.",
    )
    parser.add_argument("--version", action=_VersionAction, help="versions of ccsynth, Python, MPI, CuPy and the solvers")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for name in commands:
        importlib.import_module(f"ccsynth.commands.{name}").register(sub)
    return parser


def verbosity(args: argparse.Namespace) -> tuple[int, bool]:
    """(number of ``-v``, whether ``-q``) wherever they were given; also stored as ``args.verbose``/``args.quiet``."""
    found = vars(args)
    verbose = sum(v for k, v in found.items() if k.startswith(_VERBOSE))
    quiet = any(v for k, v in found.items() if k.startswith(_QUIET))
    for k in [k for k in found if k.startswith((_VERBOSE, _QUIET))]:
        delattr(args, k)
    args.verbose, args.quiet = verbose, quiet
    return verbose, quiet


class _VersionAction(argparse.Action):
    """``--version``: one line per component (see :mod:`ccsynth.commands._versions`), then exit 0."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):
        super().__init__(option_strings=option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        sys.stdout.write("\n".join(version_lines()) + "\n")
        parser.exit(0)


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


class _NoRepeat(logging.Filter):
    """Drops a record whose message is the one just shown: a line says a thing once."""

    def __init__(self):
        super().__init__()
        self.last: tuple[int, str] | None = None

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.levelno, record.getMessage())
        if key == self.last:
            return False
        self.last = key
        return True


def setup_logging(verbose: int, quiet: bool) -> None:
    """Warnings by default; ``-v`` INFO (every stage of long work), ``-vv`` DEBUG, ``-q`` errors only."""
    level = logging.ERROR if quiet else (logging.WARNING, logging.INFO, logging.DEBUG)[min(verbose, 2)]
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Formatter(verbose >= 2))
    handler.addFilter(_NoRepeat())
    root = logging.getLogger("ccsynth")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False


class Terminated(BaseException):
    """SIGTERM arrived: unwinds like KeyboardInterrupt, so that half-written files are removed."""


def _on_sigterm(signum, frame):  # noqa: ARG001 - signal handler signature
    raise Terminated()


def main(argv: list[str] | None = None) -> int:
    start_clock()  # the times commands print are the command's wall time (ccsynth.commands._progress)
    _take_ctrl_c()
    previous = None
    command = ""
    try:
        # one parser per process (building one costs 0.1-0.3 s); it imports every command's module: Ctrl-C
        # here is one line too
        args = _cached_parser(COMMANDS).parse_args(argv)
        command = args.command
        setup_logging(*verbosity(args))
        # SIGTERM (kill, a batch system's time limit) unwinds the stack like Ctrl-C does, so that an
        # interrupted write removes its temporary file and leaves the previous output in place.
        # Not for MPI runs (bench): one rank unwinding while the others wait in a collective would hang
        # the job, where the default action lets mpiexec tear it down.
        previous = _install_sigterm() if command not in MPI_COMMANDS else None
        return int(args.func(args) or 0)
    except CCSynthError as e:
        print(f"ccsynth {command}: error: {_one_line(e)}", file=sys.stderr)
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


def _take_ctrl_c() -> None:
    """From here on Ctrl-C raises KeyboardInterrupt (unwinding writes, see :mod:`ccsynth.atomic`), which ``main``
    turns into one line: the handler ``import ccsynth`` set for the command's first seconds exits at once."""
    if threading.current_thread() is threading.main_thread() and \
            signal.getsignal(signal.SIGINT) is getattr(sys.modules.get("ccsynth"), "_interrupted_while_loading", None):
        signal.signal(signal.SIGINT, signal.default_int_handler)


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
