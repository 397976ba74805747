"""The length check of ``.ci/lint`` (``.ci/check_sizes.py``) on synthetic trees."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_SCRIPT = Path(__file__).resolve().parent.parent / ".ci" / "check_sizes.py"
_spec = importlib.util.spec_from_file_location("check_sizes", _SCRIPT)
check_sizes = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = check_sizes  # a dataclass looks its module up there
_spec.loader.exec_module(check_sizes)

PYPROJECT = '[tool.setuptools.package-dir]\n"pkg" = "pkg"\n"pkg.sub" = "sub"\n'


def _function(name: str, body_lines: int, indent: str = "", decorators: int = 0) -> str:
    """A function of ``1 + decorators + body_lines`` lines."""
    head = f"{indent}@staticmethod\n" * decorators + f"{indent}def {name}():\n"
    return head + "".join(f"{indent}    x{i} = {i}\n" for i in range(body_lines))


def _tree(tmp_path: Path) -> Path:
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    for folder in ("pkg", "sub", "sub/data", "tests"):
        (tmp_path / folder).mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text('"""The package."""\n')
    # 801 lines: one over
    (tmp_path / "pkg" / "big.py").write_text("".join(f"a{i} = {i}\n" for i in range(801)))
    (tmp_path / "pkg" / "edge.py").write_text("".join(f"a{i} = {i}\n" for i in range(800)))  # 800: at the limit
    (tmp_path / "sub" / "funcs.py").write_text(
        _function("fits", 119)                                   # 120 lines: at the limit
        + _function("too_long", 120)                             # 121
        + "class C:\n" + _function("method", 119, "    ", decorators=1)  # 121 with its decorator
        + _function("outer", 2) + _function("inner", 121, "    ")  # a nested function counts on its own
    )
    (tmp_path / "sub" / "data" / "run.py").write_text("".join(f"a{i} = {i}\n" for i in range(900)))  # no module
    (tmp_path / "tests" / "test_big.py").write_text("".join(f"a{i} = {i}\n" for i in range(900)))  # not mapped
    return tmp_path


def test_every_module_and_function_over_its_limit_and_nothing_else(tmp_path):
    root = _tree(tmp_path)
    got = [(o.key, o.lines) for o in check_sizes.offenders(root)]
    assert got == [("pkg/big.py", 801), ("sub/funcs.py::too_long", 121), ("sub/funcs.py::C.method", 121),
                   ("sub/funcs.py::outer", 125), ("sub/funcs.py::outer.inner", 122)]


def test_main_prints_each_offender_and_fails_and_passes_once_they_are_split(tmp_path, capsys):
    root = _tree(tmp_path)
    assert check_sizes.main([str(root)]) == 1
    out = capsys.readouterr().out
    assert "too long: pkg/big.py: 801 lines (over 800)" in out
    assert "too long: sub/funcs.py::C.method: 121 lines (over 120)" in out
    assert len([line for line in out.splitlines() if line.startswith("too long: ")]) == 5
    (root / "pkg" / "big.py").write_text("a = 1\n")
    (root / "sub" / "funcs.py").write_text(_function("short", 10))
    assert check_sizes.main([str(root)]) == 0
    assert "no module over 800 lines" in capsys.readouterr().out


def test_without_a_package_dir_table_the_folders_with_an_init_are_the_package(tmp_path):
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "__init__.py").write_text("")
    (tmp_path / "lib" / "long.py").write_text(_function("f", 130))
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "__init__.py").write_text("")
    (tmp_path / "tests" / "test_long.py").write_text(_function("test_f", 130))
    assert [o.key for o in check_sizes.offenders(tmp_path)] == ["lib/long.py::f"]

