"""The ccsynth exception hierarchy.

Every error a user can cause (a malformed file, an unknown name, an
infeasible sketch, a mismatched buffer) is raised as a subclass of
:class:`CCSynthError` with a message that names what is wrong. The CLI turns
these into one line on stderr and exit status 2; anything else is a bug.
"""


class CCSynthError(Exception):
    """Base class of every error ccsynth raises on purpose."""


class TopologyError(CCSynthError, ValueError):
    """A topology is malformed, inconsistent, or unknown."""


class CollectiveError(CCSynthError, ValueError):
    """A collective name or its parameters are invalid."""


class ScheduleError(CCSynthError, ValueError):
    """A schedule is malformed or does not implement its collective."""


class ScheduleFormatError(ScheduleError):
    """A schedule file cannot be read (corrupted, wrong version, bad XML)."""


class ExportLimitError(ScheduleError):
    """A schedule cannot be written within the limits of the runtime that would load it."""


class SketchError(CCSynthError, ValueError):
    """A communication sketch is malformed or contradicts its topology."""


class InfeasibleError(CCSynthError):
    """The synthesis problem has no solution (or none was found in time)."""


class SolverError(CCSynthError):
    """The MILP solver is missing or failed."""


class BufferMismatchError(CCSynthError, ValueError):
    """Buffers passed to a collective do not match (size, dtype, layout)."""


class PlanError(CCSynthError, ValueError):
    """An algorithm plan (per-size table) is malformed."""


class OpError(CCSynthError, ValueError):
    """An unknown reduction op, or one that does not apply to the buffers' dtype."""


class SizeError(CCSynthError, ValueError):
    """A size or size range could not be parsed."""


class LayoutError(CCSynthError, ValueError):
    """A device mesh, sharding spec or tensor shape of a resharding is malformed."""


class PeerError(CCSynthError, RuntimeError):
    """Another rank failed in the same collective call, or went away.

    Raised on the ranks that did nothing wrong themselves, so that every rank
    of the call raises. When the failing rank's error is itself a ccsynth
    error (a :class:`BufferMismatchError`, say), the other ranks raise that
    same class instead, with the failing rank named in the message; the
    attribute ``failed_rank`` holds its number either way.
    """


class ConcurrentCallError(CCSynthError, RuntimeError):
    """Two threads called one Communicator at once: the communicator refuses every call from then on, on every rank."""


class CallTimeoutError(PeerError, TimeoutError):
    """A collective call waited longer than its timeout for another rank."""


__all__ = [
    "CCSynthError",
    "TopologyError",
    "CollectiveError",
    "ScheduleError",
    "ScheduleFormatError",
    "ExportLimitError",
    "SketchError",
    "InfeasibleError",
    "SolverError",
    "BufferMismatchError",
    "PlanError",
    "OpError",
    "SizeError",
    "LayoutError",
    "PeerError",
    "ConcurrentCallError",
    "CallTimeoutError",
]
