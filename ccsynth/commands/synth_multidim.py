"""``ccsynth synth --scheduler fixed|themis|themis-flex|lp|auto``: the multi-dimension schedulers, side by side.

On a topology with network dimensions (``hierarchical:4x8x4@200,100,50``,
``ndv2xN`` and ``dgx_a100xN`` as NVLink x NIC, ...) this runs every
scheduler of :mod:`ccsynth.synth.multidim` in the dimension-level model and
prints them side by side: chunks, time, utilization (the bandwidth bound
:func:`~ccsynth.synth.multidim.lp.bandwidth_bound` over the time), speedup
over the fixed order, the LP's own bound and the scheduling time; then the
chosen scheduler's per-dimension figures. Up to
:data:`~ccsynth.synth.multidim.lowering.MAX_IR_RANKS` ranks (128) the chosen
schedule also becomes a Schedule IR (chunk counts the IR takes), verified,
simulated by the event-driven simulator (the model's figure is printed next
to it) and written with ``-o`` (ccsynth JSON or MSCCL XML).
"""

from __future__ import annotations

import time

from ccsynth.atomic import write_text
from ccsynth.formats.written import write_msccl_file
from ccsynth.commands._common import human, json_doc, print_json, print_table
from ccsynth.errors import CCSynthError, TopologyError

__all__ = ["run_multidim"]


def run_multidim(args, topo, kind: str, size: int, opts, scheduler: str, fmt: str) -> int:
    from ccsynth.collectives.schedule import save_schedule
    from ccsynth.collectives.verify import verify
    from ccsynth.synth.multidim import POLICIES, check_scheduler, dim_net, schedule_multidim
    from ccsynth.synth.multidim.chunks import check_kind
    from ccsynth.synth.multidim.cost import PhaseCosts
    from ccsynth.synth.multidim.lowering import MAX_IR_RANKS, ir_max_chunks, to_schedule
    from ccsynth.synth.multidim.lp import bandwidth_bound
    from ccsynth.synth.simulate import simulate

    name = check_scheduler(scheduler)
    check_kind(kind)
    if not topo.dims:
        raise TopologyError(
            f"--scheduler needs a topology with network dimensions; {topo.name!r} has none (try "
            f"hierarchical:AxBxC@BW,BW,BW, ndv2xN, dgx_a100xN, dgx_h100xN, fat_tree:NxG or torus:AxB)")
    lowers = topo.n_ranks <= MAX_IR_RANKS
    if args.output is not None and not lowers:
        raise CCSynthError(f"-o: a multi-dimension schedule becomes a Schedule IR on at most {MAX_IR_RANKS} ranks; "
                           f"{topo.name!r} has {topo.n_ranks} (drop -o: the figures are printed)")
    net = dim_net(topo)
    bound = bandwidth_bound(net, PhaseCosts(net), kind, size, opts)
    cap = ir_max_chunks(kind, net) if lowers else None
    rows, side = [], {}
    chosen = None
    for policy in POLICIES:
        t0 = time.perf_counter()
        md = schedule_multidim(net, kind, size, policy, max_chunks=cap, options=opts)
        side[policy] = (md, time.perf_counter() - t0)
    fixed_us = side["fixed"][0].makespan_us
    for policy, (md, secs) in side.items():
        rows.append((policy, md.n_chunks, md.makespan_us, bound / md.makespan_us, fixed_us / md.makespan_us,
                     md.lp_bound_us if md.lp_bound_us is not None else "-", secs))
    if name == "auto":
        chosen = min(side.values(), key=lambda ms: ms[0].makespan_us)[0]
    else:
        chosen = side[name][0]
    figures = json_doc("synth.multidim", {
        "topology": topo.name,
        "n_ranks": topo.n_ranks,
        "collective": kind,
        "size_bytes": size,
        "scheduler": name,
        "chosen": chosen.to_dict(),
        "bandwidth_bound_us": bound,
        "utilization": bound / chosen.makespan_us,
        "schedulers": {p: {**md.to_dict(), "utilization": bound / md.makespan_us, "scheduling_s": secs}
                       for p, (md, secs) in side.items()},
        "max_chunks": cap,
    })
    wrote = None
    if lowers:
        t0 = time.perf_counter()
        sched = to_schedule(chosen, topo)
        verify(sched, topo)
        res = simulate(sched, topo, size)
        sched = sched.with_meta(verified=True, predicted_us=res.time_us, size_bytes=size)
        figures["ir"] = {"n_ops": len(sched.ops), "time_us": res.time_us, "model_us": chosen.makespan_us,
                         "model_error": abs(res.time_us - chosen.makespan_us) / res.time_us,
                         "lower_bound_us": res.lower_bound_us, "lowering_s": time.perf_counter() - t0}
        if args.output is not None:
            if fmt == "msccl-xml":  # what is printed is the file's time (ccsynth simulate FILE gives it too)
                w = write_msccl_file(sched, topology=topo, size_bytes=size)
                figures["written"] = {"format": fmt, "time_us": w.time_us, "fallbacks": list(w.notes),
                                      "verified": w.verified}
                write_text(args.output, w.text)
            else:
                save_schedule(sched, args.output)
            wrote = args.output
    figures["output"] = wrote
    figures["output_format"] = fmt if wrote else None
    if args.json:
        print_json(figures)
        return 0
    print(f"multi-dimension {kind} on {topo.name} ({topo.n_ranks} ranks; {net.describe()}), {human(size)}: "
          f"bandwidth bound {bound:.3f} us")
    print_table(["scheduler", "chunks", "time (us)", "utilization", "vs fixed", "LP bound (us)", "sched (s)"], rows)
    print(f"chosen: {chosen.scheduler} ({chosen.origin}), {chosen.n_chunks} chunks, {chosen.makespan_us:.3f} us in "
          f"the dimension-level model; orders " + ", ".join(
              f"{'-'.join(net.dims[d].name for d in o)} x{u}" for o, u in chosen.order_counts()[:4])
          + (" ..." if len(chosen.order_counts()) > 4 else ""))
    util = chosen.timing.utilization(net)
    print_table(["dimension", "size", "bw (GB/s)", "algorithm", "busy", "utilization"],
                [(spec.name, spec.size, spec.bw, alg, f"{b:.0%}", f"{u:.0%}") for spec, alg, b, u in
                 zip(net.dims, chosen.algorithms_used(), chosen.timing.busy_fraction(), util)])
    if "ir" in figures:
        ir = figures["ir"]
        print(f"Schedule IR: {ir['n_ops']} ops, verified; event-driven simulator {ir['time_us']:.3f} us "
              f"(model {ir['model_us']:.3f} us, {ir['model_error']:.2%} apart)")
    else:
        print(f"(above {MAX_IR_RANKS} ranks: no Schedule IR; the MPI runtime runs the phase plan directly)")
    if "written" in figures:
        w = figures["written"]
        print(f"written MSCCL XML: {w['time_us']:.3f} us in the event-driven simulator, as the runtime runs it"
              + "".join(f"\n  fallback: {n}" for n in w["fallbacks"]))
    if wrote:
        print(f"wrote {wrote} ({'MSCCL XML' if fmt == 'msccl-xml' else 'ccsynth JSON'})")
    return 0
