"""Task graphs: a program already lowered to the units a runtime executes, sized in bytes.

A :class:`Task` is an op whose size is given in bytes instead of chunks, with
its matching partner given explicitly (``TaskGraph.matches``). ``copy`` and
``reduce`` tasks are local work; a ``recv`` with ``reduce`` pays the
reduction of its bytes after its overhead, exactly as for a schedule.
Zero-byte tasks are allowed (an empty message still pays its overheads and
latency; an empty local task is free), so a lowering can express what the
runtime really does (:mod:`ccsynth.synth.executor_model` builds these from
ccsynth's executor). :func:`ccsynth.synth.simulate.simulate_graph` runs one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ccsynth.collectives.spec import Collective
from ccsynth.errors import ScheduleError

__all__ = ["Task", "TaskGraph"]


@dataclass(frozen=True)
class Task:
    """One unit of work of a :class:`TaskGraph`: an op whose size is ``nbytes`` bytes.

    ``kind`` is ``send``, ``recv`` (with ``reduce``: a receive that reduces
    into its destination), ``copy`` or ``reduce``; ``deps`` are ids of
    tasks of the same rank; ``label`` names what the task stands for in
    error messages.
    """

    id: int
    rank: int
    kind: str
    nbytes: int
    peer: int = -1
    deps: tuple[int, ...] = ()
    reduce: bool = False
    channel: int = 0
    label: str = ""

    @property
    def count(self) -> int:
        """The size in the graph's unit (bytes): what the simulator multiplies by the unit size."""
        return self.nbytes

    def describe(self) -> str:
        what = f"{self.kind} of {self.nbytes} B" + (f" with rank {self.peer}" if self.peer >= 0 else "")
        return f"task {self.id} (rank {self.rank}: {what}{', ' + self.label if self.label else ''})"


@dataclass(frozen=True)
class TaskGraph:
    """A program lowered to tasks for one message size (see the module docstring).

    ``matches`` maps every send task id to its receive task id and back;
    ``size_bytes`` is the collective's message size (nccl-tests
    convention), which the result reports and the lower bound uses;
    ``working_set_bytes`` the bytes of buffers the busiest rank touches
    in one call (input, output, scratch, staging; 0: unknown), the
    default footprint (see :mod:`ccsynth.synth.simulate`).
    """

    name: str
    collective: Collective
    size_bytes: float
    ops: tuple[Task, ...]
    matches: Mapping[int, int]
    working_set_bytes: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "ops", tuple(self.ops))
        for i, t in enumerate(self.ops):
            if t.id != i:
                raise ScheduleError(f"task graph {self.name!r}: task at position {i} has id {t.id}")
            if t.kind not in ("send", "recv", "copy", "reduce"):
                raise ScheduleError(f"task graph {self.name!r}: {t.describe()} has unknown kind {t.kind!r}")
            if t.kind in ("send", "recv") and self.matches.get(i) is None:
                raise ScheduleError(f"task graph {self.name!r}: {t.describe()} has no matching partner")
