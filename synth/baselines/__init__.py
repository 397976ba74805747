"""Classic collective algorithms as verified schedules: the yardsticks for synthesis.

Each algorithm lives in its own module; this package is the registry:

=================== ==============================================================
name                collectives
=================== ==============================================================
ring                allgather, reduce_scatter, allreduce, broadcast, reduce
multi_ring          the same over several rings at once (NCCL-style channels),
                    where the fabric has room for more than one
recursive_doubling  allgather, allreduce
recursive_halving   reduce_scatter, allreduce (Rabenseifner)
direct              alltoall, allgather, reduce_scatter, allreduce, gather,
                    scatter, broadcast, reduce
one_shot            allreduce in one hop (every rank sums all buffers itself)
binomial_tree       broadcast, reduce, gather, scatter
hierarchical        allreduce, allgather, reduce_scatter (multi-node topologies)
=================== ==============================================================

Every schedule uses only connections of the topology it is built for and is
proven by :func:`ccsynth.collectives.verify.verify` before it is returned.

Example:
    >>> from ccsynth.collectives.spec import Collective
    >>> from ccsynth.topologies.model import Switch, Topology
    >>> t = Topology("sw4", 4, switches=(Switch("sw", (0, 1, 2, 3), 10.0, 1.0),))
    >>> s = make_baseline("ring", Collective("allreduce", 4, chunk_factor=4), t)
    >>> s.name, s.topology, s.meta["algorithm"]
    ('ring', 'sw4', 'ring')
    >>> applicable_baselines(Collective("alltoall", 4), t)
    ['direct']
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from collections.abc import Callable

from ccsynth.collectives.schedule import Schedule
from ccsynth.collectives.spec import Collective
from ccsynth.errors import CollectiveError
from ccsynth.synth.baselines import direct, hierarchical, multi_ring, one_shot, recursive, ring, tree
from ccsynth.synth.baselines._util import pow2_floor
from ccsynth.topologies.model import Topology

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Baseline:
    """One classic algorithm.

    ``check(collective, topology)`` raises :class:`CollectiveError` saying
    why the algorithm cannot serve that case (cheap: no schedule is built);
    ``build(collective, topology)`` returns the schedule, unverified.
    """

    name: str
    description: str
    kinds: tuple[str, ...]
    build: Callable[[Collective, Topology], Schedule]
    check: Callable[[Collective, Topology], object]
    # (kind, topology) -> smallest chunk factor that lets every block/ring carry data
    min_chunks: Callable[[str, Topology], int] = lambda kind, topology: 1

    def supports(self, kind: str) -> bool:
        return kind in self.kinds


def _per_rank_blocks(kind: str, topology: Topology) -> int:
    return topology.n_ranks if kind == "allreduce" else 1


def _multi_ring_chunks(kind: str, topology: Topology) -> int:
    rings = max(2, len(multi_ring.find_rings(topology)))
    return rings * (topology.n_ranks if kind == "allreduce" else 1)


def _halving_chunks(kind: str, topology: Topology) -> int:
    return pow2_floor(topology.n_ranks) if kind == "allreduce" else 1


BASELINES: dict[str, Baseline] = {
    b.name: b
    for b in (
        Baseline(ring.NAME, ring.DESCRIPTION, ring.KINDS, ring.build, ring.check, _per_rank_blocks),
        Baseline(multi_ring.NAME, multi_ring.DESCRIPTION, ring.KINDS, multi_ring.build, multi_ring.check,
                 _multi_ring_chunks),
        Baseline(recursive.DOUBLING, recursive.DOUBLING_DESCRIPTION, recursive.DOUBLING_KINDS,
                 recursive.build_doubling, recursive.check_doubling),
        Baseline(recursive.HALVING, recursive.HALVING_DESCRIPTION, recursive.HALVING_KINDS,
                 recursive.build_halving, recursive.check_halving, _halving_chunks),
        Baseline(direct.NAME, direct.DESCRIPTION, direct.KINDS, direct.build, direct.check, _per_rank_blocks),
        Baseline(one_shot.NAME, one_shot.DESCRIPTION, one_shot.KINDS, one_shot.build, one_shot.check),
        Baseline(tree.NAME, tree.DESCRIPTION, tree.KINDS, tree.build, tree.check),
        Baseline(hierarchical.NAME, hierarchical.DESCRIPTION, hierarchical.KINDS, hierarchical.build, hierarchical.check,
                 _per_rank_blocks),
    )
}


def get_baseline(name: str) -> Baseline:
    """The registry entry ``name``; raises :class:`CollectiveError` listing the names."""
    key = str(name).strip().lower().replace("-", "_")
    if key not in BASELINES:
        raise CollectiveError(f"unknown baseline algorithm {name!r}; choose one of: {', '.join(BASELINES)}")
    return BASELINES[key]


def make_baseline(name: str, collective: Collective, topology: Topology) -> Schedule:
    """Build baseline ``name`` for ``collective`` on ``topology`` and verify it.

    The schedule is named ``name``, records ``topology.name`` and carries
    ``meta["algorithm"] = name`` (plus algorithm details such as the ring
    order). Raises :class:`CollectiveError` for an unknown name, a collective
    the algorithm does not implement, or a topology lacking the connections
    it needs.
    """
    from ccsynth.collectives.verify import verify

    baseline = get_baseline(name)
    schedule = baseline.build(collective, topology)
    report = verify(schedule, topology)
    log.debug("baseline %s: %s on %s, %d ops, verified", baseline.name, collective.describe(), topology.name, report.n_ops)
    return schedule


def why_not(name: str, collective: Collective, topology: Topology) -> str | None:
    """None if baseline ``name`` can build this case, else the reason it cannot."""
    try:
        get_baseline(name).check(collective, topology)
    except CollectiveError as e:
        return str(e)
    return None


def min_chunk_factor(name: str, kind: str, topology: Topology) -> int:
    """The smallest chunk factor with which baseline ``name`` keeps all its parts busy.

    Allreduce by ring, direct and hierarchical cuts the buffer into one block
    per rank, Rabenseifner into ``2^floor(log2 n)``; multi_ring shares every
    piece among its rings. Multiples of this value balance the load; larger
    ones add pipelining (and per-message latency).

    >>> from ccsynth.topologies.model import Switch, Topology
    >>> t = Topology("sw6", 6, switches=(Switch("sw", tuple(range(6)), 10.0, 1.0),))
    >>> min_chunk_factor("ring", "allreduce", t), min_chunk_factor("recursive_halving", "allreduce", t)
    (6, 4)
    """
    from ccsynth.collectives.spec import canonical_kind

    return get_baseline(name).min_chunks(canonical_kind(kind), topology)


def applicable_baselines(collective: Collective, topology: Topology) -> list[str]:
    """Names of the baselines that can build ``collective`` on ``topology``, registry order."""
    return [name for name in BASELINES if why_not(name, collective, topology) is None]


__all__ = ["Baseline", "BASELINES", "get_baseline", "make_baseline", "applicable_baselines", "why_not", "min_chunk_factor"]
