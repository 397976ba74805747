"""Exact inputs and local NumPy references for ``ccsynth bench -c``.

OMB's ``-c`` fills buffers with values whose floating-point sums are exact, so
that a reduction gives bit-identical results in any order and the check can
be an equality, not a tolerance. Here every element is a small non-negative
integer (below ``modulus``, chosen so that a sum over all ranks stays inside
the range the dtype holds exactly). Every rank can therefore compute every
other rank's input locally, and with it the exact result it must hold.

Example:
    >>> import numpy as np
    >>> pattern(1, 5, np.float32, n_ranks=4).tolist()
    [13.0, 3.0, 10.0, 0.0, 7.0]
    >>> expected("allreduce", 1, 2, 3, np.float32).tolist()
    [13.0, 10.0, 24.0]
"""

from __future__ import annotations

import numpy as np

from ccsynth.errors import CCSynthError

__all__ = ["DTYPES", "OPS", "check_dtype", "modulus", "pattern", "sentinel", "send_count", "recv_count", "expected"]

#: reduction ops with a reference (nccl-tests' ``-o``): sums are exact; min/max too; prod is exact while the
#: product of the ranks' values stays inside the dtype's exact range (few ranks); avg is the exact sum divided
#: by the rank count, rounded once
OPS = ("sum", "prod", "min", "max", "avg")

# Largest integer each dtype holds exactly (floats: 2**mantissa bits).
_EXACT_LIMIT = {"float16": 2**11, "float32": 2**24, "float64": 2**53, "int32": 2**31 - 1, "int64": 2**63 - 1, "uint8": 255}
DTYPES = tuple(_EXACT_LIMIT)
_MAX_MODULUS = 17


def check_dtype(name: str) -> np.dtype:
    """The NumPy dtype for ``name``; raises CCSynthError for an unsupported one."""
    if name not in _EXACT_LIMIT:
        raise CCSynthError(f"unsupported dtype {name!r}; choose one of: {', '.join(DTYPES)}")
    return np.dtype(name)


def modulus(dtype, n_ranks: int) -> int:
    """Values lie in ``[0, modulus)`` so that a sum over ``n_ranks`` ranks is exact."""
    limit = _EXACT_LIMIT[np.dtype(dtype).name]
    return max(2, min(_MAX_MODULUS, limit // max(n_ranks, 1)))


def pattern(rank: int, count: int, dtype, *, n_ranks: int = 1) -> np.ndarray:
    """The input of ``rank``: ``count`` small integers, different on every rank."""
    return _values(rank, count, modulus(dtype, n_ranks)).astype(dtype)


def _values(rank: int, count: int, m: int) -> np.ndarray:
    idx = np.arange(count, dtype=np.int64)
    return (idx * 7 + rank * 13) % m


def sentinel(dtype) -> int:
    """A value no pattern or sum produces (written into outputs before a checked run)."""
    return 255 if np.dtype(dtype).kind == "u" else -1


def _total(n_ranks: int, count: int, dtype, op: str = "sum") -> np.ndarray:
    """The reduction with ``op`` of every rank's pattern, as int64 (float64 for avg)."""
    m = modulus(dtype, n_ranks)
    values = [_values(r, count, m) for r in range(n_ranks)]
    if op == "sum":
        acc = np.zeros(count, dtype=np.int64)
        for v in values:
            acc += v
        return acc
    if op == "avg":
        return _total(n_ranks, count, dtype).astype(np.float64) / n_ranks
    fold = {"prod": np.multiply, "min": np.minimum, "max": np.maximum}.get(op)
    if fold is None:
        raise CCSynthError(f"no reference for op {op!r}; ops: {', '.join(OPS)}")
    acc = values[0].copy() if values else np.zeros(count, dtype=np.int64)
    for v in values[1:]:
        acc = fold(acc, v)
    return acc


def send_count(kind: str, n_ranks: int, count: int) -> int:
    """Elements of the send buffer for ``count`` (see :func:`expected`)."""
    return n_ranks * count if kind in ("reduce_scatter", "alltoall") else count


def recv_count(kind: str, n_ranks: int, count: int) -> int:
    """Elements of the receive buffer for ``count`` (see :func:`expected`)."""
    return n_ranks * count if kind in ("allgather", "alltoall") else count


def expected(kind: str, rank: int, n_ranks: int, count: int, dtype, root: int = 0, op: str = "sum") -> np.ndarray | None:
    """What ``rank``'s receive buffer must hold after ``kind`` (reductions with ``op``, default SUM).

    ``count`` is the per-rank element count in MPI's terms: the buffer of
    allreduce/broadcast/reduce, allgather's send buffer, reduce-scatter's
    receive block, alltoall's block per peer. Every rank's input is
    ``pattern(rank, send_count(...))``. Returns None where the receive buffer
    is not defined (reduce on a non-root rank).
    """
    n = n_ranks
    pat = lambda r, k: pattern(r, k, dtype, n_ranks=n)  # noqa: E731
    if kind == "allreduce":
        return _total(n, count, dtype, op).astype(dtype)
    if kind == "reduce":
        return _total(n, count, dtype, op).astype(dtype) if rank == root else None
    if kind == "broadcast":
        return pat(root, count)
    if kind == "allgather":
        return np.concatenate([pat(r, count) for r in range(n)]) if count else np.zeros(0, dtype)
    if kind == "reduce_scatter":
        return _total(n, n * count, dtype, op)[rank * count:(rank + 1) * count].astype(dtype)
    if kind == "alltoall":
        if not count:
            return np.zeros(0, dtype)
        return np.concatenate([pat(q, n * count)[rank * count:(rank + 1) * count] for q in range(n)])
    raise CCSynthError(f"no reference for collective {kind!r}")
