"""h49-probes: the footprint probes alone, the old plan on a 32 MiB-LLC VM (evictions 0-64 MiB, 48 iterations, a
buffer per probe) against the ladder (18 iterations, one eviction buffer), alternated twice, three passes each.
From the repository root: ``PYTHONPATH=$PWD mpiexec -n 2 python bench/data/issue10_h49/fpcost.py``."""

import os
import time
from dataclasses import replace

from mpi4py import MPI

import ccsynth.bench.profile as P

comm = MPI.COMM_WORLD
pat = P.patterns([0] * comm.Get_size())[0]
M = 1 << 20


def old_probes():
    large = [P.Probe(pat, "footprint", 2, 256 << 10, M, evict_bytes=e) for e in (0, 4 * M, 8 * M, 16 * M, 32 * M, 64 * M)]
    less = large[0].buffer_bytes - P.Probe(pat, "footprint", 2, 64 << 10, M).buffer_bytes
    return large + [replace(p, nbytes=64 << 10, evict_bytes=p.evict_bytes + less) for p in large]


for _rep in range(2):
    for name in ("old plan (LLC 32 MiB, 48 iters)", "ladder (18 iters, 1 warm-up)"):
        comm.Barrier()
        t = time.perf_counter()
        if name.startswith("old"):
            P.FOOTPRINT_ITERS, probes, ev = 48, old_probes(), None
        else:
            P.FOOTPRINT_ITERS, probes, ev = 18, P.footprint_probes(pat, P.ProfileOptions()), P.EvictionBuffer()
        for _ in range(3):
            for p in probes:
                P.measure_probe(comm, p, P.ProfileOptions(), ev)
        comm.Barrier()
        if comm.Get_rank() == 0:
            print(f"{name}: {time.perf_counter() - t:.1f} s, load {os.getloadavg()[0]:.2f}", flush=True)
