"""``ccsynth --version``: what this ccsynth runs on, one component a line.

A bug report needs more than ccsynth's own number: the Python, mpi4py and
MPI library (its first line of ``MPI_Get_library_version``), whether that
MPI library is CUDA-aware (``MPIX_Query_cuda_support``: the MPICH wheel the
README installs is not, and handing it a device buffer crashes), CuPy,
NumPy and the MILP solvers (PuLP and HiGHS). Nothing here may fail: a
component that is absent or broken is reported as such.

Package versions come from the installed metadata (no import). The MPI
library is asked in a child Python process (:data:`PROBE`), which imports
mpi4py, initializes MPI (MPICH's ``MPIX_Query_cuda_support`` aborts the
process when called before ``MPI_Init``) and prints what it found: a broken
or absent MPI library, even one that aborts, then reads "unknown" instead of
taking ``--version`` down, and this process never initializes MPI. Where
``mpi4py.MPI`` is imported already and initialized it is asked directly.
CUDA-awareness comes from mpi4py (``MPI.Query_cuda_support`` where it
exists), else from the library's ``MPIX_Query_cuda_support`` symbol, else
"unknown".
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import importlib.util
import json
import os
import platform
import subprocess
import sys

from ccsynth import __version__

__all__ = ["version_lines", "versions", "mpi_library", "cuda_awareness"]

#: (label, distribution names to try): the first one installed is reported
PACKAGES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("mpi4py", ("mpi4py",)),
    ("numpy", ("numpy",)),
    ("PuLP", ("PuLP", "pulp")),
    ("HiGHS (highspy)", ("highspy",)),
    ("CuPy", ("cupy", "cupy-cuda12x", "cupy-cuda11x", "cupy-cuda13x", "cupy-rocm-6-0")),
)
ABSENT = "absent"


def _dist_version(names: tuple[str, ...]) -> str:
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        except Exception as e:  # noqa: BLE001 - broken metadata must not break --version
            return f"unknown ({type(e).__name__})"
    return ABSENT


def mpi_library(MPI) -> str:
    """The first line of ``MPI_Get_library_version`` of mpi4py's ``MPI`` module."""
    try:
        text = MPI.Get_library_version().strip()
    except Exception as e:  # noqa: BLE001 - never fail
        return f"unknown ({e})"
    return " ".join(text.splitlines()[0].split()) if text else "unknown"


def cuda_awareness(MPI) -> str:
    """"yes", "no" or "unknown (why)": whether the (initialized) MPI library takes CUDA device buffers."""
    query = getattr(MPI, "Query_cuda_support", None)
    if query is None:
        try:
            query = ctypes.CDLL(MPI.__file__).MPIX_Query_cuda_support
        except (AttributeError, OSError):
            return "unknown (the MPI library has no MPIX_Query_cuda_support)"
        query.restype, query.argtypes = ctypes.c_int, []
    try:
        return "yes" if query() else "no"
    except Exception as e:  # noqa: BLE001 - never fail
        return f"unknown ({e})"


#: the child process that asks the MPI library (see the module docstring)
PROBE = (
    "import json\n"
    "from mpi4py import MPI\n"
    "from ccsynth.commands._versions import cuda_awareness, mpi_library\n"
    "print(json.dumps({'library': mpi_library(MPI), 'cuda': cuda_awareness(MPI)}))\n"
)
PROBE_TIMEOUT_S = 30


def _probe_mpi() -> dict[str, str]:
    """{'library': ..., 'cuda': ...} of the MPI library behind mpi4py, never raising."""
    MPI = sys.modules.get("mpi4py.MPI")
    if MPI is not None and MPI.Is_initialized() and not MPI.Is_finalized():
        return {"library": mpi_library(MPI), "cuda": cuda_awareness(MPI)}
    if importlib.util.find_spec("mpi4py") is None:
        return {"library": ABSENT + " (no mpi4py)", "cuda": "unknown (no mpi4py)"}
    try:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}  # the child imports this ccsynth
        done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=PROBE_TIMEOUT_S,
                              env=env)
        found = json.loads(done.stdout.strip().splitlines()[-1])
        return {"library": str(found["library"]), "cuda": str(found["cuda"])}
    except Exception as e:  # noqa: BLE001 - a crash, a hang or garbage: report, never fail
        why = f"the MPI library did not start: {type(e).__name__}"
        return {"library": f"unknown ({why})", "cuda": "unknown"}


def versions() -> dict[str, str]:
    """Component -> version (or ``absent``/``unknown (why)``), in display order."""
    out = {"ccsynth": __version__, "Python": f"{platform.python_version()} ({platform.python_implementation()})"}
    for label, names in PACKAGES[:1]:
        out[label] = _dist_version(names)
    mpi = _probe_mpi()
    out["MPI library"] = mpi["library"]
    out["MPI CUDA-aware"] = mpi["cuda"]
    for label, names in PACKAGES[1:]:
        out[label] = _dist_version(names)
    return out


def version_lines() -> list[str]:
    """``--version``'s text: ``ccsynth X`` first (as tools expect), then one ``name: version`` a line."""
    v = versions()
    first = f"ccsynth {v.pop('ccsynth')}"
    width = max(len(k) for k in v) + 1
    return [first, *(f"  {k + ':':<{width}} {val}" for k, val in v.items())]
