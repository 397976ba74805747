"""Collectives as data: which rank holds which chunk before, and what after.

A collective on ``n`` ranks with chunk factor ``c`` cuts every rank's input
and output buffers into chunks. Chunks are addressed ``(rank, buffer, index)``
with buffer ``"i"`` (input), ``"o"`` (output) or ``"s"`` (scratch).

A *value* is what a chunk holds, symbolically: a sorted tuple of
*contributions* ``(rank, index)``, each naming one input chunk. A plain copy
of input chunk ``j`` of rank ``q`` is ``((q, j),)``; the sum over all ranks of
their input chunk ``j`` is ``((0, j), (1, j), ..., (n-1, j))``. A value that
names a contribution twice (a duplicated reduction) is never a valid
postcondition.

``precondition()`` gives the initial input chunks, ``postcondition()`` what
every output chunk that matters must hold at the end.

Sizes: ``size_chunks`` is the number of chunks of the buffer that nccl-tests
calls the message size (the larger of input and output: allgather's output,
reduce-scatter's input, allreduce's buffer, alltoall's buffer, the root's
buffer of gather and scatter). For a message of ``S`` bytes each chunk is
``S / size_chunks`` bytes.

Example:
    >>> ag = Collective("allgather", 4, chunk_factor=1)
    >>> ag.postcondition()[(2, "o", 3)]
    ((3, 0),)
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from ccsynth.errors import CollectiveError
from ccsynth.limits import check as check_limit

__all__ = ["KINDS", "ROOTED", "REDUCING", "ALIASES", "busbw_factor", "canonical_kind", "Collective"]

Contribution = tuple[int, int]  # (rank, input chunk index)
Value = tuple[Contribution, ...]  # sorted
Loc = tuple[int, str, int]  # (rank, buffer, chunk index)

KINDS = (
    "allgather",
    "reduce_scatter",
    "allreduce",
    "alltoall",
    "broadcast",
    "reduce",
    "gather",
    "scatter",
)
ROOTED = frozenset({"broadcast", "reduce", "gather", "scatter"})
REDUCING = frozenset({"reduce_scatter", "allreduce", "reduce"})

ALIASES = {
    "reducescatter": "reduce_scatter",
    "reduce-scatter": "reduce_scatter",
    "reduce_scatter_block": "reduce_scatter",
    "all_gather": "allgather",
    "all-gather": "allgather",
    "all_reduce": "allreduce",
    "all-reduce": "allreduce",
    "all_to_all": "alltoall",
    "all-to-all": "alltoall",
    "bcast": "broadcast",
}

# nccl-tests bus-bandwidth factors (busbw = algbw * factor).
def busbw_factor(kind: str, n: int) -> float:
    if n <= 1:
        return 1.0
    if kind == "allreduce":
        return 2.0 * (n - 1) / n
    if kind in ("allgather", "reduce_scatter", "alltoall", "gather", "scatter"):
        return (n - 1) / n
    return 1.0  # broadcast, reduce


def canonical_kind(name: str) -> str:
    """Normalize a collective name (``reduce-scatter`` -> ``reduce_scatter``)."""
    key = str(name).strip().lower()
    key = ALIASES.get(key, key)
    if key not in KINDS:
        raise CollectiveError(f"unknown collective {name!r}; choose one of: {', '.join(KINDS)}")
    return key


@dataclass(frozen=True)
class Collective:
    """A collective operation: kind, rank count, chunk factor, root.

    ``chunk_factor`` is the number of chunks each rank's *per-peer* piece is
    cut into (TACCL's ``input_chunkup``). Buffer sizes in chunks:

    ============== ===================== =====================
    kind           input chunks per rank output chunks per rank
    ============== ===================== =====================
    allgather      c                     n*c
    reduce_scatter n*c                   c
    allreduce      c                     c
    alltoall       n*c                   n*c
    broadcast      c (root's counts)     c
    reduce         c                     c (root's counts)
    gather         c                     n*c (root's counts)
    scatter        n*c (root's counts)   c
    ============== ===================== =====================

    Every rank has buffers of the sizes above (non-roots' unused buffers
    simply are not read or checked), matching MPI's call signatures.
    """

    kind: str
    n_ranks: int
    chunk_factor: int = 1
    root: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", canonical_kind(self.kind))
        if isinstance(self.n_ranks, bool) or not isinstance(self.n_ranks, int) or self.n_ranks < 1:
            raise CollectiveError(f"rank count must be a positive integer, got {self.n_ranks!r}")
        if isinstance(self.chunk_factor, bool) or not isinstance(self.chunk_factor, int) or self.chunk_factor < 1:
            raise CollectiveError(f"chunk factor must be a positive integer, got {self.chunk_factor!r}")
        # Limits before anything sizes a table by them (see ccsynth.limits).
        check_limit("rank count", self.n_ranks, "MAX_RANKS", CollectiveError)
        check_limit("chunk factor", self.chunk_factor, "MAX_CHUNK_FACTOR", CollectiveError)
        check_limit(f"{self.kind} with chunk factor {self.chunk_factor} on {self.n_ranks} ranks: chunks per buffer",
                    self.size_chunks, "MAX_BUFFER_CHUNKS", CollectiveError)
        check_limit(f"{self.kind} with chunk factor {self.chunk_factor} on {self.n_ranks} ranks: chunks over all ranks",
                    self.n_ranks * self.size_chunks, "MAX_TOTAL_CHUNKS", CollectiveError)
        if isinstance(self.root, bool) or not isinstance(self.root, int):
            raise CollectiveError(f"root must be an integer rank, got {self.root!r}")
        if self.kind not in ROOTED and self.root != 0:
            raise CollectiveError(f"{self.kind} has no root (got root={self.root})")
        if not 0 <= self.root < self.n_ranks:
            raise CollectiveError(f"root {self.root!r} is not a rank of {self.n_ranks}")

    # ----------------------------------------------------------- properties
    @property
    def is_reducing(self) -> bool:
        return self.kind in REDUCING

    @property
    def rooted(self) -> bool:
        return self.kind in ROOTED

    @property
    def in_chunks(self) -> int:
        n, c = self.n_ranks, self.chunk_factor
        return n * c if self.kind in ("reduce_scatter", "alltoall", "scatter") else c

    @property
    def out_chunks(self) -> int:
        n, c = self.n_ranks, self.chunk_factor
        return n * c if self.kind in ("allgather", "alltoall", "gather") else c

    @property
    def size_chunks(self) -> int:
        """Chunks in the buffer whose byte size is the message size."""
        return max(self.in_chunks, self.out_chunks)

    @property
    def postcondition_size(self) -> int:
        """How many output chunks :meth:`postcondition` names (without building it).

        >>> Collective("allgather", 4, 2).postcondition_size == len(Collective("allgather", 4, 2).postcondition())
        True
        """
        n, c = self.n_ranks, self.chunk_factor
        return {"allgather": n * n * c, "alltoall": n * n * c, "reduce": c}.get(self.kind, n * c)

    def chunk_bytes(self, size_bytes: float) -> float:
        """Bytes per chunk for a message of ``size_bytes`` (nccl-tests size)."""
        return size_bytes / self.size_chunks

    #: every chunk is one unit (explicit collectives have chunks of their own sizes:
    #: :mod:`ccsynth.collectives.explicit`)
    uniform = True

    @property
    def total_units(self) -> int:
        """Units of a message: its chunks (:meth:`chunk_bytes` is bytes per unit)."""
        return self.size_chunks

    def chunk_units(self, rank: int, buf: str, index: int) -> int:
        """Extent of one chunk in units: always 1 here."""
        return 1

    def busbw_factor(self) -> float:
        return busbw_factor(self.kind, self.n_ranks)

    def with_ranks(self, n_ranks: int) -> Collective:
        return Collective(self.kind, n_ranks, self.chunk_factor, self.root if self.root < n_ranks else 0)

    def describe(self) -> str:
        root = f", root {self.root}" if self.rooted else ""
        return f"{self.kind} on {self.n_ranks} ranks, {self.chunk_factor} chunk(s) per piece{root}"

    # ------------------------------------------------------ pre/postconditions
    def precondition(self) -> dict[Loc, Value]:
        """Initial contents: input chunk ``j`` of rank ``r`` holds ``((r, j),)``.

        Rooted collectives whose input lives only on the root (broadcast,
        scatter) still give every rank its input chunks: non-roots' inputs
        are simply never required by the postcondition.
        """
        return {(r, "i", j): ((r, j),) for r in range(self.n_ranks) for j in range(self.in_chunks)}

    @cached_property
    def _post(self) -> dict[Loc, Value]:
        n, c, root = self.n_ranks, self.chunk_factor, self.root
        ranks = range(n)
        post: dict[Loc, Value] = {}
        k = self.kind
        if k == "allgather":
            for r in ranks:
                for q in ranks:
                    for j in range(c):
                        post[(r, "o", q * c + j)] = ((q, j),)
        elif k == "reduce_scatter":
            for r in ranks:
                for j in range(c):
                    post[(r, "o", j)] = tuple((q, r * c + j) for q in ranks)
        elif k == "allreduce":
            for r in ranks:
                for j in range(c):
                    post[(r, "o", j)] = tuple((q, j) for q in ranks)
        elif k == "alltoall":
            for d in ranks:
                for q in ranks:
                    for j in range(c):
                        post[(d, "o", q * c + j)] = ((q, d * c + j),)
        elif k == "broadcast":
            for r in ranks:
                for j in range(c):
                    post[(r, "o", j)] = ((root, j),)
        elif k == "reduce":
            for j in range(c):
                post[(root, "o", j)] = tuple((q, j) for q in ranks)
        elif k == "gather":
            for q in ranks:
                for j in range(c):
                    post[(root, "o", q * c + j)] = ((q, j),)
        elif k == "scatter":
            for r in ranks:
                for j in range(c):
                    post[(r, "o", j)] = ((root, r * c + j),)
        return post

    def postcondition(self) -> dict[Loc, Value]:
        """Required final value of every output chunk that matters."""
        return dict(self._post)

    def to_dict(self) -> dict:
        d = {"kind": self.kind, "n_ranks": self.n_ranks, "chunk_factor": self.chunk_factor}
        if self.rooted:
            d["root"] = self.root
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Collective:
        if not isinstance(d, dict):
            raise CollectiveError(f"collective must be an object, got {type(d).__name__}")
        if not isinstance(d.get("kind"), str) and "kind" in d:
            raise CollectiveError(f"collective kind must be a string, got {d['kind']!r}")
        try:
            return cls(d["kind"], d["n_ranks"], d.get("chunk_factor", 1), d.get("root", 0))
        except KeyError as e:
            raise CollectiveError(f"collective is missing field {e.args[0]!r}") from None
        except TypeError as e:
            raise CollectiveError(f"collective has a bad field: {e}") from None
