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


def test_default_plan_steps_aside_for_mpi_where_mpi_wins(monkeypatch):
    """MPI's own collective is a row ("mpi", no schedule) below MPI_BELOW; CCSYNTH_DEFAULT_MPI=0 keeps schedules."""
    from ccsynth.collectives.plan import MPI_ALGORITHM, PlanEntry
    from ccsynth.errors import PlanError
    from ccsynth.formats.msccl.export import plan_to_msccl_xmls
    from ccsynth.synth.default_plan import MPI_BELOW, LazyDefaultPlan, default_entries

    two = [(e.min_bytes, e.max_bytes, e.algorithm) for e in default_entries("allreduce", 2, mpi=True)]
    assert two == [(0, MPI_BELOW["allreduce"][2], "mpi"), (8192, 131072, "recursive_doubling"),
                   (131072, None, "recursive_halving")]
    four = default_entries("allreduce", 4, mpi=True)
    assert [(e.min_bytes, e.algorithm) for e in four] == [(0, "mpi"), (MPI_BELOW["allreduce"][0], "recursive_halving")]
    assert [e.algorithm for e in default_entries("allgather", 4, mpi=True)] == [MPI_ALGORITHM]
    assert all(e.is_mpi == (e.schedule is None) for e in four)
    monkeypatch.setenv("CCSYNTH_DEFAULT_MPI", "1")
    assert LazyDefaultPlan().entry_for("allgather", 3, 1 << 20).is_mpi
    assert LazyDefaultPlan().select("allgather", 3, 1 << 20) is None  # no schedule: the communicator runs MPI's
    monkeypatch.setenv("CCSYNTH_DEFAULT_MPI", "0")
    assert LazyDefaultPlan().select("allgather", 3, 1 << 20).name == "ring"
    # the plan format: an "mpi" row has no schedule, and only it; it round-trips and exports no MSCCL file
    ring = default_entries("allgather", 4, mpi=False)[-1].schedule
    with pytest.raises(PlanError, match="needs no schedule"):
        PlanEntry("allgather", 4, 0, None, ring, algorithm="mpi")
    with pytest.raises(PlanError, match="needs a schedule"):
        PlanEntry("allgather", 4, 0, None, None, algorithm="ring")
    plan = Plan((PlanEntry("allgather", 4, 0, 1024, None), PlanEntry("allgather", 4, 1024, None, ring)))
    back = Plan.from_dict(plan.to_dict())
    assert "schedule" not in plan.to_dict()["entries"][0] and back.entries[0].is_mpi and back == plan
    assert [f for f, _ in plan_to_msccl_xmls(back)] == [f"allgather_4_{ring.name}_1024-inf.xml"]
