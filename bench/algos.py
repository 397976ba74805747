"""What ``--algo`` names: the collective implementations a benchmark can time.

* ``mpi`` -- the MPI library's own collective (``comm.Allreduce`` ...);
* a baseline name (``ring``, ``recursive_doubling``, ``recursive_halving``,
  ``direct``, ``binomial_tree``, ``hierarchical``) -- that schedule built for
  a fully connected topology of the world's size, compiled once and run by
  ccsynth's executor (:class:`~ccsynth.collectives.executor.CompiledSchedule`);
* ``default`` (or ``plan``) -- the drop-in
  :class:`~ccsynth.collectives.communicator.Communicator` with the built-in
  default plan (:mod:`ccsynth.synth.default_plan`, what ``ccsynth.Communicator``
  uses), which picks a schedule per message size;
* ``plan:FILE`` -- the drop-in communicator with the plan in FILE.

Every algorithm returns, per collective, a callable with the benchmark's
buffer convention: ``fn(send, recv)``, or ``fn(buf)`` for broadcast (root
``Options.root``), ``fn()`` for barrier; reductions use ``Options.op``
(SUM by default; ``avg`` is ccsynth's and NCCL's op, which the MPI library
lacks: ``--algo mpi`` refuses it). The in-place
form (nccl-tests' in-place rows, ``MPI.IN_PLACE``: ``fn(buf)``), the
non-blocking calls (``Iallreduce`` ..., returning a request) and the
variable-count ones (``Alltoallv``, ``Allgatherv``) go through
:meth:`Algorithm.comm`, an object with mpi4py's methods: MPI's communicator
for ``mpi``, ccsynth's :class:`~ccsynth.collectives.communicator.Communicator`
for the plans, and for a baseline a Communicator whose plan is that one
schedule (so that whatever ccsynth's communicator accelerates, a baseline is
measured through it too).

Example:
    >>> [a.name for a in parse_algorithms("mpi,ring")]
    ['mpi', 'ring']
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable

from ccsynth.bench.omb import agree
from ccsynth.collectives.communicator import Communicator
from ccsynth.collectives.executor import CompiledSchedule, RunStats
from ccsynth.collectives.plan import Plan, PlanEntry
from ccsynth.collectives.plan_sources import as_plan
from ccsynth.collectives.schedule import Schedule
from ccsynth.collectives.spec import Collective
from ccsynth.errors import CCSynthError
from ccsynth.synth.baselines import BASELINES, make_baseline
from ccsynth.synth.default_plan import LazyDefaultPlan
from ccsynth.topologies import fully_connected

__all__ = [
    "DEFAULT_PLAN_NAMES",
    "Algorithm",
    "MpiAlgorithm",
    "ScheduleAlgorithm",
    "PlanAlgorithm",
    "NONBLOCKING_CALLS",
    "VARIABLE_CALLS",
    "mpi_op",
    "baseline_names",
    "baseline_chunk_factor",
    "valid_names",
    "parse_algorithms",
    "resolve_algorithms",
]

log = logging.getLogger(__name__)

DEFAULT_PLAN_NAMES = ("default", "plan")
_MPI_ONLY = "algorithm {!r} runs collectives only; latency, bw and barrier measure the MPI library: use --algo mpi"


def baseline_names() -> tuple[str, ...]:
    return tuple(BASELINES)


def valid_names() -> str:
    return ", ".join(("mpi", "default", "plan:FILE", *baseline_names()))


class Algorithm:
    """One ``--algo`` entry. ``setup`` may raise; call it on every rank (see omb.agree)."""

    name: str = ""

    def setup(self, kind: str | None, ctx) -> None:
        """Build and compile what ``kind`` needs (raises CCSynthError if it cannot)."""

    def collective(self, kind: str, ctx) -> Callable:
        raise NotImplementedError

    def chosen(self, kind: str, ctx, nbytes: int) -> str:
        """Which algorithm runs ``kind`` at ``nbytes`` (nccl-tests size)."""
        return self.name

    def stats_reader(self, kind: str, ctx) -> tuple[Callable[[], dict], Callable[[], None]] | None:
        """With ``--profile``: (read, reset) of the executor's time breakdown per run."""
        return None

    def comm(self, ctx):
        """The object with mpi4py's methods that the in-place, non-blocking and variable-count calls use."""
        return ctx.comm

    def ran(self, ctx) -> str:
        """What ran the last call made through :meth:`comm`: ccsynth's ``last_algorithm``, else ``"mpi"``."""
        return getattr(self.comm(ctx), "last_algorithm", "") or "mpi"

    def in_place(self, kind: str, ctx) -> Callable:
        """``fn(buf)``: ``kind`` with ``MPI.IN_PLACE`` (nccl-tests' in-place layout, see :func:`_in_place_calls`)."""
        return _in_place_calls(self.comm(ctx), ctx.options.root, ctx.rank, ctx.options.op)[kind]

    def at_root(self, kind: str, ctx, root: int) -> Callable:
        """``kind`` (broadcast or reduce) rooted at ``root``, through :meth:`comm` (OMB's ``-k rotate``: a root
        per iteration; ccsynth's communicator runs any root of its schedules)."""
        return _buffer_calls(self.comm(ctx), root, ctx.options.op)[kind]

    def nonblocking(self, kind: str, ctx) -> Callable:
        """``fn(send, recv) -> request`` (``fn(buf)`` for broadcast): the ``I`` form of ``kind``."""
        return _nonblocking_calls(self.comm(ctx), ctx.options.root)[kind]

    def variable(self, name: str, ctx) -> Callable:
        """``fn(send_spec, recv_spec)``: ``Alltoallv`` or ``Allgatherv`` (:data:`VARIABLE_CALLS`) with buffer specs."""
        return getattr(self.comm(ctx), VARIABLE_CALLS[name])

    def schedule_for(self, kind: str, ctx, nbytes: int) -> Schedule | None:
        """The schedule that runs ``kind`` at ``nbytes`` (nccl-tests size), as set up; None if none does (MPI's own)."""
        return None

    def free(self) -> None:
        """Release what :meth:`setup` built (compiled schedules); collective, like MPI's ``Free``."""


def mpi_op(c, op: str):
    """The reduction op to pass to ``c``: MPI's for ``sum``/``prod``/``min``/``max`` on any communicator, the name
    ``avg`` on a ccsynth communicator (the MPI library has no average: CCSynthError on a plain one)."""
    from mpi4py import MPI

    table = {"sum": MPI.SUM, "prod": MPI.PROD, "min": MPI.MIN, "max": MPI.MAX}
    if op in table:
        return table[op]
    if op == "avg" and isinstance(c, Communicator):
        return "avg"
    raise CCSynthError(f"op {op!r} is not an MPI reduction op (the MPI library has sum, prod, min, max; "
                       f"avg is ccsynth's and NCCL's): use another -o, or leave mpi out of --algo")


def _buffer_calls(c, root: int, op: str = "sum") -> dict[str, Callable]:
    """The benchmark's collectives as mpi4py buffer calls on ``c`` (an MPI comm or a ccsynth Communicator)."""
    OP = mpi_op(c, op)
    return {
        "allreduce": lambda s, r: c.Allreduce(s, r, OP),
        "allgather": lambda s, r: c.Allgather(s, r),
        "reduce_scatter": lambda s, r: c.Reduce_scatter_block(s, r, OP),
        "alltoall": lambda s, r: c.Alltoall(s, r),
        "reduce": lambda s, r: c.Reduce(s, r, OP, root),
        "broadcast": lambda b: c.Bcast(b, root),
    }


def _in_place_calls(c, root: int, rank: int, op: str = "sum") -> dict[str, Callable]:
    """The collectives with ``MPI.IN_PLACE``, one buffer each, as MPI defines them.

    allreduce, alltoall: ``buf`` is input and output; allgather: this rank's
    block of ``buf`` is its input; reduce_scatter: ``buf`` holds all ``n``
    blocks of input and block 0 receives the result; reduce: IN_PLACE at the
    root, an ordinary send elsewhere; broadcast is in place anyway.
    """
    from mpi4py import MPI

    SUM, IN_PLACE = mpi_op(c, op), MPI.IN_PLACE
    return {
        "allreduce": lambda b: c.Allreduce(IN_PLACE, b, SUM),
        "allgather": lambda b: c.Allgather(IN_PLACE, b),
        "reduce_scatter": lambda b: c.Reduce_scatter_block(IN_PLACE, b, SUM),
        "alltoall": lambda b: c.Alltoall(IN_PLACE, b),
        "reduce": (lambda b: c.Reduce(IN_PLACE, b, SUM, root)) if rank == root else (lambda b: c.Reduce(b, None, SUM, root)),
        "broadcast": lambda b: c.Bcast(b, root),
    }


#: the non-blocking benchmarks' calls (OMB's osu_i* names without the i)
NONBLOCKING_CALLS = {
    "allreduce": "Iallreduce",
    "allgather": "Iallgather",
    "reduce_scatter": "Ireduce_scatter_block",
    "alltoall": "Ialltoall",
    "broadcast": "Ibcast",
}
#: the variable-count benchmarks' calls
VARIABLE_CALLS = {"alltoallv": "Alltoallv", "allgatherv": "Allgatherv"}


def _nonblocking_calls(c, root: int) -> dict[str, Callable]:
    from mpi4py import MPI

    SUM = MPI.SUM
    return {
        "allreduce": lambda s, r: c.Iallreduce(s, r, SUM),
        "allgather": lambda s, r: c.Iallgather(s, r),
        "reduce_scatter": lambda s, r: c.Ireduce_scatter_block(s, r, SUM),
        "alltoall": lambda s, r: c.Ialltoall(s, r),
        "broadcast": lambda b: c.Ibcast(b, root),
    }


def _communicator(ctx, plan):
    """ccsynth's drop-in communicator on ``ctx.comm`` with ``plan`` (None: the default plan only)."""
    return Communicator(ctx.comm, plan=plan, default_plan=LazyDefaultPlan(), backend=ctx.options.buffer, fallback=True)


class MpiAlgorithm(Algorithm):
    """The MPI library's own collectives."""

    name = "mpi"

    def setup(self, kind: str | None, ctx) -> None:
        if kind in ("allreduce", "reduce", "reduce_scatter"):
            mpi_op(ctx.comm, ctx.options.op)  # avg: a clear error on every rank, before any measurement

    def collective(self, kind: str, ctx) -> Callable:
        c = ctx.comm
        return {**_buffer_calls(c, ctx.options.root, ctx.options.op), "barrier": c.Barrier}[kind]


def baseline_chunk_factor(kind: str, n: int) -> int:
    """The chunk factor a baseline of ``kind`` on ``n`` ranks is built with when ``--chunks`` is not given."""
    # Ring allreduce cuts the buffer into one block per rank; fewer chunks would leave it idle.
    return n if kind == "allreduce" else 1


def _chunk_factor(kind: str, ctx) -> int:
    chunks = ctx.options.chunks
    if chunks:
        return int(chunks)
    return baseline_chunk_factor(kind, ctx.n)


class ScheduleAlgorithm(Algorithm):
    """A built-in baseline schedule, compiled once per collective and run by the executor."""

    def __init__(self, name: str):
        self.name = name
        self._compiled: dict[str, CompiledSchedule] = {}
        self._schedules: dict[str, Schedule] = {}
        self._comm: Communicator | None = None

    def setup(self, kind: str | None, ctx) -> None:
        if kind is None:
            raise CCSynthError(_MPI_ONLY.format(self.name))
        if kind in self._compiled:
            return
        coll = Collective(kind, ctx.n, _chunk_factor(kind, ctx), ctx.options.root)
        schedule = make_baseline(self.name, coll, fully_connected(ctx.n))
        self._compiled[kind] = CompiledSchedule(schedule, ctx.comm, backend=ctx.options.buffer, profile=ctx.options.profile)
        self._schedules[kind] = schedule
        self._comm = None  # rebuilt with every schedule set up so far (see comm)
        log.debug("compiled %s for %s", schedule, kind)

    def comm(self, ctx):
        """ccsynth's communicator whose plan holds this baseline's schedules, for every message size."""
        if self._comm is None:
            plan = Plan(tuple(PlanEntry(kind, ctx.n, 0, None, s, algorithm=self.name) for kind, s in self._schedules.items()))
            self._comm = _communicator(ctx, plan)
        return self._comm

    def collective(self, kind: str, ctx) -> Callable:
        prog, SUM = self._compiled[kind], ctx.options.op  # the executor takes ccsynth's op names
        if kind == "broadcast":
            # One buffer, as MPI_Bcast: the root's is the schedule's input (its output copy
            # is the executor's private stand-in), everyone else's the output.
            if ctx.rank == ctx.options.root:
                return lambda b: prog.run(b, None, SUM)
            return lambda b: prog.run(None, b, SUM)
        return lambda s, r: prog.run(s, r, SUM)

    def schedule_for(self, kind: str, ctx, nbytes: int) -> Schedule | None:
        prog = self._compiled.get(kind)
        return prog.schedule if prog is not None else None

    def free(self) -> None:
        for prog in self._compiled.values():
            prog.free()
        if self._comm is not None:
            self._comm.Free()
        self._compiled, self._schedules, self._comm = {}, {}, None

    def stats_reader(self, kind: str, ctx):
        prog = self._compiled[kind]
        if not getattr(prog, "profile", False):
            return None
        def reset():
            prog.stats = RunStats()

        reset()
        return (lambda: prog.stats.per_run_us()), reset


class PlanAlgorithm(Algorithm):
    """The drop-in Communicator with a plan file, or with its default plan (``path=None``)."""

    def __init__(self, name: str, path: str | None):
        self.name = name
        self.path = path
        self._comm: Communicator | None = None
        self._plan: Plan | None = None

    def setup(self, kind: str | None, ctx) -> None:
        if kind is None:
            raise CCSynthError(_MPI_ONLY.format(self.name))
        if self.path is not None:
            if self._plan is None:  # whatever Communicator(plan=FILE) takes: a plan or a schedule file
                self._plan = as_plan(self.path)
            have = self._plan.kinds()
            if not any(k == kind and n == ctx.n for k, n in have):
                covered = ", ".join(f"{k} on {n} ranks" for k, n in have) or "nothing"
                raise CCSynthError(f"plan {self.path!r} has no {kind} schedule for {ctx.n} ranks (it covers: {covered})")
        if self._comm is None:
            self._comm = _communicator(ctx, self._plan)
            if self._plan is None:
                self._plan = getattr(self._comm, "plan", None)

    def collective(self, kind: str, ctx) -> Callable:
        return _buffer_calls(self._comm, ctx.options.root, ctx.options.op)[kind]

    def comm(self, ctx):
        return self._comm

    def schedule_for(self, kind: str, ctx, nbytes: int) -> Schedule | None:
        plan = self._plan if self._plan is not None else getattr(self._comm, "plan", None)
        entry_for = getattr(plan, "entry_for", None)
        entry = entry_for(kind, ctx.n, nbytes) if entry_for is not None else None
        return entry.schedule if entry is not None else None

    def chosen(self, kind: str, ctx, nbytes: int) -> str:
        last = getattr(self._comm, "last_algorithm", "")
        if last:  # what the communicator really ran (it may fall back to MPI for other reasons)
            return last
        plan = self._plan
        entry = plan.entry_for(kind, ctx.n, nbytes) if plan is not None and hasattr(plan, "entry_for") else None
        return entry.algorithm if entry is not None else "mpi (fallback)"


def parse_algorithms(spec: str) -> list[Algorithm]:
    """``"mpi,ring,plan:best.json"`` -> Algorithm objects (no MPI calls yet).

    Raises CCSynthError naming the valid choices for an unknown name, and for
    a name given twice.
    """
    out: list[Algorithm] = []
    seen: set[str] = set()
    baselines = baseline_names()
    for raw in str(spec).split(","):
        name = raw.strip()
        if not name:
            continue
        if name in seen:
            raise CCSynthError(f"algorithm {name!r} is listed twice in --algo")
        seen.add(name)
        if name == "mpi":
            out.append(MpiAlgorithm())
        elif name in DEFAULT_PLAN_NAMES:
            out.append(PlanAlgorithm(name, None))
        elif name.startswith("plan:"):
            path = name[len("plan:"):]
            if not path:
                raise CCSynthError("--algo plan:FILE needs a file name after 'plan:'")
            if not os.path.exists(path):
                raise CCSynthError(f"plan file {path!r} does not exist (in --algo {name})")
            out.append(PlanAlgorithm(name, path))
        elif name in baselines:
            out.append(ScheduleAlgorithm(name))
        else:
            raise CCSynthError(f"unknown algorithm {name!r} in --algo; valid: {valid_names()}")
    if not out:
        raise CCSynthError(f"--algo names no algorithm; valid: {valid_names()}")
    return out


def resolve_algorithms(spec: str, ctx, kind: str | None = None) -> list[Algorithm]:
    """Parse ``spec`` and set every algorithm up for ``kind`` on every rank of ``ctx.comm``.

    ``kind`` is the collective, or None for what only MPI measures (latency,
    bw, barrier).

    A setup error on any rank (unknown name, a baseline that does not fit, a
    plan for another world size) is raised on every rank, never a hang.
    """
    algos = agree(ctx.comm, lambda: parse_algorithms(spec))
    for a in algos:
        agree(ctx.comm, functools.partial(a.setup, kind, ctx))
    return algos
