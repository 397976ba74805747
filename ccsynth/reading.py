"""Reading user files within limits: size, encoding, JSON syntax and nesting.

Every reader of a ccsynth or foreign file (topologies, schedules, plans,
sketches, MSCCL XML, TACCL profiles) gets its text through
:func:`read_text` and its JSON through :func:`parse_json`, so that every
file is refused the same way, with one line naming the file and the cause,
raised as the reader's own error class (``error``):

* a missing, unreadable or non-regular file: ``cannot read schedule 'x.json':
  No such file or directory``;
* a file larger than :data:`~ccsynth.limits.MAX_FILE_BYTES` (checked before
  reading, and again while reading for pipes that do not tell their size);
* text that is not UTF-8;
* JSON that is malformed, has an integer too long to convert, or is nested
  deeper than the parser's recursion limit ("nested too deeply").

Free-form JSON a reader keeps (a schedule's ``meta``) is checked with
:func:`check_depth` against :data:`~ccsynth.limits.MAX_JSON_DEPTH`; the
structured parts of ccsynth's formats are typed field by field, so deep
nesting there fails as a wrong type.

>>> parse_json('{"a": [1, 2]}', "example", ValueError)
{'a': [1, 2]}
>>> parse_json('[[[', "example", ValueError)
Traceback (most recent call last):
    ...
ValueError: example is not valid JSON: Expecting value at line 1 column 4
"""

from __future__ import annotations

import json
import os
import stat
from typing import Any
from collections.abc import Iterable

from ccsynth.limits import MAX_FILE_BYTES, MAX_JSON_DEPTH

__all__ = ["read_text", "parse_json", "check_depth"]


def read_text(path: str | os.PathLike, what: str, error: type[Exception]) -> str:
    """The UTF-8 text of file ``path`` (``what`` names it in errors: ``"schedule"``)."""
    p = os.fspath(path)
    if p == "":
        raise error(f"cannot read {what} '': the path is empty")
    try:
        with open(p, "rb") as f:
            st = os.fstat(f.fileno())
            if stat.S_ISDIR(st.st_mode):  # pragma: no cover - open() of a folder fails first on Linux
                raise error(f"cannot read {what} {p!r}: Is a directory")
            if stat.S_ISREG(st.st_mode) and st.st_size > MAX_FILE_BYTES:
                raise error(f"{what} file {p!r} of {st.st_size} bytes exceeds MAX_FILE_BYTES = {MAX_FILE_BYTES}")
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError as e:
        raise error(f"cannot read {what} {p!r}: {e.strerror or e}") from None
    if len(data) > MAX_FILE_BYTES:
        raise error(f"{what} file {p!r} exceeds MAX_FILE_BYTES = {MAX_FILE_BYTES} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise error(f"{what} file {p!r} is not UTF-8 text (byte {e.start})") from None


def parse_json(text: str, source: str, error: type[Exception]) -> Any:
    """Parsed JSON of ``text``; ``source`` names it in errors (``"schedule 'x.json'"``)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise error(f"{source} is not valid JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    except RecursionError:
        raise error(f"{source} is nested too deeply (more levels of lists and objects than the JSON parser allows)") from None
    except ValueError as e:  # e.g. an integer of more than 4300 digits
        raise error(f"{source} is not valid JSON: {e}") from None


def check_depth(value: Any, what: str, error: type[Exception], limit: int = MAX_JSON_DEPTH) -> None:
    """Refuse ``value`` if its lists and objects nest more than ``limit`` levels (iterative: no recursion)."""
    stack = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        children: Iterable[Any]
        if isinstance(v, dict):
            children = v.values()
        elif isinstance(v, (list, tuple)):
            children = v
        else:
            continue
        if depth > limit:
            raise error(f"{what} is nested {depth}+ levels deep, more than MAX_JSON_DEPTH = {limit}")
        stack.extend((c, depth + 1) for c in children)
