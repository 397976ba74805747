"""Regenerate the MSCCL XML files of MSCCL's own A100 examples (run from the repository root).

microsoft/msccl-tools publishes its algorithms as MSCCLang programs, not as
XML; these files are written by ccsynth from the algorithms those programs
describe (data, not their code):

* ``msccl_a100_allgather_ring16.xml`` -- ``examples/mscclang/allgather_ring.py 16 1 1``
  ("Ring allgather for A100s"): in place, one chunk per GPU; at step ``s``
  GPU ``(i + s) % 16`` sends chunk ``i`` to GPU ``(i + s + 1) % 16``, one
  channel, protocol LL128 (the program's default);
* ``msccl_a100_alltoall_allpairs16.xml`` -- ``examples/mscclang/alltoall_allpairs.py 16 1``
  (one-step all-pairs alltoall): GPU ``r`` sends its input chunk ``i`` to
  GPU ``i``'s output chunk ``r``, protocol Simple.

Sixteen GPUs are two DGX A100 nodes: the ring's hops 7 -> 8 and 15 -> 0
and most all-pairs messages go from one rail to another, which real
clusters route through the spine (``ccsynth verify FILE -t dgx_a100x2``).
"""

from ccsynth.collectives.builder import ScheduleBuilder
from ccsynth.collectives.spec import Collective
from ccsynth.formats.msccl import schedule_to_msccl_xml

N = 16


def ring_allgather():
    b = ScheduleBuilder(Collective("allgather", N), "allgather_ring_1channelsperring")
    for r in range(N):
        b.copy(r, ("i", 0), ("o", r))
    for step in range(N - 1):
        for index in range(N):
            rank = (index + step) % N
            b.transfer(rank, (rank + 1) % N, ("o", index), ("o", index))
    return schedule_to_msccl_xml(b.build(), proto="LL128", inplace=True)


def allpairs_alltoall():
    b = ScheduleBuilder(Collective("alltoall", N), "alltoall_allpairs")
    for r in range(N):
        for index in range(N):
            if index == r:
                b.copy(r, ("i", index), ("o", r))
            else:
                b.transfer(r, index, ("i", index), ("o", r))
    return schedule_to_msccl_xml(b.build(), proto="Simple")


if __name__ == "__main__":
    for path, xml in (("tests/data/msccl_a100_allgather_ring16.xml", ring_allgather()),
                      ("tests/data/msccl_a100_alltoall_allpairs16.xml", allpairs_alltoall())):
        with open(path, "w") as f:
            f.write(xml)
        print("wrote", path)
