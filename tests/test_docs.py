"""The documentation holds: README.md's Python example runs as printed, and every relative link resolves.

The README's example is the front door (synthesize -> Communicator -> Allreduce under mpiexec): the test
extracts the one ``python`` block of README.md and runs it on 2 ranks, so an API change that breaks it fails
here. Links are checked the way GitHub renders them: a relative path must name a file of the repository, and
a ``#fragment`` a heading of the file it points to (GitHub's slug: lower case, punctuation other than ``-`` and
``_`` dropped, spaces as ``-``, a repeated heading numbered).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ccsynth.collectives.mpi_util import find_mpiexec

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
LINK = re.compile(r"\]\(([^)\s]+)\)")


def _slug(heading: str) -> str:
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    """The fragments GitHub gives the headings of ``path`` (outside code blocks)."""
    out: set[str] = set()
    count: dict[str, int] = {}
    for line in FENCE.sub("", path.read_text()).splitlines():
        m = re.match(r"#{1,6} (.*)", line)
        if m:
            s = _slug(m.group(1))
            n = count.get(s, 0)
            count[s] = n + 1
            out.add(s if n == 0 else f"{s}-{n}")
    return out


def _links(path: Path) -> list[str]:
    return [m.group(1) for m in LINK.finditer(FENCE.sub("", path.read_text()))
            if not m.group(1).startswith(("http://", "https://", "mailto:"))]


def test_the_checker_finds_broken_links(tmp_path):
    (tmp_path / "a.md").write_text("# Top\n## A `--flag`: here\n## Top\n```\n# not a heading\n```\n"
                                   "[ok](#a---flag-here) [bad](#nope) [gone](b.md)\n")
    assert _anchors(tmp_path / "a.md") == {"top", "a---flag-here", "top-1"}
    assert _links(tmp_path / "a.md") == ["#a---flag-here", "#nope", "b.md"]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve(doc):
    assert _links(doc) or doc.name != "README.md"  # the README links into docs/
    broken = []
    for link in _links(doc):
        path, _, fragment = link.partition("#")
        target = (doc.parent / path).resolve() if path else doc
        if not target.exists():
            broken.append(f"{link}: no such file")
        elif fragment and target.suffix == ".md" and fragment not in _anchors(target):
            broken.append(f"{link}: no heading '{fragment}' in {target.name}")
    assert not broken, f"{doc.name}: {broken}"


@pytest.mark.mpi
def test_readme_python_example_runs_under_mpiexec(tmp_path):
    blocks = re.findall(r"^```python\n(.*?)^```", (ROOT / "README.md").read_text(), re.MULTILINE | re.DOTALL)
    assert len(blocks) == 1, "README.md holds one Python example"
    mpiexec = find_mpiexec()
    if mpiexec is None:
        pytest.skip("mpiexec not found")
    script = tmp_path / "example.py"
    script.write_text(blocks[0])
    env = dict(os.environ, OMP_NUM_THREADS="1")
    p = subprocess.run([mpiexec, "-n", "2", sys.executable, str(script)], capture_output=True, text=True,
                       timeout=240, env=env, cwd=tmp_path)
    assert p.returncode == 0, (p.stdout + p.stderr)[-3000:]
    assert re.search(r"^allreduce of 1 MiB on 2 ranks: 3\.0 by \S+", p.stdout, re.MULTILINE), p.stdout
