"""Chunks and their phases: the unit every multi-dimension scheduler decides about.

A collective of ``S`` bytes (nccl-tests size: the allreduce buffer, the
reduce-scatter input, the allgather output) is cut into chunks; chunk ``k``
is ``units_k`` of the ``U`` equal units of the buffer, so it holds ``S *
units_k / U`` bytes. Each chunk has its own reduce-scatter *order*, a
permutation of the active dimensions (positions in
:attr:`~ccsynth.synth.multidim.network.DimNet.dims`):

* reduce-scatter runs one phase per dimension in that order; after the
  phase on a dimension of size ``p`` a rank keeps ``1/p`` of what it held;
* allgather runs the phases in the reverse order, each multiplying what a
  rank holds by ``p``;
* allreduce runs the reduce-scatter phases, then the allgather phases.

:func:`chunk_steps` lists a chunk's phases in the order they run, with the
range each covers (the bytes a rank holds before a reduce-scatter phase,
after an allgather phase) as a fraction of the chunk; :func:`make_chunk`
picks the per-dimension algorithm of each phase (the faster one for its
range, :class:`~ccsynth.synth.multidim.cost.PhaseCosts`).

Example:
    >>> from ccsynth.topologies.catalog import hierarchical
    >>> from ccsynth.synth.multidim.network import dim_net
    >>> net = dim_net(hierarchical([(4, 200), (2, 50)]))
    >>> [(s.dim, s.fraction, s.reduce) for s in chunk_steps(net, "allreduce", ChunkPlan((1, 0), ("direct", "direct")))]
    [(1, 1.0, True), (0, 0.5, True), (0, 0.5, False), (1, 1.0, False)]
"""

from __future__ import annotations

from dataclasses import dataclass

from ccsynth.errors import CollectiveError
from ccsynth.synth.multidim.cost import PhaseCosts
from ccsynth.synth.multidim.network import DimNet

__all__ = ["KINDS", "ChunkPlan", "Step", "chunk_steps", "make_chunk", "check_kind", "natural_order"]

#: the collectives the multi-dimension schedulers build
KINDS = ("allreduce", "reduce_scatter", "allgather")


@dataclass(frozen=True)
class ChunkPlan:
    """One chunk: its reduce-scatter dimension order, the algorithm of each of those phases, its size in units.

    ``algorithms[i]`` runs the phases on dimension ``order[i]`` (the
    allgather phase on that dimension covers the same range and uses the
    same algorithm).
    """

    order: tuple[int, ...]
    algorithms: tuple[str, ...]
    units: int = 1

    def describe(self) -> str:
        return "-".join(str(d) for d in self.order)


@dataclass(frozen=True)
class Step:
    """One phase of a chunk: the dimension, the algorithm, its range as a fraction of the chunk, reduce or gather."""

    dim: int
    algorithm: str
    fraction: float
    reduce: bool


def check_kind(kind: str) -> str:
    if kind not in KINDS:
        raise CollectiveError(f"the multi-dimension schedulers build {', '.join(KINDS)}; got {kind!r}")
    return kind


def natural_order(net: DimNet) -> tuple[int, ...]:
    """Ascending dimensions: dimension 0 (the fastest-varying coordinate) reduces first."""
    return tuple(range(net.n_dims))


def _fractions(net: DimNet, order: tuple[int, ...]) -> list[float]:
    """The range of reduce-scatter phase ``i`` as a fraction of the chunk: ``1 / prod(sizes of order[:i])``."""
    out, f = [], 1.0
    for d in order:
        out.append(f)
        f /= net.dims[d].size
    return out


def chunk_steps(net: DimNet, kind: str, chunk: ChunkPlan) -> tuple[Step, ...]:
    """The phases of ``chunk`` in the order they run (see the module docstring)."""
    fr = _fractions(net, chunk.order)
    rs = [Step(d, a, f, True) for d, a, f in zip(chunk.order, chunk.algorithms, fr)]
    ag = [Step(s.dim, s.algorithm, s.fraction, False) for s in reversed(rs)]
    if kind == "allreduce":
        return tuple(rs + ag)
    if kind == "reduce_scatter":
        return tuple(rs)
    return tuple(ag)


def make_chunk(net: DimNet, costs: PhaseCosts, kind: str, order: tuple[int, ...], chunk_bytes: float,
               units: int = 1) -> ChunkPlan:
    """A chunk of ``chunk_bytes`` with reduce-scatter order ``order``, each phase by its faster algorithm."""
    if sorted(order) != list(range(net.n_dims)):
        raise CollectiveError(f"a dimension order must name each of the {net.n_dims} active dimensions once, "
                              f"got {list(order)}")
    reduce = kind != "allgather"
    algs = tuple(costs.best(d, chunk_bytes * f, reduce=reduce).algorithm for d, f in zip(order, _fractions(net, order)))
    return ChunkPlan(tuple(order), algs, units)
