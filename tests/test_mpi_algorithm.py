"""MPI's own collective as a plan algorithm, and the fast path of repeated calls (issue 29), under mpiexec.

One launch per rank count runs the issue-29 cases of ``tests/mpi_workers/api_worker.py`` (results compared
with mpi4py's own collective); each case needs a PASS line from every rank. The launch sets
``CCSYNTH_DEFAULT_MPI=1``: the default plan as users get it (the rest of the suite keeps the schedules).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from ccsynth.collectives.mpi_util import find_mpiexec

pytestmark = pytest.mark.mpi

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mpi_workers", "api_worker.py")
CASES = ("default_plan_picks_mpi_at_small_sizes", "plan_naming_mpi_runs_mpi", "fast_path_is_never_stale")
LINE = re.compile(r"^CASE (\S+) (PASS|FAIL) rank (\d+)(?:: (.*))?$", re.MULTILINE)


@pytest.mark.parametrize("k", [2, 3])
def test_mpi_algorithm_and_fast_path(k):
    mpiexec = find_mpiexec()
    if mpiexec is None:
        pytest.skip("mpiexec not found")
    env = dict(os.environ, CCSYNTH_DEFAULT_MPI="1", OMP_NUM_THREADS="1")
    env.pop("CCSYNTH_DEBUG", None)
    p = subprocess.run([mpiexec, "-n", str(k), sys.executable, WORKER, *CASES], capture_output=True, text=True,
                       timeout=240, env=env)
    got = {(name, int(rank)): (status, note) for name, status, rank, note in LINE.findall(p.stdout)}
    for case in CASES:
        for r in range(k):
            status, note = got.get((case, r), ("missing", "no line: the job ended before it"))
            assert status == "PASS", f"{case} on rank {r} of {k}: {status} {note}\n{p.stdout[-3000:]}{p.stderr[-3000:]}"
    assert p.returncode == 0, p.stderr[-3000:]
