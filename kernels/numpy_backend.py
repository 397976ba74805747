"""NumPy (host memory) backend: ufuncs with ``out=``, so no temporaries.

Example:
    >>> import numpy as np
    >>> be = NumpyBackend()
    >>> dst = be.empty(3, np.float32)
    >>> be.recv_reduce_copy("sum", dst, np.ones(3, np.float32), np.arange(3, dtype=np.float32))
    >>> dst.tolist()
    [1.0, 2.0, 3.0]
"""

from __future__ import annotations

import mmap
from typing import Any
from collections.abc import Callable

import numpy as np

from ccsynth.errors import OpError
from ccsynth.kernels.base import Backend

__all__ = ["NumpyBackend"]

_UFUNCS = {"sum": np.add, "prod": np.multiply, "min": np.minimum, "max": np.maximum}

#: buffers at least this large get pages of their own (see NumpyBackend.empty)
MMAP_BYTES = 1 << 20


def _ufunc(op: str):
    try:
        return _UFUNCS[op]
    except KeyError:
        raise OpError(f"no kernel for op {op!r}; kernels: {', '.join(_UFUNCS)}") from None


class NumpyBackend(Backend):
    name = "numpy"
    is_device = False

    def __init__(self) -> None:
        # Bound per-op callables, built once: the executor calls them per slice.
        self._red: dict[str, Callable] = {}
        self._fused: dict[str, Callable] = {}
        for op, uf in _UFUNCS.items():
            self._red[op] = (lambda u: lambda d, s: u(d, s, out=d))(uf)
            self._fused[op] = (lambda u: lambda d, r, s: u(s, r, out=d))(uf)

    @property
    def xp(self):
        return np

    def empty(self, n: int, dtype: Any):
        """A new array; from :data:`MMAP_BYTES` up it is an anonymous mapping of its own.

        glibc serves a large ``malloc`` with ``mmap`` at first, but once such a
        block is freed it raises its threshold (up to 32 MiB) and serves the
        next ones from the heap, whose freed memory it does not return to the
        system: a program cycling through message sizes would see its
        resident memory drift far above what the runtime keeps. A mapping of
        its own is returned to the system as soon as the array is dropped.
        """
        dt = np.dtype(dtype)
        nbytes = int(n) * dt.itemsize
        if nbytes >= MMAP_BYTES:
            return np.frombuffer(mmap.mmap(-1, nbytes), dtype=dt)
        return np.empty(int(n), dtype=dt)

    def zeros(self, n: int, dtype: Any):
        dt = np.dtype(dtype)
        if int(n) * dt.itemsize >= MMAP_BYTES:
            return self.empty(n, dt)  # a fresh mapping reads as zeros
        return np.zeros(int(n), dtype=dt)

    def copy(self, dst, src) -> None:
        np.copyto(dst, src, casting="no")

    def reducer(self, op: str) -> Callable:
        f = self._red.get(op)
        if f is None:
            _ufunc(op)  # raises OpError naming the op
            raise OpError(f"no reducer for op {op!r}")
        return f

    def fused_reducer(self, op: str) -> Callable:
        f = self._fused.get(op)
        if f is None:
            _ufunc(op)  # raises OpError naming the op
            raise OpError(f"no fused reducer for op {op!r}")
        return f

    def divide(self, dst, n: int) -> None:
        np.divide(dst, dst.dtype.type(n), out=dst)

    def owns(self, array: Any) -> bool:
        return isinstance(array, np.ndarray)
