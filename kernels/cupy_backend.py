"""CuPy (GPU memory) backend: fused element-wise kernels on the current stream.

CuPy is imported only when this backend is created (``get_backend("cupy")``),
so ccsynth runs without it. The reductions are single ``ElementwiseKernel``
launches: ``dst = dst (op) src`` in place, and the fused receive-reduce-copy
``dst = src (op) recv``, which replaces a copy kernel plus a reduction kernel
(two passes over memory) by one.

Kernels run asynchronously on CuPy's current stream. MPI does not know about
that stream, so :meth:`CupyBackend.synchronize` must run before a device
buffer is handed to MPI (the executor does this before every send or
receive that follows a kernel, and before returning). Passing device
buffers to MPI needs a CUDA-aware MPI library.
"""

from __future__ import annotations

from typing import Any
from collections.abc import Callable

from ccsynth.errors import CCSynthError, OpError
from ccsynth.kernels.base import Backend

__all__ = ["CupyBackend"]

# C expressions of the element-wise kernels, on operands ``a`` and ``b``.
# min/max use a comparison rather than min()/max() so that float16 (CuPy's
# ``half`` wrapper) and integer types compile the same way.
_EXPR = {
    "sum": "{a} + {b}",
    "prod": "{a} * {b}",
    "min": "({b} < {a}) ? {b} : {a}",
    "max": "({b} > {a}) ? {b} : {a}",
}


class CupyBackend(Backend):
    name = "cupy"
    is_device = True

    def __init__(self) -> None:
        try:
            import cupy
        except ImportError:
            raise CCSynthError(
                "the cupy buffer backend needs CuPy and a CUDA GPU (pip install cupy-cuda12x)"
            ) from None
        try:
            n_dev = cupy.cuda.runtime.getDeviceCount()
        except Exception as e:  # CUDA driver missing or broken
            raise CCSynthError(f"the cupy buffer backend found no usable CUDA device: {e}") from None
        if n_dev < 1:
            raise CCSynthError("the cupy buffer backend found no CUDA device")
        self._cp = cupy
        self._red: dict[str, Callable] = {}
        self._fused: dict[str, Callable] = {}

    @property
    def xp(self):
        return self._cp

    # ------------------------------------------------------------ kernels
    def _expr(self, op: str, a: str, b: str) -> str:
        try:
            return _EXPR[op].format(a=a, b=b)
        except KeyError:
            raise OpError(f"no kernel for op {op!r}; kernels: {', '.join(_EXPR)}") from None

    def reducer(self, op: str) -> Callable:
        f = self._red.get(op)
        if f is None:
            # 'd' is an output parameter that is read as well: in-place update.
            expr = self._expr(op, "d", "s")
            kern = self._cp.ElementwiseKernel("T s", "T d", f"d = {expr}", f"ccsynth_reduce_{op}")
            f = self._red[op] = lambda d, s, _k=kern: _k(s, d)
        return f

    def fused_reducer(self, op: str) -> Callable:
        f = self._fused.get(op)
        if f is None:
            # dst = src (op) recv: operand order matters only for
            # non-commutative ops, and ours are all commutative.
            kern = self._cp.ElementwiseKernel("T a, T b", "T d", f"d = {self._expr(op, 'a', 'b')}", f"ccsynth_rrc_{op}")
            f = self._fused[op] = lambda d, r, s, _k=kern: _k(s, r, d)
        return f

    # -------------------------------------------------------------- memory
    def empty(self, n: int, dtype: Any):
        return self._cp.empty(int(n), dtype=dtype)

    def zeros(self, n: int, dtype: Any):
        return self._cp.zeros(int(n), dtype=dtype)

    def copy(self, dst, src) -> None:
        self._cp.copyto(dst, src)

    def divide(self, dst, n: int) -> None:
        self._cp.divide(dst, dst.dtype.type(n), out=dst)

    def synchronize(self) -> None:
        self._cp.cuda.get_current_stream().synchronize()

    def owns(self, array: Any) -> bool:
        return isinstance(array, self._cp.ndarray)

    def address(self, array) -> int:
        return int(array.data.ptr)

    def alias(self, array):
        cp = self._cp
        n = int(array.size)
        if n == 0:
            return self.empty(0, array.dtype)
        mem = cp.cuda.UnownedMemory(self.address(array), n * array.dtype.itemsize, None)
        return cp.ndarray((n,), array.dtype, cp.cuda.MemoryPointer(mem, 0))

    def may_share_memory(self, a, b) -> bool:
        return bool(self._cp.may_share_memory(a, b))
