"""Lowering (the synthesizer's last stage): waves of moves -> a :class:`~ccsynth.collectives.schedule.Schedule`.

Input: per phase of a collective, the :class:`~ccsynth.synth.contiguity.Waves`
of a :class:`~ccsynth.synth.ordering.TransferPlan` -- representative moves
(one piece over one connection) grouped into waves on every representative
connection, with their estimated start and end times. Output: a schedule
built with :class:`~ccsynth.collectives.builder.ScheduleBuilder`, which adds
every data dependency (a rank forwards a piece only after receiving it, a
reduction waits for the partial sums it combines); the lowering adds only
the order of the waves on each connection.

* **Actual moves.** The symmetry group expands every representative move
  to its images (``g(e)`` for each element ``g``; the piece's chunk mapped
  accordingly). They are emitted in time order, a wave when its first move
  is due, so the program order of every rank follows the plan.
* **Wave window.** On each connection wave ``k`` waits for the sends of
  wave ``k - window``: ``window=1`` runs the waves one after another (FIFO,
  as planned); ``2`` lets two waves overlap, hiding one wave's latency behind
  the other's data; ``0`` leaves only the data dependencies.
* **Transfers.** The pieces of one wave that are adjacent in both the
  sender's and the receiver's buffer travel as one transfer (one latency).
* **Buffers**, per collective (``c`` pieces per rank):

  - allgather: piece ``(s, j)`` lands in output chunk ``s * c + j`` of every
    rank, relays forward it from there; the owner sends it from its input;
  - reduce-scatter: the allgather on the reversed topology, run backwards in
    time with reductions (:func:`lower_reduce_scatter`);
  - allreduce: reduce-scatter then allgather, partial sums accumulating in
    the output buffer (:func:`lower_allreduce`), or for latency-bound sizes
    an allgather of whole buffers into scratch followed by local reductions
    (:func:`lower_allreduce_gather`);
  - alltoall: piece ``(s, d, j)`` leaves input chunk ``d * c + j`` of ``s``,
    waits in scratch on relays and lands in output chunk ``s * c + j`` of
    ``d``.

The functions take the collective the schedule implements (its chunk factor
is the number of chunks per buffer), the topology it is for and the sketch
that produced the waves (recorded in ``schedule.meta``).

Example:
    >>> from ccsynth.collectives.spec import Collective
    >>> from ccsynth.synth.contiguity import chain_waves, single_waves
    >>> from ccsynth.synth.ordering import order_moves
    >>> from ccsynth.synth.routing import route_allgather
    >>> from ccsynth.synth.sketch import Sketch
    >>> from ccsynth.topologies.model import Link, Topology
    >>> pair = Topology("p", 2, links=(Link(0, 1, 5.0, 10.0), Link(1, 0, 5.0, 10.0)))
    >>> sk = Sketch(symmetry=((1, 2),))
    >>> plan = order_moves(route_allgather(sk.bind(pair), 2, 100.0))   # 2 pieces per rank
    >>> def sends(waves):
    ...     s = lower_allgather(waves, Collective("allgather", 2, 2), pair, sk)
    ...     return [op.describe() for op in s.ops if op.rank == 0 and op.kind == "send"]
    >>> sends(chain_waves(plan))    # a wave per piece: one transfer each
    ['op 2 (rank 0: send i[0] -> rank 1)', 'op 6 (rank 0: send i[1] -> rank 1)']
    >>> sends(single_waves(plan))   # one wave: the adjacent pieces travel together
    ['op 2 (rank 0: send i[0:2] -> rank 1)']
"""

from __future__ import annotations

from dataclasses import dataclass, field
from collections.abc import Callable, Iterable

from ccsynth.collectives.builder import ScheduleBuilder
from ccsynth.collectives.schedule import Schedule
from ccsynth.collectives.spec import Collective
from ccsynth.synth.contiguity import Waves
from ccsynth.synth.paths import Edge
from ccsynth.synth.routing import map_edge
from ccsynth.synth.sketch import Sketch
from ccsynth.topologies.model import Topology

__all__ = ["lower_allgather", "lower_reduce_scatter", "lower_allreduce", "lower_allreduce_gather", "lower_alltoall"]

#: a place for one chunk on a rank: (buffer "i" / "o" / "s", chunk index)
Slot = tuple[str, int]
#: a wave of actual moves: (actual connection, index of the wave on its representative connection)
WaveKey = tuple[Edge, int]


@dataclass(frozen=True)
class _Actual:
    """One actual move (an image of a representative move)."""

    comm: int
    j: int
    u: int
    v: int
    start: float
    end: float
    wave: WaveKey
    depth: int  # hops from where the piece starts


def _actual_moves(waves: Waves) -> list[_Actual]:
    """Every image of every representative move, in time order."""
    plan = waves.plan
    group = plan.lt.group
    elems = group.elements
    depth: dict[int, int] = {}
    for m in plan.moves:  # moves are created in time order, parents first
        depth[m.id] = 0 if m.parent < 0 else depth[m.parent] + 1
    out = []
    for e, wlist in waves.groups.items():
        seq = plan.links[e]
        for g in elems:
            ge = map_edge(g, e)
            for wi, w in enumerate(wlist):
                for pos in w:
                    mid, hi = seq[pos]
                    m = plan.moves[mid]
                    h = elems[hi]
                    gh = tuple(g[x] for x in h)  # g after h
                    out.append(_Actual(plan.map_comm(gh, m.comm), m.j, ge[0], ge[1], waves.start[mid], waves.end[mid],
                                       (ge, wi), depth[mid]))
    out.sort(key=lambda a: (a.start, a.depth, a.end, a.u, a.v, a.comm, a.j))
    return out


def _waves_in_order(actual: list[_Actual]) -> list[tuple[WaveKey, list[_Actual]]]:
    """Group actual moves by wave, waves in order of their first move."""
    waves: dict[WaveKey, list[_Actual]] = {}
    for a in actual:
        waves.setdefault(a.wave, []).append(a)
    return sorted(waves.items(), key=lambda kv: (kv[1][0].start, min(x.depth for x in kv[1]), kv[0]))


class _Chain:
    """Per-connection wave order: wave ``k`` waits for the sends of wave ``k - window`` (see the module doc)."""

    def __init__(self, window: int):
        self.window = window
        self.hist: dict[Edge, list[list[int]]] = {}

    def deps(self, edge: Edge) -> list[int]:
        h = self.hist.get(edge, [])
        if self.window <= 0 or len(h) < self.window:
            return []
        return h[-self.window]

    def push(self, edge: Edge, sends: list[int]) -> None:
        self.hist.setdefault(edge, []).append(sends)


class _Scratch:
    """Hands out scratch chunks in order."""

    def __init__(self) -> None:
        self.used = 0

    def take(self) -> int:
        self.used += 1
        return self.used - 1


def _runs(indices: Iterable[int]) -> list[tuple[int, int]]:
    """Indices -> sorted (first, count) runs of consecutive values."""
    out: list[tuple[int, int]] = []
    for x in sorted(indices):
        if out and out[-1][0] + out[-1][1] == x:
            out[-1] = (out[-1][0], out[-1][1] + 1)
        else:
            out.append((x, 1))
    return out


@dataclass
class _SlotRun:
    """Pieces whose slots follow each other in both buffers: one transfer."""

    src: Slot
    dst: Slot
    staged: bool
    pieces: list[int] = field(default_factory=list)

    @property
    def count(self) -> int:
        return len(self.pieces)


def _slot_runs(items: Iterable[tuple[Slot, Slot, bool, int]]) -> list[_SlotRun]:
    """``(source slot, destination slot, staged, piece)`` items -> transfers, in slot order.

    Consecutive items (by slots) merge when both slots continue the run in
    the same buffers and they agree on staging.
    """
    runs: list[_SlotRun] = []
    for src, dst, staged, p in sorted(items, key=lambda t: (t[0], t[1])):
        if runs:
            r = runs[-1]
            if (r.src[0] == src[0] and r.dst[0] == dst[0] and r.src[1] + r.count == src[1]
                    and r.dst[1] + r.count == dst[1] and r.staged == staged):
                r.pieces.append(p)
                continue
        runs.append(_SlotRun(src, dst, staged, [p]))
    return runs


def _meta(waves_list: list[Waves], sk: Sketch, window: int = 1) -> dict:
    r = waves_list[0].plan.routing
    return {
        "algorithm": "ccsynth-synth",
        "sketch": sk.to_dict(),
        "routing": {"method": r.method, "t_bw_us": r.t_bw_us, "n_vars": r.n_vars, "n_vars_full": r.n_vars_full,
                    "symmetry_order": r.lt.group.order},
        "estimated_us": sum(w.makespan_us for w in waves_list),
        "contiguity": [w.method for w in waves_list],
        "wave_window": window,
    }


# ----------------------------------------------------------------------------- broadcast-style phases
def _emit_forward(b: ScheduleBuilder, waves: Waves, c: int, chain: _Chain, *, buf: str = "o",
                  own_from_input: bool = True) -> None:
    """Emit the broadcast-style moves of ``waves``: piece ``(s, j)`` is chunk ``s * c + j`` of ``buf`` on every rank.

    With ``own_from_input`` a rank sends its own pieces from its input
    buffer (chunk ``j``), otherwise from ``buf`` too.
    """
    for (edge, _wi), group in _waves_in_order(_actual_moves(waves)):
        u, v = edge
        deps = chain.deps(edge)
        sends = []
        for first, count in _runs(a.comm * c + a.j for a in group):
            own = all(x // c == u for x in range(first, first + count))
            src = ("i", first - u * c, count) if own and own_from_input else (buf, first, count)
            s_id, _ = b.transfer(u, v, src, (buf, first, count), send_deps=deps)
            sends.append(s_id)
        chain.push(edge, sends)


def lower_allgather(waves: Waves, collective: Collective, topology: Topology, sk: Sketch, window: int = 1) -> Schedule:
    """Allgather schedule: own pieces copied to the output, relays receive into the output directly."""
    n, c = collective.n_ranks, collective.chunk_factor
    b = ScheduleBuilder(collective, "ccsynth-allgather", topology=topology.name)
    for r in range(n):
        b.copy(r, ("i", 0, c), ("o", r * c, c))
    _emit_forward(b, waves, c, _Chain(window))
    return b.build(**_meta([waves], sk, window))


def lower_allreduce_gather(waves: Waves, collective: Collective, topology: Topology, sk: Sketch, window: int = 1) -> Schedule:
    """Allreduce as an allgather of whole buffers followed by local reductions (latency-bound sizes).

    Piece ``(s, j)`` is input chunk ``j`` of rank ``s``; every other rank
    receives it into scratch chunk ``s * c + j`` and adds it to its output.
    A rank also copies its own input into its own scratch slots: a wave may
    forward its own pieces together with relayed ones in one message read
    from scratch (runs are merged by slot, whoever owns the piece).
    """
    n, c = collective.n_ranks, collective.chunk_factor
    b = ScheduleBuilder(collective, "ccsynth-allreduce-gather", topology=topology.name)
    for r in range(n):
        b.copy(r, ("i", 0, c), ("o", 0, c))
        b.copy(r, ("i", 0, c), ("s", r * c, c))
    _emit_forward(b, waves, c, _Chain(window), buf="s")
    for r in range(n):
        for s in range(n):
            if s != r:
                b.reduce(r, ("s", s * c, c), ("o", 0, c))
    return b.build(**_meta([waves], sk, window))


# ----------------------------------------------------------------------------- reduction phases
def _emit_reverse(b: ScheduleBuilder, actual: list[_Actual], c: int, acc: dict[tuple[int, int], Slot],
                  src_of: Callable[[int, int], Slot], scratch: _Scratch, chain: _Chain) -> None:
    """Emit the allgather moves reversed in time as reductions towards each piece's owner.

    Allgather move ``u -> v`` of piece ``p`` becomes ``v -> u``: ``v`` sends
    its partial sum (``src_of(v, p)``) and ``u`` combines it into its
    accumulator ``acc[(u, p)]``. A rank with one child reduces on receipt
    (fused receive-reduce); one with several receives each child's sum into
    its own scratch slot and reduces locally, so that the children's
    transfers need not wait for each other.
    """
    T = max((a.end for a in actual), default=0.0)
    n_children: dict[tuple[int, int], int] = {}
    for a in actual:
        key = (a.u, a.comm * c + a.j)
        n_children[key] = n_children.get(key, 0) + 1
    waves: dict[WaveKey, list[_Actual]] = {}
    for a in actual:
        waves.setdefault(a.wave, []).append(
            _Actual(a.comm, a.j, a.v, a.u, T - a.end, T - a.start, a.wave, -a.depth))
    order = sorted(waves.items(), key=lambda kv: (min(x.start for x in kv[1]), min(x.depth for x in kv[1]), kv[0]))
    for (edge, _wi), group in order:
        u, v = edge[1], edge[0]  # the allgather receiver sends its partial sum back to its parent
        deps = chain.deps((u, v))
        items = []
        for a in group:
            p = a.comm * c + a.j
            if n_children[(v, p)] > 1:
                items.append((src_of(u, p), ("s", scratch.take()), True, p))
            else:
                items.append((src_of(u, p), acc[(v, p)], False, p))
        sends = []
        for run in _slot_runs(items):
            cnt = run.count
            s_id, _ = b.transfer(u, v, (run.src[0], run.src[1], cnt), (run.dst[0], run.dst[1], cnt),
                                 reduce=not run.staged, send_deps=deps)
            sends.append(s_id)
            if run.staged:
                for k, p in enumerate(run.pieces):
                    loc = acc[(v, p)]
                    b.reduce(v, (run.dst[0], run.dst[1] + k, 1), (loc[0], loc[1], 1))
        chain.push((u, v), sends)


def lower_reduce_scatter(waves: Waves, collective: Collective, topology: Topology, sk: Sketch, window: int = 1) -> Schedule:
    """Reduce-scatter: the allgather on the reversed topology, run backwards with reductions.

    Piece ``(s, j)``: rank ``s`` owns output ``j``; every rank contributes its
    input chunk ``s * c + j``. A rank that forwards the piece in the
    allgather tree accumulates its own contribution and its children's
    partial sums (in scratch, or for the owner in the output) and sends the
    sum to its parent.
    """
    n, c = collective.n_ranks, collective.chunk_factor
    b = ScheduleBuilder(collective, "ccsynth-reduce-scatter", topology=topology.name)
    actual = _actual_moves(waves)
    acc: dict[tuple[int, int], Slot] = {}
    scratch = _Scratch()
    senders = sorted({(a.u, a.comm * c + a.j) for a in actual})
    for x, p in senders:
        acc[(x, p)] = ("o", p % c) if x == p // c else ("s", scratch.take())
    for (x, p), loc in sorted(acc.items()):
        b.copy(x, ("i", p, 1), (loc[0], loc[1], 1))
    for s in range(n):
        for j in range(c):
            if (s, s * c + j) not in acc:  # an owner with no children (a single rank)
                b.copy(s, ("i", s * c + j, 1), ("o", j, 1))
    _emit_reverse(b, actual, c, acc, lambda x, p: acc.get((x, p), ("i", p)), scratch, _Chain(window))
    return b.build(**_meta([waves], sk, window))


def lower_allreduce(rs_waves: Waves, ag_waves: Waves, collective: Collective, topology: Topology, sk: Sketch,
                    window: int = 1) -> Schedule:
    """Allreduce = reduce-scatter then allgather over ``n * c`` chunks, partial sums in the output."""
    n, C = collective.n_ranks, collective.chunk_factor
    c = C // n
    b = ScheduleBuilder(collective, "ccsynth-allreduce", topology=topology.name)
    for r in range(n):
        b.copy(r, ("i", 0, C), ("o", 0, C))
    actual = _actual_moves(rs_waves)
    acc: dict[tuple[int, int], Slot] = {}
    for a in actual:
        p = a.comm * c + a.j
        acc[(a.u, p)] = ("o", p)
        acc[(a.v, p)] = ("o", p)
    _emit_reverse(b, actual, c, acc, lambda x, p: ("o", p), _Scratch(), _Chain(window))
    _emit_forward(b, ag_waves, c, _Chain(window), own_from_input=False)
    return b.build(**_meta([rs_waves, ag_waves], sk, window))


# ----------------------------------------------------------------------------- alltoall
def lower_alltoall(waves: Waves, collective: Collective, topology: Topology, sk: Sketch, window: int = 1) -> Schedule:
    """Alltoall: piece ``(s, d, j)`` leaves ``i[d*c+j]`` of ``s`` and lands in ``o[s*c+j]`` of ``d``."""
    n, c = collective.n_ranks, collective.chunk_factor
    b = ScheduleBuilder(collective, "ccsynth-alltoall", topology=topology.name)
    for r in range(n):
        b.copy(r, ("i", r * c, c), ("o", r * c, c))
    actual = _actual_moves(waves)
    # where each piece sits on each rank it visits
    slot: dict[tuple[int, int, int], Slot] = {}
    scratch = _Scratch()
    for a in actual:
        s, d = divmod(a.comm, n)
        if (s, a.comm, a.j) not in slot:
            slot[(s, a.comm, a.j)] = ("i", d * c + a.j)
        if a.v == d:
            slot[(a.v, a.comm, a.j)] = ("o", s * c + a.j)
        elif (a.v, a.comm, a.j) not in slot:
            slot[(a.v, a.comm, a.j)] = ("s", scratch.take())
    chain = _Chain(window)
    for (edge, _wi), group in _waves_in_order(actual):
        u, v = edge
        deps = chain.deps(edge)
        sends = []
        for run in _slot_runs((slot[(u, a.comm, a.j)], slot[(v, a.comm, a.j)], False, 0) for a in group):
            cnt = run.count
            s_id, _ = b.transfer(u, v, (run.src[0], run.src[1], cnt), (run.dst[0], run.dst[1], cnt), send_deps=deps)
            sends.append(s_id)
        chain.push(edge, sends)
    return b.build(**_meta([waves], sk, window))
