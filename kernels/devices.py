"""GPUs as users expect: which device a rank uses, and whether the MPI library can read device memory.

Device choice (:func:`choose_device`). Launchers start all ranks of a node
with every GPU visible, so a program that never picks one puts every rank
on GPU 0. The rule, in order:

1. ``CCSYNTH_DEVICE=<index>`` (the user's override);
2. the launcher's *local rank* (the rank's index on its node) modulo the
   number of visible devices. The local rank is read from the first of
   :data:`LOCAL_RANK_VARS` that is set: Open MPI
   (``OMPI_COMM_WORLD_LOCAL_RANK``), MPICH/Hydra and Intel MPI
   (``MPI_LOCALRANKID``), MVAPICH (``MV2_COMM_WORLD_LOCAL_RANK``), Cray PALS
   (``PALS_LOCAL_RANKID``), Slurm (``SLURM_LOCALID``), torchrun
   (``LOCAL_RANK``);
3. device 0 (one rank per node, or a launcher that sets
   ``CUDA_VISIBLE_DEVICES`` per rank: then one device is visible).

:func:`select_device` applies it with CuPy (``cupy.cuda.Device(i).use()``);
the communicator calls it when it is built if CuPy is already imported
(``device=`` overrides: an index, or False to leave the device alone), and
programs that create arrays before the communicator call
``ccsynth.select_device()`` first.

CUDA-awareness (:func:`cuda_awareness`). Handing a device pointer to an MPI
library built without CUDA support crashes (or silently reads garbage).
The answer, in order:

1. ``CCSYNTH_CUDA_AWARE=1`` or ``0`` (the documented override, e.g. for a
   library whose query lies or is missing);
2. the library's own query, looked up in the loaded MPI library:
   ``MPIX_Query_cuda_support()`` (Open MPI, MVAPICH2-GDR, MPICH >= 4) or
   ``MPIX_GPU_query_support(MPIX_GPU_SUPPORT_CUDA, &flag)`` (MPICH >= 4);
3. unknown: treated as *not* CUDA-aware (staging is safe, a crash is not).

What the communicator does with the answer is in
:mod:`ccsynth.collectives.staging`.

Example:
    >>> choose_device(4, {"OMPI_COMM_WORLD_LOCAL_RANK": "5"})
    DeviceChoice(index=1, source='OMPI_COMM_WORLD_LOCAL_RANK=5 modulo 4 devices')
    >>> choose_device(4, {"CCSYNTH_DEVICE": "2", "SLURM_LOCALID": "0"}).index
    2
    >>> cuda_awareness(env={"CCSYNTH_CUDA_AWARE": "0"})
    Awareness(aware=False, source='CCSYNTH_CUDA_AWARE=0')
"""

from __future__ import annotations

import ctypes
import importlib
import logging
import os
import sys
from dataclasses import dataclass
from typing import Any
from collections.abc import Mapping

from ccsynth.errors import CCSynthError

__all__ = [
    "LOCAL_RANK_VARS",
    "DeviceChoice",
    "Awareness",
    "local_rank",
    "choose_device",
    "select_device",
    "pick_device",
    "cuda_awareness",
]

log = logging.getLogger(__name__)

LOCAL_RANK_VARS = (
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "MPI_LOCALRANKID",
    "MV2_COMM_WORLD_LOCAL_RANK",
    "PALS_LOCAL_RANKID",
    "SLURM_LOCALID",
    "LOCAL_RANK",
)

MPIX_GPU_SUPPORT_CUDA = 0  # MPICH's enum value


@dataclass(frozen=True)
class DeviceChoice:
    """The device index a rank uses, and why."""

    index: int
    source: str


@dataclass(frozen=True)
class Awareness:
    """Whether the MPI library reads and writes device memory (None: it could not say), and how we know."""

    aware: bool | None
    source: str


def _int(env: Mapping[str, str], name: str) -> int | None:
    text = env.get(name, "").strip()
    if not text:
        return None
    try:
        value = int(text)
    except ValueError:
        raise CCSynthError(f"{name}={text!r} is not a non-negative integer") from None
    if value < 0:
        raise CCSynthError(f"{name}={text!r} is not a non-negative integer")
    return value


def local_rank(env: Mapping[str, str] | None = None) -> tuple[int, str] | None:
    """``(local rank, variable)`` from the launcher's environment, or None if no launcher said."""
    env = os.environ if env is None else env
    for name in LOCAL_RANK_VARS:
        value = _int(env, name)
        if value is not None:
            return value, name
    return None


def choose_device(n_devices: int, env: Mapping[str, str] | None = None) -> DeviceChoice:
    """The device this rank should use among ``n_devices`` visible ones (see the module doc)."""
    env = os.environ if env is None else env
    if n_devices < 1:
        raise CCSynthError("no GPU is visible to this process")
    forced = _int(env, "CCSYNTH_DEVICE")
    if forced is not None:
        if forced >= n_devices:
            raise CCSynthError(f"CCSYNTH_DEVICE={forced}, but only {n_devices} device(s) are visible")
        return DeviceChoice(forced, "CCSYNTH_DEVICE")
    lr = local_rank(env)
    if lr is not None:
        value, name = lr
        return DeviceChoice(value % n_devices, f"{name}={value} modulo {n_devices} devices")
    return DeviceChoice(0, "no local rank in the environment")


def select_device(device: int | None = None, env: Mapping[str, str] | None = None) -> DeviceChoice:
    """Make this rank's device current in CuPy (``device``: that index instead of :func:`choose_device`'s)."""
    try:
        cp = importlib.import_module("cupy")
    except ImportError:
        raise CCSynthError("select_device needs CuPy (pip install cupy-cuda12x)") from None
    n = cp.cuda.runtime.getDeviceCount()
    choice = DeviceChoice(int(device), "device=") if device is not None else choose_device(n, env)
    if not 0 <= choice.index < n:
        raise CCSynthError(f"device {choice.index} does not exist ({n} visible)")
    cp.cuda.Device(choice.index).use()
    return choice


def pick_device(device: Any = "auto", rank: int | None = None) -> int | None:
    """A communicator's ``device=``: the index of the GPU it works on, or None (no GPU, or leave it).

    ``"auto"``: only if CuPy is already imported (in use) -- the current
    device when the program already moved off device 0, else
    :func:`select_device`'s choice; an index: that device; False or None:
    leave the device alone. ``rank`` names the rank in the log line.
    """
    if device is False or device is None:
        return None
    if device == "auto":
        cp = sys.modules.get("cupy")
        if cp is None:
            return None
        try:
            if cp.cuda.runtime.getDeviceCount() < 1 or cp.cuda.Device().id != 0:
                return cp.cuda.Device().id if cp.cuda.runtime.getDeviceCount() else None
        except Exception:  # no driver, no device: a host-only program that imported CuPy
            return None
        device = None
    choice = select_device(device)
    log.info("rank %s uses GPU %d (%s)", "?" if rank is None else rank, choice.index, choice.source)
    return choice.index


def _library(mpi: Any):
    """The loaded MPI library (through mpi4py's extension module, whose dependencies dlsym searches)."""
    path = getattr(mpi, "__file__", None)
    if not path:
        return None
    try:
        return ctypes.CDLL(path)
    except OSError:
        return None


def cuda_awareness(mpi: Any = None, env: Mapping[str, str] | None = None, lib: Any = None) -> Awareness:
    """Whether the MPI library is CUDA-aware (see the module doc); ``lib`` replaces the loaded library (tests)."""
    env = os.environ if env is None else env
    text = env.get("CCSYNTH_CUDA_AWARE", "").strip().lower()
    if text:
        if text in ("1", "yes", "true", "on"):
            return Awareness(True, f"CCSYNTH_CUDA_AWARE={text}")
        if text in ("0", "no", "false", "off"):
            return Awareness(False, f"CCSYNTH_CUDA_AWARE={text}")
        raise CCSynthError(f"CCSYNTH_CUDA_AWARE={text!r}: use 1 (the MPI library is CUDA-aware) or 0")
    if lib is None and mpi is not None:
        lib = _library(mpi)
    if lib is None:
        return Awareness(None, "the MPI library could not be inspected")
    query = getattr(lib, "MPIX_Query_cuda_support", None)
    if query is not None:
        return Awareness(bool(query()), "MPIX_Query_cuda_support()")
    gpu_query = getattr(lib, "MPIX_GPU_query_support", None)
    if gpu_query is not None:
        flag = ctypes.c_int(0)
        if gpu_query(MPIX_GPU_SUPPORT_CUDA, ctypes.byref(flag)) == 0:
            return Awareness(bool(flag.value), "MPIX_GPU_query_support(CUDA)")
    return Awareness(None, "the MPI library has no CUDA-support query")
