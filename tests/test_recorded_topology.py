"""Schedule, plan and phase plan files record their topology (``topology_inline``): simulate, verify and export
use them alone; a different ``-t`` is said; old files keep working with ``-t`` (formats/recorded_topology.py)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from ccsynth.cli import main
from ccsynth.formats.recorded_topology import record, recorded, resolve, with_topology
from ccsynth.topologies import get_topology
from ccsynth.topologies.io import save_topology


def cli(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    got = capsys.readouterr()
    return code, got.out, got.err


@pytest.fixture
def star6(tmp_path):
    """A topology file no catalog name rebuilds ('star6'), and a baseline schedule written for it."""
    path = tmp_path / "star6.json"
    save_topology(replace(get_topology("full:6"), name="star6"), path)
    sched = tmp_path / "s6.json"
    assert main(["baseline", "direct", "-t", str(path), "-c", "allgather", "-o", str(sched), "-q"]) == 0
    return path, sched


def test_file_topology_schedule_is_used_alone(star6, tmp_path, capsys):
    topo_file, sched = star6
    capsys.readouterr()
    d = json.loads(sched.read_text())
    assert d["topology"] == "star6" and d["topology_inline"]["name"] == "star6"
    assert d["topology_inline"]["n_ranks"] == 6 and d["version"] == 1  # an optional key: the version stays
    code, out, err = cli(capsys, "simulate", sched)
    assert code == 0 and "on star6" in out and err == "", err
    code, out, err = cli(capsys, "verify", sched)
    assert code == 0 and "on star6" in out and err == "", err  # links checked against the recorded topology
    code, out, err = cli(capsys, "export", sched, "-o", tmp_path / "s6.xml")
    assert code == 0 and "MSCCL XML" in out and (tmp_path / "s6.xml").read_text().startswith("<algo")
    code, out, err = cli(capsys, "simulate", sched, "-t", topo_file)  # the same machine given: no warning
    assert code == 0 and err == "", err


def test_a_different_topology_given_is_said(star6, capsys):
    _, sched = star6
    capsys.readouterr()
    code, out, err = cli(capsys, "simulate", sched, "-t", "full:6@50")
    assert code == 0 and "fully_connected:6@50" in out
    warnings = [line for line in err.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "made for topology 'star6'" in warnings[0] and "differs" in warnings[0]
    code, out, err = cli(capsys, "verify", sched, "-t", "ring:6")  # and where the schedule cannot run there: an error
    assert code == 2 and "warning: " in err and "error: " in err and "ring:6" in err and "Traceback" not in err


def test_old_files_without_the_record(star6, tmp_path, capsys):
    topo_file, sched = star6
    d = json.loads(sched.read_text())
    del d["topology_inline"]
    old = tmp_path / "old.json"
    old.write_text(json.dumps(d))
    capsys.readouterr()
    code, out, err = cli(capsys, "simulate", old)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "'star6' by name only" in err and "--topology" in err
    code, out, err = cli(capsys, "simulate", old, "-t", topo_file)
    assert code == 0 and "on star6" in out and err == ""
    code, out, err = cli(capsys, "verify", old)  # verify needs no topology: the collective is proven as before
    assert code == 0 and "implements allgather" in out


def test_catalog_topologies_keep_the_name_alone(tmp_path, capsys):
    sched = tmp_path / "r4.json"
    assert main(["baseline", "ring", "-t", "ring:4", "-c", "allreduce", "-o", str(sched), "-q"]) == 0
    assert "topology_inline" not in json.loads(sched.read_text())
    capsys.readouterr()
    code, out, err = cli(capsys, "simulate", sched)
    assert code == 0 and "on ring:4" in out and err == ""
    assert record(get_topology("hierarchical:2x4@200,50")) is None  # parameters included: the name resolves
    changed = replace(get_topology("ring:4"), name="ring:4", call_overhead=3.0)  # a catalog name, other costs
    assert record(changed) is not None


@pytest.mark.parametrize("inline, why", [([], "topology object"), ({"format": "ccsynth.topology", "version": 1,
                                                                      "n_ranks": "six"}, "damaged")])
def test_a_damaged_record_is_one_line(star6, tmp_path, capsys, inline, why):
    _, sched = star6
    d = json.loads(sched.read_text())
    d["topology_inline"] = inline
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(d))
    capsys.readouterr()
    code, _, err = cli(capsys, "simulate", bad)
    assert code == 2 and why in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_plans_and_phase_plans_record_it(tmp_path, capsys):
    from ccsynth.collectives.plan import Plan, PlanEntry, load_plan, save_plan
    from ccsynth.formats.phase_plan_file import phase_plan_file, save_phase_plan_file
    from ccsynth.synth.baselines import make_baseline
    from ccsynth.collectives.spec import Collective
    from ccsynth.synth.multidim.search import schedule_multidim

    star = replace(get_topology("full:4"), name="star4")
    plan = with_topology(Plan((PlanEntry("allgather", 4, 0, None, make_baseline("direct", Collective("allgather", 4),
                                                                                star)),), star.name), star)
    save_plan(plan, tmp_path / "plan.json")
    back = load_plan(tmp_path / "plan.json")
    assert back.topology_inline is not None and recorded(back.topology, back.topology_inline, "plan").n_ranks == 4
    code, out, err = cli(capsys, "export", tmp_path / "plan.json", "-f", "msccl-xml", "-o", tmp_path / "xml")
    assert code == 0 and "wrote 1 MSCCL XML" in out, err

    hier = replace(get_topology("hierarchical:2x4@100,50"), name="myhier")
    md = schedule_multidim(hier, "allreduce", 1 << 20, "themis", chunks=2)
    save_phase_plan_file(with_topology(phase_plan_file(md, md.makespan_us), hier), tmp_path / "pp.json")
    code, out, err = cli(capsys, "simulate", tmp_path / "pp.json")
    assert code == 0 and err == "", err
    code, out, err = cli(capsys, "verify", tmp_path / "pp.json")
    assert code == 0 and "on myhier" in out, err


def test_resolve_prefers_the_given_topology():
    mine = replace(get_topology("ring:4"), name="myring")
    assert resolve(None, "myring", record(mine), "f").name == "myring"
    assert resolve("ring:4@50", "myring", record(mine), "f").name == "ring:4@50"
    assert resolve(None, "", None, "f", required=False) is None
