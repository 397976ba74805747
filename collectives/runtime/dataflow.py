"""The dataflow run loop: start every slice as soon as the slices it waits for are done.

:func:`run_dataflow` runs one bound layout (:mod:`.layout`,
:mod:`.binding`). Every node has a counter of predecessors not yet done;
the loop keeps a queue of ready nodes and a list of requests in flight:

* a ready send or receive slice starts its request (``Isend``/``Irecv``
  with the call's tag base plus its slice tag; a send of scattered chunks
  first packs them into staging) and joins the list in flight; it is done
  when MPI says so;
* a ready local slice (copies, reductions, the fused receive-reduce-copy)
  runs its kernels and is done at once;
* a receive-reduce slice was posted at the start (its request receives
  into private staging while the data it reduces into is still being
  computed); its counter includes its own arrival, so it becomes ready
  when both the data and its predecessors are there;
* a done node decrements its successors' counters; those reaching zero
  join the queue;
* only when nothing is ready does the loop wait (``wait_some``: MPI's
  ``Waitsome``, or polling with yields), for any of the requests in flight
  and for the control line's posted receive, always at index 0 of the
  list: a notice from a rank whose call failed wakes the loop, which then
  raises the same error (:meth:`~.channel.Channel.notice`).

There is no step barrier. Every receive slice that completes has its byte
count (from the MPI status) compared with what the slice expects
(:mod:`.failures`). Completed requests become null requests in the list in
flight (MPI skips them), which is compacted only now and then. On a device
the loop synchronises before MPI touches memory that a queued kernel
writes (a ``dirty`` flag), and at the end.

The loop receives its MPI and kernel calls as arguments (:mod:`.primitives`):
a profiled run passes timed ones (:mod:`.profiling`) to this same code.
"""

from __future__ import annotations

from collections import deque

from ccsynth.collectives.runtime.binding import Binding
from ccsynth.collectives.runtime.channel import Channel
from ccsynth.collectives.runtime.constants import K_RECV, K_RRED, K_SEND, W_FUSED, W_REDUCE
from ccsynth.collectives.runtime.failures import RunFailures
from ccsynth.collectives.runtime.layout import Layout
from ccsynth.collectives.runtime.primitives import Kernels, MpiCalls

__all__ = ["run_dataflow"]


def run_dataflow(lay: Layout, bnd: Binding, kernels: Kernels, mpi: MpiCalls, failures: RunFailures,
                 ch: Channel) -> None:
    """Run every slice node of ``lay`` on the views of ``bnd``, as call ``ch.seq`` of channel ``ch``.

    Stages: 1. post the early receives (:func:`_post_early_receives`); until every node is done, 2. run the
    ready nodes, 3. wait and finish the nodes of completed requests (both inline: they run once per node, where
    a call would cost more than the rest), 4. retire completed requests (:func:`_retire`).
    """
    red = kernels.reduce
    fred = kernels.fused
    copy = kernels.copy
    sync = kernels.sync
    device = kernels.device
    isend = mpi.isend
    irecv = mpi.irecv
    wait_some = mpi.wait_some
    MPIError = mpi.error
    BYTE = mpi.byte
    sts = mpi.statuses  # MPI fills one status per completed request (grows as needed)
    NULL = mpi.null
    comm = ch.comm
    base = ch.base  # this call's tags: base + the slice tag
    expect = lay.expect
    cnt = lay.cnt0[:]
    succ = lay.succ
    kind = lay.kind
    msgs = bnd.msgs
    work = bnd.work
    left = lay.n_nodes
    dirty = False
    if device:
        sync()  # kernels the caller queued on the buffers must finish before MPI touches them
    active, anodes = _post_early_receives(lay, bnd, mpi, ch)
    live = len(active) - 1  # requests in flight; completed ones become NULL until compacted
    ready = deque(lay.ready0)
    pop = ready.popleft
    push = ready.append
    while True:
        while ready:
            v = pop()
            k = kind[v]
            if k in (K_SEND, K_RECV):
                if k == K_SEND:
                    if work[v] is not None:
                        for _, d, s, _ in work[v]:
                            copy(d, s)
                        dirty = device
                    if dirty:
                        sync()
                        dirty = False
                    d, peer, tag = msgs[v]
                    active.append(isend(comm, d, peer, base + tag))
                else:
                    if dirty:
                        sync()
                        dirty = False
                    d, peer, tag = msgs[v]
                    active.append(irecv(comm, d, peer, base + tag))
                anodes.append(v)
                live += 1
                continue
            w = work[v]
            if w is not None:
                for mode, d, s, s2 in w:
                    if mode == W_REDUCE:
                        red(d, s)
                    elif mode == W_FUSED:
                        fred(d, s, s2)
                    else:
                        copy(d, s)
                dirty = device
            left -= 1
            for x in succ[v]:
                c = cnt[x] - 1
                cnt[x] = c
                if c == 0:
                    push(x)
        if left == 0:
            break
        if not live:  # pragma: no cover - excluded by the compile-time checks
            raise failures.stalled(left)
        try:
            done = wait_some(active, sts)
        except MPIError as e:  # try costs nothing until it raises (Python >= 3.11)
            raise failures.wait_failed(lay, e, active, anodes, base) from e
        j = -1  # sts[j] is the status of done[j] (an index is cheaper than zip here)
        for i in done:
            j += 1
            v = anodes[i]
            if v < 0:  # the control line: raises if the notice is about this call
                ch.notice(sts[j])
                live += 1  # (not one of ours: undo the count below)
                continue
            k = kind[v]
            # MPI accepts a message shorter than the receive buffer without complaint
            if k != K_SEND and sts[j].Get_count(BYTE) != expect[v]:
                raise failures.count_mismatch(lay, v, sts[j].Get_count(BYTE))
            if k == K_RRED:  # the data arrived; the reduction may still wait for deps
                c = cnt[v] - 1
                cnt[v] = c
                if c == 0:
                    push(v)
                continue
            if k == K_RECV and work[v] is not None:
                for _, d, s, _ in work[v]:
                    copy(d, s)
                dirty = device
            # done, as a local node above (written out twice: a call per node would cost more than the rest)
            left -= 1
            for x in succ[v]:
                c = cnt[x] - 1
                cnt[x] = c
                if c == 0:
                    push(x)
        live -= len(done)
        _retire(active, anodes, done, live, NULL)
    if dirty:
        sync()


def _post_early_receives(lay: Layout, bnd: Binding, mpi: MpiCalls, ch: Channel) -> tuple[list, list[int]]:
    """Stage 1: the requests in flight (index 0: the control line, a notice that another rank's call failed,
    node -1) and the receives posted before anything runs (``lay.pre``); returns (requests, their nodes)."""
    inflight = bnd.inflight
    active = inflight.active
    anodes = inflight.nodes
    active[:] = [ch.ctrl]
    anodes[:] = [-1]
    for v in lay.pre:
        d, peer, tag = bnd.msgs[v]
        active.append(mpi.irecv(ch.comm, d, peer, ch.base + tag))
        anodes.append(v)
    return active, anodes


def _retire(active: list, anodes: list[int], done, live: int, null) -> None:
    """Stage 4: the requests ``done`` have completed, ``live`` are still in flight: clear them all when none is,
    else mark them null (MPI skips null requests) and compact only once they outnumber the live ones."""
    if not live:
        del active[1:]
        del anodes[1:]
        return
    for i in done:
        if i:
            active[i] = null
    dead = len(active) - 1 - live
    if dead > 16 and dead > live:
        keep = [j for j, q in enumerate(active) if j == 0 or q is not null]
        active[:] = [active[j] for j in keep]
        anodes[:] = [anodes[j] for j in keep]
