"""Multi-rank multi-dimension collectives: ``ccsynth.Communicator(comm, topology=..., scheduler=...)`` equals MPI.

mpiexec launches tests/mpi_workers/multidim_worker.py, which compares allreduce (sum, max, avg, in place),
reduce-scatter and allgather with MPI's own on several dtypes and odd counts, checks that every rank derived
the same plans, and that one rank's bad buffer raises on every rank without a hang.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from ccsynth.collectives.mpi_util import find_mpiexec

pytestmark = pytest.mark.mpi

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mpi_workers", "multidim_worker.py")
MPIEXEC = find_mpiexec()
CASE = re.compile(r"^CASE (\S+) (PASS|FAIL) rank (\d+)(?:: (.*))?$", re.MULTILINE)


def run_worker(n: int, topology: str, *schedulers: str, timeout: int = 280) -> None:
    if MPIEXEC is None:
        pytest.skip("mpiexec not found")
    env = dict(os.environ)
    env.pop("CCSYNTH_DEBUG", None)
    try:
        p = subprocess.run([MPIEXEC, "-n", str(n), sys.executable, WORKER, topology, *schedulers], env=env,
                           capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{topology} on {n} ranks hung ({timeout} s): {(e.stdout or '')[-2000:]}")
    cases = CASE.findall(p.stdout)
    failed = [c for c in cases if c[1] == "FAIL"]
    assert not failed, "\n".join(f"{c[0]} rank {c[2]}: {c[3]}" for c in failed[:10])
    ranks = {int(c[2]) for c in cases}
    assert ranks == set(range(n)), f"ranks that reported: {sorted(ranks)}\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}"
    assert p.returncode == 0, p.stderr[-3000:]
    assert len(cases) >= 60 * n * len(schedulers)


def test_four_ranks_2x2_themis_and_lp():
    run_worker(4, "hierarchical:2x2@200,50", "themis", "lp")


def test_eight_ranks_2x2x2_themis():
    run_worker(8, "hierarchical:2x2x2@200,100,50", "themis")


def test_four_ranks_run_a_phase_plan_file(tmp_path):
    # ccsynth.Communicator(comm, plan=FILE) runs a ccsynth.phase_plan file: its allreduce plan at every count
    from ccsynth.formats.files import get_topology
    from ccsynth.formats.phase_plan_file import phase_plan_file, save_phase_plan_file
    from ccsynth.synth.multidim import schedule_multidim

    md = schedule_multidim(get_topology("hierarchical:2x2@200,50"), "allreduce", 4 << 20, "lp")
    path = tmp_path / "plan.json"
    save_phase_plan_file(phase_plan_file(md), path)
    run_worker(4, "hierarchical:2x2@200,50", f"file:{path}")


def test_eight_ranks_2x4_fixed():
    run_worker(8, "hierarchical:2x4@100,25", "fixed")
