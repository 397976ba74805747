"""The straight-line run loop: a small call's fixed list of instructions, run in order.

When every op of a call is one slice and no message exceeds
``static_max_bytes``, the executor runs the rank's program as a fixed list
of instructions instead of the dataflow loop: start these requests, wait
for that receive, reduce, copy. The order is planned once per layout and
bound once per pair of buffers by :mod:`ccsynth.collectives.static_program`,
whose design note also proves that the order cannot deadlock. This module
holds the loop that runs a bound program (:func:`run_straight_line`): one
``Start`` per message, one wait per receive (its byte count checked, as in
the dataflow loop), the kernels in between, and a wait for every send at
the end. It costs far less Python per message than the dataflow loop.

Like the dataflow loop it receives its MPI and kernel calls as arguments
(:mod:`.primitives`), so that a profiled run times this same code
(:mod:`.profiling`).
"""

from __future__ import annotations

from ccsynth.collectives.runtime.binding import Binding
from ccsynth.collectives.runtime.constants import I_COPY, I_FUSED, I_REDUCE, I_START, I_STARTALL, I_WAIT
from ccsynth.collectives.runtime.failures import RunFailures
from ccsynth.collectives.runtime.layout import Layout
from ccsynth.collectives.runtime.primitives import Kernels, MpiCalls

__all__ = ["run_straight_line"]


def run_straight_line(lay: Layout, bnd: Binding, kernels: Kernels, mpi: MpiCalls, failures: RunFailures) -> None:
    """Run the bound straight-line program of ``bnd`` (see :mod:`ccsynth.collectives.static_program`)."""
    program = bnd.static
    red, fred, copy, sync = kernels.reduce, kernels.fused, kernels.copy, kernels.sync
    start, startall, wait_one = mpi.start, mpi.startall, mpi.wait_one
    MPIError = mpi.error
    status = mpi.status
    BYTE = mpi.byte
    if kernels.device:
        sync()  # kernels the caller queued on the buffers must finish before MPI touches them
    for code, a, b, c in program.instructions:
        if code == I_START:
            start(a)
        elif code == I_WAIT:
            try:
                wait_one(a, status)
            except MPIError as e:
                raise failures.single_wait_failed(lay, e, c) from e
            if status.Get_count(BYTE) != b:
                raise failures.count_mismatch(lay, c, status.Get_count(BYTE))
        elif code == I_FUSED:
            fred(a, b, c)
        elif code == I_REDUCE:
            red(a, b)
        elif code == I_COPY:
            copy(a, b)
        elif code == I_STARTALL:
            startall(a)
        else:  # I_SYNC
            sync()
    if program.sends:
        mpi.wait_all(program.sends)  # every send has completed before the call returns
