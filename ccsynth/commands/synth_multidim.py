"""``ccsynth synth --scheduler fixed|themis|themis-flex|lp|auto``: the multi-dimension schedulers, side by side.

On a topology with network dimensions (``hierarchical:4x8x4@200,100,50``,
``ndv2xN`` and ``dgx_a100xN`` as NVLink x NIC, ...) this runs every
scheduler of :mod:`ccsynth.synth.multidim` in the dimension-level model, each
at the chunk count it chooses, and prints them side by side: chunks, time,
utilization (the bandwidth bound :func:`~ccsynth.synth.multidim.lp.bandwidth_bound`
over the time), speedup over the fixed order, the LP's own bound and the
scheduling time; then the chosen scheduler's per-dimension figures, and
the figure of what is written. A scheduler the user names that is slower
than the fixed order in the model says so in one line (``--json``:
``loses_to_fixed``).

What is written (:class:`Written`), and what its printed time is:

* ``-o FILE.json`` (default format): the Schedule IR where the chosen
  schedule becomes one exactly, at its own chunks
  (:func:`~ccsynth.synth.multidim.lowering.fits_ir`: up to
  :data:`~ccsynth.synth.multidim.lowering.MAX_IR_RANKS` ranks and a
  bounded op count), priced by the event-driven simulator; otherwise the
  phase plan file (``ccsynth.phase_plan``, :mod:`ccsynth.formats.phase_plan_file`)
  at the scheduler's chunk count, any rank count, priced by the
  dimension-level model in the file's own task order;
* ``-f phase-plan``: the phase plan file always;
* ``-o FILE.xml`` (MSCCL XML): the IR, so at most ``MAX_IR_RANKS`` ranks
  (more is refused before any work); where the chosen schedule is too
  large for the IR or its XML for the MSCCL runtime's limits, the same
  scheduler capped to :func:`~ccsynth.synth.multidim.lowering.ir_max_chunks`
  chunks, then half as many, ... is written (the first that fits), the
  printed figure is that schedule's (the XML read back and simulated) and
  one line says so.

Without ``-o`` the figure printed is the one the default ``-o FILE.json``
would write. In every case the printed time is what ``ccsynth simulate
FILE`` gives for the written file (MSCCL XML: with ``-t`` and ``-s``,
which an XML file does not record).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ccsynth.atomic import write_text
from ccsynth.commands._common import human, json_doc, print_json, print_table
from ccsynth.errors import CCSynthError, TopologyError
from ccsynth.tolerance import is_less

if TYPE_CHECKING:  # pragma: no cover
    from ccsynth.synth.multidim.search import MultiDimSchedule

__all__ = ["run_multidim", "Written", "fixed_order_verdict"]

#: how the IR forms are priced
PRICED_BY_SIMULATOR = "event-driven simulator"


@dataclass(frozen=True)
class Written:
    """What ``-o`` writes (or would write): its form, the schedule in it, its time and how it was priced."""

    form: str  # "phase-plan", "json" (the Schedule IR) or "msccl-xml"
    md: MultiDimSchedule  # the schedule written (the chosen one, or the capped one where a limit applies)
    time_us: float
    priced_by: str
    text: str  # the file's text
    model_us: float  # the written schedule in the dimension-level model
    limit: str | None = None  # one line where a limit made it another schedule than the chosen one
    n_ops: int | None = None  # the IR forms' ops
    notes: tuple[str, ...] = ()  # MSCCL XML: the fallbacks the exporter took to fit the runtime, one line each

    def to_dict(self) -> dict:
        return {"form": self.form, "chunks": self.md.n_chunks, "time_us": self.time_us, "priced_by": self.priced_by,
                "limit": self.limit, "n_ops": self.n_ops, "model_us": self.model_us,
                "fallbacks": list(self.notes)}


def fixed_order_verdict(name: str, chosen_us: float, fixed_us: float) -> str | None:
    """The line saying that scheduler ``name``, named by the user, loses to the fixed order (None if it does
    not, or is ``fixed`` or ``auto``).

    >>> fixed_order_verdict("themis", 480.9, 368.5)
    'themis loses to the fixed order here: 480.900 us against 368.500 us in the model (0.766x its speed); --scheduler fixed or auto writes the faster one'
    """
    if name in ("fixed", "auto") or not is_less(fixed_us, chosen_us):
        return None
    return (f"{name} loses to the fixed order here: {chosen_us:.3f} us against {fixed_us:.3f} us in the model "
            f"({fixed_us / chosen_us:.3f}x its speed); --scheduler fixed or auto writes the faster one")


def _check_form(topo, fmt: str) -> None:
    """MSCCL XML needs the IR: refused above MAX_IR_RANKS ranks, before any work."""
    from ccsynth.synth.multidim.lowering import MAX_IR_RANKS

    if fmt == "msccl-xml" and topo.n_ranks > MAX_IR_RANKS:
        raise CCSynthError(f"MSCCL XML of a multi-dimension schedule needs the Schedule IR, at most MAX_IR_RANKS = "
                           f"{MAX_IR_RANKS} ranks; {topo.name!r} has {topo.n_ranks}: write the phase plan "
                           f"(-o FILE.json or -f phase-plan)")


def _phase_plan(topo, md, opts, size: int) -> Written:
    """``md`` as a phase plan file, priced as read back from its own text (what ``ccsynth simulate`` does)."""
    from ccsynth.formats.files import verify_phase_plan_file
    from ccsynth.formats.phase_plan_file import phase_plan_file, phase_plan_file_from_dict
    from ccsynth.synth.multidim.plan_price import price_phase_plan

    from ccsynth.formats.recorded_topology import with_topology

    pf = with_topology(phase_plan_file(md), topo)
    back = phase_plan_file_from_dict(json.loads(pf.to_json()), "the written phase plan")
    verify_phase_plan_file(back, topo)
    price = price_phase_plan(back.plan, md.net, size, opts)
    return Written("phase-plan", md, price.time_us, price.priced_by, pf.with_price(price.time_us).to_json() + "\n",
                   md.makespan_us)


def _ir_candidates(md, size: int, opts):
    """``md`` where the IR takes it, then its scheduler capped to :func:`~ccsynth.synth.multidim.lowering.ir_max_chunks`
    chunks and to half as many, ..., down to one: what MSCCL XML may be written from, best first."""
    from ccsynth.synth.multidim import schedule_multidim
    from ccsynth.synth.multidim.lowering import fits_ir, ir_max_chunks

    if fits_ir(md):
        yield md
    cap = ir_max_chunks(md.kind, md.net)
    while cap >= 1:
        capped = schedule_multidim(md.net, md.kind, size, md.scheduler, max_chunks=cap, options=opts)
        if capped.n_chunks < md.n_chunks or not fits_ir(md):
            yield capped
        cap //= 2


def _ir(args, topo, md, fmt: str, size: int, opts) -> Written:
    """``md`` as a Schedule IR, JSON or MSCCL XML, priced as written. MSCCL XML takes the first of
    :func:`_ir_candidates` that the IR and the MSCCL runtime's limits take (one line says so when that is not
    ``md`` itself); JSON is written only where ``md`` itself becomes an IR (:func:`_written`)."""
    from ccsynth.collectives.verify import verify
    from ccsynth.errors import ExportLimitError
    from ccsynth.formats.msccl import write_msccl
    from ccsynth.synth.simulate import simulate
    from ccsynth.synth.multidim.lowering import to_schedule

    refused = None
    for cand in _ir_candidates(md, size, opts):
        sched = to_schedule(cand, topo)
        verify(sched, topo)
        if fmt != "msccl-xml":
            res = simulate(sched, topo, size)
            from ccsynth.formats.recorded_topology import with_topology

            sched = with_topology(sched.with_meta(verified=True, predicted_us=res.time_us, size_bytes=size), topo)
            return Written(fmt, cand, res.time_us, PRICED_BY_SIMULATOR, sched.to_json() + "\n", cand.makespan_us,
                           n_ops=len(sched.ops))
        try:
            w = write_msccl(sched.with_meta(verified=True), topology=topo, size_bytes=size, limits=_msccl_limits(args))
        except ExportLimitError as e:
            refused = e
            continue
        text = w.xml
        limit = None
        if cand is not md:
            why = "the MSCCL runtime's limits" if refused is not None else "the Schedule IR's size"
            limit = (f"limited: MSCCL XML takes {md.scheduler} at {cand.n_chunks} chunks within {why}: the figure is "
                     f"that schedule's; at its own {md.n_chunks} chunks it is {md.makespan_us:.3f} us in the model "
                     f"(-o FILE.json writes that as a phase plan)")
        return Written(fmt, cand, w.time_us, PRICED_BY_SIMULATOR, text, cand.makespan_us, limit, len(sched.ops),
                       notes=w.notes)
    raise CCSynthError(f"no chunk count of {md.scheduler} fits MSCCL XML: {refused}")


def _msccl_limits(args):
    from ccsynth.formats.msccl import EXECUTOR_LIMITS

    steps = getattr(args, "msccl_max_steps", None)
    return EXECUTOR_LIMITS if steps is None else EXECUTOR_LIMITS.with_max_steps(steps)


def _written(args, topo, chosen, fmt: str, size: int, opts) -> Written:
    """The form ``-o`` writes (see the module docstring), built, verified and priced."""
    from ccsynth.synth.multidim.lowering import fits_ir

    if fmt == "phase-plan" or (fmt == "json" and not fits_ir(chosen)):
        return _phase_plan(topo, chosen, opts, size)
    return _ir(args, topo, chosen, fmt, size, opts)


def _schedulers(net, kind: str, size: int, opts) -> dict:
    """Every policy at its own chunk count: policy -> (schedule, seconds)."""
    from ccsynth.synth.multidim import POLICIES, schedule_multidim

    side = {}
    for policy in POLICIES:
        t0 = time.perf_counter()
        md = schedule_multidim(net, kind, size, policy, options=opts)
        side[policy] = (md, time.perf_counter() - t0)
    return side


def run_multidim(args, topo, kind: str, size: int, opts, scheduler: str, fmt: str) -> int:
    from ccsynth.synth.multidim import check_scheduler, dim_net
    from ccsynth.synth.multidim.chunks import check_kind
    from ccsynth.synth.multidim.cost import PhaseCosts
    from ccsynth.synth.multidim.lp import bandwidth_bound

    name = check_scheduler(scheduler)
    check_kind(kind)
    if not topo.dims:
        raise TopologyError(
            f"--scheduler needs a topology with network dimensions; {topo.name!r} has none (try "
            f"hierarchical:AxBxC@BW,BW,BW, ndv2xN, dgx_a100xN, dgx_h100xN, fat_tree:NxG or torus:AxB)")
    _check_form(topo, fmt)
    net = dim_net(topo)
    bound = bandwidth_bound(net, PhaseCosts(net), kind, size, opts)
    side = _schedulers(net, kind, size, opts)
    fixed_us = side["fixed"][0].makespan_us
    rows = [(policy, md.n_chunks, md.makespan_us, bound / md.makespan_us, fixed_us / md.makespan_us,
             md.lp_bound_us if md.lp_bound_us is not None else "-", secs) for policy, (md, secs) in side.items()]
    if name == "auto":
        chosen = min(side.values(), key=lambda ms: ms[0].makespan_us)[0]
    else:
        chosen = side[name][0]
    verdict = fixed_order_verdict(name, chosen.makespan_us, fixed_us)
    t0 = time.perf_counter()
    written = _written(args, topo, chosen, fmt, size, opts)
    writing_s = time.perf_counter() - t0
    if args.output is not None:
        write_text(args.output, written.text)
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
        "time_us": written.time_us,
        "written": {**written.to_dict(), "writing_s": writing_s},
        "max_chunks": written.md.n_chunks if written.limit else None,
        "vs_fixed": fixed_us / chosen.makespan_us,
        "loses_to_fixed": verdict is not None,
        "output": args.output,
        "output_format": written.form if args.output is not None else None,
    })
    if written.form != "phase-plan":
        figures["ir"] = {"n_ops": written.n_ops, "time_us": written.time_us, "model_us": written.model_us,
                         "model_error": abs(written.time_us - written.model_us) / written.time_us}
    if args.json:
        print_json(figures)
        return 0
    _print(args, topo, net, kind, size, bound, rows, chosen, written, verdict)
    return 0


_FORMS = {"phase-plan": "phase plan (ccsynth.phase_plan)", "json": "Schedule IR (ccsynth JSON)",
          "msccl-xml": "MSCCL XML"}


def _print(args, topo, net, kind, size, bound, rows, chosen, written: Written, verdict: str | None) -> None:
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
    if written.form != "phase-plan":
        print(f"Schedule IR: {written.n_ops} ops, verified; event-driven simulator {written.time_us:.3f} us "
              f"(model {written.model_us:.3f} us, "
              f"{abs(written.time_us - written.model_us) / written.time_us:.2%} apart)")
    lp = written.md.lp_bound_us
    print(f"time {written.time_us:.3f} us: {_FORMS[written.form]}, {written.md.n_chunks} chunks, priced by the "
          f"{written.priced_by} (as ccsynth simulate FILE gives it)"
          + (f"; {written.time_us / lp:.3f}x the LP's bound" if lp else ""))
    if written.limit:
        print(written.limit)
    for note in written.notes:
        print(f"fallback: {note}")
    if verdict:
        print(verdict)
    if args.output is not None:
        print(f"wrote {args.output} ({_FORMS[written.form]})")
