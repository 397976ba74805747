"""Solver choice and options for every MILP/LP of the synthesizer.

The models (routing, contiguity, alltoall) are plain PuLP problems built
with indexed variable dicts and named constraints; none of them names a
solver or a solver parameter. They call :func:`solve` with a
:class:`SolverOptions`, which picks the backend and applies the limits:

* ``solver``: ``"highs"`` (default: HiGHS through ``highspy``, in process,
  no files), ``"cbc"`` (PuLP's bundled CBC, run in a private temporary
  folder that is removed afterwards), or ``"auto"`` (HiGHS, else CBC);
* ``time_limit``: seconds per model (None: no limit);
* ``gap``: relative MIP gap at which to stop (None: the solver's default);
* ``threads``: solver threads (None: the solver's default);
* ``msg``: show the solver's own log.

Results are deterministic for the same model and options as long as no time
limit cuts a solve short (both solvers are run with their fixed default
seeds). A solve that hits its time limit with an incumbent returns it with
``timed_out=True``; the caller logs a warning. One without an incumbent
raises :class:`~ccsynth.errors.InfeasibleError`.

Example:
    >>> import pulp
    >>> prob = pulp.LpProblem("tiny", pulp.LpMinimize)
    >>> x = prob.add_variable("x", lowBound=0, cat="Integer")
    >>> prob += x
    >>> prob += (x >= 1.5, "at_least")
    >>> solve(prob, SolverOptions(), stage="demo").objective
    2.0
"""

from __future__ import annotations

import logging
import math
import os
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, replace

import pulp

from ccsynth.errors import InfeasibleError, SolverError
from ccsynth.limits import check as check_limit
from ccsynth.tolerance import EVENT_REL, is_close

__all__ = ["SOLVERS", "SolverOptions", "SolveResult", "available_solvers", "resolve_solver", "solve", "value", "silence_highs_banner"]

log = logging.getLogger(__name__)

SOLVERS = ("highs", "cbc", "auto")


@dataclass(frozen=True)
class SolverOptions:
    """How to run the MILP solver; never part of a model.

    >>> SolverOptions(solver="cbc", time_limit=30).time_limit
    30.0
    """

    solver: str = "highs"
    time_limit: float | None = None
    gap: float | None = None
    threads: int | None = None
    msg: bool = False

    def __post_init__(self) -> None:
        name = str(self.solver).strip().lower()
        if name not in SOLVERS:
            raise SolverError(f"unknown solver {self.solver!r}; choose one of: {', '.join(SOLVERS)}")
        object.__setattr__(self, "solver", name)
        if self.time_limit is not None:
            t = float(self.time_limit)
            if not math.isfinite(t) or t <= 0:
                raise SolverError(f"time limit must be a positive number of seconds, got {self.time_limit!r}")
            object.__setattr__(self, "time_limit", t)
        if self.gap is not None:
            g = float(self.gap)
            if not math.isfinite(g) or g < 0 or g >= 1:
                raise SolverError(f"MIP gap must be a fraction in [0, 1), got {self.gap!r}")
            object.__setattr__(self, "gap", g)
        if self.threads is not None:
            if isinstance(self.threads, bool) or not isinstance(self.threads, int) or self.threads < 1:
                raise SolverError(f"threads must be a positive integer, got {self.threads!r}")
            check_limit("solver threads", self.threads, "MAX_SOLVER_THREADS", SolverError)

    def with_time_limit(self, seconds: float | None) -> SolverOptions:
        return replace(self, time_limit=seconds)

    def to_dict(self) -> dict:
        return {"solver": self.solver, "time_limit": self.time_limit, "gap": self.gap, "threads": self.threads}


@dataclass(frozen=True)
class SolveResult:
    """What one solve produced (the variable values live in the PuLP problem)."""

    stage: str
    solver: str
    status: str  # "optimal" | "feasible" (time limit or gap reached with an incumbent)
    objective: float
    bound: float | None  # best proven bound (HiGHS MIP only)
    seconds: float
    timed_out: bool
    n_vars: int
    n_constraints: int

    @property
    def gap(self) -> float | None:
        if self.bound is None or not math.isfinite(self.bound):
            return None
        if is_close(self.objective, 0.0, EVENT_REL):
            return 0.0
        return max(0.0, (self.objective - self.bound) / abs(self.objective))

    def describe(self) -> str:
        b = "" if self.bound is None else f", bound {self.bound:.6g}"
        t = " (time limit)" if self.timed_out else ""
        return (f"{self.stage}: {self.solver} {self.status}{t}, objective {self.objective:.6g}{b}, "
                f"{self.n_vars} vars, {self.n_constraints} constraints, {self.seconds:.2f}s")


def available_solvers() -> list[str]:
    """The backends that can run here, in preference order (``["highs", "cbc"]``)."""
    names = set(pulp.listSolvers(onlyAvailable=True))
    out = []
    if "HiGHS" in names:
        out.append("highs")
    if "PULP_CBC_CMD" in names:
        out.append("cbc")
    return out


def resolve_solver(name: str) -> str:
    """The backend to use for ``name``; raises :class:`SolverError` if it is missing."""
    have = available_solvers()
    if name == "auto":
        if not have:
            raise SolverError("no MILP solver available: install highspy (pip install highspy) or PuLP's CBC")
        return have[0]
    if name not in have:
        hint = {"highs": "pip install highspy", "cbc": "reinstall pulp, which bundles CBC"}[name]
        other = f"; available: {', '.join(have)} (use --solver {have[0]})" if have else ""
        raise SolverError(f"solver {name!r} is not installed ({hint}){other}")
    return name


def solve(prob: pulp.LpProblem, options: SolverOptions, stage: str, *, time_limit: float | None = None,
          warm_start: dict | None = None, quiet_timeout: bool = False) -> SolveResult:
    """Solve ``prob`` in place with ``options``; raise if no solution is found.

    ``time_limit`` (seconds), when given, caps this solve below the
    options' own limit (the pipeline shares one budget between stages).
    ``warm_start`` maps variables to a feasible solution that the solver
    starts from (its incumbent), so a time-limited solve is never worse.
    ``quiet_timeout`` reports a time-out with an incumbent at INFO level
    rather than as a warning (for time budgets the user did not set).

    Raises :class:`SolverError` when the solver is missing or fails, and
    :class:`InfeasibleError` when the model is infeasible or the time limit
    passes before any solution is found.
    """
    backend = resolve_solver(options.solver)
    limit = options.time_limit
    if time_limit is not None:
        limit = time_limit if limit is None else min(limit, time_limit)
        limit = max(limit, 0.5)
    n_vars = len(prob.variables())
    n_cons = prob.numConstraints()
    t0 = time.perf_counter()
    bound = None
    timed_out = False
    if backend == "highs":
        if not options.msg:
            silence_highs_banner()
        solver = _HiGHSWarm(msg=options.msg, timeLimit=limit, gapRel=options.gap, threads=options.threads)
        solver.warm = warm_start
        try:
            status = prob.solve(solver)
        except pulp.PulpSolverError as e:  # pragma: no cover - depends on the solver build
            raise SolverError(f"{stage}: HiGHS failed: {e}") from None
        model = getattr(prob, "solverModel", None)
        if model is not None:
            import highspy

            ms = model.getModelStatus()
            timed_out = ms in (highspy.HighsModelStatus.kTimeLimit, highspy.HighsModelStatus.kIterationLimit)
            info = model.getInfo()
            has_int = any(v.cat == pulp.LpInteger for v in prob.variables())
            if has_int:
                b = getattr(info, "mip_dual_bound", None)
                if b is not None and math.isfinite(b):
                    bound = float(b) if prob.sense == pulp.LpMinimize else -float(b)
            if ms == highspy.HighsModelStatus.kInfeasible:
                raise InfeasibleError(f"{stage}: the model is infeasible")
            if int(info.primal_solution_status) != 2:  # 2 = feasible
                if timed_out:
                    raise InfeasibleError(f"{stage}: no solution found within the time limit of {limit:g}s")
                raise InfeasibleError(f"{stage}: HiGHS found no solution (status {model.modelStatusToString(ms)})")
            # release the native model: the values are copied into the PuLP variables
            prob.solverModel = None
    else:
        with tempfile.TemporaryDirectory(prefix="ccsynth-cbc-") as tmp:
            if warm_start:
                for var, val in warm_start.items():
                    var.setInitialValue(val)
            with warnings.catch_warnings():
                # PuLP 3.3 marks its bundled CBC driver deprecated (for 4.0); it is the one that ships a binary
                warnings.simplefilter("ignore", DeprecationWarning)
                solver = pulp.PULP_CBC_CMD(msg=options.msg, timeLimit=limit, gapRel=options.gap,
                                           threads=options.threads, keepFiles=False, warmStart=bool(warm_start))
            solver.tmpDir = tmp
            try:
                status = prob.solve(solver)
            except pulp.PulpSolverError as e:
                raise SolverError(f"{stage}: CBC failed: {e}") from None
        elapsed_now = time.perf_counter() - t0
        sol = prob.sol_status
        if status == pulp.LpStatusInfeasible:
            raise InfeasibleError(f"{stage}: the model is infeasible")
        if sol not in (pulp.LpSolutionOptimal, pulp.LpSolutionIntegerFeasible):
            if limit is not None and elapsed_now >= limit * 0.95:
                raise InfeasibleError(f"{stage}: no solution found within the time limit of {limit:g}s")
            raise InfeasibleError(f"{stage}: CBC found no solution (status {pulp.LpStatus.get(status, status)})")
        timed_out = sol == pulp.LpSolutionIntegerFeasible and limit is not None and elapsed_now >= limit * 0.95
    elapsed = time.perf_counter() - t0
    obj = pulp.value(prob.objective)
    obj = float(obj) if obj is not None else 0.0
    result = SolveResult(
        stage=stage,
        solver=backend,
        status="feasible" if timed_out else "optimal",
        objective=obj,
        bound=bound,
        seconds=elapsed,
        timed_out=timed_out,
        n_vars=n_vars,
        n_constraints=n_cons,
    )
    if timed_out:
        (log.info if quiet_timeout else log.warning)(
            "%s: time limit reached; using the best solution found (objective %.6g%s)", stage, obj,
            "" if bound is None else f", bound {bound:.6g}")
    log.info("%s", result.describe())
    return result


class _HiGHSWarm(pulp.HiGHS):
    """PuLP's in-process HiGHS driver, plus a MIP start from ``self.warm`` (variable -> value)."""

    warm: dict | None = None

    def callSolver(self, lp):  # noqa: N802 - PuLP's API
        if self.warm:
            import highspy

            cols = [0.0] * len(lp.variables())
            for var in lp.variables():
                cols[var.index] = float(self.warm.get(var, var.lowBound or 0.0))
            sol = highspy.HighsSolution()
            sol.col_value = cols
            sol.value_valid = True
            lp.solverModel.setSolution(sol)
        super().callSolver(lp)


_BANNER_DONE = False


def silence_highs_banner() -> None:
    """Create the process's first ``highspy.Highs`` with stdout closed.

    HiGHS prints a copyright banner to the C-level stdout when the first
    instance is created, before any option can switch output off; that
    would corrupt ``--json`` output of the CLI.
    """
    global _BANNER_DONE
    if _BANNER_DONE:
        return
    _BANNER_DONE = True
    import highspy

    try:
        sys.stdout.flush()
        fd = sys.stdout.fileno() if hasattr(sys.stdout, "fileno") else 1
    except (OSError, ValueError):  # stdout replaced by a non-file (pytest capture, notebooks)
        fd = 1
    try:
        saved = os.dup(fd)
    except OSError:
        highspy.Highs()
        return
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), fd)
            try:
                highspy.Highs()
            finally:
                os.dup2(saved, fd)
    finally:
        os.close(saved)


def value(var) -> float:
    """The solution value of a PuLP variable or expression (0 when unset)."""
    v = pulp.value(var)
    return 0.0 if v is None else float(v)

