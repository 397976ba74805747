"""The machine's state (bench/machine.py): `topo profile` refuses a busy machine unless --busy-ok, `bench` warns and
marks its output; the load is injected (CCSYNTH_LOADAVG, CCSYNTH_CORES), never read. Wall times with CPU beside
them; `dir(ccsynth)`; a quiet sub-second synth prints nothing on stderr (ccsynth/commands/_progress.py)."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys

import pytest

import ccsynth
from ccsynth.bench.machine import CORES_ENV, LOAD_ENV, MachineState, machine_state
from ccsynth.cli import main
from ccsynth.commands import _progress
from ccsynth.commands._progress import seconds_text
from ccsynth.bench.profile import ProfileOptions
from ccsynth.bench.profiling.topology import profile_description
from ccsynth.errors import CCSynthError
from test_profile import _synthetic_raw


def synthetic_raw():
    """A raw profile of known figures (tests/test_profile.py), its load as the measurement leaves it."""
    return _synthetic_raw(ProfileOptions(quick=True))

BUSY = {LOAD_ENV: "14,12,10", CORES_ENV: "2"}


def test_injected_state(monkeypatch):
    monkeypatch.setenv(LOAD_ENV, "14")
    monkeypatch.setenv(CORES_ENV, "2")
    s = machine_state()
    assert s == MachineState((14.0, 14.0, 14.0), 2) and s.busy and s.to_dict()["busy"] is True
    monkeypatch.setenv(LOAD_ENV, "1.5,3,3")
    assert not machine_state().busy  # the one-minute load counts
    for bad_load, bad_cores in (("x", "2"), ("-1", "2"), ("1,2,3,4", "2"), ("1", "0"), ("1", "two")):
        monkeypatch.setenv(LOAD_ENV, bad_load)
        monkeypatch.setenv(CORES_ENV, bad_cores)
        with pytest.raises(CCSynthError, match="CCSYNTH_"):
            machine_state()


def test_profile_refuses_a_busy_machine_and_marks_one_it_was_told_to_take(monkeypatch):
    from ccsynth.bench.machine import with_start_load
    from ccsynth.bench.profile_raw import raw_from_dict, raw_to_dict
    from ccsynth.commands.topo import _machine_before_profile

    monkeypatch.setenv(LOAD_ENV, "14")
    monkeypatch.setenv(CORES_ENV, "2")
    with pytest.raises(CCSynthError, match=r"busy \(load average 14.00.* on 2 cores.*--busy-ok"):
        _machine_before_profile(busy_ok=False)
    raw = with_start_load(synthetic_raw(), _machine_before_profile(busy_ok=True))
    assert raw.load == "14.00, 14.00, 14.00 on 2 cores when it started (PROFILED BUSY: --busy-ok); 0.5, 0.4, 0.3 when it ended"
    assert profile_description(raw).startswith("PROFILED BUSY")
    back = raw_from_dict(json.loads(json.dumps(raw_to_dict(raw))))  # the raw file keeps it: a refit says the same
    assert back.load == raw.load and profile_description(back) == profile_description(raw)
    monkeypatch.setenv(LOAD_ENV, "0.5")
    quiet = with_start_load(synthetic_raw(), _machine_before_profile(busy_ok=False))
    assert quiet.load.startswith("0.50, 0.50, 0.50 on 2 cores when it started;")
    assert "BUSY" not in profile_description(quiet) and "2 ranks on 1 node(s)" in profile_description(quiet)


def _ccsynth(*argv, env: dict, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ccsynth", *argv], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, **env}, timeout=120)


def test_profile_end_to_end_refuses_busy(tmp_path):
    p = _ccsynth("topo", "profile", "-o", "m.json", env=BUSY, cwd=tmp_path)
    assert p.returncode == 2 and "the machine is busy" in p.stderr and "--busy-ok" in p.stderr
    assert "Traceback" not in p.stderr and not (tmp_path / "m.json").exists()  # --busy-ok: the test above


def test_bench_warns_about_load_and_marks_its_output(tmp_path):
    p = _ccsynth("bench", "allreduce", "-m", "8:8", "--json", "b.json", env=BUSY, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert p.stderr.count("warning: the machine is busy (load average 14.00") == 1
    assert "# BUSY machine: load average 14.00, 12.00, 10.00 on 2 cores" in p.stdout
    assert json.loads((tmp_path / "b.json").read_text())["machine"] == {"load_average": [14.0, 12.0, 10.0],
                                                                        "cores": 2, "busy": True}


def test_times_are_wall_with_cpu_beside():
    assert seconds_text(109.2, 13.0) == "109.2 s (13.0 s CPU)"
    assert seconds_text(10.0, 9.5) == "10.0 s"
    assert seconds_text(0.3, 0.29) == "0.3 s"


def test_dir_lists_the_public_api():
    names = dir(ccsynth)
    assert {"synthesize", "Communicator", "save_plan", "load_plan", "get_topology", "reshard"} <= set(names)
    assert set(ccsynth.__all__) <= set(names)
    assert all(hasattr(ccsynth, n) for n in ccsynth.__all__)


def test_a_sub_second_synth_prints_its_summary_only(tmp_path, capsys, monkeypatch):
    # sub-second, whatever the machine's load: the progress clock stands still
    monkeypatch.setattr(_progress, "now", lambda: 0.0)
    argv = ["synth", "-t", "ring:3", "-c", "allgather", "-s", "1K", "-o", str(tmp_path / "s.json")]
    assert main(argv) == 0
    got = capsys.readouterr()
    assert got.err.splitlines() == [] and "predicted time" in got.out and "wrote" in got.out
    assert main([*argv, "-v"]) == 0
    lines = capsys.readouterr().err.splitlines()
    stages = [line for line in lines if line.startswith("[")]
    assert stages and sum("] verify:" in line for line in stages) == 1 and sum("] chosen:" in line for line in stages) == 1
    assert all(a != b for a, b in itertools.pairwise(lines))  # no line twice in a row
