"""The MPI side of a ``ccsynth.reshard`` call: agree, share the plan, run it on a duplicate of the communicator.

:func:`ccsynth.reshard <ccsynth.synth.reshard.api.reshard>` plans (in the
synthesizer's layer) and hands this module what concerns MPI:

* :func:`agree` -- every rank's arguments are good: one small allreduce,
  in which a rank with an error takes part with its rank, so one rank's
  mistake is every rank's error (:class:`~ccsynth.errors.PeerError` naming
  the rank elsewhere) and no rank is left waiting; it also checks that all
  ranks agree on whether the plan is cached, so that no rank plans while
  another runs;
* :func:`plan_on_root` -- rank 0 plans, every rank receives its result (or
  its error), so every rank runs the same plan and a planning error is
  raised on every rank alike;
* :func:`must_stage` -- whether device shards go through pinned host
  memory (the communicator's rule, :func:`~ccsynth.collectives.staging.decide`;
  the MPI library's CUDA-awareness asked once per process);
* :func:`run` -- the plan (:class:`~ccsynth.collectives.reshard_program.ReshardProgram`)
  on a duplicate of the communicator kept per communicator, each call
  numbered so that its tags cannot meet another call's messages.

The duplicates and the host stand-ins are kept per process until
:func:`release`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

from ccsynth.collectives.reshard_program import ShardProgram
from ccsynth.collectives.staging import STAGING_MODES, Stager, decide
from ccsynth.errors import LayoutError, PeerError
from ccsynth.kernels import is_device_array
from ccsynth.kernels.devices import Awareness, cuda_awareness

__all__ = ["Agreement", "agree", "plan_on_root", "must_stage", "run", "release"]

_channels: dict = {}  # communicator handle -> [duplicate, call counter]
_stager = Stager()  # pinned host stand-ins of device shards, kept across calls (as the communicator's)
_awareness: list[Awareness] = []  # the MPI library's CUDA-awareness, asked once


def _mpi():
    from mpi4py import MPI  # initialises MPI: only when a resharding runs

    return MPI


#: a plan number no rank has (what a rank without a cached plan contributes to the smallest plan number)
_NO_PLAN = 1 << 62


class Agreement:
    """The per-call agreement, started without waiting: one ``Iallreduce`` of five integers.

    Every rank contributes its error (its rank + 1, or 0), whether its plan
    was cached, and that plan's number (plans are numbered in the order they
    are made, alike on every rank that made the same calls). :meth:`verdict`
    waits for it and raises on every rank if any rank has an error, if the
    ranks disagree on whether the plan is cached, or on which plan it is.
    A rank may run an ``alltoallv`` plan before it waits (the exchange then
    needs one synchronisation, not two); :attr:`join` tells a rank that had
    no cached plan which plan the others are running, so that it takes part
    (with blank buffers) and nobody is left waiting.
    """

    def __init__(self, comm, error: Exception | None, plan: int | None) -> None:
        MPI = _mpi()
        self.error = error
        cached, number = (0, -1) if plan is None else (1, plan)
        self.code = np.array([comm.rank + 1 if error is not None else 0, cached, -cached,
                              number + 1, -(number + 1) if cached else -_NO_PLAN], dtype=np.int64)
        self.request = comm.Iallreduce(MPI.IN_PLACE, self.code, op=MPI.MAX)
        self.done = False

    def wait(self) -> None:
        if not self.done:
            self.request.Wait()
            self.done = True

    @property
    def join(self) -> int | None:
        """The plan number the ranks with a cached plan run (None if none has one); waits."""
        self.wait()
        return int(self.code[3]) - 1 if int(self.code[1]) == 1 else None

    def verdict(self) -> None:
        """Raise (on every rank alike) unless every rank's arguments are good and the ranks agree; waits."""
        self.wait()
        first, some_cached, min_cached = int(self.code[0]), int(self.code[1]), -int(self.code[2])
        disagree = some_cached == 1 and (min_cached == 0 or int(self.code[3]) != -int(self.code[4]))
        if first == 0 and not disagree:
            return
        if first == 0:
            raise PeerError("the ranks disagree on whether (or which) this resharding was planned before "
                            "(a rank skipped a call?)")
        if self.error is not None:
            raise self.error
        raise PeerError(f"rank {first - 1} failed in ccsynth.reshard (see its error); no data returned")


def agree(comm, error: Exception | None, cached: bool) -> None:
    """Every rank raises if any rank has an ``error``, or if the ranks disagree on ``cached`` (one allreduce)."""
    Agreement(comm, error, 0 if cached else None).verdict()


def plan_on_root(comm, make: Callable[[], tuple[str | None, str | None]]) -> str:
    """Rank 0's ``make()`` -> ``(plan text, error)``, on every rank: the text, or :class:`LayoutError` with the error."""
    text, error = make() if comm.rank == 0 else (None, None)
    text, error = comm.bcast((text, error), root=0)
    if error is not None:
        raise LayoutError(f"planning the resharding failed: {error}")
    return text


def must_stage(staging: str, arrays: Iterable) -> bool:
    """Whether this rank's device shards go through host stand-ins (the communicator's rule, :func:`decide`)."""
    if staging not in STAGING_MODES:
        raise LayoutError(f"staging must be one of {', '.join(STAGING_MODES)}, got {staging!r}")
    if not any(a is not None and is_device_array(a) for a in arrays):
        return False
    if not _awareness:
        _awareness.append(cuda_awareness(_mpi()))
    return decide(staging, _awareness[0], "ccsynth.reshard")


def run(comm, prog: ShardProgram, stride: int, local_shard, out, *, stage: bool, blank: bool = False):
    """Run ``prog`` on this communicator's duplicate as its next resharding call (host stand-ins if ``stage``).

    ``blank``: take part with zeros for a source shard and no destination (a rank whose own arguments are bad,
    or that has no plan of its own, while the others already run theirs); returns None.
    """
    if blank:
        local_shard = None if prog.src_shape is None else np.zeros(prog.src_shape, prog.dtype)
        out, stage = None, False
    key = comm.py2f()
    ch = _channels.get(key)
    if ch is None:
        ch = _channels[key] = [comm.Dup(), 0]
    dup, call = ch
    ch[1] += 1
    ub = dup.Get_attr(_mpi().TAG_UB) or 32767
    span = max(1, ub // stride)
    if stage:
        return prog.run_staged(dup, local_shard, out, _stager, call=call % span, stride=stride)
    result = prog.run(dup, local_shard, out, call=call % span, stride=stride)
    return None if blank else result


def release() -> None:
    """Free the duplicated communicators and forget the host stand-ins."""
    _stager.clear()
    for dup, _ in _channels.values():
        try:
            dup.Free()
        except Exception:  # noqa: BLE001 - MPI may be finalised already
            pass
    _channels.clear()
