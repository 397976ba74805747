"""Lower the packed trees of an allgather with and without phases, simulate, print the gap to the exact bound.

Usage: python bench/data/issue11_h48/phased.py TOPOLOGY SIZE SPEC...  with SPEC ``c,w,phased`` (chunk factor,
send window, phased window; 0: not phased), e.g. ``fat_tree:8x8:4:2 1G 8,2,0 8,2,2``. ``--phases`` prints, for
the phased lowering, the node-crossing sends per port (min, max) and the phases used (None: it gave up).
"""

from __future__ import annotations

import collections
import sys
import time


def main(argv: list[str]) -> None:
    from ccsynth.collectives.spec import Collective
    from ccsynth.formats.files import get_topology
    from ccsynth.synth.bounds import lower_bound
    from ccsynth.synth.simulate import simulate
    from ccsynth.synth.trees import lowering
    from ccsynth.synth.trees.search import packing_for
    from ccsynth.units import parse_size

    phases = "--phases" in argv
    argv = [a for a in argv if a != "--phases"]
    name, size = argv[0], float(parse_size(argv[1]))
    t = get_topology(name)
    n = t.n_ranks
    bound = lower_bound(Collective("allgather", n), t, size).time_us
    p = packing_for(t, "allgather")
    seen: dict = {}
    order = lowering._phase_order

    def spy(sends, lag=None, fits=None):
        seen["sends"], seen["phase"] = sends, order(sends, lag, fits)
        return seen["phase"]

    lowering._phase_order = spy
    for spec in argv[2:]:
        c, w, ph = (int(x) for x in spec.split(","))
        c0 = time.process_time()
        s = lowering.lower_out_trees(p.trees, Collective("allgather", n, c), t, w, lowering.STAGGER, ph)
        c1 = time.process_time()
        r = simulate(s, t, size)
        print(f"{name} c={c} w={w} phased={s.meta['phased']} ops/rank={len(s.ops) / n:.0f} {r.time_us:.1f} us, "
              f"{r.time_us / bound:.4f}x of {bound:.1f} us (lowering {c1 - c0:.1f} CPU s, simulation "
              f"{time.process_time() - c1:.1f})", flush=True)
        if phases and ph and "sends" in seen:
            per = collections.Counter(x.src for x in seen["sends"])
            got = seen["phase"]
            print(f"  sends per port {min(per.values())}-{max(per.values())}, phases "
                  f"{1 + max(got.values()) if got else None}")


if __name__ == "__main__":
    main(sys.argv[1:])
