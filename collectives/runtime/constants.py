"""Names the executor's parts share: node kinds, work modes, instruction codes, sizes.

The compile step (:mod:`.local_program`, :mod:`.layout`), the straight-line
planner (:mod:`ccsynth.collectives.static_program`) and the run loops
(:mod:`.dataflow`, :mod:`.straight_line`) all read these; they live here,
below all of them, so that no part imports them back from the executor.
The codes are plain ints, not enums: the run loops compare them once per
slice or instruction, and an int comparison is the cheapest there is.
"""

from __future__ import annotations

__all__ = [
    "DEFAULT_SLICE_BYTES", "DEFAULT_COPY_SLICE_BYTES", "STATIC_MAX_BYTES", "MAX_BINDINGS", "MAX_LAYOUTS",
    "K_JOIN", "K_SEND", "K_RECV", "K_RRED", "K_LOCAL",
    "W_COPY", "W_REDUCE", "W_FUSED",
    "I_SEND", "I_RECV", "I_WAIT", "I_FUSED", "I_REDUCE", "I_COPY", "I_SYNC",
    "MESSAGE_KINDS",
]

DEFAULT_SLICE_BYTES = 1 << 20  # reducing collectives: a reduction overlaps the next slice's arrival
DEFAULT_COPY_SLICE_BYTES = 4 << 20  # pure data movement: fewer, larger messages (see docs/results.md)
#: messages up to this many bytes may take the straight-line path
STATIC_MAX_BYTES = 64 * 1024
MAX_BINDINGS = 4  # cached (sendbuf, recvbuf) address pairs per layout
MAX_LAYOUTS = 64  # cached (dtype, count) layouts per compiled schedule; the least recently used go first

# Node kinds of the slice graph: a join ("all slices of an op are done"), a send slice, a receive
# slice, a receive-reduce slice (its receive is posted at the start, its reduction waits for deps)
# and a local slice (copies and reductions).
K_JOIN, K_SEND, K_RECV, K_RRED, K_LOCAL = range(5)

# Work item modes: dst = src; dst = dst (op) src; dst = src2 (op) src (fused receive-reduce-copy).
W_COPY, W_REDUCE, W_FUSED = range(3)

# Instruction codes of a bound straight-line program: (code, a, b, c).
I_SEND, I_RECV, I_WAIT, I_FUSED, I_REDUCE, I_COPY, I_SYNC = range(7)

#: local op kinds that are (or include) a message
MESSAGE_KINDS = frozenset(("send", "recv", "rrecv", "rrc"))
