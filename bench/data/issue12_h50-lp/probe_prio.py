# h50-lp exploration probe (bench/RESULTS.md, issue 12, h50-lp); reads the pickled LP winners that probe.py writes:
#   python probe.py "TOPO1;TOPO2" /tmp/h50/main_   then   python THIS.py /tmp/h50/main_<topology>.pkl ...
import sys
import pickle
import ccsynth.synth.multidim.pipeline as P
import ccsynth.synth.multidim.shares as sh
from ccsynth.synth.multidim.cost import PhaseCosts

with open(sys.argv[1], "rb") as fh:
    s = pickle.load(fh)
net = s.net
costs = PhaseCosts(net)
n = net.n_dims
ok = P._key


def key(priority, k, i):
    if priority == "gather":
        return (0 if i >= n else 1, k, k, i)
    if priority == "reduce":
        return (0 if i < n else 1, k, k, i)
    if priority == "late":
        return (-i, k, k, i)
    if priority == "chunkrev":
        return (-k, i, k, i)
    return ok(priority, k, i)


P._key = key
P.PRIORITIES = ("chunk", "phase", "gather", "reduce", "late")
for p in P.PRIORITIES:
    t = P.time_chunks(net, costs, s.kind, s.size_bytes, s.chunks, p).makespan_us
    print(p, round(t, 1), round(t / s.lp_bound_us, 4))
for p in ("gather", "reduce", "late"):
    ch = sh.tune_shares(net, costs, s.kind, s.size_bytes, s.chunks, p)
    t = P.time_chunks(net, costs, s.kind, s.size_bytes, ch, p).makespan_us
    print("tuned", p, round(t, 1), round(t / s.lp_bound_us, 4))
