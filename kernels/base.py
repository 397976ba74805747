"""The buffer-backend interface: allocation, copies, reductions, pack/unpack.

The executor never touches array libraries directly; it asks a
:class:`Backend` (selected by name with :func:`get_backend`) to allocate
buffers and to run the few element-wise kernels a schedule needs:

``copy(dst, src)``                       ``dst[:] = src``
``reduce(op, dst, src)``                 ``dst = dst (op) src``, in place
``recv_reduce_copy(op, dst, recv, src)`` ``dst = src (op) recv`` in one pass
                                         (``src=None``: ``dst = dst (op) recv``)
``pack(dst_flat, array, slices)``        gather a strided tile into a flat buffer
``unpack(src_flat, array, slices)``      scatter it back
``synchronize()``                        wait for queued device work (before MPI
                                         reads or writes a device buffer)

Reduction ops are named by ccsynth's own strings ``"sum"``, ``"prod"``,
``"min"``, ``"max"`` and ``"avg"``; :func:`canonical_op` also accepts
mpi4py's ``MPI.SUM``, ``MPI.PROD``, ``MPI.MIN`` and ``MPI.MAX``. ``"avg"`` is
not a kernel: callers reduce with ``"sum"`` and divide once at the end
(:meth:`Backend.divide`), which only makes sense for floating-point dtypes.

Supported dtypes: float16, float32, float64, int32, int64, uint8.

Example:
    >>> import numpy as np
    >>> be = get_backend("numpy")
    >>> a = np.array([1, 5, 3], dtype=np.int32)
    >>> be.reduce("max", a, np.array([4, 2, 6], dtype=np.int32))
    >>> a.tolist()
    [4, 5, 6]
    >>> canonical_op("SUM")
    'sum'
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from typing import Any
from collections.abc import Callable, Sequence

import numpy as np

from ccsynth.errors import BufferMismatchError, CCSynthError, OpError

OPS = ("sum", "prod", "min", "max", "avg")
KERNEL_OPS = ("sum", "prod", "min", "max")  # what the element-wise kernels implement
DTYPES = tuple(np.dtype(t) for t in ("float16", "float32", "float64", "int32", "int64", "uint8"))
FLOAT_DTYPES = tuple(d for d in DTYPES if d.kind == "f")

_OP_ALIASES = {"add": "sum", "mul": "prod", "multiply": "prod", "minimum": "min", "maximum": "max", "mean": "avg"}


def _mpi_ops() -> dict[int, str]:
    """MPI.Op handle -> ccsynth op name (MPI.Op objects are not hashable)."""
    try:
        from mpi4py import MPI
    except ImportError:  # pragma: no cover - mpi4py is a dependency
        return {}
    return {MPI.SUM.handle: "sum", MPI.PROD.handle: "prod", MPI.MIN.handle: "min", MPI.MAX.handle: "max"}


_MPI_OPS: dict[int, str] | None = None


def mpi_op_name(op: Any) -> str | None:
    """The ccsynth name of an mpi4py ``MPI.Op``, or None if ccsynth has no kernel for it.

    Returns None for ops such as ``MPI.BAND`` or user-defined ops, which the
    communicator hands to the MPI library instead.
    """
    global _MPI_OPS
    if _MPI_OPS is None:
        _MPI_OPS = _mpi_ops()
    handle = getattr(op, "handle", None)
    return _MPI_OPS.get(handle) if isinstance(handle, int) else None


def is_mpi_op(op: Any) -> bool:
    return type(op).__name__ == "Op" and type(op).__module__.startswith("mpi4py")


def canonical_op(op: Any) -> str:
    """Normalize an op: ``"SUM"``/``"add"``/``MPI.SUM`` -> ``"sum"``.

    Raises :class:`OpError` naming the op for anything ccsynth cannot
    reduce with (unknown strings, ``MPI.BAND``, user-defined MPI ops).
    """
    if isinstance(op, str):
        key = op.strip().lower()
        key = _OP_ALIASES.get(key, key)
        if key in OPS:
            return key
        raise OpError(f"unknown reduction op {op!r}; choose one of: {', '.join(OPS)} (or MPI.SUM/PROD/MIN/MAX)")
    if is_mpi_op(op):
        name = mpi_op_name(op)
        if name is None:
            raise OpError(f"MPI op {op!r} has no ccsynth kernel; supported: MPI.SUM, MPI.PROD, MPI.MIN, MPI.MAX")
        return name
    raise OpError(f"unknown reduction op {op!r}; choose one of: {', '.join(OPS)} (or MPI.SUM/PROD/MIN/MAX)")


def check_dtype(dtype: Any, op: str | None = None, *, what: str = "buffer") -> np.dtype:
    """Return ``np.dtype(dtype)`` if ccsynth can reduce it with ``op``.

    Raises :class:`BufferMismatchError` for an unsupported dtype and
    :class:`OpError` for ``avg`` on a non-float dtype.
    """
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise BufferMismatchError(f"{what} has unsupported dtype {dtype!r}") from None
    if dt not in DTYPES:
        raise BufferMismatchError(
            f"{what} has dtype {dt.name}; ccsynth reduces only {', '.join(d.name for d in DTYPES)}"
        )
    if op == "avg" and dt.kind != "f":
        raise OpError(f"op 'avg' needs a floating-point buffer, but {what} has dtype {dt.name}")
    return dt


def kernel_op(op: str) -> str:
    """The kernel that implements ``op`` (avg reduces as sum)."""
    return "sum" if op == "avg" else op


Slices = "slice | tuple[slice, ...]"


class Backend(ABC):
    """Buffers and element-wise kernels of one array library.

    Subclasses must implement every abstract method; all operate on
    arrays of that library (``xp``) and never allocate temporaries in the
    reduction kernels.
    """

    name: str = ""
    is_device: bool = False

    @property
    @abstractmethod
    def xp(self):
        """The array module (numpy or cupy)."""

    @abstractmethod
    def empty(self, n: int, dtype: Any):
        """A new uninitialized 1-D array of ``n`` elements."""

    def zeros(self, n: int, dtype: Any):
        return self.xp.zeros(n, dtype=dtype)

    @abstractmethod
    def copy(self, dst, src) -> None:
        """``dst[...] = src`` (same shape)."""

    @abstractmethod
    def reducer(self, op: str) -> Callable[[Any, Any], Any]:
        """A fast callable ``f(dst, src)`` doing ``dst = dst (op) src`` in place."""

    @abstractmethod
    def fused_reducer(self, op: str) -> Callable[[Any, Any, Any], Any]:
        """A fast callable ``f(dst, recv, src)`` doing ``dst = src (op) recv`` in one pass."""

    def reduce(self, op: Any, dst, src) -> None:
        """``dst = dst (op) src`` in place (``avg`` reduces as sum)."""
        self.reducer(kernel_op(canonical_op(op)))(dst, src)

    def recv_reduce_copy(self, op: Any, dst, recvbuf, src=None) -> None:
        """Combine freshly received data: ``dst = (src if given else dst) (op) recvbuf``.

        The fused form saves a full pass over memory compared with a copy
        followed by an in-place reduction.
        """
        k = kernel_op(canonical_op(op))
        if src is None:
            self.reducer(k)(dst, recvbuf)
        else:
            self.fused_reducer(k)(dst, recvbuf, src)

    @abstractmethod
    def divide(self, dst, n: int) -> None:
        """``dst /= n`` in place (the last step of ``avg``)."""

    def pack(self, dst_flat, array, slices) -> int:
        """Copy the tile ``array[slices]`` into the front of ``dst_flat``; returns its element count."""
        tile = array[slices]
        k = tile.size
        if k > dst_flat.size:
            raise BufferMismatchError(f"pack: tile of {k} elements does not fit a buffer of {dst_flat.size}")
        self.copy(dst_flat[:k].reshape(tile.shape), tile)
        return k

    def unpack(self, src_flat, array, slices) -> int:
        """Copy the front of ``src_flat`` into the tile ``array[slices]``; returns its element count."""
        tile = array[slices]
        k = tile.size
        if k > src_flat.size:
            raise BufferMismatchError(f"unpack: tile of {k} elements needs more than the {src_flat.size} given")
        self.copy(tile, src_flat[:k].reshape(tile.shape))
        return k

    def synchronize(self) -> None:  # noqa: B027 (a deliberate no-op default; device backends override it)
        """Wait until queued kernels finished (no-op on the host)."""

    @abstractmethod
    def owns(self, array: Any) -> bool:
        """True if ``array`` belongs to this backend's array library."""

    def address(self, array) -> int:
        """Start address of ``array``'s data (for caching bindings)."""
        return int(array.__array_interface__["data"][0])

    def alias(self, array):
        """A flat view of the memory of the contiguous ``array`` that does not keep ``array`` alive.

        The executor caches views of the caller's buffers by address; views
        made through this alias hold no reference to the caller's array, so
        a cache entry never keeps a buffer alive that its owner dropped. A
        cached view is used only while an array with the same address, size
        and dtype is passed, i.e. while that memory is the caller's again.
        """
        n = int(array.size)
        if n == 0:
            return self.empty(0, array.dtype)
        return np.asarray(_Memory(self.address(array), n, array.dtype))

    def may_share_memory(self, a, b) -> bool:
        return bool(np.may_share_memory(a, b))

    def __repr__(self) -> str:
        return f"<ccsynth {self.name} backend>"


class _Memory:
    """Raw memory as NumPy sees it: an ``__array_interface__`` with no owner behind it."""

    __slots__ = ("__array_interface__",)

    def __init__(self, address: int, n: int, dtype) -> None:
        self.__array_interface__ = {"data": (address, False), "shape": (n,), "typestr": np.dtype(dtype).str,
                                    "version": 3}


_BACKENDS = {"numpy": "ccsynth.kernels.numpy_backend:NumpyBackend", "cupy": "ccsynth.kernels.cupy_backend:CupyBackend"}
_INSTANCES: dict[str, Backend] = {}


def backend_names() -> tuple[str, ...]:
    return tuple(_BACKENDS)


def get_backend(name: str | Backend = "numpy") -> Backend:
    """The backend called ``name`` (``"numpy"`` or ``"cupy"``), created once.

    Raises :class:`CCSynthError` for unknown names, or if CuPy (or a GPU)
    is not available for ``"cupy"``.
    """
    if isinstance(name, Backend):
        return name
    key = str(name).strip().lower()
    if key not in _BACKENDS:
        raise CCSynthError(f"unknown buffer backend {name!r}; choose one of: {', '.join(_BACKENDS)}")
    inst = _INSTANCES.get(key)
    if inst is None:
        mod, cls = _BACKENDS[key].split(":")
        inst = getattr(importlib.import_module(mod), cls)()
        _INSTANCES[key] = inst
    return inst


def is_device_array(obj: Any) -> bool:
    """True for GPU arrays (anything exposing ``__cuda_array_interface__``)."""
    return hasattr(obj, "__cuda_array_interface__")


def backend_for(array: Any) -> Backend:
    """The backend whose arrays ``array`` is (CuPy if it lives on a GPU)."""
    return get_backend("cupy" if is_device_array(array) else "numpy")


def tile_slices(shape: Sequence[int], starts: Sequence[int], stops: Sequence[int], steps: Sequence[int] | None = None) -> tuple[slice, ...]:
    """``slices`` for :meth:`Backend.pack` from per-dimension bounds (a convenience)."""
    steps = steps or [1] * len(shape)
    if not len(shape) == len(starts) == len(stops) == len(steps):
        raise BufferMismatchError(f"tile bounds {starts}:{stops} do not match an array of {len(shape)} dimensions")
    return tuple(slice(a, b, s) for a, b, s in zip(starts, stops, steps))


__all__ = [
    "OPS",
    "KERNEL_OPS",
    "DTYPES",
    "FLOAT_DTYPES",
    "Backend",
    "canonical_op",
    "mpi_op_name",
    "is_mpi_op",
    "check_dtype",
    "kernel_op",
    "get_backend",
    "backend_names",
    "backend_for",
    "is_device_array",
    "tile_slices",
]
