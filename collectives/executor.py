"""Run a Schedule over MPI: compile once per rank, execute as slice-level dataflow.

:class:`CompiledSchedule` turns a (verified) :class:`Schedule` into the
program of one rank and runs it on real buffers with non-blocking
point-to-point MPI::

    cs = CompiledSchedule(schedule, comm)          # once
    cs.run(sendbuf, recvbuf, op="sum")             # many times

How it works
------------
This module is the public face; the parts live in
:mod:`ccsynth.collectives.runtime`, each with its own design note:

*Compile* (once per schedule, in the constructor;
:mod:`~ccsynth.collectives.runtime.local_program`). The rank count is
checked first (``ScheduleError`` on every rank, before any communication).
A pass over all ranks' ops follows each chunk's column (which fixes chunk
sizes for uneven counts) and gives every op a level; the rank keeps its own
ops, rejects races (two unordered ops touching the same chunk, one of them
writing), forwards sends past copies, fuses ``copy`` + ``recv-reduce`` into
one receive-reduce-copy, and records which earlier ops every op conflicts
with in memory.

*Layout* (once per dtype and element count, the last
:data:`~ccsynth.collectives.runtime.constants.MAX_LAYOUTS` cached, their
buffers under a byte budget: :mod:`~ccsynth.collectives.runtime.memory`;
:mod:`~ccsynth.collectives.runtime.layout`). Every op is cut into slices
of ``slice_bytes``; a slice waits only for the slices of earlier
conflicting ops that overlap it in memory, so a chunk being received can be
forwarded or reduced slice by slice while the rest of it is still arriving.
Slice ``j`` of the ``k``-th message on a pair of ranks uses slice tag
(slices of messages ``0..k-1`` on the pair) + ``j``; a message always ends
with a slice shorter than a full one, so ranks that disagree on the count
always see a slice of the wrong length. Receives that reduce land in a
private staging area, posted as soon as the run starts.

*Binding* (once per pair of caller buffers, the last few cached by address;
:mod:`~ccsynth.collectives.runtime.binding`): views (which never keep the
caller's arrays alive) and per message its view, peer and slice tag.

*Call numbers* (:mod:`~ccsynth.collectives.runtime.channel`). Every run is
a numbered call on the communicator's channel, and every message of it is
tagged with that number, so no call can ever take another call's message
(the proof is in the channel's design note); a run that fails on one rank
tells the others on the channel's control line
(:mod:`~ccsynth.collectives.runtime.control`), so every rank raises.

*Run*. The dataflow loop (:mod:`~ccsynth.collectives.runtime.dataflow`)
starts every slice whose predecessors are done, runs local kernels through
the buffer backend, and waits for MPI only when nothing else is ready; no
step barrier. When every op is one slice and no message exceeds
``static_max_bytes`` (64 KiB), the straight-line loop
(:mod:`~ccsynth.collectives.runtime.straight_line`) runs instead a fixed
order of instructions that all ranks derive from the whole schedule and
that cannot deadlock (:mod:`~ccsynth.collectives.static_program`): far
less Python per message. Both loops receive their MPI and kernel calls as
arguments (:mod:`~ccsynth.collectives.runtime.primitives`);
``profile=True`` passes timed ones
(:mod:`~ccsynth.collectives.runtime.profiling`) to the same loops. Every
receive slice has its byte count checked; errors name the rank, the peer
and the bytes (:mod:`~ccsynth.collectives.runtime.failures`).

Both sides must use the same ``slice_bytes`` (the default is the same
everywhere; the ranks compare it, and ``static_max_bytes``, at their first
run and raise :class:`ScheduleError` everywhere if they differ). Compiled
schedules built directly on the same ``comm`` share one channel (one call
counter: every rank must run them in the same order, as MPI requires of
collectives); its messages travel on ``comm`` itself, so use a
communicator of its own (``comm.Dup()``) if the program also sends
point-to-point messages of its own on ``comm``. The drop-in
:class:`~ccsynth.collectives.communicator.Communicator` does that for you.

Chunk sizes: a buffer of ``B`` blocks of ``m`` elements cuts each block into
``c`` chunks, the first ``m % c`` of them one element larger, so chunk
``q*c + j`` is exactly as large as input chunk ``j`` of any rank. A schedule
that parks a chunk of one column in an input/output slot of another column
runs only on counts that ``c`` divides (:meth:`CompiledSchedule.supports_count`).

Buffers: ``sendbuf`` is buffer ``i`` and ``recvbuf`` buffer ``o``; they must
not overlap (the drop-in communicator turns ``MPI.IN_PLACE`` into a private
copy of the input). For non-reducing collectives the buffers are moved as
raw bytes, so any dtype works. ``op="avg"`` reduces as a sum and divides by
the rank count at the end (floating-point buffers only).

Errors during a run (a check that fails on one rank, a count that differs
on one rank, an MPI error) are raised on every rank of the call: the rank
that sees it tells the others (:mod:`~ccsynth.collectives.runtime.control`).
The failed run's posted receives are cancelled and its unfinished sends
kept alive until MPI completes them, and since the next run carries another
call number, the compiled schedule is ready for it: a program may catch the
error and go on. ``timeout=`` (seconds, or ``CCSYNTH_TIMEOUT``) turns a
wait that never ends (a rank that skipped the call) into
:class:`~ccsynth.errors.CallTimeoutError` on the waiting ranks.

Example (under ``mpiexec -n 2``; shown here on one rank)::

    >>> import numpy as np
    >>> from mpi4py import MPI
    >>> from ccsynth.collectives.builder import ScheduleBuilder
    >>> from ccsynth.collectives.spec import Collective
    >>> b = ScheduleBuilder(Collective("allreduce", 1), "self")
    >>> _ = b.copy(0, ("i", 0), ("o", 0))
    >>> cs = CompiledSchedule(b.build(), MPI.COMM_SELF)
    >>> cs.run(np.arange(3.0), np.zeros(3)).tolist()
    [0.0, 1.0, 2.0]
"""

from __future__ import annotations

import logging
import os
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from ccsynth.collectives.runtime.binding import Binding, bind
from ccsynth.collectives.runtime.channel import Channel, TagSpace, channel_for
from ccsynth.collectives.runtime.constants import (
    DEFAULT_COPY_SLICE_BYTES, DEFAULT_SLICE_BYTES, K_JOIN, K_LOCAL, K_RECV, K_RRED, K_SEND, MAX_BINDINGS,
    MAX_LAYOUTS, STATIC_MAX_BYTES, W_COPY, W_FUSED, W_REDUCE,
)
from ccsynth.collectives.runtime.control import Agreement
from ccsynth.collectives.runtime.dataflow import run_dataflow
from ccsynth.collectives.runtime.failures import RunFailures
from ccsynth.collectives.runtime.layout import Layout, build_layout, chunk_sizes
from ccsynth.collectives.runtime.local_program import build_local_program
from ccsynth.collectives.runtime.memory import Entry, MemoryBudget, cache_bytes_from_env
from ccsynth.collectives.runtime.primitives import (
    WAIT_MODES, Kernels, WaitTimedOut, kernels, local_rank_count, mpi_calls, resolve_wait_mode,
)
from ccsynth.collectives.runtime.profiling import RunStats, run_profiled
from ccsynth.collectives.runtime.straight_line import run_straight_line
from ccsynth.collectives.schedule import Schedule
from ccsynth.collectives.static_program import plan_static
from ccsynth.errors import BufferMismatchError, CCSynthError, ScheduleError
from ccsynth.kernels.base import Backend, canonical_op, check_dtype, get_backend, kernel_op

log = logging.getLogger(__name__)

__all__ = [
    "CompiledSchedule", "RunStats", "DEFAULT_SLICE_BYTES", "DEFAULT_COPY_SLICE_BYTES", "STATIC_MAX_BYTES",
    "MAX_LAYOUTS", "MAX_BINDINGS", "WAIT_MODES", "local_rank_count", "timeout_from_env",
    "K_JOIN", "K_SEND", "K_RECV", "K_RRED", "K_LOCAL", "W_COPY", "W_REDUCE", "W_FUSED",
]


def _sig(arr):
    """What must not change for a cached binding of ``arr`` to stay valid."""
    return None if arr is None else (arr.dtype, arr.shape, arr.strides)


def _none():
    return None


def _ref(obj):
    """A weak reference to ``obj`` (a callable returning it while it lives; None stays None)."""
    if obj is None:
        return _none
    try:
        return weakref.ref(obj)
    except TypeError:  # pragma: no cover - an object without weak references: hold it
        return lambda: obj


def timeout_from_env(timeout: float | None) -> float | None:
    """``timeout`` if given, else ``CCSYNTH_TIMEOUT`` (seconds; empty or 0: none), else None."""
    if timeout is None:
        text = os.environ.get("CCSYNTH_TIMEOUT", "").strip()
        if not text:
            return None
        try:
            timeout = float(text)
        except ValueError:
            raise CCSynthError(f"CCSYNTH_TIMEOUT={text!r} is not a number of seconds") from None
        if timeout <= 0:
            return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0:
        raise CCSynthError(f"timeout must be a positive number of seconds or None, got {timeout!r}")
    return float(timeout)


@dataclass(frozen=True, slots=True)
class _LastCall:
    """The last call's arguments and what they resolved to (a loop passing the same arrays skips the checks).

    The arguments are held by weak reference: a compiled schedule never keeps
    the caller's arrays alive.
    """

    sendbuf: Any  # weak reference
    recvbuf: Any  # weak reference
    op: Any
    count: int | None
    send_sig: Any
    recv_sig: Any
    layout: Layout
    binding: Binding
    kernels: Kernels
    opname: str


class CompiledSchedule:
    """A schedule compiled for the calling rank of ``comm``; ``run()`` executes it.

    Parameters:
        schedule: a verified :class:`Schedule` (plans and baselines come verified).
        comm: an mpi4py intracommunicator with exactly ``schedule.n_ranks`` ranks.
        backend: ``"numpy"``, ``"cupy"`` or a :class:`~ccsynth.kernels.base.Backend`.
        slice_bytes: pipeline slice size; must be the same on every rank.
            Default: :data:`DEFAULT_SLICE_BYTES` (1 MiB) for reducing
            collectives, :data:`DEFAULT_COPY_SLICE_BYTES` (4 MiB) for the others.
        fuse: fuse copy + receive-reduce pairs into one kernel.
        profile: collect :class:`RunStats` in ``self.stats`` (adds timer calls).
        wait: how to wait for messages when nothing else is ready: ``"waitsome"``
            (block inside MPI), ``"yield"`` (poll with ``Testsome`` and give the
            core away between polls: much faster when ranks outnumber cores),
            or ``"auto"`` (``yield`` if the launcher put more ranks on this node
            than the cores this process may use, else ``waitsome``; the
            environment variable ``CCSYNTH_WAIT`` overrides it; ``CCSYNTH_SPIN=k``
            polls k times between yields).
        roles: ``roles[q]`` is the rank of ``comm`` that plays rank ``q`` of the
            schedule (default: the identity). Rotating the ranks runs a rooted
            schedule for another root; every rank must pass the same roles.
        static_max_bytes: when every message of a call fits in one slice and
            none is larger than this, run the rank's program as a straight
            line of instructions (:mod:`~ccsynth.collectives.static_program`)
            instead of the dataflow loop; 0 turns that off. Must be the same
            on every rank.
        timeout: seconds a run may wait without any message arriving before it
            raises :class:`~ccsynth.errors.CallTimeoutError` (default
            ``CCSYNTH_TIMEOUT``, else none: wait as long as MPI would).
        channel: the :class:`~ccsynth.collectives.runtime.channel.Channel` its
            runs are numbered on (the drop-in Communicator passes its own);
            default: the one shared by every compiled schedule built on ``comm``,
            made at the first run.
        cache_bytes: the byte budget of the buffers kept between runs, when
            this schedule makes the channel (see :mod:`~ccsynth.collectives.runtime.memory`).

    Raises :class:`ScheduleError` (before communicating) if the schedule is
    for another rank count (on every rank), deadlocks (on every rank) or
    races (on the rank whose ops race).
    """

    def __init__(
        self,
        schedule: Schedule,
        comm,
        *,
        backend: str | Backend = "numpy",
        slice_bytes: int | None = None,
        fuse: bool = True,
        profile: bool = False,
        wait: str = "auto",
        roles=None,
        static_max_bytes: int = STATIC_MAX_BYTES,
        timeout: float | None = None,
        channel: Channel | None = None,
        cache_bytes: int | None = None,
    ):
        if not isinstance(schedule, Schedule):
            raise ScheduleError(f"CompiledSchedule needs a Schedule, got {type(schedule).__name__}")
        if not schedule.collective.uniform:
            raise ScheduleError(f"schedule {schedule.name!r} is of {schedule.collective.describe()}, whose chunks are "
                                "uneven tensor slices: run resharding plans with ccsynth.reshard")
        size = comm.Get_size()
        if size != schedule.n_ranks:
            raise ScheduleError(
                f"schedule {schedule.name!r} is for {schedule.n_ranks} ranks ({schedule.collective.describe()}), "
                f"but the communicator has {size} ranks"
            )
        if slice_bytes is None:
            slice_bytes = DEFAULT_SLICE_BYTES if schedule.collective.is_reducing else DEFAULT_COPY_SLICE_BYTES
        if isinstance(slice_bytes, bool) or not isinstance(slice_bytes, int) or slice_bytes < 1:
            raise ScheduleError(f"slice_bytes must be a positive integer, got {slice_bytes!r}")
        self.schedule = schedule
        self.collective = schedule.collective
        self.comm = comm
        self.rank = comm.Get_rank()
        self.size = size
        if roles is None:
            roles = tuple(range(size))
        roles = tuple(int(x) for x in roles)
        if sorted(roles) != list(range(size)):
            raise ScheduleError(f"roles must be a permutation of the {size} ranks, got {list(roles)}")
        self.roles = roles
        self.role = roles.index(self.rank)  # the schedule rank this process plays
        self.backend = get_backend(backend)
        self.slice_bytes = slice_bytes
        self.static_max_bytes = int(static_max_bytes)
        self.profile = profile
        self.wait_mode = resolve_wait_mode(wait)
        self.timeout = timeout_from_env(timeout)
        self.stats = RunStats()
        c = self.collective
        self._cf = c.chunk_factor
        self._in_blocks = c.in_chunks // c.chunk_factor
        self._out_blocks = c.out_chunks // c.chunk_factor
        self._reducing = c.is_reducing
        self._MPI: ModuleType | None
        try:
            from mpi4py import MPI  # initialises MPI: only when a schedule is compiled

            self._MPI = MPI
            tag_ub = comm.Get_attr(MPI.TAG_UB)
        except Exception:  # pragma: no cover - a comm-like object without attributes
            self._MPI = None
            tag_ub = None
        self._tags = TagSpace.for_tag_ub(int(tag_ub) if tag_ub else 32767)
        root = roles[c.root] if c.rooted else 0
        self._tag_sig = self._tags.signature(c.kind, root)  # added to every slice tag (see runtime.channel)
        self._is_mpi = self._MPI is not None and isinstance(comm, self._MPI.Comm)
        self._channel = channel
        self._cache_bytes = cache_bytes_from_env(cache_bytes)
        self._own_budget = MemoryBudget(self._cache_bytes)  # until (or without) a channel
        self._clock = 0  # call numbers without a channel (layouts built outside runs)
        program = build_local_program(schedule, self.role, self.rank, fuse_ops=fuse)
        self._program = program
        self._lops = program.ops
        self.n_ops = len(program.ops)
        self._uneven_ok = program.uneven_ok
        self._levels_ok = program.levels_ok  # this rank's program keeps to the levels (static_program)
        self._levels_ok_everywhere: bool | None = None  # agreed with the other ranks at the first layout
        self._settings_error: ScheduleError | None = None  # the ranks passed different settings
        self._agreement: Agreement | None = None  # the exchange behind _levels_ok_everywhere
        self._layouts: OrderedDict[tuple[str, int], Layout] = OrderedDict()
        self._private: dict[tuple[str, str], tuple[Any, Entry]] = {}
        self._fast: _LastCall | None = None
        spin = max(1, int(os.environ.get("CCSYNTH_SPIN", "1") or 1))  # polls between yields
        self._mpi = mpi_calls(self._MPI, self.wait_mode, spin, self.timeout) if self._MPI is not None else None
        mpi = self._mpi
        self._failures = RunFailures(self.rank, schedule, self._MPI, mpi.statuses if mpi is not None else None,
                                     mpi.null if mpi is not None else None,
                                     (1 << self._tags.slice_bits) - 1)

    # ------------------------------------------------------------- channel
    @property
    def channel(self) -> Channel | None:
        """The channel this schedule's runs are numbered on (None until the first run, unless given)."""
        return self._channel

    def _open_channel(self) -> Channel:
        if not self._is_mpi:
            raise ScheduleError("CompiledSchedule.run needs an mpi4py communicator")
        self._channel = channel_for(self.comm, self._MPI, self._cache_bytes)
        return self._channel

    @property
    def _budget(self) -> MemoryBudget:
        ch = self._channel
        return ch.memory if ch is not None else self._own_budget

    def _now(self) -> int:
        ch = self._channel
        if ch is not None:
            return ch.seq
        self._clock += 1
        return self._clock

    # ------------------------------------------------------------- layout
    def supports_count(self, m: int) -> bool:
        """Whether blocks of ``m`` elements can run (see the module doc on chunk sizes)."""
        return self._uneven_ok or m % self._cf == 0

    def supports_call(self, m: int, dtype) -> bool:
        """Whether a call with blocks of ``m`` elements of ``dtype`` can run.

        A reducing collective counts its chunks in elements; the others move
        bytes, so their blocks count ``m x itemsize`` (see :meth:`supports_count`).
        """
        return self.supports_count(m if self._reducing else m * np.dtype(dtype).itemsize)

    def _chunk_sizes(self, m: int) -> tuple[list[int], list[int]]:
        return chunk_sizes(m, self._cf)

    def _static_allowed(self) -> bool:
        """Agree with the other ranks, once, at the first layout (inside a run).

        Checks that every rank cuts messages alike (``slice_bytes``,
        ``static_max_bytes``: else :class:`ScheduleError` on every rank) and
        returns whether every rank's program keeps to the levels that the
        straight-line path needs. The exchange (:class:`~ccsynth.collectives.runtime.control.Agreement`)
        is keyed by this schedule and never cancelled: if another rank's
        failure interrupts the wait, the next layout build resumes it, and a
        rank whose first call failed before it got here joins it later.
        """
        if self._settings_error is not None:
            raise self._settings_error
        if self._levels_ok_everywhere is None:
            ok = self._levels_ok
            if self._is_mpi and self.size > 1:
                ch = self._channel
                if ch is None:  # pragma: no cover - layouts are built inside runs
                    return False
                sb, smb = self.slice_bytes, self.static_max_bytes
                if self._agreement is None:
                    key = f"{self.schedule.name}|{self.collective.describe()}|{len(self.schedule.ops)}|{self.roles}"
                    self._agreement = ch.line.agreement(key, [int(ok), sb, smb])
                ch.wait_watching(self._agreement.recvs, self._mpi)
                got = self._agreement.got
                if (got[:, 1] != sb).any() or (got[:, 2] != smb).any():
                    self._levels_ok_everywhere = False
                    self._settings_error = ScheduleError(
                        f"rank {self.rank}: the ranks compiled schedule {self.schedule.name!r} with different "
                        f"settings (this rank: slice_bytes={sb}, static_max_bytes={smb}); every rank must pass "
                        f"the same values"
                    )
                    raise self._settings_error
                ok = bool(got[:, 0].all())
            self._levels_ok_everywhere = bool(ok)
        return self._levels_ok_everywhere

    def _layout(self, dtype: np.dtype, m: int) -> Layout:
        key = (dtype.str, m)
        lay = self._layouts.get(key)
        if lay is None:
            if not self.supports_count(m):
                raise ScheduleError(
                    f"schedule {self.schedule.name!r} keeps chunks in slots of other sizes, so it needs an element "
                    f"count per block that its chunk factor {self._cf} divides (got {m})"
                )
            lay = self._build_layout(dtype, m)
            self._layouts[key] = lay
            while len(self._layouts) > MAX_LAYOUTS:  # many distinct counts: keep requests and lists bounded
                _, old = self._layouts.popitem(last=False)
                self._budget.forget(old.entry)
                self._forget_layout(old)
        else:
            self._layouts.move_to_end(key)
        return lay

    def _build_layout(self, dtype: np.dtype, m: int) -> Layout:
        lay = build_layout(
            self._program, dtype, m,
            chunk_factor=self._cf, scratch_chunks=self.schedule.scratch_chunks, in_blocks=self._in_blocks,
            out_blocks=self._out_blocks, slice_bytes=self.slice_bytes, peers=self.roles,
            tag_limit=self._tags.slice_limit, rank=self.rank,
        )
        allowed = self._static_allowed()  # on every rank at its first layout: the check communicates
        nbytes = (lay.scratch_len + lay.staging_len) * dtype.itemsize
        budget = self._budget
        key = (dtype.str, m)
        lay.entry = budget.admit(Entry(nbytes, self._dropper("_drop_layout", key),
                                       what=f"{self.schedule.name} layout for {m} x {dtype.name}"), self._now())
        lay.scratch = self.backend.empty(lay.scratch_len, dtype)
        lay.staging = self.backend.empty(lay.staging_len, dtype)
        if allowed and self._MPI is not None and lay.one_slice_each and lay.largest_message <= self.static_max_bytes:
            lay.static = plan_static(lay.kind, lay.succ, lay.mpi, lay.work, lay.node_level, lay.pre)
        log.debug(
            "rank %d: %s compiled for %d x %s: %d ops, %d slice nodes, %d pre-posted receives, staging %d elements, %s",
            self.rank, self.schedule.name, m, dtype.name, self.n_ops, lay.n_nodes, len(lay.pre), lay.staging_len,
            "straight-line program" if lay.static is not None else "dataflow loop",
        )
        return lay

    def _dropper(self, method: str, key):
        """What the memory budget calls to drop one of our buffers (without keeping this schedule alive)."""
        me = weakref.ref(self)

        def drop() -> None:
            cs = me()
            if cs is not None:
                getattr(cs, method)(key)

        return drop

    def _drop_private(self, key) -> None:
        self._private.pop(key, None)

    def _drop_layout(self, key) -> None:
        """The memory budget dropped layout ``key`` (its buffers and bindings go with it)."""
        lay = self._layouts.pop(key, None)
        if lay is not None:
            self._forget_layout(lay)

    def _forget_layout(self, lay: Layout) -> None:
        if self._fast is not None and self._fast.layout is lay:
            self._fast = None
        lay.bindings.clear()
        lay.scratch = lay.staging = None

    # -------------------------------------------------------------- binding
    def _bind(self, lay: Layout, ibuf, obuf) -> Binding:
        be = self.backend
        key = (be.address(ibuf), be.address(obuf), ibuf.size, obuf.size)
        bnd = lay.bindings.get(key)
        if bnd is not None:
            lay.bindings.move_to_end(key)
            return bnd
        bnd = bind(lay, key, ibuf, obuf, be, None if be.is_device or self._MPI is None else self._MPI.buffer,
                   self._tag_sig)
        lay.bindings[key] = bnd
        if bnd.extra_bytes:
            self._budget.grow(lay.entry, bnd.extra_bytes, self._now())
        while len(lay.bindings) > MAX_BINDINGS:
            _, old = lay.bindings.popitem(last=False)
            if self._fast is not None and self._fast.binding is old:
                self._fast = None
            if old.extra_bytes:
                self._budget.shrink(lay.entry, old.extra_bytes)
        return bnd

    def _private_buffer(self, role: str, dtype: np.dtype, n: int):
        """A buffer of ``n`` elements standing in for one the caller does not pass (kept under the budget).

        One per role and dtype, grown when a larger one is needed; calls of
        fewer elements use its front.
        """
        key = (role, dtype.str)
        hit = self._private.get(key)
        now = self._now()
        if hit is not None and hit[0].size >= n:
            hit[1].last = now
            return hit[0][:n]
        if hit is not None:
            self._budget.forget(hit[1])
            del self._private[key]
        entry = self._budget.admit(Entry(n * dtype.itemsize, self._dropper("_drop_private", key),
                                         what=f"stand-in {role} buffer"), now)
        buf = self.backend.zeros(n, dtype)
        self._private[key] = (buf, entry)
        return buf

    # ------------------------------------------------------------------ run
    def _flat(self, arr, what: str, writable: bool = False):
        be = self.backend
        if not be.owns(arr):
            raise BufferMismatchError(
                f"{what} is a {type(arr).__name__}, but this schedule runs on the {be.name} backend"
            )
        if not (arr.flags.c_contiguous or arr.flags.f_contiguous):
            raise BufferMismatchError(f"{what} is not contiguous (shape {arr.shape}, strides {arr.strides}); pass a contiguous array")
        if writable and not getattr(arr.flags, "writeable", True):
            raise BufferMismatchError(f"{what} is read-only (shape {arr.shape}); pass a writable array")
        return arr.reshape(-1, order="A") if arr.ndim != 1 else arr

    def run(self, sendbuf, recvbuf, op: Any = "sum", *, count: int | None = None):
        """Execute the schedule: ``sendbuf`` is buffer ``i``, ``recvbuf`` buffer ``o``.

        Either buffer may be None where the collective does not use it on this
        rank (a non-root's output of reduce, a non-root's input of broadcast):
        a private buffer stands in. ``count`` is the element count per block
        when neither buffer gives it. Returns ``recvbuf``.

        Every run is a numbered call on the schedule's channel (collective:
        every rank runs it). Raises :class:`BufferMismatchError` for buffers
        of the wrong size, dtype or layout and
        :class:`~ccsynth.kernels.base.OpError` for an unknown op or ``avg``
        on integers -- before any communication; an error on one rank is
        raised on every rank.
        """
        ch = self._channel or self._open_channel()
        ch.open_call()
        try:
            return self.execute(sendbuf, recvbuf, op, count=count)
        except BaseException as e:
            ch.call_failed(e, self._describe_call(sendbuf, recvbuf))
            raise

    def execute(self, sendbuf, recvbuf, op: Any = "sum", *, count: int | None = None):
        """:meth:`run`, as part of a call its caller has opened on :attr:`channel` (the Communicator does).

        Errors are raised on this rank only; the caller tells the others
        (:meth:`~ccsynth.collectives.runtime.channel.Channel.call_failed`).
        """
        ch = self._channel
        fast = self._fast
        if (
            fast is None
            or sendbuf is not fast.sendbuf()
            or recvbuf is not fast.recvbuf()
            or op is not fast.op
            or count != fast.count
            or _sig(sendbuf) != fast.send_sig
            or _sig(recvbuf) != fast.recv_sig
        ):
            try:
                fast = self._prepare(sendbuf, recvbuf, op, count)
            except WaitTimedOut as e:  # waiting for the other ranks' settings (the first call only)
                raise self._failures.timed_out(None, e.seconds, []) from None
            self._fast = fast
        # else: the same arrays as last time (a training or benchmark loop): the checks are skipped
        if ch is None:
            raise CCSynthError("execute() runs inside a call opened on the schedule's channel: use run()")
        mpi = self._mpi
        if mpi is None:  # pragma: no cover - a comm-like object without MPI attributes (see __init__)
            raise CCSynthError(f"running a schedule needs an MPI communicator, got {type(self.comm).__name__}")
        lay, bnd = fast.layout, fast.binding
        lay.entry.last = ch.seq
        loop = run_dataflow if bnd.static is None else run_straight_line
        try:
            if self.profile:
                run_profiled(loop, self.stats, lay, bnd, fast.kernels, mpi, self._failures, ch)
            else:
                loop(lay, bnd, fast.kernels, mpi, self._failures, ch)
        except BaseException as e:
            waiting = self._waiting_for(lay, bnd) if isinstance(e, WaitTimedOut) else []
            self._abandon(lay, bnd, (sendbuf, recvbuf))
            if isinstance(e, WaitTimedOut):
                raise self._failures.timed_out(lay, e.seconds, waiting) from None
            if self._MPI is not None and isinstance(e, self._MPI.Exception):
                raise self._failures.mpi_failure(lay, e) from e
            raise
        if ch.memory.over:  # this call needed more than the budget: keep no more than that
            ch.memory.trim()
        if fast.opname == "avg" and recvbuf is not None and (
                self.collective.kind != "reduce" or self.role == self.collective.root):
            self.backend.divide(self._flat(recvbuf, "recvbuf"), self.size)
            if self.backend.is_device:
                self.backend.synchronize()
        return recvbuf

    def _abandon(self, lay: Layout, bnd: Binding, arrays) -> None:
        """A run failed midway: cancel its posted receives, keep its unfinished sends (and what they read) alive.

        Nothing can land in any buffer afterwards, so the layout and the
        binding stay valid for the next run (a new call number, new tags).
        """
        fl = bnd.inflight
        if bnd.static is None:
            recvs = [q for q, v in zip(fl.active, fl.nodes) if v >= 0 and lay.kind[v] != K_SEND]
            sends = [q for q, v in zip(fl.active, fl.nodes) if v >= 0 and lay.kind[v] == K_SEND]
        else:
            recvs, sends = list(fl.recvs), list(fl.sends)
        fl.active.clear()
        fl.nodes.clear()
        fl.recvs.clear()
        fl.sends.clear()
        if self._channel is not None:
            self._channel.abandon(recvs, sends, (arrays, lay.staging, lay.scratch, bnd))

    @staticmethod
    def _waiting_for(lay: Layout, bnd: Binding) -> list[int]:
        """Nodes of the receives still pending in the failed run (for a timeout's message)."""
        fl = bnd.inflight
        if bnd.static is None:
            return [v for q, v in zip(fl.active, fl.nodes) if v >= 0 and q and lay.kind[v] != K_SEND]
        return [bnd.static.recv_nodes[i] for i, q in enumerate(fl.recvs) if q]

    def _describe_call(self, sendbuf, recvbuf) -> str:
        arr = recvbuf if recvbuf is not None else sendbuf
        dt = getattr(arr, "dtype", None)
        size = getattr(arr, "size", None)
        what = f"{self.collective.kind} ({self.schedule.name!r})"
        return f"{what} of {size} x {dt}" if dt is not None else what

    def _prepare(self, sendbuf, recvbuf, op, count) -> _LastCall:
        """Check the buffers and find (or build) the layout and binding for them."""
        opname = canonical_op(op) if self._reducing else "sum"
        ib = self._flat(sendbuf, "sendbuf") if sendbuf is not None else None
        ob = self._flat(recvbuf, "recvbuf", writable=True) if recvbuf is not None else None
        if ib is None and ob is None and count is None:
            raise BufferMismatchError("run() needs a sendbuf, a recvbuf or a count")
        given = ib if ib is not None else ob
        dtype = given.dtype if given is not None else None
        if ib is not None and ob is not None and ib.dtype != ob.dtype:
            raise BufferMismatchError(f"sendbuf has dtype {ib.dtype.name} but recvbuf has dtype {ob.dtype.name}")
        if dtype is None:
            raise BufferMismatchError("run() with count= needs at least one buffer to know the dtype")
        if self._reducing:
            check_dtype(dtype, opname, what="sendbuf" if ib is not None else "recvbuf")
        else:
            # pure data movement: move raw bytes, whatever the dtype
            if ib is not None:
                ib = ib.view(np.uint8)
            if ob is not None:
                ob = ob.view(np.uint8)
            if count is not None:
                count *= dtype.itemsize
            dtype = np.dtype(np.uint8)
        m = self._block_count(ib, ob, count)
        nbytes = max(self._in_blocks, self._out_blocks) * m * dtype.itemsize
        self._budget.note_message(nbytes)
        if ib is None:
            ib = self._private_buffer("i", dtype, self._in_blocks * m)
        if ob is None:
            ob = self._private_buffer("o", dtype, self._out_blocks * m)
        if self.backend.may_share_memory(ib, ob) and ib.size and ob.size:
            raise BufferMismatchError("sendbuf and recvbuf overlap; pass separate buffers (or MPI.IN_PLACE to the Communicator)")
        k = kernels(self.backend, kernel_op(opname))
        lay = self._layout(dtype, m)
        bnd = self._bind(lay, ib, ob)
        return _LastCall(_ref(sendbuf), _ref(recvbuf), op, count, _sig(sendbuf), _sig(recvbuf), lay, bnd, k, opname)

    def _block_count(self, ib, ob, count) -> int:
        """Elements per block, checked against both buffers."""
        m = count
        for arr, blocks, what in ((ib, self._in_blocks, "sendbuf"), (ob, self._out_blocks, "recvbuf")):
            if arr is None:
                continue
            if m is None:
                if arr.size % blocks:
                    raise BufferMismatchError(
                        f"{what} has {arr.size} elements, not a multiple of the {blocks} blocks of {self.collective.kind} on {self.size} ranks"
                    )
                m = arr.size // blocks
            elif arr.size != blocks * m:
                raise BufferMismatchError(
                    f"{what} has {arr.size} elements but {self.collective.kind} on {self.size} ranks with "
                    f"{m} element(s) per block expects {blocks * m}"
                )
        return int(m)

    # ------------------------------------------------------------ inspection
    def describe(self, dtype: Any = np.float32, count: int = 1 << 20) -> str:
        """One line about the compiled program for blocks of ``count`` elements of ``dtype``."""
        lay = build_layout(
            self._program, np.dtype(dtype), count,
            chunk_factor=self._cf, scratch_chunks=self.schedule.scratch_chunks, in_blocks=self._in_blocks,
            out_blocks=self._out_blocks, slice_bytes=self.slice_bytes, peers=self.roles,
            tag_limit=self._tags.slice_limit, rank=self.rank,
        )
        sends = sum(1 for k in lay.kind if k == K_SEND)
        recvs = sum(1 for k in lay.kind if k in (K_RECV, K_RRED))
        return (
            f"rank {self.rank}: {self.schedule.name} ({self.collective.describe()}): {self.n_ops} ops -> "
            f"{lay.n_nodes} slice nodes ({sends} send, {recvs} receive slices), staging {lay.staging_len} x {lay.dtype.name}"
        )

    @property
    def cached_bytes(self) -> int:
        """Bytes of the buffers this schedule keeps between runs (layouts and stand-ins)."""
        return sum(lay.entry.nbytes for lay in self._layouts.values() if lay.entry is not None) + sum(
            e.nbytes for _, e in self._private.values())

    def free(self) -> None:
        """Drop the cached layouts, bindings and buffers (they are rebuilt on demand)."""
        self._fast = None
        budget = self._budget
        for lay in self._layouts.values():
            budget.forget(lay.entry)
            self._forget_layout(lay)
        self._layouts.clear()
        for _, e in self._private.values():
            budget.forget(e)
        self._private.clear()

    def __repr__(self) -> str:
        return f"CompiledSchedule({self.schedule.name!r}, rank {self.rank} of {self.size}, {self.n_ops} ops)"
