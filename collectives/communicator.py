"""A drop-in for an mpi4py communicator that runs ccsynth schedules.

:class:`Communicator` wraps an mpi4py intracommunicator and offers its
buffer-based collectives with the same signatures and conventions::

    from mpi4py import MPI
    import ccsynth
    comm = ccsynth.Communicator(MPI.COMM_WORLD, plan="plan.json")
    comm.Allreduce(sendbuf, recvbuf, op=MPI.SUM)
    comm.Allgather([sendbuf, MPI.FLOAT], recvbuf)
    comm.Allreduce(MPI.IN_PLACE, buf)
    comm.Barrier()                       # it is an MPI.Intracomm: the rest is mpi4py's, on the same comm

Covered: ``Allreduce``, ``Allgather``, ``Reduce_scatter_block``,
``Alltoall``, ``Bcast`` and ``Reduce``, their non-blocking forms
(``Iallreduce``, ...: :mod:`~ccsynth.collectives.requests`), ``Alltoallv``,
``Allgatherv`` (explicit schedules, every block at its own size:
:mod:`~ccsynth.collectives.vschedule`) and ``Reduce_scatter`` with counts
(padded blocks: :mod:`~ccsynth.collectives.vcounts`), with ``MPI.IN_PLACE`` where MPI
allows it (not for ``Bcast``; for ``Reduce`` only at the root), buffer specs
``buf``, ``[buf, MPI.FLOAT]``, ``[buf, count, MPI.FLOAT]``,
``[buf, (count, displ), MPI.FLOAT]`` (lists or tuples), NumPy arrays, GPU
arrays and other array-likes (:mod:`~ccsynth.collectives.arraylike`; GPU
buffers run on the CuPy backend, staged through host memory when the MPI
library is not CUDA-aware: :mod:`~ccsynth.collectives.staging`; ``stream=``
on every call waits for that stream's work first). As in mpi4py, an explicit
count of a buffer cut into one block per rank (the receive buffer of ``Allgather``, both
buffers of ``Alltoall``, the send buffer of ``Reduce_scatter_block``) counts
the elements of one block. Ops: ``MPI.SUM``, ``MPI.PROD``, ``MPI.MIN``,
``MPI.MAX`` or ccsynth's names ``"sum"``, ``"prod"``, ``"min"``, ``"max"``,
``"avg"`` (floating point only).

Which algorithm: on each call the message size (nccl-tests convention: the
larger per-rank buffer in bytes) selects a schedule from the plan
(``plan.entry_for(kind, n_ranks, nbytes)``, or ``plan.select``). ``plan`` is
a :class:`~ccsynth.collectives.plan.Plan`, a Schedule, a plan or schedule
file path, a list of them (merged: :mod:`~ccsynth.collectives.plan_sources`),
or None for the default plan; the user's plan decides for the collectives it
covers, the default plan for the others. The default plan is what the
caller passes in as ``default_plan`` (any object with ``select``/``entry_for``/``kinds`` like a Plan). Which baseline to run at
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
collective with the original arguments, said once per collective and
reason at WARNING on rank 0 (INFO elsewhere), and ``last_algorithm`` is
``"mpi"``; so are the collectives ccsynth never schedules (``Gather``,
``Scan``, ...). ``fallback=False`` raises :class:`~ccsynth.errors.PlanError`
instead.

Errors: mismatched counts or dtypes between the buffers of a call,
non-contiguous or read-only arrays, unknown ops and ``avg`` on integers are
found on the rank that makes them, before any communication:
:class:`~ccsynth.errors.BufferMismatchError` naming the argument and the
size it should have, :class:`~ccsynth.errors.OpError`. A plan with no
entry for the communicator's rank count (or with collectives it does not
run), or plans that differ between the ranks (compared by fingerprint),
raise :class:`~ccsynth.errors.PlanError` on every rank in the constructor. An error that only one rank sees is raised on *every* rank of
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
never kept alive: the replay of the last call holds views that own no
memory and weak references to the arrays.

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
from mpi4py import MPI

from ccsynth.collectives.arraylike import as_array
from ccsynth.collectives.executor import CompiledSchedule, timeout_from_env
from ccsynth.collectives.phased_calls import PhasedCalls
from ccsynth.collectives.plan import Plan
from ccsynth.collectives.requests import ProgressThread, Request, completed
from ccsynth.collectives.plan_sources import LayeredPlan, as_plan, check_usable, plan_fingerprint
from ccsynth.collectives.runtime.channel import Channel, mark_shared
from ccsynth.collectives.runtime.memory import Entry, cache_bytes_from_env
from ccsynth.collectives.runtime.primitives import WaitTimedOut, mpi_calls, resolve_wait_mode
from ccsynth.collectives.staging import STAGING_MODES, Stager, decide
from ccsynth.collectives.static_program import STATIC_MAX_BYTES
from ccsynth.collectives.vcounts import MAX_PADDING, Padding, VBuf, check_counts, pack
from ccsynth.collectives.vschedule import V_KINDS, VScheduleCache
from ccsynth.collectives.explicit_program import ExplicitProgram
from ccsynth.collectives.schedule import Schedule
from ccsynth.errors import BufferMismatchError, CCSynthError, OpError, PlanError, ScheduleError
from ccsynth.kernels.devices import Awareness, cuda_awareness, select_device
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


def _ranges(ranks: list[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2, 5"``."""
    out, start = [], None
    for i, r in enumerate(ranks):
        if start is None:
            start = r
        if i + 1 == len(ranks) or ranks[i + 1] != r + 1:
            out.append(str(start) if start == r else f"{start}-{r}")
            start = None
    return ", ".join(out)


class _Fallback(Exception):
    """Internal: this call goes to the MPI library (reason in args[0])."""


@dataclass
class _Buf:
    array: Any  # flat, typed view (numpy or cupy)
    count: int  # elements per block
    explicit: bool  # count given in the spec


_UNCACHED = object()
_ZERO_OFFSET = np.zeros(1, np.int64)  # an Allgatherv's one input chunk starts at its sendbuf's start

def _is_device_spec(spec) -> bool:
    """Whether a buffer spec's buffer is device memory."""
    if isinstance(spec, (list, tuple)):
        return bool(spec) and is_device_array(spec[0])
    return is_device_array(spec)


def _weak(obj):
    """A callable returning ``obj``: a weak reference where possible (arrays), else ``obj`` itself (None, IN_PLACE)."""
    try:
        return weakref.ref(obj)
    except TypeError:
        return lambda: obj


# Collectives of mpi4py's Comm that ccsynth never schedules: they go to the wrapped comm, visibly.
_MPI_ONLY = frozenset((
    "Gather", "Gatherv", "Scatter", "Scatterv", "Scan", "Exscan", "Alltoallw", "Reduce_scatter_init",
    "Igather", "Igatherv", "Iscatter", "Iscatterv", "Iscan", "Iexscan", "Ialltoallw",
    "Neighbor_allgather", "Neighbor_allgatherv", "Neighbor_alltoall", "Neighbor_alltoallv", "Neighbor_alltoallw",
))


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


def _unwrap(comm):
    """The mpi4py communicator to wrap: ``comm``, MPI.COMM_WORLD for None, the wrapped one of a ccsynth communicator."""
    if comm is None:
        return MPI.COMM_WORLD
    if isinstance(comm, Communicator):
        return comm.comm
    if not isinstance(comm, MPI.Comm):
        raise CCSynthError(f"Communicator wraps an mpi4py communicator, got {type(comm).__name__}")
    if comm.Is_inter():
        raise CCSynthError("ccsynth.Communicator wraps intracommunicators only")
    return comm


class Communicator(MPI.Intracomm):
    """mpi4py's buffer collectives, run by ccsynth schedules (see the module doc).

    It *is* an ``MPI.Intracomm`` (``isinstance(c, MPI.Comm)`` holds): a
    second mpi4py handle to the very communicator it wraps
    (``MPI.Intracomm.__new__(cls, comm)``, no duplicate), so every mpi4py
    method it does not override (``Barrier``, ``Send``, ``allreduce``,
    ``Get_group``, ``py2f``, ...) runs on that communicator, and
    ``c == comm``. ``.comm`` is the wrapped mpi4py object. What differs
    from mpi4py: :meth:`Free` (and ``free``) release ccsynth's resources and
    leave the wrapped communicator to its owner; the constructors of new
    communicators (``Dup``, ``Clone``, ``Idup``, ``Dup_with_info``,
    ``Split``, ``Split_type``, ``Create``, ``Create_group``) return ccsynth
    communicators; ``Disconnect`` releases ccsynth's resources, then
    disconnects the wrapped communicator.

    Parameters:
        comm: the mpi4py intracommunicator to wrap (default ``MPI.COMM_WORLD``).
        plan: a :class:`~ccsynth.collectives.plan.Plan`, a Schedule, a plan or
            schedule file path, a list of them, or None for ``default_plan``.
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
        device: the GPU of this rank: ``"auto"`` (by local rank, if CuPy is in
            use and still on device 0: :mod:`ccsynth.kernels.devices`), an
            index, or False (leave it).
        staging: device buffers through pinned host memory: ``"auto"`` (when
            the MPI library is not CUDA-aware), ``"always"`` or ``"never"``
            (raise instead): :mod:`~ccsynth.collectives.staging`.

    Example (any number of ranks; a one-rank plan has nothing to schedule)::

        >>> from mpi4py import MPI
        >>> import numpy as np
        >>> c = Communicator(MPI.COMM_SELF)
        >>> out = np.zeros(3)
        >>> c.Allreduce(np.arange(3.0), out, op=MPI.SUM)
        >>> out.tolist(), c.Get_size(), c.last_algorithm
        ([0.0, 1.0, 2.0], 1, 'mpi')
    """

    def __new__(cls, comm=None, *args, **kwargs):
        return super().__new__(cls, _unwrap(comm))

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
        device="auto",
        staging: str = "auto",
    ):
        self._MPI = MPI
        self._options = dict(backend=backend, fallback=fallback, slice_bytes=slice_bytes, debug=debug,
                             static_max_bytes=static_max_bytes, timeout=timeout, cache_bytes=cache_bytes,
                             device=device, staging=staging)
        if staging not in STAGING_MODES:
            raise CCSynthError(f"staging must be one of {', '.join(STAGING_MODES)}, got {staging!r}")
        self.staging = staging
        self._awareness: Awareness | None = None  # the MPI library's CUDA-awareness, asked when the first device buffer arrives
        self._stager = Stager()
        self.device = self._pick_device(device)
        self.comm = _unwrap(comm)
        self._size = self.comm.Get_size()
        self._rank = self.comm.Get_rank()
        self._default_plan = default_plan if default_plan is not None else NO_PLAN
        try:
            self._plan = self._resolve_plan(plan)
            plan_error = None
        except PlanError as e:  # told to every rank in _agree_on_setup, then raised everywhere
            self._plan, plan_error = self._default_plan, e
        self._lookup = self._layered(self._plan)
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
        try:
            self._agree_on_setup(plan_error)
        except CCSynthError:
            self._channel.close(free=True)  # every rank raises here: release the private communicator
            raise
        self._compiled: dict[tuple, tuple[Schedule, CompiledSchedule]] = {}
        self._logged: set = set()
        self._scratch: dict[tuple, tuple[Any, Entry]] = {}
        self._vschedules = VScheduleCache()  # the explicit schedules of v-calls, by counts signature
        self.last_algorithm: str = ""  # what ran the last call: a schedule name or "mpi"
        self._numpy = get_backend("numpy")
        self._last_op: tuple = (None, None)
        self._selected: dict[tuple[str, int], Any] = {}  # (kind, nbytes) -> schedule or None
        self._call: tuple = ()  # (kind, sendbuf, recvbuf, op, root) of the call in progress
        self._hit: tuple | None = None  # the last scheduled call and how to replay it (see _replay)
        self._phases = None if phases is None else PhasedCalls(
            phases, self.comm, self._channel, self._mpi, slice_bytes=slice_bytes, timeout=self.timeout,
            threads=phase_threads, cache_bytes=cache_bytes)
        self._progress: ProgressThread | None = None  # runs the non-blocking calls (started by the first)
        self._nb_comm: Any = None  # where the progress thread runs the MPI library's collectives

    # ----------------------------------------------------------- plumbing
    @property
    def plan(self):
        """The plan that picks a schedule per call (assigning a new one takes effect on the next call)."""
        return self._plan

    @plan.setter
    def plan(self, plan) -> None:
        self.drain()
        self._plan = self._resolve_plan(plan)
        self._lookup = self._layered(self._plan)
        self._selected.clear()
        self._hit = None

    @property
    def plan_fingerprint(self) -> str:
        """The hash of the plan that the ranks compared in the constructor (``"default"`` for the built-in one)."""
        return plan_fingerprint(self._plan if self._plan is not self._default_plan else None)

    def _resolve_plan(self, plan):
        """The user's plan as a Plan (see :mod:`~ccsynth.collectives.plan_sources`), checked; None: the default."""
        if plan is None:
            return self._default_plan
        plan = as_plan(plan)
        if self._size > 1:
            check_usable(plan, self._size)
        elif getattr(plan, "entries", None) and not any(e.n_ranks == 1 for e in plan.entries):
            log.info("a one-rank communicator: the plan (for %s ranks) is not used; MPI copies locally",
                     sorted({e.n_ranks for e in plan.entries}))
        return plan

    def _layered(self, plan):
        """What selects a schedule per call: the user's plan over the default plan (per collective)."""
        if plan is self._default_plan:
            return plan
        return LayeredPlan(plan, self._default_plan, self._size)

    def __repr__(self) -> str:
        return f"<ccsynth.Communicator rank {self._rank} of {self._size}>"

    # ``size`` and ``rank`` are mpi4py's own properties (the same communicator)

    def Get_size(self) -> int:
        return self._size

    def Get_rank(self) -> int:
        return self._rank

    def Free(self) -> None:
        """Release the compiled programs, the cached buffers and the private communicators (not the wrapped comm).

        Waits for the non-blocking calls still running first, and stops the progress thread.
        """
        if self._progress is not None:
            self._progress.close()
            self._progress = None
            self._nb_comm.Free()
            self._nb_comm = None
        self._hit = None
        if self._phases is not None:
            self._phases.free()
        for _, cs in self._compiled.values():
            cs.free()
        self._compiled.clear()
        self._scratch.clear()
        self._vschedules.clear()
        self._stager.clear()
        self._channel.memory.clear()
        self._channel.close(free=True)
        self._freed = True

    @property
    def channel(self) -> Channel:
        """The private channel: call numbers, control line, buffer budget (:mod:`~ccsynth.collectives.runtime.channel`)."""
        return self._channel

    @property
    def cached_bytes(self) -> int:
        """Bytes of the buffers kept between calls (within the budget, see ``cache_bytes``)."""
        return self._channel.memory.total

    def _agree_on_setup(self, plan_error: PlanError | None) -> None:
        """Every rank must cut messages alike and run the same plan: compare them (one small allgather).

        A rank whose plan could not be used (``plan_error``) takes part
        with its error, so that every rank raises, naming it.
        """
        fp = "error" if plan_error is not None else self.plan_fingerprint
        mine = (int(self.slice_bytes or 0), int(self.static_max_bytes), fp, str(plan_error or ""))
        everyone = self._channel.comm.allgather(mine) if self._size > 1 else [mine]
        if any(o[:2] != mine[:2] for o in everyone):
            raise CCSynthError(
                f"the ranks built their Communicator with different settings (rank {self._rank}: "
                f"slice_bytes={self.slice_bytes}, static_max_bytes={self.static_max_bytes}); "
                f"every rank must pass the same values"
            )
        failed = [(r, o[3]) for r, o in enumerate(everyone) if o[2] == "error"]
        if failed:
            if plan_error is not None and len(failed) == len(everyone):
                raise plan_error
            what = "; ".join(f"rank {r}: {msg}" for r, msg in failed)
            raise PlanError(f"the plan given to the Communicator cannot be used on rank(s) "
                            f"{', '.join(str(r) for r, _ in failed)}: {what}")
        groups: dict[str, list[int]] = {}
        for r, o in enumerate(everyone):
            groups.setdefault(o[2], []).append(r)
        if len(groups) > 1:
            parts = "; ".join(
                f"rank{'s' if len(rs) > 1 else ''} {_ranges(rs)}: "
                f"{'the default plan' if key == 'default' else 'plan ' + key}"
                for key, rs in sorted(groups.items(), key=lambda kv: kv[1][0])
            )
            raise PlanError(f"the ranks passed different plans to the Communicator ({parts}); every rank must "
                            f"load the same plan (rank {self._rank} has {fp})")

    def _note(self, key, level, msg, *args) -> None:
        if key not in self._logged:
            self._logged.add(key)
            log.log(level, msg, *args)

    def _went_to_mpi(self, key, msg, *args) -> None:
        """A call that the MPI library runs instead of ccsynth: say so once, at WARNING on rank 0 (INFO elsewhere)."""
        level = logging.WARNING if self._rank == 0 and self._size > 1 else logging.INFO
        self._note(key, level, "ccsynth: " + msg, *args)

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

    def _parse(self, spec, what: str, blocks: int, writable: bool = False) -> _Buf:
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
            raise BufferMismatchError(f"{what} is None")
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
        entry_for = getattr(self._lookup, "entry_for", None)
        if entry_for is not None:
            entry = entry_for(kind, self._size, nbytes)
            return entry.schedule if entry is not None else None
        return self._lookup.select(kind, self._size, nbytes)

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
        if hit is None:  # the caller asks only after a scheduled call
            return False
        if (
            hit[0] == kind
            and hit[1]() is sendbuf
            and hit[2]() is recvbuf
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
                # the replay below is kept between calls: it must not keep the caller's arrays alive, so it
                # holds views that own nothing (valid while the same arrays are passed: see _replay)
                alias = backend.alias
                if recvarr is not None:
                    recvarr = alias(recvarr)
                if copy_of is not None:
                    sendarr, entry = self._private("in", like, copy_of.size)
                    pre = self._copier(sendarr, alias(copy_of), entry)
                elif sendarr is not None:
                    sendarr = alias(sendarr)
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
                        self._hit = (kind, _weak(call[1]), _weak(call[2]), *call[3:], sig_s, sig_r, replay,
                                     schedule.name)
                return
            reason = f"schedule {schedule.name!r} cannot split {m} elements into its chunks"
        if not self.fallback:
            raise PlanError(f"no ccsynth schedule for {kind} of {nbytes} bytes on {self._size} ranks ({reason})")
        self._went_to_mpi((kind, reason),
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
    def _collective(self, kind: str, impl, sendbuf, recvbuf, op, root, stream) -> None:
        """One blocking call: number it, take array-likes as arrays, replay or run ``impl``; errors reach every rank."""
        self._enter()
        try:
            if sendbuf is not None and type(sendbuf) is not np.ndarray:
                sendbuf = self._front(sendbuf, kind == "broadcast" and self._rank != root)
            if recvbuf is not None and type(recvbuf) is not np.ndarray:
                recvbuf = self._front(recvbuf, True)
            if stream is not None:
                self._wait_stream(stream)
            if type(recvbuf) is not np.ndarray and (_is_device_spec(sendbuf) or _is_device_spec(recvbuf)) \
                    and self._must_stage(kind):
                return self._run_staged(kind, impl, sendbuf, recvbuf, op, root)
            if self._hit is None or not self._replay(kind, sendbuf, recvbuf, op, root):
                impl(sendbuf, recvbuf, op, root)
        except BaseException as e:
            self._failed(e, kind)
            raise
        finally:
            self._call = ()  # holds the caller's buffers while the call runs, never after

    def _enter(self) -> None:
        """Every rank numbers every call, first (after the non-blocking calls started before it)."""
        prog = self._progress
        if prog is not None and not prog.in_thread():
            prog.drain()
        self._channel.open_call()

    def _coll_comm(self):
        """Where the MPI library's own collectives run: the wrapped comm, or in the progress thread a Dup of it."""
        prog = self._progress
        if prog is not None and prog.in_thread():
            return self._nb_comm
        return self.comm

    def _start(self, kind: str, impl, sendbuf, recvbuf, op, root, stream) -> Request:
        """A non-blocking call: queued on the progress thread (see :mod:`~ccsynth.collectives.requests`)."""
        if stream is not None:
            self._wait_stream(stream)  # the work queued before the call, now
        if self._progress is None:
            if self._size > 1 and self._MPI.Query_thread() < self._MPI.THREAD_MULTIPLE:
                self._went_to_mpi(("nonblocking", "threads"), "the MPI library was initialized without "
                                  "MPI_THREAD_MULTIPLE: non-blocking calls run inside the call (no overlap)")
                try:
                    self._collective(kind, impl, sendbuf, recvbuf, op, root, None)
                except CCSynthError as e:
                    return completed(kind, e)
                return completed(kind)
            self._nb_comm = self.comm.Dup()  # collective: every rank makes its first non-blocking call here
            self._progress = ProgressThread(f"ccsynth-progress-{self._rank}", init=self._thread_device)
        return self._progress.submit(lambda: self._collective(kind, impl, sendbuf, recvbuf, op, root, None), kind)

    def Iallreduce(self, sendbuf, recvbuf, op=None, *, stream=None) -> Request:  # type: ignore[override]  # a ccsynth Request
        """Non-blocking :meth:`Allreduce`: returns a :class:`~ccsynth.collectives.requests.Request`."""
        return self._start("allreduce", self._allreduce, sendbuf, recvbuf, op, 0, stream)

    def Ireduce_scatter_block(self, sendbuf, recvbuf, op=None, *, stream=None) -> Request:  # type: ignore[override]  # a ccsynth Request
        """Non-blocking :meth:`Reduce_scatter_block`."""
        return self._start("reduce_scatter", self._reduce_scatter_block, sendbuf, recvbuf, op, 0, stream)

    def Iallgather(self, sendbuf, recvbuf, *, stream=None) -> Request:  # type: ignore[override]  # a ccsynth Request
        """Non-blocking :meth:`Allgather`."""
        return self._start("allgather", self._allgather, sendbuf, recvbuf, None, 0, stream)

    def Ialltoall(self, sendbuf, recvbuf, *, stream=None) -> Request:  # type: ignore[override]  # a ccsynth Request
        """Non-blocking :meth:`Alltoall`."""
        return self._start("alltoall", self._alltoall, sendbuf, recvbuf, None, 0, stream)

    def Ibcast(self, buf, root: int = 0, *, stream=None) -> Request:  # type: ignore[override]  # a ccsynth Request
        """Non-blocking :meth:`Bcast`."""
        return self._start("broadcast", self._bcast, buf, None, None, root, stream)

    def Ireduce(self, sendbuf, recvbuf, op=None, root: int = 0, *, stream=None) -> Request:  # type: ignore[override]  # a ccsynth Request
        """Non-blocking :meth:`Reduce`."""
        return self._start("reduce", self._reduce, sendbuf, recvbuf, op, root, stream)

    def drain(self) -> None:
        """Wait until every non-blocking call started on this communicator has completed (errors stay with their requests)."""
        if self._progress is not None:
            self._progress.drain()

    def _front(self, spec, writable: bool = False):
        """A buffer spec with its array-like (see :mod:`~ccsynth.collectives.arraylike`) as an array."""
        if self._is_in_place(spec):
            return spec
        if isinstance(spec, (list, tuple)):
            if spec and not isinstance(spec[0], np.ndarray):
                arr = as_array(spec[0], writable=writable)
                if arr is not None:
                    return type(spec)((arr, *spec[1:]))
            return spec
        arr = as_array(spec, writable=writable)
        return spec if arr is None else arr

    # ------------------------------------------------------------- GPUs
    def _pick_device(self, device):
        """``device=``: "auto" picks by local rank if CuPy is in use and still on device 0; an index; False: leave it."""
        if device is False or device is None:
            return None
        if device == "auto":
            cp = sys.modules.get("cupy")
            if cp is None:
                return None
            try:
                if cp.cuda.runtime.getDeviceCount() < 1 or cp.cuda.Device().id != 0:
                    return cp.cuda.Device().id if cp.cuda.runtime.getDeviceCount() else None
            except Exception:  # no driver, no device: a host-only program that imported CuPy
                return None
            device = None
        choice = select_device(device)
        log.info("rank %d uses GPU %d (%s)", self._rank, choice.index, choice.source)
        return choice.index

    def _thread_device(self) -> None:
        """The progress thread works on the communicator's device (CuPy's current device is per thread)."""
        if self.device is not None:
            sys.modules["cupy"].cuda.Device(self.device).use()

    @property
    def cuda_aware(self):
        """The MPI library's CUDA-awareness (:func:`~ccsynth.kernels.devices.cuda_awareness`), asked once."""
        if self._awareness is None:
            self._awareness = cuda_awareness(self._MPI)
        return self._awareness

    def _must_stage(self, kind: str) -> bool:
        stage = decide(self.staging, self.cuda_aware, kind)
        if stage:
            self._went_to_mpi(("staging",), "device buffers are staged through pinned host memory (MPI library "
                              "CUDA-aware: %s, from %s; staging=%r)", self.cuda_aware.aware, self.cuda_aware.source,
                              self.staging)
        return stage

    def _run_staged(self, kind: str, impl, sendbuf, recvbuf, op, root) -> None:
        """Run the call on host stand-ins of its device buffers (see :mod:`~ccsynth.collectives.staging`)."""
        in_place = self._is_in_place(sendbuf)
        at_root = self._rank == root
        backs = []

        def host(spec, role, copy_in, copy_back):
            if not _is_device_spec(spec):
                return spec
            arr = spec[0] if isinstance(spec, (list, tuple)) else spec
            h, back = self._stager.stage(arr, role, copy_in=copy_in, copy_back=copy_back)
            if back is not None:
                backs.append(back)
            return type(spec)((h, *spec[1:])) if isinstance(spec, (list, tuple)) else h

        if kind == "broadcast":
            sendbuf = host(sendbuf, "buf", at_root, not at_root)
        else:
            sendbuf = host(sendbuf, "send", True, False)
            recvbuf = host(recvbuf, "recv", in_place, True)
        impl(sendbuf, recvbuf, op, root)
        for back in backs:
            back()

    def _wait_stream(self, stream) -> None:
        """``stream=``: the caller's GPU work on that stream finishes before the call reads its buffers."""
        sync = getattr(stream, "synchronize", None)
        if sync is None:
            raise CCSynthError(f"stream= takes a stream object with synchronize() (cupy/torch), got {type(stream).__name__}")
        sync()

    def Allreduce(self, sendbuf, recvbuf, op=None, *, stream=None) -> None:
        """``recvbuf = op over ranks of sendbuf`` (``MPI.IN_PLACE`` as sendbuf: recvbuf is the input)."""
        self._collective("allreduce", self._allreduce, sendbuf, recvbuf, op, 0, stream)

    def _allreduce(self, sendbuf, recvbuf, op, root) -> None:
        self._call = ("allreduce", sendbuf, recvbuf, op, 0)
        MPI = self._MPI
        op = MPI.SUM if op is None else op
        try:
            opname, mpi_op = self._op(op)
            r = self._parse(recvbuf, "recvbuf", 1, writable=True)
            in_place = self._is_in_place(sendbuf)
            s = None if in_place else self._parse(sendbuf, "sendbuf", 1)
        except _Fallback as f:
            return self._plain("Allreduce", str(f), lambda: self._coll_comm().Iallreduce(sendbuf, recvbuf, op))
        m, dt = r.count, r.array.dtype
        if s is not None:
            self._same(s, r, "sendbuf", "recvbuf", m)
        self._check_op_dtype(opname, dt)
        copy_of = None
        if s is None:  # in place
            inp, copy_of = None, r.array  # the schedule works on a private copy of it (made in _run)
        else:
            inp = s.array

        def fb():
            self._mpi_collective("Allreduce", lambda: self._coll_comm().Iallreduce(sendbuf, recvbuf, mpi_op))
            self._finish_avg(opname, r.array)

        self._run("allreduce", m * dt.itemsize, m, dt, opname, 0, r.array, inp, r.array, fb, copy_of)

    def Reduce_scatter_block(self, sendbuf, recvbuf, op=None, *, stream=None) -> None:
        """Rank ``r`` gets block ``r`` of the reduction of everyone's sendbuf (n blocks)."""
        self._collective("reduce_scatter", self._reduce_scatter_block, sendbuf, recvbuf, op, 0, stream)

    def _reduce_scatter_block(self, sendbuf, recvbuf, op, root) -> None:
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
                               lambda: self._coll_comm().Ireduce_scatter_block(sendbuf, recvbuf, op))
        m, dt = r.count, r.array.dtype
        if s is not None:
            self._same(s, r, "sendbuf", "recvbuf", m, blocks=n, what_count=f"{n} x {m} (one block per rank)")
        self._check_op_dtype(opname, dt)
        copy_of = None
        if s is None:  # in place
            inp, copy_of = None, r.array  # the schedule works on a private copy of it (made in _run)
            out = r.array[:m]
        else:
            inp, out = s.array, r.array

        def fb():
            self._mpi_collective("Reduce_scatter_block",
                                 lambda: self._coll_comm().Ireduce_scatter_block(sendbuf, recvbuf, mpi_op))
            self._finish_avg(opname, out)

        self._run("reduce_scatter", n * m * dt.itemsize, m, dt, opname, 0, r.array, inp, out, fb, copy_of)

    def Reduce(self, sendbuf, recvbuf, op=None, root: int = 0, *, stream=None) -> None:
        """``recvbuf`` on ``root`` = op over ranks of sendbuf; recvbuf is ignored elsewhere."""
        self._collective("reduce", self._reduce, sendbuf, recvbuf, op, root, stream)

    def _reduce(self, sendbuf, recvbuf, op, root) -> None:
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
            return self._plain("Reduce", str(f), lambda: self._coll_comm().Ireduce(sendbuf, recvbuf, op, root))
        ref = r if r is not None else s
        if ref is None:  # not reached: off the root IN_PLACE is refused above, so sendbuf was parsed
            raise BufferMismatchError(f"Reduce on rank {self._rank} got neither a sendbuf nor a recvbuf")
        m, dt = ref.count, ref.array.dtype
        if r is not None and s is not None:
            self._same(s, r, "sendbuf", "recvbuf", m)
        self._check_op_dtype(opname, dt)
        copy_of = None
        if s is None:  # in place, so at the root: ref is recvbuf
            inp, copy_of = None, ref.array  # the schedule works on a private copy of it (made in _run)
        else:
            inp = s.array
        out = r.array if r is not None else None

        def fb():
            self._mpi_collective("Reduce", lambda: self._coll_comm().Ireduce(sendbuf, recvbuf, mpi_op, root))
            if out is not None:
                self._finish_avg(opname, out)

        self._run("reduce", m * dt.itemsize, m, dt, opname, root, ref.array, inp, out, fb, copy_of)

    def Allgather(self, sendbuf, recvbuf, *, stream=None) -> None:
        """recvbuf block ``q`` = sendbuf of rank ``q`` (``MPI.IN_PLACE``: this rank's block is the input)."""
        self._collective("allgather", self._allgather, sendbuf, recvbuf, None, 0, stream)

    def _allgather(self, sendbuf, recvbuf, op, root) -> None:
        self._call = ("allgather", sendbuf, recvbuf, None, 0)
        n = self._size
        try:
            r = self._parse(recvbuf, "recvbuf", n, writable=True)
            in_place = self._is_in_place(sendbuf)
            s = None if in_place else self._parse(sendbuf, "sendbuf", 1)
        except _Fallback as f:
            return self._plain("Allgather", str(f), lambda: self._coll_comm().Iallgather(sendbuf, recvbuf))
        m, dt = r.count, r.array.dtype
        if s is not None:
            self._same(s, r, "sendbuf", "recvbuf", m, recv_blocks=n)
        copy_of = None
        if s is None:  # in place
            inp, copy_of = None, r.array[self._rank * m:(self._rank + 1) * m]  # copied in _run, as above
        else:
            inp = s.array
        self._run("allgather", n * m * dt.itemsize, m, dt, "sum", 0, r.array, inp, r.array,
                  lambda: self._mpi_collective("Allgather", lambda: self._coll_comm().Iallgather(sendbuf, recvbuf)), copy_of)

    def Alltoall(self, sendbuf, recvbuf, *, stream=None) -> None:
        """recvbuf block ``q`` = block ``rank`` of rank ``q``'s sendbuf."""
        self._collective("alltoall", self._alltoall, sendbuf, recvbuf, None, 0, stream)

    def _alltoall(self, sendbuf, recvbuf, op, root) -> None:
        self._call = ("alltoall", sendbuf, recvbuf, None, 0)
        n = self._size
        try:
            r = self._parse(recvbuf, "recvbuf", n, writable=True)
            in_place = self._is_in_place(sendbuf)
            s = None if in_place else self._parse(sendbuf, "sendbuf", n)
        except _Fallback as f:
            return self._plain("Alltoall", str(f), lambda: self._coll_comm().Ialltoall(sendbuf, recvbuf))
        m, dt = r.count, r.array.dtype
        if s is not None:
            self._same(s, r, "sendbuf", "recvbuf", m, blocks=n, recv_blocks=n, what_count=f"{n} x {m} (one block per rank)")
        copy_of = None
        if s is None:  # in place
            inp, copy_of = None, r.array  # the schedule works on a private copy of it (made in _run)
        else:
            inp = s.array
        self._run("alltoall", n * m * dt.itemsize, m, dt, "sum", 0, r.array, inp, r.array,
                  lambda: self._mpi_collective("Alltoall", lambda: self._coll_comm().Ialltoall(sendbuf, recvbuf)), copy_of)

    def Bcast(self, buf, root: int = 0, *, stream=None) -> None:
        """Every rank's ``buf`` = the root's."""
        self._collective("broadcast", self._bcast, buf, None, None, root, stream)

    def _bcast(self, buf, _none, op, root) -> None:
        self._check_root(root)
        self._call = ("broadcast", buf, None, None, root)
        if self._is_in_place(buf):
            raise BufferMismatchError("Bcast takes one buffer; MPI.IN_PLACE has no meaning there")
        at_root = self._rank == root
        try:
            b = self._parse(buf, "buf", 1, writable=not at_root)
        except _Fallback as f:
            return self._plain("Bcast", str(f), lambda: self._coll_comm().Ibcast(buf, root))
        m, dt = b.count, b.array.dtype
        self._run("broadcast", m * dt.itemsize, m, dt, "sum", root, b.array,
                  b.array if at_root else None, None if at_root else b.array,
                  lambda: self._mpi_collective("Bcast", lambda: self._coll_comm().Ibcast(buf, root)))

    # ------------------------------------------------- variable counts
    def Alltoallv(self, sendbuf, recvbuf, *, stream=None) -> None:
        """Block ``q`` of recvbuf (``recvcounts[q]`` elements at ``recvdispls[q]``) = rank ``q``'s block for this rank.

        Buffer specs as in mpi4py: ``[buf, counts]``, ``[buf, (counts, displs)]``,
        ``[buf, counts, displs, datatype]``, ... Runs an explicit schedule with
        every block at its own size (:mod:`~ccsynth.collectives.vschedule`) when the
        plan covers alltoall at the call's size; the ranks first share their
        counts (one small allgather), which also catches counts that disagree.
        """
        self._collective("alltoallv", self._alltoallv, sendbuf, recvbuf, None, 0, stream)

    def Allgatherv(self, sendbuf, recvbuf, *, stream=None) -> None:
        """recvbuf block ``q`` (``counts[q]`` elements at ``displs[q]``) = rank ``q``'s sendbuf."""
        self._collective("allgatherv", self._allgatherv, sendbuf, recvbuf, None, 0, stream)

    def Reduce_scatter(self, sendbuf, recvbuf, recvcounts=None, op=None, *, stream=None) -> None:
        """Rank ``r`` gets block ``r`` (``recvcounts[r]`` elements) of the reduction of everyone's sendbuf."""
        self._collective("reduce_scatterv", self._reduce_scatterv, sendbuf, recvbuf, (recvcounts, op), 0, stream)

    def Ialltoallv(self, sendbuf, recvbuf, *, stream=None) -> Request:  # type: ignore[override]  # a ccsynth Request
        """Non-blocking :meth:`Alltoallv`."""
        return self._start("alltoallv", self._alltoallv, sendbuf, recvbuf, None, 0, stream)

    def Iallgatherv(self, sendbuf, recvbuf, *, stream=None) -> Request:  # type: ignore[override]  # a ccsynth Request
        """Non-blocking :meth:`Allgatherv`."""
        return self._start("allgatherv", self._allgatherv, sendbuf, recvbuf, None, 0, stream)

    def Ireduce_scatter(self, sendbuf, recvbuf, recvcounts=None, op=None, *, stream=None) -> Request:  # type: ignore[override]  # a ccsynth Request
        """Non-blocking :meth:`Reduce_scatter`."""
        return self._start("reduce_scatterv", self._reduce_scatterv, sendbuf, recvbuf, (recvcounts, op), 0, stream)

    def _parse_v(self, spec, what: str, writable: bool = False) -> VBuf:
        """A v-collective buffer spec -> flat array, counts and displacements (mpi4py's forms)."""
        MPI = self._MPI
        if not isinstance(spec, (list, tuple)) or len(spec) < 2:
            raise _Fallback(f"{what} gives no per-rank counts")
        buf, rest = spec[0], list(spec[1:])
        datatype = None
        if rest and isinstance(rest[-1], (MPI.Datatype, str)):
            datatype = rest.pop()
        if len(rest) == 2:
            counts, displs = rest
        elif len(rest) == 1:
            counts, displs = rest[0], None
            if isinstance(counts, tuple) and len(counts) == 2 and all(
                    isinstance(x, (list, tuple, np.ndarray)) or x is None for x in counts):
                counts, displs = counts
        else:
            raise BufferMismatchError(f"{what}: a v-collective buffer spec is [buf, counts, displs, datatype], got {len(spec)} items")
        if isinstance(counts, (int, np.integer)):
            raise _Fallback(f"{what} gives one count, not one per rank")
        arr = self._array(buf, what)
        if not (arr.flags.c_contiguous or arr.flags.f_contiguous):
            raise BufferMismatchError(f"{what} is not contiguous (shape {arr.shape}, strides {arr.strides})")
        if writable and not getattr(arr.flags, "writeable", True):
            raise BufferMismatchError(f"{what} is read-only; the collective writes into it: pass a writable array")
        flat = arr.reshape(-1, order="A") if arr.ndim != 1 else arr
        if isinstance(datatype, str):
            datatype = MPI.Datatype.fromcode(datatype)
        if datatype is not None:
            dt = _dtype_of(datatype)
            if dt != flat.dtype:
                if flat.nbytes % dt.itemsize:
                    raise BufferMismatchError(f"{what} has {flat.nbytes} bytes, not a whole number of {dt.name}")
                flat = flat.view(np.uint8).view(dt)
        c, d = check_counts(what, counts, displs, self._size, flat.size)
        return VBuf(flat, c, d)

    def _run_v(self, kind: str, counts, nbytes: int, send, recv, in_offsets, out_offsets, fallback) -> None:
        """A v-call on its explicit schedule (every block at its own size: :mod:`~ccsynth.collectives.vschedule`).

        ``counts`` (the count matrix of an Alltoallv, the counts of an
        Allgatherv) and ``nbytes`` (the largest per-rank buffer) are the same
        on every rank. It runs when the plan covers the equal-block collective
        at ``nbytes`` (a plan without alltoall, or the empty plan, leaves the
        call to the MPI library as before); ``fallback()`` starts the MPI library's own.
        """
        name = {"alltoallv": "Alltoallv", "allgatherv": "Allgatherv"}[kind]
        if self._schedule_for(V_KINDS[kind], max(nbytes, 1)) is None:
            return self._plain(name, "no schedule in the plan covers this size", fallback)
        if self.debug:
            self._agree(f"{kind} (call {self._channel.seq}) of {nbytes} bytes, {np.dtype(recv.dtype).name}")
        self._channel.memory.note_message(nbytes)
        me, sig = self._rank, V_KINDS[kind]
        program = self._vschedules.get(kind, counts, lambda sched: ExplicitProgram(sched, me, sig))
        program.run(self._channel, self._mpi, self._backend_for(recv), send, recv, in_offsets, out_offsets)
        self.last_algorithm = program.schedule.name

    def _padding(self, largest: int, real: int, dtype, fallback) -> Padding | None:
        """The padded block for a Reduce_scatter with counts (None: too much padding, the MPI library ran it)."""
        n = self._size
        sched = self._schedule_for("reduce_scatter", n * max(largest, 1) * np.dtype(dtype).itemsize)
        quantum = sched.collective.chunk_factor if sched is not None else 1
        pad = Padding.of([0] * n, quantum, largest)
        padded = n * pad.block
        if real and padded > MAX_PADDING * real:
            self._plain("Reduce_scatter", f"counts this uneven (largest {largest}, {real} elements in all) would "
                        f"pad the messages to {padded / real:.1f}x their size", fallback)
            return None
        return pad

    def _alltoallv(self, sendbuf, recvbuf, op, root) -> None:
        n = self._size
        try:
            if self._is_in_place(sendbuf):
                raise _Fallback("MPI.IN_PLACE")
            r = self._parse_v(recvbuf, "recvbuf", writable=True)
            s = self._parse_v(sendbuf, "sendbuf")
        except _Fallback as f:
            return self._plain("Alltoallv", str(f), lambda: self._coll_comm().Ialltoallv(sendbuf, recvbuf))
        if s.array.dtype != r.array.dtype:
            raise BufferMismatchError(f"sendbuf has dtype {s.array.dtype.name} but recvbuf has dtype {r.array.dtype.name}")
        # every rank's send and receive counts: the schedule needs the send counts of all, and with the receive
        # counts every rank finds a mismatch itself (no rank may raise while another is still in the allgather,
        # which MPI cannot cancel)
        both = np.empty((n, 2 * n), np.int64)
        mine = np.concatenate([s.counts, r.counts])
        self._mpi_collective("Alltoallv", lambda: self._coll_comm().Iallgather(mine, both))
        rows, expects = both[:, :n], both[:, n:]
        if not np.array_equal(rows.T, expects):
            q, p = (int(x) for x in np.argwhere(expects != rows.T)[0])
            e = BufferMismatchError(f"rank {q} expects {int(expects[q, p])} element(s) from rank {p}, which sends "
                                    f"{int(rows[p, q])}: the ranks passed different counts to Alltoallv")
            mark_shared(e)  # every rank raises it: nobody needs to be told
            raise e
        rows = np.ascontiguousarray(rows)
        nbytes = int(rows.sum(axis=1).max(initial=0)) * r.array.dtype.itemsize  # the same on every rank
        self._run_v("alltoallv", rows, nbytes, s.array, r.array, s.displs, r.displs,
                    lambda: self._coll_comm().Ialltoallv(sendbuf, recvbuf))

    def _allgatherv(self, sendbuf, recvbuf, op, root) -> None:
        me = self._rank
        try:
            r = self._parse_v(recvbuf, "recvbuf", writable=True)
            if self._is_in_place(sendbuf):
                mine = r.array[int(r.displs[me]):int(r.displs[me] + r.counts[me])]
            else:
                mine = self._parse(sendbuf, "sendbuf", 1).array
        except _Fallback as f:
            return self._plain("Allgatherv", str(f), lambda: self._coll_comm().Iallgatherv(sendbuf, recvbuf))
        if mine.dtype != r.array.dtype:
            raise BufferMismatchError(f"sendbuf has dtype {mine.dtype.name} but recvbuf has dtype {r.array.dtype.name}")
        if mine.size != r.counts[me]:
            raise BufferMismatchError(f"sendbuf has {mine.size} element(s) but recvbuf's counts give rank {me} "
                                      f"{int(r.counts[me])}")
        self._run_v("allgatherv", r.counts, r.total * r.array.dtype.itemsize, mine, r.array, _ZERO_OFFSET,
                    r.displs, lambda: self._coll_comm().Iallgatherv(sendbuf, recvbuf))

    def _reduce_scatterv(self, sendbuf, recvbuf, counts_op, root) -> None:
        n, me = self._size, self._rank
        recvcounts, op = counts_op
        op = self._MPI.SUM if op is None else op
        in_place = self._is_in_place(sendbuf)
        try:
            opname, mpi_op = self._op(op)
            r = self._parse(recvbuf, "recvbuf", 1, writable=True)
            if recvcounts is None:  # as mpi4py: every rank's receive count
                recvcounts = np.empty(n, np.int64)
                mine = np.array([r.count], np.int64)
                self._mpi_collective("Reduce_scatter", lambda: self._coll_comm().Iallgather(mine, recvcounts))
            c, d = check_counts("recvcounts", recvcounts, None, n, 1 << 62)
            total = int(c.sum())
            s = r.array[:total] if in_place else self._parse(sendbuf, "sendbuf", 1).array
        except _Fallback as f:
            return self._plain("Reduce_scatter", str(f),
                               lambda: self._coll_comm().Ireduce_scatter(sendbuf, recvbuf, recvcounts, op))
        if s.size != total:
            raise BufferMismatchError(f"sendbuf has {s.size} element(s); recvcounts {c.tolist()} add up to {total}")
        if not in_place and s.dtype != r.array.dtype:
            raise BufferMismatchError(f"sendbuf has dtype {s.dtype.name} but recvbuf has dtype {r.array.dtype.name}")
        if r.count < c[me]:
            raise BufferMismatchError(f"recvbuf has {r.count} element(s); recvcounts gives rank {me} {int(c[me])}")
        self._check_op_dtype(opname, s.dtype)
        out = r.array[:int(c[me])]
        pad = self._padding(int(c.max(initial=0)), total, s.dtype,
                            lambda: self._coll_comm().Ireduce_scatter(sendbuf, recvbuf, recvcounts, mpi_op))
        if pad is None:
            self._finish_avg(opname, out)
            return
        if pad.block == 0:
            self.last_algorithm = "(empty)"
            return
        sp, _ = self._private("vsend", s, n * pad.block)
        rp, _ = self._private("vrecv", s, pad.block)
        pack(sp, s, c, d, pad.block, zero=True)
        self._reduce_scatter_block(sp, rp, op, 0)
        out[...] = rp[:out.size]

    # ------------------------------------------------------ new communicators
    def _like(self, comm):
        """A communicator of this class on ``comm`` (a Split or Dup of ours), with our options and plan where it fits."""
        if comm is None or comm == self._MPI.COMM_NULL:
            return None
        plan = self._plan if self._plan is not self._default_plan else None
        size = comm.Get_size()
        if plan is not None and not any(e.n_ranks == size for e in getattr(plan, "entries", ())):
            log.info("the plan has no entries for %d ranks: the new communicator uses the default plan", size)
            plan = None
        return type(self)(comm, plan, default_plan=self._default_plan, **self._options)

    def Dup(self, info=None):
        """A ccsynth communicator on a duplicate of the wrapped comm (``.comm`` is mpi4py's)."""
        return self._like(self.comm.Dup() if info is None else self.comm.Dup(info))

    def Split(self, color: int = 0, key: int = 0):
        """``comm.Split`` as a ccsynth communicator (None where the rank gets ``MPI.COMM_NULL``)."""
        return self._like(self.comm.Split(color, key))

    def Split_type(self, split_type, key: int = 0, info=None):
        """``comm.Split_type`` (e.g. ``MPI.COMM_TYPE_SHARED``: the ranks of a node) as a ccsynth communicator."""
        MPI = self._MPI
        return self._like(self.comm.Split_type(split_type, key, MPI.INFO_NULL if info is None else info))

    def Create(self, group):
        """``comm.Create(group)`` as a ccsynth communicator (None outside the group)."""
        return self._like(self.comm.Create(group))

    def Create_group(self, group, tag: int = 0):
        """``comm.Create_group(group, tag)`` as a ccsynth communicator (collective over ``group`` only)."""
        return self._like(self.comm.Create_group(group, tag))

    def Clone(self):
        """:meth:`Dup` (mpi4py's ``Clone``)."""
        return self.Dup()

    def Dup_with_info(self, info):
        """``comm.Dup_with_info(info)`` as a ccsynth communicator."""
        return self._like(self.comm.Dup_with_info(info))

    def Idup(self, info=None):
        """``(communicator, request)`` as mpi4py's ``Idup``, but the duplicate is made (and wrapped) at once:
        the ccsynth constructor is collective, so the request is already complete (a null request)."""
        return self.Dup(info), MPI.Request()

    def Idup_with_info(self, info):
        """As :meth:`Idup`, with ``info``."""
        return self.Dup(info), MPI.Request()

    @classmethod
    def Create_from_group(cls, group, stringtag: str = "org.mpi4py", info=None, errhandler=None):
        """``MPI.Intracomm.Create_from_group`` (MPI-4 sessions) wrapped in a ccsynth communicator."""
        comm = MPI.Intracomm.Create_from_group(group, stringtag, MPI.INFO_NULL if info is None else info,
                                               MPI.ERRORS_ARE_FATAL if errhandler is None else errhandler)
        return cls(comm)

    def free(self) -> None:
        """mpi4py's ``free()``: here :meth:`Free` (ccsynth's resources; the wrapped communicator stays its owner's)."""
        if not getattr(self, "_freed", False):
            self.Free()

    def Disconnect(self) -> None:
        """Release ccsynth's resources (:meth:`Free`), then ``Disconnect`` the wrapped communicator."""
        self.free()
        self.comm.Disconnect()

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
        self._went_to_mpi((name, reason), "%s: %s; using the MPI library's own %s", name, reason, name)
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


def _mpi_only(name: str):
    """A collective ccsynth does not run: the wrapped comm's, with ``last_algorithm = "mpi"`` and a notice."""

    def call(self, *args, **kwargs):
        self._went_to_mpi((name, "not covered"), "%s has no ccsynth schedule; the MPI library runs it", name)
        result = getattr(self.comm, name)(*args, **kwargs)
        self.last_algorithm = "mpi"
        return result

    call.__name__ = call.__qualname__ = name
    call.__doc__ = getattr(getattr(MPI.Intracomm, name), "__doc__", None)
    return call


for _name in sorted(_MPI_ONLY):
    if hasattr(MPI.Intracomm, _name):  # older mpi4py lacks the MPI-4 calls
        setattr(Communicator, _name, _mpi_only(_name))
