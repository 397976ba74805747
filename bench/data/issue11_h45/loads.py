"""Per resource, the bytes a lowered 1 GiB allgather puts on it (chunk factors given, send window 2), against
the exact bound: the three busiest and the count above 1.01x.

Usage: python bench/data/issue11_h45/loads.py TOPOLOGY FACTORS, e.g. ``fat_tree:16x8:4:2 8,16``.
"""

from __future__ import annotations

import collections
import sys


def main(argv: list[str]) -> None:
    from ccsynth.collectives.spec import Collective
    from ccsynth.formats.files import get_topology
    from ccsynth.synth.bounds import lower_bound
    from ccsynth.synth.trees.search import lower, packing_for

    t = get_topology(argv[0])
    n, size = t.n_ranks, float(1 << 30)
    p = packing_for(t, "allgather")
    bound = lower_bound(Collective("allgather", n), t, size).time_us
    for c in [int(x) for x in argv[1].split(",")]:
        s = lower(p, Collective("allgather", n, c), t, 2)
        units = s.collective.chunk_factor * n
        load: collections.Counter[str] = collections.Counter()
        for op in s.ops:
            if op.kind == "send":
                for r in t.connection(op.rank, op.peer).resources:
                    load[r] += op.src.count
        worst = sorted((load[r] * size / units / (t.resource_bw[r] * 1e3) / bound, r) for r in load)
        print(c, [(round(a, 4), r) for a, r in worst[-3:]], "above 1.01x:", sum(a > 1.01 for a, _ in worst))


if __name__ == "__main__":
    main(sys.argv[1:])
