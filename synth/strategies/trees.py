"""The packed-trees strategy: spanning trees packed to the optimal throughput, pipelined.

Spanning trees packed by an LP (ForestColl's optimum, in ccsynth's cost
model; :mod:`ccsynth.synth.trees`), lowered to a pipelined schedule at the
chunk factor the simulator prefers. For allgather, reduce-scatter,
allreduce, broadcast and reduce; seconds to minutes even at 1,024 ranks.
Not tried when the caller pins the MILP path with a sketch or a chunk factor.
The lowering and simulation of up to millions of ops run with the garbage
collector paused (:mod:`ccsynth.collectives.gc_pause`).
"""

from __future__ import annotations

from collections.abc import Sequence

from ccsynth.collectives.gc_pause import gc_paused
from ccsynth.errors import InfeasibleError
from ccsynth.synth.strategies.base import SynthCandidate, SynthRequest
from ccsynth.synth.trees.search import KINDS as TREE_KINDS
from ccsynth.synth.trees.search import best_tree_schedule

__all__ = ["TreesStrategy", "STRATEGY"]


class TreesStrategy:
    """Packed trees (module docstring)."""

    name = "trees"
    preference = 1

    def applies(self, request: SynthRequest) -> bool:
        c = request.collective
        return c.kind in TREE_KINDS and request.sketch is None and c.chunk_factor == 1

    def candidates(self, request: SynthRequest, found: Sequence[SynthCandidate]) -> list[SynthCandidate]:
        r, prog = request, request.progress
        try:
            with gc_paused():
                choice = best_tree_schedule(r.topology, r.collective, r.size_bytes)
        except InfeasibleError as e:
            prog("trees", f"tree packing failed: {e}")
            return []
        p = choice.packing
        prog("trees", f"{len(p.trees)} trees in {p.iterations} LP round(s), {p.columns} columns, "
                      f"{p.seconds:.2f} s; packing time {choice.predicted_us(r.size_bytes):.3f} us "
                      f"({p.gap:.4f}x its bound)")
        prog("simulated", f"packed trees: {choice.time_us:.3f} us at {r.size_bytes} bytes, chunk factor "
                          f"{choice.chunk_factor} (tried {', '.join(f'{c}: {t:.1f}' for c, t in choice.tried)})")
        r.report.candidates.append({"sketch": "packed trees", "estimated_us": choice.predicted_us(r.size_bytes),
                                    "time_us": choice.time_us, "waves": "trees", "window": 0,
                                    "chunk_factor": choice.chunk_factor})
        return [SynthCandidate(self.name, f"packed trees (chunk factor {choice.chunk_factor})", choice.schedule,
                               choice.time_us)]


STRATEGY = TreesStrategy()
