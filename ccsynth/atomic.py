"""Atomic file writes: a file ccsynth writes is either the old one or the new one.

Writing a 38 MB schedule takes a while; a writer that truncates the
destination and then serializes leaves an empty or half-written file when
SIGINT or SIGTERM arrives in between. Every file ccsynth writes goes through
:func:`open_atomic` (or :func:`write_text` / :func:`write_bytes`) instead:

1. the data goes to a temporary file in the destination's folder (same file
   system, so the rename below is atomic), created with mode ``0o666`` less
   the umask as a plain ``open`` would, or with the permission bits of the
   file it replaces;
2. flush and ``fsync``, so the data is on disk before the name points at it;
3. ``os.replace`` onto the destination (readers see the old file or the
   new one, never a mix), then ``fsync`` of the folder so the rename itself
   survives a crash;
4. on any error or interrupt (``KeyboardInterrupt``, and
   :class:`ccsynth.cli.Terminated` from the CLI's SIGTERM handler) the
   temporary file is removed and the destination is left untouched.

A read-only destination is refused (``Permission denied``), as ``open``
would refuse it. A destination that exists but is not a regular file
(``/dev/stdout``, ``/dev/full``, a FIFO) is written directly: it cannot be
replaced by a rename and there is no previous content to protect. A symbolic
link is followed (the file it names is replaced, the link stays). The new
file has the permission bits of the old one, not its owner, group or ACLs
(a rename makes a new inode).

Failures are :class:`AtomicWriteError` (a :class:`~ccsynth.errors.CCSynthError`),
or the error class a caller passes (``error=TopologyError``), with one line
naming the path and the reason, e.g. ``cannot write '/nonexistent/x.json': No
such file or directory`` or ``cannot write schedule '/dev/full': No space left
on device``; the CLI prints it and exits with status 2.

>>> import os, tempfile
>>> d = tempfile.mkdtemp()
>>> write_text(os.path.join(d, "a.txt"), "hello\\n")
>>> open(os.path.join(d, "a.txt")).read()
'hello\\n'
>>> os.listdir(d)
['a.txt']
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from typing import IO, Any
from collections.abc import Iterator

from ccsynth.errors import CCSynthError

__all__ = ["AtomicWriteError", "open_atomic", "write_text", "write_bytes", "check_writable"]

_TEMP_SUFFIX = ".tmp"


class AtomicWriteError(CCSynthError, OSError):
    """A file could not be written; the message names the path and the reason."""


def _reason(e: OSError) -> str:
    return e.strerror or str(e)


class _Failure:
    """Builds the one-line error for one destination."""

    def __init__(self, path, what: str, error: type[Exception]):
        self.shown = os.fspath(path)
        self.what = f"{what} " if what else ""
        self.error = error

    def __call__(self, reason: str) -> Exception:
        return self.error(f"cannot write {self.what}{self.shown!r}: {reason}")


def _target(path: str | os.PathLike, fail: _Failure) -> str:
    """The path to write: ``path`` itself, or the file a symbolic link names."""
    p = os.fspath(path)
    if p == "":
        raise fail("the output path is empty")
    if isinstance(p, bytes):  # pragma: no cover - ccsynth passes str
        p = os.fsdecode(p)
    return os.path.realpath(p) if os.path.islink(p) else p


def check_writable(path: str | os.PathLike, what: str = "", error: type[Exception] = AtomicWriteError) -> None:
    """Fail now, not after a long run, if ``path`` could not be written.

    Checks what can be checked without touching the destination: the path is
    not empty and not a folder, its folder exists and is writable.
    """
    fail = _Failure(path, what, error)
    p = _target(path, fail)
    if os.path.isdir(p):
        raise fail("Is a directory")
    if os.path.exists(p) and not stat.S_ISREG(os.stat(p).st_mode):
        return  # a device or FIFO: written directly
    if os.path.exists(p) and not os.access(p, os.W_OK):
        raise fail("Permission denied")
    folder = os.path.dirname(os.path.abspath(p))
    if not os.path.isdir(folder):
        raise fail(f"{folder!r} is not a folder" if os.path.exists(folder) else f"folder {folder!r} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise fail("Permission denied")


@contextlib.contextmanager
def open_atomic(
    path: str | os.PathLike,
    mode: str = "w",
    encoding: str | None = "utf-8",
    *,
    what: str = "",
    error: type[Exception] = AtomicWriteError,
) -> Iterator[IO]:
    """A file object whose content replaces ``path`` atomically when the block ends without error.

    ``mode`` is ``"w"`` (text, ``encoding``) or ``"wb"``. An exception in the
    block (or an interrupt) removes the temporary file and re-raises;
    ``OSError`` (from the block or from writing) becomes ``error`` (default
    :class:`AtomicWriteError`) naming ``what`` and ``path``.
    """
    if mode not in ("w", "wb"):
        raise ValueError(f"open_atomic writes with mode 'w' or 'wb', not {mode!r}")
    fail = _Failure(path, what, error)
    target = _target(path, fail)
    kw: dict[str, Any] = {"encoding": encoding} if mode == "w" else {}
    try:
        st = os.stat(target)
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise fail(_reason(e)) from None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise fail("Is a directory")
    if st is not None and stat.S_ISREG(st.st_mode) and not os.access(target, os.W_OK):
        raise fail("Permission denied")  # as open() would: a read-only file is not replaced behind its back
    if st is not None and not stat.S_ISREG(st.st_mode):
        # /dev/stdout, /dev/full, a FIFO: no rename possible, nothing to protect.
        try:
            with open(target, mode, **kw) as f:
                yield f
        except OSError as e:
            if isinstance(e, CCSynthError):
                raise
            raise fail(_reason(e)) from None
        return
    folder = os.path.dirname(os.path.abspath(target))
    try:
        fd, tmp = _create_temp(folder, os.path.basename(target))
    except OSError as e:
        raise fail(_reason(e)) from None
    try:
        with os.fdopen(fd, mode, **kw) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        if st is not None:
            os.chmod(tmp, stat.S_IMODE(st.st_mode))
        os.replace(tmp, target)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError) and not isinstance(exc, CCSynthError):
            raise fail(_reason(exc)) from None
        raise
    _fsync_folder(folder)


def _create_temp(folder: str, base: str) -> tuple[int, str]:
    """A new file ``.BASE.XXXXXXXX.tmp`` in ``folder``, mode 0o666 less the umask (like ``open``)."""
    for _ in range(100):
        tmp = os.path.join(folder, f".{base}.{os.urandom(4).hex()}{_TEMP_SUFFIX}")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666), tmp
        except FileExistsError:
            continue
    raise OSError(errno.EEXIST, "no free temporary file name")  # pragma: no cover


def _fsync_folder(folder: str) -> None:
    """Make the rename durable; some systems cannot fsync a folder (then the rename is still atomic)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_text(
    path: str | os.PathLike, text: str, *, what: str = "", error: type[Exception] = AtomicWriteError
) -> None:
    """Replace ``path`` with the UTF-8 ``text`` atomically (see the module docstring)."""
    with open_atomic(path, "w", what=what, error=error) as f:
        f.write(text)


def write_bytes(
    path: str | os.PathLike, data: bytes, *, what: str = "", error: type[Exception] = AtomicWriteError
) -> None:
    """Replace ``path`` with ``data`` atomically (see the module docstring)."""
    with open_atomic(path, "wb", encoding=None, what=what, error=error) as f:
        f.write(data)
