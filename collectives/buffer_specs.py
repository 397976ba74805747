"""mpi4py's argument conventions, read the way mpi4py reads them: buffer specs, ``MPI.IN_PLACE``, ops, roots.

A collective of the drop-in communicator takes what mpi4py takes, and this
module turns it into what the executor needs, on the rank that made the
call and before any communication:

* **buffer specs** (:func:`parse`): ``buf``, ``[buf, MPI.FLOAT]``,
  ``[buf, count, MPI.FLOAT]``, ``[buf, (count, displ), MPI.FLOAT]`` (lists or
  tuples; a datatype may be given by its typecode) -> a flat typed array
  and the count of one block (:class:`Buf`). As in mpi4py, an explicit
  count of a buffer cut into one block per rank counts the elements of one
  block. The v-collectives' specs (:func:`parse_v`): ``[buf, counts]``,
  ``[buf, (counts, displs)]``, ``[buf, counts, displs, datatype]``, ...
  -> :class:`~ccsynth.collectives.vcounts.VBuf`.
* **array-likes** (:func:`front`): objects exposing their memory
  (:mod:`~ccsynth.collectives.arraylike`) become NumPy or CuPy arrays that
  share it.
* **checks** that name the argument and the size it should have
  (:class:`~ccsynth.errors.BufferMismatchError`): a non-contiguous or
  read-only array, counts that do not fit, send and receive buffers that
  disagree (:func:`check_same`), a root that is not a rank
  (:func:`check_root`); ``avg`` on integers
  (:class:`~ccsynth.errors.OpError`, :func:`check_op_dtype`).
* **ops** (:class:`OpNames`): ``MPI.SUM`` ... or ccsynth's names -> the
  kernel's name and the MPI op for the library's own collective.

What ccsynth does not run -- derived datatypes without a NumPy equivalent,
per-rank counts in an equal-block collective, objects that are no arrays
-- raises :class:`PassToMPI` (its reason in ``args[0]``): the call then goes
to the MPI library with the caller's original arguments
(:mod:`~ccsynth.collectives.fallback`).

Example:
    >>> import numpy as np
    >>> from mpi4py import MPI
    >>> b = parse([np.zeros(8, np.float32), 2, MPI.FLOAT], "recvbuf", 4, writable=True)
    >>> b.count, b.array.size, b.explicit
    (2, 8, True)
    >>> parse(np.zeros(6), "sendbuf", 4)
    Traceback (most recent call last):
    ...
    ccsynth.errors.BufferMismatchError: sendbuf has 6 elements, not a multiple of the 4 ranks (one block per rank); expected 4 x count elements
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from mpi4py import MPI

from ccsynth.collectives.arraylike import as_array
from ccsynth.collectives.vcounts import VBuf, check_counts
from ccsynth.errors import BufferMismatchError, OpError
from ccsynth.kernels.base import Backend, canonical_op, get_backend, is_device_array, is_mpi_op, mpi_op_name

__all__ = [
    "PassToMPI",
    "Buf",
    "is_in_place",
    "front",
    "parse",
    "parse_v",
    "check_same",
    "check_root",
    "check_op_dtype",
    "OpNames",
    "mpi_op_of",
    "backend_for",
]

# the MPI op of each of ccsynth's op names, for the MPI library's own collective ("avg": a sum, then a division)
_MPI_OPS = {"sum": MPI.SUM, "prod": MPI.PROD, "min": MPI.MIN, "max": MPI.MAX, "avg": MPI.SUM}


def mpi_op_of(opname: str):
    """The MPI op that the MPI library's own collective runs for ccsynth's op ``opname`` (``avg``: a sum)."""
    return _MPI_OPS[opname]


class PassToMPI(Exception):
    """This call goes to the MPI library with its original arguments (the reason in ``args[0]``)."""


@dataclass(frozen=True)
class Buf:
    """A parsed buffer spec: the flat typed array (NumPy or CuPy), the elements per block, whether a count was given."""

    array: Any
    count: int
    explicit: bool


def is_in_place(spec) -> bool:
    """Whether the send buffer ``spec`` asks for in place: ``MPI.IN_PLACE`` (or its integer value) or, as in mpi4py, None."""
    return spec is None or spec is MPI.IN_PLACE or (isinstance(spec, int) and spec == MPI.IN_PLACE)


def front(spec, writable: bool = False):
    """A buffer spec with its array-like (see :mod:`~ccsynth.collectives.arraylike`) as an array."""
    if is_in_place(spec):
        return spec
    if isinstance(spec, (list, tuple)):
        if spec and not isinstance(spec[0], np.ndarray):
            arr = as_array(spec[0], writable=writable)
            if arr is not None:
                return type(spec)((arr, *spec[1:]))
        return spec
    arr = as_array(spec, writable=writable)
    return spec if arr is None else arr


def _dtype_of(datatype) -> np.dtype:
    """MPI datatype -> NumPy dtype, by mpi4py's typecode."""
    try:
        return np.dtype(datatype.tocode())
    except Exception:
        raise PassToMPI(f"datatype {datatype!r} has no NumPy equivalent") from None


def _typed_array(obj, what: str):
    """``obj`` as a NumPy or CuPy array (a buffer-protocol object through memoryview)."""
    if isinstance(obj, np.ndarray):
        return obj
    if is_device_array(obj):
        if hasattr(obj, "dtype") and type(obj).__module__.startswith("cupy"):
            return obj
        raise PassToMPI(f"{what} is a __cuda_array_interface__ object and CuPy is not installed")
    try:
        return np.asarray(memoryview(obj))
    except TypeError:
        raise PassToMPI(f"{what} of type {type(obj).__name__} is not a NumPy/CuPy array") from None


def _flat(buf, what: str, writable: bool, datatype, *, detail: bool):
    """The contiguous (and, for an output, writable) array of a spec, flat, viewed as ``datatype``.

    ``detail``: the messages of the equal-block collectives (shape, dtype and a hint), else the v-collectives'.
    """
    arr = _typed_array(buf, what)
    if not (arr.flags.c_contiguous or arr.flags.f_contiguous):
        hint = "; pass a contiguous array (e.g. numpy.ascontiguousarray) of the same size" if detail else ""
        raise BufferMismatchError(f"{what} is not contiguous (shape {arr.shape}, strides {arr.strides}){hint}")
    if writable and not getattr(arr.flags, "writeable", True):
        raise BufferMismatchError(
            f"{what} is read-only{f' (shape {arr.shape}, dtype {arr.dtype})' if detail else ''}; "
            f"the collective writes into it: pass a writable array"
        )
    flat = arr.reshape(-1, order="A") if arr.ndim != 1 else arr
    if isinstance(datatype, str):
        datatype = MPI.Datatype.fromcode(datatype)
    if datatype is not None:
        dt = _dtype_of(datatype)
        if dt != flat.dtype:
            if flat.nbytes % dt.itemsize:
                name = f"{datatype.Get_name()} ({dt.itemsize} bytes)" if detail else dt.name
                raise BufferMismatchError(f"{what} has {flat.nbytes} bytes, not a whole number of {name}")
            flat = flat.view(np.uint8).view(dt)
    return flat


def _blocks_error(what: str, size: int, blocks: int) -> BufferMismatchError:
    return BufferMismatchError(f"{what} has {size} elements, not a multiple of the {blocks} ranks "
                               f"(one block per rank); expected {blocks} x count elements")


def _split_spec(spec, what: str) -> tuple[Any, Any, Any, Any]:
    """``(buf, count, displ, datatype)`` of an equal-block buffer spec (None where not given)."""
    if not isinstance(spec, (list, tuple)):
        return spec, None, None, None
    count = displ = datatype = None
    if len(spec) == 2:
        buf, second = spec
        if isinstance(second, (MPI.Datatype, str)):
            datatype = second
        elif isinstance(second, (list, tuple)):
            count, displ = second
        else:
            count = second
    elif len(spec) == 3:
        buf, count, datatype = spec
        if isinstance(count, (list, tuple)):
            count, displ = count
    elif len(spec) == 4:
        buf, count, displ, datatype = spec
    else:
        raise BufferMismatchError(f"{what}: a buffer spec is [buf, datatype] or [buf, count, datatype], "
                                  f"got {len(spec)} items")
    return buf, count, displ, datatype


def parse(spec, what: str, blocks: int, writable: bool = False) -> Buf:
    """Buffer spec -> flat typed array and per-block count (mpi4py's rules); ``writable``: an output."""
    if type(spec) is np.ndarray and spec.ndim == 1 and spec.flags.c_contiguous and (
            spec.flags.writeable or not writable):
        # the common case, without building new views (keeps the executor's fast path)
        if spec.size % blocks:
            raise _blocks_error(what, spec.size, blocks)
        return Buf(spec, spec.size // blocks, False)
    if spec is None:
        raise BufferMismatchError(f"{what} is None")
    buf, count, displ, datatype = _split_spec(spec, what)
    if isinstance(count, (list, tuple)) or isinstance(displ, (list, tuple)):
        raise PassToMPI(f"{what} gives per-rank counts (vector form)")
    flat = _flat(buf, what, writable, datatype, detail=True)
    start = int(displ or 0)
    avail = flat.size - start
    if count is not None:
        count = int(count)
        if count < 0 or start < 0 or count * blocks > avail:
            raise BufferMismatchError(
                f"{what} spec asks for {blocks} x {count} element(s) from offset {start}, but the buffer has {flat.size}"
            )
        return Buf(flat[start:start + count * blocks], count, True)
    if start:
        flat = flat[start:]
    if flat.size % blocks:
        raise _blocks_error(what, flat.size, blocks)
    return Buf(flat, flat.size // blocks, False)


def _split_v(spec, what: str) -> tuple[Any, Any, Any, Any]:
    """``(buf, counts, displs, datatype)`` of a v-collective buffer spec, by mpi4py's rules (None where not given).

    A tuple where the counts go is ``(counts, displs)``; a list is the counts.
    """
    if not isinstance(spec, (list, tuple)):
        return spec, None, None, None
    counts = displs = datatype = None
    if len(spec) == 2:
        buf, counts = spec
        if isinstance(counts, (MPI.Datatype, str)):
            counts, datatype = None, counts
    elif len(spec) == 3:
        buf, counts, datatype = spec
    elif len(spec) == 4:
        buf, counts, displs, datatype = spec
    else:
        raise BufferMismatchError(f"{what}: a v-collective buffer spec is [buf, counts, displs, datatype], "
                                  f"got {len(spec)} items")
    if isinstance(counts, tuple) and displs is None:
        if len(counts) != 2:
            raise BufferMismatchError(f"{what}: a tuple where the counts go is (counts, displs), "
                                      f"got {len(counts)} items")
        counts, displs = counts
    return buf, counts, displs, datatype


def parse_v(spec, what: str, n: int, writable: bool = False) -> VBuf:
    """A v-collective buffer spec on ``n`` ranks -> flat array, counts and displacements (mpi4py's forms).

    As in mpi4py: no counts -> the buffer split in ``n`` equal blocks; one count -> that count for every
    rank; one displacement ``d`` -> rank ``i``'s block at ``i * d``; no displacements -> blocks one after
    the other.
    """
    buf, counts, displs, datatype = _split_v(spec, what)
    flat = _flat(buf, what, writable, datatype, detail=False)
    if counts is None:
        counts = [flat.size // n] * n
    elif isinstance(counts, (int, np.integer)):
        counts = [int(counts)] * n
    if isinstance(displs, (int, np.integer)):
        displs = [int(displs) * i for i in range(n)]
    c, d = check_counts(what, counts, displs, n, flat.size)
    return VBuf(flat, c, d)


def check_same(s: Buf, r: Buf, sname: str, rname: str, m: int, *, blocks: int = 1, recv_blocks: int = 1,
               what_count: str | None = None) -> None:
    """The send buffer ``s`` must hold ``blocks x m`` elements of the receive buffer's dtype, on the same kind of memory."""
    if s.array.dtype != r.array.dtype:
        raise BufferMismatchError(
            f"{sname} has dtype {s.array.dtype.name} but {rname} has dtype {r.array.dtype.name}; they must match"
        )
    if is_device_array(s.array) != is_device_array(r.array):
        raise BufferMismatchError(f"{sname} and {rname} must both be host arrays or both GPU arrays")
    if s.count != m:
        expected = what_count or str(blocks * m)
        raise BufferMismatchError(
            f"{sname} has {s.array.size} element(s) but {rname} ({r.array.size} elements"
            f"{f' = {recv_blocks} x {m}' if recv_blocks > 1 else ''}) needs {sname} to have {expected}"
        )


def check_root(root, size: int) -> None:
    """``root`` must be a rank of a ``size``-rank communicator."""
    if isinstance(root, bool) or not isinstance(root, (int, np.integer)) or not 0 <= root < size:
        raise BufferMismatchError(f"root {root!r} is not a rank of this {size}-rank communicator")


def check_op_dtype(opname: str | None, dtype) -> None:
    """``avg`` needs a floating-point buffer."""
    if opname == "avg" and np.dtype(dtype).kind != "f":
        raise OpError(f"op 'avg' needs a floating-point buffer, got dtype {np.dtype(dtype).name}")


class OpNames:
    """Ops as the calls give them -> ``(ccsynth op name or None if MPI must do it, the MPI op for a fallback)``.

    Remembers the last op it resolved (a loop passes the same one again and again).
    """

    def __init__(self) -> None:
        self._last: tuple = (None, None)

    def resolve(self, op) -> tuple[str | None, Any]:
        last = self._last
        if op is last[0]:
            return last[1]
        if is_mpi_op(op):
            out = (mpi_op_name(op), op)
        else:
            name = canonical_op(op)  # raises OpError for unknown names
            out = (name, _MPI_OPS[name])
        self._last = (op, out)
        return out


def backend_for(arr, choice: str) -> Backend:
    """The kernel backend for ``arr`` under a communicator's ``backend=`` (``auto``, ``numpy``, ``cupy``)."""
    if type(arr) is np.ndarray and choice != "cupy":
        return get_backend("numpy")
    dev = is_device_array(arr)
    if choice == "auto":
        return get_backend("cupy" if dev else "numpy")
    if dev != (choice == "cupy"):
        raise BufferMismatchError(
            f"a {'GPU' if dev else 'host'} array was passed to a communicator forced to the {choice} backend"
        )
    return get_backend(choice)
