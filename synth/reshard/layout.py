"""A tensor laid out on a device mesh: tiles, their boxes and their replicas.

Dimension ``d`` of size ``n`` split into ``k`` shards is cut as JAX (GSPMD)
cuts it: shard ``i`` covers ``[i*c, min((i+1)*c, n))`` with ``c = ceil(n/k)``,
so the last shards are shorter and may even be empty (``n=4, k=3``: sizes
2, 2, 0); nothing is rejected for being uneven. A *tile* is the tuple of
shard indices of all dimensions; the device at mesh coordinates ``m`` holds
tile ``spec.shard_index(m)``, and all devices holding one tile are its
*replicas*.

Example:
    >>> from ccsynth.synth.reshard.mesh import DeviceMesh
    >>> lay = TensorLayout.of((5, 4), DeviceMesh((2, 2)), "S0,R")
    >>> lay.intervals[0], lay.tile_of_rank(3), lay.replicas[(1, 0)], lay.local_shape(3)
    (((0, 3), (3, 5)), (1, 0), (2, 3), (2, 4))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from functools import cached_property

from ccsynth.errors import LayoutError
from ccsynth.limits import check as check_limit
from ccsynth.synth.reshard.mesh import DeviceMesh
from ccsynth.synth.reshard.sharding import ShardingSpec, parse_spec

__all__ = ["Box", "TensorLayout", "check_shape", "parse_shape", "shard_intervals"]

Box = tuple[tuple[int, int], ...]  # per dimension [start, stop)


def parse_shape(text) -> tuple[int, ...]:
    """``"1024x1024x512"`` (or a sequence) -> a tuple of positive ints."""
    if isinstance(text, str):
        parts = [p.strip() for p in text.lower().split("x")]
        try:
            dims = tuple(int(p) for p in parts)
        except ValueError:
            raise LayoutError(f"tensor shape must look like 1024x1024x512, got {text!r}") from None
    else:
        try:
            dims = tuple(text)
        except TypeError:
            raise LayoutError(f"tensor shape must be a sequence of positive integers, got {text!r}") from None
    return check_shape(dims)


def check_shape(dims: tuple) -> tuple[int, ...]:
    if not dims:
        raise LayoutError("a tensor to reshard needs at least one dimension")
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, int):
            raise LayoutError(f"tensor dimensions must be integers, got {dims!r}")
        if d <= 0:
            raise LayoutError(f"tensor dimension {d} of shape {'x'.join(map(str, dims))} is out of range: every "
                              "dimension must be positive (at least 1)")
    for d in dims:  # bytes (elements x item size) are checked where the dtype is known: ReshardTask
        check_limit("tensor dimension", d, "MAX_SIZE_BYTES", LayoutError)
    return tuple(dims)


def shard_intervals(n: int, k: int) -> tuple[tuple[int, int], ...]:
    """JAX's cut of ``n`` elements into ``k`` shards (the last ones shorter, possibly empty)."""
    c = -(-n // k)
    return tuple((min(i * c, n), min((i + 1) * c, n)) for i in range(k))


@dataclass(frozen=True)
class TensorLayout:
    """A tensor ``shape`` on ``mesh`` with ``spec``."""

    shape: tuple[int, ...]
    mesh: DeviceMesh
    spec: ShardingSpec

    @classmethod
    def of(cls, shape, mesh: DeviceMesh, spec) -> TensorLayout:
        shape = parse_shape(shape)
        return cls(shape, mesh, parse_spec(spec, mesh, len(shape)))

    @cached_property
    def intervals(self) -> tuple[tuple[tuple[int, int], ...], ...]:
        """Per dimension, the ``[start, stop)`` of every shard."""
        for d, k in enumerate(self.spec.shards(self.mesh)):
            check_limit(f"shards of tensor dimension {d}", k, "MAX_RANKS", LayoutError)
        return tuple(shard_intervals(n, k) for n, k in zip(self.shape, self.spec.shards(self.mesh)))

    @cached_property
    def tiles(self) -> tuple[tuple[int, ...], ...]:
        """The tile of every device of the mesh (row-major)."""
        return tuple(self.spec.shard_index(self.mesh, self.mesh.coords(i)) for i in range(self.mesh.size))

    @cached_property
    def replicas(self) -> dict[tuple[int, ...], tuple[int, ...]]:
        """Tile -> the ranks holding it, in mesh order."""
        out: dict[tuple[int, ...], list[int]] = {}
        for rank, tile in zip(self.mesh.ranks, self.tiles):
            out.setdefault(tile, []).append(rank)
        return {t: tuple(r) for t, r in out.items()}

    @cached_property
    def _tile_by_rank(self) -> dict[int, tuple[int, ...]]:
        return dict(zip(self.mesh.ranks, self.tiles))

    def tile_of_rank(self, rank: int) -> tuple[int, ...] | None:
        """The tile ``rank`` holds (None: the rank is not on this mesh)."""
        return self._tile_by_rank.get(rank)

    def box(self, tile: tuple[int, ...]) -> Box:
        return tuple(self.intervals[d][i] for d, i in enumerate(tile))

    def local_shape(self, rank: int) -> tuple[int, ...]:
        """Shape of the shard ``rank`` holds."""
        tile = self.tile_of_rank(rank)
        if tile is None:
            raise LayoutError(f"rank {rank} is not on mesh {self.mesh.describe()} (ranks {list(self.mesh.ranks)})")
        return tuple(b - a for a, b in self.box(tile))

    def describe(self) -> str:
        return f"{'x'.join(map(str, self.shape))} as {self.spec.describe()} on mesh {self.mesh.describe()}"

    def to_dict(self) -> dict:
        return {"mesh": self.mesh.to_dict(), "spec": self.spec.to_list()}

    @classmethod
    def from_dict(cls, shape, d: Any) -> TensorLayout:
        if not isinstance(d, dict):
            raise LayoutError(f"a layout must be an object, got {d!r:.60}")
        mesh = DeviceMesh.from_dict(d.get("mesh"))
        spec = d.get("spec")
        if not isinstance(spec, list):
            raise LayoutError(f"a layout's spec must be a list of axis lists, got {spec!r:.60}")
        return cls(tuple(shape), mesh, parse_spec([tuple(a) if isinstance(a, list) else a for a in spec], mesh, len(shape)))
