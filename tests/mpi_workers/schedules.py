"""Hand-built schedules for the executor and communicator tests.

Written with ScheduleBuilder so that the tests do not depend on the
baselines module; each mirrors a textbook algorithm.
"""

from __future__ import annotations

from ccsynth.collectives.builder import ScheduleBuilder
from ccsynth.collectives.spec import Collective


def ring_allreduce(n: int, pipeline: int = 1, *, via_scratch: bool = False):
    """Ring allreduce: reduce-scatter then allgather around 0 -> 1 -> ... -> n-1 -> 0.

    ``pipeline`` cuts every ring chunk into that many chunks (chunk factor
    n * pipeline). ``via_scratch`` receives into scratch and reduces with a
    separate reduce op instead of a receive-reduce.
    """
    c = n * pipeline
    b = ScheduleBuilder(Collective("allreduce", n, chunk_factor=c), f"hand_ring_allreduce_p{pipeline}{'_s' if via_scratch else ''}")
    for r in range(n):
        b.copy(r, ("i", 0, c), ("o", 0, c))
    if n == 1:
        return b.build()
    for s in range(n - 1):
        for r in range(n):
            k = ((r - s) % n) * pipeline
            nxt = (r + 1) % n
            if via_scratch:
                b.transfer(r, nxt, ("o", k, pipeline), ("s", 0, pipeline))
                b.reduce(nxt, ("s", 0, pipeline), ("o", k, pipeline))
            else:
                b.transfer(r, nxt, ("o", k, pipeline), ("o", k, pipeline), reduce=True)
    for s in range(n - 1):
        for r in range(n):
            k = ((r + 1 - s) % n) * pipeline
            b.transfer(r, (r + 1) % n, ("o", k, pipeline), ("o", k, pipeline))
    return b.build()


def recursive_doubling_allreduce(n: int):
    """Butterfly allreduce for a power-of-two rank count (one chunk)."""
    if n & (n - 1):
        raise ValueError("recursive doubling needs a power of two")
    b = ScheduleBuilder(Collective("allreduce", n), "hand_rd_allreduce")
    for r in range(n):
        b.copy(r, ("i", 0), ("o", 0))
    d = 1
    while d < n:
        for r in range(n):
            b.send(r, r ^ d, ("o", 0))
        for r in range(n):
            b.recv(r, r ^ d, ("o", 0), reduce=True)
        d *= 2
    return b.build()


def ring_allgather(n: int, chunk_factor: int = 1):
    c = chunk_factor
    b = ScheduleBuilder(Collective("allgather", n, chunk_factor=c), f"hand_ring_allgather_c{c}")
    for r in range(n):
        b.copy(r, ("i", 0, c), ("o", r * c, c))
    for s in range(n - 1):
        for r in range(n):
            k = ((r - s) % n) * c
            b.transfer(r, (r + 1) % n, ("o", k, c), ("o", k, c))
    return b.build()


def ring_reduce_scatter(n: int, chunk_factor: int = 1):
    """Reduce-scatter on scratch (copy input, ring-reduce, copy own chunk out)."""
    c = chunk_factor
    b = ScheduleBuilder(Collective("reduce_scatter", n, chunk_factor=c), f"hand_ring_reduce_scatter_c{c}", scratch_chunks=n * c)
    for r in range(n):
        b.copy(r, ("i", 0, n * c), ("s", 0, n * c))
    for s in range(n - 1):
        for r in range(n):
            k = ((r - s - 1) % n) * c
            b.transfer(r, (r + 1) % n, ("s", k, c), ("s", k, c), reduce=True)
    for r in range(n):
        b.copy(r, ("s", r * c, c), ("o", 0, c))
    return b.build()


def direct_alltoall(n: int, chunk_factor: int = 1):
    c = chunk_factor
    b = ScheduleBuilder(Collective("alltoall", n, chunk_factor=c), f"hand_direct_alltoall_c{c}")
    for r in range(n):
        b.copy(r, ("i", r * c, c), ("o", r * c, c))
    for s in range(1, n):
        for r in range(n):
            p = (r + s) % n
            b.transfer(r, p, ("i", p * c, c), ("o", r * c, c))
    return b.build()


def direct_broadcast(n: int, root: int = 0):
    b = ScheduleBuilder(Collective("broadcast", n, root=root), "hand_direct_broadcast")
    b.copy(root, ("i", 0), ("o", 0))
    for r in range(n):
        if r != root:
            b.transfer(root, r, ("i", 0), ("o", 0))
    return b.build()


def chain_broadcast(n: int, root: int = 0, pieces: int = 4):
    """Pipelined chain root -> root+1 -> ...: every rank forwards what it received."""
    b = ScheduleBuilder(Collective("broadcast", n, chunk_factor=pieces, root=root), f"hand_chain_broadcast_p{pieces}")
    b.copy(root, ("i", 0, pieces), ("o", 0, pieces))
    for j in range(pieces):
        for s in range(n - 1):
            a, d = (root + s) % n, (root + s + 1) % n
            b.transfer(a, d, ("o", j), ("o", j))
    return b.build()


def direct_reduce(n: int, root: int = 0):
    b = ScheduleBuilder(Collective("reduce", n, root=root), "hand_direct_reduce")
    b.copy(root, ("i", 0), ("o", 0))
    for r in range(n):
        if r != root:
            b.transfer(r, root, ("i", 0), ("o", 0), reduce=True)
    return b.build()


def scratch_gather_allgather(n: int, chunk_factor: int = 2):
    """Allgather through scratch with multi-chunk messages (exercises scratch layout and unpacking)."""
    c = chunk_factor
    b = ScheduleBuilder(Collective("allgather", n, chunk_factor=c), f"hand_scratch_allgather_c{c}", scratch_chunks=n * c)
    for r in range(n):
        b.copy(r, ("i", 0, c), ("s", r * c, c))
    for s in range(n - 1):
        for r in range(n):
            k = ((r - s) % n) * c
            b.transfer(r, (r + 1) % n, ("s", k, c), ("s", k, c))
    for r in range(n):
        b.copy(r, ("s", 0, n * c), ("o", 0, n * c))
    return b.build()


def all_hand_schedules(n: int) -> list:
    """Every hand-built schedule that exists for ``n`` ranks."""
    out = [
        ring_allreduce(n),
        ring_allreduce(n, pipeline=2),
        ring_allreduce(n, via_scratch=True),
        ring_allgather(n),
        ring_allgather(n, chunk_factor=3),
        ring_reduce_scatter(n),
        ring_reduce_scatter(n, chunk_factor=2),
        direct_alltoall(n),
        direct_alltoall(n, chunk_factor=2),
        direct_broadcast(n, root=n - 1),
        chain_broadcast(n, root=0),
        direct_reduce(n, root=n // 2),
        scratch_gather_allgather(n),
    ]
    if n & (n - 1) == 0:
        out.append(recursive_doubling_allreduce(n))
    return out
