"""Flow networks, max flow and the exact cut rates: what the lower bounds and the tree packing both stand on.

One concept per module, lowest first:

=================== ============================================================
``network``         the topology as a flow network (switch hubs, shared-port
                    nodes), exact or a labelled relaxation
``maxflow``         Dinic's max flow / min cut on a prepared arc list
``symmetry``        translation automorphisms (one root / sink per orbit)
``throughput``      optimal rates by max flow: the exact cut bounds
=================== ============================================================

:mod:`ccsynth.synth.bounds` reads the rates to bound a collective's time;
:mod:`ccsynth.synth.trees` packs spanning trees that meet them. Neither is
imported here, so the bounds, the simulator and the tree search form no
loop: ``flows`` <- ``bounds`` <- ``simulate`` <- ``trees.search``. The
package's ``__init__`` imports nothing.
"""

__all__: list[str] = []
