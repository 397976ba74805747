# h50-lp exploration probe (bench/RESULTS.md, issue 12, h50-lp); reads the pickled LP winners that probe.py writes:
#   usage: python probe_combo2.py TOPOLOGY N   (times the top N candidates of the LP search, tuned under each priority)
import sys
import time
import ccsynth.synth.multidim.pipeline as P
import ccsynth.synth.multidim.search as S
import ccsynth.synth.multidim.shares as sh
from ccsynth.formats.files import get_topology
from ccsynth.synth.multidim import dim_net
from ccsynth.synth.multidim.cost import PhaseCosts

name = sys.argv[1]
net = dim_net(get_topology(name))
costs = PhaseCosts(net)
n = net.n_dims
allres = {}
oat = S._Run.at
owarm = S._Run.warm_at


def at(self, k):
    r = oat(self, k)
    allres[k] = r
    return r


def warm_at(self, k, p=S.WARM_STARTS):
    r = owarm(self, k, p)
    allres[k] = r
    return r


S._Run.at = at
S._Run.warm_at = warm_at
s = S.schedule_multidim(net, "allreduce", 1 << 30, "lp")
ok = P._key


def key(priority, k, i):
    if priority == "reduce":
        return (0 if i < n else 1, k, k, i)
    if priority == "late":
        return (-i, k, k, i)
    if priority == "gather":
        return (0 if i >= n else 1, k, k, i)
    return ok(priority, k, i)


P._key = key
P.PRIORITIES = ("chunk", "phase", "reduce", "late", "gather")
top = sorted(allres.items(), key=lambda kv: kv[1].makespan_us)[: int(sys.argv[2])]
best = s.makespan_us
t0 = time.process_time()
for k, r in top:
    ch = sh.tune_shares(net, costs, "allreduce", 1 << 30, r.chunks, r.timing.priority)
    t1 = P.time_chunks(net, costs, "allreduce", 1 << 30, ch, r.timing.priority).makespan_us
    line = [f"{k} {r.timing.priority} {r.makespan_us:.1f}->{t1:.1f}"]
    for p in P.PRIORITIES:
        c2 = sh.tune_shares(net, costs, "allreduce", 1 << 30, ch, p)
        t = P.time_chunks(net, costs, "allreduce", 1 << 30, c2, p).makespan_us
        best = min(best, t, t1)
        line.append(f"{p}:{t:.1f}")
    print(" ".join(line), flush=True)
print("best", round(best, 1), round(best / s.lp_bound_us, 4), round(time.process_time() - t0, 1))
