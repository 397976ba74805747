"""Clean shutdown: at exit, every channel meets its peers once more, then lets go of MPI.

A rank that returns from its last collective and exits may finalize MPI
while a peer is still finishing the same call with it (the last messages
of a large collective in flight, a notice on the control line); ranks then
hang in ``MPI_Finalize`` now and then. So the first :class:`~.channel.Channel`
a process builds registers :func:`close_all` with :mod:`atexit`. It is
registered after mpi4py initialised MPI, so it runs before mpi4py finalizes
it (``atexit`` runs the last registered first). For every channel still
open, in the order they were built (the same on every rank), it reaps the
sends that failed calls left behind, meets the other ranks in a barrier on
the channel's control communicator (an ``Ibarrier``, given up after
:data:`EXIT_BARRIER_S` seconds so that a peer stuck elsewhere cannot hang
the exit) and withdraws the control line's posted receive. It runs the
garbage collector first: a channel dropped inside a reference cycle would
otherwise still be open on one rank and gone on another, and the barriers
would pair up wrongly (MPI must not
find an active request at finalization). ``Communicator.Free()`` closes one
communicator's channel without the barrier but frees its communicators,
after taking in whatever is left on them (:func:`~.channel.flush`).
"""

from __future__ import annotations

import atexit
import gc
import logging
import weakref

__all__ = ["EXIT_BARRIER_S", "register", "registered", "close_all"]

log = logging.getLogger(__name__)

#: how long the exit barrier waits for the other ranks
EXIT_BARRIER_S = 10.0

_CHANNELS: list = []  # weak references, in the order the channels were built
_hooked = False


def register(channel) -> None:
    """Close ``channel`` at exit (anything with ``close(barrier_s=...)`` and ``closed``)."""
    global _hooked
    _CHANNELS.append(weakref.ref(channel))
    if not _hooked:
        atexit.register(close_all)
        _hooked = True


def registered() -> list:
    """The channels still open, in the order they were built."""
    out = [r() for r in _CHANNELS]
    _CHANNELS[:] = [r for r, ch in zip(list(_CHANNELS), out) if ch is not None and not ch.closed]
    return [ch for ch in out if ch is not None and not ch.closed]


def close_all(barrier_s: float = EXIT_BARRIER_S) -> None:
    # Which channels are still alive must be the same on every rank, or the barriers pair up wrongly and each
    # waits out its timeout. A channel dropped inside a reference cycle lives until the garbage collector runs,
    # which happens at different moments on different ranks: collect first, so only reachable channels remain.
    gc.collect()
    for ch in registered():
        try:
            ch.close(barrier_s=barrier_s)
        except Exception as e:  # pragma: no cover - MPI going down under us
            log.debug("closing %r at exit failed: %s", ch, e)
    _CHANNELS.clear()
