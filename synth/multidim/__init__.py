"""Multi-dimension collectives: per-dimension phases in per-chunk dimension orders (Themis and beyond).

A network with dimensions (``hierarchical:4x8x4@200,100,50``, the NVLink x
NIC machines as two dimensions, tori, fat trees) runs allreduce as one
reduce-scatter phase per dimension followed by the allgather phases in the
reverse order, each phase by a per-dimension algorithm (ring or direct),
on chunks of the buffer that may each take their own dimension order.
One concept per module:

* :mod:`.network` -- the dimension view of a topology (:class:`DimNet`);
* :mod:`.cost` -- what one phase costs (ring, direct), per message;
* :mod:`.chunks` -- chunks, their orders and phases;
* :mod:`.load` -- Themis's per-dimension load;
* :mod:`.policies` -- the fixed order and Themis's greedy (and its flex chunk sizes);
* :mod:`.lp` -- the lattice LP that balances the dimensions, and its bound;
* :mod:`.ramp` -- tapered pipelines: the first and last chunks cut into growing and shrinking pieces;
* :mod:`.shares` -- the LP winner's split between orders moved by the model (fill, drain, exposed costs);
* :mod:`.cuts` -- chunks whose longest phase is long cut into pieces spread over the sequence;
* :mod:`.losses` -- where a schedule's time goes per dimension (fill, drain, exposed costs), against the bound;
* :mod:`.pipeline` -- the dimension-level cost model (a queue per dimension);
* :mod:`.search` -- the schedulers' public face (chunk count search, ``auto``);
* :mod:`.lowering` -- a schedule as a Schedule IR (up to 128 ranks, where its size allows);
* :mod:`.phases` -- a schedule as the plain-data phase plan the MPI runtime executes, and back (a plan file);
* :mod:`.plan_price` -- what a phase plan (file) costs: the model in its own task order;
* :mod:`.utilization` -- per-dimension utilization of a simulated Schedule;
* :mod:`.candidates` -- multi-dimension candidates for :func:`ccsynth.synth.synthesize.synthesize`.

Example:
    >>> from ccsynth.topologies.catalog import hierarchical
    >>> s = schedule_multidim(hierarchical([(4, 200), (8, 100), (4, 50)]), "allreduce", 1 << 30, "themis")
    >>> s.scheduler, s.kind
    ('themis', 'allreduce')
"""

from ccsynth.synth.multidim.chunks import KINDS, ChunkPlan
from ccsynth.synth.multidim.network import DimNet, dim_net
from ccsynth.synth.multidim.search import (
    POLICIES,
    SCHEDULERS,
    MultiDimSchedule,
    check_scheduler,
    compare_schedulers,
    schedule_multidim,
)

__all__ = [
    "KINDS",
    "SCHEDULERS",
    "POLICIES",
    "ChunkPlan",
    "DimNet",
    "MultiDimSchedule",
    "dim_net",
    "check_scheduler",
    "schedule_multidim",
    "compare_schedulers",
]
