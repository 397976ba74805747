"""What the MSCCL runtimes accept: limits a file must respect.

Values from the runtimes' sources (``microsoft/msccl`` and its successor
``Azure/msccl-executor-nccl``), carried as facts. The exporter keeps ranges
under :data:`MAX_COUNT` and peers per channel under
:data:`MAX_PEERS_PER_CHANNEL` by transforming the schedule; the step,
threadblock and channel limits it can only report (a warning: the file is
still written, for runtimes built with larger limits). The reader refuses a
step whose ``cnt`` is :data:`RUNTIME_MAX_COUNT` or more, as the runtimes do.
"""

from __future__ import annotations

__all__ = [
    "MAX_COUNT",
    "RUNTIME_MAX_COUNT",
    "MAX_STEPS_PER_TB",
    "MAX_TBS",
    "MAX_CHANNELS",
    "MAX_PEERS_PER_CHANNEL",
    "UNBOUNDED",
]

#: Longest range (chunks) one step moves; runtimes reject ``cnt >= 72``.
MAX_COUNT = 64
#: Runtimes reject a step whose ``cnt`` is this or more.
RUNTIME_MAX_COUNT = 72
#: Steps per threadblock the executor accepts in its default build (the older runtime: 256).
MAX_STEPS_PER_TB = 64
#: Threadblocks per gpu that can be named by ``depid`` (an int8 in the executor).
MAX_TBS = 128
#: Channels per communicator in NCCL (MAXCHANNELS).
MAX_CHANNELS = 32
#: Send (and receive) peers one gpu may have on one channel in the executor.
MAX_PEERS_PER_CHANNEL = 32
#: ``maxBytes`` written for "no upper end" (int64 max: above every size in both runtimes).
UNBOUNDED = (1 << 63) - 1
