"""Array-likes as buffers: any object that exposes its memory, as a NumPy or CuPy array, without a copy.

The communicator's collectives take what Python programs hold:

================================  ==========================================================
object                            becomes
================================  ==========================================================
``numpy.ndarray``                 itself
CuPy array                        itself
``__cuda_array_interface__``      a CuPy array on the same device memory (torch CUDA tensors,
  (torch, Numba, JAX on GPU)      Numba device arrays): ``cupy.asarray``, no copy
``__dlpack__``                    ``numpy.from_dlpack`` for host memory (torch CPU tensors,
                                  JAX CPU arrays), ``cupy.from_dlpack`` for CUDA memory
``bytearray``, ``memoryview``,    ``numpy.asarray(memoryview(obj))`` (bytes: read-only, so
  ``array.array``, buffers        only as a send buffer)
``__array_interface__``           ``numpy.asarray(obj)`` (shares the memory)
``__array__``                     ``numpy.asarray(obj)``: shares memory when the object's
                                  ``__array__`` returns a view (as pandas, xarray and torch
                                  CPU tensors do); a receive buffer whose ``__array__`` makes
                                  a copy is refused, since results written there would be lost
================================  ==========================================================

The order matters: a torch CPU tensor has both ``__dlpack__`` and
``__array__``; DLPack is taken first because it never copies. Nothing here
imports CuPy unless a device object arrives (it is optional).

:func:`as_array` returns the array or None (not a buffer at all: the
caller hands it to the MPI library as it is, which will say what is wrong).

Example:
    >>> buf = bytearray(8)
    >>> a = as_array(buf)
    >>> a.dtype.name, a.size, a.flags.writeable
    ('uint8', 8, True)
    >>> a[0] = 7; buf[0]
    7
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

import numpy as np

from ccsynth.errors import BufferMismatchError, CCSynthError

__all__ = ["DLPACK_CPU", "DLPACK_CUDA", "DLPACK_CUDA_HOST", "DLPACK_CUDA_MANAGED", "as_array", "shares_memory_with"]

# DLPack device types (dlpack.h DLDeviceType)
DLPACK_CPU = 1
DLPACK_CUDA = 2
DLPACK_CUDA_HOST = 3
DLPACK_CUDA_MANAGED = 13


def _cupy():
    try:
        return importlib.import_module("cupy")
    except ImportError:
        raise CCSynthError(
            "a GPU buffer was passed, but CuPy is not installed: pip install cupy-cuda12x (or the wheel for your CUDA)"
        ) from None


def as_array(obj: Any, *, writable: bool = False):
    """``obj`` as a NumPy or CuPy array sharing its memory, or None if it exposes no memory.

    ``writable``: the array is written into (a receive buffer); an object
    whose ``__array__`` hands out a copy is refused with
    :class:`~ccsynth.errors.BufferMismatchError`.
    """
    if isinstance(obj, np.ndarray):
        return obj
    if hasattr(obj, "__cuda_array_interface__"):
        if hasattr(obj, "flags") and hasattr(obj, "dtype") and type(obj).__module__.startswith("cupy"):
            return obj
        if importlib.util.find_spec("cupy") is None:
            return None  # as mpi4py does: the MPI library gets the pointer (host memory, or a CUDA-aware MPI)
        return _cupy().asarray(obj)  # wraps the same device memory
    dlpack = getattr(obj, "__dlpack__", None)
    if dlpack is not None and hasattr(obj, "__dlpack_device__"):
        device_type = int(obj.__dlpack_device__()[0])
        if device_type in (DLPACK_CUDA, DLPACK_CUDA_MANAGED):
            return _cupy().from_dlpack(obj)
        if device_type in (DLPACK_CPU, DLPACK_CUDA_HOST):
            try:
                return _host_from_dlpack(obj)
            except (TypeError, BufferError, RuntimeError, ValueError):
                pass  # e.g. a dtype NumPy lacks (bfloat16): try the other ways
    if hasattr(obj, "__array_interface__"):
        return np.asarray(obj)
    try:
        return np.asarray(memoryview(obj))
    except TypeError:
        pass
    if hasattr(obj, "__array__"):
        arr = np.asarray(obj)
        if writable and not shares_memory_with(arr, obj):
            raise BufferMismatchError(
                f"a {type(obj).__name__} was passed as a receive buffer, but its __array__ returns a copy: the result "
                f"would be lost; pass a NumPy array (or an object exposing its memory)"
            )
        return arr
    return None


class _Capsule:
    """One DLPack capsule, handed to ``numpy.from_dlpack`` as the object that made it."""

    def __init__(self, capsule: Any, device: tuple) -> None:
        self._capsule, self._device = capsule, device

    def __dlpack__(self, **_kw: Any) -> Any:
        return self._capsule

    def __dlpack_device__(self) -> tuple:
        return self._device


class _KeepCapsule:
    """An array's memory, exposed again with the capsule it came in kept alive as long as the array.

    Asked without ``max_version``, the producer hands an unversioned capsule, which has no read-only flag:
    the memory is writable, as mpi4py takes it (NumPy would mark it read-only). A producer may free the tensor's record when its capsule dies (mpi4py's own test objects do), while
    NumPy calls the record's deleter when the array dies: ``keep`` holds (capsule, array), and a tuple drops
    its items last first, so the array (and the deleter call) goes before the capsule.
    """

    def __init__(self, capsule: Any, arr: np.ndarray) -> None:
        self.keep = (capsule, arr)
        iface = dict(arr.__array_interface__)
        iface["data"] = (iface["data"][0], False)  # an unversioned capsule has no read-only flag: writable, as in mpi4py
        self.__array_interface__ = iface


def _host_from_dlpack(obj: Any) -> np.ndarray:
    """A NumPy array on the host memory of a DLPack object (``numpy.from_dlpack``, the capsule kept alive)."""
    device = tuple(obj.__dlpack_device__())
    try:
        capsule = obj.__dlpack__(stream=None)
    except TypeError:
        capsule = obj.__dlpack__()
    arr = np.from_dlpack(_Capsule(capsule, device))
    return np.asarray(_KeepCapsule(capsule, arr))


def shares_memory_with(arr: np.ndarray, obj: Any) -> bool:
    """Whether ``arr`` is (a view of) memory that ``obj`` exposes: ``obj.__array__()`` asked twice gives the same memory."""
    try:
        again = np.asarray(obj)
    except Exception:  # pragma: no cover - an object that changed its mind
        return False
    return bool(arr.size == 0 or np.shares_memory(arr, again))
