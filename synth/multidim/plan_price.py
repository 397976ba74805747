"""What a phase plan costs: the dimension-level model, in the plan's own task order, against the bandwidth bound.

A phase plan file (:mod:`ccsynth.formats.phase_plan_file`) is priced by the
model its scheduler used (:mod:`~ccsynth.synth.multidim.pipeline`): its
chunks on the topology's dimensions, every dimension taking its phases in
the order the file lists them (:func:`~ccsynth.synth.multidim.phases.from_phase_plan`).
That is the figure ``ccsynth synth`` prints for a plan it writes and the one
``ccsynth simulate FILE`` gives, bit for bit: the file holds the order the
scheduler timed, and replaying that order reproduces the timing exactly.
The plan's chunks are shares of the buffer, so a plan prices at any size
(``ccsynth simulate FILE --sizes ...``): its order and shares stay, the
bytes scale.

Against the bandwidth bound (:func:`~ccsynth.synth.multidim.lp.bandwidth_bound`:
the busiest dimension's bytes alone, over every split among orders) a
price reports its gap, and per dimension the utilization the model gives.

Example:
    >>> from ccsynth.topologies.catalog import hierarchical
    >>> from ccsynth.synth.multidim.search import schedule_multidim
    >>> from ccsynth.synth.multidim.phases import to_phase_plan
    >>> t = hierarchical([(2, 100), (4, 50)])
    >>> md = schedule_multidim(t, "allreduce", 1 << 20, "themis")
    >>> price_phase_plan(to_phase_plan(md), t, 1 << 20).time_us == md.makespan_us
    True
"""

from __future__ import annotations

from dataclasses import dataclass

from ccsynth.collectives.phase_plan import PhasePlan
from ccsynth.collectives.spec import busbw_factor
from ccsynth.synth.multidim.cost import PhaseCosts
from ccsynth.synth.multidim.lp import bandwidth_bound
from ccsynth.synth.multidim.network import DimNet, dim_net
from ccsynth.synth.multidim.phases import from_phase_plan
from ccsynth.synth.solver import SolverOptions
from ccsynth.topologies.model import BYTES_PER_US_PER_GBPS, Topology

__all__ = ["PRICED_BY", "PlanPrice", "price_phase_plan"]

#: how a phase plan is priced (what ``synth`` and ``simulate`` say)
PRICED_BY = "dimension-level model"


@dataclass(frozen=True)
class PlanPrice:
    """A phase plan's time at one size, and what it says against the bandwidth bound."""

    size_bytes: int
    time_us: float
    bandwidth_bound_us: float
    n_ranks: int
    kind: str
    dimensions: tuple[tuple[str, float], ...]  # (name, utilization) per active dimension
    priced_by: str = PRICED_BY

    @property
    def algbw(self) -> float:
        """GB/s: the size over the time (nccl-tests)."""
        return self.size_bytes / (self.time_us * BYTES_PER_US_PER_GBPS)

    @property
    def busbw(self) -> float:
        return self.algbw * busbw_factor(self.kind, self.n_ranks)

    @property
    def gap(self) -> float:
        """The time over the bandwidth bound (>= 1)."""
        return self.time_us / self.bandwidth_bound_us

    def to_dict(self) -> dict:
        return {"size_bytes": self.size_bytes, "time_us": self.time_us, "algbw_GBps": self.algbw,
                "busbw_GBps": self.busbw, "bandwidth_bound_us": self.bandwidth_bound_us, "gap": self.gap,
                "priced_by": self.priced_by,
                "dimensions": [{"name": n, "utilization": u} for n, u in self.dimensions]}


def price_phase_plan(plan: PhasePlan, topology: Topology | DimNet, size_bytes: int,
                     options: SolverOptions | None = None) -> PlanPrice:
    """``plan`` (verified) on ``topology`` at ``size_bytes`` (see the module docstring). Raises
    :class:`~ccsynth.errors.ScheduleError` where the plan does not fit the topology."""
    net = topology if isinstance(topology, DimNet) else dim_net(topology)
    md = from_phase_plan(plan, net, size_bytes)
    bound = bandwidth_bound(net, PhaseCosts(net), plan.kind, size_bytes, options)
    util = md.timing.utilization(net)
    return PlanPrice(int(size_bytes), md.makespan_us, bound, net.n_ranks, plan.kind,
                     tuple((spec.name, u) for spec, u in zip(net.dims, util)))
