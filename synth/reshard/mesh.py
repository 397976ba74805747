"""A device mesh: an n-dimensional grid of devices, each a rank on a host.

A :class:`DeviceMesh` has a ``shape`` (``(2, 4)``: 2 rows of 4 devices),
named axes (default ``"x"``, ``"y"``, ``"z"``, ... so that JAX-style specs
``("x", None)`` read naturally; Alpa's ``S0``/``S1`` address axes by
index), the rank of every device in row-major order (the last axis varies
fastest, as ``numpy.ndindex`` walks it) and the host (node) of every rank.
Hosts come from a topology's ``nodes`` (:meth:`DeviceMesh.on_topology`) or
are given; without either every rank is its own host.

Example:
    >>> m = DeviceMesh((2, 4), ranks=range(8, 16))
    >>> m.size, m.rank_at((1, 2)), m.coords(1 * 4 + 2), m.axis_index("y")
    (8, 14, (1, 2), 1)
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from ccsynth.errors import LayoutError
from ccsynth.limits import check as check_limit
from ccsynth.topologies.model import Topology

__all__ = ["DEFAULT_AXIS_NAMES", "DeviceMesh", "parse_mesh_shape", "parse_rank_list"]

DEFAULT_AXIS_NAMES = ("x", "y", "z", "w", "v", "u")
_MAX_MESH_DIMS = len(DEFAULT_AXIS_NAMES)


def parse_mesh_shape(text) -> tuple[int, ...]:
    """``"2x4"`` (or ``(2, 4)``) -> ``(2, 4)``; every axis at least 1."""
    if isinstance(text, str):
        parts = [p.strip() for p in re.split(r"[x,*]", text.strip().lower())]
        if not text.strip() or not all(re.fullmatch(r"-?\d+", p) for p in parts):
            raise LayoutError(f"mesh shape must look like 2x4, got {text!r}")
        dims = tuple(int(p) for p in parts)
    else:
        try:
            dims = tuple(text)
        except TypeError:
            raise LayoutError(f"mesh shape must be a sequence of positive integers, got {text!r}") from None
    if not dims or len(dims) > _MAX_MESH_DIMS:
        raise LayoutError(f"a mesh has 1 to {_MAX_MESH_DIMS} axes, got {text!r}")
    for d in dims:
        if isinstance(d, bool) or not isinstance(d, int):
            raise LayoutError(f"mesh axes must be positive integers, got {text!r}")
        if d < 1:
            raise LayoutError(f"mesh axis {d} of {text!r} is out of range: every axis must be positive (at least 1 device)")
    # before any rank list is built: a mesh of 100000x100000 would be ten billion of them
    check_limit(f"devices of mesh {'x'.join(map(str, dims))}:", math.prod(dims), "MAX_RANKS", LayoutError)
    return dims


def parse_rank_list(text) -> tuple[int, ...]:
    """``"0-7"``, ``"0,2,4-6"`` (or a sequence of ints) -> a tuple of distinct ranks."""
    if isinstance(text, str):
        out: list[int] = []
        for part in text.split(","):
            part = part.strip()
            m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
            if not m:
                raise LayoutError(f"rank list must look like 0-7 or 0,2,4-6, got {text!r}")
            a, b = int(m.group(1)), int(m.group(2) or m.group(1))
            if b < a:
                raise LayoutError(f"rank range {part!r} runs backwards")
            check_limit("ranks in a mesh", b - a + 1 + len(out), "MAX_RANKS", LayoutError)
            out += range(a, b + 1)
        ranks = tuple(out)
    else:
        ranks = tuple(text)
    for r in ranks:
        if isinstance(r, bool) or not isinstance(r, int) or r < 0:
            raise LayoutError(f"ranks must be non-negative integers, got {r!r}")
    if len(set(ranks)) != len(ranks):
        raise LayoutError(f"a mesh names a rank twice: {text!r}")
    return ranks


@dataclass(frozen=True)
class DeviceMesh:
    """Mesh ``shape``, the rank of each device (row-major) and the host of each of those ranks."""

    shape: tuple[int, ...]
    ranks: tuple[int, ...] = ()
    hosts: tuple[int, ...] = ()
    axis_names: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        shape = parse_mesh_shape(self.shape)
        object.__setattr__(self, "shape", shape)
        size = math.prod(shape)
        check_limit("devices in a mesh", size, "MAX_RANKS", LayoutError)
        ranks = parse_rank_list(self.ranks) if (isinstance(self.ranks, str) or len(tuple(self.ranks))) else tuple(range(size))
        if len(ranks) != size:
            raise LayoutError(f"mesh {'x'.join(map(str, shape))} has {size} devices but its rank list has {len(ranks)} ranks")
        object.__setattr__(self, "ranks", ranks)
        hosts = tuple(self.hosts) if len(tuple(self.hosts)) else ranks
        if len(hosts) != size:
            raise LayoutError(f"mesh {'x'.join(map(str, shape))} has {size} devices but {len(hosts)} hosts")
        object.__setattr__(self, "hosts", hosts)
        names = tuple(self.axis_names) or DEFAULT_AXIS_NAMES[: len(shape)]
        if len(names) != len(shape) or len(set(names)) != len(names) or not all(isinstance(n, str) and n for n in names):
            raise LayoutError(f"a mesh of {len(shape)} axes needs {len(shape)} distinct axis names, got {names!r}")
        object.__setattr__(self, "axis_names", names)

    @classmethod
    def on_topology(cls, shape, ranks, topology: Topology, axis_names=()) -> DeviceMesh:
        """The mesh on ``ranks`` of ``topology``, hosts from its nodes."""
        ranks = parse_rank_list(ranks)
        for r in ranks:
            if r >= topology.n_ranks:
                raise LayoutError(f"mesh rank {r} is not a rank of topology {topology.name!r} ({topology.n_ranks} ranks)")
        return cls(shape, ranks, tuple(topology.nodes[r] for r in ranks), axis_names)

    @property
    def size(self) -> int:
        return len(self.ranks)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def coords(self, index: int) -> tuple[int, ...]:
        """Mesh coordinates of device ``index`` (row-major)."""
        out = []
        for s in reversed(self.shape):
            out.append(index % s)
            index //= s
        return tuple(reversed(out))

    def rank_at(self, coords) -> int:
        i = 0
        for c, s in zip(coords, self.shape):
            i = i * s + c
        return self.ranks[i]

    def axis_index(self, name) -> int:
        """The index of axis ``name`` (a name, or an index as int or digit string)."""
        if isinstance(name, int) and not isinstance(name, bool):
            if 0 <= name < self.ndim:
                return name
        elif isinstance(name, str):
            if name in self.axis_names:
                return self.axis_names.index(name)
            if name.isdigit() and int(name) < self.ndim:
                return int(name)
        raise LayoutError(f"unknown mesh axis {name!r}; the mesh {self.describe()} has axes "
                          f"{', '.join(self.axis_names)} (or 0..{self.ndim - 1})")

    def describe(self) -> str:
        return "x".join(map(str, self.shape))

    def to_dict(self) -> dict:
        return {"shape": list(self.shape), "ranks": list(self.ranks), "hosts": list(self.hosts),
                "axis_names": list(self.axis_names)}

    @classmethod
    def from_dict(cls, d: Any) -> DeviceMesh:
        if not isinstance(d, dict):
            raise LayoutError(f"a mesh must be an object, got {d!r:.60}")
        return cls(tuple(d.get("shape", ())), tuple(d.get("ranks", ())), tuple(d.get("hosts", ())),
                   tuple(d.get("axis_names", ())))
