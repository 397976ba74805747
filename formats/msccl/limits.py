"""What the MSCCL runtimes accept: the limits a file must respect, and their sources.

Two runtimes load MSCCL XML: ``Azure/msccl-executor-nccl`` (the current
one; "the executor" below, as of its commit c6f6b36, Dec 2024) and its
predecessor ``microsoft/msccl`` (as of b23e9cd, Sep 2023). Their parsers
refuse a file that breaks one of these limits, or silently misread it (the
8-bit and 16-bit fields); the values are facts read from their sources:

=====================================  =====================  ==========================================
limit                                  executor / older        source
=====================================  =====================  ==========================================
steps per threadblock (``s`` < N)      64 / 256                ``MSCCL_MAX_NUM_STEPS``: the executor's
                                                               ``makefiles/common.mk``
                                                               (``MSCCL_MAX_NUM_STEPS ?= 64``, a build
                                                               flag since its PR #48; before, a define in
                                                               ``src/include/msccl/msccl_struct.h``);
                                                               ``src/include/msccl.h`` of the older one.
                                                               The parser (executor:
                                                               ``src/misc/msccl/msccl_parser.cc``) refuses
                                                               a step with ``s >= MSCCL_MAX_NUM_STEPS``.
sending (and receiving) threadblocks   32 / 32                 ``MSCCL_MAX_NUM_THREAD_BLOCKS_PER_CHANNEL``
per channel                                                    (same headers): "too many sends per
                                                               channel" / "too many recvs per channel".
threadblocks per gpu                   128 (both)              ``depid`` is stored in
                                                               ``int8_t dependentBid[]``
                                                               (``mscclThreadBlock``), so a threadblock
                                                               above 127 cannot be waited for; the
                                                               parsers' own bound is
                                                               ``MSCCL_MAX_NUM_THREAD_BLOCKS`` (executor:
                                                               32 x ``MAXCHANNELS`` = 1024; older:
                                                               108 x 2 = 216).
channels (``chan`` < N, nchannels)     32 / 32                 ``MAXCHANNELS`` (executor:
                                                               ``src/include/device.h``; older:
                                                               ``src/include/devcomm.h``). The executor
                                                               opens as many channels as a loaded
                                                               algorithm needs (``src/graph/connect.cc``);
                                                               the older runtime refuses more than
                                                               ``NCCL_MAX_NCHANNELS`` allows.
chunks per step (``cnt`` < N)          72 / 72                 ``MSCCL_MAX_COUNT`` (``count >=
                                                               MSCCL_MAX_COUNT`` is refused); ccsynth
                                                               writes at most :data:`MAX_COUNT`.
chunk offsets                          32767                   ``srcOffset``/``dstOffset`` are
                                                               ``int16_t`` in ``mscclTransmission``
                                                               (older: ``mscclTransfer``).
XML elements read for one gpu          4095                    ``MAX_NODES`` (4096) of the parser
                                                               (executor:
                                                               ``src/include/msccl/msccl_parser.h``;
                                                               older: ``src/graph/xml.h``): the
                                                               ``<algo>``, every ``<gpu>``, and the
                                                               ``<tb>`` and ``<step>`` elements of the
                                                               gpu being loaded; the closing tag read
                                                               last must still find room.
=====================================  =====================  ==========================================

:class:`MscclLimits` holds one set; :data:`EXECUTOR_LIMITS` (the default)
is the executor's default build, :data:`MSCCL_LIMITS` the older runtime.
A runtime built with ``make MSCCL_MAX_NUM_STEPS=256`` takes
``EXECUTOR_LIMITS.with_max_steps(256)`` (``ccsynth export/synth
--msccl-max-steps 256``).

The exporter (:mod:`.fit`) makes a file fit by transforming the schedule:
ranges cut to :data:`MAX_COUNT` chunks, peers spread over channels, long
streams spread over more channels and consecutive transfers merged; where
nothing fits it raises :class:`~ccsynth.errors.ExportLimitError` naming
the limit, the gpu and threadblock, and the count. The reader refuses a
step whose ``cnt`` is :data:`RUNTIME_MAX_COUNT` or more, as the runtimes do.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ccsynth.errors import ScheduleError

__all__ = [
    "MAX_COUNT",
    "RUNTIME_MAX_COUNT",
    "MAX_STEPS_PER_TB",
    "MAX_TBS",
    "MAX_CHANNELS",
    "MAX_PEERS_PER_CHANNEL",
    "MAX_OFFSET",
    "MAX_ELEMENTS",
    "UNBOUNDED",
    "MscclLimits",
    "EXECUTOR_LIMITS",
    "MSCCL_LIMITS",
]

#: Longest range (chunks) one step moves; runtimes reject ``cnt >= 72``.
MAX_COUNT = 64
#: Runtimes reject a step whose ``cnt`` is this or more (``MSCCL_MAX_COUNT``).
RUNTIME_MAX_COUNT = 72
#: Steps per threadblock, nops included, in the executor's default build (``MSCCL_MAX_NUM_STEPS``).
MAX_STEPS_PER_TB = 64
#: Threadblocks per gpu that a ``depid`` (an ``int8_t``) can name.
MAX_TBS = 128
#: Channels per communicator in NCCL (``MAXCHANNELS``).
MAX_CHANNELS = 32
#: Sending (and receiving) threadblocks of one gpu on one channel (``MSCCL_MAX_NUM_THREAD_BLOCKS_PER_CHANNEL``).
MAX_PEERS_PER_CHANNEL = 32
#: Largest chunk offset a step can name (``int16_t`` offsets).
MAX_OFFSET = (1 << 15) - 1
#: XML elements the parser reads for one gpu, with room left for the closing tag (``MAX_NODES`` - 1).
MAX_ELEMENTS = 4095
#: ``maxBytes`` written for "no upper end" (int64 max: above every size in both runtimes).
UNBOUNDED = (1 << 63) - 1


@dataclass(frozen=True)
class MscclLimits:
    """The limits one MSCCL runtime build accepts (see the module doc for each one's source)."""

    name: str = "msccl-executor-nccl"
    max_steps: int = MAX_STEPS_PER_TB
    max_tbs: int = MAX_TBS
    max_channels: int = MAX_CHANNELS
    max_peers_per_channel: int = MAX_PEERS_PER_CHANNEL
    max_offset: int = MAX_OFFSET
    max_elements: int = MAX_ELEMENTS

    def with_max_steps(self, steps: int) -> MscclLimits:
        """These limits for a build with ``MSCCL_MAX_NUM_STEPS=steps`` (1 to :data:`MAX_OFFSET`:
        a step index is an ``int16_t`` where a dependency names it)."""
        if isinstance(steps, bool) or not isinstance(steps, int) or not 1 <= steps <= MAX_OFFSET:
            raise ScheduleError(f"MSCCL steps per threadblock must be an integer from 1 to {MAX_OFFSET}, got {steps!r}")
        return replace(self, name=f"{self.name} built with MSCCL_MAX_NUM_STEPS={steps}", max_steps=steps)


#: Azure/msccl-executor-nccl, default build.
EXECUTOR_LIMITS = MscclLimits()
#: microsoft/msccl (the older runtime): 256 steps per threadblock.
MSCCL_LIMITS = MscclLimits(name="microsoft/msccl", max_steps=256)
