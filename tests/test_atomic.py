"""Atomic writes (ccsynth.atomic): an interrupted write leaves the previous file intact, no temp file behind."""

from __future__ import annotations

import json
import os
import random
import signal
import stat
import subprocess
import sys
import textwrap
import time

import pytest

from ccsynth.atomic import AtomicWriteError, check_writable, open_atomic, write_bytes, write_text
from ccsynth.collectives.schedule import save_schedule
from ccsynth.collectives.spec import Collective
from ccsynth.errors import CCSynthError, TopologyError
from ccsynth.synth.baselines import make_baseline
from ccsynth.topologies import ring, save_topology


def _ring_schedule(n: int = 4):
    return make_baseline("ring", Collective("allgather", n), ring(n))


def _only(folder) -> list[str]:
    return sorted(os.listdir(folder))


# ------------------------------------------------------------------ basics
def test_write_replaces_and_leaves_no_temp(tmp_path):
    p = tmp_path / "a.txt"
    write_text(p, "one\n")
    write_text(p, "two\n")
    assert p.read_text() == "two\n"
    write_bytes(p, b"\x00\x01")
    assert p.read_bytes() == b"\x00\x01"
    assert _only(tmp_path) == ["a.txt"]


def test_new_file_gets_umask_mode_and_existing_keeps_its_mode(tmp_path):
    old = os.umask(0o022)
    try:
        p = tmp_path / "new.json"
        write_text(p, "{}")
        assert stat.S_IMODE(p.stat().st_mode) == 0o644  # as open() would create it
        os.chmod(p, 0o600)
        write_text(p, "{}\n")
        assert stat.S_IMODE(p.stat().st_mode) == 0o600
    finally:
        os.umask(old)


def test_read_only_file_is_not_replaced(tmp_path, monkeypatch):
    p = tmp_path / "ro.json"
    p.write_text("keep")
    p.chmod(0o444)
    if os.access(p, os.W_OK):  # root writes anything: pretend not to be
        real = os.access
        monkeypatch.setattr("ccsynth.atomic.os.access", lambda f, mode: False if str(f) == str(p) else real(f, mode))
    with pytest.raises(AtomicWriteError, match="Permission denied"):
        write_text(p, "new")
    with pytest.raises(AtomicWriteError, match="Permission denied"):
        check_writable(p)
    assert p.read_text() == "keep" and _only(tmp_path) == ["ro.json"]


def test_symlink_is_followed(tmp_path):
    real = tmp_path / "real.txt"
    real.write_text("old")
    link = tmp_path / "link.txt"
    link.symlink_to(real)
    write_text(link, "new")
    assert link.is_symlink() and real.read_text() == "new"


@pytest.mark.parametrize("exc", [KeyboardInterrupt, RuntimeError, SystemExit])
def test_exception_inside_the_block_keeps_the_old_file(tmp_path, exc):
    p = tmp_path / "s.json"
    p.write_text("previous\n")
    with pytest.raises(exc), open_atomic(p) as f:
        f.write("half of the new conte")
        raise exc()
    assert p.read_text() == "previous\n"
    assert _only(tmp_path) == ["s.json"]


_SAVERS = {
    "schedule": (save_schedule, lambda: _ring_schedule(4), lambda: _ring_schedule(8)),
    "topology": (save_topology, lambda: ring(4), lambda: ring(8)),
}


@pytest.mark.parametrize(
    "what, where",
    [
        ("schedule", "ccsynth.atomic.os.fsync"),  # data written, not yet renamed: the window that matters
        ("schedule", "ccsynth.atomic.os.replace"),
        ("topology", "ccsynth.topologies.io.topology_to_json"),  # inside the serializer
    ],
)
def test_interrupt_keeps_the_old_file(tmp_path, monkeypatch, what, where):
    save, old, new = _SAVERS[what]
    p = tmp_path / "f.json"
    save(old(), p)
    before = p.read_text()

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(where, interrupted)
    with pytest.raises(KeyboardInterrupt):
        save(new(), p)
    assert p.read_text() == before
    assert _only(tmp_path) == ["f.json"]


# ------------------------------------------------------------------ errors
@pytest.mark.parametrize(
    "path, reason",
    [
        ("/nonexistent/x.json", "No such file or directory"),
        ("", "empty"),
    ],
)
def test_unwritable_paths_are_one_line_errors(path, reason):
    with pytest.raises(AtomicWriteError) as e:
        write_text(path, "x")
    assert reason in str(e.value) and "\n" not in str(e.value)
    assert isinstance(e.value, CCSynthError) and isinstance(e.value, OSError)


def test_directory_and_full_device(tmp_path):
    with pytest.raises(AtomicWriteError, match="Is a directory"):
        write_text(tmp_path, "x")
    if os.path.exists("/dev/full"):
        with pytest.raises(AtomicWriteError, match="No space left on device"):
            write_text("/dev/full", "x" * 100_000)


def test_error_class_and_word_of_the_caller(tmp_path):
    with pytest.raises(TopologyError, match=r"cannot write topology '.*no_dir/t.json': No such file or directory"):
        save_topology(ring(3), tmp_path / "no_dir" / "t.json")


def test_check_writable(tmp_path):
    check_writable(tmp_path / "fine.json")
    with pytest.raises(AtomicWriteError, match="does not exist"):
        check_writable(tmp_path / "no" / "x.json")
    with pytest.raises(AtomicWriteError, match="Is a directory"):
        check_writable(tmp_path)
    with pytest.raises(AtomicWriteError, match="empty"):
        check_writable("")
    (tmp_path / "file").write_text("")
    with pytest.raises(AtomicWriteError, match="not a folder"):
        check_writable(tmp_path / "file" / "x.json")
    check_writable("/dev/null")  # a device is written directly


def test_temp_file_is_in_the_destination_folder(tmp_path, monkeypatch):
    seen = []
    real_replace = os.replace

    def spy(src, dst):
        seen.append(os.path.dirname(src))
        return real_replace(src, dst)

    monkeypatch.setattr("ccsynth.atomic.os.replace", spy)
    write_text(tmp_path / "x.txt", "x")
    assert seen == [str(tmp_path)]


# ------------------------------------------------------- killed mid-write
# A child process runs the CLI with its writes slowed down at a chosen stage, says when the
# write is under way, and is then sent SIGTERM or SIGINT.
_CHILD = textwrap.dedent(
    """
    import os, signal, sys, time
    import ccsynth.atomic as A
    # as started from a terminal: a job started in the background by a non-interactive shell (nohup ... &)
    # inherits SIGINT ignored, and Python then installs no KeyboardInterrupt handler
    signal.signal(signal.SIGINT, signal.default_int_handler)
    stage = sys.argv[1]
    real_fdopen, real_fsync = os.fdopen, os.fsync

    class Slow:
        def __init__(self, f):
            self.f = f
        def write(self, s):
            half = len(s) // 2
            self.f.write(s[:half]); self.f.flush()
            print("WRITING", flush=True)
            time.sleep(30)
            self.f.write(s[half:])
        def __getattr__(self, name):
            return getattr(self.f, name)
        def __enter__(self):
            return self
        def __exit__(self, *exc):
            return self.f.__exit__(*exc)

    def fdopen(*a, **k):
        f = real_fdopen(*a, **k)
        return Slow(f) if stage == "write" else f

    def fsync(fd):
        real_fsync(fd)
        if stage == "fsync":
            print("WRITING", flush=True)
            time.sleep(30)

    A.os.fdopen = fdopen
    A.os.fsync = fsync
    from ccsynth.cli import main
    sys.exit(main(sys.argv[2:]))
    """
)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
@pytest.mark.parametrize("stage", ["write", "fsync"])
def test_cli_killed_mid_write_keeps_the_previous_file(tmp_path, sig, stage):
    out = tmp_path / "s.json"
    save_schedule(_ring_schedule(4), out)
    before = out.read_bytes()
    proc = subprocess.Popen(
        [sys.executable, "-c", _CHILD, stage, "baseline", "ring", "-t", "ring:16", "-c", "allgather", "-o", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path,
    )
    try:
        line = proc.stdout.readline()
        assert line.strip() == "WRITING", proc.stderr.read() if proc.poll() is not None else line
        proc.send_signal(sig)
        rc = proc.wait(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    err = proc.stderr.read()
    assert rc == (130 if sig == signal.SIGINT else 143), err
    assert "Traceback" not in err
    assert out.read_bytes() == before
    assert _only(tmp_path) == ["s.json"]


@pytest.mark.slow
def test_cli_killed_at_random_times_while_writing_a_large_schedule(tmp_path):
    """The real CLI, a 9 MB schedule, SIGTERM or SIGINT at random moments: the file is always whole."""
    big = tmp_path / "big.json"
    assert subprocess.run([sys.executable, "-m", "ccsynth", "baseline", "ring", "-t", "ring:256", "-c", "allgather",
                           "-o", str(big)], capture_output=True).returncode == 0
    out = tmp_path / "out.json"
    save_schedule(_ring_schedule(4), out)
    t0 = time.perf_counter()
    assert subprocess.run([sys.executable, "-m", "ccsynth", "export", str(big), "-f", "json", "-o", str(out)],
                          capture_output=True).returncode == 0
    full = time.perf_counter() - t0
    valid = {out.read_bytes()}
    save_schedule(_ring_schedule(4), out)
    valid.add(out.read_bytes())
    rng = random.Random(12)
    for i in range(12):
        sig = (signal.SIGTERM, signal.SIGINT)[i % 2]
        proc = subprocess.Popen([sys.executable, "-m", "ccsynth", "export", str(big), "-f", "json", "-o", str(out)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        time.sleep(rng.uniform(0.5, 1.0) * full)  # most of the run is reading and verifying; the write is last
        proc.send_signal(sig)
        proc.wait(timeout=60)
        assert "Traceback" not in proc.stderr.read()
        assert out.read_bytes() in valid
        json.loads(out.read_text())
        assert sorted(os.listdir(tmp_path)) == ["big.json", "out.json"]
