"""The CLI end to end, in a temporary folder: good paths and bad input (exit 2, one line, no traceback)."""

import json
import subprocess
import sys

import pytest

from ccsynth.cli import main


def run_cli(*args, cwd=None):
    """Run ``python -m ccsynth ARGS`` in a subprocess: real exit codes and streams."""
    p = subprocess.run([sys.executable, "-m", "ccsynth", *args], capture_output=True, text=True, cwd=cwd, timeout=120)
    return p.returncode, p.stdout, p.stderr


def run_main(args, capsys):
    """``main(args)`` in-process (argparse's SystemExit included): exit status, stdout, stderr."""
    capsys.readouterr()
    try:
        code = main(list(args))
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


def assert_user_error(code, out, err, *words):
    assert code == 2, (code, out, err)
    assert "Traceback" not in err
    for w in words:
        assert w in err, (w, err)


def test_topo_list_and_show(capsys):
    assert main(["topo", "list"]) == 0
    out = capsys.readouterr().out
    for name in ("dgx1", "ndv2", "dgx_a100", "torus", "hierarchical", "ring"):
        assert name in out
    assert main(["topo", "show", "ndv2x2"]) == 0
    out = capsys.readouterr().out
    assert "16 ranks on 2 node(s)" in out
    assert main(["topo", "show", "dgx1", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["schema"] == "ccsynth.topo.show/1" and d["n_ranks"] == 8 and d["topology"]["n_ranks"] == 8


def test_topo_export_round_trips(tmp_path, capsys):
    f = tmp_path / "t.json"
    assert main(["topo", "export", "torus:2x3", "-o", str(f)]) == 0
    assert main(["topo", "show", str(f), "--json"]) == 0
    assert json.loads(capsys.readouterr().out.split("\n", 1)[1])["n_ranks"] == 6


def test_baseline_verify_simulate_pipeline(tmp_path, capsys):
    f = tmp_path / "ring.json"
    assert main(["baseline", "ring", "--topology", "dgx1", "--collective", "allreduce", "-o", str(f)]) == 0
    assert "verified" in capsys.readouterr().out
    assert main(["verify", str(f), "--topology", "dgx1"]) == 0
    assert capsys.readouterr().out.startswith("OK:")
    assert main(["simulate", str(f), "--topology", "dgx1", "--sizes", "1K:1G"]) == 0
    out = capsys.readouterr().out
    lines = [l for l in out.splitlines() if l and not l.startswith("#")]
    assert lines[0].split()[:2] == ["size", "time"]
    assert [l.split()[0] for l in lines[1:]] == ["1K", "2K", "4K", "8K", "16K", "32K", "64K", "128K", "256K", "512K",
                                               "1M", "2M", "4M", "8M", "16M", "32M", "64M", "128M", "256M", "512M", "1G"]
    assert main(["simulate", str(f), "--size", "64M", "--json"]) == 0
    res = json.loads(capsys.readouterr().out)["results"][0]
    assert res["time_us"] >= res["lower_bound_us"] > 0
    assert res["busbw_GBps"] == pytest.approx(res["algbw_GBps"] * 2 * 7 / 8)


def test_ring_allreduce_on_dgx1_reaches_its_bound_at_1g(tmp_path, capsys):
    f = tmp_path / "ring.json"
    main(["baseline", "ring", "-t", "dgx1", "-c", "allreduce", "-o", str(f)])
    capsys.readouterr()
    main(["simulate", str(f), "--size", "1G", "--json"])
    r = json.loads(capsys.readouterr().out)["results"][0]
    # one ring of 25 GB/s NVLinks moves 2(n-1)/n of the buffer through each rank
    assert r["busbw_GBps"] == pytest.approx(25.0, rel=0.05)


@pytest.mark.parametrize(
    "args, words",
    [
        (["topo", "show", "dgx9"], ["unknown topology", "dgx9"]),
        (["topo", "show", "ring:x"], ["ring"]),
        (["baseline", "ring", "-t", "dgx1", "-c", "allsum"], ["unknown collective 'allsum'"]),
        (["baseline", "warp", "-t", "dgx1", "-c", "allgather"], ["warp"]),
        (["simulate", "missing.json", "-t", "dgx1"], ["cannot read schedule"]),
        (["simulate", "bad.json", "-t", "dgx1"], ["not valid JSON"]),
        (["verify", "v2.json"], ["version 2 is not supported"]),
        (["topo", "show", "neg.json"], ["bw"]),
        (["simulate", "ring.json", "-t", "dgx1", "--size", "12Q"], ["bad size '12Q'"]),
        (["simulate", "ring.json", "-t", "ring:4"], ["4", "8"]),
    ],
)
def test_bad_input_exits_2_with_one_clear_line(tmp_path, monkeypatch, capsys, args, words):
    """In-process (test_argparse_errors_exit_2 runs the real program's streams and status)."""
    (tmp_path / "bad.json").write_text("{oops")
    (tmp_path / "v2.json").write_text(json.dumps({"format": "ccsynth.schedule", "version": 2, "ops": []}))
    (tmp_path / "neg.json").write_text(json.dumps({
        "format": "ccsynth.topology", "version": 1, "name": "neg", "n_ranks": 2,
        "links": [{"src": 0, "dst": 1, "alpha_us": 1.0, "bw_GBps": -5.0}]}))
    assert main(["baseline", "ring", "-t", "dgx1", "-c", "allgather", "-o", str(tmp_path / "ring.json")]) == 0
    monkeypatch.chdir(tmp_path)
    code, out, err = run_main(args, capsys)
    assert_user_error(code, out, err, *words)
    assert len(err.strip().splitlines()) <= 2  # the usage line at most, then the error


def test_argparse_errors_exit_2():
    code, _out, err = run_cli("simulate")
    assert code == 2 and "usage" in err
    code, _out, err = run_cli("frobnicate")
    assert code == 2 and "invalid choice" in err


def _subcommands(parser) -> list[str]:
    import argparse

    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return list(sub.choices)


def test_every_listed_command_registers_in_order():
    from ccsynth.cli import COMMANDS, build_parser

    assert _subcommands(build_parser()) == list(COMMANDS)
    code, out, _err = run_cli("--help")
    assert code == 0 and all(name in out for name in COMMANDS), out


def test_a_listed_command_without_its_module_fails_loudly(monkeypatch):
    """A misnamed or missing command module is a bug: no silent skip."""
    import ccsynth.cli as cli

    monkeypatch.setattr(cli, "COMMANDS", (*cli.COMMANDS, "no_such_command"))
    with pytest.raises(ModuleNotFoundError, match="ccsynth.commands.no_such_command"):
        cli.build_parser()


def test_synth_sizes_margin_keeps_or_replaces_the_default_choice(capsys):
    """--margin: a plan keeps the default plan's algorithm unless beaten by more than the margin; 0: fastest wins."""
    assert main(["synth", "-t", "fully_connected:2", "-c", "allgather", "--sizes", "1K,1M", "--json"]) == 0
    kept = json.loads(capsys.readouterr().out)
    assert kept["default_margin"] == 0.25  # a catalog topology: the model's target accuracy
    assert main(["synth", "-t", "fully_connected:2", "-c", "allgather", "--sizes", "1K,1M", "--margin", "0", "--json"]) == 0
    fastest = json.loads(capsys.readouterr().out)
    assert fastest["default_margin"] == 0.0
    assert {r["algorithm"].split("(")[0] for r in kept["plan"]} <= {"recursive_doubling", "ring"} | {
        r["algorithm"] for r in fastest["plan"]}


def test_synth_sizes_bad_margin_is_a_user_error(tmp_path):
    code, out, err = run_cli("synth", "-t", "fully_connected:2", "-c", "allgather", "--sizes", "1K", "--margin", "2")
    assert_user_error(code, out, err, "margin")
