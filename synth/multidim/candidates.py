"""Multi-dimension schedules as candidates of the synthesizer.

:func:`ccsynth.synth.synthesize.synthesize` asks this module, on every
topology with dimensions, for the best multi-dimension schedule of the
collective (allreduce, reduce-scatter, allgather) and size, and keeps it
when it simulates faster than what the MILPs and the packed trees found;
above the synthesizer's ``MILP_MAX_RANKS`` it does not run the MILPs at
all when this module (or the trees) has an answer.

Every scheduler is run in the dimension-level model with the chunk counts
the IR takes (:func:`~ccsynth.synth.multidim.lowering.ir_max_chunks`); the
model's best (``auto``) is lowered, verified and simulated -- the model
matches the simulator on the catalog's fabrics, so one lowering suffices --
and the others' model times are reported alongside.

Example:
    >>> from ccsynth.topologies.catalog import hierarchical
    >>> from ccsynth.collectives.spec import Collective
    >>> got = best_multidim(hierarchical([(2, 200), (2, 50)]), Collective("allreduce", 4), 1 << 20)
    >>> got.schedule.meta["verified"], sorted(got.model_us) == sorted(["fixed", "themis", "themis-flex", "lp"])
    (True, True)
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from ccsynth.collectives.schedule import Schedule
from ccsynth.collectives.spec import Collective
from ccsynth.collectives.verify import verify
from ccsynth.errors import TopologyError
from ccsynth.synth.multidim.chunks import KINDS
from ccsynth.synth.multidim.lowering import MAX_IR_RANKS, ir_max_chunks, to_schedule
from ccsynth.synth.multidim.network import dim_net
from ccsynth.synth.multidim.search import POLICIES, MultiDimSchedule, fastest, schedule_multidim
from ccsynth.synth.simulate import simulate
from ccsynth.synth.solver import SolverOptions
from ccsynth.topologies.model import Topology

__all__ = ["MultiDimCandidate", "applies", "best_multidim"]

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class MultiDimCandidate:
    """The best multi-dimension schedule for a case: verified, simulated, and every scheduler's model time."""

    scheduler: str
    schedule: Schedule
    time_us: float  # event-driven simulator
    model: MultiDimSchedule
    model_us: dict = field(default_factory=dict, compare=False)  # scheduler -> dimension-level model time


def applies(topology: Topology, collective: Collective) -> bool:
    """Whether multi-dimension candidates exist for this case (dimensions, collective, at most MAX_IR_RANKS ranks)."""
    return bool(topology.dims) and collective.kind in KINDS and 2 <= topology.n_ranks <= MAX_IR_RANKS


def best_multidim(topology: Topology, collective: Collective, size_bytes: float,
                  options: SolverOptions | None = None) -> MultiDimCandidate | None:
    """The model's best multi-dimension schedule as a verified Schedule, or None where none applies."""
    if not applies(topology, collective):
        return None
    try:
        net = dim_net(topology)
    except TopologyError as e:  # dimensions whose groups no per-dimension algorithm can serve
        log.info("no multi-dimension candidates on %s: %s", topology.name, e)
        return None
    cap = ir_max_chunks(collective.kind, net)
    found = [schedule_multidim(net, collective.kind, size_bytes, policy, max_chunks=cap, options=options)
             for policy in POLICIES]
    model_us = {policy: md.makespan_us for policy, md in zip(POLICIES, found)}
    best = fastest(found)
    sched = to_schedule(best, topology)
    verify(sched, topology)
    t = simulate(sched, topology, size_bytes).time_us
    log.info("multi-dimension %s: %d chunks, %.3f us simulated (%.3f us in the dimension model)", best.scheduler,
             best.n_chunks, t, best.makespan_us)
    return MultiDimCandidate(best.scheduler, sched.with_meta(verified=True, predicted_us=t, size_bytes=size_bytes),
                             t, best, model_us)
