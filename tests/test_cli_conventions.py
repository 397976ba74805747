"""Command-line conventions (issue 14): -q/-v anywhere, quiet progress with [k/N] counters, --version, JSON schemas."""

import io
import json
import subprocess
import sys

import pytest

from ccsynth.cli import build_parser, main, verbosity
from ccsynth.commands._progress import DETAIL, QUIET, SUMMARY, Progress, SynthStages, level_from


def run_cli(*args, cwd=None, timeout=300):
    p = subprocess.run([sys.executable, "-m", "ccsynth", *args], capture_output=True, text=True, cwd=cwd,
                       timeout=timeout)
    return p.returncode, p.stdout, p.stderr


# ------------------------------------------------------------------ -q / -v anywhere
@pytest.mark.parametrize("argv, want", [
    (["synth", "-t", "ring:4", "-c", "allgather"], (0, False)),
    (["-v", "synth", "-t", "ring:4", "-c", "allgather"], (1, False)),
    (["synth", "-t", "ring:4", "-v", "-c", "allgather"], (1, False)),
    (["-v", "synth", "-t", "ring:4", "-c", "allgather", "-v"], (2, False)),
    (["synth", "-t", "ring:4", "-c", "allgather", "-vv"], (2, False)),
    (["synth", "-t", "ring:4", "-c", "allgather", "--quiet"], (0, True)),
    (["-q", "topo", "show", "dgx1"], (0, True)),
    (["topo", "show", "-q", "dgx1"], (0, True)),
    (["topo", "-v", "show", "dgx1", "-v"], (2, False)),
    (["bench", "-q", "allreduce", "-v"], (1, True)),
])
def test_verbosity_is_accepted_anywhere(argv, want):
    args = build_parser().parse_args(argv)
    assert verbosity(args) == want
    assert (args.verbose, args.quiet) == want
    assert not [k for k in vars(args) if k.startswith("_")]


def test_quiet_and_verbose_after_the_subcommand_end_to_end(tmp_path):
    code, out, err = run_cli("synth", "-t", "ring:4", "-c", "allgather", "-s", "64K", "-q", cwd=tmp_path)
    assert code == 0 and err == "" and "predicted time" in out
    code, out, err = run_cli("synth", "-t", "ring:4", "-c", "allgather", "-s", "64K", "-v", cwd=tmp_path)
    assert code == 0 and "routing: milp" in err and "ordering:" in err  # every stage with -v
    assert err.count("verify:") == 1  # the log shows it; the display does not repeat it
    code, out, err = run_cli("synth", "-t", "ring:4", "-c", "allgather", "-s", "64K", cwd=tmp_path)
    assert code == 0 and "predicted time" in out
    lines = err.splitlines()
    assert len(lines) <= 8 and len(set(lines)) == len(lines), err  # heartbeats at most, never a line twice


def test_sizes_sweep_prints_a_counter_not_every_stage(tmp_path):
    code, _out, err = run_cli("synth", "-t", "ring:4", "-c", "allgather", "--sizes", "1K:16K", cwd=tmp_path)
    assert code == 0, err
    assert len(err.splitlines()) <= 10, err
    code, _out, err = run_cli("synth", "-t", "ring:4", "-c", "allgather", "--sizes", "1K:4K", "-v", cwd=tmp_path)
    assert code == 0, err
    assert [l.split()[0] for l in err.splitlines() if l.startswith("[") and "/3]" in l.split()[0]] == \
        ["[1/3]", "[2/3]", "[3/3]"]


# ------------------------------------------------------------------ the progress display
class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_progress_levels_and_throttled_counter():
    assert level_from(0, False) == SUMMARY and level_from(3, False) == DETAIL and level_from(2, True) == QUIET
    clock, out = Clock(), io.StringIO()
    p = Progress(SUMMARY, out, interval=2.0, clock=clock)
    p.say("stage summary")
    p.detail("hidden detail")
    c = p.counter("size", 4)
    c.step("a")           # 0 s since the last line: throttled
    clock.t = 2.5
    c.step("b")           # due
    clock.t = 3.0
    c.step("c")           # throttled again
    clock.t = 3.1
    c.step("d")           # the last one, and the count took over the interval
    assert out.getvalue().splitlines() == ["stage summary", "[2/4] size b", "[4/4] size d"]
    out = io.StringIO()
    p = Progress(DETAIL, out, clock=clock)
    p.detail("shown")
    p.counter("x", 2).step("y")
    assert out.getvalue().splitlines() == ["shown", "[1/2] x y"]
    out = io.StringIO()
    p = Progress(QUIET, out, clock=clock)
    p.say("no")
    p.counter("x", 1).step("no")
    assert out.getvalue() == ""


def test_synth_stages_counts_candidates():
    clock, out = Clock(), io.StringIO()
    p = Progress(SUMMARY, out, interval=1.0, clock=clock)
    cb = SynthStages(p)
    cb("sketches", 0.0, "2 candidate(s): a, b")
    cb("sketch", 0.0, "a")
    cb("routing", 0.1, "milp")
    cb("candidate", 0.2, "a: estimated 3 us")
    clock.t = 1.5
    cb("candidate", 1.5, "b: estimated 2 us")
    cb("verify", 1.6, "10 ops")
    clock.t = 2.6
    cb("written", 2.6, "f.json")
    lines = out.getvalue().splitlines()  # stages are heartbeats: none before the interval, then one per interval
    assert lines[0].startswith("[2/2]") and "candidate: b: estimated 2 us" in lines[0]
    assert "written: f.json" in lines[1] and len(lines) == 2
    out = io.StringIO()
    SynthStages(Progress(DETAIL, out))("verify", 0.0, "x")  # -v: the log shows stages, not the display
    assert out.getvalue() == ""


# ------------------------------------------------------------------ --version
def test_version_reports_every_component():
    code, out, err = run_cli("--version")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("ccsynth ")
    text = "\n".join(lines)
    for label in ("Python:", "mpi4py:", "MPI library:", "MPI CUDA-aware:", "CuPy:", "numpy:", "PuLP:", "HiGHS"):
        assert label in text, (label, text)


def test_version_never_fails_when_things_are_absent(monkeypatch):
    from ccsynth.commands import _versions

    monkeypatch.setattr(_versions, "PACKAGES", (("mpi4py", ("no-such-dist",)), ("CuPy", ("no-such-cupy",))))
    monkeypatch.setattr(_versions, "PROBE", "import sys; sys.exit(134)")  # an MPI library that aborts
    monkeypatch.delitem(sys.modules, "mpi4py.MPI", raising=False)
    v = _versions.versions()
    assert v["mpi4py"] == "absent" and v["CuPy"] == "absent"
    assert v["MPI library"].startswith("unknown") and v["MPI CUDA-aware"].startswith("unknown")
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0


# ------------------------------------------------------------------ --json: one schema key, one name per quantity
OLD_NAMES = {"algbw", "busbw", "ops", "sends", "size", "nbytes", "iterations", "synthesis_seconds", "format", "version"}


def _keys(obj):
    """Every key anywhere in a JSON document (files of ccsynth's own formats inside it aside: topology, sketch)."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield k
            if k not in ("topology", "sketch") or not isinstance(v, dict):
                yield from _keys(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _keys(v)


def _doc(capsys, argv):
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_every_json_output_has_a_schema_and_the_shared_key_names(tmp_path, capsys):
    ring = str(tmp_path / "ring.json")
    docs = {
        "topo.list": _doc(capsys, ["topo", "list", "--json"]),
        "topo.show": _doc(capsys, ["topo", "show", "ring:4", "--json"]),
        "baseline.list": _doc(capsys, ["baseline", "list", "--json"]),
        "baseline": _doc(capsys, ["baseline", "ring", "-t", "ring:4", "-c", "allreduce", "-o", ring, "--json"]),
        "verify": _doc(capsys, ["verify", ring, "--json"]),
        "simulate": _doc(capsys, ["simulate", ring, "--sizes", "1K,1M", "--json"]),
        "synth": _doc(capsys, ["-q", "synth", "-t", "ring:4", "-c", "allgather", "-s", "64K", "--json"]),
        "synth.sizes": _doc(capsys, ["synth", "-t", "ring:4", "-c", "allgather", "--sizes", "1K,4K", "--json", "-q"]),
    }
    for command, doc in docs.items():
        assert next(iter(doc)) == "schema" and doc["schema"] == f"ccsynth.{command}/1", (command, doc)
        assert not OLD_NAMES & set(_keys(doc)), (command, OLD_NAMES & set(_keys(doc)))
    assert docs["topo.show"]["topology"]["n_ranks"] == 4 and docs["topo.list"]["topologies"][0]["spec"]
    assert docs["baseline"]["n_ops"] == docs["verify"]["n_ops"] and docs["baseline"]["n_transfers"] > 0
    sim = docs["simulate"]["results"]
    assert [r["size_bytes"] for r in sim] == [1024, 1 << 20] and all(r["busbw_GBps"] > 0 and r["n_ops"] for r in sim)
    syn = docs["synth"]
    assert syn["size_bytes"] == 65536 and syn["n_ops"] > 0 and syn["synthesis_s"] >= 0
    assert syn["busbw_GBps"] == pytest.approx(syn["algbw_GBps"] * 3 / 4)
    rows = docs["synth.sizes"]["sizes"]
    assert [r["size_bytes"] for r in rows] == [1024, 4096] and all("algbw_GBps" in r for r in rows)


def test_docs_document_every_json_schema():
    import pathlib

    formats = (pathlib.Path(__file__).resolve().parents[1] / "docs" / "formats.md").read_text()
    for schema in ("topo.list", "topo.show", "baseline.list", "baseline", "verify", "simulate", "synth", "synth.sizes",
                   "bench", "bench.nonblocking", "bench.nccl"):
        assert f"`ccsynth.{schema}/1`" in formats, schema
