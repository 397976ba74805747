"""The phase plan file (``ccsynth.phase_plan``): round trip, its verifier, its price, the commands that take it.

``ccsynth synth --scheduler`` writes a multi-dimension schedule at the chunk count its scheduler chose, at any
rank count, as a phase plan where the Schedule IR would be too large; ``ccsynth simulate FILE`` gives the
figure synth printed for it, ``verify`` proves it, ``export`` expands it to the IR where the IR takes it.
"""

from __future__ import annotations

import json

import pytest

from ccsynth.cli import main as cli_main
from ccsynth.collectives.verify import verify
from ccsynth.errors import ScheduleError, ScheduleFormatError
from ccsynth.formats.files import file_kind, get_topology, load_phase_plan, load_schedule
from ccsynth.formats.phase_plan_file import phase_plan_file, phase_plan_file_from_dict, save_phase_plan_file
from ccsynth.formats.phase_plan_source import FilePhases
from ccsynth.synth.multidim import dim_net, schedule_multidim
from ccsynth.synth.multidim.chunks import chunk_steps
from ccsynth.synth.multidim.cost import PhaseCosts
from ccsynth.synth.multidim.lowering import fits_ir, to_schedule
from ccsynth.synth.multidim.phases import from_phase_plan
from ccsynth.synth.multidim.pipeline import replay_tasks
from ccsynth.synth.multidim.plan_price import price_phase_plan
from ccsynth.synth.simulate import simulate
from ccsynth.topologies.catalog import hierarchical
from ccsynth.commands.synth_multidim import fixed_order_verdict

T24 = hierarchical([(2, 100), (4, 100)])


@pytest.fixture(scope="module")
def md24():
    """Themis on 2 x 4: several chunks, both orders."""
    return schedule_multidim(T24, "allreduce", 16 << 20, "themis")


def _file(tmp_path, d: dict, name: str = "plan.json"):
    path = tmp_path / name
    path.write_text(json.dumps(d))
    return path


# ------------------------------------------------------------------ round trip and price
def test_round_trip_keeps_the_plan_and_its_price(tmp_path, md24):
    pf = phase_plan_file(md24, md24.makespan_us)
    path = tmp_path / "plan.json"
    save_phase_plan_file(pf, path)
    assert file_kind(path) == "phase_plan"
    back = load_phase_plan(path, topology=T24)
    assert back.plan.signature() == pf.plan.signature() and back.to_dict() == pf.to_dict()
    assert back.n_ranks == 8 and back.total_units == sum(c.units for c in md24.chunks)
    assert len({c.order for c in back.plan.chunks}) == 2  # the file keeps every chunk's own order
    # the price of the file is the scheduler's figure, bit for bit, and scales with the size
    assert price_phase_plan(back.plan, T24, back.size_bytes).time_us == md24.makespan_us
    assert price_phase_plan(back.plan, T24, 64 << 20).time_us > md24.makespan_us
    with pytest.raises(ScheduleFormatError, match="is a multi-dimension phase plan"):
        load_schedule(path)


@pytest.mark.parametrize("spec,kind,policy,size", [
    ("hierarchical:2x4@100,25", "allreduce", "lp", 1 << 20),
    ("hierarchical:2x2x2@200,100,50", "reduce_scatter", "themis", 8 << 20),
    ("hierarchical:4x2@50,200", "allgather", "themis-flex", 8 << 20),
])
def test_replaying_the_schedule_order_reproduces_the_model(spec, kind, policy, size):
    net = dim_net(get_topology(spec))
    md = schedule_multidim(net, kind, size, policy)
    order = [(t.chunk, t.step) for t in md.timing.tasks]
    got = replay_tasks(net, PhaseCosts(net), kind, size, md.chunks, order)
    assert got.makespan_us == md.makespan_us and got.tasks == md.timing.tasks
    # another valid order (every chunk's phases in turn) is priced as that order runs: each dimension takes its
    # phases in exactly that order
    steps = [chunk_steps(net, kind, c) for c in md.chunks]
    serial = [(k, i) for k in range(md.n_chunks) for i in range(len(steps[k]))]
    other = replay_tasks(net, PhaseCosts(net), kind, size, md.chunks, serial)
    for d in range(net.n_dims):
        assert [(t.chunk, t.step) for t in other.tasks if t.dim == d] == [(k, i) for k, i in serial
                                                                          if steps[k][i].dim == d]
    assert other.makespan_us >= md.makespan_us * 0.5


def test_the_ir_expansion_of_a_plan_is_the_schedule_and_verifies(md24):
    pf = phase_plan_file_from_dict(phase_plan_file(md24).to_dict())
    md = from_phase_plan(pf.plan, T24, pf.size_bytes)
    assert fits_ir(md)
    sched = to_schedule(md, T24)
    assert verify(sched, T24).ok
    assert simulate(sched, T24, pf.size_bytes).time_us == pytest.approx(md24.makespan_us, rel=0.05)


# ------------------------------------------------------------------ the verifier
def _broken(d: dict, how: str) -> dict:
    d = json.loads(json.dumps(d))
    if how == "missing dimension":
        d["chunks"][1]["order"] = [0]
    elif how == "dimension twice":
        d["chunks"][1]["order"] = [1, 1]
    elif how == "unknown dimension":
        d["chunks"][0]["order"] = [0, 2]
    elif how == "share sum":
        d["total_units"] += 1
    elif how == "ranks":
        d["n_ranks"] = 16
    elif how == "task missing":
        d["tasks"] = d["tasks"][:-1]
    elif how == "task order":
        k = d["tasks"][0][0]
        later = next(i for i, t in enumerate(d["tasks"]) if t == [k, 1])
        d["tasks"][0], d["tasks"][later] = d["tasks"][later], d["tasks"][0]
    elif how == "algorithm":
        d["chunks"][2]["algorithms"][0] = "tree"
    elif how == "active dims":
        d["dims"] = [1]
    return d


@pytest.mark.parametrize("how,match", [
    ("missing dimension", r"chunk 1 misses dimension 1 \(size 4\)"),
    ("dimension twice", r"chunk 1 misses dimension 0 \(size 2\) in its order \[1, 1\]"),
    ("unknown dimension", r"chunk 0 names dimension 2 in its order \[0, 2\]"),
    ("share sum", r"its chunks hold \d+ units in all, but it declares \d+: some of the buffer is missing"),
    ("ranks", r"it declares 16 ranks, but its dimensions 2x4 make 8"),
    ("task missing", r"phase 3 of chunk \d+ \(allgather on dimension \d, size \d\) is missing from its tasks"),
    ("task order", r"phase 1 of chunk \d+ \(reduce-scatter on dimension \d, size \d\) comes before phase 0"),
    ("algorithm", r"chunk 2's phase on dimension \d runs 'tree'"),
    ("active dims", r"its active dimensions are \[1\], but the dimensions of size 2 or more"),
])
def test_verifier_rejects_a_broken_plan_naming_chunk_and_phase(tmp_path, md24, how, match, capsys):
    path = _file(tmp_path, _broken(phase_plan_file(md24).to_dict(), how))
    with pytest.raises(ScheduleError, match=match):
        load_phase_plan(path)
    assert cli_main(["verify", str(path)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "phase plan" in err


def test_verifier_checks_the_topology(tmp_path, md24, capsys):
    path = _file(tmp_path, phase_plan_file(md24).to_dict())
    with pytest.raises(ScheduleError, match="phase plan for dimensions 2x4; topology 'hierarchical:4x2@100,25' has 4x2"):
        load_phase_plan(path, topology=hierarchical([(4, 100), (2, 25)]))
    assert cli_main(["verify", str(path), "-t", "hierarchical:2x2x2@100,25,10"]) == 2
    assert "2x2x2" in capsys.readouterr().err
    assert cli_main(["verify", str(path), "-t", "hierarchical:2x4@100,100", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["ok"] and got["kind"] == "phase_plan" and got["n_chunks"] == md24.n_chunks and got["n_ranks"] == 8


def test_bad_fields_are_format_errors(tmp_path, md24):
    d = phase_plan_file(md24).to_dict()
    for key, value, match in [("version", 2, "version 2 is not supported"), ("tasks", "x", "'tasks' must be list"),
                              ("sizes", [2, "4"], "'sizes' must be a list of integers"),
                              ("collective", "alltoall", "runs allreduce, reduce_scatter, allgather")]:
        with pytest.raises(ScheduleFormatError, match=match):
            load_phase_plan(_file(tmp_path, {**d, key: value}))


# ------------------------------------------------------------------ the commands
def test_synth_writes_a_phase_plan_and_simulate_gives_the_printed_time(tmp_path, capsys):
    out = tmp_path / "lp.json"
    assert cli_main(["synth", "-t", "hierarchical:2x4@100,25", "-c", "allreduce", "-s", "4M", "--scheduler", "lp",
                     "-f", "phase-plan", "-o", str(out), "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["output_format"] == "phase-plan" and got["written"]["priced_by"] == "dimension-level model"
    assert got["written"]["chunks"] == got["chosen"]["chunks"]  # the scheduler's own count, no cap
    assert got["time_us"] == got["chosen"]["time_us"] and got["max_chunks"] is None
    assert cli_main(["simulate", str(out), "--json"]) == 0
    sim = json.loads(capsys.readouterr().out)
    assert sim["results"][0]["time_us"] == got["time_us"] and sim["results"][0]["size_bytes"] == 4 << 20
    assert cli_main(["simulate", str(out)]) == 0
    assert f"{got['time_us']:.3f}" in capsys.readouterr().out
    # expanded on demand: the IR of the plan, verified, simulated near the model's figure
    ir = tmp_path / "ir.json"
    assert cli_main(["export", str(out), "-o", str(ir)]) == 0
    sched = load_schedule(ir, topology=hierarchical([(2, 100), (4, 25)]))
    assert simulate(sched, hierarchical([(2, 100), (4, 25)]), 4 << 20).time_us == pytest.approx(got["time_us"],
                                                                                                 rel=0.05)


def test_synth_at_1024_ranks_writes_a_plan_and_says_a_named_scheduler_loses(tmp_path, capsys):
    out = tmp_path / "big.json"
    argv = ["synth", "-t", "hierarchical:8x8x16@200,100,50", "-c", "allreduce", "-s", "1M", "--scheduler", "themis",
            "-o", str(out)]
    assert cli_main(argv + ["--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["n_ranks"] == 1024 and got["output_format"] == "phase-plan" and got["loses_to_fixed"]
    assert got["vs_fixed"] < 1
    assert cli_main(["simulate", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["results"][0]["time_us"] == got["time_us"]
    assert cli_main(["verify", str(out)]) == 0
    assert "implements allreduce on 1024 ranks (8x8x16)" in capsys.readouterr().out
    assert cli_main(["export", str(out), "-o", str(tmp_path / "x.json")]) == 2
    assert "above MAX_IR_RANKS = 128" in capsys.readouterr().err
    assert cli_main(argv[:-2] + ["-o", str(tmp_path / "x.xml")]) == 2
    assert "MSCCL XML of a multi-dimension schedule needs the Schedule IR" in capsys.readouterr().err


def test_fixed_order_verdict():
    line = fixed_order_verdict("themis", 480.9, 368.5)
    assert line.startswith("themis loses to the fixed order") and "0.766x" in line
    assert fixed_order_verdict("lp", 368.0, 368.5) is None
    assert fixed_order_verdict("auto", 480.9, 368.5) is None and fixed_order_verdict("fixed", 480.9, 368.5) is None


def test_file_phases_serve_the_files_collective_and_plan_the_others(md24):
    src = FilePhases(phase_plan_file(md24), T24, n_ranks=8)
    assert src.plan("allreduce", 5).signature() == phase_plan_file(md24).plan.signature()
    assert src.plan("reduce_scatter", 1 << 20).kind == "reduce_scatter" and src.scheduler == "themis"
    with pytest.raises(Exception, match="for 8 ranks but the communicator has 4"):
        FilePhases(phase_plan_file(md24), T24, n_ranks=4)


def test_every_field_flipped_is_a_clean_error(tmp_path, md24):
    # every key of the file, and of a chunk, given a wrong value: a CCSynthError naming it, never another exception
    from ccsynth.errors import CCSynthError

    d = phase_plan_file(md24).to_dict()
    bad_values = [None, "x", -1, 0, 1.5, [], {}, [1, "a"], True, 10 ** 9]
    flipped = 0
    for key in d:
        for v in bad_values:
            try:  # some values are still a valid plan (meta {}, predicted_us None): those load
                load_phase_plan(_file(tmp_path, {**d, key: v}), topology=T24)
            except CCSynthError:
                flipped += 1
    for key in ("units", "order", "algorithms"):
        for v in bad_values:
            e = json.loads(json.dumps(d))
            e["chunks"][0][key] = v
            with pytest.raises(CCSynthError):
                load_phase_plan(_file(tmp_path, e), topology=T24)
    assert flipped > 0.8 * len(d) * len(bad_values)
