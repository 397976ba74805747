"""The built-in plan: which classic algorithm the communicator runs at which size.

A communicator given no plan still has to pick a schedule per call. This
module is that policy: a table of byte ranges per collective, each naming
baselines (:mod:`ccsynth.synth.baselines`) in order of preference, built on
a fully connected topology of the communicator's size (what a single MPI job
on one switch looks like):

============== ===================================================================
collective     algorithm by message size (nccl-tests convention)
============== ===================================================================
allreduce      MPI's own below 8 KiB on 2 ranks and below 1 MiB on more
               (:data:`MPI_BELOW`); then recursive doubling below 128 KiB,
               Rabenseifner (recursive halving) above
allgather      MPI's own (schedules: recursive doubling below 32 KiB, ring above)
reduce_scatter MPI's own (schedules: recursive halving below 32 KiB, ring above)
alltoall       MPI's own (schedule: direct)
broadcast      MPI's own (schedule: binomial tree)
reduce         MPI's own (schedule: binomial tree)
============== ===================================================================

**The default plan steps aside for MPI where MPI wins.** The MPI
library's own collective is an algorithm like any other (a plan row of
algorithm ``"mpi"``, :data:`~ccsynth.collectives.plan.MPI_ALGORITHM`), and
the default plan names it wherever MPICH's collective measured faster than
ccsynth's schedules on the project's machines (docs/results.md: allreduce
below 8 KiB on 2 ranks, 1.2-1.6x; to 256 KiB on 4 ranks, 1.1-2x; allgather,
reduce-scatter, alltoall and broadcast at every size on 2 and 4 ranks on a
shared 2-core machine). ``CCSYNTH_DEFAULT_MPI=0`` (or
``LazyDefaultPlan(mpi=False)``, ``default_entries(..., mpi=False)``) keeps
the schedules at every size (the rows in parentheses), as before;
``ccsynth tune`` and a synthesized plan decide by measurement and by the
profile instead.

A name that does not apply (recursive doubling on a rank count that is not a
power of two, one-shot on many ranks) gives way to the next one in its row; a
row with no applicable name is left out, and calls of that size go to the MPI
library's own collective. The thresholds come from the measurements in
``docs/results.md``.

Layering: the policy needs the baselines, so it lives in ``synth``; the
communicator (:mod:`ccsynth.collectives.communicator`, a layer below) never
imports it but takes a plan object as an argument. The public
``ccsynth.Communicator`` (:mod:`ccsynth.communicator`) passes it a
:class:`LazyDefaultPlan`, which builds the rows of one (collective, rank
count) the first time a call asks for them.

Example:
    >>> plan = default_plan(4, kinds=("allreduce",), mpi=False)
    >>> [(e.min_bytes, e.max_bytes, e.algorithm) for e in plan.entries]
    [(0, 4096, 'one_shot'), (4096, 131072, 'recursive_doubling'), (131072, None, 'recursive_halving')]
    >>> [(e.min_bytes, e.max_bytes, e.algorithm) for e in default_plan(2, kinds=("allreduce",), mpi=True).entries]
    [(0, 8192, 'mpi'), (8192, 131072, 'recursive_doubling'), (131072, None, 'recursive_halving')]
    >>> LazyDefaultPlan(mpi=False).select("allgather", 3, 1 << 20).name
    'ring'
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable

from ccsynth.collectives.plan import MPI_ALGORITHM, Plan, PlanEntry
from ccsynth.collectives.schedule import Schedule
from ccsynth.collectives.spec import Collective, canonical_kind
from ccsynth.errors import CCSynthError
from ccsynth.synth.baselines import applicable_baselines, make_baseline
from ccsynth.topologies import fully_connected

__all__ = [
    "SMALL_BYTES",
    "ONE_SHOT_BYTES",
    "ONE_SHOT_MAX_RANKS",
    "HALVING_BYTES",
    "DEFAULT_TABLE",
    "MPI_BELOW",
    "mpi_rows_default",
    "baseline_chunk_factor",
    "default_entries",
    "default_plan",
    "LazyDefaultPlan",
]

log = logging.getLogger(__name__)

SMALL_BYTES = 32 * 1024  # below: latency-bound algorithms; above: bandwidth-bound
ONE_SHOT_BYTES = 4 * 1024  # allreduce below this, on few ranks: one hop (every rank sums all buffers)
ONE_SHOT_MAX_RANKS = 8  # one_shot sends n-1 messages per rank: only for small communicators
# allreduce from here up: Rabenseifner (recursive halving), which on a fully connected machine moves what a
# ring moves in log2(n) steps instead of 2(n-1); below, recursive doubling (docs/results.md)
HALVING_BYTES = 128 * 1024

# Per kind, (min_bytes, max_bytes, baseline names in order of preference).
DEFAULT_TABLE: dict[str, tuple[tuple[int, int | None, tuple[str, ...]], ...]] = {
    "allreduce": (
        (0, ONE_SHOT_BYTES, ("one_shot", "recursive_doubling", "ring")),
        (ONE_SHOT_BYTES, HALVING_BYTES, ("recursive_doubling", "ring")),
        (HALVING_BYTES, None, ("recursive_halving", "ring")),
    ),
    "allgather": ((0, SMALL_BYTES, ("recursive_doubling", "ring")), (SMALL_BYTES, None, ("ring", "recursive_doubling"))),
    "reduce_scatter": ((0, SMALL_BYTES, ("recursive_halving", "ring")), (SMALL_BYTES, None, ("ring", "recursive_halving"))),
    "alltoall": ((0, None, ("direct",)),),
    "broadcast": ((0, None, ("binomial_tree", "ring", "direct")),),
    "reduce": ((0, None, ("binomial_tree", "ring", "direct")),),
}


#: Per kind, below which message size (per rank count; key 0: any other) the default plan runs the MPI library's
#: own collective: where MPICH measured faster than every schedule of the table (module doc, docs/results.md).
MPI_BELOW: dict[str, dict[int, int | None]] = {
    "allreduce": {2: 8 * 1024, 0: 1024 * 1024},
    "allgather": {0: None},  # None: at every size
    "reduce_scatter": {0: None},
    "alltoall": {0: None},
    "broadcast": {0: None},
    "reduce": {0: None},
}


def mpi_rows_default() -> bool:
    """Whether the default plan steps aside for MPI (``CCSYNTH_DEFAULT_MPI``, default yes; ``0``: schedules only)."""
    return os.environ.get("CCSYNTH_DEFAULT_MPI", "1").strip() not in ("0", "no", "false")


def _mpi_rows(kind: str, n: int, rows):
    """``rows`` (the table's, for ``kind`` on ``n`` ranks) with MPI's own collective first, below its threshold."""
    by_n = MPI_BELOW.get(kind)
    if not by_n:
        return rows
    below = by_n.get(n, by_n.get(0))
    if below is None:
        return ((0, None, (MPI_ALGORITHM,)),)
    out = [(0, below, (MPI_ALGORITHM,))]
    for lo, hi, names in rows:
        if hi is None or hi > below:
            out.append((max(lo, below), hi, names))
    return tuple(out)


def baseline_chunk_factor(name: str, kind: str, n: int) -> int:
    """Chunk factor the default plan builds baseline ``name`` with (not the synthesizer's pipelining default,
    :func:`ccsynth.synth.sketch.default_chunk_factor`, which depends on the topology and the size).

    Ring and Rabenseifner allreduce cut the buffer into one chunk per rank
    (otherwise the ring would carry the whole buffer at every step).
    """
    if kind == "allreduce" and name in ("ring", "recursive_halving"):
        return n
    return 1


def default_entries(kind: str, n: int, mpi: bool = False) -> list[PlanEntry]:
    """The default plan's rows for collective ``kind`` (canonical name) on ``n`` ranks (``mpi``: with MPI's own
    collective where it wins, :data:`MPI_BELOW`; else schedules at every size)."""
    if n < 2:
        return []  # one rank: nothing to schedule; MPI's collective is a local copy
    topo = fully_connected(n)
    out = []
    built: dict[tuple[str, int], Schedule] = {}
    rows = DEFAULT_TABLE.get(kind, ())
    for lo, hi, names in (_mpi_rows(kind, n, rows) if mpi else rows):
        if names == (MPI_ALGORITHM,):
            out.append(PlanEntry(kind, n, lo, hi, None, algorithm=MPI_ALGORITHM))
            continue
        for name in names:
            if name == "one_shot" and n > ONE_SHOT_MAX_RANKS:
                continue
            coll = Collective(kind, n, baseline_chunk_factor(name, kind, n))
            if name not in applicable_baselines(coll, topo):
                continue
            key = (name, coll.chunk_factor)
            if key not in built:
                try:
                    built[key] = make_baseline(name, coll, topo)
                except CCSynthError as e:  # pragma: no cover - applicable baselines build
                    log.debug("default plan: %s for %s skipped: %s", name, coll.describe(), e)
                    continue
            out.append(PlanEntry(kind, n, lo, hi, built[key], algorithm=name))
            break
    return out


def default_plan(n_ranks: int, kinds: Iterable[str] | None = None, mpi: bool | None = None) -> Plan:
    """The built-in plan for ``n_ranks`` ranks, every row built now, as a :class:`Plan`.

    ``kinds`` limits it to those collectives (default: all in :data:`DEFAULT_TABLE`); ``mpi``: with MPI's own
    collective where it wins (default :func:`mpi_rows_default`).
    """
    mpi = mpi_rows_default() if mpi is None else mpi
    entries = []
    for kind in kinds or DEFAULT_TABLE:
        entries.extend(default_entries(canonical_kind(kind), n_ranks, mpi))
    return Plan(tuple(entries), topology=f"fully_connected:{n_ranks}", meta={"default": True})


class LazyDefaultPlan:
    """The default plan, built per (kind, n_ranks) on first use.

    It answers the plan protocol the communicator reads (``select``,
    ``entry_for``, ``kinds``, ``meta``) like :class:`Plan`; ``kinds`` lists
    what has been built so far.
    """

    def __init__(self, mpi: bool | None = None) -> None:
        self._entries: dict[tuple[str, int], list[PlanEntry]] = {}
        self.mpi = mpi_rows_default() if mpi is None else mpi  # MPI's own collective where it wins
        self.meta = {"default": True}

    def entry_for(self, kind: str, n_ranks: int, nbytes: int) -> PlanEntry | None:
        key = (canonical_kind(kind), n_ranks)
        entries = self._entries.get(key)
        if entries is None:
            entries = self._entries[key] = default_entries(*key, mpi=self.mpi)
        for e in entries:
            if e.covers(nbytes):
                return e
        return None

    def select(self, kind: str, n_ranks: int, nbytes: int) -> Schedule | None:
        e = self.entry_for(kind, n_ranks, nbytes)
        return e.schedule if e is not None else None

    def kinds(self) -> list[tuple[str, int]]:
        return sorted(k for k, v in self._entries.items() if v)
