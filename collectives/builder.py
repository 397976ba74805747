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

from ccsynth.collectives.schedule import Chunks, Op, Schedule, new_op
from ccsynth.collectives.spec import Collective

__all__ = ["ScheduleBuilder"]


#: a chunk's key in the builder's tables: (rank, buffer, index) packed in one int (no tuple per access)
_BUF_BITS = {"i": 0 << 32, "o": 1 << 32, "s": 2 << 32}


class ScheduleBuilder:
    """Accumulates ops; ``build()`` returns the immutable :class:`Schedule`.

    Chunk ranges given as tuples are made :class:`Chunks` once per builder
    and shared by every op that names them; a chunk's last writer and its
    readers since are kept under one int per (rank, buffer, index).
    """

    def __init__(self, collective: Collective, name: str, *, topology: str = "", scratch_chunks: int = 0):
        self.collective = collective
        self.name = name
        self.topology = topology
        self.scratch_chunks = scratch_chunks
        self._ops: list[Op] = []
        # chunk key (see _BUF_BITS) -> last writer op id, and the readers since that write
        self._writer: dict[int, int] = {}
        self._readers: dict[int, list[int]] = {}
        self._chunks: dict[tuple, Chunks] = {}

    # ----------------------------------------------------------- internals
    def _range(self, value) -> Chunks:
        """``value`` as a shared :class:`Chunks` (see the class docstring)."""
        if type(value) is tuple:
            c = self._chunks.get(value)
            if c is None:
                c = self._chunks[value] = Chunks.of(value)
            return c
        return Chunks.of(value)

    def _add(self, rank: int, kind: str, *, src=None, dst=None, peer=-1, reduce=False, deps=(), channel=0) -> int:
        chunks = self._chunks
        if src is not None:  # as _range(src), inlined (millions of calls)
            if type(src) is tuple:
                c = chunks.get(src)
                if c is None:
                    c = chunks[src] = Chunks.of(src)
                src = c
            else:
                src = Chunks.of(src)
        if dst is not None:
            if type(dst) is tuple:
                c = chunks.get(dst)
                if c is None:
                    c = chunks[dst] = Chunks.of(dst)
                dst = c
            else:
                dst = Chunks.of(dst)
        op_id = len(self._ops)
        # what the op reads and writes on its rank (as Op.reads() / Op.writes() say)
        reads: tuple[Chunks, ...]
        writes: tuple[Chunks, ...]
        if kind == "send" and src is not None:
            reads, writes = (src,), ()
        elif kind == "recv" and dst is not None:
            reads, writes = ((dst,) if reduce else ()), (dst,)
        elif kind == "copy" and src is not None and dst is not None:
            reads, writes = (src,), (dst,)
        elif kind == "reduce" and src is not None and dst is not None:
            reads, writes = (src, dst), (dst,)
        else:  # a range the kind needs is missing (Op says which), or an unknown kind (the Schedule says)
            probe = Op(op_id, rank, kind, src, dst, peer, reduce, (), channel)
            reads, writes = probe.reads(), probe.writes()
        writer, readers = self._writer, self._readers
        w_get, r_get = writer.get, readers.get
        base = rank << 34
        found = list(deps) if deps else []
        for c in reads:
            k0 = (base | _BUF_BITS[c.buf]) + c.index
            if c.count == 1:
                w = w_get(k0)
                if w is not None:
                    found.append(w)
                continue
            for k in range(k0, k0 + c.count):
                w = w_get(k)
                if w is not None:
                    found.append(w)
        for c in writes:
            k0 = (base | _BUF_BITS[c.buf]) + c.index
            for k in range(k0, k0 + c.count):
                w = w_get(k)
                if w is not None:
                    found.append(w)
                rs = r_get(k)
                if rs:
                    found.extend(rs)
        dep_ids = (found[0],) if len(found) == 1 else tuple(sorted(set(found))) if found else ()
        self._ops.append(new_op(op_id, rank, kind, src, dst, peer, reduce, dep_ids, channel))
        for c in reads:
            k0 = (base | _BUF_BITS[c.buf]) + c.index
            for k in range(k0, k0 + c.count):
                rs = r_get(k)
                if rs is None:
                    readers[k] = [op_id]
                else:
                    rs.append(op_id)
        pop = readers.pop
        for c in writes:
            k0 = (base | _BUF_BITS[c.buf]) + c.index
            for k in range(k0, k0 + c.count):
                writer[k] = op_id
                pop(k, None)
        if src is not None and src.buf == "s" and src.index + src.count > self.scratch_chunks:
            self.scratch_chunks = src.index + src.count
        if dst is not None and dst.buf == "s" and dst.index + dst.count > self.scratch_chunks:
            self.scratch_chunks = dst.index + dst.count
        return op_id

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
        s = self._add(src_rank, "send", src=src, peer=dst_rank, deps=send_deps, channel=channel)
        r = self._add(dst_rank, "recv", dst=dst, peer=src_rank, reduce=reduce, deps=recv_deps, channel=channel)
        return s, r

    @property
    def n_ops(self) -> int:
        return len(self._ops)

    def build(self, **meta) -> Schedule:
        return Schedule(self.name, self.collective, tuple(self._ops), self.scratch_chunks, self.topology, dict(meta))
