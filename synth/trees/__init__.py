"""Throughput-optimal spanning-tree packing (ForestColl's method, in ccsynth's cost model).

The flow network, max flow, symmetry and the exact rates the packing meets
live in the sibling folder :mod:`ccsynth.synth.flows` (the lower bounds use them
too). One concept per module here, lowest first:

=================== ============================================================
``arborescence``    minimum-cost spanning arborescences (the pricing step)
``packing``         the tree-packing LP by column generation
``lowering``        packed trees -> a pipelined, verified Schedule
``search``          the synthesis path: pack, lower at several chunk
                    factors, simulate, keep the fastest
=================== ============================================================

``search`` uses the bounds and the simulator; neither imports this package.
"""

__all__: list[str] = []
