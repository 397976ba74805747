"""The ranks compare what they were given: a communicator's setup once, each call's signature in debug mode.

Setup (:func:`agree_on_setup`, in the constructor, one small allgather):
every rank must cut messages alike (``slice_bytes``, ``static_max_bytes``)
and run the same plan (compared by fingerprint,
:func:`~ccsynth.collectives.plan_sources.plan_fingerprint`). A rank whose
plan could not be used takes part with its error, so that every rank
raises :class:`~ccsynth.errors.PlanError` naming it; ranks with different
plans raise naming which ranks hold which plan ("ranks 0-2, 5: plan ...").

Calls (:func:`agree_on_call`, ``debug=True`` or ``CCSYNTH_DEBUG=1``):
every call first agrees on its signature (:func:`call_signature`: call
number, collective, count, dtype, op, root) with one small ``Allreduce``
of a hash and its negation (equal everywhere exactly when the maximum of
both agree). If the ranks differ every rank gathers every rank's
signature and raises :class:`~ccsynth.errors.BufferMismatchError` listing
them -- that also catches different dtypes of the same size, different
roots and a skipped call, which message lengths cannot show. A rank whose
call failed its own checks takes part with its error, so the others raise
rather than wait for it.

Example:
    >>> _ranges([0, 1, 2, 5, 7, 8])
    '0-2, 5, 7-8'
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import Any

import numpy as np
from mpi4py import MPI

from ccsynth.collectives.buffer_specs import PassToMPI
from ccsynth.collectives.runtime.channel import Channel, mark_shared
from ccsynth.errors import BufferMismatchError, CCSynthError, PlanError

__all__ = ["agree_on_setup", "call_signature", "agree_on_call", "agree_on_args", "run_checks", "signature_hash", "ARGS_OK",
           "ARGS_TO_MPI", "ARGS_FAILED"]


def _ranges(ranks: list[int]) -> str:
    """``[0, 1, 2, 5]`` -> ``"0-2, 5"``."""
    out, start = [], None
    for i, r in enumerate(ranks):
        if start is None:
            start = r
        if i + 1 == len(ranks) or ranks[i + 1] != r + 1:
            out.append(str(start) if start == r else f"{start}-{r}")
            start = None
    return ", ".join(out)


def agree_on_setup(comm, slice_bytes: int | None, static_max_bytes: int, fingerprint: str,
                   plan_error: PlanError | None) -> None:
    """Every rank of ``comm`` must cut messages alike and run the same plan: compare them (one small allgather).

    ``fingerprint``: this rank's plan (``"default"`` for the default one);
    ``plan_error``: why this rank's plan cannot be used (then every rank raises, naming it).
    """
    rank, size = comm.Get_rank(), comm.Get_size()
    fp = "error" if plan_error is not None else fingerprint
    mine = (int(slice_bytes or 0), int(static_max_bytes), fp, str(plan_error or ""))
    everyone = comm.allgather(mine) if size > 1 else [mine]
    if any(o[:2] != mine[:2] for o in everyone):
        raise CCSynthError(
            f"the ranks built their Communicator with different settings (rank {rank}: "
            f"slice_bytes={slice_bytes}, static_max_bytes={static_max_bytes}); "
            f"every rank must pass the same values"
        )
    failed = [(r, o[3]) for r, o in enumerate(everyone) if o[2] == "error"]
    if failed:
        if plan_error is not None and len(failed) == len(everyone):
            raise plan_error
        what = "; ".join(f"rank {r}: {msg}" for r, msg in failed)
        raise PlanError(f"the plan given to the Communicator cannot be used on rank(s) "
                        f"{', '.join(str(r) for r, _ in failed)}: {what}")
    groups: dict[str, list[int]] = {}
    for r, o in enumerate(everyone):
        groups.setdefault(o[2], []).append(r)
    if len(groups) > 1:
        parts = "; ".join(
            f"rank{'s' if len(rs) > 1 else ''} {_ranges(rs)}: "
            f"{_plan_text(key)}"
            for key, rs in sorted(groups.items(), key=lambda kv: kv[1][0])
        )
        raise PlanError(f"the ranks passed different plans to the Communicator ({parts}); every rank must "
                        f"load the same plan (rank {rank} has {fp})")


def call_signature(seq: int, kind: str, m: int, dtype, opname, root: int) -> str:
    """What the ranks compare in debug mode: call number, collective, count per block, dtype, op, root."""
    return (f"{kind} (call {seq}) of {m} element(s) per block of {np.dtype(dtype).name}, "
            f"op {opname}, root {root}")


def agree_on_call(channel: Channel, sig: str, error: BaseException | None = None) -> None:
    """Debug mode: every rank checks that all ranks make the same call (``sig``; see the module doc).

    On a mismatch every rank raises :class:`BufferMismatchError` naming
    every rank's call; a rank that passes its own ``error`` returns (its
    caller re-raises it), marked as known to every rank.
    """
    if channel.size < 2:
        return
    h = zlib.crc32(sig.encode()) & 0x7FFFFFFF
    v = np.array([h, -h], dtype=np.int64)
    out = np.empty_like(v)
    channel.comm.Allreduce(v, out, op=MPI.MAX)
    if out[0] == -out[1]:
        return
    sigs = channel.comm.allgather(sig)  # every rank got here: the Allreduce completed everywhere
    if error is not None:
        mark_shared(error)
        return  # the caller re-raises this rank's own error
    lines = "; ".join(f"rank {r}: {d}" for r, d in enumerate(sigs))
    failed = [r for r, d in enumerate(sigs) if d.startswith("error")]
    if failed:
        e = BufferMismatchError(f"rank(s) {', '.join(map(str, failed))} failed the checks of this call "
                                f"(call {channel.seq}) that rank {channel.rank} passed: {lines}")
    else:
        e = BufferMismatchError(f"ranks disagree on the arguments of call {channel.seq}: {lines} "
                                f"(rank {channel.rank} calls {sig})")
    mark_shared(e)
    raise e


#: a rank's state in :func:`agree_on_args`: its checks passed, it hands the call to the MPI library, they failed
ARGS_OK, ARGS_TO_MPI, ARGS_FAILED = 0, 1, 2


def run_checks(check: Callable[[], Any]) -> tuple[int, Any, BaseException | None]:
    """This rank's local checks of a call: ``(state, what check() returned, its error)`` for :func:`agree_on_args`
    (:class:`~ccsynth.collectives.buffer_specs.PassToMPI`: the MPI library runs the call)."""
    try:
        return ARGS_OK, check(), None
    except PassToMPI:
        return ARGS_TO_MPI, None, None
    except Exception as e:  # noqa: BLE001 - every rank raises it, after the agreement
        return ARGS_FAILED, None, e


def signature_hash(sig: str) -> int:
    """A call's signature as a non-negative 31-bit number (what the ranks compare)."""
    return zlib.crc32(sig.encode()) & 0x7FFFFFFF


def agree_on_args(channel: Channel, what: str, state: int, sig: str, error: BaseException | None,
                  row=None):
    """Every rank's local checks of one call, agreed before anything else is sent: ``True`` if the MPI library
    must run it (some rank handed it there), else ``False``; raises on every rank if a rank failed its checks
    or the ranks disagree on the signature ``sig``.

    ``state`` is this rank's :data:`ARGS_OK`, :data:`ARGS_TO_MPI` or
    :data:`ARGS_FAILED` (then ``error`` is its error); ``row`` (int64, the
    same length on every rank) rides along: with it the agreement is one
    allgather and returns ``(to_mpi, rows)``, every rank's row (an
    ``Alltoallv``'s counts), else one small ``Allreduce``. The error path
    (some rank failed or disagrees) adds one gather of the ranks' messages.
    """
    h = signature_hash(sig) if state == ARGS_OK else 0
    n = channel.size
    if row is None:
        v = np.array([state, h, -h], np.int64)
        out = np.empty_like(v)
        if n > 1:
            channel.comm.Allreduce(v, out, op=MPI.MAX)
        else:
            out[:] = v
        worst, agree, rows = int(out[0]), bool(out[1] == -out[2]), None
    else:
        mine = np.concatenate([np.array([state, h], np.int64), np.asarray(row, np.int64)])
        both = np.empty((n, mine.size), np.int64)
        if n > 1:
            channel.comm.Allgather(mine, both)
        else:
            both[0] = mine
        worst = int(both[:, 0].max())
        ok = both[both[:, 0] == ARGS_OK, 1]
        agree, rows = bool(ok.size == 0 or (ok == ok[0]).all()), both[:, 2:]
    if worst == ARGS_FAILED or (worst == ARGS_OK and not agree):
        _raise_everywhere(channel, what, state, sig, error)
    to_mpi = worst == ARGS_TO_MPI
    return to_mpi if row is None else (to_mpi, rows)


def _raise_everywhere(channel: Channel, what: str, state: int, sig: str, error: BaseException | None) -> None:
    """Some rank failed its checks, or the ranks disagree: every rank raises, naming the rank(s) and why."""
    mine = f"{type(error).__name__}: {error}" if state == ARGS_FAILED else sig
    everyone = channel.comm.allgather((state, mine)) if channel.size > 1 else [(state, mine)]
    if error is not None:
        mark_shared(error)
        raise error
    failed = [r for r, (s, _) in enumerate(everyone) if s == ARGS_FAILED]
    if failed:
        why = "; ".join(f"rank {r}: {everyone[r][1]}" for r in failed)
        e = BufferMismatchError(f"{what} (call {channel.seq}) failed on rank{'s' if len(failed) > 1 else ''} "
                                f"{_ranges(failed)}: {why}")
    else:
        lines = "; ".join(f"rank {r}: {d}" for r, (s, d) in enumerate(everyone) if s == ARGS_OK)
        e = BufferMismatchError(f"the ranks disagree on the arguments of {what} (call {channel.seq}): {lines}")
    mark_shared(e)
    raise e


def _plan_text(key: str) -> str:
    """A plan fingerprint as the error names it: ``default`` is the default plan; a note in parentheses stays."""
    base, sep, note = key.partition(" (")
    return ("the default plan" if base == "default" else f"plan {base}") + (f" ({note}" if sep else "")
