"""The errors a run reports: one clear message naming this rank, the peer and the bytes.

Ranks that disagree on the count: MPI accepts a message shorter than the
receive buffer without complaint, so the run loops compare the byte count
of every receive slice with what the slice expects (one
``Status.Get_count`` per received slice), and MPI reports a longer one as
truncated. Either way the receiving rank raises
:class:`~ccsynth.errors.BufferMismatchError` naming itself, the peer and the
expected and received bytes, before using the data (the layout's slicing
guarantees that a disagreement always shows up as a slice of the wrong
length: see :mod:`.layout`). A different dtype of the same item size goes
unnoticed (the Communicator's ``debug=True`` compares dtypes too).

Other MPI errors are named for what they are: a peer whose process died or
whose connection broke (``MPI_ERR_PROC_FAILED``, or MPICH's communication
errors) is reported as :class:`~ccsynth.errors.PeerError` naming the peer,
never as a count mismatch; anything else as the MPI error it is. A wait that
times out (``timeout=``) raises :class:`~ccsynth.errors.CallTimeoutError`
naming the ranks whose messages never came.

The rank that raises one of these tells the others through the control line
(:mod:`.control`), so every rank of the call raises.
"""

from __future__ import annotations

from ccsynth.collectives.runtime.constants import K_SEND
from ccsynth.collectives.runtime.layout import Layout
from ccsynth.errors import BufferMismatchError, CallTimeoutError, CCSynthError, PeerError, ScheduleError

__all__ = ["RunFailures"]

_HINT = (
    "Pass debug=True to the Communicator (or set CCSYNTH_DEBUG=1) to compare every call's arguments "
    "across ranks before communicating"
)


class RunFailures:
    """Builds the exception for what went wrong in a run of one compiled schedule on one rank.

    ``statuses`` and ``null`` are the run loops' (:class:`~.primitives.MpiCalls`):
    a failed ``wait_some`` is explained from the statuses it filled.
    """

    def __init__(self, rank: int, schedule, MPI, statuses: list | None, null, slice_mask: int = -1) -> None:
        self.rank = rank
        self.slice_mask = slice_mask  # a received tag's slice tag: tag & slice_mask
        self.schedule = schedule
        self.MPI = MPI
        self.statuses = statuses
        self.null = null

    def what_ran(self, lay: Layout) -> str:
        coll = self.schedule.collective
        per = f"{lay.m} bytes" if not coll.is_reducing else f"{lay.m} x {lay.dtype.name}"
        return f"schedule {self.schedule.name!r} ({coll.describe()}, {per} per block on this rank)"

    def count_mismatch(self, lay: Layout, v: int, got: int | None) -> BufferMismatchError:
        """Receive slice ``v`` got ``got`` bytes (None: more than it holds)."""
        peer, tag, _ = lay.mpi[v]
        exp = lay.expect[v]
        received = f"received {got}" if got is not None else "was sent more (MPI truncated the message)"
        return BufferMismatchError(
            f"rank {self.rank} expected {exp} bytes from rank {peer} (message tag {tag}) but {received}, "
            f"running {self.what_ran(lay)}: the ranks passed different counts (or datatypes) to the collective. "
            f"{_HINT}"
        )

    def wait_failed(self, lay: Layout, e, active: list, anodes: list, base: int = 0) -> CCSynthError:
        """``wait_some`` raised: typically a receive was sent more than it holds (MPI_ERR_TRUNCATE).

        MPICH fills in the source and tag of the requests completed by the
        failing call but not always their error fields, and a truncated
        receive reports its own size as the count; so the culprit is found
        among the receives this call completed (the statuses with a real
        source; those of requests that did not complete keep
        MPI_ANY_SOURCE). ``base`` is the call's tag base (tags are ``base +``
        the layout's slice tag). A status whose error field names another
        error (a peer that died) is reported as such.
        """
        MPI = self.MPI
        if e.Get_error_class() not in (MPI.ERR_TRUNCATE, MPI.ERR_IN_STATUS) or self.statuses is None:
            return self.mpi_failure(lay, e)  # (without statuses there is nothing to explain it from)
        completed = set()
        broken: dict[int, str] = {}
        for status in self.statuses[:len(active)]:
            src = status.Get_source()
            if src >= 0:
                completed.add((src, (status.Get_tag() - base) & self.slice_mask))
                code = status.Get_error()
                if code not in (MPI.SUCCESS, MPI.ERR_PENDING) and MPI.Get_error_class(code) != MPI.ERR_TRUNCATE:
                    broken.setdefault(src, MPI.Get_error_string(code))
        suspects = [
            v for q, v in zip(active, anodes)
            if v >= 0 and q is not self.null and lay.kind[v] != K_SEND and lay.mpi[v][:2] in completed
        ]
        if broken:
            src, text = next(iter(broken.items()))
            return PeerError(f"rank {self.rank}: its messages with rank {src} failed while running "
                             f"{self.what_ran(lay)} (a peer process that ended, or a broken connection): {text}")
        if len(suspects) == 1:
            return self.count_mismatch(lay, suspects[0], None)
        if suspects:
            from_ = ", ".join(f"{lay.expect[v]} bytes from rank {lay.mpi[v].peer}" for v in suspects)
            return BufferMismatchError(
                f"rank {self.rank} was sent more than it expected in one of these receives: {from_} "
                f"(MPI truncated the message), running {self.what_ran(lay)}: the ranks passed different counts "
                f"(or datatypes) to the collective. {_HINT}"
            )
        return self.mpi_failure(lay, e)

    def single_wait_failed(self, lay: Layout, e, v: int) -> CCSynthError:
        """Waiting for receive node ``v`` raised: MPI truncated it (sent more than it holds), or worse."""
        if e.Get_error_class() == self.MPI.ERR_TRUNCATE:
            return self.count_mismatch(lay, v, None)
        return self.mpi_failure(lay, e)

    def mpi_failure(self, lay: Layout, e) -> CCSynthError:
        """Any other MPI error during a run: a peer that went away, or the MPI error as it is."""
        MPI = self.MPI
        cls = e.Get_error_class()
        text = e.Get_error_string()
        gone = {getattr(MPI, name) for name in ("ERR_PROC_FAILED", "ERR_PROC_FAILED_PENDING", "ERR_REVOKED")
                if hasattr(MPI, name)}
        lowered = text.lower()
        if cls in gone or "communication error" in lowered or "socket" in lowered or "terminated" in lowered:
            return PeerError(
                f"rank {self.rank}: a peer went away (its process ended or its connection failed) while running "
                f"{self.what_ran(lay)}: {text}"
            )
        if cls == MPI.ERR_IN_STATUS:
            return PeerError(
                f"rank {self.rank}: MPI failed a request while running {self.what_ran(lay)} and named no cause "
                f"(a peer process that ended, or a broken connection, are the usual ones): {text}"
            )
        if cls == MPI.ERR_TRUNCATE:
            return BufferMismatchError(
                f"rank {self.rank} was sent more than it expected while running {self.what_ran(lay)} (MPI truncated "
                f"a message): the ranks passed different counts (or datatypes) to the collective. {_HINT}"
            )
        return CCSynthError(f"rank {self.rank}: MPI failed while running {self.what_ran(lay)}: {text}")

    def timed_out(self, lay: Layout | None, seconds: float, waiting_for: list[int]) -> CallTimeoutError:
        """Nothing arrived for ``seconds``; ``waiting_for``: nodes of the receives still pending (``lay`` None:
        waiting for the other ranks' settings before the first run)."""
        if lay is None:
            who = f"the other ranks to start schedule {self.schedule.name!r}"
            running = "its first call"
        else:
            peers = sorted({lay.mpi[v].peer for v in waiting_for if v in lay.mpi})
            who = (f"messages from rank(s) {', '.join(map(str, peers))}" if peers
                   else "its sends to complete (a peer is not receiving)")
            running = self.what_ran(lay)
        return CallTimeoutError(
            f"rank {self.rank} waited {seconds:g} s for {who} while running {running}: a rank skipped this call, "
            f"called another collective, passed other arguments (root, count), or stopped. {_HINT}"
        )

    def stalled(self, left: int) -> ScheduleError:  # pragma: no cover - excluded by the compile-time checks
        """The dataflow loop has nothing ready and nothing in flight."""
        return ScheduleError(f"rank {self.rank}: schedule {self.schedule.name!r} stalled with {left} slices left")
