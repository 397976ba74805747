# h50-lp exploration probe (bench/RESULTS.md, issue 12, h50-lp); reads the pickled LP winners that probe.py writes:
#   python probe.py "TOPO1;TOPO2" /tmp/h50/main_   then   python THIS.py /tmp/h50/main_<topology>.pkl ...
import sys
import pickle
import time
import math
import ccsynth.synth.multidim.shares as sh
from ccsynth.synth.multidim.cost import PhaseCosts
from ccsynth.synth.multidim.pipeline import time_chunks, chunk_bytes
from ccsynth.synth.multidim.chunks import make_chunk, chunk_steps
from ccsynth.synth.multidim.losses import dimension_losses

with open(sys.argv[1], "rb") as fh:
    s = pickle.load(fh)
net = s.net
costs = PhaseCosts(net)
kind = s.kind
size = s.size_bytes
prio = s.timing.priority


def T(ch, p=prio):
    return time_chunks(net, costs, kind, size, ch, p)


def longest(c, b):
    return max(costs.time(st.dim, st.algorithm, b * st.fraction, reduce=st.reduce) for st in chunk_steps(net, kind, c))


def cut(chunks, mode, spread, c_fac=1.0):
    sizes = chunk_bytes(size, chunks)
    ls = [longest(c, b) for c, b in zip(chunks, sizes)]
    med = sorted(ls)[len(ls) // 2] * c_fac
    rnd = round if mode == "round" else int
    ns = [max(1, rnd(l / med)) for l in ls]
    L = math.lcm(*ns)
    K = len(chunks)
    items = []
    for i, (c, n) in enumerate(zip(chunks, ns)):
        for j in range(n):
            pos = (i + (j + 0.5) / n) if not spread else None
            items.append([pos, i, j, n, c])
    if spread:
        # pieces of each order's cut chunks spread evenly over the whole sequence; uncut chunks keep their place
        by = {}
        for it in items:
            if it[3] > 1:
                by.setdefault(it[4].order, []).append(it)
        for it in items:
            if it[3] == 1:
                it[0] = it[1] + 0.5
        for its in by.values():
            m = len(its)
            for q, it in enumerate(its):
                it[0] = (q + 0.5) * K / m
    items.sort(key=lambda it: (it[0], it[1], it[2]))
    out = [make_chunk(net, costs, kind, it[4].order, 0, it[4].units * L // it[3]) for it in items]
    tot = sum(c.units for c in out)
    return tuple(make_chunk(net, costs, kind, c.order, size * c.units / tot, c.units) for c in out)


for cf in (0.5, 0.75, 1.0, 1.5, 2.0):
    for mode in ("floor",):
        t0 = time.process_time()
        ch = cut(s.chunks, mode, True, cf)
        t = T(ch).makespan_us
        c2 = sh.tune_shares(net, costs, kind, size, ch, prio)
        tm = T(c2)
        print(
            cf,
            mode,
            len(ch),
            round(t, 1),
            "tuned",
            round(tm.makespan_us, 1),
            round(tm.makespan_us / s.lp_bound_us, 4),
            round(time.process_time() - t0, 1),
            "s",
            flush=True,
        )
        print(
            "   ",
            " | ".join(
                f"{x.floor_us:.0f}+{x.exposed_us:.0f}/{x.fill_us:.0f}/{x.idle_us:.0f}/{x.drain_us:.0f}"
                for x in dimension_losses(costs, tm)
            ),
        )
