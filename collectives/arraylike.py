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
        return _cupy().asarray(obj)  # wraps the same device memory
    dlpack = getattr(obj, "__dlpack__", None)
    if dlpack is not None and hasattr(obj, "__dlpack_device__"):
        device_type = int(obj.__dlpack_device__()[0])
        if device_type in (DLPACK_CUDA, DLPACK_CUDA_MANAGED):
            return _cupy().from_dlpack(obj)
        if device_type in (DLPACK_CPU, DLPACK_CUDA_HOST):
            try:
                return np.from_dlpack(obj)
            except (TypeError, BufferError, RuntimeError):
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


def shares_memory_with(arr: np.ndarray, obj: Any) -> bool:
    """Whether ``arr`` is (a view of) memory that ``obj`` exposes: ``obj.__array__()`` asked twice gives the same memory."""
    try:
        again = np.asarray(obj)
    except Exception:  # pragma: no cover - an object that changed its mind
        return False
    return bool(arr.size == 0 or np.shares_memory(arr, again))
