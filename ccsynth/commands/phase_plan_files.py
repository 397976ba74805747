"""The phase plan file (``ccsynth.phase_plan``) in ``ccsynth verify``, ``simulate`` and ``export``.

Each of the three commands asks :func:`ccsynth.formats.files.file_kind`
first and hands a phase plan here:

* ``verify FILE [-t T]`` -- :func:`~ccsynth.collectives.verify_phase_plan.verify_phase_plan`
  (chunks, shares, tasks, phase schedules; with ``-t``, or the topology the
  file names when it can be built, its ranks, dimensions and the
  algorithms each dimension can run);
* ``simulate FILE [-t T] [-s S | --sizes ...]`` -- the dimension-level model
  in the file's own task order (:mod:`ccsynth.synth.multidim.plan_price`),
  at the size the file records unless told otherwise: the figure ``ccsynth
  synth`` printed for it;
* ``export FILE -o x.json|x.xml`` -- the plan expanded to a Schedule IR
  (:func:`~ccsynth.synth.multidim.lowering.to_schedule`), verified, written
  as ccsynth JSON or MSCCL XML, where the IR takes it
  (:func:`~ccsynth.synth.multidim.lowering.fits_ir`); a plan too large is
  refused with the limit named.
"""

from __future__ import annotations

import sys

from ccsynth.atomic import check_writable, write_text
from ccsynth.commands._common import human, json_doc, print_json, print_table, sizes_from, file_topology
from ccsynth.errors import CCSynthError

__all__ = ["verify_plan_file", "simulate_plan_file", "export_plan_file"]


def _topology(args, pf, required: bool):
    """The topology of ``-t``, else the one the file records (None where it records none that loads and none is
    required)."""
    return file_topology(args, pf, args.file, required=required)


def verify_plan_file(args) -> int:
    from ccsynth.formats.files import load_phase_plan, verify_phase_plan_file
    from ccsynth.synth.multidim.phases import from_phase_plan

    pf = load_phase_plan(args.file, verify=False)
    topo = _topology(args, pf, required=False)
    report = verify_phase_plan_file(pf, topo)
    if topo is not None:
        from_phase_plan(pf.plan, topo, pf.size_bytes)  # every dimension runs the algorithms the plan gives it
    plan = pf.plan
    if args.json:
        d = {"file": args.file, "kind": "phase_plan", "collective": plan.kind, "scheduler": plan.scheduler, "ok": True,
             **report.to_dict()}
        if topo is not None:
            d["topology"] = topo.name
        print_json(json_doc("verify", d))
        return 0
    where = f" on {topo.name}" if topo is not None else ""
    print(f"OK: {args.file} (phase plan, {plan.scheduler or 'no scheduler named'}) implements {plan.kind} on "
          f"{report.n_ranks} ranks ({'x'.join(map(str, plan.sizes))}){where}: {report.n_chunks} chunks of "
          f"{report.total_units} units, {report.n_tasks} phases, {report.phase_schedules} phase schedules proven")
    return 0


def simulate_plan_file(args) -> int:
    from ccsynth.formats.files import load_phase_plan, verify_phase_plan_file
    from ccsynth.synth.multidim.plan_price import price_phase_plan

    if args.local_bw is not None or args.timeline is not None:
        raise CCSynthError("--local-bw and --timeline take a Schedule IR; a phase plan is priced in the dimension-level "
                           "model (ccsynth export FILE -o x.json expands it where the IR takes it)")
    pf = load_phase_plan(args.file, verify=False)
    topo = _topology(args, pf, required=True)
    verify_phase_plan_file(pf, topo)
    sizes = [pf.size_bytes] if args.size is None and args.sizes is None else sizes_from(args)
    prices = [price_phase_plan(pf.plan, topo, s) for s in sizes]
    if args.json:
        print_json(json_doc("simulate", {"file": args.file, "kind": "phase_plan", "schedule": pf.plan.scheduler,
                                         "topology": topo.name, "collective": {"kind": pf.plan.kind,
                                                                               "n_ranks": pf.n_ranks},
                                         "results": [p.to_dict() for p in prices]}))
        return 0
    print(f"# {args.file}: phase plan ({pf.plan.scheduler}, {len(pf.plan.chunks)} chunks), {pf.plan.kind} on "
          f"{topo.name} ({pf.n_ranks} ranks); priced by the {prices[0].priced_by} in the file's task order")
    print_table(["size", "time (us)", "algbw (GB/s)", "busbw (GB/s)", "bw bound (us)", "gap"],
                [(human(p.size_bytes), f"{p.time_us:.3f}", p.algbw, p.busbw, p.bandwidth_bound_us, f"{p.gap:.3f}x")
                 for p in prices])
    print("# per-dimension utilization (bytes a rank sends there / what the dimension carries in that time)")
    print_table(["size"] + [n for n, _ in prices[0].dimensions],
                [(human(p.size_bytes), *(f"{u:.0%}" for _, u in p.dimensions)) for p in prices])
    return 0


def export_plan_file(args, pf, topo, fmt: str, xml_opts: dict, min_bytes, max_bytes) -> int:
    """``pf`` (read, not yet verified) expanded to a Schedule IR and written as ``fmt``."""
    from ccsynth.collectives.verify import verify
    from ccsynth.formats.files import verify_phase_plan_file
    from ccsynth.formats.msccl import schedule_to_msccl_xml
    from ccsynth.synth.multidim.lowering import ir_refusal, to_schedule
    from ccsynth.synth.multidim.phases import from_phase_plan

    to_file = args.output not in (None, "-")
    if to_file:
        check_writable(args.output)
    topo = topo or _topology(args, pf, required=True)
    verify_phase_plan_file(pf, topo)
    md = from_phase_plan(pf.plan, topo, pf.size_bytes)
    why = ir_refusal(md)
    if why is not None:
        raise CCSynthError(f"{args.file}: this phase plan ({len(pf.plan.chunks)} chunks of {pf.total_units} units on "
                           f"{pf.n_ranks} ranks) does not expand to a Schedule IR: {why}. It runs as it is (ccsynth "
                           f"simulate prices it, the MPI runtime runs it); ccsynth synth -o FILE.xml writes a capped "
                           f"schedule")
    sched = to_schedule(md, topo)
    verify(sched, topo)
    sched = sched.with_meta(verified=True, size_bytes=pf.size_bytes)
    if fmt == "json":
        from ccsynth.formats.recorded_topology import with_topology

        text = with_topology(sched, topo).to_json() + "\n"
    else:
        text = schedule_to_msccl_xml(sched, min_bytes=min_bytes, max_bytes=max_bytes, name=args.name,
                                     **{**xml_opts, "topology": topo})
    if to_file:
        write_text(args.output, text)
        print(f"wrote {args.output}: the phase plan expanded to {len(sched.ops)} ops ({sched.collective.describe()}), "
              f"verified, as {'ccsynth JSON' if fmt == 'json' else 'MSCCL XML'}")
    else:
        sys.stdout.write(text)
    return 0
