"""Sharding specs: how each tensor dimension is split over the axes of a device mesh.

A :class:`ShardingSpec` holds, per tensor dimension, the mesh axes (by
index, major first) it is split over; ``()`` means the dimension is whole
on every device. Mesh axes no dimension uses replicate the tensor. Two
notations users know are accepted (:func:`parse_spec`):

* Alpa's strings, one token per dimension: ``S0`` (split over mesh axis 0),
  ``S01`` (over axes 0 and 1, 0 major), ``R`` (not split), comma separated
  (``"S0,R,R"``) or run together (``"S0RR"``);
* JAX ``PartitionSpec``-like tuples over named (or numbered) mesh axes:
  ``("x", None, "y")``, ``(("x", "y"), None)``; as a string
  ``"x,None,y"`` or ``"(x,y),None"`` (``-`` stands for None too).

A mesh axis used twice, an unknown axis name, or a token count other than
the tensor's rank raise :class:`~ccsynth.errors.LayoutError` naming it.

Example:
    >>> from ccsynth.synth.reshard.mesh import DeviceMesh
    >>> m = DeviceMesh((2, 4))
    >>> parse_spec("S0,R,R", m, 3).axes, parse_spec(("x", None, "y"), m, 3).describe()
    (((0,), (), ()), 'S0,R,S1')
    >>> parse_spec("S01R", m, 2).shards(m)
    (8, 1)
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from ccsynth.errors import LayoutError
from ccsynth.synth.reshard.mesh import DeviceMesh

__all__ = ["ShardingSpec", "parse_spec"]

_ALPA_RUN = re.compile(r"(?:S\d+|R)+")
_ALPA_TOKEN = re.compile(r"S\d+|R")
_TOP_LEVEL = re.compile(r"\([^()]*\)|[^,()]+")


@dataclass(frozen=True)
class ShardingSpec:
    """Per tensor dimension, the mesh axes (indices, major first) it is split over."""

    axes: tuple[tuple[int, ...], ...]

    @property
    def ndim(self) -> int:
        return len(self.axes)

    def shards(self, mesh: DeviceMesh) -> tuple[int, ...]:
        """Shard count of every tensor dimension on ``mesh``."""
        return tuple(math.prod(mesh.shape[a] for a in ax) for ax in self.axes)

    def shard_index(self, mesh: DeviceMesh, coords: tuple[int, ...]) -> tuple[int, ...]:
        """The shard of every dimension held by the device at mesh ``coords``."""
        out = []
        for ax in self.axes:
            i = 0
            for a in ax:
                i = i * mesh.shape[a] + coords[a]
            out.append(i)
        return tuple(out)

    def describe(self) -> str:
        """Alpa's notation: ``S0,R,S01``."""
        return ",".join("S" + "".join(map(str, ax)) if ax else "R" for ax in self.axes)

    def to_list(self) -> list:
        return [list(ax) for ax in self.axes]


def _tokens(text: str) -> list[str]:
    s = text.replace(" ", "")
    if not s:
        raise LayoutError("empty sharding spec")
    if "," not in s and "(" not in s and _ALPA_RUN.fullmatch(s):
        return _ALPA_TOKEN.findall(s)
    toks = _TOP_LEVEL.findall(s)
    if ",".join(toks) != s:
        raise LayoutError(f"cannot read sharding spec {text!r}; write it like S0,R,R or x,None,y")
    return toks


def _axes_of_token(tok, mesh: DeviceMesh, spec) -> tuple[int, ...]:
    if tok is None:
        return ()
    if isinstance(tok, (tuple, list)):
        return tuple(mesh.axis_index(a) for a in tok)
    if isinstance(tok, int) and not isinstance(tok, bool):
        return (mesh.axis_index(tok),)
    if not isinstance(tok, str):
        raise LayoutError(f"sharding spec {spec!r}: {tok!r} is not a mesh axis, None, or a tuple of axes")
    t = tok.strip()
    if t in ("R", "None", "-", ""):
        return ()
    if re.fullmatch(r"S\d+", t):
        return tuple(mesh.axis_index(int(c)) for c in t[1:])
    if t.startswith("(") and t.endswith(")"):
        return tuple(mesh.axis_index(a.strip()) for a in t[1:-1].split(",") if a.strip())
    return (mesh.axis_index(t),)


def parse_spec(spec, mesh: DeviceMesh, ndim: int) -> ShardingSpec:
    """A :class:`ShardingSpec` from Alpa's or JAX's notation (see the module docstring)."""
    if isinstance(spec, ShardingSpec):
        toks: list = list(spec.axes)
    elif isinstance(spec, str):
        toks = _tokens(spec)
    elif isinstance(spec, (tuple, list)):
        toks = list(spec)
    else:
        raise LayoutError(f"a sharding spec is a string like S0,R,R or a tuple like ('x', None), got {spec!r}")
    if len(toks) != ndim:
        raise LayoutError(f"sharding spec {spec!r} has {len(toks)} dimension(s) but the tensor has {ndim}")
    axes = tuple(_axes_of_token(t, mesh, spec) for t in toks)
    seen: dict[int, int] = {}
    for d, ax in enumerate(axes):
        for a in ax:
            if a in seen:
                raise LayoutError(f"sharding spec {spec!r} uses mesh axis {mesh.axis_names[a]!r} (axis {a}) twice "
                                  f"(tensor dimensions {seen[a]} and {d})" if seen[a] != d else
                                  f"sharding spec {spec!r} uses mesh axis {mesh.axis_names[a]!r} (axis {a}) twice")
            seen[a] = d
    return ShardingSpec(axes)
