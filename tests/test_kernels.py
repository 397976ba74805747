"""Buffer backends: every op x dtype, the fused receive-reduce-copy, pack/unpack, op names.

The NumPy backend always runs; the CuPy tests run the same checks where
CuPy and a GPU are present and are skipped otherwise.
"""

from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI
from hypothesis import given, settings
from hypothesis import strategies as st

from ccsynth.errors import BufferMismatchError, CCSynthError, OpError
from ccsynth.kernels import (
    DTYPES,
    KERNEL_OPS,
    backend_for,
    canonical_op,
    check_dtype,
    get_backend,
    kernel_op,
    mpi_op_name,
    tile_slices,
)

REFERENCE = {"sum": np.add, "prod": np.multiply, "min": np.minimum, "max": np.maximum}


def operands(dtype, n=257, seed=0):
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return (rng.random(n) * 4 - 2).astype(dt), (rng.random(n) * 4 - 2).astype(dt)
    hi = 256 if dt.kind == "u" else 1000
    lo = 0 if dt.kind == "u" else -1000
    return rng.integers(lo, hi, n).astype(dt), rng.integers(lo, hi, n).astype(dt)


def expected(op, a, b):
    # computed independently of the backend: in the dtype's own arithmetic (wrapping for integers)
    with np.errstate(over="ignore"):
        return REFERENCE[op](a, b).astype(a.dtype)


@pytest.fixture(scope="module")
def np_backend():
    return get_backend("numpy")


@pytest.mark.parametrize("dtype", [d.name for d in DTYPES])
@pytest.mark.parametrize("op", KERNEL_OPS)
def test_reduce_in_place_every_op_and_dtype(np_backend, op, dtype):
    a, b = operands(dtype)
    want = expected(op, a, b)
    dst = a.copy()
    np_backend.reduce(op, dst, b)
    assert dst.dtype == a.dtype
    np.testing.assert_array_equal(dst, want)
    # the fast callable the executor uses does the same, in place
    dst2 = a.copy()
    view = dst2[10:200]
    np_backend.reducer(op)(view, b[10:200])
    np.testing.assert_array_equal(dst2[10:200], want[10:200])
    np.testing.assert_array_equal(dst2[:10], a[:10])  # untouched outside the view


@pytest.mark.parametrize("dtype", [d.name for d in DTYPES])
@pytest.mark.parametrize("op", KERNEL_OPS)
def test_recv_reduce_copy_fused(np_backend, op, dtype):
    src, recv = operands(dtype, seed=1)
    dst = np.full_like(src, 7)
    np_backend.recv_reduce_copy(op, dst, recv, src)
    np.testing.assert_array_equal(dst, expected(op, src, recv))
    np.testing.assert_array_equal(src, operands(dtype, seed=1)[0])  # inputs unchanged
    # without src: in place into dst
    dst = src.copy()
    np_backend.recv_reduce_copy(op, dst, recv)
    np.testing.assert_array_equal(dst, expected(op, src, recv))


def test_mpi_ops_and_avg_map_to_kernels(np_backend):
    a, b = operands("float64")
    for mop, name in ((MPI.SUM, "sum"), (MPI.PROD, "prod"), (MPI.MIN, "min"), (MPI.MAX, "max")):
        assert canonical_op(mop) == name
        assert mpi_op_name(mop) == name
        dst = a.copy()
        np_backend.reduce(mop, dst, b)
        np.testing.assert_array_equal(dst, expected(name, a, b))
    assert mpi_op_name(MPI.BAND) is None
    with pytest.raises(OpError, match="BAND|no ccsynth kernel"):
        canonical_op(MPI.BAND)
    # avg reduces as a sum; the caller divides once at the end
    assert kernel_op("avg") == "sum"
    dst = a.copy()
    np_backend.reduce("avg", dst, b)
    np_backend.divide(dst, 2)
    np.testing.assert_allclose(dst, (a + b) / 2)


@pytest.mark.parametrize("text,name", [("SUM", "sum"), (" max ", "max"), ("add", "sum"), ("mean", "avg"), ("Prod", "prod")])
def test_canonical_op_names(text, name):
    assert canonical_op(text) == name


@pytest.mark.parametrize("bad", ["xor", "", 3, None])
def test_unknown_op_is_an_error_naming_it(bad):
    with pytest.raises(OpError, match="unknown reduction op"):
        canonical_op(bad)


def test_check_dtype():
    for d in DTYPES:
        assert check_dtype(d.name, "sum") == d
    assert check_dtype("float32", "avg") == np.float32
    with pytest.raises(OpError, match="avg.*int32"):
        check_dtype("int32", "avg")
    with pytest.raises(BufferMismatchError, match="int16"):
        check_dtype("int16", "sum")
    with pytest.raises(BufferMismatchError, match="complex128"):
        check_dtype(np.complex128, "sum")


def test_integer_arithmetic_wraps_like_mpi(np_backend):
    a = np.array([250, 3], dtype=np.uint8)
    np_backend.reduce("sum", a, np.array([10, 4], dtype=np.uint8))
    assert a.tolist() == [4, 7]
    b = np.array([2**31 - 1], dtype=np.int32)
    np_backend.reduce("sum", b, np.array([1], dtype=np.int32))
    assert b.tolist() == [-(2**31)]


def test_empty_and_copy(np_backend):
    buf = np_backend.empty(5, np.float16)
    assert buf.shape == (5,) and buf.dtype == np.float16
    np_backend.copy(buf, np.arange(5, dtype=np.float16))
    assert buf.tolist() == [0, 1, 2, 3, 4]
    with pytest.raises(TypeError):
        np_backend.copy(buf, np.arange(5, dtype=np.float64))  # no silent casts


def test_pack_unpack_strided_tiles(np_backend):
    arr = np.arange(6 * 8 * 5, dtype=np.float32).reshape(6, 8, 5)
    sl = tile_slices(arr.shape, (1, 0, 2), (5, 8, 5), (2, 3, 1))
    flat = np.full(100, -1, np.float32)
    k = np_backend.pack(flat, arr, sl)
    tile = arr[sl]
    assert k == tile.size == 2 * 3 * 3
    np.testing.assert_array_equal(flat[:k], tile.ravel())
    assert np.all(flat[k:] == -1)
    out = np.zeros_like(arr)
    assert np_backend.unpack(flat, out, sl) == k
    np.testing.assert_array_equal(out[sl], tile)
    mask = np.ones(arr.shape, bool)
    mask[sl] = False
    assert np.all(out[mask] == 0)  # nothing outside the tile was written
    with pytest.raises(BufferMismatchError, match="does not fit"):
        np_backend.pack(np.empty(3, np.float32), arr, sl)
    with pytest.raises(BufferMismatchError):
        tile_slices((2, 2), (0,), (1, 1))


@settings(max_examples=40, deadline=None)
@given(
    shape=st.lists(st.integers(1, 6), min_size=1, max_size=3),
    data=st.data(),
)
def test_pack_then_unpack_roundtrips(shape, data):
    be = get_backend("numpy")
    arr = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)
    starts, stops, steps = [], [], []
    for d in shape:
        a = data.draw(st.integers(0, d - 1))
        b = data.draw(st.integers(a + 1, d))
        starts.append(a)
        stops.append(b)
        steps.append(data.draw(st.integers(1, 3)))
    sl = tile_slices(shape, starts, stops, steps)
    flat = be.empty(arr.size, np.int64)
    k = be.pack(flat, arr, sl)
    out = np.full_like(arr, -1)
    be.unpack(flat, out, sl)
    np.testing.assert_array_equal(out[sl], arr[sl])
    assert k == arr[sl].size


def test_get_backend_by_name_and_errors():
    be = get_backend("numpy")
    assert be is get_backend("NumPy") and be.name == "numpy" and not be.is_device
    assert get_backend(be) is be
    assert backend_for(np.zeros(3)) is be
    assert be.owns(np.zeros(1)) and not be.owns([1, 2])
    with pytest.raises(CCSynthError, match="unknown buffer backend 'torch'"):
        get_backend("torch")


def _cupy_or_skip():
    cp = pytest.importorskip("cupy")
    try:
        if cp.cuda.runtime.getDeviceCount() < 1:
            pytest.skip("no CUDA device")
    except Exception as e:  # pragma: no cover - depends on the machine
        pytest.skip(f"no usable CUDA device: {e}")
    return cp


@pytest.mark.parametrize("dtype", [d.name for d in DTYPES])
@pytest.mark.parametrize("op", KERNEL_OPS)
def test_cupy_reduce_and_fused_match_numpy(op, dtype):
    cp = _cupy_or_skip()
    be = get_backend("cupy")
    assert be.is_device
    a, b = operands(dtype, seed=3)
    d = cp.asarray(a)
    be.reduce(op, d, cp.asarray(b))
    be.synchronize()
    want = expected(op, a, b)
    if np.dtype(dtype).kind == "f":
        np.testing.assert_allclose(cp.asnumpy(d), want, rtol=1e-3 if dtype == "float16" else 1e-6)
    else:
        np.testing.assert_array_equal(cp.asnumpy(d), want)
    out = cp.zeros_like(d)
    be.recv_reduce_copy(op, out, cp.asarray(b), cp.asarray(a))
    be.synchronize()
    if np.dtype(dtype).kind == "f":
        np.testing.assert_allclose(cp.asnumpy(out), want, rtol=1e-3 if dtype == "float16" else 1e-6)
    else:
        np.testing.assert_array_equal(cp.asnumpy(out), want)


def test_cupy_pack_unpack_and_divide():
    cp = _cupy_or_skip()
    be = get_backend("cupy")
    arr = cp.arange(48, dtype=cp.float32).reshape(6, 8)
    sl = (slice(1, 5, 2), slice(0, 8, 3))
    flat = be.empty(20, cp.float32)
    k = be.pack(flat, arr, sl)
    np.testing.assert_array_equal(cp.asnumpy(flat[:k]), cp.asnumpy(arr[sl]).ravel())
    out = cp.zeros_like(arr)
    be.unpack(flat, out, sl)
    np.testing.assert_array_equal(cp.asnumpy(out[sl]), cp.asnumpy(arr[sl]))
    x = cp.full(4, 6.0, dtype=cp.float64)
    be.divide(x, 4)
    be.synchronize()
    assert cp.asnumpy(x).tolist() == [1.5] * 4
    assert backend_for(x) is be
