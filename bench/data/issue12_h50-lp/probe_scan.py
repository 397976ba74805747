# h50-lp exploration probe (bench/RESULTS.md, issue 12, h50-lp); reads the pickled LP winners that probe.py writes:
#   python probe.py "TOPO1;TOPO2" /tmp/h50/main_   then   python THIS.py /tmp/h50/main_<topology>.pkl ...
import sys
import pickle
from ccsynth.synth.multidim.cost import PhaseCosts
from ccsynth.synth.multidim.losses import dimension_losses
from ccsynth.synth.multidim.pipeline import time_chunks
from ccsynth.synth.multidim.shares import with_shares

with open(sys.argv[1], "rb") as fh:
    s = pickle.load(fh)
net = s.net
costs = PhaseCosts(net)
kind = s.kind
size = s.size_bytes
chunks = s.chunks
total = sum(c.units for c in chunks)
share = {}
for c in chunks:
    share[c.order] = share.get(c.order, 0) + c.units / total
a = tuple(map(int, sys.argv[2]))
b = tuple(map(int, sys.argv[3]))
for delta in [float(v) for v in sys.argv[4].split(",")]:
    tr = dict(share)
    tr[a] -= delta
    tr[b] += delta
    cand = with_shares(net, costs, kind, size, chunks, tr)
    for p in ("chunk",):
        tm = time_chunks(net, costs, kind, size, cand, p)
        L = dimension_losses(costs, tm)
        print(
            delta,
            p,
            round(tm.makespan_us, 1),
            " | ".join(
                f"{x.floor_us:.0f}+{x.exposed_us:.0f}/{x.fill_us:.0f}/{x.idle_us:.0f}/{x.drain_us:.0f}" for x in L
            ),
        )
