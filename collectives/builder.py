"""Build schedules in program order; dependencies are derived automatically.

Algorithms (baselines, the synthesizer) describe a schedule as a sequence of
operations, as if run one after another. :class:`ScheduleBuilder` turns that
into dataflow: each new op depends on exactly the earlier ops of its rank it
conflicts with (read-after-write, write-after-read, write-after-write on a
common chunk), so independent ops may run concurrently while the result is
the same as the sequential program's.

Example (a two-rank allgather):
    >>> from ccsynth.collectives.spec import Collective
    >>> b = ScheduleBuilder(Collective("allgather", 2), "pairwise")
    >>> for r in range(2):
    ...     _ = b.copy(r, ("i", 0), ("o", r))
    >>> _ = b.transfer(0, 1, ("i", 0), ("o", 0))
    >>> _ = b.transfer(1, 0, ("i", 0), ("o", 1))
    >>> len(b.build().ops)
    6
"""

from __future__ import annotations

from collections.abc import Iterable

from ccsynth.collectives.schedule import Chunks, Op, Schedule
from ccsynth.collectives.spec import Collective

__all__ = ["ScheduleBuilder"]


class ScheduleBuilder:
    """Accumulates ops; ``build()`` returns the immutable :class:`Schedule`."""

    def __init__(self, collective: Collective, name: str, *, topology: str = "", scratch_chunks: int = 0):
        self.collective = collective
        self.name = name
        self.topology = topology
        self.scratch_chunks = scratch_chunks
        self._ops: list[Op] = []
        # (rank, buf, idx) -> last writer op id, and readers since that write
        self._writer: dict[tuple[int, str, int], int] = {}
        self._readers: dict[tuple[int, str, int], list[int]] = {}

    # ----------------------------------------------------------- internals
    def _deps(self, rank: int, reads: Iterable[Chunks], writes: Iterable[Chunks], extra: Iterable[int]) -> tuple[int, ...]:
        deps: set[int] = set(extra)
        for c in reads:
            for i in c.indices():
                w = self._writer.get((rank, c.buf, i))
                if w is not None:
                    deps.add(w)
        for c in writes:
            for i in c.indices():
                key = (rank, c.buf, i)
                w = self._writer.get(key)
                if w is not None:
                    deps.add(w)
                deps.update(self._readers.get(key, ()))
        return tuple(sorted(deps))

    def _add(self, rank: int, kind: str, *, src=None, dst=None, peer=-1, reduce=False, deps=(), channel=0) -> int:
        src = Chunks.of(src) if src is not None else None
        dst = Chunks.of(dst) if dst is not None else None
        op = Op(len(self._ops), rank, kind, src, dst, peer, reduce, (), channel)
        reads, writes = op.reads(), op.writes()
        dep_ids = self._deps(rank, reads, writes, deps)
        op = Op(op.id, rank, kind, src, dst, peer, reduce, dep_ids, channel)
        self._ops.append(op)
        for c in reads:
            for i in c.indices():
                self._readers.setdefault((rank, c.buf, i), []).append(op.id)
        for c in writes:
            for i in c.indices():
                self._writer[(rank, c.buf, i)] = op.id
                self._readers[(rank, c.buf, i)] = []
        if src is not None and src.buf == "s":
            self.scratch_chunks = max(self.scratch_chunks, src.index + src.count)
        if dst is not None and dst.buf == "s":
            self.scratch_chunks = max(self.scratch_chunks, dst.index + dst.count)
        return op.id

    # ------------------------------------------------------------- public
    def copy(self, rank: int, src, dst, *, deps: Iterable[int] = (), channel: int = 0) -> int:
        """``dst = src`` on ``rank``; returns the op id."""
        return self._add(rank, "copy", src=src, dst=dst, deps=deps, channel=channel)

    def reduce(self, rank: int, src, dst, *, deps: Iterable[int] = (), channel: int = 0) -> int:
        """``dst = dst (op) src`` on ``rank``; returns the op id."""
        return self._add(rank, "reduce", src=src, dst=dst, deps=deps, channel=channel)

    def send(self, rank: int, peer: int, src, *, deps: Iterable[int] = (), channel: int = 0) -> int:
        return self._add(rank, "send", src=src, peer=peer, deps=deps, channel=channel)

    def recv(self, rank: int, peer: int, dst, *, reduce: bool = False, deps: Iterable[int] = (), channel: int = 0) -> int:
        return self._add(rank, "recv", dst=dst, peer=peer, reduce=reduce, deps=deps, channel=channel)

    def transfer(
        self,
        src_rank: int,
        dst_rank: int,
        src,
        dst,
        *,
        reduce: bool = False,
        send_deps: Iterable[int] = (),
        recv_deps: Iterable[int] = (),
        channel: int = 0,
    ) -> tuple[int, int]:
        """A matched send on ``src_rank`` and recv on ``dst_rank``.

        With ``reduce=True`` the received chunks are combined into ``dst``.
        Returns ``(send_id, recv_id)``.
        """
        s = self.send(src_rank, dst_rank, src, deps=send_deps, channel=channel)
        r = self.recv(dst_rank, src_rank, dst, reduce=reduce, deps=recv_deps, channel=channel)
        return s, r

    @property
    def n_ops(self) -> int:
        return len(self._ops)

    def build(self, **meta) -> Schedule:
        return Schedule(self.name, self.collective, tuple(self._ops), self.scratch_chunks, self.topology, dict(meta))
