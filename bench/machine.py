"""The machine's state before a measurement: its load and its cores.

A profile or a benchmark taken while other work runs measures that work as
much as the machine: ``ccsynth topo profile`` at a load average of 14 on 2
cores once recorded a machine whose predictions then missed by up to
1,723x. :func:`machine_state` reads the one-minute load average
(``os.getloadavg``) and the cores this process may run on
(``os.sched_getaffinity``, else ``os.cpu_count``); the machine is *busy*
when the load exceeds the cores -- more threads want to run than there are
cores, so some wait, ours among them. ``topo profile`` refuses a busy
machine unless told ``--busy-ok`` (the profile then says so in its
description and records the load); ``bench`` warns and marks its output.

Tests and scripts inject the state through the environment, never through
the real load: :data:`LOAD_ENV` (``"14"`` or ``"14,12,10"``, the 1, 5 and 15
minute averages) and :data:`CORES_ENV` (an integer).

Example:
    >>> s = MachineState(load=(14.0, 12.0, 10.0), cores=2)
    >>> s.busy, s.describe()
    (True, 'load average 14.00, 12.00, 10.00 on 2 cores')
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

from ccsynth.errors import CCSynthError

__all__ = ["LOAD_ENV", "CORES_ENV", "BUSY_MARK", "MachineState", "machine_state", "busy_error", "with_start_load",
           "profiled_busy"]

#: what a raw profile's ``load`` says of a machine profiled busy (``--busy-ok``), and its topology's description
BUSY_MARK = "PROFILED BUSY"

#: environment variables that replace the real load average and core count (tests; see the module docstring)
LOAD_ENV = "CCSYNTH_LOADAVG"
CORES_ENV = "CCSYNTH_CORES"


@dataclass(frozen=True)
class MachineState:
    """The load average (1, 5, 15 minutes; None where the system has none) and the cores this process may use."""

    load: tuple[float, float, float] | None
    cores: int

    @property
    def busy(self) -> bool:
        """Whether more work wants to run than there are cores (the one-minute load above the cores)."""
        return self.load is not None and self.load[0] > self.cores

    def describe(self) -> str:
        if self.load is None:
            return f"{self.cores} cores (no load average on this system)"
        return f"load average {', '.join(f'{x:.2f}' for x in self.load)} on {self.cores} cores"

    def to_dict(self) -> dict:
        return {"load_average": None if self.load is None else list(self.load), "cores": self.cores,
                "busy": self.busy}


def _injected_load(text: str) -> tuple[float, float, float]:
    try:
        values = [float(x) for x in text.replace(" ", "").split(",") if x]
    except ValueError:
        values = []
    if not 1 <= len(values) <= 3 or any(not (v >= 0) or v == float("inf") for v in values):
        raise CCSynthError(f"{LOAD_ENV}={text!r}: give the load average as 1 to 3 non-negative numbers, e.g. 14 or "
                           f"14,12,10")
    padded = values + [values[-1]] * (3 - len(values))
    return padded[0], padded[1], padded[2]


def _injected_cores(text: str) -> int:
    if not text.strip().isdigit() or int(text) < 1:
        raise CCSynthError(f"{CORES_ENV}={text!r}: give the cores as a positive integer")
    return int(text)


def machine_state() -> MachineState:
    """This machine's state now (or as :data:`LOAD_ENV` / :data:`CORES_ENV` say)."""
    env_load, env_cores = os.environ.get(LOAD_ENV), os.environ.get(CORES_ENV)
    load: tuple[float, float, float] | None
    if env_load is not None:
        load = _injected_load(env_load)
    else:
        try:
            load = os.getloadavg()
        except (AttributeError, OSError):  # pragma: no cover - not a Unix
            load = None
    if env_cores is not None:
        cores = _injected_cores(env_cores)
    else:
        try:
            cores = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):  # pragma: no cover - not Linux
            cores = os.cpu_count() or 1
    return MachineState(load, cores)


def busy_error(state: MachineState, what: str, flag: str = "--busy-ok") -> CCSynthError:
    """The error that refuses ``what`` on a busy machine, naming the state and the flag that overrides."""
    return CCSynthError(f"the machine is busy ({state.describe()}: more work wants to run than there are cores), so "
                        f"{what} would measure that work as much as the machine; run it when the load is below "
                        f"{state.cores}, or pass {flag} to measure anyway (the output then says it was busy)")


def with_start_load(raw, state: MachineState):
    """A raw profile (:class:`~ccsynth.bench.profiling.probes.RawProfile`, whose ``load`` is the load average when
    it ended) with the state it started in before it, and :data:`BUSY_MARK` where that was busy: the fit writes
    both into the topology (:func:`profiled_busy`), and a refit of the saved raw file gives the same."""
    busy = f" ({BUSY_MARK}: --busy-ok)" if state.busy else ""
    start = "n/a" if state.load is None else ", ".join(f"{x:.2f}" for x in state.load)
    return replace(raw, load=f"{start} on {state.cores} cores when it started{busy}; {raw.load} when it ended")


def profiled_busy(load: str) -> bool:
    """Whether a raw profile's ``load`` says it was taken on a busy machine (:func:`with_start_load`)."""
    return BUSY_MARK in load
