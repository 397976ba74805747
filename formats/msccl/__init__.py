"""MSCCL XML: export a schedule for the MSCCL runtimes, and read one back.

MSCCL (the NCCL fork ``microsoft/msccl`` and its successor
``Azure/msccl-executor-nccl``) runs an algorithm described by one XML file::

    <algo name="ring" proto="Simple" nchannels="1" nchunksperloop="4" ngpus="4"
          coll="allgather" inplace="0" outofplace="1" minBytes="0" maxBytes="...">
      <gpu id="0" i_chunks="1" o_chunks="4" s_chunks="0">
        <tb id="0" send="1" recv="3" chan="0">
          <step s="0" type="s" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="1"
                depid="-1" deps="-1" hasdep="0"/>
          ...

Offsets and ``cnt`` are in chunks of ``message size / nchunksperloop``
(nccl-tests' size: the larger buffer); ``i_chunks``/``o_chunks``/``s_chunks``
bound the offsets of each gpu. The package, one concern per module:

* :mod:`.schema` -- the vocabulary: protocols, buffers, step types and what
  each reads, writes, sends and receives, ``coll`` names;
* :mod:`.limits` -- what the runtimes accept (counts, steps, threadblocks,
  channels, peers per channel, offsets, elements), with the source of each,
  and the ``maxBytes`` written for no upper end;
* :mod:`.fit` -- the schedule transformed until its layouts keep those
  limits (streams spread over channels, transfers merged), or refused;
* :mod:`.threadblocks` -- the threadblock layout of a schedule (fusions,
  step order, dependencies and ``nop`` steps) and its XML text;
* :mod:`.timed` -- the order in which a schedule's ops start in
  simulation, which the threadblocks keep;
* :mod:`.export` -- schedule (or plan) -> XML: options, the IR transforms
  the runtimes need, the faster layout, the in-place check;
* :mod:`.written` -- one candidate written for one size, as a synthesizer
  judges it: :func:`write_msccl` returns the file, the file read back and
  verified, its simulated time with its protocol (``proto="auto"``: the
  fastest), and a note per fallback taken to fit the runtime;
* :mod:`.reader` -- XML -> schedule, in numbered stages with errors that
  name gpu, threadblock and step.

Example:
    >>> from ccsynth.collectives.spec import Collective
    >>> from ccsynth.collectives.builder import ScheduleBuilder
    >>> b = ScheduleBuilder(Collective("allgather", 2), "pairwise")
    >>> for r in range(2):
    ...     _ = b.copy(r, ("i", 0), ("o", r))
    >>> _ = b.transfer(0, 1, ("i", 0), ("o", 0)); _ = b.transfer(1, 0, ("i", 0), ("o", 1))
    >>> xml = schedule_to_msccl_xml(b.build(), max_bytes=1 << 20)
    >>> xml.splitlines()[0]
    '<algo name="pairwise" proto="Simple" nchannels="1" nchunksperloop="2" ngpus="2" coll="allgather" inplace="0" outofplace="1" minBytes="0" maxBytes="1048576">'
    >>> describe_xml(xml)["step_types"]
    {'cpy': 2, 'r': 2, 's': 2}
    >>> back = schedule_from_msccl_xml(xml)
    >>> back.collective == b.collective, schedule_to_msccl_xml(back, max_bytes=1 << 20) == xml
    (True, True)
"""

from ccsynth.formats.msccl.export import plan_to_msccl_xmls, schedule_to_msccl_xml
from ccsynth.formats.msccl.limits import EXECUTOR_LIMITS, MAX_COUNT, MSCCL_LIMITS, UNBOUNDED, MscclLimits
from ccsynth.formats.msccl.reader import describe_xml, schedule_from_msccl_xml
from ccsynth.formats.msccl.schema import COLL_NAMES, PROTOCOLS, STEP_TYPES
from ccsynth.formats.msccl.written import WrittenXml, fit_or_coarser, write_msccl

__all__ = [
    "schedule_to_msccl_xml",
    "plan_to_msccl_xmls",
    "write_msccl",
    "fit_or_coarser",
    "WrittenXml",
    "schedule_from_msccl_xml",
    "describe_xml",
    "COLL_NAMES",
    "PROTOCOLS",
    "STEP_TYPES",
    "MAX_COUNT",
    "UNBOUNDED",
    "MscclLimits",
    "EXECUTOR_LIMITS",
    "MSCCL_LIMITS",
]
