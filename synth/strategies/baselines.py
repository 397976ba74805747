"""The baselines strategy: every applicable baseline at its own best chunk factor, where it could compete.

:func:`~ccsynth.synth.baseline_search.baselines_against` searches each
baseline's chunk factors, leaving out those a bound proves slower than the
time to beat: here the best synthesized candidate's time widened by
:data:`WRITTEN_MARGIN`, since the written form (an MSCCL XML after the
runtime's limits) may rank a baseline above a synthesized schedule that
the IR puts slightly ahead. The report lists the baselines simulated
(fastest first) and those proven slower (``at_least_us``). Baselines
always apply; ``compare_baselines=False`` leaves this strategy out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ccsynth.collectives.spec import Collective
from ccsynth.synth.baseline_search import baselines_against
from ccsynth.synth.strategies.base import SynthCandidate, SynthRequest

__all__ = ["WRITTEN_MARGIN", "BaselinesStrategy", "STRATEGY"]

#: how much slower than the best synthesized candidate (in the IR) a baseline may be and still be searched
WRITTEN_MARGIN = 0.05


class BaselinesStrategy:
    """The baselines at their best chunk factors (module docstring)."""

    name = "baseline"
    preference = 9  # a baseline is returned only when strictly faster

    def applies(self, request: SynthRequest) -> bool:
        return True

    def candidates(self, request: SynthRequest, found: Sequence[SynthCandidate]) -> list[SynthCandidate]:
        r, prog = request, request.progress
        best = min((c.time_us for c in found), default=math.inf)
        if best == math.inf:  # nothing synthesized: the synthesizer reports that, no baseline search to run
            return []
        beat = best * (1 + WRITTEN_MARGIN)
        coll = r.collective
        search = baselines_against(Collective(coll.kind, coll.n_ranks, 1, coll.root), r.topology, r.size_bytes, beat,
                                   progress=lambda detail: prog("baseline", detail))
        choices = search.choices
        # the baselines simulated, fastest first, then those proven slower than the time to beat by a bound
        r.report.baselines = [{"name": c.name, "chunk_factor": c.chunk_factor, "time_us": c.result.time_us}
                              for c in choices]
        r.report.baselines += [{"name": o.name, "chunk_factor": o.chunk_factor, "time_us": None,
                                "at_least_us": o.bound_us} for o in sorted(search.outrun, key=lambda o: o.bound_us)]
        if search.outrun:
            prog("baselines", f"{len(search.outrun)} baseline(s) proven slower than {beat:.3f} us by their bytes, "
                              "per-message overheads or pipeline, not simulated: " + ", ".join(
                                  f"{o.name} >= {o.bound_us:.1f} us" for o in search.outrun))
        if choices:
            b = choices[0]
            prog("baselines", f"best baseline {b.name} (chunk factor {b.chunk_factor}) {b.result.time_us:.3f} us "
                              f"of {len(choices)} at their best chunk factors; synthesized {best:.3f} us")
        return [SynthCandidate(self.name, f"baseline {c.name} (chunk factor {c.chunk_factor})", c.schedule,
                               c.result.time_us, {"chunk_factor": c.chunk_factor, "baseline": c.name})
                for c in choices]


STRATEGY = BaselinesStrategy()
