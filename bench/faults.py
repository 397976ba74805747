"""Fault injection: what one rank's failure does to every rank of a collective call.

Run it (it launches ``mpiexec`` itself)::

    python -m ccsynth.bench.faults                      # 2, 4 and 6 ranks, every scenario
    python -m ccsynth.bench.faults -n 4 --only 'fail-*' --markdown table.md

Every scenario runs under ``mpiexec -n K`` with the drop-in
``ccsynth.Communicator`` (the built-in default plan) and injects one fault
on one rank (rank 1 unless said otherwise): a local mistake (a
non-contiguous, read-only, wrongly sized or wrongly typed buffer), a count
that differs from the other ranks', a skipped call, a killed process, an
uncaught exception, a failure while the others are inside the MPI library's
own collective. Every rank checks every buffer it gets back against a local
reference. The table reports per scenario and rank count:

* ``clean error`` -- every rank raised (the same error class), no rank
  returned a wrong buffer, and a correct call afterwards gave the right
  result on every rank (the communicator is still usable); in a rooted
  collective a rank whose result does not depend on the failed rank may
  instead finish with the right result;
* ``abort`` -- the job was aborted (by the launcher after a killed process,
  or by ccsynth where MPI cannot recover), with a message naming the rank
  and the reason, and no rank returned a wrong buffer;
* ``correct result`` -- the scenario expected no error and every result was right;
* ``WRONG`` (a silent wrong answer) or ``HANG`` (the job outlived its
  limit) -- what must never happen.

"time to failure" is the longest time any rank spent in the faulty call
before it raised (for aborts: from the fault to the end of the job).
Scenarios whose job ends in an error or abort run alone; the others share
one job per rank count (each with a fresh communicator).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from collections.abc import Callable

import numpy as np

from ccsynth.bench.validate import expected, pattern, recv_count, send_count
from ccsynth.collectives.mpi_util import find_mpiexec, install_abort_handler
from ccsynth.collectives.runtime.memory import DEFAULT_MIN_CACHE_BYTES

__all__ = ["Scenario", "SCENARIOS", "Outcome", "run_scenarios", "main"]

KINDS = ("allreduce", "allgather", "reduce_scatter", "alltoall", "broadcast", "reduce")
BAD = 1  # the rank that fails
COUNT = 6  # elements per block in small calls
LARGE = 4 << 20  # elements (float64: 32 MiB) in large calls
CALL_TIMEOUT = float(os.environ.get("CCSYNTH_FAULT_TIMEOUT", "5"))  # seconds: timeout= of scenarios that need one
LINE = re.compile(r"^FAULT\|([^|]+)\|(\d+)\|([^|]+)\|([0-9.]+)\|(.*)$", re.MULTILINE)


# ======================================================================= worker side
class Ctx:
    """What a scenario body gets on every rank: MPI, the rank, and how to report."""

    def __init__(self, name: str):
        from mpi4py import MPI  # the worker side only: importing it starts MPI

        self.MPI = MPI
        self.world = MPI.COMM_WORLD
        self.rank = self.world.Get_rank()
        self.n = self.world.Get_size()
        self.name = name

    @staticmethod
    def rank_of_world() -> int:
        return sys.modules["mpi4py.MPI"].COMM_WORLD.Get_rank()

    def say(self, status: str, seconds: float = 0.0, detail: str = "") -> None:
        detail = " ".join(str(detail).split())[:300]
        sys.stdout.write(f"FAULT|{self.name}|{self.rank}|{status}|{seconds:.3f}|{detail}\n")
        sys.stdout.flush()

    def comm(self, **kw):
        # the worker side only: the driver never starts MPI. What ccsynth.Communicator is: the collectives
        # layer's communicator with the built-in default plan injected (the bench sits below the public face)
        from ccsynth.collectives.communicator import Communicator
        from ccsynth.synth.default_plan import LazyDefaultPlan

        kw.setdefault("default_plan", LazyDefaultPlan())
        return Communicator(self.world, **kw)


def _buffers(kind: str, ctx: Ctx, count: int, dtype=np.float64, root: int = 0):
    """(send, recv, expected) for ``kind`` on this rank (recv None where the call takes one buffer)."""
    n, r = ctx.n, ctx.rank
    send = pattern(r, send_count(kind, n, count), dtype, n_ranks=n)
    ref = expected(kind, r, n, count, dtype, root)
    if kind == "broadcast":
        buf = send.copy() if r == root else np.full(count, -1, dtype)
        return buf, None, ref
    recv = np.full(recv_count(kind, n, count), -1, dtype)
    return send, recv, ref


def _call(c, kind: str, send, recv, root: int = 0, op=None) -> None:
    MPI = sys.modules["mpi4py.MPI"]
    op = MPI.SUM if op is None else op
    if kind == "allreduce":
        c.Allreduce(send, recv, op)
    elif kind == "allgather":
        c.Allgather(send, recv)
    elif kind == "reduce_scatter":
        c.Reduce_scatter_block(send, recv, op)
    elif kind == "alltoall":
        c.Alltoall(send, recv)
    elif kind == "broadcast":
        c.Bcast(send, root)
    elif kind == "reduce":
        c.Reduce(send, recv, op, root)
    else:  # pragma: no cover
        raise ValueError(kind)


def _result(kind: str, send, recv):
    return send if kind == "broadcast" else recv


def _checked_call(ctx: Ctx, c, kind: str, send, recv, ref, root: int = 0, op=None, tag: str = "") -> bool:
    """Make the call, report how it ended on this rank: raised, a right result, or a WRONG one."""
    t0 = time.monotonic()
    try:
        _call(c, kind, send, recv, root, op)
    except Exception as e:  # noqa: BLE001 - the outcome is what we report
        ctx.say(f"{tag}ERROR:{type(e).__name__}", time.monotonic() - t0, str(e))
        return False
    dt = time.monotonic() - t0
    got = _result(kind, send, recv)
    if ref is None or (got is not None and np.array_equal(np.asarray(got).reshape(-1), ref)):
        ctx.say(f"{tag}OK", dt, c.last_algorithm)
    else:
        bad = np.flatnonzero(np.asarray(got).reshape(-1) != ref)
        ctx.say(f"{tag}WRONG", dt, f"{bad.size} of {ref.size} elements differ via {c.last_algorithm}")
    return True


def _then_correct(ctx: Ctx, c, kind: str, count: int = COUNT, root: int = 0) -> None:
    """After the fault: the same collective, right arguments everywhere, must give the right result."""
    send, recv, ref = _buffers(kind, ctx, count, root=root)
    _checked_call(ctx, c, kind, send, recv, ref, root, tag="AFTER-")


def _local_fault(fault: str, kind: str):
    """Rank BAD makes a mistake only it can see (before communicating); the others call correctly."""

    def body(ctx: Ctx) -> None:
        root = BAD if kind == "reduce" or (kind == "broadcast" and fault == "noncontig") else 0
        c = ctx.comm()
        send, recv, ref = _buffers(kind, ctx, COUNT, root=root)
        if ctx.rank == BAD:
            ref = None  # whatever happens, this rank must raise
            if fault == "noncontig":  # the input is a strided view
                wide = np.repeat(send, 2)
                send = wide[::2]
            elif fault == "readonly":  # the output cannot be written
                out = send if kind == "broadcast" else recv
                out.flags.writeable = False
            elif fault == "size":  # the output is one element short
                recv = recv[:-1]
            elif fault == "dtype":  # the input is float32, the output float64
                send = send.astype(np.float32)
        _checked_call(ctx, c, kind, send, recv, ref, root)
        _then_correct(ctx, c, kind, root=root)

    return body


def _count_fault(kind: str, debug: bool):
    """Rank 0 passes one element more per block than the others (consistent on its own)."""

    def body(ctx: Ctx) -> None:
        c = ctx.comm(debug=debug)
        count = COUNT + 1 if ctx.rank == 0 else COUNT
        send, recv, ref = _buffers(kind, ctx, count)
        _checked_call(ctx, c, kind, send, recv, None if ctx.rank == 0 else ref)
        _then_correct(ctx, c, kind)

    return body


def _issue_repro(ctx: Ctx) -> None:
    """The issue's report: rank 1 passes a non-contiguous array and catches the error; then two allreduces."""
    c = ctx.comm()
    x, y = np.full(2, ctx.rank + 1.0), np.zeros(2)
    if ctx.rank == BAD:
        x = np.repeat(x, 2)[::2]
    t0 = time.monotonic()
    try:
        c.Allreduce(x, y)
        ok = np.all(y == ctx.n * (ctx.n + 1) / 2)
        ctx.say("OK" if ok and ctx.rank != BAD else "WRONG", time.monotonic() - t0, f"{y.tolist()}")
    except Exception as e:  # noqa: BLE001
        ctx.say(f"ERROR:{type(e).__name__}", time.monotonic() - t0, str(e))
    for value, tag in ((1.0, "AFTER-"), (25.0, "AFTER-")):
        x, y = np.full(2, value), np.zeros(2)
        c.Allreduce(x, y)
        ctx.say(f"{tag}{'OK' if np.all(y == value * ctx.n) else 'WRONG'}", 0.0, f"{y.tolist()} (want {value * ctx.n})")


def _large_fault(ctx: Ctx) -> None:
    """A 32 MiB allreduce where rank 1's buffer is read-only: the others' large sends to it are left behind."""
    c = ctx.comm()
    send = np.full(LARGE, ctx.rank + 1.0)
    recv = np.zeros(LARGE)
    ref: np.ndarray | None = np.full(LARGE, ctx.n * (ctx.n + 1) / 2)
    if ctx.rank == BAD:
        recv.flags.writeable = False
        ref = None
    _checked_call(ctx, c, "allreduce", send, recv, ref)
    recv = np.zeros(LARGE)
    _checked_call(ctx, c, "allreduce", send, recv, np.full(LARGE, ctx.n * (ctx.n + 1) / 2), tag="AFTER-")


def _inplace_nonroot(ctx: Ctx) -> None:
    """Reduce(MPI.IN_PLACE) on a rank that is not the root (MPI allows it only at the root)."""
    c = ctx.comm()
    send, recv, ref = _buffers("reduce", ctx, COUNT, root=0)
    if ctx.rank == BAD:
        t0 = time.monotonic()
        try:
            c.Reduce(ctx.MPI.IN_PLACE, send, ctx.MPI.SUM, 0)
            ctx.say("WRONG", time.monotonic() - t0, "accepted IN_PLACE on a non-root rank")
        except Exception as e:  # noqa: BLE001
            ctx.say(f"ERROR:{type(e).__name__}", time.monotonic() - t0, str(e))
    else:
        _checked_call(ctx, c, "reduce", send, recv if ctx.rank == 0 else None, ref)
    _then_correct(ctx, c, "reduce")


def _warm_up(ctx: Ctx, c, calls) -> None:
    """Correct calls first (``(kind, count, root)``): every schedule involved is compiled and agreed on."""
    for kind, count, root in calls:
        send, recv, ref = _buffers(kind, ctx, count, root=root)
        _checked_call(ctx, c, kind, send, recv, ref, root, tag="WARM-")


def _bcast_roots(debug: bool, warm: bool = False):
    """Rank 1 names itself the root of a Bcast; the others name rank 0."""

    def body(ctx: Ctx) -> None:
        c = ctx.comm(debug=debug, timeout=CALL_TIMEOUT)
        if warm:
            _warm_up(ctx, c, [("broadcast", COUNT, 0), ("broadcast", COUNT, BAD)])
        root = BAD if ctx.rank == BAD else 0
        buf, _, ref = _buffers("broadcast", ctx, COUNT, root=root)
        _checked_call(ctx, c, "broadcast", buf, None, None if ctx.rank == BAD else ref, root)
        if debug:
            _then_correct(ctx, c, "broadcast")

    return body


def _skip(kind: str, then: str, warm: bool = False):
    """Rank 1 skips the call and goes on to the program's next collective (``then``); the others wait for it."""

    def body(ctx: Ctx) -> None:
        c = ctx.comm(timeout=CALL_TIMEOUT)
        if warm:
            _warm_up(ctx, c, [(kind, COUNT, 0), (then, 2 * COUNT, 0)])
        if ctx.rank != BAD:
            send, recv, ref = _buffers(kind, ctx, COUNT)
            _checked_call(ctx, c, kind, send, recv, ref)
        send, recv, ref = _buffers(then, ctx, 2 * COUNT)
        _checked_call(ctx, c, then, send, recv, ref, tag="" if ctx.rank == BAD else "AFTER-")

    return body


def _kill(kind: str, large: bool):
    """Rank 1's process is killed (SIGKILL) before the call, or in the middle of a large one."""

    def body(ctx: Ctx) -> None:
        c = ctx.comm()
        count = LARGE // ctx.n if large else COUNT
        send, recv, ref = _buffers(kind, ctx, count)
        ctx.world.Barrier()
        if ctx.rank == BAD:
            ctx.say("INJECT", time.time(), "SIGKILL")
            if large:
                threading.Timer(0.02, os.kill, (os.getpid(), signal.SIGKILL)).start()
            else:
                os.kill(os.getpid(), signal.SIGKILL)
        _checked_call(ctx, c, kind, send, recv, ref)
        ctx.world.Barrier()

    return body


def _uncaught(ctx: Ctx) -> None:
    """No abort handler, nobody catches: rank 1's error ends its process; the others must not hang."""
    c = ctx.comm()
    send, recv, _ref = _buffers("allreduce", ctx, COUNT)
    if ctx.rank == BAD:
        send = np.repeat(send, 2)[::2]
    ctx.say("INJECT", time.time(), "uncaught error on rank 1")
    _call(c, "allreduce", send, recv)  # raises on every rank; nobody catches it
    ctx.say("WRONG", 0.0, "returned")


def _mpi_fallback(ctx: Ctx) -> None:
    """MPI.BAND has no ccsynth kernel (the MPI library runs it); rank 1's output is read-only."""
    MPI = ctx.MPI
    c = ctx.comm()
    send = np.arange(COUNT, dtype=np.int32) + ctx.rank
    recv = np.zeros(COUNT, np.int32)
    band = np.arange(COUNT, dtype=np.int32)
    for q in range(1, ctx.n):
        band &= np.arange(COUNT, dtype=np.int32) + q
    ref: np.ndarray | None = band
    if ctx.rank == BAD:
        recv.flags.writeable = False
        ref = None
    ctx.say("INJECT", time.time(), "read-only output, MPI.BAND")
    _checked_call(ctx, c, "allreduce", send, recv, ref, op=MPI.BAND)
    ctx.world.Barrier()


def _exit_after_large(ctx: Ctx) -> None:
    """Exit right after large collectives (a rank's last messages may still be in flight)."""
    c = ctx.comm()
    for kind in ("allreduce", "broadcast", "reduce"):
        send, recv, ref = _buffers(kind, ctx, LARGE // 2, root=ctx.n - 1)
        _checked_call(ctx, c, kind, send, recv, ref, root=ctx.n - 1)


def _memory(ctx: Ctx) -> None:
    """200 distinct sizes of in-place allreduce up to 16 MiB: the resident memory must stay bounded."""
    top = 2 << 20  # float64 elements: 16 MiB
    rng = np.random.default_rng(7)
    sizes = rng.choice(np.arange(top // 2, top + 1), 200, replace=False)
    sizes[0] = top
    c = ctx.comm()
    buf = np.zeros(top)
    buf[:] = 1.0  # touched: part of the baseline
    base = _rss_peak()
    for m in sizes:
        x = buf[:m]
        x[:] = ctx.rank + 1.0
        c.Allreduce(ctx.MPI.IN_PLACE, x)
        if x[0] != ctx.n * (ctx.n + 1) / 2 or x[-1] != x[0]:
            ctx.say("WRONG", 0.0, f"size {m}")
            return
    grew = _rss_peak() - base
    bound = 3 * top * 8 + DEFAULT_MIN_CACHE_BYTES
    ctx.say("OK" if grew <= bound else "OVER", 0.0,
            f"peak RSS grew {grew / 2**20:.1f} MiB over 200 sizes <= 16 MiB; bound 3 x 16 MiB + "
            f"{DEFAULT_MIN_CACHE_BYTES >> 20} MiB = {bound / 2**20:.0f} MiB; kept {c.cached_bytes / 2**20:.1f} MiB")


def _rss_peak() -> int:
    """Peak resident set size of this process in bytes (VmHWM)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    import resource  # pragma: no cover - not Linux

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # pragma: no cover


# ======================================================================= scenarios
@dataclass(frozen=True)
class Scenario:
    """One fault: its body (run on every rank), what must come of it, whether it needs a job of its own."""

    name: str
    doc: str
    body: Callable[[Ctx], None]
    expect: str  # "clean error", "abort" or "correct result"
    alone: bool = False
    ranks: tuple[int, ...] = (2, 3, 4, 5, 6)
    handler: bool = True  # install the abort handler (an uncaught error aborts the job)
    also: tuple[str, ...] = ()  # other acceptable outcomes


def _scenarios() -> list[Scenario]:
    out: list[Scenario] = []
    for fault, what in (("noncontig", "non-contiguous input"), ("readonly", "read-only output"),
                        ("size", "output one element short"), ("dtype", "float32 input, float64 output")):
        for kind in KINDS:
            if kind == "broadcast" and fault in ("size", "dtype"):
                continue  # one buffer: nothing to disagree with locally
            out.append(Scenario(f"fail-{fault}/{kind}", f"rank 1: {what}", _local_fault(fault, kind), "clean error"))
    for kind in KINDS:
        out.append(Scenario(f"count/{kind}", "rank 0 passes one element more per block",
                            _count_fault(kind, False), "clean error"))
        out.append(Scenario(f"count-debug/{kind}", "the same with debug=True", _count_fault(kind, True),
                            "clean error"))
    out += [
        Scenario("issue-repro", "rank 1 non-contiguous, caught; then allreduce of 1.0 and 25.0", _issue_repro,
                 "clean error"),
        Scenario("fail-large", "32 MiB allreduce, rank 1's output read-only", _large_fault, "clean error"),
        Scenario("inplace-nonroot/reduce", "Reduce(IN_PLACE) on rank 1, root 0", _inplace_nonroot, "clean error"),
        Scenario("roots-debug/broadcast", "rank 1 names itself the Bcast root, debug=True", _bcast_roots(True),
                 "clean error"),
        Scenario("roots/broadcast", f"the same without debug (timeout {CALL_TIMEOUT:g} s)", _bcast_roots(False),
                 "clean error", alone=True),
        Scenario("roots-warm/broadcast", "the same after Bcasts from both roots ran once (every rank may get what "
                 "its own call asks for)", _bcast_roots(False, True), "clean error", alone=True,
                 also=("correct result",)),
        Scenario("skip/allreduce", f"rank 1 skips it, calls the next allgather (timeout {CALL_TIMEOUT:g} s)",
                 _skip("allreduce", "allgather"), "clean error", alone=True),
        Scenario("skip/broadcast", f"rank 1 skips it, calls the next allreduce (timeout {CALL_TIMEOUT:g} s)",
                 _skip("broadcast", "allreduce"), "clean error", alone=True),
        Scenario("kill-large/allreduce", "rank 1 killed 20 ms into a 32 MiB allreduce", _kill("allreduce", True),
                 "abort", alone=True),
    ]
    for kind in KINDS:
        then = "allgather" if kind != "allgather" else "allreduce"
        out.append(Scenario(f"skip-warm/{kind}", f"rank 1 skips it after one call of each, calls the next {then} "
                            f"(timeout {CALL_TIMEOUT:g} s)", _skip(kind, then, True), "clean error", alone=True))
        out.append(Scenario(f"kill/{kind}", "rank 1 killed (SIGKILL) before the call", _kill(kind, False), "abort",
                            alone=True))
    out += [
        # every rank raises the same error; whichever process exits first makes the launcher end the job,
        # so the others may be ended before they print: both outcomes are right, a hang is not
        Scenario("uncaught", "rank 1's error not caught, no abort handler", _uncaught, "clean error", alone=True,
                 handler=False, also=("abort",)),
        Scenario("mpi-fallback", "rank 1 fails while the others are in MPI's own Allreduce (MPI.BAND)",
                 _mpi_fallback, "abort", alone=True),
        Scenario("exit-after-large", "exit right after 32 MiB allreduce, bcast, reduce", _exit_after_large,
                 "correct result", alone=True),
        Scenario("memory-200-sizes", "200 distinct in-place allreduce sizes up to 16 MiB", _memory,
                 "correct result", alone=True),
    ]
    return out


SCENARIOS: dict[str, Scenario] = {s.name: s for s in _scenarios()}


def worker(names: list[str]) -> None:
    """Run scenarios ``names`` in order on this rank (under mpiexec)."""
    scenarios = [SCENARIOS[n] for n in names]
    if all(s.handler for s in scenarios):
        install_abort_handler()
    else:  # report an uncaught error, then let Python end the process as it would
        previous = sys.excepthook

        def hook(etype, value, tb):
            sys.stdout.write(f"FAULT|{scenarios[-1].name}|{Ctx.rank_of_world()}|ERROR:{etype.__name__}|0|{value}\n")
            sys.stdout.flush()
            previous(etype, value, tb)

        sys.excepthook = hook
    for s in scenarios:
        ctx = Ctx(s.name)
        ctx.world.Barrier()
        s.body(ctx)
    ctx.world.Barrier()


# ======================================================================= driver side
@dataclass
class Outcome:
    """How one scenario ended on ``n`` ranks."""

    scenario: str
    n: int
    outcome: str
    seconds: float
    detail: str
    expected: str
    lines: dict = field(default_factory=dict)  # rank -> [(status, seconds, detail)]
    also: tuple[str, ...] = ()

    @property
    def as_expected(self) -> bool:
        return self.outcome == self.expected or self.outcome in self.also


def _launch(names: list[str], n: int, limit: float) -> tuple[int | None, str, float]:
    """``mpiexec -n n`` the worker for ``names``: (exit status or None after ``limit`` s, output, end time)."""
    mpiexec = find_mpiexec()
    if mpiexec is None:
        raise SystemExit("mpiexec not found")
    cmd = [mpiexec, "-n", str(n), sys.executable, "-m", "ccsynth.bench.faults", "--worker", ",".join(names)]
    env = dict(os.environ)
    env.pop("CCSYNTH_DEBUG", None)
    env.pop("CCSYNTH_TIMEOUT", None)
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                         start_new_session=True)
    try:
        out, _ = p.communicate(timeout=limit)
        return p.returncode, out, time.time()
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)  # the launcher and every rank
        out, _ = p.communicate()
        return None, out, time.time()


def _classify(s: Scenario, n: int, rc: int | None, out: str, ended: float) -> Outcome:
    lines: dict[int, list] = {}
    for m in LINE.finditer(out):
        if m.group(1) == s.name:
            lines.setdefault(int(m.group(2)), []).append((m.group(3), float(m.group(4)), m.group(5)))
    statuses = [st for per in lines.values() for st, _, _ in per]
    injected = [t for per in lines.values() for st, t, _ in per if st == "INJECT"]
    main_ = {r: [x for x in per if not x[0].startswith(("AFTER-", "INJECT", "WARM-"))] for r, per in lines.items()}
    after = {r: [x for x in per if x[0].startswith("AFTER-")] for r, per in lines.items()}
    errors = sorted({st.split(":", 1)[1] for per in main_.values() for st, _, _ in per if st.startswith("ERROR:")})
    t_fail = max((t for per in main_.values() for st, t, _ in per if st.startswith("ERROR:")), default=0.0)

    def detail_of(prefix: str) -> str:
        for r in sorted(main_):
            for st, _, d in main_[r]:
                if st.startswith(prefix):
                    return f"rank {r}: {d}"
        return ""

    if any("WRONG" in st for st in statuses):
        wrong = [f"rank {r}: {d}" for r, per in lines.items() for st, _, d in per if "WRONG" in st]
        return Outcome(s.name, n, "WRONG", 0.0, "; ".join(wrong)[:300], s.expect, lines)
    if rc is None:
        return Outcome(s.name, n, "HANG", 0.0, f"killed after the job limit; {len(lines)} rank(s) reported",
                       s.expect, lines)
    if any(st == "OVER" for st in statuses):
        return Outcome(s.name, n, "OVER", 0.0, detail_of("OVER"), s.expect, lines)
    if injected and rc != 0:
        why = ""
        found = re.search(r"(rank \d+:[^\n]*aborting the MPI job)", out) or re.search(r"(rank \d+[^\n]*failed[^\n]*)", out)
        if found:
            why = found.group(1)
        elif "KILLED BY SIGNAL: 9" in out or "signal 9" in out.lower():
            why = "the launcher ended the job: rank 1 was killed by signal 9"
        misleading = "different counts" in out
        det = (why or out.strip().splitlines()[-1] if out.strip() else "")[:240]
        if misleading:
            det += " [MISLEADING: blamed on different counts]"
        aborted = "aborting the MPI job" in out or "KILLED BY SIGNAL" in out
        if not aborted and errors and all(main_.get(r) for r in range(n)) and all(
                any(st.startswith("ERROR:") for st, _, _ in main_[r]) for r in range(n)):
            return Outcome(s.name, n, "clean error", max(0.0, ended - min(injected)),
                           f"{'/'.join(errors)} on every rank; {detail_of('ERROR:')}"[:300], s.expect, lines)
        return Outcome(s.name, n, "abort", max(0.0, ended - min(injected)), det, s.expect, lines)
    complete = all(main_.get(r) for r in range(n))
    after_ok = all(all(st == "AFTER-OK" for st, _, _ in after.get(r, [])) for r in range(n))
    if not complete:
        return Outcome(s.name, n, "unfinished", 0.0, f"job ended with status {rc}: {out.strip()[-200:]}", s.expect,
                       lines)
    if errors:
        raised = [r for r in range(n) if any(st.startswith("ERROR:") for st, _, _ in main_[r])]
        finished = [r for r in range(n) if r not in raised]
        note = f"{'/'.join(errors)} on rank(s) {raised}" + (f"; rank(s) {finished} finished right" if finished else "")
        if not after_ok:
            after_errors = sorted({st for per in after.values() for st, _, _ in per if st != "AFTER-OK"})
            note += f"; the call after: {', '.join(after_errors)}"
        return Outcome(s.name, n, "clean error", t_fail, f"{note}; {detail_of('ERROR:')}"[:300], s.expect, lines)
    return Outcome(s.name, n, "correct result", 0.0, detail_of("OK")[:300], s.expect, lines)


def run_scenarios(names: list[str], ranks: list[int], limit: float = 120.0,
                  progress: Callable[[Outcome], None] | None = None) -> list[Outcome]:
    """Run ``names`` on each rank count (shared jobs where possible); every outcome in order."""
    out: list[Outcome] = []
    for n in ranks:
        chosen = [SCENARIOS[x] for x in names if n in SCENARIOS[x].ranks and n >= 2]
        shared = [s for s in chosen if not s.alone]
        jobs = ([shared] if shared else []) + [[s] for s in chosen if s.alone]
        for job in jobs:
            todo = list(job)
            while todo:
                rc, text, ended = _launch([s.name for s in todo], n, limit)
                done = 0
                for s in todo:
                    o = _classify(s, n, rc, text, ended)
                    o.also = s.also
                    if o.outcome == "unfinished" and done:
                        break  # an earlier scenario of this job ended it: run the rest again
                    out.append(o)
                    done += 1
                    if progress:
                        progress(o)
                    if rc is None or o.outcome == "unfinished":
                        done = len(todo)
                        break
                todo = todo[done:]
    return out


def markdown(outcomes: list[Outcome]) -> str:
    rows = ["| scenario | ranks | outcome | time to failure (s) | detail |", "|---|---:|---|---:|---|"]
    for o in outcomes:
        flag = "" if o.as_expected else f" (expected {o.expected})"
        t = f"{o.seconds:.2f}" if o.seconds else "-"
        detail = o.detail.replace("|", "/")
        rows.append(f"| {o.scenario} | {o.n} | {o.outcome}{flag} | {t} | {detail} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m ccsynth.bench.faults", description=__doc__.split("\n\n")[0])
    p.add_argument("-n", "--ranks", default="2,4,6", help="rank counts, comma separated (default 2,4,6)")
    p.add_argument("--only", default="*", help="scenario name patterns, comma separated (default: all)")
    p.add_argument("--limit", type=float, default=120.0, help="seconds a job may run before it counts as a hang")
    p.add_argument("--markdown", metavar="FILE", help="also write the table as Markdown")
    p.add_argument("--json", metavar="FILE", help="also write every outcome as JSON")
    p.add_argument("--list", action="store_true", help="list the scenarios and exit")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        worker(args.worker.split(","))
        return 0
    if args.list:
        for s in SCENARIOS.values():
            print(f"{s.name:28s} {s.expect:15s} {s.doc}")
        return 0
    patterns = [x.strip() for x in args.only.split(",") if x.strip()]
    names = [name for name in SCENARIOS if any(fnmatch.fnmatch(name, pat) for pat in patterns)]
    if not names:
        p.error(f"no scenario matches {args.only!r}; see --list")
    ranks = [int(x) for x in args.ranks.split(",")]
    print("| scenario | ranks | outcome | time to failure (s) | detail |", flush=True)

    def show(o: Outcome) -> None:
        print(markdown([o]).splitlines()[-1], flush=True)

    t0 = time.time()
    outcomes = run_scenarios(names, ranks, args.limit, show)
    bad = [o for o in outcomes if o.outcome in ("WRONG", "HANG", "OVER", "unfinished") or not o.as_expected]
    print(f"# {len(outcomes)} runs in {time.time() - t0:.0f} s: "
          f"{sum(o.outcome == 'WRONG' for o in outcomes)} wrong answers, "
          f"{sum(o.outcome == 'HANG' for o in outcomes)} hangs, {len(bad)} not as expected", flush=True)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(markdown(outcomes) + "\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{k: v for k, v in o.__dict__.items() if k != "lines"} for o in outcomes], f, indent=1)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
