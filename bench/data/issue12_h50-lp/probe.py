import sys
import time
import pickle
from ccsynth.formats.files import get_topology
from ccsynth.synth.multidim import dim_net, schedule_multidim
from ccsynth.synth.multidim.cost import PhaseCosts
from ccsynth.synth.multidim.losses import dimension_losses

tops = sys.argv[1].split(";")
for name in tops:
    net = dim_net(get_topology(name))
    costs = PhaseCosts(net)
    t0 = time.process_time()
    s = schedule_multidim(net, "allreduce", 1 << 30, "lp")
    cpu = time.process_time() - t0
    print(
        name,
        f"lp {s.makespan_us:.1f} T* {s.lp_bound_us:.1f} ratio {s.makespan_us / s.lp_bound_us:.4f} chunks {s.n_chunks} origin {s.origin!r} cpu {cpu:.1f}s prio {s.timing.priority}",
    )
    for x in dimension_losses(costs, s.timing):
        print(
            f"  dim{x.dim}: floor {x.floor_us:.1f} exp {x.exposed_us:.1f} fill {x.fill_us:.1f} idle {x.idle_us:.1f} drain {x.drain_us:.1f}"
        )
    print("  orders", s.order_counts()[:30])
    if len(sys.argv) > 2:
        with open(sys.argv[2] + name.replace(":", "_").replace("@", "_") + ".pkl", "wb") as fh:
            pickle.dump(s, fh)
