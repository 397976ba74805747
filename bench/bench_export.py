"""The export suite (issue 27): what ``ccsynth synth`` writes, against what it synthesized and the exact bound.

For every machine, collective and size: the candidates of
:func:`~ccsynth.synth.synthesize.synthesize_candidates` (default settings)
judged as written (:func:`~ccsynth.formats.written.best_written`), as MSCCL
XML within msccl-executor-nccl's default limits and as ccsynth JSON. One row
per case:

``machine, collective, size, IR (us), written XML (us), its protocol, written JSON (us), XML / IR,
printed = file, limits, fallbacks, refused, exact bound (us), XML gap, synthesis seconds``

The IR is priced as Simple (the catalog's message costs are Simple's); an
XML file in LL or LL128 (chosen where it is faster) can beat it, and its
gap is taken against the smaller of its protocol's bound and the machine's
(:func:`~ccsynth.synth.simulate.machine_bound`), as ``ccsynth synth`` and
``ccsynth simulate`` print it.

*IR* is the fastest candidate in the simulator before writing; *written*
the file's own schedule (read back from the text, as ``ccsynth simulate``
reads it) simulated at the size; *printed = file* checks that the time the
command prints is that same number; *refused* says that no candidate could
be written within the limits (the row's XML time is then empty).

Run (``--out DIR`` keeps every written file and the rows as JSON; nothing is
written into the source tree; progress on standard error)::

    python -m ccsynth.bench.bench_synth --suite export --out /tmp/export
    python -m ccsynth.bench.bench_synth --suite export --topologies dgx1 --collectives allreduce --sizes 1M
"""

from __future__ import annotations

import os
import time

from ccsynth.atomic import write_text
from ccsynth.collectives.spec import Collective
from ccsynth.errors import ExportLimitError
from ccsynth.formats.msccl import EXECUTOR_LIMITS, MscclLimits, schedule_from_msccl_xml
from ccsynth.formats.written import best_written
from ccsynth.synth.bounds import lower_bound
from ccsynth.synth.simulate import simulate
from ccsynth.synth.synthesize import synthesize_candidates
from ccsynth.topologies.model import Topology
from ccsynth.units import format_size

__all__ = ["EXPORT_TOPOLOGIES", "EXPORT_COLLECTIVES", "EXPORT_SIZES", "export_case", "export_markdown"]

EXPORT_TOPOLOGIES = ("dgx1", "dgx2", "dgx_a100", "dgx_h100", "dgx_a100x2", "ndv2x2")
EXPORT_COLLECTIVES = ("allgather", "reduce_scatter", "allreduce", "alltoall")
EXPORT_SIZES = "1M,64M,1G"


def export_case(topology: Topology, kind: str, size: int, *, limits: MscclLimits = EXECUTOR_LIMITS,
                out_dir: str | None = None) -> dict:
    """One row of the export suite (module docstring); with ``out_dir`` the two files are kept there."""
    t0 = time.perf_counter()
    coll = Collective(kind, topology.n_ranks)
    ranked = synthesize_candidates(topology, coll, size_bytes=size)
    ir = ranked.best
    try:
        xml = best_written(ranked, fmt="msccl-xml", limits=limits)
        refused = None
    except ExportLimitError as e:
        xml, refused = None, str(e)
    js = best_written(ranked, fmt="json")
    seconds = time.perf_counter() - t0
    bound = lower_bound(coll, topology, size)
    back = None if xml is None else simulate(schedule_from_msccl_xml(xml.text), topology, size)
    reread = None if back is None else back.time_us
    # a file in LL/LL128 is measured against what any protocol could reach (the gap synth and simulate print)
    xml_bound = bound.time_us if back is None else back.lower_bound_us
    if out_dir is not None:
        stem = os.path.join(out_dir, f"{topology.name}_{kind}_{format_size(size)}")
        write_text(stem + ".json", js.text)
        if xml is not None:
            write_text(stem + ".xml", xml.text)
    return {
        "topology": topology.name, "n_ranks": topology.n_ranks, "collective": kind, "size_bytes": size,
        "ir_us": ir.time_us, "ir_candidate": ir.label,
        "xml_us": None if xml is None else xml.time_us, "xml_candidate": None if xml is None else xml.candidate.label,
        "xml_ir_us": None if xml is None else xml.ir_time_us,
        "json_us": js.time_us, "xml_over_ir": None if xml is None else xml.time_us / ir.time_us,
        "printed_is_file": None if xml is None else reread == xml.time_us,
        "limits": f"{limits.name}: {limits.max_steps} steps/threadblock, {limits.max_channels} channels, "
                  f"{limits.max_elements} elements/gpu",
        "fallbacks": [] if xml is None else list(xml.notes), "refused": refused,
        "priced": [] if xml is None else [p.to_dict() for p in xml.priced],
        "bound_us": bound.time_us, "bound_exact": bool(bound.details.get("cut_exact")),
        "proto": None if xml is None else xml.proto, "xml_bound_us": xml_bound,
        "xml_gap": None if xml is None else xml.time_us / xml_bound, "json_gap": js.time_us / bound.time_us,
        "synthesis_s": seconds,
    }


def export_markdown(rows: list[dict]) -> str:
    """The suite's table (Markdown)."""
    head = ("| machine | collective | size | IR (us) | XML (us) | proto | JSON (us) | XML / IR | printed = file | "
            "fallbacks | exact bound (us) | XML gap | synth (s) |")
    lines = [head, "|" + "---|" * 13]

    def f(v, fmt=".1f"):
        return "-" if v is None else format(v, fmt)

    for r in rows:
        falls = "refused: " + r["refused"][:60] if r["refused"] else ("; ".join(r["fallbacks"]) or "none")
        same = "-" if r["printed_is_file"] is None else ("yes" if r["printed_is_file"] else "NO")
        exact = "" if r["bound_exact"] else " (not exact)"
        lines.append(f"| {r['topology']} | {r['collective']} | {format_size(r['size_bytes'])} | {f(r['ir_us'])} | "
                     f"{f(r['xml_us'])} | {r.get('proto') or '-'} | {f(r['json_us'])} | {f(r['xml_over_ir'], '.3f')} | {same} | {falls} | "
                     f"{f(r.get('xml_bound_us', r['bound_us']))}{exact} | {f(r['xml_gap'], '.3f')} | {r['synthesis_s']:.0f} |")
    return "\n".join(lines)
