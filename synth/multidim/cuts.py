"""Chunks whose longest phase is long cut into pieces: per-order chunk sizes for the pipeline's granularity.

The lattice LP splits the data among dimension orders; the schedule cuts
every order's share into chunks of about one size. But the orders do not
occupy their dimensions alike: a chunk whose order takes a slow dimension
early (``(0, 3, 2, 1)`` on ``hierarchical:2x8x8x8@250,175,50,12.5``: half
the chunk on the 12.5 GB/s dimension) has one phase several times longer
than the typical chunk's longest (249 us against 32 us at 150 chunks of
1 GiB). A direct phase's bytes take its dimension's streams first come
first served (:mod:`~ccsynth.synth.multidim.pipeline`), so such a phase
holds up every small phase queued behind it for that long, and the
pipeline starves the dimensions after it. The share tuning
(:mod:`~ccsynth.synth.multidim.shares`) cannot give such an order more
data without making that phase longer still, so it keeps the order below
its LP share, and the busiest dimension above ``T*``.

:func:`cut_long_chunks` cuts every chunk whose longest phase is at least
twice the *typical* one (``factor`` x the median over the chunks of their
longest phase) into ``floor(longest / typical)`` equal pieces (at most
:data:`MAX_PIECES`), each in its chunk's order, and spreads the pieces of
each order's cut chunks evenly over the sequence (the chunks not cut keep
their places): every order carries exactly the bytes it carried, its
phases on the slow dimension become as short as the others', and they
interleave with the rest instead of arriving together. The count of
chunks grows (``2x8x8x8@250,175,50,12.5``: 150 -> 244). The share tuning
then runs again on the cut chunks (:meth:`~ccsynth.synth.multidim.search._Run.tuned`),
and the model keeps the faster.

The LP's own bound ``T*`` still holds (the LP's floor charges are linear in
the bytes on direct-charged edges, and on the 4D fabrics every edge is;
see :func:`~ccsynth.synth.multidim.lp.pipelined_bound` for chunks of
unequal size). Deterministic: a function of the chunks and the costs.

Example:
    >>> from ccsynth.topologies.catalog import hierarchical
    >>> from ccsynth.synth.multidim.network import dim_net
    >>> from ccsynth.synth.multidim.cost import PhaseCosts
    >>> from ccsynth.synth.multidim.chunks import make_chunk
    >>> net = dim_net(hierarchical([(4, 200), (4, 10)]))
    >>> costs = PhaseCosts(net)
    >>> chunks = [make_chunk(net, costs, "allreduce", o, 1 << 20) for o in [(0, 1)] * 3 + [(1, 0)]]
    >>> [(c.order, c.units) for c in cut_long_chunks(net, costs, "allreduce", 4 << 20, chunks)]
    [((0, 1), 3), ((1, 0), 1), ((0, 1), 3), ((1, 0), 1), ((0, 1), 3), ((1, 0), 1)]
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from ccsynth.errors import CollectiveError
from ccsynth.synth.multidim.chunks import ChunkPlan, chunk_steps, make_chunk
from ccsynth.synth.multidim.cost import PhaseCosts
from ccsynth.synth.multidim.network import DimNet
from ccsynth.synth.multidim.pipeline import chunk_bytes

__all__ = ["CUT_FACTOR", "MAX_PIECES", "longest_phase", "cut_long_chunks"]

#: the typical longest phase is this times the median over the chunks (a chunk is cut when its longest phase is
#: at least twice that): 0.75 of the median (``docs/results.md``: 0.5 cuts the ordinary chunks too and
#: pays their per-message costs twice, 1.0-2.0 leaves the long phases at 1.5-2x the typical)
CUT_FACTOR = 0.75
#: the most pieces one chunk is cut into
MAX_PIECES = 16


def longest_phase(costs: PhaseCosts, kind: str, chunk: ChunkPlan, chunk_bytes_: float) -> float:
    """The time (us) of ``chunk``'s longest phase, alone, with its algorithm (a chunk of ``chunk_bytes_``)."""
    return max((costs.time(s.dim, s.algorithm, chunk_bytes_ * s.fraction, reduce=s.reduce)
                for s in chunk_steps(costs.net, kind, chunk)), default=0.0)


def cut_long_chunks(net: DimNet, costs: PhaseCosts, kind: str, size_bytes: float, chunks: Sequence[ChunkPlan],
                    factor: float = CUT_FACTOR, max_chunks: int | None = None) -> tuple[ChunkPlan, ...]:
    """``chunks`` with those whose longest phase is long cut into pieces spread over the sequence (see the
    module docstring); ``chunks`` themselves where none is cut, or where the pieces would make more than
    ``max_chunks`` chunks. Every chunk's units are scaled by the least common multiple of the piece counts (the
    pieces of a chunk are equal); each piece's per-dimension algorithms are chosen again for its size."""
    if factor <= 0:
        raise CollectiveError(f"the cut factor must be positive, got {factor!r}")
    if not chunks:
        return tuple(chunks)
    sizes = chunk_bytes(size_bytes, chunks)
    longest = [longest_phase(costs, kind, c, b) for c, b in zip(chunks, sizes)]
    typical = factor * statistics.median(longest)
    if typical <= 0:
        return tuple(chunks)
    pieces = [min(MAX_PIECES, max(1, int(x / typical))) for x in longest]
    if max(pieces) == 1 or (max_chunks is not None and sum(pieces) > max_chunks):
        return tuple(chunks)
    n = len(chunks)
    placed: list[tuple[float, int, int, tuple[int, ...], int]] = []  # (position, chunk, piece, order, units)
    cut_of: dict[tuple[int, ...], list[int]] = {}
    scale = math.lcm(*set(pieces))  # equal pieces, in whole units
    for i, (c, p) in enumerate(zip(chunks, pieces)):
        if p == 1:
            placed.append((i + 0.5, i, 0, c.order, c.units * scale))
        else:
            cut_of.setdefault(c.order, []).extend([i] * p)
            placed.extend((-1.0, i, j, c.order, c.units * scale // p) for j in range(p))
    # the pieces of each order's cut chunks evenly over the whole sequence, in their chunks' order
    slots = {o: iter([(q + 0.5) * n / len(ks) for q in range(len(ks))]) for o, ks in cut_of.items()}
    placed = [(next(slots[o]) if pos < 0 else pos, i, j, o, u) for pos, i, j, o, u in placed]
    placed.sort(key=lambda x: x[:3])
    total = sum(x[4] for x in placed)
    return tuple(make_chunk(net, costs, kind, o, size_bytes * u / total, u) for _, _, _, o, u in placed)
