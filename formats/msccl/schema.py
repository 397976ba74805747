"""The vocabulary of an MSCCL XML file: protocols, buffers, step types, collective names.

Shared by the exporter, the threadblock layout and the reader, so that the
three agree on what a step type reads, writes, sends and receives:

* buffers ``i`` (input), ``o`` (output), ``s`` (scratch);
* step types: ``s`` send src; ``r`` receive into dst; ``rcs`` receive into
  dst and forward it; ``rrs`` send (src + received) without storing it;
  ``rrc`` dst = src + received; ``rrcs`` the same, then forward dst; ``cpy``
  dst = src; ``re`` dst = dst + src; ``nop`` only waits;
* ``coll`` names as the executor spells them (:data:`COLL_NAMES`); the
  older ``microsoft/msccl`` spells reduce-scatter ``reduce_scatter``, and
  both are read (:data:`COLL_READ`).
"""

from __future__ import annotations

__all__ = [
    "PROTOCOLS",
    "STEP_TYPES",
    "BUFFERS",
    "COLL_NAMES",
    "COLL_READ",
    "PIECED",
    "USES",
    "SENDS",
    "RECVS",
    "WRITES",
]

PROTOCOLS = ("Simple", "LL", "LL128")
STEP_TYPES = ("s", "r", "rcs", "rrs", "rrc", "rrcs", "cpy", "re", "nop")
BUFFERS = ("i", "o", "s")

#: Our collective kind -> the executor's ``coll`` name.
COLL_NAMES = {
    "allgather": "allgather",
    "reduce_scatter": "reducescatter",
    "allreduce": "allreduce",
    "alltoall": "alltoall",
    "broadcast": "broadcast",
    "reduce": "reduce",
    "gather": "gather",
    "scatter": "scatter",
}
#: Every ``coll`` name the reader accepts -> our collective kind.
COLL_READ = {**{v: k for k, v in COLL_NAMES.items()}, "reduce_scatter": "reduce_scatter"}
#: Kinds whose ``nchunksperloop`` is ngpus * chunk factor (the others: the chunk factor).
PIECED = frozenset({"allgather", "reduce_scatter", "alltoall", "gather", "scatter"})

#: Which step fields a step type reads as a local range: (src, dst).
USES = {
    "s": (True, False),
    "r": (False, True),
    "rcs": (False, True),
    "rrs": (True, False),
    "rrc": (True, True),
    "rrcs": (True, True),
    "cpy": (True, True),
    "re": (True, True),
    "nop": (False, False),
}
#: Step types that send to the threadblock's send peer.
SENDS = frozenset({"s", "rcs", "rrs", "rrcs"})
#: Step types that receive from the threadblock's receive peer.
RECVS = frozenset({"r", "rcs", "rrs", "rrc", "rrcs"})
#: Step types that write their dst range.
WRITES = frozenset({"r", "rcs", "rrc", "rrcs", "cpy", "re"})
