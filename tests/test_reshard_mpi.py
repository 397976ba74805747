"""Multi-rank resharding: mpiexec runs tests/mpi_workers/reshard_worker.py (random round trips, bad input)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ccsynth.collectives.mpi_util import find_mpiexec

pytestmark = pytest.mark.mpi

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mpi_workers", "reshard_worker.py")
MPIEXEC = find_mpiexec()


def launch(k: int, *args: str, timeout: int = 240) -> subprocess.CompletedProcess:
    if MPIEXEC is None:
        pytest.skip("mpiexec not found")
    return subprocess.run([MPIEXEC, "-n", str(k), sys.executable, WORKER, *args], capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.parametrize("k", [2, 3, 4, 6, 8])
def test_random_reshardings_round_trip_exactly_on_same_overlapping_and_disjoint_meshes(k):
    p = launch(k, str(100 + k), "12")
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-3000:]
    assert "FAIL" not in out, out[-3000:]
    assert out.count("PASS") >= 12, out[-3000:]


def test_a_bad_shard_on_one_rank_raises_on_every_rank_without_hanging():
    p = launch(3, "bad", timeout=120)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-3000:]
    assert "CASE bad FAIL" not in out and out.count("CASE bad PASS") == 3, out[-3000:]
    assert out.count("CASE badspec PASS") == 3, out[-3000:]
