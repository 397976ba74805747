"""The straight-line run loop: a small call's fixed list of instructions, run in order.

When every op of a call is one slice and no message exceeds
``static_max_bytes``, the executor runs the rank's program as a fixed list
of instructions instead of the dataflow loop: post these sends and
receives, wait for that receive, reduce, copy. The order is planned once per layout and
bound once per pair of buffers by :mod:`ccsynth.collectives.static_program`,
whose design note also proves that the order cannot deadlock. This module
holds the loop that runs a bound program (:func:`run_straight_line`): one
``Isend``/``Irecv`` per message (tagged with the call's number:
:mod:`.channel`), one wait per receive (its byte count checked, as in the
dataflow loop; the wait also watches the control line, which raises when
another rank's call failed), the kernels in between, and a wait for every
send at the end. It costs far less Python per message than the dataflow loop.

Like the dataflow loop it receives its MPI and kernel calls as arguments
(:mod:`.primitives`), so that a profiled run times this same code
(:mod:`.profiling`).
"""

from __future__ import annotations

from ccsynth.collectives.runtime.binding import Binding
from ccsynth.collectives.runtime.channel import Channel
from ccsynth.collectives.runtime.constants import I_COPY, I_FUSED, I_RECV, I_REDUCE, I_SEND, I_WAIT
from ccsynth.collectives.runtime.failures import RunFailures
from ccsynth.collectives.runtime.layout import Layout
from ccsynth.collectives.runtime.primitives import Kernels, MpiCalls
from ccsynth.errors import ScheduleError

__all__ = ["run_straight_line"]


def run_straight_line(lay: Layout, bnd: Binding, kernels: Kernels, mpi: MpiCalls, failures: RunFailures,
                      ch: Channel) -> None:
    """Run the bound straight-line program of ``bnd`` as call ``ch.seq`` (see :mod:`ccsynth.collectives.static_program`)."""
    program = bnd.static
    if program is None:  # the executor takes this path only for a binding with a straight-line program
        raise ScheduleError("this binding has no straight-line program")
    red, fred, copy, sync = kernels.reduce, kernels.fused, kernels.copy, kernels.sync
    isend, irecv, wait_any = mpi.isend, mpi.irecv, mpi.wait_any
    MPIError = mpi.error
    status = mpi.status
    BYTE = mpi.byte
    comm = ch.comm
    base = ch.base  # this call's tags: base + the slice tag
    inflight = bnd.inflight
    recvs = inflight.recvs
    sends = inflight.sends
    recvs.clear()
    sends.clear()
    pair = [None, ch.ctrl]  # a receive, and the control line (a notice that another rank's call failed)
    if kernels.device:
        sync()  # kernels the caller queued on the buffers must finish before MPI touches them
    for code, a, b, c in program.instructions:
        if code == I_SEND:
            sends.append(isend(comm, a, b, base + c))
        elif code == I_RECV:
            recvs.append(irecv(comm, a, b, base + c))
        elif code == I_WAIT:
            pair[0] = recvs[a]
            try:
                while wait_any(pair, status):  # 1: the control line; raises if the notice is about this call
                    ch.notice(status)
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
        else:  # I_SYNC
            sync()
    if sends and not mpi.test_all(sends):
        ch.wait_watching(sends, mpi)  # every send has completed before the call returns
