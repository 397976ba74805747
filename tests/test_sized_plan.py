"""``ccsynth synth --sizes`` and ``ccsynth.synthesize(sizes=...)`` are one code path (synth/sized_plan.py)."""

from __future__ import annotations

import json

import ccsynth
from ccsynth.cli import main
from ccsynth.synth.sized_plan import SizedSchedule, synthesize_sized
from ccsynth.topologies import fully_connected


def test_the_cli_plan_is_the_library_plan(tmp_path, capsys):
    out = tmp_path / "plan.json"
    assert main(["synth", "-t", "fully_connected:4", "-c", "allgather", "--sizes", "1K,1M", "-o", str(out), "-q"]) == 0
    capsys.readouterr()
    lib = ccsynth.synthesize("fully_connected:4", "allgather", sizes="1K,1M")
    assert json.loads(out.read_text()) == lib.to_dict()


def test_the_hooks_see_every_size_once_smallest_first():
    seen: list[SizedSchedule] = []
    stages: list[tuple[int, str]] = []

    def stage_progress(size):
        return lambda stage, seconds, detail: stages.append((size, stage))

    sized = synthesize_sized(fully_connected(4), ccsynth.Collective("allgather", 4), [1 << 20, 1024, 1024],
                             stage_progress=stage_progress, on_size=seen.append)
    assert [d.size_bytes for d in seen] == [1024, 1 << 20] == [d.size_bytes for d in sized.synthesized]
    assert [d.schedule.name for d in seen] == ["ccsynth@1K", "ccsynth@1M"]
    assert {size for size, _ in stages} == {1024, 1 << 20}
    assert set(sized.baselines) == {1024, 1 << 20} and all(sized.baselines.values())
    assert sized.plan.select("allgather", 4, 1024) is not None and sized.synthesis_s > 0
