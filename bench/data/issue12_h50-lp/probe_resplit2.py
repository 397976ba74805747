# h50-lp exploration probe (bench/RESULTS.md, issue 12, h50-lp); reads the pickled LP winners that probe.py writes:
#   python probe.py "TOPO1;TOPO2" /tmp/h50/main_   then   python THIS.py /tmp/h50/main_<topology>.pkl ...
import sys
import pickle
import time
import pulp
import os

from ccsynth.synth.multidim.cost import PhaseCosts
from ccsynth.synth.multidim.losses import dimension_losses
from ccsynth.synth.multidim.pipeline import time_chunks
from ccsynth.synth.multidim.shares import with_shares

BUSY = os.environ.get("BUSY") == "1"


def per_order(net, costs, kind, size, chunks, timing):
    """order -> (share, [floor per dim per unit share])"""
    total = sum(c.units for c in chunks)
    share = {}
    for c in chunks:
        share[c.order] = share.get(c.order, 0) + c.units / total
    fl = {o: [0.0] * net.n_dims for o in share}
    until = [0.0] * net.n_dims
    for t in sorted(timing.tasks, key=lambda t: (t.start_us, t.end_us)):
        o = chunks[t.chunk].order
        inc = max(0.0, t.end_us - max(t.start_us, until[t.dim]))
        until[t.dim] = max(until[t.dim], t.end_us)
        fl[o][t.dim] += inc if BUSY else costs.floor(t.dim, t.algorithm, t.range_bytes, reduce=t.reduce)
    return {o: (share[o], [x / share[o] for x in fl[o]]) for o in share}


def lp_split(per, heads, minshare):
    prob = pulp.LpProblem("r", pulp.LpMinimize)
    T = pulp.LpVariable("T")
    orders = sorted(per)
    x = {o: pulp.LpVariable(f"x{i}", lowBound=minshare) for i, o in enumerate(orders)}
    prob += T
    prob += pulp.lpSum(x.values()) == 1
    n = len(heads)
    for d in range(n):
        prob += pulp.lpSum(x[o] * per[o][1][d] for o in orders) + heads[d] <= T
    prob.solve(pulp.HiGHS(msg=False))
    return {o: x[o].value() for o in orders}, T.value()


with open(sys.argv[1], "rb") as fh:
    s = pickle.load(fh)
net = s.net
costs = PhaseCosts(net)
kind = s.kind
size = s.size_bytes
prio = s.timing.priority
chunks = s.chunks
timing = s.timing
best = timing.makespan_us
print("start", round(best, 1), "T*", round(s.lp_bound_us, 1))
t0 = time.time()
for it in range(8):
    per = per_order(net, costs, kind, size, chunks, timing)
    L = dimension_losses(costs, timing)
    heads = [(x.fill_us + x.drain_us) if BUSY else x.head_us for x in L]
    x, T = lp_split(per, heads, 1.0 / (64 * sum(c.units for c in chunks)))
    for a in (1.0, 0.5, 0.25, 0.125):
        cur = {o: per[o][0] for o in per}
        tr = {o: cur[o] + a * (x[o] - cur[o]) for o in per}
        cand = with_shares(net, costs, kind, size, chunks, tr)
        tm = min(
            (time_chunks(net, costs, kind, size, cand, p) for p in ("chunk", "phase")), key=lambda t: t.makespan_us
        )
        print(it, a, "lp est", round(T, 1), "time", round(tm.makespan_us, 1))
        if tm.makespan_us < best - 1e-6:
            best, chunks, timing = tm.makespan_us, cand, tm
            break
    else:
        break
print("final", round(best, 1), round(best / s.lp_bound_us, 4), time.time() - t0)
for x in dimension_losses(costs, timing):
    print(
        f"  dim{x.dim}: floor {x.floor_us:.1f} exp {x.exposed_us:.1f} fill {x.fill_us:.1f} idle {x.idle_us:.1f} drain {x.drain_us:.1f}"
    )
