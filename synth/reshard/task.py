"""The resharding task: for every destination tile, the source slices that cover it.

Source and destination layouts cut each tensor dimension into intervals
(:mod:`.layout`). Per dimension, a sweep over both sorted interval lists
gives the non-empty intersections ``(source shard, destination shard,
[start, stop))`` in ``O(k_src + k_dst)``; a *piece* is one choice of such an
intersection per dimension, i.e. the box where one source tile meets one
destination tile. Pieces therefore partition the tensor, each lies inside
exactly one source tile and one destination tile, and their number is the
product over dimensions of at most ``k_src + k_dst - 1`` intersections: a
1000x1000 tensor over a mesh axis of 3 becomes a few pieces, never a
million (pieces are boxes, not elements). ``split`` optionally cuts every
piece into up to that many slabs (pipelining of forwarded pieces).

:meth:`ReshardTask.collective` turns the task into an
:class:`~ccsynth.collectives.explicit.ExplicitCollective`: a rank of the
source mesh holds, as input chunks, the pieces of its source tile (in piece
order); a rank of the destination mesh must end with the pieces of its
destination tile. Its plans are ordinary schedules the verifier proves.

Example:
    >>> t = ReshardTask.of((4, 6), "float32", (2,), "S0,R", (3,), "R,S0")
    >>> [(p.src_tile, p.dst_tile, p.box) for p in t.pieces][:2]
    [((0, 0), (0, 0), ((0, 2), (0, 2))), ((0, 0), (0, 1), ((0, 2), (2, 4)))]
    >>> t.dst_pieces[(0, 1)], t.local_slices(t.pieces[1], t.dst.box((0, 1)))
    ((1, 4), (slice(0, 2, None), slice(0, 2, None)))
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

import numpy as np

from ccsynth.collectives.explicit import ExplicitCollective
from ccsynth.errors import LayoutError
from ccsynth.limits import check as check_limit
from ccsynth.synth.reshard.layout import Box, TensorLayout, parse_shape
from ccsynth.synth.reshard.mesh import DeviceMesh

__all__ = ["Piece", "ReshardTask", "intersect_intervals", "parse_dtype"]


def parse_dtype(dtype) -> np.dtype:
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise LayoutError(f"unknown dtype {dtype!r}") from None
    if dt.hasobject or dt.itemsize == 0:
        raise LayoutError(f"dtype {dtype!r} cannot be resharded (it must be a fixed-size number type)")
    return dt


def intersect_intervals(a, b) -> list[tuple[int, int, int, int]]:
    """Non-empty intersections ``(i, j, start, stop)`` of two sorted partitions ``a`` and ``b`` of one range."""
    out = []
    i = j = 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if lo < hi:
            out.append((i, j, lo, hi))
        if a[i][1] <= b[j][1]:
            i += 1
        else:
            j += 1
    return out


@dataclass(frozen=True)
class Piece:
    """Where source tile ``src_tile`` meets destination tile ``dst_tile``: the global ``box``."""

    id: int
    src_tile: tuple[int, ...]
    dst_tile: tuple[int, ...]
    box: Box

    @property
    def size(self) -> int:
        return math.prod(b - a for a, b in self.box)


@dataclass(frozen=True)
class ReshardTask:
    """Move a tensor of ``shape`` and ``dtype`` from layout ``src`` to layout ``dst``."""

    shape: tuple[int, ...]
    dtype: str
    src: TensorLayout
    dst: TensorLayout
    split: int = 1

    def __post_init__(self) -> None:
        object.__setattr__(self, "dtype", parse_dtype(self.dtype).name)
        check_limit(f"bytes of the {'x'.join(map(str, self.shape))} {self.dtype} tensor", self.nbytes,
                    "MAX_SIZE_BYTES", LayoutError)
        if isinstance(self.split, bool) or not isinstance(self.split, int) or self.split < 1:
            raise LayoutError(f"split must be a positive integer, got {self.split!r}")
        if self.src.shape != self.shape or self.dst.shape != self.shape:
            raise LayoutError(f"source and destination layouts must be of the tensor's shape {self.shape}")

    @classmethod
    def of(cls, shape, dtype, src_mesh, src_spec, dst_mesh, dst_spec) -> ReshardTask:
        """From a shape, a dtype and a (mesh, spec) pair per side; meshes may be shapes like ``(2, 4)``."""
        shape = parse_shape(shape)
        sm = src_mesh if isinstance(src_mesh, DeviceMesh) else DeviceMesh(src_mesh)
        dm = dst_mesh if isinstance(dst_mesh, DeviceMesh) else DeviceMesh(dst_mesh)
        return cls(shape, dtype, TensorLayout.of(shape, sm, src_spec), TensorLayout.of(shape, dm, dst_spec))

    @property
    def itemsize(self) -> int:
        return np.dtype(self.dtype).itemsize

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.itemsize

    @cached_property
    def pieces(self) -> tuple[Piece, ...]:
        per_dim = [intersect_intervals(a, b) for a, b in zip(self.src.intervals, self.dst.intervals)]
        check_limit("pieces of the resharding", math.prod(len(x) for x in per_dim), "MAX_BUFFER_CHUNKS", LayoutError)
        out: list[Piece] = []
        for combo in itertools.product(*per_dim):
            box = tuple((c[2], c[3]) for c in combo)
            src, dst = tuple(c[0] for c in combo), tuple(c[1] for c in combo)
            for part in _split_box(box, self.split):
                out.append(Piece(len(out), src, dst, part))
        return tuple(out)

    def with_split(self, split: int) -> ReshardTask:
        """The same task with every piece cut into up to ``split`` parts (see :func:`_split_box`)."""
        return replace(self, split=split)

    @cached_property
    def src_pieces(self) -> dict[tuple[int, ...], tuple[int, ...]]:
        """Source tile -> its pieces (ids, in order)."""
        return self._group(lambda p: p.src_tile, self.src)

    @cached_property
    def dst_pieces(self) -> dict[tuple[int, ...], tuple[int, ...]]:
        """Destination tile -> its pieces (ids, in order)."""
        return self._group(lambda p: p.dst_tile, self.dst)

    def _group(self, key, layout: TensorLayout) -> dict:
        out: dict[tuple[int, ...], list[int]] = {t: [] for t in layout.replicas}
        for p in self.pieces:
            if key(p) in out:
                out[key(p)].append(p.id)
        return {t: tuple(v) for t, v in out.items()}

    @property
    def ranks(self) -> tuple[int, ...]:
        """Every rank of either mesh, sorted."""
        return tuple(sorted(set(self.src.mesh.ranks) | set(self.dst.mesh.ranks)))

    def inputs_of(self, rank: int) -> tuple[int, ...]:
        tile = self.src.tile_of_rank(rank)
        return () if tile is None else self.src_pieces[tile]

    def outputs_of(self, rank: int) -> tuple[int, ...]:
        tile = self.dst.tile_of_rank(rank)
        return () if tile is None else self.dst_pieces[tile]

    def collective(self, n_ranks: int | None = None) -> ExplicitCollective:
        """The task as an explicit collective on ``n_ranks`` (default: one past the largest rank)."""
        n = max(self.ranks) + 1 if n_ranks is None else n_ranks
        if max(self.ranks) >= n:
            raise LayoutError(f"the meshes use rank {max(self.ranks)}, but there are only {n} ranks")
        return ExplicitCollective("reshard", n, tuple(p.size for p in self.pieces),
                                  tuple(self.inputs_of(r) for r in range(n)),
                                  tuple(self.outputs_of(r) for r in range(n)))

    @staticmethod
    def local_slices(piece: Piece, tile_box: Box) -> tuple[slice, ...]:
        """Where ``piece`` lies inside the local array of a tile whose global box is ``tile_box``."""
        return tuple(slice(a - t0, b - t0) for (a, b), (t0, _) in zip(piece.box, tile_box))

    def describe(self) -> str:
        return (f"{'x'.join(map(str, self.shape))} {self.dtype}: {self.src.spec.describe()} on mesh "
                f"{self.src.mesh.describe()} -> {self.dst.spec.describe()} on mesh {self.dst.mesh.describe()}")

    def to_dict(self) -> dict:
        d: dict[str, Any] = {"shape": list(self.shape), "dtype": self.dtype, "src": self.src.to_dict(),
                             "dst": self.dst.to_dict()}
        if self.split > 1:
            d["split"] = self.split
        return d

    @classmethod
    def from_dict(cls, d) -> ReshardTask:
        if not isinstance(d, dict):
            raise LayoutError(f"a resharding task must be an object, got {d!r:.60}")
        shape = parse_shape(tuple(d.get("shape", ())))
        return cls(shape, d.get("dtype", "float32"), TensorLayout.from_dict(shape, d.get("src")),
                   TensorLayout.from_dict(shape, d.get("dst")), d.get("split", 1))


def _split_box(box: Box, parts: int) -> list[Box]:
    """``box`` cut into up to ``parts`` slabs along its first dimension of the largest extent.

    Splitting lets a forwarded piece start its next hop before all of it has
    arrived (pipelining), at the price of more messages.
    """
    if parts <= 1:
        return [box]
    extents = [b - a for a, b in box]
    d = extents.index(max(extents))
    a, b = box[d]
    k = min(parts, b - a)
    cuts = [a + (b - a) * i // k for i in range(k + 1)]
    return [box[:d] + ((cuts[i], cuts[i + 1]),) + box[d + 1:] for i in range(k)]
