"""The control line: how a rank that fails a call tells every other rank.

A collective call that raises on one rank only (a non-contiguous buffer
there, a message of the wrong length, Ctrl-C) would leave the other ranks
waiting for it forever. So every :class:`~.channel.Channel` keeps, besides
the communicator its messages travel on, a *control communicator* of its own
(a ``Dup`` made once, when the channel is built) with one receive always
posted on it: ``Recv_init(ANY_SOURCE)``, started at once and started again
after every notice it takes in. A rank whose call fails sends every other
rank a :class:`Notice` (call number, its rank, the error's class and
message: one small non-blocking message each, sent only when something went
wrong), and every wait of the run loops watches that posted receive next to
its own requests. A rank blocked in a call therefore wakes up as soon as a
notice arrives; what it then does is the channel's business (see
:mod:`.channel`): raise the same error if the notice is about the call in
progress, keep it for later if it is about a call this rank has not reached
yet, drop it if it is about a call already over.

Nothing travels on the control line while nothing fails: it costs one posted
receive per channel and one more request in each wait.

The control communicator also carries each compiled schedule's one-time
:class:`Agreement` (every rank's settings and whether its program suits the
straight-line path): an exchange keyed by the schedule, not by a call, that
is never cancelled, so a rank that joins it late (its first call with that
schedule failed before it got there) still meets the others' contributions.
"""

from __future__ import annotations

import logging
import zlib
from dataclasses import dataclass
from collections.abc import Sequence

import numpy as np

__all__ = ["Notice", "ControlLine", "Agreement", "NOTICE_BYTES"]

log = logging.getLogger(__name__)

#: the largest notice (longer messages are cut); the posted receive is this large
NOTICE_BYTES = 2048
_TAG = 1
_SEP = "\x1f"


@dataclass(frozen=True)
class Notice:
    """Rank ``rank`` failed call number ``seq`` (``what``) with ``error``: ``message``."""

    seq: int
    rank: int
    error: str  # the exception's class name
    what: str  # the call, e.g. "allreduce of 8 x float64"
    message: str

    def encode(self) -> bytes:
        text = _SEP.join((str(self.seq), str(self.rank), self.error, self.what, self.message))
        return text.encode("utf-8", errors="replace")[:NOTICE_BYTES]

    @classmethod
    def decode(cls, data: bytes) -> Notice:
        parts = data.decode("utf-8", errors="replace").split(_SEP, 4)
        parts += [""] * (5 - len(parts))
        try:
            seq, rank = int(parts[0]), int(parts[1])
        except ValueError:  # pragma: no cover - only ccsynth writes on this line
            seq, rank = -1, -1
        return cls(seq, rank, parts[2], parts[3], parts[4])


class ControlLine:
    """The posted receive and the outgoing notices of one channel (``comm`` is its own communicator)."""

    def __init__(self, comm, MPI) -> None:
        self.comm = comm
        self.MPI = MPI
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        self._buf = bytearray(NOTICE_BYTES)
        self._status = MPI.Status()
        #: the posted receive: every wait of a run loop watches it
        self.request = comm.Recv_init(self._buf, MPI.ANY_SOURCE, _TAG)
        self.request.Start()
        self.outbox: list = []  # (request, payload) of notices this rank sent that may be in flight
        self.agreements: list[Agreement] = []

    def post(self, notice: Notice, *, to_self: bool = False) -> None:
        """Send ``notice`` to every other rank (``to_self``: and to this one; non-blocking, never waits for them)."""
        payload = notice.encode()
        for peer in range(self.size):
            if peer != self.rank or to_self:
                self.outbox.append((self.comm.Isend(payload, peer, _TAG), payload))

    def take(self, status) -> Notice:
        """The notice the posted receive just completed with (``status`` is its status); posts it again."""
        data = bytes(self._buf[:status.Get_count(self.MPI.BYTE)])
        self.request.Start()
        return Notice.decode(data)

    def poll(self) -> Notice | None:
        """A notice that has arrived, if any (without waiting)."""
        if self.request.Test(self._status):
            return self.take(self._status)
        return None

    def agreement(self, key: str, values: Sequence[int]) -> Agreement:
        """Start the exchange of ``values`` (every rank's, for the compiled schedule named by ``key``)."""
        tag_ub = self.comm.Get_attr(self.MPI.TAG_UB) or 32767
        tag = 2 + zlib.crc32(key.encode()) % (int(tag_ub) - 2)
        a = Agreement(self, tag, values)
        self.outbox.extend((r, a) for r in a.sends)
        self.agreements.append(a)
        return a

    def tidy(self) -> bool:
        """Forget sent notices that have left; True if some are still in flight."""
        self.outbox = [(r, p) for r, p in self.outbox if not r.Test()]
        return bool(self.outbox)

    def withdraw(self) -> None:
        """Cancel the posted receive and the agreements' unfinished receives (at exit, or when the channel goes)."""
        MPI = self.MPI
        if MPI.Is_finalized():
            return
        posted = [self.request] + [r for a in self.agreements for r in a.recvs if r]
        for r in posted:
            try:
                r.Cancel()
                r.Wait()
            except MPI.Exception:  # pragma: no cover - MPI is going down
                pass
        try:
            self.request.Free()
        except MPI.Exception:  # pragma: no cover
            pass
        for r, _ in self.outbox:
            try:
                if not r.Test():
                    r.Free()  # a notice to a rank that is gone: MPI finishes it (or not) on its own
            except MPI.Exception:  # pragma: no cover
                pass
        self.outbox = []
        self.agreements = []


class Agreement:
    """Every rank's small integer vector for one compiled schedule, sent once to every other rank.

    ``got[q]`` is rank ``q``'s vector once ``recvs`` have completed (wait for
    them with the control line watched: :meth:`~.channel.Channel.wait_watching`).
    The receives stay posted if a wait is interrupted; the next wait resumes.
    Keys are hashed into tags: two schedules whose keys collide (odds about
    1 in 2**28 per pair) would mix their vectors.
    """

    def __init__(self, line: ControlLine, tag: int, values: Sequence[int]) -> None:
        mine = np.array(values, dtype=np.int64)
        self.got = np.empty((line.size, mine.size), dtype=np.int64)
        self.got[line.rank] = mine
        self._mine = mine
        comm = line.comm
        peers = [p for p in range(line.size) if p != line.rank]
        self.recvs = [comm.Irecv(self.got[p], p, tag) for p in peers]
        self.sends = [comm.Isend(mine, p, tag) for p in peers]
