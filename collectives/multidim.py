"""Run a phase plan over MPI: a sub-communicator per dimension group, chunks pipelined across dimensions.

:class:`PhasedRunner` executes a :class:`~ccsynth.collectives.phase_plan.PhasePlan`
(reduce-scatter, allgather or allreduce as per-dimension phases on chunks
of the buffer) on the ranks of an MPI communicator:

* **Groups.** Ranks take mixed-radix coordinates in rank order, dimension 0
  varying fastest. For every active dimension the constructor splits the
  communicator (``Comm_split``, a collective call) into the groups of ranks
  that differ in that coordinate only, ordered by it, so that a rank's
  coordinate is its rank in its group.
* **Phases.** A phase is one of the plan's schedules (a ring or direct
  reduce-scatter or allgather on ``p`` ranks), compiled once per
  sub-communicator into a :class:`~ccsynth.collectives.executor.CompiledSchedule`
  and run on a contiguous range of the chunk's working buffer: the range a
  rank holds before a reduce-scatter phase is ``p`` blocks (its block is
  the one of its coordinate), the one after an allgather phase likewise.
  Two working buffers per chunk take turns as a phase's input and output,
  so no phase copies.
* **Layout.** A chunk of the caller's buffer is cut into ``n`` slots, one
  per rank, in the plan's order (:meth:`PhasePlan.slot`); allreduce pads
  the chunk to a multiple of ``n`` elements (the padding is reduced with
  the rest and dropped: element-wise ops never mix positions), reduce-scatter
  packs every rank's block into its slot first, allgather unpacks every
  slot into its place last. Odd counts and counts smaller than ``n`` work.
* **Pipelining.** With ``MPI_THREAD_MULTIPLE`` every active dimension gets
  a thread that runs its phases in the plan's order, each as soon as the
  chunk's previous phase is done (on another dimension's thread): chunk
  ``k``'s inter-node phase overlaps chunk ``k + 1``'s intra-node phase.
  Every rank runs every dimension's phases in the same order, and every
  phase comes after its predecessor in the plan's task order, so the run
  cannot deadlock (the first unfinished task in that order can always
  run). Without thread support (or ``threads=False``) the tasks run one
  after another in the plan's order.
* **Calls and failures** (issue 9's runtime, :mod:`~ccsynth.collectives.runtime.channel`).
  Every group has a :class:`~ccsynth.collectives.runtime.channel.Channel`
  of its own (tags with call numbers, a control line, a byte budget), and
  every phase is a compiled schedule executed inside *one* call per group
  and collective call: :meth:`PhasedRunner.run` is given the caller's call
  number ``seq`` and first brings every group's channel to it
  (:meth:`PhasedRunner.sync`, which opens the calls in between, so every
  rank's channels count alike whatever path the calls between took). The
  phases of one dimension within a call reuse slice tags; that is safe
  because each rank runs a dimension's phases one after another, in the
  same order on every rank, and MPI delivers the messages of one tag
  between two ranks in the order they were sent. A rank whose call fails
  (a local check, a peer's notice, a timeout) posts a notice for the call
  on *every* group's control line (:meth:`PhasedRunner.failed`); a rank
  waiting in a phase of that call wakes up and raises, and posts in turn
  on its other groups, so the error reaches every rank that still depends
  on it. The dimension threads of the failed rank stop the same way
  before :meth:`PhasedRunner.run` raises.

The plan must be the same on every rank (the public communicator computes
it from the topology on each rank and compares a checksum once). This
module never imports the synthesizer: the plan comes in as data.

Example (under ``mpiexec -n 4``; on one rank a plan has nothing to do)::

    runner = PhasedRunner(MPI.COMM_WORLD, (2, 2))
    runner.run(plan, sendbuf, recvbuf, "sum")
"""

from __future__ import annotations

import logging
import math
import threading
from dataclasses import dataclass
from typing import Any


from ccsynth.collectives.executor import CompiledSchedule
from ccsynth.collectives.mpi_util import mpi_comm
from ccsynth.collectives.phase_plan import PhasePlan
from ccsynth.collectives.runtime.channel import Channel, is_shared
from ccsynth.collectives.runtime.control import Notice
from ccsynth.errors import BufferMismatchError, CCSynthError, PlanError, TopologyError
from ccsynth.kernels.base import Backend, canonical_op, get_backend

__all__ = ["PhasedRunner", "WAIT_POLL_S", "JOIN_S"]

log = logging.getLogger(__name__)

#: how often a dimension's thread waiting for a chunk's previous phase checks whether another thread failed (s)
WAIT_POLL_S = 0.05
#: after a failure, how long the calling thread waits for the other dimensions' threads to stop (s)
JOIN_S = 30.0


@dataclass
class _Chunk:
    """One chunk of a call: its element range in the caller's buffer, slot size, and the two working buffers."""

    lo: int
    hi: int
    slot: int
    bufs: list  # two arrays of n * slot elements
    cur: int = 0  # which of the two holds the chunk's current data


class _Failed(Exception):
    """Internal: another dimension's thread failed; this one stops."""


class PhasedRunner:
    """Runs phase plans on ``comm``, whose ranks form the dimensions ``sizes`` (see the module docstring).

    Parameters:
        comm: an mpi4py intracommunicator of ``prod(sizes)`` ranks.
        sizes: every dimension's size, dimension 0 varying fastest.
        backend: ``"numpy"`` or ``"cupy"`` (or a backend object).
        slice_bytes: pipeline slice size of the phases' executors (same on every rank).
        threads: run every dimension on its own thread (``"auto"``: when MPI allows it).
        timeout: seconds a phase may wait without progress (:class:`~ccsynth.errors.CallTimeoutError`).
        cache_bytes: byte budget of each group channel's kept buffers.

    The constructor is collective (``Comm_split`` and the channels' ``Dup``).
    Raises :class:`~ccsynth.errors.TopologyError` (on every rank, before
    communicating) when the rank count does not match the dimensions.
    """

    def __init__(self, comm, sizes, *, backend: str | Backend = "numpy", slice_bytes: int | None = None,
                 threads: bool | str = "auto", timeout: float | None = None, cache_bytes: int | None = None):
        from mpi4py import MPI

        comm = mpi_comm(comm)  # a ccsynth.Communicator: the groups split the comm it wraps
        self.sizes = tuple(int(s) for s in sizes)
        if not self.sizes or any(s < 1 for s in self.sizes):
            raise TopologyError(f"dimension sizes must be positive integers, got {list(sizes)}")
        self.n = math.prod(self.sizes)
        size = comm.Get_size()
        if size != self.n:
            raise TopologyError(f"the dimensions {'x'.join(map(str, self.sizes))} have {self.n} ranks but the "
                                f"communicator has {size}")
        self._MPI = MPI
        self.rank = comm.Get_rank()
        self.backend = get_backend(backend)
        self.slice_bytes = slice_bytes
        self.timeout = timeout
        self.active = tuple(i for i, s in enumerate(self.sizes) if s >= 2)
        self.channels: dict[int, Channel] = {}
        for i in self.active:
            stride = math.prod(self.sizes[:i])
            coord = (self.rank // stride) % self.sizes[i]
            group = comm.Split(self.rank - coord * stride, coord)
            self.channels[i] = Channel.build(group, MPI, private=True, cache_bytes=cache_bytes)
            group.Free()  # the channel works on duplicates of it
        self.threaded = self._threads_allowed(threads)
        self._compiled: dict[tuple, tuple[Any, CompiledSchedule]] = {}
        self._posted = -1  # the last call whose failure this rank posted on every group
        self._seq = 0  # the call in progress

    def _threads_allowed(self, threads) -> bool:
        if threads is False or len(self.active) < 2:
            return False
        ok = self._MPI.Query_thread() >= self._MPI.THREAD_MULTIPLE
        if threads is True and not ok:
            raise CCSynthError("threads=True needs MPI_THREAD_MULTIPLE, which this MPI library did not grant")
        if not ok:
            log.info("MPI does not allow threads (MPI_THREAD_MULTIPLE): the dimensions' phases run one at a time")
        return ok

    def free(self) -> None:
        """Release the compiled phases and the group channels (collective: every rank calls it)."""
        for _, cs in self._compiled.values():
            cs.free()
        self._compiled.clear()
        for ch in self.channels.values():
            ch.memory.clear()
            ch.close(free=True)
        self.channels = {}

    @property
    def cached_bytes(self) -> int:
        """Bytes the group channels keep between calls."""
        return sum(ch.memory.total for ch in self.channels.values())

    # ------------------------------------------------------------ call numbers
    def sync(self, seq: int) -> None:
        """Bring every group's channel to call ``seq`` (opening the calls in between; see "Calls and failures").

        Raises a peer's error if a notice about ``seq`` is already here.
        """
        for ch in self.channels.values():
            while ch.seq < seq:
                ch.open_call()

    def failed(self, exc: BaseException, seq: int, what: str) -> None:
        """This rank's call ``seq`` failed with ``exc``: post it on every group's control line (once per call)."""
        if self._posted == seq:
            return
        self._posted = seq
        try:
            self.sync(seq)
        except CCSynthError:
            pass  # a peer's notice about this call: this rank's own notice goes out all the same
        notice = Notice(seq, self.rank, type(exc).__name__, what, str(exc))
        for ch in self.channels.values():
            if not ch.closed and ch.size > 1:
                ch.line.post(notice)
        log.debug("rank %d: call %d (%s) failed (%s); told every group", self.rank, seq, what,
                  "a peer's error" if is_shared(exc) else type(exc).__name__)

    # ------------------------------------------------------------ plan checks
    def _check(self, plan: PhasePlan) -> None:
        if plan.sizes != self.sizes:
            raise PlanError(f"the phase plan is for dimensions {list(plan.sizes)}, the runner for {list(self.sizes)}")
        if tuple(plan.dims) != self.active:
            raise PlanError(f"the phase plan's active dimensions {list(plan.dims)} are not {list(self.active)}")

    def _compiled_for(self, plan: PhasePlan, d: int, kind: str, algorithm: str) -> CompiledSchedule:
        sched = plan.schedule_for(d, kind, algorithm)
        key = (d, kind, algorithm, id(sched))
        hit = self._compiled.get(key)
        if hit is None:
            ch = self.channels[plan.dims[d]]
            cs = CompiledSchedule(sched, ch.comm, backend=self.backend, slice_bytes=self.slice_bytes,
                                  timeout=self.timeout, channel=ch)
            hit = self._compiled[key] = (sched, cs)  # the schedule is kept so that its id stays unique
        return hit[1]

    # ------------------------------------------------------------ run
    def run(self, plan: PhasePlan, sendbuf, recvbuf, op: str = "sum", *, seq: int | None = None):
        """Execute ``plan`` with ``sendbuf`` and ``recvbuf`` (flat arrays, MPI's sizes for the plan's kind).

        allreduce: both ``N`` elements; reduce_scatter: ``n * m`` and ``m``;
        allgather: ``m`` and ``n * m``. ``op`` is a ccsynth op name (``avg``
        sums, then divides). ``seq`` is the caller's call number (default:
        one more than the last): the run is that call on every group's
        channel. ``sendbuf`` may be a view of ``recvbuf`` (an in-place call):
        it is read completely before ``recvbuf`` is written. Returns
        ``recvbuf``. On an error this rank tells every group
        (:meth:`failed`) and raises.
        """
        if seq is None:
            seq = max((ch.seq for ch in self.channels.values()), default=0) + 1
        self._seq = seq
        try:
            self.sync(seq)
            self._run(plan, sendbuf, recvbuf, op)
        except BaseException as e:
            self.failed(e, seq, plan.kind)
            raise
        return recvbuf

    def _run(self, plan: PhasePlan, sendbuf, recvbuf, op: str) -> None:
        self._check(plan)
        opname = canonical_op(op) if plan.kind != "allgather" else "sum"
        run_op = "sum" if opname == "avg" else opname
        chunks = self._chunks(plan, sendbuf, recvbuf)
        self._fill(plan, chunks, sendbuf)

        def task(k: int, i: int) -> None:
            self._phase(plan, chunks[k], k, i, run_op)

        live = [t for t in plan.tasks if chunks[t.chunk].slot > 0]
        if self.threaded:
            self._run_threaded(plan, live, task)
        else:
            for t in live:
                task(t.chunk, t.step)
        self._drain(plan, chunks, recvbuf)
        if opname == "avg":
            self.backend.divide(recvbuf, self.n)
        if self.backend.is_device:
            self.backend.synchronize()

    def _chunks(self, plan: PhasePlan, sendbuf, recvbuf) -> list[_Chunk]:
        n, total = self.n, plan.total_units
        if plan.kind == "allreduce":
            count, want = recvbuf.size, (recvbuf.size, recvbuf.size)
        elif plan.kind == "reduce_scatter":
            count, want = recvbuf.size, (n * recvbuf.size, recvbuf.size)
        else:
            count, want = sendbuf.size, (sendbuf.size, n * sendbuf.size)
        if (sendbuf.size, recvbuf.size) != want or sendbuf.dtype != recvbuf.dtype:
            raise BufferMismatchError(
                f"{plan.kind} on {n} ranks needs buffers of {want[0]} and {want[1]} elements of one dtype, got "
                f"{sendbuf.size} ({sendbuf.dtype}) and {recvbuf.size} ({recvbuf.dtype})"
            )
        out, u0 = [], 0
        for c in plan.chunks:
            lo, hi = count * u0 // total, count * (u0 + c.units) // total
            u0 += c.units
            slot = -(-(hi - lo) // n) if plan.kind == "allreduce" else hi - lo
            bufs = [self.backend.zeros(n * slot, recvbuf.dtype), self.backend.empty(n * slot, recvbuf.dtype)]
            out.append(_Chunk(lo, hi, slot, bufs))
        return out

    def _fill(self, plan: PhasePlan, chunks: list[_Chunk], sendbuf) -> None:
        """Put the caller's input into every chunk's first working buffer (see "Layout")."""
        copy = self.backend.copy
        for k, c in enumerate(chunks):
            if c.slot == 0:
                continue
            a, size = c.bufs[0], c.hi - c.lo
            if plan.kind == "allreduce":
                copy(a[:size], sendbuf[c.lo:c.hi])
            elif plan.kind == "reduce_scatter":
                m = sendbuf.size // self.n
                for q in range(self.n):
                    j = plan.slot(q, k) * c.slot
                    copy(a[j:j + size], sendbuf[q * m + c.lo:q * m + c.hi])
            else:
                j = plan.slot(self.rank, k) * c.slot
                copy(a[j:j + size], sendbuf[c.lo:c.hi])

    def _drain(self, plan: PhasePlan, chunks: list[_Chunk], recvbuf) -> None:
        """Copy every chunk's result from its working buffer into the caller's output."""
        copy = self.backend.copy
        for k, c in enumerate(chunks):
            if c.slot == 0:
                continue
            w, size = c.bufs[c.cur], c.hi - c.lo
            if plan.kind == "allreduce":
                copy(recvbuf[c.lo:c.hi], w[:size])
            elif plan.kind == "reduce_scatter":
                j = plan.slot(self.rank, k) * c.slot
                copy(recvbuf[c.lo:c.hi], w[j:j + size])
            else:
                m = recvbuf.size // self.n
                for q in range(self.n):
                    j = plan.slot(q, k) * c.slot
                    copy(recvbuf[q * m + c.lo:q * m + c.hi], w[j:j + size])

    def _phase(self, plan: PhasePlan, c: _Chunk, k: int, i: int, op: str) -> None:
        """Phase ``i`` of chunk ``k`` on this rank's group of its dimension."""
        level, reduce = plan.step(k, i)
        order = plan.chunks[k].order
        d = order[level]
        p = self.sizes[plan.dims[d]]
        prefix = 0
        for e in order[:level]:
            prefix = prefix * self.sizes[plan.dims[e]] + plan.coordinate(self.rank, e)
        rest = math.prod(self.sizes[plan.dims[e]] for e in order[level:])
        start, block = prefix * rest * c.slot, rest // p * c.slot
        mine = start + plan.coordinate(self.rank, d) * block
        src, dst = c.bufs[c.cur], c.bufs[1 - c.cur]
        alg = plan.chunks[k].algorithms[level]
        if reduce:
            cs = self._compiled_for(plan, d, "reduce_scatter", alg)
            cs.execute(src[start:start + p * block], dst[mine:mine + block], op)
        else:
            cs = self._compiled_for(plan, d, "allgather", alg)
            cs.execute(src[mine:mine + block], dst[start:start + p * block])
        c.cur = 1 - c.cur

    def _run_threaded(self, plan: PhasePlan, tasks, task) -> None:
        """One thread per dimension, each running its phases in plan order (see "Pipelining")."""
        done = {(t.chunk, t.step): threading.Event() for t in tasks}
        failed: list[BaseException] = []
        stop = threading.Event()
        per_dim: dict[int, list] = {}
        for t in tasks:
            level, _ = plan.step(t.chunk, t.step)
            per_dim.setdefault(plan.chunks[t.chunk].order[level], []).append(t)

        def worker(mine) -> None:
            try:
                for t in mine:
                    if t.step > 0:
                        prev = done[(t.chunk, t.step - 1)]
                        while not prev.wait(WAIT_POLL_S):
                            if stop.is_set():
                                raise _Failed()
                    task(t.chunk, t.step)
                    done[(t.chunk, t.step)].set()
            except _Failed:
                pass
            except BaseException as e:  # handed to the calling thread
                failed.append(e)
                stop.set()

        threads = [threading.Thread(target=worker, args=(mine,), name=f"ccsynth-dim{d}", daemon=True)
                   for d, mine in sorted(per_dim.items())]
        for th in threads:
            th.start()
        for th in threads:
            while th.is_alive():
                th.join(WAIT_POLL_S)
                if failed:
                    break
            if failed:
                break
        if failed:
            # tell every group now: a thread of this rank blocked in a phase wakes when its peers raise in turn
            self.failed(failed[0], self._seq, plan.kind)
            stop.set()
            for th in threads:
                th.join(JOIN_S)
                if th.is_alive():
                    log.warning("rank %d: thread %s still waits in MPI %.0f s after the call failed", self.rank,
                                th.name, JOIN_S)
            raise failed[0]
