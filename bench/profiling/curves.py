"""Fitting the size-dependent costs to the probes: the message, forward and footprint curves (no MPI).

With the link figures of :mod:`ccsynth.bench.profiling.fit` fixed, one
bandwidth does not explain every size: data in the caches against data
streamed from memory (the message curve, PLogP's ``g(m)``,
:func:`fit_curve`), a message that forwards what was just received against
an independent one (:func:`fit_forward_curve`, kept :func:`non_increasing`),
and a call whose data the caches no longer hold (:func:`fit_footprint`: a
factor per byte and a cost once per call, per footprint). Each size is an
independent one-dimensional search (the simulator applies one factor per
call); a size whose probes' bytes make less than ``CURVE_MIN_SHARE`` of
their predicted time (:func:`byte_share`) gets no point, since its factor
would be noise divided by that share. The measurements behind each rule:
:mod:`ccsynth.bench.profile`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence

import numpy as np

from ccsynth.bench.profiling.fit import CURVE_RANGE, FitResult, Predictor, log_error, minimize
from ccsynth.bench.profiling.probes import (
    CURVE_MIN_BYTES, CURVE_MIN_SHARE, FOOTPRINT_FLAT, Probe, Sample, probe_footprint,
)
from ccsynth.topologies.coldcall import ColdCallCost
from ccsynth.topologies.curve import SizeCurve

__all__ = [
    "fit_curve", "byte_share", "curve_probe", "curve_predict", "byte_shares", "fit_forward_curve",
    "non_increasing", "fit_footprint",
]


def fit_curve(predictor: Predictor, samples: Sequence[Sample], result: FitResult,
              footprint: SizeCurve | None = None, cold: ColdCallCost | None = None) -> SizeCurve | None:
    """The message curve (PLogP's ``g(m)``) that explains the probes of every size best, the figures of ``result``
    and the footprint's costs (curve ``footprint``, cold call ``cold``) fixed; None where no probe moves
    :data:`CURVE_MIN_BYTES` or more per message, or none has its bytes :data:`CURVE_MIN_SHARE` of its time.

    A probe counts at its schedule's size (``Probe.size_bytes``, the
    working set the simulator indexes the curve by). Each size is fitted by
    a one-dimensional search (on the factor's logarithm, within
    :data:`CURVE_RANGE`) over the probes of that size; the simulator applies
    one factor per call, so the sizes are independent. A size whose probes'
    bytes are less than :data:`CURVE_MIN_SHARE` of their predicted time
    (:func:`byte_share`) gets no point: its factor would be the probes' noise
    divided by that share, and the simulator applies it to every call of that
    size, whose messages may be mostly bytes.
    """
    fits = {f.pattern: f for f in result.fits}
    predict = curve_predict(predictor, fits, result, footprint, cold)
    mine = [s for s in samples if curve_probe(s.probe) and s.probe.pattern in fits]
    shares = byte_shares([s.probe for s in mine], predict)
    mine = [s for s in mine if shares[s.probe.size_bytes] >= CURVE_MIN_SHARE]
    fitted = _factor_per_size(mine, math.log(CURVE_RANGE[0]), predict)
    return None if fitted is None else SizeCurve(*fitted)


def byte_share(probes: Sequence[Probe], predict: Callable[[Probe, SizeCurve | None], float]) -> float:
    """The median over ``probes`` (all of one size) of the share of a probe's predicted time that its message bytes
    make, ``d log(time) / d log(factor)`` of the message curve's factor at the probe's size, taken between the
    factors 1 and 2 (``predict(probe, curve)``: the probe's time with that curve)."""
    shares = []
    for p in probes:
        one = predict(p, SizeCurve((float(p.size_bytes),), (1.0,)))
        two = predict(p, SizeCurve((float(p.size_bytes),), (2.0,)))
        shares.append((two - one) / one if one > 0 else 0.0)
    return float(np.median(shares)) if shares else 0.0


def curve_probe(p: Probe) -> bool:
    """Whether probe ``p`` may give the message curve a point (its messages carry :data:`CURVE_MIN_BYTES`)."""
    return p.nbytes >= CURVE_MIN_BYTES and p.shape in ("chain", "window")


def curve_predict(predictor: Predictor, fits: dict, result: FitResult, footprint: SizeCurve | None,
                   cold: ColdCallCost | None) -> Callable[[Probe, SizeCurve | None], float]:
    """A probe's predicted time under a message curve, the other figures of ``result`` fixed."""
    def predict(p: Probe, c: SizeCurve | None) -> float:
        return predictor.fitted(p, fits[p.pattern], result.call_overhead, result.protocol, c,
                                footprint=footprint, cold=cold)

    return predict


def byte_shares(probes: Iterable[Probe], predict: Callable[[Probe, SizeCurve | None], float]) -> dict[int, float]:
    """Per probe size (``Probe.size_bytes``) of ``probes``, :func:`byte_share` of its probes."""
    by_size: dict[int, list[Probe]] = {}
    for p in probes:
        by_size.setdefault(p.size_bytes, []).append(p)
    return {m: byte_share(group, predict) for m, group in by_size.items()}


def _factor_per_size(samples: Sequence[Sample], log_lo: float,
                     predict: Callable[[Probe, SizeCurve], float]) -> tuple[tuple[float, ...], tuple[float, ...]] | None:
    """Per probe size (``Probe.size_bytes``) of ``samples``, the factor in ``[exp(log_lo), CURVE_RANGE[1]]``
    whose one-point curve makes ``predict`` fit that size's probes best (a search on the factor's logarithm);
    (sizes, factors) in increasing size, or None without samples."""
    by_size: dict[int, list[Sample]] = {}
    for s in samples:
        by_size.setdefault(s.probe.size_bytes, []).append(s)
    if not by_size:
        return None
    sizes: list[float] = []
    factors: list[float] = []
    for m in sorted(by_size):
        group = by_size[m]

        def err(log_f: float, m: int = m, group: list[Sample] = group) -> float:
            curve = SizeCurve((float(m),), (math.exp(log_f),))
            return log_error(lambda p: predict(p, curve), group)

        sizes.append(float(m))
        factors.append(math.exp(minimize(err, log_lo, math.log(CURVE_RANGE[1]), steps=16, rounds=20)))
    return tuple(sizes), tuple(factors)


def fit_forward_curve(predictor: Predictor, samples: Sequence[Sample], result: FitResult,
                      curve: SizeCurve | None, footprint: SizeCurve | None = None,
                      cold: ColdCallCost | None = None) -> SizeCurve | None:
    """The forward curve (``Topology.forward_curve``): per size of the forward probes, the factor in
    ``[1, CURVE_RANGE[1]]`` by which their forwarded messages' bytes cost more than the message curve says,
    the figures of ``result`` and ``curve`` fixed; None without forward probes, or where every factor is 1.

    The smallest forward probe (:data:`FORWARD_SMALLEST` per message) sets
    the factor below it: forwarding costs bytes, so small messages hardly
    feel it. The factors are then made :func:`non_increasing` in the size
    (see :mod:`ccsynth.bench.profile`: the probes' second mode at large sizes is
    one no collective showed).
    """
    fits = {f.pattern: f for f in result.fits}
    mine = [s for s in samples if s.probe.pattern in fits and s.probe.shape == "forward"]
    fitted = _factor_per_size(mine, 0.0, lambda p, fwd: predictor.fitted(
        p, fits[p.pattern], result.call_overhead, result.protocol, curve, fwd, footprint, cold))
    if fitted is None:
        return None
    factors = non_increasing(tuple(max(1.0, f) for f in fitted[1]))
    if all(f <= 1.0 + 1e-3 for f in factors):
        return None
    return SizeCurve(fitted[0], factors)


def non_increasing(factors: Sequence[float]) -> tuple[float, ...]:
    """Each factor replaced by the smallest one at or before it (factors in increasing size): the largest
    non-increasing sequence below ``factors``, as :func:`fit_forward_curve` keeps a forward curve."""
    out: list[float] = []
    for f in factors:
        out.append(min(f, out[-1]) if out else f)
    return tuple(out)


def fit_footprint(predictor: Predictor, samples: Sequence[Sample],
                  result: FitResult) -> tuple[SizeCurve | None, ColdCallCost | None]:
    """The footprint's costs: ``Topology.footprint_curve`` (per footprint ``F`` of the footprint probes,
    :func:`probe_footprint`, the factor by which a byte costs more than at the smallest one) and
    ``Topology.cold_call`` (what a call pays once more at ``F``), the figures of ``result`` fixed. (None, None)
    without footprint probes; the curve None where every factor lies within :data:`FOOTPRINT_FLAT` of 1; the cold
    cost None without the windows of smaller messages (a profile of the older plan: every extra per byte, as
    before), 0 where they measured none.

    At the smallest footprint each window size gets a factor of its own (a one-dimensional search within
    :data:`CURVE_RANGE`: what the two sizes differ by anyway, caches warm). At every larger footprint the extra
    over that is split between a factor ``r`` on both windows' bytes and a cost ``c`` once per call: the ``c``
    that fits the small window (:data:`FOOTPRINT_SMALL`) exactly, at the ``r`` (at least 1) that then fits the
    large one (:data:`FOOTPRINT_MESSAGE`, four times the bytes) best; ``c`` at least 0. Without the small
    windows a footprint's factor is the large window's alone. Load only ever slows a probe down, and touching
    more data between two calls never makes it faster, so each footprint then takes the smallest factor (and
    cost) measured at it or at any larger footprint, and the factors are divided by the smallest footprint's.
    """
    fits = {f.pattern: f for f in result.fits}
    mine = [s for s in samples if s.probe.shape == "footprint" and s.probe.pattern in fits]
    if not mine:
        return None, None
    nbytes = max(s.probe.nbytes for s in mine)
    at = lambda s: float(probe_footprint(s.probe, predictor.cold))  # noqa: E731
    large = {at(s): s for s in sorted(mine, key=at, reverse=True) if s.probe.nbytes == nbytes}
    small = {at(s): s for s in sorted(mine, key=at, reverse=True) if s.probe.nbytes < nbytes}

    def pred(s: Sample, h: float) -> float:
        return predictor.fitted(s.probe, fits[s.probe.pattern], result.call_overhead, result.protocol,
                                footprint=SizeCurve((at(s),), (h,)))

    def alone(s: Sample) -> float:
        return math.exp(minimize(lambda log_h: log_error(lambda p: pred(s, math.exp(log_h)), [s]),
                                  math.log(CURVE_RANGE[0]), math.log(CURVE_RANGE[1]), steps=16, rounds=20))

    sizes = sorted(large)
    raw = {f: alone(large[f]) for f in sizes}
    cost = dict.fromkeys(sizes, 0.0)
    ref = sizes[0]
    split = ref in small
    if split:
        hl, hs = raw[ref], alone(small[ref])
        for f in sizes[1:]:
            if f not in small:
                continue
            a, b = small[f], large[f]

            def err(log_r: float, a: Sample = a, b: Sample = b) -> float:
                r = math.exp(log_r)
                pa, pb = pred(a, hs * r), pred(b, hl * r)
                c = max(0.0, a.measured_us - pa)
                return math.log((pa + c) / a.measured_us) ** 2 + math.log((pb + c) / b.measured_us) ** 2

            # r >= 1: more data between two calls never makes a byte cheaper (a load spike of the small window
            # alone then goes to c, which the envelope below drops)
            r = math.exp(minimize(err, 0.0, max(0.0, math.log(CURVE_RANGE[1] / max(hl, hs))), steps=16, rounds=20))
            raw[f] = hl * r
            cost[f] = max(0.0, a.measured_us - pred(a, hs * r))
    low = [min(raw[f] for f in sizes[i:]) for i in range(len(sizes))]
    factors = [min(h / low[0], CURVE_RANGE[1]) for h in low]
    cold = [min(cost[f] for f in sizes[i:]) for i in range(len(sizes))]
    curve = None if max(factors) <= 1.0 + FOOTPRINT_FLAT else SizeCurve(tuple(sizes), tuple(factors))
    if not split:
        return curve, None
    # the small windows' own buffers: a call of at least as many pays the cold cost in full, one of fewer in part
    return curve, ColdCallCost(tuple(sizes), tuple(cold), float(small[ref].probe.buffer_bytes))
