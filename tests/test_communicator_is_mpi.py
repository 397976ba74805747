"""A ccsynth communicator is an mpi4py Intracomm on the communicator it wraps (one process; more ranks in
tests/mpi_workers/api_worker.py case split_dup)."""

from __future__ import annotations

import gc
import logging
import subprocess
import sys
import types

import numpy as np
import pytest
from mpi4py import MPI

import ccsynth
from ccsynth.collectives.communicator import Communicator as Runtime
from ccsynth.collectives.mpi_util import CommWrapper, mpi_comm
from ccsynth.collectives.static_program import STATIC_MAX_BYTES
from ccsynth.errors import CCSynthError


def test_isinstance_and_the_same_communicator():
    c = ccsynth.Communicator(MPI.COMM_SELF)
    try:
        assert isinstance(c, MPI.Intracomm) and isinstance(c, MPI.Comm) and isinstance(c, Runtime)
        assert c == MPI.COMM_SELF and c.comm is MPI.COMM_SELF
        assert MPI.Comm.Compare(c, MPI.COMM_SELF) == MPI.IDENT
    finally:
        c.Free()


def test_mpi4py_methods_ccsynth_does_not_override_work_on_it():
    c = ccsynth.Communicator(MPI.COMM_SELF)
    try:
        assert c.allreduce(3) == 3 and c.bcast("x") == "x" and c.gather(1) == [1]
        assert c.Get_group().Get_size() == 1 and c.Get_topology() == MPI.UNDEFINED
        assert c.py2f() == MPI.COMM_SELF.py2f() and not c.Is_inter() and c.Get_name()
        c.Barrier()
        req = c.Isend(np.arange(2.0), dest=0, tag=3)
        got = np.empty(2)
        c.Recv(got, source=0, tag=3)
        req.Wait()
        assert got.tolist() == [0.0, 1.0]
        out = np.empty(1)
        c.Gather(np.ones(1), out)  # not scheduled by ccsynth: mpi4py's, said so
        assert c.last_algorithm == "mpi" and out[0] == 1.0
    finally:
        c.Free()


@pytest.mark.parametrize("make", ["Dup", "Clone", "Split", "Create_group", "Dup_with_info", "Idup", "Create"])
def test_new_communicators_are_ccsynth_communicators(make):
    c = ccsynth.Communicator(MPI.COMM_SELF)
    new = {
        "Dup": lambda: c.Dup(), "Clone": lambda: c.Clone(), "Split": lambda: c.Split(0, 0),
        "Create_group": lambda: c.Create_group(c.Get_group()), "Dup_with_info": lambda: c.Dup_with_info(MPI.INFO_NULL),
        "Idup": lambda: c.Idup()[0], "Create": lambda: c.Create(c.Get_group()),
    }[make]()
    try:
        assert type(new) is ccsynth.Communicator and new.last_algorithm == ""  # constructed, not a bare handle
        out = np.empty(2)
        new.Allreduce(np.ones(2), out)
        assert out.tolist() == [1.0, 1.0]
    finally:
        new.Free()
        c.Free()


def test_free_and_garbage_collection_leave_the_wrapped_communicator_alone():
    base = MPI.COMM_SELF.Dup()
    c = ccsynth.Communicator(base)
    c.Free()
    c.free()  # a second release is a no-op
    assert base.allreduce(1) == 1
    c2 = ccsynth.Communicator(base)
    del c2
    gc.collect()
    assert base.allreduce(2) == 2
    inner = ccsynth.Communicator(base)
    wrapped = ccsynth.Communicator(inner)  # a ccsynth communicator wraps what the other wraps
    assert wrapped.comm is base
    wrapped.Free()
    inner.Free()
    base.Free()


def test_only_intracommunicators_are_wrapped():
    with pytest.raises(CCSynthError, match="mpi4py communicator"):
        ccsynth.Communicator("world")


def test_runtime_modules_know_a_wrapper_without_importing_the_communicator():
    # the multi-dimension runner and the resharding executor unwrap a ccsynth communicator through
    # mpi_util.CommWrapper, a layer below the communicator (no import loop, no import inside a function)
    code = ("import sys, ccsynth.collectives.multidim, ccsynth.collectives.reshard_program; "
            "print('ccsynth.collectives.communicator' in sys.modules)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.strip() == "False", p.stdout + p.stderr
    c = ccsynth.Communicator(MPI.COMM_SELF)
    try:
        assert isinstance(c, CommWrapper) and mpi_comm(c) is c.comm is MPI.COMM_SELF
        assert mpi_comm(MPI.COMM_SELF) is MPI.COMM_SELF
        with pytest.raises(CCSynthError, match="got int"):
            mpi_comm(3)
    finally:
        c.Free()


def test_settings_are_the_constructors_arguments_and_fixed():
    c = Runtime(MPI.COMM_SELF, debug=True, fallback=False, slice_bytes=1 << 16, timeout=5.0, device=False)
    try:
        got = (c.debug, c.fallback, c.slice_bytes, c.timeout, c.device, c.backend, c.staging, c.static_max_bytes)
        assert got == (True, False, 1 << 16, 5.0, None, "auto", "auto", STATIC_MAX_BYTES)
        with pytest.raises(AttributeError):
            c.debug = False
    finally:
        c.Free()


class _FakeCuda:
    """Just enough of ``cupy.cuda`` for the device choice: two devices, device 0 current."""

    def __init__(self) -> None:
        self.used: list[int] = []
        fake = self

        class Device:
            def __init__(self, index: int = 0) -> None:
                self.id = index

            def use(self) -> None:
                fake.used.append(self.id)

        self.Device = Device
        self.runtime = types.SimpleNamespace(getDeviceCount=lambda: 2)


def test_auto_device_picks_by_local_rank_when_cupy_is_in_use(monkeypatch, caplog):
    cuda = _FakeCuda()
    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(cuda=cuda))
    monkeypatch.delenv("CCSYNTH_DEVICE", raising=False)
    monkeypatch.setenv("OMPI_COMM_WORLD_LOCAL_RANK", "3")
    with caplog.at_level(logging.INFO, logger="ccsynth"):
        c = Runtime(MPI.COMM_SELF)
    try:
        assert c.device == 1 and cuda.used == [1]  # local rank 3 modulo 2 devices
        assert "rank 0 uses GPU 1 (OMPI_COMM_WORLD_LOCAL_RANK=3 modulo 2 devices)" in caplog.text
    finally:
        c.Free()


def test_a_dropped_communicator_is_freed_at_once_without_the_garbage_collector():
    """No reference cycle keeps a communicator (or its calls and channel) alive after its last reference goes:
    with cycles, which channels are still open at exit would depend on when each rank's garbage collector last
    ran, and the exit barriers would pair up wrongly (each then waits out its timeout)."""
    import weakref

    gc.disable()
    try:
        c = ccsynth.Communicator(MPI.COMM_WORLD)
        out = np.zeros(4)
        c.Allreduce(np.ones(4), out)
        c.Iallreduce(np.ones(4), out).Wait()  # the progress thread too
        refs = [weakref.ref(c), weakref.ref(c._calls)]
        thread = c._calls.nonblocking.thread._thread
        del c
        assert [r() for r in refs] == [None, None]
        thread.join(timeout=10)  # its progress thread ends too, instead of idling until the process exits
        assert not thread.is_alive()
    finally:
        gc.enable()
