"""The tree-packing synthesis path: pack, lower at several chunk factors, simulate, keep the fastest.

For a collective and a topology (:data:`KINDS`):

1. **Pack** (:mod:`~ccsynth.synth.trees.packing`, cached per topology and
   collective): out-trees for allgather and broadcast, in-trees for
   reduce-scatter and reduce, reduce-then-broadcast trees with free root
   weights for allreduce. The LP value is the packing's time at full
   pipelining; for allgather and reduce-scatter it meets the exact bound
   (ForestColl's optimality, checked against :mod:`~ccsynth.synth.bounds`).
2. **Chunk factor** (:func:`chunk_factor_ladder`): pipelining needs chunks;
   every chunk pays the per-message cost on every tree arc. As for the
   baselines (:mod:`~ccsynth.synth.baseline_search`) the factor is chosen by
   simulation: the smallest useful factor (1; for allreduce one chunk per
   root that carries data) times 1, 2, 4, ... while a chunk keeps at least
   :data:`~ccsynth.synth.baseline_search.MIN_CHUNK_BYTES` and the schedule
   at most :data:`MAX_OPS` ops. Simulating is what costs (a 1,024-rank
   allgather has two million ops at factor 1), so the walk starts near
   :data:`START_OPS` ops -- many chunks on a few ranks, one on a thousand --
   and chunks of :data:`START_CHUNK_BYTES` (where the per-message cost
   stops mattering on the machines of the catalog), goes up while each
   step is faster (by any margin: on dgx_h100x32 factor 2 gains 0.4% over
   factor 1 and factor 4 another 0.8%; a 1% threshold stopped the walk at
   2), then down from the start unless going up gained :data:`MIN_GAIN`,
   and stops once a schedule is within :data:`GOOD_ENOUGH` of the
   packing's own time (more chunks cannot gain more than that).
3. **Send window** (allgather, broadcast): unless the best factor is good
   enough, it is lowered again with more sends per port (two, four, all;
   until one is not faster: the windows' times fall or rise together on
   the machines measured) and the fastest kept (:func:`~ccsynth.synth.trees.lowering.lower_out_trees`: a rank's
   sends of one chunk through one port one at a time, or ``window`` at a
   time). One at a time suits non-blocking machines; on the oversubscribed
   fat_tree:16x8:4:2 a send held back by the spine leaves its NIC idle
   unless a second one runs beside it (1 GiB allgather at chunk factor 8:
   5,925.8 us with one, 5,595.2 us with two). With one chunk per root
   (factor 1: 1,024 ranks at 1 GiB) the lowering sends
   :data:`~ccsynth.synth.trees.lowering.WINDOW` at a time already,
   staggered by half a chunk (:func:`stagger_for`), and the search tries
   :data:`WIDE_WINDOW`, then twice that: a NIC with four or eight sends in
   flight stays busy while the receivers of some of them are busy with
   other roots' sends, and the longer a NIC's chain of sends, the further
   the senders drift apart and the more sends it takes (the 1 MiB shards of
   dgx_a100x64: 1.106x of the bound with two, 1.051x with four;
   dgx_a100x16's shorter chains: 1.068x with two, 1.112x with four).
   All end with half a chunk (the lowering's
   :data:`~ccsynth.synth.trees.lowering.TAIL_SPLIT`): dgx_a100x16 1.047x
   with two, dgx_a100x32 1.041x with four, dgx_a100x64 1.046x with four
   and 1.040x with eight, dgx_a100x128 1.059x with four and 1.030x with
   eight (its 127 sends per NIC); eight on the shorter chains are slower
   (dgx_a100x8 1.44x, dgx_a100x16 1.15x, dgx_a100x32 1.074x) and the walk
   stops before them.
4. **Phases** (allgather, broadcast; more than one chunk per root, above
   :data:`PHASE_WORTH` of the bound): the best factor lowered once more with the
   node-crossing sends in phases
   (:func:`~ccsynth.synth.trees.lowering.lower_out_trees` ``phased``: in
   every phase each NIC sends to one partner and hears one, the ranks in
   lock-step), kept if faster: fat_tree:8x8:4:2 at 1 GiB 1.041x -> 1.014x
   of the bound (dgx_h100x32 would go 1.021x -> 1.016x for 40 CPU s more,
   so below 1.03x it is not tried). Where the phases would
   leave ports idle (fat_tree:16x8:4:2's 2:1 spine, which its trees load
   to 98%) the lowering gives up and nothing is simulated.
5. The fastest schedule is returned with its simulated time; the caller
   verifies it (:func:`ccsynth.synth.synthesize.synthesize` does).

Example:
    >>> from ccsynth.collectives.spec import Collective
    >>> from ccsynth.topologies.catalog import ring
    >>> choice = best_tree_schedule(ring(4), Collective("allgather", 4), 1 << 24)
    >>> choice.schedule.collective.kind, choice.time_us > 0
    ('allgather', True)
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from functools import lru_cache

from ccsynth.collectives.schedule import Schedule
from ccsynth.collectives.spec import Collective
from ccsynth.errors import CollectiveError
from ccsynth.synth.baseline_search import MIN_CHUNK_BYTES
from ccsynth.synth.bounds import lower_bound
from ccsynth.synth.simulate import simulate
from ccsynth.synth.trees.lowering import STAGGER, WINDOW, lower_allreduce, lower_in_trees, lower_out_trees
from ccsynth.synth.trees.packing import Packing, pack_allreduce, pack_trees
from ccsynth.topologies.model import BYTES_PER_US_PER_GBPS, Topology

__all__ = ["KINDS", "MAX_OPS", "MAX_OPS_PER_RANK", "GOOD_ENOUGH", "PHASE_WORTH", "LONG_CHAIN", "WIDE_WINDOW", "TreeChoice", "packing_for",
           "chunk_factor_ladder", "stagger_for", "lower", "best_tree_schedule"]

log = logging.getLogger(__name__)

KINDS = ("allgather", "reduce_scatter", "allreduce", "broadcast", "reduce")
#: schedules above this many ops are not built in the chunk-factor search (simulation time grows with them)
MAX_OPS = 3_000_000
#: ... nor above this many ops per rank: a GPU's steps must stay within what the MSCCL runtimes load
#: (msccl-executor-nccl's parser takes at most 4,095 XML elements per gpu, MAX_NODES; see
#: ccsynth.formats.msccl.limits), so every packed-tree schedule exports (the base factor is always tried)
MAX_OPS_PER_RANK = 2_048
#: the search stops once a schedule simulates within this factor of the packing's LP time
GOOD_ENOUGH = 1.02
#: the phased lowering is tried only above this gap to the bound: its phase order costs 8-40 CPU s on 256 ranks
#: (dgx_h100x32: 1.021x -> 1.016x, 24 -> 65 CPU s, which would take the 256-rank command past a minute)
PHASE_WORTH = 1.03
#: the walk also tries the factors below its start unless going up gained at least this fraction (going up by a
#: smaller gain does not say that fewer chunks would not be faster still)
MIN_GAIN = 0.01
#: the search starts at the largest factor whose schedule has at most this many ops ...
START_OPS = 200_000
#: ... and whose chunks keep at least this many bytes
START_CHUNK_BYTES = 128 << 10
#: factors slower than the best so far, in a row, that end the walk in one direction
WORSE_IN_A_ROW = 1
#: where staggering every port could take a rank above MAX_OPS_PER_RANK, only ports that carry more than this
#: many of a rank's sends of a chunk are staggered (a NIC's sends to the other nodes, not an 8-GPU node's
#: NVSwitch fan-out)
LONG_CHAIN = 8
#: with one chunk per root the search also tries this many sends per port, then twice as many (staggered by half a
#: chunk in pairs)
WIDE_WINDOW = 4


@dataclass(frozen=True)
class TreeChoice:
    """The fastest tree schedule found: its simulated time at the size asked, its chunk factor, the packing,
    and every factor tried with its time."""

    schedule: Schedule
    time_us: float
    chunk_factor: int
    packing: Packing
    tried: tuple[tuple[int, float], ...]
    seconds: float

    def predicted_us(self, size_bytes: float) -> float:
        """The packing's LP time at ``size_bytes`` (full pipelining, no message costs)."""
        n = self.schedule.n_ranks
        demand = size_bytes / n if self.schedule.collective.kind in ("allgather", "reduce_scatter") else size_bytes
        return self.packing.tau * demand / BYTES_PER_US_PER_GBPS


@lru_cache(maxsize=32)
def packing_for(topology: Topology, kind: str, root: int = 0) -> Packing:
    """The packing of collective ``kind`` on ``topology`` (cached)."""
    n = topology.n_ranks
    if kind in ("allgather", "reduce_scatter"):
        # the packing's target is the exact cut, which the bounds have computed (and cached) already: the
        # max flows are not run twice (half of them at 1,024 ranks: 130 of 260)
        probe = float(n << 20)
        cut_us = lower_bound(Collective(kind, n), topology, probe).details["cut"]
        bound_tau = cut_us * BYTES_PER_US_PER_GBPS / (probe / n) if 0 < cut_us < math.inf else None
        return pack_trees(topology, range(n), inward=kind == "reduce_scatter", bound_tau=bound_tau)
    if kind == "broadcast":
        return pack_trees(topology, (root,))
    if kind == "reduce":
        return pack_trees(topology, (root,), inward=True)
    if kind == "allreduce":
        probe = 1e6
        bound = lower_bound(Collective("allreduce", n), topology, probe).bandwidth_us
        return pack_allreduce(topology, bound_tau=bound * BYTES_PER_US_PER_GBPS / probe)
    raise CollectiveError(f"the tree packing builds {', '.join(KINDS)}; not {kind}")


def _ops_per_chunk(kind: str, n: int) -> float:
    """Ops per unit of chunk factor: 2 per transfer, plus a reduction per arc of an in-tree."""
    per_arc = {"allgather": 2.0, "broadcast": 2.0, "reduce_scatter": 3.0, "reduce": 3.0, "allreduce": 5.0}[kind]
    roots = n if kind in ("allgather", "reduce_scatter") else 1
    return per_arc * roots * (n - 1)


def chunk_factor_ladder(kind: str, topology: Topology, size_bytes: float, packing: Packing) -> tuple[int, ...]:
    """The chunk factors :func:`best_tree_schedule` may try, smallest first (see the module docstring)."""
    n = topology.n_ranks
    base = sum(1 for w in packing.root_weight if w > 0) if kind == "allreduce" else 1
    base = max(base, 1)
    out = [base]
    c = base
    while True:
        c *= 2
        try:
            coll = Collective(kind, n, c)
        except CollectiveError:  # beyond ccsynth.limits (chunk factor, chunks per buffer): no candidate
            break
        ops = c * _ops_per_chunk(kind, n)
        if size_bytes / coll.size_chunks < MIN_CHUNK_BYTES or ops > MAX_OPS or ops / n > MAX_OPS_PER_RANK:
            break
        out.append(c)
    return tuple(out)


def _start(ladder: tuple[int, ...], kind: str, n: int, size_bytes: float) -> int:
    """Where the search starts on the ladder (see :data:`START_OPS` and :data:`START_CHUNK_BYTES`)."""
    i = 0
    while i + 1 < len(ladder):
        c = ladder[i + 1]
        if c * _ops_per_chunk(kind, n) > START_OPS or size_bytes / Collective(kind, n, c).size_chunks < START_CHUNK_BYTES:
            break
        i += 1
    return i


def _windows(c: int, n: int) -> tuple[int, ...]:
    """The send windows the search tries at its best chunk factor ``c`` on ``n`` ranks (module docstring)."""
    return (WIDE_WINDOW, 2 * WIDE_WINDOW) if c == 1 else (WINDOW, WIDE_WINDOW, n)


def stagger_for(kind: str, n: int) -> int:
    """The stagger threshold of out-trees with one chunk per root on ``n`` ranks (module docstring, step 3).

    :data:`~ccsynth.synth.trees.lowering.STAGGER` unless a rank's ops could then exceed
    :data:`MAX_OPS_PER_RANK`: one chunk per root is ``_ops_per_chunk / n`` ops per rank, and staggering can
    add a send and a receive for every chunk a rank forwards (and the relays' forwarding of the pieces); then
    :data:`LONG_CHAIN` + 1 (the NICs' cuts cost dgx_a100x128 about 50 ops per rank above the 2,046 of one
    chunk per root with four sends per NIC, about 80 with eight, within the 4,095 XML elements per gpu that
    MSCCL loads).
    """
    per_rank = _ops_per_chunk(kind, n) / n
    return STAGGER if 2 * per_rank <= MAX_OPS_PER_RANK else LONG_CHAIN + 1


def lower(packing: Packing, collective: Collective, topology: Topology, window: int | None = None,
          phased: int = 0) -> Schedule:
    """The packing as a schedule of ``collective`` (its chunk factor; unverified).

    ``window``: out-trees' send window (:func:`~ccsynth.synth.trees.lowering.lower_out_trees`; None: its
    default); with one chunk per root the ports are staggered as :func:`stagger_for` says. The other
    collectives take no window. ``phased``: out-trees' node-crossing sends in phases, this many at a time per
    rank (:func:`~ccsynth.synth.trees.lowering.lower_out_trees`; its ``meta["phased"]`` is 0 where it gave up).
    """
    kind = collective.kind
    if kind in ("allgather", "broadcast"):
        return lower_out_trees(packing.trees, collective, topology, window, stagger_for(kind, collective.n_ranks),
                               phased)
    if window is not None or phased:
        raise CollectiveError(f"a send window is a choice of out-trees (allgather, broadcast), not of {kind}")
    if kind in ("reduce_scatter", "reduce"):
        return lower_in_trees(packing.trees, collective, topology)
    if kind == "allreduce":
        return lower_allreduce(packing.trees, packing.root_weight, collective, topology)
    raise CollectiveError(f"the tree packing builds {', '.join(KINDS)}; not {kind}")


def best_tree_schedule(topology: Topology, collective: Collective, size_bytes: float, *,
                       chunk_factors: tuple[int, ...] | None = None) -> TreeChoice:
    """The fastest packed-tree schedule of ``collective`` at ``size_bytes`` (unverified; module docstring).

    ``chunk_factors``: the factors to try (default: :func:`chunk_factor_ladder`).
    """
    t0 = time.perf_counter()
    kind, n = collective.kind, collective.n_ranks
    packing = packing_for(topology, kind, collective.root)
    ladder = chunk_factors or chunk_factor_ladder(kind, topology, size_bytes, packing)
    demand = size_bytes / n if kind in ("allgather", "reduce_scatter") else size_bytes
    ideal = packing.tau * demand / BYTES_PER_US_PER_GBPS
    times: dict[int, tuple[float, Schedule]] = {}

    def run(i: int) -> float:
        c = ladder[i]
        if c not in times:
            sched = lower(packing, Collective(kind, n, c, collective.root), topology)
            times[c] = (simulate(sched, topology, size_bytes).time_us, sched)
            log.info("packed trees, %s, chunk factor %d: %.3f us (packing %.3f us)", kind, c, times[c][0], ideal)
        return times[c][0]

    def good(t: float) -> bool:
        return t <= ideal * GOOD_ENOUGH

    i = _start(ladder, kind, n, size_bytes)
    best_i = i
    if not good(run(i)):
        # walk up while it is faster, then down from the start unless going up gained MIN_GAIN (or good enough)
        for step in (1, -1):
            j, worse = i + step, 0
            while 0 <= j < len(ladder) and worse < WORSE_IN_A_ROW:
                t = run(j)
                if t < times[ladder[best_i]][0]:
                    best_i, worse = j, 0
                    if good(t):
                        break
                else:
                    worse += 1
                j += step
            best_t = times[ladder[best_i]][0]
            if good(best_t) or best_t < times[ladder[i]][0] * (1 - MIN_GAIN):
                break
    c, (t, sched) = min(times.items(), key=lambda kv: (kv[1][0], kv[0]))
    tried = sorted((f, ft) for f, (ft, _) in times.items())
    if kind in ("allgather", "broadcast") and not good(t):
        # the best factor again with other send windows (lowering._broadcast), the fastest kept: one at a time
        # finish early but leave the port idle when another resource slows the one in flight (an oversubscribed
        # spine), all at once keep every port fed; with one chunk per root (WINDOW, staggered, already)
        # WIDE_WINDOW keep a NIC fed when the receivers of its 63 or 127 sends are busy with other roots'
        # (dgx_a100x64 at 512 MiB: 1.106x -> 1.051x); the first window that is not faster ends the walk (a
        # non-blocking machine's one send per port: dgx_h100x32 at factor 2, 2,678.2 us against 2,705.5 / 2,812.6 /
        # 3,629.2 us with two / four / all)
        for window in _windows(c, n):
            if window == sched.meta.get("send_window", 1):
                continue
            if good(t):
                break
            other = lower(packing, Collective(kind, n, c, collective.root), topology, window)
            ot = simulate(other, topology, size_bytes).time_us
            log.info("packed trees, %s, chunk factor %d, send window %d: %.3f us", kind, c, window, ot)
            if ot >= t:
                break
            t, sched = ot, other
    if kind in ("allgather", "broadcast") and c > 1 and t > ideal * PHASE_WORTH:
        # the node-crossing sends in phases (lowering._phase_order): each NIC sends to one partner at a time, in
        # lock-step (fat_tree:8x8:4:2 at chunk factor 8: 1.104x -> 1.019x of the bound)
        other = lower(packing, Collective(kind, n, c, collective.root), topology, WINDOW, phased=WINDOW)
        if other.meta.get("phased"):
            ot = simulate(other, topology, size_bytes).time_us
            log.info("packed trees, %s, chunk factor %d, phased: %.3f us", kind, c, ot)
            if ot < t:
                t, sched = ot, other
    sched = sched.with_meta(lp_time_us=ideal, packing_gap=packing.gap, chunk_factor=c)
    return TreeChoice(sched, t, c, packing, tuple(tried), time.perf_counter() - t0)
