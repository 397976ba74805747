"""``ccsynth.Communicator``: the drop-in communicator with the built-in default plan.

The communicator itself (:class:`ccsynth.collectives.communicator.Communicator`)
is runtime: it parses buffer specs, asks a plan for a schedule and runs it.
Which schedule to run when the user gives no plan is policy, and the policy
is built from the baselines of :mod:`ccsynth.synth` -- a layer above the
runtime. So the runtime class takes its default plan as an argument
(``default_plan=``) and never imports ``synth``, and this module, above both
layers, is where the two meet: :class:`Communicator` is the runtime class
with :class:`~ccsynth.synth.default_plan.LazyDefaultPlan` passed in. That is
the class ``ccsynth.Communicator`` names; users never see the difference.

Example (any number of ranks)::

    >>> from mpi4py import MPI
    >>> import numpy as np
    >>> c = Communicator(MPI.COMM_SELF)
    >>> out = np.zeros(3)
    >>> c.Allreduce(np.arange(3.0), out, op=MPI.SUM)
    >>> out.tolist(), c.plan.meta
    ([0.0, 1.0, 2.0], {'default': True})
"""

from __future__ import annotations

from ccsynth.collectives import communicator as _runtime
from ccsynth.synth.default_plan import LazyDefaultPlan

__all__ = ["Communicator"]


class Communicator(_runtime.Communicator):
    """mpi4py's buffer collectives, run by ccsynth schedules; without a plan, the built-in one.

    Takes the arguments of :class:`ccsynth.collectives.communicator.Communicator`;
    ``default_plan`` (the plan used while ``plan`` is None) defaults to
    :class:`~ccsynth.synth.default_plan.LazyDefaultPlan`, the classic
    algorithms per message size described in :mod:`ccsynth.synth.default_plan`.
    """

    def __init__(self, comm=None, plan=None, *, default_plan=None, **options) -> None:
        super().__init__(comm, plan, default_plan=default_plan if default_plan is not None else LazyDefaultPlan(),
                         **options)
