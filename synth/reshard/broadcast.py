"""Alpa's broadcast-based plan: one sender per piece, load-balanced greedily over hosts.

Each piece is broadcast to all its destination replicas: it crosses the
network once per destination host that lacks it (to an *entry* rank, which
forwards it inside the host: :mod:`.delivery`), from a holder or from the
entry of a destination host that has it already (a broadcast tree over
hosts, as a NCCL broadcast among the group would run). Senders are chosen
greedily, largest pieces first: the candidate whose NIC group (one NIC per
host unless the topology gives each rank a port of its own) would finish
its sends earliest with this piece added, then the rank itself least
loaded; the entry is the destination on that host whose incoming load is
least. Alpa (MLSys'23) reports up to 10x over the naive
send/recv plan on its microbenchmarks.
"""

from __future__ import annotations

from ccsynth.synth.reshard.delivery import Choice, Loads, far_deliveries, hops_of
from ccsynth.synth.reshard.plan import Fabric, Hop
from ccsynth.synth.reshard.task import ReshardTask

__all__ = ["greedy_choices", "broadcast_hops"]


def greedy_choices(task: ReshardTask, fabric: Fabric, *, funnel: bool = False) -> dict[tuple[int, int], Choice]:
    """Sender and entry of every far delivery, largest pieces first, hosts in increasing order.

    ``funnel``: one sender and one entry per NIC group (:func:`.delivery.far_deliveries`).
    """
    loads = Loads(fabric)
    choices: dict[tuple[int, int], Choice] = {}
    by_piece: dict[int, list] = {}
    for fd in far_deliveries(task, fabric, funnel=funnel):
        by_piece.setdefault(fd.piece, []).append(fd)
    order = sorted(by_piece, key=lambda p: (-by_piece[p][0].size * len(by_piece[p]), p))
    # What enters each far host is fixed whoever sends it: count it first, so that a forward (which adds
    # a hop and its delay) is chosen only where it lowers the busiest NIC's time.
    ahead: dict = {}
    for fds in by_piece.values():
        for fd in fds:
            g = fabric.nic[fd.ranks[0]] if fabric.nic[fd.ranks[0]] < fabric.n_ranks else None
            if g is not None:
                ahead[g] = ahead.get(g, 0.0) + fd.size
    for g, v in ahead.items():
        loads.nic_in[g] += v
    for p in order:
        served: list[int] = []  # entries of the far hosts that have the piece already
        for fd in sorted(by_piece[p], key=lambda f: f.host):
            cands = [(r, False) for r in fd.holders] + [(r, True) for r in served]
            linked = [c for c in cands if any(fabric.connected(c[0], e) for e in fd.ranks)]
            peak = loads.max_time()
            s, fwd = min(linked or cands,
                         key=lambda c: (max(peak, loads.send_cost(c[0], fd.size)[0]), c[1], *loads.send_cost(c[0], fd.size), c[0]))
            entries = [r for r in fd.ranks if fabric.connected(s, r)] or list(fd.ranks)
            e = min(entries, key=lambda r: (*loads.recv_cost(r, fd.size), r))
            loads.add(s, e, fd.size)
            if fabric.nic[e] in ahead:
                loads.nic_in[fabric.nic[e]] -= fd.size  # counted ahead
            choices[(p, fd.host)] = Choice(s, e, fwd)
            served.append(e)
    return choices


def broadcast_hops(task: ReshardTask, fabric: Fabric, *, funnel: bool = False) -> list[Hop]:
    return hops_of(task, fabric, greedy_choices(task, fabric, funnel=funnel))
