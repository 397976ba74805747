"""Resharding plans: hops of pieces between ranks, turned into a verified-ready Schedule.

Every planner (:mod:`.naive`, :mod:`.broadcast`, :mod:`.milp`) decides, per
piece of the task (:mod:`.task`), which rank sends it to which rank; it
states that as a list of :class:`Hop` s in program order and
:func:`schedule_of` builds the :class:`~ccsynth.collectives.schedule.Schedule`
(one ``copy``, or one ``send`` plus ``recv``, per hop; dependencies from
:class:`~ccsynth.collectives.builder.ScheduleBuilder`, so a forward waits for
the receive that brought its piece). A hop reads the piece from the
sender's input (its source shard) unless ``forward`` is set, in which case
it reads it from the sender's output (the sender is itself a destination
that already has it): that is how one broadcast crosses a host's NIC once
and fans out inside the host. Where the topology has no direct connection,
the piece travels through *relay slots* (scratch chunks of the ranks on a
shortest path, :meth:`Fabric.path`), declared in the collective.

The schedule's collective is the task's
:class:`~ccsynth.collectives.explicit.ExplicitCollective` and its ``meta``
holds ``reshard`` (the task as JSON: shapes, dtype, meshes, specs) and
``size_bytes`` (the tensor's, the size ``ccsynth simulate`` uses for it by
default), so that a plan file alone can be verified, simulated and run.

:class:`Fabric` is what the planners know of the machine: the host of
every rank and its *NIC group* (the ranks that share one network port: a
host with one NIC, unless the topology gives each rank a port of its own),
with the capacities of those ports.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import cast

from ccsynth.collectives.builder import ScheduleBuilder
from ccsynth.collectives.schedule import Schedule
from ccsynth.collectives.spec import Collective
from ccsynth.errors import LayoutError
from ccsynth.synth.capacity import cover_capacity
from ccsynth.synth.reshard.task import ReshardTask
from ccsynth.topologies.model import Topology

__all__ = ["Hop", "Fabric", "schedule_of", "task_of_schedule", "needs", "META_KEY"]

#: key of the task in a reshard plan's ``Schedule.meta``
META_KEY = "reshard"


@dataclass(frozen=True)
class Hop:
    """``src`` gives piece ``piece`` to ``dst`` (a local copy when they are equal).

    ``src_buf``: where the sender has it: ``"i"`` (its source shard), ``"o"``
    (its destination shard: a forward) or ``"s"`` (a relay slot);
    ``dst_buf``: ``"o"``, or ``"s"`` when ``dst`` only relays it.
    """

    piece: int
    src: int
    dst: int
    src_buf: str = "i"
    dst_buf: str = "o"

    @property
    def forward(self) -> bool:
        return self.src_buf != "i"


@dataclass(frozen=True)
class Fabric:
    """Hosts, NIC groups and port capacities (GB/s) of the ranks a plan uses."""

    n_ranks: int
    host: tuple[int, ...]
    nic: tuple[int, ...]  # NIC group of every rank
    nic_out: dict = field(default_factory=dict)  # NIC group -> GB/s out of its host
    nic_in: dict = field(default_factory=dict)
    rank_out: tuple[float, ...] = ()  # GB/s each rank can send off its host
    rank_in: tuple[float, ...] = ()
    topology: Topology | None = field(default=None, compare=False, repr=False)

    def connected(self, a: int, b: int) -> bool:
        """Whether ``a`` can send to ``b`` directly (always, without a topology)."""
        return a == b or self.topology is None or self.topology.has_connection(a, b)

    def path(self, sources, dst: int) -> list[int] | None:
        """A shortest path of ranks from one of ``sources`` to ``dst`` over the topology's connections."""
        if self.topology is None:
            return [next(iter(sources)), dst]
        prev: dict[int, int | None] = dict.fromkeys(sources)
        frontier = list(prev)
        while frontier:
            nxt = []
            for a in frontier:
                for b in self.topology.neighbors_out(a):
                    if b not in prev:
                        prev[b] = a
                        if b == dst:
                            out = [b]
                            while (up := prev[out[-1]]) is not None:
                                out.append(up)
                            return out[::-1]
                        nxt.append(b)
            frontier = nxt
        return None

    @classmethod
    def of(cls, topology: Topology | None, task: ReshardTask, n_ranks: int) -> Fabric:
        """From ``topology`` (hosts, shared NIC ports, capacities), else from the meshes' hosts."""
        if topology is None:
            hosts = list(range(n_ranks))
            for lay in (task.src, task.dst):
                for r, h in zip(lay.mesh.ranks, lay.mesh.hosts):
                    hosts[r] = h
            return cls(n_ranks, tuple(hosts), tuple(hosts), {}, {}, (1.0,) * n_ranks, (1.0,) * n_ranks)
        host = tuple(topology.nodes)
        nic = list(host)
        ports = list(topology.shared_ports)
        owned: set[int] = set()
        for p in ports:
            if len({host[r] for r in p.srcs}) == 1 and all(host[d] != host[p.srcs[0]] for d in p.dsts):
                owned.update(p.srcs)
        # a host whose ranks are not behind one shared port: each rank has a port of its own
        for r in range(n_ranks):
            if r not in owned and topology.n_nodes > 1:
                nic[r] = n_ranks + r
        nic_t = tuple(nic)
        rbw = topology.resource_bw
        rank_out, rank_in = [], []
        for r in range(n_ranks):
            others = [q for q in range(n_ranks) if host[q] != host[r]]
            rank_out.append(cover_capacity([c for q in others if (c := topology.connection(r, q))], rbw))
            rank_in.append(cover_capacity([c for q in others if (c := topology.connection(q, r))], rbw))
        nic_out, nic_in = {}, {}
        for g in sorted(set(nic_t)):
            members = [r for r in range(n_ranks) if nic_t[r] == g]
            others = [q for q in range(n_ranks) if host[q] != host[members[0]]]
            nic_out[g] = cover_capacity([c for a in members for q in others if (c := topology.connection(a, q))], rbw)
            nic_in[g] = cover_capacity([c for a in members for q in others if (c := topology.connection(q, a))], rbw)
        return cls(n_ranks, host, nic_t, nic_out, nic_in, tuple(rank_out), tuple(rank_in), topology)


def needs(task: ReshardTask, piece: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``(holders, needers)`` of ``piece``: ranks with it in their input, ranks that must end with it."""
    p = task.pieces[piece]
    return task.src.replicas[p.src_tile], task.dst.replicas[p.dst_tile]


def schedule_of(task: ReshardTask, hops, *, n_ranks: int, name: str, topology: str = "",
                fabric: Fabric | None = None, **meta) -> Schedule:
    """The Schedule of ``hops`` (in program order) for ``task`` on ``n_ranks`` ranks.

    Every hop into a relay slot (``dst_buf == "s"``) gets a scratch chunk of
    its own on the receiving rank, declared in the collective's ``relays``.
    With ``fabric``, each rank's sends to other hosts go one after another
    in program order (each waits for the one before): pieces then cross a
    NIC a few at a time and arrive early enough to be forwarded while the
    rest still flows, instead of all sharing the NIC and all arriving at
    the end (which leaves every forward for after the network phase).
    """
    hops = list(hops)
    relays: list[list[int]] = [[] for _ in range(n_ranks)]
    slot_of: dict[tuple[int, int], int] = {}
    for h in hops:
        if h.dst_buf == "s" and (h.dst, h.piece) not in slot_of:
            slot_of[(h.dst, h.piece)] = len(relays[h.dst])
            relays[h.dst].append(h.piece)
    base = task.collective(n_ranks)
    coll = replace(base, relays=tuple(tuple(r) for r in relays))
    index = {"i": [{p: j for j, p in enumerate(row)} for row in coll.inputs],
             "o": [{p: j for j, p in enumerate(row)} for row in coll.outputs]}
    b = ScheduleBuilder(cast(Collective, coll), name, topology=topology)  # the same interface
    last_remote: dict[int, int] = {}
    for h in hops:
        try:
            src = (h.src_buf, slot_of[(h.src, h.piece)] if h.src_buf == "s" else index[h.src_buf][h.src][h.piece])
            dst = (h.dst_buf, slot_of[(h.dst, h.piece)] if h.dst_buf == "s" else index["o"][h.dst][h.piece])
        except KeyError:
            raise LayoutError(f"planner bug: {h} moves a piece its sender does not have or its receiver does not need") from None
        if h.src == h.dst:
            b.copy(h.src, src, dst)
        elif fabric is not None and fabric.host[h.src] != fabric.host[h.dst]:
            prev = last_remote.get(h.src)
            last_remote[h.src], _ = b.transfer(h.src, h.dst, src, dst, send_deps=() if prev is None else (prev,))
        else:
            b.transfer(h.src, h.dst, src, dst)
    b.scratch_chunks = coll.relay_chunks
    return b.build(**{META_KEY: task.to_dict(), "size_bytes": task.nbytes, **meta})


def task_of_schedule(schedule: Schedule) -> ReshardTask:
    """The task a reshard plan carries in its meta (:class:`LayoutError` if it is not a reshard plan)."""
    d = schedule.meta.get(META_KEY)
    if d is None or schedule.collective.uniform:
        raise LayoutError(f"schedule {schedule.name!r} is not a resharding plan (no {META_KEY!r} in its meta)")
    return ReshardTask.from_dict(d)
