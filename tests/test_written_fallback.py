"""Issue 27, part 3: no refusal while a form of the schedule fits; part 2: ``proto="auto"`` writes once.

A schedule that does not fit the MSCCL runtime even merged and spread (a
multi-dimension pipeline: its chunks interleave, nothing merges) is written
as the same algorithm with fewer chunks, with one line saying so; only when
nothing fits is it refused, naming the limit. A tiny XML-element limit
forces the fallback on a small case. The time ``write_msccl`` reports is
the one ``ccsynth simulate FILE`` prints for the file.
"""

from __future__ import annotations

import dataclasses
import json
import xml.etree.ElementTree as ET

import pytest

import ccsynth.formats.msccl as msccl_mod
from ccsynth.cli import main
from ccsynth.collectives.spec import Collective
from ccsynth.errors import ExportLimitError
from ccsynth.collectives.schedule import save_schedule
from ccsynth.formats.msccl import EXECUTOR_LIMITS, schedule_from_msccl_xml, write_msccl
from ccsynth.formats.msccl import written as written_mod
from ccsynth.synth.baselines import make_baseline
from ccsynth.synth.coarser import coarser_forms
from ccsynth.synth.multidim.lowering import to_schedule
from ccsynth.synth.multidim.search import schedule_multidim
from ccsynth.synth.simulate import simulate
from ccsynth.topologies import get_topology

TOPO = "hierarchical:2x2@200,50"
SIZE = 4 << 20


@pytest.fixture(scope="module")
def multidim():
    """A multi-dimension allgather of 3 interleaved chunks on 4 ranks, as synth makes it."""
    topo = get_topology(TOPO)
    md = schedule_multidim(topo, "allgather", SIZE, "fixed")
    assert md.n_chunks > 1
    return topo, to_schedule(md, topo).with_meta(size_bytes=SIZE)


def _simulated(capsys, path, topo: str, size: int) -> float:
    capsys.readouterr()
    assert main(["simulate", str(path), "-t", topo, "-s", str(size), "--json"]) == 0
    return json.loads(capsys.readouterr().out)["results"][0]["time_us"]


def _elements(xml: str) -> int:
    """XML elements the runtime's parser reads for the largest gpu: the algo, every gpu's tag, its own
    threadblocks and steps (``nop`` steps included)."""
    gpus = list(ET.fromstring(xml).iter("gpu"))
    return len(gpus) + max(sum(1 for _ in gpu.iter()) for gpu in gpus)


def test_a_schedule_that_does_not_fit_is_written_with_fewer_chunks(multidim, tmp_path, capsys):
    topo, sched = multidim
    fine = write_msccl(sched, topology=topo, size_bytes=SIZE)
    assert fine.notes == () and _elements(fine.xml) > 20
    tiny = dataclasses.replace(EXECUTOR_LIMITS, max_elements=20)
    with pytest.raises(ExportLimitError, match="XML elements"):
        write_msccl(sched, topology=topo, size_bytes=SIZE, limits=tiny, coarsen=False)
    w = write_msccl(sched, topology=topo, size_bytes=SIZE, limits=tiny)
    assert len(w.notes) == 1 and "with fewer chunks" in w.notes[0] and "20 allowed" in w.notes[0]
    assert _elements(w.xml) <= 20 < _elements(fine.xml)
    assert w.schedule.collective.chunk_factor < sched.collective.chunk_factor or len(w.schedule.ops) < len(sched.ops)
    assert w.time_us >= fine.time_us * (1 - 1e-9)  # coarser: no faster, in the model
    path = tmp_path / "coarse.xml"
    path.write_text(w.xml)
    assert w.time_us == _simulated(capsys, path, TOPO, SIZE)


def test_nothing_fits_is_refused_naming_the_limit(multidim):
    topo, sched = multidim
    with pytest.raises(ExportLimitError) as e:
        write_msccl(sched, topology=topo, size_bytes=SIZE, limits=dataclasses.replace(EXECUTOR_LIMITS, max_elements=8))
    text = str(e.value)
    assert "XML elements, at most 8 allowed" in text and text.endswith(").") and text.count("does not fit") == 1


def test_cli_export_writes_the_fitting_form_or_refuses(multidim, tmp_path, capsys, monkeypatch):
    topo, sched = multidim
    src, out = tmp_path / "md.json", tmp_path / "md.xml"
    save_schedule(sched, src)
    monkeypatch.setattr(msccl_mod, "EXECUTOR_LIMITS", dataclasses.replace(EXECUTOR_LIMITS, max_elements=20))
    capsys.readouterr()
    assert main(["export", str(src), "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "fallback:" in err and "fewer chunks" in err
    assert _elements(out.read_text()) <= 20
    back = schedule_from_msccl_xml(out.read_text())
    assert _simulated(capsys, out, TOPO, SIZE) == simulate(back, topo, SIZE).time_us
    monkeypatch.setattr(msccl_mod, "EXECUTOR_LIMITS", dataclasses.replace(EXECUTOR_LIMITS, max_elements=8))
    bad = tmp_path / "bad.xml"
    assert main(["export", str(src), "-o", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "at most 8 allowed" in err and err.count("\n") == 1 and not bad.exists()


def test_coarser_forms_of_a_baseline_and_of_an_unknown_schedule():
    t = get_topology("ring:4")
    s = make_baseline("ring", Collective("allgather", 4, chunk_factor=4), t)
    assert [c.collective.chunk_factor for _, c in coarser_forms(s, t, 1 << 20)] == [2, 1]
    assert list(coarser_forms(s.with_meta(algorithm="milp"), t, 1 << 20)) == []


def test_auto_lays_a_large_schedule_out_once(multidim, monkeypatch, tmp_path, capsys):
    topo, sched = multidim
    calls = []
    real = written_mod.lower_schedule

    def counting(*a, **k):
        calls.append(k["proto"])
        return real(*a, **k)

    monkeypatch.setattr(written_mod, "lower_schedule", counting)
    monkeypatch.setattr(written_mod, "RELAYOUT_MAX_OPS", 0)
    w = write_msccl(sched, topology=topo, size_bytes=SIZE)
    assert calls == ["Simple"]
    # the protocol written is the fastest of the three on that one layout
    times = {}
    for p in ("Simple", "LL", "LL128"):
        text = w.xml.replace(f'proto="{w.proto}"', f'proto="{p}"', 1)
        times[p] = simulate(schedule_from_msccl_xml(text), topo, SIZE).time_us
    assert ET.fromstring(w.xml).get("proto") == w.proto and w.time_us == min(times.values())
    path = tmp_path / "auto.xml"
    path.write_text(w.xml)
    assert w.time_us == _simulated(capsys, path, TOPO, SIZE)
