"""Throughput-optimal spanning-tree packing (ForestColl's method, in ccsynth's cost model).

One concept per module, lowest first:

=================== ============================================================
``network``         the topology as a flow network (switch hubs, shared-port
                    nodes), exact or a labelled relaxation
``maxflow``         Dinic's max flow / min cut on a prepared arc list
``symmetry``        translation automorphisms (one root / sink per orbit)
``throughput``      optimal rates by max flow: the exact cut bounds
``arborescence``    minimum-cost spanning arborescences (the pricing step)
``packing``         the tree-packing LP by column generation
``lowering``        packed trees -> a pipelined, verified Schedule
``search``          the synthesis path: pack, lower at several chunk
                    factors, simulate, keep the fastest
=================== ============================================================

The package's ``__init__`` imports nothing, so that :mod:`ccsynth.synth.bounds`
can use the lower modules while ``search`` uses the simulator (which uses the
bounds).
"""
