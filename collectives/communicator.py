"""A drop-in for an mpi4py communicator that runs ccsynth schedules.

:class:`Communicator` wraps an mpi4py intracommunicator and offers its
buffer-based collectives with the same signatures and conventions::

    from mpi4py import MPI
    import ccsynth
    comm = ccsynth.Communicator(MPI.COMM_WORLD, plan="plan.json")
    comm.Allreduce(sendbuf, recvbuf, op=MPI.SUM)
    comm.Allgather([sendbuf, MPI.FLOAT], recvbuf)
    comm.Allreduce(MPI.IN_PLACE, buf)
    comm.Barrier()                       # anything else goes to the wrapped comm

Covered: ``Allreduce``, ``Allgather``, ``Reduce_scatter_block``,
``Alltoall``, ``Bcast`` and ``Reduce``, with ``MPI.IN_PLACE`` where MPI
allows it (not for ``Bcast``; for ``Reduce`` only at the root), buffer specs
``buf``, ``[buf, MPI.FLOAT]``, ``[buf, count, MPI.FLOAT]``,
``[buf, (count, displ), MPI.FLOAT]`` (lists or tuples), NumPy arrays and
GPU arrays (anything with ``__cuda_array_interface__``, run on the CuPy
backend; that needs a CUDA-aware MPI). As in mpi4py, an explicit count of a
buffer cut into one block per rank (the receive buffer of ``Allgather``, both
buffers of ``Alltoall``, the send buffer of ``Reduce_scatter_block``) counts
the elements of one block. Ops: ``MPI.SUM``, ``MPI.PROD``, ``MPI.MIN``,
``MPI.MAX`` or ccsynth's names ``"sum"``, ``"prod"``, ``"min"``, ``"max"``,
``"avg"`` (floating point only).

Which algorithm: on each call the message size (nccl-tests convention: the
larger per-rank buffer in bytes) selects a schedule from the plan
(``plan.entry_for(kind, n_ranks, nbytes)``, or ``plan.select``). ``plan`` is
a :class:`~ccsynth.collectives.plan.Plan`, a path to a plan file, or None for
the default plan, which the caller passes in as ``default_plan`` (any object
with ``select``/``entry_for``/``kinds`` like a Plan). Which baseline to run at
which size is policy, built from the synthesizer's baselines, a layer above
this one: this module never imports :mod:`ccsynth.synth`. The public
``ccsynth.Communicator`` (:mod:`ccsynth.communicator`) is this class with the
built-in default plan of :mod:`ccsynth.synth.default_plan` passed in
(allreduce: one-shot below 4 KiB on up to 8 ranks, recursive doubling below
128 KiB, Rabenseifner above; other collectives: recursive doubling/halving
below 32 KiB, rings above, direct alltoall, binomial trees for broadcast and
reduce, built on first use for the communicator's size). Without either, the
plan is empty (:data:`NO_PLAN`) and every call goes to the MPI library.
Compiled programs are cached per schedule (and inside per dtype and count),
so a call costs the run and a few dictionary look-ups. Whatever no schedule
covers -- a size outside the plan, an op or dtype without a ccsynth kernel
(``MPI.BAND``, complex), derived datatypes -- goes to the MPI library's own
collective with the original arguments, logged at INFO once per collective
and size range (``fallback=False`` raises :class:`~ccsynth.errors.PlanError`
instead).

Errors: mismatched counts or dtypes between the buffers of a call,
non-contiguous or read-only arrays, unknown ops and ``avg`` on integers are
found on the rank that makes them, before any communication:
:class:`~ccsynth.errors.BufferMismatchError` naming the argument and the
size it should have, :class:`~ccsynth.errors.OpError`. A plan or schedule
for another rank count raises :class:`~ccsynth.errors.ScheduleError` on
every rank. An error that only one rank sees is raised on *every* rank of
the call: the rank tells the others on a control line of its own
(:mod:`~ccsynth.collectives.runtime.control`), and they raise the same
error class, naming the rank and the reason ("rank 1 failed in allreduce
(call 7 on this communicator) with BufferMismatchError: sendbuf is not
contiguous ..."), instead of waiting for it. Every call is numbered, and
every message carries its call's number in its tag
(:mod:`~ccsynth.collectives.runtime.channel`), so a program may catch such
an error and go on: no later call can consume a message of the failed one.
Mistakes that only one rank makes and cannot see (a different count on
rank 2) show up when a message arrives: the executor checks the length of
every message it receives, so a rank that receives fewer bytes than it
expects (which MPI accepts silently) or more (MPI truncates the message)
raises BufferMismatchError ("rank 1 expected 64 bytes from rank 2 but
received 56 ...: the ranks passed different counts"), and the others with
it. Pass ``debug=True`` (or set ``CCSYNTH_DEBUG=1``) while developing:
every call then first agrees on its signature (call number, collective,
count, dtype, op, root) with one small ``Allreduce``, and if the ranks
differ every rank raises BufferMismatchError listing every rank's call
(that also catches different dtypes of the same size, different roots and
a skipped call, which message lengths cannot show). ``timeout=`` (or
``CCSYNTH_TIMEOUT``) turns a wait without progress into
:class:`~ccsynth.errors.CallTimeoutError`. Calls that go to the MPI
library's own collective are waited for the same way; since MPI cannot
cancel a collective, a rank whose peer failed there aborts the job with a
message naming the rank and the reason. Install
:func:`~ccsynth.collectives.mpi_util.install_abort_handler` so that an
error nobody catches aborts the job.

Memory: the buffers kept between calls (in-place copies, staging areas,
stand-ins) stay within a byte budget (``cache_bytes``; default
``max(32 MiB, 2 x the largest message)``; see
:mod:`~ccsynth.collectives.runtime.memory`), and the caller's arrays are
never kept alive by a cache (only by the replay of the last call).

The communicator sends its point-to-point traffic on a duplicate of the
wrapped communicator (``comm.Dup()`` in the constructor, a collective call),
so it never mixes with the program's own messages; ``Free()`` (on every
rank) releases it.
"""

from __future__ import annotations

import logging
import os
import sys
import weakref
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from ccsynth.collectives.executor import CompiledSchedule, timeout_from_env
from ccsynth.collectives.phased_calls import PhasedCalls
from ccsynth.collectives.plan import Plan, load_plan
from ccsynth.collectives.runtime.channel import Channel, mark_shared
from ccsynth.collectives.runtime.memory import Entry, cache_bytes_from_env
from ccsynth.collectives.runtime.primitives import WaitTimedOut, mpi_calls, resolve_wait_mode
from ccsynth.collectives.static_program import STATIC_MAX_BYTES
from ccsynth.collectives.schedule import Schedule
from ccsynth.errors import BufferMismatchError, CCSynthError, OpError, PlanError, ScheduleError
from ccsynth.kernels.base import (
    DTYPES,
    canonical_op,
    get_backend,
    is_device_array,
    is_mpi_op,
    mpi_op_name,
)

__all__ = ["Communicator", "NO_PLAN"]

log = logging.getLogger(__name__)

# The default plan of a communicator built without one: no schedules, every call goes to the MPI library.
NO_PLAN = Plan(())

_REDUCING = frozenset(("allreduce", "reduce_scatter", "reduce"))
_KERNEL_DTYPES = frozenset(DTYPES)


class _Fallback(Exception):
    """Internal: this call goes to the MPI library (reason in args[0])."""


@dataclass
class _Buf:
    array: Any  # flat, typed view (numpy or cupy)
    count: int  # elements per block
    explicit: bool  # count given in the spec


_UNCACHED = object()


def _spec_sig(spec):
    """What must stay the same for a buffer spec to be replayed (see Communicator._replay).

    Arrays: dtype, shape and strides (the same object keeps its memory);
    None and ``MPI.IN_PLACE``: themselves; anything else (a list spec, a new
    object per call): never replayed.
    """
    if type(spec) is np.ndarray or is_device_array(spec):
        return (spec.dtype, spec.shape, spec.strides)
    if spec is None:
        return None
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and spec is mpi.IN_PLACE:
        return None
    return _UNCACHED


# MPI datatype -> numpy dtype, by mpi4py typecode
def _dtype_of(datatype) -> np.dtype:
    try:
        return np.dtype(datatype.tocode())
    except Exception:
        raise _Fallback(f"datatype {datatype!r} has no NumPy equivalent") from None


class Communicator:
    """mpi4py's buffer collectives, run by ccsynth schedules (see the module doc).

    Parameters:
        comm: the mpi4py intracommunicator to wrap (default ``MPI.COMM_WORLD``).
        plan: a :class:`~ccsynth.collectives.plan.Plan`, a plan file path, or
            None for ``default_plan``.
        default_plan: the plan used while ``plan`` is None: a Plan or any
            object with its ``select``/``entry_for``/``kinds`` methods
            (default :data:`NO_PLAN`: every call goes to the MPI library;
            ``ccsynth.Communicator`` passes the built-in baselines here).
        backend: ``"auto"`` (by array type), ``"numpy"`` or ``"cupy"``.
        fallback: use the MPI library's collective for calls no schedule
            covers (else raise :class:`PlanError`).
        slice_bytes: pipeline slice size of the executor (same on every rank;
            default 1 MiB for reducing collectives, 4 MiB for the others).
        static_max_bytes: calls whose messages are all at most this large and
            fit in one slice run as straight-line programs (less Python per
            message); 0 keeps the dataflow loop for every call. Same on every rank.
        debug: agree on every call's signature first (see the module doc).
        timeout: seconds a call may wait without progress before it raises
            :class:`~ccsynth.errors.CallTimeoutError` on the waiting ranks
            (default ``CCSYNTH_TIMEOUT``, else none: wait as MPI would).
        cache_bytes: the byte budget of the buffers kept between calls
            (default ``CCSYNTH_CACHE_BYTES``, else automatic:
            ``max(32 MiB, 2 x the largest message seen)``; 0 keeps nothing;
            see :mod:`~ccsynth.collectives.runtime.memory`).
        phases: a phase source (multi-dimension networks): allreduce,
            reduce-scatter and allgather run as its phase plans on one
            sub-communicator per dimension group
            (:mod:`~ccsynth.collectives.phased_calls`); ``phase_threads``
            runs each dimension on a thread of its own (``"auto"``: when MPI allows it).

    Example (any number of ranks; a one-rank plan has nothing to schedule)::

        >>> from mpi4py import MPI
        >>> import numpy as np
        >>> c = Communicator(MPI.COMM_SELF)
        >>> out = np.zeros(3)
        >>> c.Allreduce(np.arange(3.0), out, op=MPI.SUM)
        >>> out.tolist(), c.Get_size(), c.last_algorithm
        ([0.0, 1.0, 2.0], 1, 'mpi')
    """

    def __init__(
        self,
        comm=None,
        plan=None,
        *,
        default_plan=None,
        backend: str = "auto",
        fallback: bool = True,
        slice_bytes: int | None = None,
        debug: bool | None = None,
        static_max_bytes: int = STATIC_MAX_BYTES,
        timeout: float | None = None,
        cache_bytes: int | None = None,
        phases=None,
        phase_threads: bool | str = "auto",
    ):
        from mpi4py import MPI

        self._MPI = MPI
        self.comm = comm if comm is not None else MPI.COMM_WORLD
        if self.comm.Is_inter():
            raise CCSynthError("ccsynth.Communicator wraps intracommunicators only")
        self._size = self.comm.Get_size()
        self._rank = self.comm.Get_rank()
        self._default_plan = default_plan if default_plan is not None else NO_PLAN
        self._plan = self._resolve_plan(plan)
        if backend not in ("auto", "numpy", "cupy"):
            raise CCSynthError(f"unknown buffer backend {backend!r}; choose auto, numpy or cupy")
        self.backend = backend
        self.fallback = fallback
        self.slice_bytes = slice_bytes
        self.static_max_bytes = static_max_bytes
        self.debug = bool(int(os.environ.get("CCSYNTH_DEBUG", "0") or 0)) if debug is None else bool(debug)
        self.timeout = timeout_from_env(timeout)
        # private: never mixes with the program's messages; numbers the calls; the control line
        self._channel = Channel.build(self.comm, MPI, private=True, cache_bytes=cache_bytes_from_env(cache_bytes))
        self._mpi = mpi_calls(MPI, resolve_wait_mode("auto"), 1, self.timeout)
        self._agreed = 0  # debug: the call whose signature the ranks agreed on
        self._check_same_settings()
        self._compiled: dict[tuple, tuple[Schedule, CompiledSchedule]] = {}
        self._logged: set = set()
        self._scratch: dict[tuple, tuple[Any, Entry]] = {}
        self.last_algorithm: str = ""  # what ran the last call: a schedule name or "mpi"
        self._numpy = get_backend("numpy")
        self._last_op: tuple = (None, None)
        self._selected: dict[tuple[str, int], Any] = {}  # (kind, nbytes) -> schedule or None
        self._call: tuple = ()  # (kind, sendbuf, recvbuf, op, root) of the call in progress
        self._hit: tuple | None = None  # the last scheduled call and how to replay it (see _replay)
        self._phases = None if phases is None else PhasedCalls(
            phases, self.comm, self._channel, self._mpi, slice_bytes=slice_bytes, timeout=self.timeout,
            threads=phase_threads, cache_bytes=cache_bytes)

    # ----------------------------------------------------------- plumbing
    @property
    def plan(self):
        """The plan that picks a schedule per call (assigning a new one takes effect on the next call)."""
        return self._plan

    @plan.setter
    def plan(self, plan) -> None:
        self._plan = self._resolve_plan(plan)
        self._selected.clear()
        self._hit = None

    def _resolve_plan(self, plan):
        if plan is None:
            plan = self._default_plan
        if isinstance(plan, (str, os.PathLike)):
            plan = load_plan(plan)
        if not hasattr(plan, "select"):
            raise PlanError(f"plan must be a Plan, a plan file path or None, got {type(plan).__name__}")
        for entry in getattr(plan, "entries", ()):
            if entry.n_ranks == self._size:
                break
        else:
            if getattr(plan, "entries", None):
                sizes = sorted({e.n_ranks for e in plan.entries})
                log.info("plan has no entries for %d ranks (it covers %s); every call will use the MPI library",
                         self._size, sizes)
        return plan

    def __getattr__(self, name: str):
        # Everything not overridden (Get_rank, Barrier, Send, allreduce...) is the wrapped comm's.
        if name.startswith("__") or name in ("comm", "_MPI"):
            raise AttributeError(name)
        return getattr(self.comm, name)

    def __repr__(self) -> str:
        return f"<ccsynth.Communicator rank {self._rank} of {self._size}>"

    @property
    def size(self) -> int:
        return self._size

    @property
    def rank(self) -> int:
        return self._rank

    def Get_size(self) -> int:
        return self._size

    def Get_rank(self) -> int:
        return self._rank

    def Free(self) -> None:
        """Release the compiled programs, the cached buffers and the private communicators (not the wrapped comm)."""
        self._hit = None
        if self._phases is not None:
            self._phases.free()
        for _, cs in self._compiled.values():
            cs.free()
        self._compiled.clear()
        self._scratch.clear()
        self._channel.memory.clear()
        self._channel.close(free=True)

    @property
    def channel(self) -> Channel:
        """The private channel: call numbers, control line, buffer budget (:mod:`~ccsynth.collectives.runtime.channel`)."""
        return self._channel

    @property
    def cached_bytes(self) -> int:
        """Bytes of the buffers kept between calls (within the budget, see ``cache_bytes``)."""
        return self._channel.memory.total

    def _check_same_settings(self) -> None:
        """Every rank must cut messages alike: compare slice_bytes and static_max_bytes (one small Allreduce)."""
        if self._size < 2:
            return
        mine = [int(self.slice_bytes or 0), int(self.static_max_bytes)]
        v = np.array([x for a in mine for x in (a, -a)], dtype=np.int64)
        out = np.empty_like(v)
        self._channel.comm.Allreduce(v, out, op=self._MPI.MAX)
        if any(out[2 * i] != -out[2 * i + 1] for i in range(len(mine))):
            raise CCSynthError(
                f"the ranks built their Communicator with different settings (rank {self._rank}: "
                f"slice_bytes={self.slice_bytes}, static_max_bytes={self.static_max_bytes}); "
                f"every rank must pass the same values"
            )

    def _note(self, key, level, msg, *args) -> None:
        if key not in self._logged:
            self._logged.add(key)
            log.log(level, msg, *args)

    # ---------------------------------------------------------- buffers
    def _array(self, obj, what: str):
        if type(obj) is np.ndarray:
            return obj
        if isinstance(obj, np.ndarray):
            return obj
        if is_device_array(obj) and hasattr(obj, "dtype"):
            return obj
        try:
            return np.asarray(memoryview(obj))
        except TypeError:
            raise _Fallback(f"{what} of type {type(obj).__name__} is not a NumPy/CuPy array") from None

    def _parse(self, spec, what: str, blocks: int, required: bool = True, writable: bool = False) -> _Buf | None:
        """Buffer spec -> flat typed array and per-block count (mpi4py's rules); ``writable``: an output."""
        if type(spec) is np.ndarray and spec.ndim == 1 and spec.flags.c_contiguous and (
                spec.flags.writeable or not writable):
            # the common case, without building new views (keeps the executor's fast path)
            if spec.size % blocks:
                raise BufferMismatchError(
                    f"{what} has {spec.size} elements, not a multiple of the {blocks} ranks "
                    f"(one block per rank); expected {blocks} x count elements"
                )
            return _Buf(spec, spec.size // blocks, False)
        MPI = self._MPI
        if spec is None:
            if required:
                raise BufferMismatchError(f"{what} is None")
            return None
        count = displ = datatype = None
        if isinstance(spec, (list, tuple)):
            if len(spec) == 2:
                buf, second = spec
                if isinstance(second, (MPI.Datatype, str)):
                    datatype = second
                elif isinstance(second, (list, tuple)):
                    count, displ = second
                else:
                    count = second
            elif len(spec) == 3:
                buf, count, datatype = spec
                if isinstance(count, (list, tuple)):
                    count, displ = count
            elif len(spec) == 4:
                buf, count, displ, datatype = spec
            else:
                raise BufferMismatchError(f"{what}: a buffer spec is [buf, datatype] or [buf, count, datatype], got {len(spec)} items")
        else:
            buf = spec
        if isinstance(datatype, str):
            datatype = MPI.Datatype.fromcode(datatype)
        if isinstance(count, (list, tuple)) or isinstance(displ, (list, tuple)):
            raise _Fallback(f"{what} gives per-rank counts (vector form)")
        arr = self._array(buf, what)
        if not (arr.flags.c_contiguous or arr.flags.f_contiguous):
            raise BufferMismatchError(
                f"{what} is not contiguous (shape {arr.shape}, strides {arr.strides}); "
                f"pass a contiguous array (e.g. numpy.ascontiguousarray) of the same size"
            )
        if writable and not getattr(arr.flags, "writeable", True):
            raise BufferMismatchError(
                f"{what} is read-only (shape {arr.shape}, dtype {arr.dtype}); the collective writes into it: "
                f"pass a writable array"
            )
        flat = arr.reshape(-1, order="A") if arr.ndim != 1 else arr
        if datatype is not None:
            dt = _dtype_of(datatype)
            if dt != flat.dtype:
                if flat.nbytes % dt.itemsize:
                    raise BufferMismatchError(
                        f"{what} has {flat.nbytes} bytes, not a whole number of {datatype.Get_name()} ({dt.itemsize} bytes)"
                    )
                flat = flat.view(np.uint8).view(dt)
        start = int(displ or 0)
        avail = flat.size - start
        if count is not None:
            count = int(count)
            if count < 0 or start < 0 or count * blocks > avail:
                raise BufferMismatchError(
                    f"{what} spec asks for {blocks} x {count} element(s) from offset {start}, but the buffer has {flat.size}"
                )
            flat = flat[start:start + count * blocks]
            return _Buf(flat, count, True)
        if start:
            flat = flat[start:]
        if flat.size % blocks:
            raise BufferMismatchError(
                f"{what} has {flat.size} elements, not a multiple of the {blocks} ranks "
                f"(one block per rank); expected {blocks} x count elements"
            )
        return _Buf(flat, flat.size // blocks, False)

    def _is_in_place(self, spec) -> bool:
        return spec is self._MPI.IN_PLACE or (isinstance(spec, int) and spec == self._MPI.IN_PLACE)

    def _backend_for(self, arr):
        if type(arr) is np.ndarray and self.backend != "cupy":
            return self._numpy
        dev = is_device_array(arr)
        if self.backend == "auto":
            return get_backend("cupy" if dev else "numpy")
        if dev != (self.backend == "cupy"):
            raise BufferMismatchError(
                f"a {'GPU' if dev else 'host'} array was passed to a communicator forced to the {self.backend} backend"
            )
        return get_backend(self.backend)

    def _private(self, role: str, like, n: int):
        """``n`` elements of private memory like ``like`` (an in-place call's input copy), under the budget.

        One buffer per role, backend and dtype, grown when a call needs more;
        smaller calls use its front. Returns ``(view, entry)``.
        """
        be = self._backend_for(like)
        key = (role, be.name, like.dtype.str)
        budget = self._channel.memory
        now = self._channel.seq
        hit = self._scratch.get(key)
        if hit is not None and hit[0].size >= n:
            hit[1].last = now
            return hit[0][:n], hit[1]
        if hit is not None:
            budget.forget(hit[1])
            del self._scratch[key]
        budget.note_message(n * like.dtype.itemsize)
        entry = budget.admit(Entry(n * like.dtype.itemsize, self._dropper(key), what=f"{role} copy of an in-place call"),
                             now)
        buf = be.empty(n, like.dtype)
        self._scratch[key] = (buf, entry)
        return buf, entry

    def _dropper(self, key):
        me = weakref.ref(self)

        def drop() -> None:
            c = me()
            if c is not None:
                c._scratch.pop(key, None)

        return drop

    # --------------------------------------------------------------- ops
    def _op(self, op) -> tuple[str | None, Any]:
        """(ccsynth op name or None if MPI must do it, the MPI op for a fallback)."""
        last = self._last_op
        if op is last[0]:
            return last[1]
        MPI = self._MPI
        if is_mpi_op(op):
            out = (mpi_op_name(op), op)
        else:
            name = canonical_op(op)  # raises OpError for unknown names
            out = (name, {"sum": MPI.SUM, "prod": MPI.PROD, "min": MPI.MIN, "max": MPI.MAX, "avg": MPI.SUM}[name])
        self._last_op = (op, out)
        return out

    @staticmethod
    def _check_op_dtype(opname: str | None, dtype) -> None:
        if opname == "avg" and np.dtype(dtype).kind != "f":
            raise OpError(f"op 'avg' needs a floating-point buffer, got dtype {np.dtype(dtype).name}")

    # ------------------------------------------------------------ engine
    def _agree(self, sig: str, error: BaseException | None = None) -> None:
        """Debug mode: every rank checks that all ranks make the same call (one small Allreduce).

        ``sig`` describes this rank's call (its number included, so a rank
        that skipped a call disagrees too); a rank whose call failed its
        checks takes part with its error instead, so the others raise rather
        than wait for it. On a mismatch every rank gathers every rank's
        description and raises :class:`BufferMismatchError` naming them
        (the failed rank raises its own error).
        """
        ch = self._channel
        self._agreed = ch.seq
        if self._size < 2:
            return
        h = zlib.crc32(sig.encode()) & 0x7FFFFFFF
        v = np.array([h, -h], dtype=np.int64)
        out = np.empty_like(v)
        ch.comm.Allreduce(v, out, op=self._MPI.MAX)
        if out[0] == -out[1]:
            return
        sigs = ch.comm.allgather(sig)  # every rank got here: the Allreduce completed everywhere
        if error is not None:
            mark_shared(error)
            return  # the caller re-raises this rank's own error
        lines = "; ".join(f"rank {r}: {d}" for r, d in enumerate(sigs))
        failed = [r for r, d in enumerate(sigs) if d.startswith("error")]
        if failed:
            e = BufferMismatchError(f"rank(s) {', '.join(map(str, failed))} failed the checks of this call "
                                    f"(call {ch.seq}) that rank {self._rank} passed: {lines}")
        else:
            e = BufferMismatchError(f"ranks disagree on the arguments of call {ch.seq}: {lines} "
                                    f"(rank {self._rank} calls {sig})")
        mark_shared(e)
        raise e

    def _signature(self, kind: str, m: int, dtype, opname, root: int) -> str:
        return (f"{kind} (call {self._channel.seq}) of {m} element(s) per block of {np.dtype(dtype).name}, "
                f"op {opname}, root {root}")

    def _failed(self, e: BaseException, kind: str) -> None:
        """This rank's call raised ``e``: in debug mode the ranks still agree, else tell the others."""
        ch = self._channel
        if self.debug and self._agreed != ch.seq and isinstance(e, Exception):
            self._agree(f"error in {kind} (call {ch.seq}): {type(e).__name__}: {e}", error=e)
        if self._phases is not None:
            self._phases.failed(e, kind)
        ch.call_failed(e, kind)

    def _schedule_for(self, kind: str, nbytes: int):
        key = (kind, nbytes)
        try:
            return self._selected[key]
        except KeyError:
            pass
        if len(self._selected) > 4096:  # many distinct sizes: keep the cache small
            self._selected.clear()
        sched = self._schedule_for_uncached(kind, nbytes)
        self._selected[key] = sched
        return sched

    def _schedule_for_uncached(self, kind: str, nbytes: int):
        entry_for = getattr(self._plan, "entry_for", None)
        if entry_for is not None:
            entry = entry_for(kind, self._size, nbytes)
            return entry.schedule if entry is not None else None
        return self._plan.select(kind, self._size, nbytes)

    def _compiled_for(self, schedule: Schedule, backend, root: int) -> CompiledSchedule:
        key = (id(schedule), backend.name, root)
        hit = self._compiled.get(key)
        if hit is not None:
            return hit[1]
        sroot = schedule.collective.root if schedule.collective.rooted else 0
        shift = (root - sroot) % self._size
        roles = tuple((q + shift) % self._size for q in range(self._size))
        cs = CompiledSchedule(schedule, self._channel.comm, backend=backend, slice_bytes=self.slice_bytes, roles=roles,
                              static_max_bytes=self.static_max_bytes, timeout=self.timeout, channel=self._channel)
        self._compiled[key] = (schedule, cs)  # the schedule is kept so that its id stays unique
        return cs

    def _replay(self, kind: str, sendbuf, recvbuf, op, root: int) -> bool:
        """Run this call the way the last one ran, if it is the same call on the same arrays.

        A training or benchmark loop passes the same arrays again and again:
        then parsing the buffer specs, checking them and choosing a schedule
        would give the same answer, so only the run is repeated. The arrays
        must be the very same objects with the same dtype, shape and strides.
        """
        hit = self._hit
        if (
            hit[0] == kind
            and hit[1] is sendbuf
            and hit[2] is recvbuf
            and hit[3] is op
            and hit[4] == root
            and _spec_sig(sendbuf) == hit[5]
            and _spec_sig(recvbuf) == hit[6]
            and not self.debug
        ):
            try:
                hit[7]()
            except BaseException:
                self._hit = None
                raise
            self.last_algorithm = hit[8]
            return True
        self._hit = None
        return False

    def _run(self, kind: str, nbytes: int, m: int, dtype, opname, root: int, like, sendarr, recvarr, fallback,
             copy_of=None):
        """Run a schedule if one covers the call, else the MPI library's collective.

        ``copy_of`` (an in-place call): the schedule's input is a private
        copy of this array, made first on every run of the call (the MPI
        library takes the in-place call as it is).
        """
        if self.debug:
            self._agree(self._signature(kind, m, dtype, opname, root))
        self._channel.memory.note_message(nbytes)
        if self._phases is not None:
            name = self._phases.run(kind, nbytes, dtype, opname, like, sendarr, recvarr, copy_of)
            if name is not None:
                self.last_algorithm = name
                return
        reason = None
        schedule = None
        if opname is None:
            reason = "op has no ccsynth kernel"
        elif kind in _REDUCING and dtype not in _KERNEL_DTYPES:
            reason = f"dtype {np.dtype(dtype).name} has no ccsynth kernel"
        else:
            schedule = self._schedule_for(kind, nbytes)
            if schedule is None:
                reason = "no schedule in the plan covers this size"
            elif schedule.n_ranks != self._size:
                raise ScheduleError(
                    f"the plan gave schedule {schedule.name!r} for {schedule.n_ranks} ranks to a {self._size}-rank communicator"
                )
        if schedule is not None:
            backend = self._backend_for(like)
            cs = self._compiled_for(schedule, backend, root)
            # non-reducing collectives move bytes: the executor counts chunks in bytes
            unit = m if cs._reducing else m * np.dtype(dtype).itemsize
            if cs.supports_count(unit):
                pre = None
                if copy_of is not None:
                    sendarr, entry = self._private("in", like, copy_of.size)
                    pre = self._copier(sendarr, copy_of, entry)
                run, device = cs.execute, backend.is_device
                sync, op_run = backend.synchronize, opname or "sum"
                count = m if (sendarr is None and recvarr is None) else None

                def replay():
                    if pre is not None:
                        pre()
                    if device:
                        sync()  # the caller's kernels that produced sendbuf
                    run(sendarr, recvarr, op_run, count=count)

                replay()
                self.last_algorithm = schedule.name
                call = self._call
                if not self.debug and call and call[0] == kind:
                    sig_s, sig_r = _spec_sig(call[1]), _spec_sig(call[2])
                    if sig_s is not _UNCACHED and sig_r is not _UNCACHED:
                        self._hit = call + (sig_s, sig_r, replay, schedule.name)
                return
            reason = f"schedule {schedule.name!r} cannot split {m} elements into its chunks"
        if not self.fallback:
            raise PlanError(f"no ccsynth schedule for {kind} of {nbytes} bytes on {self._size} ranks ({reason})")
        bucket = max(nbytes, 1).bit_length()
        self._note((kind, reason, bucket), logging.INFO,
                   "%s of %d bytes on %d ranks: %s; using the MPI library's own %s", kind, nbytes, self._size, reason, kind)
        if is_device_array(like):
            get_backend("cupy").synchronize()
        fallback()
        self.last_algorithm = "mpi"

    def _mpi_collective(self, name: str, start) -> None:
        """The MPI library's own collective: ``start()`` begins its non-blocking form; wait, watching the control line.

        A notice that another rank failed this call (or a timeout) cannot
        be answered by cancelling: MPI cannot cancel a collective, and one
        left pending would match the program's next collective on the
        communicator. So the job is aborted, with a message naming the rank
        and the reason, instead of hanging or returning a wrong buffer.
        """
        req = start()
        if self._size < 2:
            req.Wait()
            return
        ch, mpi = self._channel, self._mpi
        pair = [req, ch.ctrl]
        status = mpi.status
        try:
            while mpi.wait_any(pair, status):
                ch.notice(status)  # raises if the notice is about this call
        except BaseException as e:
            if isinstance(e, WaitTimedOut):
                e = CCSynthError(f"no progress for {e.seconds:g} s")
            self._abort_job(name, e)
            raise

    def _abort_job(self, name: str, e: BaseException) -> None:
        log.critical(
            "ccsynth: rank %d: %s; this rank is inside the MPI library's own %s (call %d), which cannot be "
            "cancelled: aborting the MPI job", self._rank, e, name, self._channel.seq,
        )
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # pragma: no cover - a closed stream
                pass
        self.comm.Abort(1)

    # -------------------------------------------------------- collectives
    def Allreduce(self, sendbuf, recvbuf, op=None) -> None:
        """``recvbuf = op over ranks of sendbuf`` (``MPI.IN_PLACE`` as sendbuf: recvbuf is the input)."""
        self._channel.open_call()  # every rank numbers every call, first
        try:
            if self._hit is None or not self._replay("allreduce", sendbuf, recvbuf, op, 0):
                self._allreduce(sendbuf, recvbuf, op)
        except BaseException as e:
            self._failed(e, "allreduce")
            raise

    def _allreduce(self, sendbuf, recvbuf, op=None) -> None:
        self._call = ("allreduce", sendbuf, recvbuf, op, 0)
        MPI = self._MPI
        op = MPI.SUM if op is None else op
        try:
            opname, mpi_op = self._op(op)
            r = self._parse(recvbuf, "recvbuf", 1, writable=True)
            in_place = self._is_in_place(sendbuf)
            s = None if in_place else self._parse(sendbuf, "sendbuf", 1)
        except _Fallback as f:
            return self._plain("Allreduce", str(f), lambda: self.comm.Iallreduce(sendbuf, recvbuf, op))
        m, dt = r.count, r.array.dtype
        if s is not None:
            self._same(s, r, "sendbuf", "recvbuf", m)
        self._check_op_dtype(opname, dt)
        copy_of = None
        if in_place:
            inp, copy_of = None, r.array  # the schedule works on a private copy of it (made in _run)
        else:
            inp = s.array

        def fb():
            self._mpi_collective("Allreduce", lambda: self.comm.Iallreduce(sendbuf, recvbuf, mpi_op))
            self._finish_avg(opname, r.array)

        self._run("allreduce", m * dt.itemsize, m, dt, opname, 0, r.array, inp, r.array, fb, copy_of)

    def Reduce_scatter_block(self, sendbuf, recvbuf, op=None) -> None:
        """Rank ``r`` gets block ``r`` of the reduction of everyone's sendbuf (n blocks)."""
        self._channel.open_call()  # every rank numbers every call, first
        try:
            if self._hit is None or not self._replay("reduce_scatter", sendbuf, recvbuf, op, 0):
                self._reduce_scatter_block(sendbuf, recvbuf, op)
        except BaseException as e:
            self._failed(e, "reduce_scatter")
            raise

    def _reduce_scatter_block(self, sendbuf, recvbuf, op=None) -> None:
        self._call = ("reduce_scatter", sendbuf, recvbuf, op, 0)
        MPI = self._MPI
        op = MPI.SUM if op is None else op
        n = self._size
        try:
            opname, mpi_op = self._op(op)
            in_place = self._is_in_place(sendbuf)
            if in_place:
                r = self._parse(recvbuf, "recvbuf", n, writable=True)
                s = None
            else:
                r = self._parse(recvbuf, "recvbuf", 1, writable=True)
                s = self._parse(sendbuf, "sendbuf", n)
        except _Fallback as f:
            return self._plain("Reduce_scatter_block", str(f),
                               lambda: self.comm.Ireduce_scatter_block(sendbuf, recvbuf, op))
        m, dt = r.count, r.array.dtype
        if s is not None:
            self._same(s, r, "sendbuf", "recvbuf", m, blocks=n, what_count=f"{n} x {m} (one block per rank)")
        self._check_op_dtype(opname, dt)
        copy_of = None
        if in_place:
            inp, copy_of = None, r.array  # the schedule works on a private copy of it (made in _run)
            out = r.array[:m]
        else:
            inp, out = s.array, r.array

        def fb():
            self._mpi_collective("Reduce_scatter_block",
                                 lambda: self.comm.Ireduce_scatter_block(sendbuf, recvbuf, mpi_op))
            self._finish_avg(opname, out)

        self._run("reduce_scatter", n * m * dt.itemsize, m, dt, opname, 0, r.array, inp, out, fb, copy_of)

    def Reduce(self, sendbuf, recvbuf, op=None, root: int = 0) -> None:
        """``recvbuf`` on ``root`` = op over ranks of sendbuf; recvbuf is ignored elsewhere."""
        self._channel.open_call()  # every rank numbers every call, first
        try:
            if self._hit is None or not self._replay("reduce", sendbuf, recvbuf, op, root):
                self._reduce(sendbuf, recvbuf, op, root)
        except BaseException as e:
            self._failed(e, "reduce")
            raise

    def _reduce(self, sendbuf, recvbuf, op=None, root: int = 0) -> None:
        MPI = self._MPI
        op = MPI.SUM if op is None else op
        self._check_root(root)
        self._call = ("reduce", sendbuf, recvbuf, op, root)
        at_root = self._rank == root
        try:
            opname, mpi_op = self._op(op)
            in_place = self._is_in_place(sendbuf)
            if in_place and not at_root:
                raise BufferMismatchError(f"MPI.IN_PLACE is allowed only at the root ({root}) of Reduce; rank {self._rank} passed it")
            r = self._parse(recvbuf, "recvbuf", 1, writable=True) if at_root else None
            s = None if in_place else self._parse(sendbuf, "sendbuf", 1)
        except _Fallback as f:
            return self._plain("Reduce", str(f), lambda: self.comm.Ireduce(sendbuf, recvbuf, op, root))
        ref = r if r is not None else s
        m, dt = ref.count, ref.array.dtype
        if r is not None and s is not None:
            self._same(s, r, "sendbuf", "recvbuf", m)
        self._check_op_dtype(opname, dt)
        copy_of = None
        if in_place:
            inp, copy_of = None, r.array  # the schedule works on a private copy of it (made in _run)
        else:
            inp = s.array
        out = r.array if r is not None else None

        def fb():
            self._mpi_collective("Reduce", lambda: self.comm.Ireduce(sendbuf, recvbuf, mpi_op, root))
            if out is not None:
                self._finish_avg(opname, out)

        self._run("reduce", m * dt.itemsize, m, dt, opname, root, ref.array, inp, out, fb, copy_of)

    def Allgather(self, sendbuf, recvbuf) -> None:
        """recvbuf block ``q`` = sendbuf of rank ``q`` (``MPI.IN_PLACE``: this rank's block is the input)."""
        self._channel.open_call()  # every rank numbers every call, first
        try:
            if self._hit is None or not self._replay("allgather", sendbuf, recvbuf, None, 0):
                self._allgather(sendbuf, recvbuf)
        except BaseException as e:
            self._failed(e, "allgather")
            raise

    def _allgather(self, sendbuf, recvbuf) -> None:
        self._call = ("allgather", sendbuf, recvbuf, None, 0)
        n = self._size
        try:
            r = self._parse(recvbuf, "recvbuf", n, writable=True)
            in_place = self._is_in_place(sendbuf)
            s = None if in_place else self._parse(sendbuf, "sendbuf", 1)
        except _Fallback as f:
            return self._plain("Allgather", str(f), lambda: self.comm.Iallgather(sendbuf, recvbuf))
        m, dt = r.count, r.array.dtype
        if s is not None:
            self._same(s, r, "sendbuf", "recvbuf", m, recv_blocks=n)
        copy_of = None
        if in_place:
            inp, copy_of = None, r.array[self._rank * m:(self._rank + 1) * m]  # copied in _run, as above
        else:
            inp = s.array
        self._run("allgather", n * m * dt.itemsize, m, dt, "sum", 0, r.array, inp, r.array,
                  lambda: self._mpi_collective("Allgather", lambda: self.comm.Iallgather(sendbuf, recvbuf)), copy_of)

    def Alltoall(self, sendbuf, recvbuf) -> None:
        """recvbuf block ``q`` = block ``rank`` of rank ``q``'s sendbuf."""
        self._channel.open_call()  # every rank numbers every call, first
        try:
            if self._hit is None or not self._replay("alltoall", sendbuf, recvbuf, None, 0):
                self._alltoall(sendbuf, recvbuf)
        except BaseException as e:
            self._failed(e, "alltoall")
            raise

    def _alltoall(self, sendbuf, recvbuf) -> None:
        self._call = ("alltoall", sendbuf, recvbuf, None, 0)
        n = self._size
        try:
            r = self._parse(recvbuf, "recvbuf", n, writable=True)
            in_place = self._is_in_place(sendbuf)
            s = None if in_place else self._parse(sendbuf, "sendbuf", n)
        except _Fallback as f:
            return self._plain("Alltoall", str(f), lambda: self.comm.Ialltoall(sendbuf, recvbuf))
        m, dt = r.count, r.array.dtype
        if s is not None:
            self._same(s, r, "sendbuf", "recvbuf", m, blocks=n, recv_blocks=n, what_count=f"{n} x {m} (one block per rank)")
        copy_of = None
        if in_place:
            inp, copy_of = None, r.array  # the schedule works on a private copy of it (made in _run)
        else:
            inp = s.array
        self._run("alltoall", n * m * dt.itemsize, m, dt, "sum", 0, r.array, inp, r.array,
                  lambda: self._mpi_collective("Alltoall", lambda: self.comm.Ialltoall(sendbuf, recvbuf)), copy_of)

    def Bcast(self, buf, root: int = 0) -> None:
        """Every rank's ``buf`` = the root's."""
        self._channel.open_call()  # every rank numbers every call, first
        try:
            if self._hit is None or not self._replay("broadcast", buf, None, None, root):
                self._bcast(buf, root)
        except BaseException as e:
            self._failed(e, "broadcast")
            raise

    def _bcast(self, buf, root: int = 0) -> None:
        self._check_root(root)
        self._call = ("broadcast", buf, None, None, root)
        if self._is_in_place(buf):
            raise BufferMismatchError("Bcast takes one buffer; MPI.IN_PLACE has no meaning there")
        at_root = self._rank == root
        try:
            b = self._parse(buf, "buf", 1, writable=not at_root)
        except _Fallback as f:
            return self._plain("Bcast", str(f), lambda: self.comm.Ibcast(buf, root))
        m, dt = b.count, b.array.dtype
        self._run("broadcast", m * dt.itemsize, m, dt, "sum", root, b.array,
                  b.array if at_root else None, None if at_root else b.array,
                  lambda: self._mpi_collective("Bcast", lambda: self.comm.Ibcast(buf, root)))

    # ---------------------------------------------------------- helpers
    def _copier(self, dst, src, entry: Entry):
        """``pre`` for an in-place call: copy the caller's data into the private input (which this call uses)."""
        copy = self._backend_for(src).copy
        ch = self._channel

        def pre() -> None:
            entry.last = ch.seq
            copy(dst, src)

        return pre

    def _plain(self, name: str, reason: str, start) -> None:
        """A call ccsynth cannot parse (``reason``): the MPI library's own, ``start()`` its non-blocking form."""
        if self.debug:
            self._agree(f"{name.lower()} (call {self._channel.seq}) handed to the MPI library: {reason}")
        if not self.fallback:
            raise PlanError(f"{name}: {reason}, and fallback to the MPI library is off")
        self._note((name, reason), logging.INFO, "%s: %s; using the MPI library's own %s", name, reason, name)
        self._mpi_collective(name, start)
        self.last_algorithm = "mpi"

    def _check_root(self, root) -> None:
        if isinstance(root, bool) or not isinstance(root, (int, np.integer)) or not 0 <= root < self._size:
            raise BufferMismatchError(f"root {root!r} is not a rank of this {self._size}-rank communicator")

    @staticmethod
    def _same(s: _Buf, r: _Buf, sname: str, rname: str, m: int, *, blocks: int = 1, recv_blocks: int = 1,
              what_count: str | None = None) -> None:
        """sendbuf must hold ``blocks x m`` elements of recvbuf's dtype."""
        if s.array.dtype != r.array.dtype:
            raise BufferMismatchError(
                f"{sname} has dtype {s.array.dtype.name} but {rname} has dtype {r.array.dtype.name}; they must match"
            )
        if is_device_array(s.array) != is_device_array(r.array):
            raise BufferMismatchError(f"{sname} and {rname} must both be host arrays or both GPU arrays")
        if s.count != m:
            expected = what_count or str(blocks * m)
            raise BufferMismatchError(
                f"{sname} has {s.array.size} element(s) but {rname} ({r.array.size} elements"
                f"{f' = {recv_blocks} x {m}' if recv_blocks > 1 else ''}) needs {sname} to have {expected}"
            )

    def _finish_avg(self, opname, out) -> None:
        if opname == "avg" and out is not None:
            be = self._backend_for(out)
            be.divide(out, self._size)
            if be.is_device:
                be.synchronize()
