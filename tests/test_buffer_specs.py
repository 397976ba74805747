"""mpi4py's argument forms, read as mpi4py reads them (one rank, no communication)."""

from __future__ import annotations

import gc
import importlib.util

import numpy as np
import pytest
from mpi4py import MPI

from ccsynth.collectives.arraylike import as_array
from ccsynth.collectives.buffer_specs import PassToMPI, is_in_place, parse_v
from ccsynth.errors import BufferMismatchError


@pytest.mark.parametrize("spec, counts, displs", [
    (lambda b: b, [3, 3, 3, 3], [0, 3, 6, 9]),                              # no counts: equal blocks
    (lambda b: [b, MPI.DOUBLE], [3, 3, 3, 3], [0, 3, 6, 9]),
    (lambda b: [b, 2], [2, 2, 2, 2], [0, 2, 4, 6]),                          # one count: every rank's
    (lambda b: [b, (2, 3), MPI.DOUBLE], [2, 2, 2, 2], [0, 3, 6, 9]),         # one displacement: a stride
    (lambda b: [b, (1, 3)], [1, 1, 1, 1], [0, 3, 6, 9]),                     # a tuple is (counts, displs)
    (lambda b: [b, [1, 3, 0, 2]], [1, 3, 0, 2], [0, 1, 4, 4]),               # a list is the counts
    (lambda b: [b, ([1, 1, 1, 1], None), "d"], [1, 1, 1, 1], [0, 1, 2, 3]),
    (lambda b: [b, [1, 1, 1, 1], [9, 6, 3, 0], MPI.DOUBLE], [1, 1, 1, 1], [9, 6, 3, 0]),
])
def test_v_specs_as_mpi4py_reads_them(spec, counts, displs) -> None:
    buf = np.zeros(12)
    v = parse_v(spec(buf), "recvbuf", 4)
    assert v.counts.tolist() == counts and v.displs.tolist() == displs
    assert np.shares_memory(v.array, buf)


def test_v_spec_past_the_buffer_is_named() -> None:
    with pytest.raises(BufferMismatchError, match="run past its 12 elements"):
        parse_v([np.zeros(12), (4, 4)], "recvbuf", 4)


def test_none_is_in_place_as_in_mpi4py() -> None:
    assert is_in_place(None) and is_in_place(MPI.IN_PLACE) and not is_in_place(np.zeros(1))


class _FreesWithCapsule:
    """A DLPack producer that is no array (NumPy's capsule inside)."""

    def __init__(self, a: np.ndarray) -> None:
        self.a = a

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()

    def __dlpack__(self, stream=None):
        return self.a.__dlpack__()


def test_host_dlpack_is_writable_and_shares_memory() -> None:
    base = np.arange(6, dtype=np.float32)
    arr = as_array(_FreesWithCapsule(base), writable=True)
    assert arr.flags.writeable and np.shares_memory(arr, base)
    arr[0] = 42
    del arr
    gc.collect()
    assert base[0] == 42


def test_cuda_array_interface_without_cupy_goes_to_mpi(monkeypatch) -> None:
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "cupy" else find_spec(name, *a))

    class Fake:
        def __init__(self) -> None:
            self.a = np.zeros(4)
            self.__cuda_array_interface__ = {"version": 0, "data": (self.a.ctypes.data, False),
                                             "typestr": "<f8", "shape": (4,)}

    assert as_array(Fake()) is None
    with pytest.raises(PassToMPI, match="CuPy is not installed"):
        parse_v([Fake(), [1, 1, 1, 1]], "recvbuf", 4)
