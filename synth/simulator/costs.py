"""What one call and one byte of it cost, apart from the schedule: curves, footprint, per-call costs.

The constant alpha-beta model charges every byte alike; a profiled
topology's curves scale that (see :mod:`ccsynth.synth.simulate`):
:class:`ByteFactors` says by how much a call's message bytes, local bytes
and forwarded bytes cost more, read at the call's size and *footprint* (the
bytes a rank touches between two calls on the same buffers: by default its
own working set, :func:`working_set_bytes`); :func:`call_cost` is what a
call pays once whatever its schedule (per-call and cold-call costs);
:func:`run_factor` is the run curve a whole lowered run
(:func:`ccsynth.synth.simulate.simulate_graph`) is scaled by. On a
catalog topology (no curves) every factor is 1.0 and every cost 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ccsynth.collectives.explicit import ExplicitCollective
from ccsynth.collectives.schedule import Schedule
from ccsynth.collectives.spec import Collective
from ccsynth.errors import SizeError, TopologyError
from ccsynth.synth.simulator.tasks import TaskGraph
from ccsynth.topologies.model import Topology

__all__ = [
    "ByteFactors", "byte_factors", "call_cost", "working_set_bytes", "footprint", "check_args",
    "input_bytes_per_rank", "run_factor",
]


def check_args(size_bytes, local_bw) -> float:
    """``size_bytes`` as a float, once it and ``local_bw`` (GB/s or None) are valid (else a typed error)."""
    if isinstance(size_bytes, bool) or not isinstance(size_bytes, (int, float)):
        raise SizeError(f"message size must be a number of bytes, got {size_bytes!r}")
    size = float(size_bytes)
    if not math.isfinite(size) or size < 0:
        raise SizeError(f"message size must be a non-negative number of bytes, got {size_bytes!r}")
    if local_bw is not None:
        if isinstance(local_bw, bool) or not isinstance(local_bw, (int, float)) or not (
            math.isfinite(local_bw) and local_bw > 0
        ):
            raise TopologyError(f"local copy bandwidth must be a positive number of GB/s, got {local_bw!r}")
    return size


def working_set_bytes(schedule: Schedule | TaskGraph, size_bytes: float) -> float:
    """Bytes of buffers one rank touches in a call of ``schedule`` at ``size_bytes``: the default footprint.

    A schedule's input, output and scratch chunks (every rank holds as many);
    a :class:`TaskGraph`'s own figure (the executor's layout, staging included).
    """
    if isinstance(schedule, TaskGraph):
        return float(schedule.working_set_bytes)
    coll = schedule.collective
    return coll.chunk_bytes(float(size_bytes)) * (coll.in_chunks + coll.out_chunks + schedule.scratch_chunks)


@dataclass(frozen=True)
class ByteFactors:
    """What one byte of a call costs, relative to the constant model (see :mod:`ccsynth.synth.simulate`).

    ``message``: every message (``message_curve`` at the call's size, times
    ``footprint_curve`` at its footprint); ``local``: every local copy or
    reduction (``local_curve`` at the call's size: its ladder of kernel
    calls is measured on buffers of that size, its own footprint);
    ``forward``: a forwarded message's extra (``forward_curve``). All 1.0
    on a topology without curves.
    """

    message: float = 1.0
    local: float = 1.0
    forward: float = 1.0
    footprint: float = 0.0  # the call's footprint per rank (bytes), what ``cold_call`` is read at


def call_cost(topology: Topology, footprint_bytes: float, working_set_bytes: float) -> float:
    """What a call of footprint ``footprint_bytes`` and ``working_set_bytes`` of own buffers per rank pays once,
    whatever its schedule (us): the per-call cost, plus the cold call cost where the topology has one (see
    :mod:`ccsynth.synth.simulate`)."""
    cold = topology.cold_call
    return topology.call_overhead + (cold.cost_us(footprint_bytes, working_set_bytes) if cold is not None else 0.0)


def byte_factors(topology: Topology, size_bytes: float, footprint_bytes: float) -> ByteFactors:
    """The :class:`ByteFactors` of a call of ``size_bytes`` whose footprint is ``footprint_bytes`` per rank."""
    mcurve, lcurve, fcurve = topology.message_curve, topology.local_curve, topology.forward_curve
    hcurve = topology.footprint_curve
    h = hcurve.factor(footprint_bytes) if hcurve is not None else 1.0
    return ByteFactors((mcurve.factor(size_bytes) if mcurve is not None else 1.0) * h,
                       lcurve.factor(size_bytes) if lcurve is not None else 1.0,
                       fcurve.factor(size_bytes) if fcurve is not None else 1.0, float(footprint_bytes))


def footprint(schedule: Schedule | TaskGraph, size: float, footprint_bytes: float | None) -> float:
    """The call's footprint per rank: ``footprint_bytes``, checked, or by default its own working set."""
    if footprint_bytes is None:
        return working_set_bytes(schedule, size)
    if isinstance(footprint_bytes, bool) or not isinstance(footprint_bytes, (int, float)) or not (
            math.isfinite(footprint_bytes) and footprint_bytes >= 0):
        raise SizeError(f"footprint must be a non-negative number of bytes, got {footprint_bytes!r}")
    return float(footprint_bytes)


def input_bytes_per_rank(collective: Collective, size_bytes: float) -> float:
    """The bytes of input one rank holds in a call of ``collective`` at ``size_bytes`` (nccl-tests size).

    An allreduce's whole buffer, an allgather's one shard, ...: a collective's
    ``in_chunks`` chunks; an explicit collective (resharding) has no common
    figure per rank and is indexed by ``size_bytes`` itself.
    """
    if isinstance(collective, ExplicitCollective):
        return float(size_bytes)
    return collective.chunk_bytes(float(size_bytes)) * collective.in_chunks


def run_factor(topology: Topology, collective: Collective, size_bytes: float) -> float:
    """``Topology.run_curve`` at a call's input bytes per rank (1.0 without a run curve)."""
    curve = topology.run_curve
    if curve is None:
        return 1.0
    return curve.factor(input_bytes_per_rank(collective, size_bytes))
