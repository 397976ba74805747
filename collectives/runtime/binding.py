"""A layout bound to the caller's buffers: views and persistent MPI requests.

A :class:`~.layout.Layout` names memory as regions of ``i`` (the send
buffer), ``o`` (the receive buffer), ``s`` (scratch) and ``t`` (staging).
:func:`bind` turns every region into a view of the real array and every
:class:`~.layout.Message` into a persistent request (``Send_init`` /
``Recv_init``), once per pair of caller buffers; the executor caches the
last :data:`~.constants.MAX_BINDINGS` pairs per layout, keyed by address.

The bound forms are what the run loops read, so they are plain: per node
one request or None, and a tuple of ``(mode, dst, src, src2)`` views (an
exact tuple unpacks fastest in the loop). A layout that takes the
straight-line path also gets its bound instruction list
(:func:`ccsynth.collectives.static_program.bind_static`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ccsynth.collectives.runtime.constants import K_SEND
from ccsynth.collectives.runtime.layout import Layout, Region
from ccsynth.collectives.static_program import BoundProgram, bind_static

__all__ = ["Binding", "bind"]


@dataclass(eq=False)
class Binding:
    """Views and requests of one layout for one pair of caller buffers."""

    key: tuple
    reqs: list  # per node: persistent request or None
    work: list  # per node: tuple of (mode, dst, src, src2) views, or None
    pre_reqs: list  # the receive-reduces' requests, started first
    arrays: tuple  # keeps the bound arrays alive (their addresses are the cache key)
    static: BoundProgram | None = None  # the straight-line program, if the layout has one
    extra_reqs: list = field(default_factory=list)  # the straight-line path's snapshot sends

    def free(self) -> None:
        for r in self.reqs + self.extra_reqs:
            if r is not None:
                try:
                    r.Free()
                except Exception:  # pragma: no cover - MPI finalized already
                    pass
        self.reqs = []
        self.extra_reqs = []
        self.static = None


def bind(lay: Layout, key: tuple, ibuf, obuf, comm, backend) -> Binding:
    """Views of ``ibuf`` (buffer ``i``), ``obuf`` (``o``), scratch and staging, and the requests on them."""
    bufs: dict[str, Any] = {"i": ibuf, "o": obuf, "s": lay.scratch, "t": lay.staging}

    def view(region: Region | None):
        if region is None:
            return None
        buf, start, stop = region
        return bufs[buf][start:stop]

    reqs: list = [None] * lay.n_nodes
    for v, (peer, tag, region) in lay.mpi.items():
        if lay.kind[v] == K_SEND:
            reqs[v] = comm.Send_init(view(region), peer, tag)
        else:
            reqs[v] = comm.Recv_init(view(region), peer, tag)
    work: list = [None] * lay.n_nodes
    for v, items in lay.work.items():
        work[v] = tuple((mode, view(d), view(s), view(s2)) for mode, d, s, s2 in items)
    bnd = Binding(key, reqs, work, [reqs[v] for v in lay.pre], (ibuf, obuf))
    if lay.static is not None:
        bnd.static = bind_static(lay.static, lay, reqs, work, comm, backend, view)
        bnd.extra_reqs = [r for r in bnd.static.sends if not any(r is q for q in reqs)]
    return bnd
