"""A layout bound to the caller's buffers: views, and what each message needs to start.

A :class:`~.layout.Layout` names memory as regions of ``i`` (the send
buffer), ``o`` (the receive buffer), ``s`` (scratch) and ``t`` (staging).
:func:`bind` turns every region into a view of the real array and every
:class:`~.layout.Message` into ``(view, peer, slice tag)``, once per pair
of caller buffers; the executor caches the last
:data:`~.constants.MAX_BINDINGS` pairs per layout, keyed by address.

The run loops create each message's request when it starts (``Isend`` /
``Irecv`` with the call's tag base added to the slice tag: see
:mod:`.channel` for why requests are not persistent). The views of the
caller's buffers are made through :meth:`~ccsynth.kernels.base.Backend.alias`,
so a cached binding never keeps a caller's array alive; it is used again
only for an array at the same address, of the same size and dtype.

The bound forms are what the run loops read, so they are plain: per node
a ``(view, peer, tag)`` tuple or None, and a tuple of ``(mode, dst, src,
src2)`` views (an exact tuple unpacks fastest in the loop). A layout that
takes the straight-line path also gets its bound instruction list
(:func:`ccsynth.collectives.static_program.bind_static`). While a call
runs, the loop leaves its requests in flight on the binding (``inflight``)
so that a failed call can be cleaned up (:meth:`~.channel.Channel.abandon`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ccsynth.collectives.runtime.layout import Layout, Region
from ccsynth.collectives.static_program import BoundProgram, bind_static

__all__ = ["Binding", "InFlight", "bind"]


@dataclass(eq=False)
class InFlight:
    """The requests of the call in progress, as the run loop left them (for cleaning up a failed call).

    Dataflow loop: ``active`` (requests; completed ones are null, index 0 is
    the control line's receive) and ``nodes`` (the node of each; -1 for the
    control line). Straight-line loop: ``recvs`` and ``sends`` in start order.
    """

    active: list = field(default_factory=list)
    nodes: list = field(default_factory=list)
    recvs: list = field(default_factory=list)
    sends: list = field(default_factory=list)


@dataclass(eq=False)
class Binding:
    """Views of one layout for one pair of caller buffers."""

    key: tuple
    msgs: list  # per node: (view, peer, slice tag) or None
    work: list  # per node: tuple of (mode, dst, src, src2) views, or None
    static: BoundProgram | None = None  # the straight-line program, if the layout has one
    extra_bytes: int = 0  # buffers of its own (the straight-line path's send snapshots)
    inflight: InFlight = field(default_factory=InFlight)


def bind(lay: Layout, key: tuple, ibuf, obuf, backend, wrap=None, tag_sig: int = 0) -> Binding:
    """Views of ``ibuf`` (buffer ``i``), ``obuf`` (``o``), scratch and staging, and the messages on them.

    ``wrap(view)`` turns a message's view into what ``Isend``/``Irecv`` take
    fastest (``MPI.buffer`` for host memory: about 0.1 us less per message);
    ``tag_sig`` (the collective's signature, :mod:`.channel`) is added to
    every slice tag.
    """
    bufs: dict[str, Any] = {"i": backend.alias(ibuf), "o": backend.alias(obuf), "s": lay.scratch, "t": lay.staging}

    def view(region: Region | None):
        if region is None:
            return None
        buf, start, stop = region
        return bufs[buf][start:stop]

    msgs: list = [None] * lay.n_nodes
    for v, (peer, tag, region) in lay.mpi.items():
        d = view(region)
        msgs[v] = (wrap(d) if wrap is not None else d, peer, tag_sig + tag)
    work: list = [None] * lay.n_nodes
    for v, items in lay.work.items():
        work[v] = tuple((mode, view(d), view(s), view(s2)) for mode, d, s, s2 in items)
    bnd = Binding(key, msgs, work)
    if lay.static is not None:
        bnd.static = bind_static(lay.static, lay, msgs, work, backend, view, wrap)
        bnd.extra_bytes = bnd.static.own_bytes
    return bnd
