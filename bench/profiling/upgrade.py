"""Bringing a profile written by older rules up to date, from its own figures.

A topology file saved before a probe existed has no raw times for it.
:func:`fit_result_of` reads the fitted figures back from the topology (per
pattern its first pair's link), the topology predicts the probe times its
own fit reproduced, and the curves are fitted again on those:
:func:`prune_message_curve` drops the message curve's points the current
:data:`~ccsynth.bench.profiling.probes.CURVE_MIN_SHARE` rule would not fit;
:func:`refit_with_footprint` adds footprint costs, measured here by
:func:`measure_footprint` (under MPI, on every rank), with the message and
forward curves fitted again around them (``python -m ccsynth.bench.profile
--add-footprint``).
"""

from __future__ import annotations

import math
from dataclasses import replace

from ccsynth.bench.profiling.curves import (
    byte_shares, curve_predict, curve_probe, fit_curve, fit_footprint, fit_forward_curve,
)
from ccsynth.bench.profiling.fit import NO_SWITCH, FitResult, LinkFit, Predictor, ProtocolFit
from ccsynth.bench.profiling.measure import EvictionBuffer, measure_probe
from ccsynth.bench.profiling.probes import (
    CURVE_MIN_SHARE, Probe, ProfileOptions, Sample, footprint_probes, patterns, plan_probes,
)
from ccsynth.errors import CCSynthError
from ccsynth.topologies.coldcall import ColdCallCost
from ccsynth.topologies.curve import SizeCurve
from ccsynth.topologies.model import Topology

__all__ = ["fit_result_of", "prune_message_curve", "refit_with_footprint", "measure_footprint"]


def fit_result_of(topology: Topology) -> FitResult:
    """The figures of a profiled ``topology`` as the fit had them: per pattern its first pair's link."""
    fits = []
    for pat in patterns(topology.nodes):
        r, d = pat.pairs[0]
        c = topology.connection(r, d)
        if c is None:
            raise CCSynthError(f"topology {topology.name!r} has no connection {r}->{d}: not a profiled machine")
        fits.append(LinkFit(pat, c.alpha, c.overhead, c.bw))
    protocol = ProtocolFit(topology.eager_limit, topology.rendezvous_alpha) \
        if topology.eager_limit is not None and topology.rendezvous_alpha else NO_SWITCH
    return FitResult(topology.call_overhead, tuple(fits), protocol)


def prune_message_curve(topology: Topology, options: ProfileOptions | None = None) -> Topology:
    """``topology`` (a profile written before :data:`CURVE_MIN_SHARE`) without the message curve's points that
    the probes of ``options`` (default: ``ccsynth topo profile``'s) would not fit now, their bytes less than that
    share of their time with the topology's own figures and footprint costs; the other points keep their factors
    (each size is fitted alone, :func:`fit_curve`). No curve left: None. What a profile's refit would say of its
    message curve, for files saved without their probe times (the forward curve is kept as it is)."""
    curve = topology.message_curve
    if curve is None:
        return topology
    options = options or ProfileOptions()
    result = fit_result_of(topology)
    predictor = Predictor(topology.n_ranks, options.cold, topology.receiver_copies)
    fits = {f.pattern: f for f in result.fits}
    predict = curve_predict(predictor, fits, result, topology.footprint_curve, topology.cold_call)
    shares = byte_shares([p for p in plan_probes(tuple(fits), options) if curve_probe(p)], predict)
    keep = [(m, f) for m, f in zip(curve.sizes, curve.factors) if shares.get(int(m), 1.0) >= CURVE_MIN_SHARE]
    return replace(topology, message_curve=SizeCurve(*zip(*keep)) if keep else None)


def refit_with_footprint(topology: Topology, footprint: SizeCurve | None, options: ProfileOptions | None = None,
                         cold: ColdCallCost | None = None) -> Topology:
    """``topology`` (a profile) with ``footprint`` as its footprint curve and ``cold`` as its cold call cost, and
    its message and forward curves fitted again with them in place, on the probe times the topology itself
    predicts (what its own fit reproduced of its probes, at their footprints with its own footprint costs): the
    same figures for the probes it was fitted on, the new footprint costs for calls that touch more data.
    ``options``: the probes the profile ran (default: ``ccsynth topo profile``'s)."""
    options = options or ProfileOptions()
    result = fit_result_of(topology)
    predictor = Predictor(topology.n_ranks, options.cold, topology.receiver_copies)
    fits = {f.pattern: f for f in result.fits}
    # as the profile's own fit saw them: the message curve from chains and windows alone, then the forward probes
    samples = [Sample(p, predictor.fitted(p, fits[p.pattern], result.call_overhead, result.protocol,
                                          topology.message_curve, topology.forward_curve if p.shape == "forward" else None,
                                          topology.footprint_curve, topology.cold_call))
               for p in plan_probes(tuple(fits), options) if p.shape != "footprint"]
    curve = fit_curve(predictor, samples, result, footprint, cold) if topology.message_curve is not None else None
    forward = fit_forward_curve(predictor, samples, result, curve, footprint, cold) \
        if topology.forward_curve is not None else None
    return replace(topology, message_curve=curve, forward_curve=forward, footprint_curve=footprint, cold_call=cold)


def measure_footprint(comm, topology: Topology,
                      options: ProfileOptions | None = None) -> tuple[SizeCurve | None, ColdCallCost | None]:
    """The footprint probes alone, measured here (on every rank) and fitted against the figures of ``topology``
    (:func:`fit_footprint`); for :func:`refit_with_footprint`."""
    options = options or ProfileOptions()
    result = fit_result_of(topology)
    probes = footprint_probes(result.fits[0].pattern, options)
    best: dict[Probe, float] = {}
    evictions = EvictionBuffer()
    for _ in range(options.n_passes):
        for probe in probes:
            best[probe] = min(measure_probe(comm, probe, options, evictions).measured_us, best.get(probe, math.inf))
    return fit_footprint(Predictor(topology.n_ranks, options.cold, topology.receiver_copies), [Sample(p, t) for p, t in best.items()], result)
