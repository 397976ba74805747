"""Buffer backends (NumPy, CuPy): allocation, reductions, fused receive-reduce-copy, pack/unpack.

>>> from ccsynth.kernels import get_backend
>>> get_backend("numpy").name
'numpy'
"""

from ccsynth.errors import OpError  # defined with every other error; re-exported as before
from ccsynth.kernels.base import (
    DTYPES,
    FLOAT_DTYPES,
    KERNEL_OPS,
    OPS,
    Backend,
    backend_for,
    backend_names,
    canonical_op,
    check_dtype,
    get_backend,
    is_device_array,
    is_mpi_op,
    kernel_op,
    mpi_op_name,
    tile_slices,
)

__all__ = [
    "DTYPES",
    "FLOAT_DTYPES",
    "KERNEL_OPS",
    "OPS",
    "Backend",
    "OpError",
    "backend_for",
    "backend_names",
    "canonical_op",
    "check_dtype",
    "get_backend",
    "is_device_array",
    "is_mpi_op",
    "kernel_op",
    "mpi_op_name",
    "tile_slices",
]
