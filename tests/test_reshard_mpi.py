"""Multi-rank resharding: mpiexec runs tests/mpi_workers/reshard_worker.py (random round trips, bad input)."""

from __future__ import annotations

import os
import re
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
    # the Alltoallv plan kind (and auto, without and with a topology) on fixed and random layouts, against NumPy
    m = re.search(r"A2AV CASES (\d+)", out)
    assert m is not None and int(m.group(1)) >= 3 * (3 + (3 if k >= 4 else 2)), out[-3000:]
    assert len(re.findall(r"CASE a2av\d+ PASS", out)) == k * int(m.group(1)), out[-3000:]


@pytest.mark.parametrize("mode", ["arraylike", "staged"])
def test_array_likes_and_staged_host_stand_ins_round_trip_exactly(mode):
    # the path CuPy shards take on a library that is not CUDA-aware, with NumPy standing in for the device
    p = launch(4, mode, "7", "8")
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-3000:]
    assert "FAIL" not in out, out[-3000:]
    assert out.count("PASS") >= 8, out[-3000:]


def test_every_entry_point_taking_comm_accepts_a_ccsynth_communicator():
    # ccsynth.reshard(comm=ccsynth.Communicator(...)) raised TypeError: its Iallreduce returns a ccsynth request
    p = launch(4, "communicator", "11", "6")
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-3000:]
    assert "FAIL" not in out and "Traceback" not in out, out[-3000:]
    for name in ("comm5", "commbench", "commtune", "commphases", "commtype"):
        assert out.count(f"CASE {name} PASS") == 4, (name, out[-3000:])


def test_a_bad_shard_on_one_rank_raises_on_every_rank_without_hanging():
    p = launch(3, "bad", timeout=120)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-3000:]
    assert "CASE bad FAIL" not in out and out.count("CASE bad PASS") == 3, out[-3000:]
    assert out.count("CASE badspec PASS") == 3, out[-3000:]
    for name in ("cachedbad", "cachedearly", "cachedagain"):  # a cached alltoallv plan, errors before and after
        assert out.count(f"CASE {name} PASS") == 3, (name, out[-3000:])


BENCH = ["bench", "reshard", "--shape", "16x12x4", "--src-mesh", "2x2", "--src-spec", "S0,R,R", "--dst-mesh", "2x2",
         "--dst-spec", "R,S1,R", "-i", "2", "-x", "1"]


def test_bench_reshard_validates_every_algorithm_against_alltoallv_and_names_the_path_it_ran():
    if MPIEXEC is None:
        pytest.skip("mpiexec not found")
    p = subprocess.run([MPIEXEC, "-n", "6", sys.executable, "-m", "ccsynth", *BENCH, "-c", "--algo",
                        "naive,broadcast,milp,alltoallv,auto,mpi", "-t", "fully_connected:6"],
                       capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stdout + p.stderr
    rows = [line.split() for line in p.stdout.splitlines() if line and not line.startswith("#")]
    assert [r[0] for r in rows] == ["naive", "broadcast", "milp", "alltoallv", "auto", "mpi"], p.stdout
    assert all(r[6] == "Pass" for r in rows), p.stdout
    # every ccsynth row has a prediction (-t) and its measured/predicted ratio; the path says what ran
    for r in rows[:-1]:
        assert float(r[8]) > 0 and float(r[9]) > 0, r
    assert rows[3][-2:] == ["alltoallv", "(alltoallv)"] and rows[0][-1] == "(dataflow)", p.stdout
    assert rows[4][-2].startswith("auto->") and " ".join(rows[-1][-3:]) == "mpi (Alltoallv (bench))", p.stdout
    assert p.stdout.count("the speed of MPI Alltoallv (medians, interleaved)") == 5, p.stdout
    assert "# prediction error" in p.stdout


def test_bench_reshard_bad_spec_exits_2_on_every_rank_with_one_message():
    if MPIEXEC is None:
        pytest.skip("mpiexec not found")
    argv = [a if a != "R,S1,R" else "R,S1,S1" for a in BENCH]
    p = subprocess.run([MPIEXEC, "-n", "4", sys.executable, "-m", "ccsynth", *argv], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 2, p.stdout + p.stderr
    assert p.stderr.count("twice") == 1 and "Traceback" not in p.stderr, p.stderr
