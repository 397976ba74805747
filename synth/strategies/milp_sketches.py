"""The sketches the MILP strategy tries when the caller gives none, and the chunk factors they reach.

Around :func:`~ccsynth.synth.sketch.default_sketch` (its symmetry, its
relay rules between nodes): with and without sideways detours; for several
nodes also without the relay rules (fewest hops, best for small messages)
and, on three nodes or more, rings along the rails. Each such *family* is
tried at a ladder of chunk factors (:func:`chunk_factor_ladder`): from half
the size-based default up, doubling, while a piece keeps at least
:data:`MIN_PIECE_BYTES` and the factor stays within
:data:`MAX_DEFAULT_CHUNK_FACTOR`. The ladder is long on purpose: the MILP
strategy walks each family up it only while the list schedule's estimate
improves (:mod:`.milp`), and what survives is judged as written (a finer
schedule that no longer fits a runtime is merged by the exporter, or loses
in the form it is written), rather than a cap deciding the trade up front.
At 64 MiB on two DGX A100 nodes the default factor is 2 while 16 to 32
pipeline best (issue 27).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ccsynth.collectives.spec import Collective
from ccsynth.synth.sketch import Sketch, default_sketch, find_symmetries
from ccsynth.topologies.model import Topology

__all__ = [
    "MIN_PIECE_BYTES",
    "MAX_DEFAULT_CHUNK_FACTOR",
    "RS_AG",
    "GATHER_REDUCE",
    "Candidate",
    "chunk_factor_ladder",
    "candidate_sketches",
    "milp_candidates",
    "describe_sketch",
]

#: the smallest piece (bytes of one chunk of one rank's share) the default ladder cuts down to: below it the
#: per-message costs of every modelled network outweigh what a finer pipeline gains
MIN_PIECE_BYTES = 128 << 10
#: the largest chunk factor of the default ladder (a user's ``--chunks`` may go further, up to
#: ``MAX_SYNTH_CHUNK_FACTOR``): the ordering and lowering grow with the pieces
MAX_DEFAULT_CHUNK_FACTOR = 256
#: allreduce strategies: reduce-scatter then allgather; or gather every buffer and reduce locally
RS_AG = "rs+ag"
GATHER_REDUCE = "allgather+reduce"


@dataclass(frozen=True)
class Candidate:
    """One way to synthesize the collective: a sketch and, for allreduce, a strategy (:data:`RS_AG` or
    :data:`GATHER_REDUCE`)."""

    sketch: Sketch
    strategy: str = RS_AG

    def describe(self) -> str:
        return describe_sketch(self.sketch) + ("" if self.strategy == RS_AG else f" [{self.strategy}]")

    def family(self) -> str:
        """The candidate without its chunk factor: the ladder a factor walk climbs."""
        return replace(self.sketch, chunk_factor=1, input_size=None).to_json() + self.strategy


def chunk_factor_ladder(base_factor: int, collective: Collective, size_bytes: int) -> list[int]:
    """The chunk factors the default sketches are tried at: ``base_factor / 2`` up, doubling (module docstring)."""
    per_rank = size_bytes / max(1, collective.n_ranks)
    c = max(1, base_factor // 2)
    out = [c]
    while 2 * c <= MAX_DEFAULT_CHUNK_FACTOR and (per_rank / (2 * c) >= MIN_PIECE_BYTES or 2 * c <= 2 * base_factor):
        c *= 2
        out.append(c)
    return out


def candidate_sketches(topology: Topology, collective: Collective, size_bytes: int) -> list[Sketch]:
    """The default sketches the MILP strategy tries when the caller gives none (see the module docstring).

    Alltoall never uses relays between nodes (each chunk has one destination) and keeps to half, once and
    twice the default chunk factor.
    """
    base = default_sketch(topology, collective, size_bytes)
    c0 = base.chunk_factor
    # alltoall moves every piece once, point to point: half, the default and twice it, as before (its routing
    # and lowering grow with the pieces faster than the others')
    factors = chunk_factor_ladder(c0, collective, size_bytes) if collective.kind != "alltoall" else \
        sorted({max(1, c0 // 2), c0, 2 * c0})
    free = None
    if base.internode is not None:
        free = replace(base, internode=None, name=base.name + "+direct")
        free = replace(free, symmetry=find_symmetries(topology, free))
    out: list[Sketch] = []
    if collective.kind == "alltoall":
        out.extend(replace(free or base, chunk_factor=c, detours=d) for c in factors for d in (0, 1))
        return _dedupe(out)
    out.extend(replace(base, chunk_factor=c, detours=d) for c in factors for d in (0, 1))
    if free is not None and c0 == 1:
        out.append(replace(free, chunk_factor=1, detours=0))
    if base.internode is not None and topology.n_nodes >= 3 and c0 > 1:
        # rings along the rails: one connection per NIC, whole chunks per wave
        ring = replace(base, internode=replace(base.internode, ring=True), name=base.name + "+ring")
        ring = replace(ring, symmetry=find_symmetries(topology, ring))
        out.extend(replace(ring, chunk_factor=c, detours=0) for c in factors)
    return _dedupe(out)


def milp_candidates(topology: Topology, collective: Collective, sketch: Sketch | None,
                    size_bytes: int) -> list[Candidate]:
    """The user's sketch (checked against the topology) or the default ones; for allreduce also the gather
    strategy. A collective chunk factor above 1 pins every sketch's factor."""
    if sketch is not None:
        sk = replace(sketch, chunk_factor=collective.chunk_factor) if collective.chunk_factor > 1 else sketch
        sk.bind(topology)  # sketch errors before any solver runs
        sketches = [sk]
    else:
        sketches = candidate_sketches(topology, collective, size_bytes)
        if collective.chunk_factor > 1:
            sketches = _dedupe([replace(c, chunk_factor=collective.chunk_factor) for c in sketches])
    candidates = [Candidate(sk, RS_AG) for sk in sketches]
    if collective.kind == "allreduce":
        # latency-bound sizes: gather every rank's whole buffer and reduce locally (one tree depth, not two)
        first = sketches[0] if sketch is not None else replace(sketches[0], chunk_factor=1, detours=0)
        candidates.append(Candidate(first, GATHER_REDUCE))
    return candidates


def _dedupe(sketches: list[Sketch]) -> list[Sketch]:
    out, seen = [], set()
    for s in sketches:
        key = s.to_json()
        if key not in seen:
            seen.add(key)
            out.append(s)
    return out


def describe_sketch(sk: Sketch) -> str:
    """A sketch in a few words: name, chunk factor, detours, relay rules, symmetry."""
    bits = [f"c={sk.chunk_factor}"]
    if sk.detours:
        bits.append("detours")
    if sk.internode is not None:
        bits.append(sk.internode.pattern or "relays")
        if sk.internode.ring:
            bits.append("node ring")
    if sk.symmetry:
        bits.append("sym" + "".join(f"[{o},{s}]" for o, s in sk.symmetry))
    return f"{sk.name}({', '.join(bits)})"
