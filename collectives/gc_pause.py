"""Hold off Python's cyclic garbage collector while millions of acyclic records are made.

Schedules at scale are millions of small immutable records (ops, their
dependency tuples, the tables of the builder, the verifier and the bounds).
None of them form reference cycles: reference counting frees them. But the
cyclic collector runs whenever allocations outnumber deallocations by a
threshold, and each of its full passes walks every tracked object alive --
while a million-op schedule is built, the older schedules and tables get
walked again and again (measured: a third of a 260,000-op hierarchical
baseline's build, verification and JSON text, on dgx_a100x16).
:func:`gc_paused` turns the collector off for such a stretch and back on
after it (if it was on); nested uses keep it off until the outermost ends.
Garbage cycles made meanwhile are collected by the first pass after it.

Example:
    >>> import gc
    >>> with gc_paused():
    ...     gc.isenabled()
    False
    >>> gc.isenabled()
    True
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["gc_paused"]


@contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic garbage collector off inside the ``with`` block (see the module docstring)."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()
