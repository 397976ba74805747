"""The executor's runtime: how a compiled schedule becomes slices and runs.

:class:`~ccsynth.collectives.executor.CompiledSchedule` is the public face;
these modules hold its parts, in the order a call goes through them:

* :mod:`.constants` -- the names every part shares (node kinds, work modes,
  instruction codes, slice sizes, cache sizes);
* :mod:`.local_program` -- compile, once per schedule: the rank's ops,
  column tracing, the race check, forwarding and fusion, memory conflicts;
* :mod:`.layout` -- once per dtype and element count: chunk geometry,
  slices, tags, staging, the slice graph (records :class:`~.layout.Region`,
  :class:`~.layout.Message`, :class:`~.layout.WorkItem`);
* :mod:`.binding` -- once per pair of caller buffers: views, and per
  message its view, peer and tag;
* :mod:`.dataflow` and :mod:`.straight_line` -- the two run loops (the
  straight-line program itself is planned by
  :mod:`ccsynth.collectives.static_program`);
* :mod:`.primitives` -- the MPI and kernel calls a loop makes, and
  :mod:`.profiling` -- the same calls timed (:class:`~.profiling.RunStats`);
* :mod:`.failures` -- the errors a run reports;
* :mod:`.channel` -- call numbers: the communicator a compiled schedule
  sends on, the call counter every tag carries (and the proof that no call
  takes another's message), what a failed call leaves behind;
* :mod:`.control` -- the control line: how one rank's failure reaches the
  others, and the one-time agreement of a schedule's settings;
* :mod:`.memory` -- the byte budget of the buffers kept between calls;
* :mod:`.shutdown` -- what happens at exit (a barrier, withdrawn receives).

The package imports none of its modules here, so that
:mod:`ccsynth.collectives.static_program` can import :mod:`.constants`
while :mod:`.binding` imports the planner.
"""

__all__: list[str] = []
