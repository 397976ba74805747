"""Device buffers and an MPI library that cannot read them: staging through pinned host memory.

The communicator's messages go through MPI. With device (GPU) buffers that
needs a CUDA-aware MPI library (:func:`ccsynth.kernels.devices.cuda_awareness`);
the MPICH wheel that ``pip install mpi4py`` brings is not one. The
communicator's ``staging=`` says what to do with a device buffer:

``"auto"`` (default)
    stage when the library is not known to be CUDA-aware, use the device
    buffers directly when it is;
``"always"``
    stage even if the library is CUDA-aware (to compare, or when its CUDA
    path is broken);
``"never"``
    never stage: a device buffer on a library that is not known to be
    CUDA-aware raises :class:`~ccsynth.errors.CCSynthError` before anything
    is sent (instead of a crash inside MPI), naming the override
    ``CCSYNTH_CUDA_AWARE=1``.

Staging a call: each device buffer of the call gets a host buffer of the
same size from :class:`Stager` (pinned memory, allocated once per role and
dtype and grown when needed, so copies run at full PCIe speed and the
allocation is not paid per call); input buffers are copied to the host
(after the device finished the work that produced them), the collective runs
on the host buffers -- on ccsynth's schedules with the NumPy kernels, or the
MPI library's own -- and output buffers are copied back. Which buffers are
inputs and outputs: the send buffer is copied in; the receive buffer is
copied back, and copied in too when the send buffer is ``MPI.IN_PLACE``;
``Bcast``'s buffer is copied in on the root and back elsewhere.

For a communicator, :class:`DeviceStaging` keeps its mode and asks the
library's awareness once, and :func:`run_on_host` runs one call on host
stand-ins (which buffers are copied in and back, as above). ``stream=`` on
a call (:func:`wait_stream`) makes the caller's work on that stream finish
before the call reads its buffers.

The copy functions are parameters of :class:`Stager`, so that the logic is
tested here with host arrays; the default ones are CuPy's (imported only
when a device buffer arrives).

Example (host arrays standing in for device ones):
    >>> import numpy as np
    >>> st = Stager(host_empty=np.empty, to_host=np.copyto, to_device=np.copyto)
    >>> dev = np.arange(4.0)
    >>> host, back = st.stage(dev, "send", copy_in=True, copy_back=False)
    >>> host.tolist(), back
    ([0.0, 1.0, 2.0, 3.0], None)
    >>> out = np.zeros(4)
    >>> host, back = st.stage(out, "recv", copy_in=False, copy_back=True)
    >>> host[:] = 7; back(); out.tolist()
    [7.0, 7.0, 7.0, 7.0]
    >>> decide("never", Awareness(False, "test"), "allreduce")
    Traceback (most recent call last):
    ...
    ccsynth.errors.CCSynthError: allreduce got a device buffer, but the MPI library is not known to be CUDA-aware (test) and staging='never'; pass staging='auto' to copy through pinned host memory, or set CCSYNTH_CUDA_AWARE=1 if the library is CUDA-aware
"""

from __future__ import annotations

import importlib
from typing import Any
from collections.abc import Callable

import numpy as np

from ccsynth.errors import CCSynthError
from ccsynth.kernels.base import is_device_array
from ccsynth.kernels.devices import Awareness, cuda_awareness

__all__ = ["STAGING_MODES", "decide", "Stager", "DeviceStaging", "is_device_spec", "run_on_host", "wait_stream"]

STAGING_MODES = ("auto", "always", "never")


def decide(mode: str, awareness: Awareness, what: str) -> bool:
    """Whether a call (``what``) with device buffers is staged; raises for ``never`` on a library not known to be aware."""
    if mode == "always":
        return True
    if awareness.aware is True:
        return False
    if mode == "never":
        raise CCSynthError(
            f"{what} got a device buffer, but the MPI library is not known to be CUDA-aware ({awareness.source}) "
            f"and staging='never'; pass staging='auto' to copy through pinned host memory, or set "
            f"CCSYNTH_CUDA_AWARE=1 if the library is CUDA-aware"
        )
    return True


def _cupy_functions():
    cp = importlib.import_module("cupy")
    cpx = importlib.import_module("cupyx")

    def host_empty(n, dtype):
        return cpx.empty_pinned((n,), dtype=dtype)

    def to_host(dst, src):
        cp.cuda.Device().synchronize()  # the kernels that produced src, on any stream of this device
        src.get(out=dst)

    def to_device(dst, src):
        dst.set(src)
        cp.cuda.get_current_stream().synchronize()

    return host_empty, to_host, to_device


class Stager:
    """Host buffers standing in for device buffers, and the copies between them (see the module doc)."""

    def __init__(self, host_empty: Callable | None = None, to_host: Callable | None = None,
                 to_device: Callable | None = None) -> None:
        self._fns = (host_empty, to_host, to_device) if host_empty is not None else None
        self._buffers: dict[tuple[str, str], Any] = {}

    def _functions(self):
        if self._fns is None:
            self._fns = _cupy_functions()
        return self._fns

    def host_buffer(self, role: str, n: int, dtype) -> Any:
        """``n`` elements of host memory for ``role``, kept and grown across calls."""
        host_empty = self._functions()[0]
        dt = np.dtype(dtype)
        key = (role, dt.str)
        buf = self._buffers.get(key)
        if buf is None or buf.size < n:
            buf = self._buffers[key] = host_empty(max(n, 1), dt)
        return buf[:n]

    def stage(self, arr, role: str, *, copy_in: bool, copy_back: bool):
        """A host stand-in for device array ``arr`` and the copy back (a callable, or None)."""
        _, to_host, to_device = self._functions()
        flat = arr.reshape(-1) if arr.ndim != 1 else arr
        host = self.host_buffer(role, flat.size, flat.dtype)
        if copy_in:
            to_host(host, flat)
        if not copy_back:
            return host, None
        return host, lambda: to_device(flat, host)

    @property
    def nbytes(self) -> int:
        return sum(int(b.nbytes) for b in self._buffers.values())

    def clear(self) -> None:
        self._buffers.clear()


class DeviceStaging:
    """A communicator's ``staging=`` and the MPI library's CUDA-awareness (asked when the first device buffer arrives).

    ``mpi`` is the mpi4py ``MPI`` module (see :func:`~ccsynth.kernels.devices.cuda_awareness`).
    """

    def __init__(self, mode: str, mpi) -> None:
        if mode not in STAGING_MODES:
            raise CCSynthError(f"staging must be one of {', '.join(STAGING_MODES)}, got {mode!r}")
        self.mode = mode
        self._mpi = mpi
        self._awareness: Awareness | None = None

    @property
    def awareness(self) -> Awareness:
        if self._awareness is None:
            self._awareness = cuda_awareness(self._mpi)
        return self._awareness

    def needed(self, what: str) -> bool:
        """Whether a call (``what``) with device buffers is staged (:func:`decide`)."""
        return decide(self.mode, self.awareness, what)


def is_device_spec(spec) -> bool:
    """Whether a buffer spec's buffer (``buf`` or ``[buf, ...]``) is device memory ccsynth stages.

    Only an array (CuPy's, or an ndarray that says it is device memory) is staged; another
    ``__cuda_array_interface__`` object still there was not made an array (no CuPy): it goes to the MPI
    library as it is, as mpi4py hands it (host memory behind the interface, or a CUDA-aware MPI).
    """
    buf = (spec[0] if spec else None) if isinstance(spec, (list, tuple)) else spec
    return is_device_array(buf) and (isinstance(buf, np.ndarray) or type(buf).__module__.startswith("cupy"))


def run_on_host(stager: Stager, kind: str, impl: Callable, sendbuf, recvbuf, op, root, *, in_place: bool,
                at_root: bool) -> None:
    """Run ``impl(sendbuf, recvbuf, op, root)`` on host stand-ins of the call's device buffers (see the module doc).

    ``in_place``: the send buffer is ``MPI.IN_PLACE`` (the receive buffer is
    copied in too); ``at_root``: this rank is a ``broadcast``'s root (its
    buffer is copied in, elsewhere back).
    """
    backs = []

    def host(spec, role, copy_in, copy_back):
        if not is_device_spec(spec):
            return spec
        arr = spec[0] if isinstance(spec, (list, tuple)) else spec
        h, back = stager.stage(arr, role, copy_in=copy_in, copy_back=copy_back)
        if back is not None:
            backs.append(back)
        return type(spec)((h, *spec[1:])) if isinstance(spec, (list, tuple)) else h

    if kind == "broadcast":
        sendbuf = host(sendbuf, "buf", at_root, not at_root)
    else:
        sendbuf = host(sendbuf, "send", True, False)
        recvbuf = host(recvbuf, "recv", in_place, True)
    impl(sendbuf, recvbuf, op, root)
    for back in backs:
        back()


def wait_stream(stream) -> None:
    """``stream=``: the caller's GPU work on that stream finishes before the call reads its buffers."""
    sync = getattr(stream, "synchronize", None)
    if sync is None:
        raise CCSynthError(f"stream= takes a stream object with synchronize() (cupy/torch), got {type(stream).__name__}")
    sync()
