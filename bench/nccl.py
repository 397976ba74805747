"""nccl-tests mode of ``ccsynth bench``: ``all_reduce_perf -b 8 -e 128M -f 2`` and its siblings.

The same collectives as the OMB benchmarks (:mod:`ccsynth.bench.omb`),
measured and printed the way NVIDIA's nccl-tests do it, so that figures can
be laid beside theirs:

* sizes run from ``-b`` to ``-e``, times ``-f`` (or plus ``-i`` bytes when
  the factor is 1), and are nccl-tests sizes: the whole buffer a rank sends
  or receives (allgather's receive buffer, alltoall's send buffer), the
  ``size`` column; ``count`` is that size in elements;
* every size is measured twice: *out-of-place* (separate send and receive
  buffers) and *in-place* (``MPI.IN_PLACE``, nccl-tests' in-place layout:
  allgather's input is this rank's block of the receive buffer,
  reduce-scatter's output block 0 of the send buffer, see
  :func:`ccsynth.bench.algos._in_place_calls`);
* ``-w`` untimed warm-up iterations, then ``-n`` iterations timed as one
  loop without barriers in between (one barrier before it); ``time`` is the
  loop's time per iteration, averaged over ranks, algbw = size / time,
  busbw = algbw times the collective's bus factor (2(n-1)/n for allreduce);
* ``-c`` (default 1) checks every result after the timed loop: ``#wrong``
  counts the wrong elements over all ranks (``N/A`` with ``-c 0``), the
  footer totals them (``# Out of bounds values : 0 OK``) and gives the mean
  busbw over every row, both places (``# Avg bus bandwidth``). Wrong values
  make the command exit 1, as nccl-tests exits with a failure.

Example:
    >>> nccl_sizes(8, 64, 2, 0)
    (8, 16, 32, 64)
    >>> nccl_sizes(1024, 4096, 1, 1024)
    (1024, 2048, 3072, 4096)
    >>> format_time(12.345), format_time(1806.71), format_time(20299.4)
    ('  12.35', ' 1806.7', '  20299')
"""

from __future__ import annotations

import dataclasses
import os
import socket
from dataclasses import dataclass
from collections.abc import Callable, Iterator, Mapping, Sequence


from ccsynth.bench.omb import Benchmark, Case, Context, fresh_run, measure, prepare_in_place
from ccsynth.collectives.spec import busbw_factor
from ccsynth.errors import CCSynthError

__all__ = [
    "NCCL_TESTS",
    "SCHEMA",
    "NcclOptions",
    "Place",
    "NcclRow",
    "nccl_sizes",
    "omb_size",
    "prepare_in_place",
    "AVERAGES",
    "run_nccl",
    "format_time",
    "gather_places",
    "header_lines",
    "format_row",
    "footer_lines",
    "to_json",
]

#: nccl-tests' binary names -> the OMB benchmark that measures the same collective
NCCL_TESTS = {
    "all_reduce_perf": "allreduce",
    "all_gather_perf": "allgather",
    "reduce_scatter_perf": "reduce_scatter",
    "alltoall_perf": "alltoall",
    "broadcast_perf": "bcast",
    "reduce_perf": "reduce",
}
SCHEMA = "ccsynth.bench.nccl/1"
#: nccl-tests' names of the element types
NCCL_TYPES = {"float32": "float", "float16": "half", "float64": "double", "int32": "int32", "int64": "int64",
              "uint8": "uint8"}
_REDUCING = ("allreduce", "reduce", "reduce_scatter")
_ROOTED = ("broadcast", "reduce")


@dataclass(frozen=True)
class NcclOptions:
    """nccl-tests' flags: sizes ``-b``/``-e``/``-f``/``-i``, ``-n``, ``-w``, ``-c``."""

    begin: int
    end: int
    factor: int = 1
    step: int = 1 << 20
    iters: int = 20
    warmup: int = 5
    check: int = 1
    average: int = 1  # -a: the time across ranks: 0 rank 0's, 1 the mean, 2 the minimum, 3 the maximum
    blocking: bool = False  # -z 1: wait for the device after every call

    @property
    def sizes(self) -> tuple[int, ...]:
        return nccl_sizes(self.begin, self.end, self.factor, self.step)


@dataclass(frozen=True)
class Place:
    """One half of a row: out-of-place or in-place."""

    time_us: float
    algbw_GBps: float
    busbw_GBps: float
    n_wrong: int | None  # None: not checked (-c 0)

    def to_dict(self) -> dict:
        return {"time_us": self.time_us, "algbw_GBps": self.algbw_GBps, "busbw_GBps": self.busbw_GBps,
                "n_wrong": self.n_wrong}


@dataclass(frozen=True)
class NcclRow:
    size_bytes: int
    count_elements: int
    type: str
    redop: str
    root: int
    out_of_place: Place
    in_place: Place
    algorithm: str = ""

    def to_dict(self) -> dict:
        return {"size_bytes": self.size_bytes, "count_elements": self.count_elements, "type": self.type,
                "redop": self.redop, "root": self.root, "out_of_place": self.out_of_place.to_dict(),
                "in_place": self.in_place.to_dict(), "algorithm": self.algorithm}


def nccl_sizes(begin: int, end: int, factor: int, step: int) -> tuple[int, ...]:
    """nccl-tests' sizes: ``begin`` times ``factor`` up to ``end`` (``factor`` 1: plus ``step``)."""
    if begin < 0 or end < begin:
        raise CCSynthError(f"-b {begin} / -e {end}: the first size must be between 0 and the last")
    if factor > 1:
        out, s = ([0], 1) if begin == 0 else ([], begin)
        while s <= end:
            out.append(s)
            s *= factor
        return tuple(out)
    if step <= 0:
        raise CCSynthError(f"-i {step}: the step must be positive when the factor is 1")
    return tuple(range(begin, end + 1, step))


def omb_size(bench: Benchmark, nccl_bytes: int, ctx: Context) -> int:
    """The OMB size of ``bench`` (what its ``prepare`` takes) for a nccl-tests size, rounded down to whole elements."""
    item, n = ctx.itemsize, ctx.n
    if bench.kind in ("allgather", "alltoall"):
        return (nccl_bytes // (n * item)) * item  # per rank (allgather) or per peer (alltoall)
    if bench.kind == "reduce_scatter":
        return (nccl_bytes // (n * item)) * n * item
    return (nccl_bytes // item) * item


#: nccl-tests' -a: how the ranks' times become the row's
AVERAGES: dict[int, Callable[[list[float]], float]] = {
    0: lambda ts: ts[0], 1: lambda ts: sum(ts) / len(ts), 2: min, 3: max}


def _place(comm, case: Case, ctx: Context, opts: NcclOptions, factor: float) -> Place:
    if opts.blocking:  # nccl-tests' -z 1: the CPU waits for the device after every call
        step, sync = case.step, ctx.sync
        case = dataclasses.replace(case, step=lambda: (step(), sync()))
    [local] = measure(comm, [case], opts.iters, opts.warmup, pt2pt=True)
    wrong = None
    if opts.check:
        fresh_run(ctx, case)
        wrong = int(case.wrong()) if case.wrong is not None else 0
    per_rank = comm.allgather((float(local.mean()), wrong))
    t = AVERAGES[opts.average]([p for p, _ in per_rank])
    wrongs = [w for _, w in per_rank if w is not None]
    algbw = case.nbytes / (t * 1e3) if t > 0 else 0.0
    return Place(t, algbw, algbw * factor, sum(wrongs) if wrongs else None)


def run_nccl(bench: Benchmark, ctx: Context, algo, opts: NcclOptions) -> Iterator[NcclRow]:
    """Out-of-place then in-place at every size of ``opts``; one row per size, on every rank."""
    comm = ctx.comm
    factor = busbw_factor(bench.busbw_factor_kind, ctx.n)
    kind = bench.kind
    if kind is None:
        raise CCSynthError(f"{bench.name} is no collective: nccl-tests mode measures collectives only")
    for nccl_bytes in opts.sizes:
        size = omb_size(bench, nccl_bytes, ctx)
        out_case = bench.prepare(ctx, algo, size)
        out = _place(comm, out_case, ctx, opts, factor)
        in_case = prepare_in_place(ctx, algo, kind, out_case.count, out_case.nbytes)
        inp = _place(comm, in_case, ctx, opts, factor)
        name = out_case.algorithm() if callable(out_case.algorithm) else out_case.algorithm
        root = ctx.options.root if kind in _ROOTED else -1
        yield NcclRow(out_case.nbytes, out_case.nbytes // ctx.itemsize, NCCL_TYPES.get(ctx.dtype.name, ctx.dtype.name),
                      ctx.options.op if kind in _REDUCING else "none", root, out, inp, name)
        del out_case, in_case  # free this size's buffers before the next size allocates its own


# ------------------------------------------------------------------ output
def format_time(us: float) -> str:
    """nccl-tests' time column: 2 decimals below 100 us, 1 below 10 ms, none above."""
    if us >= 10000.0:
        return f"{us:7.0f}"
    if us >= 100.0:
        return f"{us:7.1f}"
    return f"{us:7.2f}"


def gather_places(ctx: Context) -> list[tuple[int, int, str]] | None:
    """(rank, pid, host) of every rank, on rank 0 (a collective call: every rank calls it)."""
    return ctx.comm.gather((ctx.rank, os.getpid(), socket.gethostname()), root=0)


def header_lines(opts: NcclOptions, places, algo_name: str, buffer: str) -> list[str]:
    """The ``#`` lines above the table: parameters, the ranks (``# Using devices``), the two-level column header."""
    step = f"{opts.factor}(factor)" if opts.factor > 1 else f"{opts.step}(bytes)"
    lines = [
        f"# nThread 1 nGpus 1 minBytes {opts.begin} maxBytes {opts.end} step: {step} warmup iters: {opts.warmup} "
        f"iters: {opts.iters} agg iters: 1 validation: {opts.check} graph: 0",
        f"# average: {opts.average} ({('rank 0', 'mean over ranks', 'min over ranks', 'max over ranks')[opts.average]}) "
        f"blocking: {int(opts.blocking)}",
        f"# ccsynth algorithm: {algo_name}",
        "#",
        "# Using devices",
    ]
    for rank, pid, host in places or []:
        lines.append(f"#  Rank {rank:2d} Group  0 Pid {pid:6d} on {host:>10} device  {'-' if buffer == 'numpy' else 'cuda'} "
                     f"[{buffer}]")
    lines += [
        "#",
        "#" + " " * 62 + "out-of-place" + " " * 23 + "in-place",
        f"# {'size':>10}  {'count':>12}  {'type':>8}  {'redop':>6}  {'root':>6}"
        + f"  {'time':>7}  {'algbw':>6}  {'busbw':>6} {'#wrong':>6}" * 2,
        f"# {'(B)':>10}  {'(elements)':>12}  {'':>8}  {'':>6}  {'':>6}" + f"  {'(us)':>7}  {'(GB/s)':>6}  {'(GB/s)':>6}  {'':>5}" * 2,
    ]
    return [ln.rstrip() for ln in lines]


def _place_cells(p: Place) -> str:
    wrong = "N/A" if p.n_wrong is None else str(p.n_wrong)
    return f"  {format_time(p.time_us)}  {p.algbw_GBps:6.2f}  {p.busbw_GBps:6.2f}  {wrong:>5}"


def format_row(row: NcclRow) -> str:
    return (f"{row.size_bytes:12d}  {row.count_elements:12d}  {row.type:>8}  {row.redop:>6}  {row.root:6d}"
            + _place_cells(row.out_of_place) + _place_cells(row.in_place))


def avg_busbw(rows: Sequence[NcclRow]) -> float:
    """nccl-tests' average: the mean busbw over every row, out-of-place and in-place alike."""
    bws = [p.busbw_GBps for r in rows for p in (r.out_of_place, r.in_place)]
    return sum(bws) / len(bws) if bws else 0.0


def n_wrong(rows: Sequence[NcclRow]) -> int:
    return sum(p.n_wrong or 0 for r in rows for p in (r.out_of_place, r.in_place))


def footer_lines(rows: Sequence[NcclRow]) -> list[str]:
    """``# Out of bounds values`` and ``# Avg bus bandwidth``, as nccl-tests ends."""
    errors = n_wrong(rows)
    return [f"# Out of bounds values : {errors} {'FAILED' if errors else 'OK'}",
            f"# Avg bus bandwidth    : {avg_busbw(rows):g} ", "#"]


def to_json(bench: Benchmark, test: str, meta: Mapping, opts: NcclOptions, results: Mapping[str, Sequence[NcclRow]]) -> dict:
    """Everything measured (``"schema": "ccsynth.bench.nccl/1"``)."""
    return {
        "schema": SCHEMA,
        "test": test,
        "benchmark": bench.name,
        "collective": bench.kind,
        **dict(meta),
        "n_iterations": opts.iters,
        "n_warmup": opts.warmup,
        "check": bool(opts.check),
        "average_mode": opts.average,
        "blocking": opts.blocking,
        "algorithms": list(results),
        "results": {name: [r.to_dict() for r in rows] for name, rows in results.items()},
        "avg_busbw_GBps": {name: avg_busbw(rows) for name, rows in results.items()},
        "n_wrong": {name: n_wrong(rows) for name, rows in results.items()},
    }
