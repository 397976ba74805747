"""The same algorithm at fewer chunks: what a writer falls back to when a schedule does not fit its file.

A file format may refuse a fine schedule: an MSCCL runtime takes at most so
many steps per threadblock, XML elements per GPU and channels, and a
pipeline of many chunks needs many steps (and, where a step waits for many
threadblocks, many ``nop`` elements). Merging consecutive transfers helps
only where their ranges follow each other in the buffers; a multi-dimension
schedule interleaves its chunks, so nothing merges. The way out is the one
a user would take by hand: make the same algorithm again with fewer chunks.

:func:`coarser_forms` re-makes a schedule from what its ``meta`` records --
a baseline (``meta["algorithm"]`` names one) at half its chunk factor, then
a quarter, ... down to 1; a multi-dimension schedule (``meta["algorithm"] ==
"multidim"``) by its scheduler with at most half its chunks, a quarter, ...
-- finest first, each verified, labelled, and simulated at ``size_bytes``
by the caller if it wants. A schedule of any other origin (a MILP's, a file
of unknown origin) has no coarser form here: its writer merges what it can
or refuses.

Example:
    >>> from ccsynth.synth.baselines import make_baseline
    >>> from ccsynth.collectives.spec import Collective
    >>> from ccsynth.topologies import get_topology
    >>> t = get_topology("ring:4")
    >>> s = make_baseline("ring", Collective("allgather", 4, chunk_factor=4), t)
    >>> [(label, c.collective.chunk_factor) for label, c in coarser_forms(s, t, 1 << 20)]
    [('ring at chunk factor 2', 2), ('ring at chunk factor 1', 1)]
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator

from ccsynth.collectives.schedule import Schedule
from ccsynth.collectives.verify import verify
from ccsynth.errors import CCSynthError
from ccsynth.synth.baselines import BASELINES, make_baseline
from ccsynth.topologies.model import Topology

log = logging.getLogger(__name__)

__all__ = ["coarser_forms"]


def coarser_forms(schedule: Schedule, topology: Topology, size_bytes: float) -> Iterator[tuple[str, Schedule]]:
    """``(label, schedule)`` of the same algorithm with fewer chunks, finest first (see the module doc).

    Lazy: each form is made only when the caller asks for the next one (a
    writer stops at the first that fits). Forms that cannot be made (a
    baseline that needs more chunks, a scheduler that fails) are skipped.
    """
    algo = schedule.meta.get("algorithm")
    if algo == "multidim":
        yield from _multidim_forms(schedule, topology, size_bytes)
    elif isinstance(algo, str) and algo in BASELINES:
        yield from _baseline_forms(schedule, algo, topology)


def _baseline_forms(schedule: Schedule, name: str, topology: Topology) -> Iterator[tuple[str, Schedule]]:
    c = schedule.collective.chunk_factor
    while c > 1:
        c //= 2
        try:
            coarse = make_baseline(name, dataclasses.replace(schedule.collective, chunk_factor=c), topology)
        except CCSynthError as e:
            log.debug("no coarser %s at chunk factor %d: %s", name, c, e)
            continue
        yield f"{name} at chunk factor {c}", coarse


def _multidim_forms(schedule: Schedule, topology: Topology, size_bytes: float) -> Iterator[tuple[str, Schedule]]:
    from ccsynth.synth.multidim.lowering import to_schedule
    from ccsynth.synth.multidim.search import schedule_multidim

    scheduler = schedule.meta.get("scheduler")
    chunks = schedule.meta.get("chunks")
    if not isinstance(scheduler, str) or isinstance(chunks, bool) or not isinstance(chunks, int):
        return
    cap = chunks // 2
    while cap >= 1:
        try:
            md = schedule_multidim(topology, schedule.collective.kind, size_bytes, scheduler, max_chunks=cap)
            if md.n_chunks >= chunks:
                cap //= 2
                continue
            coarse = to_schedule(md, topology)
            verify(coarse, topology)
        except CCSynthError as e:
            log.debug("no coarser multi-dimension %s under %d chunks: %s", scheduler, cap, e)
            cap //= 2
            continue
        chunks = md.n_chunks
        label = f"multi-dimension {scheduler} at {md.n_chunks} chunk{'s' if md.n_chunks > 1 else ''}"
        yield label, coarse.with_meta(verified=True)
        cap = min(cap, chunks) // 2
