"""Where a schedule's time goes, dimension by dimension, against the LP's own bound.

The LP's own bound ``T*`` (:mod:`~ccsynth.synth.multidim.lp`) lets every
dimension work from time 0 to the end on nothing but the *floor* charges of
its phases (:meth:`~ccsynth.synth.multidim.cost.PhaseCosts.floor`). A
schedule timed by the dimension-level model (:mod:`~ccsynth.synth.multidim.pipeline`)
with makespan ``T`` splits, on every dimension ``d``::

    T = floor_d + exposed_d + fill_d + idle_d + drain_d

* ``floor_d``: the floor charges of the dimension's phases (the busiest
  dimension's is at least ``T*``: the split and its rounding);
* ``exposed_d``: the time it was busy beyond them -- per-message latency and
  overheads that no earlier phase's bytes hid;
* ``fill_d``: before its first phase starts (the pipeline's start-up);
* ``drain_d``: after its last phase ends (the other dimensions finishing);
* ``idle_d``: the gaps in between.

:func:`startup_optimum` turns the measurement into the question the LP
cannot ask by itself: the lattice LP again, with each dimension's measured
``exposed + fill + drain`` as time its phases cannot use -- what a
different split could reach if every dimension kept those costs. It is an
estimate (a new split changes them), not a bound; where it is close to
the schedule's time, no re-split helps, and what is left is the pipeline's
start-up and per-message costs themselves (``docs/results.md``).

Example:
    >>> from ccsynth.topologies.catalog import hierarchical
    >>> from ccsynth.synth.multidim.network import dim_net
    >>> from ccsynth.synth.multidim.policies import equal_units, fixed_chunks
    >>> from ccsynth.synth.multidim.pipeline import time_chunks
    >>> net = dim_net(hierarchical([(2, 100, 0.0, 0.0), (2, 100, 0.0, 0.0)]))
    >>> costs = PhaseCosts(net)
    >>> chunks = fixed_chunks(net, costs, "reduce_scatter", 4e6, equal_units(1))
    >>> [(round(x.floor_us), round(x.fill_us)) for x in dimension_losses(costs, time_chunks(net, costs, "reduce_scatter", 4e6, chunks))]
    [(20, 0), (10, 20)]
"""

from __future__ import annotations

from dataclasses import dataclass

from ccsynth.synth.multidim.cost import PhaseCosts
from ccsynth.synth.multidim.lp import solve_lattice
from ccsynth.synth.multidim.pipeline import DimTiming
from ccsynth.synth.solver import SolverOptions

__all__ = ["DimensionLoss", "dimension_losses", "startup_optimum"]


@dataclass(frozen=True)
class DimensionLoss:
    """One dimension's share of a makespan (us): see the module docstring; the five sum to the makespan."""

    dim: int
    floor_us: float
    exposed_us: float
    fill_us: float
    idle_us: float
    drain_us: float

    @property
    def head_us(self) -> float:
        """What :func:`startup_optimum` charges the dimension besides its phases: exposed, fill and drain."""
        return self.exposed_us + self.fill_us + self.drain_us

    def to_dict(self) -> dict:
        return {"dim": self.dim, "floor_us": self.floor_us, "exposed_us": self.exposed_us, "fill_us": self.fill_us,
                "idle_us": self.idle_us, "drain_us": self.drain_us}


def dimension_losses(costs: PhaseCosts, timing: DimTiming) -> tuple[DimensionLoss, ...]:
    """Per active dimension of ``costs.net``: where ``timing``'s makespan goes (see the module docstring)."""
    n = costs.net.n_dims
    floor = [0.0] * n
    first = [timing.makespan_us] * n
    last = [0.0] * n
    for t in timing.tasks:
        floor[t.dim] += costs.floor(t.dim, t.algorithm, t.range_bytes, reduce=t.reduce)
        first[t.dim] = min(first[t.dim], t.start_us)
        last[t.dim] = max(last[t.dim], t.end_us)
    out = []
    for d in range(n):
        busy = timing.busy_us[d]
        fill = first[d] if busy > 0 else timing.makespan_us
        drain = timing.makespan_us - last[d] if busy > 0 else 0.0
        out.append(DimensionLoss(d, floor[d], busy - floor[d], fill, timing.makespan_us - busy - fill - drain, drain))
    return tuple(out)


def startup_optimum(costs: PhaseCosts, kind: str, size_bytes: float, chunks: int,
                    losses: tuple[DimensionLoss, ...], options: SolverOptions | None = None) -> float:
    """The lattice LP (charge ``floor``, ``chunks`` equal chunks) with every dimension's measured
    :attr:`~DimensionLoss.head_us` as time its phases cannot use: what a re-split could reach if each
    dimension kept those costs (an estimate, see the module docstring)."""
    heads = {x.dim: x.head_us for x in losses}
    return solve_lattice(costs.net, costs, kind, size_bytes, chunks, options, "floor", heads).bound_us
