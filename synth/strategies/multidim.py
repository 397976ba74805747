"""The multi-dimension strategy: per-dimension phases in per-chunk dimension orders (Themis and its kin).

On a topology with network dimensions (up to
:data:`~ccsynth.synth.multidim.lowering.MAX_IR_RANKS` ranks), the best of
the multi-dimension schedulers (:mod:`ccsynth.synth.multidim.candidates`)
as a verified Schedule, simulated by the event-driven simulator; every
scheduler's time in the dimension-level model goes to the report. Like the
packed trees it lets the MILPs step aside on large machines.
"""

from __future__ import annotations

from collections.abc import Sequence

from ccsynth.synth.multidim.candidates import applies as multidim_applies
from ccsynth.synth.multidim.candidates import best_multidim
from ccsynth.synth.strategies.base import SynthCandidate, SynthRequest

__all__ = ["MultiDimStrategy", "STRATEGY"]


class MultiDimStrategy:
    """The multi-dimension schedulers (module docstring)."""

    name = "multidim"
    preference = 2

    def applies(self, request: SynthRequest) -> bool:
        return multidim_applies(request.topology, request.collective)

    def candidates(self, request: SynthRequest, found: Sequence[SynthCandidate]) -> list[SynthCandidate]:
        r = request
        got = best_multidim(r.topology, r.collective, r.size_bytes, r.options)
        if got is None:
            return []
        r.report.multidim = {"scheduler": got.scheduler, "chunks": got.model.n_chunks, "time_us": got.time_us,
                             "model_us": dict(got.model_us)}
        r.progress("multidim", f"best multi-dimension schedule: {got.scheduler}, {got.model.n_chunks} chunks, "
                               f"{got.time_us:.3f} us (model: "
                               + ", ".join(f"{k} {v:.3f}" for k, v in got.model_us.items()) + ")")
        return [SynthCandidate(self.name, f"multi-dimension {got.scheduler} ({got.model.n_chunks} chunks)",
                               got.schedule, got.time_us, {"scheduler": got.scheduler})]


STRATEGY = MultiDimStrategy()
