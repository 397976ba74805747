# h50-lp exploration probe (bench/RESULTS.md, issue 12, h50-lp); reads the pickled LP winners that probe.py writes:
#   python probe.py "TOPO1;TOPO2" /tmp/h50/main_   then   python THIS.py /tmp/h50/main_<topology>.pkl ...
import sys
import pickle
import time
from ccsynth.synth.multidim.cost import PhaseCosts
from ccsynth.synth.multidim.pipeline import time_chunks
from ccsynth.synth.multidim.chunks import make_chunk
from ccsynth.synth.multidim.pipeline import chunk_bytes

with open(sys.argv[1], "rb") as fh:
    s = pickle.load(fh)
net = s.net
costs = PhaseCosts(net)
kind = s.kind
size = s.size_bytes
prio = s.timing.priority
ch = list(s.chunks)
bt = s.makespan_us
orders = sorted({c.order for c in ch})
sizes = chunk_bytes(size, ch)
t0 = time.process_time()
n = 0
for rnd in range(int(sys.argv[2])):
    res = []
    for j, c in enumerate(ch):
        for o in orders:
            if o == c.order:
                continue
            trial = ch[:]
            trial[j] = make_chunk(net, costs, kind, o, sizes[j], c.units)
            t = time_chunks(net, costs, kind, size, trial, prio).makespan_us
            n += 1
            res.append((t, j, o))
    res.sort()
    print(rnd, "best moves", [(round(t, 1), j, o) for t, j, o in res[:5]], "start", round(bt, 1))
    if res[0][0] < bt - 1e-6:
        bt, j, o = res[0]
        ch[j] = make_chunk(net, costs, kind, o, sizes[j], ch[j].units)
    else:
        break
print("final", round(bt, 1), round(bt / s.lp_bound_us, 4), n, "timings", round(time.process_time() - t0, 1), "s")
