"""OMB-style microbenchmarks: the registry and the one shared timing loop.

Each benchmark is one function, registered with :func:`benchmark`, that
prepares one message size: it allocates its buffers, picks the call to time
and says how to check the result. It returns a :class:`Case`. Everything
else -- warm-up, barriers, timing with ``MPI.Wtime``, the min/avg/max over
ranks, validation, algbw/busbw -- lives once, in :func:`measure` and
:func:`run_interleaved`, which yields the :class:`Row` of every algorithm
per size on every rank (only the command prints, and only on rank 0);
:func:`run_benchmark` is the one-algorithm case. Interleaving runs every
algorithm in turn within each iteration, so that on a shared machine a
change of load hits all of them alike.

Conventions follow the OSU Micro-Benchmarks (OMB):

* sizes are powers of two; iterations are fewer above 8 KiB
  (:data:`LARGE_MESSAGE`); warm-up iterations are not timed;
* collectives: a barrier before every iteration, each iteration timed on its
  own; the per-rank average is then reduced over ranks (avg of the averages,
  min, max); ``Row.median_us`` adds the median over iterations of the
  slowest rank's time, which one descheduled rank disturbs less;
* point-to-point (``latency``, ``bw``): one barrier, then the whole loop is
  timed (``latency`` reports one-way time: half a round trip);
* ``Size`` is OMB's message size: the per-rank buffer of allreduce, reduce,
  bcast and reduce_scatter (its whole send buffer), the per-rank *send*
  size of allgather, and the per-peer block of alltoall. algbw/busbw use the
  nccl-tests size (allgather's receive buffer, alltoall's whole buffer,
  ``n`` times OMB's size), see :class:`~ccsynth.collectives.spec.Collective`.

Example (one rank, MPI's own allreduce):
    >>> from mpi4py import MPI
    >>> from ccsynth.bench.algos import resolve_algorithms
    >>> ctx = Context(MPI.COMM_SELF, Options(sizes=(8, 16), iters=3, warmup=1, validate=True))
    >>> [algo] = resolve_algorithms("mpi", ctx)
    >>> [(r.size, r.valid) for r in run_benchmark(BENCHMARKS["allreduce"], ctx, algo)]
    [(8, True), (16, True)]
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from ccsynth.bench import validate as V
from ccsynth.collectives.spec import busbw_factor
from ccsynth.errors import CCSynthError
from ccsynth.bench.omb_context import LARGE_MESSAGE, WINDOW, Case, Context, Options, Row

__all__ = [
    "LARGE_MESSAGE",
    "WINDOW",
    "Options",
    "Row",
    "Case",
    "Benchmark",
    "BENCHMARKS",
    "benchmark",
    "Context",
    "measure",
    "fresh_run",
    "prepare",
    "prepare_in_place",
    "tail_latencies",
    "IN_PLACE_KINDS",
    "ROOTED_KINDS",
    "run_benchmark",
    "run_interleaved",
    "agree",
    "allreduce",
    "reduce",
    "bcast",
    "allgather",
    "alltoall",
    "reduce_scatter",
    "alltoallv",
    "allgatherv",
    "COUNT_DISTRIBUTIONS",
    "count_matrix",
    "barrier",
    "latency",
    "bw",
]

log = logging.getLogger(__name__)

@dataclass(frozen=True)
class Benchmark:
    """A registered benchmark: ``prepare(ctx, algo, size) -> Case``."""

    name: str
    title: str  # "# OMB Python MPI {title} Test"
    prepare: Callable[[Context, Any, int], Case]
    kind: str | None = None  # the collective; None: measures the MPI library only
    pt2pt: bool = False  # rank 0 <-> rank 1 only, whole loop timed
    sized: bool = True  # barrier has no message size
    metric: str = "latency"  # or "bandwidth" (bw)
    default_sizes: str = "4:1M"
    size_doc: str = ""
    description: str = ""
    unit: Callable[[Context], int] = field(default=lambda ctx: ctx.itemsize)  # smallest usable size

    @property
    def busbw_factor_kind(self) -> str:
        return self.kind or "broadcast"  # factor 1


BENCHMARKS: dict[str, Benchmark] = {}


def benchmark(name: str, title: str, **kw) -> Callable:
    """Register ``prepare`` under ``name`` (decorator)."""

    def deco(prepare):
        doc = (prepare.__doc__ or "").strip()
        BENCHMARKS[name] = Benchmark(name, title, prepare, description=doc.splitlines()[0] if doc else "", **kw)
        return prepare

    return deco


# ------------------------------------------------------------ the loop
def measure(comm, cases: Sequence[Case], iters: int, warmup: int, *, pt2pt: bool = False) -> list[np.ndarray]:
    """This rank's times per unit of each case in microseconds (OMB's loop).

    Collectives: one entry per timed iteration, each after a barrier. With
    several cases (``--interleave``) every iteration runs each case in turn,
    so that all of them meet the same machine conditions.
    Point-to-point: one entry per case, the average over its whole timed loop.
    """
    from mpi4py import MPI

    wtime, barrier = MPI.Wtime, comm.Barrier
    iters = max(iters, 1)
    if pt2pt:
        out = []
        for case in cases:
            step = case.step
            barrier()
            for _ in range(warmup):
                step()
            if case.stats_reset is not None:
                case.stats_reset()
            t0 = wtime()
            for _ in range(iters):
                step()
            out.append(np.array([(wtime() - t0) / iters]))
    else:
        out = [np.empty(iters) for _ in cases]
        steps = [(c.step, t) for c, t in zip(cases, out)]
        for i in range(warmup + iters):
            if i == warmup:
                for c in cases:
                    if c.stats_reset is not None:
                        c.stats_reset()
            for step, times in steps:
                barrier()
                t0 = wtime()
                step()
                t1 = wtime()
                if i >= warmup:
                    times[i - warmup] = t1 - t0
    return [t * (1e6 / c.per_step) for c, t in zip(cases, out)]


def fresh_run(ctx: Context, case: Case) -> None:
    """One more run of ``case`` into sentinel-filled outputs (before a check), so that stale results of the timed
    iterations cannot pass for a correct one."""
    if case.reset is not None:
        case.reset()
    ctx.sync()
    case.step()


def slowest_rank_median(per_rank: Sequence[np.ndarray]) -> float:
    """Per iteration the slowest rank's time, then the median over iterations.

    The robust companion to OMB's mean: one descheduled rank disturbs it
    less, and the slowest rank's time is what a simulator's makespan predicts.
    """
    return float(np.median(np.max(np.stack(per_rank), axis=0)))


def tail_latencies(per_rank: Sequence[np.ndarray], percentiles: Sequence[float]) -> tuple[tuple[float, float], ...]:
    """OMB's ``-z``: the given percentiles of the per-iteration latency, each iteration counted at its slowest rank
    (point-to-point benchmarks time whole loops: one value)."""
    slowest = np.max(np.stack(per_rank), axis=0)
    return tuple((float(p), float(np.percentile(slowest, p))) for p in percentiles)


#: the collectives OMB runs with ``-l`` (MPI_IN_PLACE)
IN_PLACE_KINDS = ("allreduce", "allgather", "alltoall", "reduce_scatter", "reduce")
#: the collectives with a root (OMB's ``-k``, nccl-tests' ``-r``)
ROOTED_KINDS = ("broadcast", "reduce")


def prepare(bench: Benchmark, ctx: Context, algo, size: int) -> Case:
    """``bench.prepare`` with the options that change every benchmark alike: ``-l`` (in place) and ``-k rotate``."""
    case = bench.prepare(ctx, algo, size)
    opts = ctx.options
    if opts.in_place and bench.kind in IN_PLACE_KINDS:
        count, nbytes = case.count, case.nbytes
        del case  # its buffers, before the in-place ones
        return prepare_in_place(ctx, algo, bench.kind, count, nbytes)
    return case


def run_benchmark(bench: Benchmark, ctx: Context, algo) -> Iterator[Row]:
    """Time ``algo`` on every size of ``ctx.options``; yields one Row per size, on every rank."""
    for rows in run_interleaved(bench, ctx, [algo]):
        yield rows[0]


def run_interleaved(bench: Benchmark, ctx: Context, algos: Sequence) -> Iterator[list[Row]]:
    """Time all ``algos`` together, iteration by iteration; yields one Row per algorithm per size."""
    comm, opts = ctx.comm, ctx.options
    factor = busbw_factor(bench.busbw_factor_kind, ctx.n)
    for size in opts.sizes:
        cases = [prepare(bench, ctx, algo, size) for algo in algos]
        iters, warmup = opts.iterations(size)
        times = measure(comm, cases, iters, warmup, pt2pt=bench.pt2pt)
        rows = []
        for case, local in zip(cases, times):
            prof = case.stats() if case.stats is not None else None  # before the check's extra run
            ok = None
            if opts.validate and case.check is not None:
                fresh_run(ctx, case)
                ok = bool(case.check())
            samples = comm.allgather((local, ok, prof))
            per_rank = [float(t.mean()) for t, _, _ in samples]
            avg = sum(per_rank) / len(per_rank)
            median = slowest_rank_median([t for t, _, _ in samples])
            tail = tail_latencies([t for t, _, _ in samples], opts.tail) if opts.tail else ()
            checks = [v for _, v, _ in samples if v is not None]
            profs = [p for _, _, p in samples if p]
            profile = {k: sum(p[k] for p in profs) / len(profs) for k in profs[0]} if profs else None
            valid = all(checks) if checks else None
            algbw = case.nbytes / (avg * 1e3) if avg > 0 else 0.0
            name = case.algorithm() if callable(case.algorithm) else case.algorithm
            rows.append(Row(size, case.nbytes, case.count, iters, avg, min(per_rank), max(per_rank), algbw, algbw * factor,
                            valid, name, median, profile, tail_us=tail))
        del cases, case  # free this size's buffers before the next size allocates its own
        yield rows


def agree(comm, fn: Callable[[], Any]) -> Any:
    """Run ``fn`` on every rank; if it raises a CCSynthError anywhere, raise one everywhere.

    Setup errors (an unknown algorithm, a plan for another world size) are
    thus reported on every rank instead of leaving the healthy ranks blocked
    in the next collective call.
    """
    err: str | None = None
    result = None
    try:
        result = fn()
    except CCSynthError as e:
        err = str(e)
    errors = comm.allgather(err)
    bad = [(r, e) for r, e in enumerate(errors) if e is not None]
    if bad:
        if len({e for _, e in bad}) == 1 and len(bad) == len(errors):
            raise CCSynthError(bad[0][1])
        r, msg = bad[0]
        raise CCSynthError(f"rank {r}: {msg}")
    return result


# ---------------------------------------------------------- benchmarks
def _collective(ctx: Context, algo, kind: str, count: int, nbytes: int) -> Case:
    """A Case for collective ``kind`` on ``count`` elements (MPI's per-rank count)."""
    n, rank, root, op = ctx.n, ctx.rank, ctx.options.root, ctx.options.op
    if ctx.options.rotate_root and kind in ROOTED_KINDS:
        return _rotating(ctx, algo, kind, count, nbytes)
    fn = algo.collective(kind, ctx)
    chosen = lambda: algo.chosen(kind, ctx, nbytes)  # noqa: E731 - asked after the runs
    stats, stats_reset = algo.stats_reader(kind, ctx) or (None, None)
    sc, rc = V.send_count(kind, n, count), V.recv_count(kind, n, count)
    if kind == "broadcast":
        ref = V.pattern(root, count, ctx.dtype, n_ranks=n)
        buf = ctx.to_device(ref) if rank == root else ctx.output(count)

        def reset_broadcast():
            buf[...] = ctx.to_device(ref) if rank == root else V.sentinel(ctx.dtype)

        return Case(lambda: fn(buf), nbytes, count, reset_broadcast, lambda: ctx.equal(buf, ref),
                    algorithm=chosen, stats=stats, stats_reset=stats_reset, wrong=lambda: ctx.wrong(buf, ref))
    send, recv = ctx.input(sc), ctx.output(rc)
    send_ref = V.pattern(rank, sc, ctx.dtype, n_ranks=n)

    def reset():
        recv[...] = V.sentinel(ctx.dtype)

    def check():
        want = V.expected(kind, rank, n, count, ctx.dtype, root, op)
        return ctx.equal(recv, want) and ctx.equal(send, send_ref)

    def wrong():
        want = V.expected(kind, rank, n, count, ctx.dtype, root, op)
        return ctx.wrong(recv, want) + ctx.wrong(send, send_ref)

    return Case(lambda: fn(send, recv), nbytes, count, reset, check, algorithm=chosen, stats=stats, stats_reset=stats_reset,
                wrong=wrong)


def prepare_in_place(ctx: Context, algo, kind: str, count: int, nbytes: int) -> Case:
    """The in-place Case of ``kind`` with ``count`` elements in MPI's terms (see :func:`V.expected`).

    nccl-tests' in-place layout (MPI's ``MPI_IN_PLACE``): allgather's input
    is this rank's block of the receive buffer, reduce-scatter's output is
    block 0 of the send buffer; broadcast is in place anyway.
    """
    n, rank, root, op = ctx.n, ctx.rank, ctx.options.root, ctx.options.op
    fn = algo.in_place(kind, ctx)
    if kind == "allgather":
        host = np.full(n * count, V.sentinel(ctx.dtype), dtype=ctx.dtype)
        host[rank * count:(rank + 1) * count] = V.pattern(rank, count, ctx.dtype, n_ranks=n)
        view = slice(None)
    elif kind == "broadcast":
        host = V.pattern(root, count, ctx.dtype, n_ranks=n) if rank == root else np.full(count, V.sentinel(ctx.dtype), ctx.dtype)
        view = slice(None)
    else:
        host = V.pattern(rank, V.send_count(kind, n, count), ctx.dtype, n_ranks=n)
        view = slice(0, count) if kind == "reduce_scatter" else slice(None)
    buf = ctx.to_device(host)

    def reset():
        buf[...] = ctx.to_device(host)

    def wrong():
        want = V.expected(kind, rank, n, count, ctx.dtype, root, op)
        return ctx.wrong(buf[view], want)

    return Case(lambda: fn(buf), nbytes, count, reset, lambda: wrong() == 0,
                algorithm=lambda: algo.chosen(kind, ctx, nbytes), wrong=wrong)


def _whole_buffer(ctx: Context, algo, kind: str, size: int) -> Case:
    """A collective whose OMB size is one rank's whole buffer (= the nccl-tests size)."""
    count = size // ctx.itemsize
    return _collective(ctx, algo, kind, count, count * ctx.itemsize)


def _rotating(ctx: Context, algo, kind: str, count: int, nbytes: int) -> Case:
    """Broadcast or reduce whose root moves to the next rank every iteration (OMB's ``-k rotate``).

    The check after the timed runs uses the root of the run it checks.
    """
    n, rank, op = ctx.n, ctx.rank, ctx.options.op
    calls = [algo.at_root(kind, ctx, r) for r in range(n)]
    turn = [0]  # the next run's root
    last = [0]  # the root of the last run
    if kind == "broadcast":
        buf = ctx.output(count)

        def step_broadcast():
            r = last[0] = turn[0]
            turn[0] = (r + 1) % n
            calls[r](buf)

        def reset_broadcast():
            r = turn[0]
            buf[...] = ctx.to_device(V.pattern(r, count, ctx.dtype, n_ranks=n)) if rank == r else V.sentinel(ctx.dtype)

        def want():
            return V.pattern(last[0], count, ctx.dtype, n_ranks=n)

        return Case(step_broadcast, nbytes, count, reset_broadcast, lambda: ctx.equal(buf, want()),
                    algorithm=lambda: algo.ran(ctx), wrong=lambda: ctx.wrong(buf, want()))
    send, recv = ctx.input(count), ctx.output(count)

    def step():
        r = last[0] = turn[0]
        turn[0] = (r + 1) % n
        calls[r](send, recv)

    def reset():
        recv[...] = V.sentinel(ctx.dtype)

    def want_recv():
        return V.expected(kind, rank, n, count, ctx.dtype, last[0], op)

    return Case(step, nbytes, count, reset, lambda: ctx.equal(recv, want_recv()),
                algorithm=lambda: algo.ran(ctx), wrong=lambda: ctx.wrong(recv, want_recv()))


@benchmark("allreduce", "Allreduce", kind="allreduce", size_doc="bytes of each rank's buffer (= nccl-tests size)")
def allreduce(ctx: Context, algo, size: int) -> Case:
    """osu_allreduce: MPI_Allreduce (SUM) of a buffer of Size bytes."""
    return _whole_buffer(ctx, algo, "allreduce", size)


@benchmark("reduce", "Reduce", kind="reduce", size_doc="bytes of each rank's buffer (= nccl-tests size); root 0")
def reduce(ctx: Context, algo, size: int) -> Case:
    """osu_reduce: MPI_Reduce (SUM) of Size bytes to rank 0."""
    return _whole_buffer(ctx, algo, "reduce", size)


@benchmark("bcast", "Broadcast", kind="broadcast", size_doc="bytes of the broadcast buffer (= nccl-tests size); root 0")
def bcast(ctx: Context, algo, size: int) -> Case:
    """osu_bcast: MPI_Bcast of Size bytes from rank 0."""
    return _whole_buffer(ctx, algo, "broadcast", size)


@benchmark(
    "allgather",
    "Allgather",
    kind="allgather",
    size_doc="bytes each rank sends (OMB); nccl-tests size = ranks x Size (the receive buffer)",
)
def allgather(ctx: Context, algo, size: int) -> Case:
    """osu_allgather: MPI_Allgather of Size bytes from every rank."""
    count = size // ctx.itemsize
    return _collective(ctx, algo, "allgather", count, ctx.n * count * ctx.itemsize)


@benchmark(
    "alltoall",
    "Alltoall",
    kind="alltoall",
    size_doc="bytes each rank sends to each peer (OMB); nccl-tests size = ranks x Size (the whole buffer)",
)
def alltoall(ctx: Context, algo, size: int) -> Case:
    """osu_alltoall: MPI_Alltoall with Size bytes per pair of ranks."""
    count = size // ctx.itemsize
    return _collective(ctx, algo, "alltoall", count, ctx.n * count * ctx.itemsize)


@benchmark(
    "reduce_scatter",
    "Reduce_scatter",
    kind="reduce_scatter",
    size_doc="bytes of each rank's send buffer (= nccl-tests size); each rank receives Size / ranks",
    unit=lambda ctx: ctx.itemsize * ctx.n,
)
def reduce_scatter(ctx: Context, algo, size: int) -> Case:
    """osu_reduce_scatter: MPI_Reduce_scatter_block (SUM) of Size bytes."""
    count = size // (ctx.itemsize * ctx.n)  # elements each rank receives
    return _collective(ctx, algo, "reduce_scatter", count, ctx.n * count * ctx.itemsize)


#: how the counts of a v-benchmark spread (``--counts``); ``count`` is the mean count per block
COUNT_DISTRIBUTIONS = ("equal", "random", "skewed")


def count_matrix(name: str, n: int, count: int, how: str, seed: int = 0) -> np.ndarray:
    """The counts of a v-benchmark with mean ``count`` per block, the same on every rank.

    ``alltoallv``: ``n x n``, entry ``[p, q]`` what rank ``p`` sends to
    rank ``q``; ``allgatherv``: ``1 x n``, what each rank contributes.
    ``equal``: every block ``count`` (OMB's). ``random``: independent
    uniform counts from 0 to ``2 x count`` (zeros included). ``skewed`` (a
    mixture-of-experts exchange with one hot expert): every sender gives
    half of its ``n x count`` elements to rank 0 and splits the rest
    evenly over the others (allgatherv: rank 0 contributes half of the
    ``n x count`` elements, the others share the rest).
    """
    rows = n if name == "alltoallv" else 1
    if how == "equal":
        return np.full((rows, n), count, np.int64)
    if how == "random":
        return np.random.default_rng(seed).integers(0, 2 * count + 1, size=(rows, n)).astype(np.int64)
    if how == "skewed":
        total = n * count
        hot = total // 2 if n > 1 else total
        rest = total - hot
        m = np.zeros((rows, n), np.int64)
        m[:, 0] = hot
        if n > 1:
            m[:, 1:] = rest // (n - 1)
            m[:, 1] += rest - (rest // (n - 1)) * (n - 1)
        return m
    raise CCSynthError(f"unknown count distribution {how!r}; choose one of: {', '.join(COUNT_DISTRIBUTIONS)}")


def _uneven(ctx: Context, algo, name: str, count: int) -> Case:
    """``Alltoallv``/``Allgatherv`` with the counts of :func:`count_matrix`, checked element by element."""
    n, rank, dt = ctx.n, ctx.rank, ctx.dtype
    opts = ctx.options
    m = count_matrix(name, n, count, opts.counts, opts.seed)
    call = algo.variable(name, ctx)
    if name == "alltoallv":
        sc, rc = m[rank], m[:, rank]
        sd = np.concatenate([[0], np.cumsum(sc)[:-1]]).astype(np.int64)
        rd = np.concatenate([[0], np.cumsum(rc)[:-1]]).astype(np.int64)
        send_ref = V.pattern(rank, int(sc.sum()), dt, n_ranks=n)
        parts = []
        for q in range(n):
            row = m[q]
            start = int(row[:rank].sum())
            parts.append(V.pattern(q, int(row.sum()), dt, n_ranks=n)[start:start + int(row[rank])])
        send_spec_counts = (sc, sd)
        nbytes = int(m.sum()) * ctx.itemsize // n  # the mean per-rank send buffer (nccl-tests' size)
    else:
        counts = m[0]
        rc = counts
        rd = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
        send_ref = V.pattern(rank, int(counts[rank]), dt, n_ranks=n)
        parts = [V.pattern(q, int(counts[q]), dt, n_ranks=n) for q in range(n)]
        send_spec_counts = None
        nbytes = int(counts.sum()) * ctx.itemsize  # the receive buffer (nccl-tests' size)
    want = np.concatenate(parts) if parts else np.zeros(0, dt)
    send, recv = ctx.to_device(send_ref), ctx.output(int(rc.sum()))
    send_spec = [send, send_spec_counts] if send_spec_counts is not None else send
    recv_spec = [recv, (rc, rd)]

    def reset():
        recv[...] = V.sentinel(dt)

    return Case(lambda: call(send_spec, recv_spec), nbytes, count, reset,
                lambda: ctx.equal(recv, want) and ctx.equal(send, send_ref),
                algorithm=lambda: algo.ran(ctx), wrong=lambda: ctx.wrong(recv, want) + ctx.wrong(send, send_ref))


def _variable(ctx: Context, algo, name: str, kind: str, count: int, nbytes: int) -> Case:
    """``Alltoallv``/``Allgatherv`` with every count equal (as OMB's osu_alltoallv/osu_allgatherv): ``kind``'s buffers,
    passed with explicit counts and displacements, checked against ``kind``'s reference; other
    ``--counts`` distributions: :func:`_uneven`."""
    if ctx.options.counts != "equal":
        return _uneven(ctx, algo, name, count)
    n, rank = ctx.n, ctx.rank
    call = algo.variable(name, ctx)
    counts, displs = [count] * n, [q * count for q in range(n)]
    send, recv = ctx.input(V.send_count(kind, n, count)), ctx.output(V.recv_count(kind, n, count))
    send_ref = V.pattern(rank, V.send_count(kind, n, count), ctx.dtype, n_ranks=n)
    send_spec = [send, (counts, displs)] if name == "alltoallv" else send
    recv_spec = [recv, (counts, displs)]
    want = lambda: V.expected(kind, rank, n, count, ctx.dtype)  # noqa: E731

    def reset():
        recv[...] = V.sentinel(ctx.dtype)

    return Case(lambda: call(send_spec, recv_spec), nbytes, count, reset,
                lambda: ctx.equal(recv, want()) and ctx.equal(send, send_ref),
                algorithm=lambda: algo.ran(ctx), wrong=lambda: ctx.wrong(recv, want()) + ctx.wrong(send, send_ref))


@benchmark(
    "alltoallv",
    "All-to-Allv",
    kind="alltoall",
    size_doc="bytes each rank sends to each peer, every count equal (OMB), the mean with --counts random|skewed; "
             "nccl-tests size = ranks x Size",
)
def alltoallv(ctx: Context, algo, size: int) -> Case:
    """osu_alltoallv: MPI_Alltoallv with Size bytes per pair of ranks (the mixture-of-experts exchange)."""
    count = size // ctx.itemsize
    return _variable(ctx, algo, "alltoallv", "alltoall", count, ctx.n * count * ctx.itemsize)


@benchmark(
    "allgatherv",
    "Allgatherv",
    kind="allgather",
    size_doc="bytes each rank sends, every count equal (OMB), the mean with --counts random|skewed; "
             "nccl-tests size = ranks x Size",
)
def allgatherv(ctx: Context, algo, size: int) -> Case:
    """osu_allgatherv: MPI_Allgatherv of Size bytes from every rank."""
    count = size // ctx.itemsize
    return _variable(ctx, algo, "allgatherv", "allgather", count, ctx.n * count * ctx.itemsize)


@benchmark("barrier", "Barrier", sized=False, default_sizes="0", unit=lambda ctx: 0, size_doc="no message")
def barrier(ctx: Context, algo, size: int) -> Case:
    """osu_barrier: MPI_Barrier."""
    fn = algo.collective("barrier", ctx)
    return Case(fn, 0, 0, algorithm=algo.chosen("barrier", ctx, 0))


def _peer(ctx: Context) -> int:
    return 1 - ctx.rank


@benchmark("latency", "Latency", pt2pt=True, default_sizes="0:4M", unit=lambda ctx: 0, size_doc="bytes per message")
def latency(ctx: Context, algo, size: int) -> Case:
    """osu_latency: ping-pong between ranks 0 and 1; one-way latency."""
    comm, peer = ctx.comm, _peer(ctx)
    ref = V.pattern(0, size, np.uint8, n_ranks=2)
    sbuf, rbuf = ctx.to_device(ref), ctx.output(size, np.uint8)
    if ctx.rank == 0:

        def step():
            comm.Send(sbuf, dest=peer, tag=1)
            comm.Recv(rbuf, source=peer, tag=1)

    else:

        def step():
            comm.Recv(rbuf, source=peer, tag=1)
            comm.Send(rbuf, dest=peer, tag=1)  # echo what arrived, so rank 0 checks the round trip

    def reset():
        rbuf[...] = V.sentinel(np.uint8)

    return Case(step, size, size, reset, lambda: ctx.equal(rbuf, ref), per_step=2, algorithm="mpi")


@benchmark(
    "bw",
    "Bandwidth",
    pt2pt=True,
    metric="bandwidth",
    default_sizes="1:4M",
    unit=lambda ctx: 1,
    size_doc="bytes per message; a window of messages in flight from rank 0 to rank 1",
)
def bw(ctx: Context, algo, size: int) -> Case:
    """osu_bw: rank 0 streams windows of non-blocking sends to rank 1."""
    from mpi4py import MPI

    comm, peer, window = ctx.comm, _peer(ctx), ctx.options.window
    ref = V.pattern(0, size, np.uint8, n_ranks=2)
    buf = ctx.to_device(ref) if ctx.rank == 0 else ctx.output(size, np.uint8)
    ack = np.zeros(1, dtype=np.uint8)
    if ctx.rank == 0:

        def step():
            MPI.Request.Waitall([comm.Isend(buf, dest=peer, tag=100) for _ in range(window)])
            comm.Recv(ack, source=peer, tag=101)

    else:

        def step():
            # Like osu_bw, every receive of a window lands in the same buffer: the
            # figure is about the wire, and the data is identical anyway.
            MPI.Request.Waitall([comm.Irecv(buf, source=peer, tag=100) for _ in range(window)])
            comm.Send(ack, dest=peer, tag=101)

    def reset():
        if ctx.rank == 1:
            buf[...] = V.sentinel(np.uint8)

    return Case(step, size, size, reset, lambda: ctx.equal(buf, ref), per_step=window, algorithm="mpi")
