"""Hypothesis profiles for the property tests, and the parallel run's one group of multi-rank tests (docs/testing.md).

``ci``, loaded by default, is the short run of ``pytest -q``: the property tests that leave their example count
to the profile run 50 examples each (tests whose examples are costly state a smaller count themselves).
``thorough`` runs 300 each, as the suite did before the profile: ``pytest --hypothesis-profile=thorough``.
Neither has a deadline: a loaded machine is no failure.

The suite's tests of ccsynth's schedules call ``ccsynth.Communicator(comm)`` at small sizes, where the default
plan now runs the MPI library's own collective: ``CCSYNTH_DEFAULT_MPI=0`` (inherited by every ``mpiexec`` the
tests launch) keeps the schedules there; ``tests/test_mpi_algorithm.py`` launches with it unset.

``pytest -q`` runs on every core (pytest-xdist, ``-n auto --dist loadgroup`` in pyproject.toml). Every test
marked ``mpi`` (it launches ``mpiexec``) joins one group, ``mpi``, which one worker runs test after test: one
multi-rank job at a time, its ranks sharing the cores with the other workers' single-process tests, never
with a second job's ranks (and ``tests/test_communicator_mpi.py``'s batches, one launch for the cases of a
rank count, stay whole).
"""

from __future__ import annotations

import os

import pytest
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


@pytest.hookimpl(tryfirst=True)  # before xdist names each item's group from its markers
def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.get_closest_marker("mpi") is not None:
            item.add_marker(pytest.mark.xdist_group("mpi"))


def pytest_configure(config):
    """Refuse a parallel run whose groups would be lost: pytest-xdist (3.8) names a test's group through
    ``item._nodeid``, which pytest 9.2 no longer reads (the test extra pins ``pytest<9.2``)."""
    version = tuple(int(p) for p in pytest.__version__.split(".")[:2] if p.isdigit())
    if getattr(config.option, "dist", "no") == "loadgroup" and version >= (9, 2):
        raise pytest.UsageError(f"pytest {pytest.__version__} loses pytest-xdist's test groups (the multi-rank "
                                "tests would run side by side): pip install -e '.[test]' installs pytest<9.2, "
                                "or run in one process: pytest -q -n 0")
