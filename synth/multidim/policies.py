"""The greedy dimension-order policies: fixed (today's libraries) and Themis's.

* :func:`fixed_chunks` -- every chunk reduce-scatters in ascending
  dimension order (dimension 0, the fastest-varying coordinate, first) and
  gathers in the reverse order: what hierarchical collectives in NCCL,
  MSCCL and oneCCL do (intra-node first, then across nodes).
* :func:`themis_chunks` -- Themis's per-chunk greedy: before each chunk,
  order the dimensions least loaded first (:class:`~ccsynth.synth.multidim.load.DimLoads`,
  the load formula of DESIGN.md), so that the first phase, the one that
  moves the most bytes, lands on the dimension with the most room; while
  the loads differ by less than :data:`THEMIS_THRESHOLD` (relative), keep
  the natural (fixed) order, as Themis does to avoid churning on noise.
  The allgather phases run each chunk's order reversed.
* chunk sizes: equal units, or the *flex* variant (:func:`flex_units`):
  the first and last chunks are smaller (sizes 1, 2, then 4 units, and
  back down), so that the pipeline fills and drains faster and the greedy's
  last choices correct the loads at a finer grain.

Both are deterministic functions of the network, the collective and the
size, so every rank derives the same chunks.

Example:
    >>> from ccsynth.topologies.catalog import hierarchical
    >>> from ccsynth.synth.multidim.network import dim_net
    >>> from ccsynth.synth.multidim.cost import PhaseCosts
    >>> net = dim_net(hierarchical([(4, 100), (4, 100)]))
    >>> [c.order for c in themis_chunks(net, PhaseCosts(net), "allreduce", 1 << 20, [1] * 4)]
    [(0, 1), (1, 0), (0, 1), (1, 0)]
    >>> flex_units(8)
    [1, 2, 4, 4, 4, 4, 2, 1]
"""

from __future__ import annotations

from collections.abc import Sequence

from ccsynth.synth.multidim.chunks import ChunkPlan, make_chunk, natural_order
from ccsynth.synth.multidim.cost import PhaseCosts
from ccsynth.synth.multidim.load import DimLoads
from ccsynth.synth.multidim.network import DimNet

__all__ = ["THEMIS_THRESHOLD", "FLEX_RAMP", "equal_units", "flex_units", "fixed_chunks", "themis_chunks"]

#: below this relative load imbalance ((max - min) / max) Themis keeps the natural order
THEMIS_THRESHOLD = 0.05
#: chunks of 1, 2, ... 2^(FLEX_RAMP - 1) units open and close the flex variant; the others have 2^FLEX_RAMP
FLEX_RAMP = 2


def equal_units(k: int) -> list[int]:
    """``k`` chunks of one unit each."""
    return [1] * k


def flex_units(k: int) -> list[int]:
    """``k`` chunks, the first and last ones smaller (see the module docstring); equal below 4 chunks."""
    r = min(FLEX_RAMP, k // 4)
    ramp = [1 << i for i in range(r)]
    return ramp + [1 << r] * (k - 2 * r) + ramp[::-1]


def _sizes(size_bytes: float, units: Sequence[int]) -> list[float]:
    total = sum(units)
    return [size_bytes * u / total for u in units]


def fixed_chunks(net: DimNet, costs: PhaseCosts, kind: str, size_bytes: float, units: Sequence[int]) -> tuple[ChunkPlan, ...]:
    """Every chunk in ascending dimension order."""
    order = natural_order(net)
    return tuple(make_chunk(net, costs, kind, order, b, u) for b, u in zip(_sizes(size_bytes, units), units))


def themis_chunks(net: DimNet, costs: PhaseCosts, kind: str, size_bytes: float, units: Sequence[int]) -> tuple[ChunkPlan, ...]:
    """Themis's greedy: each chunk least-loaded dimension first (see the module docstring)."""
    loads = DimLoads(net, costs, kind)
    natural = natural_order(net)
    out = []
    for b, u in zip(_sizes(size_bytes, units), units):
        order = natural if loads.imbalance() < THEMIS_THRESHOLD else loads.least_loaded_first()
        chunk = make_chunk(net, costs, kind, order, b, u)
        loads.add(chunk, b)
        out.append(chunk)
    return tuple(out)
