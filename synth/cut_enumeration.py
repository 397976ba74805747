"""The cut bounds by brute force: every set of ranks, each with its exact LP capacity.

The reference the exact bounds of :mod:`ccsynth.synth.bounds` are tested
against (and that ``python -m ccsynth.bench.bench_synth`` compares them to
wherever it runs): for every proper non-empty set ``S`` of ranks, the
capacity into ``S`` is the packing LP

    ``max sum x_c`` over the connections ``c`` crossing into ``S``,
    subject to ``sum of x_c over the connections consuming R <= bw(R)`` for every resource ``R``,

solved by HiGHS -- not a cover, not a graph. The cut bound of a collective
is the largest ``need(S) / capacity(S)`` (the needs of
:func:`ccsynth.synth.bounds.cut_needs`). ``2^n - 2`` LPs: meant for ``n <=``
:data:`MAX_RANKS`.

Example:
    >>> from ccsynth.topologies.catalog import ring
    >>> cut = brute_force_cut("allgather", ring(4, bw=10.0))
    >>> round(cut.us_per_byte * 1e3 * 20, 9), cut.inside   # 3/4 of Z into one rank at 20 GB/s
    (0.75, (0,))
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import highspy
import numpy as np

from ccsynth.errors import TopologyError
from ccsynth.synth.solver import silence_highs_banner  # the CLI's --json output stays clean
from ccsynth.synth.bounds import cut_needs
from ccsynth.topologies.model import BYTES_PER_US_PER_GBPS, Topology

__all__ = ["MAX_RANKS", "BruteForceCut", "lp_capacity_into", "brute_force_cut"]

#: brute force refuses topologies above this many ranks (2^n LPs)
MAX_RANKS = 14


@dataclass(frozen=True)
class BruteForceCut:
    """The largest ``need(S) / capacity(S)`` over every cut: us per byte of message, and its cut ``S``."""

    us_per_byte: float
    inside: tuple[int, ...]
    direction: str


def lp_capacity_into(topology: Topology, inside: frozenset[int]) -> float:
    """The exact LP capacity (GB/s) of the connections crossing into ``inside``."""
    conns = [c for c in topology.connections() if c.dst in inside and c.src not in inside]
    if not conns:
        return 0.0
    rbw = topology.resource_bw
    rows: dict[str, list[int]] = {}
    for j, c in enumerate(conns):
        for r in c.resources:
            rows.setdefault(r, []).append(j)
    silence_highs_banner()
    h = highspy.Highs()
    h.setOptionValue("output_flag", False)
    m = len(conns)
    h.addCols(m, np.full(m, -1.0), np.zeros(m), np.array([c.bw for c in conns], dtype=float), 0,
              np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int32), np.zeros(0))
    names = list(rows)
    starts = np.cumsum([0] + [len(rows[r]) for r in names[:-1]]).astype(np.int32)
    index = np.array([j for r in names for j in rows[r]], dtype=np.int32)
    h.addRows(len(names), np.full(len(names), -highspy.kHighsInf), np.array([rbw[r] for r in names], dtype=float),
              len(index), starts, index, np.ones(len(index)))
    h.run()
    return -h.getInfo().objective_function_value


def brute_force_cut(kind: str, topology: Topology, root: int = 0) -> BruteForceCut:
    """The cut bound of collective ``kind`` by enumeration of every cut (see the module docstring)."""
    n = topology.n_ranks
    if n > MAX_RANKS:
        raise TopologyError(f"brute force enumerates 2^n cuts; {n} ranks is more than {MAX_RANKS}")
    caps: dict[int, float] = {}
    full = (1 << n) - 1
    for mask in range(1, full):
        caps[mask] = lp_capacity_into(topology, frozenset(r for r in range(n) if (mask >> r) & 1))
    best = BruteForceCut(0.0, (), "")
    for mask in range(1, full):
        inside = tuple(r for r in range(n) if (mask >> r) & 1)
        fin, fout = cut_needs(kind, n, len(inside), bool((mask >> root) & 1))
        for frac, cap, direction in ((float(fin), caps[mask], "into"), (float(fout), caps[full ^ mask], "out of")):
            if frac <= 0:
                continue
            v = math.inf if cap <= 0 else frac / (cap * BYTES_PER_US_PER_GBPS)
            if v > best.us_per_byte:
                best = BruteForceCut(v, inside, direction)
    return best
