"""Lower the packed trees of an allgather at given chunk factors and send windows, simulate, print the gap.

Usage: python bench/data/issue11_h45/analog.py TOPOLOGY SIZE FACTORS WINDOWS [RAMPS]
(h42's script with RAMPS, the pieces of the first chunk: needs knobs.patch applied; the H45* environment
variables of the patch select the other variants)
e.g. ``dgx_a100x64 512M 1 4,8`` (1 MiB shards, one chunk per root) or ``fat_tree:16x8:4:2 1G 8 2``;
WINDOWS ``d`` is the lowering's default. With ``--trace`` also per NIC port (``:tx``/``:rx`` outside NVSwitch):
when its data starts and ends, idle time with no stream, and *underrate* (time with streams but below the port's
full rate: held elsewhere, at a receiver or a spine).
"""

from __future__ import annotations

import collections
import statistics
import sys
import time


def port_stats(topology, trace, kind: str) -> list[tuple]:
    by = collections.defaultdict(list)
    for x in trace.transfers:
        for q in topology.connection(x.src, x.dst).resources:
            if f":{kind}" in q and not q.startswith("nv"):
                by[q].append(x)
    rows = []
    for q, xs in by.items():
        bw = topology.resource_bw[q] * 1e3
        ev = sorted([(x.data_start, 1) for x in xs] + [(x.data_end, -1) for x in xs])
        cnt, last, idle = 0, 0.0, 0.0
        for tm, d in ev:
            if cnt == 0 and tm > last:
                idle += tm - last
            cnt += d
            last = tm
        first, end = ev[0][0], max(x.data_end for x in xs)
        data = sum(x.nbytes for x in xs) / bw
        rows.append((end, q, first, idle - first, end - idle - data, data))
    return sorted(rows)


def main(argv: list[str]) -> None:
    from ccsynth.collectives.spec import Collective
    from ccsynth.formats.files import get_topology
    from ccsynth.synth.bounds import lower_bound
    from ccsynth.synth.simulate import simulate
    from ccsynth.synth.trees.search import lower, packing_for
    from ccsynth.units import parse_size

    trace = "--trace" in argv
    argv = [a for a in argv if a != "--trace"]
    name, size = argv[0], float(parse_size(argv[1]))
    factors = [int(x) for x in argv[2].split(",")]
    ramps = [int(x) for x in argv[4].split(",")] if len(argv) > 4 else [1]
    windows = [None if w == "d" else int(w) for w in argv[3].split(",")]
    t = get_topology(name)
    n = t.n_ranks
    bound = lower_bound(Collective("allgather", n), t, size).time_us
    p = packing_for(t, "allgather")
    for c in factors:
        for w in windows:
            for rp in ramps:
                c0 = time.process_time()
                s = lower(p, Collective("allgather", n, c), t, w, rp)
                r = simulate(s, t, size, trace=trace)
                print(f"{name} c={c} w={w} ramp={rp} ops/rank={len(s.ops) / n:.0f} {r.time_us:.1f} us, {r.time_us / bound:.4f}x "
                      f"of {bound:.1f} us ({time.process_time() - c0:.1f} CPU s)", flush=True)
                if trace:
                    for kind in ("tx", "rx"):
                        rows = port_stats(t, r.trace, kind)
                        print(f"  {kind}: mean end {statistics.mean(x[0] for x in rows):.1f}, idle "
                              f"{statistics.mean(x[3] for x in rows):.1f}, underrate {statistics.mean(x[4] for x in rows):.1f}, "
                              f"data {statistics.mean(x[5] for x in rows):.1f} us")
                        for end, q, first, idle, under, data in rows[:1] + rows[-2:]:
                            print(f"    end {end:.1f} {q} first {first:.1f} idle {idle:.1f} underrate {under:.1f} "
                                  f"data {data:.1f}")


if __name__ == "__main__":
    main(sys.argv[1:])
