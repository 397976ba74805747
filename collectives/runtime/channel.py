"""Call sequence numbers: the messages of a call carry its number, so no call takes another's.

A :class:`Channel` is what the compiled schedules of one communicator share:
the MPI communicator their messages travel on, a counter of the calls made
on it (every rank counts every collective call, in the same order, as MPI
requires of collectives), the control line on which a failing rank tells
the others (:mod:`.control`), the byte budget of the buffers kept between
calls (:mod:`.memory`), and the requests a failed call left behind.

Tags
----
Every message of call number ``s`` of a collective with signature ``c`` is
sent, and received, with the tag::

    tag = ((s mod W) * 2**C + c) * 2**B + t      (t < 2**B: the slice's tag within the call)

where ``t`` is the layout's per-(rank pair, direction) slice number
(:mod:`.layout`), ``c < 2**C`` the call's *signature*, ``B`` the *slice
bits* and ``W`` the *window* (:class:`TagSpace`, sized from the
communicator's ``MPI_TAG_UB``). Where ``MPI_TAG_UB >= 2**27 - 1`` (MPICH's
2**29 - 1: B = 12, C = 9, W = 256) the signature is the collective (3 bits)
and a 6-bit hash of the call's dtype, op, root and calling thread, set per
call by the communicator (``calls.Signer``; a mismatch stalls and the
watchdog makes it an error, :mod:`.watchdog`); from 2**24 - 1 the
collective and its root modulo 8 (C = 6); with the minimum MPI guarantees,
32767, the collective only (B = 8, C = 3, W = 16). A layout that would need more than
``2**B`` (less a few reserved) slices on one rank pair in one call is
refused before anything is sent (:class:`~ccsynth.errors.ScheduleError`:
use larger slices). Every ``W`` calls (when ``s mod W == 0``) every rank
replaces the channel's communicator by a ``Dup`` of it, so call ``s`` runs
on communicator generation ``g(s) = s div W``. The old generation is then
freed, but only after a :func:`flush` has taken in every message still
unreceived on it: MPI gives the context of a freed communicator to the next
one it creates, and a message left on the old one would be matched there.
(The flush relies on the messages between two ranks on one communicator
arriving in the order they were sent, which MPI implementations provide
although the standard promises it only for messages of one tag.)

Requests are created per call (``Isend``/``Irecv``), not persistent: a
persistent request's tag is fixed, and the tag must change with every call.
That costs about 0.3 us of Python per message over ``Start`` of a
persistent request (measured in ``docs/results.md``).

Why a call can never consume another call's message
---------------------------------------------------
MPI matches a receive with a message only if both are on the same
communicator with the same source and tag. A receive posted by call ``s``
is on generation ``g(s)`` with a tag whose high part is ``s mod W``. A
message of call ``s'`` that matches it is therefore on generation
``g(s') = g(s)`` with ``s' mod W = s mod W``; the two together give
``s' = s``. So whatever happened before -- a call that failed on one rank
after the others had sent to it, a receive that was never matched -- a
message can only ever complete a receive of its own call. Within one call
number, the signature field keeps a rank that skipped a call (and so makes
its *next* collective under that number) or names another root from
feeding its messages to the others' receives: different collectives, or
roots that differ modulo 8, never match. A call whose messages never come
blocks (a ``timeout`` turns that into
:class:`~ccsynth.errors.CallTimeoutError`; ``debug=True`` reports the
mismatch before communicating) instead of returning another call's data.
This needs only that the ranks number their calls alike, which they do
because every rank counts every call, including calls that fail before
communicating and calls handed to the MPI library. What remains for
``debug=True`` alone: the same collective and root with another count
(message lengths usually show it) or another dtype of the same size.

Failed calls
------------
A rank whose call raises (a local check, a message of the wrong length, an
MPI error, Ctrl-C) posts a notice on the control line (:meth:`call_failed`);
a rank waiting in that call wakes up and raises the same error
(:meth:`notice`: the same class when it is a ccsynth error, else
:class:`~ccsynth.errors.PeerError`, naming the rank and the reason); a rank
that has not reached the call yet keeps the notice and raises when it gets
there, before communicating (:meth:`open_call`); a rank that already
finished the call (in a rooted collective a rank may finish without the
failed one) ignores it -- its result does not depend on the failed rank.
After the error, :meth:`abandon` cancels the call's posted receives (so
nothing lands in any buffer later) and keeps its unfinished sends, with the
buffers they read, alive until MPI completes them (a send cannot be
cancelled). The communicator is then ready for the next call, whose number,
and hence tags, differ from everything left behind.
"""

from __future__ import annotations

import logging
import time
import weakref
from dataclasses import dataclass
from typing import Any
from collections.abc import Sequence

from ccsynth import errors
from ccsynth.collectives.runtime import shutdown
from ccsynth.collectives.runtime.control import ControlLine, Notice
from ccsynth.collectives.runtime.memory import MemoryBudget
from ccsynth.errors import CCSynthError, PeerError

__all__ = [
    "TagSpace", "Channel", "channel_for", "flush", "is_shared", "mark_shared", "KIND_CODES", "MAX_SLICE_BITS",
    "RESERVED_TAGS",
]

log = logging.getLogger(__name__)

MAX_SLICE_BITS = 14
#: the control-line notice by which a stalled rank's watchdog sends its call's signature (:mod:`.watchdog`)
SIG_CHECK = "SignatureCheck"
#: slice bits where the tag carries a signature hash (MPI_TAG_UB >= 2**27 - 1)
SIGNED_SLICE_BITS = 12
MIN_SEQ_BITS = 4
#: per call, this many of the highest slice tags are the channel's own (the flush marker)
RESERVED_TAGS = 16
#: the collective's number in a tag's signature field
KIND_CODES = {"allreduce": 0, "allgather": 1, "reduce_scatter": 2, "alltoall": 3, "broadcast": 4, "reduce": 5}


@dataclass(frozen=True)
class TagSpace:
    """How a tag splits: call number (high ``seq_bits``), signature (``sig_bits``), slice tag (low ``slice_bits``).

    The signature is the collective's kind (3 bits) and, where the tag has
    room (``sig_bits`` 6), its root modulo 8.
    """

    slice_bits: int
    seq_bits: int
    sig_bits: int = 0

    @classmethod
    def for_tag_ub(cls, tag_ub: int) -> TagSpace:
        bits = (int(tag_ub) + 1).bit_length() - 1  # every tag below 2**bits is valid
        if bits >= 27:  # the collective and a 6-bit hash of the call's signature (calls.Signer)
            return cls(SIGNED_SLICE_BITS, bits - SIGNED_SLICE_BITS - 9, 9)
        sig_bits = 6 if bits >= 24 else 3
        slice_bits = max(6, min(MAX_SLICE_BITS, bits - sig_bits - MIN_SEQ_BITS))
        return cls(slice_bits, max(1, bits - sig_bits - slice_bits), sig_bits)

    @property
    def window(self) -> int:
        """Calls per communicator generation."""
        return 1 << self.seq_bits

    @property
    def slice_limit(self) -> int:
        """Slice tags a layout may use per rank pair and direction in one call."""
        return (1 << self.slice_bits) - RESERVED_TAGS

    def base(self, seq: int) -> int:
        return (seq & (self.window - 1)) << (self.slice_bits + self.sig_bits)

    @property
    def hash_bits(self) -> int:
        """Bits of the call's signature hash in the tag (0: none; the root modulo 8 or nothing instead)."""
        return self.sig_bits - 3 if self.sig_bits > 6 else 0

    def signature(self, kind: str, root: int = 0) -> int:
        """What a compiled schedule of ``kind`` (rooted at ``root``) adds to every tag it uses.

        With :attr:`hash_bits` the root is not here but in the call's hash (:meth:`call_field`).
        """
        sig = KIND_CODES.get(kind, 7)
        if self.hash_bits:
            sig <<= self.hash_bits
        elif self.sig_bits >= 6:
            sig = (sig << 3) | (root & 7)
        return (sig & ((1 << self.sig_bits) - 1)) << self.slice_bits

    def call_field(self, h: int) -> int:
        """What the call's signature hash ``h`` adds to every tag of the call (:class:`ccsynth.collectives.calls.Signer`)."""
        return (h & ((1 << self.hash_bits) - 1)) << self.slice_bits

    def sig_mask(self) -> int:
        """The signature field of a tag."""
        return ((1 << self.sig_bits) - 1) << self.slice_bits

    def own_tag(self, k: int) -> int:
        """The ``k``-th of the channel's own slice tags."""
        return (1 << self.slice_bits) - 1 - k


def mark_shared(exc: BaseException) -> None:
    """Every rank already raises ``exc`` (or knows of it): do not post it on the control line."""
    try:
        exc._ccsynth_shared = True  # type: ignore[attr-defined]
    except Exception:  # pragma: no cover - an exception type without attributes
        pass


def is_shared(exc: BaseException) -> bool:
    return bool(getattr(exc, "_ccsynth_shared", False))


class Channel:
    """The communicator, call numbers, control line and buffer budget shared by one communicator's calls.

    Build it with :meth:`build` (collective: it duplicates communicators).
    Every collective call does :meth:`open_call` first, on every rank; the
    run loops then send with tags ``base + t`` on ``comm`` and watch
    ``ctrl`` (the control line's posted receive) in every wait.
    """

    def __init__(self, comm, control_comm, MPI, *, own_comm: bool, cache_bytes: int | None = None,
                 tags: TagSpace | None = None) -> None:
        self.MPI = MPI
        self.comm = comm  # where the messages go (replaced every `window` calls)
        self._own = own_comm  # whether self.comm is ours to free
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        if tags is None:
            tag_ub = comm.Get_attr(MPI.TAG_UB)
            tags = TagSpace.for_tag_ub(int(tag_ub) if tag_ub else 32767)
        self.tags = tags
        self._mask = self.tags.window - 1
        self._shift = self.tags.slice_bits + self.tags.sig_bits
        self.seq = 0  # the call in progress (or the last one)
        self.base = 0  # its tag base
        self.busy = False  # a call is in progress (the watchdog looks at stalled calls only)
        # the signature field of this call's tags where the call is signed (calls.Signer: a mismatch there is turned
        # into an error on every rank by the watchdog, runtime.watchdog)
        self.expect: int | None = None
        self.sig_key: tuple = ()  # what the signature hashed, for the watchdog's message
        self.caller = 0  # the ident of the thread that made the call in progress
        self.generation = 0
        self.line = ControlLine(control_comm, MPI)
        self.ctrl = self.line.request
        self.pending: dict[int, Notice] = {}  # notices about calls this rank has not reached
        self.stranded: list = []  # (unfinished sends, what they read) of failed calls
        self.memory = MemoryBudget(cache_bytes)
        self.closed = False
        self.poisoned: BaseException | None = None  # two threads called at once (here or on a peer): every call fails
        self._slow = False  # open_call has more to do than count
        self._reap_at = 0
        self._reap_gap = 1
        shutdown.register(self)

    @classmethod
    def build(cls, comm, MPI, *, private: bool = True, cache_bytes: int | None = None,
              tags: TagSpace | None = None) -> Channel:
        """A channel for ``comm`` (collective): its messages go on a ``Dup`` of it if ``private``, else on
        ``comm`` itself; the control line always gets a ``Dup`` of its own. ``tags`` overrides the split of
        the tag (tests use a small window)."""
        p2p = comm.Dup() if private else comm
        return cls(p2p, comm.Dup(), MPI, own_comm=private, cache_bytes=cache_bytes, tags=tags)

    # ------------------------------------------------------------------ calls
    def open_call(self) -> int:
        """Number the next call (every rank, every collective call, before anything else)."""
        seq = self.seq + 1
        self.seq = seq
        low = seq & self._mask
        self.expect = None
        if low == 0 or self._slow:
            self._open_slow(seq, low)
        self.base = low << self._shift
        self.busy = True
        return seq

    def _open_slow(self, seq: int, low: int) -> None:
        if self.closed:
            raise CCSynthError("this communicator has been freed")
        if self.poisoned is not None:
            raise self.poisoned
        if low == 0:
            self._renew()
            self.memory.expire(seq - self.tags.window)  # buffers no call of the last generation used
        if self.stranded or self.line.outbox:
            if seq >= self._reap_at:
                self._reap(seq)
        notice = None
        if self.pending:
            notice = self.pending.pop(seq, None)
            for s in [s for s in self.pending if s < seq]:
                del self.pending[s]
        self._slow = bool(self.pending or self.stranded or self.line.outbox)
        if notice is not None:
            raise self.peer_error(notice)  # before communicating: the failed rank will send nothing

    def _renew(self) -> None:
        """Start a new communicator generation (every rank at the same call number: collective)."""
        old = self.comm
        self.comm = old.Dup()
        self.generation += 1
        if self._own:
            flush(old, self.MPI, self.tags.base(0) + self.tags.own_tag(0))  # stranded sends: received now
            old.Free()
        self._own = True

    def call_failed(self, exc: BaseException, what: str) -> None:
        """The call in progress raised ``exc`` on this rank: tell the other ranks (once)."""
        if is_shared(exc) or self.closed:
            return
        mark_shared(exc)
        if self.size > 1:
            log.debug("rank %d: call %d (%s) failed, telling the other ranks: %s", self.rank, self.seq, what, exc)
            self.line.post(Notice(self.seq, self.rank, type(exc).__name__, what, str(exc)))
            self._slow = True

    def poison(self, exc: BaseException) -> None:
        """Two threads called at once on this rank (:mod:`~ccsynth.collectives.call_guard`): every later call on
        every rank raises ``exc``; tell the other ranks (a rank waiting in a call wakes up and raises)."""
        if self.poisoned is not None:
            return
        self.poisoned = exc
        self._slow = True
        mark_shared(exc)  # told here, once
        if self.size > 1 and not self.closed:  # to itself too: its own call in flight wakes up and raises
            self.line.post(Notice(self.seq, self.rank, type(exc).__name__, "a call from a second thread", str(exc)),
                           to_self=True)

    def notice(self, status) -> None:
        """The control line's receive completed in a wait of the call in progress (``status``: its status).

        Raises the failed rank's error if the notice is about this call (or
        closes the communicator, :meth:`poison`); otherwise keeps it (a later
        call) or drops it (an earlier one) and returns.
        """
        n = self.line.take(status)
        if n.error == SIG_CHECK:
            self._sig_check(n)
            return
        if n.error == "ConcurrentCallError":
            if self.poisoned is None:
                self.poisoned = self.peer_error(n)
                self._slow = True
            raise self.poisoned
        if n.seq == self.seq:
            raise self.peer_error(n)
        if n.seq > self.seq:
            self.pending.setdefault(n.seq, n)
            self._slow = True
        else:
            log.debug("rank %d: ignoring a notice about call %d (now at %d): %s", self.rank, n.seq, self.seq, n)

    def _sig_check(self, n: Notice) -> None:
        """A stalled peer's signature for call ``n.seq`` (its watchdog sent it, :mod:`.watchdog`): if it is this
        call and differs from this rank's, raise here and tell every rank."""
        if n.seq != self.seq or self.expect is None or n.message == str(self.expect):
            return
        key = ", ".join(map(str, self.sig_key))
        msg = (f"rank {n.rank} makes another call than rank {self.rank} (rank {n.rank}: {n.what}; rank {self.rank}: "
               f"{key}; collective, dtype, op, root, thread): every rank must make the same call")
        self.line.post(Notice(n.seq, self.rank, "BufferMismatchError", self.sig_key[0] if self.sig_key else "a call",
                              msg))
        e = errors.BufferMismatchError(f"call {n.seq} on this communicator: {msg}")
        mark_shared(e)
        raise e

    @staticmethod
    def peer_error(n: Notice) -> BaseException:
        cls: Any = getattr(errors, n.error, None)
        if not (isinstance(cls, type) and issubclass(cls, CCSynthError)):
            cls = PeerError
        e = cls(f"rank {n.rank} failed in {n.what} (call {n.seq} on this communicator) with {n.error}: {n.message}")
        e.failed_rank = n.rank
        mark_shared(e)
        return e

    # ---------------------------------------------------------- after a failure
    def abandon(self, recvs: Sequence, sends: Sequence, keep: Any) -> None:
        """Clean up a failed call: cancel its posted receives, keep its unfinished sends (and ``keep``,
        the buffers they read) alive until MPI completes them."""
        MPI = self.MPI
        live = [r for r in recvs if r]
        for r in live:
            try:
                r.Cancel()
            except MPI.Exception:  # pragma: no cover - completed meanwhile
                pass
        for r in live:
            try:
                r.Wait()  # the cancel, or the message that beat it
            except MPI.Exception:  # a truncated message: it is gone all the same
                pass
        left = []
        for r in sends:
            if r:
                try:
                    if not r.Test():
                        left.append(r)
                except MPI.Exception:  # pragma: no cover
                    pass
        if left:
            self.stranded.append((left, keep))
            self._reap_gap = 1
            self._reap_at = self.seq + 1
            self._slow = True

    def _reap(self, seq: int) -> None:
        still = []
        for reqs, keep in self.stranded:
            left = [r for r in reqs if r and not r.Test()]
            if left:
                still.append((left, keep))
        self.stranded = still
        self.line.tidy()
        self._reap_gap = min(1024, 2 * self._reap_gap)
        self._reap_at = seq + self._reap_gap

    # ------------------------------------------------------------------ waits
    def wait_watching(self, reqs: list, mpi) -> None:
        """Wait for every request of ``reqs`` while watching the control line (:meth:`notice`)."""
        if mpi.test_all(reqs):
            return
        k = len(reqs)
        both = list(reqs) + [self.ctrl]
        sts = mpi.statuses
        while any(reqs):  # a request is true until it completes
            done = mpi.wait_some(both, sts)
            for j, i in enumerate(done):
                if i == k:
                    self.notice(sts[j])

    # ---------------------------------------------------------------- the end
    def close(self, *, barrier_s: float = 0.0, free: bool = False) -> None:
        """Withdraw the control line's posted receives; with ``free`` (collective) also free the communicators.

        With ``barrier_s > 0`` the ranks first meet in a barrier on the control
        communicator, given up after that many seconds (at exit: no rank
        finalizes MPI while a peer still exchanges messages with it).
        Communicators are freed only with ``free`` (``Communicator.Free()``,
        called on every rank), after a :func:`flush`: MPI reuses the context
        of a freed communicator, and a message left unreceived on it would
        otherwise be matched on the next communicator that gets its context.
        A channel that is merely dropped keeps them (see :meth:`__del__`).
        """
        MPI = self.MPI
        if self.closed or MPI.Is_finalized():
            self.closed = True
            return
        self.closed = True
        self._slow = True
        self._reap(self.seq)
        if barrier_s > 0 and self.size > 1:
            _barrier(self.line.comm, MPI, barrier_s)
        self.line.withdraw()
        if free:
            if self._own:
                flush(self.comm, MPI, self.tags.base(0) + self.tags.own_tag(0))
                self.comm.Free()
            flush(self.line.comm, MPI, 0)
            self.line.comm.Free()
            MPI.Request.Waitall([r for reqs, _ in self.stranded for r in reqs])  # the peers' flushes take them
            self.stranded = []

    def __del__(self):
        # Dropped without Free(): withdraw the posted receive (no collective point to flush: keep the communicators).
        try:
            self.close()
        except Exception:  # pragma: no cover - interpreter shutdown
            pass

    def __repr__(self) -> str:
        return f"<Channel rank {self.rank} of {self.size}, call {self.seq}, generation {self.generation}>"


def flush(comm, MPI, tag: int) -> None:
    """Take in every message still unreceived on ``comm`` (collective: every rank calls it at the same point).

    Every rank sends every other rank an empty marker with ``tag`` (a tag no
    call uses) and waits for theirs; since MPI implementations deliver the
    messages between two ranks on one communicator in the order they were
    sent, everything a peer sent before its marker has then arrived, and is
    received (into a throwaway buffer) and dropped. Unfinished sends of
    failed calls complete this way too.
    """
    n, me = comm.Get_size(), comm.Get_rank()
    if n > 1:
        empty = bytearray(0)
        got = [bytearray(0) for _ in range(n)]
        reqs = [comm.Irecv(got[p], p, tag) for p in range(n) if p != me]
        reqs += [comm.Isend(empty, p, tag) for p in range(n) if p != me]
        MPI.Request.Waitall(reqs)
    status = MPI.Status()
    while True:
        msg = comm.Improbe(MPI.ANY_SOURCE, MPI.ANY_TAG, status)
        if msg is None:
            break
        msg.Recv(bytearray(status.Get_count(MPI.BYTE)))


def _barrier(comm, MPI, seconds: float) -> bool:
    """An ``Ibarrier`` waited for at most ``seconds``; False if it did not complete."""
    req = comm.Ibarrier()
    end = time.monotonic() + seconds
    while not req.Test():
        if time.monotonic() > end:
            log.warning("rank %d: not every rank reached ccsynth's exit barrier within %.0f s; exiting anyway",
                        comm.Get_rank(), seconds)
            return False
        time.sleep(0.0005)
    return True


_BY_COMM: weakref.WeakValueDictionary[int, Channel] = weakref.WeakValueDictionary()


def channel_for(comm, MPI, cache_bytes: int | None = None) -> Channel:
    """The channel of calls made directly on ``comm`` (bare compiled schedules share it; collective on first use)."""
    try:
        key = int(comm.handle)
    except Exception:  # pragma: no cover - older mpi4py
        key = comm.py2f()
    ch = _BY_COMM.get(key)
    if ch is None or ch.closed:
        ch = Channel.build(comm, MPI, private=False, cache_bytes=cache_bytes)
        _BY_COMM[key] = ch
    return ch
