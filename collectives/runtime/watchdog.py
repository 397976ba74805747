"""The watchdog: a call whose messages carry another signature than this rank's is an error on every rank.

Every tag of a call run on a ccsynth schedule carries a hash of the call's
signature -- collective, dtype, op, root and the calling thread's name
(not the count: the length of the first message a different count changes
shows it at once; ``calls.Signer``; 6 bits where ``MPI_TAG_UB`` is at
least ``2**27 - 1``, as in MPICH and Open MPI). A rank that makes another
call than the others (float32 against int32 of the same size, ``MAX``
against ``SUM``, another root, thread A's call against thread B's) sends
tags the others never match, so nobody can take its data: no silent wrong
answer, and no extra message. What is left is a stall, and that is the
watchdog's business: a daemon thread per communicator that wakes every
:data:`INTERVAL` seconds and, if the same call has been in progress (or
been the last one) since its last look, asks MPI (``Iprobe``, one per
peer) for a waiting message of this call number whose signature field
differs. A rank that has finished the call looks too: in a rooted
collective the rank whose queue holds the stray message may be done while
the root still waits for it. If it finds one it
posts a notice on the control line to every rank, itself included
(:mod:`.control`): every rank still in the call raises
:class:`~ccsynth.errors.BufferMismatchError` naming the rank whose
messages differ, within about ``2 x INTERVAL``. Where no queue holds a
stray message (every rank waits to receive first: a reduction whose ranks
name different roots), a call stalled that long sends its signature once
to the others on the control line; a rank in the same call with another
signature raises and tells every rank. That message is sent only by a
call stalled for more than one interval.

What it costs: nothing on the calls (the thread sleeps); while a call or
the gap after it lasts longer than the interval, one ``Iprobe`` per peer
per interval. Limits: two different signatures share
a hash one time in 64 (the call then runs as the ranks gave it, as before);
a rank that sends nothing in the call (a broadcast's root) cannot be told
by its peers' messages, and finishes with its own data unchanged. The MPI
library must allow ``MPI_THREAD_MULTIPLE`` (mpi4py's default); with less
the tags carry no hash (and a mismatch waits as MPI would).
"""

from __future__ import annotations

import logging
import threading
import weakref

from ccsynth.collectives.runtime.channel import SIG_CHECK
from ccsynth.collectives.runtime.control import Notice

__all__ = ["INTERVAL", "Watchdog"]

log = logging.getLogger(__name__)

#: seconds between the watchdog's looks at the call in progress
INTERVAL = 0.25


class Watchdog:
    """The thread watching one channel's stalled calls (see the module doc); :meth:`stop` ends it."""

    def __init__(self, channel, name: str, interval: float = INTERVAL) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=_watch, args=(weakref.ref(channel), self._stop, interval),
                                        name=name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()


def _watch(ref, stop: threading.Event, interval: float) -> None:
    last, told, sent = -1, -1, -1
    while not stop.wait(interval):
        ch = ref()
        if ch is None or ch.closed:
            return
        # a call in progress, or the last one (a rank that finished may hold the message another rank waits for)
        seq = ch.seq if ch.expect is not None else -1
        if seq >= 0 and seq == last and seq != told:
            try:
                found = _mismatch(ch, seq)
                if found is not None:
                    told = seq
                    _tell(ch, seq, *found)
                elif ch.busy and sent != seq:  # stalled, and no stray message here: ask the others
                    sent = seq
                    text = ", ".join(map(str, ch.sig_key))
                    ch.line.post(Notice(seq, ch.rank, SIG_CHECK, text, str(ch.expect)))
            except Exception as exc:  # noqa: BLE001 - a communicator renewed or freed meanwhile: look again later
                log.debug("watchdog: %s", exc)
        last = seq
        del ch


def _mismatch(ch, seq: int) -> tuple[int, int] | None:
    """``(peer, tag)`` of a waiting message of call ``seq`` whose signature field differs from this rank's."""
    MPI, comm, tags = ch.MPI, ch.comm, ch.tags
    shift, mask, sig = tags.slice_bits + tags.sig_bits, tags.window - 1, tags.sig_mask()
    low, expect = seq & mask, ch.expect
    status = MPI.Status()
    for peer in range(ch.size):
        if peer != ch.rank and comm.Iprobe(peer, MPI.ANY_TAG, status):
            tag = status.Get_tag()
            if (tag >> shift) & mask == low and (tag & sig) != expect and ch.seq == seq:
                return peer, tag
    return None


def _tell(ch, seq: int, peer: int, tag: int) -> None:
    kind, dtype, op, root, thread = (ch.sig_key + ("?",) * 5)[:5]
    msg = (f"rank {peer}'s messages for this call carry another signature than rank {ch.rank}'s ({kind} of {dtype}, "
           f"op {op}, root {root}, from thread {thread!r}): the ranks made different calls (collective, dtype, op, "
           f"root or calling thread); every rank must make the same")
    log.debug("rank %d: call %d: %s", ch.rank, seq, msg)
    ch.line.post(Notice(seq, ch.rank, "BufferMismatchError", str(kind), msg), to_self=True)
