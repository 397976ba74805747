"""The commands added since the first bad-input round, damaged as a new user would (issue 30).

``topo refit`` on damaged raw profiles, ``reshard`` and ``bench`` on damaged
arguments, the argument parser's own rules (negative-looking values, a flag
the sub-command lacks, two spellings of one option), ``bench --algo
plan:FILE`` with what ``Communicator(plan=FILE)`` takes, and Ctrl-C at any
moment. The rule is :mod:`test_bad_inputs`'s: exit status 2 and one line
``ccsynth CMD: error: ...``, never a traceback; a mutated input may also be
valid (exit 0). Cases run in-process (``ccsynth.cli.main``); one subprocess
per kind checks the real streams and exit codes.
"""

from __future__ import annotations

import copy
import json
import math
import os
import signal
import subprocess
import sys
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from test_bad_inputs import assert_one_line_error, check_bad, check_ok_or_bad, run

from ccsynth.bench.profile_raw import load_raw, raw_to_dict
from ccsynth.bench.profiling.probes import KernelRates, ProfileOptions, RawProfile, patterns, plan_probes, round_probes
from ccsynth.collectives.plan import Plan, PlanEntry, save_plan
from ccsynth.collectives.schedule import save_schedule
from ccsynth.collectives.spec import Collective
from ccsynth.errors import CCSynthError
from ccsynth.limits import MAX_LATENCY_US
from ccsynth.synth.baselines import make_baseline
from ccsynth.topologies import ring

#: CLI cases cost a parse and, when valid, a plan or a benchmark (0.2-0.5 s each): fewer examples than the profile's
_FEW = settings(max_examples=min(12, settings.default.max_examples), deadline=None, derandomize=True,
                suppress_health_check=list(HealthCheck))
_MANY = settings(max_examples=settings.default.max_examples, deadline=None, derandomize=True,
                 suppress_health_check=list(HealthCheck))


# ------------------------------------------------------------------ raw profiles (topo refit)
def _raw_doc() -> dict:
    """A valid raw profile of 2 ranks (every probe of a quick profile, made-up times): no measuring, no fit."""
    options = ProfileOptions(quick=True)
    probes = tuple((p, (10.0 + i, 9.0 + i)) for i, p in enumerate(plan_probes(patterns([0, 0]), options)))
    rounds = tuple((p, (5.0, 6.0)) for p in round_probes(2, options))
    raw = RawProfile(2, options, ("h", "h"), (2, 2), "MPICH", "2026-12-07 12:00 UTC", "0.5", probes, rounds,
                     (("allgather", (8.0, 7.5), (6.0, 6.1)),), KernelRates(6.0, 6.5, 5.0, 1 << 24, 0.9), 12.5)
    return json.loads(json.dumps(raw_to_dict(raw)))


RAW = _raw_doc()


def _with(path: tuple, value) -> dict:
    doc = copy.deepcopy(RAW)
    node = doc
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    return doc


#: the damage issue 30 found (each wrote a topology or raised a traceback), and more of the same kinds
RAW_CASES = {
    "top-level list": ([], "must be a JSON object"),
    "nested": ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
    "options null": (_with(("options",), None), "options must be a JSON object, got null"),
    "hosts string": (_with(("hosts",), "x"), "hosts must be a list, got \"x\""),
    "kernel bytes 0": (_with(("kernels", "nbytes"), 0), "kernels.nbytes"),
    "negative time": (_with(("probes", 3, "us", 1), -1.0), "probes[3] (shift 1:"),
    "zero time": (_with(("probes", 3, "us", 0), 0), "time of pass 1"),
    "absurd time": (_with(("probes", 0, "us", 1), 1e300), "probes[0] (shift 1: chain of 1 x 8 B) time of pass 2"),
    "NaN time": ("NaN", "must be a finite number"),
    "Infinity rate": ("Infinity", "kernels.copy"),
    "zero round time": (_with(("rounds", 0, "us", 0), 0.0), "rounds[0]"),
    "empty times": (_with(("probes", 1, "us"), []), "probes[1]"),
    "hosts short": (_with(("hosts",), ["h"]), "hosts lists 1 ranks"),
    "dest out of range": (_with(("probes", 0, "dest"), [5, 0]), "probes[0]"),
    "dest to itself": (_with(("probes", 0, "dest"), [0, 1]), "probes[0]"),
    "n_ranks huge": (_with(("n_ranks",), 10**18), "n_ranks"),
    "messages huge": (_with(("probes", 0, "messages"), 10**9), "probes[0]"),
    "format": (_with(("format",), "ccsynth.topology"), "not a raw profile"),
    "version": (_with(("version",), 2), "version 2 not supported"),
    "shape": (_with(("probes", 0, "shape"), "zigzag"), "probes[0]"),
    "cores zero": (_with(("cores",), [0, 2]), "cores[0]"),
    "more peers than ranks": (_with(("rounds", 0, "peers"), 3), "rounds[0] (1 peer: rounds of 1 x 8 B).peers must be at most 1"),
    "call_us NaN": ("call NaN", "kernels.call_us must be a finite number"),
}


def _raw_text(doc) -> str:
    if doc == "NaN":
        return json.dumps(_with(("probes", 2, "us", 0), math.nan))
    if doc == "Infinity":
        return json.dumps(_with(("kernels", "copy"), math.inf))
    if doc == "call NaN":
        return json.dumps(_with(("kernels", "call_us"), math.nan))
    return doc if isinstance(doc, str) else json.dumps(doc)


@pytest.mark.parametrize("case", sorted(RAW_CASES))
def test_damaged_raw_profiles_are_one_line(case, tmp_path, capsys):
    doc, words = RAW_CASES[case]
    path = tmp_path / "raw.json"
    path.write_text(_raw_text(doc))
    out = tmp_path / "machine.json"
    check_bad(["topo", "refit", str(path), "-o", str(out)], capsys, "refit", words, repr(str(path)))
    assert not out.exists()


def test_the_valid_raw_profile_passes_the_checks(tmp_path):
    path = tmp_path / "raw.json"
    path.write_text(json.dumps(RAW))
    assert load_raw(path).n == 2


_nasty = st.one_of(
    st.sampled_from([None, True, "", "x", [], {}, 0, -1, 0.0, -0.0, 1e300, -1e300, 2**64, 10**400]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(2**70), 2**70),
    st.lists(st.integers(-3, 5), max_size=3),
)


def _paths(doc, prefix=()):
    yield prefix
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc[:3]):  # the first items of long lists: the same schema holds for the rest
            yield from _paths(v, (*prefix, i))


_RAW_PATHS = [p for p in _paths(RAW) if p]


@_MANY
@given(changes=st.lists(st.tuples(st.sampled_from(_RAW_PATHS), st.sampled_from(["set", "drop"]), _nasty),
                        min_size=1, max_size=3))
def test_hypothesis_damaged_raw_profiles(tmp_path_factory, changes):
    """Any damage: a CCSynthError naming the file, or a profile whose every time and size is one a fit can use."""
    doc = copy.deepcopy(RAW)
    for path, how, value in changes:
        node = doc
        try:
            for k in path[:-1]:
                node = node[k]
            if how == "drop":
                del node[path[-1]]
            else:
                node[path[-1]] = value
        except (KeyError, IndexError, TypeError):
            continue  # an earlier change removed the path
    f = tmp_path_factory.mktemp("raw") / "raw.json"
    f.write_text(json.dumps(doc))
    try:
        raw = load_raw(f)
    except CCSynthError as e:
        assert str(f) in str(e) and "\n" not in str(e)
        return
    times = [t for _, us in (*raw.probe_us, *raw.round_us) for t in us]
    assert times and all(0 < t <= MAX_LATENCY_US for t in times)
    assert len(raw.hosts) == len(raw.cores) == raw.n >= 2 and raw.kernels.nbytes >= 1 and raw.kernels.copy > 0
    assert all(len(p.pattern.dest) == raw.n and p.pattern.pairs for p, _ in raw.probe_us)


# ------------------------------------------------------------------ reshard
_RESHARD = ["reshard", "--shape", "64x64x16", "--src-mesh", "2x2", "--src-spec", "S0,R,R", "--dst-mesh", "2x2",
            "--dst-spec", "R,S1,R", "-t", "ring:8", "--planner", "naive"]


def _reshard(**changes) -> list[str]:
    argv = list(_RESHARD)
    for flag, value in changes.items():
        opt = "--" + flag.replace("_", "-")
        if opt in argv:
            argv[argv.index(opt) + 1] = value
        else:
            argv += [opt, value]
    return argv


@pytest.mark.parametrize("changes, words", [
    ({"src_mesh": "100000x100000"}, "exceeds MAX_RANKS"),
    ({"src_mesh": "3000x3000"}, "devices of mesh 3000x3000: 9000000 exceeds MAX_RANKS = 4096"),
    ({"src_mesh": "-1x2"}, "mesh axis -1 of '-1x2' is out of range"),
    ({"shape": "-4x64x16"}, "tensor dimension -4 of shape -4x64x16 is out of range"),
    ({"shape": "1000000000x1000000000x1000", "dtype": "float64"}, "bytes of the 1000000000x1000000000x1000 float64"),
    ({"split": "-3"}, "'-3' must be at least 1"),
    ({"time_limit": "nan"}, "out of range"),
    ({"dst_spec": "S9,R,R"}, ""),
    ({"src_ranks": "-1-3"}, ""),
])
def test_reshard_bad_arguments(changes, words, capsys):
    t0 = time.perf_counter()
    check_bad(_reshard(**changes), capsys, "reshard", words)
    assert time.perf_counter() - t0 < 2.0  # refused before anything of the mesh's size is built


_MESH = st.one_of(st.sampled_from(["2x2", "1x4", "4", "2x2x2", "0x2", "-1x2", "100000x100000", "2x", "x", "", "2.5x2",
                                   "9" * 400, "1x1x1x1x1x1x1", "4096x2"]),
                  st.lists(st.integers(-2, 5), min_size=1, max_size=3).map(lambda d: "x".join(map(str, d))))
_SPEC = st.sampled_from(["S0,R,R", "R,S1,R", "S01,R,R", "x,None,y", "S2,R,R", "R,R", "", "S0,S0,R", "S0,R,R,R"])
_SHAPE = st.one_of(st.sampled_from(["64x64x16", "-4x64x16", "0x1x1", "1x1x1", "x", "", "9" * 30 + "x1x1"]),
                   st.lists(st.integers(-1, 40), min_size=1, max_size=4).map(lambda d: "x".join(map(str, d))))


@_FEW
@given(shape=_SHAPE, src=_MESH, dst=_MESH, src_spec=_SPEC, dst_spec=_SPEC,
       dtype=st.sampled_from(["float32", "int8", "float64", "bogus", "-1"]),
       split=st.sampled_from([None, "1", "2", "0", "-1", "1e9", "x"]))
def test_hypothesis_reshard_arguments(capsys, shape, src, dst, src_spec, dst_spec, dtype, split):
    changes = dict(shape=shape, src_mesh=src, dst_mesh=dst, src_spec=src_spec, dst_spec=dst_spec, dtype=dtype)
    if split is not None:
        changes["split"] = split
    check_ok_or_bad(_reshard(**changes), capsys, "hypothesis reshard")


# ------------------------------------------------------------------ bench and the parser's rules
@pytest.mark.parametrize("argv, words", [
    (["bench", "bcast", "-l"], "bench bcast has no option -l (an option of bench allgather, bench allreduce"),
    (["bench", "bcast", "-l"], "it takes: -m/--message-size"),
    (["bench", "latency", "-T", "int32"], "bench latency has no option -T"),
    (["bench", "iallreduce", "-z"], "bench iallreduce has no option -z (an option of"),
    (["bench", "allreduce", "-T", "float64", "--dtype", "int32"], "--dtype int32 conflicts with -T float64"),
    (["bench", "allreduce", "-d", "cuda", "--buffer", "numpy"], "--buffer numpy conflicts with -d cupy"),
    (["bench", "allreduce", "-i", "-5"], "'-5' must be at least 1"),
    (["bench", "allreduce", "-m", "-8"], "-m"),
    (["bench", "reshard", "--shape", "-4x4", "--src-mesh", "1", "--src-spec", "S0,R", "--dst-mesh", "1",
      "--dst-spec", "R,R"], "out of range"),
    (["topo", "profile", "-o", "x.json", "--iters", "-1"], "'-1' must be at least 1"),
    (["topo", "profile", "-o", "x.json", "--passes", "100000"], "exceeds MAX_PROFILE_PASSES"),
    (["topo", "profile", "-o", "x.json", "--sizes", "64G"], "exceeds MAX_MESSAGE_BYTES"),
    (["topo", "refit", "raw.json", "-o", "x.json", "--nosuch"], "topo refit has no option --nosuch"),
    (["tune", "p.json", "-t", "ring:4", "-i", "0"], "'0' must be at least 1"),
    (["synth", "-t", "ring:4", "-c", "allreduce", "--chunks", "-2"], "--chunks must be a positive integer, got -2"),
])
def test_parser_rules(argv, words, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    check_bad(argv, capsys, "parser", words)


@pytest.fixture(scope="module")
def plan_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("plans")
    s = make_baseline("ring", Collective("allgather", 4), ring(4))
    save_schedule(s, d / "schedule.json")
    good = make_baseline("ring", Collective("allreduce", 4, 4), ring(4))
    save_plan(Plan((PlanEntry("allgather", 4, 0, None, s), PlanEntry("allreduce", 4, 0, None, good))), d / "plan.json")
    doc = json.loads((d / "plan.json").read_text())
    doc["entries"][1]["schedule"]["ops"] = doc["entries"][1]["schedule"]["ops"][:-3]
    (d / "broken.json").write_text(json.dumps(doc))
    return d


def test_bench_plan_file_takes_what_the_communicator_takes(plan_files, capsys):
    """A schedule file is a plan (it was refused as "not a plan"); on one rank it covers no collective there, which
    is the error; a broken entry of a plan is named with its file and index."""
    check_bad(["bench", "allgather", "-m", "8", "--algo", f"plan:{plan_files / 'schedule.json'}"], capsys, "plan",
              "has no allgather schedule for 1 ranks (it covers: allgather on 4 ranks)")
    broken = plan_files / "broken.json"
    check_bad(["bench", "allreduce", "-m", "8", "--algo", f"plan:{broken}"], capsys, "plan",
              f"plan {str(broken)!r} entries[1] (allreduce on 4 ranks):")


_BENCH_FLAGS = [("-m", st.sampled_from(["8", "-8", "0", "8:4", "64G", "", "1K:2K"])),
                ("-i", st.sampled_from(["1", "0", "-1", "x", "10000000000"])),
                ("-x", st.sampled_from(["0", "-1", "1"])), ("-T", st.sampled_from(["int32", "float64", "x"])),
                ("--dtype", st.sampled_from(["int32", "float32"])), ("-l", st.none()), ("-z", st.none()),
                ("-W", st.sampled_from(["1", "0", "1000000000"])), ("--chunks", st.sampled_from(["1", "-1", "10**9"])),
                ("-k", st.sampled_from(["rotate", "fixed:-1", "fixed:9"])), ("--algo", st.sampled_from(
                    ["mpi", "ring", "plan:", "warp", "mpi,mpi", ""])), ("--nosuch", st.none())]


@_FEW
@given(name=st.sampled_from(["allreduce", "bcast", "latency", "bw", "alltoallv", "iallreduce", "all_reduce_perf"]),
       flags=st.lists(st.sampled_from(range(len(_BENCH_FLAGS))), max_size=3), data=st.data())
def test_hypothesis_bench_arguments(capsys, name, flags, data):
    argv = ["bench", name]
    for i in flags:
        flag, values = _BENCH_FLAGS[i]
        value = data.draw(values)
        argv += [flag] + ([] if value is None else [value])
    for flag, value in (("-m", "8"), ("-i", "1"), ("-x", "0")):  # a valid case runs for a moment only
        if flag not in argv and not name.endswith("_perf"):
            argv += [flag, value]
    if name.endswith("_perf"):
        argv += ["-b", "8", "-e", "8", "-n", "1", "-w", "0"]
    check_ok_or_bad(argv, capsys, "hypothesis bench")


# ------------------------------------------------------------------ Ctrl-C
def test_ctrl_c_while_the_parser_loads_is_one_line(capsys, monkeypatch):
    def interrupted(name, *a, **k):
        raise KeyboardInterrupt

    from ccsynth import cli

    cli._cached_parser.cache_clear()  # main() keeps one parser per process: this call must build its own
    monkeypatch.setattr("ccsynth.cli.importlib.import_module", interrupted)
    rc, out, err = run(["topo", "list"], capsys)
    assert rc == 130 and err == "ccsynth: interrupted\n" and out == ""


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (os.getcwd(), os.environ.get("PYTHONPATH")) if p)}


def test_ctrl_c_while_ccsynth_is_imported_is_one_line():
    """Ctrl-C in the command's first seconds (ccsynth's modules loading): one line, exit status 130."""
    code = ("import sys, os, signal; sys.argv[0] = 'ccsynth'; import ccsynth; os.kill(os.getpid(), signal.SIGINT); "
            "import time; time.sleep(30); print('not interrupted')")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=_env())
    assert (p.returncode, p.stderr, p.stdout) == (130, "ccsynth: interrupted\n", "")


def test_ctrl_c_during_a_command_keeps_the_output(tmp_path):
    """Ctrl-C in the middle of a synthesis: one line, exit 130, the previous output as it was, no temporary file."""
    out = tmp_path / "s.json"
    out.write_text("old")
    p = subprocess.Popen([sys.executable, "-m", "ccsynth", "-v", "synth", "-t", "dgx1", "-c", "allreduce", "--sizes",
                          "1K:1G", "-o", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=_env())
    first = p.stderr.readline()  # the first stage line: the command is at work
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=60)
    assert first and p.returncode == 130, (first, err)
    assert err.splitlines()[-1] == "ccsynth: interrupted" and "Traceback" not in err
    assert out.read_text() == "old" and sorted(os.listdir(tmp_path)) == ["s.json"]


def test_real_streams_and_exit_codes(tmp_path):
    """One process per command kind: standard error holds the one line, exit status 2."""
    raw = tmp_path / "raw.json"
    raw.write_text(json.dumps(_with(("probes", 0, "us", 0), -1.0)))
    for argv in (["topo", "refit", str(raw), "-o", str(tmp_path / "m.json")],
                 _reshard(src_mesh="100000x100000")):
        p = subprocess.run([sys.executable, "-m", "ccsynth", *argv], capture_output=True, text=True, timeout=120,
                           env=_env())
        assert_one_line_error(argv, p.returncode, p.stdout, p.stderr)
