"""The simulator's engine: one event-driven run of a schedule or task graph, and what it is made of.

:mod:`ccsynth.synth.simulate` is the public face (``simulate()``,
``SimResult``, the model in its docstring); this package holds the engine it
drives, one concept per module, lowest first:

=============== ===============================================================
``tasks``       :class:`Task` / :class:`TaskGraph`: a program lowered to bytes
``rounds``      the receive rounds a ``round_cost`` charges
``tables``      size-independent tables of a schedule on a topology (streams,
                resources, engines), built once and reused across sizes
``costs``       what one call and one byte cost (curves, footprint, per-call)
``sharing``     max-min fair bandwidth sharing (heap per component; numpy for
                a large one)
``streams``     per (connection, channel) streams: start, hand over, complete,
                reshare
``engines``     per-engine work queues (LogGP's overhead, local work)
``loop``        the event loop as named steps
``static``      a lower bound on a schedule's time from its op counts alone
=============== ===============================================================

The engine knows nothing of lower bounds on collectives
(:mod:`ccsynth.synth.bounds`): a result's bound is computed only when a
caller reads it (:class:`ccsynth.synth.simulate.SimResult`). The package's
``__init__`` imports nothing.
"""

__all__: list[str] = []
