"""The built-in default plan and how the communicator gets it (one process, no mpiexec)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from ccsynth.collectives.plan import Plan
from ccsynth.synth.default_plan import (
    DEFAULT_TABLE,
    HALVING_BYTES,
    ONE_SHOT_BYTES,
    ONE_SHOT_MAX_RANKS,
    SMALL_BYTES,
    LazyDefaultPlan,
    baseline_chunk_factor,
    default_plan,
)


def _rows(plan, kind: str, n: int) -> list[tuple[int, int | None, str]]:
    return [(e.min_bytes, e.max_bytes, e.algorithm) for e in plan.entries if (e.kind, e.n_ranks) == (kind, n)]


def test_default_plan_follows_the_table_on_four_ranks():
    plan = default_plan(4)
    assert isinstance(plan, Plan) and plan.meta == {"default": True}
    assert {k for k, _ in plan.kinds()} == set(DEFAULT_TABLE)
    assert _rows(plan, "allreduce", 4) == [
        (0, ONE_SHOT_BYTES, "one_shot"),
        (ONE_SHOT_BYTES, HALVING_BYTES, "recursive_doubling"),
        (HALVING_BYTES, None, "recursive_halving"),
    ]
    assert _rows(plan, "allgather", 4) == [(0, SMALL_BYTES, "recursive_doubling"), (SMALL_BYTES, None, "ring")]
    assert _rows(plan, "alltoall", 4) == [(0, None, "direct")]
    # ring and Rabenseifner allreduce carry one chunk per rank
    big = plan.entry_for("allreduce", 4, 1 << 20)
    assert big.schedule.collective.chunk_factor == baseline_chunk_factor("recursive_halving", "allreduce", 4) == 4


def test_names_that_do_not_apply_give_way_to_the_next():
    n = ONE_SHOT_MAX_RANKS + 1  # too many ranks for one-shot: recursive doubling takes its row
    plan = default_plan(n, kinds=("allreduce", "all-gather"))
    assert [r[2] for r in _rows(plan, "allreduce", n)] == ["recursive_doubling", "recursive_doubling",
                                                           "recursive_halving"]
    assert [r[2] for r in _rows(plan, "allgather", n)] == ["recursive_doubling", "ring"]
    assert _rows(default_plan(3), "allreduce", 3)[0][2] == "one_shot"
    assert default_plan(1).entries == ()  # one rank: nothing to schedule


def test_lazy_plan_builds_what_is_asked_and_answers_like_the_plan():
    lazy, full = LazyDefaultPlan(), default_plan(3)
    assert lazy.kinds() == []
    for kind, nbytes in (("allreduce", 8), ("allreduce", 1 << 20), ("reduce-scatter", 100), ("broadcast", 5)):
        assert lazy.select(kind, 3, nbytes).name == full.select(kind, 3, nbytes).name
        assert lazy.entry_for(kind, 3, nbytes).algorithm == full.entry_for(kind, 3, nbytes).algorithm
    assert lazy.kinds() == [("allreduce", 3), ("broadcast", 3), ("reduce_scatter", 3)]
    assert lazy.select("allreduce", 1, 8) is None


class _Recorder:
    """A plan that covers nothing and records what it was asked."""

    def __init__(self):
        self.asked = []

    def entry_for(self, kind, n_ranks, nbytes):
        self.asked.append((kind, n_ranks, nbytes))
        return None

    def select(self, kind, n_ranks, nbytes):
        return None

    def kinds(self):
        return []


def test_the_runtime_communicator_takes_its_default_plan_as_an_argument():
    from mpi4py import MPI

    from ccsynth.collectives.communicator import NO_PLAN, Communicator

    assert Communicator(MPI.COMM_SELF).plan is NO_PLAN  # no policy of its own: MPI runs every call
    rec = _Recorder()
    c = Communicator(MPI.COMM_SELF, default_plan=rec)
    out = np.zeros(4)
    c.Allreduce(np.ones(4), out)
    assert rec.asked == [("allreduce", 1, 32)] and c.last_algorithm == "mpi" and out.tolist() == [1.0] * 4
    c.plan = default_plan(2)
    assert c.plan.meta == {"default": True}
    c.plan = None  # back to the injected default
    assert c.plan is rec


def test_public_communicator_gets_the_built_in_default_plan():
    from mpi4py import MPI

    import ccsynth
    from ccsynth.collectives.communicator import Communicator as Runtime

    c = ccsynth.Communicator(MPI.COMM_SELF)
    assert isinstance(c, Runtime) and isinstance(c.plan, LazyDefaultPlan)
    c.plan = None
    assert isinstance(c.plan, LazyDefaultPlan)
    rec = _Recorder()
    assert ccsynth.Communicator(MPI.COMM_SELF, default_plan=rec).plan is rec


@pytest.mark.parametrize("module", ["ccsynth.collectives.communicator", "ccsynth.collectives.plan"])
def test_the_runtime_never_imports_the_synthesizer(module):
    code = (f"import sys, {module}; "
            "bad = sorted(m for m in sys.modules if m.startswith(('ccsynth.synth', 'ccsynth.bench'))); "
            "print(bad); sys.exit(1 if bad else 0)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
