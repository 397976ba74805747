"""Tapered pipelines: the first chunk cut into pieces that grow, the last into pieces that shrink.

A pipeline of ``K`` equal chunks pays a *fill* and a *drain*: a dimension
that no chunk starts on waits, at the start, until the first chunk's
earlier phases are done, and in an allreduce the chunk whose allgather last
used it still gathers on its earlier dimensions afterwards (the allgather
ends where the reduce-scatter began). Both last about one chunk's phases
on the other dimensions, so they shrink with the chunk -- but more chunks
pay every phase's latency and message overheads once more each. Ramping
the chunk sizes up and down (a known pipelining technique) escapes that
trade: only the first and the last chunk are cut, into pieces of ``1/2^r,
1/2^r, 1/2^(r-1), ..., 1/2`` of a chunk (``r`` the *depth*), smallest
first at the start and smallest last at the end, so the bottleneck starts
after a ``1/2^r`` chunk's phases, each piece's phases hide behind the
bottleneck's work on the piece before, and only ``2r`` chunks are added.

Every piece keeps its chunk's dimension order, so each order carries
exactly the bytes it carried before: the LP's split is untouched, and the
pieces are still whole units of the buffer
(:class:`~ccsynth.synth.multidim.chunks.ChunkPlan` units; the other chunks
are scaled to ``2^r`` units each). Each piece's per-dimension algorithm is
chosen again for its size. The LP's own bound ``T*`` at the LP's count
``K`` still holds where a piece runs its chunk's algorithms: a direct
phase's floor charge is linear in its bytes, a ring phase's (its whole
time) affine with a positive latency term, and no piece is larger than a
chunk, so the pieces of an edge pay at least what the LP charges ``K``
equal chunks for its share (``tests/test_multidim_ramp.py`` checks it
against the event-driven simulator). The model decides
whether a ramp pays (:mod:`ccsynth.synth.multidim.search` tries the depths
of :data:`RAMP_DEPTHS` on the LP's winner at every chunk count): on
Themis's sample system ``hierarchical:2x8x2@250,175,12.5`` at 1 GiB, whose
12.5 GB/s dimension no order may sensibly start on, it took the LP from
6444 to 6008 us (1.052 to 1.015 of its pipelined bound; ``docs/results.md``)
while its 2-rank dimensions ran ring phases; with direct phases there (they
overlap, :meth:`~ccsynth.synth.multidim.cost.PhaseCosts.best`) 384 equal
chunks take 5443 us and no ramp is faster.

Example:
    >>> from ccsynth.topologies.catalog import hierarchical
    >>> from ccsynth.synth.multidim.network import dim_net
    >>> from ccsynth.synth.multidim.cost import PhaseCosts
    >>> from ccsynth.synth.multidim.policies import equal_units, fixed_chunks
    >>> net = dim_net(hierarchical([(2, 200), (2, 50)]))
    >>> costs = PhaseCosts(net)
    >>> chunks = fixed_chunks(net, costs, "allreduce", 1 << 20, equal_units(3))
    >>> [c.units for c in ramped_chunks(net, costs, "allreduce", 1 << 20, chunks, 2)]
    [1, 1, 2, 4, 2, 1, 1]
"""

from __future__ import annotations

from collections.abc import Sequence

from ccsynth.errors import CollectiveError
from ccsynth.synth.multidim.chunks import ChunkPlan, make_chunk
from ccsynth.synth.multidim.cost import PhaseCosts
from ccsynth.synth.multidim.network import DimNet

__all__ = ["RAMP_DEPTHS", "ramp_pieces", "ramped_chunks"]

#: the ramp depths the LP scheduler tries (pieces down to 1/2, ..., 1/16 of a chunk): beyond 1/16 a piece's
#: phases are latency, not bytes, at the sizes where the pipeline's fill and drain matter
RAMP_DEPTHS = (1, 2, 3, 4)


def ramp_pieces(units: int, depth: int) -> tuple[int, ...]:
    """The pieces, smallest first, that a chunk of ``units`` (a multiple of ``2^depth``) is cut into.

    >>> ramp_pieces(16, 3)
    (2, 2, 4, 8)
    """
    if depth < 1:
        raise CollectiveError(f"a ramp's depth must be at least 1, got {depth}")
    if units % (1 << depth):
        raise CollectiveError(f"a chunk of {units} units cannot be cut into pieces of 1/{1 << depth} of it")
    return (units >> depth,) + tuple(units >> i for i in range(depth, 0, -1))


def ramped_chunks(net: DimNet, costs: PhaseCosts, kind: str, size_bytes: float, chunks: Sequence[ChunkPlan],
                  depth: int) -> tuple[ChunkPlan, ...]:
    """``chunks`` with the first one cut into growing pieces and the last into shrinking ones (see the module
    docstring); every chunk's units are scaled by ``2^depth`` so the pieces stay whole. Fewer than two chunks:
    CollectiveError (the first chunk is the last)."""
    if len(chunks) < 2:
        raise CollectiveError(f"a ramp needs at least two chunks, got {len(chunks)}")
    scale = 1 << depth
    total = sum(c.units for c in chunks) * scale

    def piece(c: ChunkPlan, units: int) -> ChunkPlan:
        return make_chunk(net, costs, kind, c.order, size_bytes * units / total, units)

    first = tuple(piece(chunks[0], u) for u in ramp_pieces(chunks[0].units * scale, depth))
    last = tuple(piece(chunks[-1], u) for u in reversed(ramp_pieces(chunks[-1].units * scale, depth)))
    middle = tuple(piece(c, c.units * scale) for c in chunks[1:-1])
    return first + middle + last
