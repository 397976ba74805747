#!/usr/bin/env python3
"""Fail when a package module has over 800 lines or a function over 120 (issue 28's rooms a reader can hold).

Usage: ``python .ci/check_sizes.py [ROOT]`` (ROOT defaults to the repository root). It reads every ``*.py``
file of the package folders (those ``pyproject.toml`` maps with setuptools ``package-dir``; tests, benchmark
data and virtual environments are not package modules), counts a module's lines and each function's (from its
``def``, decorators included, to its last line; a method or a nested function is a function too), and prints
one line per offender: ``path: 812 lines (over 800)`` or ``path::Class.method: 131 lines (over 120)``.

There are no exceptions: a module or function over its limit is split along its concepts (issue 28), not
listed. Exits 1 on any offender, else 0. Standard library only (``ast``).
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

try:
    import tomllib  # Python 3.11+
except ImportError:  # Python 3.10: package_dirs falls back to the folders with an __init__.py
    tomllib = None  # type: ignore[assignment]

__all__ = ["MAX_MODULE_LINES", "MAX_FUNCTION_LINES", "Offender", "package_dirs", "offenders", "main"]

MAX_MODULE_LINES = 800
MAX_FUNCTION_LINES = 120
# Inside the package folders but no package module: recorded runs and their scripts, build output.
_SKIP_PARTS = {"data", "build", ".venv", "__pycache__"}


@dataclass(frozen=True)
class Offender:
    """A module (``function`` empty) or a function over its limit."""

    path: str  # relative to the root, with forward slashes
    function: str
    lines: int
    limit: int

    @property
    def key(self) -> str:
        return f"{self.path}::{self.function}" if self.function else self.path

    def describe(self) -> str:
        return f"{self.key}: {self.lines} lines (over {self.limit})"


def package_dirs(root: Path) -> list[Path]:
    """The folders ``pyproject.toml`` maps to the package (``[tool.setuptools.package-dir]``); without that
    table (or on Python 3.10, which has no ``tomllib``), every folder of ``root`` with an ``__init__.py``
    except ``tests``."""
    pyproject = root / "pyproject.toml"
    if tomllib is not None and pyproject.is_file():
        with open(pyproject, "rb") as f:
            mapping = tomllib.load(f).get("tool", {}).get("setuptools", {}).get("package-dir", {})
        if mapping:
            return sorted({root / d for d in mapping.values()})
    return sorted(p.parent for p in root.glob("*/__init__.py") if p.parent.name != "tests")


def _modules(root: Path) -> Iterator[Path]:
    for folder in package_dirs(root):
        for path in sorted(folder.rglob("*.py")):
            if not _SKIP_PARTS.intersection(path.relative_to(root).parts):
                yield path


def _functions(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """Every function with its qualified name (``Class.method``, ``outer.inner``)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield prefix + node.name, node
            yield from _functions(node, f"{prefix}{node.name}.")
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node, f"{prefix}{node.name}.")
        else:
            yield from _functions(node, prefix)


def _span(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    return (node.end_lineno or node.lineno) - first + 1


def offenders(root: Path, max_module: int = MAX_MODULE_LINES, max_function: int = MAX_FUNCTION_LINES) -> list[Offender]:
    """Every module and function under ``root``'s package folders over its limit, in path order."""
    out = []
    for path in _modules(root):
        rel = path.relative_to(root).as_posix()
        text = path.read_text(encoding="utf-8")
        n = len(text.splitlines())
        if n > max_module:
            out.append(Offender(rel, "", n, max_module))
        for name, node in _functions(ast.parse(text, filename=rel)):
            if _span(node) > max_function:
                out.append(Offender(rel, name, _span(node), max_function))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", nargs="?", type=Path, default=Path(__file__).resolve().parent.parent,
                        help="the repository root (default: this script's)")
    args = parser.parse_args(argv)
    found = offenders(args.root)
    for o in found:
        print(f"too long: {o.describe()}")
    if found:
        print(f"check_sizes: {len(found)} offender(s); limits: a module {MAX_MODULE_LINES} lines, a function "
              f"{MAX_FUNCTION_LINES}", file=sys.stderr)
        return 1
    print(f"check_sizes: no module over {MAX_MODULE_LINES} lines, no function over {MAX_FUNCTION_LINES}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
