"""ccsynth.formats: files in formats other than ccsynth's own, and the choice of reader.

The IR keeps its own JSON beside its model (schedules in
:mod:`ccsynth.collectives.schedule`, topologies in
:mod:`ccsynth.topologies.io`, sketches in :mod:`ccsynth.synth.sketch`).
This layer, above the synthesizer, holds the foreign formats:

* :mod:`.msccl` -- MSCCL XML algorithms (export and import);
* :mod:`.taccl_topology` -- TACCL topology profiles;
* :mod:`.taccl_sketch` -- TACCL communication sketches;

and :mod:`.files`, the one place that picks the reader of a file by its
type, which the CLI and the public API (``ccsynth.load_schedule``,
``ccsynth.get_topology``) use.
"""

__all__: list[str] = []
