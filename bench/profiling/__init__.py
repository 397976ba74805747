"""The rooms of ``ccsynth topo profile``: probes, measurement, fitting, the topology written.

:mod:`ccsynth.bench.profile` is the public face and holds the design note
(what is measured, why, and how each figure is fitted). Here: ``probes``
(the plan, no MPI), ``measure`` (under MPI), ``fit`` and ``curves`` (pure
functions of probe data), ``topology`` (the topology and summary written),
``upgrade`` (older profile files brought up to date).
"""

__all__: list[str] = []
