"""One communicator's calls: number each, run it on a phase plan, a schedule or the MPI library; errors reach every rank.

:class:`Calls` is the machinery behind the drop-in communicator's
collectives (:mod:`~ccsynth.collectives.communicator` is its table of
contents). A blocking call (:meth:`Calls.blocking`):

1. waits for the non-blocking calls started before it and numbers itself
   on the communicator's private channel (every rank numbers every call,
   so the numbers agree; every message carries its call's number in its
   tag, :mod:`~ccsynth.collectives.runtime.channel`);
2. takes array-likes as arrays, waits for ``stream=``, and stages device
   buffers through host memory where the MPI library cannot read them
   (:mod:`~ccsynth.collectives.staging`);
3. replays the last call if it is the same call on the same arrays
   (:mod:`~ccsynth.collectives.schedule_cache`), else reads its arguments
   (:mod:`~ccsynth.collectives.block_collectives`,
   :mod:`~ccsynth.collectives.vcollectives`) and :meth:`Calls.run`\\ s it:
   on the multi-dimension phase plans where they cover it
   (:mod:`~ccsynth.collectives.phased_calls`), else on the plan's schedule
   for its size, else on the MPI library's own collective
   (:mod:`~ccsynth.collectives.fallback`).

A non-blocking call (:meth:`Calls.start`) runs the same way on the
communicator's progress thread (:mod:`~ccsynth.collectives.requests`).

Errors. An error that only one rank sees is raised on *every* rank of
the call: the rank tells the others on a control line of its own
(:mod:`~ccsynth.collectives.runtime.control`), and they raise the same
error class, naming the rank and the reason ("rank 1 failed in allreduce
(call 7 on this communicator) with BufferMismatchError: sendbuf is not
contiguous ..."), instead of waiting for it. Since every message carries
its call's number, a program may catch such an error and go on: no later
call can consume a message of the failed one. Mistakes that only one rank
makes and cannot see (a different count on rank 2) show up when a message
arrives: the executor checks the length of every message it receives. In
debug mode the ranks also compare every call's signature first
(:mod:`~ccsynth.collectives.agreement`).
"""

from __future__ import annotations

import os
import sys
import weakref
import zlib
from functools import partial
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from mpi4py import MPI

from ccsynth.collectives.agreement import agree_on_args, agree_on_call, agree_on_setup, call_signature
from ccsynth.collectives.call_guard import CallGuard, thread_name, thread_tag
from ccsynth.collectives.buffer_specs import OpNames, backend_for, front, is_in_place, mpi_op_of
from ccsynth.collectives.executor import CompiledSchedule, timeout_from_env
from ccsynth.collectives.fallback import MPIFallback
from ccsynth.collectives.phased_calls import PhasedCalls
from ccsynth.collectives.plan_sources import layered, plan_fingerprint, resolve_plan
from ccsynth.collectives.private_buffers import PrivateBuffers
from ccsynth.collectives.requests import NonBlocking, Request, completed
from ccsynth.collectives.runtime.channel import Channel
from ccsynth.collectives.runtime.memory import cache_bytes_from_env
from ccsynth.collectives.runtime.primitives import mpi_calls, resolve_wait_mode
from ccsynth.collectives.fast_path import CallArgs, mpi_call, mpi_replay
from ccsynth.collectives.plan import MPI_ALGORITHM
from ccsynth.collectives.runtime.watchdog import Watchdog
from ccsynth.collectives.schedule import Schedule
from ccsynth.collectives.schedule_cache import MPI_PICK, ScheduleCache
from ccsynth.collectives.staging import DeviceStaging, Stager, is_device_spec, run_on_host, wait_stream
from ccsynth.collectives.vschedule import VScheduleCache
from ccsynth.errors import CCSynthError, ConcurrentCallError, PlanError, ScheduleError
from ccsynth.kernels.base import DTYPES, Backend, get_backend, is_device_array
from ccsynth.kernels.devices import pick_device

__all__ = ["CallOptions", "Impl", "Calls"]

_REDUCING = frozenset(("allreduce", "reduce_scatter", "reduce"))
_KERNEL_DTYPES = frozenset(DTYPES)

#: a collective's argument handling: ``impl(calls, sendbuf, recvbuf, op, root)``
Impl = Callable[["Calls", Any, Any, Any, Any], None]


@dataclass(frozen=True)
class CallOptions:
    """A communicator's settings, fixed when it is built (see :class:`~ccsynth.collectives.communicator.Communicator`)."""

    backend: str
    fallback: bool
    debug: bool
    slice_bytes: int | None
    static_max_bytes: int
    timeout: float | None
    device: int | None  # the GPU the progress thread works on
    staging: str  # device buffers through host memory: auto, always, never


class Calls:
    """The calls of one communicator (see the module doc).

    ``comm`` is the wrapped mpi4py communicator, ``channel`` the private
    one the schedules run on, ``plan`` the user's plan over ``default_plan``
    (:meth:`open` makes them from a communicator's arguments);
    ``phases`` a phase source for multi-dimension networks (collective:
    builds one sub-communicator per dimension group).
    """

    @classmethod
    def open(cls, comm, plan, default_plan, *, backend: str, fallback: bool, slice_bytes: int | None,
             debug: bool | None, static_max_bytes: int, timeout: float | None, cache_bytes: int | None,
             device, staging: str, phases=None, phase_threads: bool | str = "auto") -> Calls:
        """Check a communicator's arguments, make its private channel and agree with the other ranks (collective).

        The arguments are the :class:`~ccsynth.collectives.communicator.Communicator`'s;
        bad ones raise on this rank before any communication, except a plan
        this rank cannot use, which every rank raises after the agreement
        (:func:`~ccsynth.collectives.agreement.agree_on_setup`).
        """
        stage = DeviceStaging(staging, MPI)  # an unknown mode fails first
        gpu = pick_device(device, comm.Get_rank())
        try:
            resolved, plan_error = resolve_plan(plan, default_plan, comm.Get_size()), None
        except PlanError as e:  # told to every rank in agree_on_setup, then raised everywhere
            resolved, plan_error = default_plan, e
        if backend not in ("auto", "numpy", "cupy"):
            raise CCSynthError(f"unknown buffer backend {backend!r}; choose auto, numpy or cupy")
        if debug is None:
            debug = bool(int(os.environ.get("CCSYNTH_DEBUG", "0") or 0))
        options = CallOptions(backend, fallback, bool(debug), slice_bytes, static_max_bytes, timeout_from_env(timeout),
                              gpu, staging)
        # private: never mixes with the program's messages; numbers the calls; the control line
        channel = Channel.build(comm, MPI, private=True, cache_bytes=cache_bytes_from_env(cache_bytes))
        fingerprint = plan_fingerprint(resolved if resolved is not default_plan else None)
        if getattr(default_plan, "mpi", None) is False:  # CCSYNTH_DEFAULT_MPI=0 on this rank: another default plan
            fingerprint += " (default plan without MPI's collective)"
        try:
            agree_on_setup(channel.comm, slice_bytes, static_max_bytes, fingerprint, plan_error)
        except CCSynthError:
            channel.close(free=True)  # every rank raises here: release the private communicator
            raise
        return cls(comm, channel, resolved, default_plan, options, stage, phases=phases, phase_threads=phase_threads,
                   cache_bytes=cache_bytes)

    def __init__(self, comm, channel: Channel, plan, default_plan, options: CallOptions, staging: DeviceStaging, *,
                 phases=None, phase_threads: bool | str = "auto", cache_bytes: int | None = None) -> None:
        self.comm = comm
        self.channel = channel
        self.plan, self.default_plan = plan, default_plan
        self.rank, self.size = channel.rank, channel.size
        self.options = options
        self.debug = options.debug
        self.mpi = mpi_calls(MPI, resolve_wait_mode("auto"), 1, options.timeout)
        self.staging = staging
        self.stager = Stager()  # host stand-ins of device buffers
        self.fallback = MPIFallback(comm, channel, self.mpi, allowed=options.fallback)
        self.cache = ScheduleCache(layered(plan, default_plan, self.size), channel, slice_bytes=options.slice_bytes,
                                   static_max_bytes=options.static_max_bytes, timeout=options.timeout)
        self.scratch = PrivateBuffers(channel)
        self.vschedules = VScheduleCache()  # the explicit schedules of v-calls, by counts signature
        self.ops = OpNames()
        # a function of the device alone, not a bound method: the thread must not keep this object alive (a
        # reference cycle would outlive the communicator until a garbage collection, at another moment on each rank)
        self.nonblocking = NonBlocking(comm, f"ccsynth-progress-{self.rank}",
                                       init=partial(_use_device, self.options.device))
        self.phases = None if phases is None else PhasedCalls(
            phases, comm, channel, self.mpi, slice_bytes=options.slice_bytes, timeout=options.timeout,
            threads=phase_threads, cache_bytes=cache_bytes)
        self.guard = CallGuard(self.rank, on_poison=channel.poison)  # one thread at a time
        # the call's signature in its tags, where a watchdog can turn a mismatch into an error (runtime.watchdog)
        self.signing = bool(self.size > 1 and channel.tags.hash_bits and MPI.Query_thread() == MPI.THREAD_MULTIPLE)
        self.watchdog = Watchdog(channel, f"ccsynth-watchdog-{self.rank}") if self.signing else None
        if self.watchdog is not None:
            weakref.finalize(self, self.watchdog.stop)
        self.last_algorithm = ""  # what ran the last call: a schedule name or MPI_ALGORITHM
        self.current: CallArgs | None = None  # the call in progress (its buffers held while it runs, never after)
        self._agreed = 0  # debug: the call whose signature the ranks agreed on

    # ------------------------------------------------------------ the plan
    def set_plan(self, plan) -> None:
        """A new plan (None: the default), from the next call on (after the non-blocking calls started before)."""
        self.drain()
        self.plan = resolve_plan(plan, self.default_plan, self.size)
        self.cache.lookup = layered(self.plan, self.default_plan, self.size)

    @property
    def plan_fingerprint(self) -> str:
        """The hash of the plan that the ranks compared (``"default"`` for the default one)."""
        return plan_fingerprint(self.plan if self.plan is not self.default_plan else None)

    # ------------------------------------------------------------ entry
    def blocking(self, kind: str, impl: Impl, sendbuf, recvbuf, op, root, stream) -> None:
        """One blocking call from the user's thread (one thread at a time: :mod:`~ccsynth.collectives.call_guard`)."""
        guard = self.guard
        guard.enter()
        try:
            self.call(kind, impl, sendbuf, recvbuf, op, root, stream, thread_tag())
        finally:
            guard.leave()

    def call(self, kind: str, impl: Impl, sendbuf, recvbuf, op, root, stream, caller: int) -> None:
        """One call (from thread ``caller``): number it, replay it if it repeats a call (the fast path), else take
        array-likes as arrays and run ``impl``; errors reach every rank."""
        nonblocking = self.nonblocking
        if nonblocking.thread is not None:
            nonblocking.wait_turn()
        ch = self.channel
        ch.caller = caller
        ch.open_call()
        try:
            if stream is None and not self.debug:
                hit = self.cache.fast.lookup(kind, sendbuf, recvbuf, op, root)
                if hit is not None:  # the same call on the same arrays (mod:`~ccsynth.collectives.fast_path`)
                    try:
                        hit.run()
                    except BaseException:
                        self.cache.fast.forget()
                        raise
                    self.last_algorithm = hit.name
                    if ch.poisoned is not None:  # a second thread came in meanwhile: the pairing is in doubt
                        raise ch.poisoned
                    return
            if sendbuf is not None and type(sendbuf) is not np.ndarray:
                sendbuf = front(sendbuf, kind == "broadcast" and self.rank != root)
            if recvbuf is not None and type(recvbuf) is not np.ndarray:
                recvbuf = front(recvbuf, True)
            if stream is not None:
                wait_stream(stream)
            if type(recvbuf) is not np.ndarray and (is_device_spec(sendbuf) or is_device_spec(recvbuf)) \
                    and self._must_stage(kind):
                run_on_host(self.stager, kind, lambda s, r, o, ro: impl(self, s, r, o, ro), sendbuf, recvbuf, op,
                            root, in_place=is_in_place(sendbuf), at_root=self.rank == root)
                return
            impl(self, sendbuf, recvbuf, op, root)
            if self.channel.poisoned is not None:  # a second thread came in meanwhile: the pairing is in doubt
                raise self.channel.poisoned
        except BaseException as e:
            if isinstance(e, ConcurrentCallError):
                self.guard.poison(e)
            self.failed(e, kind)
            raise
        finally:
            self.current = None
            ch.busy = False

    def start(self, kind: str, impl: Impl, sendbuf, recvbuf, op, root, stream) -> Request:
        """A non-blocking call: queued on the progress thread (see :mod:`~ccsynth.collectives.requests`)."""
        if stream is not None:
            wait_stream(stream)  # the work queued before the call, now
        if self.nonblocking.thread is None and self.size > 1 and MPI.Query_thread() < MPI.THREAD_MULTIPLE:
            self.fallback.tell(("nonblocking", "threads"), "the MPI library was initialized without "
                               "MPI_THREAD_MULTIPLE: non-blocking calls run inside the call (no overlap)")
            try:
                self.blocking(kind, impl, sendbuf, recvbuf, op, root, None)
            except CCSynthError as e:
                return completed(kind, e)
            return completed(kind)
        guard = self.guard
        guard.enter()  # in flight until the progress thread has run it
        caller = thread_tag()

        def job() -> None:
            try:
                self.call(kind, impl, sendbuf, recvbuf, op, root, None, caller)
            finally:
                guard.leave()

        # the first one is collective: every rank makes its first non-blocking call here
        try:
            return self.nonblocking.submit(job, kind)
        except BaseException:
            guard.leave()
            raise

    def failed(self, e: BaseException, kind: str) -> None:
        """This rank's call raised ``e``: in debug mode the ranks still agree, else tell the others."""
        ch = self.channel
        if self.debug and self._agreed != ch.seq and isinstance(e, Exception):
            self.agree(f"error in {kind} (call {ch.seq}): {type(e).__name__}: {e}", error=e)
        if self.phases is not None:
            self.phases.failed(e, kind)
        ch.call_failed(e, kind)

    def agree_args(self, what: str, state: int, sig: str, error: BaseException | None, row=None):
        """Every rank's local checks of this call, agreed first (:func:`~ccsynth.collectives.agreement.agree_on_args`)."""
        self._agreed = self.channel.seq
        return agree_on_args(self.channel, what, state, sig, error, row)

    def agree(self, sig: str, error: BaseException | None = None) -> None:
        """Debug mode: the ranks agree on this call's signature (:func:`~ccsynth.collectives.agreement.agree_on_call`)."""
        self._agreed = self.channel.seq
        agree_on_call(self.channel, sig, error)

    # ------------------------------------------------------------ running
    def run(self, kind: str, nbytes: int, m: int, dtype, opname, root: int, like, sendarr, recvarr,
            fallback: Callable[[], None], copy_of=None) -> None:
        """Run a phase plan or schedule if one covers the call, else the MPI library's collective (``fallback()``).

        ``nbytes`` is the call's message size (the larger per-rank buffer),
        ``m`` the elements per block, ``like`` the array whose backend runs
        it. ``copy_of`` (an in-place call): the schedule's input is a
        private copy of this array, made first on every run of the call
        (the MPI library takes the in-place call as it is).
        """
        if self.debug:
            self.agree(call_signature(self.channel.seq, kind, m, dtype, opname, root))
        self.channel.memory.note_message(nbytes)
        if self.phases is not None:
            name = self.phases.run(kind, nbytes, dtype, opname, like, sendarr, recvarr, copy_of)
            if name is not None:
                self.last_algorithm = name
                return
        schedule, reason = self._choose(kind, nbytes, dtype, opname)
        if schedule is MPI_PICK:
            self._run_mpi(kind, opname, like, recvarr, fallback)
            return
        if schedule is not None:
            backend = self.backend_for(like)
            cs = self.cache.compiled_for(schedule, backend, root)
            if cs.supports_call(m, dtype):
                # not the count: a different count is found at once by the length of the first message it changes
                key = (kind, np.dtype(dtype).name, opname, root) if self.signing else None
                self._run_schedule(cs, backend, schedule.name, kind, m, opname, like, sendarr, recvarr, copy_of, key)
                return
            reason = f"schedule {schedule.name!r} cannot split {m} elements into its chunks"
        self.fallback.check_allowed(f"no ccsynth schedule for {kind} of {nbytes} bytes on {self.size} ranks ({reason})")
        self.fallback.tell((kind, reason), "%s of %d bytes on %d ranks: %s; using the MPI library's own %s",
                           kind, nbytes, self.size, reason, kind)
        if is_device_array(like):
            get_backend("cupy").synchronize()
        fallback()
        self.last_algorithm = "mpi"

    def _choose(self, kind: str, nbytes: int, dtype, opname) -> tuple[Any, str]:
        """The plan's schedule for the call, :data:`MPI_PICK` (the plan names MPI's collective), or None and why not."""
        if opname is None:
            return None, "op has no ccsynth kernel"
        if kind in _REDUCING and dtype not in _KERNEL_DTYPES:
            return None, f"dtype {np.dtype(dtype).name} has no ccsynth kernel"
        schedule = self.cache.choice(kind, nbytes)
        if schedule is None:
            return None, "no schedule in the plan covers this size"
        if not isinstance(schedule, Schedule):  # MPI_PICK
            return schedule, ""
        if schedule.n_ranks != self.size:
            raise ScheduleError(
                f"the plan gave schedule {schedule.name!r} for {schedule.n_ranks} ranks to a {self.size}-rank communicator"
            )
        return schedule, ""

    def _run_mpi(self, kind: str, opname, like, recvarr, fallback: Callable[[], None]) -> None:
        """The plan's choice is the MPI library's own collective: run it, and keep it as the call's replay.

        It runs as MPI's blocking collective (as fast as the caller's own
        mpi4py call); with a ``timeout`` or in debug mode as its non-blocking
        form waited for beside the control line (``fallback()``,
        :meth:`~ccsynth.collectives.fallback.MPIFallback.run`).
        """
        device = is_device_array(like)
        if device:
            get_backend("cupy").synchronize()
        call = self.current
        if self.options.timeout is not None or self.debug or call is None or call.kind != kind:
            fallback()
            self.last_algorithm = MPI_ALGORITHM
            return
        after = replay_after = None
        if opname == "avg" and recvarr is not None:  # the MPI library's sum, then the division
            be = self.backend_for(recvarr)
            after = partial(be.divide, recvarr, self.size)
            replay_after = None if device else partial(be.divide, get_backend("numpy").alias(recvarr), self.size)
        # bound methods of parts that do not hold this object: the replay must not make a reference cycle
        mpi_op, comm_of = mpi_op_of(opname), self.nonblocking.mpi_comm
        run = mpi_call(kind, call.sendbuf, call.recvbuf, mpi_op, call.root, comm_of, after)
        if run is None:
            fallback()
            self.last_algorithm = MPI_ALGORITHM
            return
        run()
        self.last_algorithm = MPI_ALGORITHM
        replay = None if device else mpi_replay(call, mpi_op, get_backend("numpy").alias, comm_of, replay_after)
        if replay is not None:
            self.cache.remember(call, replay, MPI_ALGORITHM)

    def _run_schedule(self, cs: CompiledSchedule, backend: Backend, name: str, kind: str, m: int, opname, like,
                      sendarr, recvarr, copy_of, key: tuple | None = None) -> None:
        """Run the compiled schedule, and keep the run as the call's replay (see :mod:`~ccsynth.collectives.schedule_cache`)."""
        pre = None
        # the replay is kept between calls: it must not keep the caller's arrays alive, so it holds views that
        # own nothing (valid while the same arrays are passed: see ScheduleCache.replay)
        alias = backend.alias
        if recvarr is not None:
            recvarr = alias(recvarr)
        if copy_of is not None:
            sendarr, entry = self.scratch.get("in", backend, like, copy_of.size)
            pre = self.scratch.copier(sendarr, alias(copy_of), entry, backend)
        elif sendarr is not None:
            sendarr = alias(sendarr)
        run, device = cs.execute, backend.is_device
        sync, op_run = backend.synchronize, opname or "sum"
        count = m if (sendarr is None and recvarr is None) else None
        ch = self.channel
        sign = Signer(key) if key is not None else None

        def replay() -> None:
            if sign is not None:
                sign(ch)
            if pre is not None:
                pre()
            if device:
                sync()  # the caller's kernels that produced sendbuf
            run(sendarr, recvarr, op_run, count=count)

        replay()
        self.last_algorithm = name
        call = self.current
        if not self.debug and call is not None and call.kind == kind:
            self.cache.remember(call, replay, name, exclusive=pre is not None)

    def plain(self, name: str, reason: str, start: Callable) -> None:
        """A call ccsynth cannot parse (``reason``): the MPI library's own, ``start()`` its non-blocking form."""
        if self.debug:
            self.agree(f"{name.lower()} (call {self.channel.seq}) handed to the MPI library: {reason}")
        self.fallback.check_allowed(f"{name}: {reason}, and fallback to the MPI library is off")
        self.fallback.tell((name, reason), "%s: %s; using the MPI library's own %s", name, reason, name)
        self.fallback.run(name, start)
        self.last_algorithm = "mpi"

    def mpi_pick(self, name: str, start: Callable) -> None:
        """The plan names the MPI library's own collective for this call: run it (no notice: it is a choice)."""
        if self.debug:
            self.agree(f"{name.lower()} (call {self.channel.seq}) run by the MPI library, the plan's choice")
        self.fallback.run(name, start)
        self.last_algorithm = MPI_ALGORITHM

    def mpi_collective(self, name: str, start: Callable) -> None:
        """The MPI library's own collective, waited for with the control line watched (:meth:`MPIFallback.run`)."""
        self.fallback.run(name, start)

    def coll_comm(self):
        """Where the MPI library's own collectives run: the wrapped comm, or in the progress thread a Dup of it."""
        return self.nonblocking.mpi_comm()

    # ------------------------------------------------------------ buffers
    def backend_for(self, arr) -> Backend:
        return backend_for(arr, self.options.backend)

    def private(self, role: str, like, n: int):
        """``n`` elements of private memory like ``like`` (:mod:`~ccsynth.collectives.private_buffers`): ``(view, entry)``."""
        return self.scratch.get(role, self.backend_for(like), like, n)

    def finish_avg(self, opname, out) -> None:
        """``avg`` on the MPI library's sum: divide by the rank count."""
        if opname == "avg" and out is not None:
            be = self.backend_for(out)
            be.divide(out, self.size)
            if be.is_device:
                be.synchronize()

    def _must_stage(self, kind: str) -> bool:
        stage = self.staging.needed(kind)
        if stage:
            aw = self.staging.awareness
            self.fallback.tell(("staging",), "device buffers are staged through pinned host memory (MPI library "
                               "CUDA-aware: %s, from %s; staging=%r)", aw.aware, aw.source, self.staging.mode)
        return stage

    # ------------------------------------------------------------ the end
    def drain(self) -> None:
        """Wait until every non-blocking call started so far has completed."""
        self.nonblocking.drain()

    def free(self) -> None:
        """Stop the progress thread (after its calls), release the programs, buffers and the private channel."""
        self.nonblocking.close()
        self.cache.fast.forget()
        if self.watchdog is not None:
            self.watchdog.stop()
        if self.phases is not None:
            self.phases.free()
        self.cache.free()
        self.scratch.clear()
        self.vschedules.clear()
        self.stager.clear()
        self.channel.memory.clear()
        self.channel.close(free=True)


class Signer:
    """What one call site puts in its tags (:class:`Channel`'s ``base``, ``expect``, ``sig_key``): ``key``
    (collective, dtype, op, root) and the calling thread's name, hashed once per calling thread."""

    __slots__ = ("by_caller", "key", "kind")

    def __init__(self, key: tuple) -> None:
        self.kind, self.key = key[0], key
        self.by_caller: dict[int, tuple[int, int, tuple]] = {}

    def __call__(self, ch: Channel) -> None:
        hit = self.by_caller.get(ch.caller)
        if hit is None:
            full = self.key + (thread_name(ch.caller),)
            tags = ch.tags
            field = tags.call_field(zlib.crc32(repr(full).encode()))
            hit = self.by_caller[ch.caller] = (field, tags.signature(self.kind) | field, full)
        ch.base |= hit[0]
        ch.expect = hit[1]
        ch.sig_key = hit[2]


def _use_device(device: int | None) -> None:
    """The progress thread works on the communicator's device (CuPy's current device is per thread)."""
    if device is not None:
        sys.modules["cupy"].cuda.Device(device).use()
