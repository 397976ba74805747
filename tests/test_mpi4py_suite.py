"""mpi4py's own collective tests pass with the communicator wrapped (issue 29, part 6).

The tests are mpi4py's, not ccsynth's: they are taken at test time from the source distribution of the
installed mpi4py version that the package index serves (never copied into this repository), cached under
``~/.cache/ccsynth/mpi4py-<version>/test`` (``$XDG_CACHE_HOME`` if set). One ``mpiexec`` launch per rank
count runs the chosen modules twice, plain and with every test's communicator wrapped in
``ccsynth.Communicator`` (``tests/mpi_workers/mpi4py_suite_worker.py``); every test that passes plain must
pass wrapped. Only the download may skip (no network is not ccsynth's defect), and says why.

The default modules keep each launch near 30 s on a quiet 2-core machine; ``CCSYNTH_MPI4PY_MODULES``
(comma-separated, e.g. ``test_cco_buf,test_cco_vec,test_cco_nb_buf,test_cco_nb_vec,test_cco_obj``) runs
others at every rank count, with every array kind.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import urllib.error
import urllib.request
from pathlib import Path

import mpi4py
import pytest

from ccsynth.collectives.mpi_util import find_mpiexec

pytestmark = pytest.mark.mpi

WORKER = Path(__file__).parent / "mpi_workers" / "mpi4py_suite_worker.py"
# per rank count: mpi4py's test modules run by default (test_cco_buf covers every dtype, in place, DLPack
# and __cuda_array_interface__ objects; test_cco_vec the v-collectives' spec forms; test_cco_obj pickles),
# on 4 ranks with NumPy arrays only (every other array kind repeats the same calls; 4 ranks on 2 cores
# are slow: test_cco_vec alone takes 50-75 s there, so it runs on 2 ranks only)
DEFAULT_MODULES = {2: ("test_cco_buf", "test_cco_vec", "test_cco_obj"),
                   4: ("--arrays=ArrayNumPy", "test_cco_buf", "test_cco_obj")}
# fewer passing tests than this on plain mpi4py means the run did not really happen
MIN_PASSING = 10


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ccsynth" / f"mpi4py-{mpi4py.__version__}"


def _sdist(version: str) -> dict:
    """The package index's record of mpi4py ``version``'s source distribution (url, sha256)."""
    try:
        with urllib.request.urlopen(f"https://pypi.org/pypi/mpi4py/{version}/json", timeout=30) as r:
            files = json.load(r)["urls"]
    except urllib.error.HTTPError:  # some mirrors serve only the project's record: take the version from it
        with urllib.request.urlopen("https://pypi.org/pypi/mpi4py/json", timeout=30) as r:
            files = json.load(r)["releases"].get(version, [])
    for f in files:
        if f["packagetype"] == "sdist":
            return f
    raise LookupError(f"the package index lists no source distribution of mpi4py {version}")


@pytest.fixture(scope="session")
def mpi4py_tests() -> Path:
    """The ``test/`` folder of the installed mpi4py's source distribution (downloaded once, then cached)."""
    version = mpi4py.__version__
    dest = _cache_dir()
    testdir = dest / "test"
    if (testdir / "test_cco_buf.py").is_file():
        return testdir
    try:
        record = _sdist(version)
        with urllib.request.urlopen(record["url"], timeout=120) as r:
            data = r.read()
    except (OSError, LookupError, ValueError) as e:  # URLError is an OSError
        pytest.skip(f"mpi4py {version}'s tests could not be downloaded from the package index: {e}")
    digest = record.get("digests", {}).get("sha256")
    assert digest is None or hashlib.sha256(data).hexdigest() == digest, "the sdist's sha256 differs from the index's"
    tmp = dest.with_name(dest.name + f".tmp{os.getpid()}")
    prefix = f"mpi4py-{version}/test/"
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith(prefix) and m.isfile()]
        for m in members:
            m.name = m.name[len(prefix):]
        safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}  # Python >= 3.10.12 / 3.11.4
        tar.extractall(tmp / "test", members=members, **safe)
    if dest.exists():  # another session made it meanwhile
        shutil.rmtree(tmp)
    else:
        tmp.rename(dest)
    return testdir


def _modules(n: int) -> list[str]:
    chosen = os.environ.get("CCSYNTH_MPI4PY_MODULES")
    return [m for m in chosen.split(",") if m] if chosen else list(DEFAULT_MODULES[n])


@pytest.mark.parametrize("n", [2, 4])
def test_mpi4py_collective_tests_pass_wrapped(mpi4py_tests: Path, n: int) -> None:
    """Every test of mpi4py's that passes on the plain communicator passes on ``ccsynth.Communicator``."""
    mpiexec = find_mpiexec()
    assert mpiexec, "mpiexec not found"
    modules = _modules(n)
    cmd = [mpiexec, "-n", str(n), sys.executable, str(WORKER), str(mpi4py_tests), *modules]
    try:
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=280)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"mpi4py's tests ({', '.join(modules)}) on {n} ranks hung: {str(e.stdout)[-3000:]}",
                    pytrace=False)
    lines = [ln for ln in run.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, f"no result from mpiexec -n {n} (exit {run.returncode}):\n{(run.stdout + run.stderr)[-4000:]}"
    result = json.loads(lines[-1][len("RESULT "):])
    plain, wrapped = set(result["plain"]), set(result["wrapped"])
    assert len(plain) >= MIN_PASSING, f"only {len(plain)} of mpi4py's tests passed on plain mpi4py"
    lost = sorted(plain - wrapped)
    assert not lost, (f"{len(lost)} of mpi4py's tests pass plain but fail wrapped on {n} ranks:\n"
                      + "\n".join(f"{t}: {result['failures'].get(t, '?')}" for t in lost))
