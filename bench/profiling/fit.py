"""Fitting the link figures to the probes: pure functions of probe data (no MPI).

The figures of a pattern (``alpha``, ``overhead``, bandwidth), the per-call
cost and the protocol switch are those for which the simulator that
predicts (:class:`Predictor`: each probe lowered once by
:func:`~ccsynth.synth.executor_model.lower_for_executor`, simulated per
candidate) reproduces the measured probes best, least squares on
``log(predicted / measured)`` (:func:`log_error`); each search is
one-dimensional (:func:`minimize`: a grid, then golden sections), in the
order of :func:`fit_patterns`: hops and the per-call cost (linear), then per
pattern the overhead and the bandwidth, the protocol switch, and the
bandwidth and overhead once more with it. The per-round cost of the round
probes (:func:`fit_round_cost`), the communicator's per-call cost
(:class:`CommunicatorFit`) and the local curve of the kernel ladder
(:func:`local_curve`) are fitted here too; the size-dependent curves
(message, forward, footprint) are :mod:`ccsynth.bench.profiling.curves`.
Why these stages: :mod:`ccsynth.bench.profile`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from ccsynth.bench.profiling.probes import SMALL, KernelRates, Pattern, Probe, Sample, probe_footprint, probe_schedule
from ccsynth.errors import CCSynthError
from ccsynth.synth.executor_model import ExecutorSettings, lower_for_executor
from ccsynth.synth.simulate import TaskGraph, simulate_graph
from ccsynth.topologies.coldcall import ColdCallCost
from ccsynth.topologies.curve import SizeCurve
from ccsynth.topologies.model import BYTES_PER_US_PER_GBPS, Link, Topology
from ccsynth.topologies.rounds import RoundCost

__all__ = [
    "LinkFit", "ProtocolFit", "NO_SWITCH", "FitResult", "CommunicatorFit", "CURVE_RANGE", "local_curve", "Predictor",
    "log_error", "minimize", "fit_hops", "fit_overhead", "fit_bandwidth", "fit_protocol", "robust_us",
    "fit_round_cost", "fit_patterns",
]


@dataclass(frozen=True)
class LinkFit:
    """The fitted figures of one pattern (all its pairs): us, us, GB/s; ``error``: median |pred/meas - 1|."""

    pattern: Pattern
    alpha: float
    overhead: float
    bw: float
    error: float = 0.0

    @property
    def hop_us(self) -> float:
        """One small message alone: ``alpha + 2 * overhead`` (what a ping-pong's half round trip shows)."""
        return self.alpha + 2.0 * self.overhead


@dataclass(frozen=True)
class ProtocolFit:
    """The protocol switch: messages of more than ``eager_limit`` bytes pay ``rendezvous_alpha`` us more latency.

    ``eager_limit`` None: no switch was found (one protocol for every size).
    """

    eager_limit: float | None = None
    rendezvous_alpha: float = 0.0


NO_SWITCH = ProtocolFit()


@dataclass(frozen=True)
class FitResult:
    """What :func:`fit_patterns` found: the per-call cost, the figures per pattern, the protocol switch."""

    call_overhead: float
    fits: tuple[LinkFit, ...]
    protocol: ProtocolFit = NO_SWITCH


@dataclass(frozen=True)
class CommunicatorFit:
    """The communicator's per-call cost: per collective (``allgather``, ``allreduce``: one 8 B call of a ring
    schedule) the us through ccsynth's communicator and through the executor directly (:func:`robust_us` of the
    slowest rank's medians); ``overhead_us`` is the mean difference, at least 0."""

    via_us: dict
    direct_us: dict

    @property
    def overhead_us(self) -> float:
        diffs = [self.via_us[k] - self.direct_us[k] for k in self.via_us]
        return max(0.0, float(np.mean(diffs))) if diffs else 0.0


def local_curve(kernels: KernelRates) -> SizeCurve | None:
    """The local curve of the kernel ladder: per size, the us of its bytes (a call's time less the fixed
    cost of a call) relative to ``local_bw`` (the rate on the largest buffers); None without a ladder."""
    if not kernels.ladder:
        return None
    rate = kernels.local_bw * BYTES_PER_US_PER_GBPS  # bytes per us
    sizes, factors = [], []
    for m, us in [*kernels.ladder, (kernels.nbytes, kernels.nbytes / rate + kernels.call_us)]:
        f = max(us - kernels.call_us, 0.0) * rate / m
        sizes.append(float(m))
        factors.append(min(max(f, CURVE_RANGE[0]), CURVE_RANGE[1]))
    return SizeCurve(tuple(sizes), tuple(factors))


class Predictor:
    """Predicted probe times for candidate figures: each probe lowered once, simulated per candidate.

    ``cold``: whether the window and forward probes ran after an eviction pass (their footprint).
    """

    def __init__(self, n: int, cold: bool = True, receiver_copies: bool = False):
        self.n = n
        self.cold = cold
        self.receiver_copies = receiver_copies
        self._graphs: dict[Probe, TaskGraph] = {}

    def graph(self, probe: Probe) -> TaskGraph:
        g = self._graphs.get(probe)
        if g is None:
            g = lower_for_executor(probe_schedule(self.n, probe), probe.size_bytes,
                                   ExecutorSettings(slice_bytes=probe.slice_bytes))
            self._graphs[probe] = g
        return g

    def time(self, probe: Probe, alpha: float, overhead: float, bw: float, call: float,
             protocol: ProtocolFit = NO_SWITCH, curve: SizeCurve | None = None,
             forward: SizeCurve | None = None, footprint: SizeCurve | None = None,
             cold: ColdCallCost | None = None) -> float:
        links = tuple(Link(r, d, max(alpha, 0.0), bw, overhead) for r, d in probe.pattern.pairs)
        topo = Topology("candidate", self.n, links=links, overhead_scope="rank", call_overhead=call,
                        eager_limit=protocol.eager_limit, rendezvous_alpha=protocol.rendezvous_alpha,
                        message_curve=curve, forward_curve=forward, async_progress=False, footprint_curve=footprint,
                        cold_call=cold, receiver_copies=self.receiver_copies)
        return simulate_graph(self.graph(probe), topo, footprint_bytes=probe_footprint(probe, self.cold)).time_us

    def fitted(self, probe: Probe, f: LinkFit, call: float, protocol: ProtocolFit,
               curve: SizeCurve | None = None, forward: SizeCurve | None = None,
               footprint: SizeCurve | None = None, cold: ColdCallCost | None = None) -> float:
        """The predicted time of ``probe`` with the figures ``f`` of its pattern."""
        return self.time(probe, f.alpha, f.overhead, f.bw, call, protocol, curve, forward, footprint, cold)


def log_error(pred: Callable[[Probe], float], samples: Sequence[Sample]) -> float:
    return sum(math.log(pred(s.probe) / s.measured_us) ** 2 for s in samples)


def minimize(f: Callable[[float], float], lo: float, hi: float, steps: int = 24, rounds: int = 30) -> float:
    """The x in [lo, hi] minimizing f: a grid, then golden-section search around the best point."""
    xs = [lo + (hi - lo) * i / steps for i in range(steps + 1)]
    vals = [f(x) for x in xs]
    i = min(range(len(xs)), key=lambda k: vals[k])
    a, b = xs[max(i - 1, 0)], xs[min(i + 1, steps)]
    g = (math.sqrt(5) - 1) / 2
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(rounds):
        if fc <= fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = f(d)
    best = min(((vals[i], xs[i]), (fc, c), (fd, d)))
    return best[1]


def fit_hops(chains: Sequence[Sample]) -> tuple[float, dict[Pattern, float]]:
    """Per-call cost and per-pattern hop time ``alpha + 2 * overhead`` from chain probes of small messages.

    Weighted linear least squares (weights ``1 / measured``, i.e. relative
    errors) of ``time = call + rounds * hop[pattern]``, one ``call`` for all
    patterns; both clipped at 0.
    """
    pats = list(dict.fromkeys(s.probe.pattern for s in chains))
    if not pats:
        raise CCSynthError("no chain probes to fit latencies from")
    A = np.zeros((len(chains), 1 + len(pats)))
    y = np.zeros(len(chains))
    for i, s in enumerate(chains):
        w = 1.0 / s.measured_us
        A[i, 0] = w
        A[i, 1 + pats.index(s.probe.pattern)] = s.probe.messages * w
        y[i] = s.measured_us * w
    x, *_ = np.linalg.lstsq(A, y, rcond=None)
    call = max(0.0, float(x[0]))
    return call, {p: max(1e-3, float(x[1 + k])) for k, p in enumerate(pats)}


def fit_overhead(predictor: Predictor, windows: Sequence[Sample], hop: float, call: float, bw: float = 1e3) -> float:
    """The overhead (us) in ``[0, hop / 2]`` whose windows of small messages fit best (``alpha = hop - 2 o``)."""
    if not windows:
        return hop / 4

    def err(o: float) -> float:
        return log_error(lambda p: predictor.time(p, hop - 2 * o, o, bw, call), windows)

    return minimize(err, 0.0, hop / 2)


def fit_bandwidth(predictor: Predictor, large: Sequence[Sample], alpha: float, overhead: float, call: float,
                  protocol: ProtocolFit = NO_SWITCH) -> float:
    """The bandwidth (GB/s) whose windows of large messages fit best (a search on its logarithm)."""
    if not large:
        raise CCSynthError("no bandwidth probes to fit from")

    def err(log_bw: float) -> float:
        return log_error(lambda p: predictor.time(p, alpha, overhead, math.exp(log_bw), call, protocol), large)

    return math.exp(minimize(err, math.log(0.01), math.log(1000.0)))


def fit_protocol(predictor: Predictor, ladder: Sequence[Sample], fits: dict[Pattern, LinkFit], call: float) -> ProtocolFit:
    """The protocol switch that explains the chains of growing messages best (one for all patterns).

    For every candidate limit (each size of the ladder: the largest one
    still sent eagerly) the extra latency is searched; the best pair wins
    if it explains the ladder clearly better (a third less squared error)
    than no switch at all.
    """
    if not ladder:
        return NO_SWITCH

    def err(protocol: ProtocolFit) -> float:
        return log_error(lambda p: predictor.fitted(p, fits[p.pattern], call, protocol), ladder)

    hop = float(np.median([f.hop_us for f in fits.values()]))
    best, best_err = NO_SWITCH, err(NO_SWITCH)
    none_err = best_err
    for limit in sorted({s.probe.nbytes for s in ladder})[:-1]:
        extra = minimize(lambda a: err(ProtocolFit(float(limit), a)), 0.0, 20.0 * hop)  # noqa: B023 (called now)
        e = err(ProtocolFit(float(limit), extra))
        if e < best_err:
            best, best_err = ProtocolFit(float(limit), extra), e
    if best.eager_limit is None or best_err > (2 / 3) * none_err or best.rendezvous_alpha < 0.05 * hop:
        return NO_SWITCH
    return best


#: the range a curve factor is searched in (and a local factor clamped to): caches against memory make 3-4x
#: (docs/results.md); a fit beyond 10x either way is a load spike, not the machine
CURVE_RANGE = (0.1, 10.0)


def robust_us(values: Sequence[float]) -> float:
    """The median of the fastest half of ``values`` (of a probe measured several times on a loaded machine)."""
    v = sorted(values)
    if not v:
        raise CCSynthError("no measurements to take a median of")
    return float(np.median(v[:max(1, (len(v) + 1) // 2)]))


def _slope(samples: Sequence[tuple[int, float]]) -> float:
    """Slope of ``time = a + rounds * b`` over (rounds, us) points, weights ``1 / us`` (relative errors)."""
    A = np.array([[1.0 / t, r / t] for r, t in samples])
    y = np.ones(len(samples))
    if len({r for r, _ in samples}) < 2:
        raise CCSynthError("a per-round cost needs probes of at least two round counts")
    x, *_ = np.linalg.lstsq(A, y, rcond=None)
    return float(x[1])


def fit_round_cost(topology: Topology, samples: Sequence[Sample]) -> RoundCost | None:
    """The round cost (``Topology.round_cost``) of the round probes in ``samples`` on the fitted ``topology``
    (without one); None without round probes.

    Per peer count ``k``: the measured slope over the rounds less the slope
    the simulator predicts, corrected twice with the cost in place (a
    round's delay need not add exactly as much to the makespan where ranks
    wait on one another); at least 0.
    """
    n = topology.n_ranks
    by_k: dict[int, list[Sample]] = {}
    for smp in samples:
        if smp.probe.shape == "rounds":
            by_k.setdefault(smp.probe.peers, []).append(smp)
    if not by_k:
        return None
    graphs = {smp.probe: lower_for_executor(probe_schedule(n, smp.probe), smp.probe.size_bytes)
              for group in by_k.values() for smp in group}
    peers, costs = [], []
    for k in sorted(by_k):
        group = by_k[k]
        measured = _slope([(smp.probe.messages, smp.measured_us) for smp in group])
        c = 0.0
        for _ in range(3):
            topo = replace(topology, round_cost=RoundCost((k,), (c,)) if c > 0 else None)
            predicted = _slope([(smp.probe.messages, simulate_graph(graphs[smp.probe], topo).time_us)
                                for smp in group])
            c = max(0.0, c + measured - predicted)
        peers.append(k)
        costs.append(c)
    return RoundCost(tuple(peers), tuple(costs))


def _split(samples: Sequence[Sample]):
    chains = [s for s in samples if s.probe.shape == "chain" and s.probe.nbytes <= SMALL]
    windows = [s for s in samples if s.probe.shape == "window" and s.probe.nbytes <= SMALL]
    ladder = [s for s in samples if s.probe.shape == "chain" and s.probe.nbytes > SMALL]
    large = [s for s in samples if s.probe.shape == "window" and s.probe.nbytes > SMALL]
    return chains, windows, ladder, large


def fit_patterns(n: int, samples: Sequence[Sample], predictor: Predictor | None = None) -> FitResult:
    """Per-call cost, the figures of every pattern and the protocol switch, from the samples of :func:`plan_probes`.

    The stages of :mod:`ccsynth.bench.profile`: hops and the per-call cost (linear),
    then per pattern the overhead (small windows) and the bandwidth (large
    windows); the protocol switch (the ladder of chains); the bandwidth and
    the overhead once more with it.
    """
    predictor = predictor or Predictor(n)
    chains, windows, ladder, large = _split(samples)
    call, hops = fit_hops(chains)

    def figures(pat: Pattern, protocol: ProtocolFit, o: float | None = None) -> LinkFit:
        hop = hops[pat]
        w = [s for s in windows if s.probe.pattern == pat]
        big = [s for s in large if s.probe.pattern == pat]
        if o is None:
            o = fit_overhead(predictor, w, hop, call)
        bw = fit_bandwidth(predictor, big, max(hop - 2 * o, 0.0), o, call, protocol)
        o = fit_overhead(predictor, w, hop, call, bw)
        return LinkFit(pat, max(hop - 2 * o, 0.0), o, bw)

    fits = {pat: figures(pat, NO_SWITCH) for pat in hops}
    protocol = fit_protocol(predictor, ladder, fits, call)
    if protocol != NO_SWITCH:
        fits = {pat: figures(pat, protocol, f.overhead) for pat, f in fits.items()}
        protocol = fit_protocol(predictor, ladder, fits, call)
    out = []
    for pat, f in fits.items():
        mine = [s for s in samples if s.probe.pattern == pat]
        errs = [abs(predictor.fitted(s.probe, f, call, protocol) / s.measured_us - 1) for s in mine]
        out.append(LinkFit(pat, f.alpha, f.overhead, f.bw, float(np.median(errs)) if errs else 0.0))
    return FitResult(call, tuple(out), protocol)
