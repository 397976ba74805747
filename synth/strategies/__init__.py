"""Synthesis strategies, one module each, walked by :func:`ccsynth.synth.synthesize.synthesize`.

=================== ============================================================
``base``            the request, the candidate, the report and progress, the
                    :class:`~.base.Strategy` interface
``milp_sketches``   the MILP strategy's default sketches and chunk-factor ladder
``milp``            TACCL's stages: routing and ordering, waves and lowering,
                    the contiguity MILP
``trees``           packed spanning trees (ForestColl's optimum), pipelined
``multidim``        the multi-dimension schedulers (Themis and its kin)
``baselines``       every baseline at its best chunk factor, where it competes
``registry``        the walk: :func:`~.registry.register`, :func:`~.registry.strategies`
=================== ============================================================

The package's ``__init__`` imports nothing (import ``.registry`` for the walk).
"""

__all__: list[str] = []
