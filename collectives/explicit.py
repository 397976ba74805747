"""Collectives whose pre- and postconditions are given as data, with uneven chunks.

The built-in collectives (:mod:`ccsynth.collectives.spec`) derive which rank
holds which chunk from their kind, and all their chunks are equally large.
Cross-mesh resharding does not fit either assumption: which rank holds which
tensor slice before and after is a table computed from two layouts, and the
slices have as many sizes as the layouts make. :class:`ExplicitCollective`
is that table:

* ``pieces``: the element count (*units*) of every distinct piece of data;
  piece ``p`` is the contribution ``(p, 0)`` in the verifier's values (see
  :mod:`ccsynth.collectives.spec`), so "every destination element comes
  from a source replica, exactly" is the ordinary postcondition check;
* ``inputs[r]``: the pieces rank ``r`` holds at the start, input chunk ``j``
  being piece ``inputs[r][j]`` (several ranks may hold the same piece:
  replicas);
* ``outputs[r]``: the pieces rank ``r`` must hold at the end, output chunk
  ``j`` being piece ``outputs[r][j]``.

Chunk sizes. Every chunk has its own extent in units
(:meth:`ExplicitCollective.chunk_units`); a message of ``S`` bytes (the
whole tensor, as for the built-in kinds the nccl-tests size) gives a unit
``S / total_units`` bytes, where ``total_units`` is the sum of the piece
sizes. The built-in :class:`~ccsynth.collectives.spec.Collective` has the
same two methods with every chunk one unit, so the schedule IR, the
verifier and the simulator treat both alike
(:meth:`~ccsynth.collectives.schedule.Schedule.op_units`). Buffers of
different ranks may have different chunk counts; ``in_chunks`` and
``out_chunks`` are the largest, and the slots past a rank's own count hold
no piece (zero units, never initialised). Schedules of explicit collectives
are never in place. Their scratch chunks are *relay slots* that the plan
declares in ``relays[r]`` (the piece slot ``j`` of rank ``r``'s scratch
carries on its way, so that its extent is known): where a topology has no
direct connection between a rank that has a piece and one that needs it,
the piece goes through other ranks' scratch. ``relays`` is not part of the
pre- or postcondition.

JSON: ``{"kind": "explicit", "name": ..., "n_ranks": ..., "pieces": [...],
"inputs": [[...], ...], "outputs": [[...], ...]}`` inside a schedule's
``collective`` field; files of the built-in kinds are unchanged.

Example:
    >>> c = ExplicitCollective("swap", 2, pieces=(3, 5), inputs=((0,), (1,)), outputs=((1,), (0,)))
    >>> c.postcondition()[(0, "o", 0)], c.chunk_units(1, "o", 0), c.chunk_bytes(8.0 * 8)
    (((1, 0),), 3, 8.0)
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from ccsynth.collectives.spec import Loc, Value
from ccsynth.errors import CollectiveError
from ccsynth.limits import check as check_limit

__all__ = ["EXPLICIT_KIND", "ExplicitCollective"]

#: the ``kind`` of every explicit collective (in its JSON and its ``kind`` attribute)
EXPLICIT_KIND = "explicit"


def _int_tuple(value, what: str) -> tuple[int, ...]:
    if not isinstance(value, (list, tuple)):
        raise CollectiveError(f"{what} must be a list of integers, got {value!r:.60}")
    out = []
    for v in value:
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise CollectiveError(f"{what} must hold non-negative integers, got {v!r}")
        out.append(v)
    return tuple(out)


@dataclass(frozen=True)
class ExplicitCollective:
    """A collective given by its pre/postconditions: see the module docstring."""

    name: str
    n_ranks: int
    pieces: tuple[int, ...]
    inputs: tuple[tuple[int, ...], ...]
    outputs: tuple[tuple[int, ...], ...]
    relays: tuple[tuple[int, ...], ...] = ()

    kind = EXPLICIT_KIND
    chunk_factor = 1
    root = 0
    is_reducing = False
    rooted = False
    uniform = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):
            raise CollectiveError(f"explicit collective name must be a string, got {self.name!r}")
        if isinstance(self.n_ranks, bool) or not isinstance(self.n_ranks, int) or self.n_ranks < 1:
            raise CollectiveError(f"rank count must be a positive integer, got {self.n_ranks!r}")
        check_limit("rank count", self.n_ranks, "MAX_RANKS", CollectiveError)
        object.__setattr__(self, "pieces", _int_tuple(self.pieces, "pieces"))
        check_limit("pieces", len(self.pieces), "MAX_BUFFER_CHUNKS", CollectiveError)
        if not self.relays:
            object.__setattr__(self, "relays", ((),) * self.n_ranks)
        for field_name in ("inputs", "outputs", "relays"):
            rows = getattr(self, field_name)
            if not isinstance(rows, (list, tuple)) or len(rows) != self.n_ranks:
                raise CollectiveError(f"{field_name} must list the pieces of each of the {self.n_ranks} ranks")
            rows = tuple(_int_tuple(r, f"{field_name} of rank {i}") for i, r in enumerate(rows))
            for r, row in enumerate(rows):
                for p in row:
                    if p >= len(self.pieces):
                        raise CollectiveError(f"{field_name} of rank {r} names piece {p}; there are {len(self.pieces)}")
                if field_name != "relays" and len(set(row)) != len(row):
                    raise CollectiveError(f"{field_name} of rank {r} names a piece twice")
            object.__setattr__(self, field_name, rows)
        held = {p for row in self.inputs for p in row}
        for r, row in enumerate(self.outputs):
            for p in row:
                if p not in held:
                    raise CollectiveError(f"rank {r} needs piece {p}, which no rank holds at the start")
        check_limit(f"{self.describe()}: chunks over all ranks",
                    self.n_ranks * (self.in_chunks + self.out_chunks), "MAX_TOTAL_CHUNKS", CollectiveError)

    # ----------------------------------------------------------- sizes
    @cached_property
    def in_chunks(self) -> int:
        return max((len(r) for r in self.inputs), default=0)

    @cached_property
    def out_chunks(self) -> int:
        return max((len(r) for r in self.outputs), default=0)

    @cached_property
    def relay_chunks(self) -> int:
        """Scratch chunks a schedule of this collective may use (the longest relay row)."""
        return max((len(r) for r in self.relays), default=0)

    @property
    def size_chunks(self) -> int:
        return max(self.in_chunks, self.out_chunks)

    @cached_property
    def total_units(self) -> int:
        """Units of the whole message (the sum of the piece sizes)."""
        return sum(self.pieces)

    @property
    def postcondition_size(self) -> int:
        return sum(len(r) for r in self.outputs)

    def piece_of(self, rank: int, buf: str, index: int) -> int | None:
        """The piece chunk ``index`` of ``buf`` on ``rank`` holds (None: no piece)."""
        row = {"i": self.inputs, "o": self.outputs, "s": self.relays}[buf][rank]
        return row[index] if index < len(row) else None

    def chunk_units(self, rank: int, buf: str, index: int) -> int:
        """Extent of one chunk in units (0 for a slot past the rank's own pieces)."""
        p = self.piece_of(rank, buf, index)
        return 0 if p is None else self.pieces[p]

    def chunk_bytes(self, size_bytes: float) -> float:
        """Bytes per unit for a message (the whole tensor) of ``size_bytes``."""
        return size_bytes / self.total_units if self.total_units else 0.0

    def busbw_factor(self) -> float:
        return 1.0

    def describe(self) -> str:
        return f"{self.name or 'explicit'} on {self.n_ranks} ranks, {len(self.pieces)} piece(s)"

    # ------------------------------------------------------ pre/postconditions
    def precondition(self) -> dict[Loc, Value]:
        return {(r, "i", j): ((p, 0),) for r, row in enumerate(self.inputs) for j, p in enumerate(row)}

    def postcondition(self) -> dict[Loc, Value]:
        return {(r, "o", j): ((p, 0),) for r, row in enumerate(self.outputs) for j, p in enumerate(row)}

    # --------------------------------------------------------------- JSON
    def to_dict(self) -> dict:
        d = {"kind": EXPLICIT_KIND, "name": self.name, "n_ranks": self.n_ranks, "pieces": list(self.pieces),
             "inputs": [list(r) for r in self.inputs], "outputs": [list(r) for r in self.outputs]}
        if self.relay_chunks:
            d["relays"] = [list(r) for r in self.relays]
        return d

    @classmethod
    def from_dict(cls, d: dict) -> ExplicitCollective:
        if not isinstance(d, dict) or d.get("kind") != EXPLICIT_KIND:
            raise CollectiveError(f"not an explicit collective: {d!r:.60}")
        try:
            return cls(d.get("name", ""), d["n_ranks"], d["pieces"], d["inputs"], d["outputs"], d.get("relays", ()))
        except KeyError as e:
            raise CollectiveError(f"explicit collective is missing field {e.args[0]!r}") from None
