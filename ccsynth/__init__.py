"""ccsynth: synthesize, verify, simulate and run collective-communication schedules.

Public API (see README.md and docs/python.md):

>>> import ccsynth
>>> topo = ccsynth.get_topology("ring:4")
>>> ccsynth.Collective("allreduce", 4).size_chunks
1
"""

from __future__ import annotations

import os as _os
import sys as _sys
from itertools import pairwise as _pairwise


def _interrupted_while_loading(signum, frame):  # noqa: ARG001 - signal handler signature
    """Ctrl-C before the command line's ``main`` runs (Python imports for seconds on a loaded machine): one line and
    exit status 130, as later; nothing is being written yet. ``ccsynth.cli.main`` hands Ctrl-C back to Python."""
    _os.write(2, b"ccsynth: interrupted\n")
    _os._exit(130)


def _run_as_command() -> bool:
    """Whether this process is the ``ccsynth`` command (the console script, or ``python -m ccsynth``)."""
    argv = getattr(_sys, "orig_argv", _sys.argv)
    return _os.path.basename(_sys.argv[0] if _sys.argv else "") == "ccsynth" or any(
        a == "-m" and b == "ccsynth" for a, b in _pairwise(argv))


if _run_as_command():
    import signal as _signal

    if _signal.getsignal(_signal.SIGINT) is _signal.default_int_handler:
        _signal.signal(_signal.SIGINT, _interrupted_while_loading)

# In a source checkout the subpackages live beside this folder (topologies/,
# collectives/, synth/, ...) and are mapped under ``ccsynth`` at install
# time. Adding the checkout root to __path__ makes ``import ccsynth.synth``
# work from the checkout too (e.g. ``python -m ccsynth`` in the repo root).
_root = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
if not _os.path.isdir(_os.path.join(_os.path.dirname(__file__), "topologies")) and _os.path.isfile(
    _os.path.join(_root, "topologies", "model.py")
):
    __path__.append(_root)

__version__ = "0.1.0"

from ccsynth.errors import *  # noqa: E402, F403
from ccsynth.errors import __all__ as _errors_all  # noqa: E402
from ccsynth.collectives.spec import Collective  # noqa: E402
from ccsynth.collectives.schedule import Chunks, Op, Schedule, save_schedule  # noqa: E402
from ccsynth.collectives.builder import ScheduleBuilder  # noqa: E402
from ccsynth.topologies.model import Link, Switch, Spine, SharedPort, Dimension, Topology  # noqa: E402


def __getattr__(name):
    # Heavier pieces load on first use so that ``import ccsynth`` stays cheap.
    lazy = {
        # files of every format ccsynth reads (MSCCL XML, TACCL profiles, ...)
        "get_topology": ("ccsynth.formats.files", "get_topology"),
        "load_schedule": ("ccsynth.formats.files", "load_schedule"),
        "verify": ("ccsynth.collectives.verify", "verify"),
        "simulate": ("ccsynth.synth.simulate", "simulate"),
        "Communicator": ("ccsynth.communicator", "Communicator"),  # with the built-in default plan
        "synthesize": ("ccsynth.synthesis", "synthesize"),  # topology -> Schedule or Plan
        "load_plan": ("ccsynth.collectives.plan", "load_plan"),
        "save_plan": ("ccsynth.collectives.plan", "save_plan"),
        "Plan": ("ccsynth.collectives.plan", "Plan"),
        "waitall": ("ccsynth.collectives.requests", "waitall"),
        "reshard": ("ccsynth.synth.reshard.api", "reshard"),  # cross-mesh resharding over MPI
    }
    if name in lazy:
        import importlib

        mod, attr = lazy[name]
        return getattr(importlib.import_module(mod), attr)
    raise AttributeError(f"module 'ccsynth' has no attribute {name!r}")


def __dir__() -> list[str]:
    # the lazy names of __getattr__ are in __all__ but not yet in globals(): list both, so that dir() and tab
    # completion show synthesize, Communicator, save_plan, ... before their first use
    return sorted(set(globals()) | set(__all__))


__all__ = [
    "Collective",
    "Chunks",
    "Op",
    "Schedule",
    "ScheduleBuilder",
    "load_schedule",
    "save_schedule",
    "Link",
    "Switch",
    "Spine",
    "SharedPort",
    "Dimension",
    "Topology",
    "get_topology",
    "verify",
    "simulate",
    "Communicator",
    "synthesize",
    "load_plan",
    "save_plan",
    "Plan",
    "waitall",
    "reshard",
    *_errors_all,
]
