"""Writing the profile: the fitted figures as a ccsynth topology, and the summary ``ccsynth topo profile`` prints.

:func:`fit_profile` is the whole fit of a
:class:`~ccsynth.bench.profiling.probes.RawProfile`, in the order
:mod:`ccsynth.bench.profile` gives: link figures, shared ports per node
(:func:`node_ports`), footprint costs, message and forward curves, then the
round cost and the communicator's per-call cost on the topology built so
far, and last the run curve of the reference collectives, predicted with
every other figure in place. :func:`build_topology` turns the figures into
a :class:`~ccsynth.topologies.model.Topology` (a link per ordered pair, with
its pattern's figures); :class:`MachineProfile` keeps the topology with
what it was fitted from (``to_dict``: the ``--json`` summary). No MPI: a
saved raw profile refits to the same topology.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from ccsynth.bench import calibration as cal
from ccsynth.bench.machine import BUSY_MARK, profiled_busy
from ccsynth.bench.profiling.curves import fit_curve, fit_footprint, fit_forward_curve
from ccsynth.bench.profiling.fit import (
    NO_SWITCH, CommunicatorFit, LinkFit, Predictor, ProtocolFit, fit_bandwidth, fit_patterns, fit_round_cost,
    local_curve, robust_us,
)
from ccsynth.bench.profiling.probes import (
    PORT_MARGIN, KernelRates, Pattern, RawProfile, Sample, node_members, own_cores, probe_footprint,
)
from ccsynth.topologies.coldcall import ColdCallCost
from ccsynth.topologies.curve import SizeCurve
from ccsynth.topologies.model import Link, SharedPort, Topology

__all__ = ["MachineProfile", "build_topology", "node_ports", "fit_profile"]


@dataclass(frozen=True)
class MachineProfile:
    """Everything :func:`profile_machine` found (rank 0's copy is the one to use)."""

    topology: Topology
    fits: tuple[LinkFit, ...]
    call_overhead: float
    kernels: KernelRates
    samples: tuple[Sample, ...]
    nodes: tuple[int, ...]
    hosts: tuple[str, ...]
    cores: tuple[int, ...]  # cores each rank may use
    ports: tuple[SharedPort, ...] = ()
    pair_bw: dict = field(default_factory=dict)  # node -> one pair's bandwidth alone (GB/s), where measured
    protocol: ProtocolFit = NO_SWITCH
    seconds: float = 0.0
    round_samples: tuple[Sample, ...] = ()  # the round probes (robust_us of their measurements)
    communicator: CommunicatorFit | None = None
    raw: RawProfile | None = None  # what was measured (the profile is fit_profile(raw))

    def to_dict(self) -> dict:
        return {
            "call_overhead_us": self.call_overhead,
            "local_bw_GBps": self.kernels.local_bw,
            "kernels_GBps": {"copy": self.kernels.copy, "reduce": self.kernels.reduce, "fused": self.kernels.fused},
            "local_overhead_us": self.kernels.call_us,
            "patterns": [
                {"pattern": f.pattern.name, "kind": f.pattern.kind, "pairs": [list(p) for p in f.pattern.pairs],
                 "alpha_us": f.alpha, "overhead_us": f.overhead, "bw_GBps": f.bw, "error": f.error}
                for f in self.fits
            ],
            "shared_ports": [{"name": p.name, "bw_GBps": p.bw} for p in self.ports],
            "eager_limit_bytes": self.protocol.eager_limit,
            "rendezvous_alpha_us": self.protocol.rendezvous_alpha,
            "message_curve": None if self.topology.message_curve is None else self.topology.message_curve.to_dict(),
            "local_curve": None if self.topology.local_curve is None else self.topology.local_curve.to_dict(),
            "forward_curve": None if self.topology.forward_curve is None else self.topology.forward_curve.to_dict(),
            "footprint_curve": None if self.topology.footprint_curve is None else self.topology.footprint_curve.to_dict(),
            "cold_call": None if self.topology.cold_call is None else self.topology.cold_call.to_dict(),
            "run_curve": None if self.topology.run_curve is None else self.topology.run_curve.to_dict(),
            "mpi_reference": [r.to_dict() for r in self.topology.mpi_reference],
            "local_ladder_us": [[m, t] for m, t in self.kernels.ladder],
            "pair_bw_GBps": {str(k): v for k, v in self.pair_bw.items()},
            "samples": [{"probe": s.probe.describe(), "measured_us": s.measured_us} for s in self.samples],
            "round_cost": None if self.topology.round_cost is None else self.topology.round_cost.to_dict(),
            "round_samples": [{"peers": s.probe.peers, "rounds": s.probe.messages, "measured_us": s.measured_us}
                              for s in self.round_samples],
            "communicator_overhead_us": self.topology.communicator_overhead,
            "communicator_us": None if self.communicator is None else {
                k: {"communicator": self.communicator.via_us[k], "executor": self.communicator.direct_us[k]}
                for k in self.communicator.via_us},
            "hosts": list(self.hosts),
            "cores": list(self.cores),
            "seconds": self.seconds,
        }


def build_topology(
    n: int, fits: Sequence[LinkFit], call: float, kernels: KernelRates, nodes: Sequence[int], *,
    ports: dict[int, SharedPort] | None = None, pair_bw: dict[int, float] | None = None, name: str = "profiled",
    description: str = "", sources: Sequence[str] = (), protocol: ProtocolFit = NO_SWITCH,
    message_curve: SizeCurve | None = None, local_curve: SizeCurve | None = None,
    forward_curve: SizeCurve | None = None, footprint_curve: SizeCurve | None = None,
    cold_call: ColdCallCost | None = None, receiver_copies: bool = False,
) -> Topology:
    """The ccsynth topology of the fitted figures: a link per ordered pair, with its pattern's figures.

    ``ports`` maps a node to its shared port; the links inside such a node
    get the bandwidth of one pair alone (``pair_bw[node]``) where that is
    higher, and the port caps them all together.
    """
    ports = ports or {}
    pair_bw = pair_bw or {}
    links = []
    for f in fits:
        for r, d in f.pattern.pairs:
            bw = f.bw
            if nodes[r] == nodes[d] and nodes[r] in ports:
                bw = max(bw, pair_bw[nodes[r]])
            links.append(Link(r, d, f.alpha, bw, f.overhead))
    links.sort(key=lambda l: (l.src, l.dst))
    return Topology(name, n, links=tuple(links), shared_ports=tuple(ports.values()), nodes=tuple(nodes),
                    description=description, sources=tuple(sources), local_bw=kernels.local_bw,
                    local_overhead=kernels.call_us, overhead_scope="rank",
                    call_overhead=call, eager_limit=protocol.eager_limit, rendezvous_alpha=protocol.rendezvous_alpha,
                    message_curve=message_curve, local_curve=local_curve, forward_curve=forward_curve,
                    async_progress=False, footprint_curve=footprint_curve, cold_call=cold_call,
                    receiver_copies=receiver_copies)


def node_ports(fits: Sequence[LinkFit], nodes: Sequence[int], pair_bw: dict[int, float],
                cores: Sequence[int] | None = None) -> dict[int, SharedPort]:
    """A port per node where all its pairs at once get less than one pair alone, or whose ranks outnumber its
    cores (``cores[r]``: the cores rank ``r`` may use; see :mod:`ccsynth.bench.profile`)."""
    ports = {}
    for node, alone in sorted(pair_bw.items()):
        ranks = tuple(r for r, x in enumerate(nodes) if x == node)
        oversubscribed = cores is not None and len(ranks) > cores[ranks[0]]
        aggs, per_link = [], []
        for f in fits:
            inside = [(r, d) for r, d in f.pattern.pairs if nodes[r] == node and nodes[d] == node]
            if f.pattern.kind == "intra" and inside:
                aggs.append(f.bw * len(inside))
                per_link.append(f.bw)
        if per_link and (oversubscribed or max(per_link) < (1 - PORT_MARGIN) * alone):
            ports[node] = SharedPort(f"node{node}.memory", ranks, ranks, float(np.median(aggs)))
    return ports


def _describe(n: int, hosts: Sequence[str], nodes: Sequence[int], cores: Sequence[int], mpi_library: str) -> str:
    per_node = node_members(nodes)
    parts = []
    for _node, ranks in sorted(per_node.items()):
        c = cores[ranks[0]]
        over = f", oversubscribed {len(ranks) / c:.1f}x" if len(ranks) > c else ""
        parts.append(f"{hosts[ranks[0]]}: {len(ranks)} ranks on {c} cores{over}")
    return (f"profiled by ccsynth topo profile: {n} ranks on {len(per_node)} node(s) ({'; '.join(parts)}); "
            f"{mpi_library}; figures measured with all ranks active, through ccsynth's executor")


def profile_description(raw: RawProfile) -> str:
    """The profiled topology's description: the ranks, nodes and cores, the MPI library; first, where the machine
    was profiled busy (``--busy-ok``, :func:`ccsynth.bench.machine.with_start_load`), :data:`BUSY_MARK`."""
    busy = f"{BUSY_MARK} (see its sources for the load): " if profiled_busy(raw.load) else ""
    return busy + _describe(raw.n, raw.hosts, raw.nodes, raw.cores, raw.mpi_library)


def fit_profile(raw: RawProfile, footprints: Sequence[int] | None = None) -> MachineProfile:
    """The profile of what ``raw`` measured: every figure fitted as :mod:`ccsynth.bench.profile` says (no MPI: it runs on
    a saved file as on a fresh measurement, and gives the same topology from the same times).

    ``footprints``: fit the footprint costs on the footprint probes at these footprints only (bytes per rank;
    those at the smallest footprint, the probes' own buffers, always count): what a profile of fewer probes
    would have said, from the same times.
    """
    options, n, nodes, cores = raw.options, raw.n, raw.nodes, raw.cores
    best = {p: min(ts) for p, ts in raw.probe_us}
    # the probes as measured (not as this code's defaults would plan them): those of one pair alone have idle ranks
    alone = [p for p, _ in raw.probe_us if any(d < 0 for d in p.pattern.dest)]
    probes = [p for p, _ in raw.probe_us if p not in alone]
    if footprints is not None:
        keep = {int(f) for f in footprints}
        fp = [probe_footprint(p) for p in probes if p.shape == "footprint"]
        low = min(fp) if fp else 0
        probes = [p for p in probes if p.shape != "footprint" or probe_footprint(p) in keep or probe_footprint(p) == low]
    samples = [Sample(p, best[p]) for p in probes]
    pair_samples: dict[Pattern, list[Sample]] = {}
    for p in alone:
        pair_samples.setdefault(p.pattern, []).append(Sample(p, best[p]))
    round_samples = tuple(Sample(p, robust_us(ts)) for p, ts in raw.round_us)
    communicator = CommunicatorFit({kd: robust_us(v) for kd, v, _ in raw.communicator_us},
                                   {kd: robust_us(d) for kd, _, d in raw.communicator_us})
    kernels = raw.kernels

    copies = own_cores(nodes, cores)
    predictor = Predictor(n, options.cold, copies)
    result = fit_patterns(n, samples, predictor)
    call, fits, protocol = result.call_overhead, result.fits, result.protocol
    pair_bw = {}
    for pat, ps in pair_samples.items():
        node = nodes[pat.pairs[0][0]]
        same = [f for f in fits if f.pattern.kind == "intra"]
        ref = same[0] if same else fits[0]
        pair_bw[node] = fit_bandwidth(predictor, ps, ref.alpha, ref.overhead, call, protocol)
    ports = node_ports(fits, nodes, pair_bw, cores)
    footprint, cold = fit_footprint(predictor, samples, result)
    curve = fit_curve(predictor, samples, result, footprint, cold)
    forward = fit_forward_curve(predictor, samples, result, curve, footprint, cold)
    topo = build_topology(
        n, fits, call, kernels, nodes, ports=ports, pair_bw=pair_bw, name=f"profiled:{n}", protocol=protocol,
        message_curve=curve, local_curve=local_curve(kernels), forward_curve=forward, footprint_curve=footprint,
        cold_call=cold, receiver_copies=copies, description=profile_description(raw),
        sources=(f"ccsynth topo profile on {raw.hosts[0]} at {raw.when}, load average {raw.load}, "
                 f"{len(samples) + sum(len(v) for v in pair_samples.values()) + len(round_samples)} probes",),
    )
    topo = replace(topo, round_cost=fit_round_cost(topo, round_samples),
                   communicator_overhead=communicator.overhead_us)
    # last: the reference runs are predicted with every other figure in place
    topo = replace(topo, run_curve=cal.fit_run_curve(topo, raw.calibration),
                   mpi_reference=cal.mpi_reference(raw.calibration))
    return MachineProfile(topo, fits, call, kernels, tuple(samples) + tuple(s for v in pair_samples.values() for s in v),
                          nodes, raw.hosts, cores, tuple(ports.values()), pair_bw, protocol, raw.seconds,
                          round_samples, communicator, raw)
