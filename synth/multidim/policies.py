"""The greedy dimension-order policies: fixed (today's libraries) and Themis's.

* :func:`fixed_chunks` -- every chunk reduce-scatters in ascending
  dimension order (dimension 0, the fastest-varying coordinate, first) and
  gathers in the reverse order: what hierarchical collectives in NCCL,
  MSCCL and oneCCL do (intra-node first, then across nodes).
* :func:`themis_chunks` -- Themis's per-chunk greedy: before each chunk,
  order the dimensions least loaded first (:class:`~ccsynth.synth.multidim.load.DimLoads`,
  the load formula of DESIGN.md), so that the first phase, the one that
  moves the most bytes, lands on the dimension with the most room. The
  *threshold* is the one of Themis's artifact (ASTRA-sim's offline greedy
  scheduler, ``OfflineGreedy``): when the bytes that would close the gap
  between the most and the least loaded dimension (sent first through the
  least loaded one, :meth:`DimLoads.bytes_to_fill`) are less than
  :data:`THEMIS_THRESHOLD` of a chunk, the chunk keeps the natural (fixed)
  order, so that the greedy does not churn on noise. The allgather phases
  run each chunk's order reversed.
* :func:`themis_flex_chunks` -- the *flex* variant (the artifact's
  ``OfflineGreedyFlex``): a chunk's size is not fixed but the bytes that
  close that gap (in whole units of the nominal chunk, the rest of the data
  at most), so that one chunk sent least-loaded dimension first brings the
  least loaded dimension up to the most loaded one; where the gap is worth
  less than one unit the chunk is one unit in the natural order. It needs
  fewer chunks than the plain greedy for the same balance, which matters
  where per-message costs make chunks dear. One deviation from the
  artifact, which sizes the chunk by its first phase alone: the closing
  bytes here are *net* of what the same chunk adds to the most loaded
  dimension (every chunk crosses every dimension,
  :func:`_closing_bytes`). Sized by the first phase alone, a chunk whose
  order also loads the most loaded dimension faster than its first one
  never closes the gap, and it grew to the rest of the data: on
  ``dgx_a100x16`` at 1 GiB, where least-loaded-first *is* the natural order
  (NVSwitch first) and the rail is the busiest dimension, the variant sent
  one huge natural-order chunk after a few small ones, lost the pipeline
  and ran 8% behind the fixed order (0.92x; 0.98x on ``ndv2x16``). Net of
  the most loaded dimension, such a chunk cannot close the gap, so it is
  one unit in the natural order and the variant pipelines like the fixed
  order there.

Both are deterministic functions of the network, the collective and the
size, so every rank derives the same chunks.

Example:
    >>> from ccsynth.topologies.catalog import hierarchical
    >>> from ccsynth.synth.multidim.network import dim_net
    >>> from ccsynth.synth.multidim.cost import PhaseCosts
    >>> net = dim_net(hierarchical([(4, 100), (4, 100)]))
    >>> [c.order for c in themis_chunks(net, PhaseCosts(net), "allreduce", 1 << 20, [1] * 4)]
    [(0, 1), (1, 0), (0, 1), (1, 0)]
    >>> [(c.order, c.units) for c in themis_flex_chunks(net, PhaseCosts(net), "allreduce", 1 << 20, 4)]
    [((0, 1), 1), ((1, 0), 1), ((0, 1), 1), ((1, 0), 1)]
"""

from __future__ import annotations

from collections.abc import Sequence

from ccsynth.synth.multidim.chunks import ChunkPlan, make_chunk, natural_order
from ccsynth.synth.multidim.cost import PhaseCosts
from ccsynth.synth.multidim.load import DimLoads
from ccsynth.synth.multidim.network import DimNet
from ccsynth.tolerance import is_less

__all__ = ["THEMIS_THRESHOLD", "equal_units", "fixed_chunks", "themis_chunks", "themis_flex_chunks"]

#: Themis keeps the natural order while the bytes that would close the load gap are below this share of a chunk
#: (1/16: the threshold of Themis's artifact, ASTRA-sim's OfflineGreedy)
THEMIS_THRESHOLD = 1 / 16


def equal_units(k: int) -> list[int]:
    """``k`` chunks of one unit each."""
    return [1] * k


def _sizes(size_bytes: float, units: Sequence[int]) -> list[float]:
    total = sum(units)
    return [size_bytes * u / total for u in units]


def fixed_chunks(net: DimNet, costs: PhaseCosts, kind: str, size_bytes: float, units: Sequence[int]) -> tuple[ChunkPlan, ...]:
    """Every chunk in ascending dimension order."""
    order = natural_order(net)
    return tuple(make_chunk(net, costs, kind, order, b, u) for b, u in zip(_sizes(size_bytes, units), units))


def _gap_bytes(net: DimNet, costs: PhaseCosts, loads: DimLoads, kind: str, order: tuple[int, ...],
               chunk_bytes: float) -> float:
    """The chunk bytes that, sent first through ``order[0]`` (the least loaded dimension), close the load gap."""
    d = order[0]
    alg = make_chunk(net, costs, kind, order, chunk_bytes).algorithms[0]
    return loads.bytes_to_fill(d, alg, loads.gap())


def _closing_bytes(loads: DimLoads, chunk: ChunkPlan) -> float:
    """The bytes of ``chunk`` (in its order) after which its first dimension's load reaches the most loaded
    dimension's, counting what the chunk adds to both (0 where it adds to the most loaded one at least as fast).

    The chunk's loads are linear in its bytes (:meth:`DimLoads.cost`), so this is one division.
    """
    first = chunk.order[0]
    top = max(range(loads.net.n_dims), key=lambda d: (loads.values[d], -d))
    rate = loads.cost(chunk, 1.0)
    gain = rate[first] - rate[top]
    if first == top or gain <= 0:
        return 0.0
    return (loads.values[top] - loads.values[first]) / gain


def themis_chunks(net: DimNet, costs: PhaseCosts, kind: str, size_bytes: float, units: Sequence[int]) -> tuple[ChunkPlan, ...]:
    """Themis's greedy: each chunk least-loaded dimension first, above the threshold (see the module docstring)."""
    loads = DimLoads(net, costs, kind)
    natural = natural_order(net)
    out = []
    for b, u in zip(_sizes(size_bytes, units), units):
        order = loads.least_loaded_first()
        if _gap_bytes(net, costs, loads, kind, order, b) < THEMIS_THRESHOLD * b:
            order = natural
        chunk = make_chunk(net, costs, kind, order, b, u)
        loads.add(chunk, b)
        out.append(chunk)
    return tuple(out)


def themis_flex_chunks(net: DimNet, costs: PhaseCosts, kind: str, size_bytes: float, k: int) -> tuple[ChunkPlan, ...]:
    """Themis's flex variant over ``k`` units of ``size_bytes / k`` bytes (see the module docstring)."""
    loads = DimLoads(net, costs, kind)
    natural = natural_order(net)
    unit = size_bytes / k
    left = k
    out = []
    while left > 0:
        order = loads.least_loaded_first()
        fill = _closing_bytes(loads, make_chunk(net, costs, kind, order, unit)) / unit
        if is_less(fill, 1.0):
            order, u = natural, 1
        else:
            u = min(left, int(fill + 0.5))
        b = u * unit
        chunk = make_chunk(net, costs, kind, order, b, u)
        loads.add(chunk, b)
        out.append(chunk)
        left -= u
    return tuple(out)
