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
``Alltoall``, ``Bcast``, ``Reduce``, ``Alltoallv``, ``Allgatherv`` and
``Reduce_scatter`` with counts, and their non-blocking forms (``Iallreduce``,
...), with ``MPI.IN_PLACE`` where MPI allows it, on NumPy, GPU and other
array-likes; ops ``MPI.SUM``, ``MPI.PROD``, ``MPI.MIN``, ``MPI.MAX`` or
ccsynth's names ``"sum"``, ``"prod"``, ``"min"``, ``"max"``, ``"avg"``
(floating point only). The class is a table of contents: each method
forwards to the module that owns the work, run by the communicator's
:class:`~ccsynth.collectives.calls.Calls` (calls, errors on every rank):

==========================================  =====================================================
mpi4py's buffer specs, ops, roots           :mod:`~ccsynth.collectives.buffer_specs`
equal-block collectives                     :mod:`~ccsynth.collectives.block_collectives`
v-collectives                               :mod:`~ccsynth.collectives.vcollectives`
which schedule, compiled programs, replay   :mod:`~ccsynth.collectives.schedule_cache`
falling back to the MPI library             :mod:`~ccsynth.collectives.fallback`
GPU buffers, ``stream=``, staging           :mod:`~ccsynth.collectives.staging`
non-blocking calls                          :mod:`~ccsynth.collectives.requests`
what the ranks compare (setup, ``debug``)   :mod:`~ccsynth.collectives.agreement`
the plan given, over the default plan       :mod:`~ccsynth.collectives.plan_sources`
==========================================  =====================================================

Which algorithm: the message size (nccl-tests convention: the larger
per-rank buffer in bytes) selects a schedule from the plan; ``plan`` is a
:class:`~ccsynth.collectives.plan.Plan`, a Schedule, a plan or schedule file
path, a list of them, or None for the default plan -- whatever the caller
passes in as ``default_plan``. Which baseline to run at which size is
policy, built from the synthesizer's baselines, a layer above this one: this
module never imports :mod:`ccsynth.synth`. The public ``ccsynth.Communicator``
(:mod:`ccsynth.communicator`) is this class with the built-in default plan
passed in; without either the plan is empty (:data:`NO_PLAN`) and every call
goes to the MPI library. Whatever no schedule covers goes to the MPI
library's own collective, visibly, and ``last_algorithm`` is ``"mpi"``;
``fallback=False`` raises :class:`~ccsynth.errors.PlanError` instead.

The communicator sends its point-to-point traffic on a duplicate of the
wrapped communicator (``comm.Dup()`` in the constructor, a collective call),
so it never mixes with the program's own messages; ``Free()`` (on every
rank) releases it. Install
:func:`~ccsynth.collectives.mpi_util.install_abort_handler` so that an error
nobody catches aborts the job.
"""

from __future__ import annotations

from mpi4py import MPI

from ccsynth.collectives import block_collectives as blocks, rooted_v, vcollectives as vcalls
from ccsynth.collectives.calls import Calls
from ccsynth.collectives.fallback import MPI_ONLY
from ccsynth.collectives.mpi_util import CommWrapper, comm_to_wrap
from ccsynth.collectives.plan import Plan
from ccsynth.collectives.plan_sources import plan_for_split
from ccsynth.collectives.requests import Request
from ccsynth.collectives.runtime.channel import Channel
from ccsynth.collectives.static_program import STATIC_MAX_BYTES

__all__ = ["Communicator", "NO_PLAN"]

# The default plan of a communicator built without one: no schedules, every call goes to the MPI library.
NO_PLAN = Plan(())


def _setting(name: str, doc: str) -> property:
    """A read-only attribute of the communicator: its setting ``name``, fixed when it was built."""
    return property(lambda self: getattr(self._calls.options, name), doc=doc)


class Communicator(MPI.Intracomm, CommWrapper):
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
            use and still on device 0: :func:`ccsynth.kernels.devices.pick_device`),
            an index, or False (leave it).
        staging: device buffers through pinned host memory: ``"auto"`` (when
            the MPI library is not CUDA-aware), ``"always"`` or ``"never"``
            (raise instead): :mod:`~ccsynth.collectives.staging`.

    The settings are attributes of the same names, fixed when it is built.

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
        return super().__new__(cls, comm_to_wrap(comm))

    def __init__(self, comm=None, plan=None, *, default_plan=None, backend: str = "auto", fallback: bool = True,
                 slice_bytes: int | None = None, debug: bool | None = None, static_max_bytes: int = STATIC_MAX_BYTES,
                 timeout: float | None = None, cache_bytes: int | None = None, phases=None,
                 phase_threads: bool | str = "auto", device="auto", staging: str = "auto"):
        self._options = dict(backend=backend, fallback=fallback, slice_bytes=slice_bytes, debug=debug,
                             static_max_bytes=static_max_bytes, timeout=timeout, cache_bytes=cache_bytes,
                             device=device, staging=staging)
        self.comm = comm_to_wrap(comm)
        self._calls = Calls.open(self.comm, plan, NO_PLAN if default_plan is None else default_plan, phases=phases,
                                 phase_threads=phase_threads, **self._options)

    backend = _setting("backend", "The buffer backend: ``auto``, ``numpy`` or ``cupy``.")
    fallback = _setting("fallback", "Whether calls no schedule covers go to the MPI library (else PlanError).")
    debug = _setting("debug", "Whether every call first agrees on its signature.")
    slice_bytes = _setting("slice_bytes", "The executor's pipeline slice size (None: its default).")
    static_max_bytes = _setting("static_max_bytes", "The largest message of a straight-line program.")
    timeout = _setting("timeout", "Seconds a call may wait without progress (None: as MPI would).")
    device = _setting("device", "The index of this rank's GPU, or None.")
    staging = _setting("staging", "Device buffers through pinned host memory: ``auto``, ``always`` or ``never``.")

    @property
    def plan(self):
        """The plan that picks a schedule per call (assigning a new one takes effect on the next call)."""
        return self._calls.plan

    @plan.setter
    def plan(self, plan) -> None:
        self._calls.set_plan(plan)

    @property
    def plan_fingerprint(self) -> str:
        """The hash of the plan that the ranks compared in the constructor (``"default"`` for the built-in one)."""
        return self._calls.plan_fingerprint

    @property
    def last_algorithm(self) -> str:
        """What ran the last call: a schedule's name, ``"multidim:<scheduler>"`` or ``"mpi"``."""
        return self._calls.last_algorithm

    @property
    def channel(self) -> Channel:
        """The private channel: call numbers, control line, buffer budget (:mod:`~ccsynth.collectives.runtime.channel`)."""
        return self._calls.channel

    @property
    def cached_bytes(self) -> int:
        """Bytes of the buffers kept between calls (within the budget, see ``cache_bytes``)."""
        return self._calls.channel.memory.total

    @property
    def cuda_aware(self):
        """The MPI library's CUDA-awareness (:func:`~ccsynth.kernels.devices.cuda_awareness`), asked once."""
        return self._calls.staging.awareness

    # for the tests: the host stand-ins of device buffers (one test replaces them), the v-calls' explicit schedules
    _stager = property(lambda self: self._calls.stager, lambda self, stager: setattr(self._calls, "stager", stager))
    _vschedules = property(lambda self: self._calls.vschedules)

    def __repr__(self) -> str:
        return f"<ccsynth.Communicator rank {self._calls.rank} of {self._calls.size}>"

    # ``size`` and ``rank`` are mpi4py's own properties (the same communicator)
    def Get_size(self) -> int:
        return self._calls.size

    def Get_rank(self) -> int:
        return self._calls.rank

    # ------------------------------------------------------------ collectives
    def Allreduce(self, sendbuf, recvbuf, op=None, *, stream=None) -> None:
        """``recvbuf = op over ranks of sendbuf`` (``MPI.IN_PLACE`` as sendbuf: recvbuf is the input)."""
        self._calls.blocking("allreduce", blocks.allreduce, sendbuf, recvbuf, op, 0, stream)

    def Reduce_scatter_block(self, sendbuf, recvbuf, op=None, *, stream=None) -> None:
        """Rank ``r`` gets block ``r`` of the reduction of everyone's sendbuf (n blocks)."""
        self._calls.blocking("reduce_scatter", blocks.reduce_scatter_block, sendbuf, recvbuf, op, 0, stream)

    def Reduce(self, sendbuf, recvbuf, op=None, root: int = 0, *, stream=None) -> None:
        """``recvbuf`` on ``root`` = op over ranks of sendbuf; recvbuf is ignored elsewhere."""
        self._calls.blocking("reduce", blocks.reduce, sendbuf, recvbuf, op, root, stream)

    def Allgather(self, sendbuf, recvbuf, *, stream=None) -> None:
        """recvbuf block ``q`` = sendbuf of rank ``q`` (``MPI.IN_PLACE``: this rank's block is the input)."""
        self._calls.blocking("allgather", blocks.allgather, sendbuf, recvbuf, None, 0, stream)

    def Alltoall(self, sendbuf, recvbuf, *, stream=None) -> None:
        """recvbuf block ``q`` = block ``rank`` of rank ``q``'s sendbuf."""
        self._calls.blocking("alltoall", blocks.alltoall, sendbuf, recvbuf, None, 0, stream)

    def Bcast(self, buf, root: int = 0, *, stream=None) -> None:
        """Every rank's ``buf`` = the root's."""
        self._calls.blocking("broadcast", blocks.bcast, buf, None, None, root, stream)

    def Alltoallv(self, sendbuf, recvbuf, *, stream=None) -> None:
        """Block ``q`` of recvbuf (``recvcounts[q]`` elements at ``recvdispls[q]``) = rank ``q``'s block for this rank.

        Buffer specs as in mpi4py: ``[buf, counts]``, ``[buf, (counts, displs)]``,
        ``[buf, counts, displs, datatype]``, ... Runs an explicit schedule with
        every block at its own size (:mod:`~ccsynth.collectives.vschedule`) when the
        plan covers alltoall at the call's size; the ranks first share their
        counts (one small allgather), which also catches counts that disagree.
        """
        self._calls.blocking("alltoallv", vcalls.alltoallv, sendbuf, recvbuf, None, 0, stream)

    def Allgatherv(self, sendbuf, recvbuf, *, stream=None) -> None:
        """recvbuf block ``q`` (``counts[q]`` elements at ``displs[q]``) = rank ``q``'s sendbuf."""
        self._calls.blocking("allgatherv", vcalls.allgatherv, sendbuf, recvbuf, None, 0, stream)

    def Reduce_scatter(self, sendbuf, recvbuf, recvcounts=None, op=None, *, stream=None) -> None:
        """Rank ``r`` gets block ``r`` (``recvcounts[r]`` elements) of the reduction of everyone's sendbuf."""
        self._calls.blocking("reduce_scatterv", vcalls.reduce_scatterv, sendbuf, recvbuf, (recvcounts, op), 0, stream)

    def Gatherv(self, sendbuf, recvbuf, root: int = 0) -> None:
        """The MPI library's ``Gatherv``, after every rank's arguments are checked (:mod:`~ccsynth.collectives.rooted_v`)."""
        self._calls.blocking("gatherv", rooted_v.gatherv, sendbuf, recvbuf, None, root, None)

    def Scatterv(self, sendbuf, recvbuf, root: int = 0) -> None:
        """The MPI library's ``Scatterv``, after every rank's arguments are checked (:mod:`~ccsynth.collectives.rooted_v`)."""
        self._calls.blocking("scatterv", rooted_v.scatterv, sendbuf, recvbuf, None, root, None)

    # ------------------------------------------------------------ non-blocking (ccsynth Requests)
    def Iallreduce(self, sendbuf, recvbuf, op=None, *, stream=None) -> Request:  # type: ignore[override]
        """Non-blocking :meth:`Allreduce`: returns a :class:`~ccsynth.collectives.requests.Request`."""
        return self._calls.start("allreduce", blocks.allreduce, sendbuf, recvbuf, op, 0, stream)

    def Ireduce_scatter_block(self, sendbuf, recvbuf, op=None, *, stream=None) -> Request:  # type: ignore[override]
        """Non-blocking :meth:`Reduce_scatter_block`."""
        return self._calls.start("reduce_scatter", blocks.reduce_scatter_block, sendbuf, recvbuf, op, 0, stream)

    def Iallgather(self, sendbuf, recvbuf, *, stream=None) -> Request:  # type: ignore[override]
        """Non-blocking :meth:`Allgather`."""
        return self._calls.start("allgather", blocks.allgather, sendbuf, recvbuf, None, 0, stream)

    def Ialltoall(self, sendbuf, recvbuf, *, stream=None) -> Request:  # type: ignore[override]
        """Non-blocking :meth:`Alltoall`."""
        return self._calls.start("alltoall", blocks.alltoall, sendbuf, recvbuf, None, 0, stream)

    def Ibcast(self, buf, root: int = 0, *, stream=None) -> Request:  # type: ignore[override]
        """Non-blocking :meth:`Bcast`."""
        return self._calls.start("broadcast", blocks.bcast, buf, None, None, root, stream)

    def Ireduce(self, sendbuf, recvbuf, op=None, root: int = 0, *, stream=None) -> Request:  # type: ignore[override]
        """Non-blocking :meth:`Reduce`."""
        return self._calls.start("reduce", blocks.reduce, sendbuf, recvbuf, op, root, stream)

    def Ialltoallv(self, sendbuf, recvbuf, *, stream=None) -> Request:  # type: ignore[override]
        """Non-blocking :meth:`Alltoallv`."""
        return self._calls.start("alltoallv", vcalls.alltoallv, sendbuf, recvbuf, None, 0, stream)

    def Iallgatherv(self, sendbuf, recvbuf, *, stream=None) -> Request:  # type: ignore[override]
        """Non-blocking :meth:`Allgatherv`."""
        return self._calls.start("allgatherv", vcalls.allgatherv, sendbuf, recvbuf, None, 0, stream)

    def Ireduce_scatter(self, sendbuf, recvbuf, recvcounts=None, op=None, *,  # type: ignore[override]
                        stream=None) -> Request:
        """Non-blocking :meth:`Reduce_scatter`."""
        return self._calls.start("reduce_scatterv", vcalls.reduce_scatterv, sendbuf, recvbuf, (recvcounts, op), 0,
                                 stream)

    def drain(self) -> None:
        """Wait until every non-blocking call started on this communicator has completed (errors stay with their requests)."""
        self._calls.drain()

    # ------------------------------------------------------------ new communicators, the end
    def _like(self, comm):
        """A communicator of this class on ``comm`` (a Split or Dup of ours), with our options and plan where it fits."""
        if comm is None or comm == MPI.COMM_NULL:
            return None
        calls = self._calls
        plan = plan_for_split(calls.plan, calls.default_plan, comm.Get_size())
        return type(self)(comm, plan, default_plan=calls.default_plan, **self._options)

    def Dup(self, info=None):
        """A ccsynth communicator on a duplicate of the wrapped comm (``.comm`` is mpi4py's)."""
        return self._like(self.comm.Dup() if info is None else self.comm.Dup(info))

    def Split(self, color: int = 0, key: int = 0):
        """``comm.Split`` as a ccsynth communicator (None where the rank gets ``MPI.COMM_NULL``)."""
        return self._like(self.comm.Split(color, key))

    def Split_type(self, split_type, key: int = 0, info=None):
        """``comm.Split_type`` (e.g. ``MPI.COMM_TYPE_SHARED``: the ranks of a node) as a ccsynth communicator."""
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

    def Free(self) -> None:
        """Release the compiled programs, the cached buffers and the private communicators (not the wrapped comm).

        Waits for the non-blocking calls still running first, and stops the progress thread.
        """
        self._calls.free()
        self._freed = True

    def free(self) -> None:
        """mpi4py's ``free()``: here :meth:`Free` (ccsynth's resources; the wrapped communicator stays its owner's)."""
        if not getattr(self, "_freed", False):
            self.Free()

    def Disconnect(self) -> None:
        """Release ccsynth's resources (:meth:`Free`), then ``Disconnect`` the wrapped communicator."""
        self.free()
        self.comm.Disconnect()

    def _mpi_only(self, name: str, args, kwargs):
        """A collective ccsynth does not run: the wrapped comm's, with ``last_algorithm = "mpi"`` and a notice."""
        calls = self._calls
        calls.fallback.tell((name, "not covered"), "%s has no ccsynth schedule; the MPI library runs it", name)
        calls.guard.enter()
        try:
            result = getattr(self.comm, name)(*args, **kwargs)
        finally:
            calls.guard.leave()
        calls.last_algorithm = "mpi"
        return result


def _mpi_only_method(name: str):
    def call(self, *args, **kwargs):
        return self._mpi_only(name, args, kwargs)

    call.__name__ = call.__qualname__ = name
    call.__doc__ = getattr(getattr(MPI.Intracomm, name), "__doc__", None)
    return call


for _name in sorted(MPI_ONLY):
    if hasattr(MPI.Intracomm, _name):  # older mpi4py lacks the MPI-4 calls
        setattr(Communicator, _name, _mpi_only_method(_name))
