"""Limits on every input that sizes an allocation, named once.

A file of a few hundred bytes, or one command-line number, must not be able
to ask ccsynth for unbounded memory or time: ``"n_ranks": 10**18``, a chunk
factor of a billion, a schedule of a hundred million operations, JSON nested
a hundred thousand levels deep, ``nchunksperloop="4000000000"`` in MSCCL XML.
Each such input is checked against one of the limits below before anything
is allocated, and refused with a one-line error that names the input, its
value and the limit, e.g.::

    n_ranks 1000000 exceeds MAX_RANKS = 4096

The values, and why:

=========================== ============== ==================================================
limit                       value          why
=========================== ============== ==================================================
``MAX_RANKS``               4096           the largest communicator ccsynth plans for (a
                                           512-node DGX cluster); per-rank tables are
                                           O(ranks) and rank-pair tables O(ranks^2)
``MAX_CONNECTIONS``         300 000        links written out in one topology (switches and
                                           spines imply their connections without building
                                           them; only the links a file or builder lists
                                           are held one by one)
``MAX_PORT_PAIRS``          4 000 000      (source, destination) pairs over all shared
                                           ports (a NIC shared by its node's GPUs covers
                                           8 x (n - 8)); one table entry each
``MAX_CHUNK_FACTOR``        4096           chunks per piece; ring and Rabenseifner
                                           allreduce cut the buffer into one chunk per rank,
                                           so MAX_RANKS is the largest factor in use
``MAX_BUFFER_CHUNKS``       65 536         chunks of one rank's largest buffer (``n * c``
                                           for allgather and alltoall, ``c`` otherwise)
``MAX_TOTAL_CHUNKS``        16 777 216     chunks of the largest buffer over all ranks
                                           (``n * size_chunks``) of one collective, a
                                           descriptor that per-rank programs are built from;
                                           MAX_RANKS^2, one chunk per rank pair at the
                                           largest size (whole schedules: below)
``MAX_SCRATCH_CHUNKS``      65 536         scratch chunks per rank (a buffer, as above)
``MAX_SCHEDULE_CHUNKS``     4 194 304      chunks of all buffers of all ranks of one whole
                                           schedule (``n * (in + out + scratch)``): the
                                           verifier proves every one symbolically, at about
                                           400 bytes and 7 us each in Python (1.6 GB and
                                           30 s at the limit); a ring allgather on 2048
                                           ranks. Files must also write at least as many
                                           output chunks as their collective needs, so that
                                           a short file cannot ask for that work
``MAX_SCHEDULE_OPS``        4 194 304      operations of one schedule (about 300 MB of JSON;
                                           a ring allreduce on 1024 ranks has about 4 M)
``MAX_CHANNELS``            1024           channels of a schedule (``Op.channel``) and
                                           ``export --channels``; NCCL has at most 64
``MAX_SYNTH_CHUNK_FACTOR``  1024           chunk factor the synthesizer accepts from a user
                                           (``--chunks``, a sketch): a safety limit on input,
                                           not a choice; the routing models do not grow with
                                           it, the ordering and the schedule do (1024 pieces
                                           a rank). The default sketches climb to 256 while
                                           it pays, and the written form decides the trade
``MAX_SOLVER_THREADS``      1024           ``synth --threads``: far above any machine's
                                           cores; HiGHS aborts the whole process (no error
                                           to catch) when asked for 100 000
``MAX_FILE_BYTES``          256 MiB        any file ccsynth reads (JSON or XML): the parsed
                                           form takes about ten times as much memory
``MAX_JSON_DEPTH``          32             nesting of free-form JSON ccsynth keeps from a
                                           file (a schedule's or plan's ``meta``); ccsynth's
                                           own formats nest 4 levels. Deeper documents
                                           anywhere else are refused by the parser as
                                           "nested too deeply" (its recursion limit)
``MAX_XML_THREADBLOCKS``    8192           ``<tb>`` elements of one ``<gpu>`` in MSCCL XML;
                                           the executor can name 128 (``depid`` is an
                                           int8), but ccsynth writes (with a warning) and
                                           reads back files of up to MAX_CHANNELS channels
                                           with a few threadblocks each
``MAX_XML_STEP_CLOCKS``     67 108 864     steps of one ``<gpu>`` times its threadblocks:
                                           the reader keeps a clock (one number per
                                           threadblock) per step; 512 MB at most
``MAX_MESSAGE_BYTES``       4 GiB          one message the benchmarks allocate (``bench
                                           -m``): beyond this a typo is likelier than a
                                           wish. Sizes given to the simulator and the
                                           synthesizer (``-s``, ``--sizes``) are numbers,
                                           not buffers: MAX_SIZE_BYTES bounds them
``MAX_SIZE_BYTES``          1 EiB (2^60)   any size in bytes ccsynth parses (``-s``,
                                           ``--sizes``, ``--min-bytes``, a sketch's
                                           ``input_size``): MPI counts and MSCCL's
                                           ``maxBytes`` are int64; larger is a typo
``MAX_BENCH_ITERATIONS``    1 000 000      ``bench -i`` and ``-x``: one timing (8 bytes) per
                                           iteration is kept; OMB runs 1000
``MAX_BENCH_WINDOW``        65 536         ``bench bw -W``: requests in flight per window
                                           (osu_bw: 64)
``MAX_PROFILE_PASSES``      100            ``topo profile --passes``: every pass runs every
                                           probe (3 by default)
``MAX_PROFILE_TRANSFERS``   1 048 576      transfers of all probes of a raw profile (``topo
                                           refit``): the fit simulates each probe a few
                                           hundred times; a 64-rank profile has about 350 000
``MIN_BANDWIDTH_GBPS``      1e-6           a link slower than 1 kB/s is a typo (or a
                                           denormal such as 1e-320, whose transfer time is
                                           infinite and reads as a deadlock)
``MAX_LATENCY_US``          1e9            a latency above 1000 s is a typo; sums of such
                                           values overflow the simulator's clock
=========================== ============== ==================================================

:func:`check` raises the caller's error class (a
:class:`~ccsynth.errors.TopologyError` for a topology, a
:class:`~ccsynth.errors.ScheduleFormatError` for a schedule file, ...) so
that each reader keeps its own exception. :data:`LIMITS` maps every name to
its value, for documentation and tests.

>>> check("n_ranks", 8, "MAX_RANKS")
>>> check("n_ranks", 5000, "MAX_RANKS")
Traceback (most recent call last):
    ...
ccsynth.errors.CCSynthError: n_ranks 5000 exceeds MAX_RANKS = 4096
"""

from __future__ import annotations

from ccsynth.errors import CCSynthError

__all__ = [
    "MAX_RANKS",
    "MAX_CONNECTIONS",
    "MAX_PORT_PAIRS",
    "MAX_CHUNK_FACTOR",
    "MAX_BUFFER_CHUNKS",
    "MAX_TOTAL_CHUNKS",
    "MAX_SCRATCH_CHUNKS",
    "MAX_SCHEDULE_CHUNKS",
    "MAX_SCHEDULE_OPS",
    "MAX_CHANNELS",
    "MAX_SYNTH_CHUNK_FACTOR",
    "MAX_SOLVER_THREADS",
    "MAX_FILE_BYTES",
    "MAX_JSON_DEPTH",
    "MAX_XML_THREADBLOCKS",
    "MAX_XML_STEP_CLOCKS",
    "MAX_MESSAGE_BYTES",
    "MAX_SIZE_BYTES",
    "MAX_BENCH_ITERATIONS",
    "MAX_BENCH_WINDOW",
    "MAX_PROFILE_PASSES",
    "MAX_PROFILE_TRANSFERS",
    "MIN_BANDWIDTH_GBPS",
    "MAX_LATENCY_US",
    "LIMITS",
    "check",
    "check_min",
]

MAX_RANKS = 4096
MAX_CONNECTIONS = 300_000
MAX_PORT_PAIRS = 4_000_000
MAX_CHUNK_FACTOR = 4096
MAX_BUFFER_CHUNKS = 1 << 16
MAX_TOTAL_CHUNKS = MAX_RANKS * MAX_RANKS
MAX_SCRATCH_CHUNKS = 1 << 16
MAX_SCHEDULE_CHUNKS = 1 << 22
MAX_SCHEDULE_OPS = 1 << 22
MAX_CHANNELS = 1024
MAX_SYNTH_CHUNK_FACTOR = 1024
MAX_SOLVER_THREADS = 1024
MAX_FILE_BYTES = 256 << 20
MAX_JSON_DEPTH = 32
MAX_XML_THREADBLOCKS = 8192
MAX_XML_STEP_CLOCKS = 1 << 26
MAX_MESSAGE_BYTES = 1 << 32
MAX_SIZE_BYTES = 1 << 60
MAX_BENCH_ITERATIONS = 1_000_000
MAX_BENCH_WINDOW = 1 << 16
MAX_PROFILE_PASSES = 100
MAX_PROFILE_TRANSFERS = 1 << 20
MIN_BANDWIDTH_GBPS = 1e-6
MAX_LATENCY_US = 1e9

#: Every limit by name (the names :func:`check` takes).
LIMITS: dict[str, int | float] = {name: globals()[name] for name in __all__ if name.startswith(("MAX_", "MIN_"))}


def check(what: str, value: int | float, limit: str, error: type[Exception] = CCSynthError) -> None:
    """Raise ``error`` if ``value`` is above the limit named ``limit``.

    ``what`` names the input in the message (``"n_ranks"``, ``"<algo>
    nchunksperloop"``); the message gives the value and the limit by name.
    """
    bound = LIMITS[limit]
    if value > bound:
        raise error(f"{what} {value} exceeds {limit} = {_fmt(bound)}")


def check_min(what: str, value: float, limit: str, error: type[Exception] = CCSynthError) -> None:
    """Raise ``error`` if ``value`` is below the lower limit named ``limit``."""
    bound = LIMITS[limit]
    if value < bound:
        raise error(f"{what} {value!r} is below {limit} = {_fmt(bound)}")


def _fmt(v: int | float) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)
