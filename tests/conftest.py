"""Hypothesis profiles for the property tests (docs/testing.md).

``ci``, loaded by default, is the short run of ``pytest -q``: the property tests that leave their example count
to the profile run 50 examples each (tests whose examples are costly state a smaller count themselves).
``thorough`` runs 300 each, as the suite did before the profile: ``pytest --hypothesis-profile=thorough``.
Neither has a deadline: a loaded machine is no failure.

The suite's tests of ccsynth's schedules call ``ccsynth.Communicator(comm)`` at small sizes, where the default
plan now runs the MPI library's own collective: ``CCSYNTH_DEFAULT_MPI=0`` (inherited by every ``mpiexec`` the
tests launch) keeps the schedules there; ``tests/test_mpi_algorithm.py`` launches with it unset.
"""

from __future__ import annotations

import os

from hypothesis import settings

__all__: list[str] = []

os.environ.setdefault("CCSYNTH_DEFAULT_MPI", "0")

settings.register_profile("ci", max_examples=50, deadline=None)
settings.register_profile("thorough", max_examples=300, deadline=None)
settings.load_profile("ci")  # --hypothesis-profile=NAME, read after this file, loads another

# The machine's load is injected, never read (ccsynth.bench.machine): an idle machine unless a test says otherwise,
# so that `topo profile` and `bench` under test neither refuse nor warn because other work shares the machine.
# Subprocesses (mpiexec) inherit it.
os.environ.setdefault("CCSYNTH_LOADAVG", "0")
