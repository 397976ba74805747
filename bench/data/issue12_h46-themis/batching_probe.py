"""One-off probe (h46-themis, issue 12 part 2): would batching several chunks' phases on one slow dimension
(one phase carrying several chunks' ranges, so per-message costs are paid once per batch) close the LP's gap
to T* on the 4D fabrics? A copy of ``pipeline.time_chunks`` in which dimension ``bd`` starts a phase only
when ``B`` tasks of the same algorithm and direction are ready (or no other chunk can still come), or
(``B < 0``) merges up to ``-B`` of the tasks ready when it starts, without waiting, and runs them as one
phase over the sum of their ranges. Model only: no lowering, no IR, no MPI -- a measurement, not a schedule.

    PYTHONPATH=$PWD python bench/data/issue12_h46-themis/batching_probe.py hierarchical:2x8x8x8@250,200,100,50 1G 3
"""

from __future__ import annotations

import heapq
import math
import sys

from ccsynth.formats.files import get_topology
from ccsynth.synth.multidim import dim_net, schedule_multidim
from ccsynth.synth.multidim.chunks import chunk_steps
from ccsynth.synth.multidim.cost import PhaseCosts
from ccsynth.synth.multidim.lp import CHARGES, lp_chunks, rounded_chunks, solve_lattice
from ccsynth.synth.multidim.pipeline import PRIORITIES, _Dim, _key, _start, chunk_bytes
from ccsynth.synth.multidim.policies import equal_units, themis_chunks
from ccsynth.synth.solver import SolverOptions
from ccsynth.units import parse_sizes


def time_batched(net, costs, kind, size, chunks, priority, bd, batch):
    steps = [chunk_steps(net, kind, c) for c in chunks]
    sizes = chunk_bytes(size, chunks)
    dims = [_Dim([], []) for _ in net.dims]
    left = [sum(1 for s in st if s.dim == bd) for st in steps]  # per chunk: its phases on bd not started yet
    arrivals = [(costs.copies_before(kind, size, sizes[k]), k) for k in range(len(chunks)) if steps[k]]
    heapq.heapify(arrivals)
    running = []  # (done, [(chunk, step)...])
    now = makespan = 0.0
    while True:
        while arrivals and arrivals[0][0] <= now:
            k = heapq.heappop(arrivals)[1]
            heapq.heappush(dims[steps[k][0].dim].ready, _key(priority, k, 0))
        for d, q in enumerate(dims):
            while q.ready and q.can_start(steps[q.ready[0][2]][q.ready[0][3]].algorithm):
                if d == bd and abs(batch) > 1:
                    # wait for a full batch while some chunk not queued here will still come (a queued chunk's
                    # next phase on bd, e.g. its all-gather right after its last reduce-scatter, cannot)
                    queued = {e[2] for e in q.ready}
                    if 0 < len(q.ready) < batch and any(n and k not in queued for k, n in enumerate(left)):
                        break
                    head = steps[q.ready[0][2]][q.ready[0][3]]
                    group, keep = [], []
                    while q.ready and len(group) < abs(batch):
                        e = heapq.heappop(q.ready)
                        s = steps[e[2]][e[3]]
                        (group if (s.reduce, s.algorithm) == (head.reduce, head.algorithm) else keep).append(e)
                    for e in keep:
                        heapq.heappush(q.ready, e)
                    for e in group:
                        left[e[2]] -= 1
                    # one phase over the sum of the ranges: a pseudo chunk of that many bytes, fraction 1
                    m = sum(sizes[e[2]] * steps[e[2]][e[3]].fraction for e in group)
                    done = _start(costs, q, d, head, m / head.fraction, now)
                    heapq.heappush(running, (done, id(group), [(e[2], e[3]) for e in group]))
                    continue
                k, i = heapq.heappop(q.ready)[2:]
                if d == bd:
                    left[k] -= 1
                done = _start(costs, q, d, steps[k][i], sizes[k], now)
                heapq.heappush(running, (done, k * 1000 + i, [(k, i)]))
        if not running and not arrivals:
            break
        now = min(running[0][0] if running else math.inf, arrivals[0][0] if arrivals else math.inf)
        while running and running[0][0] <= now:
            done, _, group = heapq.heappop(running)
            dims[steps[group[0][0]][group[0][1]].dim].flight.remove(done)
            for k, i in group:
                if i + 1 < len(steps[k]):
                    heapq.heappush(dims[steps[k][i + 1].dim].ready, _key(priority, k, i + 1))
                else:
                    makespan = max(makespan, done + costs.copies_after(kind, sizes[k]))
    assert not any(left)
    return makespan + net.call_overhead, [q.busy for q in dims]


#: batch sizes tried: B > 1 waits for B ready phases (or the last ones), B < -1 merges up to -B of those ready
BATCHES = (1, 2, 4, -2, -4, -16)


def main():
    spec, size, bd = sys.argv[1], parse_sizes(sys.argv[2])[0], int(sys.argv[3])
    counts = [int(x) for x in sys.argv[4].split(",")] if len(sys.argv) > 4 else [32, 48, 64, 78, 96, 128, 160, 192]
    net = dim_net(get_topology(spec))
    costs = PhaseCosts(net)
    opts = SolverOptions()
    best = schedule_multidim(net, "allreduce", size, "lp")
    print(f"lp scheduler: {best.makespan_us:.1f} us, {best.n_chunks} chunks, T* {best.lp_bound_us:.1f}, {best.origin}")
    p = best.timing.priority
    print("  its chunks batched on dimension", bd, " ".join(
        f"B{b}: {time_batched(net, costs, 'allreduce', size, best.chunks, p, bd, b)[0]:.1f}" for b in BATCHES), flush=True)
    for k in counts:
        t_star = solve_lattice(net, costs, "allreduce", size, k, opts).bound_us
        cands = []
        for charge in CHARGES:
            ch, sol = lp_chunks(net, costs, "allreduce", size, k, opts, charge)
            cands += [(f"flow {charge}", ch), (f"exact {charge}", rounded_chunks(net, costs, "allreduce", sol, opts))]
        cands.append(("themis", themis_chunks(net, costs, "allreduce", size, equal_units(k))))
        for name, ch in cands:
            row = []
            for b in BATCHES:
                t = min(time_batched(net, costs, "allreduce", size, ch, p, bd, b)[0] for p in PRIORITIES)
                row.append(t)
            print(f"k={k:4d} T*={t_star:8.1f} {name:14s} " + " ".join(f"B{b}:{t:8.1f} ({t / t_star:.3f})"
                                                                      for b, t in zip(BATCHES, row)), flush=True)


if __name__ == "__main__":
    main()
