"""How a piece reaches its destinations once its senders are chosen: the part all planners share.

A piece's destinations (:func:`.plan.needs`) fall into three groups:

* ranks that hold the piece themselves (overlapping meshes): a local copy;
* hosts where some rank holds it (*near* hosts): the least-loaded holder on
  the host sends it to each destination there, inside the host;
* hosts where no rank holds it (*far* hosts): one transfer crosses the
  network, from a chosen sender to a chosen *entry* destination on the
  host, and the entry forwards it to the other destinations there (a
  broadcast that uses each host's NIC once). The sender is a holder, or
  the entry of a far host served before (hosts in increasing order), so a
  piece can cross from host to host as in a broadcast chain or tree and no
  NIC has to send it more than once.

Planners choose, per (piece, far host), the sender and the entry
(:class:`Choice`); :func:`hops_of` turns the choices into hops. Loads are
kept in :class:`Loads` (bytes per rank and per NIC group, in and out) so
that greedy choices and the MILP's warm start see the same numbers.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from dataclasses import dataclass, field

from ccsynth.errors import LayoutError
from ccsynth.synth.reshard.plan import Fabric, Hop, needs
from ccsynth.synth.reshard.task import ReshardTask

__all__ = ["Choice", "Loads", "FarDelivery", "far_deliveries", "one_per_nic", "route", "spread", "hops_of"]


@dataclass(frozen=True)
class FarDelivery:
    """Piece ``piece`` must reach ``ranks`` on ``host``, where no rank holds it."""

    piece: int
    host: int
    ranks: tuple[int, ...]
    holders: tuple[int, ...]
    size: int  # bytes


@dataclass(frozen=True)
class Choice:
    """The sender and the entry rank of one far delivery; ``forward``: the sender is the entry of another
    destination host that got the piece earlier (it sends from its output)."""

    sender: int
    entry: int
    forward: bool = False


@dataclass
class Loads:
    """Bytes out of and into every rank and every NIC group, across hosts."""

    fabric: Fabric
    rank_out: dict = field(default_factory=lambda: defaultdict(float))
    rank_in: dict = field(default_factory=lambda: defaultdict(float))
    nic_out: dict = field(default_factory=lambda: defaultdict(float))
    nic_in: dict = field(default_factory=lambda: defaultdict(float))

    def _t(self, bytes_, cap) -> float:
        return bytes_ / cap if cap else bytes_

    def send_cost(self, s: int, nbytes: float) -> tuple[float, float]:
        """Time (bytes / GB/s) of ``s``'s NIC group and of ``s`` itself after sending ``nbytes`` more."""
        f = self.fabric
        g = f.nic[s]
        return (self._t(self.nic_out[g] + nbytes, f.nic_out.get(g)),
                self._t(self.rank_out[s] + nbytes, f.rank_out[s] if f.rank_out else 0))

    def recv_cost(self, e: int, nbytes: float) -> tuple[float, float]:
        f = self.fabric
        g = f.nic[e]
        return (self._t(self.nic_in[g] + nbytes, f.nic_in.get(g)),
                self._t(self.rank_in[e] + nbytes, f.rank_in[e] if f.rank_in else 0))

    def max_time(self) -> float:
        """The busiest NIC group's time so far (bytes / GB/s)."""
        f = self.fabric
        out = [self._t(v, f.nic_out.get(g)) for g, v in self.nic_out.items()]
        inn = [self._t(v, f.nic_in.get(g)) for g, v in self.nic_in.items()]
        return max(out + inn, default=0.0)

    def add(self, s: int, e: int, nbytes: float) -> None:
        f = self.fabric
        self.rank_out[s] += nbytes
        self.nic_out[f.nic[s]] += nbytes
        self.rank_in[e] += nbytes
        self.nic_in[f.nic[e]] += nbytes


def one_per_nic(ranks, fabric: Fabric) -> tuple[int, ...]:
    """The first of ``ranks`` (in rank order) in each NIC group: the one rank that crosses that NIC."""
    firsts: dict[int, int] = {}
    for r in sorted(ranks):
        firsts.setdefault(fabric.nic[r], r)
    return tuple(sorted(firsts.values()))


def far_deliveries(task: ReshardTask, fabric: Fabric, *, funnel: bool = False) -> list[FarDelivery]:
    """Every (piece, far host) pair, largest pieces first.

    ``funnel``: the senders and entries a planner may choose are cut to one
    rank per NIC group (:func:`one_per_nic`), so that every NIC carries one
    stream of pieces instead of one per rank: slabs then cross it one
    after another at its full rate, and the first ones can be forwarded
    while the rest still flows (a pipelined broadcast, as a NCCL ring runs
    it). Without it, ``k`` ranks behind one NIC share it and their first
    slabs all arrive after ``k`` slab times.
    """
    out = []
    item = task.itemsize
    for p in task.pieces:
        holders, needers = needs(task, p.id)
        near = {fabric.host[s] for s in holders}
        by_host: dict[int, list[int]] = {}
        for d in needers:
            if fabric.host[d] not in near:
                by_host.setdefault(fabric.host[d], []).append(d)
        for h, ranks in sorted(by_host.items()):
            if funnel:
                out.append(FarDelivery(p.id, h, one_per_nic(ranks, fabric), one_per_nic(holders, fabric),
                                       p.size * item))
            else:
                out.append(FarDelivery(p.id, h, tuple(ranks), holders, p.size * item))
    out.sort(key=lambda fd: (-fd.size, fd.piece, fd.host))
    return out


def route(piece: int, src: int, src_buf: str, dst: int, fabric: Fabric, dst_buf: str = "o") -> list[Hop]:
    """Hops that take ``piece`` from ``src`` (in ``src_buf``) to ``dst``: direct, or through relay slots."""
    if fabric.connected(src, dst):
        return [Hop(piece, src, dst, src_buf, dst_buf)]
    path = fabric.path([src], dst)
    if path is None:
        raise LayoutError(f"piece {piece}: the topology has no path from rank {src} to rank {dst}")
    hops = []
    buf = src_buf
    for a, b in itertools.pairwise(path):
        nb = dst_buf if b == dst else "s"
        hops.append(Hop(piece, a, b, buf, nb))
        buf = nb
    return hops


def spread(piece: int, have: list[tuple[int, bool]], targets: list[int], fabric: Fabric, load: dict,
           size: float) -> list[Hop]:
    """Hops that bring ``piece`` from the ranks in ``have`` (rank, holds it in its input) to ``targets``.

    Each target takes it from the least-loaded rank that has it and is
    connected to it (input holders first); a target served becomes a
    forwarder for the next ones, so a host whose links are not all-to-all
    (a DGX-1 cube mesh) is covered hop by hop. Targets no owner reaches
    directly go over a shortest path through relay slots (:func:`route`).
    """
    hops: list[Hop] = []
    owners = [(r, "i" if inp else "o") for r, inp in have]
    todo = list(targets)
    while todo:
        rest = []
        for d in todo:
            cands = [(buf != "i", load[r], r, buf) for r, buf in owners if fabric.connected(r, d)]
            if not cands:
                rest.append(d)
                continue
            _, _, r, buf = min(cands)
            load[r] += size
            hops.append(Hop(piece, r, d, buf))
            owners.append((d, "o"))
        if rest and len(rest) == len(todo):
            d = rest.pop(0)
            r, buf = min(owners, key=lambda o: (len(fabric.path([o[0]], d) or range(1 << 30)), o[1] != "i", o[0]))
            path_hops = route(piece, r, buf, d, fabric)
            hops += path_hops
            owners += [(h.dst, h.dst_buf) for h in path_hops]
        todo = rest
    return hops


def hops_of(task: ReshardTask, fabric: Fabric, choices: dict[tuple[int, int], Choice]) -> list[Hop]:
    """Hops for every piece: local copies, near-host sends, and the far deliveries' ``choices``.

    Program order: copies and sends from inputs first, forwards after (they
    depend on the receive that brought their piece; the builder adds that).
    """
    first: list[Hop] = []
    forwards: list[Hop] = []
    intra: dict = defaultdict(float)  # bytes each rank sends inside its host: to balance near senders
    for p in task.pieces:
        holders, needers = needs(task, p.id)
        held = set(holders)
        size = p.size * task.itemsize
        near_hosts = {fabric.host[s] for s in holders}
        near: dict[int, list[int]] = defaultdict(list)
        far: dict[int, list[int]] = defaultdict(list)
        for d in needers:
            if d in held:
                first.append(Hop(p.id, d, d))
            elif fabric.host[d] in near_hosts:
                near[fabric.host[d]].append(d)
            else:
                far[fabric.host[d]].append(d)
        for h, ranks in sorted(near.items()):
            have = [(s, True) for s in holders if fabric.host[s] == h]
            for hop in spread(p.id, have, ranks, fabric, intra, size):
                (forwards if hop.forward else first).append(hop)
        for h, ranks in sorted(far.items()):
            c = choices[(p.id, h)]
            far_hops = route(p.id, c.sender, "o" if c.forward else "i", c.entry, fabric)
            if c.forward:
                forwards += far_hops
            else:
                first.append(far_hops[0])
                forwards += far_hops[1:]
            rest = [d for d in ranks if d != c.entry]
            forwards += spread(p.id, [(c.entry, False)], rest, fabric, intra, size)
    # Pieces that a destination host forwards to another host go first: with sends one at a time per rank
    # (schedule_of's fabric), they then arrive early and are passed on while the rest still flows.
    relayed = {(p, c.sender) for (p, _), c in choices.items() if c.forward}
    first.sort(key=lambda h: (h.piece, h.dst) not in relayed)
    forwards.sort(key=lambda h: (h.piece, h.dst) not in relayed)
    return first + forwards
