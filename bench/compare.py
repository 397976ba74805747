"""The plan against the default plan, measured in interleaved rounds (issue 10).

One pass of ``ccsynth bench --interleave`` over a dozen algorithms gives
one median per algorithm and size; the ratio of two of them moves by 5-30%
from run to run on the shared 2-core machine (docs/results.md:
two quiet runs: the same schedule measured 0.9-1.1x of itself), so "plan <=
default" at a size where both run the same schedule is a coin toss, and a
single pass cannot tell a loss from noise. This module measures the one
comparison the issue's target names, and measures its noise with it:

* **three cases**, each through ccsynth's drop-in communicator (the path a
  program calling the plan takes): the plan, the default plan, and the
  default plan again on a second communicator (the *control*: the same
  schedule against itself, whose ratio to the default is pure noise);
* **interleaved iterations**: each iteration runs the three in turn, a
  barrier before each, as OMB times collectives and ``--interleave`` does;
  per case the median over the round's iterations of the slowest rank's
  time (:func:`ccsynth.bench.omb.slowest_rank_median`);
* **rounds**: :data:`ROUNDS` passes over every size, the order of the three
  cases rotated each round (a case's place in the iteration -- right after
  a barrier, after another collective -- moved run E's same-schedule ratios
  by 3-9%), the rounds spread over the whole run so that a burst of load
  hits one round, not the verdict; per size the round ratios plan/default
  and control/default, their median and spread.

**The criterion** (:func:`verdict`), per size, on the round ratios: the
*noise* is twice the standard error of a median of ``R`` rounds,
``1.2533 * 1.4826 * MAD / sqrt(R)`` (MAD: the median absolute deviation of
the logarithms over rounds, the larger of the plan's and the control's --
robust to a round hit by a burst of load), at least :data:`NOISE_FLOOR`.
The plan is *slower* when the median of its round ratios exceeds
``1 + noise``, or when every one of its round ratios is above every control
round (slower than the same schedule against itself in all rounds: by
chance with probability ``1 / C(2R, R)``, 1/924 at 6 rounds) and its median
ratio exceeds ``1 + NOISE_FLOOR``; *faster* symmetrically; else a *tie*,
or *unresolved* where the noise exceeds :data:`MAX_NOISE` (a band that
wide says nothing: on the loaded 2-core machine the rounds of a 1-8 MiB
call swing by a scheduler time slice). "At least as fast" counts the faster
and the ties only: a plan slower beyond the noise is counted slower,
whatever algorithm it runs, and an unresolved size is not counted a success. Where plan and default
run the same schedule (the same ops, through the same communicator) the
comparison says so (``same_schedule``).

Run under mpiexec (rank 0 prints and writes)::

    mpiexec -n 2 python -m ccsynth.bench.compare plan.json -c allreduce -m 8:16M --json cmp.json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ccsynth.bench import omb
from ccsynth.bench.algos import PlanAlgorithm
from ccsynth.errors import CCSynthError

__all__ = ["ROUNDS", "ITERS_SMALL", "ITERS_LARGE", "NOISE_FLOOR", "MAX_NOISE", "SCHEMA", "Comparison", "verdict", "noise_of",
           "measure_rounds", "share", "to_dict", "from_dict", "lines", "main"]

SCHEMA = "ccsynth.compare/1"
#: rounds per size (a multiple of 6: each of the three cases takes each place in the iteration, and follows each
#: of the others, equally often)
ROUNDS = 6
#: timed iterations per round, up to and above OMB's LARGE_MESSAGE (8 KiB); one warm-up iteration in 10
ITERS_SMALL, ITERS_LARGE = 40, 16
#: the smallest noise a comparison allows for (a same-schedule ratio is never known better than 2%)
NOISE_FLOOR = 0.02
#: a noise band wider than this decides nothing: neither slower nor faster beyond it is *unresolved*, not a tie
MAX_NOISE = 0.25
#: the standard error of a median of normal samples is 1.2533 sigma / sqrt(R); sigma is 1.4826 MAD
_SE_MEDIAN, _MAD_SIGMA, _Z = 1.2533, 1.4826, 2.0

PLAN, DEFAULT, CONTROL = "plan", "default", "control"
CASES = (PLAN, DEFAULT, CONTROL)


@dataclass(frozen=True)
class Comparison:
    """One size: per round the median over iterations of the slowest rank's time (us) of each case."""

    size: int  # the benchmark's size (OMB: allgather per rank)
    plan_us: tuple[float, ...]
    default_us: tuple[float, ...]
    control_us: tuple[float, ...]
    plan_algorithm: str = ""
    default_algorithm: str = ""
    same_schedule: bool = False  # plan and default run the same ops through the same communicator path

    @property
    def ratios(self) -> tuple[float, ...]:
        return tuple(p / d for p, d in zip(self.plan_us, self.default_us))

    @property
    def control_ratios(self) -> tuple[float, ...]:
        return tuple(c / d for c, d in zip(self.control_us, self.default_us))

    @property
    def ratio(self) -> float:
        """Median over rounds of plan / default."""
        return float(np.median(self.ratios))

    @property
    def noise(self) -> float:
        return noise_of(self.ratios, self.control_ratios)

    @property
    def verdict(self) -> str:
        return verdict(self.ratios, self.control_ratios)


def noise_of(ratios: Sequence[float], control_ratios: Sequence[float] = ()) -> float:
    """Twice the standard error of a median of ``len(ratios)`` rounds (relative), from the median absolute
    deviation of the logarithms over rounds -- the larger of the plan's ``ratios`` and the control's (the same
    schedule against itself) --, at least :data:`NOISE_FLOOR`."""
    mads = [float(np.median(np.abs(x - np.median(x)))) for x in (np.log(ratios), np.log(control_ratios)) if len(x)]
    se = _SE_MEDIAN * _MAD_SIGMA * max(mads, default=0.0) / np.sqrt(max(len(ratios), 1))
    return max(NOISE_FLOOR, float(np.expm1(_Z * se)))


def verdict(ratios: Sequence[float], control_ratios: Sequence[float]) -> str:
    """``"faster"``, ``"tie"``, ``"slower"`` or ``"unresolved"``: the plan's round ratios to the default against
    the noise measured at the same size (see the module docstring for the rule)."""
    if not len(ratios):
        raise CCSynthError("no rounds to judge")
    r = float(np.median(ratios))
    tol = noise_of(ratios, control_ratios)
    above = bool(len(control_ratios)) and min(ratios) > max(control_ratios)
    below = bool(len(control_ratios)) and max(ratios) < min(control_ratios)
    if r > 1.0 + tol or (above and r > 1.0 + NOISE_FLOOR):
        return "slower"
    if r < 1.0 - tol or (below and r < 1.0 - NOISE_FLOOR):
        return "faster"
    return "unresolved" if tol > MAX_NOISE else "tie"


def share(rows: Sequence[Comparison]) -> dict[str, float]:
    """Shares of sizes: at least as fast (faster or tie), faster, slower, unresolved, at least as fast or unresolved
    where plan and default run the same schedule (``or_same_schedule``), and plan <= default by the median ratio
    alone (the strict count, noise ignored)."""
    n = len(rows) or 1
    verdicts = [c.verdict for c in rows]
    return {"at_least_as_fast": sum(v in ("faster", "tie") for v in verdicts) / n,
            "faster": verdicts.count("faster") / n, "slower": verdicts.count("slower") / n,
            "unresolved": verdicts.count("unresolved") / n,
            "or_same_schedule": sum(v in ("faster", "tie") or (v == "unresolved" and c.same_schedule)
                                    for v, c in zip(verdicts, rows)) / n,
            "strict": sum(c.ratio <= 1.0 for c in rows) / n}


def _iterations(size: int, iters: int | None) -> tuple[int, int]:
    n = iters if iters is not None else (ITERS_LARGE if size > omb.LARGE_MESSAGE else ITERS_SMALL)
    return n, max(1, n // 10)


def _name(case: omb.Case) -> str:
    return str(case.algorithm() if callable(case.algorithm) else case.algorithm)


def _same_schedule(plan: PlanAlgorithm, default: PlanAlgorithm, kind: str, ctx, nbytes: int) -> bool:
    a, b = plan.schedule_for(kind, ctx, nbytes), default.schedule_for(kind, ctx, nbytes)
    return a is not None and b is not None and a.collective == b.collective and list(a.ops) == list(b.ops)


def _orders(rounds: int) -> list[tuple[str, ...]]:
    """The order of the three cases in each round: rotated, then reversed and rotated (period 6)."""
    out = []
    for k in range(rounds):
        order = CASES[k % 3:] + CASES[:k % 3]
        out.append(order[::-1] if k % 6 >= 3 else order)
    return out


def measure_rounds(comm, kind: str, plan_path: str, sizes: Sequence[int], *, rounds: int = ROUNDS,
                   iters: int | None = None, buffer: str = "numpy", dtype: str = "float32") -> list[Comparison]:
    """Measure ``plan_path`` against the default plan (and the control) at ``sizes`` (the benchmark's sizes) in
    ``rounds`` interleaved rounds on ``comm``; every rank calls it alike and gets the same result. Each case's
    result is checked once per size (first round) against the expected output: a wrong result is an error."""
    if rounds < 1:
        raise CCSynthError(f"--rounds must be at least 1, got {rounds}")
    bench = next((b for b in omb.BENCHMARKS.values() if b.kind == kind and not b.pt2pt), None)
    if bench is None:
        raise CCSynthError(f"no benchmark measures {kind!r}")
    ctx = omb.Context(comm, omb.Options(sizes=tuple(sizes), buffer=buffer, dtype=dtype))
    algos = {PLAN: PlanAlgorithm(PLAN, plan_path), DEFAULT: PlanAlgorithm(DEFAULT, None),
             CONTROL: PlanAlgorithm(CONTROL, None)}
    for a in algos.values():
        a.setup(kind, ctx)
    times: dict[int, dict[str, list[float]]] = {s: {c: [] for c in CASES} for s in sizes}
    names: dict[int, tuple[str, str, bool]] = {}
    for k, order in enumerate(_orders(rounds)):
        for size in sizes:  # a round is a pass over every size: rounds spread over the whole run
            cases = {c: omb.prepare(bench, ctx, algos[c], size) for c in order}
            if k == 0:
                for c, case in cases.items():
                    omb.fresh_run(ctx, case)
                    ok = case.check() if case.check is not None else True
                    if not all(comm.allgather(bool(ok))):
                        raise CCSynthError(f"the {c} computed a wrong {kind} at {size} B")
                names[size] = (_name(cases[PLAN]), _name(cases[DEFAULT]),
                               _same_schedule(algos[PLAN], algos[DEFAULT], kind, ctx, cases[PLAN].nbytes))
            n_iters, warmup = _iterations(size, iters)
            local = omb.measure(comm, [cases[c] for c in order], n_iters, warmup)
            per_rank = comm.allgather(local)
            for i, c in enumerate(order):
                times[size][c].append(omb.slowest_rank_median([r[i] for r in per_rank]))
            del cases  # this size's buffers, before the next size allocates its own
    return [Comparison(s, tuple(times[s][PLAN]), tuple(times[s][DEFAULT]), tuple(times[s][CONTROL]), *names[s])
            for s in sizes]


def to_dict(rows: Sequence[Comparison], meta: dict | None = None) -> dict:
    """A JSON document (``"schema": "ccsynth.compare/1"``): every round's times and each size's verdict."""
    return {"schema": SCHEMA, **(meta or {}), "noise_floor": NOISE_FLOOR, "share": share(rows),
            "rows": [{"size_bytes": c.size, "plan_us": list(c.plan_us), "default_us": list(c.default_us),
                      "control_us": list(c.control_us), "plan_algorithm": c.plan_algorithm,
                      "default_algorithm": c.default_algorithm, "same_schedule": c.same_schedule,
                      "ratio": c.ratio, "noise": c.noise, "verdict": c.verdict} for c in rows]}


def from_dict(doc: dict) -> list[Comparison]:
    """The comparisons of a :func:`to_dict` document (verdicts recomputed from the saved rounds)."""
    if doc.get("schema") != SCHEMA:
        raise CCSynthError(f"not a {SCHEMA} document (schema {doc.get('schema')!r})")
    return [Comparison(r["size_bytes"], tuple(r["plan_us"]), tuple(r["default_us"]), tuple(r["control_us"]),
                       r.get("plan_algorithm", ""), r.get("default_algorithm", ""), bool(r.get("same_schedule")))
            for r in doc["rows"]]


def lines(rows: Sequence[Comparison]) -> list[str]:
    """The comparison as a Markdown table: per size the median ratio, its spread over rounds, the noise, the
    verdict, and what each side ran."""
    out = ["| size | plan (us) | default (us) | plan / default (median of rounds) | rounds min-max | control "
           "min-max | noise | verdict | plan runs | default runs |",
           "|---:|---:|---:|---:|---|---|---:|---|---|---|"]
    for c in rows:
        rs, cs = c.ratios, c.control_ratios
        runs = "the same schedule" if c.same_schedule else c.default_algorithm
        out.append(f"| {c.size} | {np.median(c.plan_us):.1f} | {np.median(c.default_us):.1f} | {c.ratio:.3f} | "
                   f"{min(rs):.2f}-{max(rs):.2f} | {min(cs):.2f}-{max(cs):.2f} | {100 * c.noise:.1f}% | {c.verdict} | "
                   f"{c.plan_algorithm} | {runs} |")
    return out


def main(argv=None) -> int:
    from ccsynth.units import parse_sizes

    p = argparse.ArgumentParser(prog="python -m ccsynth.bench.compare", description=__doc__.split("\n\n")[0])
    p.add_argument("plan", help="plan file (ccsynth synth --sizes, ccsynth tune)")
    p.add_argument("-c", "--collective", required=True, help="allreduce, allgather, ...")
    p.add_argument("-m", "--sizes", default="8:16M", help="benchmark sizes, e.g. 8:16M (OMB's: allgather's per rank)")
    p.add_argument("--rounds", type=int, default=ROUNDS, help=f"rounds per size (default {ROUNDS})")
    p.add_argument("-i", "--iterations", type=int, default=None,
                   help=f"timed iterations per round (default {ITERS_SMALL}, above 8 KiB {ITERS_LARGE})")
    p.add_argument("--json", metavar="FILE", help="write every round's times and the verdicts here")
    args = p.parse_args(argv)
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    try:
        sizes = sorted(set(parse_sizes(args.sizes)))
        rows = measure_rounds(comm, args.collective, args.plan, sizes, rounds=args.rounds, iters=args.iterations)
    except CCSynthError as e:
        if comm.Get_rank() == 0:
            print(f"error: {e}", file=sys.stderr)
        return 2
    if comm.Get_rank() == 0:
        doc = to_dict(rows, {"collective": args.collective, "n_ranks": comm.Get_size(), "plan": args.plan,
                             "rounds": args.rounds})
        if args.json:
            with open(args.json, "w") as f:
                f.write(json.dumps(doc, indent=1) + "\n")
        s = doc["share"]
        print("\n".join(lines(rows)))
        print(f"# plan at least as fast as the default (faster, or within the noise) at {100 * s['at_least_as_fast']:.0f}% "
              f"of {len(rows)} sizes; faster {100 * s['faster']:.0f}%, slower {100 * s['slower']:.0f}%, unresolved "
              f"(noise above {100 * MAX_NOISE:.0f}%) {100 * s['unresolved']:.0f}%; "
              f"median ratio <= 1 at {100 * s['strict']:.0f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
