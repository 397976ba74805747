"""Run mpi4py's own collective tests, plain and with the communicator wrapped, under mpiexec.

``mpiexec -n N python mpi4py_suite_worker.py TESTDIR [--arrays=ArrayNumPy,...] MODULE...`` imports each of mpi4py's test modules
from ``TESTDIR`` (the ``test/`` folder of mpi4py's source distribution, fetched at test time by
``tests/test_mpi4py_suite.py``: mpi4py's tests are not ccsynth's code and are never copied here) and runs
every test of its classes on ``COMM_WORLD`` (:data:`CLASSES`) twice: once as mpi4py wrote it, once with each test's ``COMM`` replaced by
``ccsynth.Communicator(COMM)`` (the class attribute ``COMM_WORLD``/``COMM_SELF``, or the ``Dup`` their
``setUp`` makes). A test passes only where it passes on every rank. ``--arrays=`` keeps only those of mpi4py's
array kinds (``arrayimpl.ArrayBackends``: ArrayArray, ArrayNumPy, DLPackArray, DLPackNumPy,
FakeGPUArrayBasic, FakeGPUArrayNumPy) that every test loops over. Rank 0 prints one JSON line
``RESULT {"plain": [...], "wrapped": [...], "failures": {...}}`` with the passing test ids.
"""

from __future__ import annotations

import json
import os
import sys
import unittest

from mpi4py import MPI

import ccsynth

# the test classes run: those on COMM_WORLD (their *Self and *Dup variants repeat the same calls on other
# communicators; left out to keep the run short)
CLASSES = ("World",)

_WRAPPERS: dict[int, ccsynth.Communicator] = {}


def _wrap(comm: MPI.Comm) -> MPI.Comm:
    """``comm`` as a ccsynth communicator (the world's and self's built once: building one is collective)."""
    if not isinstance(comm, MPI.Intracomm) or comm == MPI.COMM_NULL or isinstance(comm, ccsynth.Communicator):
        return comm
    if comm in (MPI.COMM_WORLD, MPI.COMM_SELF):
        key = 0 if comm == MPI.COMM_WORLD else 1
        if key not in _WRAPPERS:
            _WRAPPERS[key] = ccsynth.Communicator(comm)
        return _WRAPPERS[key]
    return ccsynth.Communicator(comm)


class _Wrapped:
    """Mixed in before a test case class: its ``COMM`` is wrapped after ``setUp``, unwrapped before ``tearDown``."""

    def setUp(self) -> None:
        super().setUp()  # type: ignore[misc]
        self._plain_comm = self.COMM
        self.COMM = _wrap(self.COMM)

    def tearDown(self) -> None:
        wrapper, self.COMM = self.COMM, self._plain_comm
        if wrapper is not self._plain_comm and wrapper not in _WRAPPERS.values():
            wrapper.Free()
        super().tearDown()  # type: ignore[misc]


class _Result(unittest.TestResult):
    """With ``CCSYNTH_SUITE_TRACE=1``, names each test on stderr as it starts (to find a crash)."""

    def startTest(self, test: unittest.TestCase) -> None:
        if os.environ.get("CCSYNTH_SUITE_TRACE") == "1":
            print(f"rank {MPI.COMM_WORLD.Get_rank()} start {test.id()}", file=sys.stderr, flush=True)
        super().startTest(test)


def _suite(modules: list, wrapped: bool) -> unittest.TestSuite:
    suite = unittest.TestSuite()
    loader = unittest.TestLoader()
    for module in modules:
        for name in dir(module):
            case = getattr(module, name)
            if not (isinstance(case, type) and issubclass(case, unittest.TestCase) and name.endswith(CLASSES)):
                continue
            if wrapped:
                case = type(case.__name__, (_Wrapped, case), {"__module__": module.__name__})
            suite.addTests(loader.loadTestsFromTestCase(case))
    return suite


def _run(modules: list, wrapped: bool) -> tuple[list[str], dict[str, str]]:
    """The ids of the tests that passed on every rank, and one line of why for those that failed here."""
    result = _Result()
    suite = _suite(modules, wrapped)
    ids = [test.id() for test in _flatten(suite)]
    suite.run(result)
    bad = {test.id(): " | ".join(text.strip().splitlines()[-3:]) for test, text in result.failures + result.errors}
    skipped = {test.id() for test, _ in result.skipped}
    mine = [i for i in ids if i not in bad and i not in skipped]
    everyone = MPI.COMM_WORLD.allgather(mine)
    passed = sorted(set.intersection(*(set(p) for p in everyone)))
    failures = {}
    for rank_bad in MPI.COMM_WORLD.allgather(bad):
        failures.update(rank_bad)
    return passed, failures


def _flatten(suite: unittest.TestSuite) -> list[unittest.TestCase]:
    out = []
    for test in suite:
        out.extend(_flatten(test) if isinstance(test, unittest.TestSuite) else [test])
    return out


def main(testdir: str, names: list[str]) -> None:
    sys.path.insert(0, testdir)
    os.chdir(testdir)
    if names and names[0].startswith("--arrays="):  # only these of mpi4py's array kinds (arrayimpl's classes)
        import arrayimpl

        keep = names.pop(0).split("=", 1)[1].split(",")
        arrayimpl.ArrayBackends[:] = [a for a in arrayimpl.ArrayBackends if a.__name__ in keep]
    modules = [__import__(name) for name in names]
    plain, _ = _run(modules, wrapped=False)
    wrapped, failures = _run(modules, wrapped=True)
    for wrapper in _WRAPPERS.values():
        wrapper.Free()
    if MPI.COMM_WORLD.Get_rank() == 0:
        lost = {k: v for k, v in failures.items() if k in set(plain) - set(wrapped)}
        print("RESULT " + json.dumps({"plain": plain, "wrapped": wrapped, "failures": lost}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
