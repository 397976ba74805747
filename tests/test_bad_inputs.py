"""The CLI fuzzed as a new user would: every bad input is one line on stderr and exit status 2.

Each case runs ``ccsynth.cli.main([...])`` in-process and checks the rule of
issue 9: exit status 2, exactly one line ``ccsynth CMD: error: ...`` on
standard error (argparse's usage lines and logged warnings aside), nothing
on standard output, no traceback. Three kinds of input:

* a fixed list of bad command lines for every sub-command, including the
  ones the issue reports (unwritable ``-o``, ``--sizes ""``, ``n_ranks: 1e18``,
  a schedule whose ``meta`` is a list, ``nchunksperloop=4000000000``, ...);
* malformed files of every format: truncated, empty, not UTF-8, not JSON,
  deeply nested, the wrong top-level type, a format's fields flipped to
  other types, huge, negative, NaN and Infinity;
* hypothesis-mutated valid files (a value anywhere replaced by a nasty one,
  a key dropped, the text cut short) through the CLI: for these the rule is
  "exit 0 or the one-line error", since a mutation may leave a valid file.
  ``CCSYNTH_FUZZ_EXAMPLES=N`` runs N fresh random examples per test instead
  of the fixed short default.

:data:`COVERAGE` counts the inputs (``python -m pytest tests/test_bad_inputs.py
-q -s -k coverage`` prints it).
"""

from __future__ import annotations

import copy
import json
import math
import os
import re
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ccsynth.cli import main
from ccsynth.collectives.plan import Plan, PlanEntry, save_plan
from ccsynth.collectives.schedule import save_schedule
from ccsynth.collectives.spec import Collective
from ccsynth.formats.msccl import schedule_to_msccl_xml
from ccsynth.formats.taccl_sketch import sketch_to_taccl_dict
from ccsynth.limits import LIMITS
from ccsynth.synth.baselines import make_baseline
from ccsynth.synth.sketch import Sketch, SwitchRule
from ccsynth.topologies import ring
from ccsynth.topologies.io import topology_to_dict

#: one worker runs the whole module under pytest-xdist: test_coverage_report reads every test's count
pytestmark = pytest.mark.xdist_group("bad_inputs")

# ------------------------------------------------------------------ the rule
COVERAGE: dict[str, int] = {}
#: the inputs each test counted (by pytest node id), for test_coverage_report's floors
_BY_TEST: dict[str, int] = {}


def _count(kind: str, n: int = 1) -> None:
    COVERAGE[kind] = COVERAGE.get(kind, 0) + n
    test = os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" (", 1)[0]
    _BY_TEST[test] = _BY_TEST.get(test, 0) + n


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    """``main(argv)`` in-process: (exit status, stdout, stderr); argparse's SystemExit included."""
    capsys.readouterr()
    try:
        rc = main(argv)
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else 1
    out, err = capsys.readouterr()
    return rc, out, err


#: ``ccsynth CMD [SUBCMD]: error: ...`` (``ccsynth: error:`` for argparse's top-level errors)
_ERROR_LINE = re.compile(r"^ccsynth( [a-z_]+)*: error: \S")


def _error_lines(err: str) -> list[str]:
    """stderr without argparse's usage (``usage:`` and its indented continuation) and logged warnings."""
    lines = []
    in_usage = False
    for line in err.splitlines():
        if line.startswith("usage:"):
            in_usage = True
            continue
        if in_usage and line.startswith(" "):
            continue
        in_usage = False
        if line.startswith("warning: ") or not line.strip():
            continue
        lines.append(line)
    return lines


def assert_one_line_error(argv: list[str], rc: int, out: str, err: str) -> None:
    assert "Traceback" not in err, err
    assert rc == 2, f"{argv}: exit {rc}\nstdout: {out[-500:]}\nstderr: {err[-2000:]}"
    lines = _error_lines(err)
    assert len(lines) == 1, f"{argv}: {err!r}"
    assert _ERROR_LINE.match(lines[0]), f"{argv}: {lines[0]!r}"
    assert out == "", f"{argv}: printed {out!r}"


def check_bad(argv: list[str], capsys, kind: str, *words: str) -> str:
    rc, out, err = run(argv, capsys)
    assert_one_line_error(argv, rc, out, err)
    line = _error_lines(err)[0]
    for w in words:
        assert w in line, (argv, w, line)
    _count(kind)
    return line


def check_ok_or_bad(argv: list[str], capsys, kind: str) -> None:
    rc, out, err = run(argv, capsys)
    if rc != 0:
        assert_one_line_error(argv, rc, out, err)
    assert "Traceback" not in err
    _count(kind)


# ------------------------------------------------------------------ valid files
@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return make_files(tmp_path_factory.mktemp("valid"))


def make_files(d):
    """One valid file of every format in folder ``d``."""
    sched = make_baseline("ring", Collective("allgather", 4), ring(4))
    save_schedule(sched, d / "s.json")
    (d / "s.xml").write_text(schedule_to_msccl_xml(sched, min_bytes=0, max_bytes=None))
    (d / "t.json").write_text(json.dumps(topology_to_dict(ring(4))))
    plan = Plan((PlanEntry("allgather", 4, 0, None, sched),))
    save_plan(plan, d / "p.json")
    sk = Sketch(name="k", chunk_factor=1, switches=(SwitchRule((), "uc-max"),))
    (d / "k.json").write_text(json.dumps(sk.to_dict()))
    (d / "tk.json").write_text(json.dumps(sketch_to_taccl_dict(sk)))
    (d / "taccl.json").write_text(json.dumps({
        "name": "NDv2_1MB", "gpus_per_node": 8, "nics_per_node": 1, "alpha": 0.3,
        "node_betas_list": [23, 46], "node_invbws_list": [23, 46],
        "remote_alpha": 2.6, "remote_beta": 105, "remote_invbw": 107}))
    return d


def _load(path) -> dict:
    return json.loads(open(path).read())


def _write(tmp_path, name: str, content) -> str:
    p = tmp_path / name
    if isinstance(content, bytes):
        p.write_bytes(content)
    elif isinstance(content, str):
        p.write_text(content)
    else:
        p.write_text(json.dumps(content))
    return str(p)


# ------------------------------------------------------- the issue's own cases
def test_issue_cases(files, tmp_path, capsys):
    s = str(files / "s.json")
    base = ["baseline", "ring", "-t", "ring:4", "-c", "allgather"]
    check_bad(base + ["-o", "/nonexistent/x.json"], capsys, "issue", "/nonexistent/x.json", "does not exist")
    check_bad(base + ["-o", str(tmp_path)], capsys, "issue", "Is a directory")
    if os.path.exists("/dev/full"):
        check_bad(base + ["-o", "/dev/full"], capsys, "issue", "No space left on device")
        check_bad(["export", s, "-f", "json", "-o", "/dev/full"], capsys, "issue", "No space left on device")
        check_bad(["topo", "export", "ring:4", "-o", "/dev/full"], capsys, "issue", "No space left on device")
    check_bad(base + ["-o", ""], capsys, "issue", "empty")
    check_bad(base + ["--chunks", "1000000"], capsys, "issue", "MAX_CHUNK_FACTOR")
    check_bad(["synth", "-t", "ring:4", "-c", "allgather", "--chunks", "100000"], capsys, "issue", "MAX_SYNTH_CHUNK_FACTOR")
    check_bad(["simulate", s, "--sizes", ""], capsys, "issue", "bad size ''")
    check_bad(["simulate", s, "--sizes", ","], capsys, "issue", "no size")
    check_bad(["simulate", s, "--sizes", "0:4"], capsys, "issue", "0:4")
    # a file named .xml that is not XML: said so, not reported as bad JSON
    notxml = tmp_path / "sched.xml"
    notxml.write_text("algo name=ring\n")
    line = check_bad(["simulate", str(notxml)], capsys, "issue", "not an MSCCL XML schedule", "sched.xml")
    assert "JSON" not in line
    d = _load(s)
    for name, mutate, words in [
        ("meta", lambda e: e.__setitem__("meta", [1, 2]), ("meta must be an object",)),
        ("version", lambda e: e.__setitem__("version", True), ("version True",)),
        ("channel", lambda e: e["ops"][0].__setitem__("channel", -5), ("channel -5",)),
        ("n_ranks_float", lambda e: e["collective"].__setitem__("n_ranks", 1e18), ("1e+18",)),
        ("n_ranks_int", lambda e: e["collective"].__setitem__("n_ranks", 10**18), ("MAX_RANKS",)),
        ("chunks", lambda e: e["collective"].__setitem__("chunk_factor", 10**9), ("MAX_CHUNK_FACTOR",)),
    ]:
        e = copy.deepcopy(d)
        mutate(e)
        check_bad(["verify", _write(tmp_path, f"{name}.json", e)], capsys, "issue", *words)
    deep = _write(tmp_path, "deep.json", "[" * 100_000 + "]" * 100_000)
    check_bad(["verify", deep], capsys, "issue", "nested too deeply")
    xml = (files / "s.xml").read_text()
    big = xml.replace('nchunksperloop="4"', 'nchunksperloop="4000000000"', 1)
    assert big != xml
    check_bad(["verify", _write(tmp_path, "big.xml", big)], capsys, "issue", "MAX_BUFFER_CHUNKS")
    check_bad(["verify", _write(tmp_path, "e.xml", xml.replace('nchunksperloop="4"', 'nchunksperloop="4e9"', 1))],
              capsys, "issue", "nchunksperloop")
    t = topology_to_dict(ring(4))
    t["links"][0]["bw_GBps"] = 1e-320
    check_bad(["simulate", s, "-t", _write(tmp_path, "slow.json", t)], capsys, "issue", "MIN_BANDWIDTH_GBPS")
    check_bad(["topo", "show", "ring:4@1e-320"], capsys, "issue", "MIN_BANDWIDTH_GBPS")


def test_targeted_file_cases(files, tmp_path, capsys):
    """Inputs that size an allocation or reach code past the readers, one by one."""
    s = _load(files / "s.json")
    for name, doc, words in [
        ("tiny_huge", {"format": "ccsynth.schedule", "version": 1, "ops": [],
                       "collective": {"kind": "allgather", "n_ranks": 4096, "chunk_factor": 1}},
         ("MAX_SCHEDULE_CHUNKS",)),
        ("tiny_large", {"format": "ccsynth.schedule", "version": 1, "ops": [],
                        "collective": {"kind": "alltoall", "n_ranks": 64, "chunk_factor": 1}},
         ("write at most 0 output chunk(s)", "needs 4096")),
        ("ops_limit", _set(s, ("ops",), [{}] * (LIMITS["MAX_SCHEDULE_OPS"] + 1)), ("MAX_SCHEDULE_OPS",)),
        ("scratch", _set(s, ("scratch_chunks",), 10**15), ("MAX_SCRATCH_CHUNKS",)),
        ("meta_msccl_type", _set(s, ("meta",), {"msccl": {"minBytes": "x"}}), ("meta.msccl.minBytes",)),
        ("meta_msccl_shadow", _set(s, ("meta",), {"msccl": {"input_shadow": [1]}}), ("meta.msccl.input_shadow",)),
        ("meta_msccl_coll", _set(s, ("meta",), {"msccl": {"coll": ["allgather"]}}), ("meta.msccl.coll",)),
        ("reduce_str", _set(s, ("ops", 1, "reduce"), "no"), ("reduce must be true or false",)),
        ("deps_obj", _set(s, ("ops", 1, "deps"), {"0": 1}), ("deps must be a list",)),
        ("name_obj", _set(s, ("name",), {"a": 1}), ("name must be a string",)),
    ]:
        check_bad(["export", _write(tmp_path, f"{name}.json", doc), "-o", os.devnull], capsys, "targeted", *words)
    t = topology_to_dict(ring(4))
    sw = {"name": "big", "ranks": list(range(4)) * 300, "bw_GBps": 10.0, "alpha_us": 1.0}
    t2 = dict(t, n_ranks=4096, links=[], switches=[dict(sw, ranks=list(range(4096)))])
    t2.pop("nodes")
    # a switch of 4096 ranks implies 16.8M connections but builds none of them: it loads (the dims of the
    # template are wrong for it, which is the one error)
    check_bad(["topo", "show", _write(tmp_path, "sw.json", t2)], capsys, "targeted", "multiply to 4, not 4096")
    t3 = dict(t, shared_ports=[{"name": "p", "srcs": list(range(4)) * 1000, "dsts": list(range(4)) * 1000, "bw_GBps": 1.0}])
    check_bad(["topo", "show", _write(tmp_path, "sp.json", t3)], capsys, "targeted", "MAX_PORT_PAIRS")
    check_bad(["topo", "show", _write(tmp_path, "lat.json", _set(t, ("links", 0, "alpha_us"), 1e300))], capsys, "targeted",
              "MAX_LATENCY_US")
    taccl = _load(files / "taccl.json")
    check_bad(["topo", "show", _write(tmp_path, "g.json", dict(taccl, gpus_per_node=10**9))], capsys, "targeted", "MAX_RANKS")
    check_bad(["topo", "show", _write(tmp_path, "g2.json", dict(taccl, gpus_per_node=10**9, node_betas_list=[1]))],
              capsys, "targeted", "MAX_RANKS")
    k = _load(files / "k.json")
    y = ["synth", "-t", "ring:4", "-c", "allgather", "--sketch"]
    for name, doc, words in [
        ("cf", dict(k, chunk_factor=10**9), ("MAX_CHUNK_FACTOR",)),
        ("cf_synth", dict(k, chunk_factor=2000), ("MAX_SYNTH_CHUNK_FACTOR",)),
        ("nnodes", dict(k, nnodes=10**9), ("MAX_RANKS",)),
        ("sym", dict(k, symmetry=[[0, 10**9]]), ("MAX_RANKS",)),
        ("switches", dict(k, switches=5), ("switches must be a list",)),
        ("digits", dict(k, chunk_factor="9" * 5000), ("chunk_factor",)),
    ]:
        check_bad(y + [_write(tmp_path, f"k_{name}.json", doc)], capsys, "targeted", *words)
    tk = _load(files / "tk.json")
    tk["hyperparameters"] = {"input_chunkup": 10**6}
    check_bad(y + [_write(tmp_path, "tk.json", tk)], capsys, "targeted", "MAX_CHUNK_FACTOR")
    xml = (files / "s.xml").read_text()
    for old, new, words in [
        ('ngpus="4"', 'ngpus="5000"', ("MAX_RANKS",)),
        ('nchannels="1"', 'nchannels="100000"', ("MAX_CHANNELS",)),
        ('s_chunks="0"', 's_chunks="99999999999"', ("MAX_SCRATCH_CHUNKS",)),
        ('chan="0"', 'chan="99999999"', ("MAX_CHANNELS",)),
    ]:
        assert old in xml, old
        check_bad(["verify", _write(tmp_path, "lim.xml", xml.replace(old, new, 1))], capsys, "targeted", *words)
    billion = ('<?xml version="1.0"?><!DOCTYPE l [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">'
               '<!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;"><!ENTITY d "&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;">'
               '<!ENTITY e "&d;&d;&d;&d;&d;&d;&d;&d;&d;&d;"><!ENTITY f "&e;&e;&e;&e;&e;&e;&e;&e;&e;&e;">'
               '<!ENTITY g "&f;&f;&f;&f;&f;&f;&f;&f;&f;&f;"><!ENTITY h "&g;&g;&g;&g;&g;&g;&g;&g;&g;&g;">]>'
               '<algo name="&h;"/>')
    check_bad(["verify", _write(tmp_path, "laughs.xml", billion)], capsys, "targeted")


# ------------------------------------------------------- bad command lines
def _command_lines(d) -> list[list[str]]:
    s, x, t, p, k = (str(d / f) for f in ("s.json", "s.xml", "t.json", "p.json", "k.json"))
    out = []
    # global and unknown commands
    out += [[], ["nosuch"], ["--nosuch"], ["-v", "frobnicate"]]
    # topo
    out += [["topo"], ["topo", "nosuch"], ["topo", "show"], ["topo", "show", "ringg:4"], ["topo", "show", "ring:1"],
            ["topo", "show", "ring:0"], ["topo", "show", "ring:-4"], ["topo", "show", "ring:4x4"], ["topo", "show", "ring:"],
            ["topo", "show", "ring:99999999"], ["topo", "show", "ring:4@0"], ["topo", "show", "ring:4@-1"],
            ["topo", "show", "ring:4@nan"], ["topo", "show", "ring:4@inf"], ["topo", "show", "ring:4/-1"],
            ["topo", "show", "ring:4/1e300"], ["topo", "show", "ring:4@1,2"], ["topo", "show", "torus:0x4"],
            ["topo", "show", "torus:4x"], ["topo", "show", "torus:100000x100000"], ["topo", "show", "hierarchical:4x4"],
            ["topo", "show", "hierarchical:4x4@1,2,3"], ["topo", "show", "ndv2x0"], ["topo", "show", "ndv2x100000"],
            ["topo", "show", "dgx_a100x99999999999999999999"], ["topo", "show", ""], ["topo", "show", "/nonexistent.json"],
            ["topo", "show", str(d)], ["topo", "show", s], ["topo", "show", f"{t}?nodes=2"],
            ["topo", "show", f"{d / 'taccl.json'}?nodes=0"], ["topo", "show", f"{d / 'taccl.json'}?nodes=x"],
            ["topo", "show", f"{d / 'taccl.json'}?nodes=100000"], ["topo", "show", f"{d / 'taccl.json'}?scale=0"],
            ["topo", "show", f"{d / 'taccl.json'}?scale=nan"], ["topo", "show", f"{d / 'taccl.json'}?chunk=0"],
            ["topo", "show", f"{d / 'taccl.json'}?kind=warp"], ["topo", "show", f"{d / 'taccl.json'}?what=1"],
            ["topo", "export", "ring:4"], ["topo", "export", "ring:4", "-o", ""], ["topo", "export", "ring:4", "-o", str(d)],
            ["topo", "export", "ring:4", "-o", "/nonexistent/t.json"], ["topo", "list", "--bogus"]]
    # baseline
    b = ["baseline", "ring", "-t", "ring:4", "-c", "allgather"]
    out += [["baseline"], ["baseline", "ring"], ["baseline", "ring", "-t", "ring:4"], ["baseline", "warp", "-t", "ring:4", "-c", "allgather"],
            ["baseline", "ring", "-t", "ring:4", "-c", "allgatherr"], ["baseline", "ring", "-t", "ring:4", "-c", ""],
            b + ["--chunks", "0"], b + ["--chunks", "-3"], b + ["--chunks", "x"], b + ["--chunks", "1.5"],
            b + ["--chunks", "99999999999999999999999"], b + ["--root", "3"],
            ["baseline", "ring", "-t", "ring:4", "-c", "broadcast", "--root", "-1"],
            ["baseline", "ring", "-t", "ring:4", "-c", "broadcast", "--root", "4"],
            ["baseline", "ring", "-t", "ring:4", "-c", "broadcast", "--root", "x"],
            ["baseline", "ring", "-t", "ring:64", "-c", "alltoall", "--chunks", "4096"],
            b + ["-o", "/nonexistent/x.json"], b + ["-o", ""], b + ["-o", str(d)], b + ["-o", f"{s}/x.json"]]
    # synth (every case must fail before a solver runs)
    y = ["synth", "-t", "ring:4", "-c", "allgather"]
    out += [["synth"], ["synth", "-t", "ring:4"], ["synth", "-c", "allgather"], ["synth", "-t", "nosuch", "-c", "allgather"],
            ["synth", "-t", "ring:4", "-c", "gather"], ["synth", "-t", "ring:4", "-c", "nosuch"],
            y + ["--chunks", "0"], y + ["--chunks", "1025"], y + ["--chunks", "100000"], y + ["--size", "0"],
            y + ["--size", "-1"], y + ["--size", "1X"], y + ["--size", ""], y + ["--size", "1.5"],
            y + ["--size", "9" * 400], y + ["--sizes", ""], y + ["--sizes", ","], y + ["--sizes", "0:4"],
            y + ["--sizes", "4:1"], y + ["--sizes", "0"], y + ["--sizes", "0,1K"], y + ["--size", "1K", "--sizes", "1K"],
            y + ["--sketch", "/nonexistent.json"], y + ["--sketch", s], y + ["--sketch", str(d)],
            y + ["--solver", "gurobi"], y + ["--time-limit", "x"], y + ["--threads", "x"],
            y + ["--time-limit", "-5"], y + ["--time-limit", "nan"], y + ["--time-limit", "inf"], y + ["--gap", "-1"],
            y + ["--gap", "nan"], y + ["--gap", "5"], y + ["--threads", "0"], y + ["--threads", "100000"],
            y + ["-f", "pdf"], y + ["-o", ""], y + ["-o", "/nonexistent/x.json"], y + ["-o", str(d)],
            y + ["--sizes", "1K,2K", "-f", "msccl-xml", "-o", s]]
    # verify / simulate / export
    out += [["verify"], ["verify", "/nonexistent.json"], ["verify", str(d)], ["verify", ""], ["verify", t], ["verify", k],
            ["verify", s, "-t", "ring:8"], ["verify", s, "-t", "nosuch"], ["verify", p],
            ["simulate"], ["simulate", "/nonexistent.json"], ["simulate", s, "-s", "x"], ["simulate", s, "-s", "-1"],
            ["simulate", s, "--sizes", "1K:"], ["simulate", s, "--sizes", ":"], ["simulate", s, "--sizes", "1K:x"],
            ["simulate", s, "--sizes", "x,1K"], ["simulate", s, "-s", "1K", "--sizes", "1K"],
            ["simulate", s, "--local-bw", "0"], ["simulate", s, "--local-bw", "-1"], ["simulate", s, "--local-bw", "nan"],
            ["simulate", s, "--local-bw", "1e-320"], ["simulate", s, "--local-bw", "x"], ["simulate", s, "-t", "ring:8"],
            ["simulate", s, "-t", "nosuch"],
            ["export"], ["export", "/nonexistent.json"], ["export", s, "-f", "pdf"], ["export", s, "-o", ""],
            ["export", s, "-o", "/nonexistent/x.xml"], ["export", s, "-o", str(d / "sub") + "/"], ["export", s, "-o", str(d)],
            ["export", s, "--channels", "0"], ["export", s, "--channels", "-2"], ["export", s, "--channels", "3000"],
            ["export", s, "--min-bytes", "x"], ["export", s, "--max-bytes", "-5"],
            ["export", s, "--proto", "LL256"], ["export", s, "-f", "json", "--proto", "LL"], ["export", s, "-t", "nosuch"],
            ["export", s, "-t", "ring:8"], ["export", x, "-f", "json", "-o", "/nonexistent/y.json"],
            ["export", p], ["export", p, "-f", "json", "-o", str(d / "q.json")], ["export", p, "-f", "msccl-xml", "-o", s],
            ["export", p, "-f", "msccl-xml", "-o", str(d / "dir"), "--name", "x"]]
    # bench (in-process with one rank: only argument and setup errors)
    out += [["bench"], ["bench", "nosuch"], ["bench", "allreduce", "-m", ""], ["bench", "allreduce", "-m", ","],
            ["bench", "allreduce", "-m", "x"], ["bench", "allreduce", "-m", "64K:8"], ["bench", "allreduce", "-m", "64G"],
            ["bench", "allreduce", "-m", "9" * 400], ["bench", "allreduce", "-i", "0"], ["bench", "allreduce", "-i", "x"],
            ["bench", "allreduce", "-x", "-1"], ["bench", "allreduce", "-i", "10000000000"],
            ["bench", "allreduce", "-x", "10000000000"], ["bench", "bw", "-W", "1000000000"],
            ["bench", "allreduce", "--chunks", "1000000"], ["bench", "allreduce", "--dtype", "int8"],
            ["bench", "allreduce", "--buffer", "tpu"], ["bench", "allreduce", "--algo", "warp"],
            ["bench", "allreduce", "--algo", ""], ["bench", "allreduce", "--algo", ","],
            ["bench", "allreduce", "--algo", "plan:/nonexistent.json"], ["bench", "allreduce", "--chunks", "0"],
            ["bench", "allreduce", "--json", "/nonexistent/x.json"], ["bench", "allreduce", "--json", ""],
            ["bench", "allreduce", "--json", str(d)], ["bench", "allreduce", "--plot", "/nonexistent/x.png"],
            ["bench", "allreduce", "--plot", str(d / "x.nosuchformat")], ["bench", "latency"],
            ["bench", "bw", "-W", "0"], ["bench", "barrier", "-m", "8"]]
    return out


def test_bench_beyond_memory(capsys, monkeypatch):
    """bench -m whose buffers cannot fit: refused before allocating (the machine's memory faked to 1 GiB)."""
    monkeypatch.setattr("ccsynth.bench.memory.available_bytes", lambda: 1 << 30)
    check_bad(["bench", "allreduce", "-m", "2G:2G", "-i", "1"], capsys, "issue", "needs about 18.0 GiB",
              "1.0 GiB available")
    check_bad(["bench", "allgather", "-m", "1G", "-c"], capsys, "issue", "needs about 10.0 GiB")


def test_bad_command_lines(files, capsys):
    lines = _command_lines(files)
    for argv in lines:
        check_bad(argv, capsys, "command lines")
    assert COVERAGE["command lines"] >= len(lines)


# ------------------------------------------------------- malformed files
_BAD_TEXTS = {
    "empty": "",
    "space": "   \n",
    "truncated": '{"format": "ccsynth.schedule", "version": 1,',
    "not_json": "hello",
    "nan_top": "NaN",
    "list": "[1, 2]",
    "string": '"x"',
    "number": "42",
    "null": "null",
    "deep": "[" * 5000 + "]" * 5000,
    "deep_obj": '{"a":' * 5000 + "1" + "}" * 5000,
    "huge_int": "1" * 5000,
    "bom": "\ufeff{}",
    "xmlish": "<algo",
    "xml_bad_root": "<foo/>",
}


def _file_commands(path: str, files) -> list[list[str]]:
    s = str(files / "s.json")
    return [
        ["verify", path],
        ["simulate", s, "-t", path],
        ["topo", "show", path],
        ["export", path, "-o", os.devnull],
        ["synth", "-t", "ring:4", "-c", "allgather", "--sketch", path],
        ["bench", "allreduce", "-m", "8", "--algo", f"plan:{path}"],
    ]


@pytest.mark.parametrize("name", sorted(_BAD_TEXTS))
def test_malformed_texts_in_every_reader(files, tmp_path, capsys, name):
    path = _write(tmp_path, f"{name}.json", _BAD_TEXTS[name])
    for argv in _file_commands(path, files):
        check_bad(argv, capsys, "malformed files")


def test_binary_and_unreadable_files(files, tmp_path, capsys):
    paths = [_write(tmp_path, "bin.json", b"\xff\xfe\x00garbage"), _write(tmp_path, "latin.json", "{\"name\": \"caf\xe9\"}".encode("latin-1"))]
    unreadable = tmp_path / "locked.json"
    unreadable.write_text("{}")
    unreadable.chmod(0)
    if not os.access(unreadable, os.R_OK):  # root reads anything
        paths.append(str(unreadable))
    for path in paths:
        for argv in _file_commands(path, files):
            check_bad(argv, capsys, "malformed files")


def test_file_size_limit(files, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("ccsynth.reading.MAX_FILE_BYTES", 100)
    path = str(files / "s.json")
    check_bad(["verify", path], capsys, "malformed files", "MAX_FILE_BYTES")
    check_bad(["topo", "show", str(files / "t.json")], capsys, "malformed files", "MAX_FILE_BYTES")


# ---------------------------------------------- fields flipped, format by format
NASTY = [None, True, False, -1, 0, -(10**18), 10**18, 1e18, -1e18, 1.5, math.nan, math.inf, -math.inf, 1e-320,
         "", "x", "1e9", "-5", [], {}, [[[[]]]], {"a": {"b": {}}}, [None], ["i", 0, 1], 10**40]
#: One of each kind (null, boolean, negative, huge, NaN, string, list, object): the default run; the
#: slow run (``pytest -m slow``) flips every field to every value of NASTY.
NASTY_SAMPLE = [None, True, -1, 10**18, math.nan, "x", [], {"a": {}}]


def _paths(doc, prefix=()):
    """Every path (tuple of keys/indices) into ``doc``, containers included; long lists sampled."""
    yield prefix
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(doc, list):
        idx = range(len(doc)) if len(doc) <= 6 else [0, 1, len(doc) // 2, len(doc) - 1]
        for i in idx:
            yield from _paths(doc[i], prefix + (i,))


def _set(doc, path, value):
    doc = copy.deepcopy(doc)
    if not path:
        return value
    cur = doc
    for k in path[:-1]:
        cur = cur[k]
    cur[path[-1]] = value
    return doc


def _drop(doc, path):
    doc = copy.deepcopy(doc)
    cur = doc
    for k in path[:-1]:
        cur = cur[k]
    del cur[path[-1]]
    return doc


def _commands_for(kind: str, path: str, files, full: bool = True) -> list[list[str]]:
    """The commands that read a file of ``kind`` (with ``full=False`` the first only, for the default run)."""
    s = str(files / "s.json")
    commands = {
        "schedule": [["verify", path], ["simulate", path, "-t", "ring:4"], ["export", path, "-o", os.devnull]],
        "topology": [["topo", "show", path], ["simulate", s, "-t", path]],
        "plan": [["export", path, "-f", "msccl-xml", "-o", str(files / "plan_out")]],
        "sketch": [],  # checked through the loader below: a valid sketch would start the solver
        "taccl": [["topo", "show", f"{path}?nodes=2"]],
    }[kind]
    return commands if full else commands[:1]


def _flipped(kind: str, doc, tmp_path, files, capsys, values=NASTY_SAMPLE, full: bool = False):
    """Each field of ``doc`` flipped to each of ``values``, and dropped: exit 0 or a one-line error."""
    n = 0
    for i, path in enumerate(list(_paths(doc))):
        variants = [_set(doc, path, v) for v in values]
        if path:
            variants.append(_drop(doc, path))
        for j, bad in enumerate(variants):
            f = _write(tmp_path, f"{kind}_{i}_{j}.json", bad)
            for argv in _commands_for(kind, f, files, full):
                check_ok_or_bad(argv, capsys, f"flipped {kind} fields")
                n += 1
            if kind in ("sketch",):
                _check_sketch(f)
                _count("flipped sketch fields")
                n += 1
    return n


def _check_sketch(path: str) -> None:
    """Loading and binding a sketch raises only CCSynthError (never a bare Python error)."""
    from ccsynth.errors import CCSynthError
    from ccsynth.formats.files import load_sketch

    try:
        load_sketch(path).bind(ring(4))
    except CCSynthError as e:
        assert "\n" not in str(e)


_FORMATS = [("schedule", "s.json"), ("topology", "t.json"), ("plan", "p.json"), ("sketch", "k.json"),
            ("sketch", "tk.json"), ("taccl", "taccl.json")]


def _flip_doc(files, kind: str, name: str):
    doc = _load(files / name)
    if kind == "plan":  # sample the plan's schedule less densely: it is the schedule case again
        doc["entries"][0]["schedule"]["ops"] = doc["entries"][0]["schedule"]["ops"][:2]
    return doc


@pytest.mark.parametrize("kind, name", _FORMATS)
def test_every_field_flipped(files, tmp_path, capsys, kind, name):
    assert _flipped(kind, _flip_doc(files, kind, name), tmp_path, files, capsys) > 0


@pytest.mark.slow
@pytest.mark.parametrize("kind, name", _FORMATS)
def test_every_field_flipped_to_every_value(files, tmp_path, capsys, kind, name):
    assert _flipped(kind, _flip_doc(files, kind, name), tmp_path, files, capsys, NASTY, full=True) > 0


# ------------------------------------------------------- hypothesis mutations
_nasty = st.one_of(
    st.sampled_from(NASTY),
    st.integers(min_value=-(10**20), max_value=10**20),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.lists(st.integers(-3, 70), max_size=4),
)


@st.composite
def _mutation(draw, doc):
    paths = list(_paths(doc))
    out = doc
    for _ in range(draw(st.integers(1, 3))):
        paths = list(_paths(out))
        path = draw(st.sampled_from(paths))
        how = draw(st.sampled_from(["set", "drop", "wrap"])) if path else "set"
        if how == "set":
            out = _set(out, path, draw(_nasty))
        elif how == "drop":
            out = _drop(out, path)
        else:
            cur = out
            for k in path:
                cur = cur[k]
            out = _set(out, path, [cur])
    return out


#: ``CCSYNTH_FUZZ_EXAMPLES=5000 pytest tests/test_bad_inputs.py`` fuzzes longer (and with fresh random
#: examples); the default run is short and the same every time.
_EXAMPLES = int(os.environ.get("CCSYNTH_FUZZ_EXAMPLES", "0"))


def _settings():
    """The hypothesis profile's example count (tests/conftest.py), or CCSYNTH_FUZZ_EXAMPLES."""
    return settings(max_examples=_EXAMPLES or settings.default.max_examples, deadline=None,
                    suppress_health_check=list(HealthCheck), derandomize=not _EXAMPLES)


_HYP = _settings()


def _hypothesis_case(kind: str, name: str):
    @_HYP
    @given(data=st.data())
    def case(files, tmp_path_factory, capsys, data):
        doc = _load(files / name)
        bad = data.draw(_mutation(doc))
        d = tmp_path_factory.mktemp("h")
        f = _write(d, "f.json", bad)
        for argv in _commands_for(kind, f, files):
            check_ok_or_bad(argv, capsys, f"hypothesis {kind}")
        if kind == "sketch":
            _check_sketch(f)
            _count("hypothesis sketch")

    return case


test_hypothesis_schedule = _hypothesis_case("schedule", "s.json")
test_hypothesis_topology = _hypothesis_case("topology", "t.json")
test_hypothesis_plan = _hypothesis_case("plan", "p.json")
test_hypothesis_sketch = _hypothesis_case("sketch", "k.json")
test_hypothesis_taccl_sketch = _hypothesis_case("sketch", "tk.json")
test_hypothesis_taccl_topology = _hypothesis_case("taccl", "taccl.json")


@_HYP
@given(data=st.data())
def test_hypothesis_truncated_files(files, tmp_path_factory, capsys, data):
    """Every format cut short at any byte: a one-line error (or a still-valid file)."""
    name = data.draw(st.sampled_from(["s.json", "t.json", "p.json", "s.xml"]))
    text = (files / name).read_text()
    cut = data.draw(st.integers(0, len(text) - 1))
    d = tmp_path_factory.mktemp("cut")
    f = _write(d, name, text[:cut])
    argv = {"s.json": ["verify", f], "t.json": ["topo", "show", f], "p.json": ["export", f, "-f", "msccl-xml", "-o", str(d / "o")],
            "s.xml": ["verify", f]}[name]
    check_ok_or_bad(argv, capsys, "hypothesis truncated")


# ------------------------------------------------------- MSCCL XML attributes
_XML_VALUES = ["", "x", "-1", "-5", "0", "1", "2", "3", "71", "72", "1000", "4000000000", "4e9", "1.5", " 2 ", "nan",
               "9" * 30, "9" * 5000, "&amp;", "s", "r", "nop", "i", "o"]


def _xml_attributes(xml: str) -> list[tuple[int, int]]:
    """(start, end) of every attribute value in ``xml`` (first 40 and the <algo> ones)."""
    import re

    spans = [m.span(1) for m in re.finditer(r'="([^"]*)"', xml)]
    return spans[:60]


_XML_SAMPLE = ["", "x", "-1", "0", "3", "72", "4000000000", "9" * 5000]


@pytest.mark.parametrize("values", [pytest.param(_XML_SAMPLE, id="sample"),
                                    pytest.param(_XML_VALUES, id="all", marks=pytest.mark.slow)])
def test_every_xml_attribute_flipped(files, tmp_path, capsys, values):
    xml = (files / "s.xml").read_text()
    for i, (a, b) in enumerate(_xml_attributes(xml)):
        for j, v in enumerate(values):
            f = _write(tmp_path, f"x{i}_{j}.xml", xml[:a] + v + xml[b:])
            check_ok_or_bad(["verify", f], capsys, "flipped XML attributes")


@_HYP
@given(data=st.data())
def test_hypothesis_xml(files, tmp_path_factory, capsys, data):
    """Random XML surgery: attributes replaced, elements dropped or duplicated."""
    import re

    xml = (files / "s.xml").read_text()
    for _ in range(data.draw(st.integers(1, 3))):
        how = data.draw(st.sampled_from(["attr", "drop", "dup"]))
        if how == "attr":
            spans = _xml_attributes(xml)
            a, b = data.draw(st.sampled_from(spans))
            xml = xml[:a] + data.draw(st.one_of(st.sampled_from(_XML_VALUES), st.integers(-5, 100).map(str))) + xml[b:]
        else:
            steps = [m.span() for m in re.finditer(r"<step [^>]*/>|<tb [^>]*>", xml)]
            if not steps:
                continue
            a, b = data.draw(st.sampled_from(steps))
            xml = xml[:a] + (xml[a:b] * 2 if how == "dup" else "") + xml[b:]
    d = tmp_path_factory.mktemp("x")
    check_ok_or_bad(["verify", _write(d, "f.xml", xml)], capsys, "hypothesis XML")


# ------------------------------------------------------- limits are named
def test_each_limit_error_names_the_limit_value_and_input(files, tmp_path, capsys):
    s = _load(files / "s.json")
    cases = {
        "MAX_RANKS": _set(s, ("collective", "n_ranks"), LIMITS["MAX_RANKS"] + 1),
        "MAX_CHUNK_FACTOR": _set(s, ("collective", "chunk_factor"), LIMITS["MAX_CHUNK_FACTOR"] + 1),
        "MAX_BUFFER_CHUNKS": _set(s, ("collective", "chunk_factor"), 4096),  # allgather on 4 ranks: 16384 ... x 4
        "MAX_SCRATCH_CHUNKS": _set(s, ("scratch_chunks",), LIMITS["MAX_SCRATCH_CHUNKS"] + 1),
        "MAX_CHANNELS": _set(s, ("ops", 0, "channel"), LIMITS["MAX_CHANNELS"] + 1),
        "MAX_JSON_DEPTH": _set(s, ("meta",), {"a": json.loads("[" * 40 + "]" * 40)}),
    }
    cases["MAX_BUFFER_CHUNKS"] = _set(_set(s, ("collective", "n_ranks"), 32), ("collective", "chunk_factor"), 4096)
    for name, doc in cases.items():
        line = check_bad(["verify", _write(tmp_path, f"{name}.json", doc)], capsys, "limits", name)
        assert str(LIMITS[name]) in line, line
    t = topology_to_dict(ring(4))
    t["n_ranks"] = LIMITS["MAX_RANKS"] + 1
    check_bad(["topo", "show", _write(tmp_path, "t.json", t)], capsys, "limits", "MAX_RANKS", "4097")


def test_coverage_report(request, capsys):
    """Every test of this module that ran before this one (all of them, in file order) checked inputs, a hypothesis
    test at least one per example; prints how many of each kind."""
    items = request.session.items
    ran = [item for item in items[:items.index(request.node)] if item.module is request.module]
    for item in ran:
        floor = _HYP.max_examples if item.originalname.startswith("test_hypothesis_") else 1  # 1 per example
        assert _BY_TEST.get(item.nodeid, 0) >= floor, f"{item.nodeid} checked {_BY_TEST.get(item.nodeid, 0)} inputs"
    total = sum(COVERAGE.values())
    assert total == sum(_BY_TEST.values()) and (total > 0) == bool(ran)
    with capsys.disabled():
        print(f"\nbad-input coverage: {total} inputs: " + ", ".join(f"{k} {v}" for k, v in sorted(COVERAGE.items())),
              file=sys.stderr)
