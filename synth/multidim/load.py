"""Themis's per-dimension load: what its greedy policy balances.

Themis (Rashidi et al., ISCA'22) tracks, per dimension ``d``, the load the
chunks scheduled so far put on it. A reduce-scatter phase of ``bytes`` on a
dimension of ``p_d`` ranks moves ``bytes * (p_d - 1) / p_d`` per rank at the
dimension's bandwidth ``BW_d``; normalised to dimension 0's bandwidth::

    load_d += bytes * (p_d - 1) / p_d / (BW_d / BW_0);  bytes /= p_d

for each dimension of the chunk's order in turn. The allgather phases of an
allreduce run the same ranges in the reverse order, adding the same loads
again. ``BW_d`` here is the rate of the per-dimension algorithm the phase
runs (:meth:`~ccsynth.synth.multidim.cost.PhaseCosts.us_per_byte`: a ring's
slowest hop, direct's share of the rank's port), which is the dimension's
bandwidth on the catalog's switched fabrics.

Example:
    >>> from ccsynth.topologies.catalog import hierarchical
    >>> from ccsynth.synth.multidim.network import dim_net
    >>> from ccsynth.synth.multidim.cost import PhaseCosts
    >>> from ccsynth.synth.multidim.chunks import make_chunk
    >>> net = dim_net(hierarchical([(4, 200), (2, 50)]))
    >>> costs = PhaseCosts(net)
    >>> loads = DimLoads(net, costs, "reduce_scatter")
    >>> loads.add(make_chunk(net, costs, "reduce_scatter", (0, 1), 1000.0), 1000.0)
    >>> loads.values   # dim 0: 1000 * 3/4; dim 1: 250 * 1/2 / (50/200)
    [750.0, 500.0]
"""

from __future__ import annotations

from ccsynth.synth.multidim.chunks import ChunkPlan
from ccsynth.synth.multidim.cost import PhaseCosts
from ccsynth.synth.multidim.network import DimNet

__all__ = ["DimLoads"]


class DimLoads:
    """Per-dimension load (bytes normalised to dimension 0's bandwidth) of the chunks added so far."""

    def __init__(self, net: DimNet, costs: PhaseCosts, kind: str):
        self.net = net
        self.costs = costs
        self.halves = 2 if kind == "allreduce" else 1  # allreduce: the allgather phases load the same again
        self.values = [0.0] * net.n_dims
        self._bw0: dict[tuple[int, str], float] = {}

    def _relative_bw(self, d: int, algorithm: str) -> float:
        """``BW_d / BW_0`` for the algorithm (dimension 0 taken at its ring rate, else direct)."""
        key = (d, algorithm)
        if key not in self._bw0:
            first = self.net.dims[0].algorithms[0]
            self._bw0[key] = self.costs.us_per_byte(0, first) / self.costs.us_per_byte(d, algorithm)
        return self._bw0[key]

    def cost(self, chunk: ChunkPlan, nbytes: float) -> list[float]:
        """The load ``chunk`` of ``nbytes`` adds to every dimension."""
        out = [0.0] * self.net.n_dims
        b = nbytes
        for d, alg in zip(chunk.order, chunk.algorithms):
            p = self.net.dims[d].size
            out[d] += self.halves * b * (p - 1) / p / self._relative_bw(d, alg)
            b /= p
        return out

    def bytes_to_fill(self, d: int, algorithm: str, gap: float) -> float:
        """The chunk bytes whose first phase, on dimension ``d`` by ``algorithm``, adds ``gap`` to its load
        (the inverse of :meth:`cost` for the first phase of an order)."""
        p = self.net.dims[d].size
        return gap * self._relative_bw(d, algorithm) * p / (p - 1) / self.halves

    def gap(self) -> float:
        """The most loaded dimension's load minus the least loaded one's."""
        return max(self.values) - min(self.values)

    def add(self, chunk: ChunkPlan, nbytes: float) -> None:
        for d, x in enumerate(self.cost(chunk, nbytes)):
            self.values[d] += x

    def least_loaded_first(self) -> tuple[int, ...]:
        """The dimensions by load, least loaded first (ties: lower dimension first)."""
        return tuple(sorted(range(self.net.n_dims), key=lambda d: (self.values[d], d)))
