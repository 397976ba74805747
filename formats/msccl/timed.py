"""The order in which a schedule's ops start when simulated: the order its threadblocks keep.

MSCCL runs the steps of a threadblock one after another, in the file's
order. The IR schedule has no such order: the simulator (like the
executor) starts an op as soon as its dependencies are done, and the
transfers of one stream (sender, receiver, channel) move their data first
come, first served. A threadblock that lists its steps in another order
than the one they would run in makes a ready step wait behind one that is
not ready yet, and the file runs slower than the schedule (up to 1.45x on
the catalog with an order by dependency level).

:func:`start_times` simulates the schedule (as it will be written: after
the transforms that fit it to the runtime) and returns, for every op, when
it started: a transfer's send and receive the moment its data began to
flow, a local op when its engine took it, else when it completed. The
threadblock layout (:mod:`.threadblocks`, order ``timed``) lists every
threadblock's steps in that order, with one stream per threadblock, so the
simulated run of the schedule is a run the file allows: every constraint the
file adds (a threadblock's order, its ``depid``/``deps``) already held in
it, and the file read back simulates to the same time. Ties and zero-time
local ops are broken by dependencies, so the order is a topological one.

The times depend on the topology and the message size (and on the
protocol's pricing, :mod:`ccsynth.topologies.protocols`): a file is laid
out for the size it is written for.
"""

from __future__ import annotations

import logging

from ccsynth.collectives.schedule import Schedule
from ccsynth.errors import ScheduleError
from ccsynth.synth.simulate import simulate
from ccsynth.topologies.model import Topology

log = logging.getLogger(__name__)

__all__ = ["start_times"]


def start_times(schedule: Schedule, topology: Topology, size_bytes: float) -> tuple[float, ...] | None:
    """When every op of ``schedule`` starts in its simulation on ``topology`` at ``size_bytes``.

    None where the schedule cannot be simulated there (a link the topology
    lacks, a deadlock): the caller lays it out by dependency level instead.
    """
    try:
        trace = simulate(schedule, topology, size_bytes, trace=True).trace
    except ScheduleError as e:
        log.debug("no simulated order for %r on %s: %s", schedule.name, topology.name, e)
        return None
    if trace is None:  # not reached: simulate(trace=True) always records
        return None
    times = list(trace.op_done)
    for w in trace.work:
        if schedule.ops[w.op].kind not in ("send", "recv"):
            times[w.op] = min(times[w.op], w.start)
    for x in trace.transfers:
        times[x.send] = times[x.recv] = x.data_start
    return tuple(times)
