"""``ccsynth bench NAME``: OSU-style microbenchmarks, run under ``mpiexec``.

Three families of NAME, each a parser of its own (their flags clash: OMB's
``-f`` is "full statistics", nccl-tests' is the size factor):

* OMB names (``allreduce``, ``latency``, ``alltoallv``, ...): the OMB table
  (Size, latency, ``-f`` min/max, ``-c`` Pass/Fail) with nccl-tests'
  algbw/busbw columns, one table per ``--algo``, then each algorithm's
  latency relative to MPI's; OMB's flags ``-m -i -x -c -f -d cuda|cpu -T``;
* OMB's non-blocking names (``iallreduce``, ...): overall, compute, pure
  communication time and overlap (:mod:`ccsynth.bench.nonblocking`);
* nccl-tests' names (``all_reduce_perf``, ...): nccl-tests' table, flags
  and footer (:mod:`ccsynth.bench.nccl`).

Only rank 0 prints; every row appears as soon as it is measured. Rank 0
warns when the ranks on its node outnumber its cores (the figures then
measure the scheduler as much as the library).

Example: ``mpiexec -n 4 ccsynth bench allreduce -m 8:64M -c --algo mpi,ring,default``
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import numpy as np

from ccsynth.atomic import check_writable
from ccsynth.bench import nccl as N
from ccsynth.bench import report
from ccsynth.bench import nonblocking as NB
from ccsynth.bench.memory import check_memory
from ccsynth.bench.omb import (
    BENCHMARKS,
    COUNT_DISTRIBUTIONS,
    IN_PLACE_KINDS,
    LARGE_MESSAGE,
    ROOTED_KINDS,
    WINDOW,
    Options,
    agree,
    run_benchmark,
    run_interleaved,
)
from ccsynth.bench.machine import machine_state
from ccsynth.bench.predict import Predictor, drift_lines, drift_table, error_lines, error_table, load_predict_topology
from ccsynth.bench.validate import DTYPES, OPS
from ccsynth.commands._common import count_arg as _count
from ccsynth.commands._progress import Progress
from ccsynth.commands.reshard import register_bench as register_reshard_bench
from ccsynth.errors import CCSynthError
from ccsynth.limits import MAX_MESSAGE_BYTES
from ccsynth.units import format_size, parse_size, parse_sizes

__all__ = ["MAX_MESSAGE", "register", "run"]

MAX_MESSAGE = MAX_MESSAGE_BYTES  # 4 GiB: beyond this a typo is likelier than a wish
log = logging.getLogger("ccsynth.bench")

#: OMB's -d: where the buffers live -> the kernels backend
DEVICES = {"cuda": "cupy", "cpu": "numpy", "host": "numpy"}
#: OMB's -T type names (and NumPy's) -> the element type
OMB_TYPES = {"mpi_char": "uint8", "mpi_int": "int32", "mpi_float": "float32", "mpi_double": "float64",
             **{d: d for d in DTYPES}}
#: nccl-tests' -d type names (and NumPy's) -> the element type
NCCL_TYPES = {"float": "float32", "half": "float16", "double": "float64", "int": "int32", "int32": "int32",
              "int64": "int64", "uint8": "uint8", **{d: d for d in DTYPES}}


def _choice(table: dict, what: str):
    """argparse type: a name of ``table`` (case-insensitive) -> its value; the error lists the names."""

    def parse(text: str) -> str:
        key = text.strip().lower()
        if key not in table:
            raise argparse.ArgumentTypeError(f"{text!r} is not a {what}; choose one of: {', '.join(table)}")
        return table[key]

    parse.__name__ = what
    return parse


def _bytes(text: str) -> int:
    """argparse type for one size (nccl-tests' -b/-e/-i: 8, 1K, 128M)."""
    try:
        v = parse_size(text)
    except CCSynthError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    if v > MAX_MESSAGE:
        raise argparse.ArgumentTypeError(f"{text!r}: at most {format_size(MAX_MESSAGE)} per message (MAX_MESSAGE_BYTES)")
    return v


_bytes.__name__ = "size"


def _sizes(default: str):
    """argparse type for ``-m [MIN:]MAX`` (OMB): MAX alone runs from the default minimum."""
    default_min, _, default_max = default.partition(":")

    def parse(text: str) -> tuple[int, ...]:
        text = text.strip()
        if not text:
            raise argparse.ArgumentTypeError("empty: give [MIN:]MAX, e.g. 8:64M, or a list 8,1M")
        if "," in text:  # an explicit list, e.g. 8,1M,64M
            try:
                sizes = sorted(set(parse_sizes(text)))
            except CCSynthError as e:
                raise argparse.ArgumentTypeError(str(e)) from None
            if sizes and sizes[-1] > MAX_MESSAGE:
                raise argparse.ArgumentTypeError(f"{text!r}: at most {format_size(MAX_MESSAGE)} per message (MAX_MESSAGE_BYTES)")
            return tuple(sizes)
        lo_s, sep, hi_s = text.partition(":")
        if not sep:
            lo_s, hi_s = default_min or "1", lo_s
        try:
            lo = parse_size(lo_s) if lo_s.strip() else parse_size(default_min or "1")
            hi = parse_size(hi_s) if hi_s.strip() else parse_size(default_max or default_min)
            if lo > hi:
                raise argparse.ArgumentTypeError(f"{text!r}: minimum {format_size(lo)} is above maximum {format_size(hi)}")
            if hi > MAX_MESSAGE:
                raise argparse.ArgumentTypeError(f"{text!r}: at most {format_size(MAX_MESSAGE)} per message (MAX_MESSAGE_BYTES)")
            sizes = parse_sizes(f"{max(lo, 1)}:{hi}") if hi > 0 else []
        except CCSynthError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
        return tuple(([0] if lo == 0 else []) + sizes)

    parse.__name__ = "size range"  # argparse names the type in "invalid ... value"
    return parse


#: OMB's -z without a list: P99, P90, P50
DEFAULT_TAIL = (99.0, 90.0, 50.0)


def _percentiles(text: str) -> tuple[float, ...]:
    """argparse type for OMB's ``-z<P,P,...>``: percentiles from 1 to 99."""
    out = []
    for part in text.split(","):
        try:
            p = float(part)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{part!r} is not a percentile (1-99)") from None
        if not 1 <= p <= 99:
            raise argparse.ArgumentTypeError(f"percentile {part!r} is outside 1-99")
        out.append(p)
    return tuple(out)


_percentiles.__name__ = "percentile list"


def _root_rank(text: str) -> tuple[int, bool]:
    """argparse type for OMB's ``-k``: ``fixed:RANK`` (or a bare rank) or ``rotate`` -> (root, rotate)."""
    t = text.strip().lower()
    if t == "rotate":
        return 0, True
    rank = t.split(":", 1)[1] if t.startswith("fixed:") else t
    try:
        r = int(rank)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give fixed:RANK, a rank, or rotate") from None
    if r < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: the root is a rank (0 or more)")
    return r, False


_root_rank.__name__ = "root"


def register(sub) -> None:
    p = sub.add_parser(
        "bench",
        help="OMB-style microbenchmarks (latency, bw, allreduce, ...) under mpiexec",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    names = p.add_subparsers(dest="bench", metavar="NAME", parser_class=type(p))
    names.required = True
    for name, b in BENCHMARKS.items():
        bp = names.add_parser(name, help=b.description, description=f"{b.description}\nSize: {b.size_doc}.")
        _add_common(bp, b)
        bp.set_defaults(func=run, mode="omb")
    for name, blocking in NB.NONBLOCKING.items():
        b = BENCHMARKS[blocking]
        what = f"OMB osu_{name}: overlap of non-blocking {b.title} with compute"
        bp = names.add_parser(name, help=what, description=f"{what}\nSize: {b.size_doc}.\n{NB.__doc__.split(chr(10))[0]}")
        _add_common(bp, b, nonblocking=True)
        bp.set_defaults(func=run, mode="nonblocking")
    for name, omb_name in N.NCCL_TESTS.items():
        b = BENCHMARKS[omb_name]
        what = f"nccl-tests {name}: {b.title}, out-of-place and in-place rows"
        bp = names.add_parser(name, help=what, description=f"{what}.\nSize: the nccl-tests size (whole buffer).")
        _add_nccl(bp)
        bp.set_defaults(func=run, mode="nccl", bench=omb_name, nccl_test=name)
    register_reshard_bench(names)
    p.set_defaults(func=run)


def _add_buffer(p) -> None:
    p.add_argument("--buffer", choices=("numpy", "cupy"), default="numpy",
                   help="where buffers live (default numpy); cupy needs CuPy and a GPU")


def _add_algo(p) -> None:
    p.add_argument("--algo", default="mpi", metavar="A[,B...]",
                   help="algorithms to compare, comma separated: mpi (the MPI library's own), default (ccsynth's "
                        "default plan), plan:FILE, or a baseline: ring, multi_ring, recursive_doubling, recursive_halving, "
                        "direct, one_shot, binomial_tree, hierarchical (default mpi)")


def _add_nccl(p) -> None:
    """nccl-tests' flags (``all_reduce_perf -b 8 -e 128M -f 2 -n 20 -w 5 -c 1 -d float``)."""
    p.add_argument("-b", "--minbytes", type=_bytes, default=32 << 20, metavar="S", help="first size (default 32M)")
    p.add_argument("-e", "--maxbytes", type=_bytes, default=32 << 20, metavar="S", help="last size (default 32M)")
    p.add_argument("-f", "--stepfactor", type=_count(1), default=1, metavar="F",
                   help="multiply the size by F each step (default 1: add -i bytes)")
    p.add_argument("-i", "--stepbytes", type=_bytes, default=1 << 20, metavar="S",
                   help="add S bytes each step when the factor is 1 (default 1M)")
    p.add_argument("-n", "--iters", type=_count(1, "MAX_BENCH_ITERATIONS"), default=20, metavar="N",
                   help="timed iterations per size (default 20)")
    p.add_argument("-w", "--warmup_iters", type=_count(0, "MAX_BENCH_ITERATIONS"), default=5, metavar="N",
                   help="untimed warm-up iterations per size (default 5)")
    p.add_argument("-c", "--check", type=_count(0), default=1, metavar="0|1",
                   help="check every result (default 1; 0: #wrong reads N/A)")
    p.add_argument("-d", "--datatype", dest="dtype", type=_choice(NCCL_TYPES, "datatype"), default="float32",
                   metavar="TYPE", help="element type: float (default), half, double, int32, int64, uint8")
    p.add_argument("-o", "--op", type=_choice({o: o for o in OPS}, "reduction op"), default="sum", metavar="OP",
                   help="reduction op of allreduce, reduce, reduce-scatter: sum (default), prod, min, max, avg "
                        "(avg is ccsynth's and NCCL's: the MPI library has none)")
    p.add_argument("-r", "--root", type=_count(0), default=0, metavar="R",
                   help="root of broadcast and reduce (default 0)")
    p.add_argument("-g", "--ngpus", type=_count(1), default=1, metavar="1",
                   help="GPUs per thread: 1 (one rank per process; start more ranks with mpiexec -n)")
    p.add_argument("-t", "--nthreads", type=_count(1), default=1, metavar="1",
                   help="threads per process: 1 (one rank per process; start more ranks with mpiexec -n)")
    p.add_argument("-a", "--average", type=int, choices=(0, 1, 2, 3), default=1, metavar="0-3",
                   help="time reported across ranks: 0 rank 0's, 1 the average (default), 2 the minimum, 3 the maximum")
    p.add_argument("-z", "--blocking", type=int, choices=(0, 1), default=0, metavar="0|1",
                   help="1: wait for the device after every call (on host buffers every call is blocking anyway)")
    _add_buffer(p)
    _add_algo(p)
    p.add_argument("--json", metavar="FILE", help="also write every row as JSON (schema ccsynth.bench.nccl/1)")


def _add_common(p, b, nonblocking: bool = False) -> None:
    if b.sized:
        p.add_argument(
            "-m",
            "--message-size",
            dest="sizes",
            type=_sizes(b.default_sizes),
            default=_sizes(b.default_sizes)(b.default_sizes),
            metavar="[MIN:]MAX",
            help=f"message sizes, powers of two from MIN to MAX, e.g. 8:64M, or a list 8,1M (default {b.default_sizes})",
        )
    p.add_argument("-i", "--iterations", type=_count(1, "MAX_BENCH_ITERATIONS"), metavar="N",
                   help=f"timed iterations per size (default 200, or 20 above {format_size(LARGE_MESSAGE)})")
    p.add_argument("-x", "--warmup", type=_count(0, "MAX_BENCH_ITERATIONS"), metavar="N",
                   help=f"untimed warm-up iterations per size (default 20, or 2 above {format_size(LARGE_MESSAGE)})")
    p.add_argument("-c", "--validation", action="store_true", help="check every result against a local NumPy reference (Pass/Fail column)")
    p.add_argument("-f", "--full", action="store_true", help="also print min/max latency over ranks and the iteration count")
    p.add_argument("-d", "--accelerator", dest="buffer", type=_choice(DEVICES, "device"), metavar="cuda|cpu", default="cpu",
                   help="OMB's -d: cuda puts the buffers on the GPU (CuPy, as --buffer cupy), cpu in host memory")
    _add_buffer(p)
    if b.kind is not None:
        _add_algo(p)
        p.add_argument("-T", "--type", "--dtype", dest="dtype", type=_choice(OMB_TYPES, "type"), default="float32",
                       metavar="TYPE", help=f"element type: {', '.join(DTYPES)}, or OMB's mpi_char, mpi_int, mpi_float, "
                                            "mpi_double (default float32, as OMB)")
        p.add_argument("--chunks", type=_count(1, "MAX_CHUNK_FACTOR"), metavar="K",
                       help="chunk factor of baseline schedules (default: ranks for allreduce, 1 otherwise)")
    if b.kind is not None and not nonblocking:
        p.add_argument("-z", "--tail-lat", dest="tail", nargs="?", const=DEFAULT_TAIL, type=_percentiles,
                       metavar="P,P,...", help="OMB's -z: also print tail latencies, the given percentiles (default "
                                               "99,90,50) of the per-iteration latency of the slowest rank")
    if b.kind is not None:
        if b.kind in ROOTED_KINDS:
            p.add_argument("-k", "--root-rank", dest="root_rank", type=_root_rank, default=(0, False),
                           metavar="fixed:R|rotate", help="OMB's -k: the root (fixed:RANK, default fixed:0), or rotate: "
                                                          "the next rank every iteration")
        if b.name in ("alltoallv", "allgatherv") and not nonblocking:
            p.add_argument("--counts", choices=COUNT_DISTRIBUTIONS, default="equal",
                           help="how the counts spread around Size: equal (OMB's, default), random (uniform from 0 to "
                                "twice the mean, zeros included) or skewed (half of every rank's data to rank 0, a hot "
                                "expert)")
            p.add_argument("--seed", type=_count(0), default=0, metavar="S", help="seed of --counts random (default 0)")
        if b.kind in IN_PLACE_KINDS and b.name == b.kind and not nonblocking:
            p.add_argument("-l", "--in-place", dest="in_place", action="store_true",
                           help="OMB's -l: run with MPI_IN_PLACE (nccl-tests' in-place layout)")
    if b.kind is not None and not nonblocking:
        p.add_argument("--profile", action="store_true",
                       help="time the executor's parts (MPI waits, kernels, starts, Python) for baseline algorithms; "
                            "printed after each table and kept in --json (adds timer calls)")
    if b.kind is None:
        p.add_argument("--algo", default="mpi", metavar="mpi", help="only mpi: this benchmark measures the MPI library")
    if b.metric == "bandwidth":
        p.add_argument("-W", "--window", type=_count(1, "MAX_BENCH_WINDOW"), default=WINDOW, metavar="N",
                       help=f"messages in flight per window (default {WINDOW})")
    if b.kind is not None and not nonblocking:
        p.add_argument("--predict", metavar="TOPOLOGY",
                       help="print beside every row the simulator's prediction for the schedule that ran (on this "
                            "topology file or catalog name, e.g. the output of ccsynth topo profile) and "
                            "measured/predicted, then the prediction error per size band; mpi rows get none")
        p.add_argument("--interleave", action="store_true",
                       help="with several --algo: run every algorithm in turn within each iteration (fairer on a busy "
                            "machine); progress goes to stderr and the tables print at the end")
    p.add_argument("--json", metavar="FILE", help="also write every row as JSON (schema ccsynth.bench/1, "
                                                  "ccsynth.bench.nonblocking/1 for the i* benchmarks)")
    if not nonblocking:
        p.add_argument("--plot", metavar="FILE.png", help="also plot latency and busbw against size (needs matplotlib)")


def run(args) -> int:
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    _install_abort_hook()
    if comm.Get_rank() != 0:
        # Every rank would log the same setup lines; rank 0 speaks for all (warnings still pass).
        root_log = logging.getLogger("ccsynth")
        root_log.setLevel(max(root_log.getEffectiveLevel(), logging.WARNING))
    try:
        mode = getattr(args, "mode", "omb")
        return {"omb": _run, "nonblocking": _run_nonblocking, "nccl": _run_nccl}[mode](args, comm)
    except CCSynthError:
        # Setup errors are agreed on every rank (omb.agree); one copy of the message is enough.
        if comm.Get_rank() != 0:
            return 2
        raise


def _install_abort_hook() -> None:
    """An unhandled exception on one rank aborts the job instead of hanging the others."""
    mpi_util: ModuleType | None
    try:
        from ccsynth.collectives import mpi_util
    except ImportError:
        mpi_util = None
    hook = None
    for name in ("install_abort_handler", "install_abort_hook"):
        hook = hook or getattr(mpi_util, name, None)
    if hook is not None:
        hook()
        return
    previous = sys.excepthook

    def abort_on_error(etype, value, tb):
        previous(etype, value, tb)
        from mpi4py import MPI

        if MPI.Is_initialized() and not MPI.Is_finalized() and MPI.COMM_WORLD.Get_size() > 1:
            sys.stderr.flush()
            MPI.COMM_WORLD.Abort(1)

    sys.excepthook = abort_on_error


def _abort(comm, exc: BaseException) -> None:
    """An error in the middle of a measurement: the other ranks are inside a collective, so abort."""
    rank = comm.Get_rank()
    if isinstance(exc, CCSynthError):
        print(f"ccsynth bench: error on rank {rank}: {exc}", file=sys.stderr)
    else:
        print(f"ccsynth bench: unexpected error on rank {rank}:", file=sys.stderr)
        traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
    sys.stderr.flush()
    if comm.Get_size() > 1:
        comm.Abort(2 if isinstance(exc, CCSynthError) else 1)
    raise exc


def _meta(args, comm, bench) -> dict:
    from mpi4py import MPI

    meta = {
        "n_ranks": comm.Get_size(),
        "dtype": getattr(args, "dtype", None) if bench.kind else ("uint8" if bench.pt2pt else None),
        "buffer": args.buffer,
        "mpi_library": MPI.Get_library_version().strip().splitlines()[0].strip(),
        "command": "ccsynth " + " ".join(sys.argv[1:]),
        "machine": machine_state().to_dict(),  # the load it was measured at (ccsynth.bench.machine)
    }
    if bench.kind in ("allreduce", "reduce", "reduce_scatter"):
        meta["op"] = getattr(args, "op", "sum")
    if bench.kind in ROOTED_KINDS:
        root, rotate = _root_of(args)
        meta["root"] = "rotate" if rotate else root
    if getattr(args, "in_place", False):
        meta["in_place"] = True
    if getattr(args, "tail", None):
        meta["tail_percentiles"] = list(args.tail)
    if getattr(args, "counts", "equal") != "equal":
        meta["counts"] = args.counts
        meta["seed"] = args.seed
    if bench.metric == "bandwidth":
        meta["window"] = args.window
    return meta


def _root_of(args) -> tuple[int, bool]:
    """(root, rotate) from OMB's ``-k`` or nccl-tests' ``-r`` (default rank 0, fixed)."""
    if getattr(args, "root_rank", None) is not None:
        return args.root_rank
    return int(getattr(args, "root", 0) or 0), False


def _check_conventions(options: Options, n: int) -> None:
    """Flag values that fit the command line but not this run (on every rank alike, before any measurement)."""
    if options.root >= n:
        raise CCSynthError(f"root {options.root} is not a rank of this {n}-rank run")
    if options.in_place and options.rotate_root:
        raise CCSynthError("-l (in place) and -k rotate cannot be combined: the in-place rows keep the root fixed")
    if options.op == "avg" and np.dtype(options.dtype).kind != "f":
        raise CCSynthError(f"op avg needs a floating-point type, not {options.dtype}")


def _ranks_here(comm) -> int:
    """How many ranks of ``comm`` share this node (its shared-memory group)."""
    from mpi4py import MPI

    here = comm.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        return here.Get_size()
    finally:
        here.Free()


def _warn_oversubscribed(comm, ranks_here: int) -> None:
    """Rank 0: a warning when the ranks on its node outnumber its cores, or other work keeps them busy (timings then
    measure the scheduler and that work)."""
    if comm.Get_rank() != 0:
        return
    state = machine_state()
    if state.busy:
        log.warning("the machine is busy (%s): the figures include the other work; compare algorithms run together "
                    "(--interleave) or measure when the load is below %d (the --json output records the load)",
                    state.describe(), state.cores)
    cores = state.cores
    if cores and ranks_here > cores:
        log.warning("%d ranks share this node's %d cores: ranks wait for a core, so the figures measure the "
                    "operating system's scheduler as well as the collectives (compare algorithms run together, "
                    "e.g. --interleave, or use at most %d ranks per node)", ranks_here, cores, cores)


def _setup(args, comm, bench, options: Options):
    """The context, the algorithms (set up on every rank), and the checks every mode makes before it measures."""
    from ccsynth.bench.algos import resolve_algorithms
    from ccsynth.bench.omb import Context

    rank = comm.Get_rank()
    ctx = agree(comm, lambda: Context(comm, options))
    agree(comm, lambda: _check_outputs(args) if rank == 0 else None)
    algos = resolve_algorithms(args.algo, ctx, bench.kind)
    return ctx, algos


def _run(args, comm) -> int:
    """``ccsynth bench NAME`` on every rank, in stages: the options, the setup, the sizes a message can have,
    the prediction (``--predict``), the measured tables, the summary after them, the files asked for."""
    bench = BENCHMARKS[args.bench]
    rank, n = comm.Get_rank(), comm.Get_size()
    if bench.pt2pt and n != 2:
        raise CCSynthError(f"{bench.name} runs between two ranks (as OMB's osu_{bench.name}); start it with mpiexec -n 2, not {n}")
    options = _options_of(args)
    _check_conventions(options, n)
    topo = None
    if getattr(args, "predict", None):
        topo = agree(comm, lambda: load_predict_topology(args.predict, n))
        options = dataclasses.replace(options, predict=topo.name)
    ctx, algos = _setup(args, comm, bench, options)
    progress = Progress.for_args(args, rank)
    options, note = _sizes_of_messages(bench, ctx, options, n)
    ctx.options = options
    _check_memory(args, comm, bench, options, algos, ctx.itemsize if bench.kind is not None else 1)

    meta = _meta(args, comm, bench)
    predictor = None
    if topo is not None and bench.kind is not None:  # --predict is offered for collectives only
        meta["predict"] = topo.name
        meta["predict_topology"] = args.predict
        if rank == 0:
            predictor = Predictor(topo, bench.kind, ctx)
    # rows on standard output are the progress; on standard error a [k/N] line every few seconds (each with -v)
    tables = _Tables(bench, ctx, meta, note, report.emit if rank == 0 else (lambda line: None), predictor,
                     progress.counter(bench.name, len(algos) * len(options.sizes)))
    try:
        if getattr(args, "interleave", False) and len(algos) > 1:
            _measure_interleaved(tables, algos, progress)
        else:
            for i, algo in enumerate(algos):
                if i:
                    tables.say("")
                tables.table(algo)
    except (Exception, KeyboardInterrupt) as e:  # noqa: BLE001 - any failure mid-run must abort every rank
        _abort(comm, e)
    results = tables.results
    lines = _summary_lines(bench, results, predictor, getattr(args, "predict", None) or "")
    if lines:
        tables.say("")
        for line in lines:
            tables.say(line)
    failed = any(r.valid is False for rows in results.values() for r in rows)
    if rank == 0:
        _write_outputs(args, bench, meta, results, predictor, n)
    return 1 if failed else 0


def _options_of(args) -> Options:
    """The benchmark options of the command line (flags a benchmark does not take: their defaults)."""
    return Options(
        sizes=tuple(getattr(args, "sizes", (0,))),
        iters=args.iterations,
        warmup=args.warmup,
        validate=args.validation,
        full=args.full,
        buffer=args.buffer,
        dtype=getattr(args, "dtype", "float32"),
        window=getattr(args, "window", WINDOW),
        chunks=getattr(args, "chunks", None),
        profile=getattr(args, "profile", False),
        root=_root_of(args)[0],
        rotate_root=_root_of(args)[1],
        in_place=getattr(args, "in_place", False),
        tail=tuple(getattr(args, "tail", None) or ()),
        counts=getattr(args, "counts", "equal"),
        seed=getattr(args, "seed", 0),
    )


def _sizes_of_messages(bench, ctx, options: Options, n: int) -> tuple[Options, str]:
    """``options`` without the sizes below the benchmark's smallest message, and the note that says which."""
    unit = bench.unit(ctx)
    skipped = [s for s in options.sizes if s < unit]
    sizes = tuple(s for s in options.sizes if s >= unit)
    if not sizes:
        raise CCSynthError(f"no size in -m is at least {unit} B, the smallest {bench.name} message with {options.dtype} on {n} ranks")
    note = f"# skipped sizes below {unit} B: {', '.join(map(str, skipped))} (less than one element per block)" if skipped else ""
    return dataclasses.replace(options, sizes=sizes), note


@dataclass
class _Tables:
    """The tables of one run as rank 0 prints them (``say``), and the rows measured so far (``results``)."""

    bench: Any
    ctx: Any
    meta: dict
    note: str
    say: Callable[[str], None]
    predictor: Predictor | None
    counter: Any
    results: dict[str, list] = field(default_factory=dict)

    def predicted(self, algo, row, footprint=None):
        return self.predictor.annotate(algo, row, footprint) if self.predictor is not None else row

    def table(self, algo, rows=None) -> None:
        """Print one algorithm's table; rows given: all at once, else as they are measured."""
        from ccsynth.bench.algos import PlanAlgorithm

        bench, options, say = self.bench, self.ctx.options, self.say
        show_algo = isinstance(algo, PlanAlgorithm)
        for line in report.title_lines(bench, algo.name, self.meta) + ([self.note] if self.note else []):
            say(line)
        say(report.header_line(bench, options, show_algo))
        if rows is None:
            rows = self.results.setdefault(algo.name, [])
            for row in run_benchmark(bench, self.ctx, algo):
                row = self.predicted(algo, row)
                rows.append(row)
                say(report.format_row(bench, row, options, show_algo))
                self.counter.step(f"{algo.name} {row.size} B: {row.avg_us:.2f} us")
        else:
            for row in rows:
                say(report.format_row(bench, row, options, show_algo))
        for line in report.profile_lines(rows):
            say(line)


def _measure_interleaved(tables: _Tables, algos, progress) -> None:
    """Iteration by iteration, every algorithm in turn (a change of machine load hits all alike); the tables after."""
    bench, predictor = tables.bench, tables.predictor
    for k, done in enumerate(run_interleaved(bench, tables.ctx, algos), 1):
        # each row's footprint: every algorithm's buffers, touched in turn (bench/predict.py)
        footprint = predictor.interleaved_footprint(algos, done[0].nbytes) if predictor is not None else None
        for a, row in zip(algos, done):
            tables.results.setdefault(a.name, []).append(tables.predicted(a, row, footprint))
        cells = ", ".join(f"{a.name} {row.avg_us:.2f} us" for a, row in zip(algos, done))
        progress.say(f"# {bench.name} [{k}/{len(tables.ctx.options.sizes)}] {done[0].size} B: {cells}")
    for i, algo in enumerate(algos):
        if i:
            tables.say("")
        tables.table(algo, tables.results[algo.name])


def _summary_lines(bench, results: dict[str, list], predictor: Predictor | None, predict: str) -> list[str]:
    """What follows the tables: the comparison of algorithms, and with ``--predict`` (the topology ``predict``)
    the errors and MPI's drift."""
    lines = report.comparison_lines(bench, results)
    if predictor is not None:
        lines += [""] + error_lines(results)
        drift = drift_lines(results, predictor.topology, predictor.kind, predict)
        if drift:
            lines += [""] + drift
    return lines


def _write_outputs(args, bench, meta: dict, results: dict[str, list], predictor: Predictor | None, n: int) -> None:
    """Rank 0: the ``--json`` document and the ``--plot`` figure, where asked for."""
    if args.json:
        doc = report.to_json(bench, meta, results)
        if predictor is not None:
            doc["prediction_error"] = [dataclasses.asdict(d) for d in error_table(results)]
            doc["mpi_drift"] = [dataclasses.asdict(d) for d in
                                drift_table(results, predictor.topology.mpi_reference_for(predictor.kind))]
        report.write_json(args.json, doc)
    if args.plot:
        from ccsynth.bench.plot import plot_results

        plot_results(bench, results, args.plot, f"{n} ranks, {meta['dtype']}")


def _check_outputs(args) -> None:
    """Fail before a long run, not after it, if the results could not be written."""
    plot = getattr(args, "plot", None)
    for path in (args.json, plot):
        if path is not None:
            check_writable(path)
    if plot is not None:
        from ccsynth.bench.plot import plot_format

        plot_format(args.plot)


def _check_memory(args, comm, bench, options, algos, itemsize: int) -> None:
    """Refuse, on every rank, sizes whose buffers cannot fit in this machine's memory (see ccsynth.bench.memory)."""
    ranks_here = _ranks_here(comm)
    _warn_oversubscribed(comm, ranks_here)
    if not bench.sized:
        return
    largest = max(options.sizes)
    agree(comm, lambda: check_memory(
        bench.name, bench.kind, largest, comm.Get_size(), ranks_here, [a.name for a in algos],
        itemsize=itemsize, validate=options.validate,
        on_host=options.buffer == "numpy",
        together=bool(getattr(args, "interleave", False)) and len(algos) > 1, size_text=format_size(largest),
    ))


def _usable_sizes(bench, options: Options, ctx) -> tuple[int, ...]:
    """The sizes of ``options`` that hold at least one element per block (an error if none does)."""
    unit = bench.unit(ctx)
    sizes = tuple(s for s in options.sizes if s >= unit)
    if not sizes:
        raise CCSynthError(f"no size is at least {unit} B, the smallest {bench.name} message with {options.dtype} on "
                           f"{ctx.n} ranks")
    return sizes


def _run_nonblocking(args, comm) -> int:
    """OMB's osu_i*: overall, compute, pure communication and overlap per size (see ccsynth.bench.nonblocking)."""
    name = args.bench
    bench = BENCHMARKS[NB.NONBLOCKING[name]]
    rank = comm.Get_rank()
    root, rotate = _root_of(args)
    if rotate:
        raise CCSynthError("-k rotate is for the blocking benchmarks; the non-blocking ones take a fixed root")
    options = Options(sizes=tuple(args.sizes), iters=args.iterations, warmup=args.warmup, validate=args.validation,
                      full=args.full, buffer=args.buffer, dtype=args.dtype, chunks=args.chunks, root=root,
                      tail=tuple(getattr(args, "tail", None) or ()))
    _check_conventions(options, comm.Get_size())
    ctx, algos = _setup(args, comm, bench, options)
    options = dataclasses.replace(options, sizes=_usable_sizes(bench, options, ctx))
    ctx.options = options
    _check_memory(args, comm, bench, options, algos, ctx.itemsize)
    meta = _meta(args, comm, bench)
    say = report.emit if rank == 0 else (lambda line: None)
    results: dict[str, list] = {}
    counter = Progress.for_args(args, rank).counter(name, len(algos) * len(options.sizes))
    try:
        for i, algo in enumerate(algos):
            if i:
                say("")
            for line in NB.title_lines(name, algo.name, meta):
                say(line)
            rows = results.setdefault(algo.name, [])
            show = algo.name != "mpi"
            say(NB.header_line(options.validate, show))
            for row in NB.run_nonblocking(bench, ctx, algo):
                rows.append(row)
                say(NB.format_row(row, options.validate, show))
                counter.step(f"{algo.name} {row.size} B: overlap {row.overlap_pct:.1f} %")
    except (Exception, KeyboardInterrupt) as e:  # noqa: BLE001 - any failure mid-run must abort every rank
        _abort(comm, e)
    if rank == 0 and args.json:
        report.write_json(args.json, NB.to_json(name, meta, results))
    return 1 if any(r.valid is False for rows in results.values() for r in rows) else 0


def _run_nccl(args, comm) -> int:
    """nccl-tests' all_reduce_perf and siblings: out-of-place and in-place rows, the average bus bandwidth."""
    bench = BENCHMARKS[args.bench]
    rank = comm.Get_rank()
    if args.ngpus != 1 or args.nthreads != 1:
        raise CCSynthError(f"-g {args.ngpus} -t {args.nthreads}: ccsynth bench runs one rank per process, one GPU "
                           f"each (-g 1 -t 1); for more ranks start more processes (mpiexec -n)")
    opts = N.NcclOptions(begin=args.minbytes, end=args.maxbytes, factor=args.stepfactor, step=args.stepbytes,
                         iters=args.iters, warmup=args.warmup_iters, check=args.check, average=args.average,
                         blocking=bool(args.blocking))
    sizes = opts.sizes  # bad -b/-e/-i raise here, on every rank alike
    options = Options(sizes=sizes, iters=opts.iters, warmup=opts.warmup, validate=bool(opts.check),
                      buffer=args.buffer, dtype=args.dtype, op=args.op, root=args.root)
    _check_conventions(options, comm.Get_size())
    ctx, algos = _setup(args, comm, bench, options)
    omb_sizes = tuple(N.omb_size(bench, s, ctx) for s in sizes)
    _usable_sizes(bench, dataclasses.replace(options, sizes=omb_sizes), ctx)
    _check_memory(args, comm, bench, dataclasses.replace(options, sizes=omb_sizes), algos, ctx.itemsize)
    meta = _meta(args, comm, bench)
    places = N.gather_places(ctx)
    say = report.emit if rank == 0 else (lambda line: None)
    results: dict[str, list] = {}
    counter = Progress.for_args(args, rank).counter(args.nccl_test, len(algos) * len(sizes))
    try:
        for i, algo in enumerate(algos):
            if i:
                say("")
            for line in N.header_lines(opts, places, algo.name, args.buffer):
                say(line)
            rows = results.setdefault(algo.name, [])
            for row in N.run_nccl(bench, ctx, algo, opts):
                rows.append(row)
                say(N.format_row(row))
                counter.step(f"{algo.name} {row.size_bytes} B: busbw {row.out_of_place.busbw_GBps:.2f} GB/s")
            for line in N.footer_lines(rows):
                say(line)
    except (Exception, KeyboardInterrupt) as e:  # noqa: BLE001 - any failure mid-run must abort every rank
        _abort(comm, e)
    if rank == 0 and args.json:
        report.write_json(args.json, N.to_json(bench, args.nccl_test, meta, opts, results))
    return 1 if any(N.n_wrong(rows) for rows in results.values()) else 0
